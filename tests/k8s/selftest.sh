#!/usr/bin/env bash
# Self-test of the test cluster (make k8s-selftest): starts a private cluster, checks that the
# scheduler, controller-manager, node agent, service-account tokens, server-side apply, helm
# and garbage collection work, stops it, and checks that no process is left behind.
# Prints "k8s-selftest: N passed, N failed" last; exits non-zero on any failure.
# The whole run is bounded (SB_SELFTEST_TIMEOUT, default 600 s) and the cluster is always
# stopped, also when a check fails or the run is interrupted.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
limit=${SB_SELFTEST_TIMEOUT:-600}

if [[ ${1:-} != --inner ]]; then
  # Outer half: run the checks under a time limit, then stop the cluster whatever happened.
  export STREAMBATCH_CLUSTER_DIR=/tmp/sb-k8s-selftest.$$
  inner=
  cleanup() {
    [[ -n $inner ]] && kill -TERM "$inner" 2>/dev/null && wait "$inner" 2>/dev/null
    "$here/cluster.sh" down >/dev/null 2>&1 || true
  }
  trap 'cleanup; echo "k8s-selftest: interrupted"; echo "k8s-selftest: 0 passed, 1 failed"; exit 1' INT TERM
  timeout -k 5 "$limit" "$0" --inner &
  inner=$!
  wait "$inner"; rc=$?
  inner=
  if [[ -e $STREAMBATCH_CLUSTER_DIR ]]; then
    "$here/cluster.sh" down >/dev/null 2>&1 || true
  fi
  if ((rc == 124 || rc == 137)); then
    echo "k8s-selftest: timed out after ${limit}s"
    echo "k8s-selftest: 0 passed, 1 failed"
  fi
  exit "$rc"
fi

