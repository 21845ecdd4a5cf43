#!/usr/bin/env python3
"""llama.cpp baseline for Quire's benchmarks (prefill and decode speed).

Run with the python of the venv that has llama-cpp-python installed, e.g.

    /root/.cache/quire/llama-cpp-python/venv/bin/python benches/llama_cpp_bench.py \
        --model MODEL.gguf --threads 2 --prompt-ids ids.json --decode 64 --repeats 3

--prompt-ids is a JSON file holding a list of token ids (ints) valid for the model.
For each repeat the KV cache is cleared, the prompt is evaluated in batches of 512
(prefill), then --decode tokens are generated greedily one at a time (decode; each
step evaluates the token chosen by the previous step, and the EOS token is not
treated specially so every run decodes exactly N tokens).

Prints one JSON object on stdout:
    load_s            wall seconds to load the model and create the context
    prefill_tok_s     best-of-R prompt tokens / prefill seconds
    decode_tok_s      best-of-R decoded tokens / decode seconds
    prefill_s, decode_s  the best times behind those rates
    peak_rss_mib      peak resident set size of this process (ru_maxrss)
    system_info       the CPU features this llama.cpp was built with
plus the inputs and the llama-cpp-python version. Diagnostics go to stderr.
"""

import argparse
import json
import resource
import sys
import time

import llama_cpp
import numpy as np
from llama_cpp import Llama


def main():
    ap = argparse.ArgumentParser(description="llama.cpp prefill/decode benchmark")
    ap.add_argument("--model", required=True, help="path to a GGUF file")
    ap.add_argument("--threads", type=int, required=True, help="n_threads and n_threads_batch")
    ap.add_argument("--prompt-ids", required=True, help="JSON file: a list of token ids")
    ap.add_argument("--decode", type=int, default=64, help="greedy tokens to decode")
    ap.add_argument("--repeats", type=int, default=3, help="best-of repeats")
    args = ap.parse_args()

    with open(args.prompt_ids) as f:
        ids = [int(x) for x in json.load(f)]
    if not ids:
        sys.exit("--prompt-ids is empty")

    n_ctx = len(ids) + args.decode + 16
    t0 = time.perf_counter()
    llm = Llama(model_path=args.model, n_ctx=n_ctx, n_batch=512, n_ubatch=512,
                n_threads=args.threads, n_threads_batch=args.threads,
                use_mmap=True, logits_all=False, seed=0, verbose=False)
    load_s = time.perf_counter() - t0
    n_vocab = llm.n_vocab()

    best_prefill = best_decode = float("inf")
    for _ in range(max(1, args.repeats)):
        # n_tokens = 0; the next eval() then drops every KV cache cell from 0 on,
        # so each repeat prefills from an empty cache.
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(ids)
        best_prefill = min(best_prefill, time.perf_counter() - t0)

        t0 = time.perf_counter()
        for _ in range(args.decode):
            # Greedy pick from the last evaluated position's logits, then evaluate it.
            # (With logits_all=False llama-cpp-python does not fill llm.scores.)
            logits = np.ctypeslib.as_array(
                llama_cpp.llama_get_logits_ith(llm._ctx.ctx, -1), shape=(n_vocab,))
            llm.eval([int(logits.argmax())])
        best_decode = min(best_decode, time.perf_counter() - t0)

    peak_rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    print(json.dumps({
        "engine": f"llama-cpp-python {llama_cpp.__version__}",
        "model": args.model,
        "threads": args.threads,
        "prompt_tokens": len(ids),
        "decode_tokens": args.decode,
        "repeats": args.repeats,
        "load_s": round(load_s, 4),
        "prefill_s": round(best_prefill, 4),
        "prefill_tok_s": round(len(ids) / best_prefill, 2),
        "decode_s": round(best_decode, 4),
        "decode_tok_s": round(args.decode / best_decode, 2) if args.decode else None,
        "peak_rss_mib": round(peak_rss_kib / 1024, 1),
        "system_info": llama_cpp.llama_print_system_info().decode("utf-8", "replace"),
    }))


if __name__ == "__main__":
    main()
