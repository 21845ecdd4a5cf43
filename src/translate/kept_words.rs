//! Kept words the model translated anyway, found in the book's own translations and
//! written back. The glossary agent asks the model for its word for each kept term out of
//! context (`Notes` → `简记`), but in a sentence the model may choose another one
//! (`Simple Notes` → `简单笔记`), which the per-line write-back then does not find. Once
//! every unit is translated, the lines whose source writes a kept term more often than
//! their translation are compared with the rest of the book: the run of target-script
//! characters that occurs in most of those lines and rarely anywhere else (Dice
//! coefficient of co-occurrence, as terminology-alignment tools score a term pair) is the
//! model's word for the term there, and the term is written back in its place, as many
//! times as each line is missing it. A word needs at least [`MIN_LINES`] such lines, so a
//! name translated once or twice (`Tesla` → `特斯拉`) stays as the model wrote it.

use super::line_pairs::line_pairs;
use super::typography::{term_back, term_missing};
use crate::glossary::Glossary;
use crate::translate::glossary_agent::asks_rendering;
use crate::units::{is_cjk, Unit};
use std::collections::{BTreeMap, BTreeSet};

/// Fewest lines that must show the same word for a kept term before it is written back.
pub const MIN_LINES: usize = 3;
/// Lengths, in characters, of the words considered.
const LENGTHS: std::ops::RangeInclusive<usize> = 2..=4;
/// Lowest Dice coefficient (2·both ÷ (lines missing the term + lines with the word)).
const MIN_DICE: f64 = 0.75;

/// A kept term's word learned from the translations and how often it was written back.
#[derive(Debug, Clone, PartialEq)]
pub struct Learned {
    /// The kept term (`Notes`).
    pub term: String,
    /// The model's word for it (`笔记`).
    pub word: String,
    /// Lines whose translation lacked the term and had the word.
    pub lines: usize,
    /// Occurrences written back.
    pub written: usize,
}

/// Learn and write back the kept terms' words in `texts` (each unit's restored
/// translation, `None` where not translated) of the book's `units`, for `target_lang`.
/// Only units whose translation has as many lines as their source take part; a unit kept
/// verbatim or not translated is left alone.
pub fn write_back(
    units: &[Vec<Unit>],
    texts: &mut [Vec<Option<String>>],
    glossary: &Glossary,
    target_lang: &str,
) -> Vec<Learned> {
    if !crate::lang::profile_or_latin(target_lang).is_cjk() {
        return Vec::new();
    }
    let targets: BTreeSet<&str> = glossary
        .entries
        .iter()
        .flat_map(|e| e.target.iter().map(String::as_str))
        .collect();
    let terms: Vec<&str> = glossary
        .entries
        .iter()
        .filter(|e| e.keeps_source() && asks_rendering(&e.source))
        .map(|e| e.source.as_str())
        .collect();
    if terms.is_empty() {
        return Vec::new();
    }
    // Every line pair of the units that take part, and which unit it belongs to.
    let all = line_pairs(units, texts);
    let owners: Vec<(usize, usize)> = all.iter().map(|p| p.unit).collect();
    let mut pairs: Vec<(String, String)> = all.into_iter().map(|p| (p.source, p.text)).collect();
    let mut learned = Vec::new();
    let mut changed: BTreeSet<(usize, usize)> = BTreeSet::new();
    for term in terms {
        let Some((word, lines)) = learn(&pairs, term, &targets) else {
            continue;
        };
        let mut written = 0;
        for ((s, t), owner) in pairs.iter_mut().zip(&owners) {
            let (back, n) = term_back(s, t, term, &[word.as_str()]);
            if n > 0 {
                written += n;
                *t = back;
                changed.insert(*owner);
            }
        }
        learned.push(Learned {
            term: term.to_string(),
            word,
            lines,
            written,
        });
    }
    let mut rebuilt: BTreeMap<(usize, usize), Vec<&str>> = BTreeMap::new();
    for ((_, t), owner) in pairs.iter().zip(&owners) {
        if changed.contains(owner) {
            rebuilt.entry(*owner).or_default().push(t);
        }
    }
    for ((ci, ui), lines) in rebuilt {
        texts[ci][ui] = Some(lines.join("\n"));
    }
    learned
}

