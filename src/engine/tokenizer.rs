//! Tokenizers built from a GGUF's embedded vocabulary (or a `tokenizer.json` beside it),
//! and a streaming decoder that never emits half a UTF-8 character.
//!
//! GGUF stores one of two vocabularies (`tokenizer.ggml.model`):
//!
//! - `"gpt2"`, byte-level BPE (Qwen, SmolLM, Llama 3, Hy-MT): tokens, merges, token types and
//!   the name of the pre-tokenizer (`tokenizer.ggml.pre`). We translate that into the same
//!   `tokenizer.json` structure the model's authors publish and let the `tokenizers` crate
//!   do the work, so special tokens, byte-level decoding and normalisation follow the
//!   reference implementation exactly.
//! - `"llama"`, SentencePiece BPE (Gemma, Llama 2, Mistral): tokens with scores, token
//!   types and byte tokens (`<0x0A>`), no merges. llama.cpp splits the text into characters
//!   (spaces written `▁`), merges the adjacent pair whose concatenation is in the vocabulary
//!   with the highest score (leftmost first on a tie) until none is left, and spells what is
//!   still unknown as byte tokens. [`spm_tokenizer`] builds the `tokenizers` BPE model that
//!   does the same: one merge per way of splitting a token into two vocabulary pieces,
//!   ranked by the token's score, with byte fallback.
//!
//! Either way, control and user-defined tokens are matched in the text first, as llama.cpp
//! does with `special = true`, and llama.cpp's token ids are the reference
//! (`tests/tokenizer_golden.rs`).

use crate::engine::gguf::GgufFile;
use anyhow::{anyhow, bail, Context, Result};
use candle_core::quantized::gguf_file::Value;
use serde_json::{json, Value as Json};
use std::path::Path;
use std::str::FromStr;

/// Token type codes used by llama.cpp in `tokenizer.ggml.token_type`.
mod token_type {
    pub const NORMAL: i32 = 1;
    pub const UNKNOWN: i32 = 2;
    pub const CONTROL: i32 = 3;
    pub const USER_DEFINED: i32 = 4;
}

/// SentencePiece's visible space: what `" "` is written as inside SPM tokens.
const SPM_SPACE: &str = "\u{2581}";

/// `tokenizer.ggml.pre` names Quire knows for byte-level BPE (`"gpt2"`) vocabularies
/// (SentencePiece vocabularies have no pre-tokenizer; their `pre` is ignored).
pub const SUPPORTED_PRE: &[&str] = &[
    "qwen2",
    "deepseek-r1-qwen",
    "hunyuan",
    "qwen35",
    "hunyuan-dense",
    "deepseek-v3",
    "joyai-llm",
    "llama3",
    "llama-bpe",
    "smaug-bpe",
    "dbrx",
    "smollm",
    "starcoder",
    "refact",
    "gpt2",
    "default",
];

/// Qwen2's pre-tokenizer split pattern (contractions, letters, single digits, punctuation runs,
/// newlines, whitespace).
const QWEN2_PATTERN: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Llama-3 style pattern (digits in groups of up to three).
const LLAMA3_PATTERN: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Qwen3.5's pattern: Qwen2's with combining marks (`\p{M}`) kept with their letters.
const QWEN35_PATTERN: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// DeepSeek-V3's three patterns, applied one after the other (llama.cpp's
/// `LLAMA_VOCAB_PRE_TYPE_DEEPSEEK3_LLM`, which Tencent's Hunyuan dense models and Hy-MT use as
/// `"hunyuan-dense"`): digits in groups of up to three, runs of CJK ideographs and kana, then
/// words, punctuation runs, newlines and whitespace.
const DEEPSEEK3_PATTERNS: [&str; 3] = [
    r"\p{N}{1,3}",
    r"[一-龥぀-ゟ゠-ヿ]+",
    r"[!#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~\x22][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
];

