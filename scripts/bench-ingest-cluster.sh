#!/usr/bin/env bash
# bench-ingest-cluster.sh — issue 40's cluster effect on the project's test cluster: do CPU worker
# pods beyond a trainer's own cores raise the samples/s that reach it? Runs the lifecycle case
# tests/k8s/lifecycle/60-ingest-cluster.bench.sh with the agent enforcing limits.cpu
# (SB_K8S_CPU_CFS_QUOTA=1): a trainer pod of TRAINER_CPU (500m) fed by a Pillow pool of 2
# processes inside it, then by a stream Pipeline of 1, 2, 3 worker pods (WORKERS) of WORKER_CPU
# (500m) each, REPS (2) rounds alternating; prints "figure:" lines and a table of medians.
# The images: IMAGES JPEGs (5120) from tests/bench/inference_data.py, cached in
# $BUILD/bench/images-N as bench-ingest.sh's. About 10 minutes, most of it the runs.
# Usage: scripts/bench-ingest-cluster.sh   (BUILD, BINDIR as for make)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bench-lib.sh
BUILD=$(realpath "${BUILD:-build}")
BINDIR=${BINDIR:-bin}
n=${IMAGES:-5120}
imgs=$BUILD/bench/images-$n
if [[ ! -e $imgs/.done ]]; then
  py=$BUILD/resize-venv/bin/python
  if ! "$py" -c 'import numpy, PIL' 2>/dev/null; then
    bench_venv "$BUILD/resize-venv" PIL pillow==13.0.0 numpy==2.4.6 ||
      { echo "bench-ingest-cluster: no Pillow venv to make the images; skipped"; exit 0; }
  fi
  rm -rf "$imgs" && mkdir -p "$imgs"
  "$py" tests/bench/inference_data.py images "$imgs" "$n" 2 && touch "$imgs/.done"
fi
SB_K8S_CPU_CFS_QUOTA=1 SB_OPTEST_SUITE=lifecycle SB_OPTEST_CASES=60-ingest-cluster.bench.sh \
  SB_OPTEST_INGEST_IMAGES=$imgs SB_OPTEST_INGEST_REPS=${REPS:-2} \
  SB_OPTEST_INGEST_TRAINER_CPU=${TRAINER_CPU:-500m} SB_OPTEST_INGEST_WORKER_CPU=${WORKER_CPU:-500m} \
  SB_OPTEST_INGEST_WORKERS=${WORKERS:-1 2 3} SB_OPERATOR_TEST_TIMEOUT=${SB_OPERATOR_TEST_TIMEOUT:-2400} \
  SB_BIN_DIR=$BINDIR SB_BUILD_DIR=$BUILD tests/k8s/operator-test.sh
