#!/usr/bin/env bash
# Runs every built libFuzzer target for a bounded time on a scratch copy of its seed corpus
# (tests/fuzz/corpus/<name>/), so new inputs never land in the repository.
#   fuzz.sh BUILD_FUZZ_DIR SECONDS
# Prints "N passed, N failed" (one per target) and exits non-zero on any finding.
set -uo pipefail
dir=$1; secs=$2
passed=0; failed=0
for t in "$dir"/fuzz_*; do
  [[ -x $t && -f $t ]] || continue
  name=$(basename "$t"); name=${name#fuzz_}
  work=$(mktemp -d); mkdir -p "$work/corpus" "$work/artifacts"
  [[ -d tests/fuzz/corpus/$name ]] && cp -r "tests/fuzz/corpus/$name/." "$work/corpus/"
  if timeout -k 10 $((secs + 60)) "$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
       -artifact_prefix="$work/artifacts/" "$work/corpus" >"$work/log" 2>&1; then
    echo "fuzz $name: ok ($(grep -Eo '#[0-9]+' "$work/log" | tail -1 | tr -d '#') runs in ${secs}s)"
    passed=$((passed + 1))
  else
    echo "fuzz $name: FINDING"; tail -40 "$work/log"
    ls "$work/artifacts" | head
    mkdir -p build/fuzz-findings && cp -r "$work/artifacts/." build/fuzz-findings/ 2>/dev/null
    failed=$((failed + 1))
  fi
  rm -rf "$work"
done
echo "$passed passed, $failed failed"
((failed == 0))
