package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/config"
	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/plugins/demo"
	"github.com/den-project/den/queue"
)

// den node list shows heartbeat age, maxthreads, running tasks per queue
// (from the tasks) and version; den node set sets or removes maxthreads.
func TestNodeCommands(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	qa := dentest.Queue(t, db, "a", demo.Name, 4, "fifo")
	qb := dentest.Queue(t, db, "b", demo.Name, 4, "fifo")
	beat := time.Now().Add(-30 * time.Second)
	dentest.Insert(t, db.Collection("nodes"),
		bson.D{{Key: "node", Value: "w1"}, {Key: "timestamp", Value: beat}, {Key: "queues", Value: bson.A{}}, {Key: "version", Value: "v1.2.3"}},
		bson.D{{Key: "node", Value: "w2"}, {Key: "timestamp", Value: beat}, {Key: "maxthreads", Value: 2}})
	ids := dentest.Tasks(t, db, qa, bson.D{}, bson.D{}, bson.D{})
	setTask(t, db, ids[0], bson.D{{Key: "status", Value: 0}, {Key: "node", Value: "w1"}})
	setTask(t, db, ids[1], bson.D{{Key: "status", Value: -1}, {Key: "node", Value: "w1"}})
	idb := dentest.Tasks(t, db, qb, bson.D{})
	setTask(t, db, idb[0], bson.D{{Key: "status", Value: 0}, {Key: "node", Value: "w1"}})

	var rows []nodeRow
	denDB(t, db, "", "node", "list", "--json").must(t, ExitOK).decode(t, &rows)
	if len(rows) != 2 || rows[0].Name != "w1" || rows[0].Running != 3 || rows[0].PerQueue["a"] != 2 || rows[0].PerQueue["b"] != 1 ||
		rows[0].Version != "v1.2.3" || rows[0].MaxThreads != nil || rows[1].MaxThreads == nil || *rows[1].MaxThreads != 2 ||
		rows[0].AgeSeconds == nil || *rows[0].AgeSeconds < 29 {
		t.Fatalf("node list: %+v", rows)
	}
	out := denDB(t, db, "", "node", "list").must(t, ExitOK).stdout
	if !strings.Contains(out, "a:2 b:1") || !strings.Contains(out, "s ago") {
		t.Errorf("node table:\n%s", out)
	}

	denDB(t, db, "", "node", "set", "w1", "maxthreads", "8").must(t, ExitOK)
	var n bson.M
	if err := db.Collection("nodes").FindOne(dentest.Context(t), bson.D{{Key: "node", Value: "w1"}}).Decode(&n); err != nil || n["maxthreads"] != int32(8) {
		t.Fatalf("after set: %v %v", n, err)
	}
	denDB(t, db, "", "node", "set", "w2", "maxthreads", "none").must(t, ExitOK)
	n = nil
	if err := db.Collection("nodes").FindOne(dentest.Context(t), bson.D{{Key: "node", Value: "w2"}}).Decode(&n); err != nil || n["maxthreads"] != nil {
		t.Fatalf("after none: %v %v", n, err)
	}
	denDB(t, db, "", "node", "set", "w3", "maxthreads", "1").must(t, ExitError)
	denDB(t, db, "", "node", "set", "w1", "maxthreads", "-1").must(t, ExitUsage)
	denDB(t, db, "", "node", "set", "w1", "threads", "1").must(t, ExitUsage)
	if dentest.Count(t, db.Collection("nodes"), bson.D{}) != 2 {
		t.Fatal("node set made a node document")
	}
}

