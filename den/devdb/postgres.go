package devdb

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// The PostgreSQL engine: FerretDB's postgresql handler on a PostgreSQL
// cluster of the data directory's own (Dir/postgresql), which this package
// creates with initdb on first use and runs as a child process for as long
// as the server runs. The cluster listens on no TCP port: only on a unix
// socket in a fresh directory of mode 0700, the cluster user's, and it
// asks every connection for its role's password (pgauth.go), so that
// nothing but FerretDB (and this package's index upkeep) reaches it. It
// runs as a user of its own, with no capability (pguser.go).

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

// clusterOptions are what a cluster is started with besides its
// directory and programs.
type clusterOptions struct {
	settings   []string      // more -c settings (tests: auto_explain)
	taskUsers  []string      // users tasks may run as: never the cluster's
	log        io.Writer     // where restarts and migrations are told
	restartFor time.Duration // how long a dead server is restarted before giving up
	restarted  func() error  // called after each restart, before commands pass (nil: none)
}

// cluster is the PostgreSQL server of a data directory, kept running
// while the server runs: restarted when it dies (pgsupervise.go).
type cluster struct {
	dir        string   // the cluster's data directory (Dir/postgresql)
	data       string   // Dir, which holds the password file
	sock       string   // the directory of its unix socket
	logf       string   // its log file
	bin        string   // the directory of its programs
	settings   []string // more -c settings
	user       pgUser
	password   string
	dirFile    *os.File // the cluster's directory, open, when user.other(): its fd 3
	log        io.Writer
	restartFor time.Duration
	restarted  func() error // clusterOptions.restarted

	mu   sync.Mutex
	proc *pgProcess // the server process; under mu

	down       atomic.Bool        // it died and is being restarted
	life       context.Context    // ends when stop is called
	end        context.CancelFunc // ends life
	supervised chan struct{}      // closed when the supervisor has returned (nil: none)
	failed     chan struct{}      // closed when it died for good; err says why
	err        error
}

// pgProcess is one run of the server.
type pgProcess struct {
	pid    int
	exited chan struct{} // closed when the process has exited
	err    error         // how it exited, once exited is closed
}

// url is the PostgreSQL URL of database db on the cluster, as den's role
// with its password.
func (c *cluster) url(db string) string { return c.urlAs(pgRole, c.password, db) }

// urlAs is the URL of database db as role with password ("": none).
func (c *cluster) urlAs(role, password, db string) string {
	who := role
	if password != "" {
		who += ":" + password
	}
	return fmt.Sprintf("postgres://%s@/%s?host=%s&sslmode=disable", who, db, c.sock)
}

// current is the server's process now.
func (c *cluster) current() *pgProcess {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.proc
}

// startCluster starts (after making it, on first use) the PostgreSQL
// cluster in dir/postgresql with the programs in bin, and waits until it
// accepts connections and has FerretDB's database. It runs until stop is
// called, or this process dies: then the kernel sends it SIGINT (fast
// shutdown), so that no server outlives den. When it dies before,
// it is started again (supervise).
func startCluster(ctx context.Context, dir, bin string, o clusterOptions) (*cluster, error) {
	if o.log == nil {
		o.log = io.Discard
	}
	u, err := postgresUser(ctx, o.taskUsers, o.log)
	if err != nil {
		return nil, err
	}
	c := &cluster{dir: filepath.Join(dir, pgSubdir), data: dir, logf: filepath.Join(dir, "postgresql.log"), bin: bin,
		settings: o.settings, user: u, log: o.log, restartFor: cmp.Or(o.restartFor, pgRestartFor), restarted: o.restarted, failed: make(chan struct{})}
	c.life, c.end = context.WithCancel(context.Background())
	needAuth, err := c.prepare()
	if err != nil {
		c.stop()
		return nil, err
	}
	if err := c.launch(true); err != nil {
		c.stop()
		return nil, err
	}
	if err := c.waitReady(ctx, 60*time.Second, needAuth); err != nil {
		c.stop()
		return nil, err
	}
	c.supervised = make(chan struct{})
	go c.supervise()
	return c, nil
}

