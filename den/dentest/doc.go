// Package dentest gives tests a real MongoDB-compatible server and a
// database of their own.
//
// When DEN_TEST_MONGODB_URI names a MongoDB, tests use it. Otherwise Main
// builds `den` (without -race, so that the server is not slowed down by the
// race detector's instrumentation) and starts `den devdb` once per test
// package, on a free loopback port with its data in a temporary directory:
// FerretDB behind the one-command-at-a-time proxy that makes its
// single-document operations atomic. Nothing is mocked.
//
// Main also lets a test binary act as another process of the system (a
// task runner, a node) when re-executed with DEN_TEST_ROLE set, so tests can
// kill and restart those processes for real.
package dentest
