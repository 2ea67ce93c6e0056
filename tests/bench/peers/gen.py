"""Input data of the benchmarks: scripts/bench-etl.sh, bench-tiny.sh and bench-peers.sh
(streambatch vs Ray Data vs Daft, side by side) write theirs with this, so they measure the same.

  gen.py etl DIR MIB    MIB of jsonl in 16 files, ~200-byte records {id, lang, score, text};
                        (scripts/bench-etl.sh's data)
  gen.py bin DIR N      N files of 1 MiB of random bytes (each file = one 1 MiB partition of
                        4 KiB records for streambatch, one row of bytes for Ray Data and Daft)
  gen.py tiny DIR N     N one-record jsonl files of ~0.6 KiB (scripts/bench-tiny.sh's data: two
                        never share a split at partitionSize 1Ki)
"""
import json
import os
import random
import sys


def etl(out, mib):
    random.seed(7)
    langs = ["en", "de", "fr", "es"]
    target, per = mib << 20, (mib << 20) // 16
    n, i, f, k = 0, 0, None, -1
    while n < target:
        if f is None or f.tell() >= per and k < 15:
            if f:
                f.close()
            k += 1
            f = open("%s/part-%02d.jsonl" % (out, k), "w")
        line = '{"id":%d,"lang":"%s","score":%d,"text":"%s"}\n' % (
            i, langs[i % 4], random.randrange(1000), "x" * random.randrange(100, 200))
        f.write(line)
        n += len(line)
        i += 1
    f.close()


def binary(out, n):
    rng = random.Random(11)
    for k in range(n):
        with open("%s/f%04d.bin" % (out, k), "wb") as f:
            f.write(rng.randbytes(1 << 20))


def tiny(out, n):
    for k in range(n):
        with open("%s/f%04d.jsonl" % (out, k), "w") as o:
            o.write(json.dumps({"id": k, "v": "x" * 580}) + "\n")


if __name__ == "__main__":
    kind, out, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    os.makedirs(out, exist_ok=True)
    {"etl": etl, "bin": binary, "tiny": tiny}[kind](out, n)
