// Command den is a Disbatch 4 execution node. See README.md, or run
// "den help". The command tree is package den/cli.
package main

import (
	"os"

	"github.com/den-project/den/den/cli"

	// Built-in plugins register themselves.
	_ "github.com/den-project/den/plugins/command"
	_ "github.com/den-project/den/plugins/demo"
)

func main() { os.Exit(cli.Main()) }
