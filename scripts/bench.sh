#!/usr/bin/env bash
# Runs den's benchmarks: claim throughput and GridFS streaming, against the
# embedded server (or DEN_TEST_MONGODB_URI). Compare runs with benchstat:
#   scripts/bench.sh > old.txt; ...; scripts/bench.sh > new.txt
#   go run golang.org/x/perf/cmd/benchstat@latest old.txt new.txt
set -euo pipefail
cd "$(dirname "$0")/.."
count=${COUNT:-5}
go test -run '^$' -bench . -benchmem -count "$count" ./queue/ ./gridfs/
