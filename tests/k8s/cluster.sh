#!/usr/bin/env bash
# Local Kubernetes control plane for the streambatch tests (no kubelet, no container runtime):
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler and sb-node-agent, all on
# 127.0.0.1, from the binaries `make k8s-build` cached (tests/k8s/build.sh).
#
#   cluster.sh up     start; $STATE/kubeconfig exists once the cluster is ready
#   cluster.sh down   stop what `up` started (recorded pids only) and remove $STATE
#   cluster.sh status
#   cluster.sh restart-apiserver [S]   SIGKILL the API server, S seconds later start it again
#                                     (same port, same etcd): a control-plane restart (chaos)
#
# STATE is ${STREAMBATCH_CLUSTER_DIR:-/tmp/streambatch-cluster}. Every wait is bounded. etcd or
# kube-apiserver exiting during start-up is started again on fresh ports (up to 3 starts); a
# component that fails to start has its log tail printed and all logs copied to
# ${SB_K8S_KEEP_LOGS:-/tmp/sb-k8s-failed-starts}/, which `down` does not remove.
# SB_K8S_CPU_CFS_QUOTA=1 makes the agent enforce containers' limits.cpu (--cpu-cfs-quota).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
STATE=${STREAMBATCH_CLUSTER_DIR:-/tmp/streambatch-cluster}
BIN=$("$here/build.sh" --print-bin-dir)
# the image table: our images as runc containers of build/images/oci (make images);
# tests/k8s/images-host.conf, host processes of $SB_BIN_DIR, is a test-only option
IMAGES=${SB_K8S_IMAGES:-$here/images.conf}
NODES=${SB_K8S_NODES:-"name=sb-cpu-0,cpu=4,memory=16Gi name=sb-gpu-0,cpu=4,memory=16Gi,nvidia.com/gpu=1,label:streambatch.dev/gpu=true"}
START_TIMEOUT=${SB_K8S_START_TIMEOUT:-90}
MARKER=.streambatch-cluster

