package cli

import (
	"github.com/spf13/cobra"
)

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "den",
		Short: "den is a Disbatch 4 execution node",
		Long: `den is a Disbatch 4 execution node: it claims tasks from the queues in a
MongoDB database, runs each in a task runner process with the plugin its
queue names, and records status, stdout and stderr the way Disbatch does.

  den dev                     run a node on an embedded development database
  den run --config FILE       run a node against MongoDB (the systemd service)`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newRunCmd(), newDevCmd(), newDevDBCmd(), newOutputCmd(), newTaskRunnerCmd())
	return root
}
