#!/usr/bin/env bash
# Memory that does not grow with data (issue 16, goal 5), run by `make bench`; prints a markdown
# section. Each benchmark pipeline runs under a sampler that sums the proportional set size (Pss:
# a page shared by n processes, such as the libraries every worker maps, counts 1/n in each) of
# `streambatch run` and every process below it (controller, workers, exec children) every 10 ms;
# the peak is compared with the goal: memory budget + 40 MiB per worker process started. The
# summed VmRSS (shared pages counted in every process) is shown beside it.
#   ETL: jsonl (ETL_MIB, default 256 MiB, in 16 files) -> filter -> project -> jsonl, budget 128Mi
#   CPU -> accelerator: 32 MiB in 1 MiB partitions, 2x-expanding bench.spin -> bench.sleep on a
#     GPU slot, budgets 16Mi and 64Mi (the memory microbenchmark of bench-engine.sh)
#   tiny: 2,000 one-record files -> identity, budget 64Mi
# One run each (the peak, not a time: no rounds). SB_BIN_DIR as for the other scripts.
# `scripts/bench-memory.sh sort` runs only the external sort of issue 41 instead: SORT_MIB
# (default 10240: 10 GiB) of jsonl rows with 100-byte random keys sorted by them under
# SORT_BUDGET (default 512Mi) with SORT_PARTITIONS (default 64) partitions, read in
# SORT_PARTITION_SIZE (default 16Mi) source partitions, every middle and
# reduce task spilling sorted runs; the output is checked in order and complete.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh # SB_BIN_DIR, SB_BUILD_DIR
bin=$SB_BIN_DIR
mib=${ETL_MIB:-256}
mode=${1:-all}
work=$(mktemp -d /tmp/sb-bench-mem-XXXXXX)
trap 'rm -rf "$work"' EXIT

[[ $mode == sort ]] || python3 - "$work" "$mib" <<'PY'
import os, random, sys
work, mib = sys.argv[1], int(sys.argv[2])
random.seed(7)
os.makedirs(f"{work}/etl")
langs = ["en", "de", "fr", "es"]
per, i = (mib << 20) // 16, 0
for k in range(16):
    with open(f"{work}/etl/part-{k:02d}.jsonl", "w") as f:
        while f.tell() < per:
            f.write('{"id":%d,"lang":"%s","score":%d,"text":"%s"}\n' % (
                i, langs[i % 4], random.randrange(1000), "x" * random.randrange(100, 200)))
            i += 1
os.makedirs(f"{work}/bin")
for k in range(8):
    with open(f"{work}/bin/f{k}.bin", "wb") as f:
        f.write(os.urandom(4 << 20))
os.makedirs(f"{work}/tiny")
for k in range(2000):
    with open(f"{work}/tiny/r{k:04d}.jsonl", "w") as f:
        f.write('{"id":%d}\n' % k)
PY

pipeline() { # name source format partSize budget stages-yaml [source args]
  cat >"$work/$1.yaml" <<Y
apiVersion: streambatch.dev/v1alpha1
kind: Pipeline
metadata: {name: $1}
spec:
  source: {uri: "file://$work/$2/", format: $3, partitionSize: $4${7:+, args: $7}}
  stages:
$6
  sink: {uri: "file://$work/out-$1/", format: $3}
  execution: {memoryBudget: $5}
Y
}
pipeline etl etl jsonl 64Mi 128Mi "  - {name: keep, op: filter, args: {field: lang, op: eq, value: en}}
  - {name: cut, op: project, args: {fields: [id, score]}}"
for b in 16Mi 64Mi; do
  pipeline "accel-$(tr A-Z a-z <<<"$b")" bin binary 1Mi "$b" "  - {name: transform, op: bench.spin, args: {msPerMB: 50, expand: 2}}
  - {name: infer, op: bench.sleep, args: {msPerMB: 25}, resources: {gpu: 1}}" "{recordSize: 4096}"
done
pipeline tiny tiny jsonl 64Mi 64Mi "  - {name: a, op: identity}"

