//! `quire bench serve`: `quire serve` and llama.cpp's server (`python -m llama_cpp.server`,
//! same GGUF, same threads) under the same shared-prefix workload — N concurrent clients,
//! each sending several translation requests (the built-in translation guide as the system
//! prompt, one sample-book paragraph as the user message), streamed. Per level: throughput
//! (generated tokens per wall second), time to first token p50/p95, and the share of prompt
//! tokens the server reports as cached.

use super::sys::Machine;
use anyhow::{bail, Context, Result};
use serde::Serialize;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// What to measure.
#[derive(Debug, Clone)]
pub struct ServeBenchOptions {
    /// The GGUF both servers load.
    pub model: PathBuf,
    /// Threads for both servers.
    pub threads: usize,
    /// Concurrent clients per level.
    pub clients: Vec<usize>,
    /// Requests each client sends, one after another.
    pub requests_per_client: usize,
    /// `max_tokens` of every request.
    pub max_tokens: usize,
    /// Also run llama.cpp's server (needs llama-cpp-python with its server extras).
    pub llama: bool,
    /// The `quire` executable to serve with.
    pub quire_exe: PathBuf,
    /// Where llama.cpp's venv is.
    pub config: super::config::BenchConfig,
}

/// One level (a number of concurrent clients) on one server.
#[derive(Debug, Clone, Serialize)]
pub struct LevelResult {
    /// Concurrent clients.
    pub clients: usize,
    /// Requests completed.
    pub requests: usize,
    /// Tokens generated in all.
    pub completion_tokens: usize,
    /// Wall seconds from the first request to the last reply.
    pub wall_seconds: f64,
    /// Generated tokens per wall second.
    pub tokens_per_second: f64,
    /// Median time to first token, seconds.
    pub ttft_p50: f64,
    /// 95th-percentile time to first token, seconds.
    pub ttft_p95: f64,
    /// Prompt tokens the server reported as cached ÷ prompt tokens (None when it reports
    /// no cached tokens at all).
    pub cached_share: Option<f64>,
}

/// The whole run.
#[derive(Debug, Clone, Serialize)]
pub struct ServeBenchReport {
    /// Where it ran.
    pub machine: Machine,
    /// Model file name.
    pub model: String,
    /// Requests each client sent.
    pub requests_per_client: usize,
    /// `max_tokens` per request.
    pub max_tokens: usize,
    /// `quire serve`, one entry per level.
    pub quire: Vec<LevelResult>,
    /// llama.cpp's server, one entry per level (empty when not run).
    pub llama_cpp: Vec<LevelResult>,
}

