"""A small CNN, defined here, run by a streambatch `exec` stage on a GPU pool with the Python kit
(api/examples/cnn-classify.yaml; `make example-cnn`, checked by `make cnn-test`).

The model: conv 3x3 (3 -> 8, padding 1), ReLU, max-pool 2, conv 3x3 (8 -> 16, padding 1), ReLU,
max-pool 2, flatten, linear (16 * 8 * 8 -> 10), on 3 x 32 x 32 images normalized in CHW order
(image.resize, image.normalize layout chw). Its weights are a safetensors file named as
torch.nn.Sequential names them (0.weight, 0.bias, 3.weight, 3.bias, 7.weight, 7.bias), so
`model.load_state_dict` takes them as they are.

Where PyTorch is installed, the stage runs the model with torch on the GPU its worker sees
(CUDA_VISIBLE_DEVICES: each process of a GPU pool sees only its own device), else on the CPU;
where it is not, the same forward pass in numpy. fp32 throughout (TF32 off), so both agree with
the check's reference to 1e-4.

    python cnn.py init WEIGHTS                 seeded random weights (safetensors)
    python cnn.py serve WEIGHTS                the exec stage: framing arrow, mode batches;
                                               adds logits (10 floats) and top3 (3 class ids)
    python cnn.py check IMAGES WEIGHTS OUT     every image answered exactly once; logits within
                                               1e-4 of an independent numpy computation from
                                               Pillow's pixels (RGB, resize BILINEAR = image.resize)
"""
import glob
import json
import os
import sys

import numpy as np

