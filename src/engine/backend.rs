//! The one interface agents use to reach a model: send a conversation whose stable prefix
//! is marked, get text back with token and cache accounting. [`LocalBackend`] runs the
//! on-device engine with the prefix cache; a remote OpenAI-compatible server can implement
//! the same trait without touching the agents.

use super::generate::{FinishReason, Generation, GenerationParams};
use super::kernels::SMALL_BATCH;
use super::kv_cache::KvCache;
use super::prefix_cache::disk::DiskPrefixCache;
use super::prefix_cache::PrefixStore;
use super::speculative::Draft;
use super::Engine;
use crate::engine::chat_template::Message;
use crate::engine::stable_prefix::{split_prompt, SplitPoint};
use anyhow::Result;
use std::time::Instant;

/// One model call.
#[derive(Debug, Clone)]
pub struct ChatRequest {
    /// The conversation (the reply is generated after it).
    pub messages: Vec<Message>,
    /// Where per-call content starts; everything before it is the cacheable prefix.
    pub split: SplitPoint,
    /// Limits and sampling.
    pub params: GenerationParams,
}

/// The reply and what it cost.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Completion {
    /// Generated text.
    pub text: String,
    /// Prompt tokens.
    pub prompt_tokens: usize,
    /// Prompt tokens served from the prefix cache.
    pub cached_tokens: usize,
    /// Where the cached tokens came from: "memory", "disk" or "none".
    pub cache_source: &'static str,
    /// Generated tokens.
    pub completion_tokens: usize,
    /// Wall seconds for the call (for a batched call: the batch's).
    pub latency_seconds: f64,
    /// Engine seconds attributable to this reply: the latency, or the batch's wall time
    /// divided among its replies (so that summing over replies counts each second once).
    pub busy_seconds: f64,
    /// Seconds to first token.
    pub ttft_seconds: f64,
    /// Why generation ended.
    pub finish: FinishReason,
    /// Seconds spent decoding after the first token (0 where unknown).
    pub decode_seconds: f64,
    /// Tokens a draft model proposed (speculative decoding; 0 without).
    pub draft_proposed: usize,
    /// Proposed tokens the model kept.
    pub draft_accepted: usize,
}

/// What agents need from a model.
pub trait ChatBackend {
    /// Generate a reply.
    fn complete(&mut self, req: &ChatRequest) -> Result<Completion>;
    /// Generate replies to independent requests; a backend that can decode them together
    /// (throughput mode) does. The replies are the ones [`Self::complete`] would give.
    fn complete_batch(&mut self, reqs: &[ChatRequest]) -> Result<Vec<Completion>> {
        reqs.iter().map(|r| self.complete(r)).collect()
    }
    /// Count tokens of a text (for budgets).
    fn count_tokens(&self, text: &str) -> Result<usize>;
    /// Tokens of a conversation rendered as a prompt (with the generation prompt).
    fn prompt_tokens(&self, messages: &[Message]) -> Result<usize>;
    /// Name of the model (for logs).
    fn model_name(&self) -> String;
    /// Device description.
    fn device_name(&self) -> String;
    /// Who runs the model, for the call log: "local" (this device) unless a backend says
    /// otherwise.
    fn provider(&self) -> &'static str {
        "local"
    }
    /// Prefix-cache statistics so far (none for a backend without a prefix cache).
    fn prefix_stats(&self) -> super::prefix_cache::PrefixStats {
        Default::default()
    }
}

/// The on-device engine with an in-memory and (optionally) an on-disk prefix cache.
pub struct LocalBackend {
    /// The engine.
    pub engine: Engine,
    /// In-memory prefix entries.
    pub store: PrefixStore,
    /// On-disk prefix entries.
    pub disk: Option<DiskPrefixCache>,
    /// A draft model for speculative decoding of single calls (same output, fewer forward
    /// passes of the engine when it guesses well).
    pub draft: Option<Draft>,
}

impl LocalBackend {
    /// Wrap `engine` with a prefix store of `memory_budget` bytes and an optional disk cache.
    pub fn new(
        engine: Engine,
        memory_budget: usize,
        disk: Option<DiskPrefixCache>,
    ) -> Result<Self> {
        let salt = engine.fingerprint()?;
        Ok(Self {
            store: PrefixStore::new(salt, memory_budget),
            engine,
            disk,
            draft: None,
        })
    }

    /// Decode single calls speculatively with `draft` (none: plainly). Batched calls decode
    /// plainly: their rows already share each read of the weights.
    pub fn with_draft(mut self, draft: Option<Draft>) -> Self {
        self.draft = draft;
        self
    }
}

/// A request made ready to decode: its tokens and a cache holding its prefix.
pub struct Prepared {
    /// The whole prompt's tokens.
    pub tokens: Vec<u32>,
    /// A cache holding the prompt's stable prefix (or as much of it as was cached).
    pub cache: KvCache,
    /// Prompt tokens the cache already holds.
    pub hit: usize,
    /// Length of the prompt's stable (cacheable) prefix.
    pub stable: usize,
    /// Where they came from: "memory", "disk" or "none".
    pub source: &'static str,
}

