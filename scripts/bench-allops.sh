#!/usr/bin/env bash
# The all-to-all ops (issue 41) on one machine; prints a markdown section. 500,000 jsonl rows
# (8 files, ~50 MiB) through identity (the floor: read, pass, write), groupby {count, sum, mean}
# over 4 reduce tasks by a key of 10,000 values and by one of 100, random_shuffle over 4, limit
# {rows: 1000} (the scheduler stops the source early), a broadcast join with a 10,000-row
# lookup table, and sort by (key, v) into 4 ranges (its output checked in _manifest.json's
# order), 2 CPU workers, whole
# `streambatch run` wall times (start-up included), best of ROUNDS; beside a single-process
# Python groupby and join of the same rows (json + dict), the references they are checked against,
# and a single-process Python sort (json.loads, list.sort, json.dumps).
# The issue's side by side with Ray Data, Daft and DuckDB at its sizes is scripts/bench-a2a.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh # SB_BIN_DIR
bin=$SB_BIN_DIR
rounds=${ROUNDS:-3}
work=$(mktemp -d /tmp/sb-bench-allops-XXXXXX)
trap 'rm -rf "$work"' EXIT
python3 - "$work/in" <<'PY'
import json, os, random, sys
r = random.Random(1)
os.makedirs(sys.argv[1])
for f in range(8):
    with open(os.path.join(sys.argv[1], "f%d.jsonl" % f), "w") as o:
        for i in range(62500):
            o.write(json.dumps({"key": "k%05d" % r.randrange(10000), "v": r.randrange(1000),
                                "w": r.random(), "c": "c%02d" % r.randrange(100),
                                "pad": "x" * 40}) + "\n")
PY
python3 - "$work/right" <<'PY' # join's right side: one row per key (10,000 rows, ~0.5 MiB)
import json, os, sys
os.makedirs(sys.argv[1])
with open(os.path.join(sys.argv[1], "r.jsonl"), "w") as o:
    for k in range(10000):
        o.write(json.dumps({"key": "k%05d" % k, "name": "n%d" % k, "rank": k % 97}) + "\n")
PY
stage() {
  case $1 in
  identity) echo "{name: x, op: identity}" ;;
  groupby) echo "{name: x, op: groupby, args: {keys: [key], partitions: 4, aggregates: [{op: count}, {op: sum, field: v}, {op: mean, field: w}]}}" ;;
  groupby100) echo "{name: x, op: groupby, args: {keys: [c], partitions: 4, aggregates: [{op: count}, {op: sum, field: v}, {op: mean, field: w}]}}" ;;
  random_shuffle) echo "{name: x, op: random_shuffle, args: {seed: 1, partitions: 4}}" ;;
  limit) echo "{name: x, op: limit, args: {rows: 1000}}" ;;
  join) echo "{name: x, op: join, args: {right: {uri: 'file://$work/right/'}, on: [key]}}" ;;
  sort) echo "{name: x, op: sort, args: {keys: [{field: key}, {field: v}], partitions: 4}}" ;;
  esac
}
echo "| op | rows in | rows out | best wall (s) of $rounds | CPU s (all processes) | |"
echo "|---|---|---|---|---|---|"
for op in identity groupby groupby100 random_shuffle limit join sort; do
  cat >"$work/$op.yaml" <<EOY
apiVersion: streambatch.dev/v1alpha1
kind: Pipeline
metadata: {name: b}
spec:
  source: {uri: 'file://$work/in/', format: jsonl, partitionSize: 4Mi}
  stages:
  - $(stage $op)
  sink: {uri: 'file://$work/out-$op/', format: jsonl}
