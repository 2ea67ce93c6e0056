#!/usr/bin/env bash
# Cost-aware placement measured (issue 15), run by `make bench`; prints a markdown section.
# Synthetic pipelines whose stages have known per-shape costs (bench.sleep msPerRecord, so a
# stage's rate does not depend on how busy the machine's CPUs are), under several price tables
# and targets. For each case:
#   1. `streambatch plan -o json` chooses shapes and workers;
#   2. an independent brute force here (every shape and every worker count 1..workers.max of
#      every stage) finds the lowest cost per row that meets the target and the ceiling; the
#      planner's choice must cost the same per row;
#   3. the pipeline runs with the plan (`streambatch run --plan`, --cpus/--gpus = the plan's
#      workers summed per shape: a gpu worker's two slots share one accelerator, so it runs one
#      task at a time like the plan's worker) on about DURATION seconds of input at the target;
#      measured cost per row = the plan's cost per hour x the whole run's wall time (process
#      start to exit) / rows written. Goal: within 10% of the prediction. Outputs checked equal.
# The baselines' predicted costs (all-cpu, all-gpu, greedy) from the same plan are in the table.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh # SB_BIN_DIR
bin=$SB_BIN_DIR
work=$(mktemp -d /tmp/sb-bench-plan-XXXXXX)
trap 'rm -rf "$work"' EXIT
BIN=$bin WORK=$work ROUNDS=${ROUNDS:-2} DURATION=${DURATION:-30} ONLY=${ONLY:-} PARTITION_SIZE=${PARTITION_SIZE:-16Ki} exec python3 - <<'PY'
import itertools, json, math, os, subprocess, sys, time

bin_dir, work = os.environ["BIN"], os.environ["WORK"]
rounds, duration = int(os.environ["ROUNDS"]), float(os.environ["DURATION"])
only = [int(x) for x in os.environ["ONLY"].split(",") if x]
sb = os.path.join(bin_dir, "streambatch")

# (title, stages, pricing, target): a stage is (name, cpu ms/record, gpu ms/record or None,
# memory GiB); every stage has resources {cpu: 1, memory: M Gi}.
THREE = [("parse", 1, None, 1), ("embed", 8, 1, 1), ("post", 2, None, 1)]
TWO = [("prep", 2, 1, 1), ("model", 10, 0.5, 2)]
CASES = [
    ("3 stages, GPU at T4 price, 1000 rows/s", THREE, {"gpuType": "nvidia-t4"}, {"rowsPerSecond": 1000}),
    ("3 stages, GPU at 0.20/h, 1000 rows/s", THREE, {"gpuType": "spot", "gpuHour": 0.2}, {"rowsPerSecond": 1000}),
    ("3 stages, GPU at 0.20/h, 2000 rows/s", THREE, {"gpuType": "spot", "gpuHour": 0.2}, {"rowsPerSecond": 2000}),
    ("2 stages, both shapes, default GPU price, 400 rows/s", TWO, {}, {"rowsPerSecond": 400}),
    ("2 stages, both shapes, GPU at 0.10/h, 800 rows/s", TWO, {"gpuType": "spot", "gpuHour": 0.1}, {"rowsPerSecond": 800}),
    ("2 stages, GPU at 0.10/h, 800 rows/s, ceiling 0.30/h", TWO, {"gpuType": "spot", "gpuHour": 0.1},
     {"rowsPerSecond": 800, "maxCostPerHour": 0.3}),
]
WMAX = 16  # workers.max's default