// den status shows queues, nodes and the recent failures, with the last
// line of their stderr, and queued tasks no node can run, with why.
func TestStatus(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	qid := dentest.Queue(t, db, "jobs", demo.Name, 1, "fifo")
	dentest.Insert(t, db.Collection("nodes"), bson.D{{Key: "node", Value: "w1"}, {Key: "timestamp", Value: time.Now()}})
	ids := dentest.Tasks(t, db, qid, bson.D{}, bson.D{}, bson.D{}, bson.D{})
	setTask(t, db, ids[0], bson.D{{Key: "status", Value: 2}, {Key: "node", Value: "w1"}, {Key: "stderr", Value: "warming up\nbroken pipe\n"}, {Key: "mtime", Value: time.Now().Add(-time.Minute)}})
	setTask(t, db, ids[3], bson.D{{Key: "unfit", Value: "requests 5000 MiB; the largest live den node offers 1000 MiB, 4 cpus"}})
	setTask(t, db, ids[1], bson.D{{Key: "status", Value: -6}, {Key: "mtime", Value: time.Now()}})
	setTask(t, db, ids[2], bson.D{{Key: "status", Value: 1}})
	var st struct {
		Queues   []queueRow
		Nodes    []nodeRow
		Failures []struct {
			ID     string `json:"id"`
			Reason string `json:"reason"`
		} `json:"recent_failures"`
		Unfit []struct {
			ID    string `json:"id"`
			Unfit string `json:"unfit"`
		} `json:"unfit"`
	}
	denDB(t, db, "", "status", "--json").must(t, ExitOK).decode(t, &st)
	if len(st.Queues) != 1 || st.Queues[0].Failed != 2 || st.Queues[0].Done != 1 || len(st.Nodes) != 1 ||
		len(st.Failures) != 2 || st.Failures[0].ID != ids[1].Hex() || st.Failures[1].Reason != "broken pipe" ||
		len(st.Unfit) != 1 || st.Unfit[0].ID != ids[3].Hex() || !strings.HasPrefix(st.Unfit[0].Unfit, "requests 5000 MiB") {
		t.Fatalf("status: %+v", st)
	}
	out := denDB(t, db, "", "status").must(t, ExitOK).stdout
	for _, want := range []string{"QUEUES", "jobs", "NODES", "w1", "RECENT FAILURES", "broken pipe", "-6 orphaned", "WAITING", "requests 5000 MiB"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}
}

// den counts check reports drift (exit 1); den counts fix corrects it with
// the counts the tasks give; check is then clean.
func TestCounts(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	// The demo queue: count_todo 0, count_total 2, holding 3 tasks.
	drift := dentest.Queue(t, db, "demo", demo.Name, 1, "fifo")
	fine := dentest.Queue(t, db, "fine", demo.Name, 1, "fifo")
	missing := dentest.Queue(t, db, "missing", demo.Name, 1, "fifo")
	ids := dentest.Tasks(t, db, drift, bson.D{}, bson.D{}, bson.D{})
	setTask(t, db, ids[0], bson.D{{Key: "status", Value: 1}})
	setTask(t, db, ids[1], bson.D{{Key: "status", Value: 0}, {Key: "node", Value: "w1"}}) // running: still to do
	dentest.Update(t, db.Collection("queues"), bson.D{{Key: "_id", Value: drift}}, bson.D{{Key: "$set", Value: bson.D{{Key: "count_todo", Value: 0}, {Key: "count_total", Value: 2}}}})
	dentest.Tasks(t, db, fine, bson.D{})
	dentest.Tasks(t, db, missing, bson.D{})
	dentest.Update(t, db.Collection("queues"), bson.D{{Key: "_id", Value: missing}}, bson.D{{Key: "$unset", Value: bson.D{{Key: "count_todo", Value: ""}}}})

	var rows []driftRow
	r := denDB(t, db, "", "counts", "check", "--json").must(t, ExitError)
	r.decode(t, &rows)
	got := map[string]driftRow{}
	for _, row := range rows {
		got[row.Name] = row
	}
	if d := got["demo"]; !d.Drift || d.Todo != 2 || d.Total != 3 || *d.StoredTodo != 0 || *d.StoredTotal != 2 {
		t.Errorf("demo: %+v", d)
	}
	if got["fine"].Drift || !got["missing"].Drift || got["missing"].StoredTodo != nil {
		t.Errorf("rows: %+v", rows)
	}
	if !strings.Contains(r.stderr, "drift in 2 of 3 queues") {
		t.Errorf("check said %q", r.stderr)
	}
	denDB(t, db, "", "counts", "fix").must(t, ExitOK)
	for id, want := range map[bson.ObjectID][2]int64{drift: {2, 3}, fine: {1, 1}, missing: {1, 1}} {
		if todo, total := counts(t, db, id); todo != want[0] || total != want[1] {
			t.Errorf("queue %s: counts %d/%d, want %d/%d", id.Hex(), todo, total, want[0], want[1])
		}
	}
	denDB(t, db, "", "counts", "check").must(t, ExitOK)
}

