#!/usr/bin/env bash
# Measures den against the Perl Disbatch 4 node on the same server in the
# same run (issue 8's "15x the Perl node"): one embedded development
# database (`den devdb`, FerretDB behind den's proxy, one write at a time per database);
# on it, N Demo tasks through the Perl node (bin/disbatchd and its
# bin/task_runner) and N Demo tasks through a den node (`den run` with the
# same kind of Disbatch config.json). Prints tasks/s for each, the ratio and
# the load average as a markdown table, a row per round.
#
# Needs:
#   DISBATCH_SRC  a Disbatch 4 checkout: bin/disbatchd, bin/task_runner,
#                 lib/Disbatch.pm, lib/Disbatch/Plugin/Demo.pm
#   the Perl modules Disbatch uses (the script names any that are missing and
#   the Debian package that has it; Try::Tiny::Retry is not in Debian: put a
#   checkout's lib/ on PERL5LIB)
# Optional: N (tasks per node and round, default 200), ROUNDS (default 1;
# rounds alternate which node goes first), THREADS (the queue's limit,
# default 4), POLL (seconds between completion checks, default 1), LIMIT
# (seconds a node may take for its N tasks, default 1200), DEN (a den binary;
# default: built from this checkout), KEEP=1 (keep the work directory).
#
# How it measures, the same for both nodes: each phase has a database of its
# own on the one server (so each node works on a tasks collection of N
# documents: the embedded server scans collections); the node is started
# and must have written its node document (start-up is not timed); the clock
# starts, N tasks go in with one insert (den task add); the clock stops at
# the first completion check (every POLL seconds, `den queue show`) that
# finds all N with a final status (>= 1). The end cannot be taken from the
# tasks themselves: the Perl runner leaves mtime at the claim time. The queue
# has both spellings, constructor + maxthreads (which den reads) and plugin
# + threads (which Disbatch 4's node reads), both THREADS: with one node they
# mean the same limit.
set -euo pipefail
cd "$(dirname "$0")/.."

n=${N:-200}
rounds=${ROUNDS:-1}
threads=${THREADS:-4}
poll=${POLL:-1}
limit=${LIMIT:-1200}
perl=${PERL:-perl}

die() {
  echo "perl-compare: $*" >&2
  exit 1
}

# --- what it needs -----------------------------------------------------------
if [ -z "${DISBATCH_SRC:-}" ]; then
  die "DISBATCH_SRC is not set. It must name a Disbatch 4 checkout (the Perl node):
  bin/disbatchd, bin/task_runner, lib/Disbatch.pm, lib/Disbatch/Plugin/Demo.pm.
  For example: git clone <Disbatch 4 repository> /tmp/disbatch; DISBATCH_SRC=/tmp/disbatch $0"
fi
for f in bin/disbatchd bin/task_runner lib/Disbatch.pm lib/Disbatch/Plugin/Demo.pm; do
  [ -f "$DISBATCH_SRC/$f" ] || die "DISBATCH_SRC=$DISBATCH_SRC has no $f: it must be a Disbatch 4 checkout"
done
command -v "$perl" >/dev/null || die "no perl (apt-get install perl)"
export PERL5LIB="$DISBATCH_SRC/lib${PERL5LIB:+:$PERL5LIB}"
missing=()
# module=Debian package that has it
for m in MongoDB=libmongodb-perl Cpanel::JSON::XS=libcpanel-json-xs-perl File::Slurp=libfile-slurp-perl \
  Log::Log4perl=liblog-log4perl-perl Safe::Isa=libsafe-isa-perl Time::Moment=libtime-moment-perl \
  Try::Tiny=libtry-tiny-perl boolean=libboolean-perl JSON::PP=perl \
  "Try::Tiny::Retry=(not packaged by Debian: put the lib/ of a Try-Tiny-Retry checkout on PERL5LIB)"; do
  mod=${m%%=*}
  "$perl" -e "require $mod" 2>/dev/null || missing+=("  $mod: ${m#*=}")
