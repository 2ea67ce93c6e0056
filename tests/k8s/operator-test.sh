#!/usr/bin/env bash
# The operator end to end (make k8s-operator-test, part of `make test`): on a private test
# cluster (tests/k8s/cluster.sh, its own state dir), `helm install` of helm/streambatch
# runs the controller image as two pods under the chart's ServiceAccount (RBAC enforced,
# leader election on a Lease), and Pipelines applied with kubectl run on worker pods. Every pod
# is a container from our own images (scripts/images.sh builds them into this test's directory;
# the node agent runs them with runc: the image's read-only root, uid 65532, only the pod's
# volumes), and every Pipeline reads and writes MinIO (s3://, keys from a Secret): no test
# relies on a path shared by the host and a pod. Checks, in order:
#   0. without a cluster: the chart's CRD equals api/crd/, helm lint, the rendered RBAC (all
#      namespaces: ClusterRole; listed namespaces: Roles only), the Dockerfiles' runtime
#      packages against ldd (docker/check-libs.sh), the TLS Secret volume and flags with
#      tls.enabled
#   1. images built, cluster up (its image table knows only our images), MinIO up with the
#      input, helm install, both controller pods Ready, one of them holds the Lease
#   g. the ServiceAccount can do what the controller needs and nothing else (kubectl auth can-i)
#   d. the CRD schema rejects a manifest at apply (field named); the controller rejects one the
#      schema lets through (InvalidSpec with the validator's messages, phase Failed)
#   a. a Pipeline -> worker pods -> Succeeded, output equal to an independent Python computation,
#      _SUCCESS, worker pods gone; a worker's process runs in its container (uid 65532, its own
#      mount namespace, the image's root, the host's files out of sight)
#   b. a worker pod deleted mid-run -> Succeeded, same output as (a), WorkerPodFailed/Recovered
#   c. the leading controller killed with SIGKILL mid-run -> the other replica leads within the
#      lease time, the pipeline succeeds, committed part files are not rewritten
#   e. a GPU stage no node can hold -> bounded Pending pods, WorkersPending; suspend -> pods gone,
#      Suspended; resume of a suspended runnable pipeline finishes it
#   f. a Pipeline deleted mid-run -> its pods and worker processes are gone, then the object
#   t. helm test: the chart's test pod runs a tiny Pipeline to Succeeded; a broken one fails it
#   k. worker pods take the keys from the Secret by reference, no hostPath volume; the key
#      appears in no Event, Pipeline status or pod log
#   s. hostile peers (issue 37): calls to a running Pipeline's Control service and worker pods
#      without a token or with another Pipeline's refused, its own worker token refused for
#      Rebind and for another worker's name; the token in no pod spec or log
#   r. a Pipeline failing on a presigned URL with userinfo: its status, the Events, the controllers'
#      and worker pods' logs name the host and path and hold no secret (issue 37)
#   p. the chart's policy: a Pipeline with a secret volume or a keyless Exists toleration is
#      refused at kubectl apply (the field named), accepted once the values allow it; the
#      controller's per-Pipeline NetworkPolicy is owned by the Pipeline and collected with it
#   h. 100 Pipelines at once all reach a terminal phase; API requests per Pipeline (API server
#      flow-control metrics of a FlowSchema matching only the controller's ServiceAccount) and
#      the controller's peak memory (VmHWM)
# SB_OPTEST_SUITE=lifecycle (make k8s-lifecycle-test) runs step 1, then the case files
# tests/k8s/lifecycle/NN-*.sh in order (what a user meets around a run: failures that speak,
# checkpoints at scale, the README's path, uninstall), each with this file's helpers.
# Measured figures are printed as lines starting with "figure:". The last line is
# "k8s-operator-test: N passed, N failed"; exit status non-zero on any failure.
# Bounded by SB_OPERATOR_TEST_TIMEOUT (default 840 s, under run-tests.sh's 900 s per suite); the
# cluster is always stopped and no process it started is left (also on failure or SIGTERM).
# SB_OPTEST_PIPELINES (default 100) sets the count of (h).
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
limit=${SB_OPERATOR_TEST_TIMEOUT:-840}
# SB_OPTEST_SUITE=lifecycle (make k8s-lifecycle-test): the same setup (step 1), then the case
# files tests/k8s/lifecycle/NN-*.sh in order, sourced (bash reads a sourced file whole, so a
# case file edited during a run does not change the run); SB_OPTEST_CASES="10-x.sh 20-y.sh"
# runs only those. A second suite keeps each under run-tests.sh's 900 s per suite.
SUITE=${SB_OPTEST_SUITE:-main}
case $SUITE in
  main) T=k8s-operator-test ;;
  lifecycle) T=k8s-lifecycle-test ;;
  *) echo "SB_OPTEST_SUITE: main or lifecycle, not '$SUITE'" >&2; exit 2 ;;
esac
# The binaries the images are built from (scripts/env.sh's default: bin/)
BINS=${SB_BIN_DIR:-$repo/bin}

