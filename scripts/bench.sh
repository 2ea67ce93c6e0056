#!/usr/bin/env bash
# `make bench`: runs every benchmark (build/bench/bench_* and scripts/bench-*.sh) and writes one
# report with the tables, the machine, the date and the exact commands. Takes about 30 minutes.
# The report goes to build/bench.md, not over docs/benchmarks.md: that file keeps the analyses
# written beside each table, and its tables are copied from such reports section by section.
#   SB_BUILD_DIR  build directory holding bench/ and tests/helpers/ (make sets it)
#   SB_BENCH_OUT  where to write the report (default $SB_BUILD_DIR/bench.md)
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh # SB_BIN_DIR, SB_BUILD_DIR
export SB_BIN_DIR # the benchmark scripts below run these binaries
build=$SB_BUILD_DIR
out=${SB_BENCH_OUT:-$build/bench.md}
bench=$build/bench/bench_data
export SB_BUILD_DIR=$build
[[ -x $bench ]] || { echo "bench: $bench is missing (run make bench)" >&2; exit 1; }

# A CA and a certificate (SAN DNS:streambatch, the default --tls-server-name) for the TLS rows
tls=$build/bench/tls
if [[ ! -r $tls/tls.crt ]]; then
  mkdir -p "$tls"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$tls/ca.key" \
    -out "$tls/ca.crt" -days 3650 -subj /CN=streambatch-bench-ca 2>/dev/null
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$tls/tls.key" \
    -out "$tls/tls.csr" -subj /CN=streambatch 2>/dev/null
  printf 'subjectAltName=DNS:streambatch\nextendedKeyUsage=serverAuth,clientAuth\n' >"$tls/ext"
  openssl x509 -req -in "$tls/tls.csr" -CA "$tls/ca.crt" -CAkey "$tls/ca.key" -set_serial 1 \
    -days 3650 -extfile "$tls/ext" -out "$tls/tls.crt" 2>/dev/null
fi
results=$(mktemp)
trap 'rm -f "$results"' EXIT
run() { # command line, shown in the report
  echo "bench: $*" >&2
  "$@" >>"$results"
}
cmds=(
  "bench_data transfer --size 67108864 --rounds 15 --tls-dir $tls"
  "bench_data transfer --size 67108864 --rounds 7 --no-tune"
  "bench_data many --n 1000 --size 4096 --rounds 3"
  "bench_data unary --threads 4 --seconds 2 --rounds 3"
)
. scripts/bench-lib.sh # pressure
before=$(pressure)
start=$(date +%s)
for c in "${cmds[@]}"; do
  # shellcheck disable=SC2086
  run "$build/bench/"$c
done
elapsed=$(($(date +%s) - start))
after=$(pressure)

# field NAME KEY: the value of KEY= on the RESULT line for NAME
field() { awk -v n="$1" -v k="$2" '$1 == "RESULT" && $2 == n {
  for (i = 3; i <= NF; i++) { split($i, kv, "="); if (kv[1] == k) print kv[2] } }' "$results"; }
fmt() { printf "%.${2:-2}f" "$1"; }
mib=$(( $(field tcp bytes) / 1048576 ))

row_transfer() { # name label
  local n=$1 label=$2
  echo "| $label | $(fmt "$(field "$n" gibps)") GiB/s (best $(fmt "$(field "$n" best_gibps)")) |" \
       "$(fmt "$(field "$n" ratio)") | $(fmt "$(field "$n" server_cpu_s_per_gib)") s/GiB |" \
       "$(fmt "$(field "$n" client_cpu_s_per_gib)") s/GiB |"
}

ratio_mem=$(field fetch_memory ratio)
ratio_spill=$(field fetch_spill ratio)
met() { awk -v r="$1" 'BEGIN { print (r >= 0.70) ? "met" : "NOT met" }'; }

cpu_model=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
mem_gib=$(awk '/MemTotal/ { printf "%.0f", $2 / 1048576 }' /proc/meminfo)
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD -- worker/data lib/rpc lib/partition worker/store tests/bench tests/helpers 2>/dev/null || commit="$commit (with local changes)"

