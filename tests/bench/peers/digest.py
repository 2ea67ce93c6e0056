"""digest.py {jsonl,chunks} FILES...: prints "ROWS MD5" of the sorted rows, to check that two
systems produced the same output.

jsonl: each non-empty line parsed as JSON and re-serialized with sorted keys.
chunks: binary output as 4 KiB records: raw files (streambatch's binary sink) are cut into 4 KiB
records; .parquet files (Ray Data, Daft) have a "bytes" column whose values are cut likewise.
"""
import hashlib
import json
import sys

REC = 4096


def jsonl_rows(files):
    for p in files:
        with open(p) as f:
            for line in f:
                if line.strip():
                    yield json.dumps(json.loads(line), sort_keys=True)


def chunk_rows(files):
    for p in files:
        if p.endswith(".parquet"):
            import pyarrow.parquet as pq
            vals = [v.as_py() for v in pq.read_table(p, columns=["bytes"]).column("bytes")]
        else:
            with open(p, "rb") as f:
                vals = [f.read()]
        for v in vals:
            for i in range(0, len(v), REC):
                yield hashlib.md5(v[i:i + REC]).hexdigest()


kind, files = sys.argv[1], sys.argv[2:]
rows = sorted((jsonl_rows if kind == "jsonl" else chunk_rows)(files))
print(len(rows), hashlib.md5("\n".join(rows).encode()).hexdigest())
