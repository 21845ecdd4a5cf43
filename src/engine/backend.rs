//! The one interface agents use to reach a model: send a conversation whose stable prefix
//! is marked, get text back with token and cache accounting. [`LocalBackend`] runs the
//! on-device engine with the prefix cache; a remote OpenAI-compatible server can implement
//! the same trait without touching the agents.

use super::generate::{ActiveSequence, FinishReason, Generation, GenerationParams};
use super::kernels::SMALL_BATCH;
use super::kv_cache::KvCache;
use super::prefix_cache::disk::DiskPrefixCache;
use super::prefix_cache::PrefixStore;
use super::speculative::Draft;
use super::Engine;
use crate::engine::chat_template::{strip_reasoning, Message};
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

/// Where a continuous batch ([`ChatBackend::complete_stream`]) takes its requests from and
/// gives its replies to. Requests carry the feed's own ids.
pub trait RequestFeed {
    /// The next request to start now, or `None` when none is ready; asked again after every
    /// reply, so a reply may make the next request ready (a revision, a unit that waited).
    fn next_request(&mut self) -> Result<Option<(usize, ChatRequest)>>;
    /// The reply to request `id`.
    fn reply(&mut self, id: usize, reply: Completion) -> Result<()>;
}

/// Rounds: up to `width` requests from `feed` sent as one [`ChatBackend::complete_batch`],
/// their replies given back, until the feed has none ready. The default
/// [`ChatBackend::complete_stream`].
pub fn complete_in_rounds(
    backend: &mut (impl ChatBackend + ?Sized),
    width: usize,
    feed: &mut dyn RequestFeed,
) -> Result<()> {
    loop {
        let mut ids = Vec::new();
        let mut reqs = Vec::new();
        while reqs.len() < width.max(1) {
            let Some((id, req)) = feed.next_request()? else {
                break;
            };
            ids.push(id);
            reqs.push(req);
        }
        let replies = match reqs.len() {
            0 => return Ok(()),
            1 => vec![backend.complete(&reqs[0])?],
            _ => backend.complete_batch(&reqs)?,
        };
        for (id, reply) in ids.into_iter().zip(replies) {
            feed.reply(id, reply)?;
        }
    }
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
    /// Continuous batching: up to `width` requests from `feed` in flight at once, a new one
    /// taken as soon as one ends; returns when the feed has none ready and none is in
    /// flight. Each reply is the one [`Self::complete`] would give. By default, rounds
    /// ([`complete_in_rounds`]): a round lasts as long as its longest reply.
    fn complete_stream(&mut self, width: usize, feed: &mut dyn RequestFeed) -> Result<()> {
        complete_in_rounds(self, width, feed)
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
        completion(gen, self.hit, self.source, wall, busy)
    }
}

