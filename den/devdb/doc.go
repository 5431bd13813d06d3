// Package devdb runs the embedded development database of `den dev` and of
// the test suite: FerretDB 1.24, in process, behind a proxy that forwards
// one write at a time in each database, and every read beside them
// (commands of different databases, such as the suite's tests', run side
// by side), keeping its data either in a PostgreSQL cluster of the data
// directory's own (postgres.go, with the GIN indexes of pgindexes.go) or
// in SQLite files (server.go chooses).
//
// Why the proxy: FerretDB's findAndModify reads and then writes, so two
// concurrent claims can both "win" the same task (measured: 744 duplicate
// claims out of 944 with 8 claimers). Forwarding one write at a time in its
// database makes every single-document operation atomic, as it is on
// MongoDB, which is all the Disbatch protocol needs. A read changes
// nothing, so it takes no lock (readonly.go): it neither waits behind the
// writes nor holds them up, and sees each document as some write left it,
// as a read on MongoDB does.
//
// Why PostgreSQL: FerretDB's sqlite handler pushes down to SQLite only a
// filter that is exactly {_id: ...}, so every other query decodes the whole
// collection, and each task costs more than the one before. Its
// postgresql handler pushes a query's equalities down, which this package's
// indexes serve, and queue.NodeStore asks FerretDB what it can push down
// (candidates for sorted claims, one status at a time): claims, starts and
// finishes stay index lookups as finished tasks pile up
// (docs/performance.md, scripts/scale.sh).
//
// The fast paths (fastpath.go), on the PostgreSQL engine: what FerretDB
// cannot push down (a sort, a limit with a filter, an $in, a range, a
// $group) it answers by decoding every document of the collection, so the
// reads of den's views cost what the tasks kept cost. The proxy answers
// these itself, for the tasks collection:
//
//   - a page of a list (fastfind.go): a find sorted on _id, or unsorted,
//     with a limit (skip and limit at most 1,000), a filter of paths
//     compared with scalars or null ($eq, $ne, $gt, $gte, $lt, $lte, $in,
//     $nin, $exists, $type, $and, $or) and a projection that only includes or
//     only excludes: PostgreSQL lists the candidates in _id order from
//     btree indexes on queue, status and node (pgfast.go), with a WHERE
//     that holds for every match; those it decides match are read from
//     their _jsonb as FerretDB reads them (sjson.go), the others by
//     FerretDB itself, by _id with the whole filter;
//   - counts (fastcount.go): count, and aggregate [$match?, $group by
//     queue, status and node fields or a constant, {$sum: 1}] (and the
//     driver's countDocuments), with a filter on those fields only, from a
//     tally PostgreSQL triggers keep in the same transaction as every write;
//     the same aggregates with a filter on other fields are grouped from
//     their matches, read as a page is, when they are few (fastgroup.go).
//
// Their answers are FerretDB's, byte for byte, except for orders no
// command asks for: an unsorted find's documents come in _id order
// (FerretDB's in PostgreSQL's physical order: with a limit, which
// documents may differ; MongoDB promises no order either), and a $group's
// groups in the order of their keys. Anything they cannot decide exactly
// (documents of other _id types that may match, values the tally does not
// keep, a group of equal numbers of different types, a first batch that
// would be full short of its limit) goes to FerretDB as it was sent
// (docs/development.md). A first batch that holds its whole limit
// closes its cursor, as MongoDB does (FerretDB leaves it open).
//
// It is still a development database, not a production one: the reads
// the fast paths leave to FerretDB (the sweep's search for malformed
// tasks, a search on a field no index narrows) decode a whole collection,
// and den paces them.
//
// The PostgreSQL cluster answers den alone: it runs as a user of its own
// (den's, or for root the system user den-devdb; pguser.go) with no
// capability, listens only on a unix socket in a directory of mode 0700,
// and asks every connection for a password den keeps in the data
// directory (pgauth.go); FerretDB listens only on a unix socket of den's,
// so the proxy's port is the only one. A cluster that dies is started
// again, and while it is down the proxy drops its clients' connections,
// so that they see an unreachable database (pgsupervise.go); before
// commands pass again, FerretDB is run anew, so that it forgets the
// collections a crash may have lost with its last commits (ferret.go).
//
// A PostgreSQL string cannot hold the character U+0000, so on the
// PostgreSQL engine a write of a string with one is refused
// (InternalError), where MongoDB and the SQLite engine store it.
package devdb
