#!/usr/bin/env bash
# Measures what the relay (runner.relay) saves the server: runs 100
# Test::Sleep tasks at once (maxthreads 100, one runner each) on the
# embedded server with the relay on, then off, and prints what the server
# saw (BenchmarkRelayConnections in den/relay_bench_test.go): connections
# accepted while the tasks ran, the most open at once, handshakes,
# endSessions, and the seconds from insert to the last finish.
# DEN_BENCH_SLEEP_MS sets how long each task sleeps (default 20000); COUNT
# the runs of each (default 1). docs/performance.md has the numbers.
set -euo pipefail
cd "$(dirname "$0")/.."
go test -run '^$' -bench 'BenchmarkRelayConnections' -benchtime 1x -count "${COUNT:-1}" -timeout 60m ./den/
