package devdb

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// The PostgreSQL engine: FerretDB's postgresql handler on a PostgreSQL
// cluster of the data directory's own (Dir/postgresql), which this package
// creates with initdb on first use and runs as a child process for as long
// as the server runs. The cluster listens on no TCP port: only on a unix
// socket in a fresh directory of mode 0700, so that nothing but FerretDB
// (and this package's index upkeep) reaches it.

// pgSubdir is the cluster's directory inside the data directory.
const pgSubdir = "postgresql"

// pgDatabase is the PostgreSQL database FerretDB keeps its data in (each
// MongoDB database is a schema in it); pgRole is the cluster's superuser.
const (
	pgDatabase = "ferretdb"
	pgRole     = "den"
)

// pgBinDirs are the places PostgreSQL's server programs are looked for, the
// newest version first: Debian's and Ubuntu's (postgresql-NN), Red Hat's
// (postgresqlNN-server), and the PATH.
var pgBinDirs = []string{"/usr/lib/postgresql/*/bin", "/usr/pgsql-*/bin"}

// PostgresNotFoundError says why the PostgreSQL engine cannot run here.
type PostgresNotFoundError struct{ Looked []string }

func (e *PostgresNotFoundError) Error() string {
	return fmt.Sprintf("devdb: no PostgreSQL server programs (initdb and postgres) in %s or on the PATH; install PostgreSQL (Debian: apt-get install postgresql) or use the sqlite engine",
		strings.Join(e.Looked, ", "))
}

// FindPostgres returns the directory holding PostgreSQL's initdb and
// postgres: dir itself when given, else the newest of pgBinDirs, else the
// directory of the initdb on the PATH.
func FindPostgres(dir string) (string, error) {
	has := func(d string) bool {
		for _, p := range []string{"initdb", "postgres", "pg_ctl"} {
			if st, err := os.Stat(filepath.Join(d, p)); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
				return false
			}
		}
		return true
	}
	if dir != "" {
		if !has(dir) {
			return "", &PostgresNotFoundError{Looked: []string{dir}}
		}
		return dir, nil
	}
	var found []string
	for _, g := range pgBinDirs {
		m, _ := filepath.Glob(g)
		found = append(found, m...)
	}
	// The newest major version first: /usr/lib/postgresql/16/bin before 15.
	slices.SortFunc(found, func(a, b string) int { return pgVersionOf(b) - pgVersionOf(a) })
	for _, d := range found {
		if has(d) {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil && has(filepath.Dir(p)) {
		return filepath.Dir(p), nil
	}
	return "", &PostgresNotFoundError{Looked: append(slices.Clone(pgBinDirs), "PATH")}
}

// pgVersionOf reads the major version out of a bin directory's path
// (/usr/lib/postgresql/15/bin, /usr/pgsql-16/bin), 0 if none.
func pgVersionOf(dir string) int {
	for _, part := range strings.FieldsFunc(dir, func(r rune) bool { return r < '0' || r > '9' }) {
		if n, err := strconv.Atoi(part); err == nil {
			return n
		}
	}
	return 0
}

// pgUser is who PostgreSQL runs as: this process's user, or, for root
// (which PostgreSQL refuses to run as), the system's postgres user, else
// nobody. For root the server keeps CAP_DAC_READ_SEARCH, so that it reaches
// its directory under a home directory of mode 0700 (/root); it owns only
// its cluster's files.
type pgUser struct {
	cred *syscall.Credential // nil: this process's user
	name string
}

func postgresUser() (pgUser, error) {
	if os.Geteuid() != 0 {
		u, err := user.Current()
		if err != nil {
			return pgUser{name: strconv.Itoa(os.Geteuid())}, nil
		}
		return pgUser{name: u.Username}, nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err1 != nil || err2 != nil || uid == 0 {
			continue
		}
		return pgUser{cred: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: false}, name: name}, nil
	}
	return pgUser{}, errors.New("devdb: running as root, and neither a postgres nor a nobody user exists to run PostgreSQL as")
}

