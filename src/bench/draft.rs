//! Speculative decoding: translation requests decoded greedily by the target alone, with a
//! draft model guessing every round, and with the draft behind its pace guard (drafting
//! pauses while it measures slower than plain decoding). Prose paragraphs of a Markdown file
//! are translated into Simplified Chinese; decode time includes the draft's own prefill of
//! each prompt. The bench checks that every mode writes the same tokens.

use super::sys::{self, Machine};
use crate::engine::generate::{Generation, GenerationParams};
use crate::engine::speculative::Draft;
use crate::engine::{Engine, LoadOptions};
use anyhow::{Context, Result};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// What to measure.
#[derive(Debug, Clone)]
pub struct DraftBenchOptions {
    /// Target GGUF file.
    pub model: PathBuf,
    /// Draft GGUF file.
    pub draft: PathBuf,
    /// Markdown whose prose paragraphs are translated (default: the bundled sample book).
    pub text: Option<PathBuf>,
    /// Paragraphs to translate.
    pub paragraphs: usize,
    /// Most new tokens per paragraph.
    pub tokens: usize,
    /// Threads.
    pub threads: usize,
}

/// One way of decoding.
#[derive(Debug, Clone, Serialize)]
pub struct DraftMode {
    /// `plain`, `draft` (every round) or `draft+guard`.
    pub mode: String,
    /// Tokens generated over all paragraphs.
    pub tokens: usize,
    /// Decode wall seconds over all paragraphs.
    pub decode_seconds: f64,
    /// Tokens per second.
    pub tok_s: f64,
    /// Guesses proposed and accepted.
    pub proposed: usize,
    /// Guesses the target kept.
    pub accepted: usize,
    /// Whether every paragraph's tokens equal plain decoding's.
    pub identical: bool,
}

/// The report.
#[derive(Debug, Clone, Serialize)]
pub struct DraftReport {
    /// Target model file name.
    pub model: String,
    /// Draft model file name.
    pub draft: String,
    /// Where the paragraphs came from.
    pub text: String,
    /// Machine.
    pub machine: Machine,
    /// Load average at the start.
    pub load_average_start: Option<[f64; 3]>,
    /// Load average at the end.
    pub load_average_end: Option<[f64; 3]>,
    /// Plain, draft, draft+guard.
    pub modes: Vec<DraftMode>,
    /// Decode speed with the draft every round ÷ plain.
    pub draft_speedup: f64,
    /// Decode speed with the pace guard ÷ plain.
    pub guarded_speedup: f64,
    /// Share of guesses accepted with the draft every round.
    pub draft_acceptance: f64,
    /// Whether the draft left every output unchanged.
    pub draft_identical: bool,
}