/// A tokenizer plus the ids the engine needs to know about.
pub struct Tokenizer {
    /// The underlying `tokenizers` tokenizer.
    pub inner: tokenizers::Tokenizer,
    /// Beginning-of-sequence token, if the model has one.
    pub bos_id: Option<u32>,
    /// End-of-sequence token ids (EOS, and `<|im_end|>` / `<|endoftext|>` when present).
    pub eos_ids: Vec<u32>,
    /// Text of the BOS token (for chat templates).
    pub bos_token: String,
    /// Text of the EOS token (for chat templates).
    pub eos_token: String,
    /// Where the tokenizer came from: "gguf:<pre>", "gguf:llama" or a tokenizer.json path.
    pub source: String,
    /// The kind of vocabulary (what `quire inspect` shows).
    pub kind: TokenizerKind,
    /// Whether the model expects a BOS token at the start of a prompt
    /// (`tokenizer.ggml.add_bos_token`; when absent, true for SentencePiece vocabularies and
    /// false for byte-level BPE, as llama.cpp decides). [`Tokenizer::encode`] never adds it.
    pub add_bos: bool,
    /// The bytes of every token id, built on first use (constrained decoding).
    bytes: std::sync::OnceLock<Vec<Vec<u8>>>,
}

fn string_array(gguf: &GgufFile, key: &str) -> Result<Vec<String>> {
    gguf.meta(key)?
        .to_vec()
        .map_err(|e| anyhow!("{}: {key}: {e}", gguf.path.display()))?
        .iter()
        .map(|v| {
            v.to_string()
                .cloned()
                .map_err(|e| anyhow!("{}: {key}: {e}", gguf.path.display()))
        })
        .collect()
}

fn int_array(gguf: &GgufFile, key: &str) -> Result<Vec<i32>> {
    let Some(v) = gguf.meta_opt(key) else {
        return Ok(Vec::new());
    };
    v.to_vec()
        .map_err(|e| anyhow!("{key}: {e}"))?
        .iter()
        .map(|v| match v {
            Value::I32(x) => Ok(*x),
            Value::U32(x) => Ok(*x as i32),
            Value::I8(x) => Ok(*x as i32),
            Value::U8(x) => Ok(*x as i32),
            _ => bail!("{key}: not an integer array"),
        })
        .collect()
}

/// The kind of vocabulary a tokenizer was built from.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TokenizerKind {
    /// Byte-level BPE (`tokenizer.ggml.model = "gpt2"`) with the named pre-tokenizer.
    ByteLevelBpe {
        /// `tokenizer.ggml.pre`.
        pre: String,
    },
    /// SentencePiece BPE (`tokenizer.ggml.model = "llama"`) with byte fallback.
    SentencePiece {
        /// Whether a `▁` is written before the text (`tokenizer.ggml.add_space_prefix`).
        add_space_prefix: bool,
    },
    /// A `tokenizer.json` found beside the GGUF file.
    TokenizerJson {
        /// Its path.
        path: String,
    },
}

impl std::fmt::Display for TokenizerKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::ByteLevelBpe { pre } => {
                write!(f, "byte-level BPE (\"gpt2\", pre-tokenizer {pre:?})")
            }
            Self::SentencePiece { add_space_prefix } => write!(
                f,
                "SentencePiece BPE (\"llama\", byte fallback, add_space_prefix {add_space_prefix})"
            ),
            Self::TokenizerJson { path } => write!(f, "tokenizer.json ({path})"),
        }
    }
}

fn float_array(gguf: &GgufFile, key: &str) -> Result<Vec<f32>> {
    let Some(v) = gguf.meta_opt(key) else {
        return Ok(Vec::new());
    };
    v.to_vec()
        .map_err(|e| anyhow!("{}: {key}: {e}", gguf.path.display()))?
        .iter()
        .map(|v| match v {
            Value::F32(x) => Ok(*x),
            Value::F64(x) => Ok(*x as f32),
            _ => bail!("{}: {key}: not a float array", gguf.path.display()),
        })
        .collect()
}

fn meta_bool(gguf: &GgufFile, key: &str) -> Option<bool> {
    match gguf.meta_opt(key)? {
        Value::Bool(b) => Some(*b),
        Value::U8(x) => Some(*x != 0),
        Value::I8(x) => Some(*x != 0),
        Value::U32(x) => Some(*x != 0),
        Value::I32(x) => Some(*x != 0),
        _ => None,
    }
}

fn byte_level() -> Json {
    json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false})
}

