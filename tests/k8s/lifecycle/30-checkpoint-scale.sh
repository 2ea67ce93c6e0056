# shellcheck shell=bash
# 30-checkpoint-scale.sh — a case of the lifecycle suite (tests/k8s/operator-test.sh,
# SB_OPTEST_SUITE=lifecycle), sourced after the release is installed. Issue 38, item 1,
# "checkpoints that scale", and its "Measured" paragraph:
#   k1. a Pipeline of N one-record input files in MinIO (N = SB_OPTEST_CKPT_PARTS, default
#       3,000 in the suite, ~90 s; `scripts/bench-ckpt-scale.sh --cluster` runs 200,000), one split and
#       one sink part each, so its checkpoint log beside the sink holds N parts;
#       the leading controller is SIGKILLed once ~60% of the splits are committed; the new
#       leader finishes it: it re-runs no split committed before the kill, strictly: the
#       status's committed count read just before the kill is at most what the log held then
#       and what the new leader skipped (its CheckpointLoaded Event), and no sink part of a
#       split in the log is written again (its LastModified in MinIO unchanged; a split counts
#       committed only once its log write is durable, opckpt.h), the output has every record
#       once, and the
#       largest Pipeline object the API server held while it ran (`kubectl get pipeline -o json
#       | wc -c`, polled) stays under 64 KiB.
#       The new leader reads the log (a CheckpointLoaded Event, no InvalidCheckpoint) and the
#       log is removed once the sink is committed.
# Prints figures: the committed splits at the kill, the largest status, the takeover time, the
# parts rewritten, and the log's write cost (the controllers' "checkpoint log written" lines:
# writes, bytes and worker round-trip seconds per committed part). Uses the suite's helpers (opcheck, pipeline, phase, wait_phase, jp, holder,
# leader_pod, pod_pid, s3c, figure).

CKPT_N=${SB_OPTEST_CKPT_PARTS:-3000}
CKPT_SRC=ckscale-in-$CKPT_N

# ckpt_list PREFIX: "key last-modified" of every object under s3://$BUCKET/PREFIX (paginated;
# the query's parameters in sorted order, as s3_keys explains)
ckpt_list() {
  local token="" out q
  while :; do
    q="list-type=2&max-keys=1000&prefix=${1//\//%2F}"
    [[ -n $token ]] && q="continuation-token=$token&$q"
    out=$(s3c "$S3_EP/$BUCKET?$q") || return 1
    python3 -c '
import sys, urllib.parse, xml.etree.ElementTree as ET
ns = {"s": "http://s3.amazonaws.com/doc/2006-03-01/"}
r = ET.parse(sys.stdin).getroot()
for c in r.findall("s:Contents", ns):
    print(c.findtext("s:Key", namespaces=ns), c.findtext("s:LastModified", namespaces=ns))
t = r.findtext("s:NextContinuationToken", namespaces=ns) if r.findtext("s:IsTruncated", namespaces=ns) == "true" else ""
open(sys.argv[1], "w").write(urllib.parse.quote(t or "", safe=""))' "$tmp/ckpt.token" <<<"$out" || return 1
    token=$(cat "$tmp/ckpt.token")
    [[ -n $token ]] || return 0
  done
}

