# shellcheck shell=bash
# 20-failures.sh — a case file of the lifecycle suite (tests/k8s/operator-test.sh,
# SB_OPTEST_SUITE=lifecycle), sourced after the release is installed. Issue 38, item 2, "failures
# that speak": a worker pod that cannot start is named, with the kubelet's reason and message,
# in a Warning event and a condition, and fails the Pipeline after spec.execution.stallTimeout.
#   f1. credentialsSecret names a Secret that does not exist: within FAIL_EVENT_S (45 s) a
#       Warning WorkerPodFailing names the Secret, condition WorkersFailing carries
#       CreateContainerConfigError, WorkersPending is not True (the pods are scheduled), the
#       default `kubectl get pipelines` shows the reason in its REASON column; the Secret
#       created -> Succeeded, WorkersFailing False;
#   f2. the same with stallTimeout 20s and a Secret that never comes -> Failed (reason
#       WorkersFailing) with the kubelet's reason and the Secret in the message, REASON column
#       WorkersFailing, Partitions/Throughput filled ("-": never planned);
#   f3. a worker image that cannot be pulled -> Warning WorkerPodFailing ErrImagePull /
#       ImagePullBackOff, condition WorkersFailing with that reason;
#   f5. a worker that exits as it starts (no CrashLoopBackOff: worker pods never restart, so a
#       stream of Failed pods) -> one Warning WorkerPodFailing "exited at start", Failed
#       WorkersFailing after stallTimeout;
#   f4. an InvalidSpec Pipeline fills the Partitions and Throughput cells too.
# Uses the suite's helpers (opcheck, pipeline, phase, wait_phase, cond, events, jp, figure).

# (the first worker pod of the suite also waits for the node agent to unpack the worker image,
# as a kubelet pulls it before it resolves the pod's Secrets: about 20 s here on 2 busy cores)
FAIL_EVENT_S=${FAIL_EVENT_S:-45}
FAIL_STALL=20s
# the s3-creds keys under another name (s3_secret makes s3-creds only)
late_secret() { # NAME
  kubectl -n "$NS" create secret generic "$1" --from-literal=AWS_ACCESS_KEY_ID=$S3_KEY \
    --from-literal=AWS_SECRET_ACCESS_KEY=$S3_SECRET --from-literal=AWS_ENDPOINT_URL=$S3_EP \
    --from-literal=AWS_REGION=us-east-1 >/dev/null
}
get_row() { kubectl -n "$NS" get pipeline "$1" "${@:2}" 2>/dev/null; }
# column NAME HEADER: the cell of the default `kubectl get pipeline NAME` under HEADER
column() {
  get_row "$1" | python3 -c '
import re, sys
lines = sys.stdin.read().splitlines()
head, row = lines[0], lines[1]
starts = [m.start() for m in re.finditer(r"\S+", head)]
names = head.split()
i = names.index(sys.argv[1])
end = starts[i + 1] if i + 1 < len(starts) else len(row)
print(row[starts[i]:end].strip())' "$2"
}

