//! The run-report stage: `run.json` (this run's model calls and their totals), the final
//! checkpoint, and the [`RunSummary`] the CLI prints.

use super::checkpoint::TrackerCall;
use super::scheduler::Translated;
use super::state::RunState;
use crate::engine::backend::ChatBackend;
use crate::report::{write_json, CallRecord, ProofreadingReport, RunReport, RunTotals};
use anyhow::Result;
use serde::Serialize;
use serde_json::json;
use std::path::{Path, PathBuf};

/// The outcome of a run, for the summary and tests.
#[derive(Debug, Clone, Serialize)]
pub struct RunSummary {
    /// Units in the book (translatable ones).
    pub units: usize,
    /// Units that passed every hard check.
    pub passed: usize,
    /// Units that needed at least one revision.
    pub revised: usize,
    /// Units blocked after the last revision.
    pub blocked: usize,
    /// Units reused from the translation memory (no model call).
    pub reused: usize,
    /// Units left for a later run (budget or deadline).
    pub remaining: usize,
    /// Whether the whole book was translated.
    pub complete: bool,
    /// Structure/QA errors in the final chapters.
    pub qa_errors: usize,
    /// House-term adherence in percent (occurrences honoured ÷ occurrences).
    pub house_term_adherence: f64,
    /// Model calls made in this run.
    pub calls: usize,
    /// Prompt tokens served from the prefix cache ÷ prompt tokens, this run.
    pub cache_hit_rate: f64,
    /// Wall seconds of this run.
    pub wall_seconds: f64,
    /// Generated tokens per second of model time, this run.
    pub tokens_per_second: f64,
    /// Largest prompt seen (tokens) — the context peak.
    pub context_peak_tokens: usize,
    /// The orchestrated mode's context peak for the same units (equal to
    /// `context_peak_tokens` in orchestrated mode; computed alongside in single mode).
    pub orchestrated_context_peak_tokens: usize,
    /// Manager context peak (bytes).
    pub manager_context_peak_bytes: usize,
    /// Output directory.
    pub out_dir: PathBuf,
}

/// Write `run.json` over the calls from `calls_before` on, close the checkpoint (complete,
/// or why the run stopped) and sum the run up.
pub(super) fn finish(
    m: &mut RunState,
    backend: &dyn ChatBackend,
    model_path: &Path,
    calls_before: usize,
    done: &Translated,
    proof: &ProofreadingReport,
    stopped: Option<String>,
) -> Result<RunSummary> {
    let calls: Vec<TrackerCall> = m.checkpoint.value.result.tracker_calls[calls_before..].to_vec();
    let run = run_report(m, backend, model_path, &calls, done);
    write_json(&m.out.join("run.json"), &run)?;
    let sum = &proof.summary;
    let complete = sum.remaining == 0;
    {
        let r = &mut m.checkpoint.value.result;
        r.report =
            json!({"path": "proofreading_report.json", "summary": serde_json::to_value(sum)?});
        r.quire.complete = complete;
        r.quire.stopped = stopped.clone();
    }
    m.save()?;
    let t = &run.totals;
    let summary = RunSummary {
        units: sum.units,
        passed: sum.passed,
        revised: done.revised,
        blocked: sum.blocked,
        reused: done.reused,
        remaining: sum.remaining,
        complete,
        qa_errors: sum.qa_errors,
        house_term_adherence: sum.house_term_adherence_percent,
        calls: t.calls,
        cache_hit_rate: t.cache_hit_rate,
        wall_seconds: t.wall_seconds,
        tokens_per_second: t.tokens_per_second,
        context_peak_tokens: done.context_peak,
        orchestrated_context_peak_tokens: done.orchestrated_peak,
        manager_context_peak_bytes: m.checkpoint.value.result.manager_context_peak,
        out_dir: m.out.clone(),
    };
    if let Some(reason) = &stopped {
        eprintln!(
            "stopped early: {reason}; {} unit(s) left — rerun the same command to continue",
            sum.remaining
        );
    }
    Ok(summary)
}

/// `run.json`'s data: each call, then the sums and rates over them.
fn run_report(
    m: &RunState,
    backend: &dyn ChatBackend,
    model_path: &Path,
    calls: &[TrackerCall],
    done: &Translated,
) -> RunReport {
    let prompt_total: usize = calls.iter().map(|c| c.prompt_tokens).sum();
    let cached_total: usize = calls.iter().map(|c| c.cached_prefix_tokens).sum();
    let completion_total: usize = calls.iter().map(|c| c.completion_tokens).sum();
    let model_seconds: f64 = calls.iter().map(|c| c.busy_seconds).sum();
    let wall = m.started.elapsed().as_secs_f64();
    let hit_rate = if prompt_total == 0 {
        0.0
    } else {
        cached_total as f64 / prompt_total as f64
    };
    let tps = if model_seconds > 0.0 {
        completion_total as f64 / model_seconds
    } else {
        0.0
    };
    RunReport {
        model: m.model_name.clone(),
        model_path: model_path.display().to_string(),
        device: m.device.clone(),
        mode: m.checkpoint.value.result.mode.clone(),
        prompt_profile: m.profile.name().to_string(),
        calls: calls
            .iter()
            .map(|c| CallRecord {
                agent: c.agent.clone(),
                unit: c.note.clone(),
                prompt_tokens: c.prompt_tokens,
                cached_prefix_tokens: c.cached_prefix_tokens,
                cache_source: c.cache_source.clone(),
                completion_tokens: c.completion_tokens,
                latency_seconds: c.latency_seconds,
                busy_seconds: c.busy_seconds,
                ttft_seconds: c.ttft_seconds,
                outcome: c.outcome.clone(),
                model: c.model.clone(),
                device: c.device.clone(),
                decode_tokens_per_second: if c.decode_seconds > 0.0 {
                    c.completion_tokens.saturating_sub(1) as f64 / c.decode_seconds
                } else {
                    0.0
                },
                draft_proposed: c.draft_proposed,
                draft_accepted: c.draft_accepted,
                draft_acceptance: (c.draft_proposed > 0)
                    .then(|| c.draft_accepted as f64 / c.draft_proposed as f64),
            })
            .collect(),
        totals: RunTotals {
            calls: calls.len(),
            prompt_tokens: prompt_total,
            cached_prefix_tokens: cached_total,
            completion_tokens: completion_total,
            cache_hit_rate: hit_rate,
            wall_seconds: wall,
            model_seconds,
            tokens_per_second: tps,
            reused_units: done.reused,
            context_peak_tokens: done.context_peak,
            orchestrated_context_peak_tokens: done.orchestrated_peak,
            prefix_cache: backend.prefix_stats(),
            draft_proposed: calls.iter().map(|c| c.draft_proposed).sum(),
            draft_accepted: calls.iter().map(|c| c.draft_accepted).sum(),
        },
    }
}
