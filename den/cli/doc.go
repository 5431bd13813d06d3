// Package cli is den's command line: the cobra command tree of the den
// binary (run, dev, devdb, output, the hidden task-runner, and the operator
// commands). Main builds it and runs it with the process's arguments; it is
// what cmd/den calls, and what a plugin author's own main package calls
// after importing its plugins, so that their binary is den with their
// plugins registered:
//
//	func main() { os.Exit(cli.Main()) }
//
// Files: main.go (Main and exit codes), root.go (the command tree), run.go
// (den run), dev.go and devdb.go (the embedded development database),
// output.go (den output), taskrunner.go (the task runner process),
// connect.go, logging.go.
package cli
