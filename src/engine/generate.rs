//! The generation loop: reuse what the KV cache already holds of the prompt, prefill the
//! rest, then decode one token at a time until EOS, a stop string, or the token limit.

use super::constraint::Constraint;
use super::kv_cache::KvCache;
use super::sampling::{Sampler, SamplingParams};
use super::tokenizer::TokenStream;
use super::Engine;
use anyhow::Result;
use candle_core::Tensor;
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
    /// What the sequence may generate (a logits mask; not part of the serialized form).
    #[serde(skip)]
    pub constraint: Option<Constraint>,
}

impl Default for GenerationParams {
    fn default() -> Self {
        Self {
            max_new_tokens: 512,
            sampling: SamplingParams::default(),
            stop_strings: Vec::new(),
            constraint: None,
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
    /// The constraint allowed no token (nor the end) after the text so far.
    Constraint,
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
    /// Tokens a draft model proposed (0 without speculative decoding).
    pub draft_proposed: usize,
    /// Proposed tokens the model accepted (each one a decode step saved).
    pub draft_accepted: usize,
}

/// How a generation's prompt was computed: its length, the tokens reused from the cache
/// and the seconds the rest took.
#[derive(Debug, Clone, Copy)]
pub(super) struct PromptCost {
    pub(super) tokens: usize,
    pub(super) reused: usize,
    pub(super) seconds: f64,
}

impl Generation {
    /// A finished generation: the decoded `(text, tokens, finish)`, its prompt's cost and the
    /// decode seconds (no draft).
    pub(super) fn finished(
        (text, tokens, finish): (String, Vec<u32>, FinishReason),
        prompt: PromptCost,
        decode_seconds: f64,
    ) -> Self {
        Self {
            text,
            tokens,
            prompt_tokens: prompt.tokens,
            cached_tokens: prompt.reused,
            prefill_tokens: prompt.tokens - prompt.reused,
            prefill_seconds: prompt.seconds,
            decode_seconds,
            finish,
            draft_proposed: 0,
            draft_accepted: 0,
        }
    }

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

/// One sequence being decoded: sampling, stop detection and streaming text, fed one
/// position's logits at a time (by [`Engine::generate`] alone, or by
/// [`Engine::generate_batch`] together with other sequences).
pub(super) struct Decoding<'a> {
    sampler: Sampler,
    /// The prompt and the tokens generated so far.
    pub(super) history: Vec<u32>,
    /// The tokens generated so far.
    pub(super) tokens: Vec<u32>,
    /// The bytes generated so far (what a constraint judges).
    bytes: Vec<u8>,
    stream: TokenStream<'a>,
    text: String,
    emitted: usize,
    hold: usize,
    /// Bytes still to write that a constraint said the text owes (see
    /// [`super::constraint::TextConstraint::owed`]); empty when not steering.
    steer: Vec<u8>,
    finish: Option<FinishReason>,
}

impl<'a> Decoding<'a> {
    pub(super) fn new(engine: &'a Engine, prompt: &[u32], params: &GenerationParams) -> Self {
        Self {
            sampler: Sampler::new(params.sampling.clone()),
            history: prompt.to_vec(),
            tokens: Vec::new(),
            bytes: Vec::new(),
            stream: TokenStream::new(&engine.tokenizer),
            text: String::new(),
            emitted: 0,
            hold: params
                .stop_strings
                .iter()
                .map(|s| s.len())
                .max()
                .unwrap_or(1)
                .saturating_sub(1),
            steer: Vec::new(),
            finish: None,
        }
    }

    /// Take the logits of the last position; return the token to feed next, or `None`
    /// when the sequence has ended (`self.finish` says why). `cache_len`: positions the
    /// sequence's cache holds.
    pub(super) fn step(
        &mut self,
        engine: &Engine,
        params: &GenerationParams,
        logits: &Tensor,
        cache_len: usize,
        on_text: &mut dyn FnMut(&str),
    ) -> Result<Option<u32>> {
        if self.tokens.len() >= params.max_new_tokens {
            self.finish = Some(FinishReason::Length);
            return Ok(None);
        }
        let mut logits: Vec<f32> = logits.to_vec1()?;
        let eos = &engine.tokenizer.eos_ids;
        let next = match &params.constraint {
            None => self.sampler.sample_slice(&mut logits, &self.history)?,
            Some(c) => {
                let pieces = engine.tokenizer.token_bytes();
                let text = &self.bytes;
                let allowed = |t: u32| {
                    if eos.contains(&t) {
                        c.0.allows_end(text)
                    } else {
                        pieces
                            .get(t as usize)
                            .is_some_and(|b| !b.is_empty() && c.0.allows(text, b))
                    }
                };
                // The model would end here (or end its line) and may not: steer it to what
                // the text owes, if the constraint says, until that is written.
                let fresh = self.steer.is_empty();
                if fresh {
                    let best = logits
                        .iter()
                        .enumerate()
                        .fold(None::<(usize, f32)>, |m, (i, &v)| match m {
                            Some((_, mv)) if mv >= v => m,
                            _ => Some((i, v)),
                        })
                        .map(|(i, _)| i as u32);
                    let ends = |t: u32| {
                        eos.contains(&t)
                            || pieces
                                .get(t as usize)
                                .is_some_and(|b| b.first() == Some(&b'\n'))
                    };
                    self.steer = best
                        .filter(|&t| ends(t) && !allowed(t))
                        .and_then(|_| c.0.owed(text))
                        .unwrap_or_default();
                }
                let owed = &self.steer;
                let owed_piece = |t: u32| {
                    pieces.get(t as usize).and_then(|b| {
                        // Only the first steered token may bring a space before them.
                        let b = match b.strip_prefix(b" ") {
                            Some(rest) if fresh && !rest.is_empty() => rest,
                            _ => b,
                        };
                        (!b.is_empty() && owed.starts_with(b)).then_some(b.len())
                    })
                };
                let steered = if owed.is_empty() {
                    None
                } else {
                    let mut begins_owed = |t: u32| owed_piece(t).is_some() && allowed(t);
                    let mut scratch = logits.clone();
                    self.sampler
                        .sample_masked(&mut scratch, &self.history, &mut begins_owed)
                };
                match steered.and_then(owed_piece) {
                    Some(n) => self.steer.drain(..n).for_each(drop),
                    None => self.steer.clear(),
                }
                let mut allowed = allowed;
                match steered.or_else(|| {
                    self.sampler
                        .sample_masked(&mut logits, &self.history, &mut allowed)
                }) {
                    Some(t) => t,
                    None => {
                        self.finish = Some(FinishReason::Constraint);
                        return Ok(None);
                    }
                }
            }
        };
        if eos.contains(&next) {
            self.finish = Some(FinishReason::Eos);
            return Ok(None);
        }
        self.tokens.push(next);
        self.history.push(next);
        if params.constraint.is_some() {
            let piece = engine.tokenizer.token_bytes().get(next as usize);
            self.bytes
                .extend_from_slice(piece.map(Vec::as_slice).unwrap_or(&[]));
        }
        if let Some(piece) = self.stream.push(next)? {
            self.text.push_str(&piece);
        }
        if let Some(pos) = params
            .stop_strings
            .iter()
            .filter_map(|s| self.text.find(s.as_str()))
            .min()
        {
            self.text.truncate(pos);
            self.finish = Some(FinishReason::Stop);
            return Ok(None);
        }
        // Emit everything that can no longer be the start of a stop string.
        let mut safe = self.text.len().saturating_sub(self.hold).max(self.emitted);
        while !self.text.is_char_boundary(safe) {
            safe -= 1;
        }
        if safe > self.emitted {
            on_text(&self.text[self.emitted..safe]);
            self.emitted = safe;
        }
        if self.tokens.len() >= params.max_new_tokens {
            self.finish = Some(FinishReason::Length);
            return Ok(None);
        }
        if cache_len + 1 > engine.config().context_length {
            self.finish = Some(FinishReason::Context);
            return Ok(None);
        }
        Ok(Some(next))
    }

    /// Flush the text and report.
    pub(super) fn end(
        mut self,
        on_text: &mut dyn FnMut(&str),
    ) -> Result<(String, Vec<u32>, FinishReason)> {
        let finish = self.finish.unwrap_or(FinishReason::Length);
        if finish != FinishReason::Stop {
            if let Some(rest) = self.stream.finish()? {
                self.text.push_str(&rest);
            }
        }
        if self.text.len() > self.emitted {
            on_text(&self.text[self.emitted..]);
        }
        Ok((self.text, self.tokens, finish))
    }
}

impl Engine {
    /// Prefill what `cache` lacks of `prompt` (its longest common prefix with the prompt is
    /// reused; anything after it is dropped); returns the logits, the reused length and the
    /// seconds taken.
    pub(super) fn prefill_prompt(
        &self,
        cache: &mut KvCache,
        prompt: &[u32],
    ) -> Result<(Tensor, usize, f64)> {
        anyhow::ensure!(!prompt.is_empty(), "empty prompt");
        // At least one prompt token must be computed to get logits.
        let reuse = common_prefix(cache.tokens(), prompt).min(prompt.len() - 1);
        cache.truncate(reuse);
        let start = Instant::now();
        let logits = self.prefill(cache, &prompt[reuse..])?;
        Ok((logits, reuse, start.elapsed().as_secs_f64()))
    }

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
        let (mut logits, reuse, prefill_seconds) = self.prefill_prompt(cache, prompt)?;
        let mut seq = Decoding::new(self, prompt, params);
        let decode_start = Instant::now();
        while let Some(next) = seq.step(self, params, &logits, cache.len(), on_text)? {
            logits = self.model.forward(&[next], cache)?;
        }
        let cost = PromptCost {
            tokens: prompt.len(),
            reused: reuse,
            seconds: prefill_seconds,
        };
        Ok(Generation::finished(
            seq.end(on_text)?,
            cost,
            decode_start.elapsed().as_secs_f64(),
        ))
    }

    /// Generate continuations of several prompts together (throughput mode): each prompt is
    /// prefilled into its own cache (reusing what the cache holds, e.g. a forked shared
    /// prefix), then all unfinished sequences advance by one token per forward pass, so the
    /// weights are read once per step for the whole batch. The results are identical to
    /// calling [`Self::generate`] on each prompt in turn; only the wall time differs. Each
    /// generation's `decode_seconds` is the wall time of the shared decode loop. `params`
    /// holds one entry per job, or one for all; sequences with fewer tokens to generate
    /// leave the batch when they end.
    pub fn generate_batch(
        &self,
        jobs: &mut [(&mut KvCache, &[u32])],
        params: &[GenerationParams],
    ) -> Result<Vec<Generation>> {
        anyhow::ensure!(
            params.len() == jobs.len() || params.len() == 1,
            "{} generation parameter sets for {} prompts",
            params.len(),
            jobs.len()
        );
        let params_of = |i: usize| &params[i.min(params.len() - 1)];
        let mut seqs = Vec::with_capacity(jobs.len());
        let mut next: Vec<Option<u32>> = Vec::with_capacity(jobs.len());
        let mut meta = Vec::with_capacity(jobs.len());
        let mut silent = |_: &str| {};
        for (i, (cache, prompt)) in jobs.iter_mut().enumerate() {
            let (logits, reuse, seconds) = self.prefill_prompt(cache, prompt)?;
            let mut seq = Decoding::new(self, prompt, params_of(i));
            next.push(seq.step(self, params_of(i), &logits, cache.len(), &mut silent)?);
            seqs.push(seq);
            meta.push(PromptCost {
                tokens: prompt.len(),
                reused: reuse,
                seconds,
            });
        }
        let decode_start = Instant::now();
        loop {
            let active: Vec<usize> = (0..jobs.len()).filter(|&i| next[i].is_some()).collect();
            if active.is_empty() {
                break;
            }
            let tokens: Vec<u32> = active.iter().map(|&i| next[i].unwrap_or(0)).collect();
            let mut caches: Vec<&mut KvCache> = jobs
                .iter_mut()
                .enumerate()
                .filter(|(i, _)| next[*i].is_some())
                .map(|(_, (c, _))| &mut **c)
                .collect();
            let logits = self.model.forward_rows(&tokens, &mut caches)?;
            for (row, &i) in active.iter().enumerate() {
                let len = caches[row].len();
                next[i] = seqs[i].step(self, params_of(i), &logits.get(row)?, len, &mut silent)?;
            }
        }
        let decode_seconds = decode_start.elapsed().as_secs_f64();
        seqs.into_iter()
            .zip(meta)
            .map(|(seq, cost)| {
                Ok(Generation::finished(
                    seq.end(&mut silent)?,
                    cost,
                    decode_seconds,
                ))
            })
            .collect()
    }
}

/// One sequence of a continuous batch (a server's): it owns its KV cache and decoding
/// state, joins with [`Engine::start_sequence`] (its prompt prefilled, first token chosen),
/// advances with [`Engine::step_sequences`] together with the others, and leaves when it
/// ends or its client goes away. Greedy replies are the ones [`Engine::generate`] gives
/// (batch-invariant kernels).
pub struct ActiveSequence<'e> {
    seq: Decoding<'e>,
    /// The sequence's KV cache (prompt and generated tokens).
    pub cache: KvCache,
    params: GenerationParams,
    next: Option<u32>,
    /// Text produced and not yet taken by [`Self::take_text`].
    fresh: String,
    prompt_tokens: usize,
    reuse: usize,
    prefill_seconds: f64,
    decode_start: Instant,
}

