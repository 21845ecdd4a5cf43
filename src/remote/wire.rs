//! The `/chat/completions` wire format: a [`ChatRequest`] as a JSON body, and the answer
//! as text, finish reason and token usage.

use crate::engine::backend::ChatRequest;
use crate::engine::generate::FinishReason;
use anyhow::{Context, Result};
use serde_json::{json, Value};

/// Most stop strings the OpenAI API accepts; the rest are applied here.
pub(super) const MAX_SERVER_STOPS: usize = 4;

/// The non-empty stop strings of a request (an empty one would cut every reply to nothing).
pub(super) fn stops(req: &ChatRequest) -> Vec<String> {
    let stops = &req.params.stop_strings;
    stops.iter().filter(|s| !s.is_empty()).cloned().collect()
}

/// The JSON body for `req` to `model`. Greedy sampling is `temperature: 0`; top-k and the
/// repetition penalty have no OpenAI parameter and are not sent; the constraint (a
/// decode-time logits mask) travels only to `quire serve` (`quire`), as its description in
/// the extension field `quire_constraint`.
pub(super) fn request_body(model: &str, req: &ChatRequest, quire: bool) -> String {
    let p = &req.params;
    let messages: Vec<Value> = req
        .messages
        .iter()
        .map(|m| json!({"role": m.role, "content": m.content}))
        .collect();
    let mut body = json!({
        "model": model,
        "messages": messages,
        "max_tokens": p.max_new_tokens,
        "seed": p.sampling.seed,
        "stream": false,
    });
    if p.sampling.temperature <= 0.0 {
        body["temperature"] = json!(0);
    } else {
        body["temperature"] = json!(p.sampling.temperature);
        body["top_p"] = json!(p.sampling.top_p);
    }
    let stops = stops(req);
    if !stops.is_empty() {
        body["stop"] = json!(&stops[..stops.len().min(MAX_SERVER_STOPS)]);
    }
    if let Some(spec) = p
        .constraint
        .as_ref()
        .and_then(|c| c.spec())
        .filter(|_| quire)
    {
        body["quire_constraint"] = spec;
    }
    body.to_string()
}

/// Token usage as the server reported it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct Usage {
    /// `usage.prompt_tokens`.
    pub(super) prompt: Option<usize>,
    /// `usage.completion_tokens`.
    pub(super) completion: Option<usize>,
    /// `usage.prompt_tokens_details.cached_tokens`, else llama-server's `timings.cache_n`,
    /// else 0.
    pub(super) cached: usize,
}

/// One answer, parsed.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Reply {
    /// The reply, cut before the earliest stop string.
    pub(super) text: String,
    /// Why it ended.
    pub(super) finish: FinishReason,
    /// What it cost.
    pub(super) usage: Usage,
}

/// Parse a `/chat/completions` answer; `stops` are applied to the text (the server saw
/// only the first [`MAX_SERVER_STOPS`]).
pub(super) fn parse_reply(body: &str, stops: &[String]) -> Result<Reply> {
    let v: Value = serde_json::from_str(body).with_context(|| {
        let head: String = body.chars().take(200).collect();
        format!("the server's answer is not JSON: {head:?}")
    })?;
    let choice = v
        .get("choices")
        .and_then(|c| c.get(0))
        .with_context(|| format!("the server's answer has no choices: {v}"))?;
    let content = &choice["message"]["content"];
    let mut text = content.as_str().unwrap_or_default().to_string();
    let mut finish = match choice["finish_reason"].as_str() {
        Some("length") => FinishReason::Length,
        _ => FinishReason::Eos,
    };
    if let Some(at) = earliest_stop(&text, stops) {
        text.truncate(at);
        finish = FinishReason::Stop;
    }
    Ok(Reply {
        text,
        finish,
        usage: usage(&v),
    })
}

/// Byte offset of the earliest occurrence of any of `stops` in `text`.
fn earliest_stop(text: &str, stops: &[String]) -> Option<usize> {
    stops
        .iter()
        .filter(|s| !s.is_empty())
        .filter_map(|s| text.find(s.as_str()))
        .min()
}

fn usage(v: &Value) -> Usage {
    let n = |x: &Value| x.as_u64().map(|n| n as usize);
    let u = &v["usage"];
    let cached = n(&u["prompt_tokens_details"]["cached_tokens"])
        .or_else(|| n(&v["timings"]["cache_n"]))
        .unwrap_or(0);
    Usage {
        prompt: n(&u["prompt_tokens"]),
        completion: n(&u["completion_tokens"]),
        cached,
    }
}

