#!/usr/bin/env bash
# GPU inference against a hand-written PyTorch loop (issue 36), in one short run on a machine with
# an NVIDIA GPU (the session tool `device`: an H200, 16 cores, python3 with torch, numpy and
# Pillow, no network), over binaries built here. Prepare here:
#   scripts/device-inference.sh --prepare   [SB_BUILD_DIR=build SB_BIN_DIR=bin]
# builds what it needs, copies it into .devbin/ (the three binaries stripped) and the shared
# libraries into .devlibs/, packs both into .devpack/dev.tar.xz (~17 MiB: a device run carries
# at most 64 MiB, and the folders are ~86), and prints the device call:
#   carry [".devpack"], timeout_s 480,
#   command: tar -xJf .devpack/dev.tar.xz && SB_BIN_DIR=.devbin/bin SB_BUILD_DIR=.devbin \
#            scripts/device-inference.sh
# (2026-11-29 on an H200: about 2 minutes, machine start not counted)
# cuBLASLt is not carried (its libcublasLt.so.13 alone is 490 MiB): the GPU machine's own copy,
# from torch's nvidia-cublas wheel, is found with device-libs.sh --find-cublas.
#   1. machine: the GPU's name and driver (nvidia-smi), missing libraries
#   2. tests/cuda/*: every CUDA test binary (cuBLASLt against a double reference and against the
#      CPU at fp32, tf32 and bf16)
#   3. tensor.mlp alone (build/bench/bench_mlp_gpu) against PyTorch (tests/bench/mlp_torch.py) on
#      the headline model, at batch 1, 64, 1024 and 4096 (fp32, tf32) and 1 and 1024 (bf16)
#   4. the headline job: IMAGES generated JPEGs (200-320 px) -> image.resize 64x64 ->
#      image.normalize -> tensor.mlp 12288 -> 4096 -> 4096 -> 1000 (relu, topK 5, batchSize 1024)
#      -> project [path, logitsTopK] -> jsonl with `streambatch run --cpus CPUS --gpus 1`, and
#      tests/bench/torch_inference.py (a DataLoader of TORCH_WORKERS processes) on the same files
#      and model, per precision; their answers compared (top-1 and top-5 agreement); the GPU's
#      utilisation during each run (nvidia-smi dmon, its mean SM %).
#   5. the GPU-bound variant: pre-decoded tensors and a wider MLP. The job's images are resized
#      once into parquet (uint8 64x64x3, not timed), linked GB_REPEAT times; then, timed, parquet
#      -> identity (CPU) -> tensor.mlp GB_DIMS (batchSize 1024) -> jsonl, per GB_VARIANTS, against
#      torch_inference.py --predecoded GB_REPEAT (the same images decoded by Pillow before its
#      clock starts), with the GPU's utilisation (the whole run's mean, and the mean from its
#      first busy second to its last) and the answers compared
#   6. ETL (no GPU): ETL_MIB of scripts/bench-etl.sh's jsonl, filter + project, `streambatch run
#      --cpus N` against tests/bench/bench_etl_c --threads N at N = 2, 8, 16, 3 rounds interleaved
#   7. ingest (issue 40): INGEST_IMAGES (10240) of the job's JPEGs -> 64x64 -> normalize, batches
#      of 256, into a torch training step on the GPU (tests/bench/torch_ingest.py: light, then
#      heavy), fed by a DataLoader of CPUS workers and by `streambatch run --serve --cpus CPUS`
#      read with iter_batches, 2 rounds alternating (memoryBudget INGEST_BUDGET, 1Gi; the steps
#      INGEST_STEPS, "light heavy")
# Everything printed goes to $OUT/device-inference.log; the RESULT lines also to
# $OUT/inference-results.txt. Environment (defaults for the GPU machine):
#   SB_BIN_DIR (bin) SB_BUILD_DIR (build) PYTHON (python3) IMAGES (20000)
#   DIMS (12288,4096,4096,1000) PRECISIONS ("fp32 tf32") CPUS (15) TORCH_WORKERS (15)
#   TORCH_DEVICE (cuda) TORCH_ENGINE (torch; numpy: the same data path without torch)
#   JOB_OUTPUT_FIELD (logits; image: tensor.mlp writes its output over the input column, as
#   PyTorch's loop keeps no input, instead of beside it)
#   DRAFT (0; 1: both pipelines decode JPEGs reduced: source.args.draft and Pillow's draft())
#   STEPS ("machine tests bench job gpubound etl ingest"; etl: ETL_MIB, default 2048)
#   GB_DIMS (12288,8192,8192,8192,1000) GB_REPEAT (15) GB_PRECISION (fp32)
#   GB_VARIANTS ("add:64Mi replace:64Mi": MODE:PARTITIONSIZE, mode add or replace)
# A dry run on a machine without a GPU (only the job, the op on the CPU fallback):
#   IMAGES=200 DIMS=12288,64,64,10 CPUS=2 TORCH_WORKERS=2 TORCH_DEVICE=cpu TORCH_ENGINE=numpy \
#   PYTHON=build/resize-venv/bin/python SB_BIN_DIR=build/hg/bin STEPS=job scripts/device-inference.sh
set -uo pipefail
cd "$(dirname "$0")/.."
if [[ ${1:-} == --prepare ]]; then
  b=${SB_BUILD_DIR:-build} bd=${SB_BIN_DIR:-bin}
  make -j2 BUILD="$b" BINDIR="$bd" "$bd/streambatch" "$bd/streambatch-worker" \
    "$bd/streambatch-worker-gpu" "$b/tests/test_mlp_cuda" "$b/bench/bench_mlp_gpu" "$b/bench/bench_etl_c" "$b/lib/libstreambatch_consumer.so" >/dev/null || exit 1
  rm -rf .devbin .devlibs && mkdir -p .devbin/bin .devbin/tests .devbin/bench .devbin/lib
  strip -o .devbin/lib/libstreambatch_consumer.so "$b/lib/libstreambatch_consumer.so"
  for f in streambatch streambatch-worker streambatch-worker-gpu; do strip -o ".devbin/bin/$f" "$bd/$f"; done
  for f in tests/cuda/test_*.c; do cp "$b/tests/$(basename "$f" .c)" .devbin/tests/; done
  cp "$b/bench/bench_mlp_gpu" "$b/bench/bench_etl_c" .devbin/bench/
  scripts/device-libs.sh .devlibs .devbin/bin/* .devbin/tests/* .devbin/bench/* .devbin/lib/*
  for d in /.devbin/ /.devlibs/ /.devpack/; do grep -qxsF "$d" .git/info/exclude || echo "$d" >>.git/info/exclude; done
  # the two folders (~86 MiB) are over a device run's 64 MiB: they travel as one xz tarball
  mkdir -p .devpack && tar -cf - .devbin .devlibs | xz -T2 -6 >.devpack/dev.tar.xz || exit 1
  echo "device-inference: .devbin $(du -sh .devbin | cut -f1), .devlibs $(du -sh .devlibs | cut -f1), packed $(du -sh .devpack/dev.tar.xz | cut -f1); run:"
  echo '  carry [".devpack"], timeout_s 480, command:'
  echo '  tar -xJf .devpack/dev.tar.xz && SB_BIN_DIR=.devbin/bin SB_BUILD_DIR=.devbin scripts/device-inference.sh'
  exit 0
fi
out=${OUT:-$(mktemp -d /tmp/sb-device-XXXXXX)}
mkdir -p "$out"
exec > >(tee "$out/device-inference.log") 2>&1
bin=$(realpath "${SB_BIN_DIR:-bin}")
build=$(realpath "${SB_BUILD_DIR:-build}")
py=${PYTHON:-python3}
images=${IMAGES:-20000}
dims=${DIMS:-12288,4096,4096,1000}
precisions=${PRECISIONS:-fp32 tf32}
cpus=${CPUS:-15}
tworkers=${TORCH_WORKERS:-15}
tdevice=${TORCH_DEVICE:-cuda}
tengine=${TORCH_ENGINE:-torch}
draft=${DRAFT:-0}
sbdraft="" tdraft=""
((draft)) && sbdraft=", draft: {width: 64, height: 64}" tdraft=--draft
steps=" ${STEPS:-machine tests bench job gpubound etl ingest} "
results=$out/inference-results.txt
: >"$results"
work=$(mktemp -d /tmp/sb-inference-XXXXXX)
trap 'rm -rf "$work"' EXIT
cublas=$(scripts/device-libs.sh --find-cublas "$py" 2>/dev/null)
export LD_LIBRARY_PATH=$PWD/.devlibs${cublas:+:$cublas}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
gpu=0
command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 && gpu=1
din=${dims%%,*}
start=$SECONDS
say() { echo "== $* (t+$((SECONDS - start)) s)"; }
result() { echo "$*"; echo "$*" >>"$results"; }

if [[ $steps == *" machine "* ]]; then
  say "1. machine"
  if ((gpu)); then
    result "RESULT gpu $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)"
  else
    result "RESULT gpu none (nvidia-smi found no GPU): the CUDA steps are skipped"
  fi
  echo "cpus $(nproc), kernel $(uname -r), cuBLASLt from ${cublas:-the RUNPATH of the binaries}"
  ldd "$bin"/streambatch "$bin"/streambatch-worker-gpu | grep 'not found' && echo "MISSING LIBRARIES"
fi

if [[ $steps == *" tests "* ]] && ((gpu)); then
  say "2. tests/cuda"
  for src in tests/cuda/test_*.c; do
    t=$build/tests/$(basename "$src" .c)
    timeout 180 "$t" --jobs 4 2>&1 | tail -15
    result "RESULT test $(basename "$t") exit ${PIPESTATUS[0]}"
  done
fi

if [[ $steps == *" bench "* ]] && ((gpu)); then
  say "3. tensor.mlp alone against PyTorch, model ${dims}"
  "$py" tests/bench/inference_data.py model "$work/model.safetensors" "$dims"
  rows_for() { case $1 in 1) echo 500 ;; 64) echo 2048 ;; *) echo $(($1 * 4)) ;; esac; }
  # replace (outputField = field): the output alone, as PyTorch's loop returns it; add: the
  # input column kept beside the output (its copy into the output partition included)
  for pm in fp32:replace tf32:replace bf16:replace fp32:add; do
    prec=${pm%:*} mode=${pm#*:}
    batches="1 64 1024 4096"
    [[ $prec == bf16 ]] && batches="1 1024"
    [[ $mode == add ]] && batches="1024 4096"
    for b in $batches; do
      r=$(timeout 90 "$build/bench/bench_mlp_gpu" "$work/model.safetensors" "$din" \
        "$(rows_for "$b")" "$b" 2 cuda "$mode" "$prec" 2>&1 | grep RESULT || echo "failed")
      result "RESULT op precision=$prec mode=$mode batch=$b rows=$(rows_for "$b") $r"
    done
  done
  # PyTorch, the same pairs, in one process per batch list
  for prec in fp32,tf32 bf16; do
    batches="1 64 1024 4096"
    [[ $prec == bf16 ]] && batches="1 1024"
    rows=$(for b in $batches; do rows_for "$b"; done | paste -sd,)
    timeout 180 "$py" tests/bench/mlp_torch.py "$work/model.safetensors" "$din" "$rows" \
      "$(tr ' ' , <<<"$batches")" 2 "$prec" 2>&1 | grep -E 'RESULT|Error' | tee -a "$results"
  done
fi

# The headline job's manifest for one precision (file URIs under $work).
manifest() { # precision -> path
  local f=$work/inference-$1.yaml
  cat >"$f" <<EOF
apiVersion: streambatch.dev/v1alpha1
kind: Pipeline
metadata: {name: inference-$1}
spec:
  source: {uri: "file://$work/images/", format: image, args: {channels: 3$sbdraft}}
  stages:
  - {name: resize, op: image.resize, args: {width: 64, height: 64}, resources: {cpu: "1"}}
  - {name: normalize, op: image.normalize, args: {mean: 0.5, std: 0.5}, resources: {cpu: "1"}}
  - name: classify
    op: tensor.mlp
    args: {weights: "file://$work/model.safetensors", field: image, activation: relu,
           outputField: ${JOB_OUTPUT_FIELD:-logits}, topK: 5, precision: $1}
    batchSize: 1024
    resources: {gpu: 1, cpu: "1"}
  - {name: answer, op: project, args: {fields: [path, ${JOB_OUTPUT_FIELD:-logits}TopK]}, resources: {cpu: "1"}}
  sink: {uri: "file://$work/out-sb-$1/", format: jsonl}
EOF
  echo "$f"
}
dmon_start() { # file: nvidia-smi dmon in the background (utilisation every second)
  ((gpu)) || return 0
  nvidia-smi dmon -s u -d 1 >"$1" 2>/dev/null &
  dmon_pid=$!
}
dmon_stop() { # file label: the mean SM % of the samples
  ((gpu)) || return 0
  kill "$dmon_pid" 2>/dev/null
  wait "$dmon_pid" 2>/dev/null
  result "RESULT gpu-busy $2 $(awk '!/^#/ && NF >= 2 { s += $2; n++; v[n] = $2; if ($2 >= 1) { if (!f) f = n; l = n } }
    END { if (!n) { print "no samples"; exit }
          printf "sm_mean=%.1f%% samples=%d", s / n, n
          if (f) { for (i = f; i <= l; i++) b += v[i]; printf " busy_span_mean=%.1f%% span_samples=%d", b / (l - f + 1), l - f + 1 } }' "$1")"
}

if [[ $steps == *" job "* ]]; then
  say "4. the job: $images JPEGs -> resize -> normalize -> tensor.mlp $dims -> jsonl"
  "$py" tests/bench/inference_data.py images "$work/images" "$images" "$(nproc)" || exit 1
  [[ -f $work/model.safetensors ]] || "$py" tests/bench/inference_data.py model "$work/model.safetensors" "$dims" || exit 1
  echo "images: $(find "$work/images" -type f | wc -l) files, $(du -sh "$work/images" | cut -f1); model $(du -h "$work/model.safetensors" | cut -f1)"
  for prec in $precisions; do
    say "4. $prec: streambatch run --cpus $cpus --gpus 1"
    f=$(manifest "$prec")
    mkdir -p "$work/run-$prec"
    dmon_start "$work/dmon-sb-$prec.txt"
    t0=$EPOCHREALTIME
    timeout 300 "$bin/streambatch" run "$f" --cpus "$cpus" --gpus 1 --memory-budget 4Gi \
      --run-dir "$work/run-$prec" --summary-json "$work/summary-$prec.json" 2>&1 | tail -8
    rc=${PIPESTATUS[0]}
    t1=$EPOCHREALTIME
    dmon_stop "$work/dmon-sb-$prec.txt" "streambatch-$prec"
    result "RESULT streambatch precision=$prec draft=$draft output=${JOB_OUTPUT_FIELD:-logits} images=$images seconds=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }') exit=$rc"
    grep -h "tensor.mlp runs" "$work/run-$prec"/*.log 2>/dev/null | head -2
    say "4. $prec: tests/bench/torch_inference.py ($tengine on $tdevice, $tworkers workers)"
    dmon_start "$work/dmon-torch-$prec.txt"
    timeout 300 "$py" tests/bench/torch_inference.py "$work/images" "$work/model.safetensors" \
      "$work/torch-$prec.jsonl" --device "$tdevice" --workers "$tworkers" --batch 1024 \
      --precision "$prec" --engine "$tengine" $tdraft 2>&1 | tail -3 | tee -a "$results"
    dmon_stop "$work/dmon-torch-$prec.txt" "torch-$prec"
    r=$("$py" tests/bench/inference_data.py compare "$work/out-sb-$prec" "$work/torch-$prec.jsonl" "$images")
    rc=$?
    result "$r precision=$prec exit=$rc"
  done
  cp "$work"/summary-*.json "$out/" 2>/dev/null
fi
if [[ $steps == *" gpubound "* ]]; then
  gdims=${GB_DIMS:-12288,8192,8192,8192,1000} rep=${GB_REPEAT:-15} gprec=${GB_PRECISION:-fp32}
  say "5. GPU-bound: pre-decoded $images images x $rep -> tensor.mlp $gdims ($gprec)"
  [[ -d $work/images ]] || "$py" tests/bench/inference_data.py images "$work/images" "$images" "$(nproc)" || exit 1
  "$py" tests/bench/inference_data.py model "$work/wide.safetensors" "$gdims" || exit 1
  mkdir -p "$work/gb/src" "$work/gb/run-pre"
  cat >"$work/gb/pre.yaml" <<EOF
apiVersion: streambatch.dev/v1alpha1
kind: Pipeline
metadata: {name: predecode}
spec:
  source: {uri: "file://$work/images/", format: image, args: {channels: 3}}
  stages:
  - {name: resize, op: image.resize, args: {width: 64, height: 64}}
  - {name: keep, op: project, args: {fields: [path, image]}}
  - {name: merge, op: repartition, args: {partitions: 32}}
  sink: {uri: "file://$work/gb/pq/", format: parquet}
EOF
  timeout 300 "$bin/streambatch" run "$work/gb/pre.yaml" --cpus "$cpus" --run-dir "$work/gb/run-pre" 2>&1 | tail -2
  for r in $(seq 1 "$rep"); do
    for f in "$work"/gb/pq/*.parquet; do ln "$f" "$work/gb/src/r$r-$(basename "$f")"; done
  done
  echo "pre-decoded: $(find "$work/gb/pq" -name '*.parquet' | wc -l) parquet files, $(du -sh "$work/gb/pq" | cut -f1), linked $rep times; model $(du -h "$work/wide.safetensors" | cut -f1)"
  dmon_start "$work/gb/dmon-torch.txt"
  timeout 300 "$py" tests/bench/torch_inference.py "$work/images" "$work/wide.safetensors" \
    "$work/gb/torch.jsonl" --device "$tdevice" --workers "$tworkers" --batch 1024 \
    --precision "$gprec" --predecoded "$rep" 2>&1 | tail -3 | tee -a "$results"
  dmon_stop "$work/gb/dmon-torch.txt" "gpubound-torch-$gprec"
  # variants: MODE:PSIZE; add keeps the input column beside the logits (outputField logits),
  # replace writes the logits over it (outputField image: PyTorch's loop keeps no input);
  # PSIZE the source's partitionSize
  for v in ${GB_VARIANTS:-add:64Mi replace:64Mi}; do
    mode=${v%%:*} psize=${v#*:} of=logits
    [[ $mode == replace ]] && of=image
    cat >"$work/gb/gb.yaml" <<EOF
apiVersion: streambatch.dev/v1alpha1
kind: Pipeline
metadata: {name: gpubound}
spec:
  source: {uri: "file://$work/gb/src/", format: parquet, partitionSize: $psize}
  stages:
  - {name: read, op: identity, resources: {cpu: "1"}}
  - name: classify
    op: tensor.mlp
    args: {weights: "file://$work/wide.safetensors", field: image, activation: relu,
           outputField: $of, topK: 5, precision: $gprec}
    batchSize: 1024
    resources: {gpu: 1, cpu: "1"}
  - {name: answer, op: project, args: {fields: [path, ${of}TopK]}, resources: {cpu: "1"}}
  sink: {uri: "file://$work/gb/out-sb/", format: jsonl}
EOF
    rm -rf "$work/gb/out-sb" "$work/gb/run" && mkdir -p "$work/gb/run"
    dmon_start "$work/gb/dmon-sb.txt"
    t0=$EPOCHREALTIME
    timeout 300 "$bin/streambatch" run "$work/gb/gb.yaml" --cpus "$cpus" --gpus 1 --memory-budget 8Gi \
      --run-dir "$work/gb/run" --summary-json "$work/gb/summary-$mode-$psize.json" 2>&1 | tail -5
    rc=${PIPESTATUS[0]}
    t1=$EPOCHREALTIME
    dmon_stop "$work/gb/dmon-sb.txt" "gpubound-streambatch-$gprec-$mode-$psize"
    rows=$(cat "$work"/gb/out-sb/*.jsonl 2>/dev/null | wc -l)
    result "RESULT gpubound streambatch precision=$gprec mode=$mode partitionSize=$psize dims=$gdims images=$((images * rep)) rows_out=$rows seconds=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }') exit=$rc"
    cp "$work/gb/summary-$mode-$psize.json" "$out/" 2>/dev/null
    r=$("$py" tests/bench/inference_data.py compare "$work/gb/out-sb" "$work/gb/torch.jsonl" "$images")
    result "$r gpubound mode=$mode partitionSize=$psize exit=$?"
  done
fi
if [[ $steps == *" etl "* ]]; then
  # issue 36: ETL filter + project on this machine's cores against the C program with as many
  # threads (the data of scripts/bench-etl.sh: ~200-byte jsonl records in 16 files, page cache
  # warm; 16 generator processes, one file each)
  emib=${ETL_MIB:-2048}
  say "6. ETL: $emib MiB of jsonl, filter + project, streambatch --cpus N vs bench_etl_c --threads N"
  mkdir -p "$work/etl/in"
  "$py" - "$work/etl/in" "$emib" <<'PY' || exit 1
import multiprocessing, random, sys
out, mib = sys.argv[1], int(sys.argv[2])
def one(k):
    rng, langs, per = random.Random(7 + k), ["en", "de", "fr", "es"], (mib << 20) // 16
    i, n = k * 100000000, 0
    with open("%s/part-%02d.jsonl" % (out, k), "w") as f:
        while n < per:
            line = '{"id":%d,"lang":"%s","score":%d,"text":"%s"}\n' % (
                i, langs[i % 4], rng.randrange(1000), "x" * rng.randrange(100, 200))
            f.write(line)
            n += len(line)
            i += 1
with multiprocessing.Pool(16) as p:
    p.map(one, range(16))
PY
  cat "$work"/etl/in/*.jsonl >/dev/null
  sync
  cat >"$work/etl/etl.yaml" <<Y
apiVersion: streambatch.dev/v1alpha1
kind: Pipeline
metadata: {name: etl}
spec:
  source: {uri: "file://$work/etl/in/", format: jsonl, partitionSize: 64Mi}
  stages:
  - {name: keep, op: filter, args: {field: lang, op: eq, value: en}}
  - {name: cut, op: project, args: {fields: [id, score]}}
  sink: {uri: "file://$work/etl/out-sb/", format: jsonl}
  execution: {memoryBudget: 4Gi}
Y
  secs() { local t0=$EPOCHREALTIME; "$@" >"$work/etl/last.log" 2>&1 || { tail -5 "$work/etl/last.log"; return 1; }
    awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.3f", b - a }'; }
  digest() { cat "$@" | LC_ALL=C sort | md5sum | cut -c1-12; }
  for n in 2 8 16; do
    for r in 1 2 3; do
      rm -rf "$work/etl/out-sb" "$work/etl/out-c"
      if ((r % 2)); then
        a=$(secs "$bin/streambatch" run "$work/etl/etl.yaml" --cpus "$n")
        b=$(secs "$build/bench/bench_etl_c" --threads "$n" lang en id,score "$work/etl/out-c" "$work"/etl/in/*.jsonl)
      else
        b=$(secs "$build/bench/bench_etl_c" --threads "$n" lang en id,score "$work/etl/out-c" "$work"/etl/in/*.jsonl)
        a=$(secs "$bin/streambatch" run "$work/etl/etl.yaml" --cpus "$n")
      fi
      same=""
      ((r == 1)) && same=" same_output=$([[ $(digest "$work"/etl/out-sb/part-*.jsonl) == $(digest "$work"/etl/out-c/*.jsonl) ]] && echo yes || echo NO)"
      result "RESULT etl workers=$n round=$r mib=$emib streambatch_s=$a c_s=$b c_over_sb=$(awk -v a="$a" -v b="$b" 'BEGIN { if (a > 0) printf "%.2f", b / a }')$same"
    done
  done
fi
if [[ $steps == *" ingest "* ]]; then
  # issue 40 on a GPU machine: the DataLoader (CPUS workers) against streambatch (--cpus CPUS)
  # feeding a torch training step on the GPU (tests/bench/torch_ingest.py)
  ni=${INGEST_IMAGES:-10240}
  say "7. ingest: $ni JPEGs -> 64x64 -> normalize -> a torch training step (light, heavy)"
  [[ -d $work/images ]] || "$py" tests/bench/inference_data.py images "$work/images" "$images" "$(nproc)" || exit 1
  mkdir -p "$work/ingest/images"
  find "$work/images" -name '*.jpg' | sort | head -n "$ni" | while read -r f; do ln "$f" "$work/ingest/images/"; done
  cat >"$work/ingest/p.yaml" <<EOF
apiVersion: streambatch.dev/v1alpha1
kind: Pipeline
metadata: {name: ingest}
spec:
  source: {uri: "file://$work/ingest/images/", format: image}
  stages:
    - {name: resize, op: image.resize, args: {width: 64, height: 64}}
    - {name: norm, op: image.normalize, args: {mean: 0.5, std: 0.25, layout: chw}}
  sink: {uri: "stream://", format: jsonl}
  execution: {memoryBudget: ${INGEST_BUDGET:-1Gi}}
EOF
  for st in ${INGEST_STEPS:-light heavy}; do
    for r in 1 2; do
      kinds="sb loader"
      ((r == 2)) && kinds="loader sb"
      for k in $kinds; do
        PYTHONPATH=$PWD/sdk/python STREAMBATCH_CONSUMER_LIB=$build/lib/libstreambatch_consumer.so \
          timeout 180 "$py" tests/bench/torch_ingest.py "$k" "$work/ingest/images" "$work/ingest/p.yaml" \
          "$bin/streambatch" --workers "$cpus" --step "$st" --device "$tdevice" 2>&1 | tail -2 | tee -a "$results"
      done
    done
  done
fi
say "done"