impl ActiveSequence<'_> {
    /// Whether generation has ended (call [`Self::finish`]).
    pub fn is_done(&self) -> bool {
        self.next.is_none()
    }

    /// The text produced since the last call (whole characters; text that may still turn
    /// out to be a stop string is held back).
    pub fn take_text(&mut self) -> String {
        std::mem::take(&mut self.fresh)
    }

    /// Tokens generated so far.
    pub fn generated_tokens(&self) -> usize {
        self.seq.tokens.len()
    }

    /// Prompt tokens.
    pub fn prompt_tokens(&self) -> usize {
        self.prompt_tokens
    }

    /// Prompt tokens whose keys and values were already in the cache.
    pub fn cached_tokens(&self) -> usize {
        self.reuse
    }

    /// End the sequence: the remaining text goes to [`Self::take_text`]'s buffer and into
    /// the returned generation.
    pub fn finish(self) -> Result<(Generation, String)> {
        let mut rest = self.fresh;
        let cost = PromptCost {
            tokens: self.prompt_tokens,
            reused: self.reuse,
            seconds: self.prefill_seconds,
        };
        let generation = Generation::finished(
            self.seq.end(&mut |t| rest.push_str(t))?,
            cost,
            self.decode_start.elapsed().as_secs_f64(),
        );
        Ok((generation, rest))
    }
}

