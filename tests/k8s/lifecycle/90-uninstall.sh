# shellcheck shell=bash
# 90-uninstall.sh — a case file of the lifecycle suite (tests/k8s/operator-test.sh,
# SB_OPTEST_SUITE=lifecycle), sourced after the release is installed; it runs last, since it
# removes the release. Issue 38, item 3: removing the chart with a Pipeline running never leaves
# a finalizer nothing can clear. It follows docs/operator.md's "Uninstall" steps:
#   1. a Pipeline is running (worker pods, the finalizer on it);
#   2. `helm uninstall` runs the chart's pre-delete hook (streambatch-controller --uninstall):
#      the controllers end, the worker pods are deleted, the finalizer removed, the Lease and
#      the helm test pod deleted; the Pipeline and the CRD are kept;
#   3. `kubectl delete pipeline` completes within UNINST_DELETE_S (10 s), and so does
#      `kubectl delete crd`;
#   4. the release namespace holds nothing but what Kubernetes puts in every namespace, no
#      cluster-scoped object of the release is left, and the namespace can be deleted.
# Uses the suite's helpers (opcheck, pipeline, phase, wait_phase, worker_pods, jp, figure).

UNINST_DELETE_S=${UNINST_DELETE_S:-10}
UNINST_P=uninst
uninstall_running_pipeline() {
  # slow enough to be Running when the chart goes: 60,000 records at 1 ms each on one worker
  pipeline "$UNINST_P" "  - {name: slow, op: bench.sleep, args: {msPerRecord: 1}, workers: {min: 1, max: 1}}" |
    kubectl apply -f - >/dev/null || return 1
  wait_phase "$UNINST_P" Running 90 || return 1
  until_ok 60 bash -c "[[ -n \$(kubectl -n $NS get pods -l streambatch.dev/pipeline=$UNINST_P -o name) ]]" ||
    { echo "no worker pod of $UNINST_P"; return 1; }
  local fin; fin=$(jp "$UNINST_P" '{.metadata.finalizers}')
  [[ $fin == *streambatch.dev/finalizer* ]] || { echo "no finalizer on $UNINST_P: '$fin'"; return 1; }
  echo "$UNINST_P Running, worker pods: $(worker_pods "$UNINST_P"), finalizers $fin"
}
opcheck "u: a Pipeline runs (worker pods, the finalizer) before the chart is removed" uninstall_running_pipeline

uninstall_release() {
  local t0 out
  t0=$(now)
  out=$(helm uninstall "$REL" -n "$SYS" --wait --timeout 180s 2>&1) || { echo "$out"; return 1; }
  echo "$out"
  figure "helm uninstall with a Pipeline running (pre-delete hook included): $(since "$t0") s"
  local f
  for f in $(ls -t "$STATE"/pods/"${SYS}"_"$DEPLOY"-uninstall-*/uninstall.log 2>/dev/null | head -n 1); do
    echo "--- the hook's log"; cat "$f"
  done
  # the Pipeline is kept, without the finalizer, its worker pods gone
  kubectl -n "$NS" get pipeline "$UNINST_P" >/dev/null || { echo "helm uninstall removed Pipeline $UNINST_P"; return 1; }
  local fin; fin=$(jp "$UNINST_P" '{.metadata.finalizers}')
  [[ $fin != *streambatch.dev/finalizer* ]] || { echo "the finalizer is still on $UNINST_P: $fin"; return 1; }
  until_ok 60 no_worker_pods "$UNINST_P" || { echo "worker pods left: $(worker_pods "$UNINST_P")"; return 1; }
  ! kubectl -n "$SYS" get lease "$LEASE" >/dev/null 2>&1 || { echo "Lease $SYS/$LEASE left"; return 1; }
  ! kubectl -n "$SYS" get pod "$DEPLOY-test" >/dev/null 2>&1 || { echo "the helm test pod is left"; return 1; }
  kubectl get crd pipelines.streambatch.dev >/dev/null || { echo "helm uninstall removed the CRD (resource-policy keep)"; return 1; }
  echo "kept: Pipeline $UNINST_P (phase $(phase "$UNINST_P"), no finalizer, no worker pod) and the CRD; Lease and test pod deleted"
}
opcheck "u: helm uninstall stops the running Pipeline (pods deleted, finalizer removed), deletes Lease and test pod, keeps the CRD" uninstall_release

# bounded_delete SECONDS KUBECTL-ARGS...: `kubectl delete` that must complete within SECONDS
bounded_delete() {
  local s=$1 t0; shift
  t0=$(now)
  timeout "$((s + 5))" kubectl delete "$@" --timeout="${s}s" || { echo "kubectl delete $* did not complete within $s s"; return 1; }
  figure "kubectl delete $*: $(since "$t0") s"
}
uninstall_delete_pipelines() {
  bounded_delete "$UNINST_DELETE_S" -n "$NS" pipeline "$UNINST_P" || return 1
  # the documented step for every Pipeline left (of this suite's earlier cases too)
  bounded_delete 60 pipelines --all -A || return 1
  [[ -z $(kubectl get pipelines -A --no-headers 2>/dev/null) ]] || { kubectl get pipelines -A; return 1; }
}
opcheck "u: after the uninstall, kubectl delete pipeline completes within ${UNINST_DELETE_S} s" uninstall_delete_pipelines

uninstall_delete_crd() {
  bounded_delete 60 crd pipelines.streambatch.dev || return 1
  ! kubectl get crd pipelines.streambatch.dev >/dev/null 2>&1 || { echo "the CRD is still there"; return 1; }
}
opcheck "u: kubectl delete crd pipelines.streambatch.dev completes" uninstall_delete_crd

# What Kubernetes itself puts in every namespace: not the release's.
uninstall_ns_empty() {
  local left kinds
  kinds=$(kubectl api-resources --verbs=list --namespaced -o name | grep -vE '^(events|events\.events\.k8s\.io)$' | paste -sd, -)
  left=$(kubectl -n "$SYS" get "$kinds" -o name 2>/dev/null |
    grep -vxE 'configmap/kube-root-ca\.crt|serviceaccount/default')
  [[ -z $left ]] || { echo "left in $SYS after the documented steps:"; echo "$left"; return 1; }
  left=$(kubectl get clusterroles,clusterrolebindings,validatingadmissionpolicies,validatingadmissionpolicybindings \
    -l "app.kubernetes.io/instance=$REL" -o name 2>/dev/null)
  [[ -z $left ]] || { echo "cluster-scoped objects of the release left:"; echo "$left"; return 1; }
  echo "$SYS holds only configmap/kube-root-ca.crt and serviceaccount/default (Kubernetes' own)"
  bounded_delete 60 namespace "$SYS" || return 1
}
opcheck "u: the release namespace ends empty (nothing of the release, cluster-wide too) and is deleted" uninstall_ns_empty
