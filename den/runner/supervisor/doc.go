// Package supervisor is the first of a runner's two processes (see
// den/runner for what a runner is): the one the node starts. Main starts
// the worker, reaps every child it is given (a child subreaper), answers
// the worker's requests on the control channel (den/runner/control.go),
// stops a run's processes, and kills a worker that does not stop when
// asked. It holds no database connection and runs no plugin code.
//
// Files:
//   - supervisor.go: Main: start the worker (prepareFirstRun, workerAttr,
//     startWorker), then serve its requests and signals until it exits
//     (serve), then finish;
//   - decisions.go: what that loop decides, as pure functions a table test
//     covers (signalAction, exitOf, ...);
//   - control.go: the supervisor's state and its answers to the worker
//     (handle, begin, idle), and stopping a run's leftovers;
//   - usage.go: measures a run (CPU exactly, memory sampled);
//   - memory.go: enforces a run's memory request.
//
// "Run" here is one task's run, from the worker's "begin" to its "idle";
// "runner" is the pair of processes this one leads.
package supervisor
