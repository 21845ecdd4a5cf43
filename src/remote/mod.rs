//! A [`ChatBackend`] over an OpenAI-compatible HTTP server (`quire translate --backend
//! openai`): llama-server, vLLM, `quire serve`, or a hosted API.
//!
//! Each call is one `POST {base_url}/chat/completions` with `stream: false`. Nothing is
//! cached on this side: the agents put the stable part of every prompt — the system message
//! (guide, glossary) and the earlier turns — first, byte for byte the same in every call, so
//! a server with a prefix cache (llama-server's `cache_prompt`, vLLM's automatic prefix
//! caching, OpenAI's prompt caching) computes it once and reuses it. The server reports that
//! reuse in `usage.prompt_tokens_details.cached_tokens` (or llama-server's
//! `timings.cache_n`); it becomes each [`Completion`]'s `cached_tokens` (source "server")
//! and the run's [`PrefixStats`], so `run.json`'s cache share shows it.
//!
//! `GenerationParams::constraint`, a decode-time logits mask, travels only to `quire serve`
//! (recognised by `owned_by: "quire"` in its model list), as its description in the
//! extension field `quire_constraint`, so a book translated through it is the book the
//! in-process engine writes. Other servers never see it: the translate pipeline's
//! deterministic checks and fallback cascade catch what it would have prevented. Top-k and the repetition penalty have no OpenAI parameter and
//! are not sent. Stop strings beyond the API's four are applied here, by cutting the reply
//! at the earliest one.
//!
//! Token counts for budgets come from the model's tokenizer and chat template when a local
//! GGUF of the served model is given ([`RemoteBackend::with_local_tokenizer`]), else from
//! [`crate::units::EstimateTokens`].

mod count;
mod http;
#[cfg(test)]
mod tests;
mod wire;

pub use http::{RetryPolicy, StatusError};

use crate::engine::backend::{reply_text, ChatBackend, ChatRequest, Completion};
use crate::engine::chat_template::Message;
use crate::engine::prefix_cache::PrefixStats;
use anyhow::{bail, Context, Result};
use count::Counter;
use http::Client;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use wire::Reply;

/// Everything needed to reach the server, built once at the edge (the CLI); nothing here
/// reads the environment.
#[derive(Clone)]
pub struct RemoteConfig {
    /// The API root, e.g. `http://127.0.0.1:8080/v1` (a trailing slash is fine).
    pub base_url: String,
    /// The model name sent in every request.
    pub api_model: String,
    /// Sent as `Authorization: Bearer <key>` when set.
    pub api_key: Option<String>,
    /// Most requests in flight at once ([`ChatBackend::complete_batch`]).
    pub concurrency: usize,
    /// Limit for a whole call (connecting takes at most 10 s of it).
    pub timeout: Duration,
    /// Tries after the first on 429, 5xx, timeouts and connection errors.
    pub max_retries: usize,
    /// Wait before the first retry; doubled per retry, jittered, at most `retry_cap`.
    pub retry_base: Duration,
    /// Longest backoff between retries (a server's `Retry-After` may ask for longer).
    pub retry_cap: Duration,
}

impl RemoteConfig {
    /// `base_url` and `api_model` with the defaults: no key, 4 in flight, 600 s per call,
    /// 5 retries waiting 0.5 s, 1 s, 2 s… up to 30 s.
    pub fn new(base_url: impl Into<String>, api_model: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            api_model: api_model.into(),
            api_key: None,
            concurrency: 4,
            timeout: Duration::from_secs(600),
            max_retries: 5,
            retry_base: Duration::from_millis(500),
            retry_cap: Duration::from_secs(30),
        }
    }

    fn client(&self) -> Client {
        let policy = RetryPolicy {
            max_retries: self.max_retries,
            base: self.retry_base,
            cap: self.retry_cap,
        };
        Client::new(&self.base_url, self.api_key.clone(), self.timeout, policy)
    }

    fn validate(&self) -> Result<()> {
        let url = self.base_url.trim();
        if !(url.starts_with("http://") || url.starts_with("https://")) || host(url).is_empty() {
            bail!("bad base URL {url:?}: use http(s)://HOST[:PORT]/PATH, e.g. http://127.0.0.1:8080/v1");
        }
        if self.api_model.trim().is_empty() {
            bail!("no model name for the server: pass --api-model NAME");
        }
        if self.concurrency == 0 {
            bail!("concurrency must be at least 1");
        }
        Ok(())
    }
}

