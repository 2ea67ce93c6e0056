"""gen.py KIND DIR MIB: the input of scripts/bench-a2a.sh, about MIB MiB of jsonl in files of
about 64 MiB (at least 8 files), written with numpy as fixed-width lines (seconds, not minutes):
  sort     {"key": 100 random characters of [0-9A-Za-z], "id": N, "payload": 60 characters}
  groupby  {"id": N, "key": "k" + 5 digits (10,000 keys, uniform), "v": 100..999,
            "w": 0.dddddd, "pad": 40 characters}  (also random_shuffle's input)
id counts from 1,000,000,000 in file order, so the input's order is id order. Prints the rows."""
import os
import sys

import numpy as np

kind, out, mib = sys.argv[1], sys.argv[2], int(sys.argv[3])
rng = np.random.default_rng(41)
ALNUM = np.frombuffer(b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz", np.uint8)


def digits(vals, width):
    """ASCII digits of the non-negative integers vals, zero-padded to width: (n, width) uint8."""
    d = np.empty((len(vals), width), np.uint8)
    v = vals.astype(np.int64).copy()
    for i in range(width - 1, -1, -1):
        d[:, i] = ord("0") + v % 10
        v //= 10
    return d


def template(parts):
    """parts: literal bytes or (name, width); returns the line template and each field's offset."""
    line, at = b"", {}
    for p in parts:
        if isinstance(p, bytes):
            line += p
        else:
            at[p[0]] = (len(line), p[1])
            line += b"0" * p[1]
    return np.frombuffer(line + b"\n", np.uint8), at


if kind == "sort":
    tpl, at = template([b'{"key":"', ("key", 100), b'","id":', ("id", 10), b',"payload":"',
                        ("pay", 60), b'"}'])
else:
    tpl, at = template([b'{"id":', ("id", 10), b',"key":"k', ("key", 5), b'","v":', ("v", 3),
                        b',"w":0.', ("w", 6), b',"pad":"', ("pad", 40), b'"}'])
width = len(tpl)
rows = mib * 2**20 // width
files = max(8, (mib + 63) // 64)
os.makedirs(out, exist_ok=True)
first = 0
for f in range(files):
    n = rows // files + (1 if f < rows % files else 0)
    a = np.tile(tpl, (n, 1))

    def put(name, block):
        o, w = at[name]
        a[:, o:o + w] = block

    put("id", digits(np.arange(first, first + n) + 1_000_000_000, 10))
    if kind == "sort":
        put("key", ALNUM[rng.integers(0, len(ALNUM), (n, 100))])
        put("pay", ALNUM[rng.integers(0, len(ALNUM), (n, 60))])
    else:
        put("key", digits(rng.integers(0, 10000, n), 5))
        put("v", digits(rng.integers(100, 1000, n), 3))
        put("w", digits(rng.integers(0, 1_000_000, n), 6))
        put("pad", ALNUM[rng.integers(0, len(ALNUM), (n, 40))])
    a.tofile(os.path.join(out, "f%03d.jsonl" % f))
    first += n
print(rows)
