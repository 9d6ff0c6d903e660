#!/usr/bin/env bash
# Starts one real kube-apiserver on loopback over an etcd a test already runs:
#
#   scripts/kube/start-apiserver.sh ETCD_URL WORKDIR [EXTRA_FLAG...]
#
# It makes, in WORKDIR (created if missing; files already there are kept): a CA and a
# serving certificate for 127.0.0.1/localhost in WORKDIR/certs (kube-apiserver's
# --cert-dir: it uses apiserver.crt/apiserver.key when they exist, so clients can verify
# against WORKDIR/certs/ca.crt instead of skipping verification), a service-account RSA key
# pair, a static token for user "admin" in group system:masters (WORKDIR/token,
# WORKDIR/tokens.csv), one for user "unbound" that no role is bound to
# (WORKDIR/unbound-token) and WORKDIR/kubeconfig. It picks a free loopback port, prints
#
#   kube-apiserver: port PORT
#
# on stderr, then execs kube-apiserver in the foreground (its logs go to stderr; SIGTERM
# stops it in ~3 s; stop it before its etcd, or it waits ~10 s more). Ready when
# GET https://127.0.0.1:PORT/readyz answers "ok" (3-6 s on 2 cores with fresh keys and an
# empty etcd, docs/kubernetes-facts.md). EXTRA_FLAGs are appended, e.g.
# --storage-media-type=application/json or --etcd-prefix=/other. Two kube-apiservers on one
# host share an identity-lease name: give each its own etcd or --etcd-prefix.
#
# The binary: $KUBE_APISERVER, else /opt/tenure-kube-apiserver-VERSION/bin/kube-apiserver
# with VERSION from scripts/kube/go.mod (scripts/kube/build.sh builds it).
# Needs openssl and python3 (the free port).
set -euo pipefail

if [ $# -lt 2 ]; then
  echo "usage: $0 ETCD_URL WORKDIR [EXTRA_FLAG...]" >&2
  exit 2
fi
etcd_url=$1
work=$2
shift 2

bin=${KUBE_APISERVER:-}
if [ -z "$bin" ]; then
  here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
  version=$(awk '$1 == "k8s.io/kubernetes" {print substr($2, 2); exit}' "$here/go.mod")
  bin="/opt/tenure-kube-apiserver-$version/bin/kube-apiserver"
fi
if [ ! -x "$bin" ]; then
  echo "kube-apiserver: $bin is missing (scripts/kube/build.sh: build_kube_apiserver)" >&2
  exit 1
fi

mkdir -p "$work/certs"
work=$(cd "$work" && pwd)
certs="$work/certs"
ssl() { openssl "$@" 2>/dev/null; }

# Serving certificate: a CA and a leaf for 127.0.0.1 and localhost (CA:FALSE, so rustls and
# Go both accept it against ca.crt).
if [ ! -s "$certs/apiserver.crt" ] || [ ! -s "$certs/apiserver.key" ]; then
  ssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj /CN=tenure-test-ca \
    -keyout "$certs/ca.key" -out "$certs/ca.crt"
  ssl req -newkey rsa:2048 -nodes -subj /CN=kube-apiserver \
    -keyout "$certs/apiserver.key.tmp" -out "$certs/apiserver.csr"
  printf '%s\n' 'basicConstraints=CA:FALSE' 'keyUsage=digitalSignature,keyEncipherment' \
    'extendedKeyUsage=serverAuth' \
    'subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,IP:10.0.0.1' \
    >"$certs/apiserver.ext"
  ssl x509 -req -in "$certs/apiserver.csr" -CA "$certs/ca.crt" -CAkey "$certs/ca.key" \
    -CAcreateserial -days 3650 -extfile "$certs/apiserver.ext" -out "$certs/apiserver.crt.tmp"
  mv "$certs/apiserver.key.tmp" "$certs/apiserver.key"
  mv "$certs/apiserver.crt.tmp" "$certs/apiserver.crt"
fi

# Service-account token signing: an RSA key pair.
if [ ! -s "$work/sa.key" ] || [ ! -s "$work/sa.pub" ]; then
  ssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$work/sa.key.tmp"
  ssl pkey -in "$work/sa.key.tmp" -pubout -out "$work/sa.pub"
  mv "$work/sa.key.tmp" "$work/sa.key"
fi

# Static token: token,user,uid,"group,...".
if [ ! -s "$work/token" ]; then
  openssl rand -hex 24 >"$work/token"
fi
token=$(cat "$work/token")
printf '%s,admin,admin,"system:masters"\n' "$token" >"$work/tokens.csv"
# A second static token, for user "unbound": no group, no RBAC grant (tests of a refusal).
if [ ! -s "$work/unbound-token" ]; then
  openssl rand -hex 24 >"$work/unbound-token"
fi
printf '%s,unbound,unbound\n' "$(cat "$work/unbound-token")" >>"$work/tokens.csv"
chmod 600 "$work/token" "$work/tokens.csv" "$work/sa.key" "$certs/apiserver.key"

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

cat >"$work/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: tenure-test
  cluster:
    server: https://127.0.0.1:$port
    certificate-authority: $certs/ca.crt
users:
- name: admin
  user:
    token: $token
contexts:
- name: tenure-test
  context:
    cluster: tenure-test
    user: admin
current-context: tenure-test
EOF
chmod 600 "$work/kubeconfig"

echo "kube-apiserver: port $port" >&2
exec "$bin" \
  --etcd-servers="$etcd_url" \
  --bind-address=127.0.0.1 \
  --advertise-address=127.0.0.1 \
  --secure-port="$port" \
  --cert-dir="$certs" \
  --service-account-issuer=https://kubernetes.default.svc \
  --service-account-key-file="$work/sa.pub" \
  --service-account-signing-key-file="$work/sa.key" \
  --service-cluster-ip-range=10.0.0.0/24 \
  --authorization-mode=Node,RBAC \
  --token-auth-file="$work/tokens.csv" \
  --endpoint-reconciler-type=none \
  "$@"
