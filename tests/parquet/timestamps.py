#!/usr/bin/env python3
"""DATE and TIMESTAMP keep their logical type through the engine (issue 39): pyarrow writes
timestamp[ms], timestamp[us], timestamp[ns] and date32 columns (with nulls, negative values and
values past 2038); `streambatch run` reads them (parquet source), filters and projects them
(typed columns, so the partition's logical byte must survive both ops) and writes them (parquet
sink). pyarrow reads the output back with the same Arrow types and values, and DuckDB gives the
same rows as it gives for the input file.

  timestamps.py STREAMBATCH_BINARY WORKDIR
Prints one line per check and "N passed, N failed"; exits non-zero on any failure."""
import datetime as dt
import glob, os, shutil, subprocess, sys
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import duckdb
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tally import check, finish  # noqa: E402

sb, work = sys.argv[1], sys.argv[2]
os.makedirs(work, exist_ok=True)
N = 3000
TYPES = {"ms": pa.timestamp("ms"), "us": pa.timestamp("us"), "ns": pa.timestamp("ns"),
         "d": pa.date32()}


def table():
    def nv(vals):
        return [None if i % 11 == 4 else v for i, v in enumerate(vals)]
    r = range(N)
    # negative (before 1970) through past 2038; nanos stay within int64's +-292 years
    ms = [(i - 1000) * 86_400_037 * 7 for i in r]
    return pa.table({
        "id": pa.array(list(r), pa.int64()),
        "ms": pa.array(nv(ms), TYPES["ms"]),
        "us": pa.array(nv([v * 1000 + i for i, v in enumerate(ms)]), TYPES["us"]),
        "ns": pa.array(nv([v * 1_000_000 + i * 7 for i, v in enumerate(ms)]), TYPES["ns"]),
        "d": pa.array(nv([(i - 1500) * 13 for i in r]), TYPES["d"]),
        "x": pa.array([i * 0.5 for i in r], pa.float64()),
    })


def run(src, out, stages):
    path = os.path.join(work, "p.yaml")
    with open(path, "w") as f:
        f.write(f"""apiVersion: streambatch.dev/v1alpha1
kind: Pipeline
metadata: {{name: pqts}}
spec:
  source: {{uri: "file://{src}/", format: parquet, partitionSize: 64Ki}}
  stages:
{stages}
  sink: {{uri: "file://{out}/", format: parquet}}
""")
    shutil.rmtree(out, ignore_errors=True)
    return subprocess.run([sb, "run", path, "--checkpoint", os.path.join(work, "ck")],
                          capture_output=True, text=True, timeout=300)


def read_out(d):
    ts = [pq.read_table(f) for f in sorted(glob.glob(os.path.join(d, "part-*.parquet")))]
    for t in ts:
        t.validate(full=True)
    return pa.concat_tables(ts).sort_by("id")


def duck(q):
    return duckdb.sql(q).fetchall()


src, out = os.path.join(work, "src"), os.path.join(work, "out")
shutil.rmtree(src, ignore_errors=True)
os.makedirs(src)
t = table()
pq.write_table(t, os.path.join(src, "a.parquet"), row_group_size=1000)
LO = 700
stages = ("  - {name: f, op: filter, args: {field: id, op: ge, value: %d}}\n"
          "  - {name: p, op: project, args: {fields: [id, d, ns, us, ms]}}" % LO)
p = run(src, out, stages)
check("parquet -> filter -> project -> parquet runs", p.returncode == 0, p.stderr[-1500:])
if p.returncode == 0:
    got = read_out(out)
    exp = t.filter(pc.greater_equal(t["id"], LO)).select(["id", "d", "ns", "us", "ms"])
    for name, typ in TYPES.items():
        check(f"{name}: pyarrow reads it back as {typ}", got.schema.field(name).type == typ,
              str(got.schema.field(name).type))
        g, e = got.column(name).combine_chunks(), exp.column(name).combine_chunks()
        check(f"{name}: the same {exp.num_rows} values and nulls", g.equals(e),
              f"{got.num_rows} rows; first {g.slice(0, 3)}")
    inp = duck(f"SELECT id, d, ns, us, ms FROM read_parquet('{src}/a.parquet') "
               f"WHERE id >= {LO} ORDER BY id")
    outr = duck(f"SELECT id, d, ns, us, ms FROM read_parquet('{out}/part-*.parquet') ORDER BY id")
    check("duckdb reads the output as the input (same rows, same values)", inp == outr,
          next((f"row {i}: {a} != {b}" for i, (a, b) in enumerate(zip(inp, outr)) if a != b),
               f"{len(inp)} vs {len(outr)} rows"))
    kq = "SELECT typeof(d), typeof(ns), typeof(us), typeof(ms) FROM read_parquet('{}') LIMIT 1"
    kin, kout = duck(kq.format(f"{src}/a.parquet")), duck(kq.format(f"{out}/part-*.parquet"))
    check("duckdb gives the output columns the input's types (DATE, TIMESTAMP_NS, ...)",
          kin == kout and kout[0][:2] == ("DATE", "TIMESTAMP_NS"), f"{kin} vs {kout}")
    check("a date's value is right (not just equal to itself)",
          got.column("d")[0].as_py() == dt.date(1970, 1, 1) + dt.timedelta(days=(LO - 1500) * 13),
          str(got.column("d")[0]))
finish()
