"""digest.py FILE...: "ROWS SHA256" of Parquet outputs (scripts/bench-parquet.sh): the rows of
every file, sorted by id, columns id, x, s and vec compared by value (each system writes its own
list and string types: all are cast to the same before hashing)."""
import hashlib
import sys

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

files = sys.argv[1:]
tabs = [pq.read_table(f, columns=["id", "x", "s", "vec"]) for f in files]
tabs = [t for t in tabs if t.num_rows > 0]
if not tabs:
    print("0 -")
    sys.exit(0)
t = pa.concat_tables([t.cast(pa.schema([("id", pa.int64()), ("x", pa.float64()),
                                        ("s", pa.string()), ("vec", pa.list_(pa.float32()))]))
                      for t in tabs])
t = t.sort_by("id")
h = hashlib.sha256()
h.update(t.column("id").to_numpy().tobytes())
h.update(t.column("x").to_numpy().tobytes())
s = t.column("s").combine_chunks()
h.update("\0".join(s.to_pylist()).encode())
vec = t.column("vec").combine_chunks()
h.update(pc.list_value_length(vec).to_numpy(zero_copy_only=False).tobytes())
h.update(pc.list_flatten(vec).to_numpy().tobytes())
print(t.num_rows, h.hexdigest()[:16])
