#!/usr/bin/env python3
"""Prints how many splits the checkpoint of `streambatch run` holds (-1: no checkpoint file).

Usage: ckpt_splits.py CHECKPOINT.json [--parts | --list]

The file is the summary of a checkpoint log (controller/ctl/ckptlog.h): the committed splits are
the union of the "splits" lines of the highest generation's base and its segments, read here
independently of the C reader (with --parts: the number of part lines instead; with --list:
the part lines themselves, "<id>:<rows>:<bytes>:<crc>", one a line). A file in the
older format (every part inline) is read too. Exits 1 when the log cannot be read (a writer was
compacting it: the caller polls again)."""
import glob
import json
import os
import sys


def ranges(text):
    out = set()
    for r in filter(None, text.strip().split(",")):
        a, _, b = r.partition("-")
        out.update(range(int(a), int(b or a) + 1))
    return out


def main():
    path = sys.argv[1]
    want_parts = "--parts" in sys.argv[2:]
    want_list = "--list" in sys.argv[2:]
    if not os.path.exists(path):
        print(-1)
        return 0
    d = json.load(open(path))
    if d.get("format") != "log":
        if want_list:
            print("\n".join(d.get("parts", [])))
            return 0
        print(len(d.get("parts", [])) if want_parts else len(ranges(d.get("committedSplits", ""))))
        return 0
    loc = d["location"]
    # base-G.sbck (not a chunk base-G-K.sbck); a chunked base's file lists its chunks
    bases = sorted(b for b in glob.glob(os.path.join(loc, "base-*.sbck")) if len(os.path.basename(b)) == 18)
    if not bases:
        return 1
    gen = os.path.basename(bases[-1])[5:13]
    files = [bases[-1]] + sorted(glob.glob(os.path.join(loc, "seg-%s-*.sbck" % gen)))
    splits, parts, listed = set(), 0, []
    for f in files:
        text = open(f).read()
        if text.startswith("streambatch-checkpoint-chunks 1\n"):
            n = int(text.split("\nchunks ")[1].split("\n")[0])
            text = "".join(open(os.path.join(loc, "base-%s-%08x.sbck" % (gen, k))).read() for k in range(1, n + 1))
        lines = text.split("\n")
        if not lines[-2].startswith("end "):
            return 1
        n = 0
        for i, line in enumerate(lines):
            if line.startswith("splits "):
                splits |= ranges(line[7:])
            elif line.startswith("parts "):
                n = int(line[6:])
                parts += n
                listed += lines[i + 1 : i + 1 + n]
    if want_list:
        print("\n".join(listed))
        return 0
    print(parts if want_parts else len(splits))
    return 0


if __name__ == "__main__":
    sys.exit(main())
