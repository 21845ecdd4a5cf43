//! Bold spans the model dropped, found in the translation and written back. A small model
//! often translates `**structured indexing**` inside a sentence as plain `结构化索引`: the
//! words are there, the emphasis is gone. Once every unit is translated, each line with
//! fewer bold spans than its source line gets them back: for every bold span of the source,
//! the words of the translation that render it are found — the span as written (a name the
//! translation keeps), the glossary's target for it, the rendering the same bold words got
//! where the book kept their emphasis, or, failing those, the model asked which words of
//! the line translate the phrase (its reply held at decode time to a piece of the line) —
//! and wrapped in `**` where they stand outside any emphasis, code or link, nearest the
//! span's place in the source line. A wrap is kept only if the line then renders one more
//! bold span. The model's answers are stored in the translation memory, so a rerun asks
//! nothing again.

pub use super::bold::{bold_spans, Bold};
use super::line_pairs::{line_pairs, set_lines, LinePair};
use super::state::RunState;
use crate::engine::backend::{ChatBackend, ChatRequest};
use crate::engine::constraint::Constraint;
use crate::engine::generate::GenerationParams;
use crate::glossary::Glossary;
use crate::prompts::agents::{emphasis_prompt, AgentPrompt, PieceOf};
use crate::units::Unit;
use crate::util::{sha256_hex, write_atomic};
use anyhow::Result;
use pulldown_cmark::{Event, Options, Parser, Tag};
use std::collections::BTreeMap;
use std::ops::Range;

/// Token allowance of one question (a phrase's rendering).
const ASK_TOKENS: usize = 32;

/// What the stage did.
#[derive(Debug, Default, Clone, PartialEq)]
pub(super) struct Restored {
    /// Lines whose translation had fewer bold spans than their source.
    pub lines: usize,
    /// Bold spans written back.
    pub spans: usize,
    /// Questions put to the model (answers read back from the memory not counted).
    pub asked: usize,
}

/// Byte ranges of `line` where no emphasis may be added: bold spans, code, links, images
/// and inline HTML.
fn fenced_off(line: &str) -> Vec<Range<usize>> {
    Parser::new_ext(line, Options::all())
        .into_offset_iter()
        .filter_map(|(e, r)| match e {
            Event::Start(Tag::Strong | Tag::Link { .. } | Tag::Image { .. })
            | Event::Code(_)
            | Event::InlineHtml(_)
            | Event::Html(_)
            | Event::FootnoteReference(_) => Some(r),
            _ => None,
        })
        .collect()
}

/// `line` with `words` wrapped in `**` at the free occurrence nearest `near` (0–1: where
/// the span stands in the source line), or `None` when `words` has no free occurrence or
/// the wrapped line would not render one more bold span.
pub fn wrap(line: &str, words: &str, near: f64) -> Option<String> {
    let words = words.trim();
    if words.is_empty() || words.contains(['*', '`', '\n']) {
        return None;
    }
    let taken = fenced_off(line);
    let free = |r: &Range<usize>| !taken.iter().any(|t| t.start < r.end && r.start < t.end);
    let target = near * line.len() as f64;
    let at = line
        .match_indices(words)
        .map(|(i, _)| i..i + words.len())
        .filter(free)
        .min_by(|a, b| {
            let d = |r: &Range<usize>| ((r.start + r.end) as f64 / 2.0 - target).abs();
            d(a).total_cmp(&d(b))
        })?;
    let wrapped = format!(
        "{}**{}**{}",
        &line[..at.start],
        &line[at.clone()],
        &line[at.end..]
    );
    let spans = bold_spans(&wrapped);
    let added = spans.len() == bold_spans(line).len() + 1
        && spans.iter().any(|b| b.range == (at.start..at.end + 4));
    added.then_some(wrapped)
}

/// Whether `words` is already emphasised in `line`.
fn emphasised(line: &str, words: &str) -> bool {
    let words = words.trim();
    !words.is_empty() && bold_spans(line).iter().any(|b| b.inner.contains(words))
}