/// The `normalizer` and `pre_tokenizer` sections for a `tokenizer.ggml.pre` name.
fn pre_tokenizer_for(pre: &str) -> Result<(Json, Json)> {
    let split = |pattern: &str| {
        json!({"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": false},
            byte_level(),
        ]})
    };
    Ok(match pre {
        // Qwen's tokenizer.json also NFC-normalises; llama.cpp (our golden reference) does
        // not, and without it decode(encode(text)) gives back every byte.
        "qwen2" | "deepseek-r1-qwen" | "hunyuan" => (Json::Null, split(QWEN2_PATTERN)),
        "qwen35" => (Json::Null, split(QWEN35_PATTERN)),
        // Each pattern splits the pieces the one before it left (llama.cpp's regex list).
        "hunyuan-dense" | "deepseek-v3" | "joyai-llm" => {
            let mut steps: Vec<Json> = DEEPSEEK3_PATTERNS
                .iter()
                .map(|p| json!({"type": "Split", "pattern": {"Regex": p}, "behavior": "Isolated", "invert": false}))
                .collect();
            steps.push(byte_level());
            (Json::Null, json!({"type": "Sequence", "pretokenizers": steps}))
        }
        "llama3" | "llama-bpe" | "smaug-bpe" | "dbrx" => (Json::Null, split(LLAMA3_PATTERN)),
        // GPT-2 byte-level regex with each digit split off first (SmolLM, StarCoder).
        "smollm" | "starcoder" | "refact" => (
            Json::Null,
            json!({"type": "Sequence", "pretokenizers": [
                {"type": "Digits", "individual_digits": true},
                {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
            ]}),
        ),
        "gpt2" | "default" => (
            Json::Null,
            json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}),
        ),
        other => bail!(
            "byte-level BPE pre-tokenizer (tokenizer.ggml.pre) {other:?} is not supported (supported: {}); put the model's tokenizer.json beside the GGUF file",
            SUPPORTED_PRE.join(", ")
        ),
    })
}

impl Tokenizer {
    /// Load `tokenizer.json` beside the model file if present, else build from GGUF metadata.
    pub fn for_model(gguf: &GgufFile) -> Result<Self> {
        let beside = gguf
            .path
            .parent()
            .map(|p| p.join("tokenizer.json"))
            .filter(|p| p.is_file());
        let (inner, source, kind) = match beside {
            Some(p) => {
                let path = p.display().to_string();
                (
                    load_json(&p)?,
                    path.clone(),
                    TokenizerKind::TokenizerJson { path },
                )
            }
            None => {
                let kind = kind_of(gguf)?;
                let source = match &kind {
                    TokenizerKind::ByteLevelBpe { pre } => format!("gguf:{pre}"),
                    _ => "gguf:llama".to_string(),
                };
                (build(gguf, &kind)?, source, kind)
            }
        };
        Self::finish(gguf, inner, source, kind)
    }

    fn finish(
        gguf: &GgufFile,
        inner: tokenizers::Tokenizer,
        source: String,
        kind: TokenizerKind,
    ) -> Result<Self> {
        let id = |k: &str| gguf.meta_usize(k).ok().map(|x| x as u32);
        let bos_id = id("tokenizer.ggml.bos_token_id");
        let mut eos_ids: Vec<u32> = id("tokenizer.ggml.eos_token_id").into_iter().collect();
        // End-of-turn markers a chat template writes (Gemma's `<end_of_turn>`), which
        // llama.cpp also treats as the end of generation.
        for extra in [
            "<|im_end|>",
            "<|endoftext|>",
            "<|eot_id|>",
            "<|end|>",
            "<end_of_turn>",
            "<eos>",
            // Hunyuan-MT / HY-MT's end of a reply.
            "<|eos|>",
        ] {
            if let Some(t) = inner.token_to_id(extra) {
                if !eos_ids.contains(&t) {
                    eos_ids.push(t);
                }
            }
        }
        let spm = gguf.meta_str("tokenizer.ggml.model").ok() == Some("llama");
        let add_bos = meta_bool(gguf, "tokenizer.ggml.add_bos_token").unwrap_or(spm);
        let text = |i: Option<u32>| i.and_then(|i| inner.id_to_token(i)).unwrap_or_default();
        Ok(Self {
            bos_token: text(bos_id),
            eos_token: text(id("tokenizer.ggml.eos_token_id")),
            bos_id,
            eos_ids,
            add_bos,
            inner,
            source,
            kind,
            bytes: std::sync::OnceLock::new(),
        })
    }

