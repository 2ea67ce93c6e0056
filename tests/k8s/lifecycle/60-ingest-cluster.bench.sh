# shellcheck shell=bash
# 60-ingest-cluster.bench.sh — a measurement of the lifecycle suite (tests/k8s/operator-test.sh,
# SB_OPTEST_SUITE=lifecycle), run only when SB_OPTEST_CASES names it
# (scripts/bench-ingest-cluster.sh). Issue 40: "show the paper's effect on the test cluster: CPU
# worker pods beyond the trainer's own cores raise samples/s". The agent enforces limits.cpu
# (SB_K8S_CPU_CFS_QUOTA=1), so a pod's CPU is what its limit says, whatever the machine has:
#   i1. the images (SB_OPTEST_INGEST_IMAGES, a directory of JPEGs) in s3://$BUCKET/img/; a trainer
#       image with Pillow (trainer_image ingest python3-pil); tests/bench/ingest_trainer.py in a
#       ConfigMap.
#   i2. SB_OPTEST_INGEST_REPS rounds (2), in each, in turn: a trainer pod (limits.cpu
#       SB_OPTEST_INGEST_TRAINER_CPU, 500m) fed by a Pillow pool of 2 processes inside it (the
#       DataLoader stand-in, the images on a hostPath), then by a stream Pipeline
#       (image.resize 64x64 -> image.normalize -> stream://) of N worker pods of
#       SB_OPTEST_INGEST_WORKER_CPU (500m) each, for N in SB_OPTEST_INGEST_WORKERS ("1 2 3"); the
#       trainer starts once the N pods run. Each run must read every image once, under the
#       trainer's CFS quota (its cgroup says so). A figure line per run, then the medians.
# The trainer's step is empty (preprocessing is the bottleneck): the question is only how many
# samples/s reach it. Uses the suite's helpers (opcheck, jp, wait_phase, worker_pods,
# no_worker_pods, until_ok, s3c, figure, trainer_image).

ING_IMGS=${SB_OPTEST_INGEST_IMAGES:-}
ING_REPS=${SB_OPTEST_INGEST_REPS:-2}
ING_TCPU=${SB_OPTEST_INGEST_TRAINER_CPU:-500m}
ING_WCPU=${SB_OPTEST_INGEST_WORKER_CPU:-500m}
ING_WORKERS=${SB_OPTEST_INGEST_WORKERS:-1 2 3}
ING_N=0

