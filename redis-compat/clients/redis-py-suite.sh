#!/usr/bin/env bash
# redis-py 8.1.0's own command tests (tests/test_commands.py and
# tests/test_asyncio/test_commands.py, from its sdist), unchanged, against
# Redis 7.0.15 and against Latchkey, each on a fresh loopback port. Run by
# ./test.sh (so in CI): about 5 minutes for both servers on a debug build.
#
# Installs the sdist's tests and a virtualenv (redis==8.1.0, pytest,
# pytest-asyncio, pytest-timeout) under target/clients/redis-py-suite/.
# Deselected: the tests listed in EXCLUDE below, each with its reason.
# Fails when any other test fails on either server.
#
# Usage: redis-compat/clients/redis-py-suite.sh [PYTEST-ARG...]
#        (e.g. --protocol=2; RESP3 is redis-py 8's default)
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
DIR=$ROOT/target/clients/redis-py-suite
VERSION=8.1.0
mkdir -p "$DIR"

# Fail on both servers (the tests expect Redis >= 7.2 or need what a lone
# server on a random port lacks):
EXCLUDE=(
  test_module              # a Redis module server on localhost:6479
  test_module_loadex       # the same
  test_psync               # a replica on localhost:6380
  test_acl_getuser_setuser # expects Redis 7.2's selectors (-@geo in the reply)
  test_xgroup_create_entriesread   # lag 1 (Redis 7.2); 7.0.15 replies -6
  test_mset_on_cluster_multiple_slots  # a cluster test, runs on a lone server
  # Redis 7.0.15 logs 2 ACL entries: CLIENT SETINFO (7.2) is an unknown
  # subcommand there; latchkey has it, denies it and logs 3 (as 7.2 does).
  test_acl_log
)

if [ ! -x "$DIR/venv/bin/pytest" ] || [ ! -d "$DIR/redis-$VERSION/tests" ]; then
  rm -rf "$DIR/venv" "$DIR/redis-$VERSION"
  python3 -m venv "$DIR/venv"
  "$DIR/venv/bin/pip" download --quiet --disable-pip-version-check --no-binary :all: --no-deps \
    -d "$DIR" "redis==$VERSION"
  tar xzf "$DIR/redis-$VERSION.tar.gz" -C "$DIR"
  "$DIR/venv/bin/pip" install --quiet --disable-pip-version-check "redis==$VERSION" \
    pytest pytest-asyncio pytest-timeout packaging
fi

cargo build --quiet --bin latchkey-server
LK_BIN=${CARGO_TARGET_DIR:-$ROOT/target}/debug/latchkey-server
WORK=$(mktemp -d /tmp/latchkey-redis-py-suite.XXXXXX)
. "$ROOT/bench/ports.sh"
trap cleanup_pair EXIT INT TERM
start_pair

# Deselects by exact test name (pytest's -k and --deselect match prefixes and
# substrings: test_module would drop test_module_list too).
cat >"$DIR/latchkey_exclude.py" <<'PY'
import os

def pytest_collection_modifyitems(config, items):
    names = set(os.environ["LATCHKEY_EXCLUDE"].split())
    drop = [i for i in items if getattr(i, "originalname", i.name) in names]
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = [i for i in items if i not in drop]
PY
failed=""
for side in redis latchkey; do
  port=$RD_PORT
  [ "$side" = latchkey ] && port=$LK_PORT
  echo "== redis-py $VERSION tests against $side"
  if ! (cd "$DIR/redis-$VERSION" && LATCHKEY_EXCLUDE="${EXCLUDE[*]}" PYTHONPATH=$DIR \
    timeout 900 "$DIR/venv/bin/python" -m pytest -p no:cacheprovider -p latchkey_exclude -q \
    --timeout 30 -rfE --redis-url="redis://127.0.0.1:$port/0" "$@" \
    tests/test_commands.py tests/test_asyncio/test_commands.py >"$WORK/$side.out" 2>&1); then
    grep -E '^(FAILED|ERROR) ' "$WORK/$side.out" || tail -30 "$WORK/$side.out"
    failed="$failed $side"
  fi
  tail -1 "$WORK/$side.out"
done
if [ -n "$failed" ]; then
  echo "redis-py suite failed on:$failed"
  exit 1
fi
echo "redis-py suite: passed on both servers"
