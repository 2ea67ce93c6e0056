#!/usr/bin/env bash
# The cost of authentication (issue 37: at most 3%), run by hand (it needs a second build);
# prints a markdown section.
# The same 2-stage CPU pipeline (jsonl filter lang == "en" -> project [id, score], 2 workers,
# partitionSize 4Mi by default) run by this build and by a build
# without authentication (PREAUTH_BIN: a bin/ directory of commit ba3e242, the last one before
# the Control, Data and Worker services required tokens), rounds interleaved (the order flips
# every round), in two modes:
#   streaming: the two stages fuse into one task: the Control calls (register, poll, complete,
#              heartbeat) are the authenticated traffic;
#   staged:    each stage is its own op: every partition of the first is fetched by the second
#              over Data.Fetch (one authenticated call per partition).
# Outputs are checked equal in every round. Reported: median wall time of each build and the
# median of the per-round ratios (authenticated / not).
#   PREAUTH_BIN (required), ROUNDS (default 7), AUTH_MIB (default 256), AUTH_PSIZE (default 4Mi),
#   SB_BIN_DIR, SB_BUILD_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh # SB_BIN_DIR, SB_BUILD_DIR
bin=$SB_BIN_DIR
pre=${PREAUTH_BIN:?PREAUTH_BIN: the bin/ directory of a build without authentication}
rounds=${ROUNDS:-7}
mib=${AUTH_MIB:-256}
psize=${AUTH_PSIZE:-4Mi}
[[ -x $pre/streambatch && -x $pre/streambatch-worker ]] || { echo "bench-auth: no binaries in $pre" >&2; exit 1; }
work=$(mktemp -d /tmp/sb-bench-auth-XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/in"
python3 tests/bench/peers/gen.py etl "$work/in" "$mib"
cat "$work"/in/*.jsonl >/dev/null
sync
for mode in streaming staged; do
  cat >"$work/$mode.yaml" <<Y
apiVersion: streambatch.dev/v1alpha1
kind: Pipeline
metadata: {name: auth-$mode}
spec:
  source: {uri: "file://$work/in/", format: jsonl, partitionSize: $psize}
  stages:
  - {name: keep, op: filter, args: {field: lang, op: eq, value: en}}
  - {name: cut, op: project, args: {fields: [id, score]}}
  sink: {uri: "file://$work/out/", format: jsonl}
  execution: {memoryBudget: 256Mi, mode: $mode}
Y
done

. scripts/bench-lib.sh # pressure, median, range, wall_cpu
# run BUILD MODE: one run, its "wall cpu" appended to $work/BUILD-MODE.t
run() {
  local b=$1 mode=$2 dir
  [[ $b == auth ]] && dir=$bin || dir=$pre
  rm -rf "$work/out"
  SB_BIN_DIR=$dir wall_cpu "$work/last.log" "$dir/streambatch" run "$work/$mode.yaml" --cpus 2 \
    >>"$work/$b-$mode.t" || { echo "bench-auth: $b $mode failed:" >&2; tail -5 "$work/last.log" >&2; exit 1; }
  cat "$work"/out/part-*.jsonl | LC_ALL=C sort | md5sum | cut -d' ' -f1 >"$work/$b-$mode.md5"
}
before=$(pressure)
for r in $(seq "$rounds"); do
  echo "bench: auth round $r/$rounds" >&2
  for mode in streaming staged; do
    if ((r % 2)); then run auth "$mode"; run noauth "$mode"; else run noauth "$mode"; run auth "$mode"; fi
    [[ $(cat "$work/auth-$mode.md5") == $(cat "$work/noauth-$mode.md5") ]] ||
      { echo "bench-auth: $mode: the outputs differ" >&2; exit 1; }
  done
done
after=$(pressure)
col() { awk '{print $1}' "$work/$1.t"; }
ratios() { paste -d' ' "$work/$1.t" "$work/$2.t" | awk '{printf "%.4f\n", $1 / $3}' | median; }
echo "## Authentication cost (scripts/bench-auth.sh)"
echo
echo "$(date -u '+%Y-%m-%d %H:%M') UTC, commit $(git rev-parse --short HEAD) against $PREAUTH_BIN;"
echo "$mib MiB of jsonl, partitionSize $psize, 2 workers, $rounds rounds interleaved; machine pressure $before -> $after."
echo
echo "| mode | with tokens (s) | without (s) | ratio (median of rounds) |"
echo "|---|---|---|---|"
for mode in streaming staged; do
  echo "| $mode | $(col auth-$mode | median) ($(col auth-$mode | range)) | $(col noauth-$mode | median) ($(col noauth-$mode | range)) | **$(ratios auth-$mode noauth-$mode)** |"
done