STATE=$STREAMBATCH_CLUSTER_DIR
BIN=$("$here/build.sh" --print-bin-dir)
export KUBECONFIG=$STATE/kubeconfig PATH=$BIN:$PATH
passed=0; failed=0; t_start=$SECONDS
tmp=$(mktemp -d /tmp/sb-k8s-selftest-files.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

ok() { passed=$((passed + 1)); echo "ok - $*"; }
not_ok() {
  failed=$((failed + 1)); echo "FAIL - $*"
  kubectl get pods -A -o wide 2>&1 | head -20
  tail -n 15 "$STATE/logs/sb-node-agent.log" 2>/dev/null
}
check() { # NAME COMMAND...: one test
  local name=$1; shift
  if "$@" >"$tmp/out" 2>&1; then ok "$name"; else cat "$tmp/out"; not_ok "$name"; fi
}
# until_ok SECONDS COMMAND...: poll COMMAND until it succeeds, at most SECONDS.
until_ok() {
  local end=$((SECONDS + $1)); shift
  until "$@"; do ((SECONDS < end)) || return 1; sleep 0.5; done
}
pod_pid() { # POD: pid of the pod's (single) container process, from the agent's pid file
  local f
  f=$(ls "$STATE"/pods/default_"$1"_*/*.pid 2>/dev/null | head -n 1) && [[ -n $f ]] && cat "$f"
}
alive() { kill -0 "$1" 2>/dev/null; }
dead() { ! kill -0 "$1" 2>/dev/null; }

finish() {
  echo "k8s-selftest: $((SECONDS - t_start))s"
  echo "k8s-selftest: $passed passed, $failed failed"
  ((failed == 0))
  exit
}

# ---- 1. cluster-up
t0=$SECONDS
if "$here/cluster.sh" up; then
  ok "cluster up in $((SECONDS - t0))s"
else
  not_ok "cluster up"
  finish
fi

# ---- 2/3. A Deployment becomes Available through scheduler -> agent; deleting it ends the process.
# Both replicas serve on port 8080, each on its own pod IP; readiness is an HTTP probe.
cat >"$tmp/deploy.yaml" <<'EOF'
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 5
      containers:
      - name: web
        image: busybox:1.36
        command: [sh, -c, 'echo "$(POD_NAME) on $(POD_IP)"; exec python3 -m http.server 8080 --bind "$POD_IP"']
        env:
        - {name: POD_NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}
        - {name: POD_IP, valueFrom: {fieldRef: {fieldPath: status.podIP}}}
        readinessProbe: {httpGet: {path: /, port: 8080}, periodSeconds: 1}
EOF
deployment_available() {
  kubectl apply -f "$tmp/deploy.yaml" &&
    kubectl wait --for=condition=Available deployment/web --timeout=60s &&
    local ips && ips=$(kubectl get pods -l app=web -o 'jsonpath={.items[*].status.podIP}') &&
    echo "pod IPs: $ips" && [[ $(wc -w <<<"$ips") -eq 2 ]] &&
    for ip in $ips; do curl -fsS -o /dev/null "http://$ip:8080/" || return 1; done
}
check "Deployment of 2 replicas on one port becomes Available (scheduler -> agent)" deployment_available
deployment_deleted() {
  local pods pids=() p pid
  pods=$(kubectl get pods -l app=web -o 'jsonpath={.items[*].metadata.name}') || return 1
  for p in $pods; do pid=$(pod_pid "$p") && alive "$pid" && pids+=("$pid") || { echo "no process for $p"; return 1; }; done
  echo "processes: ${pids[*]}"
  kubectl delete deployment web --wait=true --timeout=30s || return 1
  until_ok 30 bash -c '[[ -z $(kubectl get pods -l app=web -o name) ]]' || { echo "pods not deleted"; return 1; }
  for pid in "${pids[@]}"; do dead "$pid" || { echo "process $pid still running"; return 1; }; done
}
check "deleting the Deployment ends its processes and removes the pods" deployment_deleted

# ---- 4. GPU capacity: 2 GPUs is unschedulable, 1 GPU lands on the GPU node.
cat >"$tmp/gpu.yaml" <<'EOF'
apiVersion: v1
kind: Pod
metadata: {name: gpu2}
spec:
  containers: [{name: c, image: sleeper, resources: {limits: {nvidia.com/gpu: 2}}}]
---
apiVersion: v1
kind: Pod
metadata: {name: gpu1}
spec:
  terminationGracePeriodSeconds: 2
  containers: [{name: c, image: sleeper, resources: {limits: {nvidia.com/gpu: 1}}}]
EOF
gpu_scheduling() {
  kubectl apply -f "$tmp/gpu.yaml" || return 1
  kubectl wait --for=condition=Ready pod/gpu1 --timeout=60s || return 1
  [[ $(kubectl get pod gpu1 -o 'jsonpath={.spec.nodeName}') == sb-gpu-0 ]] || { echo "gpu1 not on sb-gpu-0"; return 1; }
  until_ok 30 bash -c '[[ $(kubectl get pod gpu2 -o "jsonpath={.status.conditions[?(@.type==\"PodScheduled\")].reason}") == Unschedulable ]]' ||
    { kubectl get pod gpu2 -o yaml; return 1; }
  kubectl get pod gpu2 -o 'jsonpath={.status.phase} {.status.conditions[0].message}{"\n"}'
  [[ $(kubectl get pod gpu2 -o 'jsonpath={.status.phase}') == Pending ]] || return 1
  kubectl delete -f "$tmp/gpu.yaml" --wait=true --timeout=30s
}
check "a pod asking for 2 GPUs stays Pending (Unschedulable); 1 GPU runs on sb-gpu-0" gpu_scheduling

# ---- 5. Server-side apply of a CRD, then of a custom resource.
cat >"$tmp/crd.yaml" <<'EOF'
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.selftest.streambatch.dev}
spec:
  group: selftest.streambatch.dev
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, properties: {size: {type: integer}}}
          status: {type: object, properties: {phase: {type: string}}}
EOF
cat >"$tmp/cr.yaml" <<'EOF'
apiVersion: selftest.streambatch.dev/v1
kind: Widget
metadata: {name: w1}
spec: {size: 3}
EOF
crd_ssa() {
  kubectl apply --server-side --field-manager=selftest -f "$tmp/crd.yaml" &&
    kubectl wait --for=condition=Established crd/widgets.selftest.streambatch.dev --timeout=30s &&
    until_ok 20 kubectl apply --server-side --field-manager=selftest -f "$tmp/cr.yaml" &&
    [[ $(kubectl get widget w1 -o 'jsonpath={.spec.size}') == 3 ]] &&
    kubectl get widget w1 -o 'jsonpath={.metadata.managedFields[0].manager}{"\n"}' | grep -qx selftest
}
check "kubectl apply --server-side of a CRD and a custom resource" crd_ssa

# ---- 6. helm runs (and installs a chart into the cluster).
helm_works() {
  export HELM_CACHE_HOME=$tmp/helm/cache HELM_CONFIG_HOME=$tmp/helm/config HELM_DATA_HOME=$tmp/helm/data
  helm version || return 1
  mkdir -p "$tmp/chart/templates"
  printf 'apiVersion: v2\nname: sbtest\nversion: 0.1.0\n' >"$tmp/chart/Chart.yaml"
  printf 'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: {{ .Release.Name }}-cm}\ndata: {k: v}\n' >"$tmp/chart/templates/cm.yaml"
  helm install sbtest "$tmp/chart" --wait --timeout 60s &&
    kubectl get configmap sbtest-cm &&
    helm uninstall sbtest --wait --timeout 60s
}
check "helm version runs and helm installs/uninstalls a chart" helm_works

# ---- 7. Garbage collection: a pod whose owner is deleted is deleted, and its process ends.
gc_works() {
  kubectl create configmap gc-owner --from-literal=a=b || return 1
  local uid pid
  uid=$(kubectl get configmap gc-owner -o 'jsonpath={.metadata.uid}')
  cat <<EOF | kubectl apply -f - || return 1
apiVersion: v1
kind: Pod
metadata:
  name: gc-child
  ownerReferences: [{apiVersion: v1, kind: ConfigMap, name: gc-owner, uid: "$uid"}]
spec:
  terminationGracePeriodSeconds: 2
  containers: [{name: c, image: sleeper}]
EOF
  kubectl wait --for=condition=Ready pod/gc-child --timeout=60s || return 1
  pid=$(pod_pid gc-child) && alive "$pid" || { echo "no process"; return 1; }
  kubectl delete configmap gc-owner || return 1
  until_ok 60 bash -c '! kubectl get pod gc-child >/dev/null 2>&1' || { echo "gc-child not collected"; return 1; }
  until_ok 10 dead "$pid" || { echo "process $pid still running"; return 1; }
}
check "garbage collection deletes a pod whose owner is deleted" gc_works

# ---- 8. In-cluster access: a pod reads itself from the API server with its service-account
# token, CA and KUBERNETES_SERVICE_HOST/PORT (RBAC: a Role allowing get on pods).
sa_token() {
  kubectl create role pod-reader --verb=get --resource=pods &&
    kubectl create rolebinding pod-reader --role=pod-reader --serviceaccount=default:default || return 1
  cat <<'EOF' | kubectl apply -f - || return 1
apiVersion: v1
kind: Pod
metadata: {name: whoami}
spec:
  restartPolicy: Never
  containers:
  - name: c
    image: busybox
    command: [sh, -c, 'curl -fsS --cacert "$SB_SERVICEACCOUNT_DIR/ca.crt" -H "Authorization: Bearer $(cat "$SB_SERVICEACCOUNT_DIR/token")" "https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT/api/v1/namespaces/$(cat "$SB_SERVICEACCOUNT_DIR/namespace")/pods/$HOSTNAME"']
EOF
  until_ok 60 bash -c '[[ $(kubectl get pod whoami -o "jsonpath={.status.phase}") == Succeeded ]]' ||
    { cat "$STATE"/pods/default_whoami_*/c.log; return 1; }
  grep -q '"name": "whoami"' "$STATE"/pods/default_whoami_*/c.log
}
check "a pod reaches the API server with its service-account token (RBAC applies)" sa_token

# ---- 8b. A pod from an OCI image (make images; the table's sb-oci/* rule) runs under runc with
# the pod's user, a read-only root, an emptyDir, env from a Secret, a configMap volume and the
# service-account token at the standard path, with no capabilities left.
version=$(sed -n 's/^#define SB_VERSION "\(.*\)"/\1/p' "$here/../../cmd/version.h")
oci_pod() {
  "$here/../../scripts/images.sh" >"$tmp/images.log" 2>&1 || { tail -20 "$tmp/images.log"; return 1; }
  kubectl create secret generic oci-s --from-literal=v=secret-value &&
    kubectl create configmap oci-c --from-literal=key=cfg-value || return 1
  sed "s/@VERSION@/$version/" <<'EOF' | kubectl apply -f - || return 1
apiVersion: v1
kind: Pod
metadata: {name: oci}
spec:
  restartPolicy: Never
  securityContext: {runAsUser: 65532, runAsGroup: 65532, fsGroup: 65532}
  containers:
  - name: c
    image: sb-oci/worker:@VERSION@
    command: [/bin/sh, -c]
    args:
    - 'echo "uid=$(id -u)"; touch /tmp/x && echo tmp-writable; touch /usr/x 2>/dev/null || echo root-readonly; echo "secret=$S"; echo "cfg=$(cat /cfg/key)"; test -s /var/run/secrets/kubernetes.io/serviceaccount/token && echo token-ok; /usr/local/bin/streambatch-worker --version; grep CapEff /proc/self/status'
    env: [{name: S, valueFrom: {secretKeyRef: {name: oci-s, key: v}}}]
    securityContext: {readOnlyRootFilesystem: true, allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
    volumeMounts: [{name: tmp, mountPath: /tmp}, {name: cfg, mountPath: /cfg}]
  volumes: [{name: tmp, emptyDir: {}}, {name: cfg, configMap: {name: oci-c}}]
EOF
  until_ok 60 bash -c '[[ $(kubectl get pod oci -o "jsonpath={.status.phase}") == Succeeded ]]' ||
    { kubectl get pod oci -o yaml | tail -30; cat "$STATE"/pods/default_oci_*/c.log; return 1; }
  local log want
  log=$(cat "$STATE"/pods/default_oci_*/c.log)
  echo "$log"
  for want in uid=65532 tmp-writable root-readonly secret=secret-value cfg=cfg-value token-ok \
    "streambatch-worker $version" "CapEff:	0000000000000000"; do
    grep -qxF "$want" <<<"$log" || { echo "missing: $want"; return 1; }
  done
}
check "a pod from the worker's OCI image runs under runc (user, read-only root, volumes, Secret env, token, no capabilities)" oci_pod

# ---- 9. cluster-down stops everything that cluster-up started.
cluster_down_clean() {
  local pids=() f pid left=()
  for f in "$STATE"/pids/*.pid "$STATE"/pods/*/*.pid; do
    [[ -f $f ]] && read -r pid _ <"$f" && pids+=("$pid")
  done
  echo "recorded pids: ${pids[*]}"
  "$here/cluster.sh" down || return 1
  for pid in "${pids[@]}"; do alive "$pid" && left+=("$pid"); done
  for f in /proc/[0-9]*/environ; do
    { tr '\0' '\n' <"$f"; } 2>/dev/null | grep -qxF "SB_CLUSTER_DIR=$STATE" && left+=("${f//[^0-9]/}")
  done
  ((${#left[@]} == 0)) || { echo "left running: ${left[*]}"; ps -o pid,args -p "${left[@]}"; return 1; }
  ! grep -qF " $STATE/" /proc/mounts || { echo "mounts left: $(grep -F " $STATE/" /proc/mounts)"; return 1; }
  [[ ! -e $STATE ]] || { echo "$STATE still exists"; return 1; }
}
# leave one pod running so that the agent has something to stop
cat <<'EOF' | kubectl apply -f - >/dev/null
apiVersion: v1
kind: Pod
metadata: {name: survivor}
spec:
  containers: [{name: c, image: busybox, command: [sh, -c, 'sleep 3600 & sleep 3600']}]
EOF
kubectl wait --for=condition=Ready pod/survivor --timeout=60s >/dev/null
sed "s/@VERSION@/$version/" <<'EOF' | kubectl apply -f - >/dev/null
apiVersion: v1
kind: Pod
metadata: {name: oci-survivor}
spec:
  containers: [{name: c, image: "sb-oci/worker:@VERSION@", command: [/bin/sh, -c, 'sleep 3600 & sleep 3600']}]
EOF
kubectl wait --for=condition=Ready pod/oci-survivor --timeout=60s >/dev/null
check "cluster-down leaves no process behind" cluster_down_clean

finish
