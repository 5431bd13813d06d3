package command

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.uber.org/zap"

	"github.com/den-project/den/den/sandbox"
)

// Policy is the node's configuration of the plugin.
type Policy struct {
	Enabled bool     `json:"enabled"`
	Allow   []string `json:"allow"`
	Shell   bool     `json:"shell"`
	// Env names the variables passed on from the node's environment.
	Env []string `json:"env"`
	// EnvAllow lists the variables a task may set: names, or prefixes
	// written with a trailing * or _ (LC_*, MYAPP_).
	EnvAllow []string `json:"env_allow"`
	// Landlock is LandlockRequired (the default, also when empty) or
	// LandlockOptional.
	Landlock string `json:"landlock"`
	// User is the user tasks' programs run as: a user name, or uid:gid.
	// Never root, never den's own user. Required unless UserOptional.
	User string `json:"user"`
	// UserOptional lets the plugin run tasks as den's own user where
	// command.user is not set or den may not change user (it lacks
	// sandbox.CapsUser); the node then logs what does not hold.
	UserOptional bool `json:"user_optional"`
	// SharedTmp leaves tasks the node's /tmp, /var/tmp and /dev/shm
	// (TMPDIR is still a directory of each task's own); by default each
	// task has a mount namespace where they are its own directory.
	SharedTmp bool `json:"shared_tmp"`
	// SharedPIDs leaves tasks the node's PID namespace and /proc (they
	// see, and may name, the machine's processes); by default each task
	// has a PID namespace of its own, where the sandbox is its init.
	SharedPIDs bool `json:"shared_pids"`
	// TmpMB is the size, in MiB, of each task's temporary directory, a
	// tmpfs in the task's mount namespace; 0: a directory on the node's
	// disk, unbounded (as it is anyway where den may not make namespaces).
	// The node's configuration defaults it to DefaultTmpMB.
	TmpMB int64 `json:"tmp_mb"`
	// MemoryMB is the most memory, in MiB, a task's programs may hold
	// together (a task that requests more with requested_resources gets
	// its request); 0: no limit of the plugin's. The node's configuration
	// defaults it to DefaultMemoryMB.
	MemoryMB int64 `json:"memory_mb"`
	// CPU is the most CPUs (cores: 1.5 is one and a half) a task's
	// programs may use together (a task that requests more with
	// requested_resources gets its request); 0: no limit of the
	// plugin's. The node's configuration defaults it to DefaultCPU.
	CPU float64 `json:"cpu"`
	// Network is what tasks' programs may connect to over TCP: all (the
	// default), none, or a list of ports.
	Network Network `json:"network"`
}

// Network is command.network: "all" (also the zero value), "none", or a
// list of the TCP ports programs may connect to, in JSON a string or an
// array of numbers.
type Network struct {
	// None: no TCP connection at all. Otherwise Ports, when not nil, are
	// the only ports programs may connect to; nil Ports is all.
	None  bool
	Ports []uint16
}

// All reports whether programs may connect anywhere.
func (n Network) All() bool { return !n.None && n.Ports == nil }

// String is the value as the configuration writes it.
func (n Network) String() string {
	switch {
	case n.None:
		return "none"
	case n.Ports == nil:
		return "all"
	}
	ports := make([]string, len(n.Ports))
	for i, p := range n.Ports {
		ports[i] = strconv.Itoa(int(p))
	}
	return "[" + strings.Join(ports, ", ") + "]"
}

// MarshalJSON writes "all", "none" or the array of ports.
func (n Network) MarshalJSON() ([]byte, error) {
	if n.None || n.Ports == nil {
		return json.Marshal(n.String())
	}
	return json.Marshal(n.Ports)
}

