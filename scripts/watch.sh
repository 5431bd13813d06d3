#!/usr/bin/env bash
# The check of docs/performance.md's "Watching is free": den dev as a user
# runs it, with DEN_WATCH_FINISHED (100000) finished Demo tasks kept and
# den web (the page and Disbatch's web API) beside it. Times every view
# and read (median and slowest of DEN_WATCH_LOADS, 5), den dev's CPU over
# DEN_WATCH_IDLE (60) seconds with nothing queued, and a drain of
# DEN_WATCH_TASKS (3000) Demo tasks unwatched, then watched by three
# watchers (the overview every 2 s, a queue's page every 5 s, den status
# every 5 s), then unwatched again, with the watchers' p50 and p95 and the
# watched rate against the mean of the two unwatched ones.
#   DEN_WATCH_FINISHED=1000000 scripts/watch.sh
set -euo pipefail
cd "$(dirname "$0")/.."
go test -run '^$' -bench '^BenchmarkWatch$' -benchtime 1x -timeout 4h ./cmd/den
