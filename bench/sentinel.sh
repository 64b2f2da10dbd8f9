# Sourced by bench/sentinel-failover.sh and redis-compat/clients/sentinel-run.sh
# (after bench/ports.sh): a primary with two replicas, latchkey ($LK_BIN) or
# redis-server nodes, and three redis-sentinel processes monitoring it as
# `mymaster` (quorum 2, down-after-milliseconds 1000, failover-timeout
# 2000), all on free loopback ports under a directory of the caller's.
# Every pid started goes to PIDS; the caller's trap runs stop_all.

PIDS=()
stop_all() {
  local pid
  for pid in "${PIDS[@]}"; do
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  PIDS=()
}

# start_node KIND DIR PORT: a node (NODE_PID), logging to DIR/node.log.
start_node() {
  local kind=$1 dir=$2 port=$3
  local opts=(--port "$port" --bind 127.0.0.1 --dir "$dir" --save '' --repl-diskless-sync-delay 0)
  if [ "$kind" = latchkey ]; then
    "$LK_BIN" "${opts[@]}" --logfile "$dir/node.log" >/dev/null 2>&1 &
  else
    redis-server "${opts[@]}" --appendonly no --daemonize no --logfile "$dir/node.log" >/dev/null 2>&1 &
  fi
  NODE_PID=$!
  PIDS+=("$NODE_PID")
}

info_field() { # port section field
  redis-cli -p "$1" info "$2" | tr -d '\r' | awk -F: -v f="$3" '$1 == f {print $2}'
}

# until_ok WHAT CMD...: CMD until it succeeds, every 50 ms, for 30 s at most.
until_ok() {
  local what=$1
  shift
  for _ in $(seq 600); do
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.05
  done
  echo "timed out: $what" >&2
  exit 1
}

# settled MASTER: every sentinel names MASTER, sees two replicas up and
# linked and the two other sentinels, and the other nodes follow MASTER.
settled() {
  local want=$1 s r
  for s in "${SPORTS[@]}"; do
    [ "$(redis-cli -p "$s" sentinel get-master-addr-by-name mymaster | tail -1)" = "$want" ] || return 1
    [ "$(redis-cli -p "$s" sentinel replicas mymaster | grep -A1 '^flags$' | grep -cx slave)" = 2 ] || return 1
    [ "$(redis-cli -p "$s" sentinel sentinels mymaster | grep -c '^name$')" = 2 ] || return 1
  done
  for r in "${PORTS[@]}"; do
    [ "$r" = "$want" ] && continue
    [ "$(info_field "$r" replication master_port)" = "$want" ] || return 1
    [ "$(info_field "$r" replication master_link_status)" = up ] || return 1
  done
}

# sentinel_trio KIND BASE: nodes in BASE/n0..2 (ports PORTS, the primary
# PORTS[0]; pids PID_OF[port]) and sentinels in BASE/s0..2 (ports
# SPORTS), waited for until settled.
declare -A PID_OF
sentinel_trio() {
  local kind=$1 base=$2 i sp
  PORTS=()
  SPORTS=()
  for i in 0 1 2; do
    PORTS+=("$(free_port)")
    mkdir -p "$base/n$i" "$base/s$i"
  done
  for i in 0 1 2; do
    start_node "$kind" "$base/n$i" "${PORTS[$i]}"
    PID_OF[${PORTS[$i]}]=$NODE_PID
    wait_up "${PORTS[$i]}"
  done
  for i in 1 2; do
    redis-cli -p "${PORTS[$i]}" replicaof 127.0.0.1 "${PORTS[0]}" >/dev/null
  done
  for i in 0 1 2; do
    sp=$(free_port)
    SPORTS+=("$sp")
    cat >"$base/s$i/sentinel.conf" <<CONF
port $sp
bind 127.0.0.1
daemonize no
dir $base/s$i
logfile $base/s$i/sentinel.log
sentinel monitor mymaster 127.0.0.1 ${PORTS[0]} 2
sentinel down-after-milliseconds mymaster 1000
sentinel failover-timeout mymaster 2000
CONF
    redis-sentinel "$base/s$i/sentinel.conf" >/dev/null 2>&1 &
    PIDS+=("$!")
  done
  until_ok "$kind: sentinels settled" settled "${PORTS[0]}"
}
