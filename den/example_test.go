package den_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.uber.org/zap"

	"github.com/den-project/den/den"
	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/plugins"
	"github.com/den-project/den/queue"
)

// upperPlugin is the plugin name the example's queue uses.
const upperPlugin = "Example::Plugin::Upper"

// A program that embeds den registers its plugins from init, into
// plugins.Default: the task runners, which are this same binary started
// again, then find them too.
func init() {
	plugins.Register(upperPlugin, plugins.Func(func(ctx context.Context, task *queue.Task, env plugins.Env) (int, error) {
		text, _ := task.Parameters.Lookup("text").StringValueOK()
		fmt.Fprintln(env.Stdout, strings.ToUpper(text))
		return plugins.StatusSucceeded, nil
	}))
}

// Embedding a node with a plugin of one's own: den.New with the plugin
// registry, Run until its context ends, and a task of the plugin's queue
// runs in a task-runner process the node starts. The database is the test
// server the package's TestMain starts (dentest.Main). A program of one's
// own leaves Config.Runner empty and serves den's hidden "task-runner"
// subcommand (den/cli does); here the test binary plays the runner, as
// TestMain arranges with dentest.EnvRole.
func Example() {
	db, drop := dentest.ExampleDB("Example_den")
	defer drop()
	ctx := context.Background()

	store := queue.NewStore(db)
	qid, err := store.CreateQueue(ctx, "shout", upperPlugin, 1, queue.SortFIFO)
	if err != nil {
		log.Fatal(err)
	}
	params, _ := bson.Marshal(bson.D{{Key: "text", Value: "hello from den"}})
	ids, err := store.InsertTasks(ctx, qid, []bson.Raw{params}, time.Now(), queue.InsertOptions{})
	if err != nil {
		log.Fatal(err)
	}

	dir, err := os.MkdirTemp("", "den-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	exe, err := os.Executable()
	if err != nil {
		log.Fatal(err)
	}
	cfg := den.Config{
		Name:     "example-node",
		URI:      dentest.URI(), // handed to the runners
		Database: db.Name(),
		Interval: 100 * time.Millisecond,
		Runner: den.RunnerCommand{
			Path:     exe,
			Env:      []string{dentest.EnvRole + "=task-runner"},
			Log:      filepath.Join(dir, "runners.log"),
			MaxTasks: 1, // a runner per task: none is left waiting for a next one
		},
		// Wait for the runners on the way out, for an example that
		// drops its database next; den run leaves them to finish.
		DrainOnStop: time.Minute,
	}
	node, err := den.New(cfg, db, plugins.Default(), zap.NewNop(), nil)
	if err != nil {
		log.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- node.Run(runCtx) }()

	// Wait for the task to finish; the test binary's deadline catches a
	// hang, it does not measure speed.
	var task *queue.Task
	if !dentest.Until(50*time.Millisecond, func() bool {
		if task, err = store.Task(ctx, ids[0]); err != nil {
			log.Fatal(err)
		}
		return task.StatusOK && queue.Finished(task.Status)
	}) {
		log.Fatalf("task still %d at the test binary's deadline", task.Status)
	}
	stop()
	if err := <-done; err != nil {
		log.Fatal(err)
	}
	stdout, _, err := task.Output(queue.StreamStdout)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("status %d (%s) on %s\n", task.Status, queue.StatusName(task.Status), task.Node)
	fmt.Print("stdout: ", stdout)
	// Output:
	// status 1 (succeeded) on example-node
	// stdout: HELLO FROM DEN
}
