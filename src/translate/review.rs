//! The proofreading stage: deterministic QA over every unit (plus cross-unit consistency),
//! then a model review of flagged units and, with `--review-every N`, of every Nth clean
//! one. A review's verdict is stored in the translation memory under its inputs, so a rerun
//! asks no model again. Writes `proofreading_report.json` and `proofreading_report.md`.

use super::chapters::ChapterText;
use super::checkpoint::UnitState;
use super::glossary_stage::Terms;
use super::scheduler::Translated;
use super::state::RunState;
use crate::checks::{check_units, Finding, Report, Severity};
use crate::engine::backend::{ChatBackend, ChatRequest};
use crate::engine::constraint::Constraint;
use crate::engine::generate::GenerationParams;
use crate::glossary::{contains_term, GlossaryEntry};
use crate::prompts::agents::{review_prompt, VerdictShape};
use crate::report::{write_json, Issue, ProofreadingReport, ProofreadingSummary};
use crate::units::UnitKind;
use crate::util::{sha256_hex, write_atomic};
use anyhow::Result;
use std::collections::BTreeSet;

/// Token allowance of one model review.
const REVIEW_TOKENS: usize = 96;

/// Run the stage and write the proofreading report. The model review is skipped when the
/// run has already stopped, and stops (setting `stopped`) where a budget runs out.
pub(super) fn run(
    m: &mut RunState,
    backend: &mut dyn ChatBackend,
    terms: &Terms,
    done: &Translated,
    chapters: &[ChapterText],
    stopped: &mut Option<String>,
) -> Result<ProofreadingReport> {
    let mut qa_findings: Vec<Finding> = Vec::new();
    for (ci, chapter) in chapters.iter().enumerate() {
        let cctx = terms.ctx.for_chapter(&chapter.name);
        qa_findings.extend(check_units(&m.plan.units[ci], &chapter.texts, &cctx));
    }
    let mut issues = Vec::new();
    let mut reviewed = 0usize;
    if stopped.is_none() {
        let mut reviews = select_reviews(
            m,
            &terms.glossary.entries,
            &done.texts,
            &qa_findings,
            stopped,
        )?;
        ask_reviews(m, backend, &mut reviews)?;
        // Their findings, in book order.
        for r in &reviews {
            let verdict = r.verdict.as_deref().unwrap_or_default();
            reviewed += 1;
            if !verdict.to_uppercase().starts_with("OK") {
                for line in verdict
                    .lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty())
                    .take(3)
                {
                    issues.push(Issue::ModelReview {
                        unit: r.unit.clone(),
                        severity: Severity::Info,
                        issue: line.trim_start_matches("- ").to_string(),
                    });
                }
            }
        }
    }
    let proof = report(
        m,
        qa_findings,
        issues,
        reviewed,
        done,
        &terms.glossary.entries,
    );
    write_json(&m.out.join("proofreading_report.json"), &proof)?;
    write_atomic(
        &m.out.join("proofreading_report.md"),
        proof.to_markdown().as_bytes(),
    )?;
    Ok(proof)
}

/// A unit's model review: asked now (`verdict: None`) or read back from the memory.
struct Review {
    unit: String,
    key: String,
    req: ChatRequest,
    verdict: Option<String>,
}

/// Which units get a model review (flagged ones, and every n-th clean one), and which of
/// those reviews are already on disk from an earlier run. Stops selecting, with `stopped`
/// set, where the reviews still to ask would break a budget.
fn select_reviews(
    m: &RunState,
    all_terms: &[GlossaryEntry],
    translations: &[Vec<Option<String>>],
    qa_findings: &[Finding],
    stopped: &mut Option<String>,
) -> Result<Vec<Review>> {
    let opts = m.opts;
    let mut reviews: Vec<Review> = Vec::new();
    let mut pending = 0usize;
    let mut clean_seen = 0usize;
    for (ci, units) in m.plan.units.iter().enumerate() {
        for (ui, unit) in units.iter().enumerate() {
            let Some(t) = &translations[ci][ui] else {
                continue;
            };
            if unit.kind != UnitKind::Translate {
                continue;
            }
            let flagged = qa_findings
                .iter()
                .any(|f| f.unit.as_deref() == Some(&unit.id) && f.severity <= Severity::Warning);
            if !flagged {
                clean_seen += 1;
            }
            let sample = opts.review_every > 0
                && !flagged
                && clean_seen % opts.review_every == 1 % opts.review_every.max(1);
            if !(flagged || sample) {
                continue;
            }
            let p = review_prompt(
                &opts.source_lang,
                &opts.target_lang,
                all_terms,
                unit.source.trim(),
                t.trim(),
            )?;
            // A review already done for the same inputs and texts (an earlier run) is
            // read back instead of asked again: reruns make no model calls.
            let key = format!(
                "review-{}",
                sha256_hex(
                    format!(
                        "{}{}|verdict-shape",
                        m.inputs_key(),
                        serde_json::to_string(&p.messages)?
                    )
                    .as_bytes()
                )
            );
            let verdict = read_verdict(&m.memory_path(&key));
            if verdict.is_none() {
                // Every review still to ask reserves its whole token allowance.
                if let Some(reason) = m.over_budget(REVIEW_TOKENS * (pending + 1)) {
                    *stopped = Some(reason);
                    return Ok(reviews);
                }
                pending += 1;
            }
            reviews.push(Review {
                unit: unit.id.clone(),
                key,
                req: ChatRequest {
                    messages: p.messages,
                    split: p.split,
                    params: GenerationParams {
                        max_new_tokens: REVIEW_TOKENS,
                        constraint: Some(Constraint::new(VerdictShape)),
                        ..Default::default()
                    },
                },
                verdict,
            });
        }
    }
    Ok(reviews)
}

