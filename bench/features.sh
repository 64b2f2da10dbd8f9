#!/usr/bin/env bash
# Scripting, transactions and pub/sub fan-out (issue 9's targets): latchkey
# (release build) vs Debian's redis-server, both on loopback, alternating
# the servers run by run (A B A B ...) so machine drift hits both.
#
#   EVALSHA of a GET+SET script      redis-benchmark, pipeline 1 and 16
#   MULTI/INCR/EXEC transactions     bench/featbench.rs tx, pipeline 1 and 16
#   PUBLISH to 10,000 subscribers    bench/featbench.rs fanout: time until
#                                    the last subscriber has the message
#
# Usage: bench/features.sh      Env: RUNS=3 REQUESTS=200000 CLIENTS=50 SUBS=10000
# Prints a markdown report; not a test (exits 0 unless a server fails).
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS=${RUNS:-3}
REQUESTS=${REQUESTS:-200000}
CLIENTS=${CLIENTS:-50}
SUBS=${SUBS:-10000}
. bench/ports.sh
bench_setup features
bench_build "latchkey and featbench" --bin latchkey-server --example featbench
FB=target/release/examples/featbench

MAXC=$((SUBS + 200))
LK_EXTRA="--maxclients $MAXC ${LK_MORE:-}" RD_EXTRA="--maxclients $MAXC" start_pair

SCRIPT="redis.call('SET', KEYS[1], ARGV[1]) return redis.call('GET', KEYS[1])"
SHA_LK=$(redis-cli -p "$LK_PORT" SCRIPT LOAD "$SCRIPT")
SHA_RD=$(redis-cli -p "$RD_PORT" SCRIPT LOAD "$SCRIPT")
[ "$SHA_LK" = "$SHA_RD" ] || { echo "SCRIPT LOAD differs: $SHA_LK vs $SHA_RD" >&2; exit 1; }


evalsha() { # port pipeline -> requests/s
  redis-benchmark -p "$1" -n "$REQUESTS" -c "$CLIENTS" -P "$2" -r 100000 -q \
    EVALSHA "$SHA_LK" 1 'key:__rand_int__' value 2>/dev/null |
    grep -o '[0-9.]* requests per second' | awk '{print $1}'
}
txs() { "$FB" tx --addr "127.0.0.1:$1" --conns "$CLIENTS" --pipeline "$2" --n "$REQUESTS"; }

row() { # label fn pipeline
  local lk=() rd=()
  for _ in $(seq "$RUNS"); do
    lk+=("$($2 "$LK_PORT" "$3")")
    rd+=("$($2 "$RD_PORT" "$3")")
  done
  local l r
  l=$(printf '%s\n' "${lk[@]}" | median)
  r=$(printf '%s\n' "${rd[@]}" | median)
  printf '| %s | %s | %.0f | %.0f | %.2f |\n' "$1" "$3" "$l" "$r" "$(echo "$l / $r" | bc -l)"
}

echo "| test | pipeline | latchkey ops/s | redis ops/s | latchkey/redis |"
echo "| --- | ---: | ---: | ---: | ---: |"
for p in 1 16; do row "EVALSHA (GET + SET)" evalsha "$p"; done
for p in 1 16; do row "MULTI / INCR / EXEC" txs "$p"; done
echo
echo "| PUBLISH fan-out to $SUBS subscribers | median ms | worst ms |"
echo "| --- | ---: | ---: |"
for side in latchkey redis; do
  port=$LK_PORT
  [ "$side" = redis ] && port=$RD_PORT
  read -r med worst < <("$FB" fanout --addr "127.0.0.1:$port" --subs "$SUBS" --rounds 5)
  echo "| $side | $med | $worst |"
done
