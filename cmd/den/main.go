// Command den is a Disbatch 4 execution node. See README.md, or run
// "den help".
package main

import (
	"fmt"
	"os"

	// Built-in plugins register themselves.
	_ "github.com/den-project/den/plugins/command"
	_ "github.com/den-project/den/plugins/demo"
)

func main() {
	if err := newRootCmd().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "den:", err)
		os.Exit(1)
	}
}
