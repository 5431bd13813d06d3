// Package demo is Disbatch::Plugin::Demo, the plugin every Disbatch
// installation has for trying a queue out, with the Perl plugin's behaviour:
//
// The task parameter commands is a string of one-letter commands, "*"
// meaning "abc". In order:
//
//	a  stdout: "This is command 'a' for apple.\n"
//	b  stderr: "This is command 'b' for banana.\n" (an error, but the task still succeeds)
//	c  stderr: "This is command 'c' for cry.\n"; the task fails with status 2 and stops there
//	1 7 8 e   stdout: 1, 7, 8 or 15 MiB of that character (for trying GridFS)
//	A B C E   stderr: the same sizes
//
// Each task writes a document in the reports collection: task_id, attempt
// (the task's attempts: 0 on its first run), queue_id, counter (the
// parameter of that name, or null), commands, started and completed (epoch
// seconds), errors (a count), status ("SUCCESS" or "FAILED") and, for c,
// error. The parameter noreport: true skips it. The write is an upsert
// keyed by task_id and attempt, tried again after a fault a failover
// causes (a dropped connection, a primary that stepped down): a report
// whose reply was lost after it landed is left once.
package demo