/// Whether `reply` can be the rendering of `phrase` in a translation into `target_lang`:
/// not much longer than the phrase and, for a non-Latin target, written in it (or the
/// phrase itself, kept).
fn plausible(phrase: &str, reply: &str, target_lang: &str) -> bool {
    let reply = reply.trim();
    let n = reply.chars().count();
    let script = !crate::lang::profile_or_latin(target_lang).is_cjk()
        || reply.chars().any(|c| c.is_alphabetic() && !c.is_ascii())
        || reply.eq_ignore_ascii_case(phrase.trim());
    n > 0 && n <= 2 * phrase.chars().count() + 4 && script
}

/// The renderings the book itself gives: the glossary's targets and, from lines whose bold
/// spans all survived, each bold phrase's bold rendering (keyed by the phrase in lower case).
fn known_renderings(
    pairs: &[(String, String)],
    glossary: &Glossary,
) -> BTreeMap<String, Vec<String>> {
    let mut known: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for e in &glossary.entries {
        known
            .entry(e.source.to_lowercase())
            .or_default()
            .extend(e.target.iter().cloned());
    }
    for (s, t) in pairs {
        let (sb, tb) = (bold_spans(s), bold_spans(t));
        if sb.len() == tb.len() {
            for (a, b) in sb.iter().zip(&tb) {
                let v = known.entry(a.inner.to_lowercase()).or_default();
                if !v.contains(&b.inner) {
                    v.push(b.inner.clone());
                }
            }
        }
    }
    known
}

/// Write back the dropped bold spans in `texts` (each unit's restored translation, `None`
/// where not translated) of the book's `units`. Only units whose translation has as many
/// lines as their source take part.
pub(super) fn write_back(
    m: &mut RunState,
    backend: &mut dyn ChatBackend,
    units: &[Vec<Unit>],
    texts: &mut [Vec<Option<String>>],
    glossary: &Glossary,
) -> Result<Restored> {
    // Every line pair of the units that take part; those that lost emphasis.
    let all = line_pairs(units, texts);
    let pairs: Vec<(String, String)> = all
        .iter()
        .map(|p| (p.source.clone(), p.text.clone()))
        .collect();
    let short: Vec<LinePair> = all
        .into_iter()
        .filter(|p| bold_spans(&p.text).len() < bold_spans(&p.source).len())
        .collect();
    let mut done = Restored {
        lines: short.len(),
        ..Restored::default()
    };
    if short.is_empty() {
        return Ok(done);
    }
    let known = known_renderings(&pairs, glossary);

    // The spans the book gives no rendering for in their line: the model is asked.
    let mut asks: Vec<(usize, String)> = Vec::new();
    for (li, l) in short.iter().enumerate() {
        for b in bold_spans(&l.source) {
            if candidates(&b.inner, &known).all(|c| !l.text.contains(c.as_str())) {
                asks.push((li, b.inner.clone()));
            }
        }
    }
    let answers = ask(m, backend, &short, &asks, &mut done)?;

    // Write back, span by span, in source order, until the line has as many as its source.
    let mut changed: BTreeMap<(usize, usize), Vec<(usize, String)>> = BTreeMap::new();
    for (li, l) in short.iter().enumerate() {
        let spans = bold_spans(&l.source);
        let mut text = l.text.clone();
        for b in &spans {
            if bold_spans(&text).len() >= spans.len() {
                break;
            }
            let near = (b.range.start + b.range.end) as f64 / 2.0 / l.source.len() as f64;
            let asked = answers.get(&(li, b.inner.clone())).cloned();
            let options: Vec<String> = candidates(&b.inner, &known).chain(asked).collect();
            // Present already (emphasised under one of its renderings): nothing to do.
            if options.iter().any(|c| emphasised(&text, c)) {
                continue;
            }
            if let Some(w) = options.iter().find_map(|c| wrap(&text, c, near)) {
                text = w;
                done.spans += 1;
            }
        }
        if text != l.text {
            changed.entry(l.unit).or_default().push((l.line, text));
        }
    }
    set_lines(texts, changed);
    Ok(done)
}

