package plugintest_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/den-project/den/plugins"
	"github.com/den-project/den/plugins/plugintest"
	"github.com/den-project/den/queue"
)

// A plugin written as a function, run on one task.
func Example() {
	shout := plugins.Func(func(ctx context.Context, task *queue.Task, env plugins.Env) (int, error) {
		var params struct {
			Words string `bson:"words"`
		}
		if err := task.DecodeParameters(&params); err != nil {
			return plugins.StatusFailed, err
		}
		io.WriteString(env.Stdout, params.Words+"!\n")
		return plugins.StatusSucceeded, env.Record("length", len(params.Words))
	})

	ctx := context.Background()
	srv, err := plugintest.Start(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	res, err := srv.Run(ctx, shout, bson.D{{Key: "words", Value: "hello"}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(res.Status, " ", res.Stdout)
	fmt.Println(res.Records)
	// Output:
	// 1 hello!
	// map[length:5]
}

// greeter is a plugin written as a type: it greets the task's name
// parameter with the greeting its configuration section gives.
type greeter struct{}

func (greeter) Run(ctx context.Context, task *queue.Task, env plugins.Env) (int, error) {
	conf := struct {
		Greeting string `json:"greeting"`
	}{Greeting: "Hello"}
	if err := env.Config(&conf); err != nil {
		return plugins.StatusFailed, err
	}
	name, ok := task.Parameters.Lookup("name").StringValueOK()
	if !ok {
		return plugins.StatusFailed, fmt.Errorf("parameter name is missing or not a string")
	}
	fmt.Fprintf(env.Stdout, "%s, %s\n", conf.Greeting, name)
	return plugins.StatusSucceeded, env.Record("greeted", name)
}

// Testing a plugin's success and its failure against one Server: its
// configuration section is given as den's configuration file would give
// it (plugins: {MyCorp::Plugin::Greet: {greeting: Welcome}}), and an error
// the plugin returns fails the task, with the error's text at the end of
// its stderr.
func ExampleServer_Run() {
	ctx := context.Background()
	srv, err := plugintest.Start(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()

	res, err := srv.Run(ctx, greeter{}, bson.D{{Key: "name", Value: "Ada"}},
		plugintest.Name("MyCorp::Plugin::Greet"),
		plugintest.Config(map[string]string{"greeting": "Welcome"}))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("status %d, stdout %q, greeted %v\n", res.Status, res.Stdout, res.Records["greeted"])

	res, err = srv.Run(ctx, greeter{}, bson.D{{Key: "name", Value: 42}})
	if err != nil {
		log.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(res.Stderr), "\n")
	fmt.Printf("status %d (%s), stderr ends: %s\n", res.Status, queue.StatusName(res.Status), lines[len(lines)-1])
	// Output:
	// status 1, stdout "Welcome, Ada\n", greeted Ada
	// status 2 (failed), stderr ends: den: plugin returned an error: parameter name is missing or not a string
}

// A task's own control fields apply as on a node: with timeout set to 1
// (second) on the task, a plugin that waits for its context is stopped and
// the task fails as timed out.
func ExampleField() {
	wait := plugins.Func(func(ctx context.Context, task *queue.Task, env plugins.Env) (int, error) {
		<-ctx.Done()
		return plugins.StatusFailed, ctx.Err()
	})

	ctx := context.Background()
	srv, err := plugintest.Start(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()
	res, err := srv.Run(ctx, wait, nil, plugintest.Field("timeout", 1))
	if err != nil {
		log.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(res.Stderr), "\n")
	fmt.Printf("status %d (%s), timed_out %v\n", res.Status, queue.StatusName(res.Status), res.Task.Lookup("timed_out"))
	fmt.Println("stderr ends:", lines[len(lines)-1])
	// Output:
	// status 2 (failed), timed_out true
	// stderr ends: den: task timed out after 1s and was stopped
}
