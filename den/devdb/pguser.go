package devdb

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Who the PostgreSQL cluster runs as. It answers den alone, so it never
// runs as a user anything else runs as: not root (PostgreSQL refuses it
// anyway), not nobody (what den dev --command's tasks and many daemons
// run as), not a user den dev's tasks run as. For den run by a user
// other than root, that is den's own user; for root, a dedicated system
// account, pgAccount, made with useradd when it is missing. The cluster
// holds no capability (none inherited, none ambient: clearCapabilities),
// and reaches its directory, even under a home directory of mode 0700
// such as /root, through a descriptor den opened (/proc/self/fd/3),
// not through a capability to pass directory permissions.

// pgAccount is the system account the cluster runs as when den runs as
// root.
const pgAccount = "den-devdb"

// pgUser is who PostgreSQL runs as.
type pgUser struct {
	cred *syscall.Credential // nil: this process's user
	uid  int
	name string
}

// other reports whether the cluster runs as a user other than den's.
func (u pgUser) other() bool { return u.cred != nil }

// postgresUser returns the user the cluster runs as (making pgAccount
// when den runs as root and it is missing; made tells the log), and
// refuses one that root, nobody or taskUsers (the users den's tasks may
// run as) would share.
func postgresUser(ctx context.Context, taskUsers []string, log io.Writer) (pgUser, error) {
	var u pgUser
	if os.Geteuid() != 0 {
		u = pgUser{uid: os.Geteuid(), name: strconv.Itoa(os.Geteuid())}
		if cur, err := user.Current(); err == nil {
			u.name = cur.Username
		}
	} else {
		var err error
		if u, err = dedicatedUser(ctx, log); err != nil {
			return pgUser{}, err
		}
	}
	if err := u.refuseShared(taskUsers); err != nil {
		return pgUser{}, err
	}
	return u, nil
}

// refuseShared refuses a cluster user that is root, nobody, or (when it
// is not den's own user, which tasks never run as unless told to run as
// den's: command.user_optional) one of taskUsers.
func (u pgUser) refuseShared(taskUsers []string) error {
	if u.uid == 0 {
		return errors.New("devdb: PostgreSQL would run as root")
	}
	if nobody, err := user.Lookup("nobody"); err == nil && nobody.Uid == strconv.Itoa(u.uid) {
		return fmt.Errorf("devdb: PostgreSQL would run as %s, den's own user, which is nobody: other processes run as nobody too; run den as another user", u.name)
	}
	if !u.other() {
		return nil
	}
	for _, tu := range taskUsers {
		if uid, ok := lookupUID(tu); ok && uid == u.uid {
			return fmt.Errorf("devdb: tasks may run as %q, the account PostgreSQL runs as (%s): they would own den's database; give them another user", tu, pgAccount)
		}
	}
	return nil
}

// lookupUID resolves a task user as command.user writes it: a name, or
// uid:gid.
func lookupUID(s string) (int, bool) {
	if s == "" {
		return 0, false
	}
	if id, _, ok := strings.Cut(s, ":"); ok {
		n, err := strconv.Atoi(id)
		return n, err == nil
	}
	u, err := user.Lookup(s)
	if err != nil {
		return 0, false
	}
	n, err := strconv.Atoi(u.Uid)
	return n, err == nil
}

// dedicatedUser returns pgAccount, making it first if it is missing.
// Several dens may start at once on a fresh machine (a test suite's
// packages): useradd refuses all but one, which then finds the account.
func dedicatedUser(ctx context.Context, log io.Writer) (pgUser, error) {
	var made bool
	var last error
	for attempt := range 10 {
		u, err := user.Lookup(pgAccount)
		if err == nil {
			if made {
				fmt.Fprintf(log, "devdb: made the system user %s (uid %s) to run PostgreSQL as, since den runs as root\n", pgAccount, u.Uid)
			}
			return credentialOf(u)
		}
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return pgUser{}, ctx.Err()
			case <-time.After(time.Duration(attempt) * 100 * time.Millisecond):
			}
		}
		if last = addAccount(ctx); last == nil {
			made = true
		}
	}
	return pgUser{}, fmt.Errorf("devdb: den runs as root, and the user %s, which PostgreSQL runs as, is missing and could not be made (%v): make it (useradd --system --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin %s), or run den as another user", pgAccount, last, pgAccount)
}

// addAccount makes pgAccount with useradd: a system user with a group of
// its own, no home directory and no login shell.
func addAccount(ctx context.Context) error {
	useradd, err := exec.LookPath("useradd")
	if err != nil {
		useradd = "/usr/sbin/useradd"
	}
	shell := "/usr/sbin/nologin"
	if _, err := os.Stat(shell); err != nil {
		shell = "/bin/false"
	}
	out, err := exec.CommandContext(ctx, useradd, "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent",
		"--shell", shell, "--comment", "den dev's PostgreSQL", pgAccount).CombinedOutput()
	if err != nil {
		return fmt.Errorf("useradd: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// credentialOf is the credential of account u: its user and group, no
// supplementary group.
func credentialOf(u *user.User) (pgUser, error) {
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return pgUser{}, fmt.Errorf("devdb: user %s has uid %q, gid %q", u.Username, u.Uid, u.Gid)
	}
	return pgUser{cred: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, uid: int(uid), name: u.Username}, nil
}

// attr returns the process attributes of a PostgreSQL program run as u:
// its own process group (a Ctrl-C at the terminal reaches den dev, which
// then stops the server after its node, not the server first).
func (u pgUser) attr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Credential: u.cred}
}

// own gives the tree at path to u, when u is not den's user and path is
// another's (a cluster an earlier den ran as nobody or postgres); it
// reports whether it changed anything. path itself is given last, so
// that a den stopped half-way gives the rest at its next start.
func (u pgUser) own(path string) (bool, error) {
	if !u.other() {
		return false, nil
	}
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return false, err
	}
	if st.Uid == u.cred.Uid && st.Gid == u.cred.Gid {
		return false, nil
	}
	err := filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == path {
			return err
		}
		return os.Lchown(p, int(u.cred.Uid), int(u.cred.Gid))
	})
	if err != nil {
		return false, err
	}
	return true, u.chown(path)
}

// chown gives path alone to u (when u is not this process's user).
func (u pgUser) chown(path string) error {
	if !u.other() {
		return nil
	}
	return os.Chown(path, int(u.cred.Uid), int(u.cred.Gid))
}

// clearCapabilities empties this thread's inheritable and ambient
// capability sets, so that a program it starts holds no capability: a
// den that is not root but has ambient capabilities (a unit's
// AmbientCapabilities=) would pass them on through exec, and root's
// inheritable set survives a change of user. The thread must be locked
// and never unlocked: it then ends with its goroutine, and no other
// goroutine runs on it with these sets.
func clearCapabilities() error {
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("devdb: clear ambient capabilities: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("devdb: read capabilities: %w", err)
	}
	data[0].Inheritable, data[1].Inheritable = 0, 0
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("devdb: clear inheritable capabilities: %w", err)
	}
	return nil
}