/// The key stays out of logs.
impl std::fmt::Debug for RemoteConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteConfig")
            .field("base_url", &self.base_url)
            .field("api_model", &self.api_model)
            .field("api_key", &self.api_key.as_ref().map(|_| "<set>"))
            .field("concurrency", &self.concurrency)
            .field("timeout", &self.timeout)
            .field("max_retries", &self.max_retries)
            .field("retry_base", &self.retry_base)
            .field("retry_cap", &self.retry_cap)
            .finish()
    }
}

/// `host[:port]` of a URL.
fn host(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    authority.rsplit('@').next().unwrap_or_default()
}

/// The model ids the server lists at `GET {base_url}/models`, in its order (`api_model` is
/// not used). With retries like any call.
pub fn list_models(config: &RemoteConfig) -> Result<Vec<String>> {
    let body = config.client().get("models")?;
    wire::model_ids(&body)
        .with_context(|| format!("unexpected answer from {}/models", config.client().base()))
}

/// Where a worker of [`RemoteBackend::send_all`] leaves a reply and its wall seconds.
type Slot = Mutex<Option<Result<(Reply, f64)>>>;

/// A chat model behind an OpenAI-compatible `/chat/completions` endpoint.
pub struct RemoteBackend {
    config: RemoteConfig,
    client: Client,
    counter: Counter,
    stats: PrefixStats,
    /// The server is `quire serve` (found by [`Self::check_server`]): constraints travel.
    quire_server: bool,
}

impl RemoteBackend {
    /// A backend for `config` (checked, no request made), counting tokens by estimate.
    pub fn new(config: RemoteConfig) -> Result<Self> {
        config.validate()?;
        Ok(Self {
            client: config.client(),
            config,
            counter: Counter::Estimate,
            stats: PrefixStats::default(),
            quire_server: false,
        })
    }

    /// Count tokens with the tokenizer and chat template of `gguf`, a local copy of the
    /// served model (its header only; the weights are not loaded). `chat_template`
    /// overrides the file's, as `--chat-template` does for the local engine.
    pub fn with_local_tokenizer(
        mut self,
        gguf: &Path,
        chat_template: Option<&str>,
    ) -> Result<Self> {
        self.counter = Counter::from_gguf(gguf, chat_template)?;
        Ok(self)
    }

    /// Whether the server is `quire serve`, which applies the decode-time constraints sent
    /// to it (known after [`Self::check_server`]).
    pub fn quire_server(&self) -> bool {
        self.quire_server
    }

    /// Whether token counts come from a tokenizer ("tokenizer") or are estimates
    /// ("estimate").
    pub fn counting(&self) -> &'static str {
        self.counter.kind()
    }

    /// Check that the server answers (`GET {base_url}/models`, with retries), and whether
    /// it is `quire serve` (then decode-time constraints are sent along). A server without a
    /// model list (404 or 405) passes; unreachable, failing or refusing the key does not.
    pub fn check_server(&mut self) -> Result<()> {
        match self.client.get("models") {
            Ok(body) => {
                self.quire_server = wire::served_by_quire(&body, &self.config.api_model);
                Ok(())
            }
            Err(e) => match e.downcast_ref::<StatusError>() {
                Some(s) if s.status == 404 || s.status == 405 => Ok(()),
                _ => Err(e.context(format!(
                    "checking the server at {} (is it running? is --base-url its API root?)",
                    self.client.base()
                ))),
            },
        }
    }

    /// One request to the server: the parsed reply and its wall seconds.
    fn send(&self, req: &ChatRequest) -> Result<(Reply, f64)> {
        let start = Instant::now();
        let body = wire::request_body(&self.config.api_model, req, self.quire_server);
        let answer = self.client.post_json("chat/completions", &body)?;
        let reply = wire::parse_reply(&answer, &wire::stops(req))
            .with_context(|| format!("from {}/chat/completions", self.client.base()))?;
        Ok((reply, start.elapsed().as_secs_f64()))
    }

    /// The completion for `reply` to `req`, counted into the prefix statistics. Counts the
    /// server left out are computed here.
    fn completion(
        &mut self,
        req: &ChatRequest,
        reply: Reply,
        wall: f64,
        busy: f64,
    ) -> Result<Completion> {
        let prompt_tokens = match reply.usage.prompt {
            Some(n) => n,
            None => self.counter.prompt(&req.messages)?,
        };
        let completion_tokens = match reply.usage.completion {
            Some(n) => n,
            None => self.counter.count(&reply.text)?,
        };
        let cached = reply.usage.cached.min(prompt_tokens);
        self.record(prompt_tokens, cached);
        Ok(Completion {
            text: reply_text(reply.text),
            prompt_tokens,
            cached_tokens: cached,
            cache_source: if cached > 0 { "server" } else { "none" },
            completion_tokens,
            latency_seconds: wall,
            busy_seconds: busy,
            ttft_seconds: wall,
            finish: reply.finish,
            decode_seconds: 0.0,
            draft_proposed: 0,
            draft_accepted: 0,
        })
    }

    /// The server's cache is in memory: a call that reused tokens is a memory hit.
    fn record(&mut self, prompt: usize, cached: usize) {
        if cached > 0 {
            self.stats.memory_hits += 1;
        } else {
            self.stats.misses += 1;
        }
        self.stats.hit_tokens += cached;
        self.stats.computed_tokens += prompt - cached;
    }

    /// Send `reqs` with at most `concurrency` in flight; the replies in request order. After
    /// the first failure no new request starts; the first failure (in order) is returned.
    fn send_all(&self, reqs: &[ChatRequest]) -> Result<Vec<(Reply, f64)>> {
        let next = AtomicUsize::new(0);
        let failed = AtomicBool::new(false);
        let slots: Vec<Slot> = reqs.iter().map(|_| Mutex::new(None)).collect();
        let workers = self.config.concurrency.clamp(1, reqs.len().max(1));
        std::thread::scope(|s| {
            for _ in 0..workers {
                s.spawn(|| loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    if i >= reqs.len() || failed.load(Ordering::SeqCst) {
                        break;
                    }
                    let r = self.send(&reqs[i]);
                    failed.fetch_or(r.is_err(), Ordering::SeqCst);
                    *slots[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
                });
            }
        });
        let mut out = Vec::with_capacity(reqs.len());
        for slot in slots {
            match slot.into_inner().unwrap_or_else(|e| e.into_inner()) {
                Some(r) => out.push(r?),
                None => bail!("request not sent after an earlier failure"),
            }
        }
        Ok(out)
    }
}

