//! Segmentation: a chapter cut into units whose sources cover it contiguously, each with
//! its protected form for the model; and reassembly, the translated units joined back
//! into a chapter.

use super::atoms::{build_atoms, AtomKind};
use super::placeholders::{placeholder_token, PLACEHOLDER_RE};
use super::scan::{scan, Span};
use super::types::{Placeholder, TokenCount, Unit, UnitKind};
use crate::book::Chapter;
use anyhow::Result;
use std::ops::Range;

/// Split a chapter into units under a token `budget` per translate unit (counted with
/// `counter` on the source text, which over-counts the placeholder form).
///
/// The units' sources concatenate to the chapter text. A heading always starts a unit; a
/// block that alone exceeds the budget stays whole unless it is a paragraph, which is cut
/// at sentence boundaries (or, for one overlong sentence, between words outside inline
/// markup). The prose comments of fenced code blocks are translated (a unit per block,
/// everything else in it a placeholder): [`segment_chapter_with`] can keep them.
pub fn segment_chapter(
    chapter: &Chapter,
    budget: usize,
    counter: &dyn TokenCount,
) -> Result<Vec<Unit>> {
    segment_chapter_with(chapter, budget, counter, true)
}

/// [`segment_chapter`], with `code_comments: false` keeping every code block verbatim.
pub fn segment_chapter_with(
    chapter: &Chapter,
    budget: usize,
    counter: &dyn TokenCount,
    code_comments: bool,
) -> Result<Vec<Unit>> {
    let text = chapter.text.as_str();
    let scan = scan(text, code_comments);
    let atoms = build_atoms(text, &scan, budget, counter);
    let name = chapter.name();
    let mut units: Vec<Unit> = Vec::new();
    // The open group of prose atoms and its tokens.
    let mut cur: Option<(Range<usize>, usize)> = None;
    // Whether the last unit was made from verbatim atoms (and may absorb the next one);
    // prose that became verbatim for lack of letters stays a unit of its own.
    let mut open_verbatim = false;
    let push = |units: &mut Vec<Unit>, range: Range<usize>, kind: UnitKind| {
        let unit = make_unit(&name, chapter, units.len(), kind, range, text, &scan.spans);
        units.push(unit);
    };
    for atom in atoms {
        match atom.kind {
            AtomKind::Verbatim => {
                if let Some((r, _)) = cur.take() {
                    push(&mut units, r, UnitKind::Translate);
                    open_verbatim = false;
                }
                match units.last_mut() {
                    Some(last) if open_verbatim => last.source.push_str(&text[atom.range]),
                    _ => {
                        push(&mut units, atom.range, UnitKind::Verbatim);
                        open_verbatim = true;
                    }
                }
            }
            AtomKind::Prose { starts_unit, alone } => {
                open_verbatim = false;
                let t = counter.count_tokens(&text[atom.range.clone()]);
                match cur.take() {
                    Some((r, tokens)) if !starts_unit && !alone && tokens + t <= budget => {
                        cur = Some((r.start..atom.range.end, tokens + t));
                    }
                    Some((r, _)) => {
                        push(&mut units, r, UnitKind::Translate);
                        cur = Some((atom.range, t));
                    }
                    None => cur = Some((atom.range, t)),
                }
                if alone {
                    if let Some((r, _)) = cur.take() {
                        push(&mut units, r, UnitKind::Translate);
                    }
                }
            }
        }
    }
    if let Some((r, _)) = cur.take() {
        push(&mut units, r, UnitKind::Translate);
    }
    Ok(units)
}

/// The unit `index` of the chapter: the source `text[range]`, and for prose its protected
/// form, with the `spans` inside it replaced by placeholders (prose with no letter
/// outside them is kept verbatim).
fn make_unit(
    name: &str,
    chapter: &Chapter,
    index: usize,
    kind: UnitKind,
    range: Range<usize>,
    text: &str,
    spans: &[Span],
) -> Unit {
    let source = text[range.clone()].to_string();
    let mut unit = Unit {
        id: format!("{name}#{index:03}"),
        chapter: chapter.rel_path.clone(),
        index,
        kind,
        source,
        protected: String::new(),
        placeholders: Vec::new(),
    };
    if kind == UnitKind::Verbatim {
        return unit;
    }
    let lead = unit.leading_whitespace().len();
    let trail = unit.trailing_whitespace().len();
    let core = range.start + lead..range.end - trail;
    if core.is_empty() {
        unit.kind = UnitKind::Verbatim;
        return unit;
    }
    let first = spans.partition_point(|s| s.range.start < core.start);
    let mut protected = String::with_capacity(core.len());
    let mut pos = core.start;
    for span in &spans[first..] {
        if span.range.start >= core.end {
            break;
        }
        if span.range.end > core.end || span.range.start < pos {
            continue;
        }
        protected.push_str(&text[pos..span.range.start]);
        let token = placeholder_token(unit.placeholders.len() + 1);
        protected.push_str(&token);
        unit.placeholders.push(Placeholder {
            token,
            original: text[span.range.clone()].to_string(),
            kind: span.kind,
        });
        pos = span.range.end;
    }
    protected.push_str(&text[pos..core.end]);
    let has_letters = PLACEHOLDER_RE
        .replace_all(&protected, "")
        .chars()
        .any(char::is_alphabetic);
    if !has_letters {
        unit.kind = UnitKind::Verbatim;
        unit.placeholders.clear();
        return unit;
    }
    unit.protected = protected;
    unit
}

