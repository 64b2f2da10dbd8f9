#!/usr/bin/env bash
# Persistence (issue 10's targets): latchkey (release build) vs Debian's
# redis-server, both on loopback with the same data, alternating the
# servers run by run (A B A B ...) so machine drift hits both.
#
#   SAVE / load of 1,000,000 small keys     DEBUG POPULATE 1000000; SAVE's
#                                           time; the load: DEBUG RELOAD
#                                           NOSAVE (empties, then reads
#                                           the file) as the client sees it
#   SAVE / load of a 1,000,000-member zset  the same, one sorted set
#   BGSAVE of 1,000,000 keys under writes   featbench snapwatch: 8 writers
#                                           overwrite random keys; memory
#                                           (PSS of the server and its
#                                           children) and a probe client's
#                                           GET latency while the save runs
#
# Usage: bench/persist.sh      Env: RUNS=3 KEYS=1000000
# Prints a markdown report; not a test (exits 0 unless a server fails).
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS=${RUNS:-3}
KEYS=${KEYS:-1000000}
. bench/ports.sh
bench_setup persist redis-server redis-cli bc
bench_build "latchkey and featbench" --bin latchkey-server --example featbench
FB=target/release/examples/featbench

mkdir -p "$WORK/rd"
LK_EXTRA="--enable-debug-command yes ${LK_MORE:-}" \
  RD_EXTRA="--enable-debug-command yes --dir $WORK/rd" start_pair


ms() { # port command... -> milliseconds the command took, as the client sees it
  local p=$1
  shift
  local s e out
  s=$(date +%s%N)
  out=$(redis-cli -p "$p" "$@")
  e=$(date +%s%N)
  [ "$out" = OK ] || { echo "$* on port $p: $out" >&2; exit 1; }
  echo $(((e - s) / 1000000))
}

row() { # label command...
  local label=$1
  shift
  local lk=() rd=()
  for _ in $(seq "$RUNS"); do
    lk+=("$(ms "$LK_PORT" "$@")")
    rd+=("$(ms "$RD_PORT" "$@")")
  done
  local l r
  l=$(printf '%s\n' "${lk[@]}" | median)
  r=$(printf '%s\n' "${rd[@]}" | median)
  printf '| %s | %s | %s | %.2f |\n' "$label" "$l" "$r" "$(echo "$l / $r" | bc -l)"
}

echo "## SAVE and load ($RUNS runs each, medians)"
echo
echo "| test | latchkey ms | redis ms | latchkey/redis |"
echo "| --- | ---: | ---: | ---: |"
for p in "$LK_PORT" "$RD_PORT"; do
  redis-cli -p "$p" FLUSHALL >/dev/null
  redis-cli -p "$p" DEBUG POPULATE "$KEYS" >/dev/null
done
row "SAVE, $KEYS keys" SAVE
row "load (DEBUG RELOAD NOSAVE), $KEYS keys" DEBUG RELOAD NOSAVE

ZADD="for i = 1, tonumber(ARGV[1]) do redis.call('ZADD', KEYS[1], i * 0.5, 'member:' .. i) end"
for p in "$LK_PORT" "$RD_PORT"; do
  redis-cli -p "$p" FLUSHALL >/dev/null
  redis-cli -p "$p" EVAL "$ZADD" 1 bigz "$KEYS" >/dev/null
  [ "$(redis-cli -p "$p" ZCARD bigz)" = "$KEYS" ] || { echo "ZADD script failed on $p" >&2; exit 1; }
done
row "SAVE, one zset of $KEYS members" SAVE
row "load (DEBUG RELOAD NOSAVE), one zset of $KEYS members" DEBUG RELOAD NOSAVE

echo
echo "## BGSAVE of $KEYS keys under writes ($RUNS runs each, medians)"
echo
for p in "$LK_PORT" "$RD_PORT"; do
  redis-cli -p "$p" FLUSHALL >/dev/null
  redis-cli -p "$p" DEBUG POPULATE "$KEYS" >/dev/null
done
declare -A col
for _ in $(seq "$RUNS"); do
  for side in lk rd; do
    if [ $side = lk ]; then port=$LK_PORT pid=$LK_PID; else port=$RD_PORT pid=$RD_PID; fi
    out=$("$FB" snapwatch --addr "127.0.0.1:$port" --pid "$pid" --keys "$KEYS" --writers 8)
    read -r secs base peak over p50 p99 pmax wps <<<"$out"
    col[$side.secs]+="$secs "
    col[$side.base]+="$base "
    col[$side.over]+="$over "
    col[$side.p50]+="$p50 "
    col[$side.p99]+="$p99 "
    col[$side.max]+="$pmax "
    col[$side.wps]+="$wps "
  done
done
med() { echo "${col[$1]}" | tr ' ' '\n' | grep . | median; }
echo "| measure | latchkey | redis |"
echo "| --- | ---: | ---: |"
echo "| save time, s | $(med lk.secs) | $(med rd.secs) |"
echo "| memory before the save, MB | $(med lk.base) | $(med rd.base) |"
echo "| peak memory over that during the save, MB | $(med lk.over) | $(med rd.over) |"
echo "| probe GET latency p50, ms | $(med lk.p50) | $(med rd.p50) |"
echo "| probe GET latency p99, ms | $(med lk.p99) | $(med rd.p99) |"
echo "| probe GET latency max, ms | $(med lk.max) | $(med rd.max) |"
echo "| writes/s during the save | $(med lk.wps) | $(med rd.wps) |"
echo
echo "Machine: $(nproc) cores; the benchmark clients share them with both servers."
