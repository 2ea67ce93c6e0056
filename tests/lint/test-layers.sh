#!/usr/bin/env bash
# The layering check (scripts/check-layers.py) against the real tree and against copies of it
# with one wrong include injected each: the clean tree passes, and every injection is caught and
# named by file and line. Prints "N passed, N failed".
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
check=$root/scripts/check-layers.py
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0; failed=0
ok() { passed=$((passed + 1)); echo "ok: $1"; }
bad() { failed=$((failed + 1)); echo "FAIL: $1"; }

if out=$("$check" "$root" 2>&1); then ok "the tree is clean ($out)"; else bad "the tree: $out"; fi

# A copy of the C tree (sources and headers only) to inject into.
copy() {
  rm -rf "$tmp/t" && mkdir -p "$tmp/t"
  (cd "$root" && git ls-files -co --exclude-standard -- lib worker controller cmd api | \
     grep -E '\.(c|h|cu)$' | grep -v '^build/' | while read -r f; do
       [[ -f $f ]] && mkdir -p "$tmp/t/$(dirname "$f")" && cp "$f" "$tmp/t/$f"; done)
}
# inject FILE INCLUDE WANT: puts `#include "INCLUDE"` on line 2 of FILE in a fresh copy; the
# check must fail and its output must contain WANT.
inject() {
  local file=$1 inc=$2 want=$3
  copy
  sed -i "1a #include \"$inc\"" "$tmp/t/$file"
  if out=$("$check" "$tmp/t" 2>&1); then
    bad "$file including $inc was not caught"
  elif grep -qF -- "$want" <<<"$out"; then
    ok "$file including $inc: $(grep -F -- "$want" <<<"$out" | head -1)"
  else
    bad "$file including $inc: caught, but the message lacks '$want': $out"
  fi
}
inject worker/runtime.c controller/ctl/ctl.h "worker/runtime.c:2: worker/ may not include controller/ctl/ctl.h"
inject lib/io/sink.c worker/store/store.h "lib/io/sink.c:2: lib/ may not include worker/store/store.h"
inject controller/sched/core/plan.c worker/ops/ops.h "controller/sched/core/plan.c:2: controller/ may not include worker/ops/ops.h"
inject lib/core/log.c cmd/version.h "lib/core/log.c:2: lib/ may not include cmd/version.h"
inject lib/core/num.c io/reader.h "include cycle:"
inject controller/sched/ranges.c controller/operator/kube.h "include cycle:"
inject api/consumer/consumer.c controller/ctl/ctl.h "api/consumer/consumer.c:2: api/ may not include controller/ctl/ctl.h"
inject api/consumer/consumer.c worker/store/store.h "api/consumer/consumer.c:2: api/ may not include worker/store/store.h"
inject worker/slice.c no/such/header.h "worker/slice.c:2: \"no/such/header.h\" is not a file of the tree"
# what is allowed stays allowed: cmd/ includes anything, api/ headers go anywhere, and the
# consumer library reaches worker/data (the fetch client)
copy
sed -i '1a #include "api/plugin/streambatch_plugin.h"' "$tmp/t/lib/core/err.c"
sed -i '1a #include "worker/runtime.h"' "$tmp/t/cmd/streambatch.c"
sed -i '1a #include "worker/data/service.h"' "$tmp/t/api/consumer/consumer.c"
if out=$("$check" "$tmp/t" 2>&1); then ok "api/ headers from lib/, worker/ from cmd/ and worker/data from api/consumer are allowed"
else bad "allowed includes were refused: $out"; fi

echo "layers-test: $passed passed, $failed failed"
((failed == 0))
