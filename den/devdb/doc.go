// Package devdb runs the embedded development database of `den dev` and of
// the test suite: FerretDB 1.24, in process, behind a proxy that forwards
// one MongoDB wire message at a time in each database (commands of
// different databases, such as the suite's tests', run side by side), keeping its data either in a
// PostgreSQL cluster of the data directory's own (postgres.go, with the
// GIN indexes of pgindexes.go) or in SQLite files (server.go chooses).
//
// Why the proxy: FerretDB's findAndModify reads and then writes, so two
// concurrent claims can both "win" the same task (measured: 744 duplicate
// claims out of 944 with 8 claimers). Forwarding one command at a time in
// its database makes every single-document operation atomic, as it is on MongoDB, which is all
// the Disbatch protocol needs.
//
// Why PostgreSQL: FerretDB's sqlite handler pushes down to SQLite only a
// filter that is exactly {_id: ...}, so every other query decodes the whole
// collection, and each task costs more than the one before. Its
// postgresql handler pushes a query's equalities down, which this package's
// indexes serve, and queue.NodeStore asks FerretDB what it can push down
// (candidates for sorted claims, one status at a time): claims, starts and
// finishes stay index lookups as finished tasks pile up
// (docs/performance.md, scripts/scale.sh). It is still a development
// database, not a production one: a few queries (the sweep's search for
// malformed tasks) decode a whole collection, and den paces them.
//
// The PostgreSQL cluster answers den alone: it runs as a user of its own
// (den's, or for root the system user den-devdb; pguser.go) with no
// capability, listens only on a unix socket in a directory of mode 0700,
// and asks every connection for a password den keeps in the data
// directory (pgauth.go); FerretDB listens only on a unix socket of den's,
// so the proxy's port is the only one. A cluster that dies is started
// again, and while it is down the proxy drops its clients' connections,
// so that they see an unreachable database (pgsupervise.go).
//
// A PostgreSQL string cannot hold the character U+0000, so on the
// PostgreSQL engine a write of a string with one is refused
// (InternalError), where MongoDB and the SQLite engine store it.
package devdb
