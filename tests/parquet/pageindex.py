#!/usr/bin/env python3
"""Page-index pushdown (issue 39): files pyarrow writes with write_page_index=True and small
pages (dictionary or plain, data pages v1 and v2, several row groups, optional columns with
nulls, a fixed-size list column), read by `streambatch run` with a `filter` right after the
parquet source. The rows must equal pyarrow's (the filter's documented semantics over
pyarrow's values) and, where SQL's null rule agrees, DuckDB's answer to the same predicate; the
summary must report pages skipped and fewer bytes fetched. A file whose page index is
overwritten with garbage must give the same rows (the index ignored, with a warning), never a
crash. The last check prints the fraction of the file's bytes a 1%-selective filter on a sorted
column fetches (docs/benchmarks.md).

  pageindex.py STREAMBATCH_BINARY WORKDIR
Prints one line per check and "N passed, N failed"; exits non-zero on any failure."""
import datetime, json, os, struct, sys
import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tally import check, finish  # noqa: E402
from pqrun import logs_of, run_pipeline  # noqa: E402

sb, work = sys.argv[1], sys.argv[2]
N, RG = 30000, 10000
T0 = datetime.datetime(2024, 1, 1)


def table():
    r = range(N)
    return pa.table({
        "id": pa.array(list(r), pa.int64()),
        "d": pa.array([None if i % 11 == 4 else i * 0.5 for i in r], pa.float64()),
        "s": pa.array([None if i % 17 == 2 else f"k{i:06d}" for i in r], pa.string()),
        "ts": pa.array([T0 + datetime.timedelta(seconds=i) for i in r], pa.timestamp("us")),
        # optional, mostly null, with runs of values: pages of nulls only
        "o": pa.array([(i // 500) if (i // 500) % 3 == 0 else None for i in r], pa.int64()),
        "x": pa.array([(i * 7919) % 1000 for i in r], pa.int32()),  # not sorted: no pages skipped
        "vec": pa.array([[float(i), 1.0] for i in r], pa.list_(pa.float32())),
    })


def keeps(v, op, val):
    """The filter's semantics on typed columns (pushdown.py's, without NaN: none here)."""
    if v is None:
        return op == "ne"
    if isinstance(val, str) != isinstance(v, str):
        return op == "ne"
    return {"eq": v == val, "ne": v != val, "lt": v < val, "le": v <= val, "gt": v > val,
            "ge": v >= val}[op]


def run(src, stages, tag):
    p, rows, s = run_pipeline(sb, work, tag, src, os.path.join(work, f"out-{tag}"), stages)
    # the sink writes ts back as timestamp[us] (its unit kept): compared in micros, like REF
    rows = [dict(r, ts=(r["ts"] - EPOCH) // US) if isinstance(r.get("ts"), datetime.datetime)
            else r for r in rows]
    return p, sorted(rows, key=lambda r: r["id"]), s


SQL_OP = {"eq": "=", "ne": "<>", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
CASES = [0]


def case(name, src, ref, field, op, value, want_skip=True, want_warn=False):
    """want_warn: whether the workers must log that an index is not used (None: either)."""
    CASES[0] += 1
    flt = json.dumps({"field": field, "op": op, "value": value})
    p, got, s = run(src, f"  - {{name: f, op: filter, args: {flt}}}", f"c{CASES[0]}")
    if p.returncode != 0:
        check(name, False, f"run failed: {p.stderr[-1500:]}")
        return
    want = [r for r in ref if keeps(r[field], op, value)]
    why = None
    if got != want:
        why = f"{len(got)} rows, pyarrow's values give {len(want)}"
    elif op != "ne":  # SQL drops nulls for <>, the filter keeps them: compared on the others
        lit = f"'{value}'" if isinstance(value, str) else (
            f"make_timestamp({value})" if field == "ts" else repr(value))
        q = (f"SELECT id FROM read_parquet('{src}/*.parquet') WHERE {field} {SQL_OP[op]} {lit} "
             "ORDER BY id")
        duck = [r[0] for r in duckdb.sql(q).fetchall()]
        if duck != [r["id"] for r in got]:
            why = f"DuckDB gives {len(duck)} rows, we {len(got)}"
    # an unusable index is not used at all, and the workers log why: no page counted
    if why is None and want_warn and s.get("pagesRead", 0) + s.get("pagesSkipped", 0) != 0:
        why = f"pages counted through a garbled index: {s.get('pagesRead')} read"
    # a sound index is used for every column (the list column too): no fallback to a whole read
    warned = "index not used" in logs_of(work, f"c{CASES[0]}")
    if why is None and want_warn is not None and warned != want_warn:
        why = f"a warning in the workers' logs that an index is not used: {warned}"
    if why is None and want_skip and s.get("pagesSkipped", 0) == 0:
        why = f"no page skipped (summary: pagesRead {s.get('pagesRead')})"
    check(f"{name}: {field} {op} {value!r} ({len(got)} rows, {s.get('pagesSkipped')} of "
          f"{s.get('pagesRead', 0) + s.get('pagesSkipped', 0)} pages skipped, "
          f"{s.get('sourceBytesRead')} bytes fetched)", why is None, why)
    return s


os.makedirs(work, exist_ok=True)
T = table()
EPOCH, US = datetime.datetime(1970, 1, 1), datetime.timedelta(microseconds=1)
# the reader yields a timestamp as int64 in its unit (microseconds here), as does our output
REF = [dict(r, ts=(r["ts"] - EPOCH) // US) for r in T.to_pylist()]


def write(tag, **kw):
    d = os.path.join(work, tag)
    os.makedirs(d, exist_ok=True)
    pq.write_table(T, os.path.join(d, "t.parquet"), row_group_size=RG, write_page_index=True,
                   data_page_size=1024, **kw)
    return d


variants = [("dict, pages v1", write("dv1")),
            ("plain, pages v2, zstd", write("pv2", use_dictionary=False, data_page_version="2.0",
                                             compression="zstd"))]
for vname, src in variants:
    case(vname + ", a row in the middle of a page", src, REF, "id", "eq", 15123)
    case(vname + ", a range from mid-page", src, REF, "id", "ge", 29950)
    case(vname + ", int64 below", src, REF, "id", "lt", 77)
    case(vname + ", double with nulls", src, REF, "d", "gt", 14900.25)
    case(vname + ", string with nulls", src, REF, "s", "le", "k000123")
    case(vname + ", timestamp", src, REF, "ts", "lt", (T0 - EPOCH) // US + 321 * 10**6)
    case(vname + ", optional column with null pages", src, REF, "o", "eq", 42)
    case(vname + ", ne keeps nulls (no page provably all equal)", src, REF, "o", "ne", 0,
         want_skip=False)
    case(vname + ", an unsorted column skips nothing, loses nothing", src, REF, "x", "eq", 5,
         want_skip=False)


def index_region(path):
    """The bytes between the last column chunk and the footer: where pyarrow puts the index."""
    md = pq.ParquetFile(path).metadata
    end = 0
    for g in range(md.num_row_groups):
        for c in range(md.num_columns):
            cc = md.row_group(g).column(c)
            start = cc.dictionary_page_offset if cc.has_dictionary_page else cc.data_page_offset
            end = max(end, start + cc.total_compressed_size)
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        f.seek(size - 8)
        flen = struct.unpack("<I", f.read(4))[0]
    return end, size - 8 - flen


src = variants[0][1]
a, b = index_region(os.path.join(src, "t.parquet"))
check(f"the page index lies between the data and the footer ({b - a} bytes)", b - a > 100)
seed = 12345
for kind in ("zeros", "0xff", "random", "half"):
    bad = os.path.join(work, f"bad-{kind}")
    os.makedirs(bad, exist_ok=True)
    data = bytearray(open(os.path.join(src, "t.parquet"), "rb").read())
    for i in range(a, b):
        seed = (seed * 1103515245 + 12345) & 0x7fffffff
        if kind == "zeros":
            data[i] = 0
        elif kind == "0xff":
            data[i] = 0xff
        elif kind.startswith("random"):
            data[i] = (seed >> 16) & 0xff
        elif i >= (a + b) // 2:  # half: the offset indexes (written last) garbled
            data[i] = (seed >> 16) & 0xff
    open(os.path.join(bad, "t.parquet"), "wb").write(data)
    # random bytes may still decode to a plausible index: only the rows are checked then
    case(f"a garbled page index ({kind}): the same rows", bad, REF, "id", "eq", 15123,
         want_skip=False, want_warn=None if kind.startswith("random") else True)

# the benchmark figure (docs/benchmarks.md): a 1%-selective filter on a sorted column of a file
# with one large row group (so row-group statistics skip nothing) and a page index
BN = 1000000
big = os.path.join(work, "big")
os.makedirs(big, exist_ok=True)
rb = range(BN)
BT = pa.table({"id": pa.array(list(rb), pa.int64()),
               "v": pa.array([(i * 2654435761) % 1000003 for i in rb], pa.int64()),
               "f": pa.array([i * 0.001 for i in rb], pa.float64()),
               "s": pa.array([f"name-{(i * 7) % 1000:03d}" for i in rb], pa.string())})

BENCH = []


def bench(tag, goal, **kw):
    pq.write_table(BT, os.path.join(big, "t.parquet"), row_group_size=BN, write_page_index=True,
                   compression="zstd", **kw)
    fsize = os.path.getsize(os.path.join(big, "t.parquet"))
    lo = BN - BN // 100
    p, got, s = run(big, f"  - {{name: f, op: filter, args: {{field: id, op: ge, value: {lo}}}}}",
                    "bench-" + tag.replace(" ", "-"))
    frac = s.get("sourceBytesRead", fsize) / fsize
    ok = p.returncode == 0 and [r["id"] for r in got] == list(range(lo, BN))
    BENCH.append(frac)
    check(f"1%-selective filter on a sorted column, one row group with a page index ({tag}): "
          f"{len(got)} rows, {s.get('pagesSkipped')} of "
          f"{s.get('pagesRead', 0) + s.get('pagesSkipped', 0)} pages skipped, "
          f"{s.get('sourceBytesRead')} of {fsize} bytes fetched = {100 * frac:.2f}%"
          + (f" (goal at most {100 * goal:.0f}%)" if goal else ""),
          ok and (goal is None or frac <= goal), p.stderr[-800:])


# dictionaries only where they pay (the low-cardinality string): the pages decide the figure
bench("dictionary on s only, 64 KiB pages", 0.05, use_dictionary=["s"], data_page_size=64 << 10)
# pyarrow's default dictionaries on every column: the dictionary pages (up to 1 MiB each, always
# read) dominate; the rows are checked, the figure only reported
bench("default dictionaries", None)

finish()
