//! Speculative decoding: a small draft model with the same tokenizer guesses the next few
//! tokens, the target model computes all of them in one forward pass, and the target's own
//! decoding step, run on each position's logits in turn, keeps the guesses it would have
//! chosen itself. The CPU kernels are batch-invariant, so the logits of every verified
//! position are bit-identical to one-token decoding: the text is exactly what plain decoding
//! writes (greedy, seeded sampling, stop strings and decode-time constraints included); only
//! the number of target forward passes changes.

use super::generate::{common_prefix, Decoding, Generation, GenerationParams, PromptCost};
use super::kv_cache::KvCache;
use super::prefix_cache::PrefixStore;
use super::sampling::argmax;
use super::Engine;
use anyhow::{bail, Context, Result};
use std::time::Instant;

/// Fewest and most tokens a draft proposes per round.
pub const DRAFT_K: std::ops::RangeInclusive<usize> = 1..=8;

/// Bytes of draft-model prefixes kept in memory.
const DRAFT_PREFIX_BUDGET: usize = 512 << 20;

/// Tokens decoded without the draft after speculation first measured slower than plain
/// decoding, before the draft is tried again; each further slower try doubles it, up to
/// [`MAX_BACK_OFF_TOKENS`].
const BACK_OFF_TOKENS: usize = 64;

/// The longest pause between tries of the draft.
const MAX_BACK_OFF_TOKENS: usize = 4096;

/// Rounds a try of the draft lasts before its pace is compared (its first round also pays
/// for catching the draft up with the text).
const PROBE_ROUNDS: usize = 4;

/// Weight of the newest measurement in the running averages of seconds per token.
const EMA: f64 = 0.3;

/// A draft model and its prefix store. The number of tokens it proposes per round adapts
/// to how many the target accepts, and drafting pauses while it measures slower than plain
/// decoding on this machine (a draft costs its own forward passes; on a CPU with few cores
/// verifying several tokens is not much cheaper than decoding them).
pub struct Draft {
    /// The draft model.
    pub engine: Engine,
    store: PrefixStore,
    k: usize,
    /// Running averages of wall seconds per generated token, without and with the draft.
    plain_pace: Option<f64>,
    draft_pace: Option<f64>,
    /// Tokens still to decode without the draft (measuring plain decoding, or backing off).
    plain_left: usize,
    /// The next pause, in tokens, if the current try measures slower.
    back_off: usize,
    /// Rounds of the current try of the draft.
    probe_rounds: usize,
    /// Whether drafting pauses while it is slower than plain decoding.
    pace_guard: bool,
}

impl Draft {
    /// A draft for `target`; refused when the two tokenizers differ (a draft's tokens must
    /// mean the same text to the target).
    pub fn new(engine: Engine, target: &Engine) -> Result<Self> {
        // Exactness rests on the target's batch-invariant CPU kernels.
        if !target.kernels.starts_with("native") {
            bail!(
                "speculative decoding needs Quire's own CPU kernels (batch-invariant, so verified tokens are the ones plain decoding writes); {} runs on {} kernels: use --draft none",
                target.path.display(),
                target.kernels
            );
        }
        let (a, b) = (&engine.tokenizer, &target.tokenizer);
        if a.token_bytes() != b.token_bytes() || a.eos_ids != b.eos_ids {
            bail!(
                "draft model {} has a different vocabulary from {} ({} vs {} tokens or other token texts): speculative decoding needs the same tokenizer; use --draft none or a draft from the same model family",
                engine.path.display(),
                target.path.display(),
                a.token_bytes().len(),
                b.token_bytes().len()
            );
        }
        let salt = engine.fingerprint()?;
        Ok(Self {
            engine,
            store: PrefixStore::new(salt, DRAFT_PREFIX_BUDGET),
            k: 4,
            plain_pace: None,
            draft_pace: None,
            plain_left: 4,
            back_off: BACK_OFF_TOKENS,
            probe_rounds: 0,
            pace_guard: true,
        })
    }

    /// Draft every round, even while it measures slower than plain decoding (for
    /// benchmarks: the draft's own speed on this machine).
    pub fn without_pace_guard(mut self) -> Self {
        self.pace_guard = false;
        self.plain_left = 0;
        self
    }

    /// Load the draft model at `path` for `target` (on the target's device).
    pub fn load(path: &std::path::Path, target: &Engine) -> Result<Self> {
        let engine = Engine::load(path, &target.device, &super::LoadOptions::default())
            .with_context(|| format!("cannot load the draft model {}", path.display()))?;
        Self::new(engine, target)
    }

    /// Tokens the next round proposes (0: this round decodes without the draft).
    pub fn k(&self) -> usize {
        if self.plain_left > 0 {
            0
        } else {
            self.k
        }
    }

    /// Measured wall seconds per generated token without and with the draft (running
    /// averages; `None` until measured).
    pub fn pace(&self) -> (Option<f64>, Option<f64>) {
        (self.plain_pace, self.draft_pace)
    }

