// Command den is a Disbatch 4 execution node. See README.md, or run
// "den help".
package main

import (
	"fmt"
	"os"

	"github.com/den-project/den/den/sandbox"

	// Built-in plugins register themselves.
	_ "github.com/den-project/den/plugins/command"
	_ "github.com/den-project/den/plugins/demo"
)

func main() {
	// A program the command plugin starts passes through here first, to
	// enter its sandbox; see den/sandbox. For anything else it returns.
	sandbox.Main()
	if err := newRootCmd().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "den:", err)
		os.Exit(1)
	}
}
