package queue

import (
	"sync/atomic"

	"go.mongodb.org/mongo-driver/v2/mongo"
)

// Store is den's one store of a Disbatch 4 database: the protocol's
// collections in one MongoDB database, and what it learns of its server
// (its kind, whether it takes a projection on findAndModify, the claim
// candidates it lists). Every query den makes is a method of it; each
// caller holds it as the role it plays (roles.go), so that what a node,
// a runner or an operator's tool can do is read from one interface.
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

// NewStore returns the store of a database. A process that plays several
// roles (a node that also hands its runners a store, a test) shares one:
// what one role learns of the server, the others use.
func NewStore(db *mongo.Database) *Store { return newStore(db) }

func newStore(db *mongo.Database) *Store {
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
