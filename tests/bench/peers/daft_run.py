"""Daft side of scripts/bench-peers.sh: daft_run.py {etl,accel,tiny} IN_DIR OUT_DIR.

Documented APIs with default settings (the native runner, which uses every core: 2 here).
"""
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
# work.py must be importable in the worker processes the runner starts too
os.environ["PYTHONPATH"] = here + os.pathsep + os.environ.get("PYTHONPATH", "")
import daft  # noqa: E402
from daft import col  # noqa: E402
import work  # noqa: E402

mode, src, out = sys.argv[1:4]

if mode == "etl":
    df = daft.read_json(src + "/*.jsonl")
    df.where(col("lang") == "en").select("id", "score").write_json(out)
elif mode == "accel":

    @daft.func(return_dtype=daft.DataType.binary())
    def expand(b: bytes) -> bytes:
        # the CPU transform: 50 ms of CPU per MiB in, the bytes twice out
        work.spin(len(b))
        return b + b

    @daft.cls(gpus=1, max_concurrency=1)
    class Accelerator:
        # the simulated accelerator: 25 ms per MiB, one instance
        def __call__(self, b: bytes) -> bytes:
            work.sleep(len(b))
            return b

    acc = Accelerator()
    df = daft.from_glob_path(src + "/*.bin")
    df = df.select(col("path").download().alias("bytes"))
    df = df.select(expand(col("bytes")).alias("bytes"))
    df = df.select(acc(col("bytes")).alias("bytes"))
    df.write_parquet(out)
elif mode == "tiny":
    daft.read_json(src + "/*.jsonl").write_json(out)
else:
    sys.exit("daft_run.py: unknown mode " + mode)
