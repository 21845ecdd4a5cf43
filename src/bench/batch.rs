//! Throughput mode: several translation requests decoded together in one batch
//! ([`Engine::generate_batch`]) against the same requests decoded one after another.
//!
//! Each request asks for the translation of a different paragraph behind the same
//! system message; all are prefilled first (not timed), then decoded greedily. The
//! aggregate decode speed is Σ(tokens − 1) ÷ decode wall time (the first token of each
//! comes from its prefill), for batch sizes 1, 2, 4 by default. The bench also checks that
//! both ways produce the same tokens.

use super::sys::{self, Machine};
use crate::engine::generate::GenerationParams;
use crate::engine::{Engine, LoadOptions};
use anyhow::Result;
use serde::Serialize;
use std::path::PathBuf;

/// What to measure.
#[derive(Debug, Clone)]
pub struct BatchBenchOptions {
    /// GGUF file.
    pub model: PathBuf,
    /// Batch sizes.
    pub batches: Vec<usize>,
    /// Most new tokens per request.
    pub tokens: usize,
    /// Threads.
    pub threads: usize,
}

/// One batch size.
#[derive(Debug, Clone, Serialize)]
pub struct BatchRow {
    /// Requests decoded together.
    pub batch: usize,
    /// Tokens decoded in all (first tokens excluded).
    pub decoded_tokens: usize,
    /// Aggregate tokens/s decoding the requests one after another.
    pub sequential_tok_s: f64,
    /// Aggregate tokens/s decoding them together.
    pub batched_tok_s: f64,
    /// `batched_tok_s ÷ sequential_tok_s`.
    pub speedup: f64,
    /// Whether both ways produced the same tokens for every request.
    pub identical: bool,
}

/// The report.
#[derive(Debug, Clone, Serialize)]
pub struct BatchReport {
    /// Model file name.
    pub model: String,
    /// Machine.
    pub machine: Machine,
    /// Load average at start and end.
    pub load_average_start: Option<[f64; 3]>,
    /// Load average at the end.
    pub load_average_end: Option<[f64; 3]>,
    /// Most new tokens per request.
    pub max_new_tokens: usize,
    /// One row per batch size.
    pub rows: Vec<BatchRow>,
}

/// Paragraphs to translate: consecutive paragraphs of the bench's deterministic text.
fn paragraphs(n: usize) -> Vec<String> {
    let text = super::english_text(600 * n + 600);
    text.split("\n\n")
        .filter(|p| !p.trim().is_empty())
        .take(n)
        .map(str::to_string)
        .collect()
}

/// Run the benchmark.
pub fn run(opts: &BatchBenchOptions) -> Result<BatchReport> {
    sys::use_threads(opts.threads);
    sys::warn_if_busy();
    let load_average_start = sys::load_average();
    let engine = Engine::load(
        &opts.model,
        &candle_core::Device::Cpu,
        &LoadOptions::default(),
    )?;
    let most = opts.batches.iter().copied().max().unwrap_or(1);
    let prompts: Vec<Vec<u32>> = paragraphs(most)
        .iter()
        .map(|p| super::translation_prompt(&engine, p))
        .collect::<Result<_>>()?;
    let params = GenerationParams {
        max_new_tokens: opts.tokens,
        ..Default::default()
    };
    let mut rows = Vec::new();
    for &b in &opts.batches {
        let chosen = &prompts[..b.min(prompts.len())];
        let mut seq_tokens = Vec::new();
        let mut seq_seconds = 0.0;
        for p in chosen {
            let mut cache = engine.new_cache()?;
            let g = engine.generate(&mut cache, p, &params, &mut |_| {})?;
            seq_seconds += g.decode_seconds;
            seq_tokens.push(g.tokens);
        }
        let mut caches: Vec<_> = chosen
            .iter()
            .map(|_| engine.new_cache())
            .collect::<Result<_>>()?;
        let mut jobs: Vec<_> = caches
            .iter_mut()
            .zip(chosen)
            .map(|(c, p)| (c, p.as_slice()))
            .collect();
        let together = engine.generate_batch(&mut jobs, std::slice::from_ref(&params))?;
        let decoded: usize = seq_tokens.iter().map(|t| t.len().saturating_sub(1)).sum();
        let batch_seconds = together.first().map_or(0.0, |g| g.decode_seconds);
        let per_s = |s: f64| if s > 0.0 { decoded as f64 / s } else { 0.0 };
        let (sequential_tok_s, batched_tok_s) = (per_s(seq_seconds), per_s(batch_seconds));
        eprintln!(
            "quire: batch {b}: sequential {sequential_tok_s:.1} tok/s, batched {batched_tok_s:.1} tok/s"
        );
        rows.push(BatchRow {
            batch: b,
            decoded_tokens: decoded,
            sequential_tok_s,
            batched_tok_s,
            speedup: if sequential_tok_s > 0.0 {
                batched_tok_s / sequential_tok_s
            } else {
                0.0
            },
            identical: together
                .iter()
                .zip(&seq_tokens)
                .all(|(g, t)| &g.tokens == t),
        });
    }
    Ok(BatchReport {
        model: opts
            .model
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default(),
        machine: Machine::detect(opts.threads),
        load_average_start,
        load_average_end: sys::load_average(),
        max_new_tokens: opts.tokens,
        rows,
    })
}

/// The report as text.
pub fn render_text(r: &BatchReport) -> String {
    let mut s = format!(
        "model    {}\nmachine  {}\nload     load average {} at start, {} at end\nmethod   greedy, at most {} new tokens per request, prefill not timed; aggregate tok/s = tokens decoded ÷ decode wall time\n\n",
        r.model,
        r.machine.describe(),
        sys::load_average_text(r.load_average_start),
        sys::load_average_text(r.load_average_end),
        r.max_new_tokens
    );
    let rows: Vec<Vec<String>> = r
        .rows
        .iter()
        .map(|row| {
            vec![
                row.batch.to_string(),
                row.decoded_tokens.to_string(),
                format!("{:.1}", row.sequential_tok_s),
                format!("{:.1}", row.batched_tok_s),
                format!("{:.2}", row.speedup),
                if row.identical { "yes" } else { "NO" }.to_string(),
            ]
        })
        .collect();
    s.push_str(&super::table(
        &[
            "batch",
            "tokens",
            "sequential tok/s",
            "batched tok/s",
            "batched ÷ sequential",
            "same tokens",
        ],
        &rows,
    ));
    s
}
