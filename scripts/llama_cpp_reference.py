#!/usr/bin/env python3
"""Record llama.cpp's logits on the tiny random-weight GGUFs of scripts/tiny_ggufs.py, as
the fixtures tests/arch_reference.rs compares Quire with.

For each GGUF (<arch>-<type>.gguf) it writes tests/fixtures/arch/<arch>-<type>.json:
- the GGUF's sha256 and size (the test regenerates the file and checks it has these bytes);
- prompt_ids: the first 64 tokens of a fixed English paragraph, tokenized by llama.cpp
  with the model's own BOS rule (longer than gemma3's 16-token sliding window);
- continuation_ids: llama.cpp's 64-token greedy continuation (argmax, one token per decode
  call, end-of-generation tokens not treated specially), with the top-1/top-2 gap and the
  logit range at every step;
- positions: for every position of prompt + continuation (128), evaluated in one batch
  with logits for all positions: the argmax, the logit range (max - min over the whole
  vocabulary), the top 8 (id, logit), and the logits at the 64 fixed ids in `ids`.

llama.cpp runs on the CPU with 2 threads, n_ctx 256, one batch and ubatch of 256, an F32
KV cache and no flash attention (so an F32 model is compared with F32 arithmetic, not with
an F16 cache). Run with the bench venv (llama-cpp-python):

  /root/.cache/quire/llama-cpp-python/venv/bin/python scripts/llama_cpp_reference.py \\
      [--ggufs DIR] [--only qwen3-f32,...]

Without --ggufs it first writes the GGUFs into a temporary directory with
scripts/tiny_ggufs.py (same interpreter; it needs gguf and numpy).
"""

import argparse
import hashlib
import inspect
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import llama_cpp
from llama_cpp import Llama

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "arch")

PROMPT_TOKENS = 64
CONTINUATION_TOKENS = 64
N_FIXED_IDS = 64
TOP_K = 8
N_CTX = 256

