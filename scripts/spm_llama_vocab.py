#!/usr/bin/env python3
"""Write a vocabulary-only GGUF that carries another GGUF's tokenizer under other
conventions, so Quire's tokenizer can be checked against llama.cpp for every tokenizer type
without another model download.

Variants (the source GGUF is a model Quire fetches from PyPI):

  spm-llama           a SentencePiece vocabulary with Llama 2's convention: Gemma 3's tokens,
                      scores and token types with tokenizer.ggml.add_space_prefix = true
                      (Gemma itself writes no "▁" before the text; Llama 2 and Mistral do).
  bpe-hunyuan-dense   a byte-level BPE vocabulary under the "hunyuan-dense" pre-tokenizer
                      (Tencent's Hy-MT; DeepSeek-V3's three split patterns): Qwen2.5's tokens,
                      types and merges with tokenizer.ggml.pre = "hunyuan-dense".

The file has the hyperparameters of a one-layer "llama" model and no tensors: llama.cpp
reads it with vocab_only=True. Every tokenizer key is copied with its type from the source,
in a fixed order, so tests/tokenizer_golden.rs writes the very same bytes (it checks the
sha256 recorded in the fixture) without Python.

Usage (with the PyPI `gguf` package, e.g. in the llama-cpp-python venv):
  python scripts/spm_llama_vocab.py spm-llama SOURCE.gguf OUT.gguf
  python scripts/spm_llama_vocab.py bpe-hunyuan-dense SOURCE.gguf OUT.gguf
"""

import argparse
import sys

try:
    import gguf
    import numpy  # noqa: F401  (gguf needs it)
except ImportError as e:
    sys.exit(f"{e}: run `pip install gguf numpy` (or use the llama-cpp-python venv)")

# Tokenizer keys copied from the source, in this order, when present.
COPIED = [
    "tokenizer.ggml.model",
    "tokenizer.ggml.pre",
    "tokenizer.ggml.tokens",
    "tokenizer.ggml.scores",
    "tokenizer.ggml.token_type",
    "tokenizer.ggml.merges",
    "tokenizer.ggml.bos_token_id",
    "tokenizer.ggml.eos_token_id",
    "tokenizer.ggml.unknown_token_id",
    "tokenizer.ggml.padding_token_id",
    "tokenizer.ggml.add_bos_token",
    "tokenizer.ggml.add_eos_token",
]

# What each variant changes: (key, type, value); a copied key is replaced where it stands,
# a new one is appended.
VARIANTS = {
    "spm-llama": {
        "model": "llama",
        "set": [("tokenizer.ggml.add_space_prefix", gguf.GGUFValueType.BOOL, True)],
    },
    "bpe-hunyuan-dense": {
        "model": "gpt2",
        "set": [("tokenizer.ggml.pre", gguf.GGUFValueType.STRING, "hunyuan-dense")],
    },
}

# A one-layer llama's hyperparameters (llama.cpp reads them even with vocab_only).
HPARAMS = [
    ("llama.context_length", gguf.GGUFValueType.UINT32, 4096),
    ("llama.embedding_length", gguf.GGUFValueType.UINT32, 64),
    ("llama.block_count", gguf.GGUFValueType.UINT32, 1),
    ("llama.feed_forward_length", gguf.GGUFValueType.UINT32, 128),
    ("llama.attention.head_count", gguf.GGUFValueType.UINT32, 2),
    ("llama.attention.layer_norm_rms_epsilon", gguf.GGUFValueType.FLOAT32, 1e-5),
]


def field_value(field):
    """A reader field as (type, value, element type) for GGUFWriter.add_key_value."""
    vtype = field.types[0]
    if vtype == gguf.GGUFValueType.ARRAY:
        sub = field.types[1]
        if sub == gguf.GGUFValueType.STRING:
            val = [bytes(field.parts[i]) for i in field.data]
        else:
            val = [field.parts[i][0].item() for i in field.data]
        return vtype, val, sub
    if vtype == gguf.GGUFValueType.STRING:
        return vtype, bytes(field.parts[field.data[0]]), None
    return vtype, field.parts[field.data[0]][0].item(), None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("variant", choices=sorted(VARIANTS))
    ap.add_argument("source")
    ap.add_argument("out")
    args = ap.parse_args()
    variant = VARIANTS[args.variant]

    reader = gguf.GGUFReader(args.source)
    model = field_value(reader.fields["tokenizer.ggml.model"])[1].decode()
    if model != variant["model"]:
        sys.exit(f"{args.source}: tokenizer model {model!r}, variant {args.variant} needs "
                 f"{variant['model']!r}")

    kv = []
    for key in COPIED:
        if key in reader.fields:
            kv.append((key, *field_value(reader.fields[key])))
    for key, vtype, val in variant["set"]:
        at = [i for i, (k, *_) in enumerate(kv) if k == key]
        if at:
            kv[at[0]] = (key, vtype, val, None)
        else:
            kv.append((key, vtype, val, None))

    w = gguf.GGUFWriter(args.out, arch="llama")
    w.add_key_value("general.name", f"{args.variant} vocabulary", gguf.GGUFValueType.STRING)
    for key, vtype, val in HPARAMS:
        w.add_key_value(key, val, vtype)
    for key, vtype, val, sub in kv:
        w.add_key_value(key, val, vtype, sub_type=sub)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print("wrote", args.out, file=sys.stderr)


if __name__ == "__main__":
    main()
