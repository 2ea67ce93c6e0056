"""PyTorch doing what tensor.mlp does on a GPU, for scripts/device-cuda.sh: the same safetensors
MLP (tests/bench/mlp_model.py), ROWS random float32 rows in batches of BATCH, each batch copied
from pinned host memory to the device, through the layers (cuBLAS fp32, TF32 off, relu between
layers) and back to the host, as the op's own path does. Prints "RESULT torch seconds=S,S,..."
(ROUNDS rounds after one warm-up). PRECISION (default fp32) is tensor.mlp's args.precision: tf32
allows TF32 in cuBLAS, bf16 runs bfloat16 weights and activations (scripts/device-inference.sh).

    python3 mlp_torch.py MODEL DIN ROWS BATCH ROUNDS [fp32|tf32|bf16]
"""
import json
import struct
import sys
import time

import numpy as np
import torch


def main(path, din, rows, batch, rounds, precision="fp32"):
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    dt = torch.bfloat16 if precision == "bf16" else torch.float32
    raw = open(path, "rb").read()
    hl = struct.unpack("<Q", raw[:8])[0]
    hdr = json.loads(raw[8:8 + hl])

    def get(name):
        a, b = hdr[name]["data_offsets"]
        arr = np.frombuffer(raw[8 + hl + a:8 + hl + b], dtype=np.float32)
        return torch.from_numpy(arr.reshape(hdr[name]["shape"]).copy()).cuda().to(dt)

    layers = sorted({int(k.split(".")[0]) for k in hdr if k != "__metadata__"})
    ws = [(get(f"{k}.weight"), get(f"{k}.bias")) for k in layers]
    x = torch.from_numpy(np.random.default_rng(7).random((rows, din), dtype=np.float32) - 0.5)
    x = x.pin_memory()
    out = torch.empty((rows, ws[-1][0].shape[0]), dtype=torch.float32).pin_memory()
    times = []
    for r in range(rounds + 1):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for s in range(0, rows, batch):
            h = x[s:s + batch].cuda(non_blocking=True).to(dt)
            for i, (w, b) in enumerate(ws):
                h = torch.addmm(b, h, w.t())
                if i < len(ws) - 1:
                    h = torch.relu_(h)
            out[s:s + batch].copy_(h.float(), non_blocking=True)
        torch.cuda.synchronize()
        if r > 0:
            times.append(time.perf_counter() - t0)
    print("RESULT torch seconds=" + ",".join("%.4f" % t for t in times))


if __name__ == "__main__":
    main(sys.argv[1], *(int(a) for a in sys.argv[2:6]), *sys.argv[6:7])
