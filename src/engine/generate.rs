//! The generation loop: reuse what the KV cache already holds of the prompt, prefill the
//! rest, then decode one token at a time until EOS, a stop string, or the token limit.

use super::kv_cache::KvCache;
use super::sampling::{Sampler, SamplingParams};
use super::tokenizer::TokenStream;
use super::Engine;
use anyhow::Result;
use std::time::Instant;

/// What to generate.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct GenerationParams {
    /// Most tokens to generate.
    pub max_new_tokens: usize,
    /// How to pick tokens.
    pub sampling: SamplingParams,
    /// Generation stops before any of these strings (which are not returned).
    pub stop_strings: Vec<String>,
}

impl Default for GenerationParams {
    fn default() -> Self {
        Self {
            max_new_tokens: 512,
            sampling: SamplingParams::default(),
            stop_strings: Vec::new(),
        }
    }
}

/// Why generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// An end-of-sequence token.
    Eos,
    /// A stop string.
    Stop,
    /// `max_new_tokens` reached.
    Length,
    /// The model's context is full.
    Context,
}

/// The result of one generation, with token accounting and timings.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Generation {
    /// Generated text (stop string excluded).
    pub text: String,
    /// Generated token ids (EOS excluded).
    pub tokens: Vec<u32>,
    /// Prompt length in tokens.
    pub prompt_tokens: usize,
    /// Prompt tokens whose keys/values were already in the cache (not recomputed).
    pub cached_tokens: usize,
    /// Prompt tokens computed now.
    pub prefill_tokens: usize,
    /// Seconds to compute the prompt (time to first token, minus sampling).
    pub prefill_seconds: f64,
    /// Seconds spent decoding after the first token.
    pub decode_seconds: f64,
    /// Why it ended.
    pub finish: FinishReason,
}

impl Generation {
    /// Decode speed in tokens per second.
    pub fn decode_tokens_per_second(&self) -> f64 {
        if self.decode_seconds > 0.0 {
            (self.tokens.len().saturating_sub(1)) as f64 / self.decode_seconds
        } else {
            0.0
        }
    }

    /// Prefill speed in tokens per second.
    pub fn prefill_tokens_per_second(&self) -> f64 {
        if self.prefill_seconds > 0.0 {
            self.prefill_tokens as f64 / self.prefill_seconds
        } else {
            0.0
        }
    }
}

/// Length of the common prefix of two token sequences.
pub fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

impl Engine {
    /// Generate a continuation of `prompt`. `cache` may already hold a prefix of the prompt
    /// (its longest common prefix with the prompt is reused; anything after it is dropped).
    /// `on_text` receives the text as it is produced, in whole UTF-8 characters.
    pub fn generate(
        &self,
        cache: &mut KvCache,
        prompt: &[u32],
        params: &GenerationParams,
        on_text: &mut dyn FnMut(&str),
    ) -> Result<Generation> {
        anyhow::ensure!(!prompt.is_empty(), "empty prompt");
        // At least one prompt token must be computed to get logits.
        let reuse = common_prefix(cache.tokens(), prompt).min(prompt.len() - 1);
        cache.truncate(reuse);
        let start = Instant::now();
        let mut logits = self.prefill(cache, &prompt[reuse..])?;
        let prefill_seconds = start.elapsed().as_secs_f64();

        let mut sampler = Sampler::new(params.sampling.clone());
        let mut history: Vec<u32> = prompt.to_vec();
        let mut tokens = Vec::new();
        let mut stream = TokenStream::new(&self.tokenizer);
        let mut text = String::new();
        let mut emitted = 0usize;
        let hold = params
            .stop_strings
            .iter()
            .map(|s| s.len())
            .max()
            .unwrap_or(1)
            .saturating_sub(1);
        let ctx = self.config().context_length;
        let decode_start = Instant::now();
        let mut finish = FinishReason::Length;
        while tokens.len() < params.max_new_tokens {
            let next = sampler.sample(&logits, &history)?;
            if self.tokenizer.eos_ids.contains(&next) {
                finish = FinishReason::Eos;
                break;
            }
            tokens.push(next);
            history.push(next);
            if let Some(piece) = stream.push(next)? {
                text.push_str(&piece);
            }
            if let Some(pos) = params
                .stop_strings
                .iter()
                .filter_map(|s| text.find(s.as_str()))
                .min()
            {
                text.truncate(pos);
                finish = FinishReason::Stop;
                break;
            }
            // Emit everything that can no longer be the start of a stop string.
            let mut safe = text.len().saturating_sub(hold).max(emitted);
            while !text.is_char_boundary(safe) {
                safe -= 1;
            }
            if safe > emitted {
                on_text(&text[emitted..safe]);
                emitted = safe;
            }
            if tokens.len() >= params.max_new_tokens {
                break;
            }
            if cache.len() + 1 > ctx {
                finish = FinishReason::Context;
                break;
            }
            logits = self.model.forward(&[next], cache)?;
        }
        if finish != FinishReason::Stop {
            if let Some(rest) = stream.finish()? {
                text.push_str(&rest);
            }
        }
        if text.len() > emitted {
            on_text(&text[emitted..]);
        }
        Ok(Generation {
            text,
            prompt_tokens: prompt.len(),
            cached_tokens: reuse,
            prefill_tokens: prompt.len() - reuse,
            prefill_seconds,
            decode_seconds: decode_start.elapsed().as_secs_f64(),
            finish,
            tokens,
        })
    }
}
