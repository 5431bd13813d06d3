// Package command is Disbatch::Plugin::Command: it runs an external program
// as a task, so that a queue can run programs without Go code.
//
// Parameters of a task:
//
//	command: ["/usr/bin/convert", "in.png", "out.jpg"]   // argv (required, unless shell)
//	shell:   "make -C /srv/build all"                     // instead of command: run by /bin/sh -c (only if the node allows shell)
//	dir:     "/srv/build"                                  // working directory (optional)
//	env:     {LANG: "C.UTF-8"}                             // environment variables to set (optional)
//	stdin:   "text"                                        // standard input (optional; default empty)
//
// Exit 0 is status 1; any other exit is status 2 with exit_code recorded in
// the task; death by a signal is status 2 with signal recorded and named in
// stderr. Output streams to storage as the program writes it.
//
// Security: anyone who can write to the tasks collection could run programs
// on every node, so the plugin is off unless the node's configuration
// enables it (a node with it off does not serve its queues). The task's
// program must be allowed (command.allow: files, or directories at any
// depth; symbolic links resolved), and the program and everything it starts
// run inside an execute boundary the kernel enforces (Landlock, see
// den/sandbox): they can execute only what command.allow allows, plus the
// dynamic loader, with no_new_privs set. Where the kernel has no Landlock
// the plugin stays off unless command.landlock is optional. The program
// does not inherit the runner's environment, except the variables
// command.env lists; a task may set only the variables command.env_allow
// lists, and never DEN_*. The program gets no descriptor but 0, 1 and 2,
// cannot make a memfd (seccomp), and may have at most max_processes
// processes and threads. It runs as command.user (never root, never den's
// own user; without the capabilities to change user the plugin stays off
// unless command.user_optional), with a temporary directory of its own
// (TMPDIR, and where den may make namespaces its /tmp, /var/tmp and
// /dev/shm, every other mount noexec but what it may execute, which closes
// the dynamic loader as a way round the allowlist), cannot signal or reach
// the abstract sockets of processes outside its sandbox, and connects over
// TCP only as command.network allows (den/sandbox; docs/security.md says
// where each holds). A refused task fails with the reason in stderr.
//
// Node configuration (den YAML):
//
//	command:
//	  enabled: true
//	  allow: [/usr/local/bin/jobs/, /usr/bin/rsync]
//	  shell: false            # allow the shell parameter (/bin/sh must be allowed too)
//	  env: [PATH, LANG]       # inherited from the node's environment
//	  env_allow: [LC_*, JOBS_] # what tasks may set: names, or prefixes ending in * or _
//	  landlock: required      # or optional
//	  user: den-task          # the user tasks run as (a name, or uid:gid)
//	  user_optional: false    # true: run as den's own user where den may not change user
//	  shared_tmp: false       # true: tasks keep the node's /tmp
//	  shared_pids: false      # true: tasks keep the node's PID namespace and /proc
//	  tmp_mb: 1024            # each task's temporary directory, a tmpfs; 0: on the node's disk
//	  memory_mb: 2048         # each task's memory (more where it requests more); 0: no limit
//	  network: all            # none, or a list of TCP ports
package command
