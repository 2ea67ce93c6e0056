#!/usr/bin/env bash
# Copies the shared libraries that the given programs need, except the C and C++ runtimes, into
# DIR, so that programs built here run on a machine that lacks Debian's packages (the GPU machine
# of scripts/device-cuda.sh: LD_LIBRARY_PATH=DIR there).
#   scripts/device-libs.sh DIR PROGRAM...
set -euo pipefail
dir=$1
shift
mkdir -p "$dir"
ldd "$@" | awk '/=> \//{print $3}' | sort -u |
  grep -Ev '/(libc|libm|libstdc\+\+|libgcc_s|libresolv|libpthread|libdl|librt|ld-linux[^/]*)\.so' |
  while read -r lib; do cp -L "$lib" "$dir/"; done
du -sh "$dir" >&2
