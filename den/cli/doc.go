// Package cli is den's command line: the cobra command tree of the den
// binary (run, dev, devdb, output, the hidden task-runner, and the operator
// commands). Main builds it and runs it with the process's arguments; it is
// what cmd/den calls, and what a plugin author's own main package calls
// after importing its plugins, so that their binary is den with their
// plugins registered:
//
//	func main() { os.Exit(cli.Main()) }
//
// The operator commands (queue, task, output, node, status, counts)
// connect as den run does (config.Load: --config, DEN_*, --mongo-uri,
// --database) and do everything through queue.OperatorStore; queue
// settings given as key=value are read by den/cli/queueset. This package
// names no document field. They print tables, or JSON with --json,
// and exit 0 (done), 1 (operational error) or 2 (usage error).
//
// Files: main.go (Main, exit codes), root.go (the command tree), common.go
// (connection, tables, JSON, confirmation), run.go (den run), dev.go and
// devdb.go (the embedded development database), taskrunner.go (the task
// runner process), queue.go, pause.go (den queue pause and resume), task.go,
// why.go (den task why, and the reasons den task show and den status
// give), output.go, node.go, status.go,
// counts.go, version.go, configcmd.go (the operator commands), web.go (den web, serving package den/web), connect.go,
// logging.go.
package cli
