//! The OpenAI chat-completions wire format: a request as clients send it, checked into a
//! typed [`ChatJobSpec`] (or a 4xx [`ApiError`]), and the replies, whole or as streamed
//! chunks.

use crate::engine::chat_template::Message;
use crate::engine::generate::{FinishReason, GenerationParams};
use crate::engine::sampling::SamplingParams;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

/// An error as OpenAI clients expect it: an HTTP status and
/// `{"error": {"message", "type", "param", "code"}}`.
#[derive(Debug, Clone)]
pub struct ApiError {
    /// HTTP status.
    pub status: StatusCode,
    /// What went wrong and what to do.
    pub message: String,
    /// OpenAI's error type (`invalid_request_error`, `authentication_error`, …).
    pub kind: &'static str,
    /// The request field at fault, if one is.
    pub param: Option<&'static str>,
    /// A machine-readable code, if one applies.
    pub code: Option<&'static str>,
}

impl ApiError {
    /// A 400 about `param`.
    pub fn invalid(param: &'static str, message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
            kind: "invalid_request_error",
            param: Some(param),
            code: None,
        }
    }

    /// Any status, without a parameter.
    pub fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
            kind,
            param: None,
            code: None,
        }
    }

    /// The same error with a machine-readable code.
    pub fn with_code(mut self, code: &'static str) -> Self {
        self.code = Some(code);
        self
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = serde_json::json!({
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        });
        (self.status, axum::Json(body)).into_response()
    }
}

/// `POST /v1/chat/completions` as sent. Fields Quire does not use (`presence_penalty`,
/// `logit_bias`, `user`, …) are accepted and ignored, as other local servers do.
#[derive(Debug, Deserialize)]
struct WireRequest {
    model: Option<String>,
    messages: Vec<WireMessage>,
    #[serde(default)]
    stream: bool,
    stream_options: Option<StreamOptions>,
    max_tokens: Option<i64>,
    max_completion_tokens: Option<i64>,
    temperature: Option<f64>,
    top_p: Option<f64>,
    seed: Option<u64>,
    stop: Option<Stop>,
    n: Option<i64>,
    /// Quire's extension: a decode-time constraint's description
    /// ([`crate::engine::constraint::TextConstraint::spec`]), sent by `quire translate
    /// --backend openai` so that its passages are decoded under the same rule as in-process.
    quire_constraint: Option<serde_json::Value>,
}

#[derive(Debug, Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: bool,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Stop {
    One(String),
    Many(Vec<String>),
}

#[derive(Debug, Deserialize)]
struct WireMessage {
    role: String,
    #[serde(default)]
    content: Option<Content>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Content {
    Text(String),
    Parts(Vec<Part>),
}

#[derive(Debug, Deserialize)]
struct Part {
    #[serde(rename = "type")]
    kind: String,
    text: Option<String>,
}

/// A checked chat request.
#[derive(Debug, Clone)]
pub struct ChatJobSpec {
    /// The conversation.
    pub messages: Vec<Message>,
    /// Sampling and stop strings; `max_new_tokens` is set once the prompt is tokenized.
    pub params: GenerationParams,
    /// `max_tokens` (or `max_completion_tokens`) when the client gave one.
    pub max_tokens: Option<usize>,
    /// Reply as server-sent events.
    pub stream: bool,
    /// Send a last chunk with the usage (`stream_options.include_usage`).
    pub include_usage: bool,
}

/// Parse and check a request body for the model `served` (a request naming another model
/// is refused with 404).
pub fn parse_request(body: &[u8], served: &str) -> Result<ChatJobSpec, ApiError> {
    let req: WireRequest = serde_json::from_slice(body).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            format!("the request body is not a valid chat completion request: {e}"),
        )
    })?;
    if let Some(m) = &req.model {
        if m != served {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                "invalid_request_error",
                format!("the model `{m}` does not exist; this server serves `{served}`"),
            )
            .with_code("model_not_found"));
        }
    }
    if req.n.is_some_and(|n| n != 1) {
        return Err(ApiError::invalid("n", "only n = 1 is supported"));
    }
    let messages = messages(req.messages)?;
    let sampling = sampling(req.temperature, req.top_p, req.seed)?;
    let max_tokens = match req.max_completion_tokens.or(req.max_tokens) {
        None => None,
        Some(n) if n >= 1 => Some(usize::try_from(n).unwrap_or(usize::MAX)),
        Some(n) => {
            return Err(ApiError::invalid(
                "max_tokens",
                format!("max_tokens must be at least 1 (got {n})"),
            ))
        }
    };
    let stop_strings = stop_strings(req.stop)?;
    let constraint = match &req.quire_constraint {
        None => None,
        Some(spec) => Some(crate::units::verbatim::constraint_from_spec(spec).ok_or_else(
            || {
                ApiError::invalid(
                    "quire_constraint",
                    "not a constraint description this server knows (kind quire.passage/1 with passage and latin_names_only)",
                )
            },
        )?),
    };
    Ok(ChatJobSpec {
        messages,
        params: GenerationParams {
            max_new_tokens: 0,
            sampling,
            stop_strings,
            constraint,
        },
        max_tokens,
        stream: req.stream,
        include_usage: req.stream_options.is_some_and(|o| o.include_usage),
    })
}

