#!/usr/bin/env bash
# Installs what is missing, then runs the whole test suite against real etcd,
# Prometheus and Chromium processes that the tests start themselves (loopback
# only, temp data dirs), and the benchmarks' smoke mode. Ends with one line
# totalling every test binary's results.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --test
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
cargo test --locked --all-targets 2>&1 | tee "$log" || status=$?
# The benchmarks' smoke mode: every measurement, tiny (full runs: BENCHMARKS.md).
cargo test --locked --bench bench -- --smoke 2>&1 | tee -a "$log" || status=$?
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "tests: %d passed, %d failed\n", p, f }' "$log"
exit "$status"
