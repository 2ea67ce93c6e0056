#!/usr/bin/env bash
# bench-ingest.sh — ingest throughput into a training step (issue 40, "Ingest throughput on this
# machine"): JPEG files decoded, resized to 64x64 and normalized (chw), in batches of 256, fed to a
# step that sleeps STEP_MS per batch. Side by side in one run, alternating, REPS times each:
#   streambatch  image source -> image.resize -> image.normalize -> stream://, served by
#                `streambatch run --serve --cpus 2`, read by iter_batches(batch_format="numpy")
#   Pillow pool  a multiprocessing.Pool of 2 processes decoding with Pillow, resizing (BILINEAR)
#                and normalizing with numpy, stacked into batches of 256 in the trainer: the
#                DataLoader stand-in (torch is not installed here: its PyPI wheel is the CUDA
#                one, several GiB; a DataLoader's workers do this same work in 2 processes)
# both when preprocessing is the bottleneck (STEP_MS 0) and when the step is (STEP_MS SLOW_MS).
# Both feed the same batches (every image once, the last batch short). Per run: the time to the
# first batch (from the start of the server or pool), steady-state samples/s (the images after
# the first batch over the seconds from the first batch to the last), the whole run's samples/s,
# and the trainer's median wait inside next() per batch after the first (the time it is blocked
# on data); peak memory, summed RSS and summed PSS: the whole process tree (trainer + pool, or
# trainer + server + its workers), sampled every 20 ms. Prints one markdown section. Environment: IMAGES (5120: 20
# batches), REPS (3), SLOW_MS (1500), BUDGET (64Mi), SB_BIN_DIR, SB_BUILD_DIR, PREFETCH (1; 0:
# iter_batches(prefetch=False), the consumer fetching inside next()), SB_KIT_DIR and
# SB_CONSUMER_LIB (the kit's directory and the library; default this tree's). The images
# (tests/bench/inference_data.py) are cached in $SB_BUILD_DIR/bench/images-N, as
# bench-images.sh's.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/bench-lib.sh
bin=$(realpath "${SB_BIN_DIR:-bin}")
build=$(realpath "${SB_BUILD_DIR:-build}")
n=${IMAGES:-5120} reps=${REPS:-3} slow=${SLOW_MS:-1500} budget=${BUDGET:-64Mi}
py=$build/resize-venv/bin/python
if ! "$py" -c 'import numpy, PIL' 2>/dev/null; then
  bench_venv "$build/resize-venv" PIL pillow==13.0.0 numpy==2.4.6 ||
    { echo "bench-ingest: no Pillow venv; skipped"; exit 0; }
fi
[[ -e $build/lib/libstreambatch_consumer.so ]] ||
  { echo "bench-ingest: $build/lib/libstreambatch_consumer.so is not built; skipped"; exit 0; }
imgs=$build/bench/images-$n
if [[ ! -e $imgs/.done ]]; then
  rm -rf "$imgs" && mkdir -p "$imgs"
  "$py" tests/bench/inference_data.py images "$imgs" "$n" 2 && touch "$imgs/.done"
fi
work=$(mktemp -d /tmp/sb-bench-ingest-XXXXXX)
trap 'rm -rf "$work"' EXIT
cat >"$work/p.yaml" <<YAML
apiVersion: streambatch.dev/v1alpha1
kind: Pipeline
metadata: {name: bench-ingest}
spec:
  source: {uri: "file://$imgs/", format: image}
  stages:
    - {name: resize, op: image.resize, args: {width: 64, height: 64}}
    - {name: norm, op: image.normalize, args: {mean: 0.5, std: 0.25, layout: chw}}
  sink: {uri: "stream://", format: jsonl}
  execution: {memoryBudget: $budget}
YAML
cat >"$work/ingest.py" <<'PY'
# One run: KIND (pool | sb) STEP_MS ->
#   "samples/s peak_rss_mib beside_mib batches rows first_batch_s steady_samples/s wait_ms
#    peak_pss_mib beside_pss_mib"
import glob, json, os, subprocess, sys, threading, time
import numpy as np
kind, step_ms, imgs, spec, sbbin = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
B = 256