impl ChatBackend for RemoteBackend {
    fn complete(&mut self, req: &ChatRequest) -> Result<Completion> {
        let (reply, wall) = self.send(req)?;
        self.completion(req, reply, wall, wall)
    }

    /// Up to `concurrency` requests in flight at once (the server batches them); each
    /// reply's latency is its own call's, and the batch's wall time is divided among the
    /// replies as busy time.
    fn complete_batch(&mut self, reqs: &[ChatRequest]) -> Result<Vec<Completion>> {
        let start = Instant::now();
        let replies = self.send_all(reqs)?;
        let busy = start.elapsed().as_secs_f64() / reqs.len().max(1) as f64;
        reqs.iter()
            .zip(replies)
            .map(|(req, (reply, wall))| self.completion(req, reply, wall, busy))
            .collect()
    }

    fn count_tokens(&self, text: &str) -> Result<usize> {
        self.counter.count(text)
    }

    fn prompt_tokens(&self, messages: &[Message]) -> Result<usize> {
        self.counter.prompt(messages)
    }

    /// `openai:<api-model>@<host[:port]>`.
    fn model_name(&self) -> String {
        format!(
            "openai:{}@{}",
            self.config.api_model,
            host(&self.config.base_url)
        )
    }

    /// The base URL.
    fn device_name(&self) -> String {
        self.client.base().to_string()
    }

    fn prefix_stats(&self) -> PrefixStats {
        self.stats.clone()
    }

    fn provider(&self) -> &'static str {
        "openai"
    }
}

#[cfg(test)]
mod reasoning_tests {
    use super::*;
    use crate::engine::generate::GenerationParams;
    use crate::engine::stable_prefix::SplitPoint;

    #[test]
    fn a_servers_reasoning_block_never_reaches_the_agents() {
        let mut backend =
            RemoteBackend::new(RemoteConfig::new("http://127.0.0.1:9/v1", "m")).unwrap();
        let req = ChatRequest {
            messages: vec![Message::user("Hello")],
            split: SplitPoint {
                message: 0,
                offset: 0,
            },
            params: GenerationParams::default(),
        };
        for (content, text) in [
            ("<think>\nThey want Chinese.\n</think>\n\n你好", "你好"),
            ("你好", "你好"),
            ("  你好 <think>", "  你好 <think>"),
        ] {
            let body = serde_json::json!({
                "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                             "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 5, "completion_tokens": 9},
            });
            let reply = wire::parse_reply(&body.to_string(), &[]).unwrap();
            let c = backend.completion(&req, reply, 0.1, 0.1).unwrap();
            assert_eq!(c.text, text);
            assert_eq!(c.completion_tokens, 9);
        }
    }
}