def manifest(i, stages, pricing, target, rows_path, out):
    st = []
    for name, cpu_ms, gpu_ms, mem in stages:
        s = {"name": name, "op": "bench.sleep", "args": {"msPerRecord": cpu_ms},
             "resources": {"cpu": "1", "memory": "%dGi" % mem}}
        if gpu_ms is not None:
            s["placement"] = ["cpu", "gpu"]
            s["shapeArgs"] = {"gpu": {"msPerRecord": gpu_ms}}
        st.append(s)
    return {"apiVersion": "streambatch.dev/v1alpha1", "kind": "Pipeline",
            "metadata": {"name": "plan-%d" % i},
            "spec": {"source": {"uri": "file://" + rows_path, "format": "jsonl", "partitionSize": os.environ["PARTITION_SIZE"]},
                     "stages": st, "sink": {"uri": "file://" + out + "/", "format": "jsonl"},
                     "execution": {"target": target, "pricing": pricing}}}

def brute(stages, prices, target):
    """Lowest cost per row over every shape and every worker vector, independent of lib/plan."""
    best = None
    shapes = [["cpu"] + (["gpu"] if g is not None else []) for _, _, g, _ in stages]
    for pick in itertools.product(*shapes):
        rates = [1000.0 / (c if sh == "cpu" else g) for (_, c, g, _), sh in zip(stages, pick)]
        per = [prices["cpuCoreHour"] + m * prices["memoryGiBHour"] + (prices["gpuHour"] if sh == "gpu" else 0)
               for (_, _, _, m), sh in zip(stages, pick)]
        for ws in itertools.product(range(1, WMAX + 1), repeat=len(stages)):
            rps = min(w * r for w, r in zip(ws, rates))
            if rps < target["rowsPerSecond"] * (1 - 1e-12):
                continue
            cph = sum(w * p for w, p in zip(ws, per))
            if cph > target.get("maxCostPerHour", math.inf) * (1 + 1e-12):
                continue
            cpr = cph / (3600 * rps)
            if best is None or cpr < best[0] * (1 - 1e-12) or (abs(cpr - best[0]) <= 1e-12 * cpr and cph < best[1]):
                best = (cpr, cph, rps, list(zip(pick, ws)))
    return best

def fmt_place(names, placed):
    return " ".join("%s=%s:%d" % (n, sh, w) for n, (sh, w) in zip(names, placed))

def digest(d):
    lines = []
    for f in sorted(os.listdir(d)):
        if f.startswith("part-"):
            with open(os.path.join(d, f)) as fh:
                lines += fh.read().splitlines()
    return sorted(lines)

