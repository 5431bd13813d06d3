package queue_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/queue"
)

// A queue's life as the protocol writes it: a queue is created, tasks are
// inserted into it (as a user would from the mongo shell), and a node
// claims them one at a time, oldest first in a fifo queue, with a single
// findOneAndUpdate each. The operator and the node each hold their own
// store of the same database. The database is the test server the
// package's TestMain starts (dentest.Main).
func ExampleNodeStore_Claim() {
	db, drop := dentest.ExampleDB("ExampleNodeStore_Claim")
	defer drop()
	ctx := context.Background()
	ops := queue.NewStore(db)
	node := queue.NewStore(db)

	qid, err := ops.CreateQueue(ctx, "resize", "MyCorp::Plugin::Resize", 2, queue.SortFIFO)
	if err != nil {
		log.Fatal(err)
	}
	var params []bson.Raw
	for _, file := range []string{"a.jpg", "b.jpg", "c.jpg"} {
		p, err := bson.Marshal(bson.D{{Key: "file", Value: file}})
		if err != nil {
			log.Fatal(err)
		}
		params = append(params, p)
	}
	if _, err := ops.InsertTasks(ctx, qid, params, time.Now(), queue.InsertOptions{}); err != nil {
		log.Fatal(err)
	}

	for range 2 {
		c, ok, err := node.Claim(ctx, queue.ClaimRequest{
			Queues: []bson.ObjectID{qid},
			Sort:   queue.SortFIFO,
			Node:   "node-1",
			At:     time.Now(),
		})
		if err != nil || !ok {
			log.Fatal("claim: ", ok, err)
		}
		task, err := node.Task(ctx, c.ID)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("claimed %s: status %d (%s), node %s\n",
			task.Parameters.Lookup("file").StringValue(), task.Status, queue.StatusName(task.Status), task.Node)
	}

	counts, err := ops.TaskCounts(ctx, qid)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("claimed:", counts[qid].ByStatus[queue.StatusClaimed], "queued:", counts[qid].ByStatus[queue.StatusQueued])
	// Output:
	// claimed a.jpg: status -1 (claimed), node node-1
	// claimed b.jpg: status -1 (claimed), node node-1
	// claimed: 2 queued: 1
}
