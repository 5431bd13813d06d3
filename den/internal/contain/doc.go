// Package contain keeps every process a task starts inside that task, and
// stops what is left of a run when it ends or its runner dies.
//
// It owns three mechanisms, each usable alone:
//
//   - The run marker: the environment variable DEN_RUN=<task id>.<run token>,
//     which every process of a run inherits unless it deliberately clears its
//     environment. A node that finds a dead run's leftovers looks for it
//     (together with the process start time), never for a name.
//   - The process tree: Descendants lists a process's descendants from
//     /proc (each thread's children file). With the task runner's
//     supervisor a child subreaper (PR_SET_CHILD_SUBREAPER), orphaned,
//     daemonized and double-forked processes are re-parented to it and
//     stay in its tree. A Tree walks the same way, keeping the /proc files
//     of long-lived processes (the supervisor, its worker) open, for a
//     walk that costs one system call per thread.
//   - Per-run cgroups (cgroup v2, where the node's own cgroup is writable,
//     as under systemd with Delegate=yes): each run gets a cgroup of its own,
//     which no process of the run can leave without privileges, and which is
//     killed as a whole.
//
// Stop is the common ending: SIGTERM, then SIGKILL after the grace time,
// repeated until nothing is found.
package contain
