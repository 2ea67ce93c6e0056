#!/usr/bin/env python3
"""Writes small RGB PNG files with zlib alone (independent of libpng and of the engine's decoder).

Usage: pngs.py DIR PREFIX N [--bad K] [--sizes grid|ramp]

DIR/PREFIX00.png .. PREFIX<N-1>.png, each of a different size and pattern; with --bad K the
K-th one is cut in half (a truncated PNG: a decode error). Sizes: grid (the default) cycles
3..11 wide by 20..14 high; ramp is 3+i wide by 20-i high.
"""
import argparse
import os
import struct
import zlib


def png(w, h, seed):
    raw = b"".join(b"\x00" + bytes((x * 7 + y * 13 + seed + c) % 256 for x in range(w) for c in range(3))
                   for y in range(h))

    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("prefix")
    ap.add_argument("n", type=int)
    ap.add_argument("--bad", type=int, default=-1)
    ap.add_argument("--sizes", choices=["grid", "ramp"], default="grid")
    a = ap.parse_args()
    os.makedirs(a.dir, exist_ok=True)
    for i in range(a.n):
        w, h = (3 + i % 9, 20 - i % 7) if a.sizes == "grid" else (3 + i, 20 - i)
        d = png(w, h, i)
        with open(os.path.join(a.dir, "%s%02d.png" % (a.prefix, i)), "wb") as f:
            f.write(d[: len(d) // 2] if i == a.bad else d)


if __name__ == "__main__":
    main()
