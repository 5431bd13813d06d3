package cli

import (
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/gridfs"
	"github.com/den-project/den/plugins/demo"
)

// den task purge and den task archive remove ended tasks by filter and
// age, oldest first: purge with every run's GridFS output (no chunk left
// behind), archive into tasks_archive with the output kept and den task
// show still reading it. Tasks not ended, too young, or that a waiting
// task comes after stay; the counts stay right; --dry-run changes
// nothing; more than a few tasks need --yes without a terminal.
func TestPurgeAndArchive(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	qid := dentest.Queue(t, db, "q", demo.Name, 1, "fifo")
	ids := dentest.Tasks(t, db, qid, bson.D{}, bson.D{}, bson.D{}, bson.D{}, bson.D{}, bson.D{}, bson.D{})
	old, young, queued, failed, needed, dependent, cancelled := ids[0], ids[1], ids[2], ids[3], ids[4], ids[5], ids[6]
	long := time.Now().Add(-2 * time.Hour)
	bucket := gridfs.NewBucket(db, "tasks")
	file := func(task bson.ObjectID, text string) bson.ObjectID {
		id, err := bucket.Put(dentest.Context(t), "stdout", bson.D{{Key: "task_id", Value: task}}, []byte(text))
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	earlier, now := file(old, "first run\n"), file(old, strings.Repeat("x", 600*1024)) // three chunks
	setTask(t, db, old, bson.D{{Key: "status", Value: 1}, {Key: "node", Value: "n1"}, {Key: "mtime", Value: long}, {Key: "stdout", Value: now},
		{Key: "history", Value: bson.A{bson.D{{Key: "attempt", Value: 1}, {Key: "status", Value: 2}, {Key: "stdout", Value: earlier}}}}})
	setTask(t, db, young, bson.D{{Key: "status", Value: 1}, {Key: "node", Value: "n1"}, {Key: "mtime", Value: time.Now()}})
	setTask(t, db, queued, bson.D{{Key: "mtime", Value: long}})
	setTask(t, db, failed, bson.D{{Key: "status", Value: 2}, {Key: "node", Value: "n1"}, {Key: "mtime", Value: long}, {Key: "outcome", Value: "exit_code"}})
	setTask(t, db, needed, bson.D{{Key: "status", Value: 1}, {Key: "node", Value: "n1"}, {Key: "mtime", Value: long}, {Key: "has_dependents", Value: true}})
	setTask(t, db, dependent, bson.D{{Key: "status", Value: -4}, {Key: "after", Value: bson.A{needed}}, {Key: "waiting", Value: bson.A{needed}}})
	setTask(t, db, cancelled, bson.D{{Key: "status", Value: -5}, {Key: "cancel", Value: true}, {Key: "mtime", Value: long},
		{Key: "stdout", Value: "kept\n"}})
	// As the nodes leave the counts: the finished tasks off count_todo.
	dentest.Update(t, db.Collection("queues"), bson.D{{Key: "_id", Value: qid}}, bson.D{{Key: "$inc", Value: bson.D{{Key: "count_todo", Value: -4}}}})
	denDB(t, db, "", "counts", "check").must(t, ExitOK)
	exists := func(id bson.ObjectID) bool { return dentest.CountTasks(t, db, bson.D{{Key: "_id", Value: id}}) == 1 }

	denDB(t, db, "", "task", "purge").must(t, ExitUsage)
	denDB(t, db, "", "task", "purge", "--older-than", "1h", "--before", "2026-01-01").must(t, ExitUsage)
	dry := denDB(t, db, "", "task", "purge", "--queue", "q", "--status", "succeeded", "--older-than", "1h", "--dry-run").must(t, ExitOK)
	if !strings.Contains(dry.stdout, old.Hex()) || strings.Contains(dry.stdout, young.Hex()) || strings.Contains(dry.stdout, needed.Hex()) ||
		!strings.Contains(dry.stdout, "would purge 1 tasks") {
		t.Errorf("dry run:\n%s", dry.stdout)
	}
	if !exists(old) {
		t.Fatal("a dry run deleted a task")
	}

	var out struct{ Tasks, Files int64 }
	denDB(t, db, "", "task", "purge", "--queue", "q", "--status", "succeeded", "--older-than", "1h", "--json").must(t, ExitOK).decode(t, &out)
	if out.Tasks != 1 || out.Files != 2 || exists(old) || !exists(young) || !exists(needed) {
		t.Fatalf("purge of old succeeded tasks: %+v; old %v, young %v, needed %v", out, exists(old), exists(young), exists(needed))
	}
	for _, coll := range []string{"tasks.files", "tasks.chunks"} {
		if n, err := db.Collection(coll).CountDocuments(dentest.Context(t), bson.D{}); err != nil || n != 0 {
			t.Errorf("%s holds %d documents after the purge (%v), want none", coll, n, err)
		}
	}
	// Every ended task of any status, by outcome: the failed one; the one
	// a waiting task comes after stays.
	denDB(t, db, "", "task", "purge", "--outcome", "exit_code", "--yes").must(t, ExitOK)
	if exists(failed) || !exists(needed) || !exists(queued) {
		t.Errorf("purge by outcome: failed %v, needed %v, queued %v", exists(failed), exists(needed), exists(queued))
	}

	// Archive: the cancelled task moves, its output with it, readable.
	denDB(t, db, "", "task", "archive", "--status", "cancelled").must(t, ExitOK)
	if exists(cancelled) {
		t.Fatal("archived task still in tasks")
	}
	if n, _ := db.Collection("tasks_archive").CountDocuments(dentest.Context(t), bson.D{{Key: "_id", Value: cancelled}}); n != 1 {
		t.Fatalf("archived task not in tasks_archive")
	}
	show := denDB(t, db, "", "task", "show", cancelled.Hex()).must(t, ExitOK)
	if !strings.Contains(show.stdout, "archived: in tasks_archive") {
		t.Errorf("den task show of an archived task:\n%s", show.stdout)
	}
	if r := denDB(t, db, "", "output", cancelled.Hex()).must(t, ExitOK); r.stdout != "kept\n" {
		t.Errorf("den output of an archived task: %q", r.stdout)
	}
	denDB(t, db, "", "task", "purge", "--queue", "q", "--yes").must(t, ExitOK)
	if !exists(needed) || !exists(queued) || !exists(dependent) {
		t.Errorf("a purge of the whole queue removed a task that is needed, queued or waiting")
	}
	denDB(t, db, "", "counts", "check").must(t, ExitOK)
	if todo, total := counts(t, db, qid); todo != 2 || total != 3 {
		t.Errorf("counts after purging and archiving: %d/%d, want 2/3", todo, total)
	}

	// More than a few tasks: confirmation, refused without a terminal.
	many := dentest.Queue(t, db, "many", demo.Name, 1, "fifo")
	var docs []bson.D
	for range 12 {
		docs = append(docs, bson.D{})
	}
	for _, id := range dentest.Tasks(t, db, many, docs...) {
		setTask(t, db, id, bson.D{{Key: "status", Value: 1}, {Key: "mtime", Value: long}})
	}
	denDB(t, db, "", "task", "purge", "--queue", "many").must(t, ExitUsage)
	if n := dentest.CountTasks(t, db, bson.D{{Key: "queue", Value: many}}); n != 12 {
		t.Fatalf("a refused purge removed tasks: %d left of 12", n)
	}
	denDB(t, db, "", "task", "purge", "--queue", "many", "--yes").must(t, ExitOK)
	if n := dentest.CountTasks(t, db, bson.D{{Key: "queue", Value: many}}); n != 0 {
		t.Fatalf("%d tasks left after a confirmed purge", n)
	}
}
