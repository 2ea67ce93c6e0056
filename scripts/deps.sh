#!/usr/bin/env bash
# Installs every build and test dependency that is missing (Debian packages). Idempotent: when
# everything is present it only runs dpkg-query, so a warm run costs well under a second.
set -euo pipefail
PKGS=(
  build-essential pkg-config
  libcurl4-openssl-dev libcjson-dev libyaml-dev
  libgrpc-dev libprotobuf-c-dev protobuf-c-compiler
  libmicrohttpd-dev
  libcriterion-dev
  clang libclang-rt-14-dev clang-format cppcheck
  valgrind openssl python3 curl
  nginx prometheus
  mmdebstrap umoci skopeo runc
)
missing=()
for p in "${PKGS[@]}"; do
  st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$st" == "install ok installed" ]] || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "deps: installing ${missing[*]}"
  SUDO=""; [[ $(id -u) -eq 0 ]] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "deps: all ${#PKGS[@]} Debian packages present"
fi
# The MinIO server of the S3 tests (built once, cached outside the repo).
"$(dirname "$0")"/minio.sh >/dev/null