log() { printf '[cluster %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# The pid recorded for NAME, if that process is still the one we started (guards against pid
# reuse: its command line must name the binary we ran).
live_pid() {
  local f=$STATE/pids/$1.pid pid
  [[ -f $f ]] || return 1
  read -r pid _ <"$f" || return 1
  [[ -r /proc/$pid/cmdline ]] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- "$(sed -n 's/^[0-9]* //p' "$f")" || return 1
  echo "$pid"
}

# Logs of a failed start are copied here before anything removes $STATE (the callers' cleanup
# runs `down`), so the cause of a rare failure can still be read afterwards.
KEEP_LOGS=${SB_K8S_KEEP_LOGS:-/tmp/sb-k8s-failed-starts}

keep_logs() { # -> the directory the logs were copied to
  local d
  d=$KEEP_LOGS/$(basename "$STATE")-$(date +%Y%m%d-%H%M%S)-$$
  mkdir -p "$d" && cp -r "$STATE/logs/." "$d/" 2>/dev/null
  echo "$d"
}

fail_component() { # NAME MESSAGE: report, stop what was started, keep the logs
  log "ERROR: $1: $2; last lines of $STATE/logs/$1.log:"
  tail -n 60 "$STATE/logs/$1.log" >&2 || true
  stop_all
  log "stopped the components started so far; logs copied to $(keep_logs)"
  exit 1
}

start() { # NAME PROGRAM ARGS...
  local name=$1; shift
  setsid "$@" >"$STATE/logs/$name.log" 2>&1 </dev/null &
  local pid=$! i
  echo "$pid $1" >"$STATE/pids/$name.pid"
  # Until the child has exec'd, /proc/PID/cmdline is this script's, and live_pid would take the
  # component for dead ("exited during start-up" with an empty log, about 1 start in 10 on a
  # busy machine): wait for the exec (or the exit), at most 5 s.
  for i in $(seq 1 100); do
    [[ -r /proc/$pid/cmdline ]] || break
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "$1" && break
    sleep 0.05
  done
}

# wait_up NAME SECONDS COMMAND...: retry COMMAND until it succeeds: 0; 1 if NAME's process
# died first, 2 if the time ran out.
wait_up() {
  local name=$1 secs=$2; shift 2
  local end=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    live_pid "$name" >/dev/null || return 1
    ((SECONDS < end)) || return 2
    sleep 0.2
  done
}

# wait_for NAME SECONDS COMMAND...: wait_up, failing NAME (with its log) if it did not come up.
wait_for() {
  local rc=0
  wait_up "$@" || rc=$?
  ((rc == 1)) && fail_component "$1" "exited during start-up"
  ((rc == 2)) && fail_component "$1" "not ready after ${2}s"
  return 0
}

# start_retry NAME TRIES STARTFN SECONDS READYFN: STARTFN starts NAME (on ports it picks
# itself), READYFN tells when it is ready. A process that exits during start-up is safe to
# start again here (etcd starts from an empty data dir, the others keep no state): its log is
# printed and kept (logs/NAME.exit-N.log, and a copy under $KEEP_LOGS that `down` leaves), and
# it gets up to TRIES starts, each on fresh ports.
start_retry() {
  local name=$1 tries=$2 startfn=$3 secs=$4 readyfn=$5 n rc
  for ((n = 1; ; n++)); do
    "$startfn"
    rc=0
    wait_up "$name" "$secs" "$readyfn" || rc=$?
    ((rc == 0)) && return 0
    ((rc == 2)) && fail_component "$name" "not ready after ${secs}s"
    ((n < tries)) || fail_component "$name" "exited during start-up ($n starts)"
    local pid
    read -r pid _ <"$STATE/pids/$name.pid" && kill -KILL "$pid" 2>/dev/null # if it lingers
    cp "$STATE/logs/$name.log" "$STATE/logs/$name.exit-$n.log"
    log "$name exited during start-up (start $n of $tries); last lines of its log:"
    tail -n 30 "$STATE/logs/$name.log" >&2 || true
    log "starting $name again on fresh ports (logs so far copied to $(keep_logs))"
  done
}

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
pick_port() {
  local p i
  for i in $(seq 1 200); do
    p=$((20000 + RANDOM % 12000)) # below the ephemeral range (32768+)
    if port_free "$p" && ! grep -qx "$p" "$STATE/ports.used" 2>/dev/null; then
      echo "$p" >>"$STATE/ports.used"; echo "$p"; return
    fi
  done
  die "no free port found"
}

gen_certs() {
  local d=$STATE/pki
  mkdir -p "$d"
  (
    cd "$d"
    openssl ecparam -name prime256v1 -genkey -noout -out ca.key 2>/dev/null
    openssl req -x509 -new -key ca.key -subj /CN=streambatch-test-ca -days 3650 -out ca.crt \
      -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null
    leaf() { # NAME SUBJECT EXTENSIONS
      openssl ecparam -name prime256v1 -genkey -noout -out "$1.key" 2>/dev/null
      openssl req -new -key "$1.key" -subj "$2" -out "$1.csr" 2>/dev/null
      openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 365 -out "$1.crt" \
        -extfile <(printf '%s\n' "$3" "keyUsage=critical,digitalSignature,keyEncipherment") 2>/dev/null
      rm -f "$1.csr"
    }
    leaf apiserver /CN=kube-apiserver "$(printf '%s\n%s' 'extendedKeyUsage=serverAuth' \
      'subjectAltName=IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local')"
    leaf admin "/O=system:masters/CN=streambatch-admin" extendedKeyUsage=clientAuth
    leaf controller-manager /CN=system:kube-controller-manager extendedKeyUsage=clientAuth
    leaf scheduler /CN=system:kube-scheduler extendedKeyUsage=clientAuth
    # service-account token signing key pair
    openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out sa.key 2>/dev/null
    openssl pkey -in sa.key -pubout -out sa.pub 2>/dev/null
  ) || die "certificate generation failed (is openssl installed? run make k8s-build)"
}

kubeconfig() { # FILE USER
  local d=$STATE/pki
  cat >"$1" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: streambatch
  cluster:
    server: https://127.0.0.1:$API_PORT
    certificate-authority-data: $(base64 -w0 <"$d/ca.crt")
users:
- name: $2
  user:
    client-certificate-data: $(base64 -w0 <"$d/$2.crt")
    client-key-data: $(base64 -w0 <"$d/$2.key")
contexts:
- name: streambatch
  context: {cluster: streambatch, user: $2, namespace: default}
current-context: streambatch
EOF
}

# The API server on $API_PORT, etcd on $ETCD_PORT (up, and restart-apiserver with the same ports)
run_apiserver() {
  local p=$STATE/pki issuer=https://kubernetes.default.svc.cluster.local
  start kube-apiserver "$BIN/kube-apiserver" --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$API_PORT" \
    --tls-cert-file "$p/apiserver.crt" --tls-private-key-file "$p/apiserver.key" --client-ca-file "$p/ca.crt" \
    --authorization-mode RBAC --allow-privileged=true \
    --service-account-issuer "$issuer" --api-audiences "$issuer" \
    --service-account-key-file "$p/sa.pub" --service-account-signing-key-file "$p/sa.key" \
    --service-cluster-ip-range 10.96.0.0/16 --endpoint-reconciler-type none \
    --cert-dir "$STATE/apiserver" --profiling=false --v 1
}
apiserver_ready() {
  local p=$STATE/pki
  curl -fsS --max-time 5 --cacert "$p/ca.crt" --cert "$p/admin.crt" --key "$p/admin.key" \
    "https://127.0.0.1:$API_PORT/readyz"
}

# restart-apiserver [DOWN_SECONDS]: the API server crashes (SIGKILL), stays down DOWN_SECONDS
# (default 0), and starts again on the same port with the same etcd: every client (controller,
# agent, kubectl) sees its connections reset and its watches end, as in a control-plane restart.
restart_apiserver() {
  local down_s=${1:-0} pid
  [[ -f $STATE/$MARKER && -f $STATE/apiserver.port && -f $STATE/etcd.port ]] || die "no cluster in $STATE"
  API_PORT=$(<"$STATE/apiserver.port"); ETCD_PORT=$(<"$STATE/etcd.port")
  pid=$(live_pid kube-apiserver) || die "kube-apiserver is not running"
  kill -KILL "$pid"
  while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
  sleep "$down_s"
  local t0=$SECONDS rc=0
  run_apiserver
  wait_up kube-apiserver "$START_TIMEOUT" apiserver_ready || rc=$?
  if ((rc != 0)); then
    tail -n 40 "$STATE/logs/kube-apiserver.log" >&2
    die "kube-apiserver not ready again after a restart ($( ((rc == 1)) && echo exited || echo timed out))"
  fi
  log "kube-apiserver restarted on port $API_PORT (ready in $((SECONDS - t0))s)"
}

up() {
  if [[ -f $STATE/kubeconfig ]] && live_pid kube-apiserver >/dev/null; then
    log "already running (state $STATE)"; return 0
  fi
  [[ -e $STATE ]] && down
  for b in etcd kube-apiserver kube-controller-manager kube-scheduler kubectl sb-node-agent; do
    [[ -x $BIN/$b ]] || die "$BIN/$b is missing: run 'make k8s-build' first"
  done
  local t0=$SECONDS
  mkdir -p "$STATE"/{pids,logs,pods}
  touch "$STATE/$MARKER"
  ln -sfn "$BIN" "$STATE/bin"
  gen_certs
  local ETCD_PORT PEER_PORT KCM_PORT SCHED_PORT p=$STATE/pki
  KCM_PORT=$(pick_port); SCHED_PORT=$(pick_port)

  start_etcd() {
    ETCD_PORT=$(pick_port); PEER_PORT=$(pick_port)
    rm -rf "$STATE/etcd"
    start etcd "$BIN/etcd" --name sb --data-dir "$STATE/etcd" --unsafe-no-fsync --log-level warn \
      --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
      --listen-peer-urls "http://127.0.0.1:$PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$PEER_PORT" \
      --initial-cluster "sb=http://127.0.0.1:$PEER_PORT" --listen-metrics-urls "" --quota-backend-bytes 2147483648
  }
  etcd_ready() { curl -fsS --max-time 5 "http://127.0.0.1:$ETCD_PORT/health"; }
  start_retry etcd 3 start_etcd 30 etcd_ready
  log "etcd ready on 127.0.0.1:$ETCD_PORT ($((SECONDS - t0))s)"

  echo "$ETCD_PORT" >"$STATE/etcd.port"
  start_apiserver() {
    API_PORT=$(pick_port)
    echo "$API_PORT" >"$STATE/apiserver.port"
    run_apiserver
  }
  start_retry kube-apiserver 3 start_apiserver "$START_TIMEOUT" apiserver_ready
  log "kube-apiserver ready on https://127.0.0.1:$API_PORT ($((SECONDS - t0))s)"
  kubeconfig "$STATE/admin.kubeconfig" admin
  kubeconfig "$STATE/controller-manager.kubeconfig" controller-manager
  kubeconfig "$STATE/scheduler.kubeconfig" scheduler

  local kc=$STATE/controller-manager.kubeconfig
  start kube-controller-manager "$BIN/kube-controller-manager" --kubeconfig "$kc" \
    --authentication-kubeconfig "$kc" --authorization-kubeconfig "$kc" \
    --bind-address 127.0.0.1 --secure-port "$KCM_PORT" --cert-dir "$STATE/controller-manager" \
    --leader-elect=false --use-service-account-credentials=true \
    --service-account-private-key-file "$p/sa.key" --root-ca-file "$p/ca.crt" \
    --cluster-signing-cert-file "$p/ca.crt" --cluster-signing-key-file "$p/ca.key" \
    --service-cluster-ip-range 10.96.0.0/16 --allocate-node-cidrs=false --controllers '*' \
    --profiling=false --v 1
  kc=$STATE/scheduler.kubeconfig
  start kube-scheduler "$BIN/kube-scheduler" --kubeconfig "$kc" \
    --authentication-kubeconfig "$kc" --authorization-kubeconfig "$kc" \
    --bind-address 127.0.0.1 --secure-port "$SCHED_PORT" --leader-elect=false --profiling=false --v 1
  local nodeargs=() n
  for n in $NODES; do nodeargs+=(--node "$n"); done
  # SB_K8S_CPU_CFS_QUOTA=1: containers' limits.cpu enforced (a measurement's CPU budget)
  [[ ${SB_K8S_CPU_CFS_QUOTA:-0} == 1 ]] && nodeargs+=(--cpu-cfs-quota)
  # Pod IPs: 127.0.0.2, .3, ... for the default state dir; another state dir (the self-test's)
  # gets its own block 127.0.B.x so that clusters running side by side do not share pod IPs.
  local block=${SB_K8S_POD_IP_BLOCK:-0}
  if [[ -z ${SB_K8S_POD_IP_BLOCK:-} && $STATE != /tmp/streambatch-cluster ]]; then
    block=$(($(cksum <<<"$STATE" | cut -d' ' -f1) % 240 + 10))
  fi
  SB_REPO_DIR=${SB_REPO_DIR:-$repo} SB_BIN_DIR=${SB_BIN_DIR:-$repo/bin} start sb-node-agent "$BIN/sb-node-agent" --pod-ip-block "$block" \
    --kubeconfig "$STATE/admin.kubeconfig" --ca-file "$p/ca.crt" --state-dir "$STATE" \
    --images "$IMAGES" "${nodeargs[@]}" --v 1
  wait_for kube-controller-manager "$START_TIMEOUT" curl -fsSk --max-time 5 "https://127.0.0.1:$KCM_PORT/healthz"
  wait_for kube-scheduler "$START_TIMEOUT" curl -fsSk --max-time 5 "https://127.0.0.1:$SCHED_PORT/healthz"
  log "controller-manager and scheduler healthy ($((SECONDS - t0))s)"

  local k=("$BIN/kubectl" --kubeconfig "$STATE/admin.kubeconfig" --request-timeout=5s)
  local want=0
  for n in $NODES; do want=$((want + 1)); done
  # Ready nodes without the not-ready taint (the node lifecycle controller removes it), and
  # the default ServiceAccount (the serviceaccount controller creates it): pods can run.
  nodes_ready() {
    local out
    out=$("${k[@]}" get nodes -o 'jsonpath={range .items[*]}{.metadata.name}{" "}{.status.conditions[?(@.type=="Ready")].status}{" "}{.spec.taints}{"\n"}{end}') || return 1
    [[ $(grep -c ' True $' <<<"$out") -eq $want ]]
  }
  wait_for sb-node-agent "$START_TIMEOUT" nodes_ready
  wait_for kube-controller-manager "$START_TIMEOUT" "${k[@]}" get serviceaccount default -n default
  log "$want node(s) ready, default service account present ($((SECONDS - t0))s)"

  cat >"$STATE/env" <<EOF
export STREAMBATCH_CLUSTER_DIR=$STATE
export KUBECONFIG=$STATE/kubeconfig
export PATH=$BIN:\$PATH
EOF
  cp "$STATE/admin.kubeconfig" "$STATE/kubeconfig.tmp" && mv "$STATE/kubeconfig.tmp" "$STATE/kubeconfig"
  log "cluster ready in $((SECONDS - t0))s: export KUBECONFIG=$STATE/kubeconfig (or: source $STATE/env)"
}

# stop SECONDS NAME...: SIGTERM the recorded processes, SIGKILL those still there after SECONDS.
stop() {
  local secs=$1 n pid end pids=() names=()
  shift
  for n in "$@"; do
    pid=$(live_pid "$n") || continue
    kill -TERM "$pid" 2>/dev/null || true
    pids+=("$pid"); names+=("$n")
  done
  end=$((SECONDS + secs))
  for i in "${!pids[@]}"; do
    while kill -0 "${pids[i]}" 2>/dev/null && ((SECONDS < end)); do sleep 0.1; done
    if kill -0 "${pids[i]}" 2>/dev/null; then
      log "${names[i]} (pid ${pids[i]}) still running after ${secs}s: SIGKILL"
      kill -KILL "${pids[i]}" 2>/dev/null || true
    fi
  done
}

down() {
  [[ -e $STATE ]] || return 0
  [[ -f $STATE/$MARKER ]] || die "$STATE is not a streambatch cluster directory; not touching it"
  stop_all
  rm -rf -- "$STATE"
  log "stopped; removed $STATE"
}

stop_all() {
  stop 20 sb-node-agent # it stops the pod processes it started
  stop 15 kube-scheduler kube-controller-manager kube-apiserver
  stop 10 etcd
  # Backstop: pod processes whose agent died without stopping them. Each carries
  # SB_CLUSTER_DIR=$STATE in its environment, set by the agent.
  local e pid
  for e in /proc/[0-9]*/environ; do
    pid=${e#/proc/}; pid=${pid%/environ}
    [[ $pid == "$$" ]] && continue
    if { tr '\0' '\n' <"$e"; } 2>/dev/null | grep -qxF "SB_CLUSTER_DIR=$STATE"; then
      log "pod process $pid left behind: SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
    fi
  done
  # Containers run from OCI images (runc) and the overlay roots of an agent that died
  local id m
  if [[ -d $STATE/runc ]] && command -v runc >/dev/null; then
    for id in $(runc --root "$STATE/runc" list -q 2>/dev/null); do
      log "container $id left behind: runc delete --force"
      runc --root "$STATE/runc" delete --force "$id" >/dev/null 2>&1 || true
    done
  fi
  for m in $(awk -v s="$STATE/" 'index($2, s) == 1 { print $2 }' /proc/mounts | sort -r); do
    log "mount $m left behind: umount"
    umount -l "$m" 2>/dev/null || true
  done
}

status() {
  local n pid
  for n in etcd kube-apiserver kube-controller-manager kube-scheduler sb-node-agent; do
    if pid=$(live_pid "$n"); then echo "$n: running (pid $pid)"; else echo "$n: not running"; fi
  done
  [[ -f $STATE/kubeconfig ]] && echo "kubeconfig: $STATE/kubeconfig"
  return 0
}

case ${1:-} in
  up) up ;;
  down) down ;;
  status) status ;;
  restart-apiserver) restart_apiserver "${2:-0}" ;;
  *) echo "usage: $0 up|down|status|restart-apiserver [DOWN_SECONDS]" >&2; exit 2 ;;
esac
