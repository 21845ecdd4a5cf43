#!/usr/bin/env python3
"""Write tiny random-weight GGUFs of the architectures Quire runs, for comparing its
forward pass with llama.cpp's on the same bytes without downloading any weights.

For each architecture (qwen3, gemma3, hunyuan-dense, llama with Llama 3 RoPE frequency
factors) and each weight type (f32, q8_0, q4_k) it writes <out>/<arch>-<type>.gguf with:

- the metadata keys and tensor names llama.cpp's converter (convert_hf_to_gguf.py) writes
  for that architecture, in its order;
- the tokenizer copied, key for key, from a real GGUF of the family (Qwen2.5 for qwen3 and
  hunyuan-dense, SmolLM2 for llama, Gemma 3 270M for gemma3), so that the vocabulary,
  special tokens and template are real;
- random weights from a fixed seed (splitmix64 over a sha256 of the tensor's name), so the
  same command writes byte-identical files on any machine: no NumPy RNG, no floating-point
  reductions whose order could vary, only element-wise IEEE operations;
- norms, RoPE factors and other 1-D tensors in F32 (as llama.cpp keeps them); every 2-D
  weight in the file's type. Q8_0 comes from gguf-py's quantizer; Q4_K and Q6_K from the
  small quantizers below (any valid encoding is fine: both engines read the same bytes).

Q4_K needs rows that are multiples of 256 values, so the q4_k files have a wider shape
(hidden 256) than the f32/q8_0 ones (hidden 64-128); see SHAPES.

--shape qwen3-1.7b writes instead <out>/qwen3-1.7b-q4_k_m.gguf: Qwen3-1.7B's shape (28
layers, hidden 2048, 16 heads, 8 KV heads, head_dim 128, ffn 6144, vocab 151936, tied
embeddings) with llama.cpp's Q4_K_M type mix (Q6_K for the embedding/output and for
attn_v/ffn_down on llama.cpp's "more bits" layers, Q4_K elsewhere), for speed comparisons.

Usage:
  python3 scripts/tiny_ggufs.py --out DIR [--arch qwen3,gemma3,...] [--type f32,q8_0,q4_k]
  python3 scripts/tiny_ggufs.py --out DIR --shape qwen3-1.7b
Tokenizer sources are read from the Quire model store ($QUIRE_MODELS_DIR, else
~/.cache/quire/models; `quire fetch qwen2.5-coder-0.5b-instruct-q4_k_m
smollm2-135m-instruct-q4_1 gemma-3-270m-q4_k_m`), or from --tokenizer NAME=PATH.
Needs the PyPI packages gguf and numpy.
"""

import argparse
import hashlib
import json
import math
import os
import sys

try:
    import numpy as np
    import gguf
    from gguf import GGMLQuantizationType as QT
    from gguf import GGUFValueType as VT
except ImportError as e:  # pragma: no cover
    sys.exit(f"tiny_ggufs.py needs the PyPI packages gguf and numpy ({e}); "
             "install them with: python3 -m pip install gguf numpy")

SEED = 20261207

# Real GGUFs whose tokenizer metadata is copied (Quire model-store names).
TOKENIZER_SOURCES = {
    "qwen": "qwen2.5-coder-0.5b-instruct-q4_k_m",
    "smollm": "smollm2-135m-instruct-q4_1",
    "gemma": "gemma-3-270m-q4_k_m",
}

ARCHS = ["qwen3", "gemma3", "hunyuan-dense", "llama"]
TYPES = ["f32", "q8_0", "q4_k"]