/// The model's word for `term` in `pairs` (source line, translation line) and the number of
/// lines it was found in, or `None` where no word is clear enough. `taken` are the
/// glossary's own targets, never taken for a kept term.
fn learn(
    pairs: &[(String, String)],
    term: &str,
    taken: &BTreeSet<&str>,
) -> Option<(String, usize)> {
    let missing: Vec<&str> = pairs
        .iter()
        .filter(|(s, t)| term_missing(s, t, term) > 0)
        .map(|(_, t)| t.as_str())
        .collect();
    if missing.len() < MIN_LINES {
        return None;
    }
    let mut support: BTreeMap<String, usize> = BTreeMap::new();
    for t in &missing {
        for w in words(t) {
            *support.entry(w).or_default() += 1;
        }
    }
    let mut best: Option<((f64, usize, usize), String)> = None;
    for (w, both) in support {
        if both < MIN_LINES || both * 2 < missing.len() || taken.contains(w.as_str()) {
            continue;
        }
        let with_word = pairs.iter().filter(|(_, t)| t.contains(&w)).count();
        let dice = 2.0 * both as f64 / (missing.len() + with_word) as f64;
        let key = (dice, both, w.chars().count());
        if dice >= MIN_DICE && best.as_ref().is_none_or(|(k, _)| key > *k) {
            best = Some((key, w));
        }
    }
    best.map(|((_, both, _), w)| (w, both))
}

/// The distinct runs of [`LENGTHS`] ideographs (letters of a CJK script, no punctuation) in
/// `text`.
fn words(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let letters = |c: &char| is_cjk(*c) && c.is_alphabetic();
    let chars: Vec<char> = text.chars().collect();
    for run in chars.split(|c| !letters(c)) {
        for len in LENGTHS {
            for w in run.windows(len) {
                out.insert(w.iter().collect());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::book::Chapter;
    use crate::glossary::GlossaryEntry;
    use crate::units::{segment_chapter, EstimateTokens};

    fn kept(term: &str) -> GlossaryEntry {
        GlossaryEntry {
            house: false,
            needs_review: true,
            ..GlossaryEntry::house(term, term)
        }
    }

    fn book(src: &str) -> Vec<Vec<Unit>> {
        let ch = Chapter {
            rel_path: "c.md".into(),
            text: src.to_string(),
        };
        vec![segment_chapter(&ch, 10_000, &EstimateTokens).unwrap()]
    }

    #[test]
    fn the_models_word_for_a_kept_term_is_learned_and_written_back() {
        let src = "Simple Notes keep one fact.\nEnhanced Notes keep a paragraph.\nThe Notes are short.\nA note on memory.\nMemory is long.\n";
        let zh = "简单笔记保存一个事实。\n增强笔记保存一段话。\n这些笔记很短。\n关于记忆的一个笔记。\n记忆很长。";
        let units = book(src);
        assert_eq!(units[0].len(), 1, "{units:?}");
        let mut texts = vec![vec![Some(zh.to_string())]];
        let g = Glossary {
            entries: vec![kept("Notes"), kept("Tesla")],
        };
        let learned = write_back(&units, &mut texts, &g, "zh-CN");
        assert_eq!(
            learned,
            [Learned {
                term: "Notes".into(),
                word: "笔记".into(),
                lines: 3,
                written: 3
            }]
        );
        assert_eq!(
            texts[0][0].as_deref().unwrap(),
            "简单Notes保存一个事实。\n增强Notes保存一段话。\n这些Notes很短。\n关于记忆的一个笔记。\n记忆很长。",
            "a lower-case note is not the term"
        );
    }

    #[test]
    fn a_word_seen_in_too_few_lines_or_all_over_the_book_is_not_taken() {
        // Two lines only: not enough to tell.
        let src = "Tesla builds cars.\nTesla sells cars.\n";
        let units = book(src);
        let mut texts = vec![vec![Some("特斯拉造车。\n特斯拉卖车。".to_string())]];
        let g = Glossary {
            entries: vec![kept("Tesla")],
        };
        assert!(write_back(&units, &mut texts, &g, "zh-CN").is_empty());
        assert_eq!(texts[0][0].as_deref(), Some("特斯拉造车。\n特斯拉卖车。"));
        // The only shared word is everywhere in the book: no clear rendering.
        let src = "The Cards help.\nThe Cards stay.\nThe Cards grow.\nMemory helps.\nMemory stays.\nMemory grows.\nMemory ends.\n";
        let zh = "记忆有帮助。\n记忆留下。\n记忆增长。\n记忆有帮助。\n记忆留下。\n记忆增长。\n记忆结束。";
        let units = book(src);
        let mut texts = vec![vec![Some(zh.to_string())]];
        let g = Glossary {
            entries: vec![kept("Cards")],
        };
        assert!(write_back(&units, &mut texts, &g, "zh-CN").is_empty());
        assert_eq!(texts[0][0].as_deref(), Some(zh));
        // A Latin target is left alone.
        assert!(write_back(&units, &mut texts, &g, "fr").is_empty());
    }
}