def tree_rss(pss):
    """Of this process and all its descendants, and of the descendants alone, bytes: the sum of
    VmRSS, and (when pss) the sum of Pss (smaps_rollup: a page shared by k processes counts 1/k
    in each). Summed RSS counts every shared page (the binaries' and shared libraries' code,
    mapped by the server and each worker) once per process: PSS counts the tree's memory once."""
    total, me, ptotal, pme, todo = 0, 0, 0, 0, [os.getpid()]
    while todo:
        pid = todo.pop()
        try:
            for line in open(f"/proc/{pid}/status"):
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
                    me = me or total
            for line in open(f"/proc/{pid}/smaps_rollup") if pss else ():
                if line.startswith("Pss:"):
                    ptotal += int(line.split()[1]) * 1024
                    pme = pme or ptotal
            for t in os.listdir(f"/proc/{pid}/task"):
                todo += [int(x) for x in open(f"/proc/{pid}/task/{t}/children").read().split()]
        except OSError:
            pass
    return total, total - me, ptotal, ptotal - pme

peak, done = [0, 0, 0, 0], threading.Event()
def sample():
    """RSS every 20 ms; PSS only at a new high of the tree's RSS and every 200 ms. smaps_rollup
    walks every page table of the tree: read every 20 ms it took ~10% of this 2-core machine's
    CPU in the trainer's process (perf), more on the side with more processes and mappings."""
    tick = 0
    while not done.is_set():
        rss = tree_rss(False)
        if rss[0] > peak[0] or tick % 10 == 0:
            rss = tree_rss(True)
        peak[:] = [max(a, b) for a, b in zip(peak, rss)]
        tick += 1
        done.wait(0.02)

marks = []  # per batch: when the trainer asked for it, when it had it
def timed(it):
    """The batches of `it`, timing the trainer's wait for each."""
    while True:
        t = time.time()
        b = next(it, None)
        if b is None:
            return
        marks.append((t, time.time()))
        yield b

def step(batch):
    if step_ms > 0:
        time.sleep(step_ms / 1000)

def one(p):
    from PIL import Image
    a = np.asarray(Image.open(p).convert("RGB").resize((64, 64), Image.BILINEAR), dtype=np.float32)
    return ((a / 255.0 - 0.5) / 0.25).transpose(2, 0, 1)

def run_pool():
    from multiprocessing import Pool
    files = sorted(glob.glob(imgs + "/*.jpg"))
    rows = batches = 0
    def gen(pool):
        buf = []
        for a in pool.imap(one, files, chunksize=16):  # ordered, as a DataLoader's sampler
            buf.append(a)
            if len(buf) == B:
                yield np.stack(buf); buf = []
        if buf:
            yield np.stack(buf)
    with Pool(2) as pool:
        for x in timed(gen(pool)):
            step(x); rows += len(x); batches += 1
    return rows, batches

