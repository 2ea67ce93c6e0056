#!/usr/bin/env bash
# `make dashboard-test` (part of `make test`): deploy/grafana/streambatch.json checked
#   1. against Grafana's published schema: `satisfies Dashboard` (@grafana/schema, TypeScript;
#      installed by make deps into ~/.cache/streambatch/), and a broken copy is refused
#   2. statically (queries.py static): documented metrics, counters through rate()/increase(),
#      $namespace/$pipeline filters, every query parses (promtool)
#   3. on a real Prometheus (Debian's) scraping a real `streambatch run --metrics-addr` of a
#      two-stage CPU -> GPU pipeline: the endpoint passes `promtool check metrics`, the CPU stage
#      held by the budget shows backpressure (metric and [backpressure] in the progress lines),
#      and every panel's query returns data for the pipeline
#      (queries.py eval; the operator's own panels need an operator and are not evaluated here)
# Prints "dashboard-test: N passed, N failed" last. Bounded; stops what it started, by pid.
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
. "$top/scripts/env.sh" # SB_BIN_DIR
bin=$SB_BIN_DIR
dash=$top/deploy/grafana/streambatch.json
gs=${XDG_CACHE_HOME:-$HOME/.cache}/streambatch/grafana-schema-13.2.3-ts-5.9.3
tmp=$(mktemp -d /tmp/sb-dashboard-test-XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT
passed=0; failed=0
check() { # description command...
  local d=$1; shift
  if "$@" >"$tmp/check.out" 2>&1; then passed=$((passed + 1)); echo "ok   $d"; sed 's/^/     /' "$tmp/check.out" | tail -3
  else failed=$((failed + 1)); echo "FAIL $d"; sed 's/^/     /' "$tmp/check.out" | tail -40; fi
}
port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }

# ---- 1. the schema
typecheck() { # dashboard.json -> tsc's verdict on `<json> satisfies Dashboard`
  local d=$tmp/ts-$RANDOM
  mkdir -p "$d"
  { echo "import type { Dashboard } from '@grafana/schema';"
    echo -n "export const dashboard = "; cat "$1"; echo " satisfies Dashboard;"; } >"$d/check.ts"
  cat >"$d/tsconfig.json" <<EOF
{"compilerOptions": {"strict": true, "noEmit": true, "skipLibCheck": true, "target": "es2022",
  "module": "nodenext", "moduleResolution": "nodenext", "typeRoots": [], "baseUrl": ".",
  "paths": {"@grafana/schema": ["$gs/node_modules/@grafana/schema/dist/types/index.d.ts"]}},
 "files": ["check.ts"]}
EOF
  "$gs/node_modules/.bin/tsc" -p "$d/tsconfig.json"
}
schema_ok() {
  [[ -x $gs/node_modules/.bin/tsc ]] || { echo "$gs: missing (make deps installs it)"; return 1; }
  typecheck "$dash" || return 1
  # and the check can fail: a wrong type for a known field
  sed 's/"graphTooltip": 1/"graphTooltip": "shared"/' "$dash" >"$tmp/bad.json"
  ! typecheck "$tmp/bad.json" >"$tmp/bad.out" 2>&1 && grep -q DashboardCursorSync "$tmp/bad.out" ||
    { cat "$tmp/bad.out"; echo "a broken dashboard passed the type check"; return 1; }
  echo "satisfies Dashboard (@grafana/schema 13.2.3); a wrong graphTooltip type is refused"
}
check "the dashboard type-checks against Grafana's published schema" schema_ok

# ---- 2. static checks
static_ok() {
  python3 "$top/tests/dashboard/queries.py" static "$dash" "$top/docs/metrics.md" || return 1
  # a counter without rate() is caught
  sed 's/(rate(streambatch_stage_rows_out_total/((streambatch_stage_rows_out_total/' "$dash" >"$tmp/raw.json"
  ! python3 "$top/tests/dashboard/queries.py" static "$tmp/raw.json" "$top/docs/metrics.md" >"$tmp/raw.out" &&
    grep -q "without rate()/increase()" "$tmp/raw.out" || { cat "$tmp/raw.out"; return 1; }
}
check "queries: documented metrics, counters through rate()/increase(), filters, promtool parses them" static_ok

