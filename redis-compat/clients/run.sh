#!/usr/bin/env bash
# Real client libraries, unchanged, against Latchkey and against Redis 7.0
# (the oracle: a test that fails there is a broken test, not a finding).
#
# Installs redis-py, python-redis-lock (a virtualenv) and node-redis,
# ioredis, node-redlock (node_modules) under target/clients/, from PyPI and
# npm, pinned in python/requirements.txt and node/package.json. Starts both
# servers on free loopback ports and stops them on exit, however it exits.
#
# Usage: redis-compat/clients/run.sh            (builds latchkey-server first)
# Env:   CLIENT_TESTS="redis-py python-redis-lock redlock node-redis" to pick.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
HERE=$ROOT/redis-compat/clients
WORK=$ROOT/target/clients
mkdir -p "$WORK"
TESTS=${CLIENT_TESTS:-"redis-py python-redis-lock redlock node-redis"}

cargo build --quiet --bin latchkey-server
LK_BIN=${CARGO_TARGET_DIR:-$ROOT/target}/debug/latchkey-server

# Python: a virtualenv, re-created when the pinned requirements change.
if [ "$(cat "$WORK/venv.req" 2>/dev/null)" != "$(cat "$HERE/python/requirements.txt")" ]; then
  rm -rf "$WORK/venv"
  python3 -m venv "$WORK/venv"
  "$WORK/venv/bin/pip" install --quiet --disable-pip-version-check -r "$HERE/python/requirements.txt"
  cp "$HERE/python/requirements.txt" "$WORK/venv.req"
fi
# Node: node_modules beside a copy of package.json.
if ! cmp -s "$HERE/node/package.json" "$WORK/node/package.json" 2>/dev/null; then
  rm -rf "$WORK/node"
  mkdir -p "$WORK/node"
  cp "$HERE/node/package.json" "$WORK/node/"
  (cd "$WORK/node" && npm install --silent --no-audit --no-fund >/dev/null 2>&1)
fi

. "$ROOT/bench/ports.sh"
pick_ports
LOGS=$(mktemp -d /tmp/latchkey-clients.XXXXXX)
LK_PID=""
RD_PID=""
cleanup() {
  for pid in $LK_PID $RD_PID; do
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$LOGS"
}
trap cleanup EXIT INT TERM
"$LK_BIN" --port "$LK_PORT" --bind 127.0.0.1 >"$LOGS/latchkey.log" 2>&1 &
LK_PID=$!
redis-server --port "$RD_PORT" --bind 127.0.0.1 --save '' --appendonly no \
  --daemonize no >"$LOGS/redis.log" 2>&1 &
RD_PID=$!
wait_up "$LK_PORT"
wait_up "$RD_PORT"

run_one() { # name port
  case "$1" in
    redis-py) timeout 600 "$WORK/venv/bin/python" "$HERE/python/test_redis_py_lock.py" "$2" ;;
    python-redis-lock) timeout 600 "$WORK/venv/bin/python" "$HERE/python/test_python_redis_lock.py" "$2" ;;
    redlock) (cd "$WORK/node" && NODE_PATH=$WORK/node/node_modules timeout 600 node "$HERE/node/redlock.js" "$2") ;;
    node-redis) (cd "$WORK/node" && NODE_PATH=$WORK/node/node_modules timeout 600 node "$HERE/node/node-redis.js" "$2") ;;
    *) echo "unknown client test $1" >&2; return 2 ;;
  esac
}

failed=""
for t in $TESTS; do
  for side in redis latchkey; do
    port=$RD_PORT
    [ "$side" = latchkey ] && port=$LK_PORT
    echo "== $t against $side"
    if ! run_one "$t" "$port"; then
      echo "FAIL: $t against $side"
      failed="$failed $t/$side"
    fi
  done
done
if [ -n "$failed" ]; then
  echo "client tests failed:$failed"
  tail -20 "$LOGS/latchkey.log" || true
  exit 1
fi
echo "client tests: all passed on both servers"
