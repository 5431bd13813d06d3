package main

import (
	"context"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/den-project/den/den/runner"
	"github.com/den-project/den/plugins"
)

func newTaskRunnerCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "task-runner",
		Short:  "Run one claimed task (started by the node, not by hand)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return runTaskRunner()
		},
	}
}

// runTaskRunner is the body of a task runner process. SIGTERM and SIGINT
// ask the plugin to stop; the result is still recorded.
func runTaskRunner() error {
	spec, err := runner.SpecFromEnv()
	if err != nil {
		return err
	}
	format := "console"
	if spec.LogJSON {
		format = "json"
	}
	log, _, err := newLogger("info", format)
	if err != nil {
		return err
	}
	defer log.Sync()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return runner.Main(ctx, spec, plugins.Default(), log)
}
