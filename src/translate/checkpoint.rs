//! `orchestration_checkpoint.json`: written atomically after every unit. Its shape follows
//! the reference pipeline's checkpoint (`campaign_fingerprint`, `value.result` with `mode`,
//! `manager_context_peak`, `manager_context_final`, `glossary`, `report`, `out_dir`,
//! `tracker_calls`, and `value.elapsed_seconds`), extended with Quire's own fields under
//! `value.result.quire`. It holds metadata only: translations live in their own files.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// Where a unit is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum UnitState {
    /// Not started.
    Planned,
    /// A model call is translating it.
    Running,
    /// Checks are running on its translation.
    Reviewing,
    /// Translated, checks passed.
    Passed,
    /// Being translated again with the findings as instructions.
    Revising,
    /// Hard checks still fail after the last revision; best attempt kept and flagged.
    Blocked,
}

impl UnitState {
    /// Whether the unit needs no more work.
    pub fn is_final(self) -> bool {
        matches!(self, UnitState::Passed | UnitState::Blocked)
    }
}

/// One model call, in the reference pipeline's `tracker_calls` shape plus Quire's fields.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TrackerCall {
    /// "glossary", "translate", "revise", "fallback", "emphasis" or "proofread".
    pub agent: String,
    /// Prompt tokens.
    pub prompt_tokens: usize,
    /// Generated tokens.
    pub completion_tokens: usize,
    /// Unit id or term.
    pub note: String,
    /// Wall seconds.
    pub latency_seconds: f64,
    /// "local".
    pub provider: String,
    /// Model name.
    pub model: String,
    /// "ok", "revise", "blocked", "memory", ...
    pub outcome: String,
    /// Prompt tokens served from the prefix cache.
    #[serde(default)]
    pub cached_prefix_tokens: usize,
    /// Where they came from ("memory", "disk", "none").
    #[serde(default)]
    pub cache_source: String,
    /// Device.
    #[serde(default)]
    pub device: String,
    /// Seconds to first token.
    #[serde(default)]
    pub ttft_seconds: f64,
    /// Engine seconds attributable to the call (batched calls share their wall time).
    #[serde(default)]
    pub busy_seconds: f64,
    /// Seconds decoding after the first token.
    #[serde(default)]
    pub decode_seconds: f64,
    /// Tokens a draft model proposed (speculative decoding).
    #[serde(default)]
    pub draft_proposed: usize,
    /// Proposed tokens the model kept.
    #[serde(default)]
    pub draft_accepted: usize,
}

/// Per-unit metadata.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UnitRecord {
    /// State.
    pub state: UnitState,
    /// Content hash of the unit's source.
    pub source_hash: String,
    /// Translation-memory key of the finished translation.
    pub memory_key: Option<String>,
    /// sha256 of the finished translation text.
    pub output_hash: Option<String>,
    /// Translation attempts made.
    pub attempts: usize,
    /// Hard-check errors left in the kept attempt.
    pub errors: usize,
}

/// The manager's own context: metadata only, so its size does not grow with the text.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ManagerContext {
    /// What is being done.
    pub task: String,
    /// Guide file and hash.
    pub guide: String,
    /// Unit ids in order.
    pub plan: Vec<String>,
    /// One line per finished step.
    pub call_log: Vec<String>,
    /// Output file → sha256.
    pub file_index: BTreeMap<String, String>,
    /// Counts by state.
    pub progress: BTreeMap<String, usize>,
}

/// Quire's extensions.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct QuireState {
    /// Unit records by id.
    pub units: BTreeMap<String, UnitRecord>,
    /// Total prompt tokens served from the prefix cache.
    pub cached_prefix_tokens: usize,
    /// Total new tokens generated (for `--max-new-tokens-total`).
    pub new_tokens_total: usize,
    /// Whether the run finished every unit.
    pub complete: bool,
    /// Why it stopped early, if it did.
    pub stopped: Option<String>,
    /// Hashes of the inputs in the fingerprint.
    pub inputs: BTreeMap<String, String>,
}

/// `value.result`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RunResult {
    /// "orchestrated" or "single".
    pub mode: String,
    /// Largest serialized size of the manager context seen, in bytes.
    pub manager_context_peak: usize,
    /// The manager context at the end.
    pub manager_context_final: ManagerContext,
    /// Path of glossary.json and its term counts.
    pub glossary: serde_json::Value,
    /// Summary of the proofreading report.
    pub report: serde_json::Value,
    /// Output directory.
    pub out_dir: String,
    /// Every model call.
    pub tracker_calls: Vec<TrackerCall>,
    /// Quire's fields.
    pub quire: QuireState,
}

/// `value`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Value {
    /// The result.
    pub result: RunResult,
    /// Wall seconds, accumulated over resumed runs.
    pub elapsed_seconds: f64,
}

/// The checkpoint file.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Checkpoint {
    /// Hash of inputs, glossary, guide, model, template and generation parameters.
    pub campaign_fingerprint: String,
    /// Everything else.
    pub value: Value,
}

/// File name inside the output directory.
pub const FILE: &str = "orchestration_checkpoint.json";

impl Checkpoint {
    /// Load from `dir`, if a readable checkpoint is there.
    pub fn load(dir: &Path) -> Option<Checkpoint> {
        let text = std::fs::read_to_string(dir.join(FILE)).ok()?;
        match serde_json::from_str(&text) {
            Ok(c) => Some(c),
            Err(e) => {
                eprintln!(
                    "warning: ignoring unreadable {}: {e}",
                    dir.join(FILE).display()
                );
                None
            }
        }
    }

    /// Write atomically into `dir`.
    pub fn save(&self, dir: &Path) -> anyhow::Result<()> {
        crate::util::write_atomic(
            &dir.join(FILE),
            serde_json::to_string_pretty(self)?.as_bytes(),
        )
    }
}
