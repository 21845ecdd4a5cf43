//! The state of a run ([`RunState`]): the options, the plan, the checkpoint and the progress
//! display, and what every stage records in them — model calls, unit states, the budgets,
//! the call log, units taken from or written to the translation memory.

use super::checkpoint::{Checkpoint, TrackerCall, UnitState};
use super::memory::{memory_path, read_memory, MemoryEntry};
use super::options::{ProgressMode, TranslateOptions};
use super::plan::Plan;
use crate::engine::backend::Completion;
use crate::prompts::profile::PromptProfile;
use crate::units::Unit;
use crate::util::sha256_hex;
use anyhow::Result;
use indicatif::ProgressBar;
use serde_json::json;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

/// The state of a run while the manager sequences the stages: options, plan, checkpoint,
/// progress.
pub(super) struct RunState<'a> {
    pub(super) opts: &'a TranslateOptions,
    pub(super) plan: &'a Plan,
    pub(super) out: PathBuf,
    pub(super) checkpoint: Checkpoint,
    pub(super) started: Instant,
    /// Seconds spent by earlier runs on the same checkpoint.
    pub(super) elapsed_before: f64,
    pub(super) model_name: String,
    pub(super) device: String,
    /// Who serves the model (for the call records).
    pub(super) provider: &'static str,
    /// The translation agent's prompts, resolved for the model.
    pub(super) profile: PromptProfile,
    pub(super) progress: ProgressBar,
}

impl RunState<'_> {
    fn event(&self, v: serde_json::Value) {
        if self.opts.progress == ProgressMode::JsonLines {
            println!("{v}");
        }
    }

    pub(super) fn record_call(&mut self, agent: &str, note: &str, c: &Completion, outcome: &str) {
        self.checkpoint.value.result.quire.cached_prefix_tokens += c.cached_tokens;
        self.checkpoint.value.result.quire.new_tokens_total += c.completion_tokens;
        self.checkpoint
            .value
            .result
            .tracker_calls
            .push(TrackerCall {
                agent: agent.into(),
                prompt_tokens: c.prompt_tokens,
                completion_tokens: c.completion_tokens,
                note: note.into(),
                latency_seconds: c.latency_seconds,
                provider: self.provider.into(),
                model: self.model_name.clone(),
                outcome: outcome.into(),
                cached_prefix_tokens: c.cached_tokens,
                cache_source: c.cache_source.into(),
                device: self.device.clone(),
                ttft_seconds: c.ttft_seconds,
                busy_seconds: c.busy_seconds,
                decode_seconds: c.decode_seconds,
                draft_proposed: c.draft_proposed,
                draft_accepted: c.draft_accepted,
            });
        self.event(
            json!({"event": "call", "agent": agent, "note": note, "prompt_tokens": c.prompt_tokens,
            "cached_tokens": c.cached_tokens, "completion_tokens": c.completion_tokens,
            "latency_seconds": c.latency_seconds, "outcome": outcome,
            "finish_reason": format!("{:?}", c.finish), "reply": c.text}),
        );
    }

    /// Refuse a dispatch that would break a budget; `Some(reason)` means stop.
    pub(super) fn over_budget(&self, reserve: usize) -> Option<String> {
        if let Some(limit) = self.opts.max_new_tokens_total {
            let used = self.checkpoint.value.result.quire.new_tokens_total;
            if used + reserve > limit {
                return Some(format!(
                    "token budget: {used} of {limit} new tokens used, next call reserves {reserve}"
                ));
            }
        }
        if let Some(d) = self.opts.deadline {
            if self.started.elapsed() >= d {
                return Some(format!("deadline of {}s reached", d.as_secs()));
            }
        }
        None
    }

    fn context_size(&self) -> usize {
        serde_json::to_vec(&self.checkpoint.value.result.manager_context_final)
            .map(|v| v.len())
            .unwrap_or(0)
    }

    pub(super) fn save(&mut self) -> Result<()> {
        let mut progress = BTreeMap::new();
        for r in self.checkpoint.value.result.quire.units.values() {
            *progress
                .entry(format!("{:?}", r.state).to_uppercase())
                .or_insert(0) += 1;
        }
        self.checkpoint.value.result.manager_context_final.progress = progress;
        let size = self.context_size();
        let r = &mut self.checkpoint.value.result;
        r.manager_context_peak = r.manager_context_peak.max(size);
        self.checkpoint.value.elapsed_seconds =
            self.elapsed_before + self.started.elapsed().as_secs_f64();
        self.checkpoint.save(&self.out)
    }

    pub(super) fn set_state(&mut self, unit: &Unit, state: UnitState) -> Result<()> {
        if let Some(r) = self.checkpoint.value.result.quire.units.get_mut(&unit.id) {
            r.state = state;
        }
        self.event(json!({"event": "state", "unit": unit.id, "state": state}));
        Ok(())
    }

    /// Add a line to the manager's call log (in the checkpoint).
    pub(super) fn log(&mut self, line: String) {
        self.checkpoint
            .value
            .result
            .manager_context_final
            .call_log
            .push(line);
    }

    /// Hash of the inputs that make a translation-memory entry (guide, model, template,
    /// generation parameters).
    pub(super) fn inputs_key(&self) -> String {
        inputs_key(self)
    }

    /// Where a translation-memory entry lives.
    pub(super) fn memory_path(&self, key: &str) -> PathBuf {
        memory_path(&self.out, key)
    }

    /// A finished translation of `unit` from the memory, if one matches.
    pub(super) fn read_memory(&self, key: &str, unit: &Unit) -> Option<MemoryEntry> {
        read_memory(&self.out, key, unit)
    }

    /// Record a unit taken from the translation memory.
    pub(super) fn reuse_unit(&mut self, unit: &Unit, key: &str, e: &MemoryEntry) {
        let r = &mut self.checkpoint.value.result;
        let rec = r.quire.units.get_mut(&unit.id).expect("planned");
        let was_final = rec.state.is_final() && rec.memory_key.as_deref() == Some(key);
        rec.state = e.state;
        rec.memory_key = Some(key.to_string());
        rec.output_hash = Some(sha256_hex(e.translation.as_bytes()));
        rec.attempts = e.attempts;
        rec.errors = e.errors;
        if !was_final {
            r.manager_context_final
                .call_log
                .push(format!("{}: reused from translation memory", unit.id));
        }
    }

    /// Record a unit just finished (its memory entry written) and checkpoint.
    pub(super) fn finish_unit(&mut self, unit: &Unit, key: &str, e: &MemoryEntry) -> Result<()> {
        {
            let r = &mut self.checkpoint.value.result;
            let rec = r.quire.units.get_mut(&unit.id).expect("planned");
            rec.state = e.state;
            rec.memory_key = Some(key.to_string());
            rec.output_hash = Some(sha256_hex(e.translation.as_bytes()));
            rec.attempts = e.attempts;
            rec.errors = e.errors;
            r.manager_context_final.call_log.push(format!(
                "{}: {:?} after {} attempt(s)",
                unit.id, e.state, e.attempts
            ));
            r.manager_context_final.file_index.insert(
                format!("memory/{key}.json"),
                sha256_hex(e.translation.as_bytes()),
            );
        }
        self.set_state(unit, e.state)?;
        self.save()?;
        self.progress.inc(1);
        Ok(())
    }
}

fn inputs_key(m: &RunState) -> String {
    let i = &m.checkpoint.value.result.quire.inputs;
    sha256_hex(
        format!(
            "{:?}{:?}{:?}{:?}",
            i.get("guide"),
            i.get("model"),
            i.get("template"),
            i.get("params")
        )
        .as_bytes(),
    )
}
