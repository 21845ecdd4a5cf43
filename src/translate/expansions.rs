//! An acronym's expansion in parentheses right after it — `RAPTOR (Recursive Abstractive
//! Processing for Tree-Organized Retrieval)`, `ANN (Approximate Nearest Neighbor)` — is the
//! name the acronym stands for, and Chinese technical books print it in English, with the
//! Chinese after it where they give one: `ANN（Approximate Nearest Neighbor，近似最近邻）`. A
//! model translates it (`ANN（近似最近邻）`), and the translation no longer spells the
//! acronym; the English is written back in front of the model's words.
//!
//! This is done on the model's text rather than by protecting the expansion: shown a
//! protected expansion, the small default model still translated it in place and then,
//! made to write the placeholder before the line could end, added a sentence of its own
//! to hold it.

use crate::lang::punct::{FULLWIDTH_COMMA, FULLWIDTH_LEFT_PAREN, FULLWIDTH_RIGHT_PAREN};
use regex::Regex;
use std::sync::LazyLock;

/// A parenthesised run of two to twelve words of letters and hyphens, the first one
/// capitalised.
static PARENS_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\([A-Z][A-Za-z]*(?:[ -][A-Za-z]+){1,11}\)").expect("valid expansion regex")
});

/// An acronym and the expansion written after it in a source line.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Expansion<'a> {
    /// `ANN`, `GraphRAG`.
    pub acronym: &'a str,
    /// `Approximate Nearest Neighbor`.
    pub words: &'a str,
}

/// The acronym a text ends with (after emphasis markers and spaces), if it is one: two to
/// ten letters or digits, at least two of them capitals (`RAG`, `GraphRAG`, `LoRA`).
fn acronym_before(before: &str) -> Option<&str> {
    let t = before
        .trim_end_matches([' ', '\t'])
        .trim_end_matches(['*', '_']);
    let start = t
        .char_indices()
        .rev()
        .take_while(|(_, c)| c.is_ascii_alphanumeric())
        .last()
        .map(|(i, _)| i)?;
    let word = &t[start..];
    let caps = word.chars().filter(char::is_ascii_uppercase).count();
    let first_ok = word.chars().next().is_some_and(|c| c.is_ascii_alphabetic());
    let boundary = t[..start]
        .chars()
        .next_back()
        .is_none_or(|c| !c.is_alphanumeric());
    (first_ok && boundary && (2..=10).contains(&word.len()) && caps >= 2).then_some(word)
}

/// The capitals an expansion contributes: each capitalised word's (or hyphenated part's)
/// first letter, and every letter of a part in capitals (`Graph-based RAG` → `GRAG`);
/// lowercase words (`for`, `of`, `based`) contribute none.
fn initials(expansion: &str) -> String {
    expansion
        .split([' ', '-'])
        .filter(|p| p.starts_with(|c: char| c.is_ascii_uppercase()))
        .flat_map(|p| {
            let all_caps = p.len() > 1 && p.chars().all(|c| c.is_ascii_uppercase());
            let n = if all_caps { p.len() } else { 1 };
            p.chars().take(n)
        })
        .collect()
}

/// The expansions `source` writes: an acronym right before the `(`, its capitals the
/// expansion's initials in order.
pub(crate) fn expansions(source: &str) -> Vec<Expansion<'_>> {
    PARENS_RE
        .find_iter(source)
        .filter_map(|m| {
            let acronym = acronym_before(&source[..m.start()])?;
            let words = &source[m.start() + 1..m.end() - 1];
            let caps: String = acronym.chars().filter(char::is_ascii_uppercase).collect();
            (initials(words) == caps).then_some(Expansion { acronym, words })
        })
        .collect()
}