/// Prose paragraphs of a Markdown text (no headings, lists, tables, code or quotes).
fn prose(text: &str, n: usize) -> Vec<String> {
    let mut in_fence = false;
    let mut out = Vec::new();
    for block in text.split("\n\n") {
        let fences = block
            .lines()
            .filter(|l| l.trim_start().starts_with("```"))
            .count();
        let was_fenced = in_fence;
        in_fence ^= fences % 2 == 1;
        let block = block.trim();
        let starts_prose = block.chars().next().is_some_and(|c| c.is_alphabetic());
        if !was_fenced && fences == 0 && starts_prose && block.len() >= 200 {
            out.push(block.replace('\n', " "));
        }
        if out.len() == n {
            break;
        }
    }
    out
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Run the benchmark.
pub fn run(opts: &DraftBenchOptions) -> Result<DraftReport> {
    sys::use_threads(opts.threads);
    sys::warn_if_busy();
    let load_average_start = sys::load_average();
    let (text, source) = match &opts.text {
        Some(p) => (
            std::fs::read_to_string(p).with_context(|| format!("cannot read {}", p.display()))?,
            p.display().to_string(),
        ),
        None => (
            crate::translate::sample_book::CHAPTERS
                .iter()
                .map(|(_, t)| *t)
                .collect::<Vec<_>>()
                .join("\n\n"),
            "the bundled sample book".to_string(),
        ),
    };
    let paragraphs = prose(&text, opts.paragraphs);
    anyhow::ensure!(
        !paragraphs.is_empty(),
        "{source}: no prose paragraph of 200 characters or more to translate"
    );
    let device = candle_core::Device::Cpu;
    let engine = Engine::load(&opts.model, &device, &LoadOptions::default())?;
    let draft_engine = || Engine::load(&opts.draft, &device, &LoadOptions::default());
    let prompts: Vec<Vec<u32>> = paragraphs
        .iter()
        .map(|p| super::translation_prompt(&engine, p))
        .collect::<Result<_>>()?;
    let params = GenerationParams {
        max_new_tokens: opts.tokens,
        ..Default::default()
    };
    let mut plain = Vec::new();
    for p in &prompts {
        let mut cache = engine.new_cache()?;
        plain.push(engine.generate(&mut cache, p, &params, &mut |_| {})?);
    }
    let mut modes = vec![mode("plain", &plain, &plain)];
    for (name, guard) in [("draft", false), ("draft+guard", true)] {
        let mut draft = Draft::new(draft_engine()?, &engine)?;
        if !guard {
            draft = draft.without_pace_guard();
        }
        let mut gens = Vec::new();
        for p in &prompts {
            let mut cache = engine.new_cache()?;
            gens.push(engine.generate_speculative(
                &mut cache,
                p,
                &params,
                &mut draft,
                0,
                &mut |_| {},
            )?);
        }
        let m = mode(name, &gens, &plain);
        eprintln!(
            "quire: {name}: {:.1} tok/s, {} of {} guesses accepted, identical: {}",
            m.tok_s, m.accepted, m.proposed, m.identical
        );
        modes.push(m);
    }
    let ratio = |i: usize| {
        if modes[0].tok_s > 0.0 {
            modes[i].tok_s / modes[0].tok_s
        } else {
            0.0
        }
    };
    Ok(DraftReport {
        model: file_name(&opts.model),
        draft: file_name(&opts.draft),
        text: source,
        machine: Machine::detect(opts.threads),
        load_average_start,
        load_average_end: sys::load_average(),
        draft_speedup: ratio(1),
        guarded_speedup: ratio(2),
        draft_acceptance: modes[1].accepted as f64 / modes[1].proposed.max(1) as f64,
        draft_identical: modes[1].identical && modes[2].identical,
        modes,
    })
}

/// Totals of one mode, compared with plain decoding.
fn mode(name: &str, gens: &[Generation], plain: &[Generation]) -> DraftMode {
    let tokens = gens.iter().map(|g| g.tokens.len()).sum();
    let decode_seconds: f64 = gens.iter().map(|g| g.decode_seconds).sum();
    DraftMode {
        mode: name.to_string(),
        tokens,
        decode_seconds,
        tok_s: if decode_seconds > 0.0 {
            tokens as f64 / decode_seconds
        } else {
            0.0
        },
        proposed: gens.iter().map(|g| g.draft_proposed).sum(),
        accepted: gens.iter().map(|g| g.draft_accepted).sum(),
        identical: gens.len() == plain.len()
            && gens
                .iter()
                .zip(plain)
                .all(|(g, p)| g.tokens == p.tokens && g.text == p.text),
    }
}

/// The report as text.
pub fn render_text(r: &DraftReport) -> String {
    let mut s = format!(
        "Speculative decoding: {} drafting for {} on {} ({} threads; {}), greedy\n\n",
        r.draft, r.model, r.text, r.machine.threads, r.machine.cpu_model
    );
    s.push_str("| Mode | Tokens | Decode tok/s | × plain | Guesses accepted | Identical |\n");
    s.push_str("|---|---|---|---|---|---|\n");
    for m in &r.modes {
        let accepted = if m.proposed > 0 {
            format!(
                "{} / {} ({:.0}%)",
                m.accepted,
                m.proposed,
                100.0 * m.accepted as f64 / m.proposed as f64
            )
        } else {
            "–".to_string()
        };
        s.push_str(&format!(
            "| {} | {} | {:.1} | {:.2} | {} | {} |\n",
            m.mode,
            m.tokens,
            m.tok_s,
            m.tok_s / r.modes[0].tok_s.max(f64::MIN_POSITIVE),
            accepted,
            if m.identical { "yes" } else { "NO" }
        ));
    }
    s
}
