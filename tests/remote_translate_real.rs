//! `quire translate --backend openai` on the real 0.5B model against real servers:
//! `quire serve` (the book must be byte-identical to the in-process one: same model, greedy
//! decoding, the passage constraint sent along), and llama.cpp's own server when the
//! llama-cpp-python venv with its server extras exists (`quire bench serve` installs them).

mod common;

use common::server::Server;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn translate(extra: &[&str], out: &Path) -> Output {
    let model = common::model_path(common::QWEN);
    Command::new(env!("CARGO_BIN_EXE_quire"))
        .arg("translate")
        .arg("--model")
        .arg(&model)
        .arg("--out")
        .arg(out)
        .arg("-q")
        .args(extra)
        .output()
        .expect("quire translate runs")
}

/// Its stdout and stderr (the summary), after checking it succeeded.
fn assert_ok(o: &Output, what: &str) -> String {
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.status.success(), "{what} failed:\n{text}");
    text
}

/// Every file under `dir`, relative, with its bytes, in path order.
fn files(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(dir).unwrap().to_path_buf();
                out.push((rel, std::fs::read(&p).unwrap()));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn the_book_through_quire_serve_is_the_in_process_book() {
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("local");
    let remote = dir.path().join("remote");
    assert_ok(
        &translate(&["--no-disk-cache"], &local),
        "in-process translate",
    );
    let server = Server::start(&[]);
    let base = server.base();
    let stdout = assert_ok(
        &translate(&["--backend", "openai", "--base-url", &base], &remote),
        "translate --backend openai",
    );
    assert!(stdout.contains(" 0 blocked"), "{stdout}");
    let (a, b) = (files(&local.join("book")), files(&remote.join("book")));
    assert_eq!(a.len(), 3, "the sample book has three chapters");
    for ((pa, ba), (pb, bb)) in a.iter().zip(&b) {
        assert_eq!(pa, pb);
        assert!(
            ba == bb,
            "{} differs:\n--- in-process\n{}\n--- through quire serve\n{}",
            pa.display(),
            String::from_utf8_lossy(ba),
            String::from_utf8_lossy(bb)
        );
    }
    let glossary = |d: &Path| {
        serde_json::from_slice::<serde_json::Value>(
            &std::fs::read(d.join("glossary.json")).unwrap(),
        )
        .unwrap()
    };
    assert_eq!(glossary(&local), glossary(&remote));
    let run: serde_json::Value =
        serde_json::from_slice(&std::fs::read(remote.join("run.json")).unwrap()).unwrap();
    assert!(run["model"].as_str().unwrap().starts_with("openai:"));
    assert!(run["totals"]["cached_prefix_tokens"].as_u64().unwrap() > 0);
}

/// The llama-cpp-python venv's python, when it can run llama.cpp's server.
fn llama_server_python() -> Option<PathBuf> {
    let python = quire::bench::engine::llama_python_path(&quire::cli::bench::bench_config());
    let ok = Command::new(&python)
        .args(["-c", "import llama_cpp.server.app, uvicorn, sse_starlette"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    ok.then_some(python)
}

#[test]
fn the_book_through_llama_cpp_server_when_its_venv_exists() {
    let Some(python) = llama_server_python() else {
        eprintln!("skipped: no llama-cpp-python venv with the server extras (quire bench serve installs it)");
        return;
    };
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = Command::new(python)
        .args(["-m", "llama_cpp.server", "--model"])
        .arg(common::model_path(common::QWEN))
        .args([
            "--port",
            &port.to_string(),
            "--n_ctx",
            "8192",
            "--verbose",
            "False",
        ])
        .args(["--interrupt_requests", "False"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let base = format!("http://127.0.0.1:{port}/v1");
    let deadline = Instant::now() + Duration::from_secs(120);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "llama.cpp's server did not start"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("llama");
    let result = translate(&["--backend", "openai", "--base-url", &base], &out);
    let _ = child.kill();
    let _ = child.wait();
    let stdout = assert_ok(&result, "translate against llama.cpp's server");
    assert!(stdout.contains("13 of 13 units passed"), "{stdout}");
    assert!(stdout.contains(" 0 blocked"), "{stdout}");
    assert!(stdout.contains("structure/QA errors: 0"), "{stdout}");
    let run: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("run.json")).unwrap()).unwrap();
    assert!(run["model"].as_str().unwrap().starts_with("openai:"));
}
