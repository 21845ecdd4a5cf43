//! [`RemoteBackend`] against a scripted HTTP server on `127.0.0.1:0` (std `TcpListener`):
//! each test says what the server answers to the n-th request and reads back what it got.

use super::*;
use crate::engine::generate::{FinishReason, GenerationParams};
use crate::engine::stable_prefix::SplitPoint;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;

/// What the server sends back.
struct Answer {
    status: u16,
    headers: Vec<(&'static str, String)>,
    body: String,
}

impl Answer {
    fn json(status: u16, body: Value) -> Self {
        Self {
            status,
            headers: Vec::new(),
            body: body.to_string(),
        }
    }
}

/// A chat answer with `text`, finish reason "stop" and extra top-level fields.
fn chat(text: &str, extra: Value) -> Answer {
    let mut v = json!({
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
    });
    if let (Some(v), Some(extra)) = (v.as_object_mut(), extra.as_object()) {
        v.extend(extra.clone());
    }
    Answer::json(200, v)
}

/// One request as the server saw it.
#[derive(Debug, Clone)]
struct Seen {
    head: String,
    body: String,
}

impl Seen {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap()
    }
}

type Handler = dyn Fn(usize, &Seen) -> Answer + Send + Sync;

/// A server answering each request on its own thread with `handler(n, request)`; its base
/// URL and the requests it got.
fn serve(
    handler: impl Fn(usize, &Seen) -> Answer + Send + Sync + 'static,
) -> (String, Arc<Mutex<Vec<Seen>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let handler: Arc<Handler> = Arc::new(handler);
    let log = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let (handler, log) = (handler.clone(), log.clone());
            std::thread::spawn(move || answer_one(stream, &*handler, &log));
        }
    });
    (base, seen)
}

fn answer_one(stream: TcpStream, handler: &Handler, log: &Mutex<Vec<Seen>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            break;
        }
        head.push_str(&line);
    }
    let len = head
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; len];
    reader.read_exact(&mut body).unwrap();
    let seen = Seen {
        head,
        body: String::from_utf8(body).unwrap(),
    };
    let n = {
        let mut log = log.lock().unwrap();
        log.push(seen.clone());
        log.len() - 1
    };
    let a = handler(n, &seen);
    let mut out = format!(
        "HTTP/1.1 {} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
        a.status,
        a.body.len()
    );
    for (k, v) in &a.headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str("\r\n");
    out.push_str(&a.body);
    let mut stream = stream;
    stream.write_all(out.as_bytes()).ok();
}

fn config(base: &str) -> RemoteConfig {
    RemoteConfig {
        retry_base: Duration::from_millis(5),
        max_retries: 3,
        ..RemoteConfig::new(base, "test-model")
    }
}

fn backend(base: &str) -> RemoteBackend {
    RemoteBackend::new(config(base)).unwrap()
}

fn request(user: &str) -> ChatRequest {
    ChatRequest {
        messages: vec![Message::system("You translate."), Message::user(user)],
        split: SplitPoint {
            message: 1,
            offset: 0,
        },
        params: GenerationParams::default(),
    }
}

#[test]
fn a_503_is_retried_and_the_200_answers() {
    let (base, seen) = serve(|n, _| match n {
        0 => Answer::json(503, json!({"error": {"message": "loading model"}})),
        _ => chat("你好", json!({})),
    });
    let c = backend(&base).complete(&request("Hello")).unwrap();
    assert_eq!(c.text, "你好");
    assert_eq!(c.finish, FinishReason::Eos);
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 2);
    assert!(
        seen[1].head.starts_with("POST /v1/chat/completions "),
        "{}",
        seen[1].head
    );
    let body = seen[1].json();
    assert_eq!(body["model"], "test-model");
    assert_eq!(body["messages"][1]["content"], "Hello");
    assert!(!seen[1].head.to_lowercase().contains("authorization"));
}

