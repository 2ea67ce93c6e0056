#!/usr/bin/env bash
# LB-BSP (issue 40, docs/training.md): two data-parallel ranks of unequal speed read a
# stream:// sink (`streambatch run --serve`), rank 1 at half speed (its step sleeps twice as long
# per row), meeting at a barrier after each step as DDP's all-reduce makes them. The iteration
# time with balance="lbbsp" against equal batches and against the speed-weighted ideal, the
# global batch B over the ranks' summed speeds (B / (1/c + 1/2c) for c ms per row), and a
# reference run where neither rank is throttled (the fixed costs). Prints a markdown section.
# Medians (ranges) over ROUNDS (default 3), the first SKIP (20) iterations of each run left out
# (the pipeline starting, LB-BSP measuring).
#   ROWS (40000 jsonl records), BATCH (100 per rank), MS_PER_ROW (0.1: rank 0's cost)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh # SB_BIN_DIR, SB_BUILD_DIR
. scripts/bench-lib.sh
rounds=${ROUNDS:-3} rows=${ROWS:-40000} batch=${BATCH:-100} ms=${MS_PER_ROW:-0.1} skip=${SKIP:-20}
py=python3
[[ -x $SB_BUILD_DIR/stream-venv/bin/python ]] && py=$SB_BUILD_DIR/stream-venv/bin/python
"$py" -c 'import numpy' 2>/dev/null || { echo "bench-ingest-lbbsp: needs numpy (make stream-test makes the venv)" >&2; exit 1; }
export STREAMBATCH_CONSUMER_LIB=$SB_BUILD_DIR/lib/libstreambatch_consumer.so PYTHONPATH=$PWD/sdk/python
work=$(mktemp -d /tmp/sb-bench-lbbsp-XXXXXX)
srv=
trap '[[ -n $srv ]] && kill "$srv" 2>/dev/null; rm -rf "$work"' EXIT
mkdir -p "$work/in"
python3 - "$work/in" "$rows" <<'PY'
import json, sys
d, n = sys.argv[1], int(sys.argv[2])
per = n // 8
for f in range(8):
    with open(f"{d}/p{f}.jsonl", "w") as out:
        for i in range(f * per, (f + 1) * per):
            out.write(json.dumps({"id": i, "text": "x" * 40}) + "\n")
PY
cat >"$work/p.yaml" <<Y
apiVersion: streambatch.dev/v1alpha1
kind: Pipeline
metadata: {name: lbbsp}
spec:
  source: {uri: "file://$work/in/*.jsonl", format: jsonl, partitionSize: 64Ki}
  stages: [{name: keep, op: identity}]
  sink: {uri: "stream://", format: jsonl}
  execution: {memoryBudget: 8Mi}
Y
run() { # balance slowdown -> "iterations iter_ms size0 size1"
  "$SB_BIN_DIR/streambatch" run "$work/p.yaml" --cpus 1 --serve 127.0.0.1:0 >"$work/out" 2>"$work/err" &
  srv=$!
  local info="" i
  for i in $(seq 100); do info=$(head -1 "$work/out"); [[ -n $info ]] && break; sleep 0.1; done
  local addr tok
  addr=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["address"])' "$info")
  tok=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["tokenFile"])' "$info")
  "$py" tests/bench/lbbsp_ranks.py "$addr" "$tok" "$1" "$batch" "$ms" "$2" "$skip"
  wait "$srv" || { tail "$work/err" >&2; exit 1; }
  srv=
}
before=$(pressure)
declare -A it s0 s1
for r in $(seq "$rounds"); do
  for b in equal lbbsp same; do
    if [[ $b == same ]]; then set -- equal 1; else set -- "$b" 2; fi
    read -r _ t a c < <(run "$@")
    it[$b]+="$t " s0[$b]+="$a " s1[$b]+="$c "
  done
done
after=$(pressure)
ideal=$(awk -v b="$batch" -v c="$ms" 'BEGIN { printf "%.3f", 2 * b / (1 / c + 1 / (2 * c)) }')
row() { # balance label [ideal]
  local m ideal=${3:-$ideal}
  # shellcheck disable=SC2086
  m=$(median ${it[$1]})
  # shellcheck disable=SC2086
  printf '| %s | %.2f (%s) | %.2fx | %.0f / %.0f |\n' "$2" "$m" "$(range ${it[$1]})" \
    "$(awk -v m="$m" -v i="$ideal" 'BEGIN { print m / i }')" "$(median ${s0[$1]})" "$(median ${s1[$1]})"
}
cat <<EOF2

## LB-BSP: two ranks, one at half speed

Command: \`scripts/bench-ingest-lbbsp.sh\` (run by \`make bench\`). $rows jsonl records served by
\`streambatch run --serve\` (one worker); two ranks in one process (threads), batch $batch per
rank (global $((2 * batch))), each step sleeping $ms ms per row of its batch on rank 0 and twice that
on rank 1, then a barrier (the all-reduce); each rank reports its sleep as its step time.
Speed-weighted ideal: $ideal ms per iteration ($((2 * batch)) rows over 1/$ms + 1/(2 x $ms) rows per ms).
Median (range) of $rounds runs, iterations after the first $skip.

| batches | iteration ms | vs ideal | mean batch rank 0 / rank 1 |
|---|---|---|---|
$(row equal "equal (balance=None)")
$(row lbbsp "LB-BSP (balance=\"lbbsp\")")
$(row same "reference: neither rank throttled, equal (ideal $(awk -v b="$batch" -v c="$ms" 'BEGIN { print b * c }') ms)" "$(awk -v b="$batch" -v c="$ms" 'BEGIN { print b * c }')")

The reference row is the per-iteration cost that is not the steps' sleeps (the sleeps' overshoot
on a loaded machine, the barrier, the batch's conversion to numpy, the StreamNext calls): the
same fixed cost is in the other rows, so their ratio to the analytic ideal is a ceiling on what
LB-BSP's sizing alone costs.

Before: $before. After: $after.
EOF2
