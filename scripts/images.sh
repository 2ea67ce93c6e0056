#!/usr/bin/env bash
# `make images`: the controller, worker and worker-gpu images, built without a Docker daemon
# from Debian's packages (mmdebstrap, umoci, skopeo; installed by `make deps`):
#   build/images/oci          one OCI layout, tags <image>-<version> (e.g. worker-0.1.0-dev)
#   build/images/<image>.tar  docker archives (docker load, kind load image-archive, ctr import)
# Each image is two layers: a Debian bookworm minbase root filesystem with the image's runtime
# packages (docker/images.conf, the one list the Dockerfiles use too), cached outside the repo
# by the hash of that list, and the image's binaries from bin/ in /usr/local/bin (with the
# image's wheellibs, from the CUDA wheels of `make deps`, in /usr/local/lib/streambatch). Config:
# user 65532:65532, the first binary as entrypoint, the listed ports.
# Reproducible: fixed timestamps (SOURCE_DATE_EPOCH for the base, the epoch below for the rest)
# and sorted, owner-less tar layers, so the same packages and binaries give the same digests
# (tests/images/test-images.sh builds twice and compares).
#   SB_BIN_DIR     binaries (default bin/)
#   SB_IMAGES_DIR  output (default build/images)
#   SB_CACHE_DIR   cache of base root filesystems (default ~/.cache/streambatch/images)
#   SB_DEBIAN_MIRROR  (default http://deb.debian.org/debian)
#   --base PKG...  only the cached base root filesystem of those packages; prints its path
#   CUDA_HOME      the CUDA wheels' folder, as the Makefile's (wheellibs come from its lib/)
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
conf=$top/docker/images.conf
. "$top/scripts/env.sh" # SB_BIN_DIR
bindir=$SB_BIN_DIR
out=${SB_IMAGES_DIR:-$top/build/images}
cache=${SB_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/streambatch/images}
mirror=${SB_DEBIAN_MIRROR:-http://deb.debian.org/debian}
cuda_lib=${CUDA_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/streambatch/cuda-13.5.37/nvidia/cu13}/lib
suite=bookworm
version=$(sed -n 's/^#define SB_VERSION "\(.*\)"/\1/p' "$top/cmd/version.h")
epoch=1700000000 # 2023-11-14: a fixed time for every timestamp in the images
created=$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)
for t in mmdebstrap umoci skopeo; do
  command -v "$t" >/dev/null || { echo "images: $t is missing (make deps installs it)" >&2; exit 1; }
done
conf_get() { awk -v i="$1" -v k="$2" '$1 == i && $2 == k { for (n = 3; n <= NF; n++) print $n }' "$conf"; }
images=$(awk '!/^#/ && NF { print $1 }' "$conf" | uniq)

# The base root filesystem of a package list: built once, then taken from the cache.
base_of() { # packages... -> path of the cached tarball
  local pkgs key tar tmp
  pkgs=$(printf '%s\n' "$@" | sort -u | tr '\n' ' ')
  # recipe: bumped when the way the base is made changes (2: apt's sandbox user is root, so its
  # partial/ directories are root's; they were _apt's in some builds and root's in others, so a
  # base cached earlier and one made again differed)
  key=$(printf '%s|%s|%s|%s|recipe 2' "$suite" "$mirror" "$pkgs" "$(mmdebstrap --version)" | sha256sum | cut -c1-16)
  tar=$cache/base-$suite-$key.tar
  if [[ ! -s $tar ]]; then
    mkdir -p "$cache"
    tmp=$(mktemp "$cache/.base-XXXXXX.tar")
    echo "images: building the base root filesystem ($suite minbase + $pkgs)" >&2
    SOURCE_DATE_EPOCH=$epoch mmdebstrap --quiet --variant=minbase --mode=root \
      --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr --skip=output/dev \
      --aptopt='APT::Sandbox::User "root"' \
      --include="$(tr ' ' ',' <<<"${pkgs% }")" "$suite" "$tmp" "$mirror" >"$tmp.log" 2>&1 ||
      { tail -20 "$tmp.log" >&2; rm -f "$tmp" "$tmp.log"; echo "images: mmdebstrap failed" >&2; return 1; }
    rm -f "$tmp.log"
    mv "$tmp" "$tar"
  fi
  echo "$tar"
}
# `images.sh --base PACKAGE...`: only the base root filesystem of that list, from the cache (built
# when missing); prints its path. For images of one's own on the same base: the lifecycle suite
# builds its trainer images on it (trainer_image in tests/k8s/operator-test.sh).
if [[ ${1:-} == --base ]]; then
  shift
  (($#)) || { echo "images: --base needs the packages" >&2; exit 2; }
  base_of "$@"
  exit
fi

work=$(mktemp -d /tmp/sb-images-XXXXXX)
trap 'rm -rf "$work"' EXIT
rm -rf "$out/oci"
mkdir -p "$out"
umoci init --layout "$out/oci"
for img in $images; do
  tag=$img-$version
  mapfile -t bins < <(conf_get "$img" bins)
  mapfile -t pkgs < <(conf_get "$img" libs; conf_get "$img" data)
  base=$(base_of "${pkgs[@]}")
  # the binaries' layer: sorted, fixed times, owned by root, not writable by others
  rm -rf "$work/app" && mkdir -p "$work/app/usr/local/bin"
  for b in "${bins[@]}"; do
    [[ -x $bindir/$b ]] || { echo "images: $bindir/$b is missing (make build)" >&2; exit 1; }
    install -m 0755 "$bindir/$b" "$work/app/usr/local/bin/$b"
  done
  for l in $(conf_get "$img" wheellibs); do
    [[ -f $cuda_lib/$l ]] || { echo "images: $cuda_lib/$l is missing (make deps)" >&2; exit 1; }
    install -D -m 0644 "$cuda_lib/$l" "$work/app/usr/local/lib/streambatch/$l"
  done
  tar --sort=name --mtime="@$epoch" --owner=0 --group=0 --numeric-owner --mode=go-w \
    --format=posix --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
    -C "$work/app" -cf "$work/app-$img.tar" usr
  umoci new --image "$out/oci:$tag"
  umoci raw add-layer --image "$out/oci:$tag" --history.created "$created" \
    --history.created_by "mmdebstrap --variant=minbase $suite + ${pkgs[*]}" "$base"
  umoci raw add-layer --image "$out/oci:$tag" --history.created "$created" \
    --history.created_by "streambatch binaries: ${bins[*]}" "$work/app-$img.tar"
  ports=()
  for p in $(conf_get "$img" ports); do ports+=(--config.exposedports "$p/tcp"); done
  umoci config --image "$out/oci:$tag" --no-history --created "$created" --author streambatch \
    --os linux --architecture amd64 --config.user 65532:65532 \
    --config.entrypoint "/usr/local/bin/${bins[0]}" --clear config.cmd "${ports[@]}" \
    --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --config.workingdir / \
    --config.label "org.opencontainers.image.title=streambatch-$img" \
    --config.label "org.opencontainers.image.version=$version"
  rm -f "$out/$img.tar"
  skopeo copy --quiet "oci:$out/oci:$tag" "docker-archive:$out/$img.tar:streambatch/$img:$version"
done
umoci gc --layout "$out/oci"
for img in $images; do
  d=$(skopeo inspect --raw "oci:$out/oci:$img-$version" | sha256sum | cut -d' ' -f1)
  echo "images: $img-$version sha256:$d ($out/$img.tar)"
done
