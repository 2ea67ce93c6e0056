"""peer.py SYSTEM OP SRC_DIR OUT_DIR: one op of scripts/bench-a2a.sh in a peer system: read the
jsonl files of SRC_DIR, run OP, write jsonl into OUT_DIR. OP: sort (by key, ascending), groupby
(by key: count, sum of v, mean of w, written as count, sum_v, mean_w), shuffle (a random
permutation of all rows, seed 1). Each system's documented API with its defaults, 2 CPUs where
it takes a count:
  ray     ray.data.read_json -> sort("key") / groupby("key").aggregate(Count, Sum, Mean) /
          random_shuffle(seed=1) -> write_json (ray.init(num_cpus=2))
  daft    daft.read_json -> sort / groupby().agg / shuffle(seed=1) -> write_json (native runner)
  duckdb  COPY (SELECT ... FROM read_json(...) ORDER BY key / GROUP BY key / ORDER BY random()
          after setseed) TO ... (FORMAT json): newline-delimited (threads=2)"""
import os
import sys

system, op, src, out = sys.argv[1:5]
os.makedirs(out, exist_ok=True)

if system == "ray":
    os.environ.setdefault("RAY_agent_register_timeout_ms", "120000")
    import ray
    from ray.data.aggregate import Count, Mean, Sum
    ray.init(num_cpus=2, include_dashboard=False)
    d = ray.data.read_json(src)
    if op == "sort":
        d = d.sort("key")
    elif op == "groupby":
        d = d.groupby("key").aggregate(Count(alias_name="count"), Sum("v", alias_name="sum_v"),
                                       Mean("w", alias_name="mean_w"))
    else:
        d = d.random_shuffle(seed=1)
    d.write_json(out)
elif system == "daft":
    import daft
    from daft import col
    df = daft.read_json(src + "/*.jsonl")
    if op == "sort":
        df = df.sort("key")
    elif op == "groupby":
        df = df.groupby("key").agg(col("key").count().alias("count"), col("v").sum().alias("sum_v"),
                                   col("w").mean().alias("mean_w"))
    else:
        df = df.shuffle(seed=1)
    df.write_json(out)  # returns once the files are written
    # Daft 0.7.26 aborts at interpreter exit about one run in three (SIGABRT "PyGILState_Release:
    # thread state must be current" or SIGSEGV while finalizing, after the output is complete):
    # leave without finalizing, as the output is.
    sys.stdout.flush()
    os._exit(0)
elif system == "duckdb":
    import duckdb
    c = duckdb.connect()
    c.execute("SET threads=2")
    q = {"sort": "SELECT * FROM t ORDER BY key",
         "groupby": "SELECT key, count(*) AS count, sum(v) AS sum_v, avg(w) AS mean_w FROM t GROUP BY key",
         "shuffle": "SELECT * FROM t ORDER BY random()"}[op]
    if op == "shuffle":
        c.execute("SELECT setseed(0.1)")
    c.execute(f"CREATE VIEW t AS SELECT * FROM read_json('{src}/*.jsonl', format='newline_delimited')")
    c.execute(f"COPY ({q}) TO '{out}/out.jsonl' (FORMAT json)")
else:
    sys.exit(f"peer.py: unknown system {system}")
