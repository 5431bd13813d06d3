package devdb

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/den-project/den/den/internal/mongoclient"
	"github.com/den-project/den/den/internal/testdeadline"
)

// What an attacker tries against the cluster of den dev's database: as
// nobody (the user den dev --command's tasks run as, and many daemons),
// and as any local process that reaches its socket. Red on main, where
// with no postgres user the cluster ran as nobody with trust
// authentication and CAP_DAC_READ_SEARCH in its ambient set.

// attackRolesAndDatabases are the role and database names an attacker
// tries on the cluster's socket.
var (
	attackRoles     = []string{pgRole, "postgres", "root", "nobody", pgAccount, pgDatabase, "template1"}
	attackDatabases = []string{"postgres", pgDatabase, "template1"}
)

// attack is what the attacker process (this test binary, run as nobody
// by TestMain's role) tries; each try reports whether it got through.
type attack struct {
	PGSock   string   // the cluster's socket directory
	Files    []string // files to read (the password file)
	Sockets  []string // unix sockets to connect to (FerretDB's)
	Listings []string // directories to list
}

// attempt is one try and what came of it.
type attempt struct {
	What   string
	Worked bool
	Denied bool // the kernel refused it: EACCES or EPERM
	Err    string
}

// runAttack runs in the attacker's process: it tries everything in a and
// prints one JSON attempt per line.
func runAttack(a attack) {
	out := json.NewEncoder(os.Stdout)
	report := func(what string, err error) {
		out.Encode(attempt{What: what, Worked: err == nil, Denied: errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM), Err: fmt.Sprint(err)})
	}
	for _, role := range attackRoles {
		for _, db := range attackDatabases {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			conn, err := pgx.Connect(ctx, fmt.Sprintf("postgres://%s@/%s?host=%s&sslmode=disable", role, db, a.PGSock))
			cancel()
			if err == nil {
				conn.Close(context.Background())
			}
			report("connect to PostgreSQL as "+role+" to "+db, err)
		}
	}
	for _, f := range a.Files {
		_, err := os.ReadFile(f)
		report("read "+f, err)
	}
	for _, s := range a.Sockets {
		c, err := net.Dial("unix", s)
		if err == nil {
			c.Close()
		}
		report("connect to "+s, err)
	}
	for _, d := range a.Listings {
		_, err := os.ReadDir(d)
		report("list "+d, err)
	}
}

// attackAsNobody runs a as the user nobody, from a copy of this test
// binary that nobody may execute, and returns what it tried.
func attackAsNobody(t *testing.T, a attack) []attempt {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("trying the cluster as nobody needs root, to become nobody")
	}
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Skipf("no user nobody to attack as: %v", err)
	}
	uid, _ := strconv.Atoi(nobody.Uid)
	gid, _ := strconv.Atoi(nobody.Gid)
	dir, err := os.MkdirTemp("", "den-attacker-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "attacker")
	copyFile(t, self, bin, 0o755)
	spec, _ := json.Marshal(a)
	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Env = append(os.Environ(), "DEN_DEVDB_TEST_ATTACK="+string(spec))
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the attacker as nobody: %v\n%s", err, out)
	}
	var tried []attempt
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		var at attempt
		if err := json.Unmarshal(sc.Bytes(), &at); err != nil {
			t.Fatalf("the attacker said %q: %v", sc.Text(), err)
		}
		tried = append(tried, at)
	}
	return tried
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// startPG starts a server on a new data directory (cfg.Dir if set) with
// the PostgreSQL engine; stop stops it, at the latest when the test ends.
func startPG(t *testing.T, cfg Config) (srv *Server, stop func()) {
	t.Helper()
	needPostgres(t)
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	cfg.Engine = EnginePostgreSQL
	ctx, cancel := context.WithDeadline(context.Background(), testdeadline.Deadline())
	srv, err := Start(ctx, cfg)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	stop = sync.OnceFunc(func() { cancel(); <-srv.Done() })
	t.Cleanup(stop)
	return srv, stop
}

// procStatus returns the fields of /proc/PID/status.
func procStatus(t *testing.T, pid int) map[string]string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			out[k] = strings.TrimSpace(v)
		}
	}
	return out
}

// childrenOf lists the processes whose parent is pid.
func childrenOf(t *testing.T, pid int) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var kids []int
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", n))
		if err != nil {
			continue
		}
		s := string(b)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			kids = append(kids, n)
		}
	}
	return kids
}