    /// Token ids of `text`; special-token strings in the text become their ids. No BOS is
    /// added: chat templates write it when the model wants it.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        Ok(self
            .inner
            .encode(text, false)
            .map_err(|e| anyhow!("tokenization failed: {e}"))?
            .get_ids()
            .to_vec())
    }

    /// Text of `ids` (special tokens included when `skip_special` is false).
    pub fn decode(&self, ids: &[u32], skip_special: bool) -> Result<String> {
        self.inner
            .decode(ids, skip_special)
            .map_err(|e| anyhow!("detokenization failed: {e}"))
    }

    /// The bytes each token id stands for (see [`super::constraint::token_bytes`]).
    pub fn token_bytes(&self) -> &[Vec<u8>] {
        self.bytes.get_or_init(|| {
            let spm = matches!(self.kind, TokenizerKind::SentencePiece { .. });
            super::constraint::token_bytes(&self.inner, spm)
        })
    }

    /// Vocabulary size including added tokens.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }
}

fn load_json(path: &Path) -> Result<tokenizers::Tokenizer> {
    tokenizers::Tokenizer::from_file(path)
        .map_err(|e| anyhow!("{}: cannot load tokenizer: {e}", path.display()))
}

/// The kind of vocabulary the GGUF metadata declares, or an error naming the file, what
/// Quire supports and what to do when it is not one Quire can build.
pub fn kind_of(gguf: &GgufFile) -> Result<TokenizerKind> {
    let model = gguf.meta_str("tokenizer.ggml.model")?;
    match model {
        "gpt2" => {
            let pre = gguf
                .meta_str("tokenizer.ggml.pre")
                .unwrap_or("default")
                .to_string();
            if !SUPPORTED_PRE.contains(&pre.as_str()) {
                bail!(
                    "{}: byte-level BPE pre-tokenizer (tokenizer.ggml.pre) {pre:?} is not supported (supported: {}); put the model's tokenizer.json beside the GGUF file",
                    gguf.path.display(),
                    SUPPORTED_PRE.join(", ")
                );
            }
            Ok(TokenizerKind::ByteLevelBpe { pre })
        }
        // llama.cpp's default for SentencePiece vocabularies is a space prefix.
        "llama" => Ok(TokenizerKind::SentencePiece {
            add_space_prefix: meta_bool(gguf, "tokenizer.ggml.add_space_prefix").unwrap_or(true),
        }),
        other => bail!(
            "{}: tokenizer model (tokenizer.ggml.model) {other:?} is not supported (supported: \"gpt2\" byte-level BPE, \"llama\" SentencePiece BPE); put the model's tokenizer.json beside the GGUF file",
            gguf.path.display()
        ),
    }
}

fn build(gguf: &GgufFile, kind: &TokenizerKind) -> Result<tokenizers::Tokenizer> {
    match kind {
        TokenizerKind::ByteLevelBpe { pre } => from_gguf(gguf, pre),
        TokenizerKind::SentencePiece { add_space_prefix } => {
            let tokens = string_array(gguf, "tokenizer.ggml.tokens")?;
            let scores = float_array(gguf, "tokenizer.ggml.scores")?;
            let types = int_array(gguf, "tokenizer.ggml.token_type")?;
            let unk = gguf
                .meta_usize("tokenizer.ggml.unknown_token_id")
                .ok()
                .map(|x| x as u32);
            spm_tokenizer(&tokens, &scores, &types, *add_space_prefix, unk).with_context(|| {
                format!(
                    "{}: cannot build the SentencePiece tokenizer",
                    gguf.path.display()
                )
            })
        }
        TokenizerKind::TokenizerJson { path } => load_json(Path::new(path)),
    }
}

