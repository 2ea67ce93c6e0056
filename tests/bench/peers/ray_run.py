"""Ray Data side of scripts/bench-peers.sh: ray_run.py {etl,accel,tiny} IN_DIR OUT_DIR.

Documented APIs with default settings; only the resource counts are given: ray.init(num_cpus=2);
for accel, the simulated accelerator is a GPU slot (num_gpus=1, as streambatch's --gpus 1), and
num_cpus=3 because a GPU stage reserves 1 CPU by default in Ray Data: 2 CPUs stay for the
transform, as streambatch's 2 CPU workers beside its GPU worker. Ray Data refuses a GPU stage
without batch_size: 1 row (one expanded 1 MiB input file), the unit streambatch's stage works on.
"""
import glob
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
# work.py must be importable in the worker processes the runner starts too
os.environ["PYTHONPATH"] = here + os.pathsep + os.environ.get("PYTHONPATH", "")
# Not a performance setting: on a loaded 2-CPU machine the raylet gave up after its default wait
# for the metrics agent to start ("The current node timed out during startup"); wait 2 minutes.
os.environ.setdefault("RAY_agent_register_timeout_ms", "120000")
import ray  # noqa: E402
import work  # noqa: E402

mode, src, out = sys.argv[1:4]
cpus = int(os.environ.get("PEER_CPUS", "2"))


def expand(batch):
    # the CPU transform: 50 ms of CPU per MiB in, each row's bytes twice out
    rows = list(batch["bytes"])
    work.spin(sum(len(b) for b in rows))
    return {"bytes": [b + b for b in rows]}


class Accelerator:
    # the simulated accelerator: 25 ms per MiB, one instance (ActorPoolStrategy(size=1))
    def __call__(self, batch):
        work.sleep(sum(len(b) for b in batch["bytes"]))
        return batch


if mode == "etl":
    ray.init(num_cpus=cpus)
    ds = ray.data.read_json(sorted(glob.glob(src + "/*.jsonl")))
    ds.filter(expr="lang == 'en'").select_columns(["id", "score"]).write_json(out)
elif mode == "accel":
    ray.init(num_cpus=cpus + 1, num_gpus=1)
    ds = ray.data.read_binary_files(sorted(glob.glob(src + "/*.bin")))
    ds = ds.map_batches(expand)
    ds = ds.map_batches(Accelerator, compute=ray.data.ActorPoolStrategy(size=1), num_gpus=1,
                        batch_size=1)
    ds.write_parquet(out)
elif mode == "tiny":
    ray.init(num_cpus=cpus)
    ray.data.read_json(sorted(glob.glob(src + "/*.jsonl"))).write_json(out)
else:
    sys.exit("ray_run.py: unknown mode " + mode)
