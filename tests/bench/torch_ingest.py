"""Ingest into a real training step on a GPU (issue 40, "On a GPU machine"; run by
scripts/device-inference.sh's ingest step): JPEG files decoded, resized to 64x64 and normalized
(chw), in batches of 256, fed to a torch training step on the GPU, by

  loader   torch.utils.data.DataLoader with WORKERS processes (Pillow decode and resize, numpy
           normalize, pin_memory), the batches moved to the GPU
  sb       `streambatch run SPEC --serve 127.0.0.1:0 --cpus WORKERS` (image source ->
           image.resize -> image.normalize chw -> stream://), read by
           streambatch.iter_batches(batch_format="numpy"), the batches moved to the GPU

    python3 torch_ingest.py KIND IMAGES_DIR SPEC STREAMBATCH_BIN --workers N --step light|heavy
        [--device cuda|cpu]

The step: an MLP 12288 -> 1024 -> 10 trained with SGD on random labels: `light` one forward and
backward per batch (preprocessing is the bottleneck), `heavy` the same on 12288 -> 4096 -> 4096
-> 10, 8 times per batch (the step is the bottleneck). Without torch (a dry run on a machine
without it) the step is numpy's and --device is ignored. Prints "RESULT ingest kind=K step=S
samples=N seconds=T samples_per_s=R steady_per_s=R first_batch_s=F" (seconds from the loader's
or the server's start to the last step's end; steady: the samples after the first batch over the
seconds from the first batch to the last).
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import time

import numpy as np

B = 256


def one(path):
    from PIL import Image
    a = np.asarray(Image.open(path).convert("RGB").resize((64, 64), Image.BILINEAR),
                   dtype=np.float32)
    return ((a / 255.0 - 0.5) / 0.25).transpose(2, 0, 1).reshape(-1)


class Trainer:
    def __init__(self, step, device):
        dims = [12288, 1024, 10] if step == "light" else [12288, 4096, 4096, 10]
        self.reps = 1 if step == "light" else 8
        try:
            import torch
        except ImportError:
            self.torch = None
            rng = np.random.default_rng(5)
            self.ws = [rng.standard_normal((dims[k], dims[k + 1]), np.float32) * 0.01
                       for k in range(len(dims) - 1)]
            return
        self.torch = torch
        self.dev = torch.device(device)
        layers = []
        for k in range(len(dims) - 1):
            layers.append(torch.nn.Linear(dims[k], dims[k + 1]))
            if k < len(dims) - 2:
                layers.append(torch.nn.ReLU())
        self.model = torch.nn.Sequential(*layers).to(self.dev)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=1e-3)
        self.loss = torch.nn.CrossEntropyLoss()
        self.gen = torch.Generator(device=self.dev).manual_seed(5)

    def step(self, x):
        """One training step on a batch (a numpy array or a pinned CPU tensor)."""
        if self.torch is None:
            h = x
            for w in self.ws:
                h = np.maximum(h @ w, 0)
            return
        torch = self.torch
        if isinstance(x, np.ndarray):
            x = torch.from_numpy(x)
        x = x.to(self.dev, non_blocking=True)
        y = torch.randint(0, 10, (x.shape[0],), device=self.dev, generator=self.gen)
        for _ in range(self.reps):
            self.opt.zero_grad(set_to_none=True)
            self.loss(self.model(x), y).backward()
            self.opt.step()

    def sync(self):
        if self.torch is not None and self.dev.type == "cuda":
            self.torch.cuda.synchronize()


def batches_loader(a, files):
    import torch

    class Files(torch.utils.data.Dataset):
        def __len__(self):
            return len(files)

        def __getitem__(self, i):
            return torch.from_numpy(one(files[i]))

    return torch.utils.data.DataLoader(Files(), batch_size=B, num_workers=a.workers,
                                       pin_memory=a.device == "cuda", shuffle=False)


def batches_pool(a, files):
    """The loader's stand-in where torch is absent (a dry run): a Pool in file order."""
    from multiprocessing import Pool
    with Pool(a.workers) as pool:
        buf = []
        for x in pool.imap(one, files, chunksize=16):
            buf.append(x)
            if len(buf) == B:
                yield np.stack(buf)
                buf = []
        if buf:
            yield np.stack(buf)


def batches_sb(a):
    import streambatch
    srv = subprocess.Popen([a.sb, "run", a.spec, "--cpus", str(a.workers), "--serve",
                            "127.0.0.1:0"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                           text=True)
    info = json.loads(srv.stdout.readline())
    for b in streambatch.iter_batches(info["address"], batch_size=B, batch_format="numpy",
                                      drop_last=False, token_file=info["tokenFile"]):
        x = b["image"]
        if x.dtype != np.float32 or x.shape[1] != 3 * 64 * 64:
            sys.exit(f"torch_ingest: unexpected image column {x.dtype} {x.shape}")
        yield x
    if srv.wait(timeout=60) != 0:
        sys.exit("torch_ingest: the server did not exit 0")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("kind", choices=["loader", "sb"])
    p.add_argument("images")
    p.add_argument("spec")
    p.add_argument("sb")
    p.add_argument("--workers", type=int, default=15)
    p.add_argument("--step", choices=["light", "heavy"], default="light")
    p.add_argument("--device", default="cuda")
    a = p.parse_args()
    trainer = Trainer(a.step, a.device)
    files = sorted(glob.glob(os.path.join(a.images, "*.jpg")))
    # one warm-up step: CUDA's context and kernels are not the loader's cost
    trainer.step(np.zeros((B, 12288), np.float32))
    trainer.sync()
    t0 = time.time()
    if a.kind == "sb":
        it = batches_sb(a)
    elif trainer.torch is not None:
        it = batches_loader(a, files)
    else:
        it = batches_pool(a, files)
    rows, first, last = 0, None, None
    for x in it:
        trainer.step(x)
        rows += len(x)
        if first is None:
            trainer.sync()
            first = time.time()
    trainer.sync()
    last = time.time()
    wall = last - t0
    steady = (rows - min(B, rows)) / (last - first) if rows > B and last > first else 0.0
    print("RESULT ingest kind=%s step=%s samples=%d seconds=%.3f samples_per_s=%.1f "
          "steady_per_s=%.1f first_batch_s=%.2f workers=%d torch=%s"
          % (a.kind, a.step, rows, wall, rows / wall, steady, first - t0, a.workers,
             "yes" if trainer.torch is not None else "no"), flush=True)
    if rows != len(files):
        sys.exit(f"torch_ingest: {rows} samples, want {len(files)}")


if __name__ == "__main__":
    main()
