#!/usr/bin/env python3
"""Python reference for limit and join (issue 41), used by tests/integration/test_run_limit_join.c.

    check_lj.py limit N IN_DIR OUT_DIR               OUT_DIR's rows, in part order, are exactly
                                                     the first N rows of IN_DIR's files in name
                                                     order (the source order)
    check_lj.py join ARGS_JSON LEFT_DIR RIGHT_DIR OUT_DIR
                                                     OUT_DIR's rows are the hash join of LEFT_DIR
                                                     with RIGHT_DIR (ARGS: on, how, missingKey)
    check_lj.py same OUT_A OUT_B                     the two outputs hold the same rows (each as
                                                     often), in any order
    check_lj.py genjoin DIR ROWS SEED                writes DIR/left/l.jsonl and DIR/right/r.jsonl:
                                                     keys of mixed types (1, 1.0, "1", true, null,
                                                     missing), duplicates on both sides, clashes

Keys compare as check.py's do (1 == 1.0, "1" differs, true differs; null meets null). A right
field whose name the left record holds too is written as right_<name>; the `on` fields appear
once, the left's. Exit status 0 when the output matches; otherwise the first differences.
"""
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check import norm, read_out, read_rows  # noqa: E402


def canon(r):
    return json.dumps(r, sort_keys=True)


def check_limit(n, rows, out):
    got = [canon(r) for p in out for r in p]
    want = [canon(r) for r in rows[:n]]
    if got == want:
        return []
    for i, (a, b) in enumerate(zip(got, want)):
        if a != b:
            return ["row %d: got %s, want %s" % (i, a, b)]
    return ["%d rows out, want %d" % (len(got), len(want))]


def jkey(rec, on, mnull):
    k = []
    for f in on:
        if f not in rec and not mnull:
            raise KeyError(f)
        k.append(norm(rec.get(f)))
    return tuple(k)


def ref_join(left, right, args):
    on, how, mnull = args["on"], args.get("how", "inner"), "missingKey" in args
    idx = {}
    for r in right:
        idx.setdefault(jkey(r, on, mnull), []).append(r)
    out = []
    for lrow in left:
        ms = idx.get(jkey(lrow, on, mnull), [])
        if not ms and how == "left":
            out.append(dict(lrow))
        for r in ms:
            o = dict(lrow)
            for f, v in r.items():
                if f not in on:
                    o[f if f not in lrow else "right_" + f] = v
            out.append(o)
    return out


def multiset(recs):
    m = {}
    for r in recs:
        m[canon(r)] = m.get(canon(r), 0) + 1
    return m


def check_join(args, left, right, out):
    want, got = multiset(ref_join(left, right, args)), multiset([r for p in out for r in p])
    if want == got:
        return []
    errs = ["missing %dx: %s" % (n - got.get(k, 0), k) for k, n in want.items() if got.get(k, 0) < n]
    errs += ["extra %dx: %s" % (n - want.get(k, 0), k) for k, n in got.items() if want.get(k, 0) < n]
    return errs


def genjoin(d, nrows, seed):
    rnd = random.Random(seed)
    keys = [1, 1.0, "1", 2, True, False, None, "a", "b", 3.5, 0, -0.0, [1, 2], {"x": 1}, 7, 8]
    for side in ("left", "right"):
        os.makedirs(os.path.join(d, side), exist_ok=True)
    with open(os.path.join(d, "left", "l.jsonl"), "w") as o:
        for i in range(nrows):
            r = {"id": i, "k": rnd.choice(keys), "k2": rnd.randint(0, 2), "v": rnd.random()}
            if rnd.random() < 0.05:
                del r["k"]
            o.write(json.dumps(r) + "\n")
    with open(os.path.join(d, "right", "r.jsonl"), "w") as o:
        for i in range(60):  # duplicate keys: about 4 right rows per key, 7 and 8 none
            r = {"k": rnd.choice(keys[:14]), "k2": rnd.randint(0, 2), "rid": i, "v": "r%d" % i}
            if rnd.random() < 0.05:
                del r["k"]
            o.write(json.dumps(r) + "\n")


def main(argv):
    if argv[1] == "genjoin":
        genjoin(argv[2], int(argv[3]), int(argv[4]))
        return 0
    if argv[1] == "same":
        a, b = multiset([r for p in read_out(argv[2]) for r in p]), multiset(
            [r for p in read_out(argv[3]) for r in p])
        errs = ["%s: %dx in %s, %dx in %s" % (k, a.get(k, 0), argv[2], b.get(k, 0), argv[3])
                for k in sorted(set(a) | set(b)) if a.get(k, 0) != b.get(k, 0)]
        what = "%s and %s" % (argv[2], argv[3])
    elif argv[1] == "limit":
        errs = check_limit(int(argv[2]), read_rows(argv[3]), read_out(argv[4]))
        what = "limit %s" % argv[2]
    else:
        args = json.loads(argv[2])
        errs = check_join(args, read_rows(argv[3]), read_rows(argv[4]), read_out(argv[5]))
        what = "join %s" % argv[2]
    for e in errs[:10]:
        print(e)
    if not errs:
        print("%s: %s" % (what, "the same rows" if argv[1] == "same" else "matches the reference"))
    return 1 if errs else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