/// Build the `tokenizers` tokenizer described by the GGUF metadata of a byte-level BPE
/// (`"gpt2"`) vocabulary with pre-tokenizer `pre`; SentencePiece vocabularies go through
/// [`Tokenizer::for_model`].
pub fn from_gguf(gguf: &GgufFile, pre: &str) -> Result<tokenizers::Tokenizer> {
    let model = gguf.meta_str("tokenizer.ggml.model")?;
    if model != "gpt2" {
        bail!(
            "{}: tokenizer model {model:?} is not byte-level BPE (\"gpt2\"); build it with Tokenizer::for_model",
            gguf.path.display()
        );
    }
    let tokens = string_array(gguf, "tokenizer.ggml.tokens")?;
    let merges = string_array(gguf, "tokenizer.ggml.merges")?;
    let types = int_array(gguf, "tokenizer.ggml.token_type")?;
    let (normalizer, pre_tokenizer) =
        pre_tokenizer_for(pre).with_context(|| gguf.path.display().to_string())?;

    let mut vocab = serde_json::Map::with_capacity(tokens.len());
    let mut added = Vec::new();
    for (i, tok) in tokens.iter().enumerate() {
        vocab.insert(tok.clone(), json!(i));
        let ty = types.get(i).copied().unwrap_or(1);
        if ty == token_type::CONTROL || ty == token_type::USER_DEFINED {
            added.push(json!({
                "id": i, "content": tok, "single_word": false, "lstrip": false,
                "rstrip": false, "normalized": false, "special": ty == token_type::CONTROL,
            }));
        }
    }
    let merges: Vec<Json> = merges.into_iter().map(Json::String).collect();
    let spec = json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": normalizer,
        "pre_tokenizer": pre_tokenizer,
        "post_processor": byte_level(),
        "decoder": byte_level(),
        "model": {
            "type": "BPE", "dropout": null, "unk_token": null,
            "continuing_subword_prefix": null, "end_of_word_suffix": null,
            "fuse_unk": false, "byte_fallback": false, "ignore_merges": pre.starts_with("llama"),
            "vocab": vocab, "merges": merges,
        },
    });
    tokenizers::Tokenizer::from_str(&spec.to_string()).map_err(|e| {
        anyhow!(
            "{}: cannot build tokenizer from GGUF metadata: {e}",
            gguf.path.display()
        )
    })
}

/// A SentencePiece BPE tokenizer that gives llama.cpp's token ids: `tokens`, their `scores`
/// and llama.cpp token `types` as a `"llama"` GGUF stores them; `add_space_prefix` writes a
/// `▁` before each stretch of text (at the start and after every control or user-defined
/// token, as llama.cpp does); `unk` is the unknown token, used only when a character has no
/// byte tokens.
///
/// llama.cpp merges the adjacent pair of pieces whose concatenation is a token, highest
/// score first. A BPE merge list says the same thing as pairs: for every token, each way of
/// cutting it into two tokens is a merge, ranked by the whole token's score (ties by id,
/// then by where it is cut). Text is split into characters with spaces as `▁`, merged, and
/// what is left unknown becomes byte tokens (`<0xE4>`). Control, unknown and user-defined
/// tokens are added tokens, matched in the raw text before any of that.
///
/// Two things llama.cpp can do that a merge list cannot, neither of which occurs in real
/// SentencePiece vocabularies (checked on Gemma 3's 262,144 tokens): a token holding a
/// character that is not itself a token is never formed here (llama.cpp would merge into
/// it), and two different tokens with the same score are merged in id order here, leftmost
/// first in llama.cpp (real vocabularies give their normal tokens distinct scores).
pub fn spm_tokenizer(
    tokens: &[String],
    scores: &[f32],
    types: &[i32],
    add_space_prefix: bool,
    unk: Option<u32>,
) -> Result<tokenizers::Tokenizer> {
    use tokenizers::decoders::DecoderWrapper;
    use tokenizers::models::bpe::{Vocab, BPE};
    use tokenizers::normalizers::NormalizerWrapper;
    use tokenizers::AddedToken;

    if scores.len() != tokens.len() {
        bail!(
            "tokenizer.ggml.scores has {} entries for {} tokens",
            scores.len(),
            tokens.len()
        );
    }
    // Text → id as llama.cpp looks tokens up (a repeated text keeps its last id).
    let mut vocab = Vocab::with_capacity(tokens.len());
    for (i, t) in tokens.iter().enumerate() {
        vocab.insert(t.clone(), i as u32);
    }
    let canonical = |i: usize| vocab.get(tokens[i].as_str()) == Some(&(i as u32));
    // (score, token id, cut) for every cut of a token into two tokens.
    let mut cuts: Vec<(f32, u32, usize)> = Vec::new();
    for (i, t) in tokens.iter().enumerate() {
        if !canonical(i) {
            continue;
        }
        for (at, _) in t.char_indices().skip(1) {
            if vocab.contains_key(&t[..at]) && vocab.contains_key(&t[at..]) {
                // +0.0 makes -0.0 equal to 0.0, as llama.cpp's float comparison has it.
                cuts.push((scores[i] + 0.0, i as u32, at));
            }
        }
    }
    cuts.sort_unstable_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
    let merges: Vec<(String, String)> = cuts
        .iter()
        .map(|&(_, i, at)| {
            let t = &tokens[i as usize];
            (t[..at].to_string(), t[at..].to_string())
        })
        .collect();
    // Added tokens, before the vocabulary moves into the model.
    let (mut special, mut user) = (Vec::new(), Vec::new());
    for (i, t) in tokens.iter().enumerate() {
        if t.is_empty() || !canonical(i) {
            continue;
        }
        match types.get(i).copied().unwrap_or(token_type::NORMAL) {
            token_type::CONTROL | token_type::UNKNOWN => {
                special.push(AddedToken::from(t.clone(), true).normalized(false))
            }
            token_type::USER_DEFINED => {
                user.push(AddedToken::from(t.clone(), false).normalized(false))
            }
            _ => {}
        }
    }
    let mut bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .byte_fallback(true);
    if let Some(u) = unk.and_then(|u| tokens.get(u as usize)) {
        bpe = bpe.unk_token(u.clone());
    }
    let bpe = bpe
        .build()
        .map_err(|e| anyhow!("cannot build the BPE model: {e}"))?;

    let replace_space =
        json!({"type": "Replace", "pattern": {"String": " "}, "content": SPM_SPACE});
    let normalizer = if add_space_prefix {
        json!({"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": SPM_SPACE},
            replace_space,
        ]})
    } else {
        replace_space
    };
    let mut decoders = vec![
        json!({"type": "Replace", "pattern": {"String": SPM_SPACE}, "content": " "}),
        json!({"type": "ByteFallback"}),
        json!({"type": "Fuse"}),
    ];
    if add_space_prefix {
        // The one `▁` the encoder wrote before the text.
        decoders.push(json!({"type": "Strip", "content": " ", "start": 1, "stop": 0}));
    }
    let normalizer: NormalizerWrapper = serde_json::from_value(normalizer)?;
    let decoder: DecoderWrapper =
        serde_json::from_value(json!({"type": "Sequence", "decoders": decoders}))?;

    let mut tok = tokenizers::Tokenizer::new(bpe);
    tok.with_normalizer(Some(normalizer));
    tok.with_decoder(Some(decoder));
    tok.add_special_tokens(&special);
    tok.add_tokens(&user);
    Ok(tok)
}

