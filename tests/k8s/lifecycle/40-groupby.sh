# shellcheck shell=bash
# 40-groupby.sh — a case file of the lifecycle suite (tests/k8s/operator-test.sh,
# SB_OPTEST_SUITE=lifecycle), sourced after the release is installed. Issue 41: "an operator test
# runs a groupby Pipeline on the test cluster from MinIO".
#   g1. a groupby of the suite's input (s3://$BUCKET/in/: 24 files, 60,000 records {id, n, pad})
#       by n with count, sum, mean, min and max, on two worker pods (workers min = max = 2),
#       4 reduce partitions: Succeeded, _SUCCESS, and every output
#       record checked against the model of tests/chaos/chaos.py (one record per key, counts,
#       sums and min/max exactly, the mean within 1e-9), computed here from the input files.
# Uses the suite's helpers (opcheck, pipeline, wait_phase, fetch_output, worker_pods, figure).

GROUPBY_ARGS='{"keys": ["n"], "partitions": 4, "aggregates": [{"op": "count", "as": "cnt"},
  {"op": "sum", "field": "id", "as": "sum_id"}, {"op": "mean", "field": "id", "as": "mean_id"},
  {"op": "min", "field": "pad", "as": "min_pad"}, {"op": "max", "field": "id", "as": "max_id"}]}'
GROUPBY_ARGS=$(tr -d '\n' <<<"$GROUPBY_ARGS")

groupby_check() { # DIR: the fetched output against the model
  python3 - "$repo/tests/chaos" "$IN" "$1" "$GROUPBY_ARGS" <<'PY'
import glob, json, os, sys
sys.path.insert(0, sys.argv[1])
import chaos  # the chaos runs' model of the ops (no streambatch code)
stage = {"op": "groupby", "args": json.loads(sys.argv[4])}
rows = [json.loads(l) for p in sorted(glob.glob(sys.argv[2] + "/*.jsonl")) for l in open(p)]
names = [p["name"] for p in json.load(open(sys.argv[3] + "/.manifest"))["parts"]]
got = [json.loads(l) for n in names for l in open(os.path.join(sys.argv[3], n)) if l.strip()]
want, _ = chaos.a2a_model(rows, stage, None)
problems = chaos.check_a2a(stage, rows, got)
print("%d input rows, %d keys expected, %d output records in %d parts" % (len(rows), len(want), len(got), len(names)))
for p in problems:
    print("PROBLEM " + p)
sys.exit(1 if problems or len(got) != len(want) else 0)
PY
}

groupby_run() {
  local t0 st
  t0=$(now)
  pipeline gby "  - {name: agg, op: groupby, args: $GROUPBY_ARGS, resources: {cpu: 500m}, workers: {min: 2, max: 2}}" \
    >"$tmp/gby.yaml"
  kubectl apply -f "$tmp/gby.yaml" >/dev/null || return 1
  wait_phase gby Succeeded 120 || { jp gby '{.status}'; return 1; }
  figure "groupby of 60,000 records from MinIO (2 worker pods, 4 reduce partitions): apply to Succeeded $(since "$t0") s"
  fetch_output gby || return 1
  [[ -f $tmp/out/gby/_SUCCESS ]] || { echo "no _SUCCESS in s3://$BUCKET/out/gby/"; return 1; }
  groupby_check "$tmp/out/gby" || return 1
  st=$(jp gby '{.status.partitions}')
  echo "status partitions: $st"
  kubectl -n "$NS" delete pipeline gby --wait=false >/dev/null
  until_ok 60 no_worker_pods gby || { echo "worker pods left: $(worker_pods gby)"; return 1; }
}
opcheck "g1: a groupby Pipeline from MinIO on two worker pods: Succeeded, output = the model (count/sum/mean/min/max per key)" groupby_run
