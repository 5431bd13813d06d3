package cli

import (
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/plugins/demo"
)

// A force-deleted queue's tasks stay findable by the queue's id: den task
// list --queue ID lists them (QUEUE "(deleted)", queue_deleted in
// --json); den status and den queue list count them under the deleted
// queues, with the id, from the census (den queue list --json keeps to
// the queue documents); den task archive --queue ID
// removes the ended ones; den task retry --queue ID refuses, saying what
// to do instead (no node would run them).
func TestDeletedQueueTasksFound(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	gone := dentest.Queue(t, db, "gone", demo.Name, 1, "fifo")
	kept := dentest.Queue(t, db, "kept", demo.Name, 1, "fifo")
	ids := dentest.Tasks(t, db, gone, bson.D{{Key: "n", Value: 1}}, bson.D{{Key: "n", Value: 2}})
	setTask(t, db, ids[0], bson.D{{Key: "status", Value: 1}})
	dentest.Tasks(t, db, kept, bson.D{{Key: "n", Value: 3}})
	denDB(t, db, "", "queue", "delete", "gone", "--force", "--yes").must(t, ExitOK)
	ref := gone.Hex()

	var tasks []taskRow
	denDB(t, db, "", "task", "list", "--queue", ref, "--json").must(t, ExitOK).decode(t, &tasks)
	if len(tasks) != 2 || tasks[0].Queue != ref || !tasks[0].QueueDeleted || !tasks[1].QueueDeleted {
		t.Fatalf("den task list --queue %s (deleted): %+v", ref, tasks)
	}
	if out := denDB(t, db, "", "task", "list", "--queue", ref).must(t, ExitOK).stdout; strings.Count(out, "(deleted)") != 2 {
		t.Errorf("den task list --queue %s does not say the queue is deleted:\n%s", ref, out)
	}
	var keptTasks []taskRow
	denDB(t, db, "", "task", "list", "--queue", "kept", "--json").must(t, ExitOK).decode(t, &keptTasks)
	if len(keptTasks) != 1 || keptTasks[0].QueueDeleted || keptTasks[0].QueueName != "kept" {
		t.Errorf("den task list --queue kept: %+v", keptTasks)
	}
	denDB(t, db, "", "task", "list", "--queue", bson.NewObjectID().Hex()+"x").must(t, ExitError)

	var status struct {
		Queues  []queueRow `json:"queues"`
		Deleted []queueRow `json:"deleted_queues"`
	}
	denDB(t, db, "", "status", "--json").must(t, ExitOK).decode(t, &status)
	if len(status.Queues) != 1 || status.Queues[0].Name != "kept" || status.Queues[0].Deleted ||
		len(status.Deleted) != 1 || status.Deleted[0].ID != ref || !status.Deleted[0].Deleted || status.Deleted[0].Todo != 1 || status.Deleted[0].Done != 1 {
		t.Errorf("den status --json: queues %+v, deleted queues %+v", status.Queues, status.Deleted)
	}
	out := denDB(t, db, "", "status").must(t, ExitOK).stdout
	if _, table, ok := strings.Cut(out, "DELETED QUEUES"); !ok || !strings.Contains(table, ref) || !strings.Contains(table, "den task list --queue ID") {
		t.Errorf("den status does not list the deleted queue:\n%s", out)
	}
	out = denDB(t, db, "", "queue", "list").must(t, ExitOK).stdout
	if _, table, ok := strings.Cut(out, "DELETED QUEUES"); !ok || !strings.Contains(table, ref) {
		t.Errorf("den queue list does not list the deleted queue:\n%s", out)
	}
	var rows []queueRow
	denDB(t, db, "", "queue", "list", "--json").must(t, ExitOK).decode(t, &rows)
	if len(rows) != 1 || rows[0].Name != "kept" || rows[0].Deleted {
		t.Errorf("den queue list --json (the queue documents only): %+v", rows)
	}

	r := denDB(t, db, "", "task", "retry", "--queue", ref, "--yes").must(t, ExitError)
	if !strings.Contains(r.stderr, "cannot run again") || !strings.Contains(r.stderr, "den task archive or purge --queue "+ref) {
		t.Errorf("den task retry --queue of a deleted queue said %q", r.stderr)
	}
	denDB(t, db, "", "task", "archive", "--queue", ref, "--yes").must(t, ExitOK)
	if n := dentest.Count(t, db.Collection("tasks"), bson.D{{Key: "queue", Value: gone}}); n != 1 {
		t.Errorf("after den task archive --queue %s: %d of its tasks left, want 1 (the queued one)", ref, n)
	}
	if n := dentest.Count(t, db.Collection("tasks_archive"), bson.D{{Key: "_id", Value: ids[0]}}); n != 1 {
		t.Errorf("the ended task of the deleted queue is not in tasks_archive")
	}
}
