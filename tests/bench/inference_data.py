"""The data of the GPU inference benchmark (scripts/device-inference.sh, issue 36): generated JPEG
files, a random MLP as safetensors, and the comparison of the two pipelines' answers. Needs numpy
and Pillow.

    python3 inference_data.py images DIR N [PROCS]   N JPEGs (RGB, 200 to 320 px a side, seeded)
    python3 inference_data.py model FILE DIMS        e.g. 12288,4096,4096,1000: nn.Sequential
                                                     naming (0.weight [out, in], 0.bias, 2.weight..)
    python3 inference_data.py compare SB_OUT_DIR TORCH_JSONL N
        the top-k of streambatch's jsonl parts and of torch_inference.py's file, matched by file
        name: prints "RESULT agree rows=R top1=F top5=F" (top5: the same set of five) and exits
        1 unless both hold N rows, one per image
"""
import glob
import json
import multiprocessing
import os
import struct
import sys

import numpy as np
from PIL import Image


def one_image(args):
    d, i = args
    rng = np.random.default_rng(1000 + i)
    w, h = (int(v) for v in rng.integers(200, 321, size=2))
    # smooth content (a coarse random grid scaled up) with some noise: compresses and decodes
    # like a photograph rather than like white noise
    coarse = rng.integers(0, 256, size=(int(rng.integers(3, 9)), int(rng.integers(3, 9)), 3))
    img = Image.fromarray(coarse.astype(np.uint8), "RGB").resize((w, h), Image.BICUBIC)
    a = np.asarray(img, dtype=np.int16) + rng.integers(-12, 13, size=(h, w, 3))
    Image.fromarray(np.clip(a, 0, 255).astype(np.uint8), "RGB").save(
        os.path.join(d, "img%06d.jpg" % i), quality=90)


def images(d, n, procs):
    os.makedirs(d, exist_ok=True)
    with multiprocessing.Pool(procs) as pool:
        pool.map(one_image, [(d, i) for i in range(n)], chunksize=64)


def model(path, dims):
    rng = np.random.default_rng(3)
    header, chunks, off = {}, [], 0
    for k in range(len(dims) - 1):
        # PyTorch's Linear initialisation: uniform in +-1/sqrt(in)
        bound = 1.0 / np.sqrt(dims[k])
        w = rng.uniform(-bound, bound, size=(dims[k + 1], dims[k])).astype(np.float32)
        b = rng.uniform(-bound, bound, size=dims[k + 1]).astype(np.float32)
        for name, arr in ((f"{2 * k}.weight", w), (f"{2 * k}.bias", b)):
            raw = arr.tobytes()
            header[name] = {"dtype": "F32", "shape": list(arr.shape),
                            "data_offsets": [off, off + len(raw)]}
            chunks.append(raw)
            off += len(raw)
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for c in chunks:
            f.write(c)


def read_topk(files):
    got = {}
    for p in files:
        with open(p) as f:
            for line in f:
                if line.strip():
                    r = json.loads(line)
                    # logitsTopK, or the top-k of an op whose outputField replaced its input
                    k = "logitsTopK" if "logitsTopK" in r else next(
                        k for k in r if k.endswith("TopK"))
                    got[os.path.basename(r["path"])] = r[k]
    return got


def compare(sb_dir, torch_file, n):
    sb = read_topk(sorted(glob.glob(os.path.join(sb_dir, "**", "*.jsonl*"), recursive=True)))
    tr = read_topk([torch_file])
    both = sorted(set(sb) & set(tr))
    top1 = sum(sb[k][0] == tr[k][0] for k in both) / max(1, len(both))
    top5 = sum(set(sb[k]) == set(tr[k]) for k in both) / max(1, len(both))
    print("RESULT agree rows=%d streambatch=%d torch=%d top1=%.4f top5=%.4f"
          % (len(both), len(sb), len(tr), top1, top5))
    return 0 if len(sb) == n and len(tr) == n and len(both) == n else 1


def main(argv):
    if len(argv) >= 3 and argv[0] == "images":
        images(argv[1], int(argv[2]), int(argv[3]) if len(argv) > 3 else os.cpu_count())
    elif len(argv) == 3 and argv[0] == "model":
        model(argv[1], [int(v) for v in argv[2].split(",")])
    elif len(argv) == 4 and argv[0] == "compare":
        return compare(argv[1], argv[2], int(argv[3]))
    else:
        sys.exit(__doc__)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
