#!/usr/bin/env bash
# `make lint`: clang-format must leave every C file (and CUDA .cu file) unchanged, cppcheck
# must report nothing on the C files, and every include must point down the house's layers
# (scripts/check-layers.py; docs/architecture.md, "The map").
set -uo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files -co --exclude-standard -- '*.c' '*.h' '*.cu' | grep -v '^build/')
status=0
bad=()
for f in "${files[@]}"; do
  [[ -f $f ]] || continue
  clang-format --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if ((${#bad[@]})); then
  echo "lint: clang-format would change ${#bad[@]} file(s) (run: clang-format -i FILE):"
  printf '  %s\n' "${bad[@]}"
  status=1
fi
# varFuncNullUB is suppressed: sb_log() takes a NULL-terminated key/value list; glibc's NULL is
# ((void *)0), and gcc's sentinel attribute on sb_log checks every call site at compile time.
src=()
for f in "${files[@]}"; do
  [[ $f == *.cu ]] && continue # (nvcc's C++: cppcheck reads C here)
  case $f in lib/*|controller/*|worker/*|cmd/*) [[ -f $f ]] && src+=("$f");; esac
done
if ! cppcheck -q --error-exitcode=1 --enable=warning,performance,portability --inline-suppr \
     --std=c11 -D__GNUC__ -D__ORDER_LITTLE_ENDIAN__=1234 -D__BYTE_ORDER__=1234 -D__x86_64__ -Ilib -I. --suppress=missingIncludeSystem --suppress=varFuncNullUB "${src[@]}" 2>build-lint.log; then
  echo "lint: cppcheck findings:"; cat build-lint.log; status=1
fi
rm -f build-lint.log
scripts/check-layers.py . || status=1
if ((status == 0)); then echo "lint: clang-format, cppcheck and layers clean (${#files[@]} files)"; fi
exit $status
