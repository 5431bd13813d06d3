package cli

import (
	"os"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/den-project/den/den/runner"
	"github.com/den-project/den/den/runner/taskrunner"
	"github.com/den-project/den/plugins"
)

func newTaskRunnerCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "task-runner",
		Short:  "Run claimed tasks (started by the node, not by hand)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return runTaskRunner()
		},
	}
}

// runTaskRunner is the body of a task runner process (its supervisor or
// its worker; see den/runner). SIGTERM and SIGINT stop the run as a cancel
// does; the result is still recorded if the database answers within
// runner.StopRecordFor, and the runner exits either way.
func runTaskRunner() error {
	code := taskrunner.Process(plugins.Default(), func(spec runner.Spec) (*zap.Logger, error) {
		format := "console"
		if spec.LogJSON {
			format = "json"
		}
		log, _, err := newLogger("info", format)
		return log, err
	})
	if code != 0 {
		os.Exit(code)
	}
	return nil
}
