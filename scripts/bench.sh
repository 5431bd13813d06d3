#!/usr/bin/env bash
# Runs den's benchmarks against the embedded server:
#  - BenchmarkCost (den/cost_bench_test.go): what one node costs the
#    database, counted at the wire, for 1, 50 and 500 queues: commands per
#    idle second, commands and new connections per Demo task, tasks/s
#    against the floor of a bare client on the same server in the same run
#    (and that floor writing den's runner and usage fields too),
#    insert-to-start latency, node RSS. Prints a markdown table.
#  - BenchmarkCPU (den/cpu_bench_test.go): den's own CPU per Demo task, the
#    node (`den run`, as a user runs it) and its runners counted in a cgroup
#    of their own (cgroup v1 cpuacct, else v2 cpu.stat), the database server
#    not; DEN_BENCH_TASKS tasks (default 500 here), maxthreads 4, runner
#    reuse as by default. Skips, saying why, where no cgroup can be made.
#    DEN_BENCH_ENGINE=sqlite or postgresql picks the embedded server's
#    engine (default: PostgreSQL where installed, else SQLite).
#  - BenchmarkClaim and BenchmarkWrite: claim throughput, GridFS streaming.
# Compare runs with benchstat:
#   scripts/bench.sh > old.txt; ...; scripts/bench.sh > new.txt
#   go run golang.org/x/perf/cmd/benchstat@latest old.txt new.txt
# DEN_BENCH_TASKS sets the tasks per cost run (default 200); COUNT the runs
# of the micro-benchmarks (default 5); ONLY=cost, ONLY=cpu or ONLY=micro
# picks one. BenchmarkCPU alone, as the performance doc's figure was taken:
#   ONLY=cpu scripts/bench.sh
# (which runs: go test -run '^$' -bench BenchmarkCPU -benchtime 1x ./den/).
set -euo pipefail
cd "$(dirname "$0")/.."
count=${COUNT:-5}
if [ -z "${ONLY:-}" ] || [ "${ONLY:-}" = cost ]; then
  table=$(mktemp)
  trap 'rm -f "$table"' EXIT
  DEN_BENCH_TABLE=$table go test -run '^$' -bench 'BenchmarkCost' -benchtime 1x -timeout 60m ./den/
  echo
  echo "| queues | tasks done | idle commands/s | commands/task | new connections/task | tasks/s | floor tasks/s (den's share) | floor with den's fields (den's share) | insert-to-start p50 / p99 ms (slot free) | node RSS MiB | node CPU % |"
  echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
  cat "$table"
fi
if [ -z "${ONLY:-}" ] || [ "${ONLY:-}" = cpu ]; then
  go test -run '^$' -bench 'BenchmarkCPU' -benchtime 1x -timeout 60m ./den/
fi
if [ -z "${ONLY:-}" ] || [ "${ONLY:-}" = micro ]; then
  go test -run '^$' -bench 'BenchmarkClaim|BenchmarkWrite' -benchmem -count "$count" ./queue/ ./gridfs/
fi
