package queue

import (
	"sync/atomic"

	"go.mongodb.org/mongo-driver/v2/mongo"
)

// Store is the Disbatch 4 database of one node or task runner: the protocol's
// collections in one MongoDB database.
type Store struct {
	db     *mongo.Database
	tasks  *mongo.Collection
	queues *mongo.Collection
	nodes  *mongo.Collection
	config *mongo.Collection
	// noClaimProjection is set once the server refused a projection on
	// findAndModify (the development server does).
	noClaimProjection atomic.Bool
	// server is what kind of server this is (server.go), once known; on
	// FerretDB fifo and lifo claims go by candidates.
	server     atomic.Int32
	candidates candidates
}

// NewStore returns the store for a database.
func NewStore(db *mongo.Database) *Store {
	return &Store{
		db:     db,
		tasks:  db.Collection(TasksCollection),
		queues: db.Collection(QueuesCollection),
		nodes:  db.Collection(NodesCollection),
		config: db.Collection(ConfigCollection),
	}
}

// oneReply is the batch size of the reads a pass makes every time (queues,
// node documents, this node's tasks, counts): their results come in one
// reply, without getMore, even for hundreds of queues or nodes. The
// server still caps a reply at 16 MiB.
const oneReply = 100000