def run_sb():
    import streambatch
    srv = subprocess.Popen([sbbin, "run", spec, "--cpus", "2", "--serve", "127.0.0.1:0"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    info = json.loads(srv.stdout.readline())
    rows = batches = 0
    for b in timed(streambatch.iter_batches(info["address"], batch_size=B, batch_format="numpy",
                                            drop_last=False, token_file=info["tokenFile"],
                                            prefetch=os.environ.get("PREFETCH", "1") != "0")):
        x = b["image"]
        if batches == 0 and (x.dtype != np.float32 or x.shape[1] != 3 * 64 * 64):
            sys.exit(f"unexpected image column {x.dtype} {x.shape}")
        step(x); rows += len(x); batches += 1
    if srv.wait(timeout=60) != 0:
        sys.exit("the server did not exit 0")
    return rows, batches

t = threading.Thread(target=sample); t.start()
t0 = time.time()
rows, batches = run_pool() if kind == "pool" else run_sb()
wall = time.time() - t0
done.set(); t.join()
first = marks[0][1] - t0
steady = (rows - min(B, rows)) / (marks[-1][1] - marks[0][1]) if len(marks) > 1 else 0
waits = sorted(b - a for a, b in marks[1:]) or [0]
print(f"{rows / wall:.1f} {peak[0] / 2**20:.1f} {peak[1] / 2**20:.1f} {batches} {rows} "
      f"{first:.2f} {steady:.1f} {waits[len(waits) // 2] * 1e3:.1f} {peak[2] / 2**20:.1f} "
      f"{peak[3] / 2**20:.1f}")
PY
# SB_KIT_DIR and SB_CONSUMER_LIB put another kit or consumer library in (a change side by side)
export PYTHONPATH=${SB_KIT_DIR:-$PWD/sdk/python}
export STREAMBATCH_CONSUMER_LIB=${SB_CONSUMER_LIB:-$build/lib/libstreambatch_consumer.so}
declare -A sps rss kids ttfb ssps wait pss pkids
before=$(pressure)
for ((r = 0; r < reps; r++)); do
  for ms in 0 "$slow"; do
    for k in sb pool; do
      out=$("$py" "$work/ingest.py" "$k" "$ms" "$imgs" "$work/p.yaml" "$bin/streambatch") ||
        { echo "bench-ingest: $k at step $ms ms failed" >&2; exit 1; }
      read -r s m c _ rows f st w pm pc <<<"$out"
      ((rows == n)) || { echo "bench-ingest: $k fed $rows samples, want $n" >&2; exit 1; }
      sps[$k-$ms]+="$s " rss[$k-$ms]+="$m " kids[$k-$ms]+="$c "
      ttfb[$k-$ms]+="$f " ssps[$k-$ms]+="$st " wait[$k-$ms]+="$w "
      pss[$k-$ms]+="$pm " pkids[$k-$ms]+="$pc "
    done
  done
done
echo "## Ingest into a training step (scripts/bench-ingest.sh; issue 40)"
echo
echo "$n JPEGs (200-320 px; $(((n + 255) / 256)) batches each side) -> 64x64 -> normalize (chw), batches of 256, into a step that sleeps"
echo "0 ms (preprocessing the bottleneck) or $slow ms per batch (the step the bottleneck). streambatch:"
echo "\`run --serve --cpus 2\`, memoryBudget $budget, read with \`iter_batches(batch_format=\"numpy\")\`;"
echo "against a multiprocessing.Pool of 2 Pillow processes batching in the trainer (the DataLoader"
echo "stand-in: torch is not installed). $reps runs each alternating, median (range); peak memory of"
echo "the whole process tree, and of what runs beside the trainer (the server and its 2 workers; the"
echo "pool's 2 processes), as summed RSS and as summed PSS. Steady state: samples after the first batch over the seconds from the"
echo "first batch to the last; wait: the trainer's median time blocked in next() per batch after the"
echo "first. streambatch's consumer prefetch: $([[ ${PREFETCH:-1} == 0 ]] && echo off || echo on)."
echo "Before: $before; after: $(pressure). The machine is shared: other jobs ran."
echo
# "median (range)" of the numbers given; the ratio of two lists' medians
mr() { printf '%s (%s)' "$(median "$@")" "$(range "$@")"; }
# shellcheck disable=SC2086
ratio() { awk -v a="$(median $1)" -v b="$(median $2)" 'BEGIN{printf "%.2fx", a/b}'; }
echo "| step | first batch s: streambatch, pool | steady samples/s: streambatch, pool, ratio | wait ms per batch: streambatch, pool |"
echo "|---|---|---|---|"
for ms in 0 "$slow"; do
  # shellcheck disable=SC2086
  printf '| %s ms | %s, %s | %s, %s, %s | %s, %s |\n' "$ms" "$(mr ${ttfb[sb-$ms]})" \
    "$(mr ${ttfb[pool-$ms]})" "$(mr ${ssps[sb-$ms]})" "$(mr ${ssps[pool-$ms]})" \
    "$(ratio "${ssps[sb-$ms]}" "${ssps[pool-$ms]}")" "$(median ${wait[sb-$ms]})" "$(median ${wait[pool-$ms]})"
done
echo
echo "Whole runs, from the start to the last batch:"
echo
echo "| step | streambatch samples/s | pool samples/s | ratio | streambatch peak MiB: RSS tree, beside the trainer; PSS tree, beside | pool: the same |"
echo "|---|---|---|---|---|---|"
for ms in 0 "$slow"; do
  # shellcheck disable=SC2086
  printf '| %s ms | %s | %s | %s | %s, %s; %s, %s | %s, %s; %s, %s |\n' "$ms" "$(mr ${sps[sb-$ms]})" \
    "$(mr ${sps[pool-$ms]})" "$(ratio "${sps[sb-$ms]}" "${sps[pool-$ms]}")" \
    "$(median ${rss[sb-$ms]})" "$(median ${kids[sb-$ms]})" "$(median ${pss[sb-$ms]})" \
    "$(median ${pkids[sb-$ms]})" "$(median ${rss[pool-$ms]})" "$(median ${kids[pool-$ms]})" \
    "$(median ${pss[pool-$ms]})" "$(median ${pkids[pool-$ms]})"
done
echo
echo "RSS sums count each page shared between processes (the binaries' and shared libraries' code,"
echo "mapped by the server and each worker) once per process; PSS counts the tree's memory once"
echo "(a page shared by k processes is 1/k in each)."