// UnmarshalJSON reads "all", "none", or an array of ports (1 to 65535).
func (n *Network) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		switch s {
		case "", "all":
			*n = Network{}
		case "none":
			*n = Network{None: true}
		default:
			return fmt.Errorf("command.network %q must be all, none or a list of TCP ports", s)
		}
		return nil
	}
	var ports []int64
	if err := json.Unmarshal(b, &ports); err != nil {
		return fmt.Errorf("command.network must be all, none or a list of TCP ports, not %s", b)
	}
	out := make([]uint16, 0, len(ports))
	for _, p := range ports {
		if p < 1 || p > 65535 {
			return fmt.Errorf("command.network port %d is not a TCP port (1 to 65535)", p)
		}
		out = append(out, uint16(p))
	}
	*n = Network{Ports: out}
	return nil
}

// The node configuration's defaults for the task's bounds
// (command.tmp_mb, command.memory_mb, command.cpu).
const (
	// DefaultTmpMB: 1 GiB of temporary files (in memory) per task.
	DefaultTmpMB = 1024
	// DefaultMemoryMB: 2 GiB of memory per task, its temporary files
	// included.
	DefaultMemoryMB = 2048
	// MinMemoryMB is the least command.memory_mb but 0.
	MinMemoryMB = 64
	// DefaultCPU: one core per task.
	DefaultCPU = 1.0
	// MinCPU and MaxCPU are the least command.cpu but 0 (the kernel's
	// smallest CFS quota, 1 ms every 100 ms) and the most (Linux's
	// largest NR_CPUS, as resources.cpus).
	MinCPU = 0.01
	MaxCPU = 8192
)

// Values of Policy.Landlock.
const (
	LandlockRequired = "required"
	LandlockOptional = "optional"
)

// denPrefix is the prefix of den's own variables (the run marker, the
// runner's spec with the database URI): never set by a task, never passed
// on from the node.
const denPrefix = "DEN_"

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// ParsePolicy reads the plugin's configuration section; none means off.
// Unknown keys and wrong types are errors.
func ParsePolicy(raw json.RawMessage) (Policy, error) {
	var p Policy
	if len(raw) == 0 {
		return p, nil
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return p, fmt.Errorf("command plugin configuration: %w", err)
	}
	if err := p.Validate(); err != nil {
		return p, err
	}
	return p, nil
}

// Validate checks the policy's values.
func (p Policy) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("command plugin configuration: "+format, args...)
	}
	if p.Enabled && len(p.Allow) == 0 {
		return bad("command.enabled is true but command.allow lists no executable or directory")
	}
	for _, a := range p.Allow {
		if !filepath.IsAbs(a) {
			return bad("command.allow entry %q must be an absolute path", a)
		}
	}
	for _, name := range p.Env {
		if !envName.MatchString(name) {
			return bad("command.env entry %q is not a variable name", name)
		}
		if strings.HasPrefix(name, denPrefix) {
			return bad("command.env entry %q: variables named %s* are den's own and are never passed to programs", name, denPrefix)
		}
	}
	for _, e := range p.EnvAllow {
		name, star := strings.CutSuffix(e, "*")
		if !envName.MatchString(name) {
			return bad("command.env_allow entry %q must be a variable name, or a prefix ending in * or _ (LC_*, MYAPP_)", e)
		}
		prefix := star || strings.HasSuffix(name, "_")
		if strings.HasPrefix(name, denPrefix) || (prefix && strings.HasPrefix(denPrefix, name)) {
			return bad("command.env_allow entry %q would let tasks set den's own variables (%s*)", e, denPrefix)
		}
	}
	if p.TmpMB < 0 {
		return bad("command.tmp_mb %d must be 0 (on the node's disk) or a size in MiB", p.TmpMB)
	}
	if p.MemoryMB < 0 || (p.MemoryMB > 0 && p.MemoryMB < MinMemoryMB) {
		return bad("command.memory_mb %d must be 0 (no limit) or at least %d MiB (den's sandbox, the task's init, lives under it too)", p.MemoryMB, MinMemoryMB)
	}
	if !(p.CPU == 0 || (p.CPU >= MinCPU && p.CPU <= MaxCPU)) { // NaN too
		return bad("command.cpu %v must be 0 (no limit) or %g to %d cores", p.CPU, MinCPU, MaxCPU)
	}
	switch p.Landlock {
	case "", LandlockRequired, LandlockOptional:
	default:
		return bad("command.landlock %q must be %s or %s", p.Landlock, LandlockRequired, LandlockOptional)
	}
	if p.User != "" {
		if err := checkUserSyntax(p.User); err != nil {
			return bad("%v", err)
		}
	} else if p.Enabled && !p.UserOptional {
		return bad("command.user is not set: name the user tasks run as (a user of their own: not root, not den's), or set command.user_optional: true to run them as den's own user")
	}
	return nil
}

