#!/usr/bin/env bash
# `make run`: prepares the sample data if missing, validates every example manifest and runs the
# example pipeline locally.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=bin/streambatch
if [[ ! -d data/sample/reviews ]]; then
  echo "run: generating sample data in data/sample/reviews/"
  mkdir -p data/sample/reviews
  python3 - <<'PY'
import json, random
random.seed(7)
langs = ["en", "de", "fr", "es", "ja"]
for part in range(4):
    with open(f"data/sample/reviews/part-{part}.jsonl", "w") as f:
        for i in range(25000):
            f.write(json.dumps({"id": part * 25000 + i, "lang": random.choice(langs),
                                "stars": random.randint(1, 5),
                                "text": "review %d of part %d" % (i, part)}) + "\n")
PY
fi
echo "run: validating the example pipelines in api/examples/"
"$bin" validate api/examples/*.yaml
if "$bin" help | grep -q '^  run '; then
  exec "$bin" run api/examples/filter-english.yaml
fi
echo "run: the local engine ('streambatch run') is not built yet; the examples above are valid."
