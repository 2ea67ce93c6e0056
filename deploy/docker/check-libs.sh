#!/usr/bin/env bash
# Checks that each Dockerfile's runtime stage installs exactly the Debian packages its binary
# needs (Docker cannot run on the test machine, so this compares against the locally built
# binaries on the same Debian release as the image, bookworm):
#   needed  = packages owning the libraries the binary links directly (DT_NEEDED, resolved by
#             ldd), minus those already in debian:bookworm-slim (BASE below)
#   listed  = ARG RUNTIME_PACKAGES in the Dockerfile
#   needed == listed, and every library ldd resolves (transitively) belongs to BASE or to the
#   dependency closure of the listed packages, so the image can load the binary.
#   check-libs.sh [BINDIR [DOCKERFILE_DIR]]  (default: bin, deploy/docker); exit 0 when all match
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
bindir=${1:-$here/../../bin}
dfdir=${2:-$here}   # where the Dockerfile.* are (the tests also point it at altered copies)
# Library packages present in debian:bookworm-slim (Essential, apt and their dependencies).
BASE="libc6 libgcc-s1 libstdc++6 zlib1g libzstd1 liblzma5 libbz2-1.0 liblz4-1 libxxhash0
libcrypt1 libselinux1 libpcre2-8-0 libacl1 libattr1 libgmp10 libtinfo6 libsystemd0 libudev1
libgcrypt20 libgpg-error0 libcap2 libmd0 libaudit1 libcap-ng0 libdb5.3 libpam0g libsemanage2
libsepol2 libsmartcols1 libblkid1 libmount1 libuuid1 libdebconfclient0 libgnutls30 libhogweed6
libnettle8 libidn2-0 libunistring2 libtasn1-6 libp11-kit0 libffi8 libseccomp2 libapt-pkg6.0"
status=0

owner() { # LIBRARY PATH -> the Debian package that ships it (usrmerge: try /lib and /usr/lib)
  local p=$1 r q
  r=$(realpath "$p")
  for q in "$p" "$r" "${p#/usr}" "${r#/usr}" "/usr${p#/usr}" "/usr${r#/usr}"; do
    dpkg -S "$q" 2>/dev/null | head -n 1 | cut -d: -f1 && return 0
  done
  return 1
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

for df in "$dfdir"/Dockerfile.*; do
  bin=$(sed -n 's#^COPY --from=build /src/bin/\([a-z-]*\) .*#\1#p' "$df" | head -n 1)
  listed=$(sed -n 's/^ARG RUNTIME_PACKAGES="\(.*\)"/\1/p' "$df" | tr ' ' '\n' | sed '/^$/d' | sort -u)
  exe=$bindir/$bin
  if [[ -z $bin || ! -x $exe ]]; then echo "FAIL $(basename "$df"): binary '$bin' not found in $bindir"; status=1; continue; fi
  ldd_out=$(ldd "$exe") || { echo "FAIL $(basename "$df"): ldd $exe failed"; status=1; continue; }
  if grep -q 'not found' <<<"$ldd_out"; then echo "FAIL $bin: unresolved libraries: $(grep 'not found' <<<"$ldd_out")"; status=1; continue; fi
  needed=()
  for lib in $(objdump -p "$exe" | awk '/NEEDED/ {print $2}'); do
    path=$(awk -v l="$lib" '$1 == l && $2 == "=>" {print $3}' <<<"$ldd_out")
    pkg=$(owner "$path") || { echo "FAIL $bin: no package owns $lib ($path)"; status=1; continue; }
    grep -qxF "$pkg" <<<"$(tr ' ' '\n' <<<"$BASE")" || needed+=("$pkg")
  done
  need_s=$(printf '%s\n' "${needed[@]}" | sed '/^$/d' | sort -u)
  if [[ $need_s != "$listed" ]]; then
    echo "FAIL $(basename "$df"): RUNTIME_PACKAGES must be \"$(tr '\n' ' ' <<<"$need_s" | sed 's/ $//')\""
    echo "  missing: $(comm -23 <(echo "$need_s") <(echo "$listed") | tr '\n' ' ')"
    echo "  not needed: $(comm -13 <(echo "$need_s") <(echo "$listed") | tr '\n' ' ')"
    status=1; continue
  fi
  # every library the loader resolves must come with the image
  have=$( { tr ' ' '\n' <<<"$BASE"; [[ -n $listed ]] && closure $listed; } | sed '/^$/d' | sort -u)
  bad=0
  while read -r path; do
    [[ -n $path ]] || continue
    pkg=$(owner "$path") || { echo "FAIL $bin: no package owns $path"; bad=1; continue; }
    grep -qxF "$pkg" <<<"$have" || { echo "FAIL $bin: $path ($pkg) would be missing in the image"; bad=1; }
  done < <(awk '$2 == "=>" {print $3}' <<<"$ldd_out")
  if ((bad)); then status=1; continue; fi
  echo "ok $(basename "$df"): $bin needs [$(tr '\n' ' ' <<<"$need_s" | sed 's/ $//')] beyond debian:bookworm-slim; $(grep -c '=>' <<<"$ldd_out") libraries resolved"
done
exit $status