# Processes of this test cluster that outlived it: any process whose environment carries
# SB_CLUSTER_DIR=$1 (the agent sets it in every pod), and our binaries started with that state.
stray_pids() {
  local f pid
  for f in /proc/[0-9]*/environ; do
    pid=${f#/proc/}; pid=${pid%/environ}
    [[ $pid == "$$" ]] && continue
    { tr '\0' '\n' <"$f"; } 2>/dev/null | grep -xF "SB_CLUSTER_DIR=$1" >/dev/null && echo "$pid"
  done
}

if [[ ${1:-} != --inner ]]; then
  # Outer half: run the checks under a time limit, then stop the cluster whatever happened.
  export STREAMBATCH_CLUSTER_DIR=/tmp/sb-k8s-optest.$$
  inner=
  cleanup() {
    [[ -n $inner ]] && kill -TERM "$inner" 2>/dev/null && wait "$inner" 2>/dev/null
    "$here/cluster.sh" down >/dev/null 2>&1 || true
    local p left
    left=$(stray_pids "$STREAMBATCH_CLUSTER_DIR")
    for p in $left; do kill -KILL "$p" 2>/dev/null; done
    [[ -n $left ]] && echo "$T: killed stray processes: $left"
    rm -rf "$STREAMBATCH_CLUSTER_DIR" /tmp/sb-optest-files.$$
  }
  interrupted() { cleanup; echo "$T: interrupted"; echo "$T: 0 passed, 1 failed"; exit 1; }
  trap interrupted INT TERM
  SB_OPTEST_TMP=/tmp/sb-optest-files.$$ timeout -k 5 "$limit" "$0" --inner &
  inner=$!
  wait "$inner"; rc=$?
  # A signal can end the wait without the trap having run (seen with SIGTERM): the inner half
  # still running means we were interrupted.
  kill -0 "$inner" 2>/dev/null && interrupted
  inner=
  cleanup
  if ((rc == 124 || rc == 137)); then
    echo "$T: timed out after ${limit}s"
    echo "$T: 0 passed, 1 failed"
  fi
  exit "$rc"
fi

# ---------------------------------------------------------------------------------------------
STATE=$STREAMBATCH_CLUSTER_DIR
BIN=$("$here/build.sh" --print-bin-dir)
export KUBECONFIG=$STATE/kubeconfig PATH=$BIN:$PATH
tmp=${SB_OPTEST_TMP:-$(mktemp -d /tmp/sb-optest-files.XXXXXX)}
mkdir -p "$tmp"
export HELM_CACHE_HOME=$tmp/helm/cache HELM_CONFIG_HOME=$tmp/helm/config HELM_DATA_HOME=$tmp/helm/data
CHART=$repo/helm/streambatch
SYS=sb-system           # release namespace
REL=sb                  # release name -> Deployment/ServiceAccount "sb-streambatch"
SA=sb-streambatch
DEPLOY=sb-streambatch
LEASE=streambatch-controller
NS=sb-e2e               # where the test Pipelines live
LEASE_S=15 RETRY_S=2    # the issue's lease timings (15 s / 10 s / 2 s), the chart's defaults
MAX_PENDING=2
passed=0; failed=0; t_start=$SECONDS
operator_up=0

ok() { passed=$((passed + 1)); echo "ok - $*"; }
not_ok() {
  failed=$((failed + 1)); echo "FAIL - $*"
  if [[ -f $KUBECONFIG ]]; then
    kubectl get pipelines -A 2>&1 | head -15
    kubectl get pods -A -o wide 2>&1 | grep -v kube-system | head -20
    local f
    for f in "$STATE"/pods/${SYS}_*/controller.log; do
      [[ -f $f ]] && { echo "--- tail of $f"; tail -n 12 "$f"; }
    done
  fi
}
main_check() { [[ $SUITE == main ]] || return 0; check "$@"; } # the offline checks run once
check() { # NAME COMMAND...: one test; its output is shown (figures included)
  local name=$1; shift
  echo "--- $name"
  if "$@" >"$tmp/check.out" 2>&1; then cat "$tmp/check.out"; ok "$name"; else cat "$tmp/check.out"; not_ok "$name"; return 1; fi
}
# An operator test: failed at once (with the reason) when the controller never came up.
# SB_OPTEST_ONLY="a c" runs only those lettered tests (while developing; `make test` runs all).
opcheck() {
  local letter=${1%%:*}
  [[ -n ${SB_OPTEST_ONLY:-} && " $SB_OPTEST_ONLY " != *" $letter "* ]] && return 0
  if ((operator_up)); then check "$@"; else echo "--- $1"; not_ok "$1 (not run: the controller is not Ready)"; fi
}
figure() { echo "figure: $*"; }
until_ok() { # SECONDS COMMAND...: poll until COMMAND succeeds, at most SECONDS
  local end=$((SECONDS + $1)); shift
  until "$@"; do ((SECONDS < end)) || return 1; sleep 0.5; done
}
now() { date +%s.%N; }
since() { python3 -c "import sys; print('%.1f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$1" "$(now)"; }
pod_pid() { # NS POD CONTAINER: pid of the container's process, from the agent's pid file
  local f p
  f=$(ls -t "$STATE"/pods/"$1"_"$2"_*/"$3".pid 2>/dev/null | head -n 1) && [[ -n $f ]] && read -r p _ <"$f" && echo "$p"
}
alive() { kill -0 "$1" 2>/dev/null; }
# in_container PID BINARY: the process runs in a container of our image: as uid 65532, in a
# mount namespace of its own whose root is the image's (BINARY in /usr/local/bin), read-only,
# with this test's files out of sight
in_container() {
  local pid=$1 uid rootopt
  uid=$(awk '/^Uid:/ {print $2}' "/proc/$pid/status") || return 1
  rootopt=$(awk '$5 == "/" {print $6; exit}' "/proc/$pid/mountinfo")
  echo "pid $pid: uid $uid, root mounted $rootopt, $(tr '\0' ' ' <"/proc/$pid/cmdline" | cut -c1-80)"
  [[ $uid == 65532 ]] || { echo "runs as uid $uid, not 65532"; return 1; }
  [[ $(readlink "/proc/$pid/ns/mnt") != "$(readlink /proc/self/ns/mnt)" ]] || { echo "shares the host's mount namespace"; return 1; }
  [[ -x /proc/$pid/root/usr/local/bin/$2 ]] || { echo "no /usr/local/bin/$2 in its root"; return 1; }
  [[ $rootopt == ro* ]] || { echo "its root is not read-only ($rootopt)"; return 1; }
  [[ ! -e /proc/$pid/root$IN ]] || { echo "sees the host's $IN"; return 1; }
}

# ---- Pipelines
jp() { kubectl -n "${PNS:-$NS}" get pipeline "$1" -o "jsonpath=$2" 2>/dev/null; }
phase() { jp "$1" '{.status.phase}'; }
cond() { # NAME TYPE FIELD (status|reason|message)
  jp "$1" "{.status.conditions[?(@.type==\"$2\")].$3}"
}
is_phase() { [[ $(phase "$1") == "$2" ]]; }
terminal() { local p; p=$(phase "$1"); [[ $p == Succeeded || $p == Failed ]]; }
wait_phase() { # NAME PHASE SECONDS: waits; fails early when the pipeline ends in another phase
  local end=$((SECONDS + $3)) p
  while :; do
    p=$(phase "$1")
    [[ $p == "$2" ]] && return 0
    if [[ $p == Succeeded || $p == Failed ]]; then
      echo "$1 ended $p, wanted $2: $(jp "$1" '{.status.message} {.status.conditions}')"; return 1
    fi
    ((SECONDS < end)) || { echo "$1 is '$p' after $3 s, wanted $2: $(jp "$1" '{.status}')"; return 1; }
    sleep 0.5
  done
}
worker_pods() { # NAME [FIELD-SELECTOR]: names of the pipeline's worker pods
  kubectl -n "${PNS:-$NS}" get pods -l "streambatch.dev/pipeline=$1" ${2:+--field-selector "$2"} \
    -o 'jsonpath={.items[*].metadata.name}' 2>/dev/null
}
no_worker_pods() { [[ -z $(worker_pods "$1") ]]; }
events() { # NAME: "REASON: MESSAGE" lines of the Pipeline's Events
  kubectl -n "${PNS:-$NS}" get events --field-selector "involvedObject.kind=Pipeline,involvedObject.name=$1" \
    -o 'jsonpath={range .items[*]}{.reason}: {.message}{"\n"}{end}' 2>/dev/null
}
# (grep -q on a pipe would close it early: with pipefail the writer's SIGPIPE fails the check)
has_event() { local e; e=$(events "$1"); grep -qE "^($2):" <<<"$e"; }
committed() { jp "$1" '{.status.partitions.committed}'; }
committed_at_least() { local c; c=$(committed "$1"); [[ -n $c ]] && ((c >= $2)); }
# wait_progress NAME N SECONDS: until N splits are committed; fails at once when the pipeline ended
wait_progress() {
  local end=$((SECONDS + $3))
  until committed_at_least "$1" "$2"; do
    terminal "$1" && { echo "$1 ended $(phase "$1") before $2 splits were committed: $(jp "$1" '{.status.message}')"; return 1; }
    ((SECONDS < end)) || { echo "$1: fewer than $2 splits committed after $3 s: $(jp "$1" '{.status}')"; return 1; }
    sleep 0.5
  done
}

# ---- data in MinIO (started in 1.): bucket $BUCKET, the input $IN uploaded under in/, each
# Pipeline's sink under out/NAME/; the keys in Secret s3-creds of each test namespace
IN=$tmp/in
BUCKET=optest
S3_KEY=optest-key S3_SECRET=optest-secret-key S3_EP=
s3c() { curl -fsS --aws-sigv4 "aws:amz:us-east-1:s3" --user "$S3_KEY:$S3_SECRET" "$@"; }
s3_keys() { # PREFIX: "key etag last-modified" of every object under s3://$BUCKET/PREFIX
  # (the query is sorted and its "/" encoded: curl's SigV4 signs it as given, MinIO canonically)
  local out
  out=$(s3c "$S3_EP/$BUCKET?list-type=2&max-keys=1000&prefix=${1//\//%2F}") || return 1
  python3 -c '
import sys, xml.etree.ElementTree as ET
ns = {"s": "http://s3.amazonaws.com/doc/2006-03-01/"}
r = ET.parse(sys.stdin).getroot()
assert r.findtext("s:IsTruncated", namespaces=ns) != "true", "more than 1000 keys"
for c in r.findall("s:Contents", ns):
    print(c.findtext("s:Key", namespaces=ns), c.findtext("s:ETag", namespaces=ns).strip(chr(34)),
          c.findtext("s:LastModified", namespaces=ns))' <<<"$out"
}
s3_secret() { # NAMESPACE: Secret s3-creds with the keys and the endpoint
  kubectl -n "$1" create secret generic s3-creds --from-literal=AWS_ACCESS_KEY_ID=$S3_KEY \
    --from-literal=AWS_SECRET_ACCESS_KEY=$S3_SECRET --from-literal=AWS_ENDPOINT_URL=$S3_EP \
    --from-literal=AWS_REGION=us-east-1 >/dev/null
}
# pipeline NAME STAGES [SPEC-EXTRA]: source s3://$BUCKET/${SRC:-in}/, sink s3://$BUCKET/out/NAME/
pipeline() {
  cat <<EOF
apiVersion: streambatch.dev/v1alpha1
kind: Pipeline
metadata: {name: $1, namespace: ${PNS:-$NS}}
spec:
  source: {uri: 's3://$BUCKET/${SRC:-in}/', format: jsonl, partitionSize: ${PSIZE:-64Ki}, credentialsSecret: s3-creds}
  stages:
$2
  sink: {uri: 's3://$BUCKET/out/$1/', format: jsonl, credentialsSecret: s3-creds}
${3:-}
EOF
}
# fetch_output NAME: the sink's parts (those _manifest.json lists) and _SUCCESS, copied from
# MinIO into $tmp/out/NAME/ (emptied first)
fetch_output() {
  local d=$tmp/out/$1 n
  rm -rf "$d" && mkdir -p "$d"
  s3c "$S3_EP/$BUCKET/out/$1/_manifest.json" -o "$d/.manifest" 2>/dev/null || return 0
  for n in $(python3 -c 'import json,sys;[print(p["name"]) for p in json.load(open(sys.argv[1]))["parts"]]' "$d/.manifest"); do
    s3c "$S3_EP/$BUCKET/out/$1/$n" -o "$d/$n" || return 1
  done
  if s3c "$S3_EP/$BUCKET/out/$1/_SUCCESS" -o /dev/null 2>/dev/null; then : >"$d/_SUCCESS"; fi
}
# trainer_image TAG [PKG...]: sb-oci/trainer:TAG, a trainer image as a user would make one: a
# Debian root with Python 3, numpy, the libraries the consumer library links (ldd: gRPC and
# Abseil, protobuf-c, OpenSSL) and PKG... (scripts/images.sh --base, cached), the kit
# (sdk/python) and libstreambatch_consumer.so where the docs' STREAMBATCH_CONSUMER_LIB says
TRAINER_PKGS="python3 python3-numpy libgrpc29 libprotobuf-c1 libssl3"
trainer_image() {
  local tag=$1 lib=${SB_BUILD_DIR:-$repo/build}/lib/libstreambatch_consumer.so base app
  shift
  [[ -f $lib ]] || { echo "$lib is missing (make build)"; return 1; }
  # shellcheck disable=SC2086
  base=$("$repo/scripts/images.sh" --base $TRAINER_PKGS "$@") || return 1
  app=$tmp/trainer-app-$tag
  rm -rf "$app" && mkdir -p "$app/opt/streambatch/lib" "$app/usr/local/lib/python3.11/dist-packages"
  install -m 0644 "$lib" "$app/opt/streambatch/lib/"
  cp -r "$repo/sdk/python/streambatch" "$app/usr/local/lib/python3.11/dist-packages/"
  find "$app" -name __pycache__ -prune -exec rm -rf {} +
  tar --sort=name --owner=0 --group=0 --numeric-owner --mode=go-w -C "$app" -cf "$app.tar" opt usr
  umoci new --image "$tmp/images/oci:trainer-$tag" &&
    umoci raw add-layer --image "$tmp/images/oci:trainer-$tag" "$base" &&
    umoci raw add-layer --image "$tmp/images/oci:trainer-$tag" "$app.tar" &&
    umoci config --image "$tmp/images/oci:trainer-$tag" --config.user 65532:65532 \
      --config.entrypoint python3 --config.workingdir / \
      --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin || return 1
  echo "sb-oci/trainer:$tag: $(du -m "$base" | cut -f1) MiB base ($TRAINER_PKGS $*) + the kit and the library"
}
output_digest() { fetch_output "$1" && cat "$tmp/out/$1"/part-* 2>/dev/null | sort | md5sum | cut -d' ' -f1; }
expected_digest() { # PYTHON-CONDITION on r (the record)
  python3 - "$IN" "$1" <<'PY'
import glob, hashlib, json, sys
lines = []
for p in sorted(glob.glob(sys.argv[1] + '/*.jsonl')):
    for l in open(p):
        r = json.loads(l)
        if eval(sys.argv[2]): lines.append(l)
print(hashlib.md5(''.join(sorted(lines)).encode()).hexdigest())
PY
}
FILTER="  - {name: small, op: filter, args: {field: 'n', op: lt, value: 30}, resources: {cpu: 500m}, workers: {min: 1, max: 2}}"
check_output() { # NAME: output == the independent computation of n < 30, and _SUCCESS
  local got want
  got=$(output_digest "$1"); want=$(expected_digest 'r["n"] < 30')
  echo "output digest $got, expected $want ($(cat "$tmp/out/$1"/part-* 2>/dev/null | wc -l) rows)"
  [[ $got == "$want" ]] || { echo "output of $1 differs from the independent computation"; return 1; }
  [[ -f $tmp/out/$1/_SUCCESS ]] || { echo "no _SUCCESS in s3://$BUCKET/out/$1/"; return 1; }
}

# =============================================================================================
# 0. Without a cluster
# =============================================================================================
crd_identical() {
  cmp "$repo/api/crd/pipelines.streambatch.dev.yaml" "$CHART/crd/pipelines.streambatch.dev.yaml" ||
    { echo "the chart's CRD differs from api/crd/: run 'make chart-crd'"; return 1; }
  # the template renders it unchanged, with helm.sh/resource-policy: keep
  helm template "$REL" "$CHART" >"$tmp/crd-render.yaml" || return 1
  python3 - "$repo/api/crd/pipelines.streambatch.dev.yaml" "$tmp/crd-render.yaml" <<'PY'
import sys, yaml
src = yaml.safe_load(open(sys.argv[1]))
crd = [d for d in yaml.safe_load_all(open(sys.argv[2])) if d and d.get("kind") == "CustomResourceDefinition"]
assert len(crd) == 1, "one CRD rendered"
assert crd[0]["spec"] == src["spec"], "the rendered CRD's spec differs from api/crd"
assert crd[0]["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
PY
}
main_check "the chart's crd/ holds api/crd/ unchanged and renders it as a template with resource-policy keep" crd_identical
main_check "helm lint of the chart" helm lint --strict "$CHART"

# rules_of KIND FILE: "namespace|apiGroups|resources|resourceNames|verbs" per rule of every object of KIND
rules_of() {
  python3 - "$1" "$2" <<'PY'
import sys, yaml
for d in yaml.safe_load_all(open(sys.argv[2])):
    if d and d.get('kind') == sys.argv[1]:
        for r in d.get('rules', []):
            print('|'.join([d['metadata'].get('namespace', '-'), ','.join(r.get('apiGroups', [])),
                            ','.join(r['resources']), ','.join(r.get('resourceNames', [])),
                            ','.join(sorted(r['verbs']))]))
PY
}
WORKLOAD_RULES='streambatch.dev|pipelines||delete,get,list,patch,watch
streambatch.dev|pipelines/status||patch,update
streambatch.dev|pipelines/finalizers||update
|pods||create,delete,list,watch
|events||create
|secrets||create
|services||create,delete,get
discovery.k8s.io|endpointslices||create,delete,get
networking.k8s.io|networkpolicies||create,delete,get'
render_all_namespaces() {
  helm template "$REL" "$CHART" -n "$SYS" --no-hooks >"$tmp/all.yaml" || return 1
  local got want
  got=$(rules_of ClusterRole "$tmp/all.yaml" | sort)
  want=$(sed 's/^/-|/' <<<"$WORKLOAD_RULES" | sort)
  [[ $got == "$want" ]] || { printf 'ClusterRole rules:\n%s\nwanted:\n%s\n' "$got" "$want"; return 1; }
  got=$(rules_of Role "$tmp/all.yaml" | sort)
  want=$(printf '%s\n' "$SYS|coordination.k8s.io|leases||create" "$SYS|coordination.k8s.io|leases|$LEASE|get,update" | sort)
  [[ $got == "$want" ]] || { printf 'Role rules:\n%s\nwanted:\n%s\n' "$got" "$want"; return 1; }
  grep -q -- "--leader-election-namespace=$SYS" "$tmp/all.yaml" && grep -q 'replicas: 2' "$tmp/all.yaml" &&
    ! grep -q -- '--namespace=' "$tmp/all.yaml" || { echo "Deployment args/replicas wrong"; return 1; }
}
main_check "chart, all namespaces: ClusterRole with exactly the workload rules, Lease rights only in $SYS" render_all_namespaces
render_namespaced() {
  helm template "$REL" "$CHART" -n "$SYS" --skip-tests --set 'watchNamespaces={team-a,team-b}' >"$tmp/ns.yaml" || return 1
  [[ -z $(rules_of ClusterRole "$tmp/ns.yaml") ]] || { echo "a ClusterRole is rendered"; return 1; }
  grep -q 'kind: ClusterRoleBinding' "$tmp/ns.yaml" && { echo "a ClusterRoleBinding is rendered"; return 1; }
  local ns got want
  for ns in team-a team-b; do
    got=$(rules_of Role "$tmp/ns.yaml" | grep "^$ns|" | sort)
    want=$(sed "s/^/$ns|/" <<<"$WORKLOAD_RULES" | sort)
    [[ $got == "$want" ]] || { printf 'Role in %s:\n%s\nwanted:\n%s\n' "$ns" "$got" "$want"; return 1; }
  done
  grep -q -- '--namespace=team-a' "$tmp/ns.yaml" && grep -q -- '--namespace=team-b' "$tmp/ns.yaml"
}
main_check "chart, watchNamespaces: a Role + RoleBinding per namespace and no cluster-wide rule" render_namespaced
test_hook_render() { # the helm test's objects: its Role may create/get/delete Pipelines, only there
  local got
  helm template "$REL" "$CHART" -n "$SYS" >"$tmp/t.yaml" &&
    helm template "$REL" "$CHART" -n "$SYS" --skip-tests >"$tmp/t0.yaml" || return 1
  got=$(diff <(rules_of Role "$tmp/t0.yaml" | sort) <(rules_of Role "$tmp/t.yaml" | sort) | grep '^>')
  [[ $got == "> $SYS|streambatch.dev|pipelines||create,delete,get" ]] || { echo "test Role rules: $got"; return 1; }
  helm template "$REL" "$CHART" -n "$SYS" --set 'watchNamespaces={team-a,team-b}' >"$tmp/t.yaml" || return 1
  rules_of Role "$tmp/t.yaml" | grep -x "team-a|streambatch.dev|pipelines||create,delete,get" >/dev/null ||
    { echo "with watchNamespaces the test Role is not in team-a"; return 1; }
  grep -q 'namespace: team-a' <(python3 -c '
import sys, yaml
for d in yaml.safe_load_all(open(sys.argv[1])):
    if d and d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-test"): print(d["data"]["pipeline.yaml"])' "$tmp/t.yaml") ||
    { echo "the test Pipeline is not in team-a"; return 1; }
  ! helm template "$REL" "$CHART" --set tests.enabled=false | grep -q 'helm.sh/hook: test' || { echo "tests.enabled=false renders a test"; return 1; }
  echo "test Role: create,delete,get on pipelines in the release namespace, or the first watched one; off with tests.enabled=false"
}
main_check "the chart's helm test: a Role with create/get/delete on Pipelines where the test Pipeline runs, and nothing else" test_hook_render
two_leaders_refused() {
  ! helm template "$REL" "$CHART" --set leaderElection.enabled=false >/dev/null 2>"$tmp/err" &&
    grep -q 'needs leaderElection.enabled' "$tmp/err" &&
    helm template "$REL" "$CHART" --set leaderElection.enabled=false --set replicaCount=1 | grep -- '--leader-elect=false' >/dev/null
}
main_check "chart refuses 2 replicas without leader election; 1 replica without it renders" two_leaders_refused
values_schema() { # values.schema.json: wrong values fail at install time, naming the value
  local v
  for v in replicaCount=two controller.statusInterval=soon metrics.service.type=Internal nosuch=1; do
    ! helm template "$REL" "$CHART" --set "$v" >/dev/null 2>"$tmp/err" || { echo "accepted $v"; return 1; }
    grep -q "${v%%=*}" "$tmp/err" || grep -q "additional properties '${v%%=*}'" "$tmp/err" ||
      { echo "$v: $(cat "$tmp/err")"; return 1; }
    echo "refused $v: $(grep -m1 "at '" "$tmp/err")"
  done
}
main_check "the chart's values.schema.json refuses wrong values, naming them" values_schema
network_policy() { # on by default: the controller's in $SYS, per-Pipeline ones by the controller
  local f=$tmp/np.yaml
  helm template "$REL" "$CHART" -n "$SYS" --skip-tests >"$f" || return 1
  python3 - "$f" "$SYS" <<'PY' || return 1
import json, sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
nps = [d for d in docs if d["kind"] == "NetworkPolicy"]
assert len(nps) == 1, "want only the controller's NetworkPolicy, got %s" % [n["metadata"] for n in nps]
np = nps[0]
assert np["metadata"]["namespace"] == sys.argv[2], np["metadata"]
assert np["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/name"] == "streambatch-controller"
assert np["spec"]["policyTypes"] == ["Ingress"]
ing = np["spec"]["ingress"]
assert ing[0] == {"ports": [{"port": 8080, "protocol": "TCP"}]}, ing[0]
assert ing[1]["from"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/name"] == "streambatch-worker", ing[1]
# the consumer pods of stream:// sinks (trainers) call their Pipeline's Control service too
assert ing[1]["from"][1]["podSelector"] == {"matchExpressions": [
    {"key": "streambatch.dev/stream-consumer", "operator": "Exists"}]}, ing[1]
assert len(ing) == 2, ing
dep = [d for d in docs if d["kind"] == "Deployment"][0]
args = dep["spec"]["template"]["spec"]["containers"][0]["args"]
flag = [a for a in args if a.startswith("--worker-network-policy=")]
assert len(flag) == 1, args
cfg = json.loads(flag[0].split("=", 1)[1])
assert cfg == {"controllerNamespace": sys.argv[2], "metricsFrom": [],
               "controllerLabels": {"app.kubernetes.io/name": "streambatch-controller",
                                    "app.kubernetes.io/instance": "sb"}}, cfg
print("default: the controller's NetworkPolicy in %s; --worker-network-policy=%s" % (sys.argv[2], flag[0].split("=", 1)[1]))
PY
  helm template "$REL" "$CHART" -n "$SYS" --set networkPolicy.enabled=false >"$f" || return 1
  ! grep -q "kind: NetworkPolicy" "$f" && ! grep -q -- "--worker-network-policy" "$f" && ! grep -q networkpolicies "$f" ||
    { echo "networkPolicy.enabled=false still renders a policy, the flag or the RBAC rule"; return 1; }
  # a fixed Control port: the controller refuses it (port 0 only), so the chart does before install
  ! helm template "$REL" "$CHART" --set controller.grpcPort=7000 >/dev/null 2>"$tmp/err" &&
    grep -q "controller.grpcPort: only 0" "$tmp/err" || { echo "grpcPort=7000: $(cat "$tmp/err")"; return 1; }
  ! helm template "$REL" "$CHART" --set networkPolicy.perPipeline=false >/dev/null 2>"$tmp/err" &&
    grep -q "needs watchNamespaces" "$tmp/err" || { echo "perPipeline=false without namespaces: $(cat "$tmp/err")"; return 1; }
  helm template "$REL" "$CHART" -n "$SYS" --set networkPolicy.perPipeline=false --set 'watchNamespaces={team-a,team-b}' >"$f" || return 1
  [[ $(grep -c "kind: NetworkPolicy" "$f") == 3 ]] && grep -q "port: 7070" "$f" &&
    grep -q "kubernetes.io/metadata.name: $SYS" "$f" && ! grep -q -- "--worker-network-policy" "$f" &&
    ! grep -q networkpolicies "$f" || { cat "$f"; return 1; }
  echo "perPipeline=false: the controller's + one per watched namespace, no flag, no RBAC on networkpolicies"
}
main_check "the chart's NetworkPolicies: on by default (the controller's; per-Pipeline ones through --worker-network-policy); perPipeline=false: one per watched namespace" network_policy
pipeline_policy_render() { # the ValidatingAdmissionPolicy and its binding; the lists reach the CEL
  local f=$tmp/vap.yaml
  helm template "$REL" "$CHART" -n "$SYS" >"$f" || return 1
  grep -q "kind: ValidatingAdmissionPolicy$" "$f" && grep -q "kind: ValidatingAdmissionPolicyBinding" "$f" ||
    { echo "no policy or binding by default"; return 1; }
  ! helm template "$REL" "$CHART" --set pipelinePolicy.enabled=false | grep -q ValidatingAdmissionPolicy ||
    { echo "pipelinePolicy.enabled=false renders a policy"; return 1; }
  helm template "$REL" "$CHART" -n "$SYS" --set 'pipelinePolicy.volumes.secretNames={db-pass}' \
    --set 'watchNamespaces={team-a}' --set 'pipelinePolicy.validationActions={Warn,Audit}' >"$f" || return 1
  python3 - "$f" <<'PY' || return 1
import sys, yaml
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
vap = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicy"][0]
b = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding"][0]
v = {x["name"]: x["expression"] for x in vap["spec"]["variables"]}
assert v["secretNames"] == '["db-pass"]', v["secretNames"]
assert b["spec"]["validationActions"] == ["Warn", "Audit"], b["spec"]
assert b["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"][0]["values"] == ["team-a"], b["spec"]
print("secretNames -> %s; binding %s, namespaces %s" % (v["secretNames"], b["spec"]["validationActions"],
      b["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"][0]["values"]))
PY
  ! helm template "$REL" "$CHART" --set 'pipelinePolicy.validationActions={Refuse}' >/dev/null 2>"$tmp/err" &&
    grep -q "validationActions" "$tmp/err" || { echo "validationActions=Refuse: $(cat "$tmp/err")"; return 1; }
}
main_check "the chart's Pipeline policy (ValidatingAdmissionPolicy + binding): on by default, off with pipelinePolicy.enabled=false, values reach it" pipeline_policy_render
tls_render() { # tls.enabled: the controller mounts the Secret, gets --tls-dir/--tls-secret
  ! helm template "$REL" "$CHART" | grep -q -- "--tls-" || { echo "TLS flags rendered while off"; return 1; }
  ! helm template "$REL" "$CHART" --set tls.enabled=true >/dev/null 2>"$tmp/err" &&
    grep -q "secretName" "$tmp/err" || { echo "enabled without tls.secretName: $(cat "$tmp/err")"; return 1; }
  helm template "$REL" "$CHART" -n "$SYS" --set tls.enabled=true --set tls.secretName=sb-tls \
    --set tls.serverName=sb.internal >"$tmp/tls.yaml" || return 1
  python3 - "$tmp/tls.yaml" <<'PY'
import sys, yaml
dep = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d and d.get("kind") == "Deployment"]
assert len(dep) == 1, "one Deployment"
pod = dep[0]["spec"]["template"]["spec"]
c = pod["containers"][0]
for a in ("--tls-dir=/etc/streambatch/tls", "--tls-secret=sb-tls", "--tls-server-name=sb.internal"):
    assert a in c["args"], "no %s in %s" % (a, c["args"])
vol = [v for v in pod["volumes"] if v.get("secret", {}).get("secretName") == "sb-tls"]
assert len(vol) == 1, "no volume of Secret sb-tls: %s" % pod.get("volumes")
m = [m for m in c["volumeMounts"] if m["name"] == vol[0]["name"]]
assert m and m[0]["mountPath"] == "/etc/streambatch/tls" and m[0]["readOnly"], c["volumeMounts"]
assert pod["securityContext"]["fsGroup"] == 65532, "fsGroup to read the 0440 files"
assert c["securityContext"]["readOnlyRootFilesystem"], "root stays read-only"
print("tls: args, Secret volume %s, read-only mount, fsGroup %d" % (vol[0]["name"], pod["securityContext"]["fsGroup"]))
PY
}
main_check "the chart with tls.enabled: Secret volume + read-only mount, --tls-dir/--tls-secret; refused without tls.secretName" tls_render
docker_libs() {
  "$repo/docker/check-libs.sh" "$BINS" || return 1
  # and the check catches a wrong list: an extra package and a missing one
  mkdir -p "$tmp/df" && cp "$repo/docker/images.conf" "$tmp/df/"
  sed -i '/^worker  *libs/ { s/ libs  */ libs libgrpc29 /; s/ libyaml-0-2// }' "$tmp/df/images.conf"
  ! "$repo/docker/check-libs.sh" "$BINS" "$tmp/df/images.conf" >"$tmp/df/out" 2>&1 &&
    grep -q 'missing: libyaml-0-2' "$tmp/df/out" && grep -q 'not needed: libgrpc29' "$tmp/df/out" ||
    { cat "$tmp/df/out"; echo "check-libs.sh accepted a wrong package list"; return 1; }
}
main_check "docker/images.conf lists exactly the runtime packages of ldd of each image's binaries" docker_libs

# =============================================================================================
# 1. Cluster, helm install
# =============================================================================================
# The controllers' logs (every controller pod of the run, gone ones too) hold no call the API
# server refused to their ServiceAccount: an RBAC rule the chart lacks shows there, whatever the
# scenario (a new Pipeline's Pending mark was a status patch refused in every install).
no_rbac_denials() {
  local hits
  hits=$(cat "$STATE"/pods/${SYS}_*/controller.log 2>/dev/null | grep "is forbidden: User" |
    grep -F "system:serviceaccount:$SYS:" | head -5)
  [[ -z $hits ]] || { echo "the API server refused the controller:"; echo "$hits"; return 1; }
  echo "no call of the controllers refused by RBAC in $(ls "$STATE"/pods/${SYS}_*/controller.log 2>/dev/null | wc -l) controller logs"
}
finish() {
  [[ -n ${MINIO_PID:-} ]] && { kill "$MINIO_PID" 2>/dev/null; wait "$MINIO_PID" 2>/dev/null; }
  echo "$T: $((SECONDS - t_start))s"
  echo "$T: $passed passed, $failed failed"
  ((failed == 0))
  exit
}
# Plenty of CPU so that 100 tiny pipelines are not limited by the scheduler; one GPU node with
# a single GPU (a stage asking for 2 never fits).
export SB_K8S_NODES=${SB_OPTEST_NODES:-"name=sb-cpu-0,cpu=64,memory=256Gi name=sb-cpu-1,cpu=64,memory=256Gi name=sb-gpu-0,cpu=8,memory=32Gi,nvidia.com/gpu=1,label:streambatch.dev/gpu=true"}
# Our images, built from bin/ into this test's directory (the base root filesystem is cached),
# and an image table that knows only them: sb-oci/NAME:TAG runs from the layout's NAME-TAG
# with runc; any other image stays Pending (ErrImagePull), so nothing runs as a host process.
VERSION=$(sed -n 's/^#define SB_VERSION "\(.*\)"/\1/p' "$repo/cmd/version.h")
build_images() {
  local t0=$SECONDS
  SB_IMAGES_DIR=$tmp/images "$repo/scripts/images.sh" || return 1
  echo "built in $((SECONDS - t0)) s"
  echo "sb-oci/*  oci:$tmp/images/oci:{name}-{tag}" >"$tmp/images.conf"
  # the chart's default image names (the README's values), run the same way
  echo "streambatch/*  oci:$tmp/images/oci:{name}-{tag}" >>"$tmp/images.conf"
}
check "our images built by scripts/images.sh into this test's directory" build_images || finish
export SB_K8S_IMAGES=$tmp/images.conf
HELM_IMAGES=(--set image.repository=sb-oci/controller --set workerImage.repository=sb-oci/worker
  --set workerGpuImage.repository=sb-oci/worker-gpu)
t0=$SECONDS
if "$here/cluster.sh" up; then ok "cluster up in $((SECONDS - t0))s"; else not_ok "cluster up"; finish; fi

# MinIO (scripts/minio.sh's cache) on 127.0.0.1, started with SB_CLUSTER_DIR so the outer half's
# stray-process sweep ends it whatever happens; the input: 24 files of JSON lines under in/
python3 - "$IN" <<'PY'
import json, os, random, sys
random.seed(3)
os.makedirs(sys.argv[1])
for f in range(24):
    with open('%s/f%02d.jsonl' % (sys.argv[1], f), 'w') as o:
        for i in range(2500):
            o.write(json.dumps({'id': f * 100000 + i, 'n': random.randint(0, 99),
                                'pad': 'x' * random.randint(10, 150)}) + '\n')
PY
minio_up() {
  local minio port cport
  minio=$("$repo/scripts/minio.sh") || return 1
  port=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
  cport=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
  SB_CLUSTER_DIR=$STATE MINIO_ROOT_USER=$S3_KEY MINIO_ROOT_PASSWORD=$S3_SECRET \
    "$minio" server --quiet --address "127.0.0.1:$port" --console-address "127.0.0.1:$cport" \
    "$tmp/minio" >"$tmp/minio.log" 2>&1 &
  MINIO_PID=$!
  S3_EP=http://127.0.0.1:$port
  AWS_ACCESS_KEY_ID=$S3_KEY AWS_SECRET_ACCESS_KEY=$S3_SECRET "$repo/scripts/minio-ready.sh" "$S3_EP" "$BUCKET" 60 ||
    { echo "MinIO did not start: $(tail -3 "$tmp/minio.log")"; return 1; }
  local f
  for f in "$IN"/*.jsonl; do s3c -T "$f" "$S3_EP/$BUCKET/in/$(basename "$f")" -o /dev/null || return 1; done
  local keys; keys=$(s3_keys in/) || { echo "cannot list s3://$BUCKET/in/"; return 1; }
  echo "MinIO at $S3_EP: $(wc -l <<<"$keys") input objects in s3://$BUCKET/in/"
  [[ $(wc -l <<<"$keys") == 24 ]] || { echo "the listing does not show the 24 input objects: $keys"; return 1; }
}
check "MinIO up, the input uploaded" minio_up || finish

kubectl create namespace "$NS" >/dev/null && s3_secret "$NS"
# A FlowSchema that matches only the controller's ServiceAccount: the API server's
# apiserver_flowcontrol_dispatched_requests_total{flow_schema="streambatch-controller-test"}
# then counts exactly the controller's requests (used by h).
cat <<EOF | kubectl apply -f - >/dev/null
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {name: streambatch-controller-test}
spec:
  priorityLevelConfiguration: {name: workload-high}
  matchingPrecedence: 500
  distinguisherMethod: {type: ByUser}
  rules:
  - subjects: [{kind: ServiceAccount, serviceAccount: {name: $SA, namespace: $SYS}}]
    resourceRules: [{verbs: ["*"], apiGroups: ["*"], resources: ["*"], clusterScope: true, namespaces: ["*"]}]
    nonResourceRules: [{verbs: ["*"], nonResourceURLs: ["*"]}]
EOF

controller_pods() { kubectl -n "$SYS" get pods -l app.kubernetes.io/name=streambatch-controller -o 'jsonpath={.items[*].metadata.name}'; }
holder() { kubectl -n "$SYS" get lease "$LEASE" -o 'jsonpath={.spec.holderIdentity}' 2>/dev/null; }
leader_pod() { # the pod of the Lease holder ("<pod>_<random>")
  local h; h=$(holder); [[ -n $h ]] || return 1
  local p; for p in $(controller_pods); do [[ $h == "$p"* ]] && { echo "$p"; return 0; }; done
  return 1
}
helm_install() {
  helm install "$REL" "$CHART" -n "$SYS" --create-namespace "${HELM_IMAGES[@]}" \
    --set controller.maxPendingPods=$MAX_PENDING || return 1
  kubectl -n "$SYS" get "deployment/$DEPLOY" "serviceaccount/$SA" "service/$DEPLOY-metrics" \
    "role/$DEPLOY-leader-election" "rolebinding/$DEPLOY-leader-election" || return 1
  kubectl get "clusterrole/$DEPLOY" "clusterrolebinding/$DEPLOY" crd/pipelines.streambatch.dev || return 1
}
check "helm install of helm/streambatch into $SYS" helm_install
controller_processes() {
  # Both pods are bound and their containers run the controller image's streambatch-controller
  # with the chart's flags ($(POD_IP) expanded) under the ServiceAccount (the agent wrote its
  # token).
  until_ok 60 bash -c "[[ \$(kubectl -n $SYS get pods -l app.kubernetes.io/name=streambatch-controller -o 'jsonpath={.items[*].status.podIP}' | wc -w) -eq 2 ]]" ||
    { echo "2 controller pods with an IP not seen"; return 1; }
  local p pid ip
  for p in $(controller_pods); do
    [[ $(kubectl -n "$SYS" get pod "$p" -o 'jsonpath={.spec.serviceAccountName}') == "$SA" ]] || { echo "$p: not under $SA"; return 1; }
    ip=$(kubectl -n "$SYS" get pod "$p" -o 'jsonpath={.status.podIP}')
    until_ok 30 pod_pid "$SYS" "$p" controller >/dev/null || { echo "$p: no process"; return 1; }
    pid=$(pod_pid "$SYS" "$p" controller)
    echo "$p: pid $pid, ip $ip: $(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | cut -c1-300)"
    in_container "$pid" streambatch-controller || return 1
    ls "$STATE"/pods/${SYS}_${p}_*/serviceaccount/token >/dev/null || { echo "$p: no token"; return 1; }
    tr '\0' '\n' <"/proc/$pid/cmdline" | grep -xF -- "--metrics-listen=$ip:8080" >/dev/null ||
      { echo "$p: --metrics-listen not on the pod IP ($ip)"; return 1; }
  done
}
check "2 controller pods run the controller image (in containers) under ServiceAccount $SA" controller_processes
controller_ready() {
  kubectl -n "$SYS" rollout status "deployment/$DEPLOY" --timeout=90s || return 1
  until_ok 30 leader_pod >/dev/null || { echo "nobody holds Lease $SYS/$LEASE"; kubectl -n "$SYS" get lease -o yaml; return 1; }
  echo "leader: $(holder)"
  local p ip
  for p in $(controller_pods); do
    ip=$(kubectl -n "$SYS" get pod "$p" -o 'jsonpath={.status.podIP}')
    local m
    curl -fsS "http://$ip:8080/healthz" >/dev/null && curl -fsS "http://$ip:8080/readyz" >/dev/null &&
      m=$(curl -fsS "http://$ip:8080/metrics") || { echo "$p: /healthz /readyz /metrics on $ip:8080 do not answer"; return 1; }
    echo "$p /metrics: $(grep -c '^[a-z]' <<<"$m") samples, $(grep '^streambatch_leader' <<<"$m")"
  done
}
check "the Deployment becomes Available (/readyz), one replica holds Lease $SYS/$LEASE" controller_ready && operator_up=1

# The lifecycle suite: its case files, then the end (the main suite's cases follow below).
if [[ $SUITE == lifecycle ]]; then
  for case_file in "$here"/lifecycle/[0-9]*.sh; do
    [[ -f $case_file ]] || continue
    [[ -n ${SB_OPTEST_CASES:-} && " $SB_OPTEST_CASES " != *" ${case_file##*/} "* ]] && continue
    # NN-*.bench.sh: a measurement (make bench), run only when SB_OPTEST_CASES names it
    [[ $case_file == *.bench.sh && -z ${SB_OPTEST_CASES:-} ]] && continue
    echo "=== ${case_file#"$repo"/}"
    # shellcheck source=/dev/null
    source "$case_file"
  done
  opcheck "x: the controllers' logs hold no API call refused to their ServiceAccount" no_rbac_denials
  finish
fi

# =============================================================================================
# g. RBAC: exactly what the controller needs
# =============================================================================================
AS=system:serviceaccount:$SYS:$SA
can() { kubectl auth can-i --as="$AS" "$@" 2>/dev/null; }
rbac_exact() {
  local bad=0 a
  while read -r a; do
    [[ -n $a ]] || continue
    [[ $(can $a) == yes ]] && echo "allowed: $a" || { echo "DENIED but needed: $a"; bad=1; }
  done <<EOF
get pipelines.streambatch.dev -n $NS
list pipelines.streambatch.dev -A
watch pipelines.streambatch.dev -A
patch pipelines.streambatch.dev -n $NS
delete pipelines.streambatch.dev -n $NS
update pipelines.streambatch.dev --subresource=status -n $NS
patch pipelines.streambatch.dev --subresource=status -n $NS
update pipelines.streambatch.dev --subresource=finalizers -n $NS
list pods -A
watch pods -A
create pods -n $NS
delete pods -n $NS
create events -n $NS
create networkpolicies.networking.k8s.io -n $NS
get networkpolicies.networking.k8s.io -n $NS
delete networkpolicies.networking.k8s.io -n $NS
create secrets -n $NS
create services -n $NS
get services -n $NS
delete services -n $NS
create endpointslices.discovery.k8s.io -n $NS
get endpointslices.discovery.k8s.io -n $NS
delete endpointslices.discovery.k8s.io -n $NS
create leases.coordination.k8s.io -n $SYS
get leases.coordination.k8s.io/$LEASE -n $SYS
update leases.coordination.k8s.io/$LEASE -n $SYS
EOF
  while read -r a; do
    [[ -n $a ]] || continue
    [[ $(can $a) == no ]] && echo "denied: $a" || { echo "ALLOWED but not needed: $a"; bad=1; }
  done <<EOF
create pipelines.streambatch.dev -n $NS
update pipelines.streambatch.dev -n $NS
deletecollection pipelines.streambatch.dev -A
create pipelines.streambatch.dev --subresource=status -n $NS
get secrets -n $NS
list secrets -A
watch secrets -A
update secrets -n $NS
delete secrets -n $NS
get secrets -n $SYS
get configmaps -n $NS
list networkpolicies.networking.k8s.io -A
update networkpolicies.networking.k8s.io -n $NS
list services -A
update services -n $NS
list endpointslices.discovery.k8s.io -A
update endpointslices.discovery.k8s.io -n $NS
list nodes
get nodes
patch pods -n $NS
update pods -n $NS
create pods --subresource=exec -n $NS
get pods --subresource=log -n $NS
deletecollection pods -n $NS
delete events -n $NS
patch events -n $NS
list events -n $NS
create deployments.apps -n $NS
create serviceaccounts --subresource=token -n $NS
create leases.coordination.k8s.io -n $NS
create leases.coordination.k8s.io -n kube-system
get leases.coordination.k8s.io -n kube-node-lease
list leases.coordination.k8s.io -A
update leases.coordination.k8s.io/other-lease -n $SYS
delete leases.coordination.k8s.io/$LEASE -n $SYS
get leases.coordination.k8s.io/other-lease -n $SYS
create clusterrolebindings.rbac.authorization.k8s.io
create rolebindings.rbac.authorization.k8s.io -n $NS
patch customresourcedefinitions.apiextensions.k8s.io
impersonate users
EOF
  return $bad
}
check "ServiceAccount $SA: every verb the controller uses allowed; secrets, nodes, pod patch/exec, pipeline create/update, other Leases denied (can-i)" rbac_exact

# =============================================================================================
# d. Rejections: by the CRD schema at apply, by the controller with InvalidSpec
# =============================================================================================
schema_rejects() {
  local bad=0
  pipeline bad-gpu "  - {name: a, op: identity, resources: {gpu: -1}}" >"$tmp/bad-gpu.yaml"
  pipeline bad-mode "  - {name: a, op: identity}" "  execution: {mode: fast}" >"$tmp/bad-mode.yaml"
  pipeline bad-workers "  - {name: a, op: identity, workers: {min: 5, max: 2}}" >"$tmp/bad-workers.yaml"
  local f field
  for f in bad-gpu:spec.stages[0].resources.gpu bad-mode:spec.execution.mode bad-workers:spec.stages[0].workers; do
    field=${f#*:}; f=${f%%:*}
    if kubectl apply -f "$tmp/$f.yaml" >"$tmp/apply.out" 2>&1; then
      echo "$f: accepted"; bad=1
    elif grep -qF "$field" "$tmp/apply.out"; then
      echo "$f: rejected: $(tail -c 300 "$tmp/apply.out")"
    else
      echo "$f: rejected without naming $field: $(cat "$tmp/apply.out")"; bad=1
    fi
    kubectl -n "$NS" get pipeline "$f" >/dev/null 2>&1 && { echo "$f exists"; bad=1; }
  done
  return $bad
}
check "the CRD schema rejects bad manifests at kubectl apply, naming the field" schema_rejects
# validator messages of a manifest (its problems, not its warnings), as the CLI prints them
# without the "file:line:col: " prefix
validator_messages() { "$BINS/streambatch" validate "$1" 2>&1 | grep -v ': warning: ' | sed -n 's/^[^ ]*:[0-9]*:[0-9]*: //p'; }
controller_rejects() {
  local bad=0 name msg want
  pipeline invalid-budget "$FILTER" "  execution: {memoryBudget: 1Mi}" | sed 's/partitionSize: 64Ki/partitionSize: 4Mi/' >"$tmp/invalid-budget.yaml"
  pipeline invalid-args "  - {name: a, op: bench.sleep, args: {msPerRecrd: 1}}" >"$tmp/invalid-args.yaml"
  for name in invalid-budget invalid-args; do
    kubectl apply -f "$tmp/$name.yaml" || { bad=1; continue; }
  done
  for name in invalid-budget invalid-args; do
    wait_phase "$name" Failed 60 || { bad=1; continue; }
    msg=$(cond "$name" InvalidSpec message)
    echo "$name: InvalidSpec=$(cond "$name" InvalidSpec status) reason=$(cond "$name" InvalidSpec reason) message: $msg"
    [[ $(cond "$name" InvalidSpec status) == True && $(cond "$name" InvalidSpec reason) == InvalidSpec ]] || bad=1
    while read -r want; do
      [[ -n $want ]] || continue
      [[ $msg == *"$want"* ]] || { echo "$name: message lacks the validator's \"$want\""; bad=1; }
    done < <(validator_messages "$tmp/$name.yaml")
    has_event "$name" InvalidSpec || { echo "$name: no InvalidSpec Event: $(events "$name")"; bad=1; }
    no_worker_pods "$name" || { echo "$name: has worker pods"; bad=1; }
  done
  return $bad
}
opcheck "d: the controller rejects what only it can check: InvalidSpec with the validator's messages, phase Failed" controller_rejects

# =============================================================================================
# a. A Pipeline runs on worker pods and succeeds
# =============================================================================================
basic_run() {
  pipeline basic "$FILTER" >"$tmp/basic.yaml"
  local t0; t0=$(now)
  kubectl apply -f "$tmp/basic.yaml" || return 1
  # worker pods appear and run as containers of our worker image
  local seen="" p pid end=$((SECONDS + 90)) ctr=""
  while [[ -z $seen ]] && ! terminal basic && ((SECONDS < end)); do
    for p in $(worker_pods basic status.phase=Running); do
      pid=$(pod_pid "$NS" "$p" worker) && alive "$pid" && ctr=$(in_container "$pid" streambatch-worker 2>&1) && seen="$p"
    done
    sleep 0.3
  done
  wait_phase basic Succeeded 120 || return 1
  echo "Succeeded in $(since "$t0") s; a worker pod seen running: ${seen:-none}: $ctr"
  [[ -n $seen ]] || { echo "no worker pod was seen running in its container"; return 1; }
  figure "basic pipeline (24 files, 6 MB, filter) apply to Succeeded: $(since "$t0") s"
  check_output basic || return 1
  until_ok 30 no_worker_pods basic || { echo "worker pods left: $(worker_pods basic)"; return 1; }
  echo "events: $(events basic | tr '\n' ';')"
  has_event basic 'Started' && has_event basic 'WorkerPodsCreated' && has_event basic 'Succeeded' ||
    { echo "missing lifecycle Events (Started, WorkerPodsCreated, Succeeded)"; return 1; }
  [[ $(cond basic Complete status) == True ]] || { echo "condition Complete not True"; return 1; }
  echo "status: $(jp basic '{.status.progress} {.status.partitions}')"
  # -o wide's Mode column shows the model the run used, also without spec.execution
  local wide; wide=$(kubectl -n "$NS" get pipeline basic -o wide --no-headers)
  echo "kubectl get -o wide: $wide"
  [[ " $wide " == *" streaming "* ]] || { echo "the MODE column does not say streaming"; return 1; }
}
opcheck "a: kubectl apply -> worker pods -> Succeeded, output = independent computation, _SUCCESS, pods gone" basic_run

# t. helm test: the chart's test pod (controller image, --test-pipeline) creates a tiny Pipeline
#    (the worker image's license texts -> the worker's scratch space), follows it to Succeeded and
#    deletes it; with a source that does not exist the Pipeline fails and so does helm test
helm_test() {
  local t0; t0=$(now)
  # (the test cluster's nodes serve no container logs, so the log is read from the agent's file)
  test_log() { cat $(ls -t "$STATE"/pods/${SYS}_$DEPLOY-test_*/test.log | head -n 1) 2>/dev/null; }
  helm test "$REL" -n "$SYS" --timeout 180s >"$tmp/helm-test.out" 2>&1 || { cat "$tmp/helm-test.out"; test_log; return 1; }
  test_log | tee -a "$tmp/helm-test.out"
  figure "helm test (a tiny Pipeline through the operator): $(since "$t0") s"
  grep -q "Pipeline $SYS/$REL-helm-test Succeeded and was deleted" "$tmp/helm-test.out" ||
    { echo "the test pod's log does not say the Pipeline Succeeded"; return 1; }
  ! kubectl -n "$SYS" get pipeline "$REL-helm-test" >/dev/null 2>&1 || { echo "the test Pipeline is left"; return 1; }
  # the same test with a source that does not exist must fail, naming it
  helm upgrade "$REL" "$CHART" -n "$SYS" --reuse-values \
    --set tests.pipeline.source.uri=file:///no/such/dir/ >/dev/null || return 1
  if helm test "$REL" -n "$SYS" --timeout 180s >"$tmp/helm-test-bad.out" 2>&1; then
    cat "$tmp/helm-test-bad.out"; test_log; echo "helm test passed with a source that does not exist"; return 1
  fi
  test_log >>"$tmp/helm-test-bad.out"
  grep -E "Failed:.*no/such/dir" "$tmp/helm-test-bad.out" | head -3
  grep -qE "Failed:.*no/such/dir" "$tmp/helm-test-bad.out" || { cat "$tmp/helm-test-bad.out"; echo "the failure does not name the source"; return 1; }
  kubectl -n "$SYS" delete pipeline "$REL-helm-test" --wait=false >/dev/null 2>&1
  kubectl -n "$SYS" delete pod "$DEPLOY-test" --wait=false >/dev/null 2>&1
  helm upgrade "$REL" "$CHART" -n "$SYS" --reuse-values --set tests.pipeline.source.uri=file:///usr/share/common-licenses/ >/dev/null
}
opcheck "t: helm test runs a tiny Pipeline through the operator and passes; with a missing source it fails, naming it" helm_test

# =============================================================================================
# k. S3 end to end: data only in MinIO, keys only in a Secret, no host path in the worker pods
# =============================================================================================
# Every Pipeline of this test reads and writes MinIO; this one checks how the keys travel. The
# Pipeline names the Secret in credentialsSecret; the controller never gets the keys (no
# permission on Secrets, see g), so it cannot list the source or commit the sink itself: a
# Succeeded run proves workers did.
s3_run() {
  pipeline s3run "$FILTER" >"$tmp/s3.yaml"
  kubectl apply -f "$tmp/s3.yaml" || return 1
  local t0; t0=$(now)
  s3_pods_seen() {
    kubectl -n "$NS" get pods -l streambatch.dev/pipeline=s3run -o json >"$tmp/s3-pods.json" 2>/dev/null &&
      python3 -c 'import json,sys; sys.exit(0 if json.load(open(sys.argv[1]))["items"] else 1)' "$tmp/s3-pods.json"
  }
  until_ok 60 s3_pods_seen || { echo "no worker pod of s3run seen: $(jp s3run '{.status}')"; return 1; }
  wait_phase s3run Succeeded 150 || return 1
  figure "s3 pipeline (24 objects in MinIO, filter, s3 sink) apply to Succeeded: $(since "$t0") s"
  # the worker pods seen while it ran: keys from the Secret by reference, no hostPath volume
  python3 - "$tmp/s3-pods.json" <<'PY' || return 1
import json, sys
items = json.load(open(sys.argv[1]))["items"]
assert items, "no worker pod"
for p in items:
    vols = p["spec"].get("volumes", [])
    assert not any("hostPath" in v for v in vols), "hostPath volume in %s" % p["metadata"]["name"]
    env = {e["name"]: e for c in p["spec"]["containers"] for e in c.get("env", [])}
    ref = env.get("AWS_SECRET_ACCESS_KEY", {}).get("valueFrom", {}).get("secretKeyRef", {})
    assert ref.get("name") == "s3-creds", "no secretKeyRef for the secret key in %s" % p["metadata"]["name"]
print("worker pods checked: %d (no hostPath, keys by secretKeyRef)" % len(items))
PY
  # the output, read back from MinIO through the manifest
  check_output s3run || return 1
  # no secret value in what users and operators read: Events, the Pipeline (status included),
  # the controllers' logs and the worker pods' logs (issue 17)
  kubectl get events -A -o yaml >"$tmp/s3-events.yaml" &&
    kubectl -n "$NS" get pipeline s3run -o yaml >"$tmp/s3-pipeline.yaml" || return 1
  local logs leaks
  logs=$(ls "$STATE"/pods/${SYS}_*/*.log "$STATE"/pods/${NS}_s3run-*/*.log 2>/dev/null)
  grep -q "/${NS}_s3run-" <<<"$logs" || { echo "no worker pod log of s3run to check"; return 1; }
  leaks=$(grep -lF -- "$S3_SECRET" "$tmp/s3-events.yaml" "$tmp/s3-pipeline.yaml" $logs)
  [[ -z $leaks ]] || { echo "the secret key appears in: $leaks"; return 1; }
  echo "the secret key is in none of: Events, the Pipeline, $(wc -w <<<"$logs") controller and worker pod logs"
  kubectl -n "$NS" delete pipeline s3run --wait=false >/dev/null
}
opcheck "k: keys in a Secret (credentialsSecret) reach the worker pods by secretKeyRef, no hostPath volume, the key in no Event, status or log" s3_run

# =============================================================================================
# s. hostile peers on the cluster (issue 37): while two Pipelines run, a gRPC client of the test
#    (tests/helpers/sb_rpc_probe) calls one's Control service and worker pods without a token
#    and with the other's: UNAUTHENTICATED; with the Pipeline's own worker token it still cannot
#    Rebind (PERMISSION_DENIED) or register under a live worker's name; both Pipelines succeed;
#    no token in a pod spec or a log; the credentials Secret is the Pipeline's and goes with it
# =============================================================================================
hostile_peers() {
  local probe=${SB_BUILD_DIR:-$repo/build}/tests/helpers/sb_rpc_probe
  [[ -x $probe ]] || { echo "no $probe (make tests-build builds it)"; return 1; }
  local slow="  - {name: slow, op: bench.sleep, args: {msPerMB: 8000}, resources: {cpu: 500m}, workers: {min: 2, max: 2}}"
  pipeline hostile-a "$slow" >"$tmp/hostile-a.yaml"
  pipeline hostile-b "$slow" >"$tmp/hostile-b.yaml"
  kubectl apply -f "$tmp/hostile-a.yaml" -f "$tmp/hostile-b.yaml" >/dev/null || return 1
  running_pod() { kubectl -n "$NS" get pods -l "streambatch.dev/pipeline=$1" --field-selector status.phase=Running -o 'jsonpath={.items[0].metadata.name}' 2>/dev/null; }
  until_ok 90 bash -c "[[ -n \$(kubectl -n $NS get pods -l streambatch.dev/pipeline=hostile-a --field-selector status.phase=Running -o name) && -n \$(kubectl -n $NS get pods -l streambatch.dev/pipeline=hostile-b --field-selector status.phase=Running -o name) ]]" ||
    { echo "no Running worker pods: $(jp hostile-a '{.status.message}')"; return 1; }
  local pa ip ctl tok_a tok_b sec_a
  pa=$(running_pod hostile-a)
  ip=$(kubectl -n "$NS" get pod "$pa" -o 'jsonpath={.status.podIP}'):7070
  ctl=$(kubectl -n "$NS" get pod "$pa" -o 'jsonpath={.spec.containers[0].env[?(@.name=="SB_CONTROLLER")].value}')
  sec_a=$(kubectl -n "$NS" get pod "$pa" -o 'jsonpath={.spec.containers[0].env[?(@.name=="SB_AUTH_TOKEN")].valueFrom.secretKeyRef.name}')
  [[ -n $sec_a && -n $ctl ]] || { echo "pod $pa: no SB_AUTH_TOKEN Secret ($sec_a) or SB_CONTROLLER ($ctl)"; return 1; }
  tok_a=$(kubectl -n "$NS" get secret "$sec_a" -o 'jsonpath={.data.token}' | base64 -d)
  tok_b=$(kubectl -n "$NS" get secret -l streambatch.dev/pipeline=hostile-b -o 'jsonpath={.items[0].data.token}' | base64 -d)
  [[ ${#tok_a} == 64 && ${#tok_b} == 64 && $tok_a != "$tok_b" ]] || { echo "tokens: a ${#tok_a} chars, b ${#tok_b} chars"; return 1; }
  local bad=0 got
  expect() { # WANT ARGS...: the probe's answer must start with WANT
    local t="" a prev=""
    for a in "$@"; do [[ $prev == --token ]] && t=" (token ${a:0:6}...)"; prev=$a; done
    got=$("$probe" "${@:2}" 2>&1)
    [[ $got == "$1"* ]] && echo "  ${*:2:2}$t: $got" || { echo "  ${*:2:2}$t: got '$got', want $1"; bad=1; }
  }
  echo "worker pod $pa ($ip), controller $ctl:"
  for m in fetch rebind; do
    expect UNAUTHENTICATED "$ip" "$m" --pipeline "$NS/hostile-a"
    expect UNAUTHENTICATED "$ip" "$m" --pipeline "$NS/hostile-a" --token "$tok_b"
  done
  expect PERMISSION_DENIED "$ip" rebind --pipeline "$NS/hostile-a" --token "$tok_a"
  for m in register poll complete heartbeat; do
    expect UNAUTHENTICATED "$ctl" "$m"
    expect UNAUTHENTICATED "$ctl" "$m" --token "$tok_b"
  done
  expect PERMISSION_DENIED "$ctl" register --token "$tok_a" --worker "$pa"
  expect PERMISSION_DENIED "$ctl" heartbeat --token "$tok_a" --worker "$pa"
  ((bad == 0)) || return 1
  wait_phase hostile-a Succeeded 240 && wait_phase hostile-b Succeeded 240 || return 1
  # the token itself is in no pod spec, Event, Pipeline or log
  kubectl -n "$NS" get pods -o yaml >"$tmp/hostile-pods.yaml" 2>/dev/null
  kubectl get events -A -o yaml >"$tmp/hostile-events.yaml" && kubectl -n "$NS" get pipeline hostile-a -o yaml >"$tmp/hostile-a-out.yaml" || return 1
  local logs leaks
  logs=$(ls "$STATE"/pods/${SYS}_*/*.log "$STATE"/pods/${NS}_hostile-a-*/*.log 2>/dev/null)
  leaks=$(grep -lF -- "$tok_a" "$tmp/hostile-pods.yaml" "$tmp/hostile-events.yaml" "$tmp/hostile-a-out.yaml" $logs)
  [[ -z $leaks ]] || { echo "the worker token appears in: $leaks"; return 1; }
  # the Secret is owned by its Pipeline and goes with it
  [[ $(kubectl -n "$NS" get secret "$sec_a" -o 'jsonpath={.metadata.ownerReferences[0].name}') == hostile-a ]] ||
    { echo "Secret $sec_a is not owned by hostile-a"; return 1; }
  kubectl -n "$NS" delete pipeline hostile-a hostile-b >/dev/null || return 1
  until_ok 60 bash -c "! kubectl -n $NS get secret $sec_a >/dev/null 2>&1" || { echo "Secret $sec_a outlived its Pipeline"; return 1; }
  echo "no token in pods, Events, the Pipeline or $(wc -w <<<"$logs") logs; Secret $sec_a owned by hostile-a and deleted with it"
}
opcheck "s: hostile peers refused on the cluster: no token or another Pipeline's (UNAUTHENTICATED), a worker's token for Rebind or another worker's name (PERMISSION_DENIED); both Pipelines succeed; the token in no spec or log" hostile_peers

# =============================================================================================
# m. Prometheus on the test cluster: the controllers' and a running Pipeline's worker pods'
#    /metrics scraped by a real Prometheus; every dashboard panel, the operator's included,
#    returns data (tests/dashboard/queries.py eval --operator)
# =============================================================================================
prom_targets() { # writes file_sd targets: controller pods :8080, the pipeline's worker pods :9102
  local c w
  c=$(kubectl -n "$SYS" get pods -l app.kubernetes.io/name=streambatch-controller \
    --field-selector status.phase=Running -o 'jsonpath={range .items[*]}{.status.podIP}:8080 {end}')
  w=$(kubectl -n "$NS" get pods -l streambatch.dev/pipeline=metrics --field-selector status.phase=Running \
    -o 'jsonpath={range .items[*]}{.status.podIP}:9102 {end}')
  python3 -c 'import json,sys; print(json.dumps([{"targets": sys.argv[1:], "labels": {"job": "streambatch"}}]))' \
    $c $w >"$tmp/targets.json.tmp" && mv "$tmp/targets.json.tmp" "$tmp/targets.json"
}
prometheus_panels() {
  local pport t0 wpod wip
  pport=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
  prom_targets || return 1
  cat >"$tmp/prometheus.yml" <<Y
global: {scrape_interval: 1s, evaluation_interval: 1s}
scrape_configs:
- job_name: streambatch
  file_sd_configs: [{files: ["$tmp/targets.json"], refresh_interval: 1s}]
Y
  SB_CLUSTER_DIR=$STATE prometheus --config.file "$tmp/prometheus.yml" --storage.tsdb.path "$tmp/tsdb" \
    --web.listen-address "127.0.0.1:$pport" --log.level warn >"$tmp/prometheus.log" 2>&1 &
  PROM_PID=$!
  pipeline metrics "$FILTER
  - {name: slow, op: bench.sleep, args: {msPerMB: 60000}, workers: {min: 1, max: 2}}" >"$tmp/metrics.yaml"
  kubectl apply -f "$tmp/metrics.yaml" || return 1
  t0=$SECONDS
  until_ok 60 is_phase metrics Running || { echo "not Running: $(phase metrics)"; return 1; }
  # keep the targets current for 14 s of samples while the pipeline runs
  while ((SECONDS - t0 < 16)) && ! terminal metrics; do prom_targets; sleep 0.5; done
  terminal metrics && { echo "the pipeline ended before the queries ($(phase metrics))"; return 1; }
  wpod=$(worker_pods metrics status.phase=Running | cut -d' ' -f1)
  wip=$(kubectl -n "$NS" get pod "$wpod" -o 'jsonpath={.status.podIP}')
  curl -fsS "http://$wip:9102/metrics" >"$tmp/worker.metrics" &&
    promtool check metrics <"$tmp/worker.metrics" ||
    { echo "worker pod $wpod ($wip:9102): no /metrics or promtool found problems"; return 1; }
  grep -q "^streambatch_worker_tasks_finished_total{namespace=\"$NS\",pipeline=\"metrics\",pool=\"cpu\"" "$tmp/worker.metrics" ||
    { echo "worker pod $wpod reports no finished task of pipeline metrics"; grep tasks_finished "$tmp/worker.metrics"; return 1; }
  curl -fsS "http://127.0.0.1:$pport/api/v1/targets?state=active" | python3 -c '
import json, sys
t = json.load(sys.stdin)["data"]["activeTargets"]
print("scraped:", ", ".join("%s %s" % (x["scrapeUrl"], x["health"]) for x in t))'
  python3 "$repo/tests/dashboard/queries.py" eval "$repo/deploy/grafana/streambatch.json" \
    "http://127.0.0.1:$pport" metrics --operator || { tail -5 "$tmp/prometheus.log"; return 1; }
  # (the run would take minutes: its figures are what this case is about)
  kubectl -n "$NS" delete pipeline metrics --wait=false >/dev/null
  kill "$PROM_PID" 2>/dev/null; wait "$PROM_PID" 2>/dev/null
  PROM_PID=
}
opcheck "m: a real Prometheus scrapes the controller pods and a running Pipeline's worker pods: every dashboard panel, the operator's included, returns data" prometheus_panels
[[ -n ${PROM_PID:-} ]] && { kill "$PROM_PID" 2>/dev/null; wait "$PROM_PID" 2>/dev/null; }

# =============================================================================================
# b. A worker pod deleted mid-run
# =============================================================================================
# A CPU stage feeding a slower GPU stage (bench.sleep, 1 s per MB on 2 CPU workers, 2.5 s per MB
# on the one GPU worker): the CPU pods hold produced partitions the GPU has not consumed yet, so
# deleting one loses partitions that lineage recovery must make again (partitions.recovered > 0,
# a Recovered Event). The output is the same as (a): sleep passes records through.
SLOW_STAGES="  - {name: slow, op: bench.sleep, args: {msPerMB: MS}, resources: {cpu: 500m}, workers: {min: 2, max: 2}}
$FILTER"
LINEAGE_STAGES="  - {name: prep, op: bench.sleep, args: {msPerMB: 1000}, resources: {cpu: 500m}, workers: {min: 2, max: 2}}
  - {name: infer, op: bench.sleep, args: {msPerMB: 2500}, resources: {gpu: 1}, workers: {min: 1, max: 1}}
  - {name: small, op: filter, args: {field: 'n', op: lt, value: 30}, resources: {gpu: 1}, workers: {min: 1, max: 1}}"
pod_loss() {
  # ttlSecondsAfterFinished also checks that the controller may delete a Pipeline under its Role
  pipeline podloss "$LINEAGE_STAGES" "  ttlSecondsAfterFinished: 8" >"$tmp/podloss.yaml"
  kubectl apply -f "$tmp/podloss.yaml" || return 1
  wait_progress podloss 2 120 || return 1
  # the victim is the cpu pod holding the most partition bytes (its store gauges): the first pod
  # listed held none once (a proof run: "partitions recovered 0"), and the case is about losing
  # partitions that are still needed
  local victim="" pid held best end=$((SECONDS + 30)) p ip
  while [[ -z $victim ]] && ((SECONDS < end)); do
    best=0
    for p in $(worker_pods podloss status.phase=Running); do
      [[ $p == podloss-cpu-* ]] || continue
      ip=$(kubectl -n "$NS" get pod "$p" -o 'jsonpath={.status.podIP}')
      held=$(curl -fsS --max-time 2 "http://$ip:9102/metrics" 2>/dev/null | awk '
        /^streambatch_worker_store_(memory|spilled)_bytes[{ ]/ { s += $NF } END { printf "%d\n", s }')
      ((${held:-0} > best)) && best=$held victim=$p
    done
    [[ -n $victim ]] || sleep 0.5
  done
  [[ -n $victim ]] || { echo "no running cpu worker pod held a partition within 30 s"; return 1; }
  echo "victim $victim holds $best partition bytes"
  pid=$(pod_pid "$NS" "$victim" worker)
  echo "deleting cpu worker pod $victim (pid $pid) at $(jp podloss '{.status.progress}')"
  kubectl -n "$NS" delete pod "$victim" --wait=false || return 1
  wait_phase podloss Succeeded 180 || return 1
  echo "status: $(jp podloss '{.status.progress} {.status.partitions}')"
  local recovered; recovered=$(jp podloss '{.status.partitions.recovered}')
  figure "pod loss: cpu pod deleted mid-run: partitions recovered ${recovered:-0} (re-made by lineage), total $(jp podloss '{.status.partitions.total}')"
  ((${recovered:-0} > 0)) || { echo "no partition was recovered: the deleted pod held none?"; return 1; }
  [[ $(output_digest podloss) == $(output_digest basic) ]] || { echo "output differs from the clean run (a)"; return 1; }
  check_output podloss || return 1
  echo "events: $(events podloss | tr '\n' ';')"
  has_event podloss 'WorkerPodFailed' || { echo "no WorkerPodFailed Event"; return 1; }
  has_event podloss 'Recovered' || { echo "no Recovered Event"; return 1; }
  until_ok 30 no_worker_pods podloss || { echo "worker pods left"; return 1; }
  until_ok 40 bash -c "! kubectl -n $NS get pipeline podloss >/dev/null 2>&1" ||
    { echo "ttlSecondsAfterFinished: 8 did not delete the Pipeline"; return 1; }
  echo "deleted by ttlSecondsAfterFinished"
}
opcheck "b: a cpu worker pod holding partitions deleted mid-run -> recovered by lineage, Succeeded, output identical to the clean run, WorkerPodFailed and Recovered Events; TTL deletes it" pod_loss

# =============================================================================================
# c. The leading controller killed mid-run
# =============================================================================================
# sink_parts NAME: the names of the part objects in the sink now
sink_parts() {
  local k; k=$(s3_keys "out/$1/") || return 1
  awk '{ n = $1; sub(".*/", "", n) } n ~ /^part-/ { print n }' <<<"$k"
}
# checkpoint_ids NAME: the ids of the sink parts in the pipeline's checkpoint log beside its
# sink (out/NAME/_streambatch/checkpoint/: a base and segments, each "parts <n>" and n lines
# "<id>:<rows>:<bytes>:<crc32c>"), every file read from MinIO
checkpoint_ids() {
  local k f
  k=$(s3_keys "out/$1/_streambatch/checkpoint/") || return 1
  for f in $(awk '$1 ~ /[.]sbck$/ { print $1 }' <<<"$k"); do
    s3c "$S3_EP/$BUCKET/$f" || return 1
  done | awk '/^parts [0-9]+$/ { n = $2; next } n > 0 { split($0, a, ":"); print a[1]; n-- }' | sort -u
}
# checkpoint_files IDS: "name etag last-modified" of the sink part of every id in the file IDS,
# as MinIO lists them (a part written again gets a new last-modified time, in milliseconds)
checkpoint_files() {
  s3_keys "out/$2/" >"$tmp/ck.keys" || return 1
  python3 -c '
import sys
objs = {}
for l in open(sys.argv[1]):
    k, etag, lm = l.split()
    objs[k.rsplit("/", 1)[-1]] = (etag, lm)
for pid in open(sys.argv[2]).read().split():
    f = sorted(n for n in objs if n.startswith("part-" + pid + "."))
    if not f:
        print("MISSING part-%s.*" % pid); continue
    print(f[0], *objs[f[0]])
' "$tmp/ck.keys" "$1"
}
failover() {
  pipeline failover "${SLOW_STAGES/MS/8000}" >"$tmp/failover.yaml"
  kubectl apply -f "$tmp/failover.yaml" || return 1
  # wait for checkpointed parts, then take the checkpoint just before the kill
  until_ok 120 bash -c "n=\$(kubectl -n $NS get pipeline failover -o 'jsonpath={.status.checkpoint.parts}' 2>/dev/null); ((\${n:-0} >= 3))" ||
    { echo "no checkpoint with 3 parts: $(jp failover '{.status}')"; return 1; }
  local old lpod pid before ck
  old=$(holder); lpod=$(leader_pod) || { echo "no leader"; return 1; }
  pid=$(pod_pid "$SYS" "$lpod" controller) && alive "$pid" || { echo "no process for $lpod"; return 1; }
  ck=$(jp failover '{.status.checkpoint}')
  checkpoint_ids failover >"$tmp/ck.ids" || { echo "cannot read the checkpoint log"; return 1; }
  checkpoint_files "$tmp/ck.ids" failover >"$tmp/ck.before" || { echo "cannot list the sink"; return 1; }
  grep -q MISSING "$tmp/ck.before" && { cat "$tmp/ck.before"; echo "checkpointed parts missing in the sink"; return 1; }
  (($(wc -l <"$tmp/ck.before") >= 3)) || { cat "$tmp/ck.before"; echo "fewer than 3 checkpointed parts found in the sink"; return 1; }
  local t_kill; t_kill=$(now)
  kill -KILL "$pid"
  echo "killed leader $old (pod $lpod, pid $pid) at checkpoint $ck"
  local h="" end=$((SECONDS + LEASE_S + 4 * RETRY_S + 10))
  while ((SECONDS < end)); do
    h=$(holder); [[ -n $h && $h != "$old" ]] && break; sleep 0.2
  done
  local took; took=$(since "$t_kill")
  sink_parts failover >"$tmp/parts.at-takeover" || { echo "cannot list the sink"; return 1; }
  [[ -n $h && $h != "$old" ]] || { echo "no new leader ${took}s after the kill"; return 1; }
  echo "new leader $h after $took s"
  figure "failover: new leader $h leads $took s after SIGKILL of the leader (lease ${LEASE_S}s, retry ${RETRY_S}s)"
  python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) <= $LEASE_S + $RETRY_S + 3 else 1)" "$took" ||
    { echo "takeover took longer than the lease time ($LEASE_S s + retry $RETRY_S s + 3 s polling)"; return 1; }
  wait_phase failover Succeeded 180 || return 1
  check_output failover || return 1
  checkpoint_files "$tmp/ck.ids" failover >"$tmp/ck.after.all" || { echo "cannot list the sink"; return 1; }
  local changed
  changed=$(grep -vxF -f "$tmp/ck.after.all" "$tmp/ck.before" | wc -l)
  echo "checkpointed before the kill: $(wc -l <"$tmp/ck.before") parts; rewritten since: $changed"
  echo "events: $(events failover | tr '\n' ';')"
  local took_over; took_over=$(events failover | grep '^TookOver:' | head -n 1)
  echo "events: $(events failover | grep -E '^(CheckpointLoaded|InvalidCheckpoint):' | tr '\n' ';')"
  figure "failover: ${took_over:-no TookOver event}; committed parts rewritten after the kill: $changed of $(wc -l <"$tmp/ck.before")"
  failover_rerun_figures "$changed"
  ((changed == 0)) || { echo "committed parts were rewritten:"; grep -vxF -f "$tmp/ck.after.all" "$tmp/ck.before"; return 1; }
  [[ -n $took_over ]] || { echo "no TookOver Event"; return 1; }
  has_event failover CheckpointLoaded || { echo "the new leader did not read the checkpoint log"; return 1; }
  has_event failover InvalidCheckpoint && { echo "the checkpoint log was refused"; return 1; }
  [[ -z $(s3_keys "out/failover/_streambatch/") ]] || { echo "the checkpoint log is left after the commit"; return 1; }
  until_ok 30 no_worker_pods failover
}
# Work re-run by the new leader. The filter is fused into the sleep stage (one pool), so each
# split is one task that writes one sink part named by the split (s0-t<split>-p0): a re-run
# writes the same name again. The new leader runs every split outside the checkpoint it resumed
# from, so sink parts already on disk at the takeover but not checkpointed (finished by the old
# leader's workers after its last status write) are work done twice; checkpointed parts must
# not be rewritten (checked by ETag and last-modified time above).
failover_rerun_figures() {
  python3 - "$tmp/ck.before" "$tmp/parts.at-takeover" "$(jp failover '{.status.partitions.total}')" "$1" <<'PY2' | sed 's/^/figure: failover: /'
import sys
ck = {l.split()[0] for l in open(sys.argv[1]) if l.strip()}
disk = {l.strip() for l in open(sys.argv[2]) if l.strip()}
total = int(sys.argv[3] or 0)
twice = disk - ck
print("splits committed in the checkpoint at the kill %d of %d; the new leader ran the other %d" % (len(ck), total, total - len(ck)))
print("sink parts in MinIO at takeover %d: %d checkpointed (not re-run), %d finished after the last checkpoint write (re-run: work done twice)"
      % (len(disk), len(ck), len(twice)))
print("tasks re-run: %d finished but uncheckpointed (plus the tasks in flight at the kill); committed parts rewritten: %s of %d" % (len(twice), sys.argv[4], len(ck)))
PY2
}
opcheck "c: SIGKILL of the leading controller mid-run -> the other leads within the lease time, Succeeded, committed parts not rewritten" failover

# =============================================================================================
# e. GPU stage with no GPU capacity; suspend and resume
# =============================================================================================
gpu_pending() {
  pipeline gpu-pending "  - {name: prep, op: identity, resources: {cpu: 100m}}
  - {name: infer, op: bench.sleep, args: {msPerMB: 1}, resources: {gpu: 2}, workers: {min: 1, max: 8}}" >"$tmp/gpu.yaml"
  kubectl apply -f "$tmp/gpu.yaml" || return 1
  until_ok 60 bash -c "[[ -n \$(kubectl -n $NS get pods -l streambatch.dev/pipeline=gpu-pending,streambatch.dev/pool=gpu -o name) ]]" ||
    { echo "no gpu pod was created"; return 1; }
  # sample the Pending gpu pods for 20 s: never more than --max-pending-pods
  local max=0 n i end=$((SECONDS + 20))
  while ((SECONDS < end)); do
    n=$(kubectl -n "$NS" get pods -l streambatch.dev/pipeline=gpu-pending,streambatch.dev/pool=gpu \
      --field-selector status.phase=Pending -o name | wc -l)
    ((n > max)) && max=$n
    sleep 1
  done
  figure "gpu stage without capacity: at most $max Pending gpu pods over 20 s (--max-pending-pods=$MAX_PENDING)"
  ((max >= 1 && max <= MAX_PENDING)) || { echo "Pending gpu pods: max $max, bound $MAX_PENDING"; return 1; }
  until_ok 30 bash -c "[[ \$(kubectl -n $NS get pipeline gpu-pending -o 'jsonpath={.status.conditions[?(@.type==\"WorkersPending\")].status}') == True ]]" ||
    { echo "no WorkersPending=True: $(jp gpu-pending '{.status.conditions}')"; return 1; }
  local reason msg
  reason=$(cond gpu-pending WorkersPending reason); msg=$(cond gpu-pending WorkersPending message)
  echo "WorkersPending: $reason: $msg; phase $(phase gpu-pending)"
  [[ $reason == Unschedulable && $msg == *"pool gpu"* && $msg == *"nvidia.com/gpu"* ]] ||
    { echo "WorkersPending should say Unschedulable, name pool gpu and the missing nvidia.com/gpu"; return 1; }
  terminal gpu-pending && { echo "the pipeline ended"; return 1; }
  # suspend: every pod goes, Pending ones included
  kubectl -n "$NS" patch pipeline gpu-pending --type merge -p '{"spec":{"suspend":true}}' || return 1
  wait_phase gpu-pending Suspended 30 || return 1
  until_ok 30 no_worker_pods gpu-pending || { echo "pods left while suspended: $(worker_pods gpu-pending)"; return 1; }
  [[ $(cond gpu-pending Suspended status) == True ]] || { echo "condition Suspended not True"; return 1; }
  kubectl -n "$NS" delete pipeline gpu-pending --wait=false >/dev/null
}
opcheck "e: a GPU stage no node can hold -> <= $MAX_PENDING Pending pods, WorkersPending Unschedulable; suspend -> pods gone, Suspended" gpu_pending
suspend_resume() {
  pipeline suspend "${SLOW_STAGES/MS/3000}" >"$tmp/suspend.yaml"
  kubectl apply -f "$tmp/suspend.yaml" || return 1
  wait_progress suspend 2 90 || return 1
  kubectl -n "$NS" patch pipeline suspend --type merge -p '{"spec":{"suspend":true}}' || return 1
  wait_phase suspend Suspended 30 || return 1
  until_ok 30 no_worker_pods suspend || { echo "pods left while suspended: $(worker_pods suspend)"; return 1; }
  local c1; c1=$(committed suspend)
  sleep 4
  no_worker_pods suspend && is_phase suspend Suspended || { echo "suspended pipeline started pods again"; return 1; }
  echo "suspended at $(jp suspend '{.status.progress}')"
  kubectl -n "$NS" patch pipeline suspend --type merge -p '{"spec":{"suspend":false}}' || return 1
  wait_phase suspend Succeeded 180 || return 1
  check_output suspend || return 1
  echo "events: $(events suspend | tr '\n' ';')"
  has_event suspend Suspended && has_event suspend Resumed || { echo "no Suspended/Resumed Events"; return 1; }
  [[ $(committed suspend) -ge $c1 ]] || return 1
  until_ok 30 no_worker_pods suspend
}
opcheck "e: suspend mid-run -> pods gone, phase Suspended; resume -> Succeeded with the right output" suspend_resume

# A running pipeline: stages[].workers changes apply live (the pool grows); a change that cannot
# be applied live (the sink) is refused with a condition and an Event, and the old spec runs on.
spec_change() {
  pipeline respec "${SLOW_STAGES/MS/4000}" >"$tmp/respec.yaml"
  kubectl apply -f "$tmp/respec.yaml" || return 1
  wait_progress respec 1 90 || return 1
  kubectl -n "$NS" patch pipeline respec --type json \
    -p '[{"op":"replace","path":"/spec/stages/0/workers","value":{"min":3,"max":3}}]' || return 1
  until_ok 30 bash -c "[[ \$(kubectl -n $NS get pods -l streambatch.dev/pipeline=respec,streambatch.dev/pool=cpu --field-selector status.phase=Running -o name | wc -l) -ge 3 ]]" ||
    { echo "workers min 3 was not applied live: pods $(worker_pods respec)"; return 1; }
  [[ $(cond respec SpecChangeRefused status) != True ]] || { echo "a workers change was refused"; return 1; }
  echo "workers 2 -> 3 applied live at $(jp respec '{.status.progress}')"
  kubectl -n "$NS" patch pipeline respec --type merge -p "{\"spec\":{\"sink\":{\"uri\":\"s3://$BUCKET/out/elsewhere/\"}}}" || return 1
  until_ok 30 bash -c "[[ \$(kubectl -n $NS get pipeline respec -o 'jsonpath={.status.conditions[?(@.type==\"SpecChangeRefused\")].status}') == True ]]" ||
    { echo "no SpecChangeRefused=True: $(jp respec '{.status.conditions}')"; return 1; }
  local msg; msg=$(cond respec SpecChangeRefused message)
  echo "SpecChangeRefused: $msg"
  [[ $msg == *spec.sink* ]] || { echo "the condition does not name spec.sink"; return 1; }
  has_event respec SpecChangeRefused || { echo "no SpecChangeRefused Event"; return 1; }
  wait_phase respec Succeeded 180 || return 1
  check_output respec || return 1   # written to the sink it started with
  local elsewhere; elsewhere=$(s3_keys out/elsewhere/) || { echo "cannot list s3://$BUCKET/out/elsewhere/"; return 1; }
  [[ -z $elsewhere ]] || { echo "the refused sink was written: $elsewhere"; return 1; }
  until_ok 20 bash -c "[[ \$(kubectl -n $NS get pipeline respec -o 'jsonpath={.status.conditions[?(@.type==\"SpecChangeRefused\")].status}') != True ]]" ||
    { echo "SpecChangeRefused still True after the pipeline finished"; return 1; }
  kubectl -n "$NS" delete pipeline respec --wait=false >/dev/null
}
opcheck "i: a running pipeline applies a workers change live and refuses a sink change with SpecChangeRefused, finishing on its old spec" spec_change

# Suspended, the sink changed, resumed: the committed parts belong to the old sink, so the
# checkpoint is discarded (its specHash differs) and everything is written to the new sink.
respec_suspended() {
  pipeline moved "${SLOW_STAGES/MS/3000}" >"$tmp/moved.yaml"
  kubectl apply -f "$tmp/moved.yaml" || return 1
  wait_progress moved 2 90 || return 1
  kubectl -n "$NS" patch pipeline moved --type merge -p '{"spec":{"suspend":true}}' || return 1
  wait_phase moved Suspended 30 || return 1
  local c1; c1=$(committed moved)
  [[ -n $(jp moved '{.status.checkpoint.specHash}') ]] || { echo "no checkpoint.specHash"; return 1; }
  kubectl -n "$NS" patch pipeline moved --type merge \
    -p "{\"spec\":{\"suspend\":false,\"sink\":{\"uri\":\"s3://$BUCKET/out/moved2/\"}}}" || return 1
  wait_phase moved Succeeded 180 || return 1
  echo "suspended at $c1 committed; events: $(events moved | tr '\n' ';')"
  has_event moved CheckpointDiscarded || { echo "no CheckpointDiscarded Event"; return 1; }
  check_output moved2 || return 1
  kubectl -n "$NS" delete pipeline moved --wait=false >/dev/null
}
opcheck "j: suspended, sink changed, resumed -> checkpoint discarded (CheckpointDiscarded), complete output in the new sink" respec_suspended

# =============================================================================================
# f. Delete a Pipeline mid-run
# =============================================================================================
worker_procs_of() { # NAME: pids of streambatch-worker processes of the pipeline (any left?)
  local f pid env
  for f in /proc/[0-9]*/environ; do
    pid=${f#/proc/}; pid=${pid%/environ}
    env=$({ tr '\0' '\n' <"$f"; } 2>/dev/null) || continue
    grep -qxF "SB_CLUSTER_DIR=$STATE" <<<"$env" || continue
    grep -qE "^(SB_PIPELINE=$NS/$1|SB_POD_NAME=$1-(cpu|gpu)-[a-z0-9]{5})\$" <<<"$env" || continue
    [[ $(readlink "/proc/$pid/exe" 2>/dev/null) == *streambatch-worker* ]] && echo "$pid"
  done
}
delete_mid_run() {
  pipeline doomed "${SLOW_STAGES/MS/20000}" >"$tmp/doomed.yaml"
  kubectl apply -f "$tmp/doomed.yaml" || return 1
  until_ok 90 bash -c "[[ \$(kubectl -n $NS get pods -l streambatch.dev/pipeline=doomed --field-selector status.phase=Running -o name | wc -l) -ge 2 ]]" ||
    { echo "2 running worker pods not seen"; return 1; }
  sleep 2
  local pids; pids=$(worker_procs_of doomed | tr '\n' ' ')
  echo "worker processes of doomed: $pids; finalizers: $(kubectl -n "$NS" get pipeline doomed -o 'jsonpath={.metadata.finalizers}')"
  [[ -n $pids ]] || { echo "no worker process found for doomed"; return 1; }
  [[ $(kubectl -n "$NS" get pipeline doomed -o 'jsonpath={.metadata.finalizers}') == *streambatch.dev/finalizer* ]] ||
    { echo "no streambatch.dev/finalizer"; return 1; }
  local t0; t0=$(now)
  kubectl -n "$NS" delete pipeline doomed --wait=false || return 1
  until_ok 60 bash -c "! kubectl -n $NS get pipeline doomed >/dev/null 2>&1" || { echo "the Pipeline is still there: $(jp doomed '{.metadata}')"; return 1; }
  figure "delete mid-run: Pipeline gone $(since "$t0") s after kubectl delete"
  until_ok 30 no_worker_pods doomed || { echo "pods left: $(worker_pods doomed)"; return 1; }
  local p
  until_ok 20 bash -c "for p in $pids; do kill -0 \$p 2>/dev/null && exit 1; done; exit 0" || { echo "worker processes still alive: $pids"; return 1; }
  p=$(worker_procs_of doomed)
  [[ -z $p ]] || { echo "orphan worker processes: $p"; return 1; }
}
opcheck "f: kubectl delete of a running Pipeline -> pods and worker processes gone, finalizer removed, object gone" delete_mid_run

# =============================================================================================
# h. 100 Pipelines at once
# =============================================================================================
NLOAD=${SB_OPTEST_PIPELINES:-100}
LOAD_TIMEOUT=${SB_OPTEST_LOAD_TIMEOUT:-300}
controller_requests() { # requests the API server dispatched for the controller's ServiceAccount
  kubectl get --raw /metrics | awk '/^apiserver_flowcontrol_dispatched_requests_total\{/ && /flow_schema="streambatch-controller-test"/ {s += $NF} END {printf "%d\n", s}'
}
many_pipelines() {
  kubectl create namespace sb-load >/dev/null && s3_secret sb-load || return 1
  mkdir -p "$tmp/tiny" && python3 -c "
import json
with open('$tmp/tiny/a.jsonl', 'w') as o:
    for i in range(200): o.write(json.dumps({'id': i, 'n': i % 100}) + '\n')" &&
    s3c -T "$tmp/tiny/a.jsonl" "$S3_EP/$BUCKET/tiny/a.jsonl" -o /dev/null || return 1
  local i
  for i in $(seq -f '%03g' 0 $((NLOAD - 1))); do
    PNS=sb-load SRC=tiny pipeline "load-$i" "  - {name: a, op: identity, resources: {cpu: 10m, memory: 32Mi}, workers: {min: 1, max: 1}}"
    echo "---"
  done >"$tmp/load.yaml"
  # the controller's idle request rate (Lease renewals of both replicas), to report net figures
  local r0 r1 t0 idle
  r0=$(controller_requests); sleep 10; r1=$(controller_requests); idle=$((r1 - r0))
  t0=$(now)
  kubectl apply -f "$tmp/load.yaml" >/dev/null || return 1
  local end=$((SECONDS + LOAD_TIMEOUT)) done=0 phases
  while ((SECONDS < end)); do
    phases=$(kubectl -n sb-load get pipelines -o 'jsonpath={range .items[*]}{.status.phase}{"\n"}{end}')
    done=$(grep -cE '^(Succeeded|Failed)$' <<<"$phases")
    ((done == NLOAD)) && break
    sleep 2
  done
  local took; took=$(since "$t0")
  local r2 succ; r2=$(controller_requests); succ=$(grep -c '^Succeeded$' <<<"$phases")
  echo "$done of $NLOAD terminal after $took s ($succ Succeeded); phases: $(sort <<<"$phases" | uniq -c | tr '\n' ' ')"
  local lpod pid hwm
  lpod=$(leader_pod) && pid=$(pod_pid "$SYS" "$lpod" controller) &&
    hwm=$(awk '/^VmHWM/ {printf "%.1f", $2 / 1024}' "/proc/$pid/status")
  local gross=$((r2 - r1)) secs
  secs=${took%.*}
  figure "$NLOAD pipelines: $done terminal ($succ Succeeded) in $took s after one kubectl apply"
  figure "$NLOAD pipelines: controller API requests $gross in all = $(python3 -c "print('%.1f' % ($gross / $NLOAD))") per Pipeline; net of the idle rate ($idle per 10 s, Lease renewals) $(python3 -c "print('%.1f' % (($gross - $idle * $secs / 10) / $NLOAD))") per Pipeline"
  figure "$NLOAD pipelines: leading controller ($lpod, pid ${pid:-?}) peak memory VmHWM ${hwm:-?} MiB"
  local p; for p in $(controller_pods); do
    [[ $p == "$lpod" ]] && continue
    pid=$(pod_pid "$SYS" "$p" controller) && figure "$NLOAD pipelines: standby controller ($p) VmHWM $(awk '/^VmHWM/ {printf "%.1f", $2 / 1024}' "/proc/$pid/status") MiB"
  done
  ((done == NLOAD)) || { echo "not all terminal within ${LOAD_TIMEOUT}s"; return 1; }
  ((succ == NLOAD)) || { echo "not all Succeeded: $(kubectl -n sb-load get pipelines -o 'jsonpath={range .items[*]}{.metadata.name} {.status.phase} {.status.message}{"\n"}{end}' | grep -v Succeeded | head -5)"; return 1; }
  ((gross > 0)) || { echo "no controller requests counted (FlowSchema metric missing?)"; return 1; }
}
opcheck "h: $NLOAD Pipelines applied at once all reach a terminal phase within ${LOAD_TIMEOUT}s" many_pipelines

# =============================================================================================
# p. The chart's policy: the ValidatingAdmissionPolicy refuses a Pipeline that mounts a Secret
#    or tolerates every taint (kubectl apply names the field), helm upgrade with the Secret in
#    pipelinePolicy.volumes.secretNames lets it in; the controller's per-Pipeline NetworkPolicy
#    is owned by the Pipeline and garbage-collected with it.
# =============================================================================================
policy_refuses() {
  pipeline mounts-secret "  - {name: s, op: identity, workers: {min: 1, max: 1}}" "  workerTemplate: {volumes: [{name: creds, secret: {secretName: db-pass}}], volumeMounts: [{name: creds, mountPath: /creds}]}
  suspend: true" >"$tmp/mounts-secret.yaml"
  ! kubectl apply -f "$tmp/mounts-secret.yaml" >"$tmp/apply.out" 2>&1 || { echo "accepted: $(cat "$tmp/apply.out")"; return 1; }
  cat "$tmp/apply.out"
  grep -q 'ValidatingAdmissionPolicy' "$tmp/apply.out" &&
    grep -qF 'spec.workerTemplate.volumes[name=creds].secret.secretName "db-pass"' "$tmp/apply.out" &&
    grep -q 'pipelinePolicy.volumes.secretNames' "$tmp/apply.out" || { echo "the refusal does not name the field and the value"; return 1; }
  pipeline tolerates-all "  - {name: s, op: identity, workers: {min: 1, max: 1}}" "  workerTemplate: {tolerations: [{operator: Exists}]}
  suspend: true" >"$tmp/tolerates-all.yaml"
  ! kubectl apply -f "$tmp/tolerates-all.yaml" >"$tmp/apply.out" 2>&1 || { echo "accepted: $(cat "$tmp/apply.out")"; return 1; }
  cat "$tmp/apply.out"
  grep -q 'spec.workerTemplate.tolerations: a toleration without a key' "$tmp/apply.out" || return 1
  ! kubectl -n "$NS" get pipeline mounts-secret tolerates-all >/dev/null 2>&1 || { echo "a refused Pipeline exists"; return 1; }
}
opcheck "p: the chart's Pipeline policy refuses a secret volume and a keyless Exists toleration at kubectl apply, naming the field" policy_refuses
policy_allow_list() {
  helm upgrade "$REL" "$CHART" -n "$SYS" --reuse-values --set 'pipelinePolicy.volumes.secretNames={db-pass}' >/dev/null || return 1
  kubectl get validatingadmissionpolicy "$DEPLOY-pipelines" -o 'jsonpath={.spec.variables[0].expression}' | grep -q db-pass ||
    { echo "the policy does not list db-pass"; return 1; }
  # the API server's policy cache follows the update within a few seconds
  until_ok 30 kubectl apply -f "$tmp/mounts-secret.yaml" || { echo "still refused: $(kubectl apply -f "$tmp/mounts-secret.yaml" 2>&1)"; return 1; }
  [[ $(jp mounts-secret '{.spec.workerTemplate.volumes[0].secret.secretName}') == db-pass ]] || return 1
  echo "with pipelinePolicy.volumes.secretNames={db-pass} the Pipeline is accepted"
  kubectl -n "$NS" delete pipeline mounts-secret --wait=false >/dev/null
}
opcheck "p: with pipelinePolicy.volumes.secretNames listing the Secret, the same Pipeline is accepted" policy_allow_list
netpol_of() { kubectl -n "$NS" get networkpolicy "streambatch-$1" -o json 2>/dev/null; }
per_pipeline_netpol() {
  pipeline fenced "  - {name: s, op: identity, workers: {min: 1, max: 1}}" >"$tmp/fenced.yaml"
  kubectl apply -f "$tmp/fenced.yaml" || return 1
  until_ok 60 netpol_of fenced >/dev/null || { echo "no NetworkPolicy streambatch-fenced in $NS"; return 1; }
  local uid; uid=$(jp fenced '{.metadata.uid}')
  netpol_of fenced | python3 -c '
import json, sys
np = json.load(sys.stdin)
uid, sysns = sys.argv[1], sys.argv[2]
refs = np["metadata"].get("ownerReferences", [])
assert [(r["kind"], r["name"], r["uid"], r.get("controller")) for r in refs] == [("Pipeline", "fenced", uid, True)], refs
sel = np["spec"]["podSelector"]["matchLabels"]
assert sel == {"streambatch.dev/pipeline": "fenced", "app.kubernetes.io/name": "streambatch-worker"}, sel
ing = np["spec"]["ingress"]
assert len(ing) == 1 and ing[0]["ports"] == [{"port": 7070, "protocol": "TCP"}], ing
peers = ing[0]["from"]
assert peers[0]["podSelector"]["matchLabels"] == sel, peers
assert peers[1]["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": sysns}, peers
assert peers[1]["podSelector"]["matchLabels"]["app.kubernetes.io/name"] == "streambatch-controller", peers
print("NetworkPolicy streambatch-fenced: owned by Pipeline fenced (%s), 7070 from its workers and the controllers, no 9102 peer" % uid)
' "$uid" "$SYS" || return 1
  kubectl -n "$NS" delete pipeline fenced --wait=false >/dev/null || return 1
  local t0; t0=$(now)
  until_ok 90 bash -c "! kubectl -n $NS get networkpolicy streambatch-fenced >/dev/null 2>&1" ||
    { echo "the NetworkPolicy outlived its Pipeline"; return 1; }
  figure "per-Pipeline NetworkPolicy garbage-collected $(since "$t0") s after kubectl delete of the Pipeline"
}
opcheck "p: the controller creates a NetworkPolicy per Pipeline (7070 from its workers and the controllers), owned by it and garbage-collected with it" per_pipeline_netpol

# =============================================================================================
# r. no secret in any output (issue 37): a Pipeline whose http source is a presigned-looking URL
#    with userinfo, refused by the server, fails; its status, the Events, the controllers' and
#    the worker pods' logs (SB_S3_VERBOSE=1 on the workers) name the host and path, never the
#    credential, signature, token, password or the S3 secret key
# =============================================================================================
presigned_fails() {
  local q="X-Amz-Credential=SECRETCRED&X-Amz-Signature=SECRETSIG&X-Amz-Security-Token=SECRETTOK"
  local url="${S3_EP/:\/\//://SECRETUSER:SECRETPASS@}/$BUCKET/in/nothing.jsonl?$q"
  cat >"$tmp/presigned.yaml" <<EOF
apiVersion: streambatch.dev/v1alpha1
kind: Pipeline
metadata: {name: presigned, namespace: $NS}
spec:
  source: {uri: '$url', format: jsonl}
  stages:
  - {name: a, op: identity}
  sink: {uri: 's3://$BUCKET/out/presigned/', format: jsonl, credentialsSecret: s3-creds}
  workerTemplate:
    env: [{name: SB_S3_VERBOSE, value: "1"}]
EOF
  kubectl apply -f "$tmp/presigned.yaml" || return 1
  wait_phase presigned Failed 150 || return 1
  # the spec holds the URL as written: only what the controller writes is searched
  kubectl get events -A -o yaml >"$tmp/presigned-events.yaml" &&
    jp presigned '{.status}' >"$tmp/presigned-status.json" || return 1
  local msg logs leaks where="${S3_EP#*://}/$BUCKET/in/nothing.jsonl"
  msg=$(jp presigned '{.status.message}')
  grep -qF "$where" <<<"$msg" || { echo "status.message does not name $where: $msg"; return 1; }
  logs=$(ls "$STATE"/pods/${SYS}_*/*.log "$STATE"/pods/${NS}_presigned-*/*.log 2>/dev/null)
  grep -q "/${NS}_presigned-" <<<"$logs" || { echo "no worker pod log of presigned to check"; return 1; }
  leaks=$(grep -lE -e "SECRET(CRED|SIG|TOK|USER|PASS)" -e "$S3_SECRET" \
    "$tmp/presigned-events.yaml" "$tmp/presigned-status.json" $logs)
  if [[ -n $leaks ]]; then
    echo "a secret appears in: $leaks"
    grep -hoE ".{0,80}SECRET(CRED|SIG|TOK|USER|PASS).{0,20}" $leaks | head -5
    return 1
  fi
  echo "status.message: $msg"
  echo "no secret in: Events, the Pipeline's status, $(wc -w <<<"$logs") controller and worker pod logs"
  kubectl -n "$NS" delete pipeline presigned --wait=false >/dev/null
}
opcheck "r: a Pipeline failing on a presigned URL with userinfo: status, Events and logs name host and path, no secret" presigned_fails

# =============================================================================================
# n. helm upgrade to a next chart version whose CRD has a new property: the CRD is updated
#    (Helm never upgrades crds/, so the chart ships it as a template), the Deployment rolls
#    out, the Pipelines are untouched; helm uninstall keeps the CRD and the Pipelines.
# =============================================================================================
crd_has() { # PROPERTY: the live CRD's workerTemplate has it
  kubectl get crd pipelines.streambatch.dev -o json | python3 -c '
import json, sys
d = json.load(sys.stdin)
p = d["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["workerTemplate"]["properties"]
sys.exit(0 if sys.argv[1] in p else 1)' "$1"
}
upgrade_crd() {
  local next=$tmp/next-chart before
  rm -rf "$next" && cp -r "$CHART" "$next" || return 1
  sed -i 's/^version: .*/version: 0.1.1/' "$next/Chart.yaml"
  python3 - "$next/crd/pipelines.streambatch.dev.yaml" <<'PY' || return 1
import sys, yaml
p = sys.argv[1]
d = yaml.safe_load(open(p))
wt = d["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["workerTemplate"]["properties"]
wt["upgradeProbe"] = {"type": "string", "description": "added by the next chart version (test)"}
yaml.safe_dump(d, open(p, "w"), sort_keys=False)
PY
  ! crd_has upgradeProbe || { echo "the installed CRD already has the property"; return 1; }
  before=$(kubectl get pipelines -A --no-headers 2>/dev/null | wc -l)
  helm upgrade "$REL" "$next" -n "$SYS" "${HELM_IMAGES[@]}" --set controller.maxPendingPods=$MAX_PENDING || return 1
  crd_has upgradeProbe || { echo "helm upgrade did not update the CRD"; return 1; }
  kubectl -n "$SYS" rollout status "deployment/$DEPLOY" --timeout=120s || return 1
  [[ $(kubectl get pipelines -A --no-headers 2>/dev/null | wc -l) == "$before" ]] ||
    { echo "Pipelines before $before, after $(kubectl get pipelines -A --no-headers | wc -l)"; return 1; }
  echo "CRD updated by helm upgrade (0.1.0 -> 0.1.1), Deployment rolled out, $before Pipelines kept"
  helm uninstall "$REL" -n "$SYS" --wait --timeout 120s || return 1
  kubectl get crd pipelines.streambatch.dev >/dev/null || { echo "helm uninstall removed the CRD"; return 1; }
  [[ $(kubectl get pipelines -A --no-headers 2>/dev/null | wc -l) == "$before" ]] ||
    { echo "helm uninstall removed Pipelines"; return 1; }
  echo "helm uninstall kept the CRD (helm.sh/resource-policy: keep) and the $before Pipelines"
}
opcheck "n: helm upgrade updates the CRD (a new property), rolls the controllers, keeps the Pipelines; uninstall keeps the CRD" upgrade_crd
opcheck "x: the controllers' logs hold no API call refused to their ServiceAccount" no_rbac_denials

finish
