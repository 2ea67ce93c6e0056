"""Data-parallel training fed by a stream:// sink (docs/training.md, "A training example").

    python3 api/examples/training/train.py [--ranks 2] [--epochs 2] [--rows 20000]
        [--batch 128] [--balance lbbsp] [--slow-rank 1] [--backend auto|torch|numpy]

Makes a small synthetic data set (jsonl: 8 features and a 0/1 label), serves it with
`streambatch run --serve` for --epochs epochs, and trains a logistic regression on --ranks rank
processes, each reading its share with streambatch.iter_batches. The ranks average their
gradients after every step (an all-reduce over shared memory, weighted by each rank's batch rows,
as DistributedDataParallel's would be with LB-BSP's unequal batches), so they finish the epoch
together. With torch importable the model is a torch.nn.Linear trained by autograd and SGD; else
the same model in numpy (--backend forces one). --slow-rank R makes rank R's step take twice as
long; --balance lbbsp then gives it fewer rows. Prints one JSON line per epoch from rank 0 and
exits 0 when the model learned the labels (accuracy >= 0.9 on the last epoch's batches).

Needs the `streambatch` binary (on PATH, or $STREAMBATCH_BIN) and the consumer library
(`make build`; see docs/training.md for how iter_batches finds it), and numpy.
"""
import argparse
import json
import multiprocessing as mp
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

DIM = 8


def make_data(directory, rows, seed=1):
    """rows records {"x": [8 floats], "y": 0/1} in 4 files; y is a fixed linear rule of x."""
    rnd = random.Random(seed)
    w = [rnd.uniform(-1, 1) for _ in range(DIM)]
    per = rows // 4
    for f in range(4):
        with open(os.path.join(directory, f"part-{f}.jsonl"), "w") as out:
            for _ in range(per):
                x = [round(rnd.gauss(0, 1), 4) for _ in range(DIM)]
                y = int(sum(a * b for a, b in zip(w, x)) > 0)
                out.write(json.dumps({"x": x, "y": y}) + "\n")


def pipeline(directory):
    path = os.path.join(directory, "train.yaml")
    with open(path, "w") as f:
        f.write(f"""apiVersion: streambatch.dev/v1alpha1
kind: Pipeline
metadata: {{name: train-example}}
spec:
  source: {{uri: "file://{directory}/data/*.jsonl", format: jsonl, partitionSize: 64Ki}}
  stages: [{{name: keep, op: identity}}]
  sink: {{uri: "stream://", format: jsonl}}
  execution: {{memoryBudget: 16Mi}}
""")
    return path


class NumpyModel:
    """Logistic regression: weights and a bias, the gradient of the summed log loss."""

    def __init__(self):
        self.w = np.zeros(DIM + 1)

    def grad(self, x, y):
        xb = np.hstack([x, np.ones((len(x), 1))])
        p = 1 / (1 + np.exp(-(xb @ self.w)))
        loss = -np.sum(y * np.log(p + 1e-12) + (1 - y) * np.log(1 - p + 1e-12))
        return xb.T @ (p - y), loss, int(np.sum((p > 0.5) == (y > 0.5)))

    def step(self, g, lr):
        self.w -= lr * g


class TorchModel:
    """The same model as a torch.nn.Linear: autograd's gradient, SGD's step."""

    def __init__(self):
        import torch
        self.torch = torch
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(DIM, 1)
        torch.nn.init.zeros_(self.lin.weight)
        torch.nn.init.zeros_(self.lin.bias)
        self.opt = torch.optim.SGD(self.lin.parameters(), lr=1.0)

    def grad(self, x, y):
        t = self.torch
        xt, yt = t.from_numpy(x).float(), t.from_numpy(y).float()
        self.opt.zero_grad()
        logits = self.lin(xt).squeeze(1)
        loss = t.nn.functional.binary_cross_entropy_with_logits(logits, yt, reduction="sum")
        loss.backward()
        g = np.concatenate([self.lin.weight.grad.numpy().ravel(), self.lin.bias.grad.numpy()])
        right = int(((logits > 0).float() == yt).sum())
        return g.astype(np.float64), float(loss), right

    def step(self, g, lr):
        t = self.torch
        self.lin.weight.grad = t.from_numpy(g[:DIM].reshape(1, DIM) * lr).float()
        self.lin.bias.grad = t.from_numpy(g[DIM:] * lr).float()
        self.opt.step()


