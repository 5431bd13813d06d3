package sandbox

import (
	"bytes"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
	// Memory is the most memory, in bytes, the program and all it starts
	// may hold (0: no limit of den's): inside MemoryCgroup, a cgroup v1
	// memory cgroup whose limit holds it (NewMemoryCgroup), which the
	// program joins before it executes; else by RLIMIT_DATA of each
	// process (memory.go).
	Memory       int64  `json:"memory,omitempty"`
	MemoryCgroup string `json:"memory_cgroup,omitempty"`
	// CPU is the most CPUs (cores, 1.5 for one and a half) the program
	// and all it starts may use together (0: no limit of den's): inside
	// CPUCgroup, a cgroup v1 cpu cgroup whose CFS quota holds it
	// (NewTaskCgroups; the memory cgroup itself where the two controllers
	// share a hierarchy), which the program joins before it executes;
	// else nothing bounds it, and the program runs under SCHED_IDLE
	// (cpu.go).
	CPU       float64 `json:"cpu,omitempty"`
	CPUCgroup string  `json:"cpu_cgroup,omitempty"`
	// Tmp is the program's own temporary directory (NewTmp). With
	// MountNS and TmpSize, a tmpfs of TmpSize bytes is mounted on it (on
	// /tmp with PrivateTmp) in the program's mount namespace, so that
	// what the task writes there is bounded and gone with it.
	Tmp     string `json:"tmp,omitempty"`
	TmpSize int64  `json:"tmp_size,omitempty"`
	// MountNS gives the program a mount namespace of its own, where,
	// with Landlock, every mount is noexec but what it must execute or
	// map for execution (mounts.go). PrivateTmp (with MountNS) mounts
	// Tmp, noexec, on its /tmp, /var/tmp and /dev/shm (tmp.go).
	// NoNetwork gives it a network namespace of its own, without any
	// interface but a loopback that is down. Each needs CapsNamespaces.
	MountNS    bool `json:"mount_ns,omitempty"`
	PrivateTmp bool `json:"private_tmp,omitempty"`
	NoNetwork  bool `json:"no_network,omitempty"`
	// NoExec lists the ELF programs, and directories of programs, in the
	// library directories that the mount namespace makes noexec
	// (libprograms.go), but those Exec allows; Command fills it in when
	// it is nil, for MountNS with Landlock.
	NoExec []string `json:"no_exec,omitempty"`
	// Network is what the program may connect to over TCP: NetworkAll
	// (also when empty), NetworkNone, or NetworkPorts: the ports in
	// Ports only. Landlock (ABI 4) enforces it.
	Network string   `json:"network,omitempty"`
	Ports   []uint16 `json:"ports,omitempty"`
	// PIDNS (with MountNS) gives the program a PID namespace of its own,
	// with its own /proc, where the sandbox stays as the namespace's init
	// (init.go); IPCNS an IPC namespace of its own (SysV IPC, POSIX
	// message queues). Each needs CapsNamespaces.
	PIDNS bool `json:"pid_ns,omitempty"`
	IPCNS bool `json:"ipc_ns,omitempty"`
	// GraceMS is how long, in milliseconds, the init gives what the
	// program left running when it exits between SIGTERM and SIGKILL.
	GraceMS int64 `json:"grace_ms,omitempty"`
	// ReportFD is the descriptor the init writes the program's end to;
	// Command sets it.
	ReportFD int `json:"report_fd,omitempty"`
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

// Cmd is a program started in its boundary: the exec.Cmd that starts the
// sandbox (set its stdio, and add to its SysProcAttr, as for the program
// itself), and, with Spec.PIDNS, the channel on which the sandbox, the
// program's init, reports how the program ended. Use its Start, Wait, Run
// and CombinedOutput, not the exec.Cmd's.
type Cmd struct {
	*exec.Cmd
	report, sent *os.File // the report's pipe: read end, write end (nil: no init)
	exit         *Exit
}

// Exit is how a program ended.
type Exit struct {
	// Status is the program's own wait status.
	Status syscall.WaitStatus
	// Left counts the processes still running in the program's PID
	// namespace when it ended, which its init then stopped (SIGTERM, then
	// SIGKILL after Spec.GraceMS).
	Left int
}

// Command returns a command that runs spec's program in its boundary, with
// environment env. The caller sets its stdio as for the program itself,
// and may add to its SysProcAttr (Setsid, Pdeathsig); the working
// directory is Spec.Dir.
func Command(spec Spec, env []string) (*Cmd, error) {
	c := &Cmd{}
	if ns, ok := timerslack.Original(); ok && spec.TimerSlack == 0 {
		spec.TimerSlack = ns
	}
	if spec.MountNS && spec.Landlock && spec.NoExec == nil {
		spec.NoExec = LibraryPrograms()
	}
	if spec.PIDNS {
		if !spec.MountNS {
			return nil, errors.New("sandbox: a PID namespace needs a mount namespace (for its /proc)")
		}
		r, w, err := os.Pipe()
		if err != nil {
			return nil, fmt.Errorf("sandbox: make the init's report pipe: %w", err)
		}
		c.report, c.sent = r, w
		spec.ReportFD = 3 // ExtraFiles[0]
	}
	b, err := json.Marshal(spec)
	if err != nil {
		c.closeReport()
		return nil, fmt.Errorf("sandbox: encode: %w", err)
	}
	// /proc/self/exe, read by the child before it executes, is this very
	// binary even when its file was replaced or removed since (an upgrade
	// while tasks run).
	c.Cmd = exec.Command(selfExe)
	if len(spec.Args) > 0 {
		c.Args[0] = spec.Args[0]
	}
	c.Env = append(slices.DeleteFunc(slices.Clone(env), isSpec), EnvSpec+"="+string(b))
	if c.sent != nil {
		c.ExtraFiles = []*os.File{c.sent}
	}
	// The namespaces are made as the sandbox starts (Go makes the mounts
	// of a new mount namespace private to it, so nothing mounted there
	// reaches the node's); a new PID namespace only at clone, so that the
	// sandbox is its init.
	c.SysProcAttr = &syscall.SysProcAttr{Unshareflags: namespaceFlags(spec)}
	if spec.PIDNS {
		c.SysProcAttr.Cloneflags = syscall.CLONE_NEWPID
	}
	return c, nil
}

func (c *Cmd) closeReport() {
	for _, f := range []*os.File{c.report, c.sent} {
		if f != nil {
			f.Close()
		}
	}
}

// Start starts the sandbox.
func (c *Cmd) Start() error {
	err := c.Cmd.Start()
	if c.sent != nil {
		c.sent.Close() // the sandbox has its own copy
		c.sent = nil
	}
	if err != nil && c.report != nil {
		c.report.Close()
		c.report = nil
	}
	return err
}

// Wait waits for the sandbox to exit, as exec.Cmd's Wait does, and reads
// how the program ended (Exit).
func (c *Cmd) Wait() error {
	err := c.Cmd.Wait()
	if c.report != nil {
		defer c.report.Close()
		b, _ := io.ReadAll(io.LimitReader(c.report, 64))
		var ws uint32
		var left int
		if n, _ := fmt.Sscanf(string(b), "%d %d\n", &ws, &left); n == 2 {
			c.exit = &Exit{Status: syscall.WaitStatus(ws), Left: left}
		}
	}
	return err
}

// Run starts the sandbox and waits for it.
func (c *Cmd) Run() error {
	if err := c.Start(); err != nil {
		return err
	}
	return c.Wait()
}

// CombinedOutput runs the sandbox and returns what the program wrote to
// stdout and stderr.
func (c *Cmd) CombinedOutput() ([]byte, error) {
	var b bytes.Buffer
	c.Stdout, c.Stderr = &b, &b
	err := c.Run()
	return b.Bytes(), err
}

// Exit returns how the program ended, once Wait has returned: as its init
// reported it, or, where the sandbox executed the program itself (no
// Spec.PIDNS) or its init was killed before it could report (a stop's
// SIGKILL), as the process the caller started ended. ok is false when
// that process has not been waited for.
func (c *Cmd) Exit() (e Exit, ok bool) {
	if c.exit != nil {
		return *c.exit, true
	}
	if c.ProcessState == nil {
		return Exit{}, false
	}
	ws, ok := c.ProcessState.Sys().(syscall.WaitStatus)
	return Exit{Status: ws}, ok
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
	// The program gets the node's own timer slack back: this thread
	// executes it (below) or forks it (the init, runInit), and a thread's
	// slack is inherited by its children and kept across execve.
	if spec.TimerSlack > 0 {
		if err := timerslack.Restore(spec.TimerSlack); err != nil {
			return err
		}
	}
	env := slices.DeleteFunc(os.Environ(), isSpec)
	// The program gets stdin, stdout and stderr, and nothing else this
	// process inherited (the init's report descriptor stays the init's).
	if err := CloseInherited(); err != nil {
		return err
	}
	if spec.PIDNS && spec.PidsCgroup == "" && spec.MaxProcesses > 0 {
		// RLIMIT_NPROC counts the user's processes on the whole
		// machine: counted here, before the task's own /proc hides them.
		uid := uint32(os.Getuid())
		if spec.User != nil {
			uid = spec.User.Uid
		}
		if err := limitUserProcesses(spec.MaxProcesses, uid, true); err != nil {
			return err
		}
	}
	if spec.MountNS {
		if err := mountTask(spec); err != nil {
			return err
		}
	}
	if spec.PIDNS {
		return runInit(spec, env)
	}
	// The process, memory and CPU limits: the run's cgroups are joined while
	// this process may still write to them (they belong to den's user).
	// This process's few threads count against them until execve.
	if spec.PidsCgroup != "" && spec.MaxProcesses > 0 {
		if err := limitProcesses(spec.MaxProcesses, spec.PidsCgroup); err != nil {
			return err
		}
	}
	if err := limitMemory(spec, false); err != nil {
		return err
	}
	if err := limitCPU(spec, false); err != nil {
		return err
	}
	if spec.User != nil {
		if err := becomeUser(*spec.User); err != nil {
			return err
		}
	}
	// RLIMIT_NPROC is set once this process is the program's user, whose
	// processes it counts.
	if spec.PidsCgroup == "" && spec.MaxProcesses > 0 {
		if err := limitProcesses(spec.MaxProcesses, ""); err != nil {
			return err
		}
	}
	if spec.Dir != "" {
		if err := os.Chdir(spec.Dir); err != nil {
			return fmt.Errorf("enter the working directory: %w", err)
		}
	}
	if err := confine(spec); err != nil {
		return err
	}
	// execve replaces every thread, and the program inherits the calling
	// thread's restrictions, which RestrictPaths and the seccomp filter's
	// TSYNC gave all of them, and its timer slack.
	err := syscall.Exec(spec.Path, spec.Args, env)
	return fmt.Errorf("execute %s: %w", spec.Path, err)
}

// confine puts this process, and all it will start, under Landlock (or
// no_new_privs alone) and the seccomp filters.
func confine(spec Spec) error {
	if spec.Landlock {
		if err := restrict(spec); err != nil {
			return fmt.Errorf("landlock: %w", err)
		}
	} else if spec.Network != "" && spec.Network != NetworkAll && !(spec.Network == NetworkNone && spec.NoNetwork) {
		return fmt.Errorf("network %s needs Landlock, which this sandbox was not given", spec.Network)
	} else if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	// Landlock sees no path for a memfd, and no filter sees what io_uring
	// does (seccomp.go). After no_new_privs, which seccomp requires.
	if err := refuseTaskCalls(); err != nil {
		return err
	}
	if spec.Network != "" && spec.Network != NetworkAll {
		if err := refuseRestrictedNetwork(); err != nil {
			return err
		}
	}
	return nil
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