// A fix is conditional on the counts read: counts a node moved meanwhile
// are left alone.
func TestCountsFixIsConditional(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	qid := dentest.Queue(t, db, "q", demo.Name, 1, "fifo")
	dentest.Tasks(t, db, qid, bson.D{}, bson.D{})
	dentest.Update(t, db.Collection("queues"), bson.D{{Key: "_id", Value: qid}}, bson.D{{Key: "$set", Value: bson.D{{Key: "count_todo", Value: 5}}}})
	store := queue.NewStore(db)
	drifts, err := store.CheckCounts(dentest.Context(t))
	if err != nil || len(drifts) != 1 || !drifts[0].Drifted() {
		t.Fatalf("check: %+v %v", drifts, err)
	}
	// A runner finishes a task meanwhile.
	dentest.Update(t, db.Collection("queues"), bson.D{{Key: "_id", Value: qid}}, bson.D{{Key: "$inc", Value: bson.D{{Key: "count_todo", Value: -1}}}})
	ok, err := store.FixCounts(dentest.Context(t), drifts[0])
	if err != nil || ok {
		t.Fatalf("fix over a moved count: %v %v, want false", ok, err)
	}
	if todo, _ := counts(t, db, qid); todo != 4 {
		t.Fatalf("count_todo %d, want the runner's 4 untouched", todo)
	}
}

// den version and --version print the module version and the VCS
// revision of the build.
func TestVersion(t *testing.T) {
	t.Parallel()
	a := denRun(t, "", "version").must(t, ExitOK).stdout
	b := denRun(t, "", "--version").must(t, ExitOK).stdout
	if a != b || !strings.HasPrefix(a, "den ") || !strings.Contains(a, "go1.") {
		t.Fatalf("version %q, --version %q", a, b)
	}
}

// den config print gives every key's effective value and its source:
// default, file, environment, flag. Not parallel: it sets the environment.
func TestConfigPrint(t *testing.T) {
	file := filepath.Join(t.TempDir(), "den.yaml")
	if err := os.WriteFile(file, []byte("mongo:\n  uri: mongodb://u:secret@db1/\ninterval: 2s\ngfs: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DEN_GFS", "false")
	t.Setenv("DEN_NODE", "from-env")
	var settings []config.Setting
	denRun(t, "", "config", "print", "--config", file, "--node", "from-flag", "--json").must(t, ExitOK).decode(t, &settings)
	got := map[string]config.Setting{}
	for _, s := range settings {
		got[s.Key] = s
	}
	for key, want := range map[string][2]string{
		"interval":       {"2s", "file " + file},
		"gfs":            {"false", "environment DEN_GFS"},
		"node":           {"from-flag", "flag --node"},
		"mongo.database": {"disbatch", "default"},
		"orphan_age":     {"5m0s", "default"},
	} {
		if s := got[key]; s.String() != want[0] || s.Source != want[1] {
			t.Errorf("%s: %q from %q, want %q from %q", key, s.String(), s.Source, want[0], want[1])
		}
	}
	if u := got["mongo.uri"].String(); strings.Contains(u, "secret") || got["mongo.uri"].Source != "file "+file {
		t.Errorf("mongo.uri %q from %q: password shown or source wrong", u, got["mongo.uri"].Source)
	}
	if len(got) < 20 {
		t.Errorf("only %d keys", len(got))
	}
	// A DEN_ variable that is no setting is a warning naming it, once; one
	// den's own unit sets (DEN_CONFIG) is not.
	t.Setenv("DEN_INTERVALL", "5s")
	t.Setenv("DEN_CONFIG", file)
	r := denRun(t, "", "config", "print", "--config", file).must(t, ExitOK)
	if n := strings.Count(r.stderr, "den: warning: environment variable DEN_INTERVALL is not a den setting"); n != 1 || strings.Contains(r.stderr, "DEN_CONFIG") {
		t.Errorf("stderr names DEN_INTERVALL %d times (want 1), or warns about DEN_CONFIG:\n%s", n, r.stderr)
	}
	denRun(t, "", "config", "print", "--config", "/nonexistent.yaml").must(t, ExitUsage)
}
