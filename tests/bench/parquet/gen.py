"""gen.py OUT_DIR MIB: the Parquet benchmark's input (scripts/bench-parquet.sh), written by pyarrow:
about MIB MiB in one file, zstd, row groups of 32768 rows (so a filter matching the last 1% of ids
matches about 1% of the row groups). 8 columns: id (int64, ascending), k (int32, 0-99, uniform:
the filter's column), a (int64), x and y (double), s (a string of 8-24 bytes), t (one of 12
category strings) and vec (a list of 64 float32, an embedding). Deterministic (seeded)."""
import os
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

out, mib = sys.argv[1], int(sys.argv[2])
os.makedirs(out, exist_ok=True)
path = os.path.join(out, "data.parquet")
RG = 32768
rng = np.random.default_rng(39)
cats = np.array([f"category-{i:02d}" for i in range(12)], dtype=object)
schema = pa.schema([("id", pa.int64()), ("k", pa.int32()), ("a", pa.int64()), ("x", pa.float64()),
                    ("y", pa.float64()), ("s", pa.string()), ("t", pa.string()),
                    ("vec", pa.list_(pa.float32()))])
w = pq.ParquetWriter(path, schema, compression="zstd")
first = 0
while True:
    ids = np.arange(first, first + RG, dtype=np.int64)
    vec = rng.standard_normal(RG * 64, dtype=np.float32)
    s = [f"user-{v:x}" * (1 + int(v % 3)) for v in rng.integers(0, 2**40, RG)]
    t = pa.table([pa.array(ids), pa.array(rng.integers(0, 100, RG, dtype=np.int32)),
                  pa.array(rng.integers(-2**40, 2**40, RG)), pa.array(rng.standard_normal(RG)),
                  pa.array(rng.uniform(0, 1000, RG)), pa.array(s, pa.string()),
                  pa.array(cats[rng.integers(0, 12, RG)], pa.string()),
                  pa.ListArray.from_arrays(pa.array(np.arange(0, RG * 64 + 1, 64, dtype=np.int32)),
                                           pa.array(vec))], schema=schema)
    w.write_table(t, row_group_size=RG)
    first += RG
    if first * 296 >= mib << 20:  # about 296 bytes a row once compressed (the floats do not shrink)
        break
w.close()
print(first, os.path.getsize(path))
