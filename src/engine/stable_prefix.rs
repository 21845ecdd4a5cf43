//! Splitting a rendered prompt into its stable prefix (shared by many calls, cached once)
//! and the per-call suffix.
//!
//! The caller says where the per-call content starts (a message and a byte offset in it).
//! We render the conversation once with an invisible marker at that point: everything
//! before the marker is the stable prefix. Then we check the tokenization: the whole
//! prompt's tokens must begin with the prefix's tokens. Where a BPE merge crosses the
//! boundary they do not, and only the common token prefix is reused — logged, because
//! such silent misses are exactly what makes other engines' prefix caches useless.

use super::chat_template::{ChatTemplate, Message};
use crate::engine::generate::common_prefix;
use crate::engine::tokenizer::Tokenizer;
use anyhow::{bail, Result};

const MARKER: &str = "\u{E000}quire-split\u{E000}";

/// Where the per-call content begins: in message `message`, at byte `offset` of its content.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SplitPoint {
    /// Index of the message.
    pub message: usize,
    /// Byte offset in its content.
    pub offset: usize,
}

/// A rendered, tokenized prompt with its stable prefix identified.
#[derive(Debug, Clone)]
pub struct PromptSplit {
    /// The whole prompt text.
    pub text: String,
    /// Its tokens.
    pub tokens: Vec<u32>,
    /// Byte length of the stable prefix text.
    pub stable_text_len: usize,
    /// Tokens of the stable prefix text on its own.
    pub stable_text_tokens: usize,
    /// Leading tokens shared by the whole prompt and the stable prefix (what can be reused).
    pub stable_tokens: usize,
}

impl PromptSplit {
    /// Whether a token merge crossed the prefix/suffix boundary.
    pub fn boundary_merged(&self) -> bool {
        self.stable_tokens < self.stable_text_tokens
    }
}

/// Render `messages` (with a generation prompt) and split them at `at`.
pub fn split_prompt(
    template: &ChatTemplate,
    tokenizer: &Tokenizer,
    messages: &[Message],
    at: SplitPoint,
) -> Result<PromptSplit> {
    let Some(m) = messages.get(at.message) else {
        bail!(
            "split point names message {} of {}",
            at.message,
            messages.len()
        );
    };
    if !m.content.is_char_boundary(at.offset) {
        bail!("split point {} is not a character boundary", at.offset);
    }
    let mut marked = messages.to_vec();
    marked[at.message].content.insert_str(at.offset, MARKER);
    let with_marker = template.render(&marked, true)?;
    let text = template.render(messages, true)?;
    let stable_text_len = match with_marker.find(MARKER) {
        Some(pos) if with_marker.replacen(MARKER, "", 1) == text => pos,
        _ => {
            eprintln!(
                "warning: the chat template ({}) transforms message text, so the stable prefix cannot be located; no prefix reuse for this prompt",
                template.origin
            );
            0
        }
    };
    let tokens = tokenizer.encode(&text)?;
    let prefix_tokens = if stable_text_len > 0 {
        tokenizer.encode(&text[..stable_text_len])?
    } else {
        Vec::new()
    };
    let stable_tokens = common_prefix(&tokens, &prefix_tokens);
    let split = PromptSplit {
        stable_text_len,
        stable_text_tokens: prefix_tokens.len(),
        stable_tokens,
        text,
        tokens,
    };
    if split.boundary_merged() {
        eprintln!(
            "note: a token merge crosses the stable-prefix boundary; reusing {} of {} prefix tokens",
            split.stable_tokens, split.stable_text_tokens
        );
    }
    Ok(split)
}