// prepare readies the cluster's directory for a start: its user's,
// made when missing, with its password, its socket's directory, no
// stale pid file. needAuth says the cluster has yet to be given its
// password (setPassword), and is started to be given it.
func (c *cluster) prepare() (needAuth bool, err error) {
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		return false, fmt.Errorf("devdb: make the PostgreSQL directory: %w", err)
	}
	_, err = os.Stat(filepath.Join(c.dir, "PG_VERSION"))
	fresh := errors.Is(err, os.ErrNotExist)
	if changed, err := c.user.own(c.dir); err != nil {
		return false, fmt.Errorf("devdb: give %s to %s: %w", c.dir, c.user.name, err)
	} else if changed && !fresh {
		fmt.Fprintf(c.log, "devdb: gave the PostgreSQL cluster in %s to %s, which runs it now (an earlier den ran it as another user)\n", c.dir, c.user.name)
	}
	if c.user.other() {
		if c.dirFile, err = os.Open(c.dir); err != nil {
			return false, fmt.Errorf("devdb: open the PostgreSQL directory: %w", err)
		}
	}
	password, made, err := clusterPassword(c.data)
	if err != nil {
		return false, err
	}
	c.password = password
	if fresh {
		if err := c.initCluster(); err != nil {
			return false, err
		}
	}
	needAuth = made || !hasAuth(c.dir)
	if needAuth {
		if !fresh {
			fmt.Fprintf(c.log, "devdb: the PostgreSQL cluster in %s lets den in without a password: setting one (in %s)\n", c.dir, filepath.Join(c.data, pgPasswordFile))
		}
		if err := writeHBA(c.dir, pgHBAOpen, c.user); err != nil {
			return false, err
		}
	}
	settlePidFile(c.dir)
	// The socket's directory: short (a unix socket's path has at most 107
	// bytes, and test directories are long), fresh, of mode 0700 and the
	// server's.
	if c.sock, err = os.MkdirTemp("", "den-pg-"); err != nil {
		return false, fmt.Errorf("devdb: make the PostgreSQL socket directory: %w", err)
	}
	if err := c.user.chown(c.sock); err != nil {
		return false, fmt.Errorf("devdb: give %s to %s: %w", c.sock, c.user.name, err)
	}
	return needAuth, nil
}

// dataArg is the data directory as the server's programs are given it:
// through the descriptor den opened (fd 3) when they run as another user,
// who may not be able to pass the directories above it (/root).
func (c *cluster) dataArg() string {
	if c.dirFile != nil {
		return "/proc/self/fd/3"
	}
	return c.dir
}

// command is a PostgreSQL program of the cluster, run as its user with
// the cluster's directory as fd 3 when that user is not den's.
func (c *cluster) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(c.bin, name), args...)
	cmd.Dir = "/"
	cmd.SysProcAttr = c.user.attr()
	if c.dirFile != nil {
		cmd.ExtraFiles = []*os.File{c.dirFile}
	}
	return cmd
}