/// A server child process, killed when dropped.
struct ServerProcess {
    child: Child,
    base: String,
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl ServerProcess {
    /// Start `cmd` (which must listen on `port`) and wait until `GET {base}/models` answers.
    fn start(mut cmd: Command, port: u16, what: &str) -> Result<Self> {
        let child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("cannot start {what}"))?;
        let mut server = Self {
            child,
            base: format!("http://127.0.0.1:{port}/v1"),
        };
        let deadline = Instant::now() + Duration::from_secs(300);
        while Instant::now() < deadline {
            if let Some(status) = server.child.try_wait()? {
                bail!("{what} exited with {status} before it listened");
            }
            if ureq::get(&format!("{}/models", server.base)).call().is_ok() {
                return Ok(server);
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        server.child.kill().ok();
        bail!("{what} did not answer on port {port} within 300 s")
    }

    /// The id of the model it serves.
    fn model_id(&self) -> Result<String> {
        let v: serde_json::Value = ureq::get(&format!("{}/models", self.base))
            .call()?
            .into_json()?;
        v["data"][0]["id"]
            .as_str()
            .map(str::to_string)
            .context("the server lists no model")
    }
}

/// A free loopback port (bound and released; the server binds it right after).
fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// The workload's user messages: the sample book's prose paragraphs.
pub fn paragraphs() -> Vec<String> {
    crate::translate::sample_book::CHAPTERS
        .iter()
        .flat_map(|(_, text)| text.split("\n\n"))
        .map(str::trim)
        .filter(|p| p.len() > 120 && p.starts_with(|c: char| c.is_ascii_alphabetic()))
        .map(str::to_string)
        .collect()
}

/// The shared system prompt: the built-in translation guide.
fn system_prompt() -> String {
    format!(
        "You translate technical books from English into Simplified Chinese. Reply with the translation only.\n\n{}",
        crate::prompts::agents::DEFAULT_GUIDE
    )
}

/// What one streamed request measured.
struct Sample {
    ttft: f64,
    completion_tokens: usize,
    prompt_tokens: usize,
    cached_tokens: usize,
}

/// Send one streamed chat request and time its first content chunk.
fn one_request(base: &str, model: &str, user: &str, max_tokens: usize) -> Result<Sample> {
    let body = serde_json::json!({
        "model": model,
        "messages": [
            {"role": "system", "content": system_prompt()},
            {"role": "user", "content": user},
        ],
        "temperature": 0,
        "max_tokens": max_tokens,
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    let start = Instant::now();
    let resp = ureq::post(&format!("{base}/chat/completions"))
        .timeout(Duration::from_secs(1800))
        .send_json(body)
        .context("chat request failed")?;
    let mut sample = Sample {
        ttft: 0.0,
        completion_tokens: 0,
        prompt_tokens: 0,
        cached_tokens: 0,
    };
    let mut chunks = 0;
    for line in BufReader::new(resp.into_reader()).lines() {
        let line = line?;
        let Some(data) = line.strip_prefix("data: ") else {
            continue;
        };
        if data.trim() == "[DONE]" {
            break;
        }
        let v: serde_json::Value = serde_json::from_str(data)?;
        if v["choices"][0]["delta"]["content"]
            .as_str()
            .is_some_and(|c| !c.is_empty())
        {
            if chunks == 0 {
                sample.ttft = start.elapsed().as_secs_f64();
            }
            chunks += 1;
        }
        if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
            sample.completion_tokens = u["completion_tokens"].as_u64().unwrap_or(0) as usize;
            sample.prompt_tokens = u["prompt_tokens"].as_u64().unwrap_or(0) as usize;
            sample.cached_tokens = u["prompt_tokens_details"]["cached_tokens"]
                .as_u64()
                .unwrap_or(0) as usize;
        }
    }
    if chunks == 0 {
        bail!("{base} streamed no text for a translation request (the server dropped it?)");
    }
    if sample.completion_tokens == 0 {
        // A server without a usage chunk: one content chunk per token.
        sample.completion_tokens = chunks;
    }
    Ok(sample)
}

/// `clients` threads, each sending `per_client` requests in turn.
fn run_level(
    base: &str,
    model: &str,
    clients: usize,
    per_client: usize,
    max_tokens: usize,
    units: &[String],
) -> Result<LevelResult> {
    let start = Instant::now();
    let samples: Vec<Sample> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..clients)
            .map(|c| {
                s.spawn(move || {
                    (0..per_client)
                        .map(|r| {
                            let unit = &units[(c * per_client + r) % units.len()];
                            one_request(base, model, unit, max_tokens)
                        })
                        .collect::<Result<Vec<_>>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .map_err(|_| anyhow::anyhow!("a client thread panicked"))?
            })
            .collect::<Result<Vec<Vec<_>>>>()
            .map(|v| v.into_iter().flatten().collect())
    })?;
    let wall = start.elapsed().as_secs_f64();
    let mut ttfts: Vec<f64> = samples.iter().map(|s| s.ttft).collect();
    ttfts.sort_by(f64::total_cmp);
    let pct = |p: f64| ttfts[((ttfts.len() - 1) as f64 * p).round() as usize];
    let tokens: usize = samples.iter().map(|s| s.completion_tokens).sum();
    let prompt: usize = samples.iter().map(|s| s.prompt_tokens).sum();
    let cached: usize = samples.iter().map(|s| s.cached_tokens).sum();
    Ok(LevelResult {
        clients,
        requests: samples.len(),
        completion_tokens: tokens,
        wall_seconds: wall,
        tokens_per_second: tokens as f64 / wall,
        ttft_p50: pct(0.5),
        ttft_p95: pct(0.95),
        cached_share: (cached > 0 && prompt > 0).then(|| cached as f64 / prompt as f64),
    })
}

/// Every level against one server (after one warm-up request).
fn run_server(
    server: &ServerProcess,
    opts: &ServeBenchOptions,
    name: &str,
) -> Result<Vec<LevelResult>> {
    let units = paragraphs();
    let model = server.model_id()?;
    one_request(&server.base, &model, &units[0], 8).context("warm-up request")?;
    opts.clients
        .iter()
        .map(|&n| {
            eprintln!(
                "{name}: {n} client(s) × {} request(s)",
                opts.requests_per_client
            );
            run_level(
                &server.base,
                &model,
                n,
                opts.requests_per_client,
                opts.max_tokens,
                &units,
            )
        })
        .collect()
}

/// `quire serve` on a free port.
fn start_quire(opts: &ServeBenchOptions) -> Result<ServerProcess> {
    let port = free_port()?;
    let mut cmd = Command::new(&opts.quire_exe);
    cmd.args(["serve", "--no-disk-cache", "--port", &port.to_string()])
        .arg("--model")
        .arg(&opts.model)
        .args([
            "--max-batch",
            &opts.clients.iter().max().unwrap_or(&1).to_string(),
        ])
        .env("RAYON_NUM_THREADS", opts.threads.to_string());
    ServerProcess::start(cmd, port, "quire serve")
}

/// llama.cpp's server from llama-cpp-python (installing its server extras into the venv
/// when they are missing).
fn start_llama(opts: &ServeBenchOptions, python: &Path) -> Result<ServerProcess> {
    let ok = Command::new(python)
        .args(["-c", "import llama_cpp.server.app, uvicorn, sse_starlette"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        let pip = python.with_file_name("pip");
        eprintln!(
            "llama.cpp server: installing its server extras with {}",
            pip.display()
        );
        let st = Command::new(&pip)
            .args([
                "install",
                "-q",
                "uvicorn>=0.22",
                "fastapi>=0.100",
                "pydantic-settings>=2.0.1",
                "sse-starlette>=1.6.1",
                "starlette-context>=0.3.6,<0.4",
            ])
            .status()?;
        if !st.success() {
            bail!("installing llama-cpp-python's server extras failed");
        }
    }
    let port = free_port()?;
    let t = opts.threads.to_string();
    let mut cmd = Command::new(python);
    cmd.args(["-m", "llama_cpp.server", "--model"])
        .arg(&opts.model)
        .args([
            "--port",
            &port.to_string(),
            "--n_threads",
            &t,
            "--n_threads_batch",
            &t,
        ])
        .args(["--n_ctx", "8192", "--verbose", "False"])
        // Queue concurrent requests (its default cancels the running one for a new one).
        .args(["--interrupt_requests", "False"]);
    ServerProcess::start(cmd, port, "llama.cpp server (python -m llama_cpp.server)")
}

/// Run the benchmark: `quire serve` first, then llama.cpp's server (one at a time, so they
/// do not share the CPU).
pub fn run(opts: &ServeBenchOptions) -> Result<ServeBenchReport> {
    if paragraphs().is_empty() || opts.clients.is_empty() || opts.requests_per_client == 0 {
        bail!("nothing to send: give at least one client level and one request per client");
    }
    super::sys::warn_if_busy();
    let quire = {
        let server = start_quire(opts)?;
        run_server(&server, opts, "quire serve")?
    };
    let llama_cpp = if opts.llama {
        let python = super::engine::ensure_llama_python(&opts.config)?;
        let server = start_llama(opts, &python)?;
        run_server(&server, opts, "llama.cpp server")?
    } else {
        Vec::new()
    };
    Ok(ServeBenchReport {
        machine: Machine::detect(opts.threads),
        model: opts
            .model
            .file_name()
            .map(|n| n.to_string_lossy().to_string())
            .unwrap_or_default(),
        requests_per_client: opts.requests_per_client,
        max_tokens: opts.max_tokens,
        quire,
        llama_cpp,
    })
}

/// The report as a Markdown table: one row per level, Quire and llama.cpp side by side.
pub fn render(r: &ServeBenchReport) -> String {
    let mut out = format!(
        "quire bench serve — {} — {} request(s) per client, max_tokens {}\nmachine: {}\n\n",
        r.model,
        r.requests_per_client,
        r.max_tokens,
        r.machine.describe()
    );
    out.push_str("| clients | tok/s Quire / llama.cpp (×) | TTFT p50 s Quire / llama.cpp (×) | TTFT p95 s Quire / llama.cpp | cached share Quire / llama.cpp |\n|---|---|---|---|---|\n");
    let share = |s: Option<f64>| {
        s.map(|x| format!("{:.0} %", x * 100.0))
            .unwrap_or("–".into())
    };
    for q in &r.quire {
        let l = r.llama_cpp.iter().find(|l| l.clients == q.clients);
        let pair = |a: f64, b: Option<f64>, ratio: bool| match b {
            Some(b) if ratio => format!("{a:.2} / {b:.2} ({:.2}×)", a / b),
            Some(b) => format!("{a:.2} / {b:.2}"),
            None => format!("{a:.2} / –"),
        };
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} / {} |\n",
            q.clients,
            pair(q.tokens_per_second, l.map(|l| l.tokens_per_second), true),
            pair(q.ttft_p50, l.map(|l| l.ttft_p50), true),
            pair(q.ttft_p95, l.map(|l| l.ttft_p95), false),
            share(q.cached_share),
            l.map(|l| share(l.cached_share)).unwrap_or("–".into()),
        ));
    }
    out.push_str("\nThroughput ratio: Quire ÷ llama.cpp (higher is better); TTFT ratio: Quire ÷ llama.cpp (lower is better).\n");
    out
}
