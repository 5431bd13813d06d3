// Package timerslack gives den's own long-running processes, a node and
// the task runners it starts, a timer slack of Slack (1 ms), and gives the
// tasks' programs back the timer slack the node was started with.
//
// Why: every Go process has a monitor thread (sysmon) that, whenever the
// process is busy after a system call woke it, polls every 20 µs for the
// first millisecond. A node and its runners are busy in many short bursts
// per task (a message, a command, a reply), so each burst paid a dozen
// timer wakeups of that thread: on the 2-core development VM, where a
// timer wakeup costs several microseconds of CPU, that was about a fifth
// of den's CPU per task (BenchmarkCPU). With a slack of 1 ms the kernel
// may fire such a timer up to 1 ms late, so the monitor wakes about once
// per burst. den's own timers (a pass per second, beats every few
// seconds, 50 ms polls while stopping a run) do not need more precision.
//
// How: a thread's timer slack is inherited by the threads it creates (the
// runtime's monitor is created from the first thread) and kept across
// execve, so `den run` sets it on its thread and executes itself again
// once (Reexec), and the runners it starts inherit it. The slack the node
// was started with travels in EnvOriginal, and den's sandbox sets it back
// on the thread that executes a task's program (Restore), so programs run
// with the node's own slack, as before. A program an in-process plugin
// starts itself (not through den/sandbox, as the command plugin does)
// inherits Slack.
package timerslack
