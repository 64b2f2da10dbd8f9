#!/usr/bin/env bash
# Lock benchmark (issue 4): 16 workers contending on one lock, four ways,
# against Debian's redis-server and latchkey (release build), both on
# loopback; then the failover case (holder SIGKILLed while 8 waiters wait).
# See bench/lockbench.rs for what each mode does.
#
# Usage: bench/lock.sh            (from anywhere; about 2.5 minutes plus the build)
# Env:   SECS=5 (per row per round), ROUNDS=2, FAST_REPS=10 (latchkey failover
#        runs), TTL_REPS=3 (failover runs of the TTL-bound Redis-style locks),
#        ONLY=3-redis,4-latchkey (run just those rows; the files are not written)
# Writes bench/lock-results.md and bench/lock-chart.svg, and prints the
# results. Exits non-zero if a server could not start or the counter check
# failed.
set -euo pipefail
cd "$(dirname "$0")/.."

SECS=${SECS:-5}
ROUNDS=${ROUNDS:-2}
FAST_REPS=${FAST_REPS:-10}
TTL_REPS=${TTL_REPS:-3}
ONLY=${ONLY:-}
. bench/ports.sh
bench_setup lockbench redis-server redis-cli python3
bench_build "latchkey and lockbench" --example lockbench --bin latchkey-server --bin latchkey
BENCH_BIN=target/release/examples/lockbench

start_pair

args=(bench --redis "127.0.0.1:$RD_PORT" --latchkey "127.0.0.1:$LK_PORT"
  --redis-pid "$RD_PID" --latchkey-pid "$LK_PID"
  --secs "$SECS" --rounds "$ROUNDS" --fast-reps "$FAST_REPS" --ttl-reps "$TTL_REPS")
# A partial run (ONLY) prints its results but leaves the files alone.
if [ -n "$ONLY" ]; then
  args+=(--only "$ONLY")
else
  args+=(--md bench/lock-results.md --svg bench/lock-chart.svg)
fi
"$BENCH_BIN" "${args[@]}"