SIZE = 32
MEAN = np.array([0.485, 0.456, 0.406], dtype=np.float32)
STD = np.array([0.229, 0.224, 0.225], dtype=np.float32)
SHAPES = {"0.weight": (8, 3, 3, 3), "0.bias": (8,), "3.weight": (16, 8, 3, 3), "3.bias": (16,),
          "7.weight": (10, 16 * (SIZE // 4) ** 2), "7.bias": (10,)}


def init(path):
    from safetensors.numpy import save_file
    rng = np.random.default_rng(36)
    w = {}
    for name, shape in SHAPES.items():
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
        w[name] = (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)
    save_file(w, path)


def load(path):
    from safetensors.numpy import load_file
    w = load_file(path)
    for name, shape in SHAPES.items():
        if w[name].shape != shape:
            raise ValueError("%s: %s has shape %s, want %s" % (path, name, w[name].shape, shape))
    return w


class NumpyCNN:
    """The forward pass with numpy: each 3x3 convolution as one matrix product over the
    image's 3x3 windows."""

    def __init__(self, w):
        self.w = w

    @staticmethod
    def conv(x, w, b):
        n, c, h, wd = x.shape
        p = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
        win = np.lib.stride_tricks.sliding_window_view(p, (3, 3), axis=(2, 3))  # n c h w 3 3
        cols = win.transpose(0, 2, 3, 1, 4, 5).reshape(n * h * wd, c * 9)
        out = cols @ w.reshape(w.shape[0], -1).T + b
        return out.reshape(n, h, wd, -1).transpose(0, 3, 1, 2)

    @staticmethod
    def pool(x):
        n, c, h, w = x.shape
        return x.reshape(n, c, h // 2, 2, w // 2, 2).max(axis=(3, 5))

    def __call__(self, x):
        w = self.w
        h = self.pool(np.maximum(self.conv(x, w["0.weight"], w["0.bias"]), 0))
        h = self.pool(np.maximum(self.conv(h, w["3.weight"], w["3.bias"]), 0))
        return h.reshape(len(x), -1) @ w["7.weight"].T + w["7.bias"]


class TorchCNN:
    def __init__(self, w):
        import torch
        from torch import nn
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        self.torch = torch
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        self.model = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(16 * (SIZE // 4) ** 2, 10))
        self.model.load_state_dict({k: torch.from_numpy(v) for k, v in w.items()})
        self.model.to(self.device).eval()

    def __call__(self, x):
        with self.torch.inference_mode():
            return self.model(self.torch.from_numpy(x).to(self.device)).cpu().numpy()


class Classify:
    """The exec stage's batch function: the image column (float32 CHW) -> logits and top3."""

    def __init__(self, weights):
        w = load(weights)
        try:
            self.model = TorchCNN(w)
            engine = "torch on " + self.model.device
        except ImportError:
            self.model = NumpyCNN(w)
            engine = "numpy (torch is not installed)"
        print("cnn.py: %s, CUDA_VISIBLE_DEVICES=%s" % (
            engine, os.environ.get("CUDA_VISIBLE_DEVICES", "(unset)")), file=sys.stderr)

    def __call__(self, batch):
        import pyarrow as pa
        img = batch.column(batch.schema.get_field_index("image"))
        x = img.flatten().to_numpy().astype(np.float32, copy=False)
        x = x.reshape(batch.num_rows, 3, SIZE, SIZE)
        logits = self.model(x).astype(np.float32)
        top3 = np.argsort(-logits, axis=1, kind="stable")[:, :3].astype(np.int64)
        cols = dict(zip(batch.schema.names, batch.columns))
        cols["logits"] = pa.FixedSizeListArray.from_arrays(pa.array(logits.reshape(-1)), 10)
        cols["top3"] = pa.FixedSizeListArray.from_arrays(pa.array(top3.reshape(-1)), 3)
        return pa.RecordBatch.from_arrays(list(cols.values()), names=list(cols))


def reference(path, w):
    """One image's logits computed apart from the stage: Pillow's pixels, and convolutions as
    sums of shifted planes (not the stage's window products)."""
    from PIL import Image
    im = Image.open(path).convert("RGB").resize((SIZE, SIZE), Image.BILINEAR)
    x = (np.asarray(im, dtype=np.float32) / np.float32(255) - MEAN) / STD
    x = x.transpose(2, 0, 1).astype(np.float64)

    def conv(x, k, b):
        p = np.pad(x, ((0, 0), (1, 1), (1, 1)))
        h, wd = x.shape[1:]
        out = np.zeros((k.shape[0], h, wd)) + b[:, None, None]
        for i in range(3):
            for j in range(3):
                out += np.einsum("chw,oc->ohw", p[:, i:i + h, j:j + wd], k[:, :, i, j])
        return out

    def pool(x):
        c, h, wd = x.shape
        return x.reshape(c, h // 2, 2, wd // 2, 2).max(axis=(2, 4))

    h = pool(np.maximum(conv(x, w["0.weight"], w["0.bias"]), 0))
    h = pool(np.maximum(conv(h, w["3.weight"], w["3.bias"]), 0))
    return w["7.weight"].astype(np.float64) @ h.reshape(-1) + w["7.bias"]


def check(images, weights, out):
    w = load(weights)
    rows = [json.loads(line) for f in sorted(glob.glob(os.path.join(out, "part-*.jsonl")))
            for line in open(f)]
    files = sorted(glob.glob(os.path.join(images, "*.jpg")))
    got = {}
    for r in rows:
        name = os.path.basename(r["path"])
        if name in got:
            sys.exit("cnn check: %s answered twice" % name)
        got[name] = r
    want = {os.path.basename(f): f for f in files}
    if set(got) != set(want):
        sys.exit("cnn check: %d answers for %d images (missing %s)" % (
            len(got), len(want), sorted(set(want) - set(got))[:3]))
    worst = 0.0
    for name, f in want.items():
        ref = reference(f, w)
        logits = np.array(got[name]["logits"], dtype=np.float64)
        worst = max(worst, float(np.abs(logits - ref).max()))
        if list(got[name]["top3"]) != list(np.argsort(-logits, kind="stable")[:3]):
            sys.exit("cnn check: %s: top3 %s does not follow its logits" % (name, got[name]["top3"]))
    print("cnn check: %d images answered once each; logits within %.2g of the reference" % (
        len(want), worst))
    if worst > 1e-4:
        sys.exit("cnn check: logits differ from the reference by %.3g (> 1e-4)" % worst)


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "init" and len(sys.argv) == 3:
        init(sys.argv[2])
    elif cmd == "serve" and len(sys.argv) == 3:
        from streambatch import udf
        udf.run(Classify, batch_format="pyarrow", fn_args=(sys.argv[2],))
    elif cmd == "check" and len(sys.argv) == 5:
        check(*sys.argv[2:])
    else:
        sys.exit(__doc__)
