# shellcheck shell=bash
# 50-trainer-job.sh — a case file of the lifecycle suite (tests/k8s/operator-test.sh,
# SB_OPTEST_SUITE=lifecycle), sourced after the release is installed. Issue 40: "the docs show a
# trainer pod (a Job) that consumes it". The docs' own manifests, run in containers:
#   j1. a trainer image as a user would make one: a Debian root with Python 3, numpy and the
#       libraries the consumer library links (scripts/images.sh --base, cached), the kit
#       (sdk/python) and libstreambatch_consumer.so where the example's
#       STREAMBATCH_CONSUMER_LIB says.
#   j2. api/examples/training/k8s-pipeline.yaml (its source pointed at the suite's MinIO input
#       and its filter at a field the input has) and k8s-trainer-job.yaml (ADDRESS and SECRET
#       from the Pipeline's status, the image above): the Job's two ranks, containers of that
#       image mounting the token Secret, complete; each prints its rows of both epochs, equal
#       across the ranks (drop_last), short of the filter's count by less than two batches a rank;
#       the Pipeline is Succeeded once both ranks ended both epochs, and its worker pods go.
# Uses the suite's helpers (opcheck, jp, wait_phase, worker_pods, no_worker_pods, figure, trainer_image).

opcheck "j1: a trainer image: Python 3, numpy, the kit and libstreambatch_consumer.so (the base cached)" trainer_image test

trainer_logs() { # the ranks' output: the agent's container logs (the cluster has no DNS for
  # kubectl logs to reach a node by name)
  cat "$STATE"/pods/"${NS}"_train-data-trainer-*/rank.log 2>/dev/null
}
trainer_job() {
  local ex=$repo/api/examples/training t0 addr secret logs
  # the example Pipeline, its source and filter made to fit the suite's input
  sed -e "s|uri: s3://datasets/train/|uri: s3://$BUCKET/in/|" -e 's|partitionSize: 4Mi|partitionSize: 64Ki|' \
    -e 's|args: {field: quality, op: ge, value: 0.5}|args: {field: "n", op: lt, value: 50}|' \
    -e "s|^  name: train-data$|  name: train-data\n  namespace: $NS|" "$ex/k8s-pipeline.yaml" >"$tmp/train-data.yaml"
  grep -q "s3://$BUCKET/in/" "$tmp/train-data.yaml" && grep -q 'field: "n", op: lt' "$tmp/train-data.yaml" ||
    { echo "k8s-pipeline.yaml no longer has the lines this case rewrites"; return 1; }
  t0=$(now)
  kubectl apply -f "$tmp/train-data.yaml" >/dev/null || return 1
  until_ok 120 bash -c "[[ \$(kubectl -n $NS get pipeline train-data -o 'jsonpath={.status.stream.address}') == *:* ]]" ||
    { echo "no status.stream.address: $(jp train-data '{.status}')"; return 1; }
  addr=$(jp train-data '{.status.stream.address}')
  secret=$(jp train-data '{.status.stream.tokenSecret}')
  echo "status.stream: address $addr, tokenSecret $secret, consumerLabel $(jp train-data '{.status.stream.consumerLabel}')"
  sed -e "s|@ADDRESS@|$addr|" -e "s|@SECRET@|$secret|" -e 's|image: registry.example.com/trainer:latest|image: sb-oci/trainer:test|' \
    -e "s|^  name: train-data-trainer$|  name: train-data-trainer\n  namespace: $NS|" "$ex/k8s-trainer-job.yaml" >"$tmp/trainer-job.yaml"
  grep -q 'image: sb-oci/trainer:test' "$tmp/trainer-job.yaml" || { echo "k8s-trainer-job.yaml has no image line to fill"; return 1; }
  kubectl apply -f "$tmp/trainer-job.yaml" >/dev/null || return 1
  if ! kubectl -n "$NS" wait --for=condition=Complete job/train-data-trainer --timeout=180s >/dev/null; then
    echo "the Job did not complete: $(kubectl -n "$NS" get job train-data-trainer -o 'jsonpath={.status}')"
    trainer_logs | tail -20
    return 1
  fi
  figure "the docs' trainer Job (2 ranks in containers, 2 epochs) over a filter of 60,000 records from MinIO: apply to Complete $(since "$t0") s"
  logs=$(trainer_logs)
  echo "$logs"
  python3 - "$IN" "$logs" <<'PY' || return 1
import glob, json, re, sys
want = sum(1 for p in glob.glob(sys.argv[1] + "/*.jsonl") for l in open(p) if json.loads(l)["n"] < 50)
got = {(int(r), int(e)): int(n) for r, e, n in re.findall(r"rank (\d) epoch (\d): (\d+) rows", sys.argv[2])}
print("records with n < 50: %d; rows by (rank, epoch): %s" % (want, sorted(got.items())))
bad = [k for k in [(r, e) for r in (0, 1) for e in (0, 1)] if k not in got]
if bad:
    sys.exit("no line for (rank, epoch) %s" % bad)
for e in (0, 1):
    a, b = got[(0, e)], got[(1, e)]
    # drop_last: the same number of whole batches of 256 on each rank, dropping fewer than two
    # batches' rows per rank (docs/training.md, "Balance")
    if a != b or a % 256 or not (want - 2 * 2 * 256 < a + b <= want):
        sys.exit("epoch %d: ranks read %d and %d rows of %d" % (e, a, b, want))
PY
  wait_phase train-data Succeeded 60 || { echo "$(jp train-data '{.status}')"; return 1; }
  kubectl -n "$NS" delete job train-data-trainer --wait=false >/dev/null
  kubectl -n "$NS" delete pipeline train-data --wait=false >/dev/null
  until_ok 60 no_worker_pods train-data || { echo "worker pods left: $(worker_pods train-data)"; return 1; }
}
opcheck "j2: the docs' Pipeline and trainer Job in containers: both ranks read both epochs, then Succeeded" trainer_job
