// Command myden is den with the plugins of this module built in.
package main

import (
	"os"

	"github.com/den-project/den/den/cli"

	_ "example.com/myplugin/greet" // registers MyCorp::Plugin::Greet
)

func main() { os.Exit(cli.Main()) }
