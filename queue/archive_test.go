package queue_test

import (
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/queue"
)

// Archived tasks (RetireTasks in archive mode, as den task archive does)
// leave tasks, and their queue's counts, and are read from the archive
// as tasks are: one by id, and listed with the task list's filters,
// newest first, without their output. The archive holds no live task.
func TestArchiveReadsArchivedTasks(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	store := queue.NewStore(db)
	ctx := dentest.Context(t)
	a := dentest.Queue(t, db, "a", "P", 1, "fifo")
	b := dentest.Queue(t, db, "b", "P", 1, "fifo")
	ids := dentest.Tasks(t, db, a, bson.D{{Key: "n", Value: 1}}, bson.D{{Key: "n", Value: 2}}, bson.D{{Key: "n", Value: 3}})
	other := dentest.Tasks(t, db, b, bson.D{{Key: "n", Value: 4}})[0]
	for i, id := range append(ids[:2:2], other) {
		dentest.Update(t, db.Collection("tasks"), bson.D{{Key: "_id", Value: id}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "status", Value: 1 + i%2}, {Key: "stdout", Value: "output"}}}})
	}
	for _, q := range []bson.ObjectID{a, a, b} { // as the runners that ended them do
		if err := queue.NewStore(db).DecrementTodo(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	live := ids[2]
	ended, err := store.TasksByID(ctx, []bson.ObjectID{ids[0], ids[1], other})
	if err != nil || len(ended) != 3 {
		t.Fatalf("read the tasks to archive: %d, %v", len(ended), err)
	}
	done, err := store.RetireTasks(ctx, ended, queue.RetireArchive)
	if err != nil || done.Tasks != 3 {
		t.Fatalf("archive: %+v, %v; want 3 tasks", done, err)
	}
	if n := dentest.CountTasks(t, db, bson.D{}); n != 1 {
		t.Fatalf("%d tasks left, want the live one", n)
	}
	if q := must(store.QueueDoc(ctx, a)); *q.CountTotal != 1 || *q.CountTodo != 1 {
		t.Errorf("queue a after the archive: count_total %d, count_todo %d; want 1, 1", *q.CountTotal, *q.CountTodo)
	}

	archive := queue.NewArchive(db)
	got, err := archive.Task(ctx, ids[1])
	if err != nil || got == nil {
		t.Fatalf("archived task: %v, %v", got, err)
	}
	if got.ID != ids[1] || got.Queue != a || got.Status != queue.StatusFailed || got.Raw.Lookup("stdout").StringValue() != "output" {
		t.Errorf("archived task read as %v", got.Raw)
	}
	if n, _ := got.Param("n"); n.AsInt64() != 2 {
		t.Errorf("archived task's parameter n: %v, want 2", n)
	}
	for _, id := range []bson.ObjectID{live, bson.NewObjectID()} {
		if got, err := archive.Task(ctx, id); err != nil || got != nil {
			t.Errorf("archive.Task of a task not archived: %v, %v; want nil", got, err)
		}
	}

	for _, c := range []struct {
		name string
		f    queue.TaskFilter
		want []bson.ObjectID
	}{
		{"all", queue.TaskFilter{}, []bson.ObjectID{other, ids[1], ids[0]}},
		{"queue a", queue.TaskFilter{Queues: []bson.ObjectID{a}}, []bson.ObjectID{ids[1], ids[0]}},
		{"succeeded", queue.TaskFilter{Statuses: []int{queue.StatusSucceeded}}, []bson.ObjectID{other, ids[0]}},
		{"queued", queue.TaskFilter{Statuses: []int{queue.StatusQueued}}, nil},
		{"newest", queue.TaskFilter{Limit: 1}, []bson.ObjectID{other}},
	} {
		list, err := archive.ListTasks(ctx, c.f)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var got []bson.ObjectID
		for _, task := range list {
			got = append(got, task.ID)
			if task.Raw.Lookup("stdout").Type != 0 {
				t.Errorf("%s: the list holds the output of task %s", c.name, task.ID.Hex())
			}
		}
		if len(got) != len(c.want) {
			t.Errorf("%s: listed %v, want %v", c.name, got, c.want)
			continue
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("%s: listed %v, want %v", c.name, got, c.want)
				break
			}
		}
	}
}
