#!/usr/bin/env bash
# Many tiny input files (issue 16, goal 3), run by `make bench`; prints a markdown section.
# 2,000 one-record jsonl files -> identity -> jsonl, streambatch (2 CPU workers) against Daft
# (its documented read_json/write_json, default settings; in a venv cached outside the repo,
# benchmark only) in the same run, rounds interleaved, whole process times (start-up included
# for both), outputs checked equal. Also the same files with partitionSize 1Ki, validate's
# floor (no coalescing: each file is ~0.6 KiB, so two never share a split: a task per file),
# to show what grouping small files into splits buys.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh # SB_BIN_DIR
bin=$SB_BIN_DIR
rounds=${ROUNDS:-5}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/streambatch
work=$(mktemp -d /tmp/sb-bench-tiny-XXXXXX)
trap 'rm -rf "$work"' EXIT
python3 tests/bench/peers/gen.py tiny "$work/in" 2000
for v in grouped:64Mi pertask:1Ki gpu:64Mi; do
  name=${v%%:*} ps=${v#*:}
  extra=""
  [[ $name == gpu ]] && extra="  - {name: b, op: identity, resources: {gpu: 1}}"
  cat >"$work/$name.yaml" <<EOF2
apiVersion: streambatch.dev/v1alpha1
kind: Pipeline
metadata: {name: tiny-$name}
spec:
  source: {uri: 'file://$work/in/', format: jsonl, partitionSize: $ps}
  stages:
  - {name: a, op: identity}
$extra
  sink: {uri: 'file://$work/out-$name/', format: jsonl}
EOF2
done
daft_py=$cache/bench-daft-venv/bin/python
if [[ ! -x $daft_py ]] || ! "$daft_py" -c 'import daft' 2>/dev/null; then
  echo "bench: installing daft into $cache/bench-daft-venv (once)" >&2
  rm -rf "$cache/bench-daft-venv"
  { python3 -m venv "$cache/bench-daft-venv" &&
      timeout 900 "$cache/bench-daft-venv/bin/pip" install -q --disable-pip-version-check "daft==0.7.26"; } >&2 ||
    echo "bench: daft could not be installed; Daft is not measured" >&2
fi
have_daft=0
"$daft_py" -c 'import daft' 2>/dev/null && have_daft=1
cat >"$work/daft_run.py" <<'PY'
import shutil, sys
import daft
shutil.rmtree(sys.argv[2], ignore_errors=True)
daft.read_json(sys.argv[1] + "/in/*.jsonl").write_json(sys.argv[2])
PY
secs() { local t0 t1; t0=$(date +%s.%N); "$@" >"$work/last.log" 2>&1 || { tail "$work/last.log" >&2; return 1; }
  t1=$(date +%s.%N); echo "$t1 - $t0" | bc -l; }
. "$(dirname "${BASH_SOURCE[0]}")/bench-lib.sh" # median, range
digest() { cat "$@" | python3 -c '
import json, sys, hashlib
rows = sorted(json.dumps(json.loads(l), sort_keys=True) for l in sys.stdin if l.strip())
print(len(rows), hashlib.md5("\n".join(rows).encode()).hexdigest())'; }
run_sb() { rm -rf "$work/out-$1"; "$bin/streambatch" run "$work/$1.yaml" --cpus 2 ${2:+--gpus $2}; }
want=$(digest "$work"/in/*.jsonl)
g=() p=() d=() u=()
for r in $(seq "$rounds"); do
  echo "bench: tiny files round $r/$rounds" >&2
  g+=("$(secs run_sb grouped)")
  ((have_daft)) && d+=("$(secs "$daft_py" "$work/daft_run.py" "$work" "$work/out-daft")")
  p+=("$(secs run_sb pertask)")
  u+=("$(secs run_sb gpu 1)")
  if [[ $r == 1 ]]; then
    for o in grouped pertask gpu; do
      [[ $(digest "$work"/out-$o/part-*.jsonl) == "$want" ]] || { echo "bench: $o output differs" >&2; exit 1; }
    done
    ((have_daft)) && { [[ $(digest "$work"/out-daft/*) == "$want" ]] || { echo "bench: daft output differs" >&2; exit 1; }; }
  fi
done
mg=$(median "${g[@]}") mp=$(median "${p[@]}")
parts=$(ls "$work"/out-grouped/part-* | wc -l)
echo
echo "## Many tiny files (scripts/bench-tiny.sh)"
echo
echo "$(date -u '+%Y-%m-%d %H:%M UTC'); $rounds rounds interleaved, medians (range), whole processes"
echo "(start-up included), outputs checked equal. 2,000 one-record jsonl files -> identity ->"
echo "jsonl on 2 CPU workers."
echo
echo "| run | median s (range) | / streambatch |"
echo "|---|---|---|"
printf '| streambatch, small files grouped into splits (%s sink parts) | %.2f (%s) | 1.00 |\n' "$parts" "$mg" "$(range "${g[@]}")"
printf '| streambatch, partitionSize 1Ki (a task per ~0.6 KiB file) | %.2f (%s) | %.1f |\n' "$mp" "$(range "${p[@]}")" "$(echo "$mp / $mg" | bc -l)"
mu=$(median "${u[@]}")
printf '| streambatch, + a second stage on the GPU pool (--gpus 1; 3 worker processes) | %.2f (%s) | %.1f |\n' "$mu" "$(range "${u[@]}")" "$(echo "$mu / $mg" | bc -l)"
if ((have_daft)); then
  md=$(median "${d[@]}")
  printf '| Daft 0.7.26 read_json/write_json (import included) | %.2f (%s) | %.1f |\n' "$md" "$(range "${d[@]}")" "$(echo "$md / $mg" | bc -l)"
else
  echo "| Daft | not installed (pip failed) | |"
fi
echo
echo "Consecutive whole files smaller than partitionSize share a split (up to 256 files, their"
echo "sizes summing to at most partitionSize): one task reads them in order into the same"
echo "partitions. Goals (issue 16): at least 2x faster than Daft in the same run; a local run's"
echo "start-to-exit overhead (these runs do next to no work) at most 0.3 s, with a GPU pool too:"
echo "workers the controller tells to exit no longer linger 2 s for late fetch readers."
