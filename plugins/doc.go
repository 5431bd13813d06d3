// Package plugins is where task handlers register, by the plugin name a
// queue names in its constructor (or plugin) field, for example
// "Disbatch::Plugin::Demo".
//
// A plugin package registers itself from init, the way database/sql drivers
// do, and a program enables it with a blank import:
//
//	import _ "github.com/den-project/den/plugins/demo"
//
// The node and the task runner look plugins up in a *Registry they are
// given; Default is the registry that init functions fill.
package plugins
