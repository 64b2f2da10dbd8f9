#!/usr/bin/env bash
# The cost of replication on the primary (issue 22's target): instructions the primary executes per
# request, counted by valgrind's callgrind as bench/instructions-per-request.sh counts them (the
# server runs twice, for N1 and N2 requests from 10 clients, and the difference is divided by
# N2-N1), with 0, 1 and 2 Redis 7.0.15 replicas attached (`redis-server --replicaof`, synced before
# the requests start), for latchkey and for redis-server as the primary, in one run. Also the
# replicas' lag in bytes (master_repl_offset minus the slowest replica's offset) right after the
# last request.
#
# Usage: bench/repl-cost.sh [TESTS] [PIPELINES]   (default: "set get lpush" "1 16")
# Env: LK_BIN=<a built server> REPLICAS="0 1 2" N1=5000 N2=25000
# Needs valgrind, redis-server, redis-benchmark, redis-cli. Prints a markdown table.
set -euo pipefail
cd "$(dirname "$0")/.."
TESTS=${1:-"set get lpush"}
PIPES=${2:-"1 16"}
N1=${N1:-5000}
N2=${N2:-25000}
. bench/ports.sh
bench_setup repl-cost redis-server redis-benchmark redis-cli valgrind
if [ -z "${LK_BIN:-}" ]; then
  bench_build latchkey --bin latchkey-server
fi
LK_BIN=$(realpath "$LK_BIN")

PIDS=()
stop_all() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  PIDS=()
}
trap 'stop_all; cleanup_pair' EXIT INT TERM

field() { # port section field
  redis-cli -p "$1" info "$2" | tr -d '\r' | awk -F: -v f="$3" '$1 == f {print $2}'
}

# One server under callgrind with R replicas, N requests: prints "instructions lag".
measure() { # bin test pipeline replicas n
  local bin=$1 test=$2 P=$3 R=$4 n=$5 port dir vp i rport
  dir=$(mktemp -d "$WORK/run.XXXXXX")
  port=$(free_port)
  (cd "$dir" && exec valgrind --tool=callgrind --callgrind-out-file="$dir/cg.%p" "$bin" --port "$port" \
    --save "" --repl-diskless-sync no >"$dir/log" 2>&1) &
  vp=$!
  PIDS+=("$vp")
  for _ in $(seq 300); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.2; done
  local rports=()
  for ((i = 0; i < R; i++)); do
    rport=$(free_port)
    mkdir -p "$dir/r$i"
    redis-server --port "$rport" --bind 127.0.0.1 --save '' --dir "$dir/r$i" --replicaof 127.0.0.1 "$port" \
      --daemonize no >"$dir/r$i.log" 2>&1 &
    PIDS+=("$!")
    rports+=("$rport")
  done
  for rport in "${rports[@]}"; do
    for _ in $(seq 600); do
      [ "$(field "$rport" replication master_link_status 2>/dev/null || true)" = up ] && break
      sleep 0.1
    done
  done
  redis-benchmark -p "$port" -t "$test" -n "$n" -c 10 -P "$P" -q >/dev/null 2>&1
  local lag=0 off roff
  off=$(field "$port" replication master_repl_offset)
  for rport in "${rports[@]}"; do
    roff=$(field "$rport" replication slave_repl_offset)
    ((off - roff > lag)) && lag=$((off - roff))
  done
  redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || kill "$vp"
  wait "$vp" 2>/dev/null || true
  stop_all
  # Redis's fork child for the sync writes its own file: the primary's is its pid's.
  echo "$(grep -E '^(summary|totals):' "$dir/cg.$vp" | head -1 | awk '{print $2}') $lag"
}

per_request() { # bin test pipeline replicas -> "instructions/request lag"
  local a b
  a=$(measure "$@" "$N1")
  b=$(measure "$@" "$N2")
  echo "$(((${b% *} - ${a% *}) / (N2 - N1))) ${b#* }"
}

echo "| test | pipeline | replicas | latchkey instr/request | Redis instr/request | latchkey / Redis | lag bytes latchkey | lag bytes Redis |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
for t in $TESTS; do
  for p in $PIPES; do
    for r in ${REPLICAS:-0 1 2}; do
      l=$(per_request "$LK_BIN" "$t" "$p" "$r")
      d=$(per_request "$(command -v redis-server)" "$t" "$p" "$r")
      printf '| %s | %s | %s | %d | %d | %.2f | %d | %d |\n' "$t" "$p" "$r" "${l% *}" "${d% *}" \
        "$(echo "${l% *} / ${d% *}" | bc -l)" "${l#* }" "${d#* }"
    done
  done
done