/// The renderings of a bold phrase the book gives: the phrase as written, then the known
/// ones.
fn candidates<'a>(
    inner: &'a str,
    known: &'a BTreeMap<String, Vec<String>>,
) -> impl Iterator<Item = String> + 'a {
    std::iter::once(inner.to_string()).chain(
        known
            .get(&inner.to_lowercase())
            .into_iter()
            .flatten()
            .cloned(),
    )
}

/// Ask the model for the rendering of each `(line, phrase)` in `asks` (one batch; answers
/// stored in, and read back from, the translation memory). Returns the plausible answers.
fn ask(
    m: &mut RunState,
    backend: &mut dyn ChatBackend,
    lines: &[LinePair],
    asks: &[(usize, String)],
    done: &mut Restored,
) -> Result<BTreeMap<(usize, String), String>> {
    let (from, to) = (m.opts.source_lang.clone(), m.opts.target_lang.clone());
    let mut answers = BTreeMap::new();
    // (line, phrase, memory key, request) of each question still to ask.
    let mut pending: Vec<(usize, &str, String, ChatRequest)> = Vec::new();
    for (li, phrase) in asks {
        let l = &lines[*li];
        let p = emphasis_prompt(&from, &to, &l.source, &l.text, phrase)?;
        let key = format!(
            "emphasis-{}",
            sha256_hex(
                format!("{}{}", m.inputs_key(), serde_json::to_string(&p.messages)?).as_bytes()
            )
        );
        match read_answer(&m.memory_path(&key)) {
            Some(a) => {
                if let Some(a) = accept(phrase, &l.text, &a, &to) {
                    answers.insert((*li, phrase.clone()), a);
                }
            }
            None => {
                // Every question still to ask reserves its whole token allowance; where
                // the budget is spent, the spans stay as the model wrote them.
                if m.over_budget(ASK_TOKENS * (pending.len() + 1)).is_some() {
                    break;
                }
                pending.push((*li, phrase, key, question(p, &l.text)));
            }
        }
    }
    let reqs: Vec<ChatRequest> = pending.iter().map(|p| p.3.clone()).collect();
    let replies = backend.complete_batch(&reqs)?;
    for ((li, phrase, key, _), reply) in pending.into_iter().zip(&replies) {
        let a = reply.text.trim().to_string();
        let ok = accept(phrase, &lines[li].text, &a, &to).is_some();
        m.record_call(
            "emphasis",
            &format!(
                "{}: {phrase}",
                lines[li].source.chars().take(40).collect::<String>()
            ),
            reply,
            if ok { "ok" } else { "rejected" },
        );
        let stored = serde_json::json!({ "phrase": phrase, "answer": a });
        write_atomic(&m.memory_path(&key), stored.to_string().as_bytes())?;
        done.asked += 1;
        if ok {
            answers.insert((li, phrase.to_string()), a);
        }
    }
    Ok(answers)
}

/// The question for `prompt` ([`emphasis_prompt`]) about `line`: its reply is held at
/// decode time to a piece of the line.
pub fn question(prompt: AgentPrompt, line: &str) -> ChatRequest {
    ChatRequest {
        messages: prompt.messages,
        split: prompt.split,
        params: GenerationParams {
            max_new_tokens: ASK_TOKENS,
            constraint: Some(Constraint::new(PieceOf {
                text: line.to_string(),
            })),
            ..Default::default()
        },
    }
}

/// The model's `reply` as the rendering of `phrase` in `line` (a translation into
/// `target_lang`), or `None` where it is not a piece of the line or not plausible.
pub fn accept(phrase: &str, line: &str, reply: &str, target_lang: &str) -> Option<String> {
    let a = reply.trim();
    (line.contains(a) && plausible(phrase, a, target_lang)).then(|| a.to_string())
}

