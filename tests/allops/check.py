#!/usr/bin/env python3
"""Python reference for the all-to-all ops (issue 41), used by tests/integration/test_run_allops.c.

    check.py gen DIR FILES ROWS SEED        writes DIR/fNN.jsonl: mixed-type keys (1, 1.0, "1",
                                            true, null, missing), ties, nulls, floats, strings
    check.py genpad DIR FILES ROWS SEED PADS
                                            the same shape with wide rows (~1 KiB: tens of MiB
                                            in seconds, for the spill tests): g in 0..40 (ties),
                                            v int, float or missing (null), pad one of PADS
                                            strings of 960 bytes (distinct's repeats)
    check.py OP ARGS_JSON IN_DIR OUT_DIR    checks the sink OUT_DIR against the reference of op
                                            OP with ARGS over the jsonl files of IN_DIR
    check.py order OUT_DIR                  prints the rows in part order (task, then part number)
    check.py sort ARGS_JSON IN_DIR OUT_DIR  sort: the rows of the parts in _manifest.json's order
                                            are the input's, in order (stable: exactly the
                                            stable sort of the input in source order)

Exit status 0 when the output matches; otherwise the first differences are printed.
Keys compare by value and type as the engine's do: 1 == 1.0 == 1e0, "1" differs, true differs.
"""
import functools
import glob
import json
import math
import os
import random
import re
import statistics
import sys


def norm(v):
    """A hashable form of a JSON value in which 1 and 1.0 meet and "1" and true do not."""
    if v is None:
        return ("N",)
    if isinstance(v, bool):
        return ("B", v)
    if isinstance(v, (int, float)):
        return ("n", v)  # Python: 1 == 1.0 and hash(1) == hash(1.0)
    if isinstance(v, str):
        return ("s", v)
    if isinstance(v, list):
        return ("a", tuple(norm(x) for x in v))
    return ("o", tuple(sorted((k, norm(x)) for k, x in v.items())))


MISSING = object()


def read_rows(d):
    rows = []
    for f in sorted(glob.glob(os.path.join(d, "*.jsonl"))):
        with open(f) as fh:
            rows += [json.loads(line) for line in fh if line.strip()]
    return rows


def part_key(name):
    m = re.search(r"-s(\d+)-t(\d+)-p(\d+)\.", name)
    return tuple(int(x) for x in m.groups()) if m else (0, 0, 0)


def read_out(d):
    """The sink's rows, one list per reduce task (its parts in order), tasks in index order."""
    parts = sorted((p for p in os.listdir(d) if p.startswith("part-")), key=part_key)
    out, last = [], None
    for p in parts:
        if part_key(p)[:2] != last:
            out.append([])
            last = part_key(p)[:2]
        with open(os.path.join(d, p)) as fh:
            out[-1] += [json.loads(line) for line in fh if line.strip()]
    return out


def key_of(rec, fields, missing_null):
    if not fields:
        return norm(rec)
    k = []
    for f in fields:
        if f not in rec and not missing_null:
            raise KeyError(f)
        k.append(norm(rec.get(f)))
    return tuple(k)


def close(a, b):
    if a is None or b is None:
        return a is None and b is None
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def ref_groupby(rows, args):
    keys, aggs = args["keys"], args.get("aggregates", [])
    mnull = "missingKey" in args
    groups = {}
    for r in rows:
        groups.setdefault(key_of(r, keys, mnull), []).append(r)
    return groups, keys, aggs


def agg_ok(a, group, got):
    op, f = a["op"], a.get("field")
    vals = [r.get(f) for r in group] if f else None
    nums = [v for v in vals if v is not None] if f else None
    if op == "count":
        return got == len(group)
    if op == "sum":
        if not nums:
            return got is None
        if all(isinstance(v, int) and not isinstance(v, bool) for v in nums):
            return got == sum(nums)
        return close(got, math.fsum(nums))
    if op == "mean":
        return close(got, math.fsum(nums) / len(nums)) if nums else got is None
    if op == "std":
        return close(got, statistics.stdev(nums)) if len(nums) > 1 else got is None
    if op in ("min", "max"):
        if not nums:
            return got is None
        want = (min if op == "min" else max)(nums)
        return norm(got) == norm(want)
    if op in ("first", "last"):  # the order rows meet the reduce task is not source order
        return norm(got) in {norm(v) for v in vals}
    if op == "collect":
        return sorted(map(repr, map(norm, got))) == sorted(map(repr, map(norm, vals)))
    return False


