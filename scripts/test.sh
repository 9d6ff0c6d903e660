#!/usr/bin/env bash
# Installs what is missing, then runs the whole test suite against real etcd,
# Prometheus and Chromium processes that the tests start themselves (loopback
# only, temp data dirs), and the benchmarks' smoke mode. Ends with one line
# totalling every test binary's results.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --test
# Style and lints first: a formatting slip or a clippy warning fails CI.
cargo fmt --all -- --check
cargo clippy --locked --all-targets -- -D warnings
# The library alone builds without the server's crates (README: "As a library").
scripts/check-library.sh
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
cargo test --locked --no-fail-fast --all-targets 2>&1 | tee "$log" || status=$?
# The election, watch, serve, interop, Go interop, queue, holder-safety, acting, Patroni, sources and fault suites (fast groups) again against
# etcd 3.5.30 (Debian sid's, fetched by setup.sh; its etcd, etcdctl and etcdutl first in PATH;
# the harness takes the server from TENURE_TEST_ETCD_BIN). The first run above is Debian's 3.4.23.
etcd35="${TENURE_ETCD35_DIR:-/opt/tenure-etcd-3.5.30}"
PATH="$etcd35/bin:$PATH" TENURE_TEST_ETCD_BIN="$etcd35/bin/etcd" \
  cargo test --locked --no-fail-fast --test election --test watch --test serve --test interop \
  --test causes --test faults --test belief --test holder --test queue --test go_interop \
  --test patroni --test restore --test edges --test sources --test patroni_source --test acting 2>&1 | tee -a "$log" || status=$?
# The benchmarks' smoke mode: every measurement, tiny (full runs: BENCHMARKS.md).
cargo test --locked --bench bench -- --smoke 2>&1 | tee -a "$log" || status=$?
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "tests: %d passed, %d failed\n", p, f }' "$log"
exit "$status"
