#!/usr/bin/env bash
# `make resize-test` (part of `make test`): image.resize's antialiased resize (lib/image/resample.c)
# against Pillow's Image.resize(BILINEAR), the reference it follows: random noise and smooth
# gradients, RGB and grayscale, odd sizes, resized down by 2 and by 3.7, to 64x64, up by 2, and one
# axis up with the other down, and random sizes; every case must be within 1 of Pillow on every
# value (it is equal today). Upscales are also checked with the plain bilinear resize
# (antialias: false), which should agree there too (within 1: Pillow rounds between its passes).
# JPEGs decoded with args.draft and resized must equal Pillow's Image.draft() + resize (within 1).
# Pillow comes from build/image-venv (scripts/example-images.sh) when it is there, else from a
# small venv of its own (build/resize-venv, pinned, made once). Prints "resize-test: N passed, N
# failed" last; exits non-zero on any failure.
set -uo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
helper=${SB_BUILD_DIR:-$top/build}/tests/helpers/sb_resize
py=$top/build/image-venv/bin/python
if ! "$py" -c 'import numpy, PIL' 2>/dev/null; then
  venv=$top/build/resize-venv
  py=$venv/bin/python
  if ! "$py" -c 'import numpy, PIL' 2>/dev/null; then
    echo "resize-test: installing pillow==13.0.0 numpy==2.4.6 into $venv (once)"
    rm -rf "$venv"
    python3 -m venv "$venv" && "$venv/bin/pip" install -q --disable-pip-version-check \
      pillow==13.0.0 numpy==2.4.6 || { echo "resize-test: 0 passed, 1 failed"; exit 1; }
  fi
fi
tmp=$(mktemp -d /tmp/sb-resize-test-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
"$py" - "$helper" "$tmp" <<'PY'
import subprocess, sys
import numpy as np
from PIL import Image

helper, tmp = sys.argv[1], sys.argv[2]
rng = np.random.default_rng(36)

def noise(w, h, c):
    return rng.integers(0, 256, size=(h, w, c), dtype=np.uint8)

def gradient(w, h, c):
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    planes = [127.5 + 127.5 * np.sin(x / w * (3 + k) + y / h * (2 + 2 * k)) for k in range(c)]
    return np.clip(np.round(np.stack(planes, axis=2)), 0, 255).astype(np.uint8)

def ours(mode, a, w, h):
    sh, sw, c = a.shape
    a.tofile(tmp + "/in")
    subprocess.run([helper, mode, str(sw), str(sh), str(c), str(w), str(h), tmp + "/in",
                    tmp + "/out"], check=True)
    return np.fromfile(tmp + "/out", dtype=np.uint8).reshape(h, w, c)

def pillow(a, w, h):
    im = Image.fromarray(a[:, :, 0] if a.shape[2] == 1 else a, "L" if a.shape[2] == 1 else "RGB")
    return np.asarray(im.resize((w, h), Image.BILINEAR)).reshape(h, w, a.shape[2])

images = [("noise", 257, 131), ("gradient", 257, 131), ("noise", 300, 200),
          ("gradient", 300, 200)]
passed = failed = 0
for kind, sw, sh in images:
    for c in (3, 1):
        a = (noise if kind == "noise" else gradient)(sw, sh, c)
        sizes = [("down 2", sw // 2, sh // 2), ("down 3.7", round(sw / 3.7), round(sh / 3.7)),
                 ("to 64x64", 64, 64), ("up 2", sw * 2, sh * 2),
                 ("w up, h down", sw * 3 // 2, sh // 3), ("w down, h up", sw // 3, sh * 3 // 2)]
        for what, w, h in sizes:
            modes = ["aa", "plain"] if what == "up 2" else ["aa"]
            for mode in modes:
                ref = pillow(a, w, h)
                got = ours(mode, a, w, h)
                d = int(np.abs(ref.astype(int) - got.astype(int)).max())
                ok = d <= 1
                passed += ok
                failed += not ok
                print("%s %s %dx%dx%d %s -> %dx%d (%s): max |ours - Pillow| = %d" % (
                    "ok  " if ok else "FAIL", kind, sw, sh, c, what, w, h,
                    "antialias" if mode == "aa" else "plain bilinear", d))
# random sizes, 1 pixel included, both pass orders (lib/image/resample.c, vertical_first)
for n in range(16):
    sw, sh, w, h = (int(v) for v in rng.integers(1, 300, size=4))
    if n < 2:
        w, h = 1, 1
    c = 3 if n % 2 else 1
    a = noise(sw, sh, c)
    d = int(np.abs(pillow(a, w, h).astype(int) - ours("aa", a, w, h).astype(int)).max())
    ok = d <= 1
    passed += ok
    failed += not ok
    print("%s noise %dx%dx%d -> %dx%d (antialias): max |ours - Pillow| = %d" % (
        "ok  " if ok else "FAIL", sw, sh, c, w, h, d))
# args.draft (lib/image/image.c, sb_image_decode_draft): a JPEG decoded reduced as Pillow's
# Image.draft() chooses, then resized, must give Pillow's draft + resize pixels (both use
# libjpeg's DCT scaling); the distance to a full decode + resize is printed (the documented
# tolerance of a draft)
for n in range(8):
    sw, sh = (int(v) for v in rng.integers(200, 321, size=2))
    coarse = rng.integers(0, 256, size=(int(rng.integers(3, 9)), int(rng.integers(3, 9)), 3))
    img = Image.fromarray(coarse.astype(np.uint8), "RGB").resize((sw, sh), Image.BICUBIC)
    a = np.asarray(img, dtype=np.int16) + rng.integers(-12, 13, size=(sh, sw, 3))
    path = "%s/d%d.jpg" % (tmp, n)
    Image.fromarray(np.clip(a, 0, 255).astype(np.uint8), "RGB").save(path, quality=90)
    for w, h in ((64, 64), (100, 80), (30, 30)):
        subprocess.run([helper, "draft", str(w), str(h), path, tmp + "/out"], check=True)
        got = np.fromfile(tmp + "/out", dtype=np.uint8).reshape(h, w, 3).astype(int)
        im = Image.open(path)
        im.draft("RGB", (w, h))
        ref = np.asarray(im.convert("RGB").resize((w, h), Image.BILINEAR)).astype(int)
        full = np.asarray(Image.open(path).convert("RGB").resize((w, h), Image.BILINEAR))
        d = int(np.abs(ref - got).max())
        f = np.abs(full.astype(int) - got)
        ok = d <= 1
        passed += ok
        failed += not ok
        print("%s draft %dx%d jpeg -> %dx%d (decoded at %dx%d): max |ours - Pillow draft| = %d; "
              "against a full decode: mean %.2f, max %d" % (
                  "ok  " if ok else "FAIL", sw, sh, w, h, im.size[0], im.size[1], d, f.mean(),
                  f.max()))
print("resize-test: %d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
PY
rc=$?
exit $rc