# Shapes: "small" for f32/q8_0 (rows multiples of 32), "k" for q4_k (multiples of 256).
# qwen3 and gemma3 have head_dim != hidden/heads on purpose (as the real models do).
SHAPES = {
    "qwen3": {
        "small": dict(n_layer=4, hidden=64, n_head=4, n_kv=2, head_dim=32, ffn=192),
        "k": dict(n_layer=3, hidden=256, n_head=4, n_kv=2, head_dim=128, ffn=512),
        "tokenizer": "qwen", "tied": False,
    },
    "gemma3": {
        # 8 layers: llama.cpp's pattern of 6 makes layers 0-4 and 6-7 sliding-window, 5 global.
        "small": dict(n_layer=8, hidden=64, n_head=4, n_kv=1, head_dim=32, ffn=128),
        "k": dict(n_layer=7, hidden=256, n_head=4, n_kv=2, head_dim=128, ffn=512),
        "tokenizer": "gemma", "tied": True,
    },
    "hunyuan-dense": {
        "small": dict(n_layer=4, hidden=128, n_head=4, n_kv=2, head_dim=32, ffn=256),
        "k": dict(n_layer=3, hidden=256, n_head=4, n_kv=2, head_dim=64, ffn=512),
        "tokenizer": "qwen", "tied": True,
    },
    "llama": {
        "small": dict(n_layer=4, hidden=64, n_head=2, n_kv=1, head_dim=32, ffn=192),
        "k": dict(n_layer=3, hidden=256, n_head=4, n_kv=2, head_dim=64, ffn=512),
        "tokenizer": "smollm", "tied": False,
    },
}

QWEN3_1_7B = dict(n_layer=28, hidden=2048, n_head=16, n_kv=8, head_dim=128, ffn=6144)

GEMMA3_SLIDING_WINDOW = 16

# gguf LlamaFileType values written as general.file_type.
FILE_TYPE = {"f32": 0, "q8_0": 7, "q4_k": 14, "q4_k_m": 15}


# ---------------------------------------------------------------------------------------
# Deterministic random numbers: splitmix64, element-wise uint64 arithmetic only.

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_C1 = np.uint64(0xBF58476D1CE4E5B9)
_C2 = np.uint64(0x94D049BB133111EB)


def _seed(key):
    h = hashlib.sha256(f"{SEED}:{key}".encode()).digest()
    return np.uint64(int.from_bytes(h[:8], "little"))


def uniform(key, start, count):
    """`count` values in [-1, 1) (float64), the stream `key` from index `start`."""
    with np.errstate(over="ignore"):
        x = (np.arange(start, start + count, dtype=np.uint64) + np.uint64(1)) * _GOLDEN + _seed(key)
        z = (x ^ (x >> np.uint64(30))) * _C1
        z = (z ^ (z >> np.uint64(27))) * _C2
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) * (2.0 ** -52) - 1.0


def weight_rows(key, rows, cols, scale, row0, nrows):
    """Rows row0..row0+nrows of a (rows, cols) uniform matrix with standard deviation
    `scale`, as float32."""
    del rows
    u = uniform(key, row0 * cols, nrows * cols)
    return (u * (scale * math.sqrt(3.0))).astype(np.float32).reshape(nrows, cols)


def norm_weight(key, n):
    """Norm weights around 1 (0.5..1.5): wrong or missing norms change the output."""
    return (1.0 + 0.5 * uniform(key, 0, n)).astype(np.float32)


# ---------------------------------------------------------------------------------------
# Quantizers (block layouts of ggml-common.h). Element-wise operations and max/min only.

def quant_q8_0(w):
    return gguf.quants.quantize(w, QT.Q8_0)


