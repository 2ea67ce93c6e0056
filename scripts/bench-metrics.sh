#!/usr/bin/env bash
# Metrics cost (issue 12), run by `make bench`: the same `streambatch run` with metrics served
# (--metrics-addr, scraped every 0.5 s by curl from the start, as a busy Prometheus would) and
# without, rounds interleaved in A B B A order; wall time and the CPU time of the run's process
# tree (not the scraper's), per-round ratios; prints a markdown section on stdout.
# Two shapes: 4,000 one-file tasks (~0.7 KiB files, partitionSize 1Ki, so no two share a split:
# per-task bookkeeping dominates; files and sink on tmpfs, so
# this disk's file creation does not swamp a 2% bar) and two CPU stages (bench.spin).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh # SB_BIN_DIR, SB_BUILD_DIR
bin=$SB_BIN_DIR
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

# run1 name [on] -> "wall cpu": seconds of the whole `streambatch run` and the CPU seconds
# (user + sys) of its process tree (the CLI with its controller, and its workers, which it
# reaps); the scraper's curl processes are Prometheus's cost, not counted in cpu
run1() {
  if [[ ${2:-} == on ]]; then
    (while :; do curl -fs "http://127.0.0.1:$port/metrics" >/dev/null || true; sleep 0.5; done) &
    scraper=$!
    wall_cpu "$work/$1.log" "$bin/streambatch" run "$work/$1.yaml" --cpus 2 \
      --metrics-addr "127.0.0.1:$port" || return 1
    kill "$scraper"; wait "$scraper" 2>/dev/null || true; scraper=
  else
    wall_cpu "$work/$1.log" "$bin/streambatch" run "$work/$1.yaml" --cpus 2 || return 1
  fi
}
. "$(dirname "${BASH_SOURCE[0]}")/bench-lib.sh" # median, range, wall_cpu

echo
echo "## Metrics cost (scripts/bench-metrics.sh)"
echo
echo "$(date -u '+%Y-%m-%d %H:%M UTC'); $rounds rounds ($tiny_rounds of the tasks), off and on interleaved (A B B A); \"on\" serves"
echo "\`--metrics-addr\` and is scraped every 0.5 s from its start. Files and sink on $tmp. Wall: the"
echo "whole run; CPU: user + sys of its process tree (controller and workers; not the scraper's curl)."
echo "on / off: the median of the rounds' ratios (each \"on\" run against the \"off\" run next to it)."
echo "Goal (issue 12): metrics cost at most 2% (CPU, the work they add; wall times of these short runs"
echo "on 2 shared CPUs move by more than that between rounds: both are shown)."
echo
echo "| pipeline | off: wall s (range) | on: wall s (range) | on / off, wall | off: CPU s | on: CPU s | on / off, CPU |"
echo "|---|---|---|---|---|---|---|"
for p in tiny spin; do
  : >"$work/off.t"; : >"$work/on.t"
  n=$rounds
  [[ $p == tiny ]] && n=$tiny_rounds
  for r in $(seq "$n"); do
    if ((r % 2)); then
      run1 $p >>"$work/off.t"; run1 $p on >>"$work/on.t"
    else
      run1 $p on >>"$work/on.t"; run1 $p >>"$work/off.t"
    fi
  done
  col() { awk -v c="$2" '{print $c}' "$work/$1.t"; }
  ratio() { paste -d' ' "$work/on.t" "$work/off.t" | awk -v c="$1" '{printf "%.4f\n", $c / $(c + 2)}' | median; }
  label=$([[ $p == tiny ]] && echo "4,000 one-record files -> identity, a task each" || echo "48 MiB, two bench.spin stages (50 ms/MiB each)")
  printf '| %s | %.2f (%s) | %.2f (%s) | %.3f | %.2f (%s) | %.2f (%s) | **%.3f** |\n' "$label" \
    "$(col off 1 | median)" "$(col off 1 | range)" "$(col on 1 | median)" "$(col on 1 | range)" \
    "$(ratio 1)" "$(col off 2 | median)" "$(col off 2 | range)" "$(col on 2 | median)" \
    "$(col on 2 | range)" "$(ratio 2)"
done