// Machine is what the node's machine offers the plugin's boundary.
type Machine struct {
	// LandlockABI is the kernel's Landlock ABI version (0: none).
	LandlockABI int
	// SetUser: den holds sandbox.CapsUser, so it may run programs as
	// another user.
	SetUser bool
	// Namespaces: den holds sandbox.CapsNamespaces.
	Namespaces bool
	// MemoryCgroups: den may make a memory cgroup per task
	// (sandbox.MemoryCgroups); else RLIMIT_DATA holds command.memory_mb.
	MemoryCgroups bool
	// CPUCgroups: den may make a cpu cgroup per task
	// (sandbox.CPUCgroups); else nothing bounds command.cpu, and tasks
	// run under SCHED_IDLE.
	CPUCgroups bool
}

// ThisMachine describes the machine and process den runs on.
func ThisMachine() Machine {
	_, memErr := sandbox.MemoryCgroups()
	_, cpuErr := sandbox.CPUCgroups()
	return Machine{LandlockABI: sandbox.LandlockABI(), SetUser: sandbox.HasCaps(sandbox.CapsUser),
		Namespaces: sandbox.HasCaps(sandbox.CapsNamespaces), MemoryCgroups: memErr == nil, CPUCgroups: cpuErr == nil}
}

// Enforced is the boundary the plugin puts its programs in on a machine.
type Enforced struct {
	// Landlock: Landlock enforces the execute allowlist.
	Landlock bool
	// User is the user programs run as; nil: den's own.
	User *sandbox.Credential
	// UserName names User (or den's user) for logs.
	UserName string
	// PrivateTmp: each program gets a mount namespace of its own, where
	// its temporary directory is /tmp, /var/tmp and /dev/shm, noexec
	// (den holds sandbox.CapsNamespaces, and command.shared_tmp is off).
	PrivateTmp bool
	// PrivatePIDs: each program gets a PID namespace of its own, with
	// its own /proc (den holds sandbox.CapsNamespaces, and
	// command.shared_pids is off).
	PrivatePIDs bool
	// Namespaces: den holds sandbox.CapsNamespaces; each program gets a
	// mount and an IPC namespace of its own.
	Namespaces bool
}

