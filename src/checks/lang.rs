//! Language-level heuristics on prose: scripts, source-language residue, repetition
//! loops, length, and unbalanced markup. All deterministic, no model.
//!
//! Language codes and writing systems themselves ([`Script`], [`script_of`],
//! [`primary`]…) live in [`crate::lang`], below the checks, and are re-exported here.

use std::collections::HashMap;

use crate::lang::punct::{
    BRACKET_PAIRS, FULLWIDTH_EXCLAMATION, FULLWIDTH_QUESTION, IDEOGRAPHIC_FULL_STOP,
};
use crate::lang::zh::{SIMPLIFIED_ONLY, TRADITIONAL_ONLY};
pub use crate::lang::{
    expected_script, is_chinese, is_traditional_zh, primary, script_of, Script, ScriptCounts,
};

/// Count of characters from the other Chinese standard than the target's.
pub fn wrong_chinese_standard(text: &str, target_traditional: bool) -> (usize, usize) {
    let set = if target_traditional {
        SIMPLIFIED_ONLY
    } else {
        TRADITIONAL_ONLY
    };
    let mut wrong = 0;
    let mut han = 0;
    for c in text.chars() {
        if script_of(c) == Some(Script::Han) {
            han += 1;
            if set.contains(c) {
                wrong += 1;
            }
        }
    }
    (wrong, han)
}

const EN_STOPWORDS: &[&str] = &[
    "the", "a", "an", "and", "or", "of", "to", "in", "on", "for", "with", "is", "are", "was",
    "were", "be", "been", "it", "this", "that", "these", "those", "as", "at", "by", "from", "not",
    "but", "we", "you", "they", "he", "she", "its", "their", "our", "can", "will", "would",
    "should", "which", "what", "when", "how", "if", "then", "than", "so", "do", "does", "has",
    "have", "had", "into", "about", "more", "most", "all", "each",
];

/// Whether a lower-case word is an English function word.
pub fn is_en_stopword(w: &str) -> bool {
    EN_STOPWORDS.contains(&w)
}

/// Runs of Latin words (at least `min_words`, with at least two English function words)
/// in a text that is otherwise in a non-Latin script: English left untranslated.
pub fn latin_runs(text: &str, min_words: usize) -> Vec<String> {
    let mut runs = Vec::new();
    let mut words: Vec<&str> = Vec::new();
    let mut run_start: Option<usize> = None;
    let mut run_end = 0;
    let flush =
        |words: &mut Vec<&str>, start: Option<usize>, end: usize, runs: &mut Vec<String>| {
            if let Some(s) = start {
                let stop = words
                    .iter()
                    .filter(|w| is_en_stopword(&w.to_ascii_lowercase()))
                    .count();
                if words.len() >= min_words && stop >= 2 {
                    runs.push(text[s..end].to_string());
                }
            }
            words.clear();
        };
    let mut i = 0;
    let bytes = text.as_bytes();
    while i < text.len() {
        let c = text[i..].chars().next().expect("char at boundary");
        if c.is_ascii_alphabetic() {
            let s = i;
            while i < text.len()
                && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'\'' || bytes[i] == b'-')
            {
                i += 1;
            }
            words.push(&text[s..i]);
            if run_start.is_none() {
                run_start = Some(s);
            }
            run_end = i;
            continue;
        }
        let joins = c == ' '
            || (c.is_ascii_punctuation() && !matches!(c, '.' | '!' | '?' | ';'))
            || c.is_ascii_digit();
        if !joins {
            flush(&mut words, run_start.take(), run_end, &mut runs);
        }
        i += c.len_utf8();
    }
    flush(&mut words, run_start.take(), run_end, &mut runs);
    runs
}

/// Share of English function words among the words of a Latin-script text, and the word
/// count.
pub fn en_stopword_share(text: &str) -> (f64, usize) {
    let words: Vec<String> = text
        .split(|c: char| !c.is_alphabetic() && c != '\'')
        .filter(|w| !w.is_empty())
        .map(|w| w.to_lowercase())
        .collect();
    if words.is_empty() {
        return (0.0, 0);
    }
    let stop = words.iter().filter(|w| is_en_stopword(w)).count();
    (stop as f64 / words.len() as f64, words.len())
}

/// The longest looping repetition in a text: a chunk (1–60 characters, containing a
/// letter or digit) repeated back to back at least `min_repeats` times and covering at
/// least 16 characters. Returns the chunk and its count.
pub fn repeated_run(text: &str, min_repeats: usize) -> Option<(String, usize)> {
    repeated_run_upto(text, min_repeats, 60)
}

