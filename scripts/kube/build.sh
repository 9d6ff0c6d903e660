# shellcheck shell=bash
# Sourced by scripts/setup.sh: build_kube_apiserver builds kube-apiserver from Kubernetes'
# Go modules (scripts/kube/go.mod pins k8s.io/kubernetes and replaces its staging modules;
# its go.sum is committed) into /opt/tenure-kube-apiserver-VERSION/bin/kube-apiserver, once:
# the tree is kept between runs. A first build downloads 132 modules (84 MB of zips, 384 MB
# unpacked in GOMODCACHE) and took 14.5 minutes on 2 cores shared with a cargo build; a
# relink with a warm GOCACHE takes seconds (docs/kubernetes-facts.md).
build_kube_apiserver() {
  local mod version dir
  mod="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
  version=$(awk '$1 == "k8s.io/kubernetes" {print substr($2, 2); exit}' "$mod/go.mod")
  if [ -z "$version" ]; then
    echo "setup: $mod/go.mod does not require k8s.io/kubernetes" >&2
    return 1
  fi
  dir="/opt/tenure-kube-apiserver-$version"
  [ -x "$dir/bin/kube-apiserver" ] && return 0
  echo "setup: building kube-apiserver $version from its modules into $dir" >&2
  mkdir -p "$dir/bin"
  # The version variables Kubernetes' own build (hack/lib/version.sh) sets: without them
  # /version and --version say v0.0.0-master. -s -w as its release builds.
  local v ldflags="-s -w" minor=${version#*.}
  minor=${minor%%.*}
  for v in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $v.gitVersion=v$version -X $v.gitMajor=${version%%.*} -X $v.gitMinor=$minor"
  done
  (cd "$mod" && GOFLAGS=-buildvcs=false go build -mod=readonly -trimpath -ldflags "$ldflags" \
    -o "$dir/bin/kube-apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver) >&2 || {
    rm -f "$dir/bin/kube-apiserver.tmp"
    return 1
  }
  mv "$dir/bin/kube-apiserver.tmp" "$dir/bin/kube-apiserver"
  "$dir/bin/kube-apiserver" --version >&2
}
