#!/usr/bin/env bash
# End-to-end tasks per second with an empty op (issue 16, goal 3); prints a markdown section.
# TASKS (default 20,000) files of 4 KiB, partitionSize 4Ki (one task per file), identity,
# `streambatch run --cpus 2`: with batched polls (the default) and without (SB_POLL_BATCH=1 in
# the workers' environment), the files and the sink on the disk (under /tmp) and on tmpfs
# (/dev/shm, when it exists). ROUNDS (default 3) interleaved; medians (range) of tasks/s (tasks
# / the run summary's wallSeconds: workers started to the last task), the controller's and all
# processes' CPU per task (the summary's controllerCpuSeconds and cpuSeconds), batched/unbatched
# per round, and the whole run's wall time (process start to exit: start-up and the sink's
# commit of every part included).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh # SB_BIN_DIR
bin=$SB_BIN_DIR
rounds=${ROUNDS:-3}
tasks=${TASKS:-20000}
. scripts/bench-lib.sh # pressure
work=$(mktemp -d /tmp/sb-bench-tasks-XXXXXX)
shm=""
if [[ -d /dev/shm && -w /dev/shm ]]; then shm=$(mktemp -d /dev/shm/sb-bench-tasks-XXXXXX); fi
trap 'rm -rf "$work" ${shm:+"$shm"}' EXIT
export TMPDIR=$work
places=(disk)
[[ -n $shm ]] && places+=(tmpfs)
root() { if [[ $1 == disk ]]; then echo "$work/data"; else echo "$shm"; fi; }
for p in "${places[@]}"; do
  d=$(root "$p")
  mkdir -p "$d/in"
  python3 - "$d/in" "$tasks" <<'PY'
import sys
for i in range(int(sys.argv[2])):
    open(f"{sys.argv[1]}/t{i:06d}.bin", "wb").write(b"x" * 4096)
PY
  cat >"$work/$p.yaml" <<Y
apiVersion: streambatch.dev/v1alpha1
kind: Pipeline
metadata: {name: tasks-$p}
spec:
  source: {uri: "file://$d/in/", format: binary, partitionSize: 4Ki, args: {recordSize: 4096}}
  stages:
  - {name: a, op: identity}
  sink: {uri: "file://$d/out/", format: binary}
  execution: {memoryBudget: 64Mi}
Y
done
res=$work/results
before=$(pressure)
for r in $(seq "$rounds"); do
  echo "bench: tasks round $r/$rounds, load average $(cut -d' ' -f1 /proc/loadavg)" >&2
  for p in "${places[@]}"; do
    for b in 32 1; do
      rm -rf "$(root "$p")/out"
      t0=$(date +%s%N)
      SB_POLL_BATCH=$b "$bin/streambatch" run "$work/$p.yaml" --cpus 2 --summary-json "$work/s.json" \
        >"$work/last.log" 2>&1 || { tail "$work/last.log" >&2; exit 1; }
      t1=$(date +%s%N)
      python3 - "$work/s.json" "$p" "$b" "$r" "$tasks" "$(((t1 - t0) / 1000000))" >>"$res" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
n = int(sys.argv[5])
assert j["state"] == "Succeeded" and j["tasksRun"] == n and j["sinkParts"] == n, j
print(sys.argv[2], sys.argv[3], sys.argv[4], j["wallSeconds"], j["controllerCpuSeconds"],
      j["cpuSeconds"], j["tasksBatched"], int(sys.argv[6]) / 1000.0)
PY
    done
  done
done
echo "### End to end: $tasks one-file tasks, empty op (scripts/bench-tasks.sh)"
echo
python3 - "$res" "$tasks" <<'PY'
import collections, statistics as st, sys
n = int(sys.argv[2])
runs = collections.defaultdict(dict)
for l in open(sys.argv[1]):
    p, b, r, wall, ctl, cpu, batched, whole = l.split()
    runs[(p, int(b))][int(r)] = (float(wall), float(ctl), float(cpu), int(batched), float(whole))
def fmt(xs, f):
    return (f + " (" + f + "-" + f + ")") % (st.median(xs), min(xs), max(xs))
print("| data and sink on | polls | tasks/s | controller CPU us/task | all processes' CPU us/task | tasks in batches | batched / one per poll, per round | whole run s (start to exit: + start-up, commit) |")
print("|---|---|---|---|---|---|---|---|")
for p in ("disk", "tmpfs"):
    if (p, 1) not in runs:
        continue
    for b in (32, 1):
        v = runs[(p, b)]
        rel = [runs[(p, 1)][r][0] / v[r][0] for r in v] if b == 32 else None
        print("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
            p, "batched (up to 32)" if b == 32 else "one task per poll (SB_POLL_BATCH=1)",
            fmt([n / x[0] for x in v.values()], "%.0f"),
            fmt([x[1] / n * 1e6 for x in v.values()], "%.0f"),
            fmt([x[2] / n * 1e6 for x in v.values()], "%.0f"),
            "%.0f%%" % (100.0 * st.median([x[3] for x in v.values()]) / n),
            fmt(rel, "%.2f") + "x" if rel else "",
            fmt([x[4] for x in v.values()], "%.2f")))
PY
echo
echo "$rounds rounds interleaved; before: $before; after: $(pressure). Disk: $(df -T "$work" | awk 'NR==2 {print $2}') under /tmp. Goal (issue 16): >= 20,000 tasks/s on 2 cores."