# ---- the chart ships it
chart_ok() {
  local helm chart=$top/helm/streambatch
  helm=$("$top/tests/k8s/build.sh" --print-bin-dir)/helm
  [[ -x $helm ]] || { echo "$helm missing (make k8s-build)"; return 1; }
  cmp "$dash" "$chart/dashboards/streambatch.json" ||
    { echo "the chart's copy differs from deploy/grafana/streambatch.json (make chart-crd copies it)"; return 1; }
  "$helm" template t "$chart" >"$tmp/off.yaml" &&
    "$helm" template t "$chart" --set metrics.serviceMonitor.enabled=true \
      --set metrics.podMonitor.enabled=true --set metrics.podMonitor.release=prom >"$tmp/on.yaml" || return 1
  python3 - "$tmp/off.yaml" "$tmp/on.yaml" "$dash" <<'PY' || return 1
import json, sys, re
def docs(path):
    return [d for d in open(path).read().split("\n---\n") if d.strip()]
def kinds(path):
    return [m.group(1) for d in docs(path) for m in [re.search(r"^kind: (\S+)", d, re.M)] if m]
off, on = kinds(sys.argv[1]), kinds(sys.argv[2])
assert "ServiceMonitor" not in off and "PodMonitor" not in off, off
assert "ServiceMonitor" in on and "PodMonitor" in on, on
cm = [d for d in docs(sys.argv[1]) if re.search(r"^kind: ConfigMap", d, re.M) and "grafana_dashboard" in d]
assert len(cm) == 1, "one dashboard ConfigMap"
assert re.search(r'grafana_dashboard: "1"', cm[0]), "sidecar label"
body = cm[0].split("streambatch.json: |-\n", 1)[1]
text = "\n".join(l[4:] for l in body.split("\n"))
assert json.loads(text) == json.load(open(sys.argv[3])), "the ConfigMap holds the dashboard"
pm = [d for d in docs(sys.argv[2]) if "kind: PodMonitor" in d][0]
assert 'release: "prom"' in pm and "port: metrics" in pm and "streambatch.dev/pipeline" in pm, pm
print("ConfigMap (grafana_dashboard: \"1\") holds the dashboard; monitors only when enabled")
PY
}
check "the chart ships the dashboard (sidecar ConfigMap) and, switched on, a ServiceMonitor and a PodMonitor" chart_ok

# ---- 3. a real Prometheus scraping a real run
mkdir -p "$tmp/in"
python3 - "$tmp/in" <<'PY'
import json, sys
for f in range(6):
    with open(f"{sys.argv[1]}/f{f}.jsonl", "w") as o:
        for i in range(20000):
            o.write(json.dumps({"id": f * 100000 + i, "lang": ["en", "de"][i % 2], "pad": "x" * 100}) + "\n")
PY
cat >"$tmp/dash.yaml" <<EOF
apiVersion: streambatch.dev/v1alpha1
kind: Pipeline
metadata: {name: dashtest}
spec:
  source: {uri: "file://$tmp/in/", format: jsonl, partitionSize: 512Ki}
  stages:
  - {name: keep, op: filter, args: {field: lang, op: eq, value: en}}
  - {name: infer, op: bench.sleep, args: {msPerMB: 3000}, resources: {gpu: 1}}
  sink: {uri: "file://$tmp/out/", format: jsonl}
  execution: {memoryBudget: 4Mi}
EOF
mport=$(port); pport=$(port)
cat >"$tmp/prometheus.yml" <<EOF
global: {scrape_interval: 1s, evaluation_interval: 1s}
scrape_configs:
- job_name: streambatch
  static_configs: [{targets: ["127.0.0.1:$mport"]}]
EOF
live_panels() {
  prometheus --config.file "$tmp/prometheus.yml" --storage.tsdb.path "$tmp/tsdb" \
    --web.listen-address "127.0.0.1:$pport" --log.level warn >"$tmp/prom.log" 2>&1 &
  pids+=($!)
  "$bin/streambatch" run "$tmp/dash.yaml" --cpus 1 --gpus 1 --metrics-addr "127.0.0.1:$mport" \
    --progress-interval-ms 1000 \
    >"$tmp/run.log" 2>&1 &
  local run=$!
  pids+=($run)
  # ~12 s of samples at 1 s while the run (~20 s) goes on
  local i
  for i in $(seq 1 60); do
    curl -fs "http://127.0.0.1:$pport/api/v1/query?query=up" | grep -q '"value":\[[0-9.]*,"1"\]' && break
    sleep 0.5
  done
  sleep 12
  kill -0 "$run" 2>/dev/null || { echo "the run ended before the queries"; tail "$tmp/run.log"; return 1; }
  curl -fsS "http://127.0.0.1:$mport/metrics" >"$tmp/metrics.txt" &&
    promtool check metrics <"$tmp/metrics.txt" || { echo "promtool check metrics found problems"; return 1; }
  grep -q '^streambatch_stage_backpressure_seconds_total{namespace="default",pipeline="dashtest",stage="keep"} [1-9]' "$tmp/metrics.txt" ||
    { echo "the CPU stage feeding a slow GPU stage under a 4 MiB budget shows no backpressure"; grep backpressure "$tmp/metrics.txt"; return 1; }
  grep -q '\[backpressure\]' "$tmp/run.log" || { echo "the progress lines never marked the held stage"; cat "$tmp/run.log"; return 1; }
  python3 "$top/tests/dashboard/queries.py" eval "$dash" "http://127.0.0.1:$pport" dashtest || { tail -5 "$tmp/run.log"; tail -5 "$tmp/prom.log"; return 1; }
  wait "$run" || { tail "$tmp/run.log"; return 1; }
}
check "every panel returns data on a real Prometheus scraping streambatch run (operator panels excluded)" live_panels

echo "dashboard-test: $passed passed, $failed failed"
((failed == 0))
