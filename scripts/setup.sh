#!/usr/bin/env bash
# Installs what tenure needs on a Debian machine, only what is missing.
#   scripts/setup.sh          etcd (server and etcdctl) and protoc (etcd-client's build)
#   scripts/setup.sh --test   also what the tests drive for real: Prometheus (prometheus,
#                             promtool), Chromium and ChromeDriver, and the fault tools
set -euo pipefail

need=()
command -v etcd >/dev/null 2>&1 || need+=(etcd-server)
command -v etcdctl >/dev/null 2>&1 || need+=(etcd-client)
command -v protoc >/dev/null 2>&1 || need+=(protobuf-compiler)
if [ "${1:-}" = "--test" ]; then
  { command -v prometheus && command -v promtool; } >/dev/null 2>&1 || need+=(prometheus)
  { command -v chromium && command -v chromedriver; } >/dev/null 2>&1 || need+=(chromium chromium-driver)
  # The fault suite's full runs (RELIABILITY.md): partitions and clock skew.
  command -v iptables >/dev/null 2>&1 || need+=(iptables)
  command -v ip >/dev/null 2>&1 || need+=(iproute2)
  command -v faketime >/dev/null 2>&1 || need+=(faketime)
fi

if ((${#need[@]})); then
  sudo=""
  if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
  echo "setup: installing ${need[*]}" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >&2
fi

if ! command -v cargo >/dev/null 2>&1; then
  echo "setup: cargo is missing; install Rust (https://rustup.rs) and run this again" >&2
  exit 1
fi
