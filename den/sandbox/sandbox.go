package sandbox

import (
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"

	"github.com/landlock-lsm/go-landlock/landlock"
	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"

	"github.com/den-project/den/den/internal/timerslack"
)

// EnvSpec is the environment variable that carries a Spec from Command to
// Main. It never reaches the program.
const EnvSpec = "DEN_SANDBOX"

// ExitFailed is the exit code of a sandbox that could not start its
// program (as a shell's 126: found but could not be executed).
const ExitFailed = 126

// selfExe names the running binary (Linux).
const selfExe = "/proc/self/exe"

// Spec is a program and the boundary it runs in.
type Spec struct {
	// Path is the program's file; Args its argv, Args[0] included.
	Path string   `json:"path"`
	Args []string `json:"args"`
	// Exec lists the files, and directories (at any depth), whose files
	// may be executed. Entries that do not exist are skipped.
	Exec []string `json:"exec"`
	// Landlock enforces Exec with Landlock; false sets only no_new_privs
	// (for a machine without Landlock, where the operator accepted that).
	Landlock bool `json:"landlock"`
	// MaxProcesses is the most processes, threads included, the program
	// and all it starts may have (0: no limit of den's): by joining
	// PidsCgroup, a cgroup whose pids.max holds it, or else by
	// RLIMIT_NPROC (procs.go says what that limits).
	MaxProcesses int    `json:"max_processes,omitempty"`
	PidsCgroup   string `json:"pids_cgroup,omitempty"`
	// User, when set, is the user the program and all it starts run as,
	// with no supplementary group and no capability (user.go); nil keeps
	// the caller's. Changing user needs CapsUser.
	User *Credential `json:"user,omitempty"`
	// Dir is the program's working directory, entered as User (so that
	// the caller's rights open nothing for it); empty keeps the caller's.
	Dir string `json:"dir,omitempty"`
	// Tmp is the program's own temporary directory (NewTmp).
	Tmp string `json:"tmp,omitempty"`
	// MountNS gives the program a mount namespace of its own, where,
	// with Landlock, every mount is noexec but what it must execute or
	// map for execution (mounts.go). PrivateTmp (with MountNS) mounts
	// Tmp, noexec, on its /tmp, /var/tmp and /dev/shm (tmp.go).
	// NoNetwork gives it a network namespace of its own, without any
	// interface but a loopback that is down. Each needs CapsNamespaces.
	MountNS    bool `json:"mount_ns,omitempty"`
	PrivateTmp bool `json:"private_tmp,omitempty"`
	NoNetwork  bool `json:"no_network,omitempty"`
	// Network is what the program may connect to over TCP: NetworkAll
	// (also when empty), NetworkNone, or NetworkPorts: the ports in
	// Ports only. Landlock (ABI 4) enforces it.
	Network string   `json:"network,omitempty"`
	Ports   []uint16 `json:"ports,omitempty"`
	// Remove, when set, makes the sandbox remove this directory as User
	// instead of running a program (RemoveTmp).
	Remove string `json:"remove,omitempty"`
	// TimerSlack, when set, is the program's timer slack in nanoseconds:
	// Command sets the node's original one (den/internal/timerslack), so
	// that the program does not inherit den's.
	TimerSlack int64 `json:"timer_slack_ns,omitempty"`
}

// Values of Spec.Network.
const (
	NetworkAll   = "all"
	NetworkNone  = "none"
	NetworkPorts = "ports"
)

// LandlockABI returns the Landlock ABI version the running kernel offers,
// 0 when it has none (not built in, or not enabled at boot).
func LandlockABI() int {
	v, err := llsys.LandlockGetABIVersion()
	if err != nil || v < 0 {
		return 0
	}
	return v
}

