#!/usr/bin/env bash
# Early reduces side by side (issue 41; docs/architecture.md, "Early reduces"): the same
# all-to-all pipelines run by `streambatch run --cpus 2` with reduce tasks that may start in the
# map op's tail (the default) and with them held to the barrier (SB_SCHED_OFF=early-reduces),
# alternating, on bench-a2a's groupby input (SIZE MiB, 10,000 keys): groupby (count, sum, mean),
# random_shuffle and distinct by key. Every output is checked (tests/bench/a2a/check.py for
# groupby and shuffle; distinct: one row per key). Prints a Markdown table: median wall seconds
# of each (and their range), the ratio, and how many reduce tasks started early.
#   scripts/bench-early-reduce.sh   (SB_BIN_DIR; SIZE=1024, ROUNDS=3, PSIZE=32Mi,
#   OPS=groupby,shuffle,distinct, CPUS=2 workers, SHUFFLE_PARTS=its default; SLEEP_MS_PER_MB=0: a bench.sleep stage before
#   the op, map tasks that wait rather than compute, as on a slow source; the data is
#   made and checked with numpy and pyarrow, installed from PyPI into a venv under
#   ~/.cache/streambatch the first time)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh       # SB_BIN_DIR
. scripts/bench-lib.sh # pressure, median, range, wall_cpu
bin=$SB_BIN_DIR here=$PWD/tests/bench/a2a
mib=${SIZE:-1024} rounds=${ROUNDS:-3} psize=${PSIZE:-32Mi} ops=${OPS:-groupby,shuffle,distinct}
cpus=${CPUS:-2} sleep_mb=${SLEEP_MS_PER_MB:-0}
[[ -x $bin/streambatch ]] || { echo "bench-early-reduce: $bin/streambatch is missing" >&2; exit 1; }
venv=$HOME/.cache/streambatch/bench-early-venv py=$venv/bin/python
if ! "$py" -c 'import numpy, pyarrow' 2>/dev/null; then
  echo "bench-early-reduce: installing numpy and pyarrow into $venv" >&2
  rm -rf "$venv" && python3 -m venv "$venv" &&
    "$venv/bin/pip" install -q --disable-pip-version-check numpy pyarrow >&2 ||
    { echo "bench-early-reduce: could not install numpy and pyarrow" >&2; exit 1; }
fi
work=$(mktemp -d /tmp/sb-bench-early-XXXXXX)
trap 'rm -rf "$work"' EXIT
echo "bench-early-reduce: generating $mib MiB of jsonl" >&2
"$py" "$here/gen.py" groupby "$work/in" "$mib" >/dev/null

stage() {
  case $1 in
  groupby) echo "{name: x, op: groupby, args: {keys: [key], partitions: 4, aggregates: [{op: count, as: count}, {op: sum, field: v, as: sum_v}, {op: mean, field: w, as: mean_w}]}}" ;;
  shuffle) echo "{name: x, op: random_shuffle, args: {seed: 1${SHUFFLE_PARTS:+, partitions: $SHUFFLE_PARTS}}}" ;;
  distinct) echo "{name: x, op: distinct, args: {fields: [key], partitions: 4}}" ;;
  esac
}
for op in groupby shuffle distinct; do
  cat >"$work/$op.yaml" <<EOY
apiVersion: streambatch.dev/v1alpha1
kind: Pipeline
metadata: {name: early-$op}
spec:
  source: {uri: 'file://$work/in/', format: jsonl, partitionSize: $psize}
  stages:
$([[ $sleep_mb == 0 ]] || echo "  - {name: slow, op: bench.sleep, args: {msPerMB: $sleep_mb}}")
  - $(stage "$op")
  sink: {uri: 'file://$work/out/', format: jsonl}
EOY
done

check() { # op
  case $1 in
  groupby | shuffle) "$py" "$here/check.py" "$1" "$work/in" "$work/out" >/dev/null ;;
  distinct) python3 - "$work/in" "$work/out" <<'EOP'
import glob, json, sys
want = {json.loads(l)["key"] for f in glob.glob(sys.argv[1] + "/*.jsonl") for l in open(f)}
got = [json.loads(l)["key"] for f in glob.glob(sys.argv[2] + "/part-*") for l in open(f)]
sys.exit(0 if len(got) == len(set(got)) and set(got) == want else "distinct: wrong keys")
EOP
    ;;
  esac
}

declare -A walls early
before=$(pressure)
for r in $(seq "$rounds"); do
  for op in ${ops//,/ }; do
    for mode in $( ((r % 2)) && echo "on off" || echo "off on"); do
      rm -rf "$work/out"
      cat "$work"/in/*.jsonl >/dev/null # page cache warm for both
      off=""
      [[ $mode == off ]] && off=early-reduces
      t=$(SB_SCHED_OFF=$off wall_cpu "$work/log" "$bin/streambatch" run "$work/$op.yaml" --cpus "$cpus" \
        --summary-json "$work/sum.json") || { echo "bench-early-reduce: $op $mode failed" >&2; exit 1; }
      check "$op" || { echo "bench-early-reduce: $op $mode: the output is wrong" >&2; exit 1; }
      n=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["earlyReduces"])' "$work/sum.json")
      walls[$op-$mode]+="${t%% *} "
      early[$op-$mode]+="$n "
      echo "bench-early-reduce: $op early reduces $mode, round $r: ${t%% *} s, $n started early" >&2
    done
  done
done
after=$(pressure)

echo "Early reduces side by side: \`scripts/bench-early-reduce.sh\` (SIZE=$mib MiB, ROUNDS=$rounds,"
echo "partitionSize $psize, \`--cpus $cpus\`, SLEEP_MS_PER_MB=$sleep_mb${SHUFFLE_PARTS:+, SHUFFLE_PARTS=$SHUFFLE_PARTS}), $(date -u '+%Y-%m-%d %H:%M UTC'), streambatch $(git rev-parse --short HEAD 2>/dev/null || echo unknown)."
echo "Before: $before; after: $after."
echo
echo "| op | wall s, early reduces on (range) | off (range) | on / off | reduce tasks started early (on) |"
echo "|---|---|---|---|---|"
for op in ${ops//,/ }; do
  # shellcheck disable=SC2086
  on=$(median ${walls[$op-on]}) off=$(median ${walls[$op-off]})
  # shellcheck disable=SC2086
  printf '| %s | %.2f (%s) | %.2f (%s) | %.3f | %s |\n' "$op" "$on" "$(range ${walls[$op-on]})" \
    "$off" "$(range ${walls[$op-off]})" "$(awk -v a="$on" -v b="$off" 'BEGIN { print a / b }')" \
    "${early[$op-on]% }"
done
