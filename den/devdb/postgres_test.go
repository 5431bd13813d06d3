package devdb

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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

	"github.com/den-project/den/den/internal/testdeadline"
	"github.com/den-project/den/queue"
)

// needPostgres skips a test of the PostgreSQL engine where PostgreSQL's
// programs are not installed (.ci/run installs them).
func needPostgres(t testing.TB) {
	t.Helper()
	if _, err := FindPostgres(""); err != nil {
		t.Skipf("the PostgreSQL engine cannot be tested here: %v", err)
	}
}

// The GIN twins serve what a node asks of tasks: with auto_explain logging
// the plan of every statement FerretDB runs, no statement of a claim by
// candidate, a start or a finish reads the tasks table whole, nor reads
// rows its index did not match, among 2,000 finished tasks. Red without
// the twins (ensureTwins made a no-op: sequential scans), and with twins
// of jsonb_path_ops, which hashes -1 and 1 alike (a start's status -1
// found the 2,000 finished tasks, removed on recheck).
func TestTwinsServeTheProtocolsQueries(t *testing.T) {
	needPostgres(t)
	ctx, cancel := context.WithDeadline(context.Background(), testdeadline.Deadline())
	defer cancel()
	dir := t.TempDir()
	srv, err := Start(ctx, Config{Dir: dir, Engine: EnginePostgreSQL,
		pgSettings: []string{"session_preload_libraries=auto_explain", "auto_explain.log_min_duration=0", "auto_explain.log_analyze=on", "log_min_messages=log"}})
	if err != nil {
		t.Fatal(err)
	}
	client, err := mongo.Connect(options.Client().ApplyURI(srv.URI()))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Disconnect(context.Background())
	db := client.Database("twins")
	store := queue.NewStore(db)
	if _, err := store.EnsureIndexes(ctx); err != nil {
		t.Fatal(err)
	}
	qid := bson.NewObjectID()
	var docs []any
	for i := range 2100 {
		status, node := 1, any("earlier")
		if i >= 2000 {
			status, node = -2, -1
		}
		docs = append(docs, bson.D{{Key: "queue", Value: qid}, {Key: "status", Value: status}, {Key: "node", Value: node},
			{Key: "parameters", Value: bson.D{{Key: "n", Value: i}}}, {Key: "ctime", Value: time.Now()}, {Key: "mtime", Value: time.Now()}})
	}
	if _, err := db.Collection("tasks").InsertMany(ctx, docs); err != nil {
		t.Fatal(err)
	}
	// The twins exist once createIndexes has been answered; the ticker
	// is not waited for. PostgreSQL's statistics are as autovacuum leaves
	// them after such an insert: they tell it a status of -1 is rare.
	pgc, err := pgx.Connect(ctx, srv.pg.url(pgDatabase))
	if err != nil {
		t.Fatal(err)
	}
	defer pgc.Close(context.Background())
	// The upkeep may have been refused its locks on a loaded machine
	// (then it tries again later): the twins are made now, as the upkeep
	// makes them, before anything is measured.
	if _, _, err := ensureTwins(ctx, pgc, "twins", io.Discard); err != nil {
		t.Fatal(err)
	}
	if _, err := pgc.Exec(ctx, `ANALYZE`); err != nil {
		t.Fatal(err)
	}
	mark := logSize(t, srv)
	for range 20 {
		c, ok, err := store.Claim(ctx, queue.ClaimRequest{Queues: []bson.ObjectID{qid}, Sort: queue.SortFIFO, Node: "n", At: time.Now()})
		if err != nil || !ok {
			t.Fatalf("claim: %v %v", ok, err)
		}
		token := bson.NewObjectID()
		if _, ok, err := store.Start(ctx, c.ID, "n", queue.RunnerInfo{Token: token}, time.Now()); err != nil || !ok {
			t.Fatalf("start: %v %v", ok, err)
		}
		if ok, err := store.Finish(ctx, c.ID, "n", token, queue.Result{Status: 1, Stdout: "", Stderr: ""}, time.Now()); err != nil || !ok {
			t.Fatalf("finish: %v %v", ok, err)
		}
	}
	plans := plansSince(t, srv, mark)
	var byID, scans int
	removed := regexp.MustCompile(`Rows Removed by Index Recheck: (\d+)`)
	for _, p := range plans {
		if !strings.Contains(p, "'_id'") || !strings.Contains(p, "tasks_") {
			continue
		}
		byID++
		for _, m := range removed.FindAllStringSubmatch(p, -1) {
			if n, _ := strconv.Atoi(m[1]); n > 10 {
				t.Errorf("a statement with an _id read %s rows its index matched in vain:\n%s", m[1], p)
			}
		}
		if strings.Contains(p, "Seq Scan on tasks_") {
			scans++
			if scans <= 3 {
				t.Logf("a statement with an _id reads the whole tasks table:\n%s", p)
			}
		}
	}
	if byID < 40 {
		t.Fatalf("%d plans of statements with an _id on tasks in the log, want at least one per start and finish (40)", byID)
	}
	// Without the twins 161 of 221 such statements read the whole table.
	// With them, none: the few seen on a loaded machine (2 to 18 of 221)
	// ran while the upkeep had dropped the twins to make them again
	// (TestTwinsMadeOnce); none since, with three busy loops beside.
	if scans > 0 {
		t.Errorf("%d of %d statements with an _id read the whole tasks table", scans, byID)
	}
}

