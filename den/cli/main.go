package cli

import (
	"fmt"
	"os"

	"github.com/den-project/den/den/sandbox"
)

// Main runs den with the process's arguments and returns the exit status
// for os.Exit. Call it first thing in main: a program the command plugin
// starts passes through here first to enter its sandbox (see den/sandbox).
func Main() int {
	sandbox.Main()
	if err := newRootCmd().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "den:", err)
		return 1
	}
	return 0
}
