#!/usr/bin/env python3
"""Naive baseline for `quire bench quality`: translate a Markdown chapter one block at a time.

Run with the python of the venv that has llama-cpp-python installed, e.g.

    /root/.cache/quire/llama-cpp-python/venv/bin/python benches/naive_loop.py \
        --model MODEL.gguf --threads 2 --input chapter.md --output out.md \
        [--glossary-json glossary.json] [--source-lang en] [--target-lang zh-CN]

The chapter is split into blocks separated by blank lines. A fenced code block (``` or ~~~,
possibly containing blank lines) is one block of its own and is copied verbatim, as is every
block without a letter. Every other block is sent alone, with no context from the rest of
the chapter, through `Llama.create_chat_completion` (the GGUF's own chat template), greedy
(temperature 0), max_tokens = 3 x the block's token count + 64 (clamped to the context),
n_ctx 4096, with a fixed system prompt (plus the glossary's terms when one is given). The
answer is used as it comes, stripped of surrounding whitespace: no other cleanup, no checks,
no retries. A block whose call fails is kept in English (counted in "failed_blocks").

The output keeps the source's blank lines between blocks. One JSON object is printed on
stdout: wall and load seconds, block counts, prompt and completion tokens. Diagnostics go
to stderr.

--glossary-json: a JSON list of objects with the source term under "source" or "en" and the
target under "target" or "zh" (a string, or a list whose first item is used), or an object
with such a list under "terms".
"""

import argparse
import json
import re
import sys
import time

T_START = time.perf_counter()

import llama_cpp  # noqa: E402
from llama_cpp import Llama  # noqa: E402

N_CTX = 4096
LANGUAGES = {
    "zh": "Simplified Chinese",
    "zh-cn": "Simplified Chinese",
    "zh-hans": "Simplified Chinese",
    "zh-tw": "Traditional Chinese",
    "zh-hant": "Traditional Chinese",
    "ja": "Japanese",
    "ko": "Korean",
    "fr": "French",
    "de": "German",
    "es": "Spanish",
    "en": "English",
}
FENCE_RE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


def split_blocks(text):
    """Pieces of the chapter in order: (kind, text) with kind "blank" (one blank line),
    "verbatim" (a fenced code block or a block without letters) or "translate". Joining
    every piece's text with "\\n" gives the chapter back."""
    pieces = []
    current = []

    def flush():
        if current:
            block = "\n".join(current)
            kind = "translate" if any(c.isalpha() for c in block) else "verbatim"
            pieces.append((kind, block))
            current.clear()

    lines = text.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        m = FENCE_RE.match(line)
        if m:
            flush()
            fence = m.group(1)
            block = [line]
            i += 1
            close = re.compile(r"^ {0,3}" + re.escape(fence[0]) + "{%d,}[ \t]*$" % len(fence))
            while i < len(lines):
                block.append(lines[i])
                i += 1
                if close.match(block[-1]):
                    break
            pieces.append(("verbatim", "\n".join(block)))
            continue
        if line.strip() == "":
            flush()
            pieces.append(("blank", line))
        else:
            current.append(line)
        i += 1
    flush()
    return pieces


def load_glossary(path):
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    if isinstance(data, dict):
        data = data.get("terms") or data.get("entries") or []
    terms = []
    for item in data:
        if not isinstance(item, dict):
            continue
        src = item.get("source") or item.get("en")
        tgt = item.get("target") or item.get("zh") or item.get("zh-CN")
        if isinstance(tgt, list):
            tgt = tgt[0] if tgt else None
        if src and tgt:
            terms.append((str(src).strip(), str(tgt).strip()))
    return terms


