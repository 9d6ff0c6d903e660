#!/usr/bin/env bash
# Installs what tenure needs on a Debian machine, only what is missing.
#   scripts/setup.sh          etcd (server and etcdctl) and protoc (etcd-client's build)
#   scripts/setup.sh --test   also what the tests drive for real: Prometheus (prometheus,
#                             promtool), Chromium and ChromeDriver, the fault tools, and
#                             openssl (test certificates), PostgreSQL (the shared
#                             history's tests), etcd 3.5.16 and 3.5.30 (Debian trixie's
#                             and sid's packages) and 3.6, 3.7 (built with the machine's
#                             Go from etcd's modules) in /opt/tenure-etcd-VERSION, etcd's
#                             Go client per line (the Go interop tests, module mode),
#                             kube-apiserver and client-go's leader election (the Kubernetes
#                             tests: scripts/kube/), Patroni (PyPI, pinned) in the venv
#                             /opt/tenure-patroni, schemathesis and openapi-spec-validator
#                             (PyPI, pinned) in the venv /opt/tenure-schemathesis, and
#                             systemd-analyze (tests/deploy.rs)
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
  # tests/tls.rs makes its certificates with the openssl command; tests/kubernetes.rs
  # edits a Lease through kube-apiserver's API with curl.
  command -v openssl >/dev/null 2>&1 || need+=(openssl)
  command -v curl >/dev/null 2>&1 || need+=(curl)
  # tests/backup.rs reads the history file with the sqlite3 shell (the online backup);
  # tests/guard.rs names the guard's process with ps.
  command -v sqlite3 >/dev/null 2>&1 || need+=(sqlite3)
  command -v ps >/dev/null 2>&1 || need+=(procps)
  # tests/postgres/ and the bench's pg measurement start their own PostgreSQL server
  # (initdb, postgres) and use psql.
  { ls /usr/lib/postgresql/*/bin/postgres && command -v psql; } >/dev/null 2>&1 || need+=(postgresql)
  # tests/patroni.rs runs Patroni from a venv on Debian's python3 (below); Debian keeps
  # the venv module's ensurepip in python3-venv.
  /usr/bin/python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || need+=(python3-venv)
  # tests/deploy.rs checks deploy/systemd with systemd-analyze (verify, security --offline).
  command -v systemd-analyze >/dev/null 2>&1 || need+=(systemd)
fi

if ((${#need[@]})); then
  sudo=""
  if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
  echo "setup: installing ${need[*]}" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >&2
fi

# etcd 3.5.16 (Debian trixie) and 3.5.30 (Debian sid) beside Debian bookworm's 3.4.23: the
# suites run against 3.4.23 and 3.5.30 (scripts/test.sh); the restore procedure's tests use
# etcdutl's `snapshot restore --bump-revision` (3.5 only). Fetched with `apt-get download`
# through a private sources list (the same Debian registry this machine's apt uses, one
# more suite) and unpacked with `dpkg -x` into /opt/tenure-etcd-VERSION: the system's etcd
# and apt state are not touched. Each tree gets bin/{etcd,etcdctl,etcdutl}.
fetch_etcd() { # suite version
  local suite=$1 version=$2 dir="/opt/tenure-etcd-$2"
  [ -x "$dir/bin/etcd" ] && [ -x "$dir/bin/etcdutl" ] && return 0
  echo "setup: fetching etcd $version (Debian $suite) into $dir" >&2
  local apt_dir opts
  apt_dir=$(mktemp -d)
  mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/etc" "$apt_dir/debs"
  local uri
  uri=$(awk '/^URIs:/ && /debian\/?$/ && !/security/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
  [ -n "$uri" ] || uri=http://deb.debian.org/debian
  printf 'Types: deb\nURIs: %s\nSuites: %s\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
    "$uri" "$suite" >"$apt_dir/etc/$suite.sources"
  opts=(-o Dir::Etc::SourceList=/dev/null -o "Dir::Etc::SourceParts=$apt_dir/etc"
    -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache" -o Debug::NoLocking=1
    -o APT::Sandbox::User=root)
  apt-get "${opts[@]}" update -qq >&2
  local full
  full=$(apt-cache "${opts[@]}" madison etcd-server | awk -v v="$version" '$3 ~ "^"v"-" {print $3; exit}')
  if [ -z "$full" ]; then
    echo "setup: Debian $suite has no etcd-server $version (found: $(apt-cache "${opts[@]}" madison etcd-server | awk '{print $3}' | tr '\n' ' '))" >&2
    rm -rf "$apt_dir"
    return 1
  fi
  (cd "$apt_dir/debs" && apt-get "${opts[@]}" download "etcd-server=$full" "etcd-client=$full" >&2)
  mkdir -p "$dir/root" "$dir/bin"
  for deb in "$apt_dir"/debs/*.deb; do dpkg -x "$deb" "$dir/root"; done
  for b in etcd etcdctl etcdutl; do ln -sf "$dir/root/usr/bin/$b" "$dir/bin/$b"; done
  rm -rf "$apt_dir"
  "$dir/bin/etcd" --version | sed -n 1p >&2
}
if [ "${1:-}" = "--test" ]; then
  fetch_etcd trixie 3.5.16
  fetch_etcd sid 3.5.30
fi

# Go: the machine's own (1.26, with Go's module proxy); nothing here installs a second one.
# Every Go program is built in module mode from a committed go.mod and go.sum.
need_go() {
  if ! command -v go >/dev/null 2>&1 || ! go version | grep -E 'go1\.(2[2-9]|[3-9][0-9])' >/dev/null; then
    echo "setup: the tests need Go 1.22 or newer on PATH (this machine's is /usr/local/go/bin/go); found: $(go version 2>/dev/null || echo none)" >&2
    return 1
  fi
}

# etcd 3.6 and 3.7, built from etcd's own modules (scripts/etcd/LINE/go.mod pins the patch
# release; its go.sum is committed) into /opt/tenure-etcd-VERSION/bin, once: the tree is
# kept between runs. Building all three binaries takes about 2 minutes on 2 cores.
build_etcd() { # line
  local mod version dir
  mod="$(cd "$(dirname "$0")" && pwd)/etcd/$1"
  version=$(awk '$1 == "go.etcd.io/etcd/server/v3" {print substr($2, 2); exit}' "$mod/go.mod")
  dir="/opt/tenure-etcd-$version"
  [ -x "$dir/bin/etcd" ] && [ -x "$dir/bin/etcdctl" ] && [ -x "$dir/bin/etcdutl" ] && return 0
  echo "setup: building etcd $version from its modules into $dir" >&2
  mkdir -p "$dir/bin"
  local b
  for b in server:etcd etcdctl:etcdctl etcdutl:etcdutl; do
    (cd "$mod" && GOFLAGS=-buildvcs=false go build -mod=readonly -trimpath -o "$dir/bin/${b#*:}.tmp" "go.etcd.io/etcd/${b%%:*}/v3") >&2
    mv "$dir/bin/${b#*:}.tmp" "$dir/bin/${b#*:}"
  done
  "$dir/bin/etcd" --version | sed -n 1p >&2
}

# The Go interop tests' etcdactor (tests/go/etcdactor): one modfile per client line; its
# modules are fetched and compiled here, so the tests' own builds only link.
warm_etcdactor() {
  local src m
  src="$(cd "$(dirname "$0")/.." && pwd)/tests/go/etcdactor"
  for m in go.3.5.mod go.mod go.3.7.mod; do
    (cd "$src" && GOFLAGS=-buildvcs=false go build -mod=readonly -modfile "$m" -o /dev/null .) >&2
  done
}

# tests/kubernetes.rs: a real kube-apiserver (scripts/kube/build.sh, built once into
# /opt/tenure-kube-apiserver-VERSION) and client-go's leaderelection candidate
# (tests/go/leasecandidate), whose modules are fetched and compiled here.
# shellcheck source=kube/build.sh
. "$(dirname "$0")/kube/build.sh"
warm_leasecandidate() {
  local src
  src="$(cd "$(dirname "$0")/.." && pwd)/tests/go/leasecandidate"
  (cd "$src" && GOFLAGS=-buildvcs=false go build -mod=readonly -o /dev/null .) >&2
}

if [ "${1:-}" = "--test" ]; then
  need_go
  build_etcd 3.6
  build_etcd 3.7
  warm_etcdactor
  build_kube_apiserver
  warm_leasecandidate
fi

# Patroni (tests/patroni.rs, tests/support/patroni.rs) in a venv of its own on Debian's
# /usr/bin/python3 (a Python under /root is unreadable to the postgres user Patroni runs
# as), every package pinned in scripts/patroni-requirements.txt. The venv keeps a copy of
# the file it was built from; a venv built from another file is built again.
patroni_venv() {
  local venv=/opt/tenure-patroni req
  req="$(dirname "$0")/patroni-requirements.txt"
  if cmp -s "$req" "$venv/tenure-requirements.txt" && [ -x "$venv/bin/patroni" ] &&
    "$venv/bin/python3" -c 'import patroni, psycopg2' >/dev/null 2>&1; then
    return 0
  fi
  echo "setup: installing Patroni into $venv" >&2
  rm -rf "$venv"
  (
    umask 022 # readable and executable by the postgres user
    /usr/bin/python3 -m venv "$venv"
    "$venv/bin/pip" install -q --use-pep517 -r "$req" >&2
    cp "$req" "$venv/tenure-requirements.txt"
  )
  if [ "$(id -u)" = 0 ] && id postgres >/dev/null 2>&1 &&
    ! setpriv --reuid postgres --regid postgres --init-groups "$venv/bin/patroni" --version >/dev/null; then
    echo "setup: the postgres user cannot run $venv/bin/patroni (check the permissions)" >&2
    return 1
  fi
  "$venv/bin/patroni" --version >&2
}
if [ "${1:-}" = "--test" ]; then
  patroni_venv
fi

# schemathesis and openapi-spec-validator (tests/openapi.rs: the API's OpenAPI document
# checked, and fuzzed against a running serve) in a venv of their own, pinned in
# scripts/schemathesis-requirements.txt; rebuilt when that file changes.
schemathesis_venv() {
  local venv=/opt/tenure-schemathesis req
  req="$(dirname "$0")/schemathesis-requirements.txt"
  if cmp -s "$req" "$venv/tenure-requirements.txt" && [ -x "$venv/bin/schemathesis" ] &&
    [ -x "$venv/bin/openapi-spec-validator" ]; then
    return 0
  fi
  echo "setup: installing schemathesis into $venv" >&2
  rm -rf "$venv"
  /usr/bin/python3 -m venv "$venv"
  "$venv/bin/pip" install -q -r "$req" >&2
  cp "$req" "$venv/tenure-requirements.txt"
  "$venv/bin/schemathesis" --version >&2
}
if [ "${1:-}" = "--test" ]; then
  schemathesis_venv
fi

if ! command -v cargo >/dev/null 2>&1; then
  echo "setup: cargo is missing; install Rust (https://rustup.rs) and run this again" >&2
  exit 1
fi
