package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/den-project/den/den/internal/human"
	"github.com/den-project/den/den/internal/timerslack"
	"github.com/den-project/den/den/sandbox"
)

// Exit codes of every den command, for scripts.
const (
	ExitOK    = 0 // done; for den counts check: no drift
	ExitError = 1 // an operational error (MongoDB unreachable, no such task, drift found by den counts check)
	ExitUsage = 2 // the command line is wrong: unknown command or flag, bad argument or value, a configuration refused, a confirmation refused
	ExitHeld  = 3 // den task add --unique-key: an unfinished task of the queue holds the key; nothing was added
)

// Main runs den with the process's arguments and returns the exit status
// for os.Exit. Call it first thing in main: a program the command plugin
// starts passes through here first to enter its sandbox (see den/sandbox).
func Main() int {
	sandbox.Main()
	if len(os.Args) == 2 && os.Args[1] == "task-runner" {
		// As a node starts each runner: no command tree to build (its
		// flags and help cost a millisecond of each runner's start).
		if err := runTaskRunner(); err != nil {
			fmt.Fprintln(os.Stderr, "den:", err)
			return ExitError
		}
		return ExitOK
	}
	if subcommand(os.Args[1:]) == "run" {
		// Here, not in the command: tests run commands in their own
		// process. The node and the runners it starts run with den's
		// timer slack (den/internal/timerslack), which takes executing
		// this binary again, once, before anything is read.
		slackErr = timerslack.Reexec()
		// A node waits on MongoDB and on its runners nearly all the time:
		// one P unless the environment sets GOMAXPROCS. With more, each
		// goroutine that wakes (a reply, a runner's message, a relayed
		// command: a dozen per task) makes the runtime wake another
		// thread to look for work, which finds none: on 2 cores that was
		// a sixth to a quarter of the node's CPU per task (BenchmarkCPU).
		// One core runs a node's Go code at several hundred tasks a
		// second; GOMAXPROCS=N gives it more.
		if os.Getenv("GOMAXPROCS") == "" {
			runtime.GOMAXPROCS(1)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
}

// slackErr is why `den run` could not raise its timer slack (Main); the
// node logs it as a warning.
var slackErr error

// subcommand is the command a command line names: its first argument
// that is not a flag.
func subcommand(args []string) string {
	for _, a := range args {
		if !strings.HasPrefix(a, "-") {
			return a
		}
	}
	return ""
}

// run runs one command line with the given standard streams and returns
// its exit status. Errors are printed to stderr, prefixed "den: ".
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRootCmd()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	wrapArgs(root)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return ExitOK
	}
	// An error may quote a queue name, a reason or a value from the
	// database: escaped, lines kept.
	fmt.Fprintln(stderr, "den:", human.EscapeText(err.Error()))
	var ue usageError
	if errors.As(err, &ue) {
		return ExitUsage
	}
	var ee exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return ExitError
}

// unknownCommand is the usage error for a word a group does not know, with
// cobra's suggestions and the group's usage.
func unknownCommand(group *cobra.Command, word string) error {
	msg := fmt.Sprintf("unknown command %q for %q", word, group.CommandPath())
	if group.SuggestionsMinimumDistance <= 0 {
		group.SuggestionsMinimumDistance = 2 // cobra's own default, set only on its own path
	}
	if s := group.SuggestionsFor(word); len(s) > 0 {
		msg += "\n\nDid you mean this?\n\t" + strings.Join(s, "\n\t")
	}
	return usagef("%s\n\n%s", msg, strings.TrimRight(group.UsageString(), "\n"))
}

// usageError is a mistake on the command line: exit status 2.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// exitError carries a chosen exit status with its message.
type exitError struct {
	code int
	error
}

// wrapArgs makes every command's argument check a usage error, and every
// group of commands (den, den queue, ...) refuse a word it does not know:
// `den queue purge demo` exits 2 with den queue's usage on stderr, so that
// a script's `den queue purge X && deploy` stops. A group given no word
// prints its help on stdout and exits 0, as --help does.
func wrapArgs(c *cobra.Command) {
	if c.HasSubCommands() && !c.Runnable() {
		c.Args = cobra.ArbitraryArgs
		c.RunE = func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return cmd.Help()
			}
			return unknownCommand(cmd, args[0])
		}
	}
	if check := c.Args; check != nil {
		c.Args = func(cmd *cobra.Command, args []string) error {
			if err := check(cmd, args); err != nil {
				return usageError{err}
			}
			return nil
		}
	}
	for _, sub := range c.Commands() {
		wrapArgs(sub)
	}
}
