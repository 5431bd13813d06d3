#!/usr/bin/env bash
# Runs BenchmarkRecovery (den/recovery_bench_test.go) against the embedded
# server and prints its figures: what runners' heartbeats cost (commands per
# running task per second, and the node's whole rate, counted at the wire)
# and how long a frozen node's tasks wait before attempt 2 starts on another
# node (from the frozen node's last heartbeat).
# DEN_BENCH_DEAD: dead_node_after values, comma-separated Go durations
# (default: the default); DEN_BENCH_RUNNING: sleeping Command tasks on the
# node (default 20).
#   scripts/recovery.sh
#   DEN_BENCH_DEAD=1m,5m DEN_BENCH_RUNNING=100 scripts/recovery.sh
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(mktemp)
trap 'rm -f "$out"' EXIT
go test -run '^$' -bench 'BenchmarkRecovery' -benchtime 1x -timeout 60m ./den/ | tee "$out" >&2
echo
grep -E 'dead_node_after [0-9].*beat every' "$out" | sed -E 's/^[[:space:]]*[a-z_]+\.go:[0-9]+: //'
