#!/usr/bin/env bash
# Commands as an ACL user with key patterns (issue 12's target):
# redis-benchmark -t set,get -c 50 at pipeline 1 and 16, authenticated as a
# user allowed `~key:* +@all` (redis-benchmark's keys are key:NNN), against
# latchkey (release build) and Debian's redis-server with the same user,
# alternating the servers run by run (A B A B ...).
#
# Usage: bench/acl.sh      Env: RUNS=3 REQUESTS=300000
# Prints a markdown table; not a test (exits 0 unless a server fails).
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS=${RUNS:-3}
REQUESTS=${REQUESTS:-300000}
. bench/ports.sh
bench_setup acl redis-server redis-benchmark redis-cli bc
bench_build latchkey --bin latchkey-server

rps() { # port test pipeline -> requests/s
  redis-benchmark -p "$1" --user bench -a benchpw -t "$2" -n "$REQUESTS" -c 50 -P "$3" \
    -r 100000 -q 2>/dev/null | grep -o '[0-9.]* requests per second' | awk '{print $1}'
}

start_pair
for p in "$LK_PORT" "$RD_PORT"; do
  redis-cli -p "$p" ACL SETUSER bench on '>benchpw' '~key:*' '+@all' >/dev/null
  # The user must be refused elsewhere, or the patterns are not checked.
  case "$(redis-cli -p "$p" --user bench -a benchpw --no-auth-warning GET other)" in
    NOPERM*) ;;
    *) echo "the ACL user is not restricted on port $p" >&2; exit 1 ;;
  esac
done
set_get_table "$LK_PORT" "$RD_PORT"
echo
echo "Machine: $(nproc) cores; redis-benchmark shares them with both servers."