// Command returns a command that runs spec's program in its boundary, with
// environment env. The caller sets its stdio as for the program itself,
// and may add to its SysProcAttr (Setsid, Pdeathsig); the working
// directory is Spec.Dir.
func Command(spec Spec, env []string) (*exec.Cmd, error) {
	if ns, ok := timerslack.Original(); ok && spec.TimerSlack == 0 {
		spec.TimerSlack = ns
	}
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, fmt.Errorf("sandbox: encode: %w", err)
	}
	// /proc/self/exe, read by the child before it executes, is this very
	// binary even when its file was replaced or removed since (an upgrade
	// while tasks run).
	cmd := exec.Command(selfExe)
	if len(spec.Args) > 0 {
		cmd.Args[0] = spec.Args[0]
	}
	cmd.Env = append(slices.DeleteFunc(slices.Clone(env), isSpec), EnvSpec+"="+string(b))
	// The namespaces are made as the sandbox starts (Go makes the mounts
	// of a new mount namespace private to it, so nothing mounted there
	// reaches the node's).
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: namespaceFlags(spec)}
	return cmd, nil
}

func isSpec(kv string) bool { return strings.HasPrefix(kv, EnvSpec+"=") }

// Main returns at once unless this process was started by Command. Then it
// enters the boundary and executes the program, and does not return: if
// that fails it writes the reason to stderr and exits with ExitFailed.
// Call it first thing in main, before anything else runs.
func Main() {
	raw, ok := os.LookupEnv(EnvSpec)
	if !ok {
		return
	}
	err := enter(raw)
	fmt.Fprintf(os.Stderr, "den: sandbox: %v\n", err)
	os.Exit(ExitFailed)
}

func enter(raw string) error {
	// no_new_privs, when set below by prctl, is set on this thread only:
	// the seccomp filter must be installed from the same thread.
	runtime.LockOSThread()
	var spec Spec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		return fmt.Errorf("decode %s: %w", EnvSpec, err)
	}
	if spec.Remove != "" {
		if spec.User != nil {
			if err := becomeUser(*spec.User); err != nil {
				return err
			}
		}
		if err := removeTree(spec.Remove); err != nil {
			return err
		}
		os.Exit(0)
	}
	if spec.Path == "" || len(spec.Args) == 0 {
		return errors.New("no program given")
	}
	env := slices.DeleteFunc(os.Environ(), isSpec)
	// The program gets stdin, stdout and stderr, and nothing else this
	// process inherited.
	if err := CloseInherited(); err != nil {
		return err
	}
	if spec.MountNS && spec.PrivateTmp && spec.Tmp != "" {
		if err := mountPrivate(spec.Tmp); err != nil {
			return err
		}
	}
	if spec.MountNS && spec.Landlock {
		keep := slices.Concat(spec.Exec, Loaders(append([]string{spec.Path}, spec.Exec...)...), LibraryDirs())
		if err := confineExec(keep); err != nil {
			return err
		}
	}
	// The process limit: the run's pids cgroup is joined while this
	// process may still write to it (it belongs to den's user);
	// RLIMIT_NPROC is set once this process is the program's user, whose
	// processes it counts. This process's few threads count against
	// either until execve.
	limit := func() error {
		if spec.MaxProcesses > 0 {
			return limitProcesses(spec.MaxProcesses, spec.PidsCgroup)
		}
		return nil
	}
	if spec.PidsCgroup != "" {
		if err := limit(); err != nil {
			return err
		}
	}
	if spec.User != nil {
		if err := becomeUser(*spec.User); err != nil {
			return err
		}
	}
	if spec.PidsCgroup == "" {
		if err := limit(); err != nil {
			return err
		}
	}
	if spec.Dir != "" {
		if err := os.Chdir(spec.Dir); err != nil {
			return fmt.Errorf("enter the working directory: %w", err)
		}
	}
	if spec.Landlock {
		if err := restrict(spec); err != nil {
			return fmt.Errorf("landlock: %w", err)
		}
	} else if spec.Network != "" && spec.Network != NetworkAll && !(spec.Network == NetworkNone && spec.NoNetwork) {
		return fmt.Errorf("network %s needs Landlock, which this sandbox was not given", spec.Network)
	} else if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	// Landlock sees no path for a memfd: refuse making one (seccomp.go).
	// After no_new_privs, which seccomp requires.
	if err := refuseAnonymousExec(); err != nil {
		return err
	}
	if spec.Network != "" && spec.Network != NetworkAll {
		if err := refuseMPTCP(); err != nil {
			return err
		}
	}
	// execve replaces every thread, and the program inherits the calling
	// thread's restrictions, which RestrictPaths and the seccomp filter's
	// TSYNC gave all of them, and its timer slack.
	if spec.TimerSlack > 0 {
		if err := timerslack.Restore(spec.TimerSlack); err != nil {
			return err
		}
	}
	err := syscall.Exec(spec.Path, spec.Args, env)
	return fmt.Errorf("execute %s: %w", spec.Path, err)
}