# the input: N files of one ~600-byte record (two files pass partitionSize 1Ki: one split each)
ckpt_upload() {
  local have
  have=$(ckpt_list "$CKPT_SRC/" | wc -l)
  ((have == CKPT_N)) && return 0
  mkdir -p "$tmp/$CKPT_SRC"
  python3 -c '
import json, sys
for f in range(int(sys.argv[1])):
    with open("%s/f%07d.jsonl" % (sys.argv[2], f), "w") as o:
        o.write(json.dumps({"n": f, "pad": "x" * 600}) + "\n")' "$CKPT_N" "$tmp/$CKPT_SRC"
  # one process, 8 kept-alive connections, requests signed here (SigV4): a curl process a file
  # made the upload the case's longest step
  python3 - "$tmp/$CKPT_SRC" "$S3_EP" "$BUCKET/$CKPT_SRC" "$S3_KEY" "$S3_SECRET" <<'PY' || return 1
import datetime, hashlib, hmac, http.client, os, sys, threading, urllib.parse
src, ep, prefix, key, secret = sys.argv[1:6]
u = urllib.parse.urlsplit(ep)
names = sorted(os.listdir(src))
def sign(k, m):
    return hmac.new(k, m.encode(), hashlib.sha256).digest()
def put(conn, name):
    body = open(os.path.join(src, name), "rb").read()
    path = "/%s/%s" % (prefix, name)
    now = datetime.datetime.now(datetime.timezone.utc)
    amz, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    ph = hashlib.sha256(body).hexdigest()
    hdrs = {"host": u.netloc, "x-amz-content-sha256": ph, "x-amz-date": amz}
    sh = ";".join(sorted(hdrs))
    creq = "\n".join(["PUT", path, "", "".join("%s:%s\n" % (h, hdrs[h]) for h in sorted(hdrs)), sh, ph])
    scope = "%s/us-east-1/s3/aws4_request" % day
    sts = "\n".join(["AWS4-HMAC-SHA256", amz, scope, hashlib.sha256(creq.encode()).hexdigest()])
    k = sign(sign(sign(sign(("AWS4" + secret).encode(), day), "us-east-1"), "s3"), "aws4_request")
    sig = hmac.new(k, sts.encode(), hashlib.sha256).hexdigest()
    hdrs["Authorization"] = "AWS4-HMAC-SHA256 Credential=%s/%s, SignedHeaders=%s, Signature=%s" % (key, scope, sh, sig)
    conn.request("PUT", path, body, hdrs)
    r = conn.getresponse(); r.read()
    if r.status != 200:
        raise SystemExit("PUT %s: %d" % (path, r.status))
errors = []
def worker(part):
    try:
        conn = http.client.HTTPConnection(u.hostname, u.port)
        for n in part:
            put(conn, n)
    except BaseException as e:
        errors.append(str(e))
ts = [threading.Thread(target=worker, args=(names[i::8],)) for i in range(8)]
for t in ts: t.start()
for t in ts: t.join()
if errors:
    sys.exit(errors[0])
PY
}

# the committed splits of NAME's checkpoint, one index a line: status.checkpoint.committedSplits
# (the checkpoint with every part in the status), else the log beside the sink that
# status.checkpoint summarises (its highest base and that base's segments)
ckpt_committed_splits() {
  local st; st=$(kubectl -n "$NS" get pipeline "$1" -o json) || return 1
  python3 -c '
import json, subprocess, sys
c = (json.loads(sys.argv[1]).get("status") or {}).get("checkpoint") or {}
def ranges(t):
    for r in filter(None, t.strip().split(",")):
        a, _, b = r.partition("-")
        yield from range(int(a), int(b or a) + 1)
if "committedSplits" in c:
    out = set(ranges(c["committedSplits"]))
else:
    out = set()
    keys = subprocess.run(["bash", "-c", "ckpt_list out/%s/_streambatch/checkpoint/ | cut -d\" \" -f1" % sys.argv[2]],
                          capture_output=True, text=True).stdout.split()
    get = lambda k: subprocess.run(["bash", "-c", "s3c \"$S3_EP/$BUCKET/%s\"" % k], capture_output=True, text=True).stdout
    # base-G.sbck, not its chunks base-G-K.sbck; a chunked base lists its chunks
    bases = sorted(k for k in keys if "/base-" in k and len(k.rsplit("/", 1)[1]) == 18)
    if bases:
        g = bases[-1].rsplit("base-", 1)[1][:8]
        for k in [bases[-1]] + sorted(k for k in keys if "/seg-%s-" % g in k):
            t = get(k)
            if t.startswith("streambatch-checkpoint-chunks 1\n"):
                n = int(t.split("\nchunks ")[1].split("\n")[0])
                t = "".join(get(k[:-5] + "-%08x.sbck" % i) for i in range(1, n + 1))
            for line in t.split("\n"):
                if line.startswith("splits "):
                    out |= set(ranges(line[7:]))
print("\n".join(str(s) for s in sorted(out)))' "$st" "$1"
}

