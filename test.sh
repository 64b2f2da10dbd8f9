#!/usr/bin/env bash
# Every test suite, on a fresh machine: installs what the suites need when it is missing, then runs
#   cargo test                        unit and integration tests of every workspace member
#   cargo test --test compat          the differential suite against Redis 7.0 (redis-compat/)
#   redis-compat/clients/run.sh       real client libraries (installed under target/clients)
#   redis-compat/clients/redis-py-suite.sh   redis-py 8.1's own command tests, on both servers
# What it installs: Debian's redis-server, redis-tools and redis-sentinel (the oracle and redis-cli),
# valgrind (the cost guard), util-linux and iproute2 (prlimit, unshare, ip), with apt-get, as root or
# through sudo. Python's venv and npm must be there (python3-venv, nodejs, npm).
# Extra arguments go to `cargo test` (e.g. ./test.sh --release).
set -euo pipefail
cd "$(dirname "$0")"

# command -> Debian package
declare -A need=(
  [redis-server]=redis-server [redis-cli]=redis-tools [redis-benchmark]=redis-tools
  [redis-sentinel]=redis-sentinel [valgrind]=valgrind [prlimit]=util-linux
  [unshare]=util-linux [ip]=iproute2 [setpriv]=util-linux
)
missing=()
for cmd in "${!need[@]}"; do
  command -v "$cmd" >/dev/null 2>&1 || missing+=("${need[$cmd]}")
done
if ((${#missing[@]})); then
  mapfile -t missing < <(printf '%s\n' "${missing[@]}" | sort -u)
  echo "test.sh: installing ${missing[*]}" >&2
  sudo=()
  [[ $(id -u) == 0 ]] || sudo=(sudo)
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  # Debian starts a redis-server (and a sentinel) service on install; the suites start their own.
  ("${sudo[@]}" service redis-server stop >/dev/null 2>&1 || true)
  ("${sudo[@]}" service redis-sentinel stop >/dev/null 2>&1 || true)
fi

cargo test "$@"
cargo test --test compat
redis-compat/clients/run.sh
redis-compat/clients/redis-py-suite.sh
