"""Two data-parallel ranks reading a stream:// sink (scripts/bench-ingest-lbbsp.sh): each step
sleeps a fixed time per row of its batch (rank 1 twice as long: half speed), then the ranks meet
at a barrier, as DistributedDataParallel's all-reduce makes them. Each rank reports its step's
compute time (BatchIterator.report_step), the time LB-BSP sizes batches by.

usage: lbbsp_ranks.py ADDRESS TOKEN_FILE BALANCE(equal|lbbsp) BATCH MS_PER_ROW SLOWDOWN SKIP
Prints one line: iterations, the mean iteration time over the iterations after SKIP (ms), and
rank 0's and rank 1's mean batch over those iterations."""
import sys
import threading
import time

import streambatch

addr, token_file, balance = sys.argv[1], sys.argv[2], sys.argv[3]
batch, ms_per_row, slowdown, skip = int(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6]), int(sys.argv[7])
barrier = threading.Barrier(2)
marks = {}  # rank -> [time after each iteration's barrier]
sizes = {0: [], 1: []}
errors = []


def rank(r):
    per_row = ms_per_row / 1000.0 * (slowdown if r == 1 else 1.0)
    it = streambatch.iter_batches(addr, batch_size=batch, batch_format="numpy", rank=r,
                                  world_size=2, epoch=0, drop_last=True, token_file=token_file,
                                  balance=None if balance == "equal" else balance, timeout_s=120)
    t = marks.setdefault(r, [])
    try:
        for b in it:
            n = len(b["record"])
            sizes[r].append(n)
            t0 = time.perf_counter()
            time.sleep(per_row * n)  # the step's compute
            it.report_step(time.perf_counter() - t0)
            barrier.wait(timeout=60)  # the all-reduce
            t.append(time.perf_counter())
    except Exception as e:  # a rank that fails breaks the barrier for the other
        errors.append(f"rank {r}: {e}")
        barrier.abort()


threads = [threading.Thread(target=rank, args=(r,)) for r in (0, 1)]
for th in threads:
    th.start()
for th in threads:
    th.join()
if errors:
    sys.exit("; ".join(errors))
n = min(len(marks[0]), len(marks[1]))
if n <= skip + 1:
    sys.exit(f"only {n} iterations")
t = marks[0]
iter_ms = (t[n - 1] - t[skip]) / (n - 1 - skip) * 1000
mean = lambda v: sum(v) / len(v)
print(n, f"{iter_ms:.3f}", f"{mean(sizes[0][skip + 1:n]):.1f}", f"{mean(sizes[1][skip + 1:n]):.1f}")
