#!/usr/bin/env bash
# Chaos run on the test cluster (docs/testing.md, "Chaos run"): random Pipelines on the operator
# (every pod a container of our images, data in MinIO) while worker pods are deleted, worker and
# leader processes killed and the API server restarted; every output row checked
# (tests/chaos/cluster_chaos.py).
#   scripts/chaos-cluster.sh [DURATION_SECONDS] [cluster_chaos.py options: --seed N --only I]
# Needs SB_BIN_DIR (the binaries the images are built from) and the cached Kubernetes binaries
# (make k8s-build). Bounded: the driver gets DURATION + 420 s (cluster start and the last
# pipeline), then SIGTERM (it stops the cluster itself), then SIGKILL; this script then stops
# the cluster (cluster.sh down), kills what is left of its processes by pid (pods carry
# SB_CLUSTER_DIR=<its state dir>; MinIO names the work directory) and removes the work directory
# unless the run failed (or SB_CHAOS_KEEP=1).
set -uo pipefail
duration=${1:-120}
shift || true
here=$(cd "$(dirname "$0")/.." && pwd)
. "$here/scripts/env.sh" # SB_BIN_DIR
bin=$SB_BIN_DIR
base=${TMPDIR:-/tmp}
work=$(mktemp -d "$base/sb-chaos-cluster.XXXXXX") || exit 1
keep=${SB_CHAOS_KEEP:-0}
driver=

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [[ -n $driver ]] && kill -0 "$driver" 2>/dev/null; then
    # it stops the cluster and prints its report on SIGTERM: up to 90 s for that
    kill -TERM "$driver" 2>/dev/null
    local i
    for ((i = 0; i < 90; i++)); do kill -0 "$driver" 2>/dev/null || break; sleep 1; done
    kill -KILL "$driver" 2>/dev/null
  fi
  STREAMBATCH_CLUSTER_DIR=$work/cluster "$here/tests/k8s/cluster.sh" down >/dev/null 2>&1
  local e pid
  for e in /proc/[0-9]*/environ; do
    pid=${e#/proc/}; pid=${pid%/environ}
    [[ $pid == "$$" ]] && continue
    { tr '\0' '\n' <"$e"; } 2>/dev/null | grep -qxF "SB_CLUSTER_DIR=$work/cluster" && kill -KILL "$pid" 2>/dev/null
  done
  for pid in $(grep -lsa -- "$work/" /proc/[0-9]*/cmdline 2>/dev/null | cut -d/ -f3); do
    [[ $pid != "$$" ]] && kill -KILL "$pid" 2>/dev/null
  done
  awk -v w="$work/" 'index($2, w) == 1 {print $2}' /proc/mounts | sort -r |
    while read -r m; do umount "$m" 2>/dev/null || umount -l "$m"; done
  if ((rc == 0)) && [[ $keep != 1 ]]; then rm -rf "$work"; else echo "chaos-cluster: work directory kept: $work"; fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

python3 "$here/tests/chaos/cluster_chaos.py" --duration "$duration" --bin-dir "$bin" --work "$work" "$@" &
driver=$!
limit=$(( ${duration%.*} + 420 ))
( trap 'kill "$s" 2>/dev/null; exit 0' TERM
  sleep "$limit" & s=$!; wait "$s"; kill -TERM "$driver" 2>/dev/null
  sleep 90 & s=$!; wait "$s"; kill -KILL "$driver" 2>/dev/null ) &
watchdog=$!
wait "$driver"; rc=$?
kill "$watchdog" 2>/dev/null; wait "$watchdog" 2>/dev/null
exit $rc
