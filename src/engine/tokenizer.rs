//! Tokenizers built from a GGUF's embedded vocabulary (or a `tokenizer.json` beside it),
//! and a streaming decoder that never emits half a UTF-8 character.
//!
//! GGUF stores a BPE vocabulary (`tokenizer.ggml.tokens`), merges, token types, and the
//! name of the pre-tokenizer (`tokenizer.ggml.pre`). We translate that into the same
//! `tokenizer.json` structure the model's authors publish and let the `tokenizers` crate
//! do the work, so special tokens, byte-level decoding and normalisation follow the
//! reference implementation exactly.

use crate::engine::gguf::GgufFile;
use anyhow::{anyhow, bail, Context, Result};
use candle_core::quantized::gguf_file::Value;
use serde_json::{json, Value as Json};
use std::path::Path;
use std::str::FromStr;

/// Token type codes used by llama.cpp in `tokenizer.ggml.token_type`.
mod token_type {
    pub const CONTROL: i32 = 3;
    pub const USER_DEFINED: i32 = 4;
}

/// Qwen2's pre-tokenizer split pattern (contractions, letters, single digits, punctuation runs,
/// newlines, whitespace).
const QWEN2_PATTERN: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Llama-3 style pattern (digits in groups of up to three).
const LLAMA3_PATTERN: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

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
    /// Where the tokenizer came from: "gguf:<pre>" or a tokenizer.json path.
    pub source: String,
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
        "qwen2" | "deepseek-r1-qwen" => (Json::Null, split(QWEN2_PATTERN)),
        "llama3" | "llama-bpe" | "smaug-bpe" => (Json::Null, split(LLAMA3_PATTERN)),
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
            "pre-tokenizer {other:?} is not supported; put the model's tokenizer.json beside the GGUF file"
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
        let inner_and_source = match beside {
            Some(p) => (load_json(&p)?, p.display().to_string()),
            None => {
                let pre = gguf
                    .meta_str("tokenizer.ggml.pre")
                    .unwrap_or("default")
                    .to_string();
                (from_gguf(gguf, &pre)?, format!("gguf:{pre}"))
            }
        };
        Self::finish(gguf, inner_and_source.0, inner_and_source.1)
    }

    fn finish(gguf: &GgufFile, inner: tokenizers::Tokenizer, source: String) -> Result<Self> {
        let id = |k: &str| gguf.meta_usize(k).ok().map(|x| x as u32);
        let bos_id = id("tokenizer.ggml.bos_token_id");
        let mut eos_ids: Vec<u32> = id("tokenizer.ggml.eos_token_id").into_iter().collect();
        for extra in ["<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end|>"] {
            if let Some(t) = inner.token_to_id(extra) {
                if !eos_ids.contains(&t) {
                    eos_ids.push(t);
                }
            }
        }
        let text = |i: Option<u32>| i.and_then(|i| inner.id_to_token(i)).unwrap_or_default();
        Ok(Self {
            bos_token: text(bos_id),
            eos_token: text(id("tokenizer.ggml.eos_token_id")),
            bos_id,
            eos_ids,
            inner,
            source,
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
        self.bytes
            .get_or_init(|| super::constraint::token_bytes(&self.inner))
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

/// Build the `tokenizers` tokenizer described by the GGUF metadata.
pub fn from_gguf(gguf: &GgufFile, pre: &str) -> Result<tokenizers::Tokenizer> {
    let model = gguf.meta_str("tokenizer.ggml.model")?;
    if model != "gpt2" {
        bail!(
            "{}: tokenizer model {model:?} is not supported (only byte-level BPE, \"gpt2\"); put the model's tokenizer.json beside the GGUF file",
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
