#!/usr/bin/env bash
# The cost guard: instructions the server executes per request, for a fixed set of rows, against
# the record in bench/cost-record.txt. Counted by valgrind's callgrind (bench/instructions-per-request.sh,
# the project's copy of ../shared/bench's), which repeats to about 1% where throughput moves 15-30%.
#   bench/cost-guard.sh            measure latchkey and fail if a row is over 110% of its record (.ci/run)
#   bench/cost-guard.sh --record   measure latchkey and redis-server 7.0 and rewrite the record
# A deliberate change of cost, or a new toolchain or valgrind, re-records in the same commit and says
# why in the commit message. The record names the rustc and valgrind it was made with: counts from
# another toolchain are not comparable, so a mismatch fails with what to do.
# Needs valgrind, redis-benchmark and redis-cli (and redis-server for --record).
set -euo pipefail
cd "$(dirname "$0")/.."
record=bench/cost-record.txt
ipr=bench/instructions-per-request.sh
limit_pct=10
# The rows: redis-benchmark test, pipeline.
rows=("set 1" "get 1" "lpush 1" "hset 1" "set 16" "get 16" "lpush 16" "hset 16")

mode=check
[[ ${1:-} == --record ]] && mode=record
for tool in valgrind redis-benchmark redis-cli; do
  command -v "$tool" >/dev/null || {
    echo "cost-guard: $tool not found (apt-get install valgrind redis-tools)" >&2
    exit 2
  }
done
# The copy must measure exactly as the shared script does.
shared=../shared/bench/instructions-per-request.sh
if [[ -f $shared ]] && ! cmp -s "$shared" "$ipr"; then
  echo "cost-guard: $ipr differs from $shared: copy it over (cp $shared $ipr)" >&2
  exit 2
fi

toolchain=$(rustc -V)
vg=$(valgrind --version)
cargo build --release --quiet --bin latchkey-server
bin=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys;print(json.load(sys.stdin)["target_directory"])')/release/latchkey-server

measure() { # BIN TEST PIPELINE -> instructions per request
  "$ipr" "$1" "$2" "$3" | awk '{print $(NF-1)}'
}

if [[ $mode == record ]]; then
  command -v redis-server >/dev/null || { echo "cost-guard: redis-server not found (apt-get install redis-server)" >&2; exit 2; }
  tmp=$(mktemp)
  {
    echo "# Instructions per request, server user space, counted by callgrind: bench/cost-guard.sh"
    echo "# (.ci/run fails when a latchkey row is over ${limit_pct}% above this; redis is for reference)."
    echo "# toolchain: $toolchain"
    echo "# valgrind: $vg"
    echo "# redis: $(redis-server --version | grep -o 'v=[0-9.]*')"
    echo "# row      pipeline   latchkey      redis"
    for r in "${rows[@]}"; do
      set -- $r
      printf '%-10s %8s %10s %10s\n' "$1" "$2" "$(measure "$bin" "$1" "$2")" "$(measure "$(command -v redis-server)" "$1" "$2")"
    done
  } >"$tmp"
  mv "$tmp" "$record"
  cat "$record"
  exit 0
fi

[[ -f $record ]] || { echo "cost-guard: no $record: run bench/cost-guard.sh --record" >&2; exit 2; }
rec_tc=$(sed -n 's/^# toolchain: //p' "$record")
rec_vg=$(sed -n 's/^# valgrind: //p' "$record")
if [[ $rec_tc != "$toolchain" || $rec_vg != "$vg" ]]; then
  echo "cost-guard: the record was made with '$rec_tc' and '$rec_vg', this is '$toolchain' and '$vg':" >&2
  echo "  counts are not comparable; run bench/cost-guard.sh --record and commit the record, saying why" >&2
  exit 1
fi
fail=0
printf '%-10s %8s %10s %10s %8s\n' row pipeline record now change
for r in "${rows[@]}"; do
  set -- $r
  want=$(awk -v t="$1" -v p="$2" '$1 == t && $2 == p {print $3}' "$record")
  [[ -n $want ]] || { echo "cost-guard: no record for $1 P$2: re-record" >&2; exit 1; }
  now=$(measure "$bin" "$1" "$2")
  # Time-bound work (cron, the expiry loop, stats) grows with how slowly valgrind runs on a busy
  # machine and only ever adds: a row over the limit is measured twice more and the least counts.
  for _ in 1 2; do
    (( now * 100 > want * (100 + limit_pct) )) || break
    again=$(measure "$bin" "$1" "$2")
    (( again < now )) && now=$again
  done
  pct=$(( (now - want) * 100 / want ))
  flag=""
  if (( now * 100 > want * (100 + limit_pct) )); then flag="  over the ${limit_pct}% limit"; fail=1; fi
  printf '%-10s %8s %10s %10s %7s%%%s\n' "$1" "P$2" "$want" "$now" "$pct" "$flag"
done
if (( fail )); then
  echo "cost-guard: a row grew more than ${limit_pct}% over its record (bench/cost-record.txt)." >&2
  echo "  Find the cause; if the cost is meant, re-record (bench/cost-guard.sh --record) in the same commit and say why." >&2
fi
exit $fail