/// Incremental detokenizer: feed token ids, get text pieces that are always whole UTF-8
/// characters (a multi-byte character split over several tokens is held back until
/// complete).
pub struct TokenStream<'a> {
    tokenizer: &'a Tokenizer,
    ids: Vec<u32>,
    prev: usize,
    current: usize,
    /// Byte length of the decoded `ids[prev..current]` (text already emitted).
    prev_text_len: usize,
}

impl<'a> TokenStream<'a> {
    /// A stream over `tokenizer`.
    pub fn new(tokenizer: &'a Tokenizer) -> Self {
        Self {
            tokenizer,
            ids: Vec::new(),
            prev: 0,
            current: 0,
            prev_text_len: 0,
        }
    }

    /// Add one token; returns the newly completed text, if any.
    pub fn push(&mut self, id: u32) -> Result<Option<String>> {
        self.ids.push(id);
        let text = self.tokenizer.decode(&self.ids[self.prev..], false)?;
        let done = self.prev_text_len;
        if text.len() > done && !text.ends_with('\u{FFFD}') && text.is_char_boundary(done) {
            let piece = text[done..].to_string();
            self.advance()?;
            Ok(Some(piece))
        } else {
            Ok(None)
        }
    }

    /// Move the window: the tokens emitted so far become the context of the next piece.
    fn advance(&mut self) -> Result<()> {
        self.prev = self.current;
        self.current = self.ids.len();
        self.prev_text_len = self
            .tokenizer
            .decode(&self.ids[self.prev..self.current], false)?
            .len();
        Ok(())
    }

