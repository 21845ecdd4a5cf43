//! Cutting a paragraph over the token budget: between sentences, and inside a sentence
//! that alone exceeds the budget, between words; never inside a protected span or an
//! inline container.

use super::scan::Scan;
use super::types::TokenCount;
use crate::lang::punct::{
    FULLWIDTH_RIGHT_PAREN, RIGHT_CORNER_BRACKET, RIGHT_WHITE_CORNER_BRACKET, SENTENCE_ENDS,
};
use std::ops::Range;

/// Cut positions inside `range` where a sentence ends (after the following whitespace),
/// outside protected spans and inline containers.
fn sentence_cuts(text: &str, range: &Range<usize>, forbidden: &[Range<usize>]) -> Vec<usize> {
    let s = &text[range.clone()];
    let mut cuts = Vec::new();
    let chars: Vec<(usize, char)> = s.char_indices().collect();
    let mut i = 0;
    while i < chars.len() {
        let (_, c) = chars[i];
        let cjk_end = SENTENCE_ENDS.contains(&c);
        if matches!(c, '.' | '!' | '?') || cjk_end {
            let mut j = i + 1;
            while j < chars.len()
                && matches!(
                    chars[j].1,
                    '"' | '\''
                        | ')'
                        | ']'
                        | '”'
                        | '’'
                        | FULLWIDTH_RIGHT_PAREN
                        | RIGHT_CORNER_BRACKET
                        | RIGHT_WHITE_CORNER_BRACKET
                        | '*'
                        | '_'
                )
            {
                j += 1;
            }
            let ws_start = j;
            while j < chars.len() && chars[j].1.is_whitespace() {
                j += 1;
            }
            let has_ws = j > ws_start;
            if j < chars.len() && (has_ws || cjk_end) {
                let next = chars[j].1;
                if !next.is_lowercase() {
                    let cut = range.start + chars[j].0;
                    if !forbidden.iter().any(|f| f.start < cut && cut < f.end) {
                        cuts.push(cut);
                    }
                }
            }
            i = j.max(i + 1);
        } else {
            i += 1;
        }
    }
    cuts
}

/// Cut positions after any whitespace run, outside protected spans and inline containers.
fn word_cuts(text: &str, range: &Range<usize>, forbidden: &[Range<usize>]) -> Vec<usize> {
    let s = &text[range.clone()];
    let mut cuts = Vec::new();
    let mut prev_ws = false;
    for (i, c) in s.char_indices() {
        if !c.is_whitespace() && prev_ws {
            let cut = range.start + i;
            if !forbidden.iter().any(|f| f.start < cut && cut < f.end) {
                cuts.push(cut);
            }
        }
        prev_ws = c.is_whitespace();
    }
    cuts
}

/// Split an overlong paragraph into pieces of at most `budget` tokens where possible.
pub(super) fn split_paragraph(
    text: &str,
    range: Range<usize>,
    scan: &Scan,
    budget: usize,
    counter: &dyn TokenCount,
) -> Vec<Range<usize>> {
    let forbidden: Vec<Range<usize>> = scan
        .spans
        .iter()
        .map(|s| s.range.clone())
        .chain(scan.containers.iter().cloned())
        .filter(|r| r.start < range.end && r.end > range.start)
        .collect();
    let mut pieces = Vec::new();
    let mut bounds = vec![range.start];
    bounds.extend(sentence_cuts(text, &range, &forbidden));
    bounds.push(range.end);
    // Sentences, each cut further between words when it alone exceeds the budget.
    let mut sentences: Vec<Range<usize>> = Vec::new();
    for w in bounds.windows(2) {
        let r = w[0]..w[1];
        if r.is_empty() {
            continue;
        }
        if counter.count_tokens(&text[r.clone()]) > budget {
            let mut b = vec![r.start];
            b.extend(word_cuts(text, &r, &forbidden));
            b.push(r.end);
            let words: Vec<Range<usize>> = b
                .windows(2)
                .map(|w| w[0]..w[1])
                .filter(|r| !r.is_empty())
                .collect();
            sentences.extend(pack(text, words, budget, counter));
        } else {
            sentences.push(r);
        }
    }
    pieces.extend(pack(text, sentences, budget, counter));
    pieces
}

/// Greedily join adjacent ranges while their token count stays within the budget.
fn pack(
    text: &str,
    ranges: Vec<Range<usize>>,
    budget: usize,
    counter: &dyn TokenCount,
) -> Vec<Range<usize>> {
    let mut out: Vec<Range<usize>> = Vec::new();
    let mut cur: Option<(Range<usize>, usize)> = None;
    for r in ranges {
        let t = counter.count_tokens(&text[r.clone()]);
        cur = match cur.take() {
            Some((c, ct)) if ct + t <= budget => Some((c.start..r.end, ct + t)),
            Some((c, _)) => {
                out.push(c);
                Some((r, t))
            }
            None => Some((r, t)),
        };
    }
    if let Some((c, _)) = cur {
        out.push(c);
    }
    out
}