ingest_setup() {
  [[ -d $ING_IMGS ]] || { echo "SB_OPTEST_INGEST_IMAGES ('$ING_IMGS') is not a directory of images"; return 1; }
  [[ ${SB_K8S_CPU_CFS_QUOTA:-0} == 1 ]] || { echo "SB_K8S_CPU_CFS_QUOTA=1 is not set: no pod's limits.cpu would hold"; return 1; }
  rm -rf "$tmp/img" && mkdir -p "$tmp/img" && cp "$ING_IMGS"/*.jpg "$tmp/img/" && chmod -R a+rX "$tmp/img" || return 1
  ING_N=$(find "$tmp/img" -name '*.jpg' | wc -l)
  # shellcheck disable=SC2016
  find "$tmp/img" -name '*.jpg' -print0 | xargs -0 -P 4 -n 1 sh -c \
    'curl -fsS --aws-sigv4 "aws:amz:us-east-1:s3" --user "$0" -T "$2" "$1/$(basename "$2")" -o /dev/null' \
    "$S3_KEY:$S3_SECRET" "$S3_EP/$BUCKET/img" || return 1
  echo "$ING_N images ($(du -sm "$tmp/img" | cut -f1) MiB) in s3://$BUCKET/img/"
  kubectl -n "$NS" create configmap ingest-trainer --from-file="$repo/tests/bench/ingest_trainer.py" >/dev/null || return 1
  trainer_image ingest python3-pil
}
opcheck "i1: the images in MinIO, a trainer image with Pillow, the trainer script in a ConfigMap" ingest_setup

# ingest_job NAME MODE [PIPELINE]: the trainer Job's manifest
ingest_job() {
  local feed
  if [[ $2 == pool ]]; then
    feed='        volumeMounts:
        - {name: bench, mountPath: /bench}
        - {name: data, mountPath: /data, readOnly: true}
      volumes:
      - {name: bench, configMap: {name: ingest-trainer}}
      - {name: data, hostPath: {path: "'$tmp/img'", type: Directory}}'
  else
    feed="        - {name: STREAMBATCH_ADDRESS, value: \"$(jp "$3" '{.status.stream.address}')\"}
        - {name: STREAMBATCH_TOKEN_FILE, value: /var/run/streambatch/token}
        - {name: STREAMBATCH_CONSUMER_LIB, value: /opt/streambatch/lib/libstreambatch_consumer.so}
        volumeMounts:
        - {name: bench, mountPath: /bench}
        - {name: token, mountPath: /var/run/streambatch, readOnly: true}
      volumes:
      - {name: bench, configMap: {name: ingest-trainer}}
      - {name: token, secret: {secretName: \"$(jp "$3" '{.status.stream.tokenSecret}')\"}}"
  fi
  cat <<EOF
apiVersion: batch/v1
kind: Job
metadata: {name: $1, namespace: $NS}
spec:
  backoffLimit: 0
  template:
    metadata:
      labels: {streambatch.dev/stream-consumer: "${3:-none}"}
    spec:
      restartPolicy: Never
      containers:
      - name: trainer
        image: sb-oci/trainer:ingest
        command: [python3, /bench/ingest_trainer.py]
        resources: {requests: {cpu: $ING_TCPU}, limits: {cpu: $ING_TCPU}}
        env:
        - {name: MODE, value: $2}
        - {name: POOL_PROCS, value: "2"}
$feed
EOF
}

# ingest_run NAME MODE [PIPELINE]: runs the trainer Job; its JSON line in $tmp/ingest.jsonl
ingest_run() {
  local line
  ingest_job "$@" >"$tmp/$1.yaml" && kubectl apply -f "$tmp/$1.yaml" >/dev/null || return 1
  if ! kubectl -n "$NS" wait --for=condition=Complete "job/$1" --timeout=600s >/dev/null; then
    echo "job $1 did not complete: $(kubectl -n "$NS" get job "$1" -o 'jsonpath={.status}')"
    tail -5 "$STATE"/pods/"${NS}_$1"-*/trainer.log
    return 1
  fi
  line=$(grep -h '^{' "$STATE"/pods/"${NS}_$1"-*/trainer.log | tail -1)
  kubectl -n "$NS" delete job "$1" --wait=false >/dev/null
  python3 - "$line" "$ING_N" "$(ing_quota "$ING_TCPU")" <<'PY' || return 1
import json, sys
r = json.loads(sys.argv[1])
want_quota = int(sys.argv[3])
if r["rows"] != int(sys.argv[2]):
    sys.exit("read %d rows of %s images" % (r["rows"], sys.argv[2]))
if r["quota_us"] != want_quota:
    sys.exit("the trainer's CFS quota was %s us, not %d" % (r["quota_us"], want_quota))
PY
  echo "$1 $line" >>"$tmp/ingest.jsonl"
  figure "cluster ingest $1: $line"
}

ing_quota() { # CPU (500m, 2): its CFS quota in us a 100 ms period
  if [[ $1 == *m ]]; then echo $((${1%m} * 100)); else echo $(($1 * 100000)); fi
}
ing_cgroup_quota() { # UID8: the CFS quota of a pod's container (runc names its cgroup
  # "<pod uid's first 8>-<container>-<n>", oci.go): cgroup v1, else v2's cpu.max
  local f
  for f in /sys/fs/cgroup/cpu/"$1"-*/cpu.cfs_quota_us /sys/fs/cgroup/"$1"-*/cpu.max; do
    [[ -f $f ]] && { cut -d' ' -f1 "$f"; return; }
  done
}

