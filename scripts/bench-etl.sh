#!/usr/bin/env bash
# ETL near the limit (issue 16, goal 1), run by `make bench`; prints a markdown section.
# 1 GiB of jsonl (~200-byte records, the data of scripts/bench-storage.sh) in 16 files, page
# cache warm -> filter lang == "en" -> project [id, score] -> jsonl files:
#   streambatch run, 2 CPU workers (whole process: start-up, planning and commit included)
#   tests/bench/bench_etl_c: the same work as one C program with no framework, 2 threads (read,
#     check UTF-8, validate each record strictly, find the fields, copy the kept ones, write,
#     fsync + rename each output file as the file sink does)
#   bench_etl_c --no-validate: the same without the UTF-8 and JSON checks (a lower bound on
#     input one trusts; streambatch always validates)
# Rounds interleaved (the order flips every round), whole-process wall and CPU time (user+sys,
# children included), medians and ranges; the ratios (the other program's wall time / streambatch's)
# are medians of the per-round ratios.
# Outputs checked equal (the same records) in the first round.
#   ROUNDS (default 5), ETL_MIB (default 1024), SB_BIN_DIR, SB_BUILD_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh # SB_BIN_DIR, SB_BUILD_DIR
bin=$SB_BIN_DIR
build=$SB_BUILD_DIR
cbin=$build/bench/bench_etl_c
rounds=${ROUNDS:-5}
mib=${ETL_MIB:-1024}
[[ -x $cbin ]] || { echo "bench-etl: $cbin is missing (make bench builds it)" >&2; exit 1; }
work=$(mktemp -d /tmp/sb-bench-etl-XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/in"
python3 tests/bench/peers/gen.py etl "$work/in" "$mib"
bytes=$(cat "$work"/in/*.jsonl | wc -c)
cat "$work"/in/*.jsonl >/dev/null # page cache warm
# the input just written is on disk before the first round: streambatch's commit syncs the
# output's filesystem (one syncfs), which would otherwise write 1 GiB of input in round 1
sync
cat >"$work/etl.yaml" <<Y
apiVersion: streambatch.dev/v1alpha1
kind: Pipeline
metadata: {name: etl}
spec:
  source: {uri: "file://$work/in/", format: jsonl, partitionSize: 64Mi}
  stages:
  - {name: keep, op: filter, args: {field: lang, op: eq, value: en}}
  - {name: cut, op: project, args: {fields: [id, score]}}
  sink: {uri: "file://$work/out-sb/", format: jsonl}
  execution: {memoryBudget: 512Mi}
Y

. scripts/bench-lib.sh # pressure, median, range, wall_cpu
# timed NAME CMD...: runs CMD, appends "wall cpu" to $work/NAME.t
timed() {
  local name=$1
  shift
  wall_cpu "$work/last.log" "$@" >>"$work/$name.t" || { echo "bench-etl: $name failed" >&2; exit 1; }
}
run_sb() { rm -rf "$work/out-sb"; timed sb "$bin/streambatch" run "$work/etl.yaml" --cpus 2; }
run_c() { rm -rf "$work/out-c"; timed c "$cbin" lang en id,score "$work/out-c" "$work"/in/*.jsonl; }
run_cn() {
  rm -rf "$work/out-cn"
  timed cn "$cbin" --no-validate lang en id,score "$work/out-cn" "$work"/in/*.jsonl
}
records() { cat "$@" | LC_ALL=C sort | md5sum | cut -d' ' -f1; }
before=$(pressure)
for r in $(seq "$rounds"); do
  echo "bench: etl round $r/$rounds" >&2
  if ((r % 2)); then run_sb; run_c; run_cn; else run_cn; run_c; run_sb; fi
  if [[ $r == 1 ]]; then
    want=$(records "$work"/out-c/*.jsonl)
    [[ $(records "$work"/out-sb/part-*.jsonl) == "$want" ]] ||
      { echo "bench-etl: streambatch's output differs from bench_etl_c's" >&2; exit 1; }
    [[ $(records "$work"/out-cn/*.jsonl) == "$want" ]] ||
      { echo "bench-etl: bench_etl_c --no-validate's output differs" >&2; exit 1; }
  fi
done
after=$(pressure)
kept=$(cat "$work"/out-c/*.jsonl | wc -l)
col() { awk -v c="$2" '{print $c}' "$work/$1.t"; }
# per-round ratio of wall times (cpu: of CPU times): A's / B's, the median
ratios() { paste -d' ' "$work/$1.t" "$work/$2.t" | awk '{printf "%.4f\n", $1 / $3}' | median; }
cpu_ratios() { paste -d' ' "$work/$1.t" "$work/$2.t" | awk '{printf "%.4f\n", $2 / $4}' | median; }
row() { # name label wall-ratio cpu-ratio
  local w c
  w=$(col "$1" 1 | median) c=$(col "$1" 2 | median)
  printf '| %s | %.2f (%s) | %.2f | %.2f (%s) | %s | %s |\n' "$2" "$w" "$(col "$1" 1 | range)" \
    "$(echo "$bytes / $w / 1000000000" | bc -l)" "$c" "$(col "$1" 2 | range)" "$3" "$4"
}
ratio=$(ratios c sb)
gbs=$(echo "$bytes / $(col sb 1 | median) / 1000000000" | bc -l)
met() { awk -v v="$1" -v g="$2" 'BEGIN { print (v >= g) ? "met" : "not met" }'; }
echo
echo "## ETL: jsonl filter + project (scripts/bench-etl.sh)"
echo
echo "$(date -u '+%Y-%m-%d %H:%M UTC'); $rounds rounds interleaved (order flipped every round), medians"
echo "(range), whole processes; outputs checked equal. $((bytes >> 20)) MiB of jsonl in 16 files (~200-byte"
echo "records), page cache warm -> filter lang == \"en\" -> project [id, score] -> jsonl ($kept records"
echo "kept), on this machine's $(nproc) CPUs, shared with whatever else runs (before: $before;"
echo "after: $after)."
echo
echo "| run | wall s (range) | GB/s | CPU s (range) | this row's wall / streambatch's | this row's CPU / streambatch's |"
echo "|---|---|---|---|---|---|"
row sb "\`streambatch run\`, 2 CPU workers (start-up included)" "1.00" "1.00"
row c "bench_etl_c: one C program, 2 threads, same checks (UTF-8, strict JSON)" \
  "**$(printf '%.2f' "$ratio")**" "$(printf '%.2f' "$(cpu_ratios c sb)")"
row cn "bench_etl_c --no-validate (no UTF-8 or JSON checks: input one trusts)" \
  "$(printf '%.2f' "$(ratios cn sb)")" "$(printf '%.2f' "$(cpu_ratios cn sb)")"
echo
echo "Goal (issue 16, goal 1): >= 1 GB/s end to end on 2 cores — $(met "$gbs" 1) ($(printf '%.2f' "$gbs") GB/s);"
echo ">= 0.8 of the single-purpose C program in the same run — $(met "$ratio" 0.8) ($(printf '%.2f' "$ratio"))."
echo
echo "Both sides do the same work: read the 16 files from the page cache, check that every byte is"
echo "UTF-8 and every record one strict RFC 8259 JSON value (errors name the record and byte), keep"
echo "the records whose top-level \"lang\" is \"en\", write each as {\"id\":..,\"score\":..} with the"
echo "values' bytes copied, fsync each output file and rename it into place. bench_etl_c is one"
echo "process, two threads each taking the next file, 4 MiB read() blocks into one reused buffer,"
echo "one validating pass per record (recursive descent, strings skipped 16 bytes at a time with"
echo "SSE2, digits 8 at a time) that also notes where the three members are, and no partitions,"
echo "no copies but the output. streambatch's figures include starting the controller and two"
echo "worker processes, planning, the scheduler and the commit (~0.1 s on an idle machine)."