// The cluster runs as neither root nor nobody (den-devdb when den is
// root, else den's own user), and neither its postmaster nor any of its
// processes holds a capability in any set; its socket's directory is
// its user's, 0700; the password is in a 0600 file of den's; FerretDB's
// socket is in a 0700 directory of den's. Red on main: the postmaster ran
// as postgres (or nobody) with CapInh, CapPrm, CapEff and CapAmb 0x4.
func TestClusterRunsAsItsOwnUserWithoutCapabilities(t *testing.T) {
	t.Parallel()
	srv, _ := startPG(t, Config{})
	pid := srv.pg.current().pid
	pgUID := srv.pg.user.uid
	if os.Geteuid() == 0 {
		want, err := user.Lookup(pgAccount)
		if err != nil || want.Uid != strconv.Itoa(pgUID) {
			t.Errorf("den runs as root and the cluster as uid %d; want %s (%v)", pgUID, pgAccount, err)
		}
	} else if pgUID != os.Geteuid() {
		t.Errorf("den runs as uid %d and the cluster as uid %d; want den's own", os.Geteuid(), pgUID)
	}
	nobody, _ := user.Lookup("nobody")
	procs := append([]int{pid}, childrenOf(t, pid)...)
	if len(procs) < 3 {
		t.Fatalf("the postmaster %d has children %v; want its background processes too", pid, procs[1:])
	}
	for _, p := range procs {
		st := procStatus(t, p)
		for _, id := range strings.Fields(st["Uid"]) {
			if id == "0" || (nobody != nil && id == nobody.Uid) || id != strconv.Itoa(pgUID) {
				t.Errorf("PostgreSQL process %d (%s) runs as uids %q; want %d alone, never root or nobody", p, st["Name"], st["Uid"], pgUID)
				break
			}
		}
		for _, set := range []string{"CapInh", "CapPrm", "CapEff", "CapAmb"} {
			if st[set] != "0000000000000000" {
				t.Errorf("PostgreSQL process %d (%s) has %s %s; want none", p, st["Name"], set, st[set])
			}
		}
	}
	for _, f := range []struct {
		path string
		mode os.FileMode
		uid  int
	}{
		{srv.pg.sock, os.ModeDir | 0o700, pgUID},
		{filepath.Join(srv.pg.data, pgPasswordFile), 0o600, os.Geteuid()},
		{filepath.Dir(strings.TrimPrefix(unescape(t, srv.DirectURI()), "mongodb://")), os.ModeDir | 0o700, os.Geteuid()},
	} {
		fi, err := os.Stat(f.path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != f.mode || int(fi.Sys().(*syscall.Stat_t).Uid) != f.uid {
			t.Errorf("%s: mode %v, uid %d; want %v, uid %d", f.path, fi.Mode(), fi.Sys().(*syscall.Stat_t).Uid, f.mode, f.uid)
		}
	}
}

// unescape undoes the URL escaping of a socket's path in a mongodb URI.
func unescape(t *testing.T, uri string) string {
	t.Helper()
	s := strings.TrimSuffix(uri, "/")
	s = strings.ReplaceAll(s, "%2F", "/")
	if strings.Contains(s, "%") {
		t.Fatalf("unexpected escape in %q", uri)
	}
	return s
}

// A local process that reaches the cluster's socket still needs the
// password: den's user (root here, which passes the socket directory's
// mode) gets in under no role name without it, nor with a wrong one;
// with it, it does (so the test can fail). Red on main: trust let den's
// role in without a password.
func TestClusterNeedsThePasswordOnItsSocket(t *testing.T) {
	t.Parallel()
	srv, _ := startPG(t, Config{})
	ctx, cancel := context.WithDeadline(context.Background(), testdeadline.Deadline())
	defer cancel()
	for _, role := range attackRoles {
		for _, db := range attackDatabases {
			for _, password := range []string{"", "guess", strings.Repeat("0", 64)} {
				conn, err := pgx.Connect(ctx, srv.pg.urlAs(role, password, db))
				if err == nil {
					conn.Close(ctx)
					t.Errorf("connected to the cluster as %s to %s with password %q", role, db, password)
				}
			}
		}
	}
	conn, err := pgx.Connect(ctx, srv.pg.url("postgres"))
	if err != nil {
		t.Fatalf("den's own connection with the password: %v", err)
	}
	conn.Close(ctx)
}

// As nobody, the user tasks of den dev --command run as, an attacker
// tries to connect to the cluster under every role name, to read the
// password file, to connect to FerretDB's socket (which skips the proxy
// that makes findAndModify atomic) and to list the sockets' directories:
// the kernel refuses each (EACCES). Red on main, on a host with no
// postgres user: the cluster ran as nobody, whose socket nobody reached,
// with trust authentication (and FerretDB listened on a TCP port any
// local user reached).
func TestNobodyCannotReachTheCluster(t *testing.T) {
	t.Parallel()
	srv, _ := startPG(t, Config{})
	ferret := unescape(t, strings.TrimPrefix(srv.DirectURI(), "mongodb://"))
	tried := attackAsNobody(t, attack{
		PGSock:   srv.pg.sock,
		Files:    []string{filepath.Join(srv.pg.data, pgPasswordFile)},
		Sockets:  []string{filepath.Join(srv.pg.sock, ".s.PGSQL.5432"), ferret},
		Listings: []string{srv.pg.sock, filepath.Dir(ferret)},
	})
	if want := len(attackRoles)*len(attackDatabases) + 5; len(tried) != want {
		t.Fatalf("the attacker made %d attempts, want %d: %+v", len(tried), want, tried)
	}
	for _, a := range tried {
		if a.Worked || !a.Denied {
			t.Errorf("as nobody: %s: worked %v, error %s; want refused by the kernel", a.What, a.Worked, a.Err)
		}
	}
}

// A stale postmaster.pid naming another PostgreSQL server that runs (as
// the same user, so that PostgreSQL itself would take it for a live
// server of its directory) does not make den stop that server: den
// starts its own, and the other still runs and answers. Red on main: den
// sent the other server SIGINT and it went down.
func TestStalePidFileStopsNoOtherServer(t *testing.T) {
	t.Parallel()
	needPostgres(t)
	bin, _ := FindPostgres("")
	ctx, cancel := context.WithDeadline(context.Background(), testdeadline.Deadline())
	defer cancel()
	other, err := startCluster(ctx, t.TempDir(), bin, clusterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.stop()
	dir := t.TempDir()
	_, stopFirst := startPG(t, Config{Dir: dir})
	stopFirst()
	pid := other.current().pid
	pidFile, err := os.ReadFile(filepath.Join(other.dir, "postmaster.pid"))
	if err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(dir, pgSubdir, "postmaster.pid")
	if err := os.WriteFile(stale, pidFile, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := other.user.chown(stale); err != nil { // as the server would have left it
		t.Fatal(err)
	}
	startPG(t, Config{Dir: dir})
	if now := other.current().pid; now != pid || !processAlive(pid) {
		t.Fatalf("the other server (pid %d), named in the stale postmaster.pid, was stopped (its pid now %d)", pid, now)
	}
	conn, err := pgx.Connect(ctx, other.url("postgres"))
	if err != nil {
		t.Fatalf("the other server no longer answers: %v", err)
	}
	conn.Close(ctx)
}

// A server of the directory that an earlier den left running (killed
// before it could stop it) is stopped before den starts its own.
func TestOrphanedServerStopped(t *testing.T) {
	t.Parallel()
	needPostgres(t)
	bin, _ := FindPostgres("")
	ctx, cancel := context.WithDeadline(context.Background(), testdeadline.Deadline())
	defer cancel()
	dir := t.TempDir()
	orphan, err := startCluster(ctx, dir, bin, clusterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer orphan.stop()
	orphan.end() // its den is gone: nothing restarts it
	<-orphan.supervised
	pid := orphan.current().pid
	startPG(t, Config{Dir: dir})
	select {
	case <-orphan.current().exited:
	default:
		t.Fatalf("the orphaned server (pid %d) still runs beside den's", pid)
	}
}

// lockedLog collects a server's log while the test reads it.
type lockedLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// postmasterPID reads the pid of the server running the cluster of data
// directory dir from its postmaster.pid, as an operator would find it.
func postmasterPID(t *testing.T, dir string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, pgSubdir, "postmaster.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.SplitN(string(b), "\n", 2)[0])
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// waitFor waits until ok, bounded by the test binary's deadline, and
// returns how long it took.
func waitFor(t *testing.T, what string, ok func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	testdeadline.Wait(t, 50*time.Millisecond, what, ok)
	return time.Since(start)
}

// kill -9 of the cluster's postmaster: den notices at once, says so in
// its log, and has the server back within 20 s; the data written before
// is there, and commands work again through the same URI. Red on main:
// every command failed (InternalError, "failed to connect") until den
// was restarted.
func TestPostgresRestartedAfterKill(t *testing.T) {
	t.Parallel()
	log := &lockedLog{}
	dir := t.TempDir()
	srv, _ := startPG(t, Config{Dir: dir, Log: log})
	ctx, cancel := context.WithDeadline(context.Background(), testdeadline.Deadline())
	defer cancel()
	client := connect(t, srv)
	c := client.Database("restart").Collection("c")
	if _, err := c.InsertOne(ctx, bson.D{{Key: "n", Value: 1}}); err != nil {
		t.Fatal(err)
	}
	// Commits are asynchronous (synchronous_commit off): a crash loses
	// those of the last fraction of a second. The insert's are on disk
	// once the log is flushed past it.
	waitFlushed(t, srv)
	pid := postmasterPID(t, dir)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	// Until den has seen its server die (at once: it is its parent), the
	// server's backends may still answer, and a command may even seem
	// to work, its commit lost with the server.
	waitFor(t, "den's log saying PostgreSQL is back", func() bool { return strings.Contains(log.String(), "PostgreSQL restarted (pid ") })
	waitFor(t, "a command after the restart", func() bool {
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		defer ccancel()
		_, err := c.InsertOne(cctx, bson.D{{Key: "n", Value: 3}})
		return err == nil
	})
	took := time.Since(killed)
	t.Logf("commands worked again %s after kill -9 of the postmaster; den's log:\n%s", took.Round(time.Millisecond), log)
	if took > 20*time.Second {
		t.Errorf("commands worked again %s after kill -9 of PostgreSQL; want within 20 s", took)
	}
	for _, n := range []int{1, 3} {
		if k, err := c.CountDocuments(ctx, bson.D{{Key: "n", Value: n}}); err != nil || k != 1 {
			t.Errorf("%d documents {n: %d} (%v) after the restart, want the one written before (and flushed) and the one after", k, n, err)
		}
	}
	if want := fmt.Sprintf("PostgreSQL (pid %d) exited (signal: killed); restarting it", pid); !strings.Contains(log.String(), want) {
		t.Errorf("den's log does not say %q:\n%s", want, log)
	}
	if now := postmasterPID(t, dir); now == pid || !processAlive(now) {
		t.Errorf("the postmaster is pid %d (alive %v), was %d", now, processAlive(now), pid)
	}
}

// A database and collection made just before PostgreSQL crashed can be
// lost with the crash (commits do not wait for the disk) while FerretDB
// still believes in them: after the restart, commands on them work, the
// collection made again. Here the loss is made sure of: the database's
// schema (its tables and FerretDB's record of them) is dropped behind
// FerretDB's back, then PostgreSQL killed. Red on main: every command on
// the collection failed with "relation does not exist" until den was
// restarted (what TestPostgresDownLooksUnreachableUntilBack hung on in
// CI, its first insert lost with the kill).
func TestCollectionLostInACrashMadeAgain(t *testing.T) {
	t.Parallel()
	log := &lockedLog{}
	dir := t.TempDir()
	srv, _ := startPG(t, Config{Dir: dir, Log: log})
	ctx, cancel := context.WithDeadline(context.Background(), testdeadline.Deadline())
	defer cancel()
	client := connect(t, srv)
	c := client.Database("lost").Collection("c")
	if _, err := c.InsertOne(ctx, bson.D{{Key: "n", Value: 1}}); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, srv.pg.url(pgDatabase))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `DROP SCHEMA lost CASCADE`); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	waitFlushed(t, srv)
	if err := syscall.Kill(postmasterPID(t, dir), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "den's log saying PostgreSQL is back", func() bool { return strings.Contains(log.String(), "PostgreSQL restarted (pid ") })
	var last error
	took := waitFor(t, "an insert into the lost collection", func() bool {
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		defer ccancel()
		_, last = c.InsertOne(cctx, bson.D{{Key: "n", Value: 2}})
		return last == nil
	})
	t.Logf("the lost collection took an insert %s after PostgreSQL was back", took.Round(time.Millisecond))
	docs, err := c.CountDocuments(ctx, bson.D{})
	if err != nil || docs != 1 {
		t.Errorf("%d documents (%v) in the collection made again; want the one insert after the restart", docs, err)
	}
	if _, err := client.Database("other").Collection("c").InsertOne(ctx, bson.D{{Key: "n", Value: 3}}); err != nil {
		t.Errorf("an insert into a new database after the restart: %v", err)
	}
}

// connect is a client of srv, disconnected when the test ends.
func connect(t *testing.T, srv *Server) *mongo.Client {
	t.Helper()
	client, err := mongo.Connect(options.Client().ApplyURI(srv.URI()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Disconnect(context.Background()) })
	return client
}

// waitFlushed waits until PostgreSQL has flushed its log up to what has
// been written so far.
func waitFlushed(t *testing.T, srv *Server) {
	t.Helper()
	ctx, cancel := context.WithDeadline(context.Background(), testdeadline.Deadline())
	defer cancel()
	conn, err := pgx.Connect(ctx, srv.pg.url("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var written string
	if err := conn.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&written); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the log flushed", func() bool {
		var flushed bool
		if err := conn.QueryRow(ctx, `SELECT pg_current_wal_flush_lsn() >= $1::text::pg_lsn`, written).Scan(&flushed); err != nil {
			t.Fatal(err)
		}
		return flushed
	})
}

// blockablePostgres is a directory of PostgreSQL's programs whose
// postgres refuses to start while the file it returns exists, as a
// server on a full disk does: initdb and pg_ctl are the real ones.
func blockablePostgres(t *testing.T) (bin, block string) {
	t.Helper()
	needPostgres(t)
	real, _ := FindPostgres("")
	dir, err := os.MkdirTemp("", "den-pgbin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil { // the cluster's user runs it
		t.Fatal(err)
	}
	for _, p := range []string{"initdb", "pg_ctl"} {
		if err := os.Symlink(filepath.Join(real, p), filepath.Join(dir, p)); err != nil {
			t.Fatal(err)
		}
	}
	block = filepath.Join(dir, "block")
	script := fmt.Sprintf("#!/bin/sh\nif [ -e %s ]; then echo 'PANIC:  blocked by the test' >&2; exit 1; fi\nexec %s \"$@\"\n",
		block, filepath.Join(real, "postgres"))
	if err := os.WriteFile(filepath.Join(dir, "postgres"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir, block
}

// While PostgreSQL is down and cannot start again (here its program
// refuses, as a server on a full disk does), a client's commands fail as
// with an unreachable database (mongoclient.Unreachable: the driver
// retries, den web answers 503), not with an error of the command; the
// log says once why it does not start; when it can again, den has it
// back without a restart of its own. Red on main: each command failed
// with InternalError, which den web showed as 500, and nothing restarted
// PostgreSQL.
func TestPostgresDownLooksUnreachableUntilBack(t *testing.T) {
	t.Parallel()
	bin, block := blockablePostgres(t)
	log := &lockedLog{}
	dir := t.TempDir()
	srv, _ := startPG(t, Config{Dir: dir, Log: log, PostgresBin: bin})
	ctx, cancel := context.WithDeadline(context.Background(), testdeadline.Deadline())
	defer cancel()
	client := connect(t, srv)
	c := client.Database("down").Collection("c")
	if _, err := c.InsertOne(ctx, bson.D{{Key: "n", Value: 1}}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(block, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	syscall.Kill(postmasterPID(t, dir), syscall.SIGKILL)
	waitFor(t, "the log saying why PostgreSQL does not start", func() bool {
		return strings.Contains(log.String(), "PostgreSQL does not start again")
	})
	for _, op := range []func(context.Context) error{
		func(ctx context.Context) error { _, err := c.InsertOne(ctx, bson.D{{Key: "n", Value: 2}}); return err },
		func(ctx context.Context) error { _, err := c.CountDocuments(ctx, bson.D{}); return err },
		func(ctx context.Context) error { return client.Ping(ctx, nil) },
	} {
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		err := op(cctx)
		ccancel()
		if err == nil || !mongoclient.Unreachable(err) {
			t.Errorf("a command while PostgreSQL is down: %v; want an error of an unreachable database", err)
		}
	}
	if n := strings.Count(log.String(), "PostgreSQL does not start again"); n != 1 {
		t.Errorf("the log says %d times why PostgreSQL does not start; want once:\n%s", n, log)
	}
	if err := os.Remove(block); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a command once PostgreSQL may start", func() bool {
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		defer ccancel()
		_, err := c.InsertOne(cctx, bson.D{{Key: "n", Value: 3}})
		return err == nil
	})
	if !strings.Contains(log.String(), "PostgreSQL restarted") {
		t.Errorf("den's log does not say PostgreSQL is back:\n%s", log)
	}
}

// A PostgreSQL that cannot be started again for restartFor makes the
// server give up: it stops, and Err says why (den dev and den devdb exit
// 1 with it).
func TestPostgresThatCannotRestartStopsTheServer(t *testing.T) {
	t.Parallel()
	bin, block := blockablePostgres(t)
	dir := t.TempDir()
	srv, _ := startPG(t, Config{Dir: dir, PostgresBin: bin, pgRestartFor: 3 * time.Second})
	if err := os.WriteFile(block, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	syscall.Kill(postmasterPID(t, dir), syscall.SIGKILL)
	select {
	case <-srv.Done():
	case <-testdeadline.GiveUp():
		t.Fatal("the server still runs at the test's deadline, its PostgreSQL unable to start")
	}
	if err := srv.Err(); err == nil || !strings.Contains(err.Error(), "could not be started again within 3s") || !strings.Contains(err.Error(), "blocked by the test") {
		t.Errorf("the server stopped with Err %v; want why", err)
	}
}

// A data directory an earlier den made, on a host with no postgres user:
// its cluster owned by nobody, with trust authentication, and data in
// it. den gives the cluster to its own user, sets a password and asks
// for it from then on, and the data is still there; a later start
// changes nothing more.
func TestEarlierClusterMigrated(t *testing.T) {
	t.Parallel()
	needPostgres(t)
	if os.Geteuid() != 0 {
		t.Skip("an earlier den's cluster of nobody's is made as root")
	}
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Skipf("no user nobody: %v", err)
	}
	old, err := credentialOf(nobody)
	if err != nil {
		t.Fatal(err)
	}
	bin, _ := FindPostgres("")
	dir, err := os.MkdirTemp("", "den-earlier-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755) // the earlier den reached it with CAP_DAC_READ_SEARCH
	earlierCluster(t, dir, bin, old)
	log := &lockedLog{}
	srv, stop := startPG(t, Config{Dir: dir, Log: log})
	for _, want := range []string{"gave the PostgreSQL cluster in", "lets den in without a password: setting one"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("den's log does not say %q:\n%s", want, log)
		}
	}
	filepath.WalkDir(filepath.Join(dir, pgSubdir), func(p string, d os.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		fi, _ := d.Info()
		if uid := int(fi.Sys().(*syscall.Stat_t).Uid); uid != srv.pg.user.uid {
			t.Errorf("%s belongs to uid %d after the migration, want %d", p, uid, srv.pg.user.uid)
			return filepath.SkipAll
		}
		return nil
	})
	ctx, cancel := context.WithDeadline(context.Background(), testdeadline.Deadline())
	defer cancel()
	if conn, err := pgx.Connect(ctx, srv.pg.urlAs(pgRole, "", pgDatabase)); err == nil || !isAuthError(err) {
		if conn != nil {
			conn.Close(ctx)
		}
		t.Errorf("connected without the password after the migration (%v)", err)
	}
	conn, err := pgx.Connect(ctx, srv.pg.url(pgDatabase))
	if err != nil {
		t.Fatal(err)
	}
	var x int
	if err := conn.QueryRow(ctx, `SELECT x FROM earlier`).Scan(&x); err != nil || x != 42 {
		t.Errorf("the earlier den's row: %d (%v), want 42", x, err)
	}
	conn.Close(ctx)
	stop()
	again := &lockedLog{}
	startPG(t, Config{Dir: dir, Log: again})
	if again.String() != "" {
		t.Errorf("a second start on the migrated directory logged:\n%s", again)
	}
}

// earlierCluster makes in dir/postgresql what an earlier den left there:
// a cluster of user u's, with trust authentication, its database
// ferretdb holding a table earlier with one row (42).
func earlierCluster(t *testing.T, dir, bin string, u pgUser) {
	t.Helper()
	cdir := filepath.Join(dir, pgSubdir)
	if err := os.Mkdir(cdir, 0o700); err != nil {
		t.Fatal(err)
	}
	sock, err := os.MkdirTemp("", "den-pg-earlier-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sock) })
	for _, p := range []string{cdir, sock} {
		if err := u.chown(p); err != nil {
			t.Fatal(err)
		}
	}
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", cdir, "-U", pgRole, "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync")
	initdb.Dir, initdb.SysProcAttr = "/", u.attr()
	if out, err := initdb.CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	server := exec.Command(filepath.Join(bin, "postgres"), "-D", cdir, "-k", sock, "-c", "listen_addresses=")
	server.Dir, server.SysProcAttr = "/", u.attr()
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		server.Process.Signal(syscall.SIGINT)
		server.Wait()
	}()
	ctx, cancel := context.WithDeadline(context.Background(), testdeadline.Deadline())
	defer cancel()
	url := func(db string) string {
		return fmt.Sprintf("postgres://%s@/%s?host=%s&sslmode=disable", pgRole, db, sock)
	}
	var conn *pgx.Conn
	waitFor(t, "the earlier cluster", func() bool {
		conn, err = pgx.Connect(ctx, url("postgres"))
		return err == nil
	})
	if _, err := conn.Exec(ctx, `CREATE DATABASE ferretdb`); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	if conn, err = pgx.Connect(ctx, url(pgDatabase)); err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE TABLE earlier (x int); INSERT INTO earlier VALUES (42)`); err != nil {
		t.Fatal(err)
	}
}

// The cluster's user is never root, nobody, or a user tasks run as
// (command.user, by name or uid:gid) when it is an account of its own;
// den's own user is left to the command plugin, which refuses it as a
// task user unless told to run tasks as den's.
func TestClusterUserNeverShared(t *testing.T) {
	t.Parallel()
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Skipf("no user nobody: %v", err)
	}
	nobodyUID, _ := strconv.Atoi(nobody.Uid)
	dedicated := func(uid int) pgUser {
		return pgUser{cred: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}, uid: uid, name: "account"}
	}
	for _, tc := range []struct {
		name      string
		u         pgUser
		taskUsers []string
		refused   bool
	}{
		{"root", pgUser{uid: 0, name: "root"}, nil, true},
		{"nobody as den's user", pgUser{uid: nobodyUID, name: "nobody"}, nil, true},
		{"nobody as the account", dedicated(nobodyUID), nil, true},
		{"the account, tasks as nobody", dedicated(4242), []string{"nobody", ""}, false},
		{"the account named as the task user by uid:gid", dedicated(4242), []string{"4242:4242"}, true},
		{"den's own user, tasks as den's (user_optional)", pgUser{uid: 4242, name: "me"}, []string{"4242:4242"}, false},
	} {
		err := tc.u.refuseShared(tc.taskUsers)
		if (err != nil) != tc.refused {
			t.Errorf("%s: %v, want refused %v", tc.name, err, tc.refused)
		}
	}
	if daemon, err := user.Lookup("daemon"); err == nil {
		uid, _ := strconv.Atoi(daemon.Uid)
		if err := dedicated(uid).refuseShared([]string{"daemon"}); err == nil {
			t.Error("the account named by name as the task user: not refused")
		}
	}
}

// A data directory whose password file was removed gets a new password
// at its next start, and the old one no longer lets anyone in.
func TestRemovedPasswordReplaced(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first, stop := startPG(t, Config{Dir: dir})
	oldURL := first.pg.url("postgres")
	stop()
	if err := os.Remove(filepath.Join(dir, pgPasswordFile)); err != nil {
		t.Fatal(err)
	}
	srv, _ := startPG(t, Config{Dir: dir})
	ctx, cancel := context.WithDeadline(context.Background(), testdeadline.Deadline())
	defer cancel()
	oldURL = strings.Replace(oldURL, first.pg.sock, srv.pg.sock, 1)
	if conn, err := pgx.Connect(ctx, oldURL); err == nil || !isAuthError(err) {
		if conn != nil {
			conn.Close(ctx)
		}
		t.Errorf("the old password still lets den's role in (%v)", err)
	}
	conn, err := pgx.Connect(ctx, srv.pg.url("postgres"))
	if err != nil {
		t.Fatalf("the new password: %v", err)
	}
	conn.Close(ctx)
	if first.pg.password == srv.pg.password {
		t.Error("the password was not made anew")
	}
}
