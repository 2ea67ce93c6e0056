#!/usr/bin/env bash
# Side by side (issue 16, goal 7): streambatch vs Ray Data vs Daft on the same machine, same
# data, rounds interleaved; prints a markdown section on stdout (`make bench-peers` puts it into
# docs/benchmarks.md). Four pipelines, each system writing its output files:
#   etl     ETL_MIB (1024) MiB of jsonl in 16 files (the data of scripts/bench-etl.sh) -> filter
#           lang == "en" -> project [id, score] -> jsonl
#   accel   ACCEL_PARTS (256) 1 MiB partitions -> CPU transform 50 ms/MiB, output 2x its input ->
#           simulated accelerator 25 ms/MiB on 1 slot (bound: accelerator work / 1 slot)
#   micro   the paper's memory microbenchmark: the same at 32 MiB (bound 1.60 s)
#   tiny    TINY_FILES (2000) one-record jsonl files -> identity -> jsonl
# streambatch: `streambatch run --cpus 2` (+ --gpus 1 for accel/micro), the pipelines of
# bench-etl.sh / bench-engine.sh / bench-tiny.sh. Ray Data and Daft: tests/bench/peers/*_run.py,
# their documented APIs with default settings except the CPU/GPU counts, installed into venvs
# cached under ~/.cache/streambatch (the same ones bench-usercode.sh and bench-tiny.sh use;
# benchmark only, never a runtime dependency). Each run is a whole process (start-up and imports
# included) under tests/bench/peers/measure.py: wall time, CPU time, peak Pss and RSS summed
# over the process tree. Every output is checked equal to streambatch's (sorted records).
#   ROUNDS (3; the order of the systems rotates every round), SIZE (full | quick: ETL 128 MiB,
#   64 accel partitions), ETL_MIB, ACCEL_PARTS, TINY_FILES, PEERS (sb,ray,daft), SB_BIN_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
top=$PWD
. scripts/env.sh # SB_BIN_DIR
bin=$SB_BIN_DIR
peers=$top/tests/bench/peers
rounds=${ROUNDS:-3}
case ${SIZE:-full} in
  full) etl_mib=1024 accel=256 ;;
  quick) etl_mib=128 accel=64 ;;
  *) echo "bench-peers: SIZE must be full or quick" >&2; exit 2 ;;
esac
etl_mib=${ETL_MIB:-$etl_mib} accel=${ACCEL_PARTS:-$accel} tiny=${TINY_FILES:-2000}
systems=${PEERS:-sb,ray,daft}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/streambatch
[[ -x $bin/streambatch ]] || { echo "bench-peers: $bin/streambatch is missing (make bench-peers builds it)" >&2; exit 1; }
work=$(mktemp -d /tmp/sb-bench-peers-XXXXXX)
trap 'rm -rf "$work"' EXIT

. scripts/bench-lib.sh # pressure, bench_venv
# venv NAME IMPORT PIP-SPEC: the cached venv (installed once, as bench-usercode.sh/bench-tiny.sh do)
venv() { bench_venv "$cache/$1" "$2" "$3"; }
ray_py=$cache/bench-ray-venv/bin/python daft_py=$cache/bench-daft-venv/bin/python
want_sys() { [[ ",$systems," == *",$1,"* ]]; }
have=(sb)
want_sys ray && venv bench-ray-venv ray.data 'ray[data]>=2.9,<3' && have+=(ray)
want_sys daft && venv bench-daft-venv daft 'daft==0.7.26' && have+=(daft)
# a Python with pyarrow for measure.py and digest.py (parquet outputs)
tool_py=python3
for p in "$ray_py" "$daft_py"; do [[ -x $p ]] && "$p" -c 'import pyarrow' 2>/dev/null && { tool_py=$p; break; }; done

