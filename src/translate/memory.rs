//! The translation memory: one file per finished unit under `memory/` in the output
//! directory, keyed by the unit's content and every input that determines its translation.

use super::checkpoint::UnitState;
use crate::checks::Finding;
use crate::units::Unit;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// A unit's finished translation, stored in the translation memory.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct MemoryEntry {
    pub(super) unit_id: String,
    pub(super) source_hash: String,
    pub(super) translation: String,
    pub(super) state: UnitState,
    pub(super) attempts: usize,
    pub(super) errors: usize,
    pub(super) findings: Vec<Finding>,
    /// For a chapter's opening that passed whole in one reply: the passage the model was
    /// given and its reply, line for line — the chapter's worked example.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) exchange: Option<Exchange>,
}

/// A passage as the translation agent saw it and the reply it accepted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Exchange {
    /// The passage (the unit's model text, house terms written in).
    pub passage: String,
    /// The accepted reply, one line per line of the passage, as typeset.
    pub reply: String,
}

/// Where the entry under `key` lives in the output directory `out`.
pub(super) fn memory_path(out: &Path, key: &str) -> PathBuf {
    out.join("memory").join(format!("{key}.json"))
}

/// The finished translation of `unit` under `key`, if the memory holds one for its source.
pub(super) fn read_memory(out: &Path, key: &str, unit: &Unit) -> Option<MemoryEntry> {
    let text = std::fs::read_to_string(memory_path(out, key)).ok()?;
    let e: MemoryEntry = serde_json::from_str(&text).ok()?;
    (e.source_hash == unit.content_hash() && e.state.is_final()).then_some(e)
}
