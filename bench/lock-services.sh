#!/usr/bin/env bash
# Lock services side by side (issue 22): Latchkey against ZooKeeper 3.8 and
# etcd 3.4 (Debian's packages), all single-node on free loopback ports:
#   - ZooKeeper standalone (ZooKeeperServerMain, a generated zoo.cfg, its own
#     data dir), clients: kazoo's Lock recipe, 4 s session;
#   - etcd single node (its own data dir), clients: the v3 lock API over the
#     JSON gateway with a 5 s lease per worker;
#   - Latchkey, release build: a primary with one Latchkey replica and
#     `tp-min-acks 1` (every grant acknowledged by the replica before the
#     client is told), and a second primary alone (tp-min-acks 0);
#     clients: redis-py, `SETTP lock value QUEUE` / TPRELEASE.
# 16 Python worker processes per system, 100 cycles each of acquire → read
# a counter file → write it + 1 → release; rounds interleaved; then the
# failover after a holder's kill -9. See bench/lock_services.py.
#
# Usage: bench/lock-services.sh      (about 4 minutes plus the build; needs
#        `apt-get install -y zookeeper etcd-server` and PyPI for the venv)
# Env:   LK_BIN=<a built server> (else the release build), ROUNDS=3, WORKERS=16, CYCLES=100, WARMUP_CYCLES=100 (an uncounted
#        round first), FAILOVER_REPS=5,
#        MD=bench/lock-services-results.md (empty: print only)
# Installs kazoo and redis-py into target/lock-services/venv from
# bench/lock-services-requirements.txt. Exits non-zero if a server could
# not start or the counter check failed.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

ROUNDS=${ROUNDS:-3}
WORKERS=${WORKERS:-16}
CYCLES=${CYCLES:-100}
WARMUP_CYCLES=${WARMUP_CYCLES:-100}
FAILOVER_REPS=${FAILOVER_REPS:-5}
MD=${MD-bench/lock-services-results.md}
ZK_JAR=/usr/share/java/zookeeper.jar

. bench/ports.sh
for tool in java etcd redis-cli python3; do
  command -v "$tool" >/dev/null || { echo "missing $tool (apt-get install -y zookeeper etcd-server redis-tools)" >&2; exit 1; }
done
[ -f "$ZK_JAR" ] || { echo "missing $ZK_JAR (apt-get install -y zookeeper)" >&2; exit 1; }

WORK=$(mktemp -d /tmp/latchkey-lock-services.XXXXXX)
PIDS=()
cleanup() {
  local pid
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do
    # Bounded: a server that ignores SIGTERM for 10 s gets SIGKILL.
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$WORK"
}
trap cleanup EXIT INT TERM

# Python: a virtualenv under target/, re-created when the pins change.
VENV=$ROOT/target/lock-services/venv
REQ=bench/lock-services-requirements.txt
if [ "$(cat "$VENV.req" 2>/dev/null)" != "$(cat "$REQ")" ]; then
  rm -rf "$VENV"
  mkdir -p "$(dirname "$VENV")"
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --disable-pip-version-check -r "$REQ"
  cp "$REQ" "$VENV.req"
fi
PY=$VENV/bin/python

if [ -z "${LK_BIN:-}" ]; then
  bench_build latchkey-server --bin latchkey-server
fi

# Seven distinct free ports.
PORTS=()
while [ "${#PORTS[@]}" -lt 7 ]; do
  p=$(free_port)
  [[ " ${PORTS[*]} " == *" $p "* ]] || PORTS+=("$p")
done
ZK_PORT=${PORTS[0]} ETCD_PORT=${PORTS[1]} ETCD_PEER=${PORTS[2]}
LKP_PORT=${PORTS[3]} LKR_PORT=${PORTS[4]} LK_PORT=${PORTS[5]}