echo "bench-peers: generating data (ETL $etl_mib MiB, $accel + 32 partitions, $tiny files)" >&2
python3 "$peers/gen.py" etl "$work/in-etl" "$etl_mib"
python3 "$peers/gen.py" bin "$work/in-accel" "$accel"
python3 "$peers/gen.py" bin "$work/in-micro" 32
python3 "$peers/gen.py" tiny "$work/in-tiny" "$tiny"
cat "$work"/in-*/* >/dev/null # page cache warm

yaml() { # pipeline source-format partitionSize stages sink-format [source args] [execution]
  cat >"$work/$1.yaml" <<Y
apiVersion: streambatch.dev/v1alpha1
kind: Pipeline
metadata: {name: peers-$1}
spec:
  source: {uri: "file://$work/in-$1/", format: $2, partitionSize: $3${6:+, args: $6}}
  stages:
$4
  sink: {uri: "file://$work/out-$1-sb/", format: $5}
${7:+  execution: $7}
Y
}
yaml etl jsonl 64Mi "  - {name: keep, op: filter, args: {field: lang, op: eq, value: en}}
  - {name: cut, op: project, args: {fields: [id, score]}}" jsonl "" "{memoryBudget: 512Mi}"
for p in accel micro; do
  yaml $p binary 1Mi "  - {name: transform, op: bench.spin, args: {msPerMB: 50, expand: 2}}
  - {name: infer, op: bench.sleep, args: {msPerMB: 25}, resources: {gpu: 1}}" binary "{recordSize: 4096}"
done
yaml tiny jsonl 64Mi "  - {name: a, op: identity}" jsonl

kind() { case $1 in accel | micro) echo chunks ;; *) echo jsonl ;; esac; }
outputs() { # pipeline system: its output files
  case $2 in
    sb) ls "$work/out-$1-sb"/part-* ;;
    *) find "$work/out-$1-$2" -type f \( -name '*.json' -o -name '*.jsonl' -o -name '*.parquet' \) ;;
  esac
}
cmd() { # pipeline system
  case $2 in
    sb) local g=""; [[ $1 == accel || $1 == micro ]] && g="--gpus 1"
        # shellcheck disable=SC2086
        echo "$bin/streambatch" run "$work/$1.yaml" --cpus 2 $g ;;
    ray) echo "$ray_py" "$peers/ray_run.py" "${1/micro/accel}" "$work/in-$1" "$work/out-$1-ray" ;;
    daft) echo "$daft_py" "$peers/daft_run.py" "${1/micro/accel}" "$work/in-$1" "$work/out-$1-daft" ;;
  esac
}
# measure pipeline system round: one run (a failed peer run is retried once: under heavy load
# Ray's start-up can time out); appends a JSON line to results.jsonl
measure() {
  local p=$1 s=$2 r=$3 try res ok=0
  for try in 1 2; do
    rm -rf "$work/out-$p-$s"
    # shellcheck disable=SC2046
    if res=$("$tool_py" "$peers/measure.py" "$work/last.log" $(cmd "$p" "$s")); then ok=1; break; fi
    echo "bench-peers: $p $s failed (try $try): $res $(tail -3 "$work/last.log" | cut -c1-300)" >&2
    [[ $s == sb ]] && { tail -20 "$work/last.log" >&2; exit 1; }
  done
  local digest="" match=0
  if ((ok)); then
    # shellcheck disable=SC2046
    digest=$("$tool_py" "$peers/digest.py" "$(kind "$p")" $(outputs "$p" "$s"))
    [[ $s == sb ]] && echo "$digest" >"$work/want-$p"
    [[ $digest == "$(cat "$work/want-$p")" ]] && match=1
    ((match)) || echo "bench-peers: $p $s: output differs from streambatch's ($digest vs $(cat "$work/want-$p"))" >&2
  fi
  echo "{\"pipeline\": \"$p\", \"system\": \"$s\", \"round\": $r, \"ok\": $ok, \"tries\": $try, \"match\": $match, \"rows\": \"${digest%% *}\", \"m\": ${res:-null}}" >>"$work/results.jsonl"
}
before=$(pressure)
start=$(date +%s)
for r in $(seq "$rounds"); do
  # rotate the order of the systems every round; streambatch runs first in round 1 (its output
  # is the reference)
  order=("${have[@]:$(((r - 1) % ${#have[@]}))}" "${have[@]:0:$(((r - 1) % ${#have[@]}))}")
  for p in etl accel micro tiny; do
    echo "bench-peers: round $r/$rounds $p: ${order[*]}" >&2
    for s in "${order[@]}"; do measure "$p" "$s" "$r"; done
  done
done
after=$(pressure)
versions="streambatch $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
[[ " ${have[*]} " == *" ray "* ]] && versions+=", Ray Data $("$ray_py" -c 'import ray; print(ray.__version__)')"
[[ " ${have[*]} " == *" daft "* ]] && versions+=", Daft $("$daft_py" -c 'import daft; print(daft.__version__)')"
python3 "$peers/report.py" "$work/results.jsonl" "$rounds" "$etl_mib" "$accel" "$tiny" \
  "$before" "$after" "$versions" "$(($(date +%s) - start))" "${SIZE:-full}"
