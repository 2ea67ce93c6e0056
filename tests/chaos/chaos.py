#!/usr/bin/env python3
"""chaos.py -- runs random pipelines back to back with `streambatch run` while injecting random
faults, and checks every output row against an independent computation of the expected output.

Run through scripts/chaos.sh (`make chaos DURATION=<seconds>`), which bounds the time and cleans
up after a killed driver. What it does, per pipeline (seed = <master seed>-<index>, both logged,
so `--seed S --only I` runs pipeline I of seed S again, faults included):

  * input: 1-12 files (jsonl or csv; ids unique; some fields missing, null, unicode, quoted csv
    fields, big integers), the pipeline: 1-4 stages among filter, project, identity, bench.spin
    and bench.sleep (with `expand`), random partitionSize (2-48 KiB: many tasks), memoryBudget,
    mode, preserveOrder, maxTaskRetries, --cpus; the sink is jsonl (or csv for a csv source);
    half the pipelines end with an all-to-all op (groupby, distinct, sort, repartition,
    random_shuffle, limit) or a broadcast join, with random args;
  * faults at random times while it runs: SIGKILL a worker, SIGSTOP a worker for 0.5-8 s,
    SIGKILL `streambatch run` itself and run it again with --resume, fill the run directory (a
    small tmpfs holding the workers' spill dirs: ENOSPC) for a while or for good, and in netns
    mode (--netns: controller and workers in network namespaces) cut a link or make it lossy;
    SIGKILL a worker once an all-to-all op's map half is done (the reduce phase: progress lines);
  * the expected output is computed here, from docs/pipeline-api.md's semantics of filter,
    project, expand and the all-to-all ops (never by calling streambatch), and compared with
    every row of every part file as a multiset (in order under preserveOrder, limit and a stable
    sort; groupby by key, its doubles within 1e-9; distinct one of a key's records; sort's order
    across the parts), together with _manifest.json;
  * a run that fails is acceptable only with an error and no _SUCCESS ("failed clean"); a
    sanitizer report (any file under p<N>/san/: see san_env), or a process dying of a signal
    nobody sent, is a crash;
  * with MinIO (--s3, default mix: $SB_MINIO_BIN or the one scripts/minio.sh caches), started
    once on 127.0.0.1 for the whole run and stopped at its end: some pipelines (not in netns
    mode, which cannot reach loopback) read their input from and/or write their output to a
    bucket; the output is read back with this file's own SigV4 client (listing, _manifest.json,
    every part) and checked exactly as a file sink's, _SUCCESS included.

The last line is "chaos: N passed, M failed" (a pipeline passes when it succeeded with exactly
the expected rows, or failed clean); exit status 1 when any failed.
"""
import argparse
import collections
import datetime
import functools
import glob
import hashlib
import hmac
import http.client
import json
import math
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
import xml.etree.ElementTree as ET

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
G_VALUES = ["a", "b", "ab", "B", "\u00e4", "\u20acx", "z\"q", "A,b", "", "x y", "\U0001F600"]
CSV_FIELDS = ["id", "k", "g", "x", "pad", "n"]


class Interrupted(Exception):
    pass


def log(msg):
    print(msg, flush=True)


# ---- input data ------------------------------------------------------------------------------

def gen_records(rng, fidx, nrows, fmt):
    """The logical records of one file (dicts in key order), ids unique across files."""
    recs = []
    for r in range(nrows):
        rid = fidx * 1_000_000 + r
        rec = {"id": rid}
        rec["k"] = rng.randint(-50, 50)
        rec["g"] = rng.choice(G_VALUES)
        rec["x"] = round(rng.uniform(-100, 100), rng.choice([0, 2, 9]))
        if fmt == "jsonl":
            rec["b"] = rng.random() < 0.5
            if rng.random() < 0.3:
                rec["big"] = rng.choice([2**62 + rng.randint(-3, 3), -(2**62), 2**53 + 1])
        rec["pad"] = "p" * rng.choice([0, 1, 5, 40, 200, 700])
        nv = rng.random()
        if nv < 0.3:
            rec["n"] = None
        elif nv < 0.5:
            rec["n"] = "007"
        elif nv < 0.7:
            rec["n"] = rng.randint(0, 9)
        elif fmt == "jsonl" and nv < 0.85:
            pass  # missing
        else:
            rec["n"] = "1"
        if fmt == "jsonl":
            # some keys missing (never id), in a shuffled order now and then
            for key in ("k", "g", "x"):
                if rng.random() < 0.08:
                    del rec[key]
            if rng.random() < 0.1:
                items = list(rec.items())
                rng.shuffle(items)
                rec = dict(items)
        recs.append(rec)
    return recs


def csv_field(v, rng):
    if v is None:
        return ""
    if isinstance(v, bool):
        raise ValueError("no booleans in csv")
    if isinstance(v, (int, float)):
        return repr(v)
    # a string: quoted when it has to be, when it would read back as a number or null, or by chance
    needs = v == "" or any(c in v for c in ',"\r\n') or NUM_RE.match(v) or rng.random() < 0.2
    if needs:
        return '"' + v.replace('"', '""') + '"'
    return v


def write_input(rng, d, fmt):
    os.makedirs(d)
    nfiles = rng.randint(1, 12)
    files = []
    total = 0
    for f in range(nfiles):
        nrows = rng.choice([0, 1, 10, 100, 500, 1500, 3000]) if rng.random() < 0.9 else 6000
        recs = gen_records(rng, f, nrows, fmt)
        name = "f%03d.%s" % (f, fmt)
        with open(os.path.join(d, name), "w", encoding="utf-8", newline="") as o:
            if fmt == "jsonl":
                for rec in recs:
                    o.write(json.dumps(rec, ensure_ascii=rng.random() < 0.5) + "\n")
            else:
                eol = "\r\n" if rng.random() < 0.3 else "\n"
                o.write(",".join(CSV_FIELDS) + eol)
                for rec in recs:
                    o.write(",".join(csv_field(rec[c], rng) for c in CSV_FIELDS) + eol)
        files.append(recs)
        total += len(recs)
    return files, total


# ---- the independent model of the ops (docs/pipeline-api.md) -----------------------------------

def is_num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def compare(a, b, op):
    if op == "eq":
        return a == b
    if op == "ne":
        return a != b
    if op == "lt":
        return a < b
    if op == "le":
        return a <= b
    if op == "gt":
        return a > b
    return a >= b


def filter_keeps(rec, field, op, value):
    comparable = False
    if isinstance(rec, dict) and field in rec:
        fv = rec[field]
        if isinstance(value, bool):
            comparable = isinstance(fv, bool)
        elif is_num(value):
            comparable = is_num(fv)
        elif isinstance(value, str):
            comparable = isinstance(fv, str)
    if not comparable:
        return op == "ne"
    if is_num(value):
        both_int = isinstance(fv, int) and isinstance(value, int) and \
            INT64_MIN <= fv <= INT64_MAX and INT64_MIN <= value <= INT64_MAX
        if not both_int:
            fv, value = float(fv), float(value)
    return compare(fv, value, op)


def project(rec, fields):
    out = {}
    for f in fields:
        if f in rec and f not in out:
            out[f] = rec[f]
    return out


def expected_rows(files, stages):
    """The expected output rows in input order (files by name, records in order). An op with
    `expand` and batchSize 1 repeats each record; without batchSize the multiset is the same."""
    rows = [r for recs in files for r in recs]
    for st in stages:
        op, a = st["op"], st.get("args", {})
        if op == "filter":
            rows = [r for r in rows if filter_keeps(r, a["field"], a["op"], a["value"])]
        elif op == "project":
            rows = [project(r, a["fields"]) for r in rows]
        elif op in ("bench.spin", "bench.sleep"):
            rows = [r for r in rows for _ in range(a.get("expand", 1))]
    return rows


# ---- the all-to-all ops and join (docs/pipeline-api.md, "All-to-all ops" and "join") --------

A2A_OPS = ("groupby", "distinct", "sort", "repartition", "random_shuffle", "limit", "join")
A2A_SHARE = 0.5  # of the pipelines end with one of them
# the fields an aggregate may take: every value present of one type (a mix is a data error)
AGG_FIELDS = {"sum": ["k", "x", "id"], "mean": ["k", "x", "id"], "min": ["k", "x", "g"],
              "max": ["k", "x", "g", "id"]}


def key_of(v):
    """A key field's value as the exchange compares it: by value and type (1 and 1.0 are one
    number, "1" and true are others), a missing field as null (missingKey: null)."""
    if v is None:
        return ("null",)
    if isinstance(v, bool):
        return ("bool", v)
    if is_num(v):
        return ("num", v)  # Python compares and hashes an int and a float by exact value
    if isinstance(v, str):
        return ("str", v)
    return ("json", json.dumps(num_norm(v), sort_keys=True, ensure_ascii=False))


def keys_of(rec, fields):
    return tuple(key_of(rec.get(f)) for f in fields)


def type_rank(v):
    if isinstance(v, bool):
        return 2 if v else 1
    if is_num(v):
        return 3
    if isinstance(v, str):
        return 4
    return 5 if isinstance(v, list) else 6


