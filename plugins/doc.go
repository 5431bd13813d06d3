// Package plugins is where task handlers register, by the plugin name a
// queue names in its constructor (or plugin) field, for example
// "Disbatch::Plugin::Demo".
//
// A plugin package registers itself from init, the way database/sql drivers
// do, and a program enables it with a blank import:
//
//	import _ "github.com/den-project/den/plugins/demo"
//
// A plugin built outside den's repository lives in a module of its own,
// whose main.go imports its plugin packages and calls cli.Main (package
// den/cli); see testdata/outside-plugin and docs/plugins.md.
//
// What a plugin gets and gives: the status constants StatusSucceeded and
// StatusFailed; an Env with the task's output writers, the database, a
// logger, and the methods Record (a field of the task document, refused
// with an error for ReservedFields) and Config (its section of the node's
// configuration file, plugins: {<name>: {...}}). Package plugintest runs a
// plugin in a Go test.
//
// The node and the task runner look plugins up in a *Registry they are
// given; Default is the registry that init functions fill.
package plugins
