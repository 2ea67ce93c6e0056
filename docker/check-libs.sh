#!/usr/bin/env bash
# Checks that each image of docker/images.conf installs exactly the Debian packages its binaries
# need (compared against the locally built binaries, on the same Debian release as the images,
# bookworm; `make images` and the Dockerfiles install that list):
#   needed  = packages owning the libraries the binary links directly (DT_NEEDED, resolved by
#             ldd), minus those already in debian:bookworm-slim (BASE below)
#   listed  = the image's libs line in images.conf
#   (a library on the image's wheellibs line comes with the image itself: no package needed)
#   needed == listed, and every library ldd resolves (transitively) belongs to BASE or to the
#   dependency closure of the listed packages, so the image can load the binary.
#   check-libs.sh [BINDIR [IMAGES_CONF]]  (default: bin, docker/images.conf); exit 0 when all match
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
bindir=${1:-$here/../../bin}
cfg=${2:-$here/images.conf}   # the tests also point it at altered copies
# Library packages present in debian:bookworm-slim (Essential, apt and their dependencies).
BASE="libc6 libgcc-s1 libstdc++6 zlib1g libzstd1 liblzma5 libbz2-1.0 liblz4-1 libxxhash0
libcrypt1 libselinux1 libpcre2-8-0 libacl1 libattr1 libgmp10 libtinfo6 libsystemd0 libudev1
libgcrypt20 libgpg-error0 libcap2 libmd0 libaudit1 libcap-ng0 libdb5.3 libpam0g libsemanage2
libsepol2 libsmartcols1 libblkid1 libmount1 libuuid1 libdebconfclient0 libgnutls30 libhogweed6
libnettle8 libidn2-0 libunistring2 libtasn1-6 libp11-kit0 libffi8 libseccomp2 libapt-pkg6.0"
status=0

declare -A OWNER # path -> package ("" when none): dpkg -S reads every package's file list,
                  # about a second a call, and the images share most libraries
owner() { # LIBRARY PATH -> REPLY: the Debian package that ships it (usrmerge: /lib and /usr/lib)
  local p=$1 r q o=""
  if [[ -z ${OWNER[$p]+set} ]]; then
    r=$(realpath "$p")
    for q in "$p" "$r" "${p#/usr}" "${r#/usr}" "/usr${p#/usr}" "/usr${r#/usr}"; do
      o=$(dpkg -S "$q" 2>/dev/null | head -n 1 | cut -d: -f1) && [[ -n $o ]] && break
    done
    OWNER[$p]=$o
  fi
  REPLY=${OWNER[$p]}
  [[ -n $REPLY ]]
}
closure() { # PACKAGE... -> the packages and their recursive Depends/Pre-Depends (installed here)
  python3 - "$@" <<'PY'
import subprocess, sys, re
seen, todo = set(), list(sys.argv[1:])
while todo:
    p = todo.pop()
    if p in seen: continue
    seen.add(p)
    try:
        d = subprocess.run(["dpkg-query", "-W", "-f=${Depends}, ${Pre-Depends}", p],
                           capture_output=True, text=True).stdout
    except OSError:
        continue
    for alt in d.split(","):
        for name in alt.split("|"):
            name = re.sub(r"\(.*?\)|:any|\s", "", name)
            if name: todo.append(name); break
print("\n".join(sorted(seen)))
PY
}

# conf IMAGE KIND -> the values of that line of images.conf, one per line
conf() { awk -v i="$1" -v k="$2" '$1 == i && $2 == k { for (n = 3; n <= NF; n++) print $n }' "$cfg"; }

for img in $(awk '!/^#/ && NF { print $1 }' "$cfg" | uniq); do
  listed=$(conf "$img" libs | sort -u)
  wheel=" $(conf "$img" wheellibs | tr '\n' ' ') "
  needed=(); have_all=1; ldd_all=""
  for bin in $(conf "$img" bins); do
    exe=$bindir/$bin
    if [[ ! -x $exe ]]; then echo "FAIL $img: binary '$bin' not found in $bindir"; have_all=0; continue; fi
    ldd_out=$(ldd "$exe") || { echo "FAIL $img: ldd $exe failed"; have_all=0; continue; }
    if grep -q 'not found' <<<"$ldd_out"; then echo "FAIL $bin: unresolved libraries: $(grep 'not found' <<<"$ldd_out")"; have_all=0; continue; fi
    ldd_all+=$ldd_out$'\n'
    for lib in $(objdump -p "$exe" | awk '/NEEDED/ {print $2}'); do
      [[ $wheel == *" $lib "* ]] && continue
      # "lib => path (addr)", or "path (addr)" for the dynamic loader itself (a NEEDED of the
      # static CUDA runtime)
      path=$(awk -v l="$lib" '$1 == l && $2 == "=>" {print $3; exit} $1 ~ ("/" l "$") {print $1; exit}' <<<"$ldd_out")
      [[ -n $path ]] || { echo "FAIL $bin: ldd does not say where $lib is"; have_all=0; continue; }
      owner "$path" || { echo "FAIL $bin: no package owns $lib ($path)"; have_all=0; continue; }
      pkg=$REPLY
      grep -qxF "$pkg" <<<"$(tr ' ' '\n' <<<"$BASE")" || needed+=("$pkg")
    done
  done
  if ((!have_all)); then status=1; continue; fi
  need_s=$(printf '%s\n' "${needed[@]}" | sed '/^$/d' | sort -u)
  if [[ $need_s != "$listed" ]]; then
    echo "FAIL $img: its libs line in $(basename "$cfg") must be \"$(tr '\n' ' ' <<<"$need_s" | sed 's/ $//')\""
    echo "  missing: $(comm -23 <(echo "$need_s") <(echo "$listed") | tr '\n' ' ')"
    echo "  not needed: $(comm -13 <(echo "$need_s") <(echo "$listed") | tr '\n' ' ')"
    status=1; continue
  fi
  # every library the loader resolves must come with the image
  have=$( { tr ' ' '\n' <<<"$BASE"; [[ -n $listed ]] && closure $listed; } | sed '/^$/d' | sort -u)
  bad=0
  while read -r path; do
    [[ -n $path ]] || continue
    [[ $wheel == *" $(basename "$path") "* ]] && continue
    owner "$path" || { echo "FAIL $img: no package owns $path"; bad=1; continue; }
    pkg=$REPLY
    grep -qxF "$pkg" <<<"$have" || { echo "FAIL $img: $path ($pkg) would be missing in the image"; bad=1; }
  done < <(awk '$2 == "=>" {print $3}' <<<"$ldd_all" | sort -u)
  if ((bad)); then status=1; continue; fi
  echo "ok $img: [$(conf "$img" bins | tr '\n' ' ' | sed 's/ $//')] need [$(tr '\n' ' ' <<<"$need_s" | sed 's/ $//')] beyond debian:bookworm-slim; $(awk '$2 == "=>" {print $3}' <<<"$ldd_all" | sort -u | wc -l) libraries resolved"
done
exit $status
