#!/usr/bin/env bash
# `make example-images` (and, with --check, `make image-test`, part of `make test`): image
# classification through the image source, image.resize, image.normalize and tensor.mlp on a GPU
# stage (`--gpus 1`; the CPU implementation where no GPU or driver is present).
#   1. a venv (build/image-venv) with numpy, Pillow, scikit-learn (its bundled digits dataset)
#      and safetensors, pinned
#   2. data/sample/digits/ (held-out digits as PNG and JPEG files of different sizes) and
#      data/sample/models/digits-mlp.safetensors (an MLP trained with numpy on the rest), once
#   3. `streambatch run api/examples/image-classification.yaml --gpus 1`
#   4. --check: api/examples/image-classification/digits.py check (answers, top-3, logits against
#      an independent numpy/Pillow computation, accuracy)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh # SB_BIN_DIR
bin=$SB_BIN_DIR
venv=build/image-venv
pins=(numpy==2.4.6 pillow==13.0.0 scikit-learn==1.9.1 scipy==1.17.1 safetensors==0.8.0)
if ! "$venv/bin/python" -c 'import numpy, PIL, sklearn, safetensors' 2>/dev/null; then
  echo "images: installing ${pins[*]} into $venv (once)"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "${pins[@]}"
fi
py=api/examples/image-classification/digits.py
model=data/sample/models/digits-mlp.safetensors
if [[ ! -f $model || ! -d data/sample/digits ]]; then
  rm -rf data/sample/digits "$model"
  "$venv/bin/python" "$py" prepare data/sample/digits "$model"
fi
rm -rf data/out/image-classification
"$bin/streambatch" run api/examples/image-classification.yaml --cpus 2 --gpus 1
[[ ${1:-} == --check ]] || exit 0
"$venv/bin/python" "$py" check data/sample/digits "$model" data/out/image-classification