def quant_q4_k(w):
    """Q4_K: 256 values per block; f16 d, f16 dmin, 12 bytes of 6-bit scales and mins for
    eight sub-blocks of 32, then 128 bytes of 4-bit values (x = d*sc*q - dmin*m)."""
    rows, cols = w.shape
    assert cols % 256 == 0, f"Q4_K needs rows of a multiple of 256 values, not {cols}"
    b = w.reshape(-1, 8, 32)
    n = b.shape[0]
    mx = b.max(axis=2)
    mn = np.minimum(b.min(axis=2), np.float32(0))
    scale = (mx - mn) / np.float32(15)
    mins = -mn
    d = (scale.max(axis=1) / np.float32(63)).astype(np.float16)
    dmin = (mins.max(axis=1) / np.float32(63)).astype(np.float16)
    d32 = d.astype(np.float32)[:, None]
    dm32 = dmin.astype(np.float32)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.where(d32 > 0, np.rint(scale / d32), 0).clip(0, 63).astype(np.uint8)
        m = np.where(dm32 > 0, np.rint(mins / dm32), 0).clip(0, 63).astype(np.uint8)
        eff = (d32 * sc.astype(np.float32))[:, :, None]
        off = (dm32 * m.astype(np.float32))[:, :, None]
        q = np.where(eff > 0, np.rint((b + off) / eff), 0).clip(0, 15).astype(np.uint8)
    qs = (q[:, 0::2, :] | (q[:, 1::2, :] << 4)).reshape(n, 128)
    s_lo, s_hi, m_lo, m_hi = sc[:, :4], sc[:, 4:], m[:, :4], m[:, 4:]
    scales = np.concatenate([
        (s_lo & 0x3F) | ((s_hi >> 4) << 6),
        (m_lo & 0x3F) | ((m_hi >> 4) << 6),
        (s_hi & 0x0F) | ((m_hi & 0x0F) << 4),
    ], axis=1).astype(np.uint8)
    out = np.concatenate([d.view(np.uint8).reshape(n, 2), dmin.view(np.uint8).reshape(n, 2),
                          scales, qs], axis=1)
    return out.reshape(rows, cols // 256 * 144)


def quant_q6_k(w):
    """Q6_K: 256 values per block; 128 bytes of low 4 bits, 64 bytes of high 2 bits, 16
    signed 8-bit scales of 16-value sub-blocks, f16 d (x = d*sc*(q - 32))."""
    rows, cols = w.shape
    assert cols % 256 == 0, f"Q6_K needs rows of a multiple of 256 values, not {cols}"
    b = w.reshape(-1, 16, 16)
    n = b.shape[0]
    scale = np.abs(b).max(axis=2) / np.float32(31)
    d = (scale.max(axis=1) / np.float32(127)).astype(np.float16)
    d32 = d.astype(np.float32)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.where(d32 > 0, np.rint(scale / d32), 0).clip(0, 127).astype(np.int8)
        eff = (d32 * sc.astype(np.float32))[:, :, None]
        q = (np.where(eff > 0, np.rint(b / eff), 0).clip(-32, 31) + 32).astype(np.uint8)
    qf = q.reshape(n, 2, 4, 32)  # half of the block, quarter of the half, 32 values
    ql = np.concatenate([
        (qf[:, :, 0] & 0x0F) | ((qf[:, :, 2] & 0x0F) << 4),
        (qf[:, :, 1] & 0x0F) | ((qf[:, :, 3] & 0x0F) << 4),
    ], axis=2).reshape(n, 128)
    qh = ((qf[:, :, 0] >> 4) | ((qf[:, :, 1] >> 4) << 2) | ((qf[:, :, 2] >> 4) << 4)
          | ((qf[:, :, 3] >> 4) << 6)).reshape(n, 64)
    out = np.concatenate([ql, qh, sc.view(np.uint8), d.view(np.uint8).reshape(n, 2)], axis=1)
    return out.reshape(rows, cols // 256 * 210)


QUANTIZERS = {QT.Q8_0: quant_q8_0, QT.Q4_K: quant_q4_k, QT.Q6_K: quant_q6_k}


def self_check():
    """The quantizers decode (with gguf-py's decoders) to values near their input."""
    w = weight_rows("self-check", 4, 512, 0.05, 0, 4)
    for qt, f in QUANTIZERS.items():
        back = gguf.quants.dequantize(f(w), qt).reshape(w.shape)
        err = np.abs(back - w).max() / np.abs(w).max()
        limit = {QT.Q8_0: 0.01, QT.Q4_K: 0.1, QT.Q6_K: 0.03}[qt]
        assert err < limit, f"{qt.name} quantizer error {err}"


# ---------------------------------------------------------------------------------------
# Tokenizer metadata copied from a real GGUF.

def models_dir():
    d = os.environ.get("QUIRE_MODELS_DIR")
    if d:
        return d
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "quire", "models")


_TOKENIZER_CACHE = {}

_SCALAR = {VT.UINT8: "<u1", VT.INT8: "<i1", VT.UINT16: "<u2", VT.INT16: "<i2",
           VT.UINT32: "<u4", VT.INT32: "<i4", VT.FLOAT32: "<f4", VT.BOOL: "<u1",
           VT.UINT64: "<u8", VT.INT64: "<i8", VT.FLOAT64: "<f8"}


def tokenizer_kv(path):
    """The tokenizer.* keys of the GGUF at `path`, in file order: (key, value, type, sub).
    A small reader of the GGUF header (gguf-py's GGUFReader takes ~20 s on a 262k vocab);
    strings stay bytes, numbers become Python numbers, so they are written back unchanged."""
    if path in _TOKENIZER_CACHE:
        return _TOKENIZER_CACHE[path]
    import mmap
    import struct
    with open(path, "rb") as f:
        buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from(fmt, buf, pos)
        pos += struct.calcsize(fmt)
        return v[0]

    def string():
        nonlocal pos
        n = take("<Q")
        s = bytes(buf[pos:pos + n])
        pos += n
        return s

    def scalar(vt):
        nonlocal pos
        dt = np.dtype(_SCALAR[vt])
        v = np.frombuffer(buf, dtype=dt, count=1, offset=pos)[0].item()
        pos += dt.itemsize
        return bool(v) if vt == VT.BOOL else v

    if take("<I") != gguf.GGUF_MAGIC:
        sys.exit(f"{path} is not a GGUF file")
    version = take("<I")
    if version < 2:
        sys.exit(f"{path}: GGUF version {version} is not supported")
    take("<Q")
    n_kv = take("<Q")
    out = []
    for _ in range(n_kv):
        key = string().decode()
        vt = VT(take("<I"))
        if vt == VT.ARRAY:
            sub = VT(take("<I"))
            n = take("<Q")
            if sub == VT.STRING:
                val = [string() for _ in range(n)]
            elif sub == VT.ARRAY:
                sys.exit(f"{path}: nested array {key} is not supported")
            else:
                dt = np.dtype(_SCALAR[sub])
                val = np.frombuffer(buf, dtype=dt, count=n, offset=pos).tolist()
                if sub == VT.BOOL:
                    val = [bool(x) for x in val]
                pos += n * dt.itemsize
            item = (key, val, vt, sub)
        elif vt == VT.STRING:
            item = (key, string(), vt, None)
        else:
            item = (key, scalar(vt), vt, None)
        if key.startswith("tokenizer."):
            out.append(item)
    _TOKENIZER_CACHE[path] = out
    return out


def n_tokens(kv):
    return next(len(v) for k, v, _, _ in kv if k == "tokenizer.ggml.tokens")


# ---------------------------------------------------------------------------------------
# Models.

class Tensor:
    """One tensor to write: name, shape (rows, cols) or (n,), GGML type, and how to make it."""

    def __init__(self, name, shape, qtype, make):
        self.name, self.shape, self.qtype, self.make = name, shape, qtype, make

    def nbytes(self):
        block, size = gguf.GGML_QUANT_SIZES[self.qtype]
        n = int(np.prod(self.shape))
        assert n % block == 0
        return n // block * size


def matrix(prefix, name, rows, cols, std, qtype):
    """A 2-D weight made (and quantized) in chunks of rows, so big shapes fit in memory."""
    key = prefix + name

    def make(write):
        step = max(1, (1 << 22) // cols)
        for r0 in range(0, rows, step):
            nr = min(step, rows - r0)
            w = weight_rows(key, rows, cols, std, r0, nr)
            write(w if qtype == QT.F32 else QUANTIZERS[qtype](w))
    return Tensor(name, (rows, cols), qtype, make)


def vector(key, values):
    return Tensor(key, (len(values),), QT.F32, lambda write: write(values))


def llama3_rope_factors(head_dim, base, factor=8.0, low=1.0, high=4.0, orig_ctx=8192):
    """rope_freqs.weight as llama.cpp's converter computes it for rope_type "llama3"."""
    out = []
    low_wavelen, high_wavelen = orig_ctx / low, orig_ctx / high
    for i in range(0, head_dim, 2):
        freq = 1.0 / (base ** (i / head_dim))
        wavelen = 2 * math.pi / freq
        if wavelen < high_wavelen:
            out.append(1.0)
        elif wavelen > low_wavelen:
            out.append(factor)
        else:
            smooth = (orig_ctx / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def use_more_bits(i, n):
    """llama.cpp's Q4_K_M rule for attn_v / ffn_down layers that get Q6_K."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def build(stream, arch, shape, wtype, vocab, tied, mix=None):
    """Metadata (list of (key, value, type)) and tensors of one model. Random streams are
    keyed by `stream` and the tensor's name."""
    L, H, nh, nkv, hd, ff = (shape[k] for k in ("n_layer", "hidden", "n_head", "n_kv", "head_dim", "ffn"))
    p = stream + ":"
    qt = {"f32": QT.F32, "q8_0": QT.Q8_0, "q4_k": QT.Q4_K, "q4_k_m": QT.Q4_K}[wtype]
    # Scales. With tied embeddings a random model predicts its input token again when the
    # input dominates the residual stream, and greedy decoding repeats one token: the input
    # embedding is kept small (rms 0.25 after gemma3's sqrt(hidden) scale), the blocks'
    # output projections get a gain of 2, and the output norm's gain gives the logits a
    # standard deviation of about 3 (so the argmax is clear of rounding noise).
    in_rms = 0.25
    emb_std = in_rms / math.sqrt(H) if arch == "gemma3" else in_rms
    out_std = 3.0 / math.sqrt(H)
    out_gain = (out_std / emb_std) if tied else 1.0
    proj_gain = 2.0
    std = lambda fan_in: 1.0 / math.sqrt(fan_in)  # noqa: E731
    a = arch
    kv = []

    def u32(k, v):
        kv.append((k, v, VT.UINT32))

    def f32(k, v):
        kv.append((k, v, VT.FLOAT32))

    if arch == "qwen3":
        u32(f"{a}.block_count", L); u32(f"{a}.context_length", 40960)
        u32(f"{a}.embedding_length", H); u32(f"{a}.feed_forward_length", ff)
        u32(f"{a}.attention.head_count", nh); u32(f"{a}.attention.head_count_kv", nkv)
        f32(f"{a}.rope.freq_base", 1000000.0); f32(f"{a}.attention.layer_norm_rms_epsilon", 1e-6)
        u32(f"{a}.attention.key_length", hd); u32(f"{a}.attention.value_length", hd)
    elif arch == "gemma3":
        # As the real Gemma 3 270M GGUF: no rope.freq_base_swa (llama.cpp then uses 10000
        # for the sliding-window layers), no sliding_window_pattern (llama.cpp: 6).
        u32(f"{a}.context_length", 32768); u32(f"{a}.embedding_length", H)
        u32(f"{a}.block_count", L); u32(f"{a}.feed_forward_length", ff)
        u32(f"{a}.attention.head_count", nh); f32(f"{a}.attention.layer_norm_rms_epsilon", 1e-6)
        u32(f"{a}.attention.key_length", hd); u32(f"{a}.attention.value_length", hd)
        f32(f"{a}.rope.freq_base", 1000000.0)
        u32(f"{a}.attention.sliding_window", GEMMA3_SLIDING_WINDOW)
        u32(f"{a}.attention.head_count_kv", nkv)
    elif arch == "hunyuan-dense":
        # Hunyuan "dynamic" (NTK alpha) RoPE: the converter writes the scaled base
        # theta * alpha^(d/(d-2)) with alpha 1000, and a 256k context.
        u32(f"{a}.block_count", L); u32(f"{a}.context_length", 262144)
        u32(f"{a}.embedding_length", H); u32(f"{a}.feed_forward_length", ff)
        u32(f"{a}.attention.head_count", nh); u32(f"{a}.attention.head_count_kv", nkv)
        f32(f"{a}.rope.freq_base", 10000.0 * 1000.0 ** (hd / (hd - 2)))
        f32(f"{a}.attention.layer_norm_rms_epsilon", 1e-5)
        u32(f"{a}.attention.key_length", hd); u32(f"{a}.attention.value_length", hd)
        kv.append((f"{a}.rope.scaling.type", "none", VT.STRING))
        f32(f"{a}.rope.scaling.factor", 1.0)
        u32(f"{a}.rope.scaling.original_context_length", 262144)
    elif arch == "llama":
        # Llama 3.1-style: rope_theta 500000 with "llama3" scaling -> rope_freqs.weight.
        u32(f"{a}.block_count", L); u32(f"{a}.context_length", 131072)
        u32(f"{a}.embedding_length", H); u32(f"{a}.feed_forward_length", ff)
        u32(f"{a}.attention.head_count", nh); u32(f"{a}.attention.head_count_kv", nkv)
        f32(f"{a}.rope.freq_base", 500000.0); f32(f"{a}.attention.layer_norm_rms_epsilon", 1e-5)
        assert hd == H // nh, "llama: head_dim is hidden/heads"
    else:
        raise ValueError(arch)
    u32("general.file_type", FILE_TYPE[mix or wtype])
    if arch == "llama":
        u32(f"{a}.vocab_size", vocab); u32(f"{a}.rope.dimension_count", hd)

    def wtype_of(name, layer=None):
        if mix is None:
            return qt
        # llama.cpp Q4_K_M: output (or the tied embedding) Q6_K; attn_v and ffn_down Q6_K
        # on the "more bits" layers; the rest Q4_K.
        if name in ("output", "token_embd"):
            return QT.Q6_K if (name == "output" or tied) else QT.Q4_K
        if name in ("attn_v", "ffn_down") and use_more_bits(layer, L):
            return QT.Q6_K
        return QT.Q4_K

    t = [matrix(p, "token_embd.weight", vocab, H, emb_std, wtype_of("token_embd"))]
    if arch == "llama":
        t.append(vector("rope_freqs.weight", llama3_rope_factors(hd, 500000.0)))
    for i in range(L):
        b = f"blk.{i}."
        t.append(vector(b + "attn_norm.weight", norm_weight(p + b + "attn_norm", H)))
        t.append(matrix(p, b + "attn_q.weight", nh * hd, H, std(H), wtype_of("attn_q", i)))
        t.append(matrix(p, b + "attn_k.weight", nkv * hd, H, std(H), wtype_of("attn_k", i)))
        t.append(matrix(p, b + "attn_v.weight", nkv * hd, H, std(H), wtype_of("attn_v", i)))
        if arch in ("qwen3", "gemma3", "hunyuan-dense"):
            t.append(vector(b + "attn_q_norm.weight", norm_weight(p + b + "attn_q_norm", hd)))
            t.append(vector(b + "attn_k_norm.weight", norm_weight(p + b + "attn_k_norm", hd)))
        t.append(matrix(p, b + "attn_output.weight", H, nh * hd, proj_gain * std(nh * hd),
                         wtype_of("attn_output", i)))
        if arch == "gemma3":
            t.append(vector(b + "post_attention_norm.weight", norm_weight(p + b + "post_attention_norm", H)))
        t.append(vector(b + "ffn_norm.weight", norm_weight(p + b + "ffn_norm", H)))
        t.append(matrix(p, b + "ffn_gate.weight", ff, H, std(H), wtype_of("ffn_gate", i)))
        t.append(matrix(p, b + "ffn_up.weight", ff, H, std(H), wtype_of("ffn_up", i)))
        t.append(matrix(p, b + "ffn_down.weight", H, ff, proj_gain * std(ff), wtype_of("ffn_down", i)))
        if arch == "gemma3":
            t.append(vector(b + "post_ffw_norm.weight", norm_weight(p + b + "post_ffw_norm", H)))
    t.append(vector("output_norm.weight",
                    (out_gain * norm_weight(p + "output_norm", H)).astype(np.float32)))
    if not tied:
        t.append(matrix(p, "output.weight", vocab, H, out_std, wtype_of("output")))
    return kv, t


def write_gguf(path, arch, name, kv, tok_kv, tensors, pre_override=None):
    tmp = path + ".tmp"
    w = gguf.GGUFWriter(tmp, arch)
    w.add_type("model")
    w.add_name(name)
    for k, v, vt in kv:
        w.add_key_value(k, v, vt)
    for k, v, vt, sub in tok_kv:
        if k == "tokenizer.ggml.pre" and pre_override is not None:
            v = pre_override
        w.add_key_value(k, v, vt, sub_type=sub)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    for t in tensors:
        w.add_tensor_info(t.name, t.shape, np.dtype(np.float32), t.nbytes(), raw_dtype=t.qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    fout = w.fout[0]
    for t in tensors:
        w.write_padding(fout, fout.tell())
        written = 0

        def write(a):
            nonlocal written
            a = np.ascontiguousarray(a)
            a.tofile(fout)
            written += a.nbytes
        t.make(write)
        assert written == t.nbytes(), (t.name, written, t.nbytes())
        w.write_padding(fout, written)
    w.close()
    os.replace(tmp, path)


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--arch", default=",".join(ARCHS))
    ap.add_argument("--type", default=",".join(TYPES))
    ap.add_argument("--shape", choices=["tiny", "qwen3-1.7b"], default="tiny")
    ap.add_argument("--tokenizer", action="append", default=[],
                    help="NAME=PATH of a tokenizer source (" + ", ".join(
                        f"{k}: {v}" for k, v in TOKENIZER_SOURCES.items()) + ")")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    self_check()

    sources = {k: os.path.join(models_dir(), v + ".gguf") for k, v in TOKENIZER_SOURCES.items()}
    for spec in args.tokenizer:
        k, v = spec.split("=", 1)
        if k not in sources:
            sys.exit(f"unknown tokenizer source {k!r} (known: {', '.join(sources)})")
        sources[k] = v

    def tok(k):
        path = sources[k]
        if not os.path.isfile(path):
            sys.exit(f"tokenizer source {path} is missing: fetch it with "
                     f"`cargo run --release -- fetch {TOKENIZER_SOURCES[k]}` or pass --tokenizer {k}=PATH")
        return tokenizer_kv(path)

    jobs = []
    if args.shape == "qwen3-1.7b":
        jobs.append(("qwen3", "q4_k_m", QWEN3_1_7B, "qwen", True, "qwen3-1.7b-q4_k_m",
                     "qwen3-1.7b", "Qwen3 1.7B shape, random weights"))
    else:
        for arch in args.arch.split(","):
            if arch not in SHAPES:
                sys.exit(f"unknown architecture {arch!r} (known: {', '.join(ARCHS)})")
            for wtype in args.type.split(","):
                if wtype not in TYPES:
                    sys.exit(f"unknown type {wtype!r} (known: {', '.join(TYPES)})")
                s = SHAPES[arch]
                shape = s["k"] if wtype == "q4_k" else s["small"]
                # f32 and q8_0 share their weights (q8_0 is the f32 file quantized).
                stream = f"{arch}-{'k' if wtype == 'q4_k' else 'small'}"
                jobs.append((arch, wtype, shape, s["tokenizer"], s["tied"], f"{arch}-{wtype}",
                             stream, f"tiny random {arch}"))

    manifest_path = os.path.join(args.out, "MANIFEST.json")
    manifest = {"versions": f"(gguf {_version('gguf')}, numpy {np.__version__})", "files": {}}
    if os.path.isfile(manifest_path):
        with open(manifest_path, encoding="utf-8") as f:
            old = json.load(f)
        if old.get("versions") == manifest["versions"]:
            manifest["files"] = old.get("files", {})
    for arch, wtype, shape, tsrc, tied, fname, stream, title in jobs:
        tkv = tok(tsrc)
        mix = "q4_k_m" if wtype == "q4_k_m" else None
        kv, tensors = build(stream, arch, shape, wtype if mix is None else "q4_k", n_tokens(tkv),
                            tied, mix=mix)
        path = os.path.join(args.out, fname + ".gguf")
        pre = "hunyuan-dense" if arch == "hunyuan-dense" else None
        write_gguf(path, arch, title, kv, tkv, tensors, pre_override=pre)
        digest = sha256(path)
        manifest["files"][fname + ".gguf"] = {"size": os.path.getsize(path), "sha256": digest}
        if not args.quiet:
            print(f"{path} {os.path.getsize(path)} {digest}")
    with open(manifest_path, "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write("\n")


def _version(package):
    try:
        from importlib.metadata import version
        return version(package)
    except Exception:  # pragma: no cover
        return "unknown"


if __name__ == "__main__":
    main()
