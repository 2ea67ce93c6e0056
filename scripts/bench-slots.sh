#!/usr/bin/env bash
# Task slots per CPU worker (execution.cpuSlotsPerWorker, `streambatch run --cpu-slots N`);
# prints a markdown section. Two pipelines of scripts/bench-engine.sh, rounds interleaved:
#   tiny: 2,000 files of 4 KiB, partitionSize 4Ki (one task per file), identity, --cpus 2,
#         with 1, 2 and 4 slots: tasks that mostly wait on RPCs and the sink's fsyncs;
#   spin: 48 x 1 MiB, two bench.spin stages of 100 ms/MiB (fused), --cpus 2, with 1 and 2
#         slots: CPU-bound, its analytic bound 10 partitions/s (goal >= 0.90 of it).
# Medians (ranges) over ROUNDS (default 5); the load average is printed per round.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh # SB_BIN_DIR
bin=$SB_BIN_DIR
rounds=${ROUNDS:-5}
work=$(mktemp -d /tmp/sb-bench-slots-XXXXXX)
trap 'rm -rf "$work"' EXIT
export TMPDIR=$work
mkdir -p "$work/tin" "$work/in"
python3 - "$work/tin" <<'PY'
import sys
for i in range(2000):
    open(f"{sys.argv[1]}/t{i:05d}.bin", "wb").write(b"x" * 4096)
PY
for i in $(seq -w 1 12); do head -c $((4 << 20)) /dev/urandom >"$work/in/f$i.bin"; done
pipeline() { # name source-dir partSize stages-yaml
  cat >"$work/$1.yaml" <<Y
apiVersion: streambatch.dev/v1alpha1
kind: Pipeline
metadata: {name: slots-$1}
spec:
  source: {uri: "file://$2", format: binary, partitionSize: $3, args: {recordSize: 4096}}
  stages:
$4
  sink: {uri: "file://$work/out-$1/", format: binary}
  execution: {memoryBudget: 64Mi}
Y
}
pipeline tiny "$work/tin/" 4Ki "  - {name: a, op: identity}"
pipeline spin "$work/in/" 1Mi "  - {name: a, op: bench.spin, args: {msPerMB: 100}}
  - {name: b, op: bench.spin, args: {msPerMB: 100}}"
res=$work/results
run() { # name slots round
  rm -rf "$work/out-$1" "$work/ck.json"
  "$bin/streambatch" run "$work/$1.yaml" --cpus 2 --cpu-slots "$2" --summary-json "$work/s.json" \
    --checkpoint "$work/ck.json" >"$work/last.log" 2>&1 || { tail "$work/last.log" >&2; exit 1; }
  python3 - "$work/s.json" "$1" "$2" "$3" >>"$res" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
print(sys.argv[2], sys.argv[3], sys.argv[4], j["wallSeconds"], j["tasksRun"], j["sinkParts"])
PY
}
for r in $(seq "$rounds"); do
  echo "bench: slots round $r/$rounds, load average $(cut -d' ' -f1 /proc/loadavg)" >&2
  for s in 1 2 4; do run tiny $s $r; done
  for s in 1 2; do run spin $s $r; done
done
python3 - "$res" "$rounds" "$(cut -d' ' -f1-3 /proc/loadavg)" <<'PY'
import collections, statistics as st, sys
w = collections.defaultdict(dict)
for l in open(sys.argv[1]):
    name, s, r, wall, tasks, parts = l.split()
    w[(name, int(s))][int(r)] = (float(wall), int(tasks), int(parts))
def fmt(xs, f="%.2f"):
    return (f + " (" + f + "-" + f + ")") % (st.median(xs), min(xs), max(xs))
print("| pipeline | slots per CPU worker | median (range) | vs 1 slot, per round |")
print("|---|---|---|---|")
for name, slots in (("tiny", (1, 2, 4)), ("spin", (1, 2))):
    base = w[(name, 1)]
    for s in slots:
        runs = w[(name, s)]
        if name == "tiny":
            val = fmt([t / x for x, t, _ in runs.values()], "%.0f") + " tasks/s"
            rel = [base[r][0] / runs[r][0] for r in runs]
        else:
            val = fmt([p / x / 10.0 for x, _, p in runs.values()]) + " of the bound"
            rel = [base[r][0] / runs[r][0] for r in runs]
        print(f"| {name} | {s} | {val} | {fmt(rel)}x |")
print()
print(f"{sys.argv[2]} rounds interleaved; load average at the end {sys.argv[3]}.")
PY