impl Prepared {
    /// The reply to this prepared request: `wall` seconds for the call (or its batch),
    /// `busy` of them attributable to it.
    fn completion(&self, gen: Generation, wall: f64, busy: f64) -> Completion {
        Completion {
            text: gen.text,
            prompt_tokens: self.tokens.len(),
            cached_tokens: self.hit,
            cache_source: self.source,
            completion_tokens: gen.tokens.len(),
            latency_seconds: wall,
            busy_seconds: busy,
            ttft_seconds: wall - gen.decode_seconds,
            finish: gen.finish,
            decode_seconds: gen.decode_seconds,
            draft_proposed: gen.draft_proposed,
            draft_accepted: gen.draft_accepted,
        }
    }
}

/// Positions reserved beyond the prompt when a cache is checked out; a longer reply grows
/// the cache (amortised), so a large `max_new_tokens` does not allocate a context's worth
/// of KV up front.
const RESERVE_MAX: usize = 2048;

/// Tokenize `req` and find (memory, then disk) or compute its stable prefix, storing a
/// newly computed one in memory and on disk. The engine is borrowed apart from the stores
/// so that sequences decoding on it (a server's batch) can go on borrowing it.
pub fn prepare(
    engine: &Engine,
    store: &mut PrefixStore,
    disk: Option<&DiskPrefixCache>,
    req: &ChatRequest,
) -> Result<Prepared> {
    let split = split_prompt(
        &engine.template,
        &engine.tokenizer,
        &req.messages,
        req.split,
    )?;
    let tokens = split.tokens;
    let stable = split.stable_tokens;
    let extra =
        (tokens.len() - stable.min(tokens.len()) + req.params.max_new_tokens).min(RESERVE_MAX);
    let (mut cache, mut hit) = store.checkout(&tokens, extra, || engine.new_cache())?;
    let mut source = if hit > 0 { "memory" } else { "none" };
    if hit < stable {
        if let Some(disk) = disk {
            if let Some(c) = disk.load(
                store.salt(),
                &tokens[..stable],
                engine.config(),
                &engine.device,
                extra,
            )? {
                store.stats.disk_hits += 1;
                store.insert(&c, stable)?;
                cache = c;
                hit = stable;
                source = "disk";
            }
        }
    }
    if hit < stable {
        cache.truncate(hit);
        engine.prefill(&mut cache, &tokens[hit..stable])?;
        store.insert(&cache, stable)?;
        if let Some(disk) = disk {
            if let Err(e) = disk.save(store.salt(), &cache) {
                eprintln!("warning: cannot save the prefix cache: {e:#}");
            }
        }
    }
    if hit == 0 {
        store.stats.misses += 1;
    }
    store.stats.hit_tokens += hit;
    store.stats.computed_tokens += tokens.len() - hit;
    Ok(Prepared {
        tokens,
        cache,
        hit,
        stable,
        source,
    })
}

impl LocalBackend {
    /// [`prepare`] with this backend's engine and stores.
    fn prepare(&mut self, req: &ChatRequest) -> Result<Prepared> {
        prepare(&self.engine, &mut self.store, self.disk.as_ref(), req)
    }
}

impl ChatBackend for LocalBackend {
    fn prefix_stats(&self) -> super::prefix_cache::PrefixStats {
        self.store.stats.clone()
    }

    fn complete(&mut self, req: &ChatRequest) -> Result<Completion> {
        let start = Instant::now();
        let mut p = self.prepare(req)?;
        let gen = match self.draft.as_mut() {
            Some(d) => self.engine.generate_speculative(
                &mut p.cache,
                &p.tokens,
                &req.params,
                d,
                p.stable,
                &mut |_| {},
            )?,
            None => self
                .engine
                .generate(&mut p.cache, &p.tokens, &req.params, &mut |_| {})?,
        };
        let wall = start.elapsed().as_secs_f64();
        Ok(p.completion(gen, wall, wall))
    }

    /// Up to [`SMALL_BATCH`] requests are decoded together ([`Engine::generate_batch`]),
    /// each with its own generation parameters; each reply's latency is the batch's wall
    /// time.
    fn complete_batch(&mut self, reqs: &[ChatRequest]) -> Result<Vec<Completion>> {
        let mut out = Vec::with_capacity(reqs.len());
        for group in reqs.chunks(SMALL_BATCH) {
            if group.len() == 1 {
                out.push(self.complete(&group[0])?);
                continue;
            }
            let start = Instant::now();
            let mut prepared = group
                .iter()
                .map(|r| self.prepare(r))
                .collect::<Result<Vec<_>>>()?;
            let mut jobs: Vec<(&mut KvCache, &[u32])> = prepared
                .iter_mut()
                .map(|p| (&mut p.cache, p.tokens.as_slice()))
                .collect();
            let params: Vec<GenerationParams> = group.iter().map(|r| r.params.clone()).collect();
            let gens = self.engine.generate_batch(&mut jobs, &params)?;
            let wall = start.elapsed().as_secs_f64();
            for (p, gen) in prepared.iter().zip(gens) {
                out.push(p.completion(gen, wall, wall / group.len() as f64));
            }
        }
        Ok(out)
    }

    fn count_tokens(&self, text: &str) -> Result<usize> {
        Ok(self.engine.encode(text)?.len())
    }

    fn prompt_tokens(&self, messages: &[Message]) -> Result<usize> {
        self.count_tokens(&self.engine.template.render(messages, true)?)
    }

    fn model_name(&self) -> String {
        self.engine
            .path
            .file_stem()
            .map(|s| s.to_string_lossy().to_string())
            .unwrap_or_default()
    }

    fn device_name(&self) -> String {
        super::device::device_kind(&self.engine.device).to_string()
    }
}
