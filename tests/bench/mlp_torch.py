"""PyTorch doing what tensor.mlp does on a GPU, for scripts/device-cuda.sh: the same safetensors
MLP (tests/bench/mlp_model.py), ROWS random float32 rows in batches of BATCH, each batch copied
from pinned host memory to the device, through the layers (cuBLAS fp32, TF32 off, relu between
layers) and back to the host, as the op's own path does. Prints "RESULT torch seconds=S,S,..."
(ROUNDS rounds after one warm-up). PRECISION (default fp32) is tensor.mlp's args.precision: tf32
allows TF32 in cuBLAS, bf16 runs bfloat16 weights and activations (scripts/device-inference.sh).

    python3 mlp_torch.py MODEL DIN ROWS BATCH ROUNDS [fp32|tf32|bf16]
    python3 mlp_torch.py MODEL DIN 500,8192 1,1024 ROUNDS fp32,tf32   (one line per pair)
"""
import json
import struct
import sys
import time

import numpy as np
import torch


def main(path, din, rows, batch, rounds, precision="fp32"):
    """rows, batch and precision may be comma-separated lists (rows and batch of one length):
    one RESULT line per (precision, batch) pair, "RESULT torch precision=P batch=B rows=R
    seconds=...", in one process (torch's start is paid once)."""
    rows_l = [int(v) for v in str(rows).split(",")]
    batch_l = [int(v) for v in str(batch).split(",")]
    if len(rows_l) != len(batch_l):
        sys.exit("mlp_torch: ROWS and BATCH must list as many values")
    raw = open(path, "rb").read()
    hl = struct.unpack("<Q", raw[:8])[0]
    hdr = json.loads(raw[8:8 + hl])

    def get(name):
        a, b = hdr[name]["data_offsets"]
        arr = np.frombuffer(raw[8 + hl + a:8 + hl + b], dtype=np.float32)
        return torch.from_numpy(arr.reshape(hdr[name]["shape"]).copy()).cuda()

    layers = sorted({int(k.split(".")[0]) for k in hdr if k != "__metadata__"})
    ws32 = [(get(f"{k}.weight"), get(f"{k}.bias")) for k in layers]
    most = max(rows_l)
    x = torch.from_numpy(np.random.default_rng(7).random((most, din), dtype=np.float32) - 0.5)
    x = x.pin_memory()
    out = torch.empty((most, ws32[-1][0].shape[0]), dtype=torch.float32).pin_memory()
    many = len(rows_l) > 1 or "," in precision
    for prec in precision.split(","):
        torch.backends.cuda.matmul.allow_tf32 = prec == "tf32"
        dt = torch.bfloat16 if prec == "bf16" else torch.float32
        ws = [(w.to(dt), b.to(dt)) for w, b in ws32]
        for n, bs in zip(rows_l, batch_l):
            times = []
            for r in range(rounds + 1):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                for s in range(0, n, bs):
                    h = x[s:s + bs].cuda(non_blocking=True).to(dt)
                    for i, (w, b) in enumerate(ws):
                        h = torch.addmm(b, h, w.t())
                        if i < len(ws) - 1:
                            h = torch.relu_(h)
                    out[s:s + bs].copy_(h.float(), non_blocking=True)
                torch.cuda.synchronize()
                if r > 0:
                    times.append(time.perf_counter() - t0)
            what = "precision=%s batch=%d rows=%d " % (prec, bs, n) if many else ""
            print("RESULT torch " + what + "seconds=" + ",".join("%.4f" % t for t in times),
                  flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5]),
         *sys.argv[6:7])
