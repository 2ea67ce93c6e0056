"""The hand-written PyTorch loop that streambatch's GPU inference is measured against
(scripts/device-inference.sh, issue 36): JPEG files decoded and resized by Pillow in DataLoader
worker processes, batches moved to the GPU, an MLP of torch.addmm and relu_, the top-k indices
written as jsonl ({"path": ..., "logitsTopK": [...]}, as streambatch's pipeline writes them).
The preprocessing is streambatch's: RGB, Image.resize((64, 64), BILINEAR) (image.resize with its
default antialias gives Pillow's pixels), (x / 255 - 0.5) / 0.5 in HWC order (image.normalize),
flattened to 12288 values.

    python3 torch_inference.py IMAGES_DIR MODEL OUT_JSONL [--device cuda|cpu] [--workers N]
        [--batch N] [--precision fp32|tf32|bf16] [--topk K] [--size S] [--engine torch|numpy]
        [--draft] [--predecoded R]

--predecoded R (the GPU-bound variant): every image is decoded and resized once, before the clock
starts, into one uint8 array (HWC, not normalized), as a pre-decoded dataset would hold it; the
timed loop then runs R passes over it in batches: pinned rows copied to the device, converted to
float, the MLP, the top-k written, as streambatch's parquet -> tensor.mlp pipeline does.

Prints "RESULT torch images=N seconds=S images_per_s=R device=D precision=P" (seconds: from
the first file listed to the output closed, the worker processes' start included). --engine
numpy runs the same preprocessing and MLP in numpy with a multiprocessing pool (fp32 only), for
machines without torch: it checks the script's data path and output, not PyTorch's speed.
"""
import argparse
import json
import os
import struct
import sys
import time

import numpy as np
from PIL import Image

SIZE = 64
DRAFT = False


def load(path):
    img = Image.open(path)
    if DRAFT:  # --draft: Pillow's reduced-scale JPEG decode, as source.args.draft
        img.draft("RGB", (SIZE, SIZE))
    img = img.convert("RGB").resize((SIZE, SIZE), Image.BILINEAR)
    x = np.asarray(img, dtype=np.float32) * np.float32(1 / 255)
    return ((x - np.float32(0.5)) / np.float32(0.5)).reshape(-1)


def read_model(path):
    raw = open(path, "rb").read()
    hl = struct.unpack("<Q", raw[:8])[0]
    hdr = json.loads(raw[8:8 + hl])

    def get(name):
        if name not in hdr:
            return None
        a, b = hdr[name]["data_offsets"]
        return np.frombuffer(raw[8 + hl + a:8 + hl + b], dtype=np.float32).reshape(
            hdr[name]["shape"])

    idx = sorted({int(k.split(".")[0]) for k in hdr if k != "__metadata__"})
    return [(get(f"{k}.weight"), get(f"{k}.bias")) for k in idx]


def load_u8(path):
    img = Image.open(path).convert("RGB").resize((SIZE, SIZE), Image.BILINEAR)
    return np.asarray(img, dtype=np.uint8).reshape(-1)


def predecode(files, workers):
    import multiprocessing
    with multiprocessing.Pool(workers) as pool:
        return np.stack(pool.map(load_u8, files, chunksize=64))


def write_topk(f, paths, top):
    for p, t in zip(paths, top):
        f.write(json.dumps({"path": p, "logitsTopK": [int(v) for v in t]}) + "\n")


def run_torch(a, files, layers, out):
    import torch

    class Files(torch.utils.data.Dataset):
        def __len__(self):
            return len(files)

        def __getitem__(self, i):
            return torch.from_numpy(load(files[i])), i

    dev = torch.device(a.device)
    torch.backends.cuda.matmul.allow_tf32 = a.precision == "tf32"
    torch.backends.cudnn.allow_tf32 = a.precision == "tf32"
    dt = torch.bfloat16 if a.precision == "bf16" else torch.float32
    ws = [(torch.from_numpy(w.copy()).to(dev, dt),
           torch.from_numpy(b.copy()).to(dev, dt) if b is not None else None) for w, b in layers]
    loader = torch.utils.data.DataLoader(Files(), batch_size=a.batch, num_workers=a.workers,
                                         pin_memory=dev.type == "cuda", shuffle=False)
    with torch.inference_mode():
        for x, i in loader:
            h = x.to(dev, non_blocking=True).to(dt)
            for k, (w, b) in enumerate(ws):
                h = torch.addmm(b, h, w.t()) if b is not None else h @ w.t()
                if k < len(ws) - 1:
                    h = torch.relu_(h)
            top = torch.topk(h.float(), a.topk, dim=1).indices.cpu().numpy()
            write_topk(out, [files[j] for j in i.tolist()], top)
    if dev.type == "cuda":
        torch.cuda.synchronize()


