"""check.py OP IN_DIR OUT_DIR: checks one system's output of scripts/bench-a2a.sh against its
input (pyarrow's JSON reader and compute; the same check for every system) and prints one JSON
line {"ok": bool, "rows": N, "why": "..."} (plus "adjacent" for shuffle). Status 0 when ok.
The output's files: the parts in _manifest.json's order when there is one (streambatch), else
every .json/.jsonl file under OUT_DIR (a peer's file names need not sort in output order).
  sort     the output's keys, files in manifest order (a peer's files ordered by their first
           key), equal the input's keys sorted: every key once, in order; and the ids are the
           input's (the same rows)
  groupby  one row per key, the same keys as the input; count and sum_v equal, mean_w within
           1e-9 relative of pyarrow's group_by over the input
  shuffle  sorted by id, the output equals the input (the same multiset of rows: ids are unique),
           and it is not the input's order: at most 1% of neighbouring rows within a file are
           neighbours in the input (id + 1), a figure printed as "adjacent\""""
import glob
import json
import os
import sys

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

op, src, out = sys.argv[1:4]
if op == "sort":
    schema = pa.schema([("key", pa.string()), ("id", pa.int64()), ("payload", pa.string())])
else:
    schema = pa.schema([("id", pa.int64()), ("key", pa.string()), ("v", pa.int64()),
                        ("w", pa.float64()), ("pad", pa.string())])
OUT_TYPES = {"count": pa.int64(), "sum_v": pa.int64(), "mean_w": pa.float64()}


def read(path, sch):
    opts = pj.ParseOptions(explicit_schema=sch, unexpected_field_behavior="ignore")
    return pj.read_json(path, parse_options=opts, read_options=pj.ReadOptions(block_size=16 << 20))


def inputs():
    return pa.concat_tables(read(f, schema) for f in sorted(glob.glob(os.path.join(src, "*.jsonl"))))


def out_files():
    man = os.path.join(out, "_manifest.json")
    if os.path.exists(man):
        with open(man) as fh:
            return [os.path.join(out, p["name"]) for p in json.load(fh)["parts"]], True
    fs = [f for f in glob.glob(os.path.join(out, "**", "*"), recursive=True)
          if f.endswith((".json", ".jsonl")) and os.path.getsize(f) > 0]
    return sorted(fs), False


def done(ok, rows, why="", **kw):
    print(json.dumps(dict(ok=ok, rows=rows, why=why, **kw)))
    sys.exit(0 if ok else 1)


def check_sort():
    t = inputs()
    want = pc.take(t["key"], pc.sort_indices(t["key"]))
    files, ordered = out_files()
    parts = [read(f, schema) for f in files]
    parts = [p for p in parts if p.num_rows]
    if not ordered:  # a peer: its files are ranges; put them in the order of their first keys
        parts.sort(key=lambda p: p["key"][0].as_py())
    got = pa.concat_tables(parts) if parts else schema.empty_table()
    if got.num_rows != t.num_rows:
        done(False, got.num_rows, f"{got.num_rows} rows, the input has {t.num_rows}")
    if not got["key"].equals(want):
        bad = pc.not_equal(got["key"].combine_chunks(), want.combine_chunks())
        i = pc.index(bad, True).as_py()
        done(False, got.num_rows, f"row {i}: key {got['key'][i]} where the sorted input has {want[i]}")
    if not pc.take(got["id"], pc.sort_indices(got["id"])).equals(t["id"]):  # the input: id order
        done(False, got.num_rows, "the ids differ from the input's")
    done(True, got.num_rows)


def check_groupby():
    t = inputs()
    ref = t.group_by("key").aggregate([("id", "count"), ("v", "sum"), ("w", "mean")])
    ref = ref.sort_by("key")
    files, _ = out_files()
    sch = pa.schema([("key", pa.string())] + list(OUT_TYPES.items()))
    got = pa.concat_tables([read(f, sch) for f in files]).sort_by("key")
    if got.num_rows != ref.num_rows:
        done(False, got.num_rows, f"{got.num_rows} groups, the input has {ref.num_rows} keys")
    if not got["key"].equals(ref["key"]):
        done(False, got.num_rows, "the keys differ from the input's")
    for name, col in (("count", "id_count"), ("sum_v", "v_sum")):
        if not got[name].equals(ref[col]):
            done(False, got.num_rows, f"{name} differs from the reference")
    rel = pc.max(pc.divide(pc.abs(pc.subtract(got["mean_w"], ref["w_mean"])), pc.abs(ref["w_mean"]))).as_py()
    if rel is None or rel > 1e-9:
        done(False, got.num_rows, f"mean_w differs by {rel} relative")
    done(True, got.num_rows, max_rel=rel)


def check_shuffle():
    t = inputs()
    files, _ = out_files()
    parts = [read(f, schema) for f in files]
    adj = pairs = 0
    for p in parts:
        ids = p["id"].combine_chunks()
        if len(ids) > 1:
            adj += pc.sum(pc.equal(pc.subtract(ids[1:], ids[:-1]), 1)).as_py() or 0
            pairs += len(ids) - 1
    got = pa.concat_tables(parts) if parts else schema.empty_table()
    frac = adj / pairs if pairs else 0.0
    if got.num_rows != t.num_rows:
        done(False, got.num_rows, f"{got.num_rows} rows, the input has {t.num_rows}")
    if not got.sort_by("id").equals(t):  # the input is in id order
        done(False, got.num_rows, "sorted by id, the rows differ from the input's", adjacent=frac)
    if frac > 0.01:
        done(False, got.num_rows, f"{frac:.3f} of neighbouring rows are neighbours in the input", adjacent=frac)
    done(True, got.num_rows, adjacent=frac)


{"sort": check_sort, "groupby": check_groupby, "shuffle": check_shuffle}[op]()