done
if [ ${#missing[@]} -gt 0 ]; then
  die "Perl modules the Disbatch node needs are missing:
$(printf '%s\n' "${missing[@]}")
  (Debian: apt-get install -y the packages named)"
fi
"$perl" -e 'use Disbatch; use Disbatch::Plugin::Demo; 1' 2>/dev/null ||
  die "Disbatch from $DISBATCH_SRC/lib does not load: $("$perl" -e 'use Disbatch; use Disbatch::Plugin::Demo' 2>&1 | head -3)"

work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [ "${KEEP:-}" = 1 ]; then echo "perl-compare: work directory kept: $work" >&2; else rm -rf "$work"; fi
}
trap cleanup EXIT

den=${DEN:-}
if [ -z "$den" ]; then
  echo "perl-compare: building den" >&2
  go build -o "$work/den" ./cmd/den
  den=$work/den
fi

now() { date +%s.%N; }

# --- one server ----------------------------------------------------------------
mkdir "$work/db"
"$den" devdb --data "$work/db" --listen 127.0.0.1:0 >"$work/devdb.out" 2>"$work/devdb.log" &
pids+=($!)
for _ in $(seq 100); do
  [ -s "$work/devdb.out" ] && break
  sleep 0.1
done
uri=$(head -1 "$work/devdb.out")
[ -n "$uri" ] || die "den devdb printed no URI: $(tail -3 "$work/devdb.log")"


# config DB: writes a Disbatch config.json for database DB and prints its
# path. The Perl node and den read the same file (den ignores the keys only
# the Perl programs use).
config() {
  local f=$work/$1.json
  cat >"$f" <<EOF
{
  "mongohost": "${uri%/}",
  "database": "$1",
  "task_runner": "$DISBATCH_SRC/bin/task_runner",
  "gfs": "auto",
  "quiet": true,
  "log4perl": {
    "level": "INFO",
    "appenders": {
      "filelog": {
        "type": "Log::Log4perl::Appender::File",
        "layout": "[%p] %d %F{1} %L %C %c> %m %n",
        "args": { "filename": "$work/$1-node.log" }
      }
    }
  }
}
EOF
  echo "$f"
}

# node_up CONFIG NAME: waits until node NAME has written its node document.
node_up() {
  for _ in $(seq 120); do
    if "$den" node list -c "$1" --json 2>/dev/null |
      "$perl" -MJSON::PP -e 'local $/; exit !grep { $_->{node} eq $ARGV[0] } @{decode_json(<STDIN>)}' "$2"; then
      return 0
    fi
    sleep 0.5
  done
  return 1
}

# demo_queue CONFIG: creates the queue "demo" with both spellings.
demo_queue() {
  "$den" queue create demo -c "$1" --plugin Disbatch::Plugin::Demo --maxthreads "$threads" >/dev/null
  # Disbatch 4's node reads plugin and threads; den reads constructor and
  # maxthreads first (README, Compatibility decisions).
  "$perl" -MDisbatch -e 'my $d = Disbatch->new(config_file => $ARGV[0]); $d->load_config;
    $d->queues->update_one({name => "demo"}, {q{$set} => {plugin => "Disbatch::Plugin::Demo", threads => $ARGV[1] + 0}})->matched_count == 1
      or die "queue demo not found\n"' "$1" "$threads" 2>/dev/null
}

# run_tasks CONFIG: inserts N Demo tasks into queue demo, waits until all
# have a final status; prints "seconds succeeded failed".
run_tasks() {
  local cfg=$1 start done ok
  local tasks=$work/tasks.jsonl
  for _ in $(seq "$n"); do echo '{"commands":"ab"}'; done >"$tasks"
  start=$(now)
  "$den" task add demo -c "$cfg" --file "$tasks" >/dev/null
  while :; do
    sleep "$poll"
    # "finished succeeded" from the counts by status
    read -r done ok < <("$den" queue show demo -c "$cfg" --json |
      "$perl" -MJSON::PP -e 'local $/; my $s = decode_json(<STDIN>)->{tasks_by_status} // {};
        my $d = 0; $d += $s->{$_} for grep { $_ >= 1 } keys %$s; print $d, " ", ($s->{1} // 0), "\n"')
    if [ "$done" -ge "$n" ]; then
      "$perl" -e 'printf "%.3f %d %d\n", $ARGV[1] - $ARGV[0], $ARGV[2], $ARGV[3] - $ARGV[2]' "$start" "$(now)" "$ok" "$done"
      return 0
    fi
    if "$perl" -e 'exit !($ARGV[1] - $ARGV[0] > $ARGV[2])' "$start" "$(now)" "$limit"; then
      echo "perl-compare: $cfg: only $done of $n tasks finished in ${limit}s (logs: KEEP=1)" >&2
      return 1
    fi
  done
}

# perl_phase ROUND: N tasks through the Perl node on database perl_ROUND;
# prints "seconds succeeded failed".
perl_phase() {
  local cfg pid
  cfg=$(config "perl_$1")
  # The node starts on its fresh database before anything else touches it:
  # its ensure_indexes names all its task indexes in one createIndexes,
  # which the embedded server answers by dropping the connection when they
  # all exist already (den creates the same indexes one command each), and
  # the Perl node then dies ("Could not ensure_indexes").
  "$perl" "$DISBATCH_SRC/bin/disbatchd" --config "$cfg" >"$work/perl_$1-node.out" 2>&1 &
  pid=$!
  pids+=("$pid")
  node_up "$cfg" "$(hostname)" ||
    { echo "perl-compare: the Perl node did not start: $(grep -v '^#' "$work/perl_$1-node.out" | tail -5)" >&2; return 1; }
  demo_queue "$cfg"
  echo "perl-compare: round $1: $n Demo tasks through the Perl node ($(hostname))" >&2
  run_tasks "$cfg"
  kill "$pid"
  wait "$pid" 2>/dev/null || true
}

# den_phase ROUND: N tasks through a den node (den run) on database den_ROUND.
den_phase() {
  local cfg pid
  cfg=$(config "den_$1")
  "$den" run -c "$cfg" --node den-compare --log-format json >"$work/den_$1-node.log" 2>&1 &
  pid=$!
  pids+=("$pid")
  node_up "$cfg" den-compare ||
    { echo "perl-compare: the den node did not start: $(tail -5 "$work/den_$1-node.log")" >&2; return 1; }
  demo_queue "$cfg"
  echo "perl-compare: round $1: $n Demo tasks through the den node" >&2
  run_tasks "$cfg"
  kill "$pid"
  wait "$pid" 2>/dev/null || true
}

# Each phase has a database of its own on the one server, so that both
# nodes see a tasks collection of N documents (the embedded server scans
# collections). Rounds alternate which node goes first.
echo "| round | tasks | maxthreads | Perl Disbatch 4 tasks/s | den tasks/s | den / Perl | load average (1, 5, 15 min) before / after | CPUs |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
failed=0
for r in $(seq "$rounds"); do
  load_before=$(cut -d' ' -f1-3 /proc/loadavg)
  if [ $((r % 2)) = 1 ]; then
    perl_phase "$r" >"$work/perl_$r.result"
    den_phase "$r" >"$work/den_$r.result"
  else
    den_phase "$r" >"$work/den_$r.result"
    perl_phase "$r" >"$work/perl_$r.result"
  fi
  load_after=$(cut -d' ' -f1-3 /proc/loadavg)
  read -r perl_secs _ perl_failed <"$work/perl_$r.result"
  read -r den_secs _ den_failed <"$work/den_$r.result"
  failed=$((failed + perl_failed + den_failed))
  "$perl" -e '
    my ($r, $n, $th, $ps, $pf, $ds, $df, $lb, $la, $cpus) = @ARGV;
    my ($p, $d) = ($n / $ps, $n / $ds);
    printf "| %d (%s first) | %d | %d | %.2f (%.1f s%s) | %.2f (%.1f s%s) | %.1fx | %s / %s | %d |\n",
      $r, $r % 2 ? "Perl" : "den", $n, $th, $p, $ps, $pf ? ", $pf failed" : "", $d, $ds, $df ? ", $df failed" : "",
      $d / $p, $lb, $la, $cpus;
  ' "$r" "$n" "$threads" "$perl_secs" "$perl_failed" "$den_secs" "$den_failed" "$load_before" "$load_after" "$(nproc)"
done
if [ "$failed" != 0 ]; then
  die "$failed tasks failed (KEEP=1 keeps the logs)"
fi
