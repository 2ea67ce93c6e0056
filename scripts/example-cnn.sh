#!/usr/bin/env bash
# `make example-cnn` (and, with --check, `make cnn-test`, part of `make test`): a PyTorch model
# through the Python kit on a GPU stage (api/examples/cnn-classify.yaml, api/examples/cnn/cnn.py).
#   1. a venv of pyarrow, numpy, Pillow and safetensors, pinned, made once and cached outside the
#      repository (~/.cache/streambatch/cnn-venv), reached as build/cnn-venv (a link: the path the
#      Pipeline's exec command names); the kit comes from this tree (PYTHONPATH=sdk/python); torch
#      only if CNN_TORCH names a pip spec (it is large: the numpy path runs without it)
#   2. data/sample/cnn-images/ (200 generated JPEGs, tests/bench/inference_data.py) and
#      data/sample/models/cnn.safetensors (seeded weights), once
#   3. `streambatch run api/examples/cnn-classify.yaml --cpus 2 --gpus 1`
#   4. --check: cnn.py check (every image answered once, logits within 1e-4 of a numpy reference)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh # SB_BIN_DIR
venv=${XDG_CACHE_HOME:-$HOME/.cache}/streambatch/cnn-venv
pins=(numpy==2.4.6 pillow==13.0.0 pyarrow==26.0.1 safetensors==0.8.0)
if ! "$venv/bin/python" -c 'import numpy, PIL, pyarrow, safetensors' 2>/dev/null; then
  echo "cnn: installing ${pins[*]} into $venv (once)"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "${pins[@]}" ${CNN_TORCH:+"$CNN_TORCH"}
fi
mkdir -p build && ln -sfn "$venv" build/cnn-venv
export PYTHONPATH=$PWD/sdk/python${PYTHONPATH:+:$PYTHONPATH}
model=data/sample/models/cnn.safetensors
if [[ ! -f $model || ! -d data/sample/cnn-images ]]; then
  rm -rf data/sample/cnn-images "$model"
  mkdir -p data/sample/models
  build/cnn-venv/bin/python tests/bench/inference_data.py images data/sample/cnn-images 200 2
  build/cnn-venv/bin/python api/examples/cnn/cnn.py init "$model"
fi
rm -rf data/out/cnn-classify
"$SB_BIN_DIR/streambatch" run api/examples/cnn-classify.yaml --cpus 2 --gpus 1
[[ ${1:-} == --check ]] || exit 0
build/cnn-venv/bin/python api/examples/cnn/cnn.py check data/sample/cnn-images "$model" data/out/cnn-classify
