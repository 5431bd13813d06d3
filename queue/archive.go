package queue

import "go.mongodb.org/mongo-driver/v2/mongo"

// NewArchive returns the reader of a database's tasks_archive, where den
// task archive moves ended tasks (retire.go): the same shape as tasks,
// read with the task list's filters. It is a Store whose tasks collection
// is the archive, so that the list and the reads are the ones of tasks,
// seen through a role that can change nothing. tasks_archive has no index
// but _id: a filtered list scans it.
func NewArchive(db *mongo.Database) ArchiveReader {
	s := newStore(db)
	s.tasks = db.Collection(ArchiveCollection)
	return s
}