#[test]
fn a_429_waits_for_retry_after() {
    let (base, seen) = serve(|n, _| match n {
        0 => Answer {
            headers: vec![("Retry-After", "1".into())],
            ..Answer::json(429, json!({"error": {"message": "slow down"}}))
        },
        _ => chat("ok", json!({})),
    });
    let start = Instant::now();
    let c = backend(&base).complete(&request("Hello")).unwrap();
    assert_eq!(c.text, "ok");
    assert!(
        start.elapsed() >= Duration::from_millis(990),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(seen.lock().unwrap().len(), 2);
}

#[test]
fn a_400_fails_at_once_with_the_server_message() {
    let (base, seen) = serve(|_, _| {
        Answer::json(
            400,
            json!({"error": {"message": "model 'test-model' not found", "type": "invalid_request_error"}}),
        )
    });
    let err = format!(
        "{:#}",
        backend(&base).complete(&request("Hello")).unwrap_err()
    );
    assert!(
        err.contains("400") && err.contains("model 'test-model' not found"),
        "{err}"
    );
    assert!(err.contains("/v1/chat/completions"), "{err}");
    assert_eq!(seen.lock().unwrap().len(), 1);
}

#[test]
fn retries_run_out() {
    let (base, seen) = serve(|_, _| Answer::json(500, json!({"error": {"message": "boom"}})));
    let err = format!(
        "{:#}",
        backend(&base).complete(&request("Hello")).unwrap_err()
    );
    assert!(
        err.contains("gave up after 3 retries") && err.contains("boom"),
        "{err}"
    );
    assert_eq!(seen.lock().unwrap().len(), 4);
}

#[test]
fn an_unreachable_server_is_an_error_after_the_retries() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut cfg = config(&format!("http://127.0.0.1:{port}/v1"));
    cfg.max_retries = 1;
    let err = format!(
        "{:#}",
        RemoteBackend::new(cfg)
            .unwrap()
            .complete(&request("x"))
            .unwrap_err()
    );
    assert!(
        err.contains("cannot reach the server") && err.contains("gave up after 1 retry"),
        "{err}"
    );
}

#[test]
fn cached_tokens_from_prompt_tokens_details() {
    let usage = json!({"usage": {"prompt_tokens": 120, "completion_tokens": 9,
        "prompt_tokens_details": {"cached_tokens": 96}}});
    let (base, _) = serve(move |_, _| chat("译文", usage.clone()));
    let mut b = backend(&base);
    let c = b.complete(&request("Hello")).unwrap();
    assert_eq!(
        (c.prompt_tokens, c.completion_tokens, c.cached_tokens),
        (120, 9, 96)
    );
    assert_eq!(c.cache_source, "server");
    assert_eq!(c.ttft_seconds, c.latency_seconds);
    let s = b.prefix_stats();
    assert_eq!(
        (s.memory_hits, s.misses, s.hit_tokens, s.computed_tokens),
        (1, 0, 96, 24)
    );
}

#[test]
fn cached_tokens_from_llama_server_timings() {
    let extra = json!({"usage": {"prompt_tokens": 50, "completion_tokens": 4},
        "timings": {"cache_n": 32, "prompt_n": 18}});
    let (base, _) = serve(move |_, _| chat("x", extra.clone()));
    let c = backend(&base).complete(&request("Hello")).unwrap();
    assert_eq!(
        (c.prompt_tokens, c.cached_tokens, c.cache_source),
        (50, 32, "server")
    );
}

#[test]
fn without_usage_the_counts_are_estimated() {
    let (base, _) = serve(|_, _| chat("a reply of some words", json!({})));
    let mut b = backend(&base);
    let c = b.complete(&request("Hello")).unwrap();
    assert_eq!(c.cached_tokens, 0);
    assert_eq!(c.cache_source, "none");
    assert_eq!(
        c.prompt_tokens,
        b.prompt_tokens(&request("Hello").messages).unwrap()
    );
    assert_eq!(
        c.completion_tokens,
        b.count_tokens("a reply of some words").unwrap()
    );
    assert!(c.prompt_tokens > 0 && c.completion_tokens > 0);
    assert_eq!(b.prefix_stats().misses, 1);
}

#[test]
fn stop_strings_beyond_four_are_applied_here() {
    let (base, seen) = serve(|_, _| chat("第一行\n<<END>> trailing", json!({})));
    let mut req = request("Hello");
    req.params.stop_strings = ["</a>", "</b>", "</c>", "</d>", "<<END>>"]
        .map(String::from)
        .to_vec();
    let c = backend(&base).complete(&req).unwrap();
    assert_eq!(c.text, "第一行\n");
    assert_eq!(c.finish, FinishReason::Stop);
    let body = seen.lock().unwrap()[0].json();
    assert_eq!(body["stop"], json!(["</a>", "</b>", "</c>", "</d>"]));
}

#[test]
fn length_and_sampling_reach_the_wire() {
    let (base, seen) = serve(|_, _| {
        Answer::json(
            200,
            json!({"choices": [{"message": {"content": "cut"}, "finish_reason": "length"}]}),
        )
    });
    let mut req = request("Hello");
    req.params.max_new_tokens = 77;
    req.params.sampling.temperature = 0.5;
    req.params.sampling.seed = 7;
    let c = backend(&base).complete(&req).unwrap();
    assert_eq!(c.finish, FinishReason::Length);
    let body = seen.lock().unwrap()[0].json();
    assert_eq!(
        (body["max_tokens"].as_u64(), body["seed"].as_u64()),
        (Some(77), Some(7))
    );
    assert_eq!(body["temperature"], 0.5);
    assert_eq!(body["stream"], false);
}

