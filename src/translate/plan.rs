//! The plan stage: the book read and cut into units, the house glossary and the guide
//! loaded (no model involved, so `--dry-run` prints it without one), and the fingerprint of
//! every input that determines the output.

use super::options::TranslateOptions;
use super::passage::max_new_tokens;
use crate::book::{load_book, Book};
use crate::glossary::Glossary;
use crate::units::{
    release_names, segment_chapter_with, EstimateTokens, TokenCount, Unit, UnitKind,
};
use crate::util::sha256_hex;
use anyhow::{bail, Context, Result};
use std::collections::BTreeMap;

/// Assumed speeds for the dry-run estimate (tokens/s on a 2-core CPU, 1.5B model).
const EST_PREFILL_TPS: f64 = 150.0;
const EST_DECODE_TPS: f64 = 35.0;

/// What `translate` works on: the book, its units, the house glossary and the guide.
pub(super) struct Plan {
    pub(super) book: Book,
    pub(super) units: Vec<Vec<Unit>>,
    pub(super) house: Glossary,
    pub(super) guide: String,
    pub(super) guide_origin: String,
}

impl Plan {
    /// The units sent to the model, in book order (verbatim units are left out).
    pub(super) fn translatable(&self) -> impl Iterator<Item = &Unit> {
        self.units
            .iter()
            .flatten()
            .filter(|u| u.kind == UnitKind::Translate)
    }
}

/// Token allowance for a unit's translation.
pub(super) fn max_new_tokens_for(unit: &Unit) -> usize {
    max_new_tokens(&unit.protected)
}

pub(super) fn load_plan(opts: &TranslateOptions) -> Result<Plan> {
    let (book, default_glossary) = match &opts.input {
        Some(p) => (load_book(p)?, None),
        None => (
            super::sample_book::book(),
            Some(super::sample_book::GLOSSARY_JSON),
        ),
    };
    let book = match &book.epub {
        Some(epub) if !opts.code_comments => {
            let epub = epub.without_code_comments();
            Book {
                chapters: epub.chapters(),
                epub: Some(std::sync::Arc::new(epub)),
                ..book
            }
        }
        _ => book,
    };
    if book.chapters.is_empty() || book.chapters.iter().all(|c| c.text.trim().is_empty()) {
        bail!(
            "the book at {} is empty: nothing to translate",
            book.root.display()
        );
    }
    let house = match (&opts.glossary, default_glossary) {
        (Some(p), _) => Glossary::load(p, &opts.source_lang, &opts.target_lang)?
            .without_duplicates()
            .with_context(|| format!("invalid glossary {}", p.display()))?,
        // The bundled sample's glossary has Chinese terms only: for another pair the sample
        // is translated without one (it cannot fail otherwise: it is tested data).
        (None, Some(json)) => {
            Glossary::parse_json(json, &opts.source_lang, &opts.target_lang).unwrap_or_default()
        }
        (None, None) => Glossary::default(),
    };
    let (guide, guide_origin) = match &opts.guide {
        Some(p) => (
            std::fs::read_to_string(p)
                .with_context(|| format!("cannot read guide {}", p.display()))?,
            p.display().to_string(),
        ),
        None => {
            let (text, file) = crate::lang::profile_or_latin(&opts.target_lang).guide;
            (text.to_string(), format!("built-in {file}"))
        }
    };
    let counter = EstimateTokens;
    let mut units = book
        .chapters
        .iter()
        .map(|c| segment_chapter_with(c, opts.unit_tokens, &counter, opts.code_comments))
        .collect::<Result<Vec<_>>>()?;
    for unit in units.iter_mut().flatten() {
        release_names(unit, |name| house_translates(&house, name));
    }
    Ok(Plan {
        book,
        units,
        house,
        guide,
        guide_origin,
    })
}

/// Whether a house term has `name` (a camel-case name, kept as written unless a house
/// glossary says otherwise) as one of its words, in any case, or in the plural.
fn house_translates(house: &Glossary, name: &str) -> bool {
    house.entries.iter().filter(|e| e.house).any(|e| {
        e.source.split(|c: char| !c.is_alphanumeric()).any(|w| {
            w.eq_ignore_ascii_case(name)
                || w.eq_ignore_ascii_case(&format!("{name}s"))
                || name.eq_ignore_ascii_case(&format!("{w}s"))
        })
    })
}

