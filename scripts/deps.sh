#!/usr/bin/env bash
# Installs every build and test dependency that is missing (Debian packages). Idempotent: when
# everything is present it only runs dpkg-query, so a warm run costs well under a second.
set -euo pipefail
PKGS=(
  build-essential pkg-config
  libcurl4-openssl-dev libcjson-dev libyaml-dev
  libgrpc-dev libprotobuf-c-dev protobuf-c-compiler
  libmicrohttpd-dev libpng-dev libjpeg62-turbo-dev zlib1g-dev libzstd-dev
  libcriterion-dev
  libsnappy-dev liblz4-dev libbrotli-dev
  libopenblas-serial-dev
  clang libclang-rt-14-dev clang-format cppcheck
  valgrind openssl python3 python3-yaml python3-venv curl
  nginx prometheus
  mmdebstrap umoci skopeo runc
  iproute2 iptables
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
# Grafana's published dashboard schema and TypeScript, for the dashboard's type check
# (tests/dashboard/): pinned, from npm, cached outside the repo.
GRAFANA_SCHEMA=13.2.3 TYPESCRIPT=5.9.3
gs_dir=${XDG_CACHE_HOME:-$HOME/.cache}/streambatch/grafana-schema-$GRAFANA_SCHEMA-ts-$TYPESCRIPT
if [[ ! -x $gs_dir/node_modules/.bin/tsc || ! -f $gs_dir/node_modules/@grafana/schema/package.json ]]; then
  command -v npm >/dev/null || { SUDO=""; [[ $(id -u) -eq 0 ]] || SUDO="sudo"
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends npm; }
  echo "deps: installing @grafana/schema@$GRAFANA_SCHEMA and typescript@$TYPESCRIPT into $gs_dir"
  rm -rf "$gs_dir.tmp" && mkdir -p "$gs_dir.tmp"
  npm install --no-audit --no-fund --silent --prefix "$gs_dir.tmp" \
    "@grafana/schema@$GRAFANA_SCHEMA" "typescript@$TYPESCRIPT" >/dev/null
  rm -rf "$gs_dir" && mv "$gs_dir.tmp" "$gs_dir"
fi
# The CUDA toolkit of the worker-gpu build (nvcc with its crt and nvvm, headers,
# libcudart_static.a): PyPI's CUDA 13
# wheels (Debian has no toolkit; the CUDA 12 wheels have no nvcc), pinned, installed with pip from
# a throwaway venv (a fresh Debian has no pip outside one), cached outside the repo. The Makefile
# reads CUDA_HOME=$cu_dir/nvidia/cu13. No GPU or driver is needed to build.
CUDA_WHEELS=13.5.37
cu_dir=${XDG_CACHE_HOME:-$HOME/.cache}/streambatch/cuda-$CUDA_WHEELS
if [[ ! -x $cu_dir/nvidia/cu13/bin/nvcc || ! -f $cu_dir/nvidia/cu13/lib/libcudart_static.a ]]; then
  echo "deps: installing nvidia-cuda-nvcc==$CUDA_WHEELS and nvidia-cuda-runtime==$CUDA_WHEELS into $cu_dir"
  rm -rf "$cu_dir.tmp" "$cu_dir.venv" && mkdir -p "$cu_dir.tmp"
  python3 -m venv "$cu_dir.venv"
  "$cu_dir.venv/bin/pip" install --quiet --disable-pip-version-check --target "$cu_dir.tmp" \
    "nvidia-cuda-nvcc==$CUDA_WHEELS" "nvidia-cuda-runtime==$CUDA_WHEELS" \
    "nvidia-cuda-crt==$CUDA_WHEELS" "nvidia-nvvm==$CUDA_WHEELS"
  rm -rf "$cu_dir.venv" "$cu_dir" && mv "$cu_dir.tmp" "$cu_dir"
fi
# cuBLAS (tensor.mlp's GEMMs: cublasLt.h and libcublasLt.so.13, shared: the wheel has no static
# library) and CCCL (the <nv/target> that cuBLAS's headers include through cuda_fp16.h), into
# the same folder. Neither follows the toolkit's version numbers: cuBLAS 13.5.1.27 is the 13.5
# release, CCCL 13.3.5.0.6 the newest for CUDA 13. pip --target does not merge into an existing
# nvidia/ folder, so they go to a folder of their own and are copied in. cuBLAS's dependency
# nvidia-cuda-nvrtc is left out: libcublasLt opens libnvrtc only for kernels it compiles at run
# time, which tensor.mlp's GEMMs do not ask for, and does not link it.
CUBLAS_WHEEL=13.5.1.27 CCCL_WHEEL=13.3.5.0.6
if [[ ! -f $cu_dir/nvidia/cu13/include/cublasLt.h || ! -e $cu_dir/nvidia/cu13/lib/libcublasLt.so.13 ||
  ! -f $cu_dir/nvidia/cu13/include/nv/target ]]; then
  echo "deps: installing nvidia-cublas==$CUBLAS_WHEEL and nvidia-cuda-cccl==$CCCL_WHEEL into $cu_dir"
  rm -rf "$cu_dir.cublas" "$cu_dir.venv" && mkdir -p "$cu_dir.cublas"
  python3 -m venv "$cu_dir.venv"
  "$cu_dir.venv/bin/pip" install --quiet --disable-pip-version-check --no-deps \
    --target "$cu_dir.cublas" "nvidia-cublas==$CUBLAS_WHEEL" "nvidia-cuda-cccl==$CCCL_WHEEL"
  cp -a "$cu_dir.cublas/nvidia/cu13/include/." "$cu_dir/nvidia/cu13/include/"
  cp -a "$cu_dir.cublas/nvidia/cu13/lib/." "$cu_dir/nvidia/cu13/lib/"
  rm -rf "$cu_dir.venv" "$cu_dir.cublas"
fi