def cmp_values(a, b):
    """sort's order across types: false, true, numbers by value, strings by code point, arrays
    item by item (the shorter first), objects as their sorted (name, value) lists."""
    ra, rb = type_rank(a), type_rank(b)
    if ra != rb:
        return -1 if ra < rb else 1
    if ra == 6:
        a = [x for kv in sorted(a.items()) for x in kv]
        b = [x for kv in sorted(b.items()) for x in kv]
    if ra >= 5:
        for x, y in zip(a, b):
            c = cmp_values(x, y) if x is not None and y is not None else (x is not None) - (y is not None)
            if c:
                return c
        return (len(a) > len(b)) - (len(a) < len(b))
    return (a > b) - (a < b)


def sort_cmp(args):
    """The comparison of two records under sort's args: each key in turn, a null (or missing)
    key field last, or first with nulls: first, whatever the direction."""
    nulls_first = args.get("nulls") == "first"

    def cmp(ra, rb):
        for k in args["keys"]:
            a, b = ra.get(k["field"]), rb.get(k["field"])
            if a is None or b is None:
                c = (a is not None) - (b is not None)  # null before a value
                if not nulls_first:
                    c = -c
            else:
                c = cmp_values(a, b)
                if k.get("descending"):
                    c = -c
            if c:
                return c
        return 0
    return cmp


def aggregate(agg, rows):
    """One aggregate of a group's rows: count; sum/mean/min/max of the values present (nulls
    and missing fields skipped, null when none is left); sum an integer while every value is one
    and the sum fits int64, else exact (fsum: the engine's compensated sum is compared within a
    tolerance)."""
    if agg["op"] == "count":
        return len(rows)
    vals = [r[agg["field"]] for r in rows if r.get(agg["field"]) is not None]
    if not vals:
        return None
    if agg["op"] == "min":
        return min(vals)
    if agg["op"] == "max":
        return max(vals)
    if agg["op"] == "sum" and all(isinstance(v, int) for v in vals) and \
            INT64_MIN <= sum(vals) <= INT64_MAX:
        return sum(vals)
    s = math.fsum(vals)
    return s if agg["op"] == "sum" else s / len(vals)


def agg_matches(want, have):
    """An aggregate's value against the model's: integers and strings exactly, doubles within
    1e-9 (or a few ulps of a value past 1e6: the engine's compensated sum and the model's exact
    fsum may round apart)."""
    if want is None or isinstance(want, str):
        return have == want and type(have) is type(want)
    if isinstance(have, str) and NUM_RE.match(have):
        have = json.loads(have)  # read back from csv: past 15 digits a number stays text
    if not is_num(have):
        return False
    if isinstance(want, int):
        return have == want
    return abs(have - want) <= max(1e-9, 1e-15 * abs(want))


def join_rows(rows, args, right):
    """The broadcast join: per left row (in order), one row per right row with its key (in the
    right side's order), the left record with the right one's fields appended (the `on` fields
    once, as the left has them; a name the left record has too as right_<name>); a left row
    without a match dropped (inner) or kept as it is (left)."""
    on = args["on"]
    index = {}
    for rr in right:
        index.setdefault(keys_of(rr, on), []).append(rr)
    out = []
    for r in rows:
        matches = index.get(keys_of(r, on), [])
        if not matches and args.get("how") == "left":
            out.append(r)
        for m in matches:
            o = dict(r)
            for name, v in m.items():
                if name not in on:
                    o["right_" + name if name in r else name] = v
            out.append(o)
    return out


def gen_right(rng, fmt):
    """A join's right side: a few records keyed by k (ints, the same numbers as doubles, and
    digit strings that match nothing) and/or g, never without a key (so a left record without
    one matches nothing), some with a field the left records have too."""
    on = rng.choice([["k"], ["g"], ["k", "g"]])
    recs = []
    for i in range(rng.randint(0, 8)):
        rec = {}
        for f in on:
            if f == "k":
                v = rng.randint(-6, 6)
                rec[f] = rng.choice([v, v, float(v), str(v)])
            else:
                rec[f] = rng.choice(G_VALUES + ["zz"])
        rec["rv"] = i
        if rng.random() < 0.5:
            rec["x" if "g" in on else "g"] = "R%d" % i
        if rng.random() < 0.3:
            rec["pad"] = "rp"
        recs.append(rec)
    return on, recs


