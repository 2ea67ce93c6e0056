#!/usr/bin/env bash
# The Parquet benchmark (issue 39, docs/benchmarks.md "Parquet: filter, project, write"): about
# 1 GiB of Parquet written by pyarrow (8 columns: ints, doubles, strings, a 64-float list; zstd;
# tests/bench/parquet/gen.py) -> a filter on one column (k < 20: a fifth of the rows) -> the
# columns id, x, s, vec -> Parquet (zstd), in one run side by side: streambatch (`streambatch run
# --cpus 2`), pyarrow.dataset, DuckDB (COPY ... TO), Daft and Ray Data (tests/bench/parquet/
# peer.py), each output checked equal to streambatch's (row count and a content digest,
# digest.py). Then the selective filter (id >= the last 1% of ids: about 1% of the row groups
# match): the bytes streambatch fetched (its summary) against the file's size.
#   scripts/bench-parquet.sh          (SB_BIN_DIR; PQ_MIB=1024, ROUNDS=1, PEERS=pyarrow,duckdb,daft,ray)
# Prints a Markdown section on stdout. Peers that cannot be installed are left out, and said so.
set -euo pipefail
cd "$(dirname "$0")/.."
top=$PWD
. scripts/env.sh # SB_BIN_DIR
. scripts/bench-lib.sh # pressure, bench_peers
bin=$SB_BIN_DIR here=$top/tests/bench/parquet peers=$top/tests/bench/peers
mib=${PQ_MIB:-1024} rounds=${ROUNDS:-1} systems=${PEERS:-pyarrow,duckdb,daft,ray}
[[ -x $bin/streambatch ]] || { echo "bench-parquet: $bin/streambatch is missing" >&2; exit 1; }
work=$(mktemp -d /tmp/sb-bench-parquet-XXXXXX)
trap 'rm -rf "$work"' EXIT

declare -A py
bench_peers bench-parquet "$systems" # tool, py[...], have (bench-lib.sh; shared with bench-a2a.sh)
py[pyarrow]=$tool py[ray]=$tool      # numpy + pyarrow: gen.py, digest.py, measure.py

echo "bench-parquet: generating $mib MiB of Parquet" >&2
"$tool" "$here/gen.py" "$work/in" "$mib" >"$work/gen.txt"
read -r nrows fsize <"$work/gen.txt"
cat "$work/in/data.parquet" >/dev/null # page cache warm
cut=$((nrows - nrows / 100))

yaml() { # name field op value
  cat >"$work/$1.yaml" <<Y
apiVersion: streambatch.dev/v1alpha1
kind: Pipeline
metadata: {name: pq-$1}
spec:
  source: {uri: "file://$work/in/", format: parquet, partitionSize: 64Mi, args: {columns: [id, k, x, s, vec]}}
  stages:
  - {name: keep, op: filter, args: {field: $2, op: $3, value: $4}}
  - {name: cut, op: project, args: {fields: [id, x, s, vec]}}
  sink: {uri: "file://$work/out-$1-sb/", format: parquet}
  execution: {memoryBudget: 1Gi}
Y
}
yaml main k lt 20
yaml sel id ge "$cut"
args() { case $1 in main) echo "k lt 20" ;; sel) echo "id ge $cut" ;; esac; }
cmd() { # query system
  case $2 in
    sb) echo "$bin/streambatch" run "$work/$1.yaml" --cpus 2 --summary-json "$work/sum-$1.json" ;;
    *) echo "${py[$2]}" "$here/peer.py" "$2" "$work/in" "$work/out-$1-$2" $(args "$1") ;;
  esac
}
measure() { # query system round
  local q=$1 s=$2 r=$3 res ok=0 digest="" match=0
  rm -rf "$work/out-$q-$s"
  # shellcheck disable=SC2046
  if res=$("$tool" "$peers/measure.py" "$work/last.log" $(cmd "$q" "$s")); then
    ok=1
    digest=$("$tool" "$here/digest.py" $(find "$work/out-$q-$s" -name '*.parquet' | sort))
    [[ $s == sb && $r == 1 ]] && echo "$digest" >"$work/want-$q"
    [[ $digest == "$(cat "$work/want-$q")" ]] && match=1
    ((match)) || echo "bench-parquet: $q $s: output differs from streambatch's ($digest vs $(cat "$work/want-$q"))" >&2
  else
    echo "bench-parquet: $q $s failed: $(tail -5 "$work/last.log" | cut -c1-300)" >&2
    [[ $s == sb ]] && exit 1
  fi
  local read=null
  [[ $s == sb && -f $work/sum-$q.json ]] && read=$("$tool" -c "import json,sys; print(json.load(open(sys.argv[1]))['sourceBytesRead'])" "$work/sum-$q.json")
  echo "{\"q\": \"$q\", \"system\": \"$s\", \"round\": $r, \"ok\": $ok, \"match\": $match, \"rows\": \"${digest%% *}\", \"read\": $read, \"m\": ${res:-null}}" >>"$work/results.jsonl"
  echo "bench-parquet: $q $s round $r: ${res:-failed} match=$match" >&2
}
before=$(pressure)
for r in $(seq "$rounds"); do
  for s in "${have[@]}"; do measure main "$s" "$r"; done
  for s in sb pyarrow; do [[ " ${have[*]} " == *" $s "* ]] && measure sel "$s" "$r"; done
done
after=$(pressure)
versions="streambatch $(git rev-parse --short HEAD 2>/dev/null || echo unknown), pyarrow $("$tool" -c 'import pyarrow; print(pyarrow.__version__)')"
[[ -n ${py[duckdb]:-} ]] && versions+=", DuckDB $("${py[duckdb]}" -c 'import duckdb; print(duckdb.__version__)')"
[[ -n ${py[daft]:-} ]] && versions+=", Daft $("${py[daft]}" -c 'import daft; print(daft.__version__)')"
versions+=", Ray Data $("$tool" -c 'import ray; print(ray.__version__)')"
"$tool" "$here/report.py" "$work/results.jsonl" "$nrows" "$fsize" "$cut" "$before" "$after" "$versions"