/// Join translated units into a chapter.
///
/// `translated[i]` is the restored translation of `units[i]` (see
/// [`restore_placeholders`](super::restore_placeholders)); it is trimmed and wrapped in
/// the unit's own leading and trailing whitespace, so block separators survive whatever
/// the model did with them.
/// Verbatim units, and translate units without an entry, contribute their source. Between
/// two pieces of a paragraph split at a sentence boundary, the separating spaces are
/// dropped when both sides are CJK (Chinese and Japanese do not space sentences).
/// With `translated[i] == restore_placeholders(&units[i], &units[i].protected)` the result
/// is the chapter text byte for byte.
pub fn reassemble(units: &[Unit], translated: &[String]) -> String {
    let pieces: Vec<(&str, &str, &str, bool)> = units
        .iter()
        .enumerate()
        .map(|(i, u)| match (u.kind, translated.get(i)) {
            (UnitKind::Translate, Some(t)) => (
                u.leading_whitespace(),
                t.trim(),
                u.trailing_whitespace(),
                t.trim() != u.source.trim(),
            ),
            _ => (u.source.as_str(), "", "", false),
        })
        .collect();
    let mut out = String::with_capacity(units.iter().map(|u| u.source.len()).sum::<usize>() + 16);
    for (i, (lead, body, trail, changed)) in pieces.iter().enumerate() {
        out.push_str(lead);
        out.push_str(body);
        let next_body = pieces.get(i + 1).map(|p| p.1).unwrap_or("");
        let drop_space = *changed
            && !trail.is_empty()
            && trail.chars().all(|c| c == ' ')
            && body.chars().last().is_some_and(is_cjk)
            && next_body.chars().next().is_some_and(is_cjk)
            && pieces.get(i + 1).is_some_and(|p| p.0.is_empty());
        if !drop_space {
            out.push_str(trail);
        }
    }
    out
}

pub use crate::lang::is_cjk;

/// The first unit to translate of a one-chapter book `md` (for tests).
#[cfg(test)]
pub(crate) fn first_translate_unit(md: &str) -> Unit {
    let ch = Chapter {
        rel_path: "c.md".into(),
        text: md.to_string(),
    };
    segment_chapter(&ch, 10_000, &super::types::EstimateTokens)
        .expect("a chapter")
        .into_iter()
        .find(|u| u.kind == UnitKind::Translate)
        .expect("a unit to translate")
}

/// Segment `text` (a chapter `ch1.md`) under `budget`, and check that the units, restored
/// from their own protected form and reassembled, give `text` back byte for byte (for tests).
#[cfg(test)]
pub(super) fn roundtrip(text: &str, budget: usize) -> Vec<Unit> {
    let chapter = Chapter {
        rel_path: std::path::PathBuf::from("ch1.md"),
        text: text.to_string(),
    };
    let units = segment_chapter(&chapter, budget, &super::types::EstimateTokens).unwrap();
    let restored: Vec<String> = units
        .iter()
        .map(|u| super::placeholders::restore_placeholders(u, &u.protected).unwrap())
        .collect();
    assert_eq!(reassemble(&units, &restored), text);
    let joined: String = units.iter().map(|u| u.source.as_str()).collect();
    assert_eq!(joined, text);
    units
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simple_roundtrip() {
        let units = roundtrip("# T\n\nHello `x` world.\n\n```\ncode\n```\n", 100);
        assert_eq!(units.len(), 2);
        assert_eq!(units[0].protected, "# T\n\nHello {{1}} world.");
        assert_eq!(units[1].kind, UnitKind::Verbatim);
    }
}
