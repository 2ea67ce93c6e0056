#!/usr/bin/env bash
# bench-images.sh — the CPU half of the headline job (issue 36): JPEG files decoded and resized to
# 64x64 (antialiased, as Pillow's BILINEAR), then normalized, on this machine. Side by side in one
# run, alternating, REPS times each:
#   streambatch       image source -> image.resize -> image.normalize -> project [path] -> jsonl
#   streambatch draft the same with source.args.draft {64, 64} (reduced-scale JPEG decode)
#   Pillow pool       a multiprocessing.Pool of as many processes as --cpus decoding with Pillow,
#                     resizing with BILINEAR and normalizing with numpy (what a DataLoader's
#                     workers do), with and without Image.draft()
# Prints one markdown table: median wall seconds, images/s, and the ratio to the Pillow pool of the
# same decode. Environment: IMAGES (2000), CPUS (2), REPS (3), SB_BIN_DIR (bin), SB_BUILD_DIR
# (build). The images (tests/bench/inference_data.py) are cached in $SB_BUILD_DIR/bench/images-N.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bench-lib.sh
bin=$(realpath "${SB_BIN_DIR:-bin}")
build=$(realpath "${SB_BUILD_DIR:-build}")
n=${IMAGES:-2000} cpus=${CPUS:-2} reps=${REPS:-3}
py=$build/resize-venv/bin/python
if ! "$py" -c 'import numpy, PIL' 2>/dev/null; then
  bench_venv "$build/resize-venv" PIL pillow==13.0.0 numpy==2.4.6 ||
    { echo "bench-images: no Pillow venv; skipped"; exit 0; }
fi
imgs=$build/bench/images-$n
if [[ ! -e $imgs/.done ]]; then
  rm -rf "$imgs" && mkdir -p "$imgs"
  "$py" tests/bench/inference_data.py images "$imgs" "$n" "$cpus" && touch "$imgs/.done"
fi
work=$(mktemp -d /tmp/sb-bench-images-XXXXXX)
trap 'rm -rf "$work"' EXIT
spec() { # spec FILE DRAFT(0|1)
  local args=""
  (($2)) && args=", args: {draft: {width: 64, height: 64}}"
  cat >"$1" <<YAML
apiVersion: streambatch.dev/v1alpha1
kind: Pipeline
metadata: {name: bench-images}
spec:
  source: {uri: "file://$imgs/", format: image$args}
  stages:
    - {name: resize, op: image.resize, args: {width: 64, height: 64}}
    - {name: norm, op: image.normalize, args: {mean: 0.5, std: 0.25, layout: chw}}
    - {name: keep, op: project, args: {fields: [path]}}
  sink: {uri: "file://$work/out/", format: jsonl}
YAML
}
spec "$work/full.yaml" 0
spec "$work/draft.yaml" 1
cat >"$work/pool.py" <<'PY'
import glob, sys
from multiprocessing import Pool
import numpy as np
from PIL import Image
d, procs, draft = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
def one(p):
    im = Image.open(p)
    if draft:
        im.draft("RGB", (64, 64))
    a = np.asarray(im.convert("RGB").resize((64, 64), Image.BILINEAR), dtype=np.float32)
    a = (a / 255.0 - 0.5) / 0.25
    return a.transpose(2, 0, 1).shape[0]
with Pool(procs) as pool:
    n = sum(1 for _ in pool.imap_unordered(one, sorted(glob.glob(d + "/*.jpg")), chunksize=16))
print(n)
PY
declare -A wall
for ((r = 0; r < reps; r++)); do
  for k in full draft; do
    rm -rf "$work/out"
    t=$(wall_cpu "$work/log" "$bin/streambatch" run "$work/$k.yaml" --cpus "$cpus") || exit 1
    rows=$(cat "$work"/out/part-*.jsonl | wc -l)
    ((rows == n)) || { echo "bench-images: streambatch $k wrote $rows rows, want $n" >&2; exit 1; }
    wall[sb-$k]+="${t%% *} "
    t=$(wall_cpu "$work/log" "$py" "$work/pool.py" "$imgs" "$cpus" $([[ $k == draft ]] && echo 1 || echo 0)) || exit 1
    [[ $(cat "$work/log") == "$n" ]] || { echo "bench-images: the Pillow pool did not count $n" >&2; exit 1; }
    wall[pil-$k]+="${t%% *} "
  done
done
echo "### Images decoded and resized on the CPU (scripts/bench-images.sh)"
echo
echo "$n JPEGs (200-320 px, tests/bench/inference_data.py) -> 64x64 antialiased -> normalize (chw),"
echo "--cpus $cpus and a Pillow pool of $cpus processes, $reps runs each alternating, median"
echo "(range) wall seconds. $(pressure)."
echo
echo "| decode | streambatch s | Pillow pool s | streambatch images/s | Pillow images/s | speed-up |"
echo "|---|---|---|---|---|---|"
for k in full draft; do
  # shellcheck disable=SC2086
  s=$(median ${wall[sb-$k]}) p=$(median ${wall[pil-$k]})
  # shellcheck disable=SC2086
  printf '| %s | %s (%s) | %s (%s) | %.0f | %.0f | %.2fx |\n' \
    "$([[ $k == full ]] && echo "full" || echo "draft 64x64")" "$s" "$(range ${wall[sb-$k]})" \
    "$p" "$(range ${wall[pil-$k]})" "$(awk -v n="$n" -v s="$s" 'BEGIN{print n/s}')" \
    "$(awk -v n="$n" -v s="$p" 'BEGIN{print n/s}')" "$(awk -v a="$p" -v b="$s" 'BEGIN{print a/b}')"
done
s0=$(median ${wall[sb-full]}) s1=$(median ${wall[sb-draft]})
echo
echo "figure: images draft speed-up $(awk -v a="$s0" -v b="$s1" 'BEGIN{printf "%.2f", a/b}')x (streambatch full / draft)"
