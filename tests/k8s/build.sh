#!/usr/bin/env bash
# Builds (once per machine) the binaries of the streambatch test cluster from the Go module
# proxy and caches them outside the repo, in ${SB_K8S_CACHE:-~/.cache/streambatch/k8s-<version>}/bin:
#   kube module (tests/k8s/kube): kube-apiserver, kube-controller-manager, kube-scheduler,
#     kubectl, sb-node-agent, and etcd (go.etcd.io/etcd/server/v3 at the version Kubernetes
#     pins) - one `go build`, so the shared dependencies compile once;
#   helm module (tests/k8s/helm): helm v3.
# A module is rebuilt only when its go.mod/go.sum/sources changed (a stamp per module).
#   build.sh                 build what is missing or stale (fast when cached)
#   build.sh --print-bin-dir print the binary directory and exit
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export HOME=${HOME:-$(getent passwd "$(id -u)" | cut -d: -f6)}
kube_version=$(awk '$1 == "k8s.io/kubernetes" { print $2; exit }' "$here/kube/go.mod")
helm_version=$(awk '$1 == "helm.sh/helm/v3" { print $2; exit }' "$here/helm/go.mod")
cache=${SB_K8S_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/streambatch/k8s-$kube_version}
bin=$cache/bin
if [[ ${1:-} == --print-bin-dir ]]; then echo "$bin"; exit 0; fi

log() { printf '[k8s-build] %s\n' "$*" >&2; }

# Debian packages the cluster scripts (openssl, curl) and the self-test (python3) use.
need=()
for pkg in openssl curl python3; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'ok installed' || need+=("$pkg")
done
if ((${#need[@]})); then
  log "installing ${need[*]}"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
command -v go >/dev/null || { log "ERROR: go is not installed"; exit 1; }

mkdir -p "$bin"
stamp_of() { # DIR: hash of everything that decides the module's binaries
  (cd "$1" && find . -name '*.go' -o -name go.mod -o -name go.sum | LC_ALL=C sort | xargs cat | sha256sum | cut -c1-16)
}
export GOFLAGS="-buildvcs=false -trimpath -mod=readonly"

# ---- kube module
kube_bins=(kube-apiserver kube-controller-manager kube-scheduler kubectl sb-node-agent etcd)
stamp=$(stamp_of "$here/kube")
ok=1
for b in "${kube_bins[@]}"; do [[ -x $bin/$b ]] || ok=0; done
if ((ok)) && [[ $(cat "$cache/kube.stamp" 2>/dev/null) == "$stamp" ]]; then
  log "kube $kube_version binaries cached in $bin"
else
  minor=${kube_version#v1.}; minor=${minor%%.*}
  ldflags="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$kube_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  tmp=$(mktemp -d "$cache/build.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  log "building kube $kube_version, etcd and sb-node-agent (first time: several minutes)"
  t0=$SECONDS
  (cd "$here/kube" && nice -n 10 go build -ldflags "$ldflags" -o "$tmp/" ./cmd/... go.etcd.io/etcd/server/v3)
  mv "$tmp/server" "$tmp/etcd"
  for b in "${kube_bins[@]}"; do mv -f "$tmp/$b" "$bin/$b"; done
  echo "$stamp" >"$cache/kube.stamp"
  log "kube binaries built in $((SECONDS - t0))s"
fi

# ---- helm module
stamp=$(stamp_of "$here/helm")
if [[ -x $bin/helm && $(cat "$cache/helm.stamp" 2>/dev/null) == "$stamp" ]]; then
  log "helm $helm_version cached in $bin"
else
  log "building helm $helm_version"
  t0=$SECONDS
  (cd "$here/helm" && nice -n 10 go build -o "$bin/helm.new" \
    -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$helm_version -X helm.sh/helm/v3/internal/version.gitTreeState=clean" \
    helm.sh/helm/v3/cmd/helm)
  mv -f "$bin/helm.new" "$bin/helm"
  echo "$stamp" >"$cache/helm.stamp"
  log "helm built in $((SECONDS - t0))s"
fi
