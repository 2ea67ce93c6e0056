#!/usr/bin/env bash
# `make sdk-test` (part of `make test`): the Python UDF kit (sdk/python) installed with pip into a
# fresh venv, then real `streambatch run`s whose exec stages use it:
#   1. a class UDF in mode batches (rows): every record once, the class built once per process
#      (not per batch or task), batches of the configured size
#   2. a function in mode filter over columns (dict of lists): output = an independent
#      computation of the same transform
#   3. a UDF that raises on one record: the run fails, the error ends with the exception's line
#   4. a UDF returning what JSON cannot carry: the error names the batch
# Prints "sdk-test: N passed, N failed" last. Bounded (timeout per run); cleans its files.
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
bin=${SB_BIN_DIR:-$top/bin}
venv=${SB_BUILD_DIR:-$top/build}/sdk-venv
tmp=$(mktemp -d /tmp/sb-sdk-test-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
passed=0; failed=0
check() { # description command...
  local d=$1; shift
  if "$@" >"$tmp/check.out" 2>&1; then passed=$((passed + 1)); echo "ok   $d"; sed 's/^/     /' "$tmp/check.out" | tail -3
  else failed=$((failed + 1)); echo "FAIL $d"; sed 's/^/     /' "$tmp/check.out" | tail -40; fi
}

install_kit() {
  rm -rf "$venv" && python3 -m venv "$venv" &&
    "$venv/bin/pip" install -q --disable-pip-version-check "$top/sdk/python" &&
    "$venv/bin/python" -c 'import streambatch.udf as u; print("streambatch", u.__name__, "installed")'
}
check "pip installs the kit from the repository path into a venv" install_kit
py=$venv/bin/python

mkdir -p "$tmp/in"
python3 - "$tmp/in" <<'EOF'
import json, random, sys
random.seed(5)
for f in range(6):
    with open("%s/f%d.jsonl" % (sys.argv[1], f), "w") as o:
        for i in range(3000):
            o.write(json.dumps({"id": f * 10000 + i, "text": "w" * random.randint(1, 40)}) + "\n")
EOF

pipeline() { # name stages-yaml extra-yaml
  cat >"$tmp/$1.yaml" <<EOF
apiVersion: streambatch.dev/v1alpha1
kind: Pipeline
metadata: {name: $1}
spec:
  source: {uri: 'file://$tmp/in/', format: jsonl, partitionSize: 64Ki}
  stages:
$2
  sink: {uri: 'file://$tmp/out-$1/', format: jsonl}
$3
EOF
}
run() { (cd "$tmp" && timeout 120 "$bin/streambatch" run "$1.yaml" --cpus 2 >"$tmp/$1.log" 2>&1); }

cat >"$tmp/model.py" <<'EOF'
import os
from streambatch import udf

class Model:
    def __init__(self):
        self.inits = int(open("/proc/self/stat").read().split()[0])  # built once per process
        self.batches = 0
    def __call__(self, batch):
        self.batches += 1
        return [{"id": r["id"], "len": len(r["text"]), "pid": os.getpid(),
                 "batch": self.batches, "size": len(batch)} for r in batch]

udf.run(Model)
EOF
class_udf() {
  pipeline cls "  - {name: model, op: exec, args: {command: [$py, $tmp/model.py], mode: batches, batchSize: 250}}" ""
  run cls || { tail -20 "$tmp/cls.log"; return 1; }
  python3 - "$tmp" <<'EOF'
import glob, json, sys
t = sys.argv[1]
want = {}
for p in glob.glob(t + "/in/*.jsonl"):
    for l in open(p):
        r = json.loads(l); want[r["id"]] = len(r["text"])
got, pids, sizes, seen = {}, set(), [], {}
for p in glob.glob(t + "/out-cls/part-*.jsonl"):
    for l in open(p):
        r = json.loads(l)
        assert r["id"] not in got, "record %d twice" % r["id"]
        got[r["id"]] = r["len"]; pids.add(r["pid"]); sizes.append(r["size"])
        seen[r["pid"]] = max(seen.get(r["pid"], 0), r["batch"])
assert got == want, "output differs: %d records, want %d" % (len(got), len(want))
assert max(sizes) == 250, "batchSize 250: largest batch %d" % max(sizes)
assert 1 <= len(pids) <= 2, "one process per worker slot: %d processes" % len(pids)
assert sum(seen.values()) >= 72, "the processes served every batch of every task: %s" % seen
print("%d records, %d processes served %d batches" % (len(got), len(pids), sum(seen.values())))
EOF
}
check "a class UDF in mode batches: every record once, the class built once per process" class_udf

cat >"$tmp/cols.py" <<'EOF'
from streambatch import udf

def upper(cols):  # a dict of lists
    return {"id": cols["id"], "text": [t.upper() + "!" for t in cols["text"]]}

udf.run(upper, batch_format="columns", batch_size=100)
EOF
columns_udf() {
  pipeline cols "  - {name: up, op: exec, args: {command: [$py, $tmp/cols.py]}}" ""
  run cols || { tail -20 "$tmp/cols.log"; return 1; }
  python3 - "$tmp" <<'EOF'
import glob, json, sys
t = sys.argv[1]
want = sorted(json.dumps({"id": r["id"], "text": r["text"].upper() + "!"}, sort_keys=True)
              for p in glob.glob(t + "/in/*.jsonl") for r in map(json.loads, open(p)))
got = sorted(json.dumps(json.loads(l), sort_keys=True)
             for p in glob.glob(t + "/out-cols/part-*.jsonl") for l in open(p))
assert got == want, "output differs: %d lines, want %d" % (len(got), len(want))
print("%d records as expected" % len(got))
EOF
}
check "a function over columns in mode filter gives the independent computation's records" columns_udf

cat >"$tmp/raise.py" <<'EOF'
from streambatch import udf

def fn(batch):
    for r in batch:
        if r["id"] == 30017:
            raise ZeroDivisionError("record 30017 divides by zero")
    return batch

udf.run(fn)
EOF
raising_udf() {
  pipeline raise "  - {name: div, op: exec, args: {command: [$py, $tmp/raise.py], mode: batches}}" \
    "  execution: {maxTaskRetries: 1}"
  if run raise; then echo "the run succeeded"; return 1; fi
  grep -q "ZeroDivisionError: record 30017 divides by zero" "$tmp/raise.log" ||
    { echo "the error lacks the exception"; tail -5 "$tmp/raise.log"; return 1; }
  grep -m1 -o "pipeline failed: .*" "$tmp/raise.log" | cut -c1-300
}
check "a UDF that raises fails the run with the exception in the error" raising_udf

cat >"$tmp/bad.py" <<'EOF'
from streambatch import udf

udf.run(lambda batch: [{"id": r["id"], "tags": {"a", "b"}} for r in batch])
EOF
unserialisable() {
  pipeline bad "  - {name: tags, op: exec, args: {command: [$py, $tmp/bad.py], mode: batches}}" \
    "  execution: {maxTaskRetries: 0}"
  if run bad; then echo "the run succeeded"; return 1; fi
  grep -q "TypeError: batch 1: a returned record is not JSON: Object of type set is not JSON serializable" "$tmp/bad.log" ||
    { echo "the error does not name the batch and the cause"; grep -m3 "error" "$tmp/bad.log"; return 1; }
}
check "a UDF returning what JSON cannot carry: the error names the batch" unserialisable

echo "sdk-test: $passed passed, $failed failed"
((failed == 0))