    /// Whatever text is still held back (possibly with a replacement character).
    pub fn finish(&mut self) -> Result<Option<String>> {
        let text = self.tokenizer.decode(&self.ids[self.prev..], false)?;
        let done = self.prev_text_len;
        if text.len() > done && text.is_char_boundary(done) {
            let piece = text[done..].to_string();
            self.advance()?;
            Ok(Some(piece))
        } else {
            Ok(None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A tiny SentencePiece vocabulary: (text, score, llama.cpp token type). Scores are
    /// distinct among the mergeable tokens, as in real vocabularies (Gemma's 255,474 normal
    /// tokens have as many scores).
    fn tiny() -> Vec<(String, f32, i32)> {
        let mut v: Vec<(String, f32, i32)> = vec![
            ("<unk>".into(), 0.0, token_type::UNKNOWN),
            ("<s>".into(), 0.0, token_type::CONTROL),
            ("</s>".into(), 0.0, token_type::CONTROL),
            ("\n".into(), 0.0, token_type::USER_DEFINED),
            ("<b>".into(), 0.0, token_type::USER_DEFINED),
        ];
        for b in 0..=255u8 {
            v.push((format!("<0x{b:02X}>"), 0.0, 6));
        }
        for (t, s) in [
            ("▁", -1.0),
            ("a", -2.0),
            ("b", -3.0),
            ("c", -4.0),
            ("é", -5.0),
            ("bc", -6.0),
            ("ab", -7.0),
            ("▁a", -8.0),
            ("abc", -9.0),
            ("▁ab", -10.0),
            ("ca", -11.0),
            ("▁▁", -12.0),
            ("cab", -13.0),
            ("aa", -14.0),
            ("aaa", -15.0),
            ("▁c", -16.0),
            ("<", -17.0),
            (">", -18.0),
            ("b>", -19.0),
        ] {
            v.push((t.into(), s, token_type::NORMAL));
        }
        v
    }

    fn build(add_space_prefix: bool) -> tokenizers::Tokenizer {
        let v = tiny();
        let tokens: Vec<String> = v.iter().map(|t| t.0.clone()).collect();
        let scores: Vec<f32> = v.iter().map(|t| t.1).collect();
        let types: Vec<i32> = v.iter().map(|t| t.2).collect();
        spm_tokenizer(&tokens, &scores, &types, add_space_prefix, Some(0)).unwrap()
    }

    /// llama.cpp's SentencePiece tokenization written plainly (the test oracle): special
    /// tokens cut out longest first, a space prefix before each stretch of text after the
    /// start or a special token, then the best-scoring adjacent pair merged (leftmost on a
    /// tie) until none is in the vocabulary, and unknown pieces as byte tokens.
    fn reference(add_space_prefix: bool, text: &str) -> Vec<u32> {
        let v = tiny();
        let id = |t: &str| v.iter().rposition(|x| x.0 == t).map(|i| i as u32);
        let mut specials: Vec<usize> = (0..v.len()).filter(|&i| matches!(v[i].2, 2..=4)).collect();
        specials.sort_by_key(|&i| std::cmp::Reverse(v[i].0.len()));
        // Fragments: Ok(text) or Err(special id).
        let mut frags: Vec<Result<String, u32>> = vec![Ok(text.to_string())];
        for &s in &specials {
            let pat = v[s].0.as_str();
            frags = frags
                .into_iter()
                .flat_map(|f| match f {
                    Ok(t) => {
                        let mut out = Vec::new();
                        let mut rest = t.as_str();
                        while let Some(at) = rest.find(pat) {
                            if at > 0 {
                                out.push(Ok(rest[..at].to_string()));
                            }
                            out.push(Err(s as u32));
                            rest = &rest[at + pat.len()..];
                        }
                        if !rest.is_empty() {
                            out.push(Ok(rest.to_string()));
                        }
                        out
                    }
                    special => vec![special],
                })
                .collect();
        }
        let mut ids = Vec::new();
        let mut prev_special = true;
        for f in frags {
            let t = match f {
                Err(s) => {
                    ids.push(s);
                    prev_special = true;
                    continue;
                }
                Ok(t) => t,
            };
            let prefix = if add_space_prefix && prev_special {
                " "
            } else {
                ""
            };
            prev_special = false;
            let t = format!("{prefix}{t}").replace(' ', "▁");
            let mut syms: Vec<String> = t.chars().map(String::from).collect();
            loop {
                let mut best: Option<(usize, f32)> = None;
                for i in 0..syms.len().saturating_sub(1) {
                    if let Some(j) = id(&format!("{}{}", syms[i], syms[i + 1])) {
                        let s = v[j as usize].1;
                        if best.is_none_or(|(_, b)| s > b) {
                            best = Some((i, s));
                        }
                    }
                }
                let Some((i, _)) = best else { break };
                let right = syms.remove(i + 1);
                syms[i].push_str(&right);
            }
            for s in syms {
                match id(&s) {
                    Some(j) => ids.push(j),
                    None => ids.extend(s.bytes().map(|b| id(&format!("<0x{b:02X}>")).unwrap())),
                }
            }
        }
        ids
    }

    fn encode(t: &tokenizers::Tokenizer, text: &str) -> Vec<u32> {
        t.encode(text, false).unwrap().get_ids().to_vec()
    }

    fn pieces(t: &tokenizers::Tokenizer, text: &str) -> Vec<String> {
        encode(t, text)
            .iter()
            .map(|&i| t.id_to_token(i).unwrap())
            .collect()
    }

    #[test]
    fn merges_follow_scores_not_order_in_the_text() {
        let t = build(false);
        // "bc" outscores "ab", so "abc" is a + bc, then the whole token.
        assert_eq!(pieces(&t, "abc"), ["abc"]);
        // "ab" outscores "ca" although "ca" comes first: c + ab, then "cab".
        assert_eq!(pieces(&t, "cab"), ["cab"]);
        assert_eq!(pieces(&t, "cabb"), ["cab", "b"]);
        assert_eq!(pieces(&t, "a b"), ["a", "▁", "b"]);
        assert_eq!(encode(&t, "cab"), reference(false, "cab"));
    }

    #[test]
    fn space_prefix_before_text_and_after_special_tokens() {
        let on = build(true);
        let off = build(false);
        assert_eq!(pieces(&on, "ab c"), ["▁ab", "▁c"]);
        assert_eq!(pieces(&off, "ab c"), ["ab", "▁c"]);
        // After a control or user-defined token the next stretch of text gets its own `▁`
        // (llama.cpp's `is_prev_special`).
        assert_eq!(pieces(&on, "a</s>a\na"), ["▁a", "</s>", "▁a", "\n", "▁a"]);
        assert_eq!(pieces(&off, "a</s>a\na"), ["a", "</s>", "a", "\n", "a"]);
        assert!(encode(&on, "").is_empty());
        // Decoding removes the one prefix the encoder wrote, nothing else.
        let ids = encode(&on, " ab");
        assert_eq!(on.decode(&ids, false).unwrap(), " ab");
        assert_eq!(off.decode(&encode(&off, " ab"), false).unwrap(), " ab");
    }

    #[test]
    fn unknown_characters_fall_back_to_bytes_and_decode_back() {
        let t = build(false);
        // 中 is not in the vocabulary: its three UTF-8 bytes; é is.
        assert_eq!(pieces(&t, "a中é"), ["a", "<0xE4>", "<0xB8>", "<0xAD>", "é"]);
        assert_eq!(t.decode(&encode(&t, "a中é"), false).unwrap(), "a中é");
    }

    #[test]
    fn user_defined_tokens_are_matched_before_merging() {
        let t = build(false);
        // "<b>" is a user-defined token: it is cut out of the text as a whole even though
        // "<" + "b>" would also merge, and it is not special (kept when decoding skips those).
        let ids = encode(&t, "a<b>b");
        assert_eq!(pieces(&t, "a<b>b"), ["a", "<b>", "b"]);
        assert_eq!(t.decode(&ids, true).unwrap(), "a<b>b");
        assert_eq!(t.decode(&encode(&t, "a</s>"), true).unwrap(), "a");
    }

    #[test]
    fn every_supported_pre_tokenizer_builds() {
        for pre in SUPPORTED_PRE {
            let (normalizer, pre_tokenizer) = pre_tokenizer_for(pre).unwrap();
            let spec = json!({"normalizer": normalizer, "pre_tokenizer": pre_tokenizer,
                "model": {"type": "BPE", "vocab": {}, "merges": []}});
            tokenizers::Tokenizer::from_str(&spec.to_string())
                .unwrap_or_else(|e| panic!("{pre}: {e}"));
        }
        let err = pre_tokenizer_for("nonesuch").unwrap_err().to_string();
        assert!(
            err.contains("hunyuan-dense") && err.contains("tokenizer.json"),
            "{err}"
        );
    }

    proptest! {
        #[test]
        fn matches_llama_cpp_algorithm(
            text in proptest::collection::vec(
                proptest::sample::select(vec!["a", "b", "c", " ", "  ", "\n", "é", "中", "<", "b>", "<s>", "</s>", "<b>", "aa"]),
                0..24,
            ).prop_map(|v| v.concat()),
            prefix in any::<bool>(),
        ) {
            let t = build(prefix);
            prop_assert_eq!(encode(&t, &text), reference(prefix, &text), "{:?}", text);
        }
    }
}
