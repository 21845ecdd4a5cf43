//! Counting tokens for a model that runs elsewhere: with the model's own tokenizer and
//! chat template when a local GGUF of it is at hand (read from the file's header — the
//! weights stay on disk), else with [`EstimateTokens`].

use crate::engine::chat_template::{ChatTemplate, Message};
use crate::engine::gguf::GgufFile;
use crate::engine::tokenizer::Tokenizer;
use crate::units::{EstimateTokens, TokenCount};
use anyhow::{Context, Result};
use std::path::Path;

/// Tokens an estimated prompt adds per message (role markers and separators) and once for
/// the generation prompt.
const ESTIMATED_TOKENS_PER_MESSAGE: usize = 4;

/// How a remote backend counts tokens.
pub(super) enum Counter {
    /// The model's tokenizer and chat template, from a local GGUF.
    Local {
        tokenizer: Box<Tokenizer>,
        template: Box<ChatTemplate>,
    },
    /// [`EstimateTokens`]: a character-class estimate.
    Estimate,
}

impl Counter {
    /// The tokenizer and chat template of the GGUF at `path` (`chat_template` overrides the
    /// file's, as with the local engine). `GgufFile::open` maps the file and parses the
    /// header; no tensor is read.
    pub(super) fn from_gguf(path: &Path, chat_template: Option<&str>) -> Result<Self> {
        let gguf = GgufFile::open(path)?;
        let tokenizer = Tokenizer::for_model(&gguf)
            .with_context(|| format!("cannot build the tokenizer of {}", path.display()))?;
        let template = match chat_template {
            Some(name) => ChatTemplate::named(name)?,
            None => ChatTemplate::from_gguf(&gguf)?,
        };
        Ok(Self::Local {
            tokenizer: Box::new(tokenizer),
            template: Box::new(template),
        })
    }

    /// Tokens of `text`.
    pub(super) fn count(&self, text: &str) -> Result<usize> {
        match self {
            Self::Local { tokenizer, .. } => Ok(tokenizer.encode(text)?.len()),
            Self::Estimate => Ok(EstimateTokens.count_tokens(text)),
        }
    }

    /// Tokens of `messages` rendered as a prompt with the generation prompt: exact with the
    /// chat template, else the estimate of every content plus a few tokens per message.
    pub(super) fn prompt(&self, messages: &[Message]) -> Result<usize> {
        match self {
            Self::Local { template, .. } => self.count(&template.render(messages, true)?),
            Self::Estimate => Ok(messages
                .iter()
                .map(|m| EstimateTokens.count_tokens(&m.content) + ESTIMATED_TOKENS_PER_MESSAGE)
                .sum::<usize>()
                + ESTIMATED_TOKENS_PER_MESSAGE),
        }
    }

    /// "tokenizer" or "estimate", for messages.
    pub(super) fn kind(&self) -> &'static str {
        match self {
            Self::Local { .. } => "tokenizer",
            Self::Estimate => "estimate",
        }
    }
}