/// The messages as the chat template takes them (`developer` is a system message; text
/// parts of a multi-part content are joined).
fn messages(wire: Vec<WireMessage>) -> Result<Vec<Message>, ApiError> {
    if wire.is_empty() {
        return Err(ApiError::invalid("messages", "messages must not be empty"));
    }
    wire.into_iter()
        .enumerate()
        .map(|(i, m)| {
            let role = match m.role.as_str() {
                "system" | "developer" => "system",
                "user" => "user",
                "assistant" => "assistant",
                other => {
                    return Err(ApiError::invalid(
                        "messages",
                        format!(
                            "messages[{i}].role `{other}` is not supported (system, developer, user or assistant)"
                        ),
                    ))
                }
            };
            let content = match m.content {
                None => String::new(),
                Some(Content::Text(t)) => t,
                Some(Content::Parts(parts)) => {
                    let mut text = String::new();
                    for p in parts {
                        match (p.kind.as_str(), p.text) {
                            ("text", Some(t)) => text.push_str(&t),
                            (kind, _) => {
                                return Err(ApiError::invalid(
                                    "messages",
                                    format!("messages[{i}] has a `{kind}` part; only text parts are supported"),
                                ))
                            }
                        }
                    }
                    text
                }
            };
            Ok(Message::new(role, content))
        })
        .collect()
}

/// Sampling as OpenAI defines it: temperature 1 and top-p 1 unless given, no top-k and no
/// repetition penalty; temperature 0 is greedy. Without a seed each request draws one.
fn sampling(
    temperature: Option<f64>,
    top_p: Option<f64>,
    seed: Option<u64>,
) -> Result<SamplingParams, ApiError> {
    let temperature = temperature.unwrap_or(1.0);
    if !(0.0..=2.0).contains(&temperature) {
        return Err(ApiError::invalid(
            "temperature",
            format!("temperature must be between 0 and 2 (got {temperature})"),
        ));
    }
    let top_p = top_p.unwrap_or(1.0);
    if !(top_p > 0.0 && top_p <= 1.0) {
        return Err(ApiError::invalid(
            "top_p",
            format!("top_p must be in (0, 1] (got {top_p})"),
        ));
    }
    Ok(SamplingParams {
        temperature: temperature as f32,
        top_k: 0,
        top_p: top_p as f32,
        repetition_penalty: 1.0,
        repeat_last_n: 0,
        seed: seed.unwrap_or_else(rand::random),
    })
}

/// At most four non-empty stop strings.
fn stop_strings(stop: Option<Stop>) -> Result<Vec<String>, ApiError> {
    let stops = match stop {
        None => Vec::new(),
        Some(Stop::One(s)) => vec![s],
        Some(Stop::Many(v)) => v,
    };
    if stops.len() > 4 {
        return Err(ApiError::invalid("stop", "at most 4 stop strings"));
    }
    if stops.iter().any(String::is_empty) {
        return Err(ApiError::invalid("stop", "stop strings must not be empty"));
    }
    Ok(stops)
}

/// OpenAI's name for why a reply ended.
pub fn finish_reason(f: FinishReason) -> &'static str {
    match f {
        FinishReason::Length | FinishReason::Context => "length",
        _ => "stop",
    }
}

/// Token accounting of one reply.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Usage {
    /// Prompt tokens.
    pub prompt_tokens: usize,
    /// Generated tokens.
    pub completion_tokens: usize,
    /// Their sum.
    pub total_tokens: usize,
    /// What of the prompt was reused.
    pub prompt_tokens_details: PromptTokensDetails,
}

impl Usage {
    /// Usage of a reply of `completion` tokens to a prompt of `prompt` tokens, `cached` of
    /// them served from the prefix cache.
    pub fn new(prompt: usize, cached: usize, completion: usize) -> Self {
        Self {
            prompt_tokens: prompt,
            completion_tokens: completion,
            total_tokens: prompt + completion,
            prompt_tokens_details: PromptTokensDetails {
                cached_tokens: cached,
            },
        }
    }
}

/// `usage.prompt_tokens_details`.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct PromptTokensDetails {
    /// Prompt tokens whose keys and values came from the prefix cache.
    pub cached_tokens: usize,
}

/// A whole reply (`object: chat.completion`).
pub fn completion_body(
    id: &str,
    model: &str,
    created: u64,
    text: String,
    finish: FinishReason,
    usage: Usage,
) -> serde_json::Value {
    serde_json::json!({
        "id": id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": text},
            "finish_reason": finish_reason(finish),
        }],
        "usage": usage,
    })
}

