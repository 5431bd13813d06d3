// Package taskrunner is the entry point of a runner's processes (see
// den/runner for what a runner is). The node starts den's binary as
// "den task-runner" (den/cli/taskrunner.go); tests start their own binary
// the same way (den/dentest/nodetest). Process, in that binary, first
// closes what the process inherited and takes the descriptors meant for
// it, reads its runner.Spec, and then decides which process it is: the
// worker when runner.EnvWorker is set (its supervisor set it), else the
// supervisor (the node started it). It hands over to supervisor.Main or
// worker.Main, and imports nothing else of theirs.
package taskrunner
