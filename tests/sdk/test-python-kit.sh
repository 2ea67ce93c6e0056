#!/usr/bin/env bash
# `make sdk-test` (part of `make test`): the Python UDF kit (sdk/python) installed with pip into a
# fresh venv, then real `streambatch run`s whose exec stages use it:
#   1. a class UDF in mode batches (rows): every record once, the class built once per process
#      (not per batch or task), batches of the configured size
#   2. a function in mode filter over columns (dict of lists): output = an independent
#      computation of the same transform
#   3. a UDF that raises on one record: the run fails, the error ends with the exception's line
#   4. a UDF returning what JSON cannot carry: the error names the batch
#   5. lib/arrow/ipc against pyarrow both ways (tests/sdk/test-arrow-ipc.py)
#   6. framing arrow, mode batches, the kit's numpy form: typed columns out (a 2-D array becomes a
#      fixed-size list), the jsonl sink writes them as objects equal to an independent computation
#   7. framing arrow, mode filter, a plain pyarrow script (no kit): open_stream/new_stream
#   8. framing arrow, a UDF that raises: the error ends with the exception's line
#   9. tensor.mlp against numpy: a random model in safetensors, over jsonl vectors and over an
#      Arrow tensor column made by an exec stage
# Prints "sdk-test: N passed, N failed" last. Bounded (timeout per run); cleans its files.
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
. "$top/scripts/env.sh" # SB_BIN_DIR, SB_BUILD_DIR
bin=$SB_BIN_DIR
venv=$SB_BUILD_DIR/sdk-venv
tmp=$(mktemp -d /tmp/sb-sdk-test-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
passed=0; failed=0
check() { # description command...
  local d=$1; shift
  if "$@" >"$tmp/check.out" 2>&1; then passed=$((passed + 1)); echo "ok   $d"; sed 's/^/     /' "$tmp/check.out" | tail -3
  else failed=$((failed + 1)); echo "FAIL $d"; sed 's/^/     /' "$tmp/check.out" | tail -40; fi
}

# pinned, so that the pyarrow the tests compare against does not change under them
PYARROW_VERSION=26.0.1
NUMPY_VERSION=2.4.6
install_kit() {
  rm -rf "$venv" && python3 -m venv "$venv" &&
    "$venv/bin/pip" install -q --disable-pip-version-check "$top/sdk/python" \
      "pyarrow==$PYARROW_VERSION" "numpy==$NUMPY_VERSION" &&
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

check "our Arrow IPC stream code against pyarrow, both ways" \
  "$py" "$top/tests/sdk/test-arrow-ipc.py" "$SB_BUILD_DIR/tests/helpers/sb_arrow_ipc"

cat >"$tmp/arrow_np.py" <<'EOF'
import json
import os
import numpy as np
from streambatch import udf

class Embed:  # a "model": built once per process
    def __init__(self):
        self.pid = os.getpid()
    def __call__(self, cols):  # framing arrow, batch_format numpy: a dict of numpy arrays
        recs = [json.loads(t) for t in cols["record"]]
        ids = np.array([r["id"] for r in recs], dtype=np.int64)
        lens = np.array([len(r["text"]) for r in recs], dtype=np.float32)
        return {"id": ids, "vec": np.stack([lens, lens / 2, -lens], axis=1),
                "pid": np.full(len(ids), self.pid), "ok": lens > 20}

udf.run(Embed, batch_format="numpy")
EOF
arrow_numpy() {
  pipeline anp "  - {name: embed, op: exec, args: {command: [$py, $tmp/arrow_np.py], framing: arrow, mode: batches, batchSize: 500}}" ""
  run anp || { tail -20 "$tmp/anp.log"; return 1; }
  python3 - "$tmp" <<'EOF'
import glob, json, sys
t = sys.argv[1]
want = {}
for p in glob.glob(t + "/in/*.jsonl"):
    for l in open(p):
        r = json.loads(l); n = float(len(r["text"]))
        want[r["id"]] = {"id": r["id"], "vec": [n, n / 2, -n], "ok": n > 20}
got, pids = {}, set()
for p in glob.glob(t + "/out-anp/part-*.jsonl"):
    for l in open(p):
        r = json.loads(l)
        assert r["id"] not in got, "record %d twice" % r["id"]
        pids.add(r.pop("pid")); got[r["id"]] = r
assert got == want, "output differs: %d records, want %d; e.g. %s" % (
    len(got), len(want), [(got.get(k), want[k]) for k in want if got.get(k) != want[k]][:1])
assert 1 <= len(pids) <= 2, "one process per worker slot: %d" % len(pids)
print("%d typed records as JSON objects, %d processes" % (len(got), len(pids)))
EOF
}
check "framing arrow, mode batches, numpy form: typed columns written as JSON objects" arrow_numpy

cat >"$tmp/plain.py" <<'EOF'
import sys, json
import pyarrow as pa, pyarrow.ipc as ipc
writer = None
for batch in ipc.open_stream(sys.stdin.buffer):
    recs = [json.loads(t) for t in batch.column("record").to_pylist()]
    out = pa.record_batch({"id": pa.array([r["id"] for r in recs], pa.int64()),
                           "w": pa.array([r["text"][:3] for r in recs])})
    if writer is None:
        writer = ipc.new_stream(sys.stdout.buffer, out.schema)
    writer.write_batch(out)
if writer is not None:
    writer.close()
EOF
arrow_plain() {
  pipeline apl "  - {name: plain, op: exec, args: {command: [$py, $tmp/plain.py], framing: arrow}}" ""
  run apl || { tail -20 "$tmp/apl.log"; return 1; }
  python3 - "$tmp" <<'EOF'
import glob, json, sys
t = sys.argv[1]
want = sorted((r["id"], r["text"][:3]) for p in glob.glob(t + "/in/*.jsonl") for r in map(json.loads, open(p)))
got = sorted((r["id"], r["w"]) for p in glob.glob(t + "/out-apl/part-*.jsonl") for r in map(json.loads, open(p)))
assert got == want, "output differs: %d records, want %d" % (len(got), len(want))
print("%d records from a plain pyarrow filter" % len(got))
EOF
}
check "framing arrow, mode filter: a plain pyarrow script without the kit" arrow_plain

cat >"$tmp/araise.py" <<'EOF'
from streambatch import udf

def fn(batch):
    if 30017 in [r["id"] for r in udf.json_records(batch)]:
        raise KeyError("no model output for record 30017")
    return batch

udf.run(fn)
EOF
arrow_raise() {
  pipeline araise "  - {name: k, op: exec, args: {command: [$py, $tmp/araise.py], framing: arrow, mode: batches}}" \
    "  execution: {maxTaskRetries: 1}"
  if run araise; then echo "the run succeeded"; return 1; fi
  grep -q "KeyError: 'no model output for record 30017'" "$tmp/araise.log" ||
    { echo "the error lacks the exception"; grep -m3 error "$tmp/araise.log"; return 1; }
}
check "framing arrow: a UDF that raises fails the run with the exception in the error" arrow_raise

# tensor.mlp (CPU) against numpy: a random 3-layer model saved as safetensors the way
# safetensors.torch.save_file lays it out (F32, nn.Sequential indices 0, 2, 4), vectors in jsonl
# and, through an exec stage with framing arrow, as a tensor column
mlp_numpy() {
  "$py" - "$tmp" <<'EOF' || return 1
import json, struct, sys
import numpy as np
t = sys.argv[1]
rng = np.random.default_rng(7)
shapes = [(16, 12), (8, 16), (5, 8)]
tensors, data, off = {}, b"", 0
for i, (o, n) in zip((0, 2, 4), shapes):
    for name, arr in ((f"{i}.weight", rng.standard_normal((o, n)).astype(np.float32)),
                      (f"{i}.bias", rng.standard_normal(o).astype(np.float32))):
        b = arr.tobytes()
        tensors[name] = {"dtype": "F32", "shape": list(arr.shape), "data_offsets": [off, off + len(b)]}
        data += b; off += len(b)
        np.save(f"{t}/{name}.npy", arr)
h = json.dumps(tensors).encode()
open(f"{t}/model.safetensors", "wb").write(struct.pack("<Q", len(h)) + h + data)
import os
os.makedirs(f"{t}/vec", exist_ok=True)
with open(f"{t}/vec/v.jsonl", "w") as f:
    for i in range(3000):
        f.write(json.dumps({"id": i, "v": [float(x) for x in rng.standard_normal(12).astype(np.float32)]}) + "\n")
EOF
  cat >"$tmp/mlp.yaml" <<EOF
apiVersion: streambatch.dev/v1alpha1
kind: Pipeline
metadata: {name: mlp}
spec:
  source: {uri: 'file://$tmp/vec/', format: jsonl, partitionSize: 64Ki}
  stages:
  - {name: mlp, op: tensor.mlp, args: {weights: 'file://$tmp/model.safetensors', field: v, activation: gelu, topK: 2}}
  sink: {uri: 'file://$tmp/out-mlp/', format: jsonl}
EOF
  cat >"$tmp/tens.py" <<'EOF'
import numpy as np
from streambatch import udf
def fn(batch):  # jsonl records -> a float32 tensor column
    recs = udf.json_records(batch)
    return {"id": np.array([r["id"] for r in recs]), "v": np.array([r["v"] for r in recs], dtype=np.float32)}
udf.run(fn)
EOF
  sed -e 's/name: mlp}/name: mlpt}/' -e "s#out-mlp#out-mlpt#" \
      -e "s#  - {name: mlp, op: tensor.mlp#  - {name: tens, op: exec, args: {command: [$py, $tmp/tens.py], framing: arrow, mode: batches}}\n  - {name: mlp, op: tensor.mlp#" \
      "$tmp/mlp.yaml" >"$tmp/mlpt.yaml"
  run mlp || { tail -20 "$tmp/mlp.log"; return 1; }
  run mlpt || { tail -20 "$tmp/mlpt.log"; return 1; }
  "$py" - "$tmp" <<'EOF'
import glob, json, math, sys
import numpy as np
t = sys.argv[1]
W = [np.load(f"{t}/{i}.weight.npy").astype(np.float64) for i in (0, 2, 4)]
B = [np.load(f"{t}/{i}.bias.npy").astype(np.float64) for i in (0, 2, 4)]
erf = np.vectorize(math.erf)
def forward(x):
    for k, (w, b) in enumerate(zip(W, B)):
        x = x @ w.T + b
        if k < 2:
            x = 0.5 * x * (1 + erf(x / math.sqrt(2)))
    return x
inp = {r["id"]: r["v"] for r in map(json.loads, open(f"{t}/vec/v.jsonl"))}
for out in ("out-mlp", "out-mlpt"):
    got = {}
    for p in glob.glob(f"{t}/{out}/part-*.jsonl"):
        for r in map(json.loads, open(p)):
            assert r["id"] not in got, "record %d twice" % r["id"]
            got[r["id"]] = r
    assert sorted(got) == sorted(inp), "%s: %d records, want %d" % (out, len(got), len(inp))
    ids = sorted(inp)
    want = forward(np.array([inp[i] for i in ids], dtype=np.float32).astype(np.float64))
    y = np.array([got[i]["y"] for i in ids])
    # relative to each output vector's scale (its largest magnitude): an element near zero
    # after cancellation has no meaningful relative error of its own
    err = np.max(np.abs(y - want) / np.max(np.abs(want), axis=1, keepdims=True))
    assert err <= 1e-5, "%s: max relative difference %g" % (out, err)
    top = np.array([got[i]["yTopK"] for i in ids])
    assert (top == np.argsort(-want, axis=1, kind="stable")[:, :2]).all(), out + ": top-2 differs"
    print("%s: %d records, max difference to numpy (float64) %.2g of each vector's scale, top-2 equal" % (out, len(ids), err))
EOF
}
check "tensor.mlp (CPU) equals numpy on a random 3-layer gelu model: jsonl vectors and an Arrow tensor column" mlp_numpy

echo "sdk-test: $passed passed, $failed failed"
((failed == 0))
