//! `quire serve` on the real 0.5B model, driven by real clients: the official `openai`
//! Python package (in a venv this test creates), and raw HTTP for what an SDK will not send
//! (malformed requests, a full queue, a client that disconnects, SIGTERM mid-request).

mod common;

use common::server::{post, request, Server};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn chat_body(line: &str, max_tokens: usize, stream: bool) -> String {
    serde_json::json!({
        "model": common::QWEN,
        "messages": [
            {"role": "system", "content": "Translate English into Simplified Chinese."},
            {"role": "user", "content": line}
        ],
        "temperature": 0,
        "max_tokens": max_tokens,
        "stream": stream,
    })
    .to_string()
}

/// A python with the `openai` package: a venv under the target dir, created on first use.
fn openai_python() -> PathBuf {
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("openai-venv");
    let python = venv.join("bin/python");
    let ok = |p: &Path| {
        Command::new(p)
            .args(["-c", "import openai"])
            .status()
            .is_ok_and(|s| s.success())
    };
    if !ok(&python) {
        let st = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .expect("python3 runs (needed for the openai client test)");
        assert!(st.success(), "python3 -m venv {} failed", venv.display());
        let st = Command::new(venv.join("bin/pip"))
            .args(["install", "--quiet", "openai==3.57.0"])
            .status()
            .expect("pip runs");
        assert!(
            st.success(),
            "pip install openai failed (PyPI must be reachable)"
        );
    }
    python
}

#[test]
fn the_openai_sdk_chats_streams_and_reuses_the_prefix() {
    let server = Server::start(&[]);
    let out = Command::new(openai_python())
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/openai_client.py"))
        .arg(server.base())
        .arg(common::QWEN)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "openai client failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let found: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert!(found["cached_tokens_second"].as_u64().unwrap() > 0);
    assert_eq!(found["concurrent_identical"], true);
}

#[test]
fn a_hundred_bad_requests_are_4xx_and_the_server_keeps_serving() {
    let server = Server::start(&["--max-request-bytes", "4096"]);
    let big = format!(
        r#"{{"messages":[{{"role":"user","content":"{}"}}]}}"#,
        "a".repeat(5000)
    );
    let bodies = [
        "",
        "{",
        "null",
        "[]",
        r#"{"messages":"hi"}"#,
        r#"{"messages":[]}"#,
        r#"{"messages":[{"role":"wizard","content":"a"}]}"#,
        r#"{"messages":[{"role":"user","content":5}]}"#,
        r#"{"model":"gpt-4","messages":[{"role":"user","content":"a"}]}"#,
        r#"{"messages":[{"role":"user","content":"a"}],"temperature":-1}"#,
        r#"{"messages":[{"role":"user","content":"a"}],"top_p":2}"#,
        r#"{"messages":[{"role":"user","content":"a"}],"max_tokens":-3}"#,
        r#"{"messages":[{"role":"user","content":"a"}],"max_tokens":100000000}"#,
        r#"{"messages":[{"role":"user","content":"a"}],"stop":["","x"]}"#,
        r#"{"messages":[{"role":"user","content":"a"}],"n":3}"#,
        r#"{"messages":[{"role":"user","content":"a"}],"stream":"yes"}"#,
        big.as_str(),
    ];
    let mut statuses = Vec::new();
    for i in 0..100 {
        let (status, body) = match i % 20 {
            17 => server.get("/v1/chat/completions"),
            18 => server.post("/v2/nothing", "", "{}"),
            19 => request(server.port, b"\x16\x03\x01 not http at all\r\n\r\n"),
            k => server.post("/v1/chat/completions", "", bodies[k % bodies.len()]),
        };
        assert!((400..500).contains(&status), "request {i}: {status} {body}");
        if i % 20 != 19 {
            let v: serde_json::Value = serde_json::from_str(&body)
                .unwrap_or_else(|e| panic!("request {i}: not JSON ({e}): {body}"));
            assert!(
                v["error"]["message"]
                    .as_str()
                    .is_some_and(|m| !m.is_empty()),
                "{body}"
            );
        }
        statuses.push(status);
    }
    assert!(statuses.contains(&404) && statuses.contains(&413) && statuses.contains(&405));
    assert_eq!(server.get("/health").0, 200);
    let (status, body) = server.post("/v1/chat/completions", "", &chat_body("Hello.", 8, false));
    assert_eq!(status, 200, "{body}");
}

#[test]
fn api_key_full_queue_and_a_disconnecting_client() {
    let server = Server::start(&[
        "--api-key",
        "sesame",
        "--max-batch",
        "1",
        "--max-queue",
        "1",
    ]);
    let auth = "Authorization: Bearer sesame\r\n";
    assert_eq!(
        server
            .post("/v1/chat/completions", "", &chat_body("Hi.", 4, false))
            .0,
        401
    );
    let wrong = "Authorization: Bearer nope\r\n";
    assert_eq!(
        server
            .post("/v1/chat/completions", wrong, &chat_body("Hi.", 4, false))
            .0,
        401
    );
    assert_eq!(server.get("/v1/models").0, 401);
    assert_eq!(server.get("/health").0, 200);

    // A long streamed reply takes the only slot.
    let body = chat_body("Count from 1 to 5000, one number per line.", 3000, true);
    let mut long = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    write!(
        long,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut first = [0u8; 256];
    let n = long.read(&mut first).unwrap();
    assert!(String::from_utf8_lossy(&first[..n]).starts_with("HTTP/1.1 200"));

    // A second request waits in the queue; a third finds it full.
    let port = server.port;
    let queued = std::thread::spawn(move || {
        let started = Instant::now();
        let r = post(
            port,
            "/v1/chat/completions",
            "Authorization: Bearer sesame\r\n",
            &chat_body("Good morning.", 16, false),
        );
        (r, started.elapsed())
    });
    std::thread::sleep(Duration::from_millis(500));
    let (status, body) = server.post("/v1/chat/completions", auth, &chat_body("Hi.", 4, false));
    assert_eq!(status, 503, "{body}");

    // The streaming client goes away: its slot goes to the queued request, which finishes
    // long before the 3000-token count would have.
    let hung_up = Instant::now();
    drop(long);
    let ((status, body), _) = queued.join().unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(
        hung_up.elapsed() < Duration::from_secs(10),
        "the queued request waited {:?} after the disconnect",
        hung_up.elapsed()
    );
}

#[test]
fn sigterm_finishes_the_request_in_flight_then_exits() {
    let mut server = Server::start(&[]);
    let body = chat_body("The engine reads the weights once per step.", 40, true);
    let mut s = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    write!(
        s,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut first = [0u8; 64];
    s.read_exact(&mut first).unwrap();
    // SAFETY: sending a signal to our own child process.
    unsafe {
        libc::kill(server.child.id() as i32, libc::SIGTERM);
    }
    let mut rest = String::new();
    s.read_to_string(&mut rest).unwrap();
    assert!(rest.contains("data: [DONE]"), "the reply was cut: {rest}");
    let status = server.child.wait().unwrap();
    assert!(status.success(), "quire serve exited with {status}");
}