/// A reply from its generation, the prompt tokens the cache held (and from where), its
/// `wall` seconds and the `busy` seconds attributable to it.
fn completion(
    gen: Generation,
    hit: usize,
    source: &'static str,
    wall: f64,
    busy: f64,
) -> Completion {
    Completion {
        prompt_tokens: gen.prompt_tokens,
        text: reply_text(gen.text),
        cached_tokens: hit,
        cache_source: source,
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

/// A model's generated `text` as it goes back to the agents: without the reasoning block a
/// reasoning model may open its reply with ([`strip_reasoning`]), so that its thoughts never
/// reach a book. Text that opens with no `<think>` block is returned as it is. Every
/// backend's replies pass through here once, where they become a [`Completion`].
pub fn reply_text(text: String) -> String {
    let answer = strip_reasoning(&text);
    if answer.len() == text.len() {
        text
    } else {
        answer.to_string()
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

    /// More than one request: decoded together, [`SMALL_BATCH`] at a time, continuously
    /// ([`Self::complete_stream`]); each reply's latency runs from its start to its end.
    fn complete_batch(&mut self, reqs: &[ChatRequest]) -> Result<Vec<Completion>> {
        if reqs.len() == 1 {
            return Ok(vec![self.complete(&reqs[0])?]);
        }
        struct All<'r> {
            reqs: std::iter::Enumerate<std::slice::Iter<'r, ChatRequest>>,
            replies: Vec<Option<Completion>>,
        }
        impl RequestFeed for All<'_> {
            fn next_request(&mut self) -> Result<Option<(usize, ChatRequest)>> {
                Ok(self.reqs.next().map(|(i, r)| (i, r.clone())))
            }
            fn reply(&mut self, id: usize, reply: Completion) -> Result<()> {
                self.replies[id] = Some(reply);
                Ok(())
            }
        }
        let mut all = All {
            reqs: reqs.iter().enumerate(),
            replies: vec![None; reqs.len()],
        };
        self.complete_stream(SMALL_BATCH, &mut all)?;
        all.replies
            .into_iter()
            .map(|r| r.ok_or_else(|| anyhow::anyhow!("a batched request got no reply")))
            .collect()
    }

    /// Up to `width` (at most [`SMALL_BATCH`]) sequences advance together, one token per
    /// forward pass ([`Engine::step_sequences`]); a request joins as soon as a slot is free
    /// (its prompt prefilled then, its stable prefix from the prefix cache) and its reply is
    /// given back the step it ends. Width 1 is single calls ([`Self::complete`], with the
    /// draft when there is one). Each reply's busy seconds are its prefill plus its share
    /// of every step it was in.
    fn complete_stream(&mut self, width: usize, feed: &mut dyn RequestFeed) -> Result<()> {
        let width = width.clamp(1, SMALL_BATCH);
        if width == 1 {
            return complete_in_rounds(self, 1, feed);
        }
        struct Live<'e> {
            id: usize,
            seq: ActiveSequence<'e>,
            hit: usize,
            source: &'static str,
            start: Instant,
            busy: f64,
        }
        let Self {
            engine,
            store,
            disk,
            ..
        } = self;
        let mut live: Vec<Live<'_>> = Vec::with_capacity(width);
        loop {
            while live.len() < width {
                let Some((id, req)) = feed.next_request()? else {
                    break;
                };
                let start = Instant::now();
                let p = prepare(engine, store, disk.as_ref(), &req)?;
                let seq = engine.start_sequence(p.cache, &p.tokens, req.params)?;
                live.push(Live {
                    id,
                    seq,
                    hit: p.hit,
                    source: p.source,
                    start,
                    busy: start.elapsed().as_secs_f64(),
                });
            }
            if live.is_empty() {
                return Ok(());
            }
            let stepping: Vec<bool> = live.iter().map(|l| !l.seq.is_done()).collect();
            let n = stepping.iter().filter(|&&s| s).count();
            if n > 0 {
                let step = Instant::now();
                let mut seqs: Vec<&mut ActiveSequence<'_>> =
                    live.iter_mut().map(|l| &mut l.seq).collect();
                engine.step_sequences(&mut seqs)?;
                let share = step.elapsed().as_secs_f64() / n as f64;
                for (l, _) in live.iter_mut().zip(&stepping).filter(|(_, &s)| s) {
                    l.busy += share;
                }
            }
            // Replies in the order their requests started (deterministic).
            let mut i = 0;
            while i < live.len() {
                if !live[i].seq.is_done() {
                    i += 1;
                    continue;
                }
                let l = live.remove(i);
                let (gen, _) = l.seq.finish()?;
                let wall = l.start.elapsed().as_secs_f64();
                feed.reply(l.id, completion(gen, l.hit, l.source, wall, l.busy))?;
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn generation(text: &str) -> Generation {
        Generation {
            text: text.to_string(),
            tokens: vec![1, 2, 3],
            prompt_tokens: 10,
            cached_tokens: 0,
            prefill_tokens: 10,
            prefill_seconds: 0.0,
            decode_seconds: 0.0,
            finish: FinishReason::Eos,
            draft_proposed: 0,
            draft_accepted: 0,
        }
    }

    #[test]
    fn a_reasoning_block_never_reaches_the_agents() {
        let c = completion(
            generation("<think>\nThe user wants Chinese.\n</think>\n\n你好，世界"),
            0,
            "none",
            1.0,
            1.0,
        );
        assert_eq!(c.text, "你好，世界");
        // The tokens generated still count, reasoning included.
        assert_eq!(c.completion_tokens, 3);
        // An empty block (Qwen3 with thinking off may still echo one) and a block cut short.
        assert_eq!(reply_text("<think>\n\n</think>\n\nHello".into()), "Hello");
        assert_eq!(reply_text("<think>still thinking".into()), "");
    }

    #[test]
    fn a_reply_without_reasoning_is_returned_as_it_is() {
        for text in [
            "你好，世界",
            "  leading spaces\nand lines\n",
            "\n",
            "",
            "text mentioning <think> later",
            "Chinese `</think>` code",
        ] {
            assert_eq!(reply_text(text.to_string()), text);
            assert_eq!(completion(generation(text), 0, "none", 0.0, 0.0).text, text);
        }
    }
}
