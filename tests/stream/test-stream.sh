#!/usr/bin/env bash
# `make stream-test` (part of `make test`): the stream:// sink served by `streambatch run
# --serve` to trainer ranks in their own processes, through the Python kit's iter_batches over
# the C consumer library (tests/stream/test_stream.py says what each check asserts). The kit and
# numpy/pyarrow (pinned, as tests/sdk) go into a venv under the build directory.
# Prints "stream-test: N passed, N failed" last. Bounded (timeouts per process); cleans its files.
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
. "$top/scripts/env.sh" # SB_BIN_DIR, SB_BUILD_DIR
venv=$SB_BUILD_DIR/stream-venv
PYARROW_VERSION=26.0.1
NUMPY_VERSION=2.4.6
if ! "$venv/bin/python" -c 'import numpy, pyarrow' 2>/dev/null; then
  rm -rf "$venv" && python3 -m venv "$venv" &&
    "$venv/bin/pip" install -q --disable-pip-version-check \
      "pyarrow==$PYARROW_VERSION" "numpy==$NUMPY_VERSION" ||
    { echo "stream-test: could not make the venv"; echo "stream-test: 0 passed, 1 failed"; exit 1; }
fi
tmp=$(mktemp -d /tmp/sb-stream-test-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
export STREAMBATCH_CONSUMER_LIB=$SB_BUILD_DIR/lib/libstreambatch_consumer.so
export PYTHONPATH=$top/sdk/python
timeout 900 "$venv/bin/python" "$top/tests/stream/test_stream.py" "$SB_BIN_DIR/streambatch" "$tmp"