// serverArgs are the server's arguments.
func (c *cluster) serverArgs() []string {
	args := []string{"-D", c.dataArg(), "-k", c.sock,
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
	for _, kv := range c.settings {
		args = append(args, "-c", kv)
	}
	return args
}

// launch starts the server process (first: a new log, else appended to)
// and makes it current; waitReady waits until it answers.
func (c *cluster) launch(first bool) error {
	flags := os.O_CREATE | os.O_WRONLY | os.O_APPEND
	if first {
		flags |= os.O_TRUNC
	}
	logFile, err := os.OpenFile(c.logf, flags, 0o600)
	if err != nil {
		return fmt.Errorf("devdb: open the PostgreSQL log: %w", err)
	}
	p := &pgProcess{exited: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		// The parent-death signal goes to the server when the thread that
		// started it ends, so that thread is kept, locked, until the
		// server exits; then it ends with this goroutine, with the
		// capability sets clearCapabilities emptied.
		runtime.LockOSThread()
		defer close(p.exited)
		defer logFile.Close()
		if err := clearCapabilities(); err != nil {
			started <- err
			return
		}
		cmd := c.command("postgres", c.serverArgs()...)
		cmd.Stdout, cmd.Stderr = logFile, logFile
		cmd.SysProcAttr.Pdeathsig = syscall.SIGINT
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		p.pid = cmd.Process.Pid
		started <- nil
		p.err = cmd.Wait()
	}()
	if err := <-started; err != nil {
		return fmt.Errorf("devdb: start PostgreSQL: %w", err)
	}
	c.mu.Lock()
	c.proc = p
	c.mu.Unlock()
	return nil
}

// initCluster makes the PostgreSQL cluster (its role den with no
// password yet: prepare starts it to be given one).
func (c *cluster) initCluster() error {
	out, err := lockedThread(func() ([]byte, error) {
		cmd := c.command("initdb", "-D", c.dataArg(), "-U", pgRole, "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync")
		return cmd.CombinedOutput()
	})
	if err != nil {
		return fmt.Errorf("devdb: initdb %s: %w: %s", c.dir, err, lastLines(string(out), 5))
	}
	return nil
}

// lockedThread runs fn on a thread of its own with no inheritable or
// ambient capability (clearCapabilities), which ends after it.
func lockedThread(fn func() ([]byte, error)) ([]byte, error) {
	type result struct {
		out []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends here
		if err := clearCapabilities(); err != nil {
			done <- result{err: err}
			return
		}
		out, err := fn()
		done <- result{out, err}
	}()
	r := <-done
	return r.out, r.err
}

// settlePidFile deals with the postmaster.pid a server left in the
// cluster's directory dir, before a start. The data directory's lock says
// no live den serves it, so a server whose working directory is dir (an
// orphan of a den killed before it could stop it; the parent-death
// signal makes that rare) is stopped, and a file that names a process
// that is gone, or any other process (a reused pid, or one written
// there), is removed, so that PostgreSQL neither refuses to start nor
// takes it for a server of its own. A live process whose working
// directory cannot be read (another user's, for a den that is not root)
// is left alone, and so is the file (PostgreSQL decides): no process but
// this cluster's server is ever stopped.
func settlePidFile(dir string) {
	path := filepath.Join(dir, "postmaster.pid")
	b, err := os.ReadFile(path)
	if err != nil {
		return
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	if err != nil || pid <= 1 || errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
		os.Remove(path)
		return
	}
	cwd, err1 := os.Stat(fmt.Sprintf("/proc/%d/cwd", pid))
	exe, err2 := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	self, err3 := os.Stat(dir)
	if err1 != nil || err2 != nil || err3 != nil {
		return
	}
	if !os.SameFile(cwd, self) || filepath.Base(exe) != "postgres" {
		os.Remove(path)
		return
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

// waitReady waits until the server accepts den's connections, gives it
// its password if needAuth, then makes FerretDB's database if it is
// missing.
func (c *cluster) waitReady(ctx context.Context, limit time.Duration, needAuth bool) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	p := c.current()
	var last error
	for {
		select {
		case <-p.exited:
			return fmt.Errorf("devdb: PostgreSQL exited at start (%v): %s", p.err, lastLines(readFile(c.logf), 8))
		default:
		}
		conn, err := pgx.Connect(ctx, c.url("postgres"))
		if err == nil {
			defer conn.Close(context.Background())
			if needAuth {
				if err := c.setPassword(ctx, conn); err != nil {
					return err
				}
			}
			return ensureDatabase(ctx, conn)
		}
		if isAuthError(err) {
			return fmt.Errorf("devdb: PostgreSQL refused the password in %s (%w); remove that file, and den sets a new one at its next start",
				filepath.Join(c.data, pgPasswordFile), err)
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("devdb: PostgreSQL did not accept connections within %s: %v: %s", limit, last, lastLines(readFile(c.logf), 8))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// ensureDatabase makes FerretDB's database if it is missing.
func ensureDatabase(ctx context.Context, conn *pgx.Conn) error {
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

// stop shuts the server down (fast shutdown: open connections are ended,
// committed data is kept) and no longer restarts it, waits for it, and
// removes its socket directory.
func (c *cluster) stop() error {
	c.end()
	if c.supervised != nil {
		<-c.supervised
	}
	defer func() {
		if c.sock != "" {
			os.RemoveAll(c.sock)
		}
		if c.dirFile != nil {
			c.dirFile.Close()
		}
	}()
	if p := c.current(); p != nil {
		return p.halt()
	}
	return nil
}

// halt stops the process (fast shutdown, then immediate, then SIGKILL)
// and waits for it.
func (p *pgProcess) halt() error {
	select {
	case <-p.exited:
		return nil
	default:
	}
	syscall.Kill(p.pid, syscall.SIGINT)
	select {
	case <-p.exited:
		return nil
	case <-time.After(30 * time.Second):
	}
	// Immediate shutdown: the next start recovers from the log.
	syscall.Kill(p.pid, syscall.SIGQUIT)
	select {
	case <-p.exited:
		return nil
	case <-time.After(10 * time.Second):
	}
	syscall.Kill(p.pid, syscall.SIGKILL)
	<-p.exited
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
