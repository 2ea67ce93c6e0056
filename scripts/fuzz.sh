#!/usr/bin/env bash
# Runs every built libFuzzer target for a bounded time on a scratch copy of its seed corpus
# (tests/fuzz/corpus/<name>/), so new inputs never land in the repository.
#   fuzz.sh BUILD_FUZZ_DIR SECONDS [JOBS]
# JOBS targets run at once (default 1: each fuzzer is one busy thread). Prints one line per
# target in name order, then "N passed, N failed", and exits non-zero on any finding.
set -uo pipefail
dir=$1; secs=$2; jobs=${3:-1}
results=$(mktemp -d)
trap 'rm -rf "$results"' EXIT

fuzz_one() { # TARGET -> $results/<name>.{ok,finding} holding the line (and the log's tail)
  local t=$1 name work
  name=$(basename "$t"); name=${name#fuzz_}
  work=$(mktemp -d); mkdir -p "$work/corpus" "$work/artifacts"
  [[ -d tests/fuzz/corpus/$name ]] && cp -r "tests/fuzz/corpus/$name/." "$work/corpus/"
  if timeout -k 10 $((secs + 60)) "$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
       -artifact_prefix="$work/artifacts/" "$work/corpus" >"$work/log" 2>&1; then
    echo "fuzz $name: ok ($(grep -Eo '#[0-9]+' "$work/log" | tail -1 | tr -d '#') runs in ${secs}s)" \
      >"$results/$name.ok"
  else
    { echo "fuzz $name: FINDING"; tail -40 "$work/log"; ls "$work/artifacts" | head; } \
      >"$results/$name.finding"
    mkdir -p build/fuzz-findings && cp -r "$work/artifacts/." build/fuzz-findings/ 2>/dev/null
  fi
  rm -rf "$work"
}

running=0; targets=0
for t in "$dir"/fuzz_*; do
  [[ -x $t && -f $t ]] || continue
  if ((running >= jobs)); then wait -n; running=$((running - 1)); fi
  fuzz_one "$t" &
  running=$((running + 1)); targets=$((targets + 1))
done
wait

passed=0; failed=0
for r in $(ls "$results" | sort); do
  cat "$results/$r"
  if [[ $r == *.ok ]]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
done
if ((passed + failed != targets)); then # a run that left no line is a failure, not a pass
  echo "fuzz: $targets targets ran, $((passed + failed)) reported"; failed=$((targets - passed))
fi
echo "$passed passed, $failed failed"
((failed == 0))
