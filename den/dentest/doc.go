// Package dentest gives tests a real MongoDB-compatible server and a
// database of their own.
//
// When DEN_TEST_MONGODB_URI names a MongoDB, tests use it. Otherwise Main
// builds `den` (without -race, so that the server is not slowed down by the
// race detector's instrumentation) and starts `den devdb` once per test
// package, on a free loopback port with its data in a temporary directory:
// FerretDB behind the proxy that runs one write at a time per database,
// making its single-document operations atomic. Nothing is mocked.
//
// Main also lets a test binary act as another process of the system (a
// task runner, a node) when re-executed with DEN_TEST_ROLE set, so tests can
// kill and restart those processes for real.
//
// Faults (faults.go) puts a fault-injecting proxy in front of the server:
// per command name and collection, with a seeded rate or on the Nth
// matching command, it loses replies after the write was applied, answers
// with the errors of a member that is no longer primary, drops
// connections, delays replies, or refuses every command for a stretch as
// a replica set does during an election. Its URI serves any node, task
// runner or CLI command.
package dentest
