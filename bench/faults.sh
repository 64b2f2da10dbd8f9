#!/usr/bin/env bash
# The fault-injection checker's long run (issue 11): tests/faults.rs with
# LK_FAULT_SECS (default 300) and a release build, printing its report:
# grants, accepted/refused writes, lost updates, faults of each kind and
# how long the lock was unavailable after those that hit the holder.
# Usage: bench/faults.sh      Env: LK_FAULT_SECS=300
set -euo pipefail
cd "$(dirname "$0")/.."
LK_FAULT_SECS=${LK_FAULT_SECS:-300} cargo test --release --test faults fault_checker -- --nocapture 2>&1 |
  grep -E '^fault checker|^  [A-Z]|^test result|panicked'
