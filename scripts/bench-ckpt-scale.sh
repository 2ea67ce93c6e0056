#!/usr/bin/env bash
# bench-ckpt-scale.sh — issue 38's "Measured" paragraph at full size: checkpoints that scale.
#   1. local: `streambatch run` of N one-record files (default 200,000) SIGKILLed at ~60%
#      committed, then --resume (tests/integration/test_run_ckpt_scale.c): no committed split
#      re-run, output exact, the checkpoint's write cost per part ("figure: ckpt-scale ...");
#   2. cluster (with --cluster): the lifecycle case tests/k8s/lifecycle/30-checkpoint-scale.sh
#      with SB_OPTEST_CKPT_PARTS=N: the leader SIGKILLed at ~60%, no committed split re-run,
#      the largest Pipeline object under 64 KiB, the checkpoint log's write cost per part (the
#      lifecycle suite runs the same case with 3,000 files in `make test`).
# Usage: scripts/bench-ckpt-scale.sh [N] [--cluster]   (BUILD, BINDIR as for make; slow: 200,000
# files take minutes to make and upload)
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-200000}
BUILD=${BUILD:-build}
BINDIR=${BINDIR:-bin}
make -j"$(nproc)" BUILD="$BUILD" BINDIR="$BINDIR" build "$BUILD/itests/test_run_ckpt_scale" >/dev/null
SB_ITEST_CKPT_FILES=$N SB_BIN_DIR=$PWD/$BINDIR SB_BUILD_DIR=$PWD/$BUILD \
  timeout 7200 "$BUILD/itests/test_run_ckpt_scale" 2>&1 | grep -E '^figure:|Synthesis|Assert|FAIL'
if [[ ${2:-} == --cluster ]]; then
  SB_OPTEST_SUITE=lifecycle SB_OPTEST_CASES=30-checkpoint-scale.sh SB_OPTEST_CKPT_PARTS=$N \
    SB_BIN_DIR=$PWD/$BINDIR SB_BUILD_DIR=$PWD/$BUILD timeout 7200 tests/k8s/operator-test.sh
fi
