#!/usr/bin/env bash
# Data types against Debian's redis-server, side by side in one run:
#  1. memory (used_memory and VmRSS growth) for six shapes, each loaded into
#     a freshly started pair of servers: a hash of 1M fields, a list of 1M
#     elements, a set of 1M integers, a set of 1M strings, a sorted set of
#     1M members, 100k hashes of 10 fields, a stream of 1M entries of 2
#     fields, a stream whose group holds 100k pending entries (10
#     consumers);
#  2. cost growth of ZADD (updates), ZRANK and ZRANGEBYSCORE ... LIMIT 0 10
#     on sorted sets of 10^3, 10^5 and 10^6 members (redis-benchmark,
#     pipeline 32, random members), as requests/s and the latchkey/redis
#     ratio.
#
# Usage: bench/types.sh        Env: SHAPES=all|hash,list,... GROWTH=1, REQUESTS=200000
# Not a test: it prints a markdown report and exits 0 unless something could
# not start. Takes ~5 minutes plus the release build.
set -euo pipefail
cd "$(dirname "$0")/.."

REQUESTS=${REQUESTS:-200000}
SHAPES=${SHAPES:-hash,list,intset,strset,zset,smallhashes,stream,pending}
GROWTH=${GROWTH:-1}
. bench/ports.sh
bench_setup types redis-server redis-benchmark redis-cli python3
bench_build latchkey

rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }
used_memory() {
  redis-cli -p "$1" INFO memory | tr -d '\r' | awk -F: '$1 == "used_memory" { print $2 }'
}

# Writes the RESP commands that load shape $1 to stdout (1000 items per
# command), for redis-cli --pipe.
gen() {
  python3 - "$1" <<'EOF'
import sys
shape = sys.argv[1]
out = sys.stdout.buffer

def cmd(*args):
    parts = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(a), a))
    out.write(b"".join(parts))

N = 1_000_000
B = 1000
if shape == "hash":
    for s in range(0, N, B):
        args = []
        for i in range(s, s + B):
            args += [f"field:{i}", f"value:{i}"]
        cmd("HSET", "h", *args)
elif shape == "list":
    for s in range(0, N, B):
        cmd("RPUSH", "l", *[f"element:{i}" for i in range(s, s + B)])
elif shape == "intset":
    for s in range(0, N, B):
        cmd("SADD", "s", *range(s, s + B))
elif shape == "strset":
    for s in range(0, N, B):
        cmd("SADD", "s", *[f"member:{i}" for i in range(s, s + B)])
elif shape == "zset":
    for s in range(0, N, B):
        args = []
        for i in range(s, s + B):
            args += [i * 1.5, f"member:{i}"]
        cmd("ZADD", "z", *args)
elif shape == "smallhashes":
    for i in range(100_000):
        args = []
        for f in range(10):
            args += [f"f{f}", f"value:{i}:{f}"]
        cmd("HSET", f"h:{i}", *args)
elif shape == "stream":
    for i in range(1, N + 1):
        cmd("XADD", "x", f"{i}-0", "field1", f"value:{i}", "field2", i)
elif shape == "pending":
    for i in range(1, 100_001):
        cmd("XADD", "x", f"{i}-0", "f", f"v{i}")
    cmd("XGROUP", "CREATE", "x", "g", "0")
    for c in range(10):
        cmd("XREADGROUP", "GROUP", "g", f"consumer-{c}", "COUNT", 10000, "STREAMS", "x", ">")
EOF
}

declare -A mem
shapes_run=()
for shape in $(echo "$SHAPES" | tr ',' ' '); do
  echo "memory: $shape" >&2
  gen "$shape" >"$WORK/load.resp"
  start_pair
  for s in latchkey redis; do
    if [ $s = latchkey ]; then port=$LK_PORT pid=$LK_PID; else port=$RD_PORT pid=$RD_PID; fi
    u0=$(used_memory "$port")
    r0=$(rss_kb "$pid")
    redis-cli -p "$port" --pipe <"$WORK/load.resp" >"$WORK/pipe.log" 2>&1 ||
      { echo "load of $shape into $s failed:" >&2; cat "$WORK/pipe.log" >&2; }
    u1=$(used_memory "$port")
    r1=$(rss_kb "$pid")
    mem[$shape,$s,used]=$((u1 - u0))
    mem[$shape,$s,rss]=$(((r1 - r0) * 1024))
  done
  stop_pair
  shapes_run+=("$shape")
done

echo "### Memory growth per data shape (bytes; each shape on fresh servers)"
echo
echo "| shape | latchkey used_memory | redis used_memory | ratio | latchkey RSS | redis RSS | ratio |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
for shape in "${shapes_run[@]}"; do
  lu=${mem[$shape,latchkey,used]} ru=${mem[$shape,redis,used]}
  lr=${mem[$shape,latchkey,rss]} rr=${mem[$shape,redis,rss]}
  python3 -c "
lu,ru,lr,rr=$lu,$ru,$lr,$rr
f=lambda v: f'{v:,}'
r=lambda a,b: f'{a/b:.2f}' if b else 'n/a'
print(f'| $shape | {f(lu)} | {f(ru)} | {r(lu,ru)} | {f(lr)} | {f(rr)} | {r(lr,rr)} |')"
done

[ "$GROWTH" = 1 ] || exit 0

# Sorted-set cost growth: members "member:<12-digit n>" with score n, as
# redis-benchmark's __rand_int__ formats them, so random picks hit members.
echo >&2
python3 - "$WORK" <<'EOF'
import sys
work = sys.argv[1]
for n in (1000, 100_000, 1_000_000):
    with open(f"{work}/z{n}.resp", "wb") as out:
        B = 1000
        for s in range(0, n, B):
            parts = []
            args = [b"ZADD", b"z"]
            for i in range(s, min(s + B, n)):
                args += [str(i).encode(), b"member:%012d" % i]
            parts.append(b"*%d\r\n" % len(args))
            for a in args:
                parts.append(b"$%d\r\n%s\r\n" % (len(a), a))
            out.write(b"".join(parts))
EOF
echo
echo "### Sorted-set cost growth (requests/s, pipeline 32, 50 clients; random members)"
echo
echo "| members | op | latchkey rps | redis rps | latchkey/redis |"
echo "| ---: | --- | ---: | ---: | ---: |"
for n in 1000 100000 1000000; do
  echo "growth: $n" >&2
  start_pair
  for port in $LK_PORT $RD_PORT; do
    redis-cli -p "$port" --pipe <"$WORK/z$n.resp" >/dev/null
  done
  for op in zadd zrank zrangebyscore; do
    case $op in
      zadd) args=(ZADD z __rand_int__ member:__rand_int__) ;;
      zrank) args=(ZRANK z member:__rand_int__) ;;
      zrangebyscore) args=(ZRANGEBYSCORE z __rand_int__ +inf LIMIT 0 10) ;;
    esac
    declare -A r=()
    for s in latchkey redis; do
      if [ $s = latchkey ]; then port=$LK_PORT; else port=$RD_PORT; fi
      r[$s]=$(redis-benchmark -h 127.0.0.1 -p "$port" -n "$REQUESTS" -c 50 -P 32 -r "$n" \
        --csv "${args[@]}" 2>/dev/null | tail -n 1 | tr -d '"' | cut -d, -f2)
    done
    python3 -c "
l,r=${r[latchkey]},${r[redis]}
print(f'| $n | $op | {l:,.0f} | {r:,.0f} | {l/r:.2f} |')"
  done
  stop_pair
done
