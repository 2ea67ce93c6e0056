#!/usr/bin/env bash
# User code cost (issue 13), run by `make bench`; prints a markdown section on stdout.
#   1. exec: one Python function over the same jsonl, (a) called in one Python process that reads
#      and writes the files itself, (b) as an exec stage (mode batches, the sdk/python kit,
#      batches of 1,000) on one worker slot, (c) the same with framing arrow (typed columns out,
#      written as JSON by the sink), (d) lines on two slots; rounds interleaved.
#   2. plugin: examples/plugins/passthrough (identity through the plugin ABI) vs the built-in
#      identity op, same data, two slots.
#   3. Ray Data 2.x (pip, in a venv cached under ~/.cache/streambatch; for this benchmark only)
#      running the same function with map_batches over the same files, when it can be installed.
# Outputs are checked equal (as sorted record sets) before a time is reported.
set -euo pipefail
cd "$(dirname "$0")/.."
top=$PWD
. scripts/env.sh # SB_BIN_DIR, SB_BUILD_DIR
bin=$SB_BIN_DIR
build=$SB_BUILD_DIR
rounds=${ROUNDS:-3}
cache=${XDG_CACHE_HOME:-$HOME/.cache}/streambatch
work=$(mktemp -d /tmp/sb-bench-usercode-XXXXXX)
# identity and the plugin write their 300 MB sink to tmpfs: on this VM's disk, runs writing new
# files were now and then 2x slower (writeback), in both arms, and that is not what they compare
shm=$work
[[ -d /dev/shm && -w /dev/shm ]] && shm=$(mktemp -d /dev/shm/sb-bench-usercode-XXXXXX)
trap 'rm -rf "$work" "$shm"' EXIT
make -s --no-print-directory "$build/plugins/libpassthrough.so" BUILD="$build" >&2

# the kit, in a venv of its own
python3 -m venv "$work/venv" >&2 && "$work/venv/bin/pip" install -q --disable-pip-version-check "$top/sdk/python" pyarrow >&2
py=$work/venv/bin/python

# 8 files, 400,000 records, ~46 MB
python3 - "$work/in" <<'EOF'
import json, os, random, sys
random.seed(13)
os.makedirs(sys.argv[1])
words = ["stream", "batch", "gpu", "cpu", "partition", "lineage", "worker", "pipeline"]
for f in range(8):
    with open("%s/f%d.jsonl" % (sys.argv[1], f), "w") as o:
        for i in range(50000):
            o.write(json.dumps({"id": f * 100000 + i,
                                "text": " ".join(random.choice(words) for _ in range(random.randint(4, 16)))}) + "\n")