failures_missing_secret() {
  kubectl -n "$NS" delete secret s3-late s3-never --ignore-not-found >/dev/null
  pipeline nosecret "$FILTER" | sed 's/credentialsSecret: s3-creds/credentialsSecret: s3-late/' >"$tmp/nosecret.yaml"
  # f2's Pipeline starts now too: its stall timeout runs while this case waits
  pipeline stuck "$FILTER" "  execution: {stallTimeout: $FAIL_STALL}" |
    sed 's/credentialsSecret: s3-creds/credentialsSecret: s3-never/' >"$tmp/stuck.yaml"
  local t0; t0=$(now)
  kubectl apply -f "$tmp/nosecret.yaml" -f "$tmp/stuck.yaml" >/dev/null || return 1
  until_ok "$FAIL_EVENT_S" bash -c "kubectl -n $NS get events --field-selector involvedObject.kind=Pipeline,involvedObject.name=nosecret \
      -o 'jsonpath={range .items[*]}{.type} {.reason}: {.message}{\"\\n\"}{end}' | grep -q '^Warning WorkerPodFailing: .*s3-late'" ||
    { echo "no Warning WorkerPodFailing naming s3-late within $FAIL_EVENT_S s: $(events nosecret | tr '\n' ';')"; return 1; }
  figure "missing Secret: apply to the Warning event naming it: $(since "$t0") s"
  echo "events: $(events nosecret | grep WorkerPodFailing | head -3 | tr '\n' ';')"
  until_ok 15 bash -c "[[ \$(kubectl -n $NS get pipeline nosecret -o 'jsonpath={.status.conditions[?(@.type==\"WorkersFailing\")].status}') == True ]]" ||
    { echo "no WorkersFailing=True: $(jp nosecret '{.status.conditions}')"; return 1; }
  local reason msg
  reason=$(cond nosecret WorkersFailing reason); msg=$(cond nosecret WorkersFailing message)
  echo "WorkersFailing: $reason: $msg"
  [[ $reason == CreateContainerConfigError && $msg == *"pod nosecret-"* && $msg == *s3-late* ]] ||
    { echo "the condition should carry the kubelet's reason, the pod and the Secret"; return 1; }
  [[ $(cond nosecret WorkersPending status) != True ]] ||
    { echo "WorkersPending True ($(cond nosecret WorkersPending reason)): the pods are scheduled, not Unschedulable"; return 1; }
  [[ $(phase nosecret) == Running ]] || { echo "phase $(phase nosecret), wanted Running"; return 1; }
  echo "kubectl get pipelines:"; get_row nosecret
  [[ $(column nosecret REASON) == CreateContainerConfigError ]] ||
    { echo "the REASON column says '$(column nosecret REASON)'"; return 1; }
  # the Secret appears: the run goes on and finishes (the pods start with it)
  t0=$(now)
  late_secret s3-late || return 1
  wait_phase nosecret Succeeded 120 || return 1
  figure "missing Secret: created to Succeeded: $(since "$t0") s"
  [[ $(cond nosecret WorkersFailing status) == False ]] ||
    { echo "WorkersFailing still $(cond nosecret WorkersFailing status) after the run"; return 1; }
  local r; r=$(column nosecret REASON)
  [[ -z $r || $r == "<none>" ]] || { echo "REASON '$r' on a Succeeded run"; return 1; }
  get_row nosecret
}
opcheck "f1: a missing credentialsSecret -> Warning WorkerPodFailing naming it, WorkersFailing CreateContainerConfigError (not Unschedulable), REASON column; the Secret created -> Succeeded" failures_missing_secret

failures_stall() {
  local t0; t0=$(now)
  wait_phase stuck Failed 120 || return 1
  local reason msg
  reason=$(cond stuck Failed reason); msg=$(jp stuck '{.status.message}')
  echo "Failed: $reason: $msg"
  [[ $reason == WorkersFailing && $msg == *CreateContainerConfigError* && $msg == *s3-never* &&
    $msg == *"$FAIL_STALL"* && $msg == *stallTimeout* ]] ||
    { echo "the failure should name WorkersFailing, the kubelet's reason, the Secret and the timeout"; return 1; }
  has_event stuck 'Failed' || { echo "no Failed event: $(events stuck | tr '\n' ';')"; return 1; }
  echo "kubectl get pipelines:"; get_row stuck
  local r p th
  r=$(column stuck REASON); p=$(column stuck PARTITIONS); th=$(column stuck THROUGHPUT)
  [[ $r == WorkersFailing ]] || { echo "the REASON column says '$r'"; return 1; }
  [[ -n $p && -n $th && $p != 0/0 && $th != "0 rows/s" ]] ||
    { echo "never planned: PARTITIONS '$p' and THROUGHPUT '$th' should say it is not known"; return 1; }
  until_ok 30 no_worker_pods stuck || { echo "worker pods left: $(worker_pods stuck)"; return 1; }
}
opcheck "f2: stallTimeout $FAIL_STALL with the Secret never there -> Failed WorkersFailing, the kubelet's reason and the Secret in the message and the REASON column" failures_stall

