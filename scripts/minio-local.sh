#!/usr/bin/env bash
# `make minio-up` / `make minio-down`: a MinIO server on loopback beside the local test cluster
# (`make cluster-up`), for trying Pipelines that read and write s3:// (README "Try it locally").
#   scripts/minio-local.sh up     start it (if not running), create bucket "demo" with sample
#                                 input under demo/in/ (12 files of JSON lines), print the
#                                 endpoint, the credentials and the Secret command
#   scripts/minio-local.sh down   stop the server `up` started (its recorded pid, checked to be
#                                 that MinIO) and remove its state; nothing else
#   scripts/minio-local.sh env    print the endpoint and credentials as `export` lines
# State: ${STREAMBATCH_CLUSTER_DIR:-/tmp/streambatch-cluster}/minio/ (data, pid, log, env).
# The server listens on 127.0.0.1: the test cluster's pods share the host's network, so they
# reach it at the same address. It carries SB_CLUSTER_DIR in its environment, so `make
# cluster-down` ends it too when it is still running. The binary comes from scripts/minio.sh
# (built from the Go module proxy on the first run: about 15 minutes; then cached).
# Credentials: MINIO_USER / MINIO_PASSWORD (default streambatch / a random password drawn at the
# first start and kept in the state dir).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cluster=${STREAMBATCH_CLUSTER_DIR:-/tmp/streambatch-cluster}
state=$cluster/minio
BUCKET=demo

log() { printf '[minio %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# The pid recorded by `up`, if that process is still our MinIO (pid reuse guard: its command
# line names the binary and our data dir).
live_pid() {
  local pid
  [[ -f $state/pid ]] && read -r pid <"$state/pid" || return 1
  [[ -r /proc/$pid/cmdline ]] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$state/data" || return 1
  echo "$pid"
}

free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }

s3c() { curl -fsS --aws-sigv4 "aws:amz:us-east-1:s3" --user "$MINIO_USER:$MINIO_PASSWORD" "$@"; }

# 12 files of 500 JSON lines each: {"id", "n" (0-99), "lang" (en, de, fr), "text"}
sample_input() {
  python3 - "$1" <<'PY'
import json, os, random, sys
random.seed(38)
d = sys.argv[1]
os.makedirs(d, exist_ok=True)
words = "stream batch partition worker budget lineage sink source stage pool".split()
for f in range(12):
    with open(os.path.join(d, "part-%02d.jsonl" % f), "w") as o:
        for i in range(500):
            o.write(json.dumps({"id": f * 1000 + i, "n": random.randint(0, 99),
                                "lang": random.choice(["en", "de", "fr"]),
                                "text": " ".join(random.choice(words) for _ in range(8))}) + "\n")
PY
}

print_env() {
  # shellcheck source=/dev/null
  . "$state/env"
  cat <<EOF
MinIO is up (state $state, log $state/log):
  endpoint  $AWS_ENDPOINT_URL
  user      $AWS_ACCESS_KEY_ID
  password  $AWS_SECRET_ACCESS_KEY
  bucket    s3://$BUCKET/ (sample input under s3://$BUCKET/in/)
For your shell:   source $state/env
The Secret a Pipeline names in credentialsSecret (in the Pipeline's namespace):
  kubectl create secret generic s3-creds --from-literal=AWS_ACCESS_KEY_ID=$AWS_ACCESS_KEY_ID \\
    --from-literal=AWS_SECRET_ACCESS_KEY=$AWS_SECRET_ACCESS_KEY \\
    --from-literal=AWS_ENDPOINT_URL=$AWS_ENDPOINT_URL --from-literal=AWS_REGION=us-east-1
EOF
}

up() {
  if live_pid >/dev/null; then
    log "already running"
    print_env
    return 0
  fi
  # its state lives in the cluster's directory, which `make cluster-up` would take for stale
  [[ -f $cluster/.streambatch-cluster ]] || { log "ERROR: no cluster in $cluster: run make cluster-up first"; exit 1; }
  local minio port cport
  minio=$("$here/minio.sh")
  mkdir -p "$state/data"
  MINIO_USER=${MINIO_USER:-streambatch}
  if [[ -z ${MINIO_PASSWORD:-} && -f $state/password ]]; then MINIO_PASSWORD=$(<"$state/password"); fi
  MINIO_PASSWORD=${MINIO_PASSWORD:-$(head -c 18 /dev/urandom | base64 | tr -d '/+=' | cut -c1-20)}
  (umask 077 && printf '%s\n' "$MINIO_PASSWORD" >"$state/password")
  port=$(free_port); cport=$(free_port)
  SB_CLUSTER_DIR=$cluster MINIO_ROOT_USER=$MINIO_USER MINIO_ROOT_PASSWORD=$MINIO_PASSWORD \
    setsid "$minio" server --quiet --address "127.0.0.1:$port" --console-address "127.0.0.1:$cport" \
    "$state/data" >"$state/log" 2>&1 </dev/null &
  echo $! >"$state/pid"
  local ep=http://127.0.0.1:$port
  (umask 077 && cat >"$state/env" <<EOF
export AWS_ENDPOINT_URL=$ep
export AWS_ACCESS_KEY_ID=$MINIO_USER
export AWS_SECRET_ACCESS_KEY=$MINIO_PASSWORD
export AWS_REGION=us-east-1
EOF
  )
  AWS_ACCESS_KEY_ID=$MINIO_USER AWS_SECRET_ACCESS_KEY=$MINIO_PASSWORD \
    "$here/minio-ready.sh" "$ep" "$BUCKET" 60 || { tail -5 "$state/log" >&2; down; exit 1; }
  local tmp f
  tmp=$(mktemp -d)
  sample_input "$tmp"
  for f in "$tmp"/*.jsonl; do s3c -T "$f" "$ep/$BUCKET/in/$(basename "$f")" -o /dev/null; done
  rm -rf "$tmp"
  log "started (pid $(<"$state/pid")), bucket $BUCKET with 12 input files under in/"
  print_env
}

down() {
  local pid
  if pid=$(live_pid); then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && { log "pid $pid still running after 10 s: SIGKILL"; kill -KILL "$pid" 2>/dev/null || true; }
    log "stopped (pid $pid)"
  else
    log "not running"
  fi
  rm -rf -- "$state"
}

case ${1:-} in
  up) up ;;
  down) down ;;
  env) [[ -f $state/env ]] && live_pid >/dev/null && cat "$state/env" || { log "not running (make minio-up)"; exit 1; } ;;
  *) echo "usage: $0 up|down|env" >&2; exit 2 ;;
esac