// attr returns the process attributes of a PostgreSQL program run as u:
// its own process group (a Ctrl-C at the terminal reaches den dev, which
// then stops the server after its node, not the server first).
func (u pgUser) attr() *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: true}
	if u.cred != nil {
		a.Credential = u.cred
		a.AmbientCaps = []uintptr{capDacReadSearch}
	}
	return a
}

// capDacReadSearch is CAP_DAC_READ_SEARCH (linux/capability.h).
const capDacReadSearch = 2

// chown gives path to u (when u is not this process's user).
func (u pgUser) chown(path string) error {
	if u.cred == nil {
		return nil
	}
	return os.Chown(path, int(u.cred.Uid), int(u.cred.Gid))
}

// cluster is a running PostgreSQL server of a data directory.
type cluster struct {
	dir    string // the cluster's data directory (Dir/postgresql)
	sock   string // the directory of its unix socket
	logf   string // its log file
	pid    int
	exited chan struct{} // closed when the server process has exited
	err    error         // how it exited, once exited is closed
}

// url is the PostgreSQL URL of database db on the cluster.
func (c *cluster) url(db string) string {
	return fmt.Sprintf("postgres://%s@/%s?host=%s&sslmode=disable", pgRole, db, c.sock)
}

// startCluster starts (after making it, on first use) the PostgreSQL
// cluster in dir/postgresql with the programs in bin, and waits until it
// accepts connections and has FerretDB's database. It runs until stop is
// called, or this process dies: then the kernel sends it SIGINT (fast
// shutdown), so that no server outlives den.
func startCluster(ctx context.Context, dir, bin string, settings ...string) (*cluster, error) {
	u, err := postgresUser()
	if err != nil {
		return nil, err
	}
	c := &cluster{dir: filepath.Join(dir, pgSubdir), logf: filepath.Join(dir, "postgresql.log"), exited: make(chan struct{})}
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		return nil, fmt.Errorf("devdb: make the PostgreSQL directory: %w", err)
	}
	if err := u.chown(c.dir); err != nil {
		return nil, fmt.Errorf("devdb: give %s to %s: %w", c.dir, u.name, err)
	}
	if _, err := os.Stat(filepath.Join(c.dir, "PG_VERSION")); errors.Is(err, os.ErrNotExist) {
		if err := initCluster(ctx, c.dir, bin, u); err != nil {
			return nil, err
		}
	}
	stopOrphan(c.dir)
	// The socket's directory: short (a unix socket's path has at most 107
	// bytes, and test directories are long), fresh, of mode 0700 and the
	// server's.
	c.sock, err = os.MkdirTemp("", "den-pg-")
	if err != nil {
		return nil, fmt.Errorf("devdb: make the PostgreSQL socket directory: %w", err)
	}
	if err := u.chown(c.sock); err != nil {
		os.RemoveAll(c.sock)
		return nil, fmt.Errorf("devdb: give %s to %s: %w", c.sock, u.name, err)
	}
	logFile, err := os.OpenFile(c.logf, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		os.RemoveAll(c.sock)
		return nil, fmt.Errorf("devdb: open the PostgreSQL log: %w", err)
	}
	args := []string{"-D", c.dir, "-k", c.sock,
		"-c", "listen_addresses=",
		"-c", "unix_socket_permissions=0700",
		// A development database: a crash of den or of the machine loses
		// at most the last fraction of a second of commits (as SQLite's
		// synchronous=normal did), never the database.
		"-c", "synchronous_commit=off",
		"-c", "max_connections=200",
		// FerretDB's statements name the field as a parameter too
		// (_jsonb->$1 @> $2): a generic plan of a prepared statement
		// cannot match it to an index on (_jsonb->'field'), and
		// PostgreSQL would switch to one after five executions. A plan
		// for the values each time keeps the twins in use (pgindexes.go).
		"-c", "plan_cache_mode=force_custom_plan",
		// Its log is the file above: warnings and errors (FerretDB's
		// refusals reach it as errors), not every connection.
		"-c", "log_min_messages=warning",
		"-c", "log_min_error_statement=panic",
		"-c", "logging_collector=off",
	}
	for _, kv := range settings {
		args = append(args, "-c", kv)
	}
	started := make(chan error, 1)
	go func() {
		// The parent-death signal goes to the server when the thread that
		// started it ends, so that thread is kept, locked, until the
		// server exits.
		runtime.LockOSThread()
		cmd := exec.Command(filepath.Join(bin, "postgres"), args...)
		cmd.Stdout, cmd.Stderr = logFile, logFile
		cmd.Dir = "/"
		cmd.SysProcAttr = u.attr()
		cmd.SysProcAttr.Pdeathsig = syscall.SIGINT
		if err := cmd.Start(); err != nil {
			started <- err
			close(c.exited)
			logFile.Close()
			return
		}
		c.pid = cmd.Process.Pid
		started <- nil
		c.err = cmd.Wait()
		logFile.Close()
		close(c.exited)
	}()
	if err := <-started; err != nil {
		os.RemoveAll(c.sock)
		return nil, fmt.Errorf("devdb: start PostgreSQL: %w", err)
	}
	if err := c.waitReady(ctx, 60*time.Second); err != nil {
		c.stop()
		return nil, err
	}
	return c, nil
}