// Boundary decides, for a machine, whether the plugin may run and what
// its programs' boundary is. Without Landlock the plugin may run only when
// the policy says landlock: optional; without a task user (command.user
// unset, or den may not change user) only when it says user_optional. The
// error says why not.
func (p Policy) Boundary(m Machine) (Enforced, error) {
	e := Enforced{Namespaces: m.Namespaces, PrivateTmp: m.Namespaces && !p.SharedTmp, PrivatePIDs: m.Namespaces && !p.SharedPIDs}
	switch {
	case m.LandlockABI >= 1:
		e.Landlock = true
	case p.Landlock != LandlockOptional:
		return e, errors.New("command refused: this kernel has no Landlock (not built in, or not in the lsm= boot list), so the execute boundary cannot be enforced; the plugin stays off unless command.landlock is optional")
	}
	if !p.Network.All() && m.LandlockABI < 4 && !(p.Network.None && m.Namespaces) {
		or := ""
		if p.Network.None {
			or = ", or a network namespace (den needs " + sandbox.CapsNamespaces + ")"
		}
		return e, fmt.Errorf("command refused: command.network %s needs Landlock's TCP rules (ABI 4; this kernel has %d)%s", p.Network, m.LandlockABI, or)
	}
	e.UserName = "den's own user"
	if p.User == "" {
		if !p.UserOptional {
			return e, errors.New("command refused: command.user is not set, and command.user_optional is not true")
		}
		return e, nil
	}
	cred, err := lookupUser(p.User)
	if err != nil {
		return e, fmt.Errorf("command refused: command.user: %w", err)
	}
	if cred.Uid == uint32(os.Geteuid()) {
		return e, fmt.Errorf("command refused: command.user %q is den's own user (uid %d): tasks would reach den's configuration and processes", p.User, cred.Uid)
	}
	if !m.SetUser {
		if !p.UserOptional {
			return e, fmt.Errorf("command refused: den may not run programs as command.user %q: it runs as uid %d without %s (run den as root, or give its unit AmbientCapabilities=%s); the plugin stays off unless command.user_optional is true", p.User, os.Geteuid(), sandbox.CapsUser, sandbox.CapsUser)
		}
		return e, nil
	}
	e.User, e.UserName = &cred, fmt.Sprintf("%s (uid %d, gid %d)", p.User, cred.Uid, cred.Gid)
	return e, nil
}

// Unenforced describes what does not hold when the plugin runs without
// Landlock, for the node's log.
const Unenforced = "programs started by an allowed program (find -exec, make, sed e, env, xargs, tar, git, ...) can execute anything on this machine, not only command.allow; only the task's own program is checked, and no_new_privs still holds"

// UnenforcedUser describes what does not hold when programs run as den's
// own user, for the node's log.
const UnenforcedUser = "tasks' programs run as den's own user: they can read den's configuration (the MongoDB URI and its credentials) and data, and signal den's processes where Landlock's scoping (ABI 6) does not stop them"

// UnenforcedNamespaces describes what does not hold when programs share
// den's mount namespace, for the node's log.
const UnenforcedNamespaces = "/tmp, /var/tmp and /dev/shm are shared by all tasks (TMPDIR is still a directory of the task's own, mode 0700), so tasks running as one user can read and plant each other's files there, and a task can execute the loader on a file it wrote there; tasks share the node's PID and IPC namespaces, so tasks running as one user can change each other's limits and priorities and read each other's SysV shared memory, which outlives them"

// UnenforcedPIDs describes what does not hold when programs share the
// node's PID namespace, for the node's log.
const UnenforcedPIDs = "tasks see the machine's processes, and tasks running as one user can change each other's CPU limits, priorities and CPUs (prlimit, setpriority, sched_setaffinity, ioprio_set) and list each other's /proc/PID/fd"