def system_prompt(source_lang, target_lang, terms):
    source = LANGUAGES.get(source_lang.lower(), source_lang)
    lang = LANGUAGES.get(target_lang.lower(), target_lang)
    s = (f"You are a professional translator. Translate the user's Markdown from {source} "
         f"into {lang}. Keep Markdown syntax, code, URLs and numbers unchanged. "
         f"Output only the translation.")
    if terms:
        s += "\n\nGlossary (use these translations):\n" + "\n".join(
            f"{src} → {tgt}" for src, tgt in terms)
    return s


def main():
    ap = argparse.ArgumentParser(description="naive per-block llama.cpp translation loop")
    ap.add_argument("--model", required=True, help="path to a GGUF file")
    ap.add_argument("--threads", type=int, required=True, help="n_threads and n_threads_batch")
    ap.add_argument("--input", required=True, help="the chapter (Markdown)")
    ap.add_argument("--output", required=True, help="where to write the translation")
    ap.add_argument("--glossary-json", help="glossary (JSON) put into the system prompt")
    ap.add_argument("--source-lang", default="en", help="source language code")
    ap.add_argument("--target-lang", default="zh-CN", help="target language code")
    args = ap.parse_args()

    with open(args.input, encoding="utf-8") as f:
        text = f.read()
    terms = load_glossary(args.glossary_json) if args.glossary_json else []
    system = system_prompt(args.source_lang, args.target_lang, terms)

    t0 = time.perf_counter()
    llm = Llama(model_path=args.model, n_ctx=N_CTX, n_batch=512,
                n_threads=args.threads, n_threads_batch=args.threads,
                use_mmap=True, seed=0, verbose=False)
    load_s = time.perf_counter() - t0

    pieces = split_blocks(text)
    out = []
    stats = {"blocks": 0, "translated_blocks": 0, "verbatim_blocks": 0, "failed_blocks": 0,
             "prompt_tokens": 0, "completion_tokens": 0, "truncated_blocks": 0}
    todo = sum(1 for k, _ in pieces if k == "translate")
    for kind, block in pieces:
        if kind == "blank":
            out.append(block)
            continue
        stats["blocks"] += 1
        if kind == "verbatim":
            stats["verbatim_blocks"] += 1
            out.append(block)
            continue
        n_block = len(llm.tokenize(block.encode("utf-8"), add_bos=False, special=False))
        n_system = len(llm.tokenize(system.encode("utf-8"), add_bos=False, special=False))
        room = N_CTX - (n_block + n_system + 32)
        max_tokens = max(16, min(3 * n_block + 64, room))
        try:
            r = llm.create_chat_completion(
                messages=[{"role": "system", "content": system},
                          {"role": "user", "content": block}],
                temperature=0.0, top_k=1, top_p=1.0, min_p=0.0, repeat_penalty=1.0,
                max_tokens=max_tokens, seed=0)
            answer = (r["choices"][0]["message"]["content"] or "").strip()
            usage = r.get("usage") or {}
            stats["prompt_tokens"] += int(usage.get("prompt_tokens", 0))
            stats["completion_tokens"] += int(usage.get("completion_tokens", 0))
            if r["choices"][0].get("finish_reason") == "length":
                stats["truncated_blocks"] += 1
            stats["translated_blocks"] += 1
            out.append(answer)
        except Exception as e:  # keep going: the block stays in English
            print(f"naive_loop: block failed: {e}", file=sys.stderr)
            stats["failed_blocks"] += 1
            out.append(block)
        done = stats["translated_blocks"] + stats["failed_blocks"]
        print(f"naive_loop: {done}/{todo} blocks", file=sys.stderr)

    with open(args.output, "w", encoding="utf-8") as f:
        f.write("\n".join(out))
    print(json.dumps({
        "engine": f"llama-cpp-python {llama_cpp.__version__}",
        "model": args.model,
        "threads": args.threads,
        "target_lang": args.target_lang,
        "glossary_terms": len(terms),
        "n_ctx": N_CTX,
        "load_s": round(load_s, 3),
        "wall_s": round(time.perf_counter() - T_START, 3),
        **stats,
    }))


if __name__ == "__main__":
    main()
