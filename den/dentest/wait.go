package dentest

import (
	"fmt"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/den-project/den/queue"
)

// taskWait is how long a task takes to reach a status on a quiet machine,
// with room to spare (Eventually logs past it, and fails at Deadline).
const taskWait = 2 * time.Minute

// WaitStatus waits until task id has status want, and returns the task as
// it then is. It fails the test at Deadline, showing the task as it last
// was. It is the suite's one wait for a status (den's, den/web's and
// cmd/den's tests share it).
func WaitStatus(t testing.TB, db *mongo.Database, id bson.ObjectID, want int64) bson.Raw {
	t.Helper()
	var last bson.Raw
	eventually(t, taskWait, func() string {
		return fmt.Sprintf("task %s to have status %d; it is %s", id.Hex(), want, last)
	}, func() bool {
		last = Task(t, db, id)
		task, err := queue.DecodeTask(last)
		return err == nil && task.StatusOK && int64(task.Status) == want
	})
	return last
}

// WaitEnded waits until task id has ended, whatever its outcome (status 1
// or more, or -3 and below: the ended statuses of the protocol and den's),
// and returns it: a test that wants one outcome fails at once on another.
func WaitEnded(t testing.TB, db *mongo.Database, id bson.ObjectID) bson.Raw {
	t.Helper()
	var last bson.Raw
	eventually(t, taskWait, func() string {
		return fmt.Sprintf("task %s to end; it is %s", id.Hex(), last)
	}, func() bool {
		last = Task(t, db, id)
		task, err := queue.DecodeTask(last)
		return err == nil && task.StatusOK && (task.Status >= 1 || task.Status <= -3)
	})
	return last
}
