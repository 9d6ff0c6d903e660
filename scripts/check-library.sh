#!/usr/bin/env bash
# The library alone (`default-features = false`) builds, and what a Rust
# service then compiles holds no web, SQLite, metrics, tracing-export, OpenAPI or CLI
# crate. axum is the one exception, and only as etcd-client's own: tonic (its
# gRPC stack) depends on it; tenure's library never does.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo check --locked --lib --no-default-features
tree=$(cargo tree --locked --no-default-features -e normal --prefix none | awk '{print $1}' | sort -u)
direct=$(cargo tree --locked --no-default-features -e normal --depth 1 --prefix none | awk 'NR > 1 {print $1}' | sort -u)
bad=0
for crate in askama rusqlite prometheus opentelemetry opentelemetry_sdk opentelemetry-otlp \
  tracing-opentelemetry tracing-subscriber clap utoipa utoipa-axum; do
  if grep -qx "$crate" <<<"$tree"; then
    echo "library-only build pulls in $crate:" >&2
    cargo tree --locked --no-default-features -e normal -i "$crate" >&2 || true
    bad=1
  fi
done
for crate in axum anyhow; do
  if grep -qx "$crate" <<<"$direct"; then
    echo "the library depends on $crate directly" >&2
    bad=1
  fi
done
echo "library alone: $(wc -l <<<"$tree") packages (with the server: $(cargo tree --locked -e normal --prefix none | awk '{print $1}' | sort -u | wc -l))"
exit "$bad"