// restrict puts this process in its Landlock domain: executing only
// spec.Exec and the loaders; with ABI 6, no signal and no abstract unix
// socket connection to a process outside the domain (den's, another
// task's); with ABI 4, TCP connections only as spec.Network allows. It
// sets no_new_privs too, on every thread.
func restrict(spec Spec) error {
	abi := LandlockABI()
	paths := slices.Concat(spec.Exec, Loaders(append([]string{spec.Path}, spec.Exec...)...))
	execute := landlock.AccessFSSet(llsys.AccessFSExecute)
	args := []any{execute}
	rules := []landlock.Rule{landlock.PathAccess(execute, paths...).IgnoreIfMissing()}
	if abi >= 6 {
		args = append(args, landlock.ScopedSet(llsys.ScopeSignal|llsys.ScopeAbstractUnixSocket))
	}
	switch spec.Network {
	case "", NetworkAll:
	case NetworkNone, NetworkPorts:
		if abi < 4 {
			if spec.Network == NetworkNone && spec.NoNetwork {
				break // the network namespace holds alone
			}
			return fmt.Errorf("network %s needs Landlock ABI 4 (this kernel has %d)", spec.Network, abi)
		}
		args = append(args, landlock.AccessNetSet(llsys.AccessNetConnectTCP))
		if spec.Network == NetworkPorts {
			for _, p := range spec.Ports {
				rules = append(rules, landlock.ConnectTCP(p))
			}
		}
	default:
		return fmt.Errorf("unknown network %q", spec.Network)
	}
	cfg, err := landlock.NewConfig(args...)
	if err != nil {
		return err
	}
	return cfg.Restrict(rules...)
}

// loaderGlobs are where dynamic loaders live on Linux distributions.
var loaderGlobs = []string{
	"/lib/ld-linux*.so*", "/lib64/ld-linux*.so*", "/lib/ld-musl-*.so*", "/lib/*/ld-linux*.so*",
	"/usr/lib/ld-linux*.so*", "/usr/lib64/ld-linux*.so*", "/usr/lib/*/ld-linux*.so*", "/lib/ld64.so*", "/lib64/ld64.so*",
}

// Loaders returns the dynamic loaders programs need to be executed: the
// ELF interpreters named by those of paths that are ELF files, and the
// loaders found in the usual places. The kernel opens a program's loader
// for execution, so the boundary must let it be executed.
func Loaders(paths ...string) []string {
	var out []string
	for _, p := range paths {
		if interp := interpreter(p); interp != "" && !slices.Contains(out, interp) {
			out = append(out, interp)
		}
	}
	for _, g := range loaderGlobs {
		matches, _ := filepath.Glob(g)
		for _, m := range matches {
			if !slices.Contains(out, m) {
				out = append(out, m)
			}
		}
	}
	return out
}

// interpreter returns the PT_INTERP of an ELF file, or "".
func interpreter(path string) string {
	f, err := elf.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err != nil {
				return ""
			}
			return strings.TrimRight(string(b), "\x00")
		}
	}
	return ""
}