/// `line`, the Chinese translation of `source`, with each expansion of `source` that it
/// lacks written back after the first occurrence of its acronym: in front of the model's
/// words in the parentheses that follow it (`ANN（近似最近邻）` → `ANN（Approximate Nearest
/// Neighbor，近似最近邻）`), or in parentheses of its own when none follow. A line without
/// the acronym is left as it is.
pub(crate) fn write_back(source: &str, line: &str) -> String {
    let mut out = line.to_string();
    for e in expansions(source) {
        if out.contains(e.words) {
            continue;
        }
        let Some(at) = find_word(&out, e.acronym) else {
            continue;
        };
        let after = at + e.acronym.len();
        let rest = &out[after..];
        let marks = rest.len() - rest.trim_start_matches(['*', '_']).len();
        let gap = rest[marks..].len() - rest[marks..].trim_start_matches(' ').len();
        let open = after + marks + gap;
        let tail = &out[open..];
        let close = if tail.starts_with(FULLWIDTH_LEFT_PAREN) {
            tail.find(FULLWIDTH_RIGHT_PAREN)
        } else if tail.starts_with('(') {
            tail.find(')')
        } else {
            None
        };
        out = match close {
            Some(c) => {
                let inner = tail[tail.chars().next().map_or(1, char::len_utf8)..c].trim();
                if !inner.chars().any(crate::units::is_cjk) {
                    continue;
                }
                let end = open + c + tail[c..].chars().next().map_or(1, char::len_utf8);
                let gloss = format!("{}{FULLWIDTH_COMMA}{inner}", e.words);
                format!(
                    "{}{FULLWIDTH_LEFT_PAREN}{gloss}{FULLWIDTH_RIGHT_PAREN}{}",
                    &out[..after + marks],
                    &out[end..]
                )
            }
            None => format!(
                "{}{FULLWIDTH_LEFT_PAREN}{}{FULLWIDTH_RIGHT_PAREN}{}",
                &out[..after + marks],
                e.words,
                &out[after + marks..]
            ),
        };
    }
    out
}

/// Where `word` first occurs in `text` as a whole word (no ASCII letter or digit on
/// either side).
fn find_word(text: &str, word: &str) -> Option<usize> {
    text.match_indices(word).map(|(i, _)| i).find(|&i| {
        let before = text[..i].chars().next_back();
        let after = text[i + word.len()..].chars().next();
        !before.is_some_and(|c| c.is_ascii_alphanumeric())
            && !after.is_some_and(|c| c.is_ascii_alphanumeric())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(text: &str) -> Vec<(&str, &str)> {
        expansions(text)
            .into_iter()
            .map(|e| (e.acronym, e.words))
            .collect()
    }

    #[test]
    fn expansions_that_spell_their_acronym() {
        assert_eq!(
            found(
                "**RAPTOR** (Recursive Abstractive Processing for Tree-Organized Retrieval) adopts"
            ),
            [(
                "RAPTOR",
                "Recursive Abstractive Processing for Tree-Organized Retrieval"
            )]
        );
        assert_eq!(
            found("two ANN (Approximate Nearest Neighbor) algorithms"),
            [("ANN", "Approximate Nearest Neighbor")]
        );
        assert_eq!(
            found("MRR (Mean Reciprocal Rank)"),
            [("MRR", "Mean Reciprocal Rank")]
        );
        assert_eq!(
            found("GraphRAG (Graph-based RAG)"),
            [("GraphRAG", "Graph-based RAG")]
        );
    }

    #[test]
    fn other_parentheses_are_prose() {
        // Not the acronym's letters, a lowercase aside, a plain word before, an expansion
        // before its acronym, a single word.
        assert!(found("RAG (Better Answers Here) works").is_empty());
        assert!(found("ANN (approximate nearest neighbor)").is_empty());
        assert!(found("the model (Mean Reciprocal Rank)").is_empty());
        assert!(found("Retrieval-Augmented Generation (RAG)").is_empty());
        assert!(found("HNSW (Hierarchical)").is_empty());
    }

    #[test]
    fn the_english_is_written_back_before_the_model_words() {
        let src = "two ANN (Approximate Nearest Neighbor) algorithms";
        assert_eq!(
            write_back(src, "两种 ANN（近似最近邻）算法"),
            "两种 ANN（Approximate Nearest Neighbor，近似最近邻）算法"
        );
        assert_eq!(
            write_back(src, "两种 ANN (近似最近邻) 算法"),
            "两种 ANN（Approximate Nearest Neighbor，近似最近邻） 算法"
        );
        // Dropped: written in parentheses after the acronym (and its bold).
        let raptor =
            "**RAPTOR** (Recursive Abstractive Processing for Tree-Organized Retrieval) adopts";
        assert_eq!(
            write_back(raptor, "**RAPTOR** 采用"),
            "**RAPTOR**（Recursive Abstractive Processing for Tree-Organized Retrieval） 采用"
        );
        // Kept by the model, or the acronym not in the line, or English in the
        // parentheses: as it is.
        let kept =
            "**RAPTOR**（Recursive Abstractive Processing for Tree-Organized Retrieval）采用";
        assert_eq!(write_back(raptor, kept), kept);
        assert_eq!(write_back(src, "两种近似最近邻算法"), "两种近似最近邻算法");
        assert_eq!(write_back(src, "两种 ANN (v2) 算法"), "两种 ANN (v2) 算法");
        // Only a whole word is the acronym.
        assert_eq!(
            write_back(src, "ANNOY 与 ANN"),
            "ANNOY 与 ANN（Approximate Nearest Neighbor）"
        );
    }
}