// LogBoundary logs, once at start, what the node's command plugin enforces
// on this machine, in one entry: an error when it stays off, a warning
// naming what does not hold when it runs without part of its boundary.
func (p Policy) LogBoundary(log *zap.Logger, m Machine) {
	if !p.Enabled {
		return
	}
	e, err := p.Boundary(m)
	var missing []string
	if err == nil && !e.Landlock {
		missing = append(missing, "WITHOUT Landlock (command.landlock: optional, and this kernel has no Landlock): "+Unenforced)
	}
	if err == nil && e.User == nil {
		missing = append(missing, "AS DEN'S OWN USER (command.user_optional: true; command.user "+strconv.Quote(p.User)+"): "+UnenforcedUser)
	}
	if err == nil && !e.PrivateTmp {
		why := "command.shared_tmp: true"
		if !m.Namespaces {
			why = "den lacks " + sandbox.CapsNamespaces
		}
		missing = append(missing, "WITHOUT a mount namespace of its own ("+why+"): "+UnenforcedNamespaces)
	} else if err == nil && !e.PrivatePIDs {
		missing = append(missing, "IN THE NODE'S PID NAMESPACE (command.shared_pids: true): "+UnenforcedPIDs)
	}
	fields := []zap.Field{zap.String("plugin", Name), zap.Int("landlock_abi", m.LandlockABI), zap.String("task_user", e.UserName), zap.Stringer("network", p.Network)}
	switch {
	case p.MemoryMB == 0:
		fields = append(fields, zap.String("task_memory", "no limit (command.memory_mb: 0)"))
	case m.MemoryCgroups:
		fields = append(fields, zap.String("task_memory", fmt.Sprintf("%d MiB per task, in a cgroup v1 memory cgroup of its own", p.MemoryMB)))
	default:
		fields = append(fields, zap.String("task_memory", fmt.Sprintf("%d MiB per process (RLIMIT_DATA: no memory cgroup for tasks here)", p.MemoryMB)))
	}
	fields = append(fields, zap.String("task_cpu", p.cpuBound(m)))
	switch {
	case err != nil:
		log.Error("command plugin NOT enabled", append(fields, zap.Error(err))...)
	case len(missing) > 0:
		log.Warn("command plugin runs "+strings.Join(missing, "; and "), fields...)
	default:
		log.Info("command plugin enabled; Landlock enforces its execute boundary and tasks run as their own user", append(fields, zap.Strings("allow", p.Allow))...)
	}
}

// cpuBound says, for the node's log, what bounds a task's CPU on a
// machine.
func (p Policy) cpuBound(m Machine) string {
	switch {
	case p.CPU == 0:
		return "no limit (command.cpu: 0)"
	case m.CPUCgroups:
		return fmt.Sprintf("%g cores per task, in a cgroup v1 cpu cgroup of its own (CFS quota)", p.CPU)
	}
	return fmt.Sprintf("NOT bounded (command.cpu: %g, but no cpu cgroup for tasks here): tasks run under SCHED_IDLE, after every other process", p.CPU)
}

// Shell is the shell that runs a task's shell parameter.
const Shell = "/bin/sh"

// resolve returns the real path of an executable the policy allows, or an
// error saying why it is refused. A bare name is looked up in the allowed
// directories, in order. This gives a clear reason for the task's own
// program; the kernel's boundary (Landlock) is what holds for everything
// the program starts.
func (p Policy) resolve(program string) (string, error) {
	if program == "" {
		return "", fmt.Errorf("command refused: no program given")
	}
	candidates := []string{program}
	if !strings.ContainsRune(program, '/') {
		candidates = nil
		for _, a := range p.Allow {
			if st, err := os.Stat(a); err == nil && st.IsDir() {
				candidates = append(candidates, filepath.Join(a, program))
			}
		}
		if len(candidates) == 0 {
			return "", fmt.Errorf("command refused: %q is not an absolute path and no allowed directory holds it", program)
		}
	} else if !filepath.IsAbs(program) {
		return "", fmt.Errorf("command refused: %q must be an absolute path", program)
	}
	var lastErr error
	for _, c := range candidates {
		real, err := filepath.EvalSymlinks(c)
		if err != nil {
			lastErr = fmt.Errorf("command refused: %s: %w", c, err)
			continue
		}
		st, err := os.Stat(real)
		if err != nil || !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
			lastErr = fmt.Errorf("command refused: %s is not an executable file", c)
			continue
		}
		if p.allows(real) {
			return real, nil
		}
		lastErr = fmt.Errorf("command refused: %s is not allowed on this node (command.allow: %s)", c, strings.Join(p.Allow, ", "))
	}
	return "", lastErr
}

// allows reports whether a resolved path is an allowed file or lies under
// an allowed directory.
func (p Policy) allows(real string) bool {
	for _, a := range p.Allow {
		ra, err := filepath.EvalSymlinks(a)
		if err != nil {
			continue
		}
		st, err := os.Stat(ra)
		if err != nil {
			continue
		}
		if !st.IsDir() {
			if ra == real {
				return true
			}
			continue
		}
		if rel, err := filepath.Rel(ra, real); err == nil && !strings.HasPrefix(rel, "..") && rel != "." {
			return true
		}
	}
	return false
}

