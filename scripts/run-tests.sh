#!/usr/bin/env bash
# Runs the test suites and prints one closing line the CI reads: "N passed, N failed".
#   run-tests.sh TEST_BIN... -- MAKE_TARGET...
# TEST_BINs are Criterion executables (their "Synthesis" line is counted test by test).
# MAKE_TARGETs are slower suites run with `make`; one that prints "N passed, N failed" as its
# last such line is counted that way, any other counts as one test by its exit status.
# Every suite runs under a time limit (SB_SUITE_TIMEOUT seconds, default 900), and its line says
# how long it took: a cold `make test` must stay under 60 minutes, and these show where they go.
set -uo pipefail
limit=${SB_SUITE_TIMEOUT:-900}
bins=(); targets=(); seen_sep=0
for a in "$@"; do
  if [[ $a == -- ]]; then seen_sep=1; continue; fi
  if ((seen_sep)); then targets+=("$a"); else bins+=("$a"); fi
done
. "$(dirname "$0")/env.sh" # SB_BUILD_DIR
log_dir=$SB_BUILD_DIR/test-logs
mkdir -p "$log_dir"
passed=0; failed=0; failed_suites=()

count_plain() { # file -> sets p f from the last "N passed, N failed" line; returns 1 if none
  local line
  line=$(grep -E '(^|: )[0-9]+ passed, [0-9]+ failed' "$1" | tail -n 1) || return 1
  [[ -n $line ]] || return 1
  p=$(sed -E 's/.*(^|: )([0-9]+) passed.*/\2/' <<<"$line")
  f=$(sed -E 's/.* ([0-9]+) failed.*/\1/' <<<"$line")
}

# Each suite gets its own TMPDIR, removed after it: temporary files of helpers killed on purpose
# (and of failed assertions) do not pile up in /tmp.
suite_tmp() { TMPDIR=$(mktemp -d /tmp/sb-suite.XXXXXX) && export TMPDIR; }
suite_tmp_done() { [[ -n ${TMPDIR:-} && $TMPDIR == /tmp/sb-suite.* ]] && rm -rf "$TMPDIR"; unset TMPDIR; }

for b in "${bins[@]}"; do
  name=$(basename "$b"); log=$log_dir/$name.log
  jobs=2; [[ $b == */itests/* ]] && jobs=1   # integration tests load the machine themselves
  suite_tmp; t0=$SECONDS
  timeout -k 10 "$limit" "$b" --jobs $jobs >"$log" 2>&1; rc=$?
  suite_tmp_done
  syn=$(grep -a 'Synthesis:' "$log" | tail -n 1)
  if [[ -n $syn ]]; then
    t=$(sed -E 's/.*Tested: ([0-9]+).*/\1/' <<<"$syn")
    ok=$(sed -E 's/.*Passing: ([0-9]+).*/\1/' <<<"$syn")
    p=$ok; f=$((t - ok))
  else p=0; f=1; fi
  ((rc != 0 && f == 0)) && f=1
  passed=$((passed + p)); failed=$((failed + f))
  if ((f)); then failed_suites+=("$name"); echo "---- $name: FAILED ($p passed, $f failed), log tail:"; grep -a -E '\[(FAIL|----)\]|Assertion|signal|ERROR' "$log" | head -40; tail -n 5 "$log";
  else echo "$name: $p passed ($((SECONDS - t0)) s)"; fi
done

for t in "${targets[@]}"; do
  log=$log_dir/make-$t.log
  suite_tmp; t0=$SECONDS
  timeout -k 10 "$limit" make --no-print-directory "$t" >"$log" 2>&1; rc=$?
  suite_tmp_done
  if count_plain "$log"; then :; else p=$((rc == 0 ? 1 : 0)); f=$((rc == 0 ? 0 : 1)); fi
  ((rc != 0 && f == 0)) && f=1
  passed=$((passed + p)); failed=$((failed + f))
  if ((f)); then failed_suites+=("$t"); echo "---- make $t: FAILED (exit $rc), log tail:"; tail -n 40 "$log";
  else echo "make $t: $p passed ($((SECONDS - t0)) s)"; fi
done

# The CI keeps only the last lines of this output: repeat each failed suite's failing checks
# (and the lines just above each, which say why) here at the end, so the tail names them.
failure_digest() { # LOG: the lines that name failures, with up to 4 lines of context before each
  grep -a -n -B4 -E '^(FAIL|not ok)\b|\[FAIL\]|timed out after' "$1" | cut -c1-300 | head -n 24
}
for s in "${failed_suites[@]}"; do
  log=$log_dir/$s.log; [[ -f $log ]] || log=$log_dir/make-$s.log
  [[ -f $log ]] && { echo "==== $s: what failed ($log)"; failure_digest "$log"; }
done
((${#failed_suites[@]})) && echo "failed suites: ${failed_suites[*]} (logs in $log_dir)"
echo "all suites took $((SECONDS / 60)) min $((SECONDS % 60)) s"
echo "$passed passed, $failed failed"
((failed == 0))
