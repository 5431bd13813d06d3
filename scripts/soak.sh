#!/usr/bin/env bash
# The soak of docs/operations.md: DEN_SOAK_TASKS command tasks (default
# 10000) on DEN_SOAK_NODES nodes (5) of the development server, through a
# proxy that faults DEN_SOAK_RATE of every write (0.03) and refuses every
# command for DEN_SOAK_REFUSE (20s) once a third of the tasks ended.
# Prints tasks succeeded, stuck, run more often than their history says,
# and the time it took.
set -euo pipefail
cd "$(dirname "$0")/.."
go test -run '^$' -bench '^BenchmarkSoak$' -benchtime 1x -timeout 6h ./den/dentest/nodetest