/// [`repeated_run`] with chunks of up to `max_period` characters.
pub fn repeated_run_upto(
    text: &str,
    min_repeats: usize,
    max_period: usize,
) -> Option<(String, usize)> {
    let chars: Vec<char> = text.chars().collect();
    let n = chars.len();
    let mut best: Option<(usize, usize, usize)> = None; // start, period, repeats
    for p in 1..=max_period.min(n / 2) {
        let mut run = 0usize;
        let mut i = 0;
        while i + p < n {
            if chars[i] == chars[i + p] {
                run += 1;
            } else {
                run = 0;
            }
            // run == number of matching positions ending at i; copies = run / p + 1.
            let copies = run / p + 1;
            if copies >= min_repeats && run + p >= 16 {
                let start = i + 1 - run;
                let chunk: String = chars[start..start + p].iter().collect();
                let meaningful = chunk.chars().any(|c| c.is_alphanumeric());
                let distinct = {
                    let mut cs: Vec<char> = chunk.chars().filter(|c| !c.is_whitespace()).collect();
                    cs.sort_unstable();
                    cs.dedup();
                    cs.len()
                };
                if meaningful
                    && (p > 1 || distinct == 1)
                    && best.is_none_or(|(_, bp, br)| copies * p > br * bp)
                {
                    best = Some((start, p, copies));
                }
            }
            i += 1;
        }
    }
    best.map(|(s, p, r)| (chars[s..s + p].iter().collect(), r))
}

/// Sentences of at least `min_chars` characters that occur more than once, with counts.
pub fn repeated_sentences(text: &str, min_chars: usize) -> Vec<(String, usize)> {
    let mut counts: HashMap<String, usize> = HashMap::new();
    let mut order: Vec<String> = Vec::new();
    for s in text.split([
        IDEOGRAPHIC_FULL_STOP,
        FULLWIDTH_EXCLAMATION,
        FULLWIDTH_QUESTION,
        '.',
        '!',
        '?',
        '\n',
    ]) {
        let s = s.split_whitespace().collect::<Vec<_>>().join(" ");
        if s.chars().count() < min_chars {
            continue;
        }
        let e = counts.entry(s.clone()).or_insert(0);
        if *e == 0 {
            order.push(s);
        }
        *e += 1;
    }
    order
        .into_iter()
        .filter_map(|s| {
            let c = counts[&s];
            (c > 1).then_some((s, c))
        })
        .collect()
}

/// The typical ratio of a translation's visible length to its source's, from the
/// scripts alone: a dense script (Han, Kana, Hangul) takes about a third of the
/// characters of a Latin-script text, and the other way round.
pub fn typical_length_ratio(src: Script, tgt: Script) -> f64 {
    let dense = |s: Script| matches!(s, Script::Han | Script::Kana | Script::Hangul);
    match (dense(src), dense(tgt)) {
        (false, true) => 0.33,
        (true, false) => 3.0,
        _ => 1.1,
    }
}

/// Visible length used for ratios: characters that are not whitespace.
pub fn visible_len(text: &str) -> usize {
    text.chars().filter(|c| !c.is_whitespace()).count()
}

/// Delimiter balance of prose: for each pair, opens minus closes.
pub fn bracket_balance(text: &str) -> Vec<(&'static str, i64)> {
    BRACKET_PAIRS
        .iter()
        .map(|(name, open, close)| {
            let o = text.chars().filter(|c| open.contains(c)).count() as i64;
            let c = text.chars().filter(|c| close.contains(c)).count() as i64;
            (*name, o - c)
        })
        .collect()
}

/// Literal emphasis delimiters left in rendered text (`**`, `__`), i.e. emphasis that did
/// not parse — common when `**` touches CJK punctuation.
pub fn literal_emphasis(text: &str) -> usize {
    text.matches("**").count() + text.matches("__").count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loops_are_found() {
        let (chunk, n) =
            repeated_run("好的。这是一个测试测试测试测试测试测试测试测试。", 4).unwrap();
        assert_eq!(chunk.chars().count(), 2);
        assert!(n >= 4);
        assert!(repeated_run("------------------------------", 4).is_none());
        assert!(repeated_run("这是正常的一句话，没有任何重复的内容。", 4).is_none());
        assert!(repeated_run("的的的的的的的的的的的的的的的的的的", 4).is_some());
    }

    #[test]
    fn english_runs() {
        let runs = latin_runs(
            "这里有一句 the model is not able to do this 没有翻译。Agent 和 RAG 正常。",
            6,
        );
        assert_eq!(runs, vec!["the model is not able to do this"]);
    }
}
