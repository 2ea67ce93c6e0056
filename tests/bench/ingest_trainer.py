# ingest_trainer.py — the trainer of the cluster ingest measurement (issue 40, "show the paper's
# effect on the test cluster"; tests/k8s/lifecycle/60-ingest-cluster.bench.sh), run in a trainer
# pod whose limits.cpu are its own cores. It reads batches of 256 images (64x64, normalized, chw
# float32) and runs a step that sleeps STEP_MS per batch, from one of two feeds:
#   MODE=pool  a DataLoader stand-in inside the pod: a multiprocessing.Pool of POOL_PROCS
#              processes decoding /data/*.jpg with Pillow (resize BILINEAR, normalize with numpy),
#              in file order, stacked into batches here (torch is not in the image);
#   MODE=sb    streambatch.iter_batches from STREAMBATCH_ADDRESS (the Pipeline's worker pods do
#              the preprocessing), the token in STREAMBATCH_TOKEN_FILE.
# Prints one JSON line: rows, batches, the first batch's seconds from the start, steady samples/s
# (the rows of batches SKIP.. over the time from batch SKIP-1 to the last: a stream Pipeline fills
# its memory budget before the trainer starts, so the first batches are not the steady rate), the
# whole run's samples/s, the median wait in next() after the first batch, the CPU seconds this
# pod used and was throttled for, and the CFS quota it ran under (its cgroup, as the agent set it).
import glob, json, os, statistics, sys, time

import numpy as np

B = 256
MODE = os.environ["MODE"]
STEP_MS = float(os.environ.get("STEP_MS", "0"))
SKIP = int(os.environ.get("SKIP", "5"))


def one(path):
    from PIL import Image
    a = np.asarray(Image.open(path).convert("RGB").resize((64, 64), Image.BILINEAR), dtype=np.float32)
    return ((a / 255.0 - 0.5) / 0.25).transpose(2, 0, 1).reshape(-1)


def pool_batches():
    from multiprocessing import Pool
    files = sorted(glob.glob("/data/*.jpg"))
    with Pool(int(os.environ.get("POOL_PROCS", "2"))) as pool:
        buf = []
        for a in pool.imap(one, files, chunksize=16):  # ordered, as a DataLoader's sampler
            buf.append(a)
            if len(buf) == B:
                yield np.stack(buf)
                buf = []
        if buf:
            yield np.stack(buf)


def sb_batches():
    import streambatch
    for b in streambatch.iter_batches(os.environ["STREAMBATCH_ADDRESS"], batch_size=B,
                                      batch_format="numpy", drop_last=False,
                                      token_file=os.environ["STREAMBATCH_TOKEN_FILE"]):
        yield b["image"]


def cgroup_cpu():
    """(CPU seconds used, seconds throttled, CFS quota in us) of this pod's cgroup, as runc
    mounts it: cgroup v1's cpu and cpuacct, else v2's cpu.stat and cpu.max; None where absent."""
    def read(*paths):
        for p in paths:
            try:
                return open(p).read()
            except OSError:
                pass
        return None
    v1 = ("/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpuacct")
    quota = read(*(d + "/cpu.cfs_quota_us" for d in v1))
    if quota is not None:
        stat = dict(l.split() for l in (read(*(d + "/cpu.stat" for d in v1)) or "").splitlines())
        usage = read(*(d + "/cpuacct.usage" for d in v1))
        thr = stat.get("throttled_time")
        return (int(usage) / 1e9 if usage else None, int(thr) / 1e9 if thr else None, int(quota))
    cmax = read("/sys/fs/cgroup/cpu.max")
    stat = dict(l.split() for l in (read("/sys/fs/cgroup/cpu.stat") or "").splitlines())
    use, thr = stat.get("usage_usec"), stat.get("throttled_usec")
    q = cmax.split()[0] if cmax else None
    return (int(use) / 1e6 if use else None, int(thr) / 1e6 if thr else None,
            int(q) if q and q != "max" else None)


def main():
    t0 = time.time()
    marks, rows = [], 0  # per batch: (asked, had)
    it = pool_batches() if MODE == "pool" else sb_batches()
    while True:
        asked = time.time()
        x = next(it, None)
        if x is None:
            break
        marks.append((asked, time.time()))
        if len(marks) == 1 and (x.dtype != np.float32 or x.shape[1] != 3 * 64 * 64):
            sys.exit(f"unexpected batch {x.dtype} {x.shape}")
        rows += len(x)
        if STEP_MS > 0:
            time.sleep(STEP_MS / 1000)
    end = time.time()
    n = len(marks)
    steady = None
    if n > SKIP + 1:
        later = rows - min(n, SKIP) * B  # every batch but the last is whole
        steady = later / (marks[-1][1] - marks[SKIP - 1][1])
    cpu_s, throttled_s, quota = cgroup_cpu()
    print(json.dumps({
        "mode": MODE, "rows": rows, "batches": n,
        "first_batch_s": round(marks[0][1] - t0, 3) if marks else None,
        "steady_sps": round(steady, 1) if steady else None,
        "whole_sps": round(rows / (end - t0), 1),
        "wait_ms": round(statistics.median(h - a for a, h in marks[1:]) * 1000, 1) if n > 1 else None,
        "cpu_s": round(cpu_s, 2) if cpu_s is not None else None,
        "throttled_s": round(throttled_s, 2) if throttled_s is not None else None,
        "quota_us": quota,
    }), flush=True)


if __name__ == "__main__":
    main()
