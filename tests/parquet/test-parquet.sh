#!/usr/bin/env bash
# The Parquet reader against two independent writers (pyarrow and DuckDB, from PyPI, in a venv
# cached under ~/.cache/streambatch), then refused types and hostile files (conformance.py); then
# the writer: our files read back by both and by our reader (writer.py); filter pushdown
# (pushdown.py).
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
timeout 900 "$venv/bin/python" "$top/tests/parquet/conformance.py" "$bin/streambatch" "$work/w"
rc=$?
# Filter pushdown by row-group statistics: the same rows with and without it (pushdown.py).
timeout 600 "$venv/bin/python" "$top/tests/parquet/pushdown.py" "$bin/streambatch" "$work/pd" || rc=1
# The writer: our files read by pyarrow, DuckDB and our reader (tests/parquet/writer.py).
timeout 600 "$venv/bin/python" "$top/tests/parquet/writer.py" "$bin/streambatch" "$work/wr" || rc=1
exit $rc