// initCluster makes a PostgreSQL cluster in dir.
func initCluster(ctx context.Context, dir, bin string, u pgUser) error {
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", dir, "-U", pgRole, "-A", "trust",
		"-E", "UTF8", "--locale=C", "--no-sync")
	cmd.Dir = "/"
	cmd.SysProcAttr = u.attr()
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("devdb: initdb %s: %w: %s", dir, err, lastLines(string(out), 5))
	}
	return nil
}

// stopOrphan stops a server of dir that a den killed before it could stop
// it left running (the parent-death signal makes that rare). The data
// directory's lock, held by this process, says no live den uses it.
func stopOrphan(dir string) {
	b, err := os.ReadFile(filepath.Join(dir, "postmaster.pid"))
	if err != nil {
		return
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	if err != nil || pid <= 1 {
		return
	}
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil || filepath.Base(exe) != "postgres" {
		return // gone (PostgreSQL removes a stale pid file itself), or not a server
	}
	syscall.Kill(pid, syscall.SIGINT)
	for range 300 {
		if syscall.Kill(pid, 0) != nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	syscall.Kill(pid, syscall.SIGKILL)
}

// waitReady waits until the server accepts connections, then makes
// FerretDB's database if it is missing.
func (c *cluster) waitReady(ctx context.Context, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var last error
	for {
		select {
		case <-c.exited:
			return fmt.Errorf("devdb: PostgreSQL exited at start (%v): %s", c.err, lastLines(readFile(c.logf), 8))
		default:
		}
		conn, err := pgx.Connect(ctx, c.url("postgres"))
		if err == nil {
			defer conn.Close(context.Background())
			var exists bool
			if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, pgDatabase).Scan(&exists); err != nil {
				return fmt.Errorf("devdb: PostgreSQL: %w", err)
			}
			if !exists {
				if _, err := conn.Exec(ctx, `CREATE DATABASE `+pgx.Identifier{pgDatabase}.Sanitize()); err != nil {
					return fmt.Errorf("devdb: PostgreSQL: create database %s: %w", pgDatabase, err)
				}
			}
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("devdb: PostgreSQL did not accept connections within %s: %v: %s", limit, last, lastLines(readFile(c.logf), 8))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// stop shuts the server down (fast shutdown: open connections are ended,
// committed data is kept), waits for it, and removes its socket directory.
func (c *cluster) stop() error {
	defer os.RemoveAll(c.sock)
	select {
	case <-c.exited:
		return nil
	default:
	}
	syscall.Kill(c.pid, syscall.SIGINT)
	select {
	case <-c.exited:
		return nil
	case <-time.After(30 * time.Second):
	}
	// Immediate shutdown: the next start recovers from the log.
	syscall.Kill(c.pid, syscall.SIGQUIT)
	select {
	case <-c.exited:
		return nil
	case <-time.After(10 * time.Second):
	}
	syscall.Kill(c.pid, syscall.SIGKILL)
	<-c.exited
	return errors.New("devdb: PostgreSQL did not stop; killed")
}

func readFile(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// lastLines returns the last n lines of s, on one line.
func lastLines(s string, n int) string {
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