EOY
  best=
  for _ in $(seq "$rounds"); do
    rm -rf "$work/out-$op"
    s=$(date +%s.%N)
    "$bin/streambatch" run "$work/$op.yaml" --cpus 2 --summary-json "$work/$op.json" >/dev/null 2>&1
    t=$(awk -v a="$s" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')
    best=$(awk -v a="$best" -v b="$t" 'BEGIN { print (a == "" || b < a) ? b : a }')
  done
  rows=$(python3 -c "import json; print(json.load(open('$work/$op.json'))['sinkRows'])")
  cpu=$(python3 -c "import json; print('%.2f' % json.load(open('$work/$op.json'))['cpuSeconds'])")
  check=""
  if [[ $op == groupby ]]; then
    python3 tests/allops/check.py groupby '{"keys":["key"],"aggregates":[{"op":"count"},{"op":"sum","field":"v"},{"op":"mean","field":"w"}]}' "$work/in" "$work/out-$op" >/dev/null && check="matches the reference"
  elif [[ $op == groupby100 ]]; then
    python3 tests/allops/check.py groupby '{"keys":["c"],"aggregates":[{"op":"count"},{"op":"sum","field":"v"},{"op":"mean","field":"w"}]}' "$work/in" "$work/out-$op" >/dev/null && check="matches the reference"
  elif [[ $op == random_shuffle ]]; then
    python3 tests/allops/check.py random_shuffle '{}' "$work/in" "$work/out-$op" >/dev/null && check="same rows as the input"
  elif [[ $op == limit ]]; then
    python3 tests/allops/check_lj.py limit 1000 "$work/in" "$work/out-$op" >/dev/null && check="the first 1000 rows; $(python3 -c "import json; d=json.load(open('$work/$op.json')); print('%d of %d source tasks run' % (d['tasksRun'] - 1, d['stages'][0]['tasks']))")"
  elif [[ $op == join ]]; then
    python3 tests/allops/check_lj.py join '{"on":["key"]}' "$work/in" "$work/right" "$work/out-$op" >/dev/null && check="matches the reference"
  elif [[ $op == sort ]]; then
    python3 tests/allops/check.py sort '{"keys":[{"field":"key"},{"field":"v"}]}' "$work/in" "$work/out-$op" >/dev/null && check="in order, the input's rows"
  fi
  printf '| %s | 500000 | %s | %.2f | %s | %s |\n' "$op" "$rows" "$best" "$cpu" "$check"
done
python3 - "$work/in" <<'PY'
import glob, json, math, os, sys, time
t = time.time()
g = {}
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.jsonl"))):
    for line in open(f):
        r = json.loads(line)
        a = g.setdefault(r["key"], [0, 0, []])
        a[0] += 1
        a[1] += r["v"]
        a[2].append(r["w"])
out = [(k, a[0], a[1], math.fsum(a[2]) / a[0]) for k, a in g.items()]
print("| python3 groupby (one process) | 500000 | %d | %.2f | %.2f | |" %
      (len(out), time.time() - t, time.process_time()))
PY
python3 - "$work/in" "$work/right" <<'PY'
import glob, json, os, sys, time
t, c = time.time(), time.process_time()
right = {}
for line in open(os.path.join(sys.argv[2], "r.jsonl")):
    r = json.loads(line)
    right.setdefault(r.pop("key"), []).append(r)
n = 0
with open(os.devnull, "w") as o:
    for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.jsonl"))):
        for line in open(f):
            r = json.loads(line)
            for m in right.get(r["key"], []):
                o.write(json.dumps(dict(r, **m)) + "\n")
                n += 1
print("| python3 join (one process: dict, json.dumps) | 500000 | %d | %.2f | %.2f | |" %
      (n, time.time() - t, time.process_time() - c))
PY
python3 - "$work/in" <<'PY'
import glob, json, os, sys, time
t, c = time.time(), time.process_time()
rows = []
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*.jsonl"))):
    rows += [json.loads(line) for line in open(f)]
rows.sort(key=lambda r: (r["key"], r["v"]))
with open(os.devnull, "w") as o:
    for r in rows:
        o.write(json.dumps(r) + "\n")
print("| python3 sort (one process) | 500000 | %d | %.2f | %.2f | |" %
      (len(rows), time.time() - t, time.process_time() - c))
PY
