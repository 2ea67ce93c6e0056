#!/usr/bin/env bash
# bench-ckpt-scale.sh — issue 38's "Measured" paragraph at full size: checkpoints that scale.
#   0. the log alone (tests/bench/bench_ckptlog.c): 200,000 parts committed in batches of 1,000
#      and 1,000,000 in batches of 5,000 (one update a batch, as the drivers call it), in
#      /dev/shm: bytes written per committed part against the log's own bytes, seconds, the read
#      back ("figure: ckptlog ...");
#   1. local (unless --no-local): `streambatch run` of N one-record files (default 200,000)
#      SIGKILLed at ~60% committed, then --resume (tests/integration/test_run_ckpt_scale.c): no
#      committed split re-run, output exact, the checkpoint's write cost per part
#      ("figure: ckpt-scale ...");
#   2. cluster (with --cluster): the lifecycle case tests/k8s/lifecycle/30-checkpoint-scale.sh
#      with SB_OPTEST_CKPT_PARTS=N: the leader SIGKILLed at ~60%, no split the status called
#      committed re-run, the largest Pipeline object under 64 KiB, the checkpoint log's write
#      cost per part (the lifecycle suite runs the same case with 3,000 files in `make test`).
#      The suite's time limit (SB_OPERATOR_TEST_TIMEOUT) grows with N: 900 s + 30 ms a file.
# Usage: scripts/bench-ckpt-scale.sh [N] [--cluster] [--no-local]   (BUILD, BINDIR as for make;
# slow: 200,000 files take minutes to make and upload, and the cluster run most of an hour)
set -euo pipefail
cd "$(dirname "$0")/.."
N=200000 CLUSTER=0 LOCAL=1
for a in "$@"; do
  case $a in
    --cluster) CLUSTER=1 ;;
    --no-local) LOCAL=0 ;;
    [0-9]*) N=$a ;;
    *) echo "usage: $0 [N] [--cluster] [--no-local]" >&2; exit 2 ;;
  esac
done
BUILD=${BUILD:-build}
BINDIR=${BINDIR:-bin}
[[ $BUILD == /* ]] || BUILD=$PWD/$BUILD # bench.sh passes absolute paths
[[ $BINDIR == /* ]] || BINDIR=$PWD/$BINDIR
make -j"$(nproc)" BUILD="$BUILD" BINDIR="$BINDIR" "$BUILD/bench/bench_ckptlog" >/dev/null
for nb in "200000 1000" "1000000 5000"; do
  # shellcheck disable=SC2086 # two words: parts and batch
  "$BUILD/bench/bench_ckptlog" $nb | sed 's/^/figure: ckptlog /'
done
if ((LOCAL)); then
  make -j"$(nproc)" BUILD="$BUILD" BINDIR="$BINDIR" build "$BUILD/itests/test_run_ckpt_scale" >/dev/null
  SB_ITEST_CKPT_FILES=$N SB_BIN_DIR=$BINDIR SB_BUILD_DIR=$BUILD \
    timeout 7200 "$BUILD/itests/test_run_ckpt_scale" 2>&1 | grep -E '^figure:|Synthesis|Assert|FAIL'
fi
if ((CLUSTER)); then
  SB_OPTEST_SUITE=lifecycle SB_OPTEST_CASES=30-checkpoint-scale.sh SB_OPTEST_CKPT_PARTS=$N \
    SB_OPERATOR_TEST_TIMEOUT=${SB_OPERATOR_TEST_TIMEOUT:-$((900 + N * 3 / 100))} \
    SB_BIN_DIR=$BINDIR SB_BUILD_DIR=$BUILD tests/k8s/operator-test.sh
fi