def gen_a2a(rng, op, fmt, budget, mode, splits, right_uri):
    """The args of one all-to-all op (or join) drawn at random for a source of about `splits`
    splits; right_uri(bytes) stores a join's right side and gives its URI. Returns (stage,
    right records or None)."""
    keyf = ["k", "g", "n"] + (["b"] if fmt == "jsonl" else [])
    fields = CSV_FIELDS if fmt == "csv" else CSV_FIELDS + ["b", "big"]
    args, right = {}, None
    if op == "groupby":
        aggs = [{"op": "count", "as": "cnt"}]
        for _ in range(rng.randint(1, 4)):
            a = rng.choice(sorted(AGG_FIELDS))
            f = rng.choice(AGG_FIELDS[a])
            aggs.append({"op": a, "field": f, "as": "%s_%s%d" % (a, f, len(aggs))})
        args = {"keys": rng.sample(keyf, rng.choice([1, 1, 2])), "aggregates": aggs, "missingKey": None}
    elif op == "distinct":
        args = {"missingKey": None}
        if rng.random() < 0.7:
            args["fields"] = rng.sample(keyf, rng.choice([1, 1, 2]))
    elif op == "sort":
        args = {"keys": [{"field": f, "descending": rng.random() < 0.4}
                         for f in rng.sample(fields, rng.choice([1, 1, 2, 3]))], "missingKey": None}
        if rng.random() < 0.4:
            args["nulls"] = rng.choice(["first", "last"])
        if mode == "streaming" and rng.random() < 0.4:
            args["stable"] = True
    elif op == "repartition":
        args = {"partitions": rng.randint(1, 8)} if rng.random() < 0.7 else \
            {"bytes": rng.choice([4096, 16384, 65536])}
    elif op == "random_shuffle":
        args = {"seed": rng.randint(0, 2**31)}
    elif op == "limit":
        args = {"rows": rng.choice([1, 7, 100, 1000, 5000, 10**6])}
    else:
        on, right = gen_right(rng, fmt)
        data = "".join(json.dumps(r) + "\n" for r in right).encode()
        # at most a quarter of the budget (validate); the right side below it: a broadcast
        args = {"right": {"uri": right_uri(data), "format": "jsonl"}, "on": on,
                "how": rng.choice(["inner", "left"]), "broadcastBelow": budget // 4, "missingKey": None}
    # the default N (one per split, up to 64) only for a small source: a thousand tiny map
    # tasks of 64 buckets each take minutes on this machine
    if op in ("groupby", "distinct", "sort", "random_shuffle") and (splits > 16 or rng.random() < 0.5):
        args["partitions"] = rng.randint(1, 8)
    return {"name": "a2a", "op": op, "args": args}, right


def a2a_model(rows, stage, right):
    """(the rows the op gives, whether their order is promised); for groupby one record per
    key (exact aggregates), for distinct the first record of each key (any of a key's records
    would do: check_a2a knows)."""
    op, a = stage["op"], stage["args"]
    if op == "groupby":
        groups = {}
        for r in rows:
            groups.setdefault(keys_of(r, a["keys"]), []).append(r)
        out = []
        for g in groups.values():
            rec = {f: g[0].get(f) for f in a["keys"]}
            rec.update((x["as"], aggregate(x, g)) for x in a["aggregates"])
            out.append(rec)
        return out, False
    if op == "distinct":
        seen, out = set(), []
        for r in rows:
            k = distinct_key(r, a.get("fields"))
            if k not in seen:
                seen.add(k)
                out.append(r)
        return out, False
    if op == "sort":
        return sorted(rows, key=functools.cmp_to_key(sort_cmp(a))), bool(a.get("stable"))
    if op == "limit":
        return rows[:a["rows"]], True
    if op == "join":
        return join_rows(rows, a, right), False
    return rows, False  # repartition, random_shuffle: a permutation


def distinct_key(rec, fields):
    if fields:
        return keys_of(rec, fields)
    return json.dumps(num_norm(rec), sort_keys=True, ensure_ascii=False)  # members in any order


def show_key(k):
    return k[:150] if isinstance(k, str) else [x[-1] for x in k]


def check_a2a(stage, rows, got):
    """What groupby, distinct and (unstable) sort promise beyond a multiset: rows are the op's
    input (the model's, nulls already dropped for a csv sink), got the output records (dicts)
    in _manifest.json's order. The multiset itself is checked by the caller for the other ops
    (and sort). Returns a list of problems."""
    op, a = stage["op"], stage["args"]
    problems = []
    if op == "sort":
        cmp = sort_cmp(a)
        bad = [i for i in range(1, len(got)) if cmp(got[i - 1], got[i]) > 0]
        if bad:
            i = bad[0]
            problems.append("sort: %d rows out of order across the parts (first at row %d: %s after %s)"
                            % (len(bad), i, canon(got[i])[:150], canon(got[i - 1])[:150]))
        return problems
    if op == "groupby":
        keyf = a["keys"]
        names = set(keyf) | {x["as"] for x in a["aggregates"]}
        key = lambda r: keys_of(r, keyf)  # noqa: E731
    else:
        key = lambda r: distinct_key(r, a.get("fields"))  # noqa: E731
    groups = {}
    for r in rows:
        groups.setdefault(key(r), []).append(r)
    seen = set()
    for r in got:
        k = key(r)
        if k in seen:
            problems.append("%s: key %s twice" % (op, canon(r)[:150]))
        elif k not in groups:
            problems.append("%s: a key of no input row: %s" % (op, canon(r)[:150]))
        elif op == "distinct":
            if canon(r) not in {canon(x) for x in groups[k]}:
                problems.append("distinct: %s is none of its key's records" % canon(r)[:150])
        else:
            if set(r) - names:
                problems.append("groupby: fields %s in %s" % (sorted(set(r) - names), canon(r)[:150]))
            for x in a["aggregates"]:
                want = aggregate(x, groups[k])
                if not agg_matches(want, r.get(x["as"])):
                    problems.append("groupby: %s = %r, expected %r (key %s, %d rows)" % (
                        x["as"], r.get(x["as"]), want, show_key(k), len(groups[k])))
        seen.add(k)
    missing = [k for k in groups if k not in seen]
    if missing:
        problems.append("%s: %d of %d keys missing (e.g. %s)" % (op, len(missing), len(groups),
                                                                 [show_key(m) for m in missing[:3]]))
    return problems[:10] + (["... %d more" % (len(problems) - 10)] if len(problems) > 10 else [])


def num_norm(v):
    """A JSON number's value, not its spelling: 40.0 and 40 are one number (a csv sink may
    write either)."""
    if isinstance(v, float) and v.is_integer() and abs(v) < 2**53:
        return int(v)
    if isinstance(v, dict):
        return {k: num_norm(x) for k, x in v.items()}
    if isinstance(v, list):
        return [num_norm(x) for x in v]
    return v


def canon(rec):
    return json.dumps(num_norm(rec), ensure_ascii=False, separators=(",", ":"))


# ---- reading the output ------------------------------------------------------------------------

NUM_RE = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?\Z")


def parse_csv(text):
    """RFC 4180 rows of (value, quoted) fields."""
    rows, row, i, n = [], [], 0, len(text)
    while i < n:
        if text[i] == '"':
            j, buf = i + 1, []
            while True:
                k = text.find('"', j)
                if k < 0:
                    raise ValueError("unterminated quote at %d" % i)
                buf.append(text[j:k])
                if k + 1 < n and text[k + 1] == '"':
                    buf.append('"')
                    j = k + 2
                    continue
                i = k + 1
                break
            row.append(("".join(buf), True))
        else:
            m = re.compile(r'[^,\r\n]*').match(text, i)
            row.append((m.group(0), False))
            i = m.end()
        if i >= n:
            rows.append(row)
            break
        c = text[i]
        if c == ",":
            i += 1
            if i >= n:
                row.append(("", False))
                rows.append(row)
            continue
        if c == "\r" and i + 1 < n and text[i + 1] == "\n":
            i += 1
        if text[i] in "\r\n":
            rows.append(row)
            row = []
            i += 1
            continue
        raise ValueError("garbage after a quoted field at %d" % i)
    return rows


def csv_value(v, quoted):
    if quoted:
        return v
    if v == "":
        return None
    if NUM_RE.match(v) and sum(c.isdigit() for c in v) <= 15:
        return json.loads(v)
    return v


def read_part(path, fmt):
    with open(path, "rb") as f:
        data = f.read()
    text = data.decode("utf-8")
    if fmt == "jsonl":
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        return [canon(json.loads(line)) for line in lines], len(data)
    rows = parse_csv(text)
    if not rows:
        return [], len(data)
    header = [v for v, _ in rows[0]]
    out = []
    for r in rows[1:]:
        if len(r) != len(header):
            raise ValueError("%s: a row of %d fields under a header of %d" % (path, len(r), len(header)))
        rec = {}
        for h, (v, q) in zip(header, r):
            val = csv_value(v, q)
            if val is not None:
                rec[h] = val  # a csv sink writes a missing key and null alike
        out.append(canon(rec))
    return out, len(data)


# ---- S3 (MinIO), with a SigV4 signer of our own (no boto3 here) --------------------------------

S3_USER, S3_PASS, S3_REGION, S3_BUCKET = "sbchaosadmin", "sbchaossecret123", "us-east-1", "chaos"


def _hm(key, msg):
    return hmac.new(key, msg.encode(), hashlib.sha256).digest()


class S3:
    """Path-style requests to one endpoint, signed with AWS Signature V4."""

    def __init__(self, host, port):
        self.host, self.port = host, port
        self.conn = None

    def request(self, method, path, query=None, body=b""):
        q = sorted((query or {}).items())
        cq = "&".join("%s=%s" % (urllib.parse.quote(k, safe="-_.~"), urllib.parse.quote(v, safe="-_.~"))
                      for k, v in q)
        cpath = urllib.parse.quote(path, safe="/-_.~")
        now = datetime.datetime.now(datetime.timezone.utc)
        amz, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
        ph = hashlib.sha256(body).hexdigest()
        hosth = "%s:%d" % (self.host, self.port)
        creq = "\n".join([method, cpath, cq, "host:" + hosth, "x-amz-content-sha256:" + ph,
                          "x-amz-date:" + amz, "", "host;x-amz-content-sha256;x-amz-date", ph])
        scope = "%s/%s/s3/aws4_request" % (day, S3_REGION)
        sts = "\n".join(["AWS4-HMAC-SHA256", amz, scope, hashlib.sha256(creq.encode()).hexdigest()])
        k = _hm(_hm(_hm(_hm(("AWS4" + S3_PASS).encode(), day), S3_REGION), "s3"), "aws4_request")
        sig = hmac.new(k, sts.encode(), hashlib.sha256).hexdigest()
        hdrs = {"Host": hosth, "x-amz-date": amz, "x-amz-content-sha256": ph,
                "Authorization": "AWS4-HMAC-SHA256 Credential=%s/%s, SignedHeaders=host;"
                                 "x-amz-content-sha256;x-amz-date, Signature=%s" % (S3_USER, scope, sig)}
        for attempt in range(2):  # a kept-alive connection the server closed: once more
            try:
                if self.conn is None:
                    self.conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
                self.conn.request(method, cpath + ("?" + cq if cq else ""), body=body, headers=hdrs)
                r = self.conn.getresponse()
                return r.status, r.read()
            except (OSError, http.client.HTTPException):
                self.conn = None
                if attempt:
                    raise

    def put(self, key, data):
        st, b = self.request("PUT", "/%s/%s" % (S3_BUCKET, key), body=data)
        if st != 200:
            raise RuntimeError("PUT %s: %d %s" % (key, st, b[:300]))

    def get(self, key):
        """(status, body) of an object."""
        return self.request("GET", "/%s/%s" % (S3_BUCKET, key))

    def list(self, prefix):
        keys, token = [], None
        ns = "{http://s3.amazonaws.com/doc/2006-03-01/}"
        while True:
            q = {"list-type": "2", "prefix": prefix}
            if token:
                q["continuation-token"] = token
            st, b = self.request("GET", "/" + S3_BUCKET, q)
            if st != 200:
                raise RuntimeError("list %s: %d %s" % (prefix, st, b[:300]))
            root = ET.fromstring(b)
            keys += [c.find(ns + "Key").text for c in root.findall(ns + "Contents")]
            if (root.findtext(ns + "IsTruncated") or "false") != "true":
                return keys
            token = root.findtext(ns + "NextContinuationToken")

    def mirror(self, prefix, d):
        """Every object under prefix into the local directory d (d/<key after prefix>)."""
        os.makedirs(d, exist_ok=True)
        n = 0
        for key in self.list(prefix):
            rel = key[len(prefix):]
            if not rel or rel.endswith("/"):
                continue
            st, b = self.get(key)
            if st != 200:
                raise RuntimeError("GET %s: %d" % (key, st))
            path = os.path.join(d, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(b)
            n += 1
        return n


class MinIO:
    """One MinIO server on 127.0.0.1 for the whole chaos run (data under the work directory)."""

    def __init__(self, binary, work):
        self.dir = os.path.join(work, "minio-data")
        os.makedirs(self.dir)
        self.port, cport = free_port(), free_port()
        self.logf = os.path.join(work, "minio.log")
        env = dict(os.environ, MINIO_ROOT_USER=S3_USER, MINIO_ROOT_PASSWORD=S3_PASS,
                   MINIO_BROWSER="off", MINIO_UPDATE="off")
        self.proc = subprocess.Popen([binary, "server", "--quiet", "--address", "127.0.0.1:%d" % self.port,
                                      "--console-address", "127.0.0.1:%d" % cport, self.dir],
                                     stdout=open(self.logf, "w"), stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        self.s3 = S3("127.0.0.1", self.port)
        t = time.monotonic()
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError("MinIO exited at start: " + open(self.logf).read()[-500:])
            try:
                ok = all(self.s3.request("GET", "/minio/health/" + w)[0] == 200 for w in ("live", "ready"))
            except OSError:
                ok = False
            if ok:
                break
            if time.monotonic() - t > 60:
                self.stop()
                raise RuntimeError("MinIO not ready after 60 s")
            time.sleep(0.1)
        for _ in range(300):  # "ready" may still answer 503 XMinioServerNotInitialized
            st, b = self.s3.request("PUT", "/" + S3_BUCKET)
            if st != 503:
                break
            time.sleep(0.1)
        if st != 200:
            self.stop()
            raise RuntimeError("creating the bucket: %d %s" % (st, b[:300]))
        self.url = "http://127.0.0.1:%d" % self.port

    def env(self):
        return {"AWS_ACCESS_KEY_ID": S3_USER, "AWS_SECRET_ACCESS_KEY": S3_PASS,
                "AWS_ENDPOINT_URL_S3": self.url, "AWS_REGION": S3_REGION}

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def free_port():
    import socket
    with socket.socket() as so:
        so.bind(("127.0.0.1", 0))
        return so.getsockname()[1]


def find_minio():
    b = os.environ.get("SB_MINIO_BIN")
    if b:
        return b if os.access(b, os.X_OK) else None
    found = sorted(glob.glob(os.path.join(os.environ.get("HOME", "/root"),
                                          ".cache/streambatch/minio-*/minio")))
    return found[-1] if found and os.access(found[-1], os.X_OK) else None


# ---- processes ---------------------------------------------------------------------------------

def proc_cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return None


def workers_of(run_dir):
    """{pid: worker id} of the worker processes whose --spill-dir is under run_dir."""
    found = {}
    pref = (run_dir.rstrip("/") + "/").encode()
    for e in os.listdir("/proc"):
        if not e.isdigit():
            continue
        argv = proc_cmdline(int(e))
        if not argv or b"--spill-dir" not in argv:
            continue
        i = argv.index(b"--spill-dir")
        if i + 1 < len(argv) and argv[i + 1].startswith(pref) and b"--id" in argv:
            try:
                with open("/proc/%s/stat" % e) as f:
                    if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                        continue
            except OSError:
                continue
            found[int(e)] = argv[argv.index(b"--id") + 1].decode()
    return found


def kill_pids(pids, sig=signal.SIGKILL):
    for p in pids:
        try:
            os.kill(p, sig)
        except ProcessLookupError:
            pass


def sh(cmd, check=True):
    r = subprocess.run(cmd, shell=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if check and r.returncode != 0:
        raise RuntimeError("%s: exit %d: %s" % (cmd, r.returncode, r.stdout.strip()))
    return r


# ---- network namespaces (as tests/integration/netns.h) -----------------------------------------

class Net:
    """A bridge and one namespace per node (ctl, w0..), each with a veth to the bridge."""

    def __init__(self, prefix, subnet, netem_bin, tmp):
        self.prefix, self.subnet, self.netem_bin, self.tmp = prefix, subnet, netem_bin, tmp
        self.bridge = prefix + "br"
        self.nodes = {}  # name -> (ns, host_if, ip)
        self.netem = {}  # name -> Popen
        sh("ip link add %s type bridge && ip link set %s up" % (self.bridge, self.bridge))

    def add(self, name):
        k = len(self.nodes)
        ns, hif, ip = "%s-%s" % (self.prefix, name), "%s%d" % (self.prefix, k), \
            "10.78.%d.%d" % (self.subnet, k + 1)
        sh("ip netns add {ns} && ip link add {h} type veth peer name eth0 netns {ns} && "
           "ip link set {h} master {br} && ip link set {h} up && ip -n {ns} link set lo up && "
           "ip -n {ns} addr add {ip}/24 dev eth0 && ip -n {ns} link set eth0 up"
           .format(ns=ns, h=hif, br=self.bridge, ip=ip))
        self.nodes[name] = (ns, hif, ip)
        return ip

    def link(self, name, up):
        sh("ip link set %s %s" % (self.nodes[name][1], "up" if up else "down"))

    def impair(self, name, loss, delay, jitter, seed):
        """Loss (%) and delay on what node `name` receives, through sb_netem on NFQUEUE 0."""
        ns = self.nodes[name][0]
        logf = os.path.join(self.tmp, "%s-netem.log" % ns)
        p = subprocess.Popen(["ip", "netns", "exec", ns, self.netem_bin, "--queue", "0", "--loss",
                              str(loss), "--delay", str(delay), "--jitter", str(jitter), "--seed",
                              str(seed)], stdout=open(logf, "w"), stderr=subprocess.STDOUT)
        for _ in range(150):
            if "ready" in open(logf).read():
                break
            if p.poll() is not None:
                raise RuntimeError("sb_netem exited: " + open(logf).read())
            time.sleep(0.02)
        sh("ip netns exec %s iptables -w -A INPUT -i eth0 -j NFQUEUE --queue-num 0" % ns)
        self.netem[name] = p

    def unimpair(self, name):
        p = self.netem.pop(name, None)
        if p is None:
            return
        sh("ip netns exec %s iptables -w -D INPUT -i eth0 -j NFQUEUE --queue-num 0"
           % self.nodes[name][0], check=False)
        p.terminate()
        try:
            p.wait(5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()

    def close(self):
        for name in list(self.netem):
            self.unimpair(name)
        for ns, _, _ in self.nodes.values():
            r = sh("ip netns pids %s" % ns, check=False)
            kill_pids(int(x) for x in r.stdout.split() if x.isdigit())
        for ns, hif, _ in self.nodes.values():
            sh("ip netns del %s" % ns, check=False)
            sh("ip link del %s 2>/dev/null" % hif, check=False)
        sh("ip link del %s 2>/dev/null" % self.bridge, check=False)
        self.nodes = {}


# ---- one pipeline --------------------------------------------------------------------------------

class Stats:
    def __init__(self):
        self.c = collections.Counter()
        self.faults = collections.Counter()
        self.fail_kinds = collections.Counter()
        self.problems = []
        self.a2a = collections.Counter()  # pipelines by their all-to-all op


def rand_value(rng, field):
    if field in ("k", "n"):
        return rng.randint(-20, 20) if rng.random() < 0.8 else rng.choice(["007", "1", "a", True])
    if field == "x":
        return rng.choice([round(rng.uniform(-100, 100), 2), rng.randint(-50, 50)])
    if field == "id":
        return rng.randint(0, 5_000_000)
    if field == "big":
        return rng.choice([2**62, 2**62 + 1, 2**53 + 1, 2**53, 0])
    if field == "b":
        return rng.random() < 0.5
    return rng.choice(G_VALUES + ["c", "\u00e0"])


def gen_pipeline(rng, fmt, total_rows, cpus, preserve):
    fields = CSV_FIELDS if fmt == "csv" else CSV_FIELDS + ["b", "big"]
    stages = []
    present = list(fields)
    nst = rng.randint(1, 4)
    expand_ok = total_rows < 20000
    for i in range(nst):
        kind = rng.choice(["filter", "filter", "project", "identity", "bench"])
        name = "s%d" % i
        if kind == "filter":
            field = rng.choice(present + ["zz"]) if rng.random() < 0.95 else "zz"
            value = rand_value(rng, field)
            ops = ["eq", "ne"] if isinstance(value, bool) else ["eq", "ne", "lt", "le", "gt", "ge"]
            stages.append({"name": name, "op": "filter",
                           "args": {"field": field, "op": rng.choice(ops), "value": value}})
        elif kind == "project":
            keep = rng.sample(present, rng.randint(1, len(present)))
            if "id" not in keep and rng.random() < 0.7:
                keep.insert(rng.randint(0, len(keep)), "id")
            fl = list(keep)
            if rng.random() < 0.2:
                fl.append("zz")
            if rng.random() < 0.1:
                fl.append(fl[0])  # a repeated name counts once
            stages.append({"name": name, "op": "project", "args": {"fields": fl}})
            present = [f for f in keep]
        elif kind == "identity":
            stages.append({"name": name, "op": "identity"})
        else:
            st = {"name": name, "op": rng.choice(["bench.spin", "bench.sleep"]),
                  "args": {"msPerRecord": 0}}
            if expand_ok and rng.random() < 0.5:
                st["args"]["expand"] = rng.randint(2, 3)
                if preserve:
                    st["batchSize"] = 1  # record by record: each one repeated in place
            stages.append(st)
    # a sleep stage first so that the run lasts a few seconds and faults land while it runs
    target_s = rng.uniform(2, 12)
    ms = max(0.001, target_s * 1000.0 * cpus / max(total_rows, 1))
    stages.insert(0, {"name": "slow", "op": "bench.sleep", "args": {"msPerRecord": round(ms, 4)}})
    return stages, target_s


def yaml_pipeline(name, src, fmt, psize, stages, sink, sink_fmt, execution):
    """src and sink: local directories, or s3:// URIs"""
    def uri(x):
        return x if x.startswith("s3://") else "file://" + x + "/"
    p = {"apiVersion": "streambatch.dev/v1alpha1", "kind": "Pipeline", "metadata": {"name": name},
         "spec": {"source": {"uri": uri(src), "format": fmt, "partitionSize": psize},
                  "stages": stages,
                  "sink": {"uri": uri(sink), "format": sink_fmt},
                  "execution": execution}}
    # JSON is YAML, but not JSON's surrogate-pair escapes ("\ud83d\ude00"), which libyaml
    # refuses: the characters are written as they are
    return json.dumps(p, indent=1, ensure_ascii=False)


CRASH_RE = re.compile(r"AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer|runtime error:|"
                      r"ThreadSanitizer|Segmentation fault|core dumped|stack smashing|"
                      r"double free|corrupted size|malloc\(\)")


def san_env(d):
    """ASAN_OPTIONS/UBSAN_OPTIONS for the processes of one pipeline (streambatch run, and through
    it the workers): reports go to files <d>/asan.<pid> and <d>/ubsan.<pid>, which crash_reports()
    counts (a report printed to stderr could be lost with the tmpfs run directory). Ignored by
    binaries built without sanitizers. Leak checking stays on: every process that exits on its
    own (a worker told to stop, or SIGTERMed by the driver: it handles SIGTERM and exits
    normally) must free what it allocated; a SIGKILLed or SIGSTOP-then-killed process never
    reaches LeakSanitizer and reports nothing. Options already in the environment come first;
    log_path is ours."""
    os.makedirs(d, exist_ok=True)
    asan = os.environ.get("ASAN_OPTIONS", "")
    ubsan = os.environ.get("UBSAN_OPTIONS", "")
    return {"ASAN_OPTIONS": (asan + ":" if asan else "") + "log_path=%s/asan" % d,
            "UBSAN_OPTIONS": (ubsan + ":" if ubsan else "") +
            "print_stacktrace=1:halt_on_error=1:log_path=%s/ubsan" % d}


class Pipeline:
    def __init__(self, cfg, stats, idx, net, minio=None):
        self.cfg, self.st, self.idx, self.net, self.minio = cfg, stats, idx, net, minio
        self.seed = "%d-%d" % (cfg.seed, idx)
        self.rng = random.Random(self.seed)
        self.dir = os.path.join(cfg.work, "p%05d" % idx)
        self.mnt = os.path.join(self.dir, "mnt")
        self.mounted = False
        self.killed_workers = set()  # worker ids we SIGKILLed
        self.stopped = {}  # pid -> time to SIGCONT
        self.filler = None  # (path, until or None)
        self.cut = {}  # node -> time to restore
        self.lossy = {}  # node -> time to restore
        self.events = []
        self.proc = None
        self.kills_in_reduce = 0

    def ev(self, msg):
        t = time.monotonic() - self.t0
        self.events.append("%6.2f %s" % (t, msg))

    # ---- setup
    def setup(self):
        rng, cfg = self.rng, self.cfg
        os.makedirs(self.dir)
        self.fmt = rng.choice(["jsonl", "jsonl", "csv"])
        self.files, self.total = write_input(rng, os.path.join(self.dir, "in"), self.fmt)
        self.cpus = rng.randint(2, 3)
        self.preserve = rng.random() < 0.3
        ra = self.draw_a2a()
        self.stages, self.target_s = gen_pipeline(rng, self.fmt, self.total, self.cpus, self.ordered_in())
        psize = rng.choice([2048, 4096, 8192, 16384, 49152])
        execution = {"maxTaskRetries": rng.choice([3, 5, 10]), "stallTimeout": "10s",
                     "mode": rng.choice(["streaming", "streaming", "staged", "static"]),
                     "memoryBudget": psize * rng.choice([2, 4, 16, 64])}
        if self.preserve:
            execution["preserveOrder"] = True
        self.exec = execution
        self.sink_fmt = "csv" if self.fmt == "csv" and rng.random() < 0.6 else "jsonl"
        self.add_a2a(ra, self.cpus, psize, self.right_file)
        self.out = os.path.join(self.dir, "out")
        # S3 from a random stream of its own: the file-only pipelines of a seed stay as they were
        src, sink = os.path.join(self.dir, "in"), self.out
        self.s3_src = self.s3_sink = False
        if self.minio is not None:
            r3 = random.Random(self.seed + "-s3")
            self.s3_src, self.s3_sink = r3.random() < 0.4, r3.random() < 0.6
            if self.cfg.s3 == "on":
                self.s3_sink = True
            pfx = "p%05d-%d/" % (self.idx, os.getpid())
            self.s3_prefix = pfx
            if self.s3_src:
                src = "s3://%s/%sin/" % (S3_BUCKET, pfx)
                for name in sorted(os.listdir(os.path.join(self.dir, "in"))):
                    with open(os.path.join(self.dir, "in", name), "rb") as f:
                        self.minio.s3.put(pfx + "in/" + name, f.read())
            if self.s3_sink:
                sink = "s3://%s/%sout/" % (S3_BUCKET, pfx)
            self.st.c["s3_pipelines"] += self.s3_src or self.s3_sink
            self.st.c["s3_sources"] += self.s3_src
            self.st.c["s3_sinks"] += self.s3_sink
        self.yaml = os.path.join(self.dir, "p.yaml")
        with open(self.yaml, "w") as f:
            f.write(yaml_pipeline("chaos-%d" % self.idx, src, self.fmt, psize,
                                  self.stages, sink, self.sink_fmt, execution))
        os.makedirs(self.mnt)
        if cfg.diskfull:
            size = rng.choice(["8m", "16m", "64m"])
            r = sh("mount -t tmpfs -o size=%s chaos %s" % (size, self.mnt), check=False)
            self.mounted = r.returncode == 0
        # the fault plan: times relative to the start; at most 2 driver kills
        kinds = ["worker_kill", "worker_stop", "driver_kill"]
        if self.mounted:
            kinds.append("disk_full")
        if self.net is not None:
            kinds += ["link_cut", "link_loss"]
        n = rng.choice([0, 1, 2, 2, 3, 4, 5])
        plan = []
        for _ in range(n):
            k = rng.choice(kinds)
            if k == "driver_kill" and sum(1 for _, x in plan if x == "driver_kill") >= 2:
                k = "worker_kill"
            plan.append((rng.uniform(0.2, self.target_s * 1.2 + 0.5), k))
        self.plan = sorted(plan)
        # a worker SIGKILLed once the all-to-all op's map half is done: it holds map outputs
        # the reduce tasks still read (re-made by lineage)
        self.reduce_kill = self.a2a is not None and self.a2a["op"] != "join" and ra.random() < 0.75
        self.desc = ("seed %s: %s %d files %d rows, %d cpus, partitionSize %d, %s%s, stages %s, "
                     "sink %s, faults %s" % (
                         self.seed, self.fmt, len(self.files), self.total, self.cpus, psize,
                         json.dumps(execution, separators=(",", ":")),
                         " netns" if self.net else "",
                         json.dumps([[s["op"], s.get("args", {})] for s in self.stages],
                                    ensure_ascii=True, separators=(",", ":")),
                         self.sink_fmt + (" (s3)" if self.s3_sink else ""),
                         ["%.1f:%s" % p for p in self.plan] + (["reduce:kill"] if self.reduce_kill else [])))
        if self.s3_src:
            self.desc = self.desc.replace(" files ", " files (s3) ", 1)

    # ---- the all-to-all op that ends a pipeline (half of them), from a random stream of its own
    #      (the other pipelines of a seed stay as they were)
    def draw_a2a(self):
        ra = random.Random(self.seed + "-a2a")
        self.a2a_op = ra.choice(A2A_OPS) if ra.random() < A2A_SHARE else None
        self.a2a, self.right = None, None
        return ra

    def ordered_in(self):
        """Whether expand must repeat each record in place (batchSize 1): under preserveOrder,
        and before a limit or a sort, whose model needs the rows' source order."""
        return self.preserve or self.a2a_op in ("limit", "sort")

    def right_file(self, data):
        path = os.path.join(self.dir, "right.jsonl")
        with open(path, "wb") as f:
            f.write(data)
        return "file://" + path

    def add_a2a(self, ra, cpus, psize, right_uri):
        """Appends the op drawn by draw_a2a to self.stages (with self.exec and self.sink_fmt
        drawn) and, when the run is streaming, a bench.sleep after it that runs in its reduce
        tasks for 1-4 s, so that faults land in the reduce phase too."""
        if self.a2a_op is None:
            return
        ex = self.exec
        self.preserve = False  # refused with these ops (limit keeps source order itself)
        ex.pop("preserveOrder", None)
        if self.a2a_op == "limit":
            ex["mode"] = "streaming"  # its map half runs in the source's tasks
        if self.a2a_op == "join":
            self.sink_fmt = "jsonl"  # a left join's records have different fields
        # what must fit a task's share of the budget (or the run fails, saying so): groupby's
        # one group (its aggregates take over 1 KiB); sort's 1 MiB dates from before its middle
        # op thinned the map tasks' key samples instead of failing (not lowered yet)
        if self.a2a_op in ("sort", "groupby"):
            ex["memoryBudget"] = max(ex["memoryBudget"], 1 << (20 if self.a2a_op == "sort" else 16))
        # a reduce task loads each map output whole: one past the budget fails its fetch, and
        # the run retries it until it hangs (seed 16087104-9: expand 3 into a distinct under
        # memoryBudget 8Ki), so the budget holds a map task's whole output twice
        grow = 1
        for st in self.stages:
            grow *= st.get("args", {}).get("expand", 1)
        ex["memoryBudget"] = max(ex["memoryBudget"], 2 * psize * grow)
        src = os.path.join(self.dir, "in")
        splits = sum(os.path.getsize(os.path.join(src, f)) for f in os.listdir(src)) // psize + 1
        self.a2a, self.right = gen_a2a(ra, self.a2a_op, self.fmt, ex["memoryBudget"], ex["mode"], splits,
                                       right_uri)
        self.stages.append(self.a2a)
        if ex["mode"] == "streaming" and self.a2a_op != "join":
            n, _ = a2a_model(expected_rows(self.files, self.stages[:-1]), self.a2a, self.right)
            ms = min(500.0, ra.uniform(1, 4) * 1000.0 * cpus / max(len(n), 1))
            self.stages.append({"name": "slow2", "op": "bench.sleep", "args": {"msPerRecord": round(ms, 4)}})
        self.st.a2a[self.a2a_op] += 1

    def in_reduce(self):
        """Whether the run's last progress line shows the all-to-all op's map half done (its
        reduce tasks run, reading the map outputs the workers hold)."""
        try:
            with open(self.logs[-1], "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - 8192))
                tail = f.read().decode("utf-8", "replace")
        except OSError:
            return False
        prog = [x for x in tail.splitlines() if x.startswith("progress ")]
        for name, done, total in re.findall(r"(\S+) (\d+)/(\d+) done", prog[-1] if prog else ""):
            if "a2a.map" in name.split("+") and 0 < int(total) == int(done):
                return True
        return False

    # ---- running
    def start(self, attempt, resume):
        run_dir = os.path.join(self.mnt, "run%d" % attempt)
        self.run_dir = run_dir
        self.run_dirs.append(run_dir)
        logf = os.path.join(self.dir, "run%d.log" % attempt)
        self.logs.append(logf)
        argv = [os.path.join(self.cfg.bin_dir, "streambatch"), "run", self.yaml, "--cpus", str(self.cpus),
                "--checkpoint", os.path.join(self.dir, "ck.json"), "--run-dir", run_dir,
                "--summary-json", os.path.join(self.dir, "summary%d.json" % attempt),
                "--progress-interval-ms", "200" if self.a2a is not None else "1000"]
        if resume:
            argv.append("--resume")
        env = dict(os.environ, TMPDIR=self.mnt, SB_LOG_LEVEL="info")
        env.update(san_env(os.path.join(self.dir, "san")))
        if self.minio is not None:
            env.update(self.minio.env())
        if self.net is not None:
            env["SB_RUN_CONTROLLER_HOST"] = self.net.nodes["ctl"][2]
            env["SB_RUN_WORKER_BIN"] = self.cfg.wrapper
            argv = ["nsenter", "--net=/run/netns/" + self.net.nodes["ctl"][0], "--"] + argv
        self.proc = subprocess.Popen(argv, stdout=open(logf, "w"), stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=env, cwd=self.dir,
                                     start_new_session=True)
        self.ev("start attempt %d%s (pid %d)" % (attempt, " --resume" if resume else "", self.proc.pid))

    def pick_worker(self):
        ws = workers_of(self.run_dir)
        ws = {p: i for p, i in ws.items() if p not in self.stopped}
        if not ws:
            return None, None
        pid = self.rng.choice(sorted(ws))
        return pid, ws[pid]

    def inject(self, kind, now):
        rng = self.rng
        if kind in ("worker_kill", "reduce_kill"):
            pid, wid = self.pick_worker()
            if pid is None:
                return False
            self.killed_workers.add(wid)
            os.kill(pid, signal.SIGKILL)
            in_reduce = self.a2a is not None and self.in_reduce()
            self.kills_in_reduce += in_reduce
            self.ev("SIGKILL worker %s (pid %d)%s" % (wid, pid, " in the reduce phase" if in_reduce else ""))
        elif kind == "worker_stop":
            pid, wid = self.pick_worker()
            if pid is None:
                return False
            d = rng.uniform(0.5, 8)
            os.kill(pid, signal.SIGSTOP)
            self.stopped[pid] = now + d
            self.ev("SIGSTOP worker %s (pid %d) for %.1f s" % (wid, pid, d))
        elif kind == "driver_kill":
            os.kill(self.proc.pid, signal.SIGKILL)
            self.driver_killed = True
            self.ev("SIGKILL streambatch run (pid %d)" % self.proc.pid)
        elif kind == "disk_full":
            if self.filler is not None:
                return False
            path = os.path.join(self.mnt, "filler")
            n = 0
            try:
                with open(path, "wb") as f:
                    chunk = b"\0" * (1 << 20)
                    while True:
                        try:
                            n += f.write(chunk)
                            f.flush()
                        except OSError:
                            if len(chunk) <= 4096:
                                break
                            chunk = chunk[: len(chunk) // 16]
            except OSError:
                pass
            forever = rng.random() < 0.25
            d = rng.uniform(1, 6)
            self.filler = (path, None if forever else now + d)
            self.ev("disk full: %d bytes of filler, %s" % (n, "for good" if forever else "for %.1f s" % d))
        elif kind == "link_cut":
            node = rng.choice(sorted(self.net.nodes))
            if node in self.cut:
                return False
            d = rng.uniform(0.5, 8)
            self.net.link(node, False)
            self.cut[node] = now + d
            self.ev("link of %s down for %.1f s" % (node, d))
        elif kind == "link_loss":
            node = rng.choice(sorted(self.net.nodes))
            if node in self.lossy:
                return False
            d = rng.uniform(2, 10)
            loss = rng.choice([5, 20, 50])
            self.net.impair(node, loss, rng.choice([0, 20]), 10, rng.randint(1, 10**6))
            self.lossy[node] = now + d
            self.ev("%d%% loss into %s for %.1f s" % (loss, node, d))
        self.st.faults[kind] += 1
        return True

    def restore(self, now, everything=False):
        for pid, t in list(self.stopped.items()):
            if everything or now >= t:
                kill_pids([pid], signal.SIGCONT)
                del self.stopped[pid]
                self.ev("SIGCONT pid %d" % pid)
        if self.filler is not None and (everything or (self.filler[1] is not None and now >= self.filler[1])):
            try:
                os.unlink(self.filler[0])
            except OSError:
                pass
            self.filler = None
            self.ev("filler removed")
        for node, t in list(self.cut.items()):
            if everything or now >= t:
                self.net.link(node, True)
                del self.cut[node]
                self.ev("link of %s up" % node)
        for node, t in list(self.lossy.items()):
            if everything or now >= t:
                self.net.unimpair(node)
                del self.lossy[node]
                self.ev("loss into %s ended" % node)

    def run(self):
        self.t0 = time.monotonic()
        self.run_dirs, self.logs = [], []
        plan = list(self.plan)
        attempt, resume = 0, False
        self.hung = False
        self.orphans = 0
        deadline = self.t0 + self.cfg.pipeline_limit
        while True:
            self.driver_killed = False
            self.start(attempt, resume)
            while self.proc.poll() is None:
                now = time.monotonic() - self.t0
                self.restore(now)
                while plan and plan[0][0] <= now and self.proc.poll() is None:
                    _, kind = plan.pop(0)
                    try:
                        self.inject(kind, now)
                    except Exception as e:  # a fault that cannot be injected is logged, not fatal
                        self.ev("cannot inject %s: %s" % (kind, e))
                    if self.driver_killed:
                        break
                if self.reduce_kill and self.proc.poll() is None and self.in_reduce():
                    self.reduce_kill = False
                    self.inject("reduce_kill", now)
                if time.monotonic() > deadline:
                    self.hung = True
                    self.ev("no end after %d s: SIGKILL" % self.cfg.pipeline_limit)
                    os.kill(self.proc.pid, signal.SIGKILL)
                time.sleep(0.05)
            self.rc = self.proc.wait()
            self.ev("attempt %d ended: %s" % (attempt, "rc %d" % self.rc if self.rc >= 0 else
                                             "signal %d" % -self.rc))
            # the killed driver's workers must go with it (PR_SET_PDEATHSIG); any left are killed
            if self.driver_killed or self.hung:
                t = time.monotonic()
                while workers_of(self.run_dir) and time.monotonic() - t < 5:
                    time.sleep(0.1)
                left = workers_of(self.run_dir)
                if left:
                    self.orphans += len(left)
                    kill_pids(left)
                    self.ev("orphaned workers killed: %s" % sorted(left.values()))
                # a stopped worker that died with the driver needs no SIGCONT
                self.stopped = {p: t for p, t in self.stopped.items() if os.path.exists("/proc/%d" % p)}
            if self.driver_killed and not self.hung:
                attempt += 1
                resume = True
                continue
            break
        self.restore(0, everything=True)
        self.wall = time.monotonic() - self.t0

    # ---- checking
    def crash_reports(self):
        found = []
        # sanitizer reports (san_env: every process of the pipeline writes them here)
        sd = os.path.join(self.dir, "san")
        for name in sorted(os.listdir(sd)) if os.path.isdir(sd) else []:
            try:
                text = open(os.path.join(sd, name), errors="replace").read()
            except OSError:
                continue
            if text.strip():
                self.st.c["sanitizer_reports"] += 1
                m = CRASH_RE.search(text)
                found.append("sanitizer report %s: %s" % (name, text[m.start() if m else 0:][:1500]))
        for lf in self.logs + [os.path.join(d, x) for d in self.run_dirs if os.path.isdir(d)
                               for x in os.listdir(d) if x.endswith(".log")]:
            try:
                text = open(lf, errors="replace").read()
            except OSError:
                continue
            m = CRASH_RE.search(text)
            if m:
                found.append("%s: %s" % (os.path.basename(lf), text[max(0, m.start() - 200): m.start() + 300]))
            for line in text.splitlines():
                if "worker process ended" in line and "killed by signal" in line:
                    sig = re.search(r"killed by signal (\d+)", line)
                    wid = re.search(r'\bworker="?([A-Za-z0-9-]+)', line)
                    wid = wid.group(1) if wid else "?"
                    if sig and (int(sig.group(1)) != 9 or wid not in self.killed_workers):
                        found.append("%s: %s" % (os.path.basename(lf), line.strip()))
        return found

    def failure_kind(self):
        text = open(self.logs[-1], errors="replace").read()
        for kind, pat in (("stalled", "stalled: no progress"), ("disk full", "No space left"),
                          ("task retries exhausted", "retries"), ("workers lost", "lost")):
            if pat in text:
                return kind
        return "other"

    def check(self):
        st = self.st
        problems = []
        if self.s3_sink:  # the bucket's objects, read back here, are checked as a directory
            try:
                n = self.minio.s3.mirror(self.s3_prefix + "out/", self.out)
                st.c["s3_objects_read"] += n
            except (OSError, RuntimeError, ET.ParseError, http.client.HTTPException) as e:
                problems.append("reading the S3 output back: %s" % e)
        succ = os.path.exists(os.path.join(self.out, "_SUCCESS"))
        last = open(self.logs[-1], errors="replace").read().strip().splitlines()
        last_line = last[-1] if last else ""
        crashes = self.crash_reports()
        if self.rc < 0 and not self.hung:
            crashes.append("streambatch run died of signal %d" % -self.rc)
        if crashes:
            problems.append("crash: " + " | ".join(crashes)[:3000])
            st.c["crashes"] += 1
        if self.hung:
            problems.append("hung: no end within %d s" % self.cfg.pipeline_limit)
            st.c["hung"] += 1
        if self.orphans:
            problems.append("%d workers outlived the killed driver" % self.orphans)
            st.c["orphans"] += self.orphans
        # a killed attempt's spill dirs are removed by the next attempt (runckpt.h, the run record)
        left = [x for d in self.run_dirs[:-1] for x in glob.glob(os.path.join(d, "*", "sbstore-*"))]
        if left:
            problems.append("%d spill dirs of killed drivers left behind: %s" % (
                len(left), [os.path.relpath(x, self.dir) for x in left[:5]]))
            st.c["leftover_spill_dirs"] += len(left)
        verdict = None
        if self.rc == 0 and not succ:
            problems.append("exit 0 without _SUCCESS")
        elif self.rc != 0 and succ:
            problems.append("exit %d but _SUCCESS written" % self.rc)
        elif self.rc != 0 and "is not a valid Pipeline" in "\n".join(last[-30:]):
            problems.append("the generated pipeline is invalid (a bug of this driver): " +
                            " ".join(last[-3:]))
        elif self.rc != 0:
            verdict = "failed-clean"
            st.c["failed_clean"] += 1
            self.failure = last_line
            st.fail_kinds[self.failure_kind()] += 1
            try:  # the summary's reason, when the run wrote one
                with open(os.path.join(self.dir, "summary%d.json" % (len(self.logs) - 1))) as f:
                    why = json.load(f).get("failure") or ""
                if why:
                    self.failure += " (" + why + ")"
            except (OSError, ValueError):
                pass
        if succ:
            verdict = verdict or "succeeded"
            if self.rc == 0:
                st.c["succeeded"] += 1
            problems += self.check_output()
        self.count_reduce_kills(succ)
        if problems:
            st.c["bad"] += 1
            st.problems.append((self.seed, self.desc, problems, self.events))
        return verdict, problems

    def count_reduce_kills(self, succeeded):
        """Kills that landed in the reduce phase, and how many of those runs then re-made lost
        map outputs by lineage (the run summary's tasksRerun / partitionsRecovered)."""
        st = self.st
        st.c["kills_in_reduce"] += self.kills_in_reduce
        if not self.kills_in_reduce:
            return
        st.c["pipelines_killed_in_reduce"] += 1
        try:
            with open(os.path.join(self.dir, "summary%d.json" % (len(self.logs) - 1))) as f:
                summ = json.load(f)
        except (OSError, ValueError):
            return
        self.ev("summary: %d tasks re-run, %d partitions recovered" % (
            summ.get("tasksRerun", 0), summ.get("partitionsRecovered", 0)))
        if succeeded and (summ.get("tasksRerun") or summ.get("partitionsRecovered")):
            st.c["reduce_kills_rerun"] += 1

    def check_output(self):
        st = self.st
        problems = []
        stages, a2a_in = self.stages, None
        if self.a2a is not None:  # the stages after it only sleep
            stages = self.stages[:self.stages.index(self.a2a)]
        exp = expected_rows(self.files, stages)
        ordered = self.preserve
        if self.a2a is not None:
            a2a_in = exp
            exp, ordered = a2a_model(exp, self.a2a, self.right)
        if self.sink_fmt == "csv":  # a csv sink writes null and a missing key alike
            exp = [{k: v for k, v in r.items() if v is not None} for r in exp]
            if a2a_in is not None:
                a2a_in = [{k: v for k, v in r.items() if v is not None} for r in a2a_in]
        exp = [canon(r) for r in exp]
        try:
            with open(os.path.join(self.out, "_manifest.json")) as f:
                man = json.load(f)
        except (OSError, ValueError) as e:
            return ["_manifest.json: %s" % e]
        ext = "." + self.sink_fmt
        listed = [p["name"] for p in man.get("parts", [])]
        on_disk = sorted(x for x in os.listdir(self.out) if x.startswith("part-"))
        stray = sorted(set(on_disk) - set(listed))
        missing = sorted(set(listed) - set(on_disk))
        if stray:
            problems.append("part files not in the manifest: %s" % stray[:10])
        if missing:
            problems.append("manifest parts missing: %s" % missing[:10])
        got_ordered = []
        by_name = {p["name"]: p for p in man.get("parts", [])}
        for name in listed + stray:
            if name in missing:
                continue
            if not name.endswith(ext):
                problems.append("part %s is not %s" % (name, ext))
            try:
                rows, nbytes = read_part(os.path.join(self.out, name), self.sink_fmt)
            except (ValueError, UnicodeDecodeError) as e:
                problems.append("part %s unreadable: %s" % (name, e))
                continue
            st.c["bytes_checked"] += nbytes
            m = by_name.get(name)
            if m is not None and (m.get("rows") != len(rows) or m.get("bytes") != nbytes):
                problems.append("part %s: manifest says %s rows %s bytes, file has %d rows %d bytes"
                                % (name, m.get("rows"), m.get("bytes"), len(rows), nbytes))
            got_ordered += rows
        st.c["rows_checked"] += len(got_ordered)
        st.c["rows_expected"] += len(exp)
        if self.a2a is not None and self.a2a["op"] in ("groupby", "distinct"):
            # one record per key, its values (groupby: doubles within 1e-9) or which of the
            # key's records (distinct) not a single exact row
            more = check_a2a(self.a2a, a2a_in, [json.loads(r) for r in got_ordered])
            st.c["a2a_problems"] += len(more)
            return problems + more
        if self.a2a is not None and self.a2a["op"] == "sort" and not ordered:
            more = check_a2a(self.a2a, a2a_in, [json.loads(r) for r in got_ordered])
            st.c["order_violations"] += bool(more)
            problems += more
        ce, cg = collections.Counter(exp), collections.Counter(got_ordered)
        lost = sum((ce - cg).values())
        extra = cg - ce
        dup = sum(v for k, v in extra.items() if k in ce)
        alien = sum(v for k, v in extra.items() if k not in ce)
        if lost or dup or alien:
            ex_lost = list((ce - cg).keys())[:3]
            ex_extra = list(extra.keys())[:3]
            problems.append("rows: %d expected, %d got: %d lost, %d duplicated, %d unexpected "
                            "(lost e.g. %s; extra e.g. %s)" % (len(exp), len(got_ordered), lost, dup,
                                                               alien, ex_lost, ex_extra))
            st.c["rows_lost"] += lost
            st.c["rows_duplicated"] += dup
            st.c["rows_unexpected"] += alien
        elif ordered and got_ordered != exp:
            i = next(i for i, (a, b) in enumerate(zip(got_ordered, exp)) if a != b)
            problems.append("%s: same rows, other order (first difference at row %d: %s, expected %s)"
                            % (self.a2a["op"] if self.a2a else "preserveOrder", i, got_ordered[i][:120],
                               exp[i][:120]))
            st.c["order_violations"] += 1
        return problems

    def cleanup(self, keep):
        if self.proc is not None and self.proc.poll() is None:
            kill_pids([self.proc.pid])
            self.proc.wait()
        for d in getattr(self, "run_dirs", []):
            if os.path.isdir(d):
                kill_pids(workers_of(d))
        if keep and os.path.isdir(self.mnt):  # the run dirs (worker logs) outlive the tmpfs
            shutil.copytree(self.mnt, self.mnt + "-saved", ignore=shutil.ignore_patterns("filler"),
                            symlinks=True, dirs_exist_ok=True)
        if self.mounted:
            for _ in range(50):
                if sh("umount %s" % self.mnt, check=False).returncode == 0:
                    self.mounted = False
                    break
                time.sleep(0.1)
            if self.mounted:
                sh("umount -l %s" % self.mnt, check=False)
                self.mounted = False
        if not keep:
            shutil.rmtree(self.dir, ignore_errors=True)


# ---- main ----------------------------------------------------------------------------------------

def write_wrapper(cfg, net):
    """SB_RUN_WORKER_BIN: the real worker in node w<index % 3> by its id (cpu-1, cpu-1-r2 -> w1)."""
    lines = ["#!/bin/sh", "id=; prev=", 'for a in "$@"; do [ "$prev" = --id ] && id=$a; prev=$a; done',
             'i=$(echo "$id" | sed -E "s/^[a-z]+-([0-9]+).*/\\1/")', "case $((i % 3)) in"]
    for k in range(3):
        ns, _, ip = net.nodes["w%d" % k]
        lines.append("  %d) ns=%s; ip=%s;;" % (k, ns, ip))
    lines += ["esac", 'exec nsenter --net=/run/netns/$ns -- env SB_POD_IP=$ip %s "$@"'
              % os.path.join(cfg.bin_dir, "streambatch-worker")]
    path = os.path.join(cfg.work, "worker.sh")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.chmod(path, 0o755)
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=180, help="seconds of pipelines (default 180)")
    ap.add_argument("--bin-dir", required=True)
    ap.add_argument("--build-dir", required=True, help="for tests/helpers/sb_netem")
    ap.add_argument("--work", required=True, help="an empty directory for inputs, outputs, logs")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--only", type=int, default=None, help="run only pipeline I of --seed")
    ap.add_argument("--netns", choices=["off", "on", "mix"], default="mix",
                    help="netns mode: never, always, every other pipeline (default, when root)")
    ap.add_argument("--no-diskfull", dest="diskfull", action="store_false")
    ap.add_argument("--s3", choices=["off", "on", "mix"], default="mix",
                    help="MinIO sources and sinks: never; in every pipeline outside netns mode; "
                         "at random there (default, when MinIO is there)")
    ap.add_argument("--pipeline-limit", type=int, default=240, help="seconds before a run counts as hung")
    cfg = ap.parse_args()
    cfg.seed = cfg.seed if cfg.seed is not None else int.from_bytes(os.urandom(3), "big")
    os.makedirs(cfg.work, exist_ok=True)
    stats = Stats()
    root = os.geteuid() == 0
    if not root:
        cfg.diskfull = False
    net = None
    netem = os.path.join(cfg.build_dir, "tests/helpers/sb_netem")

    def on_signal(sig, _frame):
        raise Interrupted("signal %d" % sig)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    minio = None
    minio_bin = find_minio() if cfg.s3 != "off" else None
    if cfg.s3 != "off" and minio_bin is None:
        log("chaos: no MinIO (SB_MINIO_BIN, or scripts/minio.sh to build it): S3 is off")
    log("chaos: seed %d, %d s, bin %s, work %s, netns %s, disk-full %s, s3 %s" % (
        cfg.seed, cfg.duration, cfg.bin_dir, cfg.work, cfg.netns, "on" if cfg.diskfull else "off",
        cfg.s3 if minio_bin else "off"))
    t_end = time.monotonic() + cfg.duration
    idx = cfg.only if cfg.only is not None else 0
    pipe = None
    interrupted = None
    try:
        if minio_bin is not None:
            try:
                minio = MinIO(minio_bin, cfg.work)
                log("chaos: MinIO %s (pid %d) on %s" % (minio_bin, minio.proc.pid, minio.url))
            except (OSError, RuntimeError) as e:
                log("chaos: MinIO unavailable, S3 is off: %s" % e)
                minio = None
        if cfg.netns != "off" and root:
            try:
                net = Net("sbc%x" % (os.getpid() & 0xfffff), 1 + os.getpid() % 250, netem, cfg.work)
                for n in ("ctl", "w0", "w1", "w2"):
                    net.add(n)
                cfg.wrapper = write_wrapper(cfg, net)
                if not os.access(netem, os.X_OK):
                    log("chaos: no %s: link loss is not injected" % netem)
            except Exception as e:
                log("chaos: netns mode unavailable: %s" % e)
                if net is not None:
                    net.close()
                net = None
        while True:
            use_net = net if (cfg.netns == "on" or (cfg.netns == "mix" and idx % 2 == 1)) else None
            # the workers in network namespaces cannot reach MinIO on the host's loopback
            use_s3 = minio if use_net is None else None
            pipe = Pipeline(cfg, stats, idx, use_net, use_s3)
            pipe.setup()
            if use_net is not None and not os.access(netem, os.X_OK):
                pipe.plan = [(t, k if k != "link_loss" else "link_cut") for t, k in pipe.plan]
            log("[%d] %s" % (idx, pipe.desc))
            pipe.run()
            verdict, problems = pipe.check()
            stats.c["pipelines"] += 1
            log("[%d] %s in %.1f s (%d attempts)%s%s%s" % (
                idx, verdict or "BAD", pipe.wall, len(pipe.logs),
                ", %d kills in the reduce phase" % pipe.kills_in_reduce if pipe.kills_in_reduce else "",
                ": " + pipe.failure[:800] if verdict == "failed-clean" else "",
                "".join("\n    PROBLEM " + p for p in problems)))
            if problems:
                for e in pipe.events:
                    log("    " + e)
            pipe.cleanup(keep=bool(problems) or os.environ.get("SB_CHAOS_KEEP") == "1")
            pipe = None
            idx += 1
            if cfg.only is not None or time.monotonic() >= t_end:
                break
    except Interrupted as e:
        interrupted = str(e)
    finally:
        if pipe is not None:
            try:
                pipe.restore(0, everything=True)
            except Exception as e:
                log("chaos: restoring faults: %s" % e)
            pipe.cleanup(keep=True)
        if net is not None:
            net.close()
        if minio is not None:
            minio.stop()
    c = stats.c
    log("")
    log("chaos report (seed %d%s)" % (cfg.seed, ", interrupted: " + interrupted if interrupted else ""))
    log("  pipelines run        %d" % c["pipelines"])
    log("  succeeded            %d" % c["succeeded"])
    log("  failed clean         %d" % c["failed_clean"])
    log("  faults injected      %d (%s)" % (sum(stats.faults.values()), ", ".join(
        "%s %d" % kv for kv in sorted(stats.faults.items())) or "none"))
    log("  failures (clean)     %s" % (", ".join("%s %d" % kv for kv in sorted(stats.fail_kinds.items()))
                                       or "none"))
    log("  all-to-all pipelines %d (%s)" % (sum(stats.a2a.values()), ", ".join(
        "%s %d" % kv for kv in sorted(stats.a2a.items())) or "none"))
    log("  kills in reduce      %d, in %d pipelines (%d of them succeeded with map tasks re-run)" % (
        c["kills_in_reduce"], c["pipelines_killed_in_reduce"], c["reduce_kills_rerun"]))
    log("  s3 pipelines         %d (source %d, sink %d; %d objects read back)" % (
        c["s3_pipelines"], c["s3_sources"], c["s3_sinks"], c["s3_objects_read"]))
    log("  bytes checked        %d" % c["bytes_checked"])
    log("  rows checked         %d (expected %d)" % (c["rows_checked"], c["rows_expected"]))
    log("  rows lost            %d" % c["rows_lost"])
    log("  rows duplicated      %d" % c["rows_duplicated"])
    log("  rows unexpected      %d" % c["rows_unexpected"])
    log("  order violations     %d" % c["order_violations"])
    log("  crashes              %d" % c["crashes"])
    log("  sanitizer reports    %d" % c["sanitizer_reports"])
    log("  hung runs            %d" % c["hung"])
    log("  orphaned workers     %d" % c["orphans"])
    log("  leftover spill dirs  %d" % c["leftover_spill_dirs"])
    for seed, desc, problems, _ in stats.problems:
        log("  BAD %s: %s" % (seed, "; ".join(problems)[:600]))
    passed = c["pipelines"] - c["bad"]
    log("chaos: %d passed, %d failed" % (passed, c["bad"] + (1 if interrupted else 0)))
    return 1 if (c["bad"] or interrupted or c["pipelines"] == 0) else 0


if __name__ == "__main__":
    sys.exit(main())
