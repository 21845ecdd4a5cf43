//! The engine thread of `quire serve`: continuous batching. Requests wait in a bounded
//! queue; up to `max_batch` of them decode together, one forward pass advancing all of
//! them by a token. A request joins the batch as soon as a slot is free (its prompt is
//! prefilled then, its stable prefix taken from the prefix cache when present) and leaves
//! when it ends or its client goes away.

use super::openai::ApiError;
use crate::engine::backend::{prepare, ChatRequest, LocalBackend};
use crate::engine::generate::{ActiveSequence, FinishReason, GenerationParams};
use crate::engine::prefix_cache::disk::DiskPrefixCache;
use crate::engine::prefix_cache::PrefixStore;
use crate::engine::stable_prefix::SplitPoint;
use crate::engine::Engine;
use axum::http::StatusCode;
use std::sync::mpsc::{Receiver, TryRecvError};
use tokio::sync::mpsc::UnboundedSender;

/// A request for the engine thread.
pub struct Job {
    /// The conversation, checked.
    pub spec: super::openai::ChatJobSpec,
    /// Where the reply goes; when the receiver is dropped (the client went away) the
    /// request leaves the batch.
    pub events: UnboundedSender<Event>,
}

/// What the engine thread tells a request's handler, in this order: `Started` (or
/// `Failed`), any number of `Text`, then `Done` (or `Failed`).
#[derive(Debug)]
pub enum Event {
    /// The prompt is prefilled: its length and how much of it came from the prefix cache.
    Started {
        /// Prompt tokens.
        prompt_tokens: usize,
        /// Of which reused from the prefix cache.
        cached_tokens: usize,
    },
    /// More of the reply.
    Text(String),
    /// The reply is complete.
    Done {
        /// Why it ended.
        finish: FinishReason,
        /// Tokens generated.
        completion_tokens: usize,
    },
    /// The request cannot be served.
    Failed(ApiError),
}

/// A request in the batch.
struct Live<'e> {
    seq: ActiveSequence<'e>,
    events: UnboundedSender<Event>,
}

/// The engine and its prefix stores, borrowed apart so that sequences can hold the engine
/// while the stores change.
struct Stores<'e> {
    engine: &'e Engine,
    store: &'e mut PrefixStore,
    disk: Option<&'e DiskPrefixCache>,
}

/// Serve jobs from `jobs` until its senders are gone and every admitted request is done.
pub fn run(backend: LocalBackend, jobs: Receiver<Job>, max_batch: usize) {
    let LocalBackend {
        engine,
        mut store,
        disk,
        draft: _,
    } = backend;
    let mut stores = Stores {
        engine: &engine,
        store: &mut store,
        disk: disk.as_ref(),
    };
    let mut live: Vec<Live> = Vec::new();
    let mut open = true;
    while open || !live.is_empty() {
        if live.is_empty() {
            match jobs.recv() {
                Ok(job) => live.extend(admit(&mut stores, job)),
                Err(_) => break,
            }
        }
        while open && live.len() < max_batch {
            match jobs.try_recv() {
                Ok(job) => live.extend(admit(&mut stores, job)),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => open = false,
            }
        }
        // A client that went away frees its slot now.
        live.retain(|l| !l.events.is_closed());
        let mut seqs: Vec<&mut ActiveSequence> = live.iter_mut().map(|l| &mut l.seq).collect();
        if let Err(e) = engine.step_sequences(&mut seqs) {
            for l in live.drain(..) {
                let _ = l.events.send(Event::Failed(internal(&e)));
            }
            continue;
        }
        live = live.into_iter().filter_map(emit).collect();
    }
}

/// Send what `l` produced this step; finish it when it is done (then it leaves the batch).
fn emit(mut l: Live) -> Option<Live> {
    if !l.seq.is_done() {
        let text = l.seq.take_text();
        if !text.is_empty() {
            let _ = l.events.send(Event::Text(text));
        }
        return Some(l);
    }
    match l.seq.finish() {
        Ok((generation, rest)) => {
            if !rest.is_empty() {
                let _ = l.events.send(Event::Text(rest));
            }
            let _ = l.events.send(Event::Done {
                finish: generation.finish,
                completion_tokens: generation.tokens.len(),
            });
        }
        Err(e) => {
            let _ = l.events.send(Event::Failed(internal(&e)));
        }
    }
    None
}

/// Check the prompt against the context, prefill it (its stable prefix — every message but
/// the last — from the prefix cache when there) and start decoding; or tell the client why
/// not.
fn admit<'e>(s: &mut Stores<'e>, job: Job) -> Option<Live<'e>> {
    if job.events.is_closed() {
        return None;
    }
    match start(s, &job) {
        Ok((mut seq, cached_tokens)) => {
            let started = Event::Started {
                prompt_tokens: seq.prompt_tokens(),
                cached_tokens,
            };
            let _ = job.events.send(started);
            let text = seq.take_text();
            if !text.is_empty() {
                let _ = job.events.send(Event::Text(text));
            }
            Some(Live {
                seq,
                events: job.events,
            })
        }
        Err(e) => {
            let _ = job.events.send(Event::Failed(e));
            None
        }
    }
}

/// Tokenize, check and prefill one request: the sequence, and how many prompt tokens came
/// from the prefix cache (not counting the stable prefix computed now).
fn start<'e>(s: &mut Stores<'e>, job: &Job) -> Result<(ActiveSequence<'e>, usize), ApiError> {
    let engine = s.engine;
    let spec = &job.spec;
    let prompt = engine
        .template
        .render(&spec.messages, true)
        .and_then(|text| engine.encode(&text))
        .map_err(|e| {
            ApiError::invalid(
                "messages",
                format!("the chat template cannot render these messages: {e:#}"),
            )
        })?;
    let context = engine.config().context_length;
    let room = context.saturating_sub(prompt.len());
    if room == 0 {
        return Err(ApiError::invalid(
            "messages",
            format!(
                "the prompt is {} tokens and the model's context holds {context}; shorten the messages",
                prompt.len()
            ),
        )
        .with_code("context_length_exceeded"));
    }
    let max_new_tokens = match spec.max_tokens {
        Some(n) if n > room => {
            return Err(ApiError::invalid(
                "max_tokens",
                format!(
                    "the prompt is {} tokens, so at most {room} more fit in the model's context of {context}; max_tokens is {n}",
                    prompt.len()
                ),
            )
            .with_code("context_length_exceeded"))
        }
        Some(n) => n,
        None => room,
    };
    let params = GenerationParams {
        max_new_tokens,
        ..spec.params.clone()
    };
    let req = ChatRequest {
        split: SplitPoint {
            message: spec.messages.len() - 1,
            offset: 0,
        },
        messages: spec.messages.clone(),
        params: params.clone(),
    };
    let p = prepare(engine, s.store, s.disk, &req).map_err(|e| internal(&e))?;
    let seq = engine
        .start_sequence(p.cache, &p.tokens, params)
        .map_err(|e| internal(&e))?;
    Ok((seq, p.hit))
}

/// A 500 for an engine failure.
fn internal(e: &anyhow::Error) -> ApiError {
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "server_error",
        format!("the engine failed: {e:#}"),
    )
}
