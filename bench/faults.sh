#!/usr/bin/env bash
# The fault-injection checker's long runs, release build, printing their
# reports (tests/faults.rs):
# - one server (issue 11): LK_FAULT_SECS (default 300) of worker faults and
#   server restarts: grants, accepted/refused writes, lost updates, faults
#   of each kind and how long the lock was unavailable after those that hit
#   the holder;
# - replicated (issue 22): a primary, two replicas and three Sentinels,
#   LK_FAULT_REPL_SECS (default 900) of faults on the servers (kill -9,
#   SIGSTOP and partition of the primary, replica restarts): grants,
#   failovers, lost updates, tokens going down, two holders at once,
#   resumes and losses; it fails with fewer than LK_FAULT_MIN_FAILOVERS
#   (default 50) failovers or LK_FAULT_MIN_GRANTS (default 10000) grants.
# Usage: bench/faults.sh [single|replicated]   (default: both)
set -euo pipefail
cd "$(dirname "$0")/.."
which=${1:-both}
if [ "$which" != replicated ]; then
  LK_FAULT_SECS=${LK_FAULT_SECS:-300} cargo test --release --test faults fault_checker -- --exact --nocapture 2>&1 |
    grep -E '^fault checker|^  [A-Z]|^test result|panicked'
fi
if [ "$which" != single ]; then
  LK_FAULT_REPL_SECS=${LK_FAULT_REPL_SECS:-900} \
  LK_FAULT_MIN_FAILOVERS=${LK_FAULT_MIN_FAILOVERS:-50} \
  LK_FAULT_MIN_GRANTS=${LK_FAULT_MIN_GRANTS:-10000} \
    cargo test --release --test faults replicated::replicated_fault_checker -- --exact --nocapture 2>&1 |
    grep -E '^replicated fault checker|^  |^test result|panicked'
fi