failures_image() {
  pipeline badimage "$FILTER" "  workerTemplate: {image: 'example.invalid/streambatch/none:0'}" >"$tmp/badimage.yaml"
  local t0; t0=$(now)
  kubectl apply -f "$tmp/badimage.yaml" >/dev/null || return 1
  until_ok "$FAIL_EVENT_S" bash -c "kubectl -n $NS get events --field-selector involvedObject.kind=Pipeline,involvedObject.name=badimage \
      -o 'jsonpath={range .items[*]}{.type} {.reason}: {.message}{\"\\n\"}{end}' | grep -qE '^Warning WorkerPodFailing: .*(ErrImagePull|ImagePullBackOff)'" ||
    { echo "no Warning WorkerPodFailing ErrImagePull/ImagePullBackOff within $FAIL_EVENT_S s: $(events badimage | tr '\n' ';')"; return 1; }
  figure "image that cannot be pulled: apply to the Warning event: $(since "$t0") s"
  echo "events: $(events badimage | grep WorkerPodFailing | tr '\n' ';')"
  until_ok 15 bash -c "[[ \$(kubectl -n $NS get pipeline badimage -o 'jsonpath={.status.conditions[?(@.type==\"WorkersFailing\")].reason}') =~ ^(ErrImagePull|ImagePullBackOff)$ ]]" ||
    { echo "no WorkersFailing ErrImagePull/ImagePullBackOff: $(jp badimage '{.status.conditions}')"; return 1; }
  echo "WorkersFailing: $(cond badimage WorkersFailing reason): $(cond badimage WorkersFailing message)"
  # de-duplicated: one event per pod, though the kubelet alternates the two reasons
  sleep 5
  local n pods
  n=$(events badimage | grep -c '^WorkerPodFailing:'); pods=$(worker_pods badimage | wc -w)
  echo "$n WorkerPodFailing events for $pods pods"
  ((n <= pods + 1)) || { echo "more events than pods: not de-duplicated"; return 1; }
  get_row badimage
  kubectl -n "$NS" delete pipeline badimage --wait=false >/dev/null
}
opcheck "f3: a worker image that cannot be pulled -> Warning WorkerPodFailing ErrImagePull/ImagePullBackOff (once per pod), WorkersFailing" failures_image

failures_exit_at_start() {
  # a worker image whose program exits at once (the controller's image: without a kubeconfig or
  # a service-account token it exits 1); worker pods never restart, so this is a stream of pods
  pipeline crashstart "$FILTER" "  execution: {stallTimeout: $FAIL_STALL}
  workerTemplate: {image: 'sb-oci/controller:$VERSION'}" >"$tmp/crashstart.yaml"
  local t0; t0=$(now)
  kubectl apply -f "$tmp/crashstart.yaml" >/dev/null || return 1
  until_ok 60 bash -c "kubectl -n $NS get events --field-selector involvedObject.kind=Pipeline,involvedObject.name=crashstart \
      -o 'jsonpath={range .items[*]}{.type} {.reason}: {.message}{\"\\n\"}{end}' | grep -q '^Warning WorkerPodFailing: .*exited at start'" ||
    { echo "no Warning WorkerPodFailing 'exited at start' within 60 s: $(events crashstart | sort | uniq -c | head)"; return 1; }
  figure "worker exiting at start: apply to the Warning event: $(since "$t0") s"
  echo "events: $(events crashstart | grep WorkerPodFailing | tr '\n' ';')"
  wait_phase crashstart Failed 120 || return 1
  local reason msg
  reason=$(cond crashstart Failed reason); msg=$(jp crashstart '{.status.message}')
  echo "Failed after $(since "$t0") s: $reason: $msg"
  [[ $reason == WorkersFailing && $msg == *"exited at start"* && $msg == *"pods in a row"* ]] ||
    { echo "the failure should name WorkersFailing and the pods exiting at start"; return 1; }
  echo "$(events crashstart | grep -c '^WorkerPodFailing:') WorkerPodFailing, $(events crashstart | grep -c '^WorkerPodFailed:') WorkerPodFailed events"
  (($(events crashstart | grep -c '^WorkerPodFailing:') == 1)) || { echo "one WorkerPodFailing per streak"; return 1; }
  get_row crashstart
  kubectl -n "$NS" delete pipeline crashstart --wait=false >/dev/null
}
opcheck "f5: a worker that exits as it starts (pods never restart: a stream of pods) -> one Warning WorkerPodFailing, Failed WorkersFailing after stallTimeout" failures_exit_at_start

failures_invalid_cells() {
  # source and sink the same prefix: the schema lets it through, the controller refuses it
  SRC=out/badcells pipeline badcells "$FILTER" | kubectl apply -f - >/dev/null || return 1
  wait_phase badcells Failed 60 || return 1
  get_row badcells
  local r p th
  r=$(column badcells REASON); p=$(column badcells PARTITIONS); th=$(column badcells THROUGHPUT)
  [[ $r == InvalidSpec ]] || { echo "REASON '$r', wanted InvalidSpec"; return 1; }
  [[ $p == - && $th == - ]] || { echo "PARTITIONS '$p' THROUGHPUT '$th', wanted - and -"; return 1; }
  kubectl -n "$NS" delete pipeline badcells nosecret stuck --wait=false >/dev/null
  kubectl -n "$NS" delete secret s3-late --ignore-not-found >/dev/null
}
opcheck "f4: an InvalidSpec Pipeline fills PARTITIONS and THROUGHPUT ('-') and shows REASON InvalidSpec" failures_invalid_cells
