//! The files a translation run writes about itself, as typed data: [`RunReport`]
//! (`run.json`: every model call of the run and its totals) and [`ProofreadingReport`]
//! (`proofreading_report.json`, and `proofreading_report.md` rendered from the same value).
//!
//! JSON is written with its object keys in alphabetical order at every level (the order
//! [`serde_json::Value`] keeps), so the field order of these structs does not change the
//! files; read them back with [`read_json`].

use crate::checks::{Category, Severity};
use crate::engine::prefix_cache::PrefixStats;
use crate::util::write_atomic;
use anyhow::{Context, Result};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// `run.json`: what the model did in one run of `quire translate`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunReport {
    /// Model name (the GGUF's own name).
    pub model: String,
    /// Path of the GGUF file.
    pub model_path: String,
    /// Device the engine ran on.
    pub device: String,
    /// `orchestrated` or `single`.
    pub mode: String,
    /// The translate agent's prompt profile (`guide`, `hy-mt`).
    #[serde(default)]
    pub prompt_profile: String,
    /// The model calls of this run, in the order they were made.
    pub calls: Vec<CallRecord>,
    /// Sums and rates over `calls`.
    pub totals: RunTotals,
}

/// One model call in `run.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallRecord {
    /// `glossary`, `translate`, `revise` or `proofread`.
    pub agent: String,
    /// The unit id (or glossary term) the call was about.
    pub unit: String,
    /// Tokens in the prompt.
    pub prompt_tokens: usize,
    /// Prompt tokens whose KV came from the prefix cache.
    pub cached_prefix_tokens: usize,
    /// Where the cached prefix came from (`memory`, `disk` or `none`).
    pub cache_source: String,
    /// Tokens generated.
    pub completion_tokens: usize,
    /// Wall seconds of the call (of its batch, for a batched call).
    pub latency_seconds: f64,
    /// Engine seconds attributable to the call (a batch's wall time shared out).
    pub busy_seconds: f64,
    /// Seconds to the first generated token.
    pub ttft_seconds: f64,
    /// What the manager made of the reply (`ok`, `revise`, `issues`, ...).
    pub outcome: String,
    /// Model name.
    pub model: String,
    /// Device.
    pub device: String,
    /// Generated tokens per second of decoding (first token excluded; 0 where unknown).
    #[serde(default)]
    pub decode_tokens_per_second: f64,
    /// Tokens a draft model proposed (speculative decoding; 0 without).
    #[serde(default)]
    pub draft_proposed: usize,
    /// Proposed tokens the model kept.
    #[serde(default)]
    pub draft_accepted: usize,
    /// `draft_accepted ÷ draft_proposed`; absent without a draft.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draft_acceptance: Option<f64>,
}

/// The totals of `run.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunTotals {
    /// Model calls made.
    pub calls: usize,
    /// Prompt tokens over all calls.
    pub prompt_tokens: usize,
    /// Prompt tokens served from the prefix cache.
    pub cached_prefix_tokens: usize,
    /// Tokens generated.
    pub completion_tokens: usize,
    /// `cached_prefix_tokens ÷ prompt_tokens` (0 without calls).
    pub cache_hit_rate: f64,
    /// Wall seconds of the run, model load excluded.
    pub wall_seconds: f64,
    /// Engine seconds summed over the calls.
    pub model_seconds: f64,
    /// `completion_tokens ÷ model_seconds` (0 without model time).
    pub tokens_per_second: f64,
    /// Units taken from the translation memory without a model call.
    pub reused_units: usize,
    /// Largest prompt of the run, in tokens.
    pub context_peak_tokens: usize,
    /// The orchestrated mode's largest prompt for the same units.
    pub orchestrated_context_peak_tokens: usize,
    /// Prefix-cache hits and misses.
    pub prefix_cache: PrefixStats,
    /// The draft model's guesses over all calls (speculative decoding; 0 without).
    #[serde(default)]
    pub draft_proposed: usize,
    /// Guesses the model kept.
    #[serde(default)]
    pub draft_accepted: usize,
}

/// `proofreading_report.json`: what the deterministic checks and the model review found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProofreadingReport {
    /// Model-review notes (in book order), then QA findings (in check order).
    pub issues: Vec<Issue>,
    /// Units that are blocked or have an error-severity finding, sorted.
    pub units_need_revision: Vec<String>,
    /// Counts.
    pub summary: ProofreadingSummary,
}

/// One entry of the proofreading report, tagged by its `source`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "source", rename_all = "snake_case")]
pub enum Issue {
    /// A line of a model reviewer's reply that was not `OK`.
    ModelReview {
        /// The reviewed unit.
        unit: String,
        /// Always [`Severity::Info`]: a reviewer's note is advice, not a failed check.
        severity: Severity,
        /// The note, without a leading `- `.
        issue: String,
    },
    /// A finding of the deterministic checks.
    Qa {
        /// The unit, for unit-level findings.
        unit: Option<String>,
        /// The chapter.
        chapter: String,
        /// What kind of problem.
        category: Category,
        /// How bad.
        severity: Severity,
        /// What was seen.
        evidence: String,
        /// What to do about it.
        action: String,
    },
}