/// The model ids of a `GET /models` answer, in the server's order.
pub(super) fn model_ids(body: &str) -> Result<Vec<String>> {
    let v: Value = serde_json::from_str(body).context("the model list is not JSON")?;
    let data = v["data"]
        .as_array()
        .with_context(|| format!("the model list has no \"data\" array: {v}"))?;
    Ok(data
        .iter()
        .filter_map(|m| m["id"].as_str().map(str::to_string))
        .collect())
}

/// Whether a `GET /models` answer comes from `quire serve` (its entry for `model` is
/// `owned_by: "quire"`), which applies decode-time constraints sent to it.
pub(super) fn served_by_quire(body: &str, model: &str) -> bool {
    serde_json::from_str::<Value>(body).is_ok_and(|v| {
        v["data"].as_array().is_some_and(|d| {
            d.iter()
                .any(|m| m["id"].as_str() == Some(model) && m["owned_by"] == "quire")
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::chat_template::Message;
    use crate::engine::generate::GenerationParams;
    use crate::engine::stable_prefix::SplitPoint;

    fn request(temperature: f32, stops: &[&str]) -> ChatRequest {
        let mut params = GenerationParams::default();
        params.sampling.temperature = temperature;
        params.stop_strings = stops.iter().map(|s| s.to_string()).collect();
        ChatRequest {
            messages: vec![Message::system("guide"), Message::user("passage")],
            split: SplitPoint {
                message: 1,
                offset: 0,
            },
            params,
        }
    }

    #[test]
    fn greedy_request_body() {
        let body: Value =
            serde_json::from_str(&request_body("m", &request(0.0, &[]), false)).unwrap();
        assert_eq!(body["model"], "m");
        assert_eq!(body["temperature"], 0);
        assert!(body.get("top_p").is_none() && body.get("stop").is_none());
        assert_eq!(body["max_tokens"], 512);
        assert_eq!(body["seed"], 42);
        assert_eq!(body["stream"], false);
        assert_eq!(body["messages"][1]["role"], "user");
        assert_eq!(body["messages"][1]["content"], "passage");
    }

    #[test]
    fn sampled_request_body_sends_at_most_four_stops() {
        let req = request(0.7, &["a", "b", "", "c", "d", "e"]);
        let body: Value = serde_json::from_str(&request_body("m", &req, false)).unwrap();
        assert!((body["temperature"].as_f64().unwrap() - 0.7).abs() < 1e-6);
        assert!((body["top_p"].as_f64().unwrap() - 0.95).abs() < 1e-6);
        assert_eq!(body["stop"], json!(["a", "b", "c", "d"]));
    }

    #[test]
    fn finish_reasons() {
        let body = |f: &str| {
            format!(r#"{{"choices":[{{"message":{{"content":"x"}},"finish_reason":"{f}"}}]}}"#)
        };
        let finish = |f: &str| parse_reply(&body(f), &[]).unwrap().finish;
        assert_eq!(finish("length"), FinishReason::Length);
        assert_eq!(finish("stop"), FinishReason::Eos);
        assert_eq!(finish("content_filter"), FinishReason::Eos);
    }

    #[test]
    fn bad_answers_are_errors() {
        assert!(format!("{:#}", parse_reply("<html>", &[]).unwrap_err()).contains("not JSON"));
        assert!(format!("{:#}", parse_reply("{}", &[]).unwrap_err()).contains("no choices"));
    }

    #[test]
    fn model_list() {
        let ids = model_ids(r#"{"object":"list","data":[{"id":"qwen"},{"id":"llama"}]}"#);
        assert_eq!(ids.unwrap(), ["qwen", "llama"]);
        assert!(model_ids(r#"{"models":[]}"#).is_err());
    }

    #[test]
    fn the_constraint_travels_only_to_quire_serve() {
        let passage = "The cache.";
        let mut req = request(0.0, &[]);
        req.params = crate::translate::passage::constrained(&req.params, passage, "zh-CN", &[], 64);
        let to = |quire| serde_json::from_str::<Value>(&request_body("m", &req, quire)).unwrap();
        assert!(to(false).get("quire_constraint").is_none());
        let spec = to(true)["quire_constraint"].clone();
        assert_eq!(spec["passage"], passage);
        assert_eq!(spec["latin_names_only"], true);
        let list = r#"{"data":[{"id":"m","owned_by":"quire"},{"id":"n","owned_by":"x"}]}"#;
        assert!(served_by_quire(list, "m"));
        assert!(!served_by_quire(list, "n"));
        assert!(!served_by_quire("nope", "m"));
    }
}