// taskMaySet reports whether a task may set variable name: only those
// env_allow lists, never den's own, never one the node passes on.
func (p Policy) taskMaySet(name string) bool {
	if !envName.MatchString(name) || strings.HasPrefix(name, denPrefix) || slices.Contains(p.Env, name) {
		return false
	}
	for _, e := range p.EnvAllow {
		if prefix, ok := strings.CutSuffix(e, "*"); ok {
			if strings.HasPrefix(name, prefix) {
				return true
			}
		} else if strings.HasSuffix(e, "_") {
			if strings.HasPrefix(name, e) {
				return true
			}
		} else if e == name {
			return true
		}
	}
	return false
}

// environment builds the program's environment: the listed variables from
// the runner's own environment, then the task's, each of which must be
// allowed.
func (p Policy) environment(task map[string]string) ([]string, error) {
	var env []string
	for _, name := range p.Env {
		if v, ok := os.LookupEnv(name); ok {
			env = append(env, name+"="+v)
		}
	}
	var refused []string
	for name, v := range task {
		if !p.taskMaySet(name) {
			refused = append(refused, fmt.Sprintf("%q", name))
			continue
		}
		env = append(env, name+"="+v)
	}
	if len(refused) > 0 {
		slices.Sort(refused)
		allowed := "none"
		if len(p.EnvAllow) > 0 {
			allowed = strings.Join(p.EnvAllow, ", ")
		}
		return nil, fmt.Errorf("command refused: the task sets environment variables this node does not let tasks set: %s (command.env_allow: %s; %s* and the variables in command.env never)", strings.Join(refused, ", "), allowed, denPrefix)
	}
	slices.Sort(env[len(env)-len(task):])
	return env, nil
}

// checkUserSyntax checks a command.user value without looking it up: a
// user name, or uid:gid, never root's user or group.
func checkUserSyntax(s string) error {
	if u, g, ok := strings.Cut(s, ":"); ok {
		uid, err1 := strconv.ParseUint(u, 10, 32)
		gid, err2 := strconv.ParseUint(g, 10, 32)
		if err1 != nil || err2 != nil {
			return fmt.Errorf("command.user %q must be a user name or uid:gid (two numbers)", s)
		}
		if uid == 0 || gid == 0 {
			return fmt.Errorf("command.user %q is root's user or group: tasks must run as a user of their own", s)
		}
		return nil
	}
	if s == "root" {
		return fmt.Errorf("command.user %q: tasks must run as a user of their own, not root", s)
	}
	return nil
}

// lookupUser resolves a command.user value: uid:gid as it is, a name to
// its uid and primary group. Root's user or group is refused.
func lookupUser(s string) (sandbox.Credential, error) {
	if err := checkUserSyntax(s); err != nil {
		return sandbox.Credential{}, err
	}
	if u, g, ok := strings.Cut(s, ":"); ok {
		uid, _ := strconv.ParseUint(u, 10, 32)
		gid, _ := strconv.ParseUint(g, 10, 32)
		return sandbox.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
	}
	usr, err := user.Lookup(s)
	if err != nil {
		return sandbox.Credential{}, fmt.Errorf("look up user %q: %w", s, err)
	}
	uid, err1 := strconv.ParseUint(usr.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(usr.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return sandbox.Credential{}, fmt.Errorf("user %q has uid %q and gid %q, not numbers", s, usr.Uid, usr.Gid)
	}
	if uid == 0 || gid == 0 {
		return sandbox.Credential{}, fmt.Errorf("user %q has uid %d and gid %d: tasks must run as a user and group of their own, not root's", s, uid, gid)
	}
	return sandbox.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}
