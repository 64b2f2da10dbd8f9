#!/usr/bin/env bash
# Throughput and memory comparison: latchkey (release build) vs Debian's
# redis-server, both on loopback, measured with redis-benchmark.
#
# Usage: bench/run.sh            (from anywhere; takes ~5 minutes plus the build)
# Env:   RUNS=3 (pairs of A/B runs), REQUESTS=200000, CLIENTS=50,
#        TESTS=set,get,incr,mset,ping (redis-benchmark -t names; the data-type
#        rows: TESTS=lpush,rpush,lpop,rpop,sadd,hset,spop,zadd,zpopmin,lrange_100,lrange_600),
#        MEMORY=1 (0 skips the 1M-key memory comparison)
#
# Runs alternate the servers (A B A B ...) so drift in machine load hits both;
# the table shows the median requests/s of the runs. Not a test: it prints a
# markdown report and exits 0 unless something could not start.
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS=${RUNS:-3}
REQUESTS=${REQUESTS:-200000}
CLIENTS=${CLIENTS:-50}
TESTS=${TESTS:-set,get,incr,mset,ping}
MEMORY=${MEMORY:-1}
. bench/ports.sh
bench_setup bench redis-server redis-benchmark redis-cli python3
bench_build latchkey
LK_EXTRA="--enable-debug-command yes ${LK_MORE:-}" RD_EXTRA="--enable-debug-command yes" start_pair

# A test whose command latchkey lacks is reported as missing, not measured
# (COMMAND INFO answers nil for a command the server does not have).
missing=""
for t in $(echo "$TESTS" | tr ',' ' '); do
  c=${t%%_*}
  if [ -z "$(redis-cli -p "$LK_PORT" COMMAND INFO "$c" | tr -d '\r\n')" ]; then
    missing="$missing $t"
  fi
done
run_tests=$(echo "$TESTS" | tr ',' '\n' | grep -vxF -f <(echo "$missing" | tr ' ' '\n' | sed '/^$/d') | paste -sd, - || true)

# One redis-benchmark run: appends "server,pipeline,TEST,rps" lines to
# $WORK/results and the client's CPU share to $WORK/cpu.
bench_once() {
  local name=$1 port=$2 pipe=$3
  local out="$WORK/out.csv"
  /usr/bin/time -f "%P" -o "$WORK/time.txt" \
    redis-benchmark -h 127.0.0.1 -p "$port" -t "$run_tests" -n "$REQUESTS" \
    -c "$CLIENTS" -P "$pipe" --csv >"$out" 2>/dev/null
  # CSV rows: "TEST","rps",... (first row is the header).
  tail -n +2 "$out" | tr -d '"' | awk -F, -v s="$name" -v p="$pipe" \
    '{ printf "%s,%s,%s,%s\n", s, p, $1, $2 }' >>"$WORK/results"
  echo "$name,$pipe,$(tr -d '%' <"$WORK/time.txt")" >>"$WORK/cpu"
}

: >"$WORK/results"
: >"$WORK/cpu"
if [ -n "$run_tests" ]; then
  for run in $(seq "$RUNS"); do
    for pipe in 1 16; do
      echo "run $run/$RUNS, pipeline $pipe" >&2
      bench_once latchkey "$LK_PORT" "$pipe"
      bench_once redis "$RD_PORT" "$pipe"
    done
  done
fi

rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }
used_memory() {
  redis-cli -p "$1" INFO memory | tr -d '\r' | awk -F: '$1 == "used_memory" { print $2 }'
}

# Memory: 1M keys of 10-byte values on each server.
declare -A mem
for s in latchkey redis; do
  [ "$MEMORY" = 1 ] || break
  if [ $s = latchkey ]; then port=$LK_PORT pid=$LK_PID; else port=$RD_PORT pid=$RD_PID; fi
  redis-cli -p "$port" FLUSHALL >/dev/null
  sleep 0.2
  mem[$s,used0]=$(used_memory "$port")
  mem[$s,rss0]=$(rss_kb "$pid")
  reply=$(redis-cli -p "$port" DEBUG POPULATE 1000000 key 10 2>&1)
  if [ "$reply" != "OK" ]; then
    mem[$s,used1]="n/a ($reply)"
    mem[$s,rss1]="n/a"
    continue
  fi
  mem[$s,keys]=$(redis-cli -p "$port" DBSIZE)
  mem[$s,used1]=$(used_memory "$port")
  mem[$s,rss1]=$(rss_kb "$pid")
done

python3 - "$WORK/results" "$WORK/cpu" "$missing" <<'EOF'
import statistics, sys
from collections import defaultdict

results, cpu, missing = sys.argv[1], sys.argv[2], sys.argv[3].split()
rps = defaultdict(list)
for line in open(results):
    server, pipe, test, value = line.strip().split(",")
    rps[(test, int(pipe), server)].append(float(value))
tests = []
for (test, pipe, _server) in rps:
    if (test, pipe) not in tests:
        tests.append((test, pipe))
tests.sort(key=lambda t: (t[1], t[0]))
print("| test | pipeline | latchkey median rps | redis median rps | latchkey/redis |")
print("| --- | ---: | ---: | ---: | ---: |")
for test, pipe in tests:
    lk = rps.get((test, pipe, "latchkey"), [])
    rd = rps.get((test, pipe, "redis"), [])
    lk_m = statistics.median(lk) if lk else None
    rd_m = statistics.median(rd) if rd else None
    ratio = f"{lk_m / rd_m:.2f}" if lk_m and rd_m else "n/a"
    fmt = lambda v: f"{v:,.0f}" if v else "n/a"
    print(f"| {test} | {pipe} | {fmt(lk_m)} | {fmt(rd_m)} | {ratio} |")
for m in missing:
    for pipe in (1, 16):
        print(f"| {m.upper()} | {pipe} | missing (unknown command) | - | - |")
cpus = defaultdict(list)
for line in open(cpu):
    server, pipe, pct = line.strip().split(",")
    try:
        cpus[(server, int(pipe))].append(float(pct))
    except ValueError:
        pass
print()
print("redis-benchmark client CPU (median of runs, % of one core):", ", ".join(
    f"{s} -P{p}: {statistics.median(v):.0f}%" for (s, p), v in sorted(cpus.items())))
EOF

echo
echo "cores (nproc): $(nproc); requests per test: $REQUESTS; clients: $CLIENTS; runs per server: $RUNS"
[ "$MEMORY" = 1 ] || exit 0
echo
echo "### Memory after DEBUG POPULATE 1000000 key 10"
echo
echo "| server | keys | used_memory before | used_memory after | VmRSS before (kB) | VmRSS after (kB) |"
echo "| --- | ---: | ---: | ---: | ---: | ---: |"
for s in latchkey redis; do
  echo "| $s | ${mem[$s,keys]:-n/a} | ${mem[$s,used0]} | ${mem[$s,used1]} | ${mem[$s,rss0]} | ${mem[$s,rss1]} |"
done
