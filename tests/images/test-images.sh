#!/usr/bin/env bash
# `make images-test` (part of `make test`): builds the images with scripts/images.sh and checks
#   - each image's config: user 65532:65532, entrypoint = its first binary, the ports of
#     docker/images.conf, no device nodes in its file system
#   - every binary runs inside its image (umoci unpack + runc, read-only root, as 65532):
#     --version prints the version, --help exits 0, ldd finds every library
#   - reproducible: a second build with an empty base cache (the base root filesystem made again
#     by mmdebstrap) gives the same manifest digests; the docker archives load with skopeo
# Prints "images-test: N passed, N failed" last; exits non-zero on any failure. Bounded by
# SB_IMAGES_TIMEOUT (default 600 s); cleans up its containers and files.
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
conf=$top/docker/images.conf
version=$(sed -n 's/^#define SB_VERSION "\(.*\)"/\1/p' "$top/cmd/version.h")
tmp=$(mktemp -d /tmp/sb-images-test-XXXXXX)
ids=()
cleanup() {
  for id in "${ids[@]}"; do runc delete -f "$id" >/dev/null 2>&1; done
  rm -rf "$tmp"
}
trap cleanup EXIT
passed=0; failed=0
check() { # description command...
  local d=$1; shift
  if "$@" >"$tmp/out" 2>&1; then passed=$((passed + 1)); echo "ok   $d"
  else failed=$((failed + 1)); echo "FAIL $d"; sed 's/^/     /' "$tmp/out" | tail -20; fi
}
conf_get() { awk -v i="$1" -v k="$2" '$1 == i && $2 == k { for (n = 3; n <= NF; n++) print $n }' "$conf"; }
images=$(awk '!/^#/ && NF { print $1 }' "$conf" | uniq)
oci=$tmp/a/oci

build_a() { SB_IMAGES_DIR=$tmp/a "$top/scripts/images.sh" >"$tmp/a.log" 2>&1 || { cat "$tmp/a.log"; return 1; }; }
check "make images builds $(echo $images | tr ' ' ',') into one OCI layout" build_a

config_ok() { # image
  local want_ports
  want_ports=$(conf_get "$1" ports | sed 's|$|/tcp|' | sort | tr '\n' ' ')
  skopeo inspect --config "oci:$oci:$1-$version" >"$tmp/cfg.json" || return 1
  python3 - "$tmp/cfg.json" "/usr/local/bin/$(conf_get "$1" bins | head -1)" "$want_ports" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))["config"]
want_ports = sorted(sys.argv[3].split())
problems = []
if c.get("User") != "65532:65532": problems.append("user %r" % c.get("User"))
if c.get("Entrypoint") != [sys.argv[2]]: problems.append("entrypoint %r" % c.get("Entrypoint"))
if sorted(c.get("ExposedPorts", {})) != want_ports: problems.append("ports %r" % sorted(c.get("ExposedPorts", {})))
if c.get("Cmd"): problems.append("cmd %r" % c["Cmd"])
if problems: sys.exit("config: " + ", ".join(problems))
PY
}

unpack() { # image -> bundle dir
  rm -rf "$tmp/b-$1"
  umoci unpack --image "$oci:$1-$version" "$tmp/b-$1" >/dev/null
}
no_devices() { # image
  unpack "$1" || return 1
  local devs
  devs=$(find "$tmp/b-$1/rootfs" \( -type c -o -type b \) -print)
  [[ -z $devs ]] || { echo "device nodes: $devs"; return 1; }
}
in_image() { # image args... -> runs args in the image (read-only root, as the image's user)
  local img=$1; shift
  python3 - "$tmp/b-$img/config.json" "$@" <<'PY'
import json, sys
p = sys.argv[1]
c = json.load(open(p))
c["process"]["args"] = sys.argv[2:]
c["process"]["terminal"] = False
c["root"]["readonly"] = True
json.dump(c, open(p, "w"))
PY
  local id=sb-img-test-$$-$RANDOM
  ids+=("$id")
  timeout 60 runc run -b "$tmp/b-$img" "$id"
}
runs() { # image bin
  local out
  out=$(in_image "$1" "/usr/local/bin/$2" --version) || { echo "--version failed: $out"; return 1; }
  [[ $out == "$2 $version" ]] || { echo "--version printed: $out"; return 1; }
  out=$(in_image "$1" "/usr/local/bin/$2" --help 2>&1) || { echo "--help failed: $out"; return 1; }
  [[ $out == *[Uu]sage* ]] || { echo "--help printed no usage: $out"; return 1; }
  out=$(in_image "$1" ldd "/usr/local/bin/$2" 2>&1) || { echo "ldd failed: $out"; return 1; }
  ! grep -q 'not found' <<<"$out" || { echo "missing libraries: $(grep 'not found' <<<"$out")"; return 1; }
  [[ $(in_image "$1" id -u) == 65532 ]] || { echo "not running as 65532"; return 1; }
}
for img in $images; do
  check "$img: config (user 65532, entrypoint, ports $(conf_get "$img" ports | tr '\n' ' '| sed 's/ $//'))" config_ok "$img"
  check "$img: no device nodes in the file system" no_devices "$img"
  for b in $(conf_get "$img" bins); do
    check "$img: $b --version, --help and ldd inside the image (runc, read-only root)" runs "$img" "$b"
  done
done

digests() { # layout -> "image digest" lines
  for img in $images; do echo "$img $(skopeo inspect --raw "oci:$1:$img-$version" | sha256sum | cut -d' ' -f1)"; done
}
reproducible() {
  SB_IMAGES_DIR=$tmp/b SB_CACHE_DIR=$tmp/cache "$top/scripts/images.sh" >"$tmp/b.log" 2>&1 || { cat "$tmp/b.log"; return 1; }
  diff <(digests "$oci") <(digests "$tmp/b/oci") && return 0
  # say what differs: the base tarballs, then each image's manifest and config
  sha256sum "${XDG_CACHE_HOME:-$HOME/.cache}"/streambatch/images/base-*.tar "$tmp"/cache/base-*.tar
  local img
  for img in $images; do
    diff <(skopeo inspect --raw "oci:$oci:$img-$version" | python3 -m json.tool) \
      <(skopeo inspect --raw "oci:$tmp/b/oci:$img-$version" | python3 -m json.tool)
    diff <(skopeo inspect --config "oci:$oci:$img-$version" | python3 -m json.tool) \
      <(skopeo inspect --config "oci:$tmp/b/oci:$img-$version" | python3 -m json.tool)
  done
  return 1
}
check "a second build with its base made again gives the same digests" reproducible
archives() {
  for img in $images; do
    # docker load reads manifest.json's RepoTags; skopeo must read the archive back
    tar -xOf "$tmp/a/$img.tar" manifest.json | grep -q "\"docker.io/streambatch/$img:$version\"" ||
      { echo "$img.tar: no streambatch/$img:$version in manifest.json"; return 1; }
    skopeo inspect "docker-archive:$tmp/a/$img.tar" >/dev/null || return 1
  done
}
check "docker archives carry streambatch/<image>:$version" archives
chart_version() { # helm install pulls streambatch/<image>:<appVersion>: the tag make images gives
  local app
  app=$(sed -n 's/^appVersion: "\([^"]*\)".*/\1/p' "$top/helm/streambatch/Chart.yaml")
  [[ $app == "$version" ]] || { echo "Chart.yaml appVersion $app, images tagged $version"; return 1; }
}
check "the chart's appVersion is the images' tag ($version)" chart_version

echo "images-test: $passed passed, $failed failed"
((failed == 0))
