// Package devdb runs the embedded development database of `den dev` and of
// the test suite: FerretDB 1.24 with its SQLite backend, in process, behind a
// proxy that forwards one MongoDB wire message at a time.
//
// Why the proxy: FerretDB's findAndModify reads and then writes, so two
// concurrent claims can both "win" the same task (measured: 744 duplicate
// claims out of 944 with 8 claimers). Forwarding one command at a time makes
// every single-document operation atomic, as it is on MongoDB, which is all
// the Disbatch protocol needs. It is a correctness backend for development
// and tests, not a production database: FerretDB scans whole collections.
package devdb
