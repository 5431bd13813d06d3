// Package greet is a den plugin: it greets the name in a task's parameters.
package greet

import (
	"context"
	"fmt"

	"github.com/den-project/den/plugins"
	"github.com/den-project/den/queue"
)

// Name is the plugin name queues give in constructor (or plugin).
const Name = "MyCorp::Plugin::Greet"

func init() { plugins.Register(Name, Plugin{}) }

// Plugin greets.
type Plugin struct{}

// Run greets the task's name parameter, with the greeting of the node's
// configuration (plugins: {MyCorp::Plugin::Greet: {greeting: Welcome}}).
func (Plugin) Run(ctx context.Context, task *queue.Task, env plugins.Env) (int, error) {
	var params struct {
		Name string `bson:"name"`
	}
	if err := task.DecodeParameters(&params); err != nil {
		return plugins.StatusFailed, err
	}
	if params.Name == "" {
		fmt.Fprintln(env.Stderr, "greet: the task has no name parameter")
		return plugins.StatusFailed, nil
	}
	config := struct {
		Greeting string `json:"greeting"`
	}{Greeting: "Hello"}
	if err := env.Config(&config); err != nil {
		return plugins.StatusFailed, err
	}
	fmt.Fprintf(env.Stdout, "%s, %s!\n", config.Greeting, params.Name)
	// Recorded in the task document, next to status, stdout and stderr.
	if err := env.Record("greeted", params.Name); err != nil {
		return plugins.StatusFailed, err
	}
	return plugins.StatusSucceeded, nil
}
