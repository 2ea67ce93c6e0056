"""The image-classification example's data, model and check (scripts/example-images.sh).

prepare DATA_DIR MODEL: writes the held-out part of scikit-learn's digits (8x8 handwritten digits,
  values 0..16) as image files: PNG and JPEG in turn, each scaled up by whole factors (2 to 5,
  height and width apart) so sizes differ; trains a 64-64-10 MLP (ReLU) with numpy on the other
  part, on the inputs the pipeline gives it (resize back to 8x8, /255, mean 0.5, std 0.5), and
  saves it as PyTorch's nn.Sequential(Linear, ReLU, Linear) would (safetensors: 0.weight [64, 64],
  0.bias, 2.weight [10, 64], 2.bias). DATA_DIR/../digits-labels.json keeps the true labels.
check DATA_DIR MODEL OUT_DIR: every image answered exactly once; top-3 in order of the logits;
  the logits equal those of an independent computation (Pillow decoding, numpy resize and MLP);
  accuracy on the held-out digits.
"""
import glob
import json
import os
import sys

import numpy as np


def resize_bilinear(img, h, w):
    """Bilinear with half-pixel centres and edge clamping (OpenCV INTER_LINEAR), rounded."""
    sh, sw = img.shape
    def taps(sn, dn):
        s = np.maximum((np.arange(dn) + 0.5) * sn / dn - 0.5, 0)
        i0 = np.minimum(np.floor(s).astype(int), sn - 1)
        i1 = np.minimum(i0 + 1, sn - 1)
        return i0, i1, np.minimum(s - i0, 1)
    y0, y1, wy = taps(sh, h)
    x0, x1, wx = taps(sw, w)
    f = img.astype(np.float64)
    top = f[y0][:, x0] + wx * (f[y0][:, x1] - f[y0][:, x0])
    bot = f[y1][:, x0] + wx * (f[y1][:, x1] - f[y1][:, x0])
    return np.clip(np.floor(top + wy[:, None] * (bot - top) + 0.5), 0, 255)


def features(pixels8):
    return ((pixels8 / 255.0 - 0.5) / 0.5).reshape(len(pixels8), -1)


def forward(p, x):
    h = np.maximum(x @ p["0.weight"].T.astype(np.float64) + p["0.bias"], 0)
    return h @ p["2.weight"].T.astype(np.float64) + p["2.bias"]


def prepare(data_dir, model):
    from PIL import Image
    from safetensors.numpy import save_file
    from sklearn.datasets import load_digits
    d = load_digits()
    rng = np.random.default_rng(7)
    order = rng.permutation(len(d.images))
    train, held = order[:1400], order[1400:]
    px = np.round(d.images * 255.0 / 16.0).astype(np.uint8)  # (n, 8, 8)
    os.makedirs(data_dir, exist_ok=True)
    labels = {}
    for n, i in enumerate(held):
        kh, kw = rng.integers(2, 6, size=2)
        big = np.repeat(np.repeat(px[i], kh, axis=0), kw, axis=1)
        name = "digit-%04d.%s" % (i, "png" if n % 2 == 0 else "jpg")
        im = Image.fromarray(big, mode="L")
        if name.endswith(".png"):
            im.save(os.path.join(data_dir, name))
        else:
            im.save(os.path.join(data_dir, name), quality=95)
        labels[name] = int(d.target[i])
    with open(os.path.join(os.path.dirname(data_dir.rstrip("/")), "digits-labels.json"), "w") as f:
        json.dump(labels, f)
    # training: full-batch Adam on softmax cross-entropy
    x, y = features(px[train].astype(np.float64)), d.target[train]
    w1 = rng.normal(0, np.sqrt(2 / 64), (64, 64)); b1 = np.zeros(64)
    w2 = rng.normal(0, np.sqrt(1 / 64), (10, 64)); b2 = np.zeros(10)
    params = [w1, b1, w2, b2]
    m = [np.zeros_like(p) for p in params]; v = [np.zeros_like(p) for p in params]
    onehot = np.eye(10)[y]
    for t in range(1, 601):
        h = np.maximum(x @ w1.T + b1, 0)
        z = h @ w2.T + b2
        e = np.exp(z - z.max(axis=1, keepdims=True)); prob = e / e.sum(axis=1, keepdims=True)
        g = (prob - onehot) / len(x)
        gw2 = g.T @ h; gb2 = g.sum(0)
        gh = (g @ w2) * (h > 0)
        gw1 = gh.T @ x + 1e-4 * w1; gb1 = gh.sum(0)
        for k, gr in enumerate([gw1, gb1, gw2, gb2]):
            m[k] = 0.9 * m[k] + 0.1 * gr; v[k] = 0.999 * v[k] + 0.001 * gr * gr
            params[k] -= 0.01 * (m[k] / (1 - 0.9 ** t)) / (np.sqrt(v[k] / (1 - 0.999 ** t)) + 1e-8)
    os.makedirs(os.path.dirname(model), exist_ok=True)
    save_file({"0.weight": w1.astype(np.float32), "0.bias": b1.astype(np.float32),
               "2.weight": w2.astype(np.float32), "2.bias": b2.astype(np.float32)}, model)
    acc = (np.argmax(forward({"0.weight": w1, "0.bias": b1, "2.weight": w2, "2.bias": b2}, x),
                     axis=1) == y).mean()
    print("digits: %d images in %s (PNG and JPEG, 16 to 40 pixels a side); model %s "
          "(training accuracy %.3f)" % (len(held), data_dir, model, acc))


