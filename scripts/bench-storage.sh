#!/usr/bin/env bash
# Storage benchmarks (issue 10), run by `make bench` after the others; prints a markdown section.
#   1. one 1 GiB jsonl object read from MinIO by the pipeline's source vs `curl` downloading the
#      same object to /dev/null: the source alone (build/bench/bench_read: the controller's split
#      plan read by the worker's reader on 2 threads, into the 1 MiB in-place partitions a worker
#      hands its op chain) and a whole `streambatch run` (a filter that
#      keeps nothing, so the read and the filter's JSON scan are all the work)
#   2. an s3 -> s3 filter+project pipeline vs the same pipeline file -> file, same data
# Every pair is measured back to back in this run, ROUNDS times (default 3); medians and the
# spread are reported. MinIO runs on 127.0.0.1 from scripts/minio.sh's cache, data in a temp dir.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
. "$top/scripts/env.sh" # SB_BIN_DIR, SB_BUILD_DIR
bin=$SB_BIN_DIR
rounds=${ROUNDS:-3}
size_mib=${BENCH_S3_MIB:-1024}
minio=$("$top/scripts/minio.sh")
work=$(mktemp -d /tmp/sb-bench-s3.XXXXXX)
port=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
cport=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
export AWS_ACCESS_KEY_ID=sbbench AWS_SECRET_ACCESS_KEY=sbbench-secret AWS_REGION=us-east-1
export AWS_ENDPOINT_URL=http://127.0.0.1:$port
MINIO_ROOT_USER=$AWS_ACCESS_KEY_ID MINIO_ROOT_PASSWORD=$AWS_SECRET_ACCESS_KEY \
  "$minio" server --quiet --address 127.0.0.1:$port --console-address 127.0.0.1:$cport \
  "$work/minio" >"$work/minio.log" 2>&1 &
