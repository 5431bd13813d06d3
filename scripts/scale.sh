#!/usr/bin/env bash
# The scale check of docs/performance.md: den dev as a user runs it, with
# DEN_SCALE_FINISHED (20000) finished tasks in tasks, drains DEN_SCALE_TASKS
# (10000) Demo tasks queued at once with den task add. Prints tasks/s per
# 1,000 tasks and the development database's time per task by command.
# DEN_SCALE_ENGINE=sqlite measures the SQLite engine instead.
set -euo pipefail
cd "$(dirname "$0")/.."
go test -run '^$' -bench '^BenchmarkScale$' -benchtime 1x -timeout 3h ./cmd/den