    /// Record a round: `proposed` guesses, `accepted` of them kept, `produced` tokens
    /// generated, in `seconds`.
    fn record(&mut self, proposed: usize, accepted: usize, produced: usize, seconds: f64) {
        if produced == 0 {
            return;
        }
        let per_token = seconds / produced as f64;
        let ema = |old: Option<f64>| Some(old.map_or(per_token, |o| o + EMA * (per_token - o)));
        if proposed == 0 {
            self.plain_pace = ema(self.plain_pace);
            self.plain_left = self.plain_left.saturating_sub(produced);
            return;
        }
        self.draft_pace = ema(self.draft_pace);
        self.adapt(proposed, accepted);
        self.probe_rounds += 1;
        if !self.pace_guard || self.probe_rounds < PROBE_ROUNDS {
            return;
        }
        if let (Some(plain), Some(draft)) = (self.plain_pace, self.draft_pace) {
            if draft > plain {
                self.plain_left = self.back_off;
                self.back_off = (self.back_off * 2).min(MAX_BACK_OFF_TOKENS);
                // The next try starts from a fresh measurement.
                self.draft_pace = None;
                self.probe_rounds = 0;
            } else {
                self.back_off = BACK_OFF_TOKENS;
            }
        }
    }

    /// A draft cache for `prompt` holding at least its first `stable` tokens: the longest
    /// stored prefix, extended and stored when shorter than `stable`.
    fn begin(&mut self, prompt: &[u32], stable: usize) -> Result<KvCache> {
        // A draft with a shorter context than the prompt never proposes (see `propose`).
        let stable = stable
            .min(prompt.len().saturating_sub(1))
            .min(self.engine.config().context_length.saturating_sub(1));
        let (mut cache, hit) = self
            .store
            .checkout(prompt, 1024, || self.engine.new_cache())?;
        if hit < stable {
            cache.truncate(hit);
            self.engine.prefill(&mut cache, &prompt[hit..stable])?;
            self.store.insert(&cache, stable)?;
        }
        Ok(cache)
    }

    /// Up to `k` greedy guesses of the draft after `history` (fewer where it would end).
    /// `cache` holds a prefix of `history` (whatever it does not share is recomputed).
    fn propose(&self, cache: &mut KvCache, history: &[u32], k: usize) -> Result<Vec<u32>> {
        if k == 0 || history.len() + k > self.engine.config().context_length {
            return Ok(Vec::new());
        }
        let keep = common_prefix(cache.tokens(), history).min(history.len() - 1);
        cache.truncate(keep);
        let mut logits = self.engine.prefill(cache, &history[keep..])?;
        let mut out = Vec::with_capacity(k);
        loop {
            let t = argmax(&logits.to_vec1::<f32>()?);
            if self.engine.tokenizer.eos_ids.contains(&t) {
                break;
            }
            out.push(t);
            if out.len() == k {
                break;
            }
            logits = self.engine.model.forward(&[t], cache)?;
        }
        Ok(out)
    }

    /// Adapt the round size: one more after a round accepted whole, one fewer after a round
    /// that lost more than half its guesses.
    fn adapt(&mut self, proposed: usize, accepted: usize) {
        if proposed == self.k && accepted == proposed {
            self.k = (self.k + 1).min(*DRAFT_K.end());
        } else if accepted * 2 < proposed {
            self.k = (self.k - 1).max(*DRAFT_K.start());
        }
    }
}

impl Engine {
    /// [`Engine::generate`] with `draft` guessing ahead: the same text and tokens, fewer
    /// forward passes of this model when the draft guesses well. `stable`: the prompt's
    /// cacheable prefix, kept in the draft's prefix store. The generation reports how many
    /// tokens were proposed and accepted.
    pub fn generate_speculative(
        &self,
        cache: &mut KvCache,
        prompt: &[u32],
        params: &GenerationParams,
        draft: &mut Draft,
        stable: usize,
        on_text: &mut dyn FnMut(&str),
    ) -> Result<Generation> {
        let (logits, reuse, prefill_seconds) = self.prefill_prompt(cache, prompt)?;
        let mut seq = Decoding::new(self, prompt, params);
        let decode_start = Instant::now();
        let mut draft_cache = draft.begin(prompt, stable)?;
        let (mut proposed, mut accepted) = (0, 0);
        let ctx = self.config().context_length;
        let mut next = seq.step(self, params, &logits, cache.len(), on_text)?;
        while let Some(t) = next {
            // Guesses beyond the token budget or the context would be thrown away.
            let budget = params.max_new_tokens.saturating_sub(seq.tokens.len() + 1);
            let room = ctx.saturating_sub(cache.len() + 2);
            let k = draft.k().min(budget).min(room);
            let round = Instant::now();
            let before = seq.tokens.len();
            let guesses = draft.propose(&mut draft_cache, &seq.history, k)?;
            let mut feed = Vec::with_capacity(guesses.len() + 1);
            feed.push(t);
            feed.extend_from_slice(&guesses);
            let base = cache.len();
            let rows = self.model.forward_all(&feed, cache)?;
            let mut kept = 0;
            next = None;
            for i in 0..feed.len() {
                let chosen = seq.step(self, params, &rows.get(i)?, base + i + 1, on_text)?;
                if chosen.is_some() && guesses.get(i) == chosen.as_ref() {
                    kept += 1;
                    continue;
                }
                // The target chose otherwise (or ended): positions after `i` are not its.
                cache.truncate(base + i + 1);
                next = chosen;
                break;
            }
            proposed += guesses.len();
            accepted += kept;
            let produced = seq.tokens.len() - before;
            draft.record(guesses.len(), kept, produced, round.elapsed().as_secs_f64());
        }
        let cost = PromptCost {
            tokens: prompt.len(),
            reused: reuse,
            seconds: prefill_seconds,
        };
        Ok(Generation {
            draft_proposed: proposed,
            draft_accepted: accepted,
            ..Generation::finished(
                seq.end(on_text)?,
                cost,
                decode_start.elapsed().as_secs_f64(),
            )
        })
    }
}
