//! The glossary stage: the user's edited `glossary.json` when the output directory has one
//! (house terms forced again), otherwise the glossary agent's ([`super::glossary_agent`]):
//! kept terms found without a model, suggested translations asked of the model, house terms.

use super::glossary_agent::{self, GlossaryLine};
use super::manager::{term_lines, Manager};
use crate::checks::CheckContext;
use crate::engine::backend::{Completion, LocalBackend};
use crate::prompts::agents::TermLine;
use crate::units::Unit;
use crate::util::{sha256_hex, write_atomic};
use anyhow::Result;
use serde_json::json;

/// How house terms reach the translating model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HouseTerms {
    /// Written into the passage in place of the source term (`the 词元 count`): the model
    /// copies them; the prompt lists them too.
    #[default]
    Inject,
    /// Listed in the prompt as required translations and checked; a unit that misses one
    /// goes to the fallback.
    Prompt,
}

/// The glossary as every later stage needs it.
pub struct Terms {
    /// The lines the translating model sees: house terms, kept terms, and suggested
    /// translations a person has reviewed (`needs_review: false`). A model's context-free
    /// guess is not shown to the translating model before that (on dev-eval chapter 3,
    /// `memory system → 内存系统` would have pushed RAM into a chapter about agent memory).
    pub lines: Vec<GlossaryLine>,
    /// The same as prompt lines.
    pub all: Vec<TermLine>,
    /// Hash of the lines (part of every translation-memory key).
    pub hash: String,
    /// The checks' context, with the glossary of `lines`.
    pub ctx: CheckContext,
    /// How house terms reach the model.
    pub house: HouseTerms,
}

impl Terms {
    /// A passage as the translating model gets it: with house terms written in, or as it is.
    pub fn passage(&self, text: &str) -> String {
        match self.house {
            HouseTerms::Inject => super::manager::inject_house_terms(text, &self.lines),
            HouseTerms::Prompt => text.to_string(),
        }
    }
}

/// Run the stage and record it in the checkpoint.
pub fn run(m: &mut Manager, backend: &mut LocalBackend) -> Result<Terms> {
    let path = m.out.join("glossary.json");
    let lines = match std::fs::read_to_string(&path) {
        Ok(text) => edited(m, backend, &path, &text)?,
        Err(_) => {
            let lines = infer(m, backend)?;
            write_atomic(&path, serde_json::to_string_pretty(&lines)?.as_bytes())?;
            lines
        }
    };
    let opts = m.opts;
    m.checkpoint.value.result.glossary = json!({
        "path": path.display().to_string(),
        "house_terms": lines.iter().filter(|l| l.house).count(),
        "inferred_terms": lines.iter().filter(|l| !l.house).count(),
    });
    m.save()?;
    let hash = sha256_hex(serde_json::to_string(&lines)?.as_bytes());
    let shown: Vec<GlossaryLine> = lines
        .into_iter()
        .filter(|l| l.house || !l.needs_review || l.en == l.zh)
        .collect();
    // The checks hold the translation to the same lines: a suggestion nobody has reviewed
    // is neither shown nor checked (it would flag every unit that reads `memory` as 记忆).
    let glossary = glossary_agent::to_glossary(&shown);
    Ok(Terms {
        hash,
        all: term_lines(&shown),
        ctx: CheckContext::new(&opts.source_lang, &opts.target_lang).with_glossary(glossary),
        lines: shown,
        house: opts.house_terms,
    })
}

/// A `glossary.json` a person may have edited: used as it is, house terms forced.
fn edited(
    m: &Manager,
    backend: &mut LocalBackend,
    path: &std::path::Path,
    text: &str,
) -> Result<Vec<GlossaryLine>> {
    let lines: Vec<GlossaryLine> = serde_json::from_str(text).map_err(|e| {
        anyhow::anyhow!(
            "{}: line {}, column {}: {e} (fix it, or delete it to regenerate)",
            path.display(),
            e.line(),
            e.column()
        )
    })?;
    let house = &m.plan.house;
    let mut lines: Vec<GlossaryLine> = lines
        .into_iter()
        .filter(|l| {
            !house
                .entries
                .iter()
                .any(|h| h.source.eq_ignore_ascii_case(&l.en))
        })
        .collect();
    let mut out = glossary_agent::build_glossary(
        backend,
        &[],
        house,
        &m.opts.source_lang,
        &m.opts.target_lang,
        &mut |_, _| {},
    )?;
    out.append(&mut lines);
    Ok(out)
}

/// The agent's glossary: house terms, suggested translations, kept terms.
fn infer(m: &mut Manager, backend: &mut LocalBackend) -> Result<Vec<GlossaryLine>> {
    let plan = m.plan;
    let opts = m.opts;
    let all_units: Vec<Unit> = plan.units.iter().flatten().cloned().collect();
    let keep = glossary_agent::keep_terms(&all_units, &plan.house, 40);
    let cands: Vec<_> =
        glossary_agent::extract_candidates(&all_units, &plan.house, opts.glossary_terms)
            .into_iter()
            .filter(|c| !c.term.split(' ').any(|w| keep.iter().any(|k| k.term == w)))
            .collect();
    m.progress.set_message("glossary");
    let mut calls: Vec<(String, Completion)> = Vec::new();
    let mut lines = glossary_agent::build_glossary(
        backend,
        &cands,
        &plan.house,
        &opts.source_lang,
        &opts.target_lang,
        &mut |c, done| calls.push((c.term.clone(), done.clone())),
    )?;
    for (term, c) in &calls {
        m.record_call("glossary", term, c, "ok");
    }
    lines.extend(glossary_agent::keep_lines(&keep));
    Ok(lines)
}