mkdir -p "$(dirname "$out")"
{
cat <<EOF
# Benchmarks

Written by \`make bench\` (scripts/bench.sh); every number below was measured in that run.
docs/benchmarks.md takes its tables from such reports, with the analyses written beside them.

- Date: $(date -u '+%Y-%m-%d %H:%M UTC'); commit $commit; the run took ${elapsed} s.
- Machine: $(nproc) CPUs ($cpu_model), ${mem_gib} GiB memory, Linux $(uname -r). Server, client
  and the TCP pair run as separate processes on these same CPUs, over 127.0.0.1, and share them
  with whatever else runs on the machine (before the run: $before; after: $after). Other load
  hurts the fetch (several threads, a wake-up per chunk on each end) more than one TCP stream,
  so results move between runs; the ratio column pairs transfers made back to back.
- Commands (from \`$build\`):
$(for c in "${cmds[@]}"; do echo "  - \`bench/$c\`"; done)

## Results

**Goal: Data.Fetch of a ${mib} MiB partition from memory at >= 0.70 of plain TCP on the same
machine in the same run — $(met "$ratio_mem") ($(fmt "$ratio_mem")).** From spill:
$(fmt "$ratio_spill") ($(met "$ratio_spill") against the same bar).

| Benchmark | Result (median) | vs plain TCP | Server CPU | Client CPU |
|---|---|---|---|---|
$(row_transfer tcp "Plain TCP, ${mib} MiB: one write, reads into a preallocated buffer")
$(row_transfer fetch_memory "Data.Fetch, ${mib} MiB partition from memory")
$(row_transfer fetch_spill "Data.Fetch, ${mib} MiB partition from its spill file (page cache warm)")
$(row_transfer fetch_memory_default_malloc "Data.Fetch from memory, glibc default malloc (no sb_rpc_tune_malloc; vs the TCP of that run)")
$(row_transfer fetch_spill_default_malloc "Data.Fetch from spill, glibc default malloc")
$(row_transfer fetch_memory_tls "Data.Fetch from memory with mutual TLS (\`--tls-dir\`, same rounds as the rows above)")
| Connection setup with and without mutual TLS (new channel until READY; a worker opens one per fetch from a peer) | plaintext $(fmt "$(field connect plain_ms)") ms, TLS $(fmt "$(field connect tls_ms)") ms (median of $(field connect tries)) | – | – | – |
| 1,000 concurrent fetches of distinct $(($(field many bytes) / 1024)) KiB partitions (4 channels, one thread each) | $(fmt "$(field many median_s)" 3) s total, $(field many fetches_per_s) fetches/s | – | $(field many server_cpu_ms_per_1000) ms per 1,000 | $(field many client_cpu_ms_per_1000) ms per 1,000 |
| Control-plane unary calls (Heartbeat-shaped, $(field unary threads) threads, one channel) | $(field unary calls_per_s) calls/s ($(field unary mean_latency_us) µs mean) | – | $(field unary server_cpu_us_per_call) µs per call | $(field unary client_cpu_us_per_call) µs per call |

With mutual TLS (ECDSA P-256 certificates, \`--tls-dir\`) the fetch from memory ran at
$(fmt "$(field tls_vs_plain ratio)") of the plaintext fetch in the same rounds (median of the per-round ratios).

CPU is user + system time (getrusage) of each process over the timed transfers, per GiB moved
(per 1,000 fetches, per call). "Best" is the fastest round.

## How it is measured

- Transfers: every round times one transfer of each kind (order rotating), each over a fresh
  connection warmed by one untimed transfer of the same size; the median over the rounds is
  reported, and the ratio to TCP is the median of the per-round ratios. The fetch uses a reusable \`sb_data_fetcher\` (destination buffer kept between
  fetches, as the TCP receiver keeps its preallocated one) with the default checks: crc32c of
  every chunk and a structural \`sb_batch_open\` of the result. The server is
  \`tests/helpers/sb_data_serve\` with the worker's store and data server: the memory partition
  is sent zero-copy from the store's buffer, the spilled one is read chunk by chunk with
  \`sb_store_read\` into pooled buffers (its file is in the page cache: it was just written).
- Plain TCP is a forked sender process writing the same number of bytes in one \`write\` loop
  from a prepared buffer; the receiver reads them into a preallocated, pre-touched buffer.
- Many fetches: 1,000 threads wait on a barrier and each fetches its own partition
  (\`sb_data_fetch\`, a new blob each) over one of 4 channels; wall time until the last one ends.
- Unary: threads call \`Control/Heartbeat\` with a HeartbeatRequest carrying metrics and two
  task ids through \`sb_rpc_call_msg\` (encode, call, decode + validate) for the given seconds.

## What limits the fetch

- The receiver does what TCP does (the kernel copies into gRPC's receive slices) plus one more
  pass: the assembler copies the chunk from the slices into the blob and checksums it (crc32c of
  every chunk is the price of end-to-end verification). The sender adds one crc32c pass per chunk
  to the kernel copy of the send; the payload itself is never copied in user space.
- glibc malloc: with its default dynamic thresholds, gRPC's 64 KiB receive slices are freed at
  the top of the heap, which is trimmed and faulted in again — measured 4,000-8,000 page faults
  per 64 MiB fetch and about twice the receiver CPU; whether a connection falls into that pattern
  varies from connection to connection. \`sb_rpc_tune_malloc(0)\` (keep 64 MiB of freed heap,
  heap-allocate below 32 MiB) removes it; the row "glibc default malloc" shows the difference.
  Every process that moves partitions should call it at start.
- Spilled partitions cost one more copy (\`pread\` from the page cache into a pooled buffer) and
  two more crc32c passes (the store verifies the chunk it read, then the chunk is checksummed for
  the wire): the spill row's higher server CPU.
- Mutual TLS: gRPC encrypts into new buffers and decrypts out of them (TLS records of at most
  16 KiB, AES-GCM), so each end makes a full extra pass over the bytes (the partition the store
  hands over without a copy is read once more to encrypt it); a new connection also pays the
  handshake (the connection-setup row), which matters because a worker opens a connection per
  fetch from a peer.
- On this machine both ends and the TCP pair share the same CPUs, so the ratio reflects total CPU
  per byte as much as latency; on two machines each end would have its own cores.
EOF
} >"$out"
# The engine's benchmarks (issue 4) append their section to the same report.
echo "bench: engine benchmarks (scripts/bench-engine.sh, a few minutes)" >&2
{
  echo
  echo "## Engine (\`streambatch run\` with local worker processes)"
  echo
  echo "Command: \`scripts/bench-engine.sh\` (run by \`make bench\`), same machine, same run."
  echo
  scripts/bench-engine.sh
} >>"$out"
echo "bench: storage benchmarks (scripts/bench-storage.sh: MinIO vs curl, s3 vs file)" >&2
scripts/bench-storage.sh >>"$out"
echo "bench: metrics cost (scripts/bench-metrics.sh: runs with metrics served vs not)" >&2
scripts/bench-metrics.sh >>"$out"
echo "bench: user code (scripts/bench-usercode.sh: exec and plugin costs, Ray Data side by side)" >&2
scripts/bench-usercode.sh >>"$out"
echo "bench: tensor.mlp on the CPU (scripts/bench-mlp.sh: the op vs numpy's matmuls)" >&2
scripts/bench-mlp.sh >>"$out"
echo "bench: tiny tasks end to end (scripts/bench-tasks.sh: batched polls vs one task per poll, disk vs tmpfs)" >&2
{ echo; scripts/bench-tasks.sh; } >>"$out"
echo "bench: many tiny files (scripts/bench-tiny.sh: grouped splits vs a task per file vs Daft)" >&2
scripts/bench-tiny.sh >>"$out"
echo "bench: ETL (scripts/bench-etl.sh: jsonl filter + project vs one C program doing the same)" >&2
scripts/bench-etl.sh >>"$out"
echo "bench: Parquet (scripts/bench-parquet.sh: 1 GiB filter + project + write vs pyarrow.dataset, DuckDB, Daft, Ray Data)" >&2
{ echo; scripts/bench-parquet.sh; } >>"$out"
echo "bench: all-to-all ops (scripts/bench-a2a.sh: sort 2 GiB, groupby and random_shuffle 1 GiB vs Ray Data, Daft, DuckDB)" >&2
{ echo; scripts/bench-a2a.sh; } >>"$out"
echo "bench: early reduces (scripts/bench-early-reduce.sh: groupby, random_shuffle, distinct of 1 GiB, on vs off)" >&2
{ echo; scripts/bench-early-reduce.sh; } >>"$out"
echo "bench: images decoded and resized on the CPU (scripts/bench-images.sh: full decode vs draft vs a Pillow pool)" >&2
{ echo; scripts/bench-images.sh; } >>"$out"
echo "bench: memory of the process tree (scripts/bench-memory.sh: peak Pss vs budget + 40 MiB/worker)" >&2
scripts/bench-memory.sh >>"$out"
echo "bench: external sort, 10 GiB under memoryBudget 512Mi (scripts/bench-memory.sh sort: peak Pss vs budget + 40 MiB/worker)" >&2
scripts/bench-memory.sh sort >>"$out"
echo "bench: controller under load (scripts/bench-ctl-load.sh: 1,000 and 10,000 simulated workers)" >&2
scripts/bench-ctl-load.sh >>"$out"
echo "bench: a sick worker (scripts/bench-stragglers.sh: tail sizing, copies, drain vs none)" >&2
scripts/bench-stragglers.sh >>"$out"
PARTITION_SIZE=512Ki scripts/bench-stragglers.sh >>"$out"
THROTTLE=quota scripts/bench-stragglers.sh >>"$out"
SHAPE=coarse scripts/bench-stragglers.sh >>"$out" # issue 42: one task per file, 4 per worker
echo "bench: cost-aware placement (scripts/bench-plan.sh: the plan vs a brute force, predicted vs measured cost)" >&2
scripts/bench-plan.sh >>"$out"
echo "bench: LB-BSP (scripts/bench-ingest-lbbsp.sh: two ranks, one at half speed, lbbsp vs equal batches)" >&2
scripts/bench-ingest-lbbsp.sh >>"$out"
echo "bench: ingest into a training step (scripts/bench-ingest.sh: stream:// + iter_batches vs a Pillow pool)" >&2
{ echo; scripts/bench-ingest.sh; } >>"$out"
# Issue 38's checkpoints at scale (scripts/bench-ckpt-scale.sh): the local run, then the
# lifecycle case on the test cluster, when its binaries can be built (tests/k8s/build.sh: Go and
# the module proxy, cached after the first time); otherwise only the local run, and the report
# says why. SB_BENCH_CKPT_FILES sizes it (default the issue's 200,000: over an hour).
ckn=${SB_BENCH_CKPT_FILES:-200000}
ckpt_cluster=--cluster ckpt_why=""
if ! tests/k8s/build.sh >"$build/bench-k8s-build.log" 2>&1; then
  ckpt_cluster="" ckpt_why="the test cluster could not be built here (tests/k8s/build.sh; log in $build/bench-k8s-build.log)"
fi
echo "bench: checkpoints at scale (scripts/bench-ckpt-scale.sh $ckn $ckpt_cluster: local, then the test cluster)" >&2
{
  echo
  echo "## Checkpoints at scale (issue 38)"
  echo
  echo "Command: \`BUILD=$build BINDIR=$SB_BIN_DIR scripts/bench-ckpt-scale.sh $ckn $ckpt_cluster\`${ckpt_why:+ (cluster part skipped: $ckpt_why)}."
  echo
  BUILD=$build BINDIR=$SB_BIN_DIR scripts/bench-ckpt-scale.sh "$ckn" $ckpt_cluster 2>&1 |
    grep -E '^figure:|^(ok|FAIL) - |passed, [0-9]+ failed' | sed 's/^/    /' || true
} >>"$out"
# Issue 40's cluster effect: a trainer pod fed by its own pool, then by 1-3 worker pods, on the
# test cluster with the pods' CPU limits enforced (skipped, saying why, where it cannot be built)
echo "bench: ingest on the test cluster (scripts/bench-ingest-cluster.sh: a 500m trainer pod, its own pool vs 1-3 worker pods)" >&2
{
  echo
  echo "## Ingest on the test cluster (issue 40)"
  echo
  if [[ -z $ckpt_why ]]; then
    echo "Command: \`BUILD=$build BINDIR=$SB_BIN_DIR scripts/bench-ingest-cluster.sh\`."
    echo
    BUILD=$build BINDIR=$SB_BIN_DIR scripts/bench-ingest-cluster.sh 2>&1 |
      grep -E '^figure:|^\||^(ok|FAIL) - |passed, [0-9]+ failed' | sed 's/^/    /' || true
  else
    echo "Skipped: $ckpt_why."
  fi
} >>"$out"
echo "bench: wrote $out (${elapsed} s for the data plane)" >&2
cat "$out"
