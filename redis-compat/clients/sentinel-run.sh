#!/usr/bin/env bash
# Runs a client test against a Sentinel-managed trio it starts and owns:
# a primary with two replicas (latchkey nodes from $LK_BIN, or redis-server
# nodes) and three redis-sentinel processes (bench/sentinel.sh), all on
# free loopback ports, every one stopped however this script exits.
# The test gets SENTINEL_PORTS (space-separated) and PRIMARY_PID (to
# kill -9) in its environment.
#
# Usage: redis-compat/clients/sentinel-run.sh latchkey|redis CMD [ARG...]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
KIND=$1
shift
. "$ROOT/bench/ports.sh"
. "$ROOT/bench/sentinel.sh"
WORK=$(mktemp -d /tmp/latchkey-sentinel-client.XXXXXX)
trap 'stop_all; rm -rf "$WORK"' EXIT INT TERM
sentinel_trio "$KIND" "$WORK"
SENTINEL_PORTS="${SPORTS[*]}" PRIMARY_PID=${PID_OF[${PORTS[0]}]} "$@"
