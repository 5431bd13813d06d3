#!/usr/bin/env bash
# The check of docs/performance.md's "New work is seen at once": den dev as
# a user runs it, with DEN_NEWWORK_QUEUES (2000) idle queues beside, times
# a task inserted as the README's mongosh example does (no counts raised)
# from its insert to its claim and its start, in a queue a driver inserted
# a moment before (both schemas), one den queue create made, an idle queue
# there for minutes, and 20 new queues at once; and prints what an idle
# pass costs the development server, in commands per second.
#   DEN_NEWWORK_QUEUES=80000 scripts/newwork.sh
# DEN_NEWWORK_ROUNDS (3) repeats each case; DEN_NEWWORK_IDLE (30) is the
# idle window in seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
go test -run '^$' -bench '^BenchmarkNewWork$' -benchtime 1x -timeout 2h ./cmd/den
