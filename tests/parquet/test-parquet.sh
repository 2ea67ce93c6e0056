#!/usr/bin/env bash
# The Parquet reader against two independent writers (pyarrow and DuckDB, from PyPI, in a venv
# cached under ~/.cache/streambatch), then refused types and hostile files (conformance.py); then
# the writer: our files read back by both and by our reader (writer.py); filter pushdown
# (pushdown.py), and by the page index (pageindex.py); DATE and TIMESTAMP through the engine
# (timestamps.py).
#   SB_BIN_DIR=... tests/parquet/test-parquet.sh
# Prints "N passed, N failed". Skips (passing) with a clear message only when the packages
# cannot be installed because the registry is unreachable.
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
bin=${SB_BIN_DIR:-$top/bin}
venv=${SB_PARQUET_VENV:-$HOME/.cache/streambatch/parquet-venv}
PYARROW=pyarrow==26.0.1
DUCKDB=duckdb==2.0.1
if ! "$venv/bin/python" -c 'import pyarrow, duckdb' 2>/dev/null; then
  rm -rf "$venv.tmp" && python3 -m venv "$venv.tmp" || { echo "parquet-test: python3 -m venv failed"; exit 1; }
  if ! "$venv.tmp/bin/pip" install -q --disable-pip-version-check "$PYARROW" "$DUCKDB" >"$venv.tmp.log" 2>&1; then
    if grep -qiE 'connection|resolve|network|timed out|No matching distribution' "$venv.tmp.log"; then
      echo "parquet-test: SKIPPED: cannot install $PYARROW and $DUCKDB (registry unreachable):"
      tail -3 "$venv.tmp.log"
      echo "0 passed, 0 failed"
      exit 0
    fi
    cat "$venv.tmp.log"; echo "0 passed, 1 failed"; exit 1
  fi
  rm -rf "$venv" && mv "$venv.tmp" "$venv"  # bin/python still works after the move
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work" || exit 1
# Each script prints its own "N passed, N failed"; the last line sums them, since make test
# counts a suite by its last such line (and fails it on a non-zero exit whatever the line says).
rc=0 total_p=0 total_f=0
run_py() { # LIMIT SCRIPT WORKDIR
  local out line
  out=$(timeout "$1" "$venv/bin/python" "$top/tests/parquet/$2" "$bin/streambatch" "$work/$3") || rc=1
  printf '%s\n' "$out"
  line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' <<<"$out" | tail -n 1)
  if [[ -z $line ]]; then total_f=$((total_f + 1)); rc=1; return; fi
  total_p=$((total_p + ${line%% passed*})); line=${line#*passed, }; total_f=$((total_f + ${line%% failed}))
}
run_py 900 conformance.py w   # the reader against pyarrow- and DuckDB-written files
run_py 600 pushdown.py pd     # filter pushdown: the same rows with and without it
run_py 600 pageindex.py pi    # page-index pushdown: the rows pyarrow and DuckDB give
run_py 600 writer.py wr       # the writer: our files read by pyarrow, DuckDB and our reader
run_py 300 timestamps.py ts   # DATE/TIMESTAMP units through filter/project to the writer
echo "parquet-test: $total_p passed, $total_f failed"
exit $rc
