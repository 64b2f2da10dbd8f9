#!/usr/bin/env bash
# Real client libraries, unchanged, against Latchkey and against Redis 7.0
# (the oracle: a test that fails there is a broken test, not a finding).
#
# Installs redis-py, python-redis-lock (a virtualenv) and node-redis,
# ioredis, node-redlock, BullMQ (node_modules) under target/clients/, from
# PyPI and npm, pinned in python/requirements.txt and node/package.json.
# Starts both servers on free loopback ports and stops them on exit,
# however it exits.
#
# Usage: redis-compat/clients/run.sh            (builds latchkey-server first)
# Env:   CLIENT_TESTS="redis-py python-redis-lock stream-workers redlock
#        node-redis bullmq sentinel-py ioredis-sentinel" (the default: all)
#        to pick. The sentinel tests start their own nodes and sentinels
#        (sentinel-run.sh), latchkey's or Redis's as the side says.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
HERE=$ROOT/redis-compat/clients
INSTALL=$ROOT/target/clients
mkdir -p "$INSTALL"
TESTS=${CLIENT_TESTS:-"redis-py python-redis-lock stream-workers redlock node-redis bullmq sentinel-py ioredis-sentinel"}

cargo build --quiet --bin latchkey-server
LK_BIN=${CARGO_TARGET_DIR:-$ROOT/target}/debug/latchkey-server

# Python: a virtualenv, re-created when the pinned requirements change.
if [ "$(cat "$INSTALL/venv.req" 2>/dev/null)" != "$(cat "$HERE/python/requirements.txt")" ]; then
  rm -rf "$INSTALL/venv"
  python3 -m venv "$INSTALL/venv"
  "$INSTALL/venv/bin/pip" install --quiet --disable-pip-version-check -r "$HERE/python/requirements.txt"
  cp "$HERE/python/requirements.txt" "$INSTALL/venv.req"
fi
# Node: node_modules beside a copy of package.json.
if ! cmp -s "$HERE/node/package.json" "$INSTALL/node/package.json.done" 2>/dev/null; then
  rm -rf "$INSTALL/node"
  mkdir -p "$INSTALL/node"
  cp "$HERE/node/package.json" "$INSTALL/node/"
  # Installed from a copy; recorded (package.json.done) only once npm succeeded.
  (cd "$INSTALL/node" && npm install --silent --no-audit --no-fund >npm.log 2>&1) ||
    { cat "$INSTALL/node/npm.log" >&2; rm -rf "$INSTALL/node"; exit 1; }
  cp "$HERE/node/package.json" "$INSTALL/node/package.json.done"
fi

WORK=$(mktemp -d /tmp/latchkey-clients.XXXXXX)
. "$ROOT/bench/ports.sh"
trap cleanup_pair EXIT INT TERM
start_pair

run_one() { # name port side
  case "$1" in
    sentinel-py) LK_BIN=$LK_BIN timeout 300 "$HERE/sentinel-run.sh" "$3" "$INSTALL/venv/bin/python" "$HERE/python/test_sentinel.py" ;;
    ioredis-sentinel) (cd "$INSTALL/node" && NODE_PATH=$INSTALL/node/node_modules LK_BIN=$LK_BIN timeout 300 "$HERE/sentinel-run.sh" "$3" node "$HERE/node/ioredis-sentinel.js") ;;
    redis-py) timeout 600 "$INSTALL/venv/bin/python" "$HERE/python/test_redis_py_lock.py" "$2" ;;
    python-redis-lock) timeout 600 "$INSTALL/venv/bin/python" "$HERE/python/test_python_redis_lock.py" "$2" ;;
    redlock) (cd "$INSTALL/node" && NODE_PATH=$INSTALL/node/node_modules timeout 600 node "$HERE/node/redlock.js" "$2") ;;
    node-redis) (cd "$INSTALL/node" && NODE_PATH=$INSTALL/node/node_modules timeout 600 node "$HERE/node/node-redis.js" "$2") ;;
    bullmq) (cd "$INSTALL/node" && NODE_PATH=$INSTALL/node/node_modules timeout 300 node "$HERE/node/bullmq.js" "$2") ;;
    stream-workers) timeout 300 "$INSTALL/venv/bin/python" "$HERE/python/test_stream_workers.py" "$2" ;;
    *) echo "unknown client test $1" >&2; return 2 ;;
  esac
}

failed=""
for t in $TESTS; do
  for side in redis latchkey; do
    port=$RD_PORT
    [ "$side" = latchkey ] && port=$LK_PORT
    echo "== $t against $side"
    if ! run_one "$t" "$port" "$side"; then
      echo "FAIL: $t against $side"
      failed="$failed $t/$side"
    fi
  done
done
if [ -n "$failed" ]; then
  echo "client tests failed:$failed"
  tail -20 "$WORK/latchkey.log" || true
  exit 1
fi
echo "client tests: all passed on both servers"
