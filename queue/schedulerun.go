package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Running a schedule now, outside its times, on an operator's word (the
// page's Run now).

// ErrNoSchedule is RunScheduleNow's answer for a name no schedule has.
var ErrNoSchedule = errors.New("no such schedule")

// RunScheduleNow inserts the schedule's task now, as it would at one of its times,
// paused or not, and counts it in its queue. The schedule's next time is
// left as it is; the task becomes its last_task, so that its overlap rule
// (skip while the last task has not ended) counts it. The task's _id is
// derived from the name and the second, so that a form sent twice in one
// second inserts one task (inserted is then false). A schedule that
// cannot fire (its problem) inserts nothing.
func (s *Store) RunScheduleNow(ctx context.Context, name string, now time.Time) (id bson.ObjectID, inserted bool, err error) {
	c := s
	found, err := c.findSchedules(ctx, bson.D{{Key: "_id", Value: name}}, options.Find().SetLimit(1))
	if err != nil {
		return id, false, err
	}
	if len(found) == 0 {
		return id, false, fmt.Errorf("%w %q", ErrNoSchedule, name)
	}
	sc := found[0]
	if sc.Problem != "" {
		return id, false, fmt.Errorf("schedule %q cannot fire: %s", name, sc.Problem)
	}
	now = now.Truncate(time.Second)
	id = scheduledTaskID(sc.Name+"\x00now", now)
	if _, err := c.tasks.InsertOne(ctx, sc.taskDoc(id, now)); mongo.IsDuplicateKeyError(err) {
		return id, false, nil
	} else if err != nil {
		return id, false, fmt.Errorf("run schedule %q now: %w", name, err)
	}
	if _, err := c.queues.UpdateOne(context.WithoutCancel(ctx), bson.D{{Key: "_id", Value: sc.Queue}},
		bson.D{{Key: "$inc", Value: bson.D{{Key: "count_todo", Value: 1}, {Key: "count_total", Value: 1}}}}); err != nil {
		return id, true, fmt.Errorf("count the task %s of schedule %q in its queue: %w (run den counts fix)", id.Hex(), name, err)
	}
	if _, err := c.db.Collection(SchedulesCollection).UpdateOne(context.WithoutCancel(ctx), bson.D{{Key: "_id", Value: sc.Name}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "last_task", Value: id}, {Key: "mtime", Value: now}}}}); err != nil {
		return id, true, fmt.Errorf("note the task %s as schedule %q's last: %w", id.Hex(), name, err)
	}
	return id, true, nil
}