// The twins, once made, stay: the next plan of the upkeep (every
// twinInterval) finds nothing to drop or make. It read the twins' options
// from their definitions' text, which PostgreSQL prints as
// fastupdate=off, not as den writes them, and so dropped and made every
// twin again every 2 s: at 100,000 tasks, a fifth of a core rebuilding
// the tasks' GIN indexes, with the table's writes held meanwhile, and
// statements planned as scans of the whole table between a drop and its
// make.
func TestTwinsMadeOnce(t *testing.T) {
	needPostgres(t)
	ctx, cancel := context.WithDeadline(context.Background(), testdeadline.Deadline())
	defer cancel()
	srv, err := Start(ctx, Config{Dir: t.TempDir(), Engine: EnginePostgreSQL})
	if err != nil {
		t.Fatal(err)
	}
	client, err := mongo.Connect(options.Client().ApplyURI(srv.URI()))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Disconnect(context.Background())
	db := client.Database("once")
	if _, err := queue.NewStore(db).EnsureIndexes(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Collection("tasks").InsertOne(ctx, bson.D{{Key: "status", Value: 1}}); err != nil {
		t.Fatal(err)
	}
	pgc, err := pgx.Connect(ctx, srv.pg.url(pgDatabase))
	if err != nil {
		t.Fatal(err)
	}
	defer pgc.Close(context.Background())
	if _, _, err := ensureTwins(ctx, pgc, "once", io.Discard); err != nil {
		t.Fatal(err)
	}
	for try := range 3 {
		plan, err := planTwins(ctx, pgc, "once")
		if catalogRace(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if w := plan["once"]; w != nil && (len(w.drop) > 0 || len(w.make) > 0) {
			t.Errorf("plan %d after the twins were made: drop %v, make %v; want nothing", try, w.drop, w.make)
		}
		made, dropped, err := ensureTwins(ctx, pgc, "once", io.Discard)
		if err != nil && !catalogRace(err) {
			t.Fatal(err)
		}
		if made > 0 || dropped > 0 {
			t.Errorf("the upkeep made %d twins and dropped %d that were current", made, dropped)
		}
	}
}

// logSize is the size of the cluster's log now.
func logSize(t *testing.T, srv *Server) int64 {
	st, err := os.Stat(srv.pg.logf)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// autoExplain starts a plan in the log: "LOG:  duration: ... plan:".
var autoExplain = regexp.MustCompile(`(?m)^.*LOG:  duration: [0-9.]+ ms  plan:$`)

// plansSince returns the plans auto_explain logged from offset on, each
// with its query text.
func plansSince(t *testing.T, srv *Server, offset int64) []string {
	b, err := os.ReadFile(srv.pg.logf)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b[offset:])
	idx := autoExplain.FindAllStringIndex(text, -1)
	var out []string
	for i, m := range idx {
		end := len(text)
		if i+1 < len(idx) {
			end = idx[i+1][0]
		}
		out = append(out, text[m[0]:end])
	}
	return out
}

// A server started by a process that is then killed with SIGKILL does not
// outlive it: the kernel's parent-death signal stops PostgreSQL (fast
// shutdown), and the next start on the directory works.
func TestPostgresDiesWithItsServer(t *testing.T) {
	needPostgres(t)
	if os.Getenv("DEN_DEVDB_TEST_SERVE") != "" {
		t.Skip("the server role runs in TestMain")
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "DEN_DEVDB_TEST_SERVE="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	// The role prints its URI once it serves.
	buf := make([]byte, 256)
	if _, err := out.Read(buf); err != nil || !strings.Contains(string(buf), "mongodb://") {
		t.Fatalf("the server role printed %q (%v)", buf, err)
	}
	pidFile, err := os.ReadFile(filepath.Join(dir, pgSubdir, "postmaster.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pg, err := strconv.Atoi(strings.SplitN(string(pidFile), "\n", 2)[0])
	if err != nil || syscall.Kill(pg, 0) != nil {
		t.Fatalf("PostgreSQL's pid %q is not running (%v)", pidFile, err)
	}
	cmd.Process.Kill()
	cmd.Wait()
	if !testdeadline.Until(50*time.Millisecond, func() bool { return !processAlive(pg) }) {
		syscall.Kill(pg, syscall.SIGKILL)
		t.Fatalf("PostgreSQL (pid %d) still runs at the test's deadline, after its server was killed", pg)
	}
	ctx, cancel := context.WithDeadline(context.Background(), testdeadline.Deadline())
	defer cancel()
	srv, err := Start(ctx, Config{Dir: dir, Engine: EnginePostgreSQL})
	if err != nil {
		t.Fatalf("start again on the directory: %v", err)
	}
	cancel()
	<-srv.Done()
}

// processAlive reports whether pid runs and is not a zombie.
func processAlive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// TestMain serves a data directory in a process of its own for
// TestPostgresDiesWithItsServer, which kills it, and runs the attacker of
// TestNobodyCannotReachTheCluster.
func TestMain(m *testing.M) {
	if spec := os.Getenv("DEN_DEVDB_TEST_ATTACK"); spec != "" {
		var a attack
		if err := json.Unmarshal([]byte(spec), &a); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(2)
		}
		runAttack(a)
		os.Exit(0)
	}
	if dir := os.Getenv("DEN_DEVDB_TEST_SERVE"); dir != "" {
		srv, err := Start(context.Background(), Config{Dir: dir, Engine: EnginePostgreSQL})
		if err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Stdout.WriteString(srv.URI() + "\n")
		<-srv.Done()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// Config.Engine "" serves what the directory holds, else PostgreSQL where
// it is installed, else SQLite with a note saying why; an engine asked for
// by name is that engine or an error.
func TestEngineChoice(t *testing.T) {
	needPostgres(t)
	// A directory an earlier den served with SQLite, holding a database.
	sqliteDir := t.TempDir()
	{
		ctx, cancel := context.WithDeadline(context.Background(), testdeadline.Deadline())
		srv, err := Start(ctx, Config{Dir: sqliteDir, Engine: EngineSQLite})
		if err != nil {
			t.Fatal(err)
		}
		c, err := mongo.Connect(options.Client().ApplyURI(srv.URI()))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Database("disbatch").Collection("c").InsertOne(ctx, bson.D{{Key: "x", Value: 1}}); err != nil {
			t.Fatal(err)
		}
		c.Disconnect(ctx)
		cancel()
		<-srv.Done()
	}
	for _, tc := range []struct {
		name, dir, engine, bin string
		want, note, err        string
	}{
		{name: "default", engine: "", want: EnginePostgreSQL},
		{name: "sqlite asked", engine: EngineSQLite, want: EngineSQLite},
		{name: "sqlite data kept", dir: sqliteDir, want: EngineSQLite, note: "SQLite database of an earlier den"},
		{name: "no postgres", bin: "/nonexistent", want: EngineSQLite, note: "no PostgreSQL server programs"},
		{name: "postgres asked but missing", engine: EnginePostgreSQL, bin: "/nonexistent", err: "no PostgreSQL server programs"},
		{name: "unknown", engine: "mysql", err: `unknown engine "mysql"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := tc.dir
			if dir == "" {
				dir = t.TempDir()
			}
			ctx, cancel := context.WithDeadline(context.Background(), testdeadline.Deadline())
			defer cancel()
			srv, err := Start(ctx, Config{Dir: dir, Engine: tc.engine, PostgresBin: tc.bin})
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Start: %v, want an error saying %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer func() { cancel(); <-srv.Done() }()
			if srv.Engine() != tc.want || !strings.Contains(srv.Note(), tc.note) || (tc.note == "") != (srv.Note() == "") {
				t.Errorf("engine %q with note %q, want %q with a note saying %q", srv.Engine(), srv.Note(), tc.want, tc.note)
			}
			// It serves.
			c, err := mongo.Connect(options.Client().ApplyURI(srv.URI()))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Disconnect(context.Background())
			if _, err := c.Database("d").Collection("c").InsertOne(ctx, bson.D{{Key: "x", Value: 1}}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A collection made by its first insert (no createIndexes, no create) gets
// its twins from the sweep; a database whose lock a command holds is left
// to a later sweep, and the sweep does not wait for it: the twins of
// another database, after it in the sweep's order, are made meanwhile.
// Red with a sweep that waits for each database's lock (b_other's twins
// never come while a_busy is held).
func TestSweepMakesTwinsBesideABusyDatabase(t *testing.T) {
	needPostgres(t)
	ctx, cancel := context.WithDeadline(context.Background(), testdeadline.Deadline())
	defer cancel()
	srv, err := Start(ctx, Config{Dir: t.TempDir(), Engine: EnginePostgreSQL})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); <-srv.Done() }()
	pgc, err := pgx.Connect(ctx, srv.pg.url(pgDatabase))
	if err != nil {
		t.Fatal(err)
	}
	defer pgc.Close(context.Background())
	twins := func(db string) int {
		t.Helper()
		var n int
		if err := pgc.QueryRow(ctx, `SELECT count(*) FROM pg_indexes WHERE indexname LIKE '%\_dentwin' AND schemaname = $1`, db).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	waitTwins := func(db string, want int) {
		t.Helper()
		if !testdeadline.Until(20*time.Millisecond, func() bool { return twins(db) == want }) {
			t.Fatalf("%s has %d twins at the test's deadline, want %d", db, twins(db), want)
		}
	}
	insert := func(uri, db string) {
		t.Helper()
		c, err := mongo.Connect(options.Client().ApplyURI(uri))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Disconnect(context.Background())
		if _, err := c.Database(db).Collection("tasks").InsertOne(ctx, bson.D{{Key: "status", Value: -2}}); err != nil {
			t.Fatal(err)
		}
	}
	// a_busy's lock is held, as by a long command; its tasks are made
	// around the proxy.
	release := sync.OnceFunc(srv.proxy.locks.db("a_busy"))
	defer release() // before the server stops: a failed test ends
	insert(srv.DirectURI(), "a_busy")
	insert(srv.URI(), "b_other")
	waitTwins("b_other", 2) // _id and status
	if n := twins("a_busy"); n != 0 {
		t.Fatalf("the sweep made %d twins in a database whose lock a command held", n)
	}
	release()
	waitTwins("a_busy", 2)
}

// Index upkeep runs under a database's proxy lock, so a table lock held
// elsewhere in PostgreSQL must not stop that database's commands: with
// another connection holding the tasks table in ACCESS EXCLUSIVE mode
// while its twins are missing, a command through the proxy in the same
// database is still answered, while that lock is held (the keeper's
// statements give up after twinLockWait, and the next sweep tries again).
// Red without the keeper's lock_timeout: the command waited for as long
// as the lock was held.
func TestTwinUpkeepDoesNotWaitOnTableLocks(t *testing.T) {
	needPostgres(t)
	ctx, cancel := context.WithDeadline(context.Background(), testdeadline.Deadline())
	defer cancel()
	srv, err := Start(ctx, Config{Dir: t.TempDir(), Engine: EnginePostgreSQL})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); <-srv.Done() }()
	pgc, err := pgx.Connect(ctx, srv.pg.url(pgDatabase))
	if err != nil {
		t.Fatal(err)
	}
	defer pgc.Close(context.Background())
	connect := func(uri string) *mongo.Database {
		c, err := mongo.Connect(options.Client().ApplyURI(uri))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Disconnect(context.Background()) })
		return c.Database("locked")
	}
	direct, proxied := connect(srv.DirectURI()), connect(srv.URI())
	// The tasks table is made around the proxy and at once locked, before
	// a sweep (every twinInterval) has made its twins.
	release := sync.OnceFunc(srv.proxy.locks.db("locked"))
	if _, err := direct.Collection("tasks").InsertOne(ctx, bson.D{{Key: "status", Value: -2}}); err != nil {
		t.Fatal(err)
	}
	var table string
	if err := pgc.QueryRow(ctx, `SELECT quote_ident(schemaname) || '.' || quote_ident(tablename) FROM pg_tables WHERE schemaname = 'locked' AND tablename LIKE 'tasks%'`).Scan(&table); err != nil {
		t.Fatal(err)
	}
	tx, err := pgc.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, "LOCK TABLE "+table+" IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	release()
	// The next sweep takes the database's proxy lock and tries the twins:
	// its statement waits on the table's lock (seen from a connection of
	// its own: pg_stat_activity holds still within a transaction). A
	// command of another collection goes through the proxy meanwhile.
	watch, err := pgx.Connect(ctx, srv.pg.url(pgDatabase))
	if err != nil {
		t.Fatal(err)
	}
	defer watch.Close(context.Background())
	testdeadline.Wait(t, 10*time.Millisecond, "the twins' upkeep waiting on the table's lock", func() bool {
		var n int
		err := watch.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND pid <> pg_backend_pid()`).Scan(&n)
		return err == nil && n > 0
	})
	done := make(chan error, 1)
	go func() {
		_, err := proxied.Collection("other").InsertOne(ctx, bson.D{{Key: "n", Value: 1}})
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("insert through the proxy: %v", err)
		}
	case <-testdeadline.GiveUp():
		t.Fatalf("at the test binary's deadline a command in the database still waited behind index upkeep blocked on a table lock")
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
}