def check(data_dir, model, out_dir):
    from PIL import Image
    from safetensors.numpy import load_file
    p = {k: v.astype(np.float64) for k, v in load_file(model).items()}
    labels = json.load(open(os.path.join(os.path.dirname(data_dir.rstrip("/")),
                                          "digits-labels.json")))
    got = {}
    for part in glob.glob(os.path.join(out_dir, "part-*.jsonl")):
        for line in open(part):
            r = json.loads(line)
            name = os.path.basename(r["path"])
            assert name not in got, "%s answered twice" % name
            assert set(r) == {"path", "logitsTopK", "logits"}, "members %s" % sorted(r)
            got[name] = r
    assert set(got) == set(labels), "%d answers for %d images (missing %s)" % (
        len(got), len(labels), sorted(set(labels) - set(got))[:5])
    right, worst = 0, {"png": 0.0, "jpg": 0.0}
    agree = {"png": 0, "jpg": 0}
    count = {"png": 0, "jpg": 0}
    for name, r in got.items():
        logits = np.array(r["logits"])
        top = r["logitsTopK"]
        assert len(top) == 3 and list(top) == list(np.argsort(-logits, kind="stable")[:3]), \
            "%s: top-3 %s not the largest logits %s" % (name, top, logits)
        img = np.asarray(Image.open(os.path.join(data_dir, name)).convert("L"))
        ref = forward(p, features(resize_bilinear(img, 8, 8)[None]))[0]
        kind = name.rsplit(".", 1)[1]
        count[kind] += 1
        worst[kind] = max(worst[kind], float(np.abs(ref - logits).max() / np.abs(ref).max()))
        agree[kind] += int(np.argmax(ref) == top[0])
        right += int(top[0] == labels[name])
    acc = right / len(got)
    print("digits: %d images answered once each; accuracy %.3f on held-out digits; logits vs an "
          "independent numpy/Pillow computation: PNG max rel diff %.1e (%d/%d same top-1), JPEG "
          "%.1e (%d/%d same top-1)" % (len(got), acc, worst["png"], agree["png"], count["png"],
                                        worst["jpg"], agree["jpg"], count["jpg"]))
    assert worst["png"] < 1e-5, "PNG logits differ from the reference: %g" % worst["png"]
    assert agree["png"] == count["png"], "PNG top-1 differs from the reference"
    assert agree["jpg"] >= 0.98 * count["jpg"], "JPEG top-1 differs from the reference too often"
    assert acc >= 0.9, "accuracy %.3f below 0.9" % acc


if __name__ == "__main__":
    if sys.argv[1] == "prepare":
        prepare(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "check":
        check(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        sys.exit("usage: digits.py prepare DATA_DIR MODEL | check DATA_DIR MODEL OUT_DIR")
