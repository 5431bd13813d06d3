// Package plugintest runs a plugin in a Go test the way den runs it, against
// a real database: parameters in; status, stdout, stderr and the fields the
// plugin recorded out.
//
// Start starts den's embedded development server (FerretDB behind den's
// proxy running one write at a time per database, package den/devdb) in the test process, with
// its data in a temporary directory, or uses the MongoDB named by
// DEN_TEST_MONGODB_URI; each Server works in a database of its own, dropped
// by Close. Run puts a queue and a claimed task in it and runs the task
// with den's task runner code (package den/runner): output storage (in the
// task document or GridFS), max_output, timeouts, the status rules, Record
// and Config behave as on a node. The plugin runs in the test process, not
// in a task-runner process of its own, so a plugin that starts programs is
// not contained as on a node.
//
// The package works from any module that requires
// github.com/den-project/den: it uses no test-only code of den's.
package plugintest
