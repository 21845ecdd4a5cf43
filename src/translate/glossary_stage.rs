//! The glossary stage: the user's edited `glossary.json` when the output directory has one
//! (house terms forced again), otherwise the glossary agent's ([`super::glossary_agent`]):
//! kept terms found without a model (with the model's own word for each kept word, to be
//! written back where it translates one), suggested translations asked of the model, house
//! terms.

use super::glossary_agent;
use super::house_terms::{inject_house_terms, HouseTerms};
use super::state::RunState;
use crate::checks::CheckContext;
use crate::engine::backend::{ChatBackend, Completion};
use crate::glossary::Glossary;
use crate::units::constraint::capitalised_names;
use crate::units::Unit;
use crate::util::{sha256_hex, write_atomic};
use anyhow::Result;
use serde_json::json;

/// The glossary as every later stage needs it.
pub struct Terms {
    /// The terms the translating model sees: house terms, kept terms, and suggested
    /// translations a person has reviewed (`needs_review: false`). A model's context-free
    /// guess is not shown to the translating model before that (on dev-eval chapter 3,
    /// `memory system → 内存系统` would have pushed RAM into a chapter about agent memory).
    pub glossary: Glossary,
    /// The checks' context, with the same glossary.
    pub ctx: CheckContext,
    /// How house terms reach the model.
    pub house: HouseTerms,
    /// The book's names: words its passages write with a capital where no sentence or
    /// title makes one ([`crate::units::constraint::capitalised_names`]), which may stay
    /// English wherever a passage has them.
    pub names: Vec<String>,
}

impl Terms {
    /// Hash of the terms that occur in a unit's source and of how house terms reach the
    /// model (part of the unit's translation-memory key): a glossary change retranslates
    /// the units it touches, and only those.
    pub fn unit_hash(&self, source: &str) -> String {
        let json = serde_json::to_string(&self.glossary.found_in(source)).unwrap_or_default();
        sha256_hex(format!("{:?}|{json}", self.house).as_bytes())
    }

    /// A passage as the translating model gets it: with house terms written in, or as it is.
    pub fn passage(&self, text: &str) -> String {
        match self.house {
            HouseTerms::Inject => inject_house_terms(text, &self.glossary),
            HouseTerms::Prompt => text.to_string(),
        }
    }
}

/// Run the stage and record it in the checkpoint.
pub fn run(m: &mut RunState, backend: &mut dyn ChatBackend) -> Result<Terms> {
    let path = m.out.join("glossary.json");
    let opts = m.opts;
    let (from, to) = (opts.source_lang.as_str(), opts.target_lang.as_str());
    let mut glossary = if path.is_file() {
        // Written back: the house terms of this run's --glossary replace earlier ones.
        let g = edited(m, backend, &path)?;
        write_atomic(&path, g.to_json(from, to, true)?.as_bytes())?;
        g
    } else {
        let glossary = infer(m, backend)?;
        write_atomic(&path, glossary.to_json(from, to, true)?.as_bytes())?;
        glossary
    };
    let terms = &glossary.entries;
    m.checkpoint.value.result.glossary = json!({
        "path": path.display().to_string(),
        "house_terms": terms.iter().filter(|e| e.house).count(),
        "inferred_terms": terms.iter().filter(|e| !e.house).count(),
    });
    m.save()?;
    glossary
        .entries
        .retain(|e| e.house || !e.needs_review || e.keeps_source());
    // The checks hold the translation to the same terms: a suggestion nobody has reviewed
    // is neither shown nor checked (it would flag every unit that reads `memory` as 记忆).
    Ok(Terms {
        ctx: CheckContext::new(from, to)
            .with_glossary(glossary.clone())
            .with_skipped_passes(&opts.skip_passes),
        glossary,
        house: opts.house_terms,
        names: book_names(&m.plan.units),
    })
}

/// The names of a book's passages (the model's text of every unit).
fn book_names(units: &[Vec<Unit>]) -> Vec<String> {
    let mut names: Vec<String> = units
        .iter()
        .flatten()
        .flat_map(|u| capitalised_names(&crate::units::skeleton::Skeleton::of(u).model_text()))
        .collect();
    names.sort();
    names.dedup();
    names
}

/// A `glossary.json` a person may have edited (read with the run's language codes as its
/// keys): used as it is, house terms forced.
fn edited(m: &RunState, backend: &mut dyn ChatBackend, path: &std::path::Path) -> Result<Glossary> {
    let opts = m.opts;
    let mut file = Glossary::load(path, &opts.source_lang, &opts.target_lang)
        .map_err(|e| anyhow::anyhow!("{e:#} (fix it, or delete it to regenerate)"))?;
    let house = &m.plan.house;
    // House terms come from this run's --glossary only: one removed from it since the
    // file was written is no longer enforced.
    file.entries.retain(|l| {
        !l.house
            && !house
                .entries
                .iter()
                .any(|h| h.source.eq_ignore_ascii_case(&l.source))
    });
    let mut out = glossary_agent::build_glossary(
        backend,
        &[],
        house,
        &opts.source_lang,
        &opts.target_lang,
        &mut |_, _| {},
    )?;
    out.entries.append(&mut file.entries);
    Ok(out)
}

/// The agent's glossary: house terms, suggested translations, kept terms.
fn infer(m: &mut RunState, backend: &mut dyn ChatBackend) -> Result<Glossary> {
    let plan = m.plan;
    let opts = m.opts;
    let all_units: Vec<Unit> = plan.units.iter().flatten().cloned().collect();
    let source = crate::lang::profile_or_latin(&opts.source_lang);
    let keep = glossary_agent::keep_terms(&all_units, &plan.house, 40, source);
    let mut cands: Vec<_> =
        glossary_agent::extract_candidates(&all_units, &plan.house, opts.glossary_terms)
            .into_iter()
            .filter(|c| !c.term.split(' ').any(|w| keep.iter().any(|k| k.term == w)))
            .collect();
    // Proposals are suggestions: within --max-new-tokens-total they come after translation,
    // so none is asked when the budget cannot also hold them.
    let mut keep_asks = keep
        .iter()
        .filter(|c| glossary_agent::asks_rendering(&c.term))
        .count();
    if m.over_budget((cands.len() + keep_asks) * glossary_agent::TERM_TOKENS)
        .is_some()
    {
        cands.clear();
        keep_asks = 0;
    }
    m.progress.set_message("glossary");
    let mut calls: Vec<(String, Completion)> = Vec::new();
    let mut glossary = glossary_agent::build_glossary(
        backend,
        &cands,
        &plan.house,
        &opts.source_lang,
        &opts.target_lang,
        &mut |c, done| calls.push((c.term.clone(), done.clone())),
    )?;
    // The model's own word for each kept word, so that where it translates one anyway the
    // term can be written back (`GlossaryEntry::replaces`).
    let kept = if keep_asks > 0 {
        glossary_agent::kept_entries(
            backend,
            &keep,
            &plan.house,
            &opts.source_lang,
            &opts.target_lang,
            &mut |c, done| calls.push((c.term.clone(), done.clone())),
        )?
    } else {
        glossary_agent::keep_lines(&keep)
    };
    for (term, c) in &calls {
        m.record_call("glossary", term, c, "ok");
    }
    glossary.entries.extend(kept);
    Ok(glossary)
}