def check_groupby(rows, out, args):
    groups, keys, aggs = ref_groupby(rows, args)
    recs = [r for p in out for r in p]
    errs = []
    seen = set()
    for r in recs:
        k = tuple(norm(r.get(f)) for f in keys)
        if k in seen:
            errs.append("key %r twice in the output" % (k,))
        seen.add(k)
        if k not in groups:
            errs.append("key %r not in the input" % (k,))
            continue
        for a in aggs:
            name = a.get("as") or (a["op"] + ("_" + a["field"] if "field" in a else ""))
            if not agg_ok(a, groups[k], r.get(name)):
                errs.append("key %r: %s = %r is wrong" % (k, name, r.get(name)))
    for k in groups:
        if k not in seen:
            errs.append("key %r missing from the output" % (k,))
    return errs


def check_distinct(rows, out, args):
    fields, mnull = args.get("fields", []), "missingKey" in args
    want = {}
    for r in rows:
        want.setdefault(key_of(r, fields, mnull), set()).add(repr(norm(r)))
    errs, seen = [], set()
    for r in (r for p in out for r in p):
        k = key_of(r, fields, mnull)
        if k in seen:
            errs.append("key %r twice" % (k,))
        seen.add(k)
        if k not in want or repr(norm(r)) not in want[k]:
            errs.append("record %r is not an input record of its key" % (r,))
    errs += ["key %r missing" % (k,) for k in want if k not in seen]
    return errs


def multiset(recs):
    m = {}
    for r in recs:
        k = json.dumps(r, sort_keys=True)
        m[k] = m.get(k, 0) + 1
    return m


def check_rows_kept(rows, out, args):
    errs = []
    if multiset(rows) != multiset([r for p in out for r in p]):
        errs.append("the output's rows are not the input's (as a multiset)")
    if args.get("op") == "repartition" and "partitions" in args:
        n = args["partitions"]
        sizes = [len(p) for p in out]
        if len(rows) >= 4 * n and (len(sizes) != n or max(sizes) > 2 * min(sizes)):
            errs.append("rows not spread evenly over %d tasks: %r" % (n, sizes))
    return errs


def rank(v):
    """The order across types: null, false, true, numbers, strings, arrays, objects."""
    if v is None:
        return 0
    if isinstance(v, bool):
        return 2 if v else 1
    if isinstance(v, (int, float)):
        return 3
    if isinstance(v, str):
        return 4
    return 5 if isinstance(v, list) else 6


def vcmp(a, b):
    ra, rb = rank(a), rank(b)
    if ra != rb:
        return -1 if ra < rb else 1
    if ra == 3 or ra == 4:  # numbers by value (int and float exactly), strings by code point
        return (a > b) - (a < b)
    if ra < 3:
        return 0
    if ra == 6:  # objects: their members sorted by name, as name, value, name, value, ...
        a = [x for kv in sorted(a.items()) for x in kv]
        b = [x for kv in sorted(b.items()) for x in kv]
        n = min(len(a), len(b)) // 2 * 2
        for x, y in zip(a[:n], b[:n]):
            c = vcmp(x, y)
            if c:
                return c
        return (len(a) > len(b)) - (len(a) < len(b))
    for x, y in zip(a, b):
        c = vcmp(x, y)
        if c:
            return c
    return (len(a) > len(b)) - (len(a) < len(b))


def sort_cmp(args):
    keys, first = args["keys"], args.get("nulls") == "first"

    def cmp(r, s):
        for k in keys:
            a, b = r.get(k["field"]), s.get(k["field"])
            if a is None or b is None:
                c = 0 if (a is None) == (b is None) else (-1 if a is None else 1) * (1 if first else -1)
            else:
                c = vcmp(a, b) * (-1 if k.get("descending") else 1)
            if c:
                return c
        return 0
    return cmp