/// A stored answer; `None` when there is none or the file is not one.
fn read_answer(path: &std::path::Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    v.get("answer")?.as_str().map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::constraint::TextConstraint;

    #[test]
    fn bold_spans_are_found_outside_code() {
        let spans = bold_spans("A **bold** word, `**not**` and __this__.");
        let inner: Vec<&str> = spans.iter().map(|b| b.inner.as_str()).collect();
        assert_eq!(inner, ["bold", "this"]);
        assert_eq!(spans[0].range, 2..10);
        assert!(bold_spans("> **引用**里的强调").len() == 1);
    }

    #[test]
    fn words_are_wrapped_where_they_stand_free_nearest_the_sources_place() {
        let line = "结构化索引很重要：我们先讲结构化索引，再讲文件系统范式。";
        // Near the end of the source line: the second occurrence.
        assert_eq!(
            wrap(line, "结构化索引", 0.6).unwrap(),
            "结构化索引很重要：我们先讲**结构化索引**，再讲文件系统范式。"
        );
        assert_eq!(
            wrap(line, "结构化索引", 0.0).unwrap(),
            "**结构化索引**很重要：我们先讲结构化索引，再讲文件系统范式。"
        );
        // Never inside emphasis, code or a link, and never words that are not there.
        assert!(wrap("**结构化索引**已强调", "索引", 0.5).is_none());
        assert!(wrap("见 `结构化索引` 与 [索引](a.md)", "索引", 0.5).is_none());
        assert!(wrap("没有这个词", "索引", 0.5).is_none());
        assert!(wrap("a * b", "*", 0.5).is_none());
    }

    #[test]
    fn a_wrap_that_would_not_render_as_bold_is_not_made() {
        // `**` before a full-width quote after a CJK character is not a left-flanking run:
        // CommonMark would show the asterisks, so the line is left alone.
        assert!(wrap("这是“引号”中的词", "“引号”", 0.5).is_none());
        assert_eq!(
            wrap("这是“引号”中的词", "引号", 0.5).unwrap(),
            "这是“**引号**”中的词"
        );
    }

    #[test]
    fn only_short_renderings_in_the_target_script_are_taken() {
        assert!(plausible("structured indexing", "结构化索引", "zh-CN"));
        assert!(plausible("Agentic RAG", "Agentic RAG", "zh-CN"));
        assert!(!plausible("governance", "governance rules", "zh-CN"));
        assert!(!plausible(
            "hit rate",
            "这是一个非常长的回答，远远超过了短语应有的长度而且还在继续",
            "zh-CN"
        ));
        assert!(plausible("hit rate", "taux de succès", "fr"));
        assert!(!plausible("x", "", "fr"));
    }

    #[test]
    fn the_answer_is_held_to_a_piece_of_the_line() {
        let c = PieceOf {
            text: "我们先讲结构化索引。".into(),
        };
        assert!(c.allows(b"", "结构".as_bytes()));
        assert!(c.allows("结构".as_bytes(), "化索引".as_bytes()));
        assert!(!c.allows("结构".as_bytes(), "文件".as_bytes()));
        assert!(!c.allows(b"", b" "));
        assert!(!c.allows(b"", b"**"));
        // A token may end inside a character; the reply may end only on whole ones.
        let bytes = "结构化".as_bytes();
        assert!(c.allows(b"", &bytes[..4]));
        assert!(!c.allows_end(&bytes[..4]));
        assert!(c.allows_end(bytes));
        assert!(!c.allows_end(b""));
    }

    #[test]
    fn known_renderings_come_from_the_glossary_and_lines_that_kept_their_bold() {
        let glossary = Glossary::parse_json(
            r#"[{"en": "filesystem paradigm", "zh": "文件系统范式"}]"#,
            "en",
            "zh-CN",
        )
        .unwrap();
        let pairs = vec![
            (
                "Two **structured indexing** methods.".to_string(),
                "两种**结构化索引**方法。".to_string(),
            ),
            ("**A** and **B**".to_string(), "**甲**".to_string()),
        ];
        let known = known_renderings(&pairs, &glossary);
        assert_eq!(known["structured indexing"], ["结构化索引"]);
        assert_eq!(known["filesystem paradigm"], ["文件系统范式"]);
        // A line that lost a span pairs nothing: its order is unknown.
        assert!(!known.contains_key("a"));
    }
}
