#!/usr/bin/env bash
# Writes with the AOF on (issue 10's target): redis-benchmark -t set,incr
# -c 50 -P 16 against latchkey (release build) and Debian's redis-server,
# both with `appendonly yes` and the same `appendfsync`, alternating the
# servers run by run (A B A B ...) so machine drift hits both.
#
# Usage: bench/aof.sh      Env: RUNS=3 REQUESTS=500000 POLICIES="always everysec no"
# Prints a markdown table; not a test (exits 0 unless a server fails).
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS=${RUNS:-3}
REQUESTS=${REQUESTS:-500000}
POLICIES=${POLICIES:-"always everysec no"}
. bench/ports.sh
bench_setup aof redis-server redis-benchmark redis-cli bc
bench_build latchkey --bin latchkey-server


rps() { # port test -> requests/s
  redis-benchmark -p "$1" -t "$2" -n "$REQUESTS" -c 50 -P 16 -r 100000 -q 2>/dev/null |
    grep -o '[0-9.]* requests per second' | awk '{print $1}'
}

echo "| appendfsync | test | latchkey ops/s | redis ops/s | latchkey/redis |"
echo "| --- | --- | ---: | ---: | ---: |"
for policy in $POLICIES; do
  rm -rf "$WORK/lk" "$WORK/rd"
  mkdir -p "$WORK/lk" "$WORK/rd"
  LK_EXTRA="--appendonly yes --appendfsync $policy --dir $WORK/lk" \
    RD_EXTRA="--appendonly yes --appendfsync $policy --dir $WORK/rd" start_pair
  for t in set incr; do
    lk=() rd=()
    for _ in $(seq "$RUNS"); do
      lk+=("$(rps "$LK_PORT" "$t")")
      rd+=("$(rps "$RD_PORT" "$t")")
    done
    l=$(printf '%s\n' "${lk[@]}" | median)
    r=$(printf '%s\n' "${rd[@]}" | median)
    printf '| %s | %s | %.0f | %.0f | %.2f |\n' "$policy" "$t" "$l" "$r" "$(echo "$l / $r" | bc -l)"
  done
  for p in "$LK_PORT" "$RD_PORT"; do
    [ "$(redis-cli -p "$p" CONFIG GET appendonly | tail -1)" = yes ] || {
      echo "the AOF is off on port $p" >&2
      exit 1
    }
  done
  stop_pair
done
echo
echo "Machine: $(nproc) cores; redis-benchmark shares them with both servers."
