#!/usr/bin/env bash
# valgrind on the validate tests: the CLI over every example and every invalid manifest must
# show no leaks and no memory errors. Prints "N passed, N failed". ("Still reachable" blocks are
# not leaks: libgrpc's static initialisers allocate per-CPU tables that live for the process.)
set -uo pipefail
. "$(dirname "$0")/env.sh" # SB_BIN_DIR
bin=${1:-$SB_BIN_DIR/streambatch}
passed=0; failed=0
for f in api/examples/*.yaml tests/invalid/*.yaml; do
  log=$(mktemp)
  valgrind -q --leak-check=full --show-leak-kinds=definite,indirect,possible --errors-for-leak-kinds=definite,indirect,possible \
    --error-exitcode=99 "$bin" validate -q "$f" >/dev/null 2>"$log"
  rc=$?
  if [[ $rc == 99 ]] || grep -q '==[0-9]*==' "$log"; then
    echo "valgrind: $f"; cat "$log"; failed=$((failed + 1))
  else
    passed=$((passed + 1))
  fi
  rm -f "$log"
done
echo "valgrind-validate: $passed passed, $failed failed"
((failed == 0))
