#!/usr/bin/env python3
"""Filter pushdown by row-group statistics (issue 39): files written by pyarrow with many row
groups, read by `streambatch run` with a `filter` right after the parquet source (pushdown) and
with an identity before it (no pushdown). Both outputs must equal each other and the rows that
the filter's documented semantics keep, computed here from pyarrow's values; the summary says how
many row groups were skipped and how many bytes were fetched, which must match what the
statistics allow (e.g. a filter matching 1 of 20 row groups reads at most 2 of them).

  pushdown.py STREAMBATCH_BINARY WORKDIR
Prints one line per check and "N passed, N failed"; exits non-zero on any failure."""
import json, math, os, sys
import pyarrow as pa
import pyarrow.parquet as pq
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tally import check, finish  # noqa: E402
from pqrun import run_pipeline  # noqa: E402

sb, work = sys.argv[1], sys.argv[2]



N, RG = 20000, 1000  # 20 row groups


def table():
    r = range(N)
    return pa.table({
        "id": pa.array(list(r), pa.int64()),
        # one value per row group, group 5 all null, group 9 one null
        "g": pa.array([None if i // RG == 5 or i == 9 * RG + 3 else i // RG for i in r], pa.int64()),
        "u64": pa.array([2**63 + i * 1000 for i in r], pa.uint64()),
        "u32": pa.array([3_000_000_000 + i for i in r], pa.uint32()),
        "f64": pa.array([None if i % 101 == 7 else math.nan if i % 97 == 5 else i * 0.5 for i in r],
                        pa.float64()),
        "s": pa.array([f"k{i:06d}" if i < 19000 else f"é{i}" for i in r], pa.string()),
        "b": pa.array([i // RG == 3 for i in r], pa.bool_()),
        "vec": pa.array([[float(i)] * 4 for i in r], pa.list_(pa.float32())),
    })


def keeps(v, op, val):
    """The filter's semantics (docs/pipeline-api.md "Filter comparisons", typed columns)."""
    if v is None or isinstance(v, list):
        return op == "ne"
    if isinstance(val, bool):
        ok = isinstance(v, bool)
    elif isinstance(val, str):
        ok = isinstance(v, (str, bytes))
    else:
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and not (
            isinstance(v, float) and math.isnan(v))
    if not ok:
        return op == "ne"
    if isinstance(val, str):
        a, b = (v if isinstance(v, bytes) else v.encode()), val.encode()
    elif isinstance(val, float) or isinstance(v, float):
        a, b = float(v), float(val)
    else:
        a, b = v, val
    return {"eq": a == b, "ne": a != b, "lt": a < b, "le": a <= b, "gt": a > b, "ge": a >= b}[op]


RUNS = [0]


def run(src, out, stages, psize="1Gi"):
    RUNS[0] += 1
    p, rows, s = run_pipeline(sb, work, f"pd{RUNS[0]}", src, out, stages, psize)
    # NaN kept (JSON has none): compared as a string
    rows = [{k: "NaN" if isinstance(v, float) and math.isnan(v) else v for k, v in r.items()}
            for r in rows]
    return p, sorted(rows, key=lambda r: r["id"]), s


def case(name, src, vals, field, op, value, max_read=None, min_skip=None, psize="1Gi"):
    flt = json.dumps({"field": field, "op": op, "value": value})
    p1, got, s1 = run(src, os.path.join(work, "o1"), f"  - {{name: f, op: filter, args: {flt}}}", psize)
    p2, ref, s2 = run(src, os.path.join(work, "o2"),
                      f"  - {{name: i, op: identity}}\n  - {{name: f, op: filter, args: {flt}}}", psize)
    if p1.returncode != 0 or p2.returncode != 0:
        check(name, False, f"run failed: {p1.stderr[-800:]} {p2.stderr[-800:]}")
        return
    want = [i for i, v in enumerate(vals[field]) if keeps(v, op, value)]
    ids = [r["id"] for r in got]
    skipped, read = s1.get("rowGroupsSkipped", -1), s1.get("rowGroupsRead", -1)
    why = None
    if got != ref:
        why = f"pushdown output differs from the unfiltered read's ({len(got)} vs {len(ref)} rows)"
    elif ids != want:
        why = f"kept {len(ids)} rows, the semantics keep {len(want)}"
    elif s2.get("rowGroupsSkipped", 0) != 0:
        why = "skipped row groups without a leading filter"
    elif skipped + read != N // RG:
        why = f"read {read} + skipped {skipped} row groups of {N // RG}"
    elif max_read is not None and read > max_read:
        why = f"read {read} row groups (at most {max_read} can match)"
    elif min_skip is not None and skipped < min_skip:
        why = f"skipped {skipped} row groups (expected at least {min_skip})"
    elif skipped > 0 and not s1["sourceBytesRead"] < s2["sourceBytesRead"]:
        why = f"fetched {s1['sourceBytesRead']} bytes, not fewer than {s2['sourceBytesRead']}"
    check(f"{name}: {field} {op} {value!r} ({len(ids)} rows, {skipped} of {N // RG} row groups "
          f"skipped, {s1.get('sourceBytesRead')} of {s2.get('sourceBytesRead')} bytes)", why is None, why)
    return s1, s2


os.makedirs(work, exist_ok=True)
T = table()
vals = {c: T.column(c).to_pylist() for c in T.column_names}
src = os.path.join(work, "src")
os.makedirs(src, exist_ok=True)
path = os.path.join(src, "t.parquet")
pq.write_table(T, path, row_group_size=RG, compression="zstd")
S = "pyarrow stats"
case(S, src, vals, "id", "gt", 18500, max_read=2, min_skip=18)
case(S, src, vals, "id", "eq", 12345, max_read=1)
case(S, src, vals, "id", "lt", 1000.5, max_read=2)
case(S, src, vals, "id", "le", 999, max_read=1)
case(S, src, vals, "id", "ge", 20000, max_read=0)
case(S, src, vals, "id", "ne", 5, min_skip=0)
case(S + ", an all-null group", src, vals, "g", "eq", 5, max_read=0)
case(S + ", an all-null group", src, vals, "g", "lt", 6, max_read=5)
case(S + ", ne skips only groups of that one value without nulls", src, vals, "g", "ne", 7,
     max_read=19, min_skip=1)
case(S + ", ne keeps the group with a null", src, vals, "g", "ne", 9, max_read=20)
case(S + ", uint64 above INT64_MAX", src, vals, "u64", "lt", 100, max_read=0)
case(S + ", uint64 above INT64_MAX", src, vals, "u64", "gt", 0, min_skip=0)
case(S + ", uint32 unsigned order", src, vals, "u32", "ge", 3_000_019_500, max_read=1)
case(S + ", doubles with NaN and nulls", src, vals, "f64", "gt", 9000.0, max_read=2)
case(S + ", ne keeps NaN", src, vals, "f64", "ne", 1.0, max_read=20)
case(S + ", strings by bytes", src, vals, "s", "eq", "k012345", max_read=1)
case(S + ", strings by bytes", src, vals, "s", "lt", "k000500", max_read=1)
case(S + ", strings by bytes (é sorts after k)", src, vals, "s", "ge", "é", max_read=1)
case(S + ", bool", src, vals, "b", "eq", True, max_read=1)
case(S + ", a string never equals an int", src, vals, "id", "eq", "5", max_read=0)
case(S + ", a tensor compares with nothing", src, vals, "vec", "eq", 1, max_read=0)
case(S + ", many splits", src, vals, "id", "gt", 17500, max_read=3, psize="64Ki")

# no statistics: nothing skipped, the same rows
nostats = os.path.join(work, "nostats")
os.makedirs(nostats, exist_ok=True)
pq.write_table(T, os.path.join(nostats, "t.parquet"), row_group_size=RG, write_statistics=False)
case("pyarrow without statistics", nostats, vals, "id", "gt", 18500, min_skip=0, max_read=20)
# the page index written too (the row groups are skipped; pageindex.py checks the pages)
pidx = os.path.join(work, "pidx")
os.makedirs(pidx, exist_ok=True)
pq.write_table(T, os.path.join(pidx, "t.parquet"), row_group_size=RG, write_page_index=True,
               data_page_size=4096)
case("pyarrow with a page index", pidx, vals, "id", "gt", 18500, max_read=2)

finish()