EOF
bytes=$(du -cb "$work"/in/*.jsonl | tail -1 | cut -f1)
# identity and the plugin move bytes only: 8x the data (links to the same files), ~300 MB
mkdir -p "$work/big"
for c in 0 1 2 3 4 5 6 7; do for f in "$work"/in/*.jsonl; do ln -s "$f" "$work/big/c$c-$(basename "$f")"; done; done

# the function: per record, a word count and a checksum of the text (pure Python work)
cat >"$work/fn.py" <<'EOF'
def fn(cols):
    texts = cols["text"]
    return {"id": cols["id"], "words": [len(t.split()) for t in texts],
            "sum": [sum(t.encode()) % 9973 for t in texts]}
EOF
cat >"$work/stage.py" <<'EOF'
import sys
sys.path.insert(0, sys.argv[1])
from fn import fn
from streambatch import udf
udf.run(fn, batch_format="columns")
EOF
cat >"$work/stage_arrow.py" <<'EOF'
import sys
sys.path.insert(0, sys.argv[1])
from fn import fn
from streambatch import udf
def on_batch(batch):  # the jsonl records arrive as one "record" column of JSON texts
    recs = udf.json_records(batch)
    return fn({"id": [r["id"] for r in recs], "text": [r["text"] for r in recs]})
udf.run(on_batch)
EOF
cat >"$work/alone.py" <<'EOF'
import glob, json, sys
sys.path.insert(0, sys.argv[1])
from fn import fn
out = open(sys.argv[3], "w")
for p in sorted(glob.glob(sys.argv[2] + "/*.jsonl")):
    batch = []
    def flush():
        cols = {"id": [r["id"] for r in batch], "text": [r["text"] for r in batch]}
        res = fn(cols)
        for i in range(len(res["id"])):
            out.write(json.dumps({k: res[k][i] for k in res}) + "\n")
    for line in open(p):
        batch.append(json.loads(line))
        if len(batch) == 1000:
            flush(); batch = []
    if batch:
        flush()
out.close()
EOF
pipeline() { # name stage-yaml [input dir] [sink parent]
  cat >"$work/$1.yaml" <<Y
apiVersion: streambatch.dev/v1alpha1
kind: Pipeline
metadata: {name: $1}
spec:
  source: {uri: "file://$work/${3:-in}/", format: jsonl, partitionSize: 4Mi}
  stages: [$2]
  sink: {uri: "file://${4:-$work}/out-$1/", format: jsonl}
Y
}
pipeline exec "{name: fn, op: exec, args: {command: [$py, $work/stage.py, $work], mode: batches, batchSize: 1000}}"
pipeline exarrow "{name: fn, op: exec, args: {command: [$py, $work/stage_arrow.py, $work], mode: batches, batchSize: 1000, framing: arrow}}"
pipeline ident "{name: id, op: identity}" big "$shm"
pipeline plug "{name: id, op: plugin, args: {path: '$build/plugins/libpassthrough.so'}}" big "$shm"

secs() { # command... -> wall seconds
  local t0 t1
  t0=$(date +%s.%N)
  "$@" >"$work/last.log" 2>&1 || { tail "$work/last.log" >&2; return 1; }
  t1=$(date +%s.%N)
  echo "$t1 - $t0" | bc -l
}
digest() { cat "$@" | python3 -c '
import json, sys, hashlib
rows = sorted(json.dumps(json.loads(l), sort_keys=True) for l in sys.stdin if l.strip())
print(len(rows), hashlib.md5("\n".join(rows).encode()).hexdigest())'; }
. "$(dirname "${BASH_SOURCE[0]}")/bench-lib.sh" # median, range, wall_cpu
run_sb() { rm -rf "$work/out-$1" "$shm/out-$1"; "$bin/streambatch" run "$work/$1.yaml" --cpus "$2"; }

# Ray Data, when pip can install it (cached: the install takes a few minutes once)
ray_py=$cache/bench-ray-venv/bin/python
if [[ ! -x $ray_py ]] || ! "$ray_py" -c 'import ray.data' 2>/dev/null; then
  echo "bench: installing ray[data] into $cache/bench-ray-venv (once)" >&2
  rm -rf "$cache/bench-ray-venv"
  { python3 -m venv "$cache/bench-ray-venv" &&
      timeout 900 "$cache/bench-ray-venv/bin/pip" install -q --disable-pip-version-check "ray[data]>=2.9,<3"; } >&2 ||
    echo "bench: ray[data] could not be installed; Ray Data is not measured" >&2
fi
cat >"$work/ray_run.py" <<'EOF'
import glob, sys
sys.path.insert(0, sys.argv[1])
from fn import fn
import time
import ray
ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
t0 = time.time()
def rfn(batch):  # numpy batch -> the same columns
    res = fn({"id": batch["id"].tolist(), "text": batch["text"].tolist()})
    return res
ds = ray.data.read_json(sorted(glob.glob(sys.argv[2] + "/*.jsonl")))
ds.map_batches(rfn, batch_size=1000, batch_format="numpy").write_json(sys.argv[3])
open(sys.argv[3] + ".secs", "w").write("%f" % (time.time() - t0))
EOF
have_ray=0
"$ray_py" -c 'import ray.data' 2>/dev/null && have_ray=1

alone=() ex1=() exa=() ex2=() ident=() plug=() ray=() ray_pipe=()
for r in $(seq "$rounds"); do
  echo "bench: user code round $r/$rounds" >&2
  rm -f "$work/alone.jsonl"
  alone+=("$(secs "$py" "$work/alone.py" "$work" "$work/in" "$work/alone.jsonl")")
  ex1+=("$(secs run_sb exec 1)")
  [[ $r == 1 ]] && { a=$(digest "$work/alone.jsonl"); b=$(digest "$work"/out-exec/part-*.jsonl)
    [[ $a == "$b" ]] || { echo "bench: exec output differs from the function called alone ($a vs $b)" >&2; exit 1; }; }
  exa+=("$(secs run_sb exarrow 1)")
  [[ $r == 1 ]] && { a=$(digest "$work/alone.jsonl"); b=$(digest "$work"/out-exarrow/part-*.jsonl)
    [[ $a == "$b" ]] || { echo "bench: exec (arrow) output differs from the function called alone ($a vs $b)" >&2; exit 1; }; }
  ex2+=("$(secs run_sb exec 2)")
  if ((have_ray)); then
    rm -rf "$work/out-ray"
    if t=$(secs "$ray_py" "$work/ray_run.py" "$work" "$work/in" "$work/out-ray"); then
      ray+=("$t")
      ray_pipe+=("$(cat "$work/out-ray.secs")")
      rm -f "$work/out-ray.secs"
      [[ $r == 1 ]] && { a=$(digest "$work/alone.jsonl"); b=$(digest "$work"/out-ray/*.json)
        [[ $a == "$b" ]] || { echo "bench: Ray Data's output differs ($b)" >&2; have_ray=0; ray=(); ray_pipe=(); }; }
    else
      echo "bench: the Ray Data run failed; not measured" >&2; have_ray=0; ray=(); ray_pipe=()
    fi
  fi
done
# plugin vs built-in identity: runs of ~0.35 s, so more rounds of their own, each A B B A (drift
# within a round would otherwise favour one side); a round's ratio is its two plugin runs over
# its two identity runs (wall, and CPU of the process tree), the table shows their median
pair_rounds=${PAIR_ROUNDS:-$((rounds * 3))}
: >"$work/pair.t"
for r in $(seq "$pair_rounds"); do
  echo "bench: plugin vs identity round $r/$pair_rounds" >&2
  { for p in ident plug plug ident; do wall_cpu "$work/last.log" run_sb $p 2 || exit 1; done; } | paste -d' ' - - - - >>"$work/pair.t"
  [[ $r == 1 ]] && { a=$(digest "$shm"/out-ident/part-*.jsonl); b=$(digest "$shm"/out-plug/part-*.jsonl)
    [[ $a == "$b" ]] || { echo "bench: plugin output differs from identity's" >&2; exit 1; }; }
done
# pair.t: i1w i1c p1w p1c p2w p2c i2w i2c
ident=($(awk '{print $1; print $7}' "$work/pair.t")) plug=($(awk '{print $3; print $5}' "$work/pair.t"))
ident_cpu=($(awk '{print $2; print $8}' "$work/pair.t")) plug_cpu=($(awk '{print $4; print $6}' "$work/pair.t"))
pair_wall=$(awk '{printf "%.4f\n", ($3 + $5) / ($1 + $7)}' "$work/pair.t" | median)
pair_cpu=$(awk '{printf "%.4f\n", ($4 + $6) / ($2 + $8)}' "$work/pair.t" | median)
m_alone=$(median "${alone[@]}")
row() { # label times...
  local label=$1; shift
  local m; m=$(median "$@")
  printf '| %s | %.2f | %s | %.2f |\n' "$label" "$m" "$(range "$@")" "$(echo "$m / $m_alone" | bc -l)"
}
echo
echo "## User code: exec and plugin (scripts/bench-usercode.sh)"
echo
echo "$(date -u '+%Y-%m-%d %H:%M UTC'); $rounds rounds interleaved, medians; $((bytes / 1000000)) MB of jsonl"
echo "(400,000 records in 8 files); outputs checked equal as record sets. The function: per"
echo "record, a word count and a checksum of the text, over columns of 1,000 records."
echo
echo "| run | median s | range | / Python alone |"
echo "|---|---|---|---|"
row "Python alone: one process reads, calls the function, writes" "${alone[@]}"
row "exec (kit, mode batches), 1 slot" "${ex1[@]}"
row "exec (kit, mode batches, framing arrow), 1 slot" "${exa[@]}"
row "exec (kit, mode batches), 2 slots" "${ex2[@]}"
if ((${#ray[@]})); then
  rv=$("$ray_py" -c 'import ray; print(ray.__version__)')
  row "Ray Data $rv map_batches (numpy), 2 CPUs, the whole command" "${ray[@]}"
  row "Ray Data $rv, after ray.init() (the pipeline alone)" "${ray_pipe[@]}"
else
  echo "| Ray Data | not measured (could not be installed or run here) | | |"
fi
echo
echo "Goal (issue 13): exec on one slot (lines and arrow) at most 1.15x the function called alone."
echo
echo "| identity, 8x the data ($((bytes * 8 / 1000000)) MB), 2 slots; $pair_rounds rounds of A B B A | median s | range | CPU s (range) | plugin / built-in: wall, CPU (medians of the rounds' ratios) |"
echo "|---|---|---|---|---|"
printf '| built-in identity | %.2f | %s | %.2f (%s) | |\n' "$(median "${ident[@]}")" "$(range "${ident[@]}")" \
  "$(median "${ident_cpu[@]}")" "$(range "${ident_cpu[@]}")"
printf '| plugin passthrough (examples/plugins) | %.2f | %s | %.2f (%s) | **%.3f**, %.3f |\n' "$(median "${plug[@]}")" \
  "$(range "${plug[@]}")" "$(median "${plug_cpu[@]}")" "$(range "${plug_cpu[@]}")" "$pair_wall" "$pair_cpu"
echo
[[ $shm != "$work" ]] && echo "Both write their sink to tmpfs: on this VM's disk single runs of either were up to 2x slower."
echo "Goal (issue 13): plugin identity at most 1.05x the built-in identity."
