#!/usr/bin/env bash
# The live demo: installs what is missing, builds tenure, and runs `tenure dev`:
# a private etcd on loopback (temp data dir), the dashboard, and a demo fleet
# whose elections change leader, expire, get deposed, include another system's
# (etcdctl elect), and replay the split-brain story with two `tenure campaign`
# processes, so that an overlap of two holders and fencing refusals appear.
# Open the printed URL; Ctrl-C stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cargo build --release --locked --quiet
exec target/release/tenure dev "$@"