# Written for this fixture.
TEXT = (
    "The ferry left the harbour a little after six, while the town was still deciding "
    "whether to wake up. A woman in a green coat stood at the rail with a paper bag of "
    "oranges, peeling one slowly and dropping the peel into her pocket so the gulls would "
    "not follow her. Somewhere below, an engine coughed twice and settled into a steady "
    "hum. By the time the lighthouse slid past on the left, the fog had thinned enough to "
    "show the outline of the islands, grey on grey, and a boy beside her began counting "
    "them aloud, getting a different number every time."
)


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fixed_ids(n_vocab):
    """64 ids spread over the vocabulary (not only the frequent low ids)."""
    return [int((2 * i + 1) * n_vocab // (2 * N_FIXED_IDS)) for i in range(N_FIXED_IDS)]


def make_llama(path, **extra):
    params = dict(model_path=path, n_ctx=N_CTX, n_batch=N_CTX, n_ubatch=N_CTX, n_threads=2,
                  n_threads_batch=2, seed=0, logits_all=True, verbose=False,
                  type_k=0, type_v=0)  # GGML_TYPE_F32 KV cache
    sig = inspect.signature(Llama.__init__).parameters
    if "flash_attn_type" in sig:
        params["flash_attn_type"] = 0  # LLAMA_FLASH_ATTN_TYPE_DISABLED
    elif "flash_attn" in sig:
        params["flash_attn"] = False
    if "swa_full" in sig:
        params["swa_full"] = True
    params.update(extra)
    return Llama(**params)


def logits_rows(llm, n):
    """The logits of the first n positions evaluated since the last reset: [n, vocab]."""
    return np.array(llm.scores[:n], dtype=np.float64)


def logits_row(llm, j):
    """The logits of position j."""
    return np.array(llm.scores[j], dtype=np.float64)


def position_record(row, ids):
    order = np.argsort(-row, kind="stable")
    return {
        "argmax": int(order[0]),
        "range": round(float(row.max() - row.min()), 5),
        "top8": [[int(i), round(float(row[i]), 5)] for i in order[:TOP_K]],
        "logits": [round(float(row[i]), 5) for i in ids],
    }


def reference(path):
    vocab = make_llama(path, vocab_only=True)
    ids = vocab.tokenize(TEXT.encode("utf-8"), add_bos=True, special=False)
    assert len(ids) >= PROMPT_TOKENS, f"{path}: the text is only {len(ids)} tokens"
    prompt = ids[:PROMPT_TOKENS]
    del vocab

    llm = make_llama(path)
    n_vocab = llm.n_vocab()

    # Greedy continuation, one token per decode call.
    llm.reset()
    llm.eval(prompt)
    cont, gaps, ranges = [], [], []
    last = logits_row(llm, len(prompt) - 1)
    for step in range(CONTINUATION_TOKENS):
        order = np.argsort(-last, kind="stable")[:2]
        tok = int(order[0])
        cont.append(tok)
        gaps.append(round(float(last[order[0]] - last[order[1]]), 6))
        ranges.append(round(float(last.max() - last.min()), 5))
        if step + 1 < CONTINUATION_TOKENS:
            llm.eval([tok])
            last = logits_row(llm, len(prompt) + step)

    # Every position of prompt + continuation in one batch.
    tokens = prompt + cont
    llm.reset()
    llm.eval(tokens)
    rows = logits_rows(llm, len(tokens))
    fixed = fixed_ids(n_vocab)
    positions = [position_record(rows[j], fixed) for j in range(len(tokens))]

    # The batched pass agrees with the one-token-at-a-time pass on the greedy choices.
    batched = [int(np.argmax(rows[len(prompt) - 1 + s])) for s in range(CONTINUATION_TOKENS)]
    mismatch = [s for s in range(CONTINUATION_TOKENS) if batched[s] != cont[s]]
    return {
        "n_vocab": n_vocab,
        "prompt_ids": prompt,
        "continuation_ids": cont,
        "continuation_top2_gap": gaps,
        "continuation_range": ranges,
        "batched_argmax_differs_at_steps": mismatch,
        "ids": fixed,
        "positions": positions,
    }


def write_fixture(path, obj):
    """JSON with one line per position, to keep the file small and diffable."""
    positions = obj.pop("positions")
    head = json.dumps(obj, ensure_ascii=False, indent=1)
    lines = [json.dumps(p, separators=(",", ":")) for p in positions]
    text = head[:-2] + ',\n "positions": [\n  ' + ",\n  ".join(lines) + "\n ]\n}\n"
    json.loads(text)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ggufs", help="directory of <arch>-<type>.gguf (default: write them now)")
    ap.add_argument("--only", help="comma-separated stems, e.g. llama-f32,gemma3-q8_0")
    ap.add_argument("--out", default=OUT)
    args = ap.parse_args()

    tmp = None
    ggufs = args.ggufs
    if ggufs is None:
        tmp = tempfile.TemporaryDirectory(prefix="tiny-ggufs-")
        ggufs = tmp.name
        subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "tiny_ggufs.py"),
                        "--out", ggufs], check=True)
    manifest = {}
    mpath = os.path.join(ggufs, "MANIFEST.json")
    if os.path.isfile(mpath):
        with open(mpath, encoding="utf-8") as f:
            manifest = json.load(f)

    stems = sorted(f[:-5] for f in os.listdir(ggufs) if f.endswith(".gguf"))
    if args.only:
        wanted = args.only.split(",")
        stems = [s for s in stems if s in wanted]
    os.makedirs(args.out, exist_ok=True)
    for stem in stems:
        path = os.path.join(ggufs, stem + ".gguf")
        ref = reference(path)
        fixture = {
            "model": stem + ".gguf",
            "gguf_sha256": sha256_file(path),
            "gguf_size": os.path.getsize(path),
            "generator": "scripts/tiny_ggufs.py " + manifest.get("versions", ""),
            "producer": f"llama-cpp-python {llama_cpp.__version__} (llama.cpp CPU, n_threads=2, "
                        f"n_ctx={N_CTX}, n_batch=n_ubatch={N_CTX}, F32 KV cache, no flash "
                        "attention, logits for all positions)",
            "note": "positions[j] are the logits after tokens[0..=j] of prompt_ids + "
                    "continuation_ids, all evaluated in one batch; continuation_ids are greedy "
                    "(argmax) from one-token decode calls; logits rounded to 5 decimals.",
        }
        fixture.update(ref)
        out = os.path.join(args.out, stem + ".json")
        write_fixture(out, fixture)
        p = fixture
        print(f"{stem}: wrote {os.path.relpath(out, ROOT)} ({os.path.getsize(out)} B); "
              f"continuation {p['continuation_ids'][:8]}...; min top-2 gap "
              f"{min(p['continuation_top2_gap']):.4g}; batched/decode argmax differ at "
              f"{p['batched_argmax_differs_at_steps']}", file=sys.stderr)
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
