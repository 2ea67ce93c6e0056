#!/usr/bin/env bash
# Builds the MinIO server the S3 tests start (a real S3 server on loopback) from the Go module
# proxy and caches it outside the repo, like the Kubernetes binaries:
#   ${SB_MINIO_CACHE:-~/.cache/streambatch/minio-<version>}/minio
# First run: about 15 minutes and 150 MB on 2 cores; then instant. Prints the binary's path last.
set -euo pipefail
version=v0.0.0-20260212201848-7aac2a2c5b7c
cache=${SB_MINIO_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/streambatch/minio-$version}
bin=$cache/minio
if [[ -x $bin ]]; then
  echo "minio: cached in $bin" >&2
  echo "$bin"
  exit 0
fi
mkdir -p "$cache"
tmp=$(mktemp -d "$cache/build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "minio: building github.com/minio/minio@$version (first run only, ~15 min)" >&2
start=$(date +%s)
GOBIN=$tmp GOFLAGS=-mod=mod CGO_ENABLED=0 go install -trimpath -ldflags=-s \
  "github.com/minio/minio@$version" >&2
mv "$tmp/minio" "$bin"
echo "minio: built in $(( $(date +%s) - start )) s" >&2
echo "$bin"
