"""peer.py SYSTEM SRC_DIR OUT_DIR FIELD OP VALUE: the Parquet benchmark's pipeline (scripts/
bench-parquet.sh) in a peer system: read SRC_DIR's Parquet, keep the rows where FIELD OP VALUE
(an integer; OP lt or ge), keep the columns id, x, s, vec, write Parquet (zstd) into OUT_DIR.
Each system's documented API with its defaults, 2 CPUs where it takes a count:
  pyarrow   pyarrow.dataset: a scanner (columns, filter) into ds.write_dataset
  duckdb    COPY (SELECT ... FROM read_parquet(...) WHERE ...) TO ... (threads=2)
  daft      daft.read_parquet(...).where(...).select(...).write_parquet(...)
  ray       ray.data.read_parquet(..., columns=[...]).filter(expr=...).write_parquet(...)"""
import os
import sys

system, src, out, field, op, value = sys.argv[1:7]
value = int(value)
cols = ["id", "x", "s", "vec"]
sym = {"lt": "<", "ge": ">="}[op]
os.makedirs(out, exist_ok=True)

if system == "pyarrow":
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq
    d = ds.dataset(src, format="parquet")
    f = ds.field(field) < value if op == "lt" else ds.field(field) >= value
    sc = d.scanner(columns=cols, filter=f)
    ds.write_dataset(sc, out, format="parquet",
                     file_options=ds.ParquetFileFormat().make_write_options(compression="zstd"))
elif system == "duckdb":
    import duckdb
    c = duckdb.connect()
    c.execute("SET threads=2")
    c.execute(f"COPY (SELECT {', '.join(cols)} FROM read_parquet('{src}/*.parquet') "
              f"WHERE {field} {sym} {value}) TO '{out}/out.parquet' (FORMAT parquet, COMPRESSION zstd)")
elif system == "daft":
    import daft
    from daft import col
    df = daft.read_parquet(f"{src}/*.parquet")
    df = df.where(col(field) < value if op == "lt" else col(field) >= value).select(*cols)
    df.write_parquet(out, compression="zstd")
elif system == "ray":
    os.environ.setdefault("RAY_agent_register_timeout_ms", "120000")
    import ray
    ray.init(num_cpus=2, include_dashboard=False)
    d = ray.data.read_parquet(src, columns=cols + ([field] if field not in cols else []))
    d = d.filter(expr=f"{field} {sym} {value}").select_columns(cols)
    d.write_parquet(out, compression="zstd")
else:
    sys.exit(f"peer.py: unknown system {system}")
