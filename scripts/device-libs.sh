#!/usr/bin/env bash
# Copies the shared libraries that the given programs need, except the C and C++ runtimes, into
# DIR, so that programs built here run on a machine that lacks Debian's packages (the GPU machine
# of scripts/device-cuda.sh and scripts/device-inference.sh: LD_LIBRARY_PATH=DIR there).
#   scripts/device-libs.sh DIR PROGRAM...
# cuBLAS (libcublasLt.so.13, 490 MiB, more than a device run carries) is not copied: the GPU
# machine has its own, in the nvidia-cublas wheel that its torch uses, which
#   scripts/device-libs.sh --find-cublas [PYTHON]
# prints the folder of (nothing, exit 1, when that python has none). The soname is the same
# across 13.x, and the programs use only calls that 13.0 has.
set -euo pipefail
if [[ ${1:-} == --find-cublas ]]; then
  "${2:-python3}" - <<'PY'
import glob, os, site, sys
roots = list(site.getsitepackages()) + [site.getusersitepackages()] + sys.path
for r in roots:
    for pat in ("nvidia/cu13/lib/libcublasLt.so.13", "nvidia/cublas/lib/libcublasLt.so.13"):
        hit = glob.glob(os.path.join(r, pat))
        if hit:
            print(os.path.dirname(hit[0]))
            sys.exit(0)
sys.exit(1)
PY
  exit
fi
dir=$1
shift
mkdir -p "$dir"
ldd "$@" | awk '/=> \//{print $3}' | sort -u |
  grep -Ev '/(libc|libm|libstdc\+\+|libgcc_s|libresolv|libpthread|libdl|librt|ld-linux[^/]*)\.so' |
  grep -Ev '/libcublas(Lt)?\.so' |
  while read -r lib; do cp -L "$lib" "$dir/"; done
du -sh "$dir" >&2
