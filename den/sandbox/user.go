package sandbox

import (
	"fmt"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Credential is the user and group a program runs as. Its supplementary
// groups are none.
type Credential struct {
	Uid uint32 `json:"uid"`
	Gid uint32 `json:"gid"`
}

// Capabilities the node needs to run programs as another user, and to
// give them a mount and network namespace of their own.
const (
	// CapsUser: setresuid/setresgid/setgroups to the task's user, chown
	// of the task's temporary directory to it, and signals to its
	// processes (stop, cancel, timeout, leftovers).
	CapsUser = "CAP_SETUID CAP_SETGID CAP_CHOWN CAP_KILL"
	// CapsNamespaces: the task's own mount namespace (private /tmp,
	// noexec) and, with network none, its own network namespace.
	CapsNamespaces = "CAP_SYS_ADMIN"
)

var capNumbers = map[string]uint{
	"CAP_CHOWN": unix.CAP_CHOWN, "CAP_KILL": unix.CAP_KILL, "CAP_SETGID": unix.CAP_SETGID,
	"CAP_SETUID": unix.CAP_SETUID, "CAP_SYS_ADMIN": unix.CAP_SYS_ADMIN,
}

// effectiveCaps returns this thread's effective capability set.
func effectiveCaps() (uint64, error) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return 0, fmt.Errorf("read this process's capabilities: %w", err)
	}
	return uint64(data[0].Effective) | uint64(data[1].Effective)<<32, nil
}

// HasCaps reports whether this process holds every capability of caps (a
// space-separated list such as CapsUser) in its effective set.
func HasCaps(caps string) bool {
	eff, err := effectiveCaps()
	if err != nil {
		return false
	}
	for _, name := range strings.Fields(caps) {
		n, ok := capNumbers[name]
		if !ok || eff&(1<<n) == 0 {
			return false
		}
	}
	return true
}

// becomeUser makes this process (all its threads, as Go's syscall package
// does for these calls) the user c, with no supplementary group, and
// drops every capability: permitted, effective, inheritable and ambient.
// A node running as an unprivileged user with ambient capabilities keeps
// them across a change between two unprivileged users, so the kernel's
// rule that clears them when root becomes another user is not enough.
// no_new_privs, set later, keeps the program from regaining any through
// a set-user-ID or file-capability program.
func becomeUser(c Credential) error {
	if err := syscall.Setgroups([]int{}); err != nil {
		return fmt.Errorf("clear supplementary groups: %w", err)
	}
	if err := syscall.Setresgid(int(c.Gid), int(c.Gid), int(c.Gid)); err != nil {
		return fmt.Errorf("become group %d: %w", c.Gid, err)
	}
	if err := syscall.Setresuid(int(c.Uid), int(c.Uid), int(c.Uid)); err != nil {
		return fmt.Errorf("become user %d: %w", c.Uid, err)
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && err != unix.EINVAL {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var none [2]unix.CapUserData
	if err := unix.Capset(&hdr, &none[0]); err != nil {
		return fmt.Errorf("drop capabilities: %w", err)
	}
	if eff, err := effectiveCaps(); err != nil || eff != 0 {
		return fmt.Errorf("capabilities left after dropping them: %#x (%v)", eff, err)
	}
	return nil
}
