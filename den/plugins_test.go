package den_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/den-project/den/plugins"
	"github.com/den-project/den/queue"
)

// Test::Sleep sleeps parameters.ms milliseconds. It records each run in the
// runs collection (to prove every task runs exactly once), and how many of
// its tasks run at once per queue and node and per node, in the
// concurrency collection (to prove limits hold). With parameters.ready (a
// directory) it creates a file named after the task there once those
// writes are done and answered, just before it sleeps.
const sleepPlugin = "Test::Sleep"

// Test::Flaky fails (status 2) until parameters.succeed_on attempts have
// been made, then succeeds; each run is recorded in runs.
const flakyPlugin = "Test::Flaky"

func init() {
	plugins.Register(sleepPlugin, plugins.Func(sleepRun))
	plugins.Register(flakyPlugin, plugins.Func(flakyRun))
}

func flakyRun(ctx context.Context, t *queue.Task, env plugins.Env) (int, error) {
	var p struct {
		SucceedOn int `bson:"succeed_on"`
	}
	if err := t.DecodeParameters(&p); err != nil {
		return 2, err
	}
	attempts, _ := t.Raw.Lookup("attempts").AsInt64OK()
	_, err := env.DB.Collection("runs").InsertOne(ctx, bson.D{{Key: "task_id", Value: t.ID}, {Key: "attempt", Value: attempts + 1}, {Key: "started", Value: time.Now()}})
	if err != nil {
		return 2, err
	}
	if int(attempts)+1 < p.SucceedOn {
		fmt.Fprintf(env.Stderr, "attempt %d fails\n", attempts+1)
		return 2, nil
	}
	fmt.Fprintf(env.Stdout, "attempt %d succeeds\n", attempts+1)
	return 1, nil
}

func sleepRun(ctx context.Context, t *queue.Task, env plugins.Env) (int, error) {
	var p struct {
		MS    int    `bson:"ms"`
		Ready string `bson:"ready"`
	}
	if err := t.DecodeParameters(&p); err != nil {
		return 2, err
	}
	seq, err := bump(ctx, env.DB, "sequence", 1)
	if err != nil {
		return 2, err
	}
	keys := []string{fmt.Sprintf("queue:%s:%s", t.Queue.Hex(), t.Node), "node:" + t.Node, "queue:" + t.Queue.Hex()}
	for _, k := range keys {
		if _, err := bump(ctx, env.DB, k, 1); err != nil {
			return 2, err
		}
	}
	if p.Ready != "" {
		if err := os.WriteFile(filepath.Join(p.Ready, t.ID.Hex()), nil, 0o644); err != nil {
			return 2, err
		}
	}
	started := time.Now()
	select {
	case <-time.After(time.Duration(p.MS) * time.Millisecond):
	case <-ctx.Done():
	}
	for _, k := range keys {
		if _, err := bump(context.WithoutCancel(ctx), env.DB, k, -1); err != nil {
			return 2, err
		}
	}
	_, err = env.DB.Collection("runs").InsertOne(ctx, bson.D{
		{Key: "task_id", Value: t.ID}, {Key: "node", Value: t.Node}, {Key: "seq", Value: seq},
		{Key: "started", Value: started}, {Key: "ended", Value: time.Now()},
	})
	if err != nil {
		return 2, err
	}
	io.WriteString(env.Stdout, "slept\n")
	return 1, nil
}

// bump adds by to a counter and raises its recorded peak; it returns the
// new value.
func bump(ctx context.Context, db *mongo.Database, key string, by int) (int64, error) {
	coll := db.Collection("concurrency")
	raw, err := coll.FindOneAndUpdate(ctx, bson.D{{Key: "_id", Value: key}},
		bson.D{{Key: "$inc", Value: bson.D{{Key: "now", Value: by}}}},
		options.FindOneAndUpdate().SetUpsert(true).SetReturnDocument(options.After)).Raw()
	if err != nil {
		return 0, err
	}
	now, _ := raw.Lookup("now").AsInt64OK()
	peak, _ := raw.Lookup("peak").AsInt64OK()
	if now > peak {
		_, err = coll.UpdateOne(ctx, bson.D{{Key: "_id", Value: key}, {Key: "$or", Value: bson.A{
			bson.D{{Key: "peak", Value: bson.D{{Key: "$lt", Value: now}}}}, bson.D{{Key: "peak", Value: nil}},
		}}}, bson.D{{Key: "$set", Value: bson.D{{Key: "peak", Value: now}}}})
	}
	return now, err
}