# measure NAME BUDGET_MIB FLAGS...: one table row
measure() {
  local name=$1 budget=$2; shift 2
  python3 - "$bin/streambatch" "$work/$name.yaml" "$work/$name.json" "$name" "$budget" "$@" <<'PY'
import json, os, subprocess, sys, time
exe, yaml, js, name, budget = sys.argv[1:6]
flags = sys.argv[6:]

def tree(root):
    kids = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
        kids.setdefault(ppid, []).append(int(d))
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out

def mem(pid):
    """(Pss, VmRSS) in bytes: Pss counts a page shared by n processes (the libraries every
    worker maps) 1/n in each, so the sum over the tree is the memory the tree uses."""
    pss = rss = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    pss = int(line.split()[1]) * 1024
                elif line.startswith("Rss:"):
                    rss = int(line.split()[1]) * 1024
    except OSError:
        pass
    return pss, rss

p = subprocess.Popen([exe, "run", yaml, "--summary-json", js] + flags,
                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
peak, peak_rss, procs = 0, 0, 0
while p.poll() is None:
    pids = tree(p.pid)
    m = [mem(q) for q in pids]
    total, total_rss = sum(x[0] for x in m), sum(x[1] for x in m)
    if total > peak:
        peak, procs = total, len(pids)
    peak_rss = max(peak_rss, total_rss)
    time.sleep(0.01)
err = p.stderr.read().decode()
if p.returncode != 0:
    sys.exit(f"bench-memory: {name} failed: {err[-2000:]}")
s = json.load(open(js))
workers = int(s["workersStarted"])
goal = int(budget) * 2**20 + workers * 40 * 2**20
mib = lambda b: f"{b / 2**20:.0f}"
print(f"| {name} | {budget} | {workers} | {mib(goal)} | {mib(peak)} ({procs} processes) | "
      f"{mib(peak_rss)} | {mib(s['peakPartitionBytes'])} | "
      f"{'**yes**' if peak <= goal else '**no**'} |")
PY
}

# sort_check: the jsonl of dir out-sort, parts in _manifest.json's order, are SORT_MIB's rows
# ordered by k (the keys are lowercase hex: bytes order them as the engine does)
sort_check() {
  python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
man = json.load(open(f"{work}/out-sort/_manifest.json"))
prev, rows = "", 0
for part in man["parts"]:
    with open(f"{work}/out-sort/{part['name']}") as f:
        for line in f:
            k = line[7:107]  # {"k": "<100 hex digits>", ...
            if k < prev:
                sys.exit(f"bench-memory: sort output out of order at row {rows}")
            prev, rows = k, rows + 1
want = int(open(f"{work}/sort.count").read())
if rows != want:
    sys.exit(f"bench-memory: sort output has {rows} rows of {want}")
print(f"sort: {rows} rows in order", file=sys.stderr)
PY
}

if [[ $mode == sort ]]; then
  smib=${SORT_MIB:-10240} sbudget=${SORT_BUDGET:-512Mi} sparts=${SORT_PARTITIONS:-64}
  spsize=${SORT_PARTITION_SIZE:-16Mi}
  python3 - "$work" "$smib" <<'PY'
import os, sys
work, mib = sys.argv[1], int(sys.argv[2])
os.makedirs(f"{work}/sort")
per, i = (mib << 20) // 16, 0
for k in range(16):
    with open(f"{work}/sort/part-{k:02d}.jsonl", "w") as f:
        buf = []
        while f.tell() < per:
            for _ in range(4096):
                buf.append('{"k": "%s", "id": %d, "v": "%s"}\n' % (os.urandom(50).hex(), i, "x" * 60))
                i += 1
            f.write("".join(buf))
            buf.clear()
with open(f"{work}/sort.count", "w") as f:  # beside the source, not in it
    f.write(str(i))
PY
  pipeline sort sort jsonl "$spsize" "$sbudget" "  - {name: x, op: sort, args: {keys: [{field: k}], partitions: $sparts}}"
  echo
  echo "## External sort under the memory budget (scripts/bench-memory.sh sort)"
  echo
  echo "$(date -u '+%Y-%m-%d %H:%M UTC'); one run; $smib MiB of jsonl (100-byte keys) sorted with"
  echo "\`memoryBudget: $sbudget\`, $sparts partitions; peak summed Pss of the process tree as above."
  echo "Goal (issue 41): 10 GiB with 512Mi at most the budget + 40 MiB per worker."
  echo
  echo "| pipeline | budget MiB | workers | goal MiB | peak tree Pss MiB | peak tree VmRSS MiB | partitions in flight MiB | within goal |"
  echo "|---|---|---|---|---|---|---|---|"
  measure sort "$(python3 -c "import sys; q=sys.argv[1]; print(int(q[:-2]) * (1024 if q.endswith('Gi') else 1) if q[-2:] in ('Mi', 'Gi') else int(q) >> 20)" "$sbudget")" --cpus 2
  sort_check
  exit 0
fi

echo
echo "## Memory of the whole process tree (scripts/bench-memory.sh)"
echo
echo "$(date -u '+%Y-%m-%d %H:%M UTC'); one run each; the peak of the summed Pss of \`streambatch run\`"
echo "and every process below it, sampled every 10 ms (shared library pages counted once, split"
echo "among the processes mapping them). Goal (issue 16): at most the memory budget + 40 MiB per"
echo "worker started. ETL: $mib MiB of jsonl in 16 files."
echo
echo "| pipeline | budget MiB | workers | goal MiB | peak tree Pss MiB | peak tree VmRSS MiB | partitions in flight MiB | within goal |"
echo "|---|---|---|---|---|---|---|---|"
measure etl 128 --cpus 2
measure accel-16mi 16 --cpus 2 --gpus 1
measure accel-64mi 64 --cpus 2 --gpus 1
measure tiny 64 --cpus 2
echo