/// One streamed chunk (`object: chat.completion.chunk`): a delta, a finish reason, or (with
/// no choices) the usage.
pub fn chunk_body(
    id: &str,
    model: &str,
    created: u64,
    delta: serde_json::Value,
    finish: Option<FinishReason>,
    usage: Option<Usage>,
) -> serde_json::Value {
    let choices = if usage.is_some() {
        serde_json::json!([])
    } else {
        serde_json::json!([{
            "index": 0,
            "delta": delta,
            "finish_reason": finish.map(finish_reason),
        }])
    };
    serde_json::json!({
        "id": id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": choices,
        "usage": usage,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(body: &str) -> Result<ChatJobSpec, ApiError> {
        parse_request(body.as_bytes(), "m")
    }

    #[test]
    fn a_plain_request_is_greedy_at_temperature_zero() {
        let spec = parse(
            r#"{"model":"m","messages":[{"role":"developer","content":"Be brief."},
                {"role":"user","content":[{"type":"text","text":"Hi"},{"type":"text","text":"!"}]}],
                "temperature":0,"max_tokens":5,"stop":"\n","stream":true,
                "stream_options":{"include_usage":true},"presence_penalty":0}"#,
        )
        .unwrap();
        assert_eq!(spec.messages[0].role, "system");
        assert_eq!(spec.messages[1].content, "Hi!");
        assert_eq!(spec.params.sampling.temperature, 0.0);
        assert_eq!(spec.max_tokens, Some(5));
        assert_eq!(spec.params.stop_strings, vec!["\n"]);
        assert!(spec.stream && spec.include_usage);
    }

    #[test]
    fn bad_requests_are_4xx_naming_the_field() {
        let cases = [
            ("{", StatusCode::BAD_REQUEST, None),
            (
                r#"{"messages":[]}"#,
                StatusCode::BAD_REQUEST,
                Some("messages"),
            ),
            (
                r#"{"model":"x","messages":[{"role":"user","content":"a"}]}"#,
                StatusCode::NOT_FOUND,
                None,
            ),
            (
                r#"{"messages":[{"role":"tool","content":"a"}]}"#,
                StatusCode::BAD_REQUEST,
                Some("messages"),
            ),
            (
                r#"{"messages":[{"role":"user","content":"a"}],"temperature":3}"#,
                StatusCode::BAD_REQUEST,
                Some("temperature"),
            ),
            (
                r#"{"messages":[{"role":"user","content":"a"}],"top_p":0}"#,
                StatusCode::BAD_REQUEST,
                Some("top_p"),
            ),
            (
                r#"{"messages":[{"role":"user","content":"a"}],"max_tokens":0}"#,
                StatusCode::BAD_REQUEST,
                Some("max_tokens"),
            ),
            (
                r#"{"messages":[{"role":"user","content":"a"}],"n":2}"#,
                StatusCode::BAD_REQUEST,
                Some("n"),
            ),
            (
                r#"{"messages":[{"role":"user","content":"a"}],"stop":["a","b","c","d","e"]}"#,
                StatusCode::BAD_REQUEST,
                Some("stop"),
            ),
            (
                r#"{"messages":[{"role":"user","content":[{"type":"image_url"}]}]}"#,
                StatusCode::BAD_REQUEST,
                Some("messages"),
            ),
            (r#"{"messages":"hi"}"#, StatusCode::BAD_REQUEST, None),
            (
                r#"{"messages":[{"role":"user","content":"a"}],"quire_constraint":{"kind":"x"}}"#,
                StatusCode::BAD_REQUEST,
                Some("quire_constraint"),
            ),
        ];
        for (body, status, param) in cases {
            let e = parse(body).expect_err(body);
            assert_eq!(e.status, status, "{body}: {}", e.message);
            assert_eq!(e.param, param, "{body}");
        }
    }

    #[test]
    fn chunks_and_completions_have_the_openai_shape() {
        let u = Usage::new(10, 8, 3);
        let c = completion_body("id", "m", 1, "hi".into(), FinishReason::Eos, u);
        assert_eq!(c["choices"][0]["message"]["content"], "hi");
        assert_eq!(c["choices"][0]["finish_reason"], "stop");
        assert_eq!(c["usage"]["prompt_tokens_details"]["cached_tokens"], 8);
        let k = chunk_body(
            "id",
            "m",
            1,
            serde_json::json!({"content": "h"}),
            None,
            None,
        );
        assert_eq!(k["choices"][0]["delta"]["content"], "h");
        assert!(k["choices"][0]["finish_reason"].is_null());
        let last = chunk_body("id", "m", 1, serde_json::json!({}), None, Some(u));
        assert_eq!(last["choices"].as_array().unwrap().len(), 0);
        assert_eq!(last["usage"]["total_tokens"], 13);
    }
}
