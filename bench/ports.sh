# Sourced by the bench scripts: loopback port helpers.

# A free TCP port on 127.0.0.1.
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# Waits (up to 5 s) until a server answers PING on 127.0.0.1:$1.
wait_up() {
  local port=$1
  for _ in $(seq 100); do
    redis-cli -p "$port" ping >/dev/null 2>&1 && return 0
    sleep 0.05
  done
  echo "server on port $port did not start" >&2
  exit 1
}

# Sets LK_PORT and RD_PORT to two distinct free ports.
pick_ports() {
  LK_PORT=$(free_port)
  RD_PORT=$(free_port)
  while [ "$RD_PORT" = "$LK_PORT" ]; do RD_PORT=$(free_port); done
}

# A pair of servers side by side: latchkey ($LK_BIN) and redis-server, each
# on a fresh free loopback port (LK_PORT, RD_PORT; pids LK_PID, RD_PID),
# logging into $WORK; extra options for each in LK_EXTRA / RD_EXTRA (split
# on spaces). Scripts set `trap cleanup_pair EXIT INT TERM` (bench_setup
# does) so both servers stop (and $WORK goes) however the script ends.
LK_PID=""
RD_PID=""

start_pair() {
  pick_ports
  # shellcheck disable=SC2086 # the extra options are meant to split
  "$LK_BIN" --port "$LK_PORT" --bind 127.0.0.1 --save '' --dir "$WORK" ${LK_EXTRA:-} >"$WORK/latchkey.log" 2>&1 &
  LK_PID=$!
  # shellcheck disable=SC2086
  redis-server --port "$RD_PORT" --bind 127.0.0.1 --save '' --appendonly no \
    --daemonize no ${RD_EXTRA:-} >"$WORK/redis.log" 2>&1 &
  RD_PID=$!
  wait_up "$LK_PORT"
  wait_up "$RD_PORT"
}

stop_pair() {
  for pid in $LK_PID $RD_PID; do
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  LK_PID=""
  RD_PID=""
}

cleanup_pair() {
  stop_pair
  rm -rf "$WORK"
}

# bench_setup NAME [TOOL...]: the start every bench script shares: a fresh
# $WORK (/tmp/latchkey-NAME.XXXXXX), the trap that stops the servers and
# removes $WORK however the script ends, and a check that each TOOL is
# installed (exit 1 naming the first one missing).
bench_setup() {
  local name=$1 tool
  shift
  WORK=$(mktemp -d "/tmp/latchkey-$name.XXXXXX")
  trap cleanup_pair EXIT INT TERM
  for tool in "$@"; do
    command -v "$tool" >/dev/null || { echo "missing $tool" >&2; exit 1; }
  done
}

# bench_build WHAT [CARGO-ARG...]: `cargo build --release --quiet` with the
# arguments (--bin / --example; none builds everything), and LK_BIN set to
# the server; WHAT names what is built in the progress line.
bench_build() {
  local what=$1
  shift
  echo "building $what (release)..." >&2
  cargo build --release --quiet "$@"
  LK_BIN=target/release/latchkey-server
}

# Median of numbers on stdin.
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# The side-by-side table for SET and GET at pipelines 1 and 16: latchkey
# on port $1, redis on $2, each figure the median of $RUNS alternating
# runs of the caller's `rps PORT TEST PIPELINE` (requests/s).
set_get_table() {
  echo "| test | pipeline | latchkey ops/s | redis ops/s | latchkey/redis |"
  echo "| --- | ---: | ---: | ---: | ---: |"
  local pipe t l r
  for pipe in 1 16; do
    for t in set get; do
      local lk=() rd=()
      for _ in $(seq "$RUNS"); do
        lk+=("$(rps "$1" "$t" "$pipe")")
        rd+=("$(rps "$2" "$t" "$pipe")")
      done
      l=$(printf '%s\n' "${lk[@]}" | median)
      r=$(printf '%s\n' "${rd[@]}" | median)
      printf '| %s | %s | %.0f | %.0f | %.2f |\n' "$t" "$pipe" "$l" "$r" "$(echo "$l / $r" | bc -l)"
    done
  done
}