/// A stored review verdict; `None` when there is none or the file is not one (corrupt or
/// truncated: the review is asked again rather than its bytes copied into the report).
fn read_verdict(path: &std::path::Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    v.get("verdict")?.as_str().map(str::to_string)
}

/// Ask the reviews not read back. They are independent: one batch (throughput mode), whose
/// replies are the ones asked one at a time would give. Each verdict is recorded and stored.
fn ask_reviews(
    m: &mut RunState,
    backend: &mut dyn ChatBackend,
    reviews: &mut [Review],
) -> Result<()> {
    let asks: Vec<usize> = (0..reviews.len())
        .filter(|&i| reviews[i].verdict.is_none())
        .collect();
    let reqs: Vec<ChatRequest> = asks.iter().map(|&i| reviews[i].req.clone()).collect();
    let replies = backend.complete_batch(&reqs)?;
    for (&i, done) in asks.iter().zip(&replies) {
        let verdict = done.text.trim().to_string();
        let outcome = if verdict.to_uppercase().starts_with("OK") {
            "ok"
        } else {
            "issues"
        };
        m.record_call("proofread", &reviews[i].unit, done, outcome);
        let stored = serde_json::json!({ "unit": reviews[i].unit, "verdict": verdict });
        write_atomic(
            &m.memory_path(&reviews[i].key),
            stored.to_string().as_bytes(),
        )?;
        reviews[i].verdict = Some(verdict);
    }
    Ok(())
}

/// The report's data: the model-review notes, then the QA findings; the units to revise;
/// the counts, with the unit states from the checkpoint.
fn report(
    m: &RunState,
    qa_findings: Vec<Finding>,
    mut issues: Vec<Issue>,
    reviewed: usize,
    done: &Translated,
    glossary: &[GlossaryEntry],
) -> ProofreadingReport {
    let states = &m.checkpoint.value.result.quire.units;
    let units_need_revision: Vec<String> = states
        .iter()
        .filter(|(_, r)| r.state == UnitState::Blocked)
        .map(|(k, _)| k.clone())
        .chain(
            qa_findings
                .iter()
                .filter(|f| f.severity == Severity::Error)
                .filter_map(|f| f.unit.clone()),
        )
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let (adherent, occurrences) = house_adherence(m, &done.texts, glossary);
    let adherence = if occurrences == 0 {
        100.0
    } else {
        100.0 * adherent as f64 / occurrences as f64
    };
    let count = |state: UnitState| states.values().filter(|r| r.state == state).count();
    let qa = Report::from_findings(qa_findings, m.plan.book.chapters.len());
    let summary = ProofreadingSummary {
        units: m.plan.translatable().count(),
        passed: count(UnitState::Passed),
        blocked: count(UnitState::Blocked),
        revised: done.revised,
        remaining: states.values().filter(|r| !r.state.is_final()).count(),
        qa_errors: qa.summary.errors,
        qa_warnings: qa.summary.warnings,
        house_term_adherence_percent: adherence,
        model_reviews: reviewed,
        by_category: qa.summary.by_category,
    };
    issues.extend(qa.findings.into_iter().map(|f| Issue::Qa {
        unit: f.unit,
        chapter: f.chapter,
        category: f.category,
        severity: f.severity,
        evidence: f.evidence,
        action: f.action,
    }));
    ProofreadingReport {
        issues,
        units_need_revision,
        summary,
    }
}

/// House-term occurrences honoured: for each unit and house term present in its source,
/// whether the translation contains the required target.
fn house_adherence(
    m: &RunState,
    translations: &[Vec<Option<String>>],
    g: &[GlossaryEntry],
) -> (usize, usize) {
    let (mut ok, mut all) = (0, 0);
    for (ci, units) in m.plan.units.iter().enumerate() {
        for (ui, u) in units.iter().enumerate() {
            let (Some(t), UnitKind::Translate) = (&translations[ci][ui], u.kind) else {
                continue;
            };
            let lower = u.source.to_lowercase();
            for e in g.iter().filter(|e| e.house) {
                if contains_term(&lower, &e.source.to_lowercase()) {
                    all += 1;
                    if t.contains(e.preferred()) {
                        ok += 1;
                    }
                }
            }
        }
    }
    (ok, all)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn corrupt_verdicts_are_not_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("review-x.json");
        std::fs::write(&p, b"\x00\xffgarbage").unwrap();
        assert_eq!(read_verdict(&p), None);
        std::fs::write(&p, r#"{"unit": "a#001", "verdict": "OK"}"#).unwrap();
        assert_eq!(read_verdict(&p).as_deref(), Some("OK"));
        std::fs::write(&p, r#"{"unit": "a#001", "verd"#).unwrap();
        assert_eq!(read_verdict(&p), None);
    }
}
