package command_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.uber.org/zap"

	"github.com/den-project/den/den/dentest"
	"github.com/den-project/den/den/runner"
	"github.com/den-project/den/den/runner/worker"
	"github.com/den-project/den/plugins"
	"github.com/den-project/den/plugins/command"
)

// runExampleTask inserts a command task with parameters params into a
// queue of the command plugin, runs it with policy (the node's command.*
// settings) through a task runner, as a node would once it claimed it,
// and returns the task document.
func runExampleTask(db *mongo.Database, policy command.Policy, params bson.D) bson.Raw {
	ctx := context.Background()
	q, err := db.Collection("queues").InsertOne(ctx, bson.D{{Key: "name", Value: "jobs"},
		{Key: "constructor", Value: command.Name}, {Key: "maxthreads", Value: 1},
		{Key: "count_todo", Value: 1}, {Key: "count_total", Value: 1}})
	if err != nil {
		log.Fatal(err)
	}
	now := time.Now()
	// Inserted as a node's claim leaves it (status -1, its node).
	res, err := db.Collection("tasks").InsertOne(ctx, bson.D{{Key: "queue", Value: q.InsertedID},
		{Key: "status", Value: -1}, {Key: "node", Value: "example-node"}, {Key: "parameters", Value: params},
		{Key: "ctime", Value: now}, {Key: "mtime", Value: now}, {Key: "stdout", Value: nil}, {Key: "stderr", Value: nil}})
	if err != nil {
		log.Fatal(err)
	}
	id := res.InsertedID.(bson.ObjectID)
	cfg, err := json.Marshal(policy)
	if err != nil {
		log.Fatal(err)
	}
	r := &worker.Executor{
		Spec: runner.Spec{Node: "example-node", Task: id.Hex(), Plugin: command.Name, GFS: "auto", PluginConfig: cfg},
		DB:   db, Plugins: plugins.Default(), Log: zap.NewNop(),
	}
	if err := r.Run(ctx); err != nil {
		log.Fatal(err)
	}
	raw, err := db.Collection("tasks").FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Raw()
	if err != nil {
		log.Fatal(err)
	}
	return raw
}

// A task of the command plugin runs a program: its command parameter is
// the program and its arguments. The node's policy (command.* in its
// configuration) says which programs may run and as which user; here
// /usr/bin's, as nobody. The task ends with the program's output and exit
// code (docs/command-plugin.md).
func Example() {
	db, drop := dentest.ExampleDB("Example_command")
	defer drop()
	policy := command.Policy{Enabled: true, User: "nobody", Allow: []string{"/usr/bin/"},
		Landlock: command.LandlockOptional}
	task := runExampleTask(db, policy, bson.D{{Key: "command", Value: bson.A{"/usr/bin/id", "-un"}}})
	fmt.Println("status:", task.Lookup("status").AsInt64())
	fmt.Println("exit_code:", task.Lookup("exit_code").AsInt64())
	fmt.Print("stdout: ", task.Lookup("stdout").StringValue())
	// Output:
	// status: 1
	// exit_code: 0
	// stdout: nobody
}

// A program that exits with a code other than 0 fails its task (status
// 2); exit_code keeps the code and stderr ends with a line that says it.
// A shell line (the shell parameter) runs where the node allows it
// (command.shell).
func Example_shell() {
	db, drop := dentest.ExampleDB("Example_shell")
	defer drop()
	policy := command.Policy{Enabled: true, User: "nobody", Allow: []string{"/bin/sh", "/usr/bin/"}, Shell: true,
		Landlock: command.LandlockOptional}
	task := runExampleTask(db, policy, bson.D{{Key: "shell", Value: "echo converting; echo 'bad input' >&2; exit 3"}})
	stderr := strings.Split(strings.TrimSpace(task.Lookup("stderr").StringValue()), "\n")
	fmt.Println("status:", task.Lookup("status").AsInt64())
	fmt.Println("exit_code:", task.Lookup("exit_code").AsInt64())
	fmt.Print("stdout: ", task.Lookup("stdout").StringValue())
	fmt.Println("stderr:", stderr[0])
	fmt.Println("stderr ends:", stderr[len(stderr)-1])
	// Output:
	// status: 2
	// exit_code: 3
	// stdout: converting
	// stderr: bad input
	// stderr ends: den: /bin/sh exited with code 3
}
