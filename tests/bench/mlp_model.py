"""The benchmark model of tensor.mlp (scripts/bench-mlp.sh, scripts/device-cuda.sh): a 768 -> 1024
-> 1024 -> 16 relu MLP with seeded random weights, written as safetensors (the PyTorch
nn.Sequential naming: 0.weight, 0.bias, 2.weight, ...). Needs numpy.

    python3 mlp_model.py OUT.safetensors
"""
import json
import struct
import sys

import numpy as np

DIMS = [768, 1024, 1024, 16]


def main(path):
    rng = np.random.default_rng(3)
    tensors, data = {}, b""
    for k in range(len(DIMS) - 1):
        w = rng.standard_normal((DIMS[k + 1], DIMS[k])).astype(np.float32) / 30
        b = rng.standard_normal(DIMS[k + 1]).astype(np.float32)
        for name, arr in ((f"{2 * k}.weight", w), (f"{2 * k}.bias", b)):
            raw = arr.tobytes()
            tensors[name] = {"dtype": "F32", "shape": list(arr.shape),
                             "data_offsets": [len(data), len(data) + len(raw)]}
            data += raw
    header = json.dumps(tensors).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header + data)


if __name__ == "__main__":
    main(sys.argv[1])
