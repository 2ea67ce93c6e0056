#!/usr/bin/env bash
# valgrind on the validate tests: the CLI over every example and every invalid manifest must
# show no leaks and no memory errors. Prints "N passed, N failed". ("Still reachable" blocks are
# not leaks: libgrpc's static initialisers allocate per-CPU tables that live for the process.)
# The files run SB_VALGRIND_JOBS at a time (default: one per core; each is one busy thread).
set -uo pipefail
. "$(dirname "$0")/env.sh" # SB_BIN_DIR
bin=${1:-$SB_BIN_DIR/streambatch}
jobs=${SB_VALGRIND_JOBS:-$(nproc 2>/dev/null || echo 2)}
results=$(mktemp -d)
trap 'rm -rf "$results"' EXIT

check_one() { # N FILE -> $results/N.{ok,bad} (a bad one holds valgrind's report)
  local n=$1 f=$2 log=$results/$1.log rc
  valgrind -q --leak-check=full --show-leak-kinds=definite,indirect,possible --errors-for-leak-kinds=definite,indirect,possible \
    --error-exitcode=99 "$bin" validate -q "$f" >/dev/null 2>"$log"
  rc=$?
  if [[ $rc == 99 ]] || grep -q '==[0-9]*==' "$log"; then
    { echo "valgrind: $f"; cat "$log"; } >"$results/$n.bad"
  else
    : >"$results/$n.ok"
  fi
  rm -f "$log"
}

n=0; running=0
for f in api/examples/*.yaml tests/invalid/*.yaml; do
  if ((running >= jobs)); then wait -n; running=$((running - 1)); fi
  check_one "$n" "$f" &
  n=$((n + 1)); running=$((running + 1))
done
wait

passed=0; failed=0
for ((i = 0; i < n; i++)); do
  if [[ -f $results/$i.ok ]]; then passed=$((passed + 1))
  elif [[ -f $results/$i.bad ]]; then cat "$results/$i.bad"; failed=$((failed + 1))
  else echo "valgrind: file $i left no result"; failed=$((failed + 1)); fi
done
echo "valgrind-validate: $passed passed, $failed failed"
((failed == 0))
