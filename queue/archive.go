package queue

import (
	"context"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
)

// Archive reads tasks_archive, where den task archive moves ended tasks
// (retire.go): the same shape as tasks, read with the task list's filters.
// It is a conn whose tasks collection is the archive, so that the list
// and the reads are the ones of tasks, and nothing on it can change a
// live task. tasks_archive has no index but _id: a filtered list scans it.
type Archive conn

// NewArchive returns the archive of a database.
func NewArchive(db *mongo.Database) *Archive {
	c := newConn(db)
	c.tasks = db.Collection(ArchiveCollection)
	return (*Archive)(c)
}

// Task returns an archived task, or nil when there is none.
func (a *Archive) Task(ctx context.Context, id bson.ObjectID) (*Task, error) {
	return (*conn)(a).Task(ctx, id)
}

// ListTasks lists archived tasks as OperatorStore.ListTasks lists tasks.
func (a *Archive) ListTasks(ctx context.Context, f TaskFilter) ([]Task, error) {
	return (*OperatorStore)(a).ListTasks(ctx, f)
}
