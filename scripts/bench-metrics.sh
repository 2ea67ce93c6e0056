#!/usr/bin/env bash
# Metrics cost (issue 12), run by `make bench`: the same `streambatch run` with metrics served
# (--metrics-addr, scraped every 0.5 s by curl from the start, as a busy Prometheus would; each
# scrape starts a curl process, whose own CPU counts too) and without, rounds interleaved in A B B A order; prints a markdown section on stdout.
# Two shapes: 4,000 one-file tasks (~0.7 KiB files, partitionSize 1Ki, so no two share a split:
# per-task bookkeeping dominates; files and sink on tmpfs, so
# this disk's file creation does not swamp a 2% bar) and two CPU stages (bench.spin).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${SB_BIN_DIR:-bin}
rounds=${ROUNDS:-5}
tiny_rounds=${TINY_ROUNDS:-$((rounds * 3))} # 0.2 s runs: more of them
tmp=/tmp
[[ -d /dev/shm && -w /dev/shm ]] && tmp=/dev/shm
work=$(mktemp -d "$tmp/sb-bench-metrics-XXXXXX")
scraper=
cleanup() { [[ -n $scraper ]] && kill "$scraper" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
port=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')

mkdir -p "$work/tiny" "$work/bin"
pad=$(printf 'x%.0s' $(seq 700))
for i in $(seq 1 4000); do echo "{\"i\":$i,\"pad\":\"$pad\"}" >"$work/tiny/r$i.jsonl"; done
for i in $(seq -w 1 12); do head -c $((4 << 20)) /dev/urandom >"$work/bin/f$i.bin"; done
cat >"$work/tiny.yaml" <<Y
apiVersion: streambatch.dev/v1alpha1
kind: Pipeline
metadata: {name: tiny}
spec:
  source: {uri: "file://$work/tiny/", format: jsonl, partitionSize: 1Ki}
  stages: [{name: id, op: identity}]
  sink: {uri: "file://$work/out-tiny/", format: jsonl}
Y
cat >"$work/spin.yaml" <<Y
apiVersion: streambatch.dev/v1alpha1
kind: Pipeline
metadata: {name: spin}
spec:
  source: {uri: "file://$work/bin/", format: binary, partitionSize: 1Mi, args: {recordSize: 4096}}
  stages:
  - {name: a, op: bench.spin, args: {msPerMB: 50}}
  - {name: b, op: bench.spin, args: {msPerMB: 50}}
  sink: {uri: "file://$work/out-spin/", format: binary}
  execution: {memoryBudget: 64Mi}
Y

secs() { # name [metrics] -> wall seconds of the whole command
  local t0 t1
  t0=$(date +%s.%N)
  if [[ ${2:-} == on ]]; then
    (while :; do curl -fs "http://127.0.0.1:$port/metrics" >/dev/null || true; sleep 0.5; done) &
    scraper=$!
    "$bin/streambatch" run "$work/$1.yaml" --cpus 2 --metrics-addr "127.0.0.1:$port" \
      >"$work/$1.log" 2>&1 || { tail "$work/$1.log" >&2; return 1; }
    kill "$scraper"; wait "$scraper" 2>/dev/null || true; scraper=
  else
    "$bin/streambatch" run "$work/$1.yaml" --cpus 2 >"$work/$1.log" 2>&1 || { tail "$work/$1.log" >&2; return 1; }
  fi
  t1=$(date +%s.%N)
  echo "$t1 - $t0" | bc -l
}
. "$(dirname "${BASH_SOURCE[0]}")/bench-lib.sh" # median, range

echo
echo "## Metrics cost (scripts/bench-metrics.sh)"
echo
echo "$(date -u '+%Y-%m-%d %H:%M UTC'); $rounds rounds ($tiny_rounds of the tasks), off and on interleaved (A B B A); \"on\" serves"
echo "\`--metrics-addr\` and is scraped every 0.5 s from its start. Files and sink on $tmp. Goal (issue 12): at most"
echo "2% slower."
echo
echo "| pipeline | off: median s (range) | on: median s (range) | on / off |"
echo "|---|---|---|---|"
for p in tiny spin; do
  off=() on=()
  n=$rounds
  [[ $p == tiny ]] && n=$tiny_rounds
  for r in $(seq "$n"); do
    if ((r % 2)); then
      off+=("$(secs $p)"); on+=("$(secs $p on)")
    else
      on+=("$(secs $p on)"); off+=("$(secs $p)")
    fi
  done
  mo=$(median "${off[@]}"); mn=$(median "${on[@]}")
  label=$([[ $p == tiny ]] && echo "4,000 one-record files -> identity, a task each" || echo "48 MiB, two bench.spin stages (50 ms/MiB each)")
  printf '| %s | %.2f (%s) | %.2f (%s) | %.3f |\n' "$label" "$mo" "$(range "${off[@]}")" "$mn" \
    "$(range "${on[@]}")" "$(echo "$mn / $mo" | bc -l)"
done