table = []
fails = 0
n_same = n_within = n_run = 0
for i, (title, stages, pricing, target) in enumerate(CASES, 1):
    if only and i not in only:
        continue
    rows_path = os.path.join(work, "in-%d.jsonl" % i)
    want = None
    out = os.path.join(work, "out")
    yml = os.path.join(work, "p-%d.yaml" % i)
    with open(yml, "w") as f:  # JSON is YAML
        json.dump(manifest(i, stages, pricing, target, rows_path, out), f)
    res = subprocess.run([sb, "plan", yml, "-o", "json"], capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit("bench: plan of case %d failed: %s%s" % (i, res.stdout, res.stderr))
    pj = json.loads(res.stdout)
    plan, prices = pj["plan"], pj["prices"]
    b = brute(stages, prices, target)
    names = [s[0] for s in stages]
    if not plan["feasible"]:
        if b is not None:
            fails += 1
            print("bench: case %d: no plan, but the brute force found %s" % (i, fmt_place(names, b[3])), file=sys.stderr)
        n_same += b is None
        table.append("| %d | %s | none: %s | | | %s | | | | | |" % (i, title, plan["why"], "yes" if b is None else "**no**"))
        continue
    chosen = [(s["shape"], s["workers"]) for s in plan["stages"]]
    pred = plan["costPerMillionRows"] / 1e6
    same = b is not None and abs(pred - b[0]) <= 1e-9 * b[0]
    n_same += same
    if not same:
        fails += 1
        print("bench: case %d: planner %s (%.6g per row) but the brute force %s (%.6g)" %
              (i, fmt_place(names, chosen), pred, b and fmt_place(names, b[3]), b and b[0]), file=sys.stderr)
    # about `duration` seconds of input at the plan's rate (a plan may run faster than the
    # target when that is cheaper per row)
    rows = int(plan["rowsPerSecond"] * duration)
    with open(rows_path, "w") as o:
        for r in range(rows):
            o.write(json.dumps({"id": r, "pad": "x" * 40}) + "\n")
    ncpu = sum(w for sh, w in chosen if sh == "cpu")
    ngpu = sum(w for sh, w in chosen if sh == "gpu")
    ratios, walls = [], []
    for r in range(rounds):
        print("bench: plan case %d/%d round %d/%d: %s, --cpus %d --gpus %d, %d rows" %
              (i, len(CASES), r + 1, rounds, fmt_place(names, chosen), ncpu, ngpu, rows), file=sys.stderr)
        subprocess.run(["rm", "-rf", out], check=True)
        t0 = time.monotonic()
        run = subprocess.run([sb, "run", yml, "--plan", "--cpus", str(ncpu), "--gpus", str(ngpu),
                              "--summary-json", os.path.join(work, "s.json")], capture_output=True, text=True)
        wall = time.monotonic() - t0
        if run.returncode != 0:
            sys.exit("bench: run of case %d failed:\n%s" % (i, run.stdout[-2000:] + run.stderr[-2000:]))
        got = digest(out)
        if want is None:
            with open(rows_path) as fh:
                want = sorted(fh.read().splitlines())
        if got != want:
            sys.exit("bench: case %d: output differs from the input (%d rows vs %d)" % (i, len(got), len(want)))
        measured = plan["costPerHour"] * wall / 3600 / len(got)
        ratios.append(measured / pred)
        walls.append(wall)
    base = pj["baselines"]
    def per_m(k):
        x = base.get(k, {})
        return "%.4g" % x["costPerMillionRows"] if x.get("feasible") else "–"
    med = sorted(ratios)[len(ratios) // 2] if len(ratios) % 2 else sum(sorted(ratios)[len(ratios)//2-1:len(ratios)//2+1]) / 2
    table.append("| %d | %s | %s | %.0f | %.4g | %s | %.2f (%.2f-%.2f) | %.1f-%.1f | %s | %s | %s |" % (
        i, title, fmt_place(names, chosen), plan["rowsPerSecond"], plan["costPerMillionRows"],
        "yes" if same else "**no**", med, min(ratios), max(ratios), min(walls), max(walls),
        per_m("all-cpu"), per_m("all-gpu"), per_m("greedy")))
    n_run += 1
    if 0.9 <= med <= 1.1:
        n_within += 1
    else:
        fails += 1

print()
print("## Cost-aware placement: planned vs measured (scripts/bench-plan.sh)")
print()
print("%s, %d CPUs shared with other work; %d rounds per case. Stages are bench.sleep with a" %
      (time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), os.cpu_count(), rounds))
print("declared msPerRecord per shape (so rates do not depend on CPU load), each worker")
print("`resources: {cpu: 1, memory: NGi}`; about %g s of input at the target, rows of about 64 bytes," % duration)
print("partitionSize %s. The plan is `streambatch plan -o json`; \"= brute force\" says its cost" % os.environ["PARTITION_SIZE"])
print("per row equals the lowest one found by trying every shape and every worker count (1-16) of")
print("every stage; the run is `streambatch run --plan` with the plan's workers per shape; measured")
print("cost per row = the plan's cost per hour x the whole run's wall time / rows. Predicted costs")
print("per million rows; the baselines are the planner's own (– where infeasible).")
print()
print("| # | case | plan | rows/s | per 1M rows | = brute force | measured / predicted, median (range) | wall, s | all-cpu | all-gpu | greedy |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for t in table:
    print(t)
print()
print("Goal (issue 15): the planner's choice equals the brute-force optimum, and its measured cost")
print("per row is within 10%% of its prediction: the choice in %d of %d cases, the cost in %d of %d"
      " (medians)." % (n_same, len(table), n_within, n_run))
if fails:
    print("bench: %d case(s) missed the goal" % fails, file=sys.stderr)
PY