/// The counts of a proofreading report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProofreadingSummary {
    /// Translatable units in the book.
    pub units: usize,
    /// Units that passed every hard check.
    pub passed: usize,
    /// Units blocked after the last revision.
    pub blocked: usize,
    /// Units that needed at least one revision.
    pub revised: usize,
    /// Units not finished yet (the run stopped early).
    pub remaining: usize,
    /// Error-severity QA findings.
    pub qa_errors: usize,
    /// Warning-severity QA findings.
    pub qa_warnings: usize,
    /// House-term occurrences honoured ÷ occurrences, in percent.
    pub house_term_adherence_percent: f64,
    /// Units the model reviewed.
    pub model_reviews: usize,
    /// QA findings per category; every category is present.
    pub by_category: BTreeMap<Category, usize>,
}

impl ProofreadingReport {
    /// `proofreading_report.md`: the summary, the units to revise, the QA findings and the
    /// model-review notes.
    pub fn to_markdown(&self) -> String {
        let mut s = String::from("# Proofreading report\n\n");
        let sum = &self.summary;
        s.push_str(&format!(
            "- Units: {} (passed {}, blocked {}, revised {}, remaining {})\n- QA: {} error(s), {} warning(s)\n- House-term adherence: {:.1}%\n- Model reviews: {}\n\n",
            sum.units, sum.passed, sum.blocked, sum.revised, sum.remaining, sum.qa_errors, sum.qa_warnings,
            sum.house_term_adherence_percent, sum.model_reviews
        ));
        if !self.units_need_revision.is_empty() {
            s.push_str("## Units that need revision\n\n");
            for u in &self.units_need_revision {
                s.push_str(&format!("- {u}\n"));
            }
            s.push('\n');
        }
        s.push_str("## Findings\n\n");
        for i in &self.issues {
            if let Issue::Qa {
                unit,
                chapter,
                category,
                severity,
                evidence,
                action,
            } = i
            {
                s.push_str(&format!(
                    "- **{}** `{}` {} — {} → {}\n",
                    severity.name(),
                    category,
                    unit.as_deref().unwrap_or(chapter),
                    evidence.replace('\n', " "),
                    action
                ));
            }
        }
        let notes: Vec<(&str, &str)> = self
            .issues
            .iter()
            .filter_map(|i| match i {
                Issue::ModelReview { unit, issue, .. } => Some((unit.as_str(), issue.as_str())),
                Issue::Qa { .. } => None,
            })
            .collect();
        if !notes.is_empty() {
            s.push_str("\n## Model review notes\n\n");
            for (unit, issue) in notes {
                s.push_str(&format!("- {unit}: {issue}\n"));
            }
        }
        s
    }
}

/// `value` as pretty JSON with every object's keys in alphabetical order.
pub fn to_json(value: &impl Serialize) -> Result<String> {
    Ok(serde_json::to_string_pretty(&serde_json::to_value(value)?)?)
}

/// Write `value` to `path` atomically as [`to_json`].
pub fn write_json(path: &Path, value: &impl Serialize) -> Result<()> {
    write_atomic(path, to_json(value)?.as_bytes())
}

/// Read a report written by [`write_json`] (`run.json`, `proofreading_report.json`).
pub fn read_json<T: DeserializeOwned>(path: &Path) -> Result<T> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("cannot parse {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> ProofreadingReport {
        ProofreadingReport {
            issues: vec![
                Issue::ModelReview {
                    unit: "01.md#2".into(),
                    severity: Severity::Info,
                    issue: "the second sentence is missing".into(),
                },
                Issue::Qa {
                    unit: Some("01.md#3".into()),
                    chapter: "01.md".into(),
                    category: Category::Number,
                    severity: Severity::Error,
                    evidence: "42\nmissing".into(),
                    action: "keep the number".into(),
                },
            ],
            units_need_revision: vec!["01.md#3".into()],
            summary: ProofreadingSummary {
                units: 3,
                passed: 2,
                blocked: 1,
                revised: 1,
                remaining: 0,
                qa_errors: 1,
                qa_warnings: 0,
                house_term_adherence_percent: 100.0,
                model_reviews: 1,
                by_category: Category::ALL.iter().map(|&c| (c, 0)).collect(),
            },
        }
    }

    #[test]
    fn proofreading_json_has_sorted_keys_and_reads_back() {
        let r = sample();
        let text = to_json(&r).unwrap();
        let qa = text.find("\"source\": \"qa\"").unwrap();
        assert!(text[..qa].contains("\"source\": \"model_review\""));
        // Keys sorted inside an issue: action … unit.
        let issue = &text[text.find("\"action\"").unwrap()..];
        assert!(issue.find("\"category\"").unwrap() < issue.find("\"unit\"").unwrap());
        let back: ProofreadingReport = serde_json::from_str(&text).unwrap();
        assert_eq!(back, r);
    }

    #[test]
    fn proofreading_markdown_lists_findings_and_notes() {
        let md = sample().to_markdown();
        assert!(md.contains("- Units: 3 (passed 2, blocked 1, revised 1, remaining 0)\n"));
        assert!(md.contains("- House-term adherence: 100.0%\n"));
        assert!(md.contains("## Units that need revision\n\n- 01.md#3\n\n"));
        assert!(md.contains("- **error** `number` 01.md#3 — 42 missing → keep the number\n"));
        assert!(
            md.ends_with("## Model review notes\n\n- 01.md#2: the second sentence is missing\n")
        );
    }
}