def run_predecoded(a, files, layers, out, data):
    import torch
    dev = torch.device(a.device)
    torch.backends.cuda.matmul.allow_tf32 = a.precision == "tf32"
    dt = torch.bfloat16 if a.precision == "bf16" else torch.float32
    ws = [(torch.from_numpy(w.copy()).to(dev, dt),
           torch.from_numpy(b.copy()).to(dev, dt) if b is not None else None) for w, b in layers]
    x_all = torch.from_numpy(data)
    if dev.type == "cuda":
        x_all = x_all.pin_memory()
    with torch.inference_mode():
        for _ in range(a.predecoded):
            for s in range(0, len(files), a.batch):
                h = x_all[s:s + a.batch].to(dev, non_blocking=True).to(dt)
                for k, (w, b) in enumerate(ws):
                    h = torch.addmm(b, h, w.t()) if b is not None else h @ w.t()
                    if k < len(ws) - 1:
                        h = torch.relu_(h)
                top = torch.topk(h.float(), a.topk, dim=1).indices.cpu().numpy()
                write_topk(out, files[s:s + a.batch], top)
    if dev.type == "cuda":
        torch.cuda.synchronize()


def run_numpy(a, files, layers, out):
    import multiprocessing
    if a.precision != "fp32":
        sys.exit("torch_inference: --engine numpy computes fp32 only")
    with multiprocessing.Pool(a.workers) as pool:
        for s in range(0, len(files), a.batch):
            h = np.stack(pool.map(load, files[s:s + a.batch]))
            for k, (w, b) in enumerate(layers):
                h = h @ w.T + (b if b is not None else 0)
                if k < len(layers) - 1:
                    np.maximum(h, 0, out=h)
            top = np.argsort(-h, axis=1, kind="stable")[:, :a.topk]
            write_topk(out, files[s:s + a.batch], top)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("images")
    p.add_argument("model")
    p.add_argument("out")
    p.add_argument("--device", default="cuda")
    p.add_argument("--workers", type=int, default=15)
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--precision", choices=["fp32", "tf32", "bf16"], default="fp32")
    p.add_argument("--topk", type=int, default=5)
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--engine", choices=["torch", "numpy"], default="torch")
    p.add_argument("--draft", action="store_true")
    p.add_argument("--predecoded", type=int, default=0)
    a = p.parse_args()
    global SIZE, DRAFT
    SIZE = a.size
    DRAFT = a.draft
    layers = read_model(a.model)
    data = None
    if a.predecoded:
        if a.engine != "torch":
            sys.exit("torch_inference: --predecoded runs with --engine torch")
        files = sorted(os.path.join(a.images, f) for f in os.listdir(a.images)
                       if f.lower().endswith((".jpg", ".jpeg", ".png")))
        data = predecode(files, a.workers)
    t0 = time.perf_counter()
    if not a.predecoded:
        files = sorted(os.path.join(a.images, f) for f in os.listdir(a.images)
                       if f.lower().endswith((".jpg", ".jpeg", ".png")))
    with open(a.out, "w") as out:
        if a.predecoded:
            run_predecoded(a, files, layers, out, data)
        else:
            (run_torch if a.engine == "torch" else run_numpy)(a, files, layers, out)
    t = time.perf_counter() - t0
    n = len(files) * max(1, a.predecoded)
    print("RESULT torch images=%d seconds=%.3f images_per_s=%.1f device=%s precision=%s engine=%s"
          " predecoded=%d" % (n, t, n / t, a.device, a.precision, a.engine, a.predecoded),
          flush=True)


if __name__ == "__main__":
    main()
