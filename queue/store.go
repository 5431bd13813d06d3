package queue

import (
	"sync/atomic"

	"go.mongodb.org/mongo-driver/v2/mongo"
)

// conn is the Disbatch 4 database: the protocol's collections in one
// MongoDB database, and what a store learns of its server. Each role's
// store (NodeStore, RunnerStore, OperatorStore) is a conn seen through the
// methods that role uses; what more than one role uses is written once
// here, and each role's method calls it.
type conn struct {
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

func newConn(db *mongo.Database) *conn {
	return &conn{
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

// Stores is each role's store of one database, all three built from one
// connection: what one learns of the server (its kind, whether it takes a
// projection on findAndModify) and the claim candidates it lists, the
// others share. A process that plays several roles (a test, the
// development server) takes them from here.
type Stores struct {
	Node     *NodeStore
	Runner   *RunnerStore
	Operator *OperatorStore
}

// NewStores returns each role's store of a database, from one connection.
func NewStores(db *mongo.Database) Stores {
	c := newConn(db)
	return Stores{Node: (*NodeStore)(c), Runner: (*RunnerStore)(c), Operator: (*OperatorStore)(c)}
}