# ingest_sb NAME WORKERS: a stream Pipeline of WORKERS pods, its trainer once they run
ingest_sb() {
  local name=$1 n=$2
  cat >"$tmp/$name-p.yaml" <<EOF
apiVersion: streambatch.dev/v1alpha1
kind: Pipeline
metadata: {name: $name, namespace: $NS}
spec:
  source: {uri: 's3://$BUCKET/img/', format: image, credentialsSecret: s3-creds}
  stages:
  - {name: resize, op: image.resize, args: {width: 64, height: 64}, resources: {cpu: $ING_WCPU}, workers: {min: $n, max: $n}}
  - {name: norm, op: image.normalize, args: {mean: 0.5, std: 0.25, layout: chw}, resources: {cpu: $ING_WCPU}, workers: {min: $n, max: $n}}
  sink: {uri: 'stream://', format: jsonl}
  execution: {memoryBudget: 64Mi}
EOF
  kubectl apply -f "$tmp/$name-p.yaml" >/dev/null || return 1
  until_ok 120 bash -c "[[ \$(kubectl -n $NS get pipeline $name -o 'jsonpath={.status.stream.address}') == *:* ]]" ||
    { echo "no status.stream.address: $(jp "$name" '{.status}')"; return 1; }
  until_ok 120 bash -c "[[ \$(kubectl -n $NS get pods -l streambatch.dev/pipeline=$name --field-selector status.phase=Running -o name | wc -l) -ge $n ]]" ||
    { echo "fewer than $n worker pods run: $(worker_pods "$name")"; return 1; }
  local p uid q
  for p in $(worker_pods "$name" status.phase=Running); do
    uid=$(kubectl -n "$NS" get pod "$p" -o 'jsonpath={.metadata.uid}')
    q=$(ing_cgroup_quota "${uid:0:8}")
    [[ $q == "$(ing_quota "$ING_WCPU")" ]] || { echo "worker pod $p runs under CFS quota '$q' us"; return 1; }
  done
  echo "worker pods, each under a CFS quota of $q us: $(worker_pods "$name" status.phase=Running)"
  ingest_run "$name-t" sb "$name" || return 1
  wait_phase "$name" Succeeded 120 || { jp "$name" '{.status}'; return 1; }
  kubectl -n "$NS" delete pipeline "$name" --wait=false >/dev/null
  until_ok 60 no_worker_pods "$name" || { echo "worker pods left: $(worker_pods "$name")"; return 1; }
}

ingest_rounds() {
  local r n
  ((ING_N > 0)) || { echo "no images (i1)"; return 1; }
  : >"$tmp/ingest.jsonl"
  for ((r = 1; r <= ING_REPS; r++)); do
    ingest_run "ingest-pool-r$r" pool || return 1
    for n in $ING_WORKERS; do ingest_sb "ingest-w$n-r$r" "$n" || return 1; done
  done
  python3 - "$tmp/ingest.jsonl" "$ING_TCPU" "$ING_WCPU" "$ING_N" <<'PY'
import collections, json, statistics, sys
runs = collections.defaultdict(list)
for l in open(sys.argv[1]):
    name, js = l.split(" ", 1)
    r = json.loads(js)
    key = "pool" if r["mode"] == "pool" else "w" + name.split("-")[1][1:]
    runs[key].append(r)
med = lambda k, f: statistics.median(x[f] for x in runs[k] if x[f] is not None)
base = med("pool", "steady_sps")
print("figure: cluster ingest, %s images, trainer limits.cpu %s, worker pods %s each:" % (sys.argv[4], sys.argv[2], sys.argv[3]))
print("| feed | runs | steady samples/s (median) | vs the pool | whole-run samples/s | first batch s | trainer CPU s | throttled s |")
print("|---|---|---|---|---|---|---|---|")
for k in sorted(runs, key=lambda k: (k != "pool", k)):
    label = "Pillow pool of 2 in the trainer pod" if k == "pool" else "%s worker pod(s)" % k[1:]
    print("| %s | %d | %.0f | %.2fx | %.0f | %.2f | %.1f | %.1f |" % (
        label, len(runs[k]), med(k, "steady_sps"), med(k, "steady_sps") / base, med(k, "whole_sps"),
        med(k, "first_batch_s"), med(k, "cpu_s"), med(k, "throttled_s")))
PY
}
opcheck "i2: a trainer pod fed by its own pool, then by 1, 2 and 3 worker pods; every image once, under its quota" ingest_rounds