#[test]
fn the_key_is_sent_as_a_bearer_token() {
    let (base, seen) = serve(|_, _| chat("x", json!({})));
    let mut cfg = config(&format!("{base}/"));
    cfg.api_key = Some("sk-test".into());
    assert!(!format!("{cfg:?}").contains("sk-test"));
    RemoteBackend::new(cfg)
        .unwrap()
        .complete(&request("Hello"))
        .unwrap();
    let seen = seen.lock().unwrap();
    assert!(
        seen[0].head.starts_with("POST /v1/chat/completions "),
        "{}",
        seen[0].head
    );
    assert!(
        seen[0].head.contains("Authorization: Bearer sk-test"),
        "{}",
        seen[0].head
    );
}

#[test]
fn a_batch_keeps_order_with_at_most_concurrency_in_flight() {
    let now = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let (n2, p2) = (now.clone(), peak.clone());
    let (base, seen) = serve(move |_, seen| {
        let inflight = n2.fetch_add(1, Ordering::SeqCst) + 1;
        p2.fetch_max(inflight, Ordering::SeqCst);
        let user = seen.json()["messages"][1]["content"]
            .as_str()
            .unwrap()
            .to_string();
        let k: u64 = user.trim_start_matches('u').parse().unwrap();
        // Later requests answer sooner, so replies arrive out of order.
        std::thread::sleep(Duration::from_millis(20 * (10 - k)));
        n2.fetch_sub(1, Ordering::SeqCst);
        chat(&format!("r{k}"), json!({}))
    });
    let mut cfg = config(&base);
    cfg.concurrency = 3;
    let mut b = RemoteBackend::new(cfg).unwrap();
    let reqs: Vec<ChatRequest> = (0..8).map(|k| request(&format!("u{k}"))).collect();
    let batch = b.complete_batch(&reqs).unwrap();
    let texts: Vec<&str> = batch.iter().map(|c| c.text.as_str()).collect();
    assert_eq!(texts, ["r0", "r1", "r2", "r3", "r4", "r5", "r6", "r7"]);
    let peak = peak.load(Ordering::SeqCst);
    assert!((2..=3).contains(&peak), "peak in flight {peak}");
    assert_eq!(seen.lock().unwrap().len(), 8);
    let one = b.complete(&reqs[5]).unwrap();
    assert_eq!(one.text, batch[5].text);
}

#[test]
fn a_failure_in_a_batch_fails_the_batch() {
    let (base, _) = serve(
        |_, seen| match seen.json()["messages"][1]["content"].as_str() {
            Some("bad") => Answer::json(400, json!({"error": {"message": "context too long"}})),
            _ => chat("ok", json!({})),
        },
    );
    let reqs = [request("a"), request("bad"), request("c")];
    let err = format!("{:#}", backend(&base).complete_batch(&reqs).unwrap_err());
    assert!(err.contains("context too long"), "{err}");
}

#[test]
fn models_are_listed_and_the_server_checked() {
    let (base, _) = serve(|_, seen| {
        assert!(seen.head.starts_with("GET /v1/models "), "{}", seen.head);
        Answer::json(
            200,
            json!({"object": "list", "data": [{"id": "qwen2.5"}, {"id": "other"}]}),
        )
    });
    assert_eq!(list_models(&config(&base)).unwrap(), ["qwen2.5", "other"]);
    backend(&base).check_server().unwrap();
    let (base, _) = serve(|_, _| Answer::json(404, json!({"error": "not found"})));
    backend(&base).check_server().unwrap();
    let (base, _) =
        serve(|_, _| Answer::json(401, json!({"error": {"message": "invalid api key"}})));
    let err = format!("{:#}", backend(&base).check_server().unwrap_err());
    assert!(
        err.contains("401") && err.contains("invalid api key"),
        "{err}"
    );
}

#[test]
fn names_and_config_checks() {
    let b = backend("http://127.0.0.1:8080/v1/");
    assert_eq!(b.model_name(), "openai:test-model@127.0.0.1:8080");
    assert_eq!(b.device_name(), "http://127.0.0.1:8080/v1");
    assert_eq!(b.provider(), "openai");
    assert_eq!(b.counting(), "estimate");
    for bad in ["127.0.0.1:8080/v1", "ftp://x/v1", "http:///v1"] {
        let err = RemoteBackend::new(config(bad))
            .err()
            .expect(bad)
            .to_string();
        assert!(err.contains("bad base URL"), "{err}");
    }
    assert!(RemoteBackend::new(RemoteConfig::new("http://h/v1", " ")).is_err());
}
