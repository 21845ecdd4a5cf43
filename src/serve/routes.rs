//! The HTTP side of `quire serve`: `POST /v1/chat/completions` (whole or streamed),
//! `GET /v1/models`, `GET /health`; the API key, the request size limit and the queue
//! bound are enforced here, before a request reaches the engine thread.

use super::openai::{self, ApiError, ChatJobSpec, Usage};
use super::worker::{Event, Job};
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError};
use std::sync::Arc;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

/// What every handler shares.
pub struct AppState {
    /// The engine thread's queue (bounded: a full queue answers 503).
    pub jobs: SyncSender<Job>,
    /// The served model's id (`GET /v1/models`, and what requests must name).
    pub model_id: String,
    /// Bearer key every `/v1` request must carry, when set.
    pub api_key: Option<String>,
    /// Largest request body accepted, in bytes.
    pub max_request_bytes: usize,
    /// Unix time the server started.
    pub created: u64,
    /// Request counter, for reply ids.
    pub next_id: AtomicU64,
}

/// The router over `state`.
pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/v1/models", get(models))
        .route("/health", get(health))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
}

async fn health() -> Json<serde_json::Value> {
    Json(serde_json::json!({"status": "ok"}))
}

async fn not_found() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "invalid_request_error",
        "no such endpoint (POST /v1/chat/completions, GET /v1/models, GET /health)",
    )
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "invalid_request_error",
        "method not allowed on this endpoint",
    )
}

/// 401 unless the request carries `Authorization: Bearer <key>` (when a key is set).
fn authorize(state: &AppState, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(key) = &state.api_key else {
        return Ok(());
    };
    let given = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if given == Some(key.as_str()) {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "authentication_error",
            "missing or wrong API key (send Authorization: Bearer <key>)",
        )
        .with_code("invalid_api_key"))
    }
}

async fn models(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    if let Err(e) = authorize(&state, &headers) {
        return e.into_response();
    }
    Json(serde_json::json!({
        "object": "list",
        "data": [{
            "id": state.model_id,
            "object": "model",
            "created": state.created,
            "owned_by": "quire",
        }]
    }))
    .into_response()
}

async fn chat(State(state): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
    match accept(&state, &headers, body).await {
        Ok((spec, rx, prompt_tokens, cached_tokens)) => {
            let reply = Reply {
                id: format!(
                    "chatcmpl-quire-{}",
                    state.next_id.fetch_add(1, Ordering::Relaxed)
                ),
                model: state.model_id.clone(),
                created: unix_now(),
                prompt_tokens,
                cached_tokens,
            };
            if spec.stream {
                stream(reply, rx, spec.include_usage).into_response()
            } else {
                whole(reply, rx).await
            }
        }
        Err(e) => e.into_response(),
    }
}

/// A started reply: the request passed every check and its prompt is prefilled.
type Accepted = (ChatJobSpec, UnboundedReceiver<Event>, usize, usize);

/// Authorize, read, check and queue a request, and wait until the engine has started it.
async fn accept(state: &AppState, headers: &HeaderMap, body: Body) -> Result<Accepted, ApiError> {
    authorize(state, headers)?;
    let bytes = axum::body::to_bytes(body, state.max_request_bytes)
        .await
        .map_err(|_| {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "invalid_request_error",
                format!(
                    "the request body is over {} bytes (--max-request-bytes)",
                    state.max_request_bytes
                ),
            )
        })?;
    let spec = openai::parse_request(&bytes, &state.model_id)?;
    let (tx, mut rx) = unbounded_channel();
    let job = Job {
        spec: spec.clone(),
        events: tx,
    };
    state.jobs.try_send(job).map_err(|e| {
        let why = match e {
            TrySendError::Full(_) => "the request queue is full; retry later (--max-queue)",
            TrySendError::Disconnected(_) => "the server is shutting down",
        };
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "server_error", why)
    })?;
    match rx.recv().await {
        Some(Event::Started {
            prompt_tokens,
            cached_tokens,
        }) => Ok((spec, rx, prompt_tokens, cached_tokens)),
        Some(Event::Failed(e)) => Err(e),
        _ => Err(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "server_error",
            "the engine stopped before the request started",
        )),
    }
}

/// The parts of a reply known when it starts.
struct Reply {
    id: String,
    model: String,
    created: u64,
    prompt_tokens: usize,
    cached_tokens: usize,
}

/// Collect the whole reply and answer with one `chat.completion`.
async fn whole(reply: Reply, mut rx: UnboundedReceiver<Event>) -> Response {
    let mut text = String::new();
    while let Some(event) = rx.recv().await {
        match event {
            Event::Text(t) => text.push_str(&t),
            Event::Done {
                finish,
                completion_tokens,
            } => {
                let usage = Usage::new(reply.prompt_tokens, reply.cached_tokens, completion_tokens);
                let body = openai::completion_body(
                    &reply.id,
                    &reply.model,
                    reply.created,
                    text,
                    finish,
                    usage,
                );
                return Json(body).into_response();
            }
            Event::Failed(e) => return e.into_response(),
            Event::Started { .. } => {}
        }
    }
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "server_error",
        "the engine stopped before the reply was complete",
    )
    .into_response()
}

/// Answer with server-sent events: a role chunk, content chunks as the engine produces
/// them, a chunk with the finish reason, the usage when asked for, then `[DONE]`. When the
/// client goes away the stream is dropped, and with it the engine's channel: the request
/// leaves the batch at the next step.
fn stream(
    reply: Reply,
    mut rx: UnboundedReceiver<Event>,
    include_usage: bool,
) -> Sse<impl tokio_stream::Stream<Item = Result<SseEvent, Infallible>>> {
    let (out, out_rx) = tokio::sync::mpsc::channel::<SseEvent>(64);
    tokio::spawn(async move {
        let chunk = |delta, finish, usage| {
            let body =
                openai::chunk_body(&reply.id, &reply.model, reply.created, delta, finish, usage);
            SseEvent::default().data(body.to_string())
        };
        let role = serde_json::json!({"role": "assistant", "content": ""});
        if out.send(chunk(role, None, None)).await.is_err() {
            return;
        }
        while let Some(event) = rx.recv().await {
            let events = match event {
                Event::Text(t) => vec![chunk(serde_json::json!({ "content": t }), None, None)],
                Event::Done {
                    finish,
                    completion_tokens,
                } => {
                    let mut v = vec![chunk(serde_json::json!({}), Some(finish), None)];
                    if include_usage {
                        let usage =
                            Usage::new(reply.prompt_tokens, reply.cached_tokens, completion_tokens);
                        v.push(chunk(serde_json::json!({}), None, Some(usage)));
                    }
                    v.push(SseEvent::default().data("[DONE]"));
                    v
                }
                Event::Failed(e) => {
                    let body = serde_json::json!({"error": {"message": e.message, "type": e.kind}});
                    vec![SseEvent::default().data(body.to_string())]
                }
                Event::Started { .. } => vec![],
            };
            for e in events {
                if out.send(e).await.is_err() {
                    return;
                }
            }
        }
    });
    let events = tokio_stream::wrappers::ReceiverStream::new(out_rx);
    Sse::new(tokio_stream::StreamExt::map(events, Ok))
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
