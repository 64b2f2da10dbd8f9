#!/usr/bin/env bash
# Full sync of a Redis 7.0.15 replica (issue 22's target): KEYS keys
# (DEBUG POPULATE, 100-byte values) on the primary, latchkey (release
# build; no fork) or Debian's redis-server (fork), disk-based and diskless
# (delay 0), without and with a write load during the sync (redis-benchmark
# SET, 50 clients, pipeline 1, random keys). Time from the replica's start
# to `master_link_status:up`, the primary's RSS before and at most during
# the sync, the memory the sync added (latchkey: RSS growth; Redis: its
# RSS growth plus the fork child's Private_Dirty pages, the copies its
# writes forced), the round trip of another client (bench/latency-probe.py:
# one GET a millisecond) for 3 s before the sync and during it, and whether DEBUG DIGEST is
# equal on both sides once the load stopped and the replica caught up.
#
# Usage: bench/repl-sync.sh      Env: KEYS=1000000 LK_BIN=<a built server> LOADS="0 1" KINDS="latchkey redis"
# Prints a markdown table; not a test (exits 0 unless a server fails).
set -euo pipefail
cd "$(dirname "$0")/.."

KEYS=${KEYS:-1000000}
. bench/ports.sh
bench_setup repl-sync redis-server redis-benchmark redis-cli bc
if [ -z "${LK_BIN:-}" ]; then
  bench_build latchkey --bin latchkey-server
fi

REP_PID=""
LOAD_PID=""
PROBE_PID=""
stop_extra() {
  for pid in $PROBE_PID $LOAD_PID $REP_PID; do
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  LOAD_PID=""
  REP_PID=""
  PROBE_PID=""
}
trap 'stop_extra; cleanup_pair' EXIT INT TERM

offset() { # port field -> value
  redis-cli -p "$1" info replication | tr -d '\r' | awk -F: -v f="$2" '$1 == f {print $2}'
}

run() { # kind diskless load -> a table row
  local kind=$1 diskless=$2 load=$3 port rport pid dir
  dir=$(mktemp -d "$WORK/run.XXXXXX")
  mkdir -p "$dir/p" "$dir/r"
  port=$(free_port)
  local opts=(--port "$port" --bind 127.0.0.1 --save '' --dir "$dir/p" --enable-debug-command yes
    --repl-diskless-sync "$diskless" --repl-diskless-sync-delay 0)
  if [ "$kind" = latchkey ]; then
    "$LK_BIN" "${opts[@]}" >"$dir/primary.log" 2>&1 &
  else
    redis-server "${opts[@]}" --appendonly no --daemonize no >"$dir/primary.log" 2>&1 &
  fi
  pid=$!
  if [ "$kind" = latchkey ]; then LK_PID=$pid; else RD_PID=$pid; fi
  wait_up "$port"
  redis-cli -p "$port" debug populate "$KEYS" key 100 >/dev/null
  local rss0 rss max
  rss0=$(ps -o rss= -p "$pid")
  max=$rss0
  if [ "$load" = 1 ]; then
    redis-benchmark -p "$port" -t set -c 50 -P 1 -r "$KEYS" -n 1000000000 -d 100 -q >/dev/null 2>&1 &
    LOAD_PID=$!
    sleep 1
  fi
  rport=$(free_port)
  local t0 t1 child dirty=0 d before
  # The probe alone first (under the load when there is one): 3 s before the sync.
  before=$(python3 bench/latency-probe.py "$port" --seconds 3 | cut -d' ' -f2)
  python3 bench/latency-probe.py "$port" --seconds 600 >"$dir/probe.out" &
  PROBE_PID=$!
  t0=$(date +%s.%N)
  redis-server --port "$rport" --bind 127.0.0.1 --save '' --dir "$dir/r" --enable-debug-command yes \
    --replicaof 127.0.0.1 "$port" --repl-diskless-load disabled --daemonize no >"$dir/replica.log" 2>&1 &
  REP_PID=$!
  for _ in $(seq 6000); do
    rss=$(ps -o rss= -p "$pid")
    [ "$rss" -gt "$max" ] && max=$rss
    # Redis's fork child: the pages it holds apart from the parent's.
    for child in $(pgrep -P "$pid" || true); do
      d=$(awk '/^Private_Dirty:/ {print $2}' "/proc/$child/smaps_rollup" 2>/dev/null || echo 0)
      [ "${d:-0}" -gt "$dirty" ] && dirty=$d
    done
    [ "$(offset "$rport" master_link_status 2>/dev/null || true)" = up ] && break
    sleep 0.05
  done
  t1=$(date +%s.%N)
  kill -TERM "$PROBE_PID" 2>/dev/null || true
  wait "$PROBE_PID" 2>/dev/null || true
  PROBE_PID=""
  local probe
  probe=$(cut -d' ' -f1-3 "$dir/probe.out")
  if [ -n "$LOAD_PID" ]; then
    kill "$LOAD_PID" 2>/dev/null || true
    wait "$LOAD_PID" 2>/dev/null || true
    LOAD_PID=""
  fi
  for _ in $(seq 200); do
    [ "$(offset "$rport" slave_repl_offset)" = "$(offset "$port" master_repl_offset)" ] && break
    sleep 0.05
  done
  local same=no
  [ "$(redis-cli -p "$port" debug digest)" = "$(redis-cli -p "$rport" debug digest)" ] && same=yes
  printf '| %s | %s | %s | %.2f | %d | %d | %d | %s | %s | %s | %s | %s |\n' "$kind" "$diskless" "$load" \
    "$(echo "$t1 - $t0" | bc -l)" "$((rss0 / 1024))" "$((max / 1024))" \
    "$(((max - rss0 + dirty) / 1024))" "$before" $probe "$same"
  stop_extra
  stop_pair
}

echo "| primary | diskless | write load | sync s | RSS before MB | RSS max MB | added by the sync MB | probe p99 before ms | during: p50 ms | p99 ms | max ms | digest equal |"
echo "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"
for load in ${LOADS:-0 1}; do
  for diskless in no yes; do
    for kind in ${KINDS:-latchkey redis}; do
      run "$kind" "$diskless" "$load"
    done
  done
done