mpid=$!
cleanup() { kill "$mpid" 2>/dev/null; wait "$mpid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
"$(dirname "$0")/minio-ready.sh" "$AWS_ENDPOINT_URL" bench 60 || exit 1
s3curl() { curl -fsS --aws-sigv4 "aws:amz:us-east-1:s3" --user "$AWS_ACCESS_KEY_ID:$AWS_SECRET_ACCESS_KEY" "$@"; }

# The data: jsonl records of ~200 bytes, size_mib MiB in one object, and the same in 16 files.
mkdir -p "$work/in" "$work/in16"
python3 - "$work/in/big.jsonl" "$size_mib" <<'PY'
import sys, random
path, mib = sys.argv[1], int(sys.argv[2])
random.seed(7)
langs = ["en", "de", "fr", "es"]
with open(path, "w") as f:
    n, target, i = 0, mib << 20, 0
    while n < target:
        line = '{"id":%d,"lang":"%s","score":%d,"text":"%s"}\n' % (
            i, langs[i % 4], random.randrange(1000), "x" * random.randrange(100, 200))
        f.write(line); n += len(line); i += 1
PY
split -n l/16 -d --additional-suffix=.jsonl "$work/in/big.jsonl" "$work/in16/part-"
s3curl -T "$work/in/big.jsonl" "$AWS_ENDPOINT_URL/bench/one/big.jsonl" >/dev/null
for f in "$work"/in16/*.jsonl; do s3curl -T "$f" "$AWS_ENDPOINT_URL/bench/in16/$(basename "$f")" >/dev/null; done
bytes=$(stat -c %s "$work/in/big.jsonl")

pipeline() { # name source sink op-yaml
  cat >"$work/$1.yaml" <<Y
apiVersion: streambatch.dev/v1alpha1
kind: Pipeline
metadata: {name: $1}
spec:
  source: {uri: "$2", format: jsonl, partitionSize: 64Mi}
  stages:
$4
  sink: {uri: "$3", format: jsonl}
  execution: {memoryBudget: 512Mi}
Y
}
none="  - {name: none, op: filter, args: {field: lang, op: eq, value: zz}}"
pipeline read "s3://bench/one/big.jsonl" "file://$work/out-read/" "$none"
pipeline readfile "file://$work/in/big.jsonl" "file://$work/out-readfile/" "$none"
etl="  - {name: keep, op: filter, args: {field: lang, op: eq, value: en}}
  - {name: cut, op: project, args: {fields: [id, score]}}"
pipeline s3etl "s3://bench/in16/" "s3://bench/out-etl/" "$etl"
pipeline fileetl "file://$work/in16/" "file://$work/out-file/" "$etl"

secs() { local t0 t1; t0=$(date +%s.%N); "$@" >/dev/null 2>"$work/last.err" || { cat "$work/last.err" >&2; return 1; }; t1=$(date +%s.%N); echo "$t1 - $t0" | bc -l; }
run() { secs "$bin/streambatch" run "$work/$1.yaml" --cpus 2; }
benchbin=$SB_BUILD_DIR/bench/bench_read
src() { local out; out=$("$benchbin" "$1" jsonl $((64 << 20)) 2 $((1 << 20))) || return 1; sed -n 's/.* seconds=\([0-9.]*\) .*/\1/p' <<<"$out"; }
declare -a curl_t src_t srcf_t read_t readf_t s3_t file_t
for r in $(seq "$rounds"); do
  curl_t+=("$(secs s3curl -o /dev/null "$AWS_ENDPOINT_URL/bench/one/big.jsonl")")
  src_t+=("$(src "s3://bench/one/big.jsonl")")
  srcf_t+=("$(src "file://$work/in/big.jsonl")")
  read_t+=("$(run read)")
  readf_t+=("$(run readfile)")
  s3_t+=("$(run s3etl)")
  file_t+=("$(run fileetl)")
done
. "$(dirname "${BASH_SOURCE[0]}")/bench-lib.sh" # median, range
mc=$(median "${curl_t[@]}"); msr=$(median "${src_t[@]}"); msf=$(median "${srcf_t[@]}"); mr=$(median "${read_t[@]}"); mrf=$(median "${readf_t[@]}"); ms=$(median "${s3_t[@]}"); mf=$(median "${file_t[@]}")
gbs() { echo "$bytes / $1 / 1000000000" | bc -l | xargs printf '%.2f'; }
cat <<MD

## Storage: S3 (MinIO) and files (scripts/bench-storage.sh)

$(date -u '+%Y-%m-%d %H:%M UTC'); $rounds rounds, each pair back to back; MinIO on 127.0.0.1 on the
same 2 CPUs as the client (MinIO's own CPU counts against both sides). Data: $((bytes >> 20)) MiB of
jsonl (~200-byte records).

| Benchmark | median s (range) | GB/s | ratio |
|---|---|---|---|
| curl GET of the object to /dev/null | $(printf '%.2f' "$mc") ($(range "${curl_t[@]}")) | $(gbs "$mc") | 1.00 |
| the source alone (bench_read, 2 threads, 1 MiB partitions as a worker builds them): s3, ranged splits of 64 MiB | $(printf '%.2f' "$msr") ($(range "${src_t[@]}")) | $(gbs "$msr") | $(echo "$mc / $msr" | bc -l | xargs printf '%.2f') of curl |
| the source alone on the local file (page cache warm) | $(printf '%.2f' "$msf") ($(range "${srcf_t[@]}")) | $(gbs "$msf") | $(echo "$mc / $msf" | bc -l | xargs printf '%.2f') of curl |
| \`streambatch run\`: s3 source (ranged splits of 64 MiB) -> filter keeping nothing | $(printf '%.2f' "$mr") ($(range "${read_t[@]}")) | $(gbs "$mr") | $(echo "$mc / $mr" | bc -l | xargs printf '%.2f') of curl |
| the same pipeline on the local file (page cache warm) | $(printf '%.2f' "$mrf") ($(range "${readf_t[@]}")) | $(gbs "$mrf") | s3 source at $(echo "$mrf / $mr" | bc -l | xargs printf '%.2f') of file |
| file -> filter -> project -> file, 16 files | $(printf '%.2f' "$mf") ($(range "${file_t[@]}")) | $(gbs "$mf") | 1.00 |
| s3 -> filter -> project -> s3, the same 16 objects | $(printf '%.2f' "$ms") ($(range "${s3_t[@]}")) | $(gbs "$ms") | $(echo "$mf / $ms" | bc -l | xargs printf '%.2f') of file |

Goal (issue 10): the pipeline's source at >= 0.9 of curl. The \`streambatch run\` times include
starting the controller and workers (about 0.1-0.3 s) and the filter's JSON scan of every
record, which is the limit of the pipeline on the local file too (the row below curl's).
MD
