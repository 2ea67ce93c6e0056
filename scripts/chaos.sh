#!/usr/bin/env bash
# Chaos run (docs/testing.md, "Chaos run"): random pipelines back to back under random faults,
# every output row checked against an independent computation (tests/chaos/chaos.py).
#   scripts/chaos.sh [DURATION_SECONDS] [chaos.py options: --seed N --only I --netns off|on|mix
#                                        --no-diskfull]
# Needs SB_BIN_DIR (streambatch, streambatch-worker) and SB_BUILD_DIR (tests/helpers/sb_netem).
# Bounded: the driver gets DURATION + 300 s, then SIGTERM (its own cleanup), then SIGKILL; this
# script then kills what is left of its work directory's processes by pid, unmounts its tmpfs
# mounts and deletes its network namespaces, even when it is itself interrupted.
set -uo pipefail
duration=${1:-180}
shift || true
here=$(cd "$(dirname "$0")/.." && pwd)
. "$here/scripts/env.sh" # SB_BIN_DIR, SB_BUILD_DIR
bin=$SB_BIN_DIR
build=$SB_BUILD_DIR
base=${TMPDIR:-/tmp}
work=$(mktemp -d "$base/sb-chaos.XXXXXX") || exit 1
keep=${SB_CHAOS_KEEP:-0}
driver=

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [[ -n $driver ]] && kill -0 "$driver" 2>/dev/null; then
    kill -TERM "$driver" 2>/dev/null; sleep 3; kill -KILL "$driver" 2>/dev/null
  fi
  # processes whose command line names this work directory (workers: --spill-dir under it)
  local pids p
  pids=$(grep -lsa -- "$work/" /proc/[0-9]*/cmdline 2>/dev/null | cut -d/ -f3)
  for p in $pids; do [[ $p != "$$" ]] && kill -KILL "$p" 2>/dev/null; done
  # tmpfs mounts under it (deepest first)
  awk -v w="$work/" 'index($2, w) == 1 {print $2}' /proc/mounts | sort -r |
    while read -r m; do umount "$m" 2>/dev/null || umount -l "$m"; done
  # network namespaces and links of this run (the driver names them sbc<pid hex>)
  if [[ -n $driver ]]; then
    local pfx; pfx=$(printf 'sbc%x' $((driver & 0xfffff)))
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$pfx-"); do
      for p in $(ip netns pids "$ns"); do kill -KILL "$p" 2>/dev/null; done
      ip netns del "$ns"
    done
    for l in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 | grep "^$pfx"); do
      ip link del "$l" 2>/dev/null
    done
  fi
  # the work directory stays only when a pipeline went wrong (or SB_CHAOS_KEEP=1)
  if ((rc == 0)) && [[ $keep != 1 ]]; then rm -rf "$work"; else echo "chaos: work directory kept: $work"; fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

python3 "$here/tests/chaos/chaos.py" --duration "$duration" --bin-dir "$bin" --build-dir "$build" \
  --work "$work" "$@" &
driver=$!
limit=$(( ${duration%.*} + 300 ))
# (its sleeps end with it: an orphaned sleep would hold the caller's stdout open)
( trap 'kill "$s" 2>/dev/null; exit 0' TERM
  sleep "$limit" & s=$!; wait "$s"; kill -TERM "$driver" 2>/dev/null
  sleep 20 & s=$!; wait "$s"; kill -KILL "$driver" 2>/dev/null ) &
watchdog=$!
wait "$driver"; rc=$?
kill "$watchdog" 2>/dev/null; wait "$watchdog" 2>/dev/null
exit $rc