impl Engine {
    /// Start a sequence for `prompt` over `cache` (which may hold a prefix of it): prefill
    /// the rest and choose the first token.
    pub fn start_sequence(
        &self,
        mut cache: KvCache,
        prompt: &[u32],
        params: GenerationParams,
    ) -> Result<ActiveSequence<'_>> {
        let (logits, reuse, prefill_seconds) = self.prefill_prompt(&mut cache, prompt)?;
        let mut seq = Decoding::new(self, prompt, &params);
        let mut fresh = String::new();
        let next = seq.step(self, &params, &logits, cache.len(), &mut |t| {
            fresh.push_str(t)
        })?;
        Ok(ActiveSequence {
            seq,
            cache,
            params,
            next,
            fresh,
            prompt_tokens: prompt.len(),
            reuse,
            prefill_seconds,
            decode_start: Instant::now(),
        })
    }

    /// Advance every unfinished sequence by one token in one forward pass (the weights are
    /// read once for all of them).
    pub fn step_sequences(&self, seqs: &mut [&mut ActiveSequence<'_>]) -> Result<()> {
        let mut live: Vec<&mut ActiveSequence<'_>> = seqs
            .iter_mut()
            .filter(|s| s.next.is_some())
            .map(|s| &mut **s)
            .collect();
        if live.is_empty() {
            return Ok(());
        }
        let tokens: Vec<u32> = live.iter().map(|s| s.next.unwrap_or(0)).collect();
        let logits = {
            let mut caches: Vec<&mut KvCache> = live.iter_mut().map(|s| &mut s.cache).collect();
            self.model.forward_rows(&tokens, &mut caches)?
        };
        for (row, s) in live.iter_mut().enumerate() {
            let len = s.cache.len();
            let ActiveSequence {
                seq,
                params,
                fresh,
                next,
                ..
            } = &mut **s;
            *next = seq.step(self, params, &logits.get(row)?, len, &mut |t| {
                fresh.push_str(t)
            })?;
        }
        Ok(())
    }
}
