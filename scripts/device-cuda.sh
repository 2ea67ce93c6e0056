#!/usr/bin/env bash
# The CUDA checks, run on a machine with an NVIDIA GPU (the session tool `device`, or any GPU
# host) over binaries built here by `make build build/bench/bench_mlp_gpu` and the shared
# libraries of scripts/device-libs.sh in .devlibs/ (that machine has none of Debian's packages).
# Needs python3 with numpy, torch, Pillow, scikit-learn and safetensors there.
#   1. tests/cuda/test_mlp_cuda: one cuBLASLt layer against a double reference, the op on CUDA
#      against the op on the CPU (precisions, batch sizes, activations, odd shapes)
#   2. tensor.mlp throughput (768 -> 1024 -> 1024 -> 16): the op on CUDA at two batch sizes,
#      PyTorch (cuBLAS fp32) doing the same work, the op on one CPU core
#   3. the image-classification example end to end with its GPU stage on streambatch-worker-gpu,
#      its answers checked, and the worker's log line that says where tensor.mlp ran
# Everything it prints is also written to $OUT/device-cuda.log when OUT is set.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-$(mktemp -d /tmp/sb-device-XXXXXX)}
exec > >(tee "$out/device-cuda.log") 2>&1
cublas=$(scripts/device-libs.sh --find-cublas "${PYTHON:-python3}" 2>/dev/null) # not carried
export LD_LIBRARY_PATH=$PWD/.devlibs${cublas:+:$cublas}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
work=$(mktemp -d /tmp/sb-device-work-XXXXXX)
py=${PYTHON:-python3}
rows=${ROWS:-131072}
rounds=${ROUNDS:-3}
echo "== machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
nproc; uname -r
ldd bin/streambatch bin/streambatch-worker-gpu build/tests/test_mlp_cuda build/bench/bench_mlp_gpu |
  grep 'not found' && echo "MISSING LIBRARIES"

echo "== 1. tests/cuda/test_mlp_cuda"
build/tests/test_mlp_cuda --verbose 2>&1 | tail -20
rc=${PIPESTATUS[0]}
echo "test_mlp_cuda exit $rc"
if [[ $rc != 0 ]] && command -v compute-sanitizer >/dev/null; then
  echo "-- compute-sanitizer over the op on CUDA (the test failed)"
  "$py" tests/bench/mlp_model.py "$work/model.safetensors"
  compute-sanitizer --tool memcheck build/bench/bench_mlp_gpu "$work/model.safetensors" 768 600 256 1 cuda 2>&1 | tail -30
fi

echo "== 2. tensor.mlp throughput, $rows rows, $rounds rounds after a warm-up (seconds per round)"
"$py" tests/bench/mlp_model.py "$work/model.safetensors"
for b in 256 4096; do
  echo "-- batch $b: the op adding the outputs beside the input, the op replacing it, PyTorch"
  build/bench/bench_mlp_gpu "$work/model.safetensors" 768 "$rows" "$b" "$rounds" cuda
  build/bench/bench_mlp_gpu "$work/model.safetensors" 768 "$rows" "$b" "$rounds" cuda replace
  "$py" tests/bench/mlp_torch.py "$work/model.safetensors" 768 "$rows" "$b" "$rounds"
done
echo "-- op on one CPU core, 4096 rows, batch 256, replacing"
build/bench/bench_mlp_gpu "$work/model.safetensors" 768 4096 256 2 cpu replace

echo "== 3. image-classification example, GPU stage on streambatch-worker-gpu"
rm -rf data/sample/digits data/sample/models/digits-mlp.safetensors data/out/image-classification
"$py" api/examples/image-classification/digits.py prepare data/sample/digits \
  data/sample/models/digits-mlp.safetensors | tail -3
mkdir -p "$work/run"
bin/streambatch run api/examples/image-classification.yaml --cpus 2 --gpus 1 --run-dir "$work/run"
echo "streambatch run exit $?"
grep -h "tensor.mlp runs" "$work"/run/*.log
"$py" api/examples/image-classification/digits.py check data/sample/digits \
  data/sample/models/digits-mlp.safetensors data/out/image-classification
echo "digits check exit $?"
rm -rf "$work"
