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
# The suites that talk to etcd again on each other etcd line: 3.5.30 (Debian sid's, fetched
# by setup.sh) and 3.6, 3.7 (built by setup.sh from etcd's modules). Each line's etcd,
# etcdctl and etcdutl come first in PATH; the harness takes the server from
# TENURE_TEST_ETCD_BIN and builds the Go interop client of the same line. The first run
# above is Debian bookworm's 3.4.23.
etcd_suites=(election watch serve interop causes faults belief holder queue go_interop
  patroni restore edges sources patroni_source acting clusters auth tls kubernetes kubernetes_api)
on_etcd() { # dir
  local args=() t
  for t in "${etcd_suites[@]}"; do args+=(--test "$t"); done
  echo "== the etcd suites on $("$1/bin/etcd" --version | sed -n 1p)"
  PATH="$1/bin:$PATH" TENURE_TEST_ETCD_BIN="$1/bin/etcd" \
    cargo test --locked --no-fail-fast "${args[@]}" 2>&1 | tee -a "$log" || status=$?
}
on_etcd "${TENURE_ETCD35_DIR:-/opt/tenure-etcd-3.5.30}"
for mod in scripts/etcd/*/go.mod; do
  on_etcd "/opt/tenure-etcd-$(awk '$1 == "go.etcd.io/etcd/server/v3" {print substr($2, 2); exit}' "$mod")"
done
# The benchmarks' smoke mode: every measurement, tiny (full runs: BENCHMARKS.md).
cargo test --locked --bench bench -- --smoke 2>&1 | tee -a "$log" || status=$?
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "tests: %d passed, %d failed\n", p, f }' "$log"
exit "$status"
