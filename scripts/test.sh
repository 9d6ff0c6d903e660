#!/usr/bin/env bash
# Installs what is missing, then runs the whole test suite against real etcd
# processes that the tests start themselves (loopback only, temp data dirs).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --test
cargo test --locked --all-targets