def allreduce(shared, barrier, rank, ranks, values):
    """Sums `values` over the ranks (each rank's row of the shared array, then every row)."""
    buf = np.frombuffer(shared.get_obj(), dtype=np.float64).reshape(ranks, -1)
    buf[rank, :] = values
    barrier.wait()
    total = buf.sum(axis=0)
    barrier.wait()  # nobody writes the next step's row before everyone has read this one
    return total


def rank_main(a, rank, addr, token_file, shared, barrier, results):
    import streambatch
    model = TorchModel() if a.backend == "torch" else NumpyModel()
    for epoch in range(a.epochs):
        it = streambatch.iter_batches(addr, batch_size=a.batch, batch_format="numpy", rank=rank,
                                      world_size=a.ranks, epoch=epoch, drop_last=True,
                                      local_shuffle_buffer=1024, seed=7, token_file=token_file,
                                      balance=a.balance)
        steps = seen = right = 0
        loss = 0.0
        sizes = []
        for batch in it:
            recs = [json.loads(r) for r in batch["record"]]
            x = np.array([r["x"] for r in recs], dtype=np.float64)
            y = np.array([r["y"] for r in recs], dtype=np.float64)
            t0 = time.perf_counter()
            g, lsum, ok = model.grad(x, y)
            if rank == a.slow_rank:  # a slower machine: the step takes twice as long
                time.sleep(2 * (time.perf_counter() - t0) + 0.00002 * len(recs))
            elif a.slow_rank >= 0:
                time.sleep(0.00001 * len(recs))
            it.report_step(time.perf_counter() - t0)  # the compute, not the all-reduce's wait
            tot = allreduce(shared, barrier, rank, a.ranks, np.concatenate([g, [len(recs), lsum, ok]]))
            model.step(tot[:DIM + 1] / tot[DIM + 1], a.lr)  # the mean over the global batch
            steps += 1
            seen += int(tot[DIM + 1])
            loss += tot[DIM + 2]
            right += int(tot[DIM + 3])
            sizes.append(len(recs))
        if rank == 0:
            line = {"epoch": epoch, "steps": steps, "rows": seen, "loss": round(loss / seen, 4),
                    "accuracy": round(right / seen, 4), "rank0_batch_last": sizes[-1:]}
            print(json.dumps(line), flush=True)
        results.put((rank, epoch, steps, right / max(seen, 1)))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--rows", type=int, default=20000)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--lr", type=float, default=0.5)
    p.add_argument("--balance", choices=["lbbsp"], default=None)
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--backend", choices=["auto", "torch", "numpy"], default="auto")
    a = p.parse_args()
    if a.backend == "auto":
        try:
            import torch  # noqa: F401
            a.backend = "torch"
        except ImportError:
            a.backend = "numpy"
    exe = os.environ.get("STREAMBATCH_BIN") or shutil.which("streambatch")
    if not exe:
        sys.exit("train.py: no streambatch binary (put it on PATH or set STREAMBATCH_BIN)")
    work = tempfile.mkdtemp(prefix="sb-train-")
    server = None
    try:
        os.makedirs(os.path.join(work, "data"))
        make_data(os.path.join(work, "data"), a.rows)
        server = subprocess.Popen([exe, "run", pipeline(work), "--cpus", "1", "--serve",
                                   "127.0.0.1:0", "--epochs", str(a.epochs), "--seed", "1"],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        info = json.loads(server.stdout.readline())
        print(json.dumps({"backend": a.backend, "ranks": a.ranks, "balance": a.balance,
                          "address": info["address"]}), flush=True)
        ctx = mp.get_context("fork")
        shared = ctx.Array("d", a.ranks * (DIM + 4))
        barrier, results = ctx.Barrier(a.ranks, timeout=300), ctx.Queue()
        procs = [ctx.Process(target=rank_main, args=(a, r, info["address"], info["tokenFile"],
                                                     shared, barrier, results))
                 for r in range(a.ranks)]
        for pr in procs:
            pr.start()
        for pr in procs:
            pr.join()
        got = [results.get(timeout=5) for _ in range(a.ranks * a.epochs)] \
            if all(pr.exitcode == 0 for pr in procs) else []
        server.wait(timeout=60)
        if not got or server.returncode != 0:
            sys.exit(f"train.py: ranks {[pr.exitcode for pr in procs]}, server {server.returncode}")
        last = [g for g in got if g[1] == a.epochs - 1]
        unequal = [e for e in range(a.epochs) if len({g[2] for g in got if g[1] == e}) != 1]
        if unequal or min(g[3] for g in last) < 0.9:
            sys.exit(f"train.py: unequal steps or not learned: {got}")
    finally:
        if server is not None and server.poll() is None:
            server.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
