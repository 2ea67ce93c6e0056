"""The simulated work of the CPU -> accelerator pipelines, for the Ray Data and Daft runs
(streambatch's bench.spin / bench.sleep do the same in C, worker/ops/bench.c).

spin(nbytes): burns 50 ms of this thread's CPU time per MiB. It hashes a 64 KiB buffer in a
loop: hashlib releases the GIL for buffers this large, so threads of one process (Daft's native
runner) run it in parallel as processes (Ray's workers) do, like a numpy/pyarrow transform would.
sleep(nbytes): waits 25 ms of wall time per MiB (the simulated accelerator).
"""
import hashlib
import time

SPIN_MS_PER_MIB = 50.0
SLEEP_MS_PER_MIB = 25.0
_BUF = bytes(64 << 10)


def spin(nbytes):
    end = time.thread_time() + nbytes / 1048576.0 * SPIN_MS_PER_MIB / 1000.0
    while time.thread_time() < end:
        hashlib.sha256(_BUF).digest()


def sleep(nbytes):
    time.sleep(nbytes / 1048576.0 * SLEEP_MS_PER_MIB / 1000.0)
