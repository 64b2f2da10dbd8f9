#!/usr/bin/env bash
# Full sync of a Redis 7.0.15 replica (issue 22's target): KEYS keys
# (DEBUG POPULATE, 100-byte values) on the primary, latchkey (release
# build; no fork) or Debian's redis-server (fork), disk-based and diskless
# (delay 0), without and with a write load during the sync (redis-benchmark
# SET, 50 clients, pipeline 1, random keys). Time from the replica's start
# to `master_link_status:up`, the primary's RSS before and at most during
# the sync (Redis's fork child not counted), and whether DEBUG DIGEST is
# equal on both sides once the load stopped and the replica caught up.
#
# Usage: bench/repl-sync.sh      Env: KEYS=1000000 LK_BIN=<a built server>
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
stop_extra() {
  for pid in $LOAD_PID $REP_PID; do
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  LOAD_PID=""
  REP_PID=""
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
  local t0 t1
  t0=$(date +%s.%N)
  redis-server --port "$rport" --bind 127.0.0.1 --save '' --dir "$dir/r" --enable-debug-command yes \
    --replicaof 127.0.0.1 "$port" --repl-diskless-load disabled --daemonize no >"$dir/replica.log" 2>&1 &
  REP_PID=$!
  for _ in $(seq 6000); do
    rss=$(ps -o rss= -p "$pid")
    [ "$rss" -gt "$max" ] && max=$rss
    [ "$(offset "$rport" master_link_status 2>/dev/null || true)" = up ] && break
    sleep 0.05
  done
  t1=$(date +%s.%N)
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
  printf '| %s | %s | %s | %.2f | %d | %d | %s |\n' "$kind" "$diskless" "$load" \
    "$(echo "$t1 - $t0" | bc -l)" "$((rss0 / 1024))" "$((max / 1024))" "$same"
  stop_extra
  stop_pair
}

echo "| primary | diskless | write load | sync s | RSS before MB | RSS max MB | digest equal |"
echo "| --- | --- | --- | ---: | ---: | ---: | --- |"
for load in 0 1; do
  for diskless in no yes; do
    run latchkey "$diskless" "$load"
    run redis "$diskless" "$load"
  done
done
