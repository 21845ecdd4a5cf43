//! `quire translate --backend openai`: bad flags and an unreachable server end in a clear
//! error (and no output directory), and a run against a scripted server on `127.0.0.1:0`
//! goes through the whole pipeline and records the server's cache reuse. No real model.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Output};

fn quire(args: &[&str], out: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_quire"))
        .arg("translate")
        .args(args)
        .arg("--out")
        .arg(out)
        .env_remove("QUIRE_TEST_KEY_UNSET")
        .output()
        .expect("quire runs")
}

fn code_and_err(o: &Output) -> (i32, String) {
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn openai_without_base_url_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let (code, err) = code_and_err(&quire(&["--backend", "openai"], &out));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--backend openai needs --base-url"), "{err}");
    assert!(!out.exists());
}

#[test]
fn server_flags_without_openai_and_a_missing_key_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let (code, err) = code_and_err(&quire(&["--base-url", "http://127.0.0.1:9/v1"], &out));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--base-url is for --backend openai"), "{err}");
    let args = [
        "--backend",
        "openai",
        "--base-url",
        "http://127.0.0.1:9/v1",
        "--api-key-env",
        "QUIRE_TEST_KEY_UNSET",
    ];
    let (code, err) = code_and_err(&quire(&args, &out));
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("QUIRE_TEST_KEY_UNSET") && err.contains("not set"),
        "{err}"
    );
    assert!(!out.exists());
}

#[test]
fn an_unreachable_server_fails_clearly_and_leaves_no_output_directory() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("never");
    for extra in [&["--api-model", "x"][..], &[][..]] {
        let mut args = vec![
            "--backend",
            "openai",
            "--base-url",
            "http://127.0.0.1:9/v1",
            "--max-retries",
            "1",
        ];
        args.extend(extra);
        let (code, err) = code_and_err(&quire(&args, &out));
        assert_ne!(code, 0, "{err}");
        assert!(
            err.contains("cannot reach the server") && err.contains("http://127.0.0.1:9/v1/models"),
            "{err}"
        );
        assert!(!err.contains("panicked"), "{err}");
        assert!(!out.exists(), "{} left behind", out.display());
    }
}

#[test]
fn dry_run_with_openai_needs_no_server() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out");
    let args = [
        "--backend",
        "openai",
        "--base-url",
        "http://127.0.0.1:9/v1",
        "--dry-run",
    ];
    let o = quire(&args, &out);
    let (code, err) = code_and_err(&o);
    assert_eq!(code, 0, "{err}");
    assert!(String::from_utf8_lossy(&o.stdout).contains("Plan:"));
}

/// A server that lists one model and answers every chat call with the passage's own text
/// (`{{N}}` placeholders kept), reporting 40 cached prompt tokens per call.
fn echo_server() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}/v1", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || answer(stream));
        }
    });
    base
}

fn answer(stream: TcpStream) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let (mut head, mut line) = (String::new(), String::new());
    while reader.read_line(&mut line).unwrap_or(0) > 0 && line != "\r\n" {
        head.push_str(&line);
        line.clear();
    }
    let len: usize = head
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; len];
    reader.read_exact(&mut body).unwrap();
    let reply = if head.starts_with("GET /v1/models ") {
        serde_json::json!({"object": "list", "data": [{"id": "echo-model"}]})
    } else {
        let req: serde_json::Value = serde_json::from_slice(&body).unwrap();
        let last = req["messages"].as_array().unwrap().last().unwrap()["content"]
            .as_str()
            .unwrap()
            .to_string();
        serde_json::json!({
            "choices": [{"message": {"role": "assistant", "content": last}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 10,
                      "prompt_tokens_details": {"cached_tokens": 40}},
        })
    }
    .to_string();
    let mut stream = stream;
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        reply.len()
    );
    stream.write_all(head.as_bytes()).ok();
    stream.write_all(reply.as_bytes()).ok();
}

#[test]
fn a_run_through_a_scripted_server_records_the_server_and_its_cache() {
    let dir = tempfile::tempdir().unwrap();
    let book = dir.path().join("book.md");
    std::fs::write(
        &book,
        "# One\n\nThe cache is stored on disk.\n\nA second paragraph with `code`.\n",
    )
    .unwrap();
    let out = dir.path().join("out");
    let base = echo_server();
    let args = [
        book.to_str().unwrap(),
        "--backend",
        "openai",
        "--base-url",
        &base,
        "--quiet",
    ];
    let o = quire(&args, &out);
    let (code, err) = code_and_err(&o);
    // The echo is no translation: the checks may block units (exit 1), but the run ends.
    assert!(code == 0 || code == 1, "exit {code}: {err}");
    let run: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("run.json")).unwrap()).unwrap();
    let host = base.trim_start_matches("http://").trim_end_matches("/v1");
    assert_eq!(run["model"], format!("openai:echo-model@{host}"));
    assert_eq!(run["device"], base);
    let calls = run["totals"]["calls"].as_u64().unwrap();
    assert!(calls > 0, "{run}");
    assert_eq!(
        run["totals"]["cached_prefix_tokens"].as_u64(),
        Some(40 * calls)
    );
    assert_eq!(run["calls"][0]["cache_source"], "server");
    let checkpoint = std::fs::read_to_string(out.join("orchestration_checkpoint.json")).unwrap();
    assert!(
        checkpoint.contains("\"provider\": \"openai\"")
            || checkpoint.contains("\"provider\":\"openai\"")
    );
}
