#!/usr/bin/env bash
# The scheduling benchmarks that need idle CPUs to calibrate a bound (issue 15), run on the lent
# device machine's 16 cores (its GPU unused) over binaries built here: `make build`, then
# `cp bin/* .devbin/` and `scripts/device-libs.sh .devlibs bin/*` (that machine has none of
# Debian's packages; both folders are ignored by git and carried by the device tool).
#   scripts/device-bench.sh [stragglers512|stragglers128|quota|plan]...   (default: all four)
# stragglersN: scripts/bench-stragglers.sh at partitionSize NKi (SIGSTOP duty cycle);
# quota: the same at 128Ki with the sick worker confined by a cgroup CPU quota;
# plan: scripts/bench-plan.sh. Everything printed goes to $OUT/device-bench.log too.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-$(mktemp -d /tmp/sb-device-XXXXXX)}
exec > >(tee "$out/device-bench.log") 2>&1
export LD_LIBRARY_PATH=$PWD/.devlibs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export SB_BIN_DIR=$PWD/.devbin
echo "== machine: $(nproc) CPUs, $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg)"
ldd .devbin/streambatch .devbin/streambatch-worker | grep 'not found' && echo "MISSING LIBRARIES"
what=("$@")
[[ ${#what[@]} -gt 0 ]] || what=(stragglers512 stragglers128 quota plan)
for w in "${what[@]}"; do
  echo "== $w ($(date -u +%H:%M:%S))"
  case $w in
    stragglers512 | stragglers128)
      PARTITION_SIZE=${w#stragglers}Ki ROUNDS=${ROUNDS:-2} scripts/bench-stragglers.sh
      echo "exit $?" ;;
    quota)
      THROTTLE=quota ROUNDS=${ROUNDS:-2} scripts/bench-stragglers.sh
      echo "exit $?" ;;
    plan)
      ROUNDS=1 DURATION=${PLAN_DURATION:-15} scripts/bench-plan.sh
      echo "exit $?" ;;
    *) echo "device-bench: unknown $w" >&2; exit 2 ;;
  esac
done
echo "== done ($(date -u +%H:%M:%S))"