# ZooKeeper 3.8 standalone: defaults but for the ports and the data dir
# (fsync of the transaction log on, as shipped); no admin server (it would
# take port 8080).
mkdir -p "$WORK/zk"
cat >"$WORK/zoo.cfg" <<EOF
tickTime=2000
dataDir=$WORK/zk
clientPort=$ZK_PORT
clientPortAddress=127.0.0.1
maxClientCnxns=0
admin.enableServer=false
EOF
java -Xmx512m -Dzookeeper.log.dir="$WORK" -cp "/etc/zookeeper/conf:$ZK_JAR" \
  org.apache.zookeeper.server.ZooKeeperServerMain "$WORK/zoo.cfg" >"$WORK/zookeeper.log" 2>&1 &
PIDS+=($!)

# etcd 3.4 single node, defaults but for the URLs and the data dir.
etcd --name lsbench --data-dir "$WORK/etcd" \
  --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
  --listen-peer-urls "http://127.0.0.1:$ETCD_PEER" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER" \
  --initial-cluster "lsbench=http://127.0.0.1:$ETCD_PEER" >"$WORK/etcd.log" 2>&1 &
PIDS+=($!)

# Latchkey: primary with tp-min-acks 1 and its replica; a lone primary.
mkdir -p "$WORK/lkp" "$WORK/lkr" "$WORK/lk"
"$LK_BIN" --port "$LKP_PORT" --bind 127.0.0.1 --save '' --dir "$WORK/lkp" --tp-min-acks 1 >"$WORK/lk-primary.log" 2>&1 &
PIDS+=($!)
"$LK_BIN" --port "$LKR_PORT" --bind 127.0.0.1 --save '' --dir "$WORK/lkr" --replicaof 127.0.0.1 "$LKP_PORT" >"$WORK/lk-replica.log" 2>&1 &
PIDS+=($!)
"$LK_BIN" --port "$LK_PORT" --bind 127.0.0.1 --save '' --dir "$WORK/lk" >"$WORK/lk-alone.log" 2>&1 &
PIDS+=($!)

fail_logs() {
  echo "$1" >&2
  tail -n 20 "$WORK"/*.log >&2
  exit 1
}
"$PY" bench/lock_services.py wait zk "127.0.0.1:$ZK_PORT" || fail_logs "zookeeper did not start"
"$PY" bench/lock_services.py wait etcd "127.0.0.1:$ETCD_PORT" || fail_logs "etcd did not start"
for p in "$LKP_PORT" "$LKR_PORT" "$LK_PORT"; do wait_up "$p"; done
# The replica online at the primary (<= 10 s), and a grant acknowledged.
for i in $(seq 100); do
  redis-cli -p "$LKP_PORT" info replication | grep -q '^slave0:.*state=online' && break
  [ "$i" = 100 ] && fail_logs "latchkey replica did not come online"
  sleep 0.1
done
[ "$(redis-cli -p "$LKP_PORT" settp lsbench-probe x)" = 1 ] || fail_logs "a grant with tp-min-acks 1 was refused"
echo "servers: zookeeper :$ZK_PORT, etcd :$ETCD_PORT, latchkey primary :$LKP_PORT (replica :$LKR_PORT), latchkey alone :$LK_PORT" >&2

# In the background and waited for, so that a TERM to this script runs the
# trap at once (bash defers traps until a foreground command ends).
timeout 1800 "$PY" bench/lock_services.py bench --workdir "$WORK" \
  --zk "127.0.0.1:$ZK_PORT" --etcd "127.0.0.1:$ETCD_PORT" \
  --lk-repl "127.0.0.1:$LKP_PORT" --lk "127.0.0.1:$LK_PORT" \
  --pids "zk=${PIDS[0]},etcd=${PIDS[1]},lk-repl=${PIDS[2]}+${PIDS[3]},lk=${PIDS[4]}" \
  --rounds "$ROUNDS" --workers "$WORKERS" --cycles "$CYCLES" --failover-reps "$FAILOVER_REPS" \
  --warmup-cycles "$WARMUP_CYCLES" \
  ${MD:+--md "$MD"} &
PIDS+=($!)
wait "${PIDS[-1]}"
