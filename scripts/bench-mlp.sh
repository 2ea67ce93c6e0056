#!/usr/bin/env bash
# tensor.mlp's CPU path (issue 14), run by `make bench`; prints a markdown section on stdout.
# One model (768 -> 1024 -> 1024 -> 16, relu: an embedding-sized classifier head) saved as
# safetensors; 4,000 random vectors; the op (build/bench/bench_mlp: sb_op_run over a partition,
# batches of 256 rows, as a task runs it) against numpy doing the same matmuls on the same shapes
# in the same run, numpy with one BLAS thread (the op uses one core: one task per slot) and with
# its default threads. Rounds interleaved; medians.
set -euo pipefail
cd "$(dirname "$0")/.."
top=$PWD
. scripts/env.sh # SB_BUILD_DIR
build=$SB_BUILD_DIR
rounds=${ROUNDS:-5}
work=$(mktemp -d /tmp/sb-bench-mlp-XXXXXX)
trap 'rm -rf "$work"' EXIT
make -s --no-print-directory "$build/bench/bench_mlp" BUILD="$build" >&2
python3 -m venv "$work/venv" >&2 && "$work/venv/bin/pip" install -q --disable-pip-version-check numpy >&2
py=$work/venv/bin/python
rows=4000
"$py" tests/bench/mlp_model.py "$work/model.safetensors"
cat >"$work/np.py" <<'EOF'
import json, struct, sys, time
import numpy as np
path, rows, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
raw = open(path, "rb").read()
hl = struct.unpack("<Q", raw[:8])[0]
hdr = json.loads(raw[8:8 + hl])
def get(n):
    e = hdr[n]; a, b = e["data_offsets"]
    return np.frombuffer(raw[8 + hl + a:8 + hl + b], dtype=np.float32).reshape(e["shape"])
W = [get(f"{2*k}.weight") for k in range(3)]
B = [get(f"{2*k}.bias") for k in range(3)]
x0 = (np.random.default_rng(7).random((rows, W[0].shape[1]), dtype=np.float32) - 0.5)
out = []
for r in range(rounds + 1):
    t0 = time.perf_counter()
    for s in range(0, rows, 256):
        x = x0[s:s + 256]
        for k in range(3):
            x = x @ W[k].T + B[k]
            if k < 2:
                np.maximum(x, 0, out=x)
    if r > 0:
        out.append(time.perf_counter() - t0)
print(",".join("%.4f" % v for v in out))
EOF
flops=$(( 2 * rows * (768 * 1024 + 1024 * 1024 + 1024 * 16) ))
op=() np1=() npn=()
for r in $(seq "$rounds"); do
  echo "bench: tensor.mlp round $r/$rounds" >&2
  s=$("$build/bench/bench_mlp" "$work/model.safetensors" 768 "$rows" 256 1 | sed -n 's/.*seconds=//p')
  op+=("$s")
  np1+=("$(OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 "$py" "$work/np.py" "$work/model.safetensors" "$rows" 1)")
  npn+=("$("$py" "$work/np.py" "$work/model.safetensors" "$rows" 1)")
done
. "$(dirname "${BASH_SOURCE[0]}")/bench-lib.sh" # median, range
m_op=$(median "${op[@]}"); m_np1=$(median "${np1[@]}"); m_npn=$(median "${npn[@]}")
gf() { echo "$flops / $1 / 1000000000" | bc -l; }
echo
echo "## tensor.mlp on the CPU (scripts/bench-mlp.sh)"
echo
echo "$(date -u '+%Y-%m-%d %H:%M UTC'); $rounds rounds interleaved, medians. Model 768 -> 1024 -> 1024"
echo "-> 16 with relu, $rows rows in batches of 256 ($(echo "$flops / 1000000000" | bc -l | xargs printf '%.1f') GFLOP per round)."
echo
echo "| run | median s | GFLOP/s | / numpy, 1 thread |"
echo "|---|---|---|---|"
printf '| numpy matmuls, 1 BLAS thread | %.3f | %.1f | 1.00 |\n' "$m_np1" "$(gf "$m_np1")"
printf '| numpy matmuls, default threads | %.3f | %.1f | %.2f |\n' "$m_npn" "$(gf "$m_npn")" "$(echo "$m_np1 / $m_npn" | bc -l)"
printf '| tensor.mlp op (one task, one core) | %.3f | %.1f | %.2f |\n' "$m_op" "$(gf "$m_op")" "$(echo "$m_np1 / $m_op" | bc -l)"
