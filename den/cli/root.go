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
  den run --config FILE       run a node against MongoDB (the systemd service)

The operator commands (queue, task, output, node, status, counts, config)
work against any database: --config FILE, or --mongo-uri URI and
--database NAME, or DEN_MONGO_URI and DEN_DATABASE, as den run reads them.
They print tables, or JSON with --json.

Exit status: 0 done; 1 an operational error (MongoDB unreachable, no such
task or queue, drift found by den counts check); 2 a usage error (unknown
command or flag, bad value, a confirmation that was refused or impossible).`,
		Version:       version(),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetVersionTemplate("den {{.Version}}\n")
	root.AddCommand(newRunCmd(), newDevCmd(), newDevDBCmd(), newOutputCmd(), newTaskRunnerCmd(),
		newQueueCmd(), newTaskCmd(), newScheduleCmd(), newNodeCmd(), newStatusCmd(), newCountsCmd(), newVersionCmd(), newConfigCmd(), newWebCmd())
	return root
}