def read_manifest(d):
    """The sink's rows in _manifest.json's order of parts, one list per part."""
    with open(os.path.join(d, "_manifest.json")) as fh:
        names = [p["name"] for p in json.load(fh)["parts"]]
    on_disk = sorted(p for p in os.listdir(d) if p.startswith("part-"))
    parts = []
    for n in names:
        with open(os.path.join(d, n)) as fh:
            parts.append([json.loads(line) for line in fh if line.strip()])
    return parts, sorted(names) == on_disk


def check_sort(rows, d, args):
    parts, listed = read_manifest(d)
    errs = [] if listed else ["_manifest.json does not list exactly the part files"]
    got = [r for p in parts for r in p]
    errs += check_rows_kept(rows, [got], {})
    cmp = sort_cmp(args)
    for i in range(len(got) - 1):
        if cmp(got[i], got[i + 1]) > 0:
            errs.append("rows %d and %d out of order: %r then %r" % (i, i + 1, got[i], got[i + 1]))
            break
    for i in range(len(parts) - 1):  # part i's last key is no greater than part i+1's first
        if parts[i] and parts[i + 1] and cmp(parts[i][-1], parts[i + 1][0]) > 0:
            errs.append("part %d ends above part %d's start" % (i, i + 1))
    if args.get("stable"):  # Python's sort is stable: ties keep the source order
        want = sorted(rows, key=functools.cmp_to_key(cmp))
        if [json.dumps(r) for r in want] != [json.dumps(r) for r in got]:
            errs.append("stable: ties are not in source order")
    return errs


def gen(d, files, nrows, seed):
    rnd = random.Random(seed)
    keys = [1, 1.0, "1", 2, 2.0, True, False, None, "a", "b", 3.5, -0.0, 0, 1e0, [1, 2], {"x": 1}]
    os.makedirs(d, exist_ok=True)
    for f in range(files):
        with open(os.path.join(d, "f%02d.jsonl" % f), "w") as o:
            for i in range(nrows):
                r = {"id": f * 1000000 + i, "k": rnd.choice(keys), "g": rnd.randint(0, 40)}
                v = rnd.choice([rnd.randint(-1000, 1000), rnd.random() * 100, None])
                if v is not None:
                    r["v"] = v
                r["s"] = rnd.choice(["x", "y", "zz", "é"])
                r["n"] = rnd.randint(-5, 5)
                o.write(json.dumps(r) + "\n")


def genpad(d, files, nrows, seed, npads):
    rnd = random.Random(seed)
    pads = ["%08x" % rnd.getrandbits(32) * 120 for _ in range(npads)]
    os.makedirs(d, exist_ok=True)
    for f in range(files):
        with open(os.path.join(d, "f%02d.jsonl" % f), "w") as o:
            for i in range(nrows):
                r = {"id": f * 1000000 + i, "g": rnd.randint(0, 40)}
                v = rnd.choice([rnd.randint(-1000, 1000), rnd.random() * 100, None])
                if v is not None:
                    r["v"] = v
                r["pad"] = rnd.choice(pads)
                o.write(json.dumps(r) + "\n")


def main(argv):
    if argv[1] == "gen":
        gen(argv[2], int(argv[3]), int(argv[4]), int(argv[5]))
        return 0
    if argv[1] == "genpad":
        genpad(argv[2], int(argv[3]), int(argv[4]), int(argv[5]), int(argv[6]))
        return 0
    if argv[1] == "order":
        for p in read_out(argv[2]):
            for r in p:
                print(json.dumps(r, sort_keys=True))
        return 0
    op, args = argv[1], json.loads(argv[2])
    if op == "sort":
        rows, errs = read_rows(argv[3]), check_sort(read_rows(argv[3]), argv[4], args)
        for e in errs[:10]:
            print(e)
        if not errs:
            print("sort: %d rows, in order across the parts, matches the reference" % len(rows))
        return 1 if errs else 0
    rows, out = read_rows(argv[3]), read_out(argv[4])
    args["op"] = op
    check = {"groupby": check_groupby, "distinct": check_distinct}.get(op, check_rows_kept)
    errs = check(rows, out, args)
    for e in errs[:10]:
        print(e)
    if not errs:
        print("%s: %d rows in, %d out, matches the reference" %
              (op, len(rows), sum(len(p) for p in out)))
    return 1 if errs else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