# ckpt_cost LINE: the figures of a "checkpoint log written" log line, or "none"
ckpt_cost() {
  python3 -c '
import re, sys
t = sys.argv[1]
f = dict(re.findall(r"(\w+)=([0-9.]+)", t))
if "parts" not in f or float(f["parts"]) == 0:
    print("none")
else:
    p = float(f["parts"])
    print("%s writes, %s parts, %.1f bytes and %.3f ms of worker round trip per part" % (f.get("writes"), f["parts"], float(f.get("bytes", 0)) / p, 1000 * float(f.get("seconds", 0)) / p))' "$1"
}

checkpoint_scale() {
  export -f ckpt_list s3c
  export S3_EP BUCKET S3_KEY S3_SECRET tmp
  local t0; t0=$(now)
  ckpt_upload || { echo "cannot upload $CKPT_N files"; return 1; }
  figure "checkpoint scale: $CKPT_N one-record files in MinIO in $(since "$t0") s"
  local ms=$((10000 / CKPT_N)); ((ms >= 1)) || ms=1
  SRC=$CKPT_SRC PSIZE=1Ki pipeline ckscale "  - {name: a, op: bench.sleep, args: {msPerRecord: $ms}, workers: {min: 2, max: 2}}" \
    >"$tmp/ckscale.yaml"
  kubectl apply -f "$tmp/ckscale.yaml" >/dev/null || return 1
  # the largest Pipeline object the API server holds, polled until the end
  (max=0; while :; do
     b=$(kubectl -n "$NS" get pipeline ckscale -o json 2>/dev/null | wc -c)
     ((b > max)) && { max=$b; echo "$max" >"$tmp/ckscale.maxobj"; }
     p=$(kubectl -n "$NS" get pipeline ckscale -o 'jsonpath={.status.phase}' 2>/dev/null)
     [[ $p == Succeeded || $p == Failed ]] && break
     sleep 0.5
   done) &
  local poller=$!
  local want=$((CKPT_N * 6 / 10))
  until_ok $((120 + CKPT_N / 20)) committed_at_least ckscale "$want" ||
    { echo "not $want committed: $(jp ckscale '{.status.partitions}')"; kill "$poller"; return 1; }
  local old lpod pid
  old=$(holder); lpod=$(leader_pod) || { echo "no leader"; kill "$poller"; return 1; }
  pid=$(pod_pid "$SYS" "$lpod" controller) && alive "$pid" || { echo "no process for $lpod"; kill "$poller"; return 1; }
  # what the status claims committed, then the log (it only grows): the log must hold them all
  local claimed; claimed=$(committed ckscale); claimed=${claimed:-0}
  ckpt_committed_splits ckscale >"$tmp/ckscale.committed" || { kill "$poller"; return 1; }
  local t_kill; t_kill=$(now)
  kill -KILL "$pid"
  local ncommit; ncommit=$(grep -c . "$tmp/ckscale.committed")
  echo "killed leader $old (pod $lpod) with $claimed splits committed in its status, $ncommit in its checkpoint log"
  # the sink parts of those splits as they were (each split is one task writing part-s0-t<split>-p0)
  ckpt_list "out/ckscale/part-" >"$tmp/ckscale.before" || { kill "$poller"; return 1; }
  local h="" end=$((SECONDS + LEASE_S + 4 * RETRY_S + 10))
  while ((SECONDS < end)); do h=$(holder); [[ -n $h && $h != "$old" ]] && break; sleep 0.2; done
  figure "checkpoint scale: new leader $h $(since "$t_kill") s after SIGKILL at $ncommit of $CKPT_N splits committed"
  wait_phase ckscale Succeeded $((300 + CKPT_N / 10)) || { kill "$poller"; return 1; }
  wait "$poller"
  ckpt_list "out/ckscale/part-" >"$tmp/ckscale.after" || return 1
  local rewritten
  rewritten=$(python3 -c '
import sys
committed = set(int(l) for l in open(sys.argv[1]) if l.strip())
def parts(f):
    out = {}
    for l in open(f):
        k, lm = l.split()
        name = k.rsplit("/", 1)[1]
        t = name.split("-")[2] if name.startswith("part-s0-t") else ""
        if t[1:].isdigit() and int(t[1:]) in committed:
            out[name] = lm
    return out
b, a = parts(sys.argv[2]), parts(sys.argv[3])
print(sum(1 for k in b if a.get(k) != b[k]) + (len(committed) - len(b)))' \
    "$tmp/ckscale.committed" "$tmp/ckscale.before" "$tmp/ckscale.after")
  local maxobj; maxobj=$(cat "$tmp/ckscale.maxobj" 2>/dev/null || echo 0)
  # the log's write cost: each controller's last report (the killed leader's before the kill,
  # the new leader's at the end; the test cluster serves no container logs: the agent's files)
  local f l
  for f in "$STATE"/pods/${SYS}_*/controller.log; do
    grep 'checkpoint log written' "$f" 2>/dev/null | grep -F '/ckscale/' | tail -n 1
  done >"$tmp/ckscale.cost"
  while read -r l; do
    figure "checkpoint scale: log write cost of one leader: $(ckpt_cost "$l")"
  done <"$tmp/ckscale.cost"
  has_event ckscale CheckpointLoaded || { echo "the new leader did not read the checkpoint log: $(events ckscale | tr '\n' ';')"; return 1; }
  # the splits the new leader skipped ("read LOC: N splits and M sink parts committed are skipped")
  local skipped
  skipped=$(events ckscale | sed -n 's/^CheckpointLoaded: read .*: \([0-9][0-9]*\) splits and .*/\1/p' | sort -n | tail -n 1)
  skipped=${skipped:-0}
  # re-run: splits the status called committed that the new leader did not skip, plus parts of
  # splits in the log written again
  local rerun=$((claimed > skipped ? claimed - skipped : 0))
  rerun=$((rerun + rewritten))
  has_event ckscale InvalidCheckpoint && { echo "the checkpoint log was refused: $(events ckscale | tr '\n' ';')"; return 1; }
  [[ -z $(ckpt_list "out/ckscale/_streambatch/") ]] || { echo "the checkpoint log is left after the commit"; return 1; }
  local nparts; nparts=$(grep -c '\.jsonl ' "$tmp/ckscale.after")
  figure "checkpoint scale: $CKPT_N splits, $claimed committed in the status at the kill ($ncommit in the log, $skipped skipped by the new leader), committed splits re-run: $rerun (parts written again or missing: $rewritten); largest Pipeline object $maxobj bytes; $nparts sink parts"
  echo "status.checkpoint now: $(jp ckscale '{.status.checkpoint}' | head -c 400)"
  ((nparts == CKPT_N)) || { echo "$nparts sink parts, not $CKPT_N"; return 1; }
  ((claimed <= ncommit)) || { echo "the status claimed $claimed splits committed, the log held $ncommit"; return 1; }
  ((claimed <= skipped)) || { echo "the status claimed $claimed splits committed, the new leader skipped $skipped: the rest ran again"; return 1; }
  ((rewritten == 0)) || { echo "$rewritten parts of splits committed before the kill were written again"; return 1; }
  ((maxobj < 65536)) || { echo "the Pipeline object reached $maxobj bytes (limit 64 KiB)"; return 1; }
  kubectl -n "$NS" delete pipeline ckscale --wait=false >/dev/null
}
opcheck "k1: $CKPT_N one-record files, the leader SIGKILLed at ~60% committed -> no committed split re-run, the Pipeline object under 64 KiB" checkpoint_scale
