//! The original of a term at its first introduction. Chinese technical books give the
//! English original in parentheses the first time a chapter introduces a term, and the
//! terms a chapter introduces are the ones it sets in bold: `**实体消歧**（Entity
//! Disambiguation）`. Once every unit is translated, the first bold span of each chapter
//! that names a term (a few title-case words, not a label followed by a colon, not already
//! glossed in the source) gets its original written after the translation's paired bold
//! span — where that span is wholly translated and the line does not already spell the
//! term. Deterministic: the model is not asked.

use super::bold::bold_spans;
use super::line_pairs::{line_pairs, set_lines};
use crate::checks::lang::{expected_script, script_of, Script};
use crate::lang::punct::{FULLWIDTH_COLON, FULLWIDTH_LEFT_PAREN, FULLWIDTH_RIGHT_PAREN};
use crate::units::Unit;
use std::collections::{BTreeMap, BTreeSet};

/// Words that may stand in lower case inside a title-case term.
const SMALL_WORDS: &[&str] = &[
    "a", "an", "and", "as", "at", "by", "for", "in", "of", "on", "or", "the", "to", "via", "vs",
    "with",
];

/// Whether a bold span's text names a term: one to five words of ASCII letters and
/// hyphens, the first capitalised and the others capitalised or small words, not opening
/// with an article and not a lone acronym (`RAG` stays as written; it needs no original).
fn names_term(inner: &str) -> bool {
    let words: Vec<&str> = inner.split(' ').collect();
    let shaped = |w: &str| {
        !w.is_empty()
            && w.chars().all(|c| c.is_ascii_alphabetic() || c == '-')
            && w.starts_with(|c: char| c.is_ascii_alphabetic())
            && !w.ends_with('-')
    };
    let capital = |w: &str| w.starts_with(|c: char| c.is_ascii_uppercase());
    let acronym = words.len() == 1
        && inner.chars().filter(|c| c.is_ascii_uppercase()).count() > 1
        && !inner.contains('-');
    (1..=5).contains(&words.len())
        && words.iter().all(|w| shaped(w))
        && capital(words[0])
        && words[1..]
            .iter()
            .all(|w| capital(w) || SMALL_WORDS.contains(w))
        && !matches!(words[0], "A" | "An" | "The")
        && !acronym
}

/// Whether the source text right after a bold span makes it a label (`**Fact Review**:`)
/// or glosses it already (`**Vision Transformer** (ViT)`).
fn labelled_or_glossed(after: &str) -> bool {
    let rest = after.trim_start_matches(['"', '\'', '”', '’', ' ']);
    rest.starts_with([':', FULLWIDTH_COLON, '(', FULLWIDTH_LEFT_PAREN])
}

/// Whether a translation's words are wholly translated: letters of the target's `script`,
/// no Latin letter.
fn translated(words: &str, script: Script) -> bool {
    let scripts: Vec<Script> = words.chars().filter_map(script_of).collect();
    scripts.contains(&script) && !scripts.contains(&Script::Latin)
}

/// `text` (the translation of `source`, one line, in `script`) with the original written
/// after each bold span of the source that introduces a term not yet `seen` in the chapter,
/// and how many originals it got; `None` where nothing changes. Spans pair by position, so
/// a line whose translation has another number of bold spans is left alone.
fn gloss_line(
    source: &str,
    text: &str,
    script: Script,
    seen: &mut BTreeSet<String>,
) -> Option<(String, usize)> {
    let (sb, tb) = (bold_spans(source), bold_spans(text));
    let lower = text.to_lowercase();
    let mut inserts: Vec<(usize, String)> = Vec::new();
    for (i, s) in sb.iter().enumerate() {
        let term = s.inner.trim();
        if !names_term(term) || labelled_or_glossed(&source[s.range.end..]) {
            continue;
        }
        // The first bold occurrence in the chapter is the introduction, glossed or not.
        if !seen.insert(term.to_lowercase()) {
            continue;
        }
        let Some(t) = tb.get(i).filter(|_| sb.len() == tb.len()) else {
            continue;
        };
        let already = lower.contains(&term.to_lowercase())
            || text[t.range.end..].starts_with(['(', FULLWIDTH_LEFT_PAREN]);
        if translated(&t.inner, script) && !already {
            inserts.push((
                t.range.end,
                format!("{FULLWIDTH_LEFT_PAREN}{term}{FULLWIDTH_RIGHT_PAREN}"),
            ));
        }
    }
    if inserts.is_empty() {
        return None;
    }
    let n = inserts.len();
    let mut out = text.to_string();
    for (at, gloss) in inserts.into_iter().rev() {
        out.insert_str(at, &gloss);
    }
    // The bold spans must render as before.
    (bold_spans(&out).len() == tb.len()).then_some((out, n))
}

