package cli

import (
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/plugins/demo"
)

// Two adds with one unique key insert one task; the second is refused
// (exit 3) naming the task that holds the key and its status; a third,
// once that task has ended, inserts another. The key is per queue, for
// one task, and refused when empty.
func TestTaskAddUniqueKey(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	qid := dentest.Queue(t, db, "sync", demo.Name, 1, "fifo")
	dentest.Queue(t, db, "other", demo.Name, 1, "fifo")
	add := func(queue string, code int, args ...string) result {
		t.Helper()
		return denDB(t, db, "{\"commands\":\"a\"}\n", append([]string{"task", "add", queue, "--unique-key", "account-42"}, args...)...).must(t, code)
	}
	var first struct{ IDs []string }
	add("sync", ExitOK, "--json").decode(t, &first)
	if len(first.IDs) != 1 {
		t.Fatalf("first add: %+v", first)
	}
	r := add("sync", ExitHeld)
	if !strings.Contains(r.stderr, "account-42") || !strings.Contains(r.stderr, first.IDs[0]) || !strings.Contains(r.stderr, "status -2, queued") {
		t.Fatalf("refusal %q: want the key, the holder %s and its status", r.stderr, first.IDs[0])
	}
	var refused struct {
		Inserted int
		HeldBy   struct {
			ID     string
			Status int
		} `json:"held_by"`
	}
	add("sync", ExitHeld, "--json").decode(t, &refused)
	if refused.Inserted != 0 || refused.HeldBy.ID != first.IDs[0] || refused.HeldBy.Status != -2 {
		t.Fatalf("refusal as JSON: %+v", refused)
	}
	if n := dentest.CountTasks(t, db, bson.D{{Key: "queue", Value: qid}}); n != 1 {
		t.Fatalf("%d tasks after three adds with one key, want 1", n)
	}
	if todo, total := counts(t, db, qid); todo != 1 || total != 1 {
		t.Fatalf("counts %d/%d, want 1/1: a refused add counts nothing", todo, total)
	}
	add("other", ExitOK) // another queue: its own keys

	// The task ends (here as any node records it: status 1); the next add
	// with the key inserts another.
	id, _ := bson.ObjectIDFromHex(first.IDs[0])
	dentest.Update(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: id}}, bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: 1}, {Key: "node", Value: "n1"}}}})
	add("sync", ExitOK)
	if n := dentest.CountTasks(t, db, bson.D{{Key: "queue", Value: qid}}); n != 2 {
		t.Fatalf("%d tasks once the first ended, want 2", n)
	}
	if n := dentest.CountTasks(t, db, bson.D{{Key: "queue", Value: qid}, {Key: "unique_key", Value: "account-42"}, {Key: "status", Value: -2}}); n != 1 {
		t.Fatalf("%d queued tasks hold the key, want 1", n)
	}
	if doc := dentest.Task(t, db, id); doc.Lookup("unique_key_freed").StringValue() != "account-42" {
		t.Fatalf("ended task %v: want its key kept as unique_key_freed", doc)
	}

	// A retry of the ended task is refused while the new one holds the
	// key, and says so.
	r = denDB(t, db, "", "task", "retry", first.IDs[0], "--yes").must(t, ExitError)
	if !strings.Contains(r.stderr, "unique key \"account-42\" is held") || !strings.Contains(r.stdout, "1 left alone") {
		t.Fatalf("retry of a task whose key is held: stdout %q stderr %q", r.stdout, r.stderr)
	}

	// A key is for one task, and not empty.
	denDB(t, db, "{}\n{}\n", "task", "add", "sync", "--unique-key", "k").must(t, ExitUsage)
	denDB(t, db, "{}\n", "task", "add", "sync", "--unique-key", "").must(t, ExitUsage)
}
