package den_test

import (
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/plugins/demo"
	"github.com/den-project/den/queue"
)

// Two nodes fire a schedule: every scheduled time gets exactly one task,
// which a node runs; a schedule written by hand without a next time gets
// its first; one that cannot fire is left alone, and the nodes go on.
func TestNodesFireSchedules(t *testing.T) {
	t.Parallel()
	db := dentest.DB(t)
	qid := dentest.Queue(t, db, "demo", demo.Name, 4, "fifo")
	store := queue.NewStore(db)
	params, _ := bson.Marshal(bson.D{{Key: "commands", Value: "a"}})
	if _, err := store.AddSchedule(dentest.Context(t), queue.ScheduleSpec{Name: "often", Queue: qid, Every: time.Second, Overlap: queue.OverlapAllow, Parameters: params}, time.Now()); err != nil {
		t.Fatal(err)
	}
	dentest.Insert(t, db.Collection("schedules"),
		bson.D{{Key: "_id", Value: "by-hand"}, {Key: "queue", Value: qid}, {Key: "parameters", Value: bson.D{{Key: "commands", Value: "b"}}}, {Key: "every", Value: 1}},
		bson.D{{Key: "_id", Value: "broken"}, {Key: "queue", Value: qid}, {Key: "cron", Value: "99 * * * *"}})
	startNode(t, db, "a")
	startNode(t, db, "b")
	dentest.Eventually(t, time.Minute, "five scheduled tasks of each schedule succeeded", func() bool {
		return dentest.CountTasks(t, db, bson.D{{Key: "schedule", Value: "often"}, {Key: "status", Value: 1}}) >= 5 &&
			dentest.CountTasks(t, db, bson.D{{Key: "schedule", Value: "by-hand"}, {Key: "status", Value: 1}}) >= 5
	})
	// One task per scheduled time: the _id's first four bytes are the time.
	for _, name := range []string{"often", "by-hand"} {
		cur, err := db.Collection("tasks").Find(dentest.Context(t), bson.D{{Key: "schedule", Value: name}})
		if err != nil {
			t.Fatal(err)
		}
		seen := map[int64]bool{}
		for cur.Next(dentest.Context(t)) {
			at := cur.Current.Lookup("_id").ObjectID().Timestamp().Unix()
			if seen[at] {
				t.Errorf("schedule %s: two tasks for the time %d", name, at)
			}
			seen[at] = true
		}
		cur.Close(dentest.Context(t))
	}
	sc, err := store.Schedule(dentest.Context(t), "broken")
	if err != nil || sc == nil || sc.Raw.Lookup("problem").Type == 0 {
		t.Errorf("the broken schedule does not say why it cannot fire: %v", sc)
	}
}