/// Write the originals of the terms each chapter introduces in bold into `texts` (each
/// unit's translation, `None` where not translated) of the book's `units`, for a target
/// written in another script than the source. Returns how many were written.
pub(super) fn write_back(
    units: &[Vec<Unit>],
    texts: &mut [Vec<Option<String>>],
    target_lang: &str,
) -> usize {
    if !crate::lang::profile_or_latin(target_lang).is_cjk() {
        return 0;
    }
    let script = expected_script(target_lang);
    let mut seen: BTreeMap<usize, BTreeSet<String>> = BTreeMap::new();
    let mut changed: BTreeMap<(usize, usize), Vec<(usize, String)>> = BTreeMap::new();
    let mut written = 0;
    for p in line_pairs(units, texts) {
        let seen = seen.entry(p.unit.0).or_default();
        if let Some((line, n)) = gloss_line(&p.source, &p.text, script, seen) {
            written += n;
            changed.entry(p.unit).or_default().push((p.line, line));
        }
    }
    set_lines(texts, changed);
    written
}

#[cfg(test)]
mod tests {
    use super::super::line_pairs::test_units as chapter;
    use super::*;

    #[test]
    fn each_chapter_glosses_its_own_first_introduction() {
        let src = "**Late Chunking** splits late.\nThen **Late Chunking** again.\n";
        let zh = "**延迟分块**分得晚。\n然后又是**延迟分块**。\n";
        let units = vec![chapter(src), chapter(src)];
        let fresh = || vec![vec![Some(zh.to_string())], vec![Some(zh.to_string())]];
        let mut texts = fresh();
        assert_eq!(write_back(&units, &mut texts, "zh-CN"), 2);
        let want = "**延迟分块**（Late Chunking）分得晚。\n然后又是**延迟分块**。\n";
        assert_eq!(texts[0][0].as_deref(), Some(want));
        assert_eq!(texts[1][0].as_deref(), Some(want));
        // A target in the source's script gets nothing.
        let mut texts = fresh();
        assert_eq!(write_back(&units, &mut texts, "fr"), 0);
        assert_eq!(texts, fresh());
    }

    #[test]
    fn terms_are_a_few_title_case_words() {
        for t in [
            "Entity Disambiguation",
            "Extract to Text",
            "Non-Agentic",
            "System Prompt Learning",
        ] {
            assert!(names_term(t), "{t}");
        }
        for t in [
            "RAG",
            "The Two-Tier Memory Architecture",
            "retrieval is not enough",
            "Step 1",
            "Why RAG Fails on Tables and What to Do",
            "",
            "Fact Review:",
        ] {
            assert!(!names_term(t), "{t}");
        }
    }

    #[test]
    fn the_first_introduction_gets_its_original() {
        let mut seen = BTreeSet::new();
        let src = "We call it **Entity Disambiguation**, and it matters.";
        let got = gloss_line(
            src,
            "我们称之为**实体消歧**，它很重要。",
            Script::Han,
            &mut seen,
        )
        .unwrap()
        .0;
        assert_eq!(
            got,
            "我们称之为**实体消歧**（Entity Disambiguation），它很重要。"
        );
        assert_eq!(bold_spans(&got).len(), 1);
        // Only once a chapter.
        assert!(gloss_line(
            src,
            "我们称之为**实体消歧**，它很重要。",
            Script::Han,
            &mut seen
        )
        .is_none());
    }

    #[test]
    fn labels_glossed_kept_unpaired_and_spelled_spans_are_left_alone() {
        let mut seen = BTreeSet::new();
        let mut none =
            |s: &str, t: &str| assert!(gloss_line(s, t, Script::Han, &mut seen).is_none(), "{s}");
        none("**Fact Review**: check it.", "**事实审查**：检查。");
        none(
            "A **Vision Transformer** (ViT) sees.",
            "**视觉变换器**（ViT）看。",
        );
        none("Use **Agentic Search** here.", "这里用**Agentic Search**。");
        none(
            "**Late Chunking** and **Early Exit**.",
            "**延迟分块**与提前退出。",
        );
        none(
            "Use **Query Rewriting** now.",
            "现在用**查询改写**（Query Rewriting）。",
        );
        none(
            "Use **Query Expansion** now.",
            "现在用**查询扩展**（即 query expansion）。",
        );
    }
}
