#!/usr/bin/env bash
# The all-to-all ops side by side (issue 41, docs/benchmarks.md "All-to-all ops side by side"):
# sort of SORT_MIB of jsonl by a 100-byte string key, groupby of SIZE MiB (10,000 keys; count, sum,
# mean) and random_shuffle of the same SIZE MiB, each run by streambatch (`streambatch run --cpus
# 2` with a pipeline written here), Ray Data (sort, groupby().aggregate, random_shuffle), Daft and
# DuckDB (tests/bench/a2a/peer.py) on the same input files, the systems' order rotating between
# ops and rounds; every output checked by tests/bench/a2a/check.py (sort: the keys in order and
# the same rows; groupby: equal to pyarrow's group_by, mean within 1e-9 relative; shuffle: the
# same multiset of rows, not the input's order). Wall seconds, CPU and peak memory of the process
# tree (tests/bench/peers/measure.py), and streambatch's speed-up over each peer.
#   scripts/bench-a2a.sh   (SB_BIN_DIR; SIZE=1024 MiB for groupby and shuffle, SORT_MIB=2*SIZE,
#                           ROUNDS=1, PEERS=ray,daft,duckdb, OPS=sort,groupby,shuffle)
# Prints a Markdown section on stdout. Peers that cannot be installed are left out, and said so.
set -euo pipefail
cd "$(dirname "$0")/.."
top=$PWD
. scripts/env.sh       # SB_BIN_DIR
. scripts/bench-lib.sh # pressure, bench_peers
bin=$SB_BIN_DIR here=$top/tests/bench/a2a peers=$top/tests/bench/peers
mib=${SIZE:-1024} sort_mib=${SORT_MIB:-$((2 * ${SIZE:-1024}))} rounds=${ROUNDS:-1}
systems=${PEERS:-ray,daft,duckdb} ops=${OPS:-sort,groupby,shuffle}
[[ -x $bin/streambatch ]] || { echo "bench-a2a: $bin/streambatch is missing" >&2; exit 1; }
work=$(mktemp -d /tmp/sb-bench-a2a-XXXXXX)
trap 'rm -rf "$work"' EXIT

declare -A py
bench_peers bench-a2a "$systems" # tool, py[...], have (bench-lib.sh; shared with bench-parquet.sh)

echo "bench-a2a: generating $sort_mib MiB (sort) and $mib MiB (groupby, shuffle) of jsonl" >&2
sort_rows=0 group_rows=0
[[ ,$ops, == *,sort,* ]] && sort_rows=$("$tool" "$here/gen.py" sort "$work/in-sort" "$sort_mib")
[[ ,$ops, == *,groupby,* || ,$ops, == *,shuffle,* ]] && group_rows=$("$tool" "$here/gen.py" groupby "$work/in-group" "$mib")

# the streambatch stage of each op. Partitions: reduce tasks of about 128 MiB for sort (its
# reduce holds its range in memory, bounded by a quarter of the 2Gi default budget); groupby's
# reduce holds only 10,000 keys; random_shuffle takes its default, one reduce task per map task
# (as the peers take theirs). With reduce tasks of 256 MiB, as here until 2026-11-30, each one
# spilled past half its share: at 1 GiB that took 20.4 s and 3.1 GiB of worker RSS, against
# 10.8 s and 1.3 GiB with the default.
stage() {
  case $1 in
  sort) echo "{name: x, op: sort, args: {keys: [{field: key}], partitions: $(((sort_mib + 127) / 128 > 4 ? (sort_mib + 127) / 128 : 4))}}" ;;
  groupby) echo "{name: x, op: groupby, args: {keys: [key], partitions: 4, aggregates: [{op: count, as: count}, {op: sum, field: v, as: sum_v}, {op: mean, field: w, as: mean_w}]}}" ;;
  shuffle) echo "{name: x, op: random_shuffle, args: {seed: 1}}" ;;
  esac
}
src() { if [[ $1 == sort ]]; then echo "$work/in-sort"; else echo "$work/in-group"; fi; }
for op in ${ops//,/ }; do
  cat >"$work/$op.yaml" <<EOY
apiVersion: streambatch.dev/v1alpha1
kind: Pipeline
metadata: {name: a2a-$op}
spec:
  source: {uri: 'file://$(src "$op")/', format: jsonl, partitionSize: 32Mi}
  stages:
  - $(stage "$op")
  sink: {uri: 'file://$work/out/', format: jsonl}
EOY
done
cmd() { # op system
  case $2 in
  sb) echo "$bin/streambatch" run "$work/$1.yaml" --cpus 2 --summary-json "$work/sum-$1.json" ;;
  *) echo "${py[$2]}" "$here/peer.py" "$2" "$1" "$(src "$1")" "$work/out" ;;
  esac
}
measure() { # op system round
  local op=$1 s=$2 r=$3 res="" chk='{"ok": false, "why": "the run failed"}'
  rm -rf "$work/out"
  cat "$(src "$op")"/*.jsonl >/dev/null # page cache warm for everyone
  # shellcheck disable=SC2046
  if res=$("$tool" "$peers/measure.py" "$work/last.log" $(cmd "$op" "$s")); then
    chk=$("$tool" "$here/check.py" "$op" "$(src "$op")" "$work/out") ||
      echo "bench-a2a: $op $s: the output is wrong: $chk" >&2
  else
    echo "bench-a2a: $op $s failed: $(tail -5 "$work/last.log" | cut -c1-300)" >&2
  fi
  [[ $s == sb && -f $work/sum-$op.json ]] && cp "$work/sum-$op.json" "$work/sum-$op-r$r.json"
  rm -rf "$work/out"
  echo "{\"op\": \"$op\", \"system\": \"$s\", \"round\": $r, \"m\": ${res:-null}, \"check\": $chk}" >>"$work/results.jsonl"
  echo "bench-a2a: $op $s round $r: ${res:-failed} $chk" >&2
}
before=$(pressure)
i=0
for r in $(seq "$rounds"); do
  for op in ${ops//,/ }; do
    # the systems in an order that rotates between ops and rounds (load spikes spread out)
    n=${#have[@]}
    for k in $(seq 0 $((n - 1))); do measure "$op" "${have[$(((k + i) % n))]}" "$r"; done
    i=$((i + 1))
  done
done
after=$(pressure)
versions="streambatch $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
[[ -n ${py[ray]:-} ]] && versions+=", Ray Data $("$tool" -c 'import ray; print(ray.__version__)')"
[[ -n ${py[daft]:-} ]] && versions+=", Daft $("${py[daft]}" -c 'import daft; print(daft.__version__)')"
[[ -n ${py[duckdb]:-} ]] && versions+=", DuckDB $("${py[duckdb]}" -c 'import duckdb; print(duckdb.__version__)')"
[[ -n ${SB_A2A_KEEP:-} ]] && cp "$work"/results.jsonl "$work"/sum-*.json "$SB_A2A_KEEP"/ 2>/dev/null
"$tool" "$here/report.py" "$work/results.jsonl" "$sort_mib" "$mib" "$sort_rows" "$group_rows" \
  "$rounds" "$before" "$after" "$versions"