/// Fingerprint of everything that determines the output.
pub(super) fn fingerprint(
    plan: &Plan,
    opts: &TranslateOptions,
    model_hash: &str,
    template: &str,
    params: &str,
) -> (String, BTreeMap<String, String>) {
    let mut inputs = BTreeMap::new();
    for c in &plan.book.chapters {
        inputs.insert(
            format!("chapter:{}", c.name()),
            sha256_hex(c.text.as_bytes()),
        );
    }
    inputs.insert(
        "glossary".into(),
        sha256_hex(
            serde_json::to_string(&plan.house)
                .unwrap_or_default()
                .as_bytes(),
        ),
    );
    inputs.insert("guide".into(), sha256_hex(plan.guide.as_bytes()));
    inputs.insert("model".into(), model_hash.to_string());
    inputs.insert("template".into(), sha256_hex(template.as_bytes()));
    inputs.insert(
        "params".into(),
        sha256_hex(
            format!(
                "{params}|{}|{}|{}|{:?}{}",
                opts.source_lang,
                opts.target_lang,
                opts.unit_tokens,
                opts.mode,
                if opts.code_comments { "|comments" } else { "" }
            )
            .as_bytes(),
        ),
    );
    let all = serde_json::to_string(&inputs).unwrap_or_default();
    (sha256_hex(all.as_bytes()), inputs)
}

/// The plan as `--dry-run` prints it: units per chapter, token budgets per agent, a time estimate.
pub(super) fn print_plan(plan: &Plan, opts: &TranslateOptions) {
    let counter = EstimateTokens;
    let mut total_in = 0usize;
    let mut n = 0usize;
    println!(
        "Plan: {} chapter(s) from {}",
        plan.book.chapters.len(),
        plan.book.root.display()
    );
    for (c, units) in plan.book.chapters.iter().zip(&plan.units) {
        println!("  {} — {} unit(s)", c.name(), units.len());
        for u in units {
            let t = counter.count_tokens(&u.protected);
            let kind = match u.kind {
                UnitKind::Translate => format!(
                    "translate ~{t} tokens, {} placeholder(s), max {} new",
                    u.placeholders.len(),
                    max_new_tokens_for(u)
                ),
                UnitKind::Verbatim => "verbatim (never sent to the model)".to_string(),
            };
            println!("    {:<24} {kind}", u.id);
            if u.kind == UnitKind::Translate {
                total_in += t;
                n += 1;
            }
        }
    }
    let guide_tokens = counter.count_tokens(&plan.guide) + plan.house.entries.len() * 12;
    println!("Token budget per agent (estimates):");
    println!("  glossary : ≤{} candidate calls × (prefix ~{} cached + ~40 per term), ≤16 new tokens each", opts.glossary_terms, guide_tokens / 2);
    println!("  translate: {n} calls × (prefix ~{guide_tokens} cached once + ~{} per unit), ~{} new tokens in all", total_in / n.max(1), total_in * 2);
    println!(
        "  proofread: flagged units (+ every {}th clean one) × ~{} tokens",
        opts.review_every.max(1),
        2 * total_in / n.max(1) + 200
    );
    println!(
        "  revise   : at most {} per unit that fails hard checks, then the fallback (segments, sentences)",
        opts.revisions
    );
    let secs = (guide_tokens as f64 + total_in as f64) / EST_PREFILL_TPS
        + (total_in as f64 * 2.0) / EST_DECODE_TPS;
    println!("Estimated time: ~{:.0} min (assumes {EST_PREFILL_TPS:.0} tok/s prefill, {EST_DECODE_TPS:.0} tok/s decode; measure with `quire bench engine`)", secs / 60.0);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::glossary::GlossaryEntry;

    #[test]
    fn a_name_in_a_house_term_is_translated_and_others_are_kept() {
        let mut inferred = GlossaryEntry::house("LlamaIndex", "羊驼索引");
        inferred.house = false;
        let house = Glossary {
            entries: vec![GlossaryEntry::house("OpenAI API", "OpenAI 接口"), inferred],
        };
        assert!(house_translates(&house, "OpenAI"));
        assert!(house_translates(&house, "openai"));
        assert!(house_translates(&house, "OpenAIs"));
        // Only house terms say otherwise: an inferred term is a hint.
        assert!(!house_translates(&house, "LlamaIndex"));
        assert!(!house_translates(&house, "GraphRAG"));
    }
}
