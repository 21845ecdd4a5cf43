#!/usr/bin/env python3
"""llama.cpp's greedy plain completion of a few prompts, as a golden fixture for
`quire generate --raw` (tests/gemma_real.rs).

For each prompt: the token ids llama.cpp gives it (BOS first when the model asks for one,
special-token text parsed), then up to --tokens greedy tokens decoded one at a time (the
prompt in one batch, as llama.cpp's completion runs it), with llama.cpp's top-5 logits at
every step, so that a test can tell a real disagreement from a near-tie.

Run with the bench venv's python (llama-cpp-python):
  ~/.cache/quire/llama-cpp-python/venv/bin/python scripts/llama_cpp_greedy.py \
      --model ~/.cache/quire/models/gemma-3-270m-q4_k_m.gguf \
      --out tests/fixtures/reference/gemma-3-270m-raw.json
"""

import argparse
import hashlib
import json

import llama_cpp
import numpy as np
from llama_cpp import Llama

PROMPTS = [
    "The capital of France is",
    "Translation is the art of",
    "def fibonacci(n):\n",
]


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--tokens", type=int, default=128)
    args = ap.parse_args()
    m = Llama(model_path=args.model, n_ctx=1024, n_threads=2, n_batch=512,
              logits_all=True, verbose=False)
    eos = {m.token_eos()}
    cases = []
    for prompt in PROMPTS:
        ids = m.tokenize(prompt.encode(), add_bos=m.metadata.get("tokenizer.ggml.add_bos_token", "true") != "false", special=True)
        m.reset()
        m.eval(ids)
        out, tops = [], []
        for _ in range(args.tokens):
            logits = np.array(m.scores[m.n_tokens - 1], dtype=np.float32)
            order = np.argsort(-logits, kind="stable")[:5]
            tok = int(order[0])
            out.append(tok)
            tops.append([[int(t), float(logits[t])] for t in order])
            if tok in eos:
                break
            m.eval([tok])
        cases.append({"prompt": prompt, "prompt_ids": [int(i) for i in ids],
                      "ids": out, "top5": tops})
    fixture = {
        "producer": f"llama-cpp-python {llama_cpp.__version__} (greedy, prompt in one batch, then one token per step, 2 threads)",
        "model_sha256": sha256(args.model),
        "cases": cases,
    }
    with open(args.out, "w") as f:
        json.dump(fixture, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
