//! One unit's way through the model: its structure kept out of the model's text
//! ([`Skeleton`]), a decode-time constraint on what the model may write
//! ([`PassageConstraint`]), the reply checked and put back together — and, when a unit
//! still fails its checks after revision, the fallback cascade: each segment (paragraph,
//! list item, table cell) translated on its own, then each sentence of a failing segment,
//! then each clause of a failing sentence, and as the last resort the one sentence kept in
//! the source language and flagged. A
//! unit therefore always ends with its structure intact.

pub use super::typography::typeset;
use crate::checks::{check_unit, Category, CheckContext, Finding, Severity};
use crate::engine::backend::{ChatBackend, ChatRequest, Completion};
use crate::engine::constraint::Constraint;
use crate::engine::generate::{FinishReason, GenerationParams};
use crate::glossary::GlossaryEntry;
use crate::lang::punct::{FULLWIDTH_LEFT_PAREN, FULLWIDTH_RIGHT_PAREN, SENTENCE_ENDS};
use crate::lang::Profile;
use crate::units::constraint::PassageConstraint;
use crate::units::skeleton::{Segment, Skeleton};
use crate::units::verbatim;
use crate::units::{TokenCount as _, Unit, PLACEHOLDER_RE};
use anyhow::Result;
use std::ops::Range;

/// Builds the translation request for a passage (the model's text) and its token allowance.
/// Builds the request that translates one passage, with the findings of an earlier
/// attempt to fix (empty for a first attempt), and its token allowance.
pub type RequestFor<'a> = dyn Fn(&str, &[String], usize) -> Result<ChatRequest> + 'a;

/// Generation parameters for translating `passage` into `target_lang`: `base` with the
/// passage's constraint (for a target in a non-Latin script, Latin words only where the
/// passage has names, or where the translation of one of `terms`, the glossary's terms of
/// the passage, has them).
pub fn constrained(
    base: &GenerationParams,
    passage: &str,
    target_lang: &str,
    terms: &[GlossaryEntry],
    max_new_tokens: usize,
) -> GenerationParams {
    constrained_shown(
        base,
        passage,
        ("", target_lang),
        terms,
        &[],
        Vec::new(),
        max_new_tokens,
    )
}

/// [`constrained`] for a model that sees `shown` (inline code of `passage`) as written
/// rather than as placeholders ([`verbatim`]), with the book's `names` that `passage` has
/// kept English wherever they stand ([`crate::units::constraint::capitalised_names`]).
pub fn constrained_shown(
    base: &GenerationParams,
    passage: &str,
    (source_lang, target_lang): (&str, &str),
    terms: &[GlossaryEntry],
    names: &[String],
    shown: Vec<verbatim::Span>,
    max_new_tokens: usize,
) -> GenerationParams {
    let mut c = PassageConstraint::new(passage);
    if crate::lang::profile_or_latin(source_lang).is_cjk() {
        c = c.any_numbers();
    }
    if crate::lang::profile_or_latin(target_lang).is_cjk() {
        c = c
            .latin_names_only(passage)
            .with_names(terms.iter().map(GlossaryEntry::preferred))
            .with_capitalised(names);
    }
    let constraint = if shown.is_empty() {
        Constraint::new(c)
    } else {
        Constraint::new(verbatim::ShownSpans::new(c, shown))
    };
    GenerationParams {
        max_new_tokens,
        constraint: Some(constraint),
        ..base.clone()
    }
}

/// The most tokens one reply may have.
pub const MAX_NEW_TOKENS: usize = 1536;

/// The largest unit (estimated tokens) whose translation allowance fits [`MAX_NEW_TOKENS`].
pub const MAX_UNIT_TOKENS: usize = (MAX_NEW_TOKENS - 48) / 3;

/// Token allowance for translating `text` (a Chinese translation of English prose takes
/// fewer tokens than its source; 3× leaves room for any target language).
pub fn max_new_tokens(text: &str) -> usize {
    let est = crate::units::EstimateTokens.count_tokens(text);
    (est * 3 + 48).clamp(64, MAX_NEW_TOKENS)
}

/// A model's reply for a whole unit, put back into the unit's structure and checked.
/// `Ok` holds the restored text and its findings; `Err` the findings of a reply that
/// cannot be restored (lines or placeholders wrong: the generation was cut short).
pub fn accept_unit(
    unit: &Unit,
    skeleton: &Skeleton,
    reply: &Completion,
    ctx: &CheckContext,
) -> std::result::Result<(String, Vec<Finding>), Vec<Finding>> {
    if let Some(why) = cut_short(reply) {
        return Err(vec![finding(
            unit,
            Category::LengthRatio,
            Severity::Error,
            why,
            "translate the whole passage",
        )]);
    }
    // The model saw the unit's inline code as written: back to its placeholders.
    let reply = verbatim::hide(&reply.text, &verbatim::spans(unit, &skeleton.model_text()));
    let reply = reply.as_str();
    // Lines are separated by blank lines; a single newline is tolerated the same way.
    let lines: Vec<&str> = reply
        .trim()
        .split('\n')
        .filter(|l| !l.trim().is_empty())
        .collect();
    if lines.len() != skeleton.segments.len() {
        return Err(vec![finding(
            unit,
            Category::Placeholder,
            Severity::Error,
            format!(
                "{} line(s) in the reply for {} segment(s)",
                lines.len(),
                skeleton.segments.len()
            ),
            "translate every line of the passage as one line",
        )]);
    }
    let off: Vec<Finding> = skeleton
        .segments
        .iter()
        .zip(&lines)
        .enumerate()
        .filter_map(|(i, (seg, line))| {
            let r = out_of_step(&seg.text, line, ctx)?;
            Some(finding(
                unit,
                Category::LengthRatio,
                Severity::Error,
                format!(
                    "line {} of the reply is {r:.2}× its source line's length: the lines are out of step",
                    i + 1
                ),
                "translate each line of the passage as its own line",
            ))
        })
        .collect();
    if !off.is_empty() {
        return Err(off);
    }
    let mut restored = Vec::with_capacity(lines.len());
    let mut bad = Vec::new();
    for (seg, line) in skeleton.segments.iter().zip(&lines) {
        match restore_segment(unit, seg, &typeset(ctx, &seg.text, line)) {
            Ok(t) => restored.push(t),
            Err(e) => bad.push(finding(
                unit,
                Category::Placeholder,
                Severity::Error,
                e,
                "copy every placeholder exactly once",
            )),
        }
    }
    if !bad.is_empty() {
        return Err(bad);
    }
    let text = skeleton.assemble(unit, &restored);
    let findings = check_unit(&unit.id, unit.source.trim(), text.trim(), ctx);
    Ok((text, findings))
}

/// Why a reply did not end by itself (its token allowance, the context, or the constraint
/// left it no token), if it did not: such a reply is cut short, whatever it holds.
pub fn cut_short(reply: &Completion) -> Option<String> {
    match reply.finish {
        FinishReason::Eos | FinishReason::Stop => None,
        other => Some(format!(
            "the reply was cut short ({other:?}) after {} tokens",
            reply.completion_tokens
        )),
    }
}

/// The length ratio of `translated` to `source` when it is far from what the two
/// languages make typical (under a third or over three times it), for a source line long
/// enough to tell: the sign of a reply whose lines are out of step with the passage's (a
/// line skipped, the next one's translation in its place) or that ran on. `None` when
/// the line is in step.
///
/// A short source line (a heading, a caption) is only checked for running on: a
/// translation over 40 visible characters and three times the typical length is a
/// paragraph in its place (a model that skipped a chapter's title line put the first
/// paragraph's translation there).
pub fn out_of_step(source: &str, translated: &str, ctx: &CheckContext) -> Option<f64> {
    use crate::checks::lang::{expected_script, typical_length_ratio, visible_len};
    let (sl, tl) = (visible_len(source), visible_len(translated));
    let typical = typical_length_ratio(
        expected_script(&ctx.source_lang),
        expected_script(&ctx.target_lang),
    );
    let r = tl as f64 / sl.max(1) as f64;
    if sl < 40 {
        return (tl > 40 && r > typical * 3.0).then_some(r);
    }
    (r < typical / 3.0 || r > typical * 3.0).then_some(r)
}

/// Put a segment's placeholders back into its translation: each of the segment's
/// placeholders exactly once, no other.
pub fn restore_segment(
    unit: &Unit,
    seg: &Segment,
    translated: &str,
) -> std::result::Result<String, String> {
    let mut seen = vec![0usize; seg.placeholders.len()];
    let mut out = String::with_capacity(translated.len() + 32);
    let mut last = 0;
    for c in PLACEHOLDER_RE.captures_iter(translated) {
        let m = c.get(0).expect("group 0");
        let idx = c[1].parse::<usize>().unwrap_or(0).wrapping_sub(1);
        let Some(k) = seg.placeholders.iter().position(|&p| p == idx) else {
            return Err(format!("invented placeholder {}", m.as_str()));
        };
        seen[k] += 1;
        out.push_str(&translated[last..m.start()]);
        out.push_str(&unit.placeholders[idx].original);
        last = m.end();
    }
    out.push_str(&translated[last..]);
    if let Some(k) = seen.iter().position(|&n| n != 1) {
        let token = &unit.placeholders[seg.placeholders[k]].token;
        return Err(format!("placeholder {token} appears {} times", seen[k]));
    }
    Ok(out.trim().to_string())
}

/// What the fallback cascade made of a unit.
pub struct Fallback {
    /// The unit's text, structure intact.
    pub text: String,
    /// Its findings (plus one warning per sentence kept in the source language).
    pub findings: Vec<Finding>,
    /// The model calls made, with the note and outcome to log.
    pub calls: Vec<(String, Completion, &'static str)>,
    /// Sentences kept in the source language.
    pub kept_source: usize,
    /// The model's text of the translation, one typeset line per segment with the
    /// placeholders unrestored, when every sentence was translated (none kept in the
    /// source language): what a chapter's opening gives as its worked example.
    pub model_lines: Option<Vec<String>>,
}

/// A piece's accepted translation: restored (placeholders back) and as the model wrote it
/// (typeset, placeholders as `{{n}}`).
#[derive(Clone)]
struct Piece {
    restored: String,
    model: String,
}

/// The fallback cascade for a unit whose whole-unit attempts failed: segments, then
/// sentences, then the source sentence as `keep_source` prepares it (house terms written
/// in, as for the model). `request` builds a call for one passage.
pub fn fallback(
    backend: &mut dyn ChatBackend,
    unit: &Unit,
    skeleton: &Skeleton,
    request: &RequestFor,
    keep_source: &dyn Fn(&str) -> String,
    ctx: &CheckContext,
) -> Result<Fallback> {
    let mut calls = Vec::new();
    let segs = &skeleton.segments;
    let texts: Vec<&str> = segs.iter().map(|s| s.text.as_str()).collect();
    // A unit of one segment was just asked with this very passage: straight to sentences.
    let first = if segs.len() == 1 {
        vec![Err(Vec::new())]
    } else {
        let fresh = vec![Vec::new(); texts.len()];
        translate_pieces(
            backend, unit, &texts, segs, &fresh, request, ctx, "segment", &mut calls,
        )?
    };
    let mut translated = Vec::with_capacity(segs.len());
    let mut model_lines = Vec::with_capacity(segs.len());
    let mut kept_source = 0;
    let mut notes = Vec::new();
    let profile = crate::lang::profile_or_latin(&ctx.target_lang);
    for (i, seg) in segs.iter().enumerate() {
        if let Ok(t) = &first[i] {
            translated.push(t.restored.clone());
            model_lines.push(t.model.clone());
            continue;
        }
        let sentences = split_sentences(&seg.text);
        let sub: Vec<Segment> = sentences.iter().map(|s| sub_segment(seg, s)).collect();
        let mut second = translate_retrying(
            backend, unit, &sentences, &sub, request, ctx, "sentence", &mut calls,
        )?;
        // A sentence that still fails is translated clause by clause (its dropped words are
        // often in one clause the model then keeps) before it is kept in the source language.
        for k in 0..sub.len() {
            if second[k].is_ok() {
                continue;
            }
            let clauses = split_clauses(&sentences[k]);
            if clauses.len() < 2 {
                continue;
            }
            let csub: Vec<Segment> = clauses.iter().map(|c| sub_segment(&sub[k], c)).collect();
            let pieces = translate_retrying(
                backend, unit, &clauses, &csub, request, ctx, "clause", &mut calls,
            )?;
            if let Ok(pieces) = pieces
                .into_iter()
                .collect::<std::result::Result<Vec<_>, _>>()
            {
                let ends: Vec<char> = clauses.iter().filter_map(|c| c.chars().last()).collect();
                let restored: Vec<String> = pieces
                    .iter()
                    .zip(&ends)
                    .map(|(p, &e)| clause_end(&p.restored, e, profile))
                    .collect();
                let model: Vec<String> = pieces
                    .iter()
                    .zip(&ends)
                    .map(|(p, &e)| clause_end(&p.model, e, profile))
                    .collect();
                second[k] = Ok(Piece {
                    restored: join_sentences(&restored, profile),
                    model: join_sentences(&model, profile),
                });
            }
        }
        let mut parts = Vec::with_capacity(sentences.len());
        let mut model_parts = Vec::with_capacity(sentences.len());
        for (k, s) in sub.iter().enumerate() {
            match &second[k] {
                Ok(t) => {
                    parts.push(t.restored.clone());
                    model_parts.push(t.model.clone());
                }
                Err(_) => {
                    let kept = keep_source(&s.text);
                    let own = restore_segment(unit, s, &kept).unwrap_or(kept);
                    notes.push(finding(
                        unit,
                        Category::Untranslated,
                        Severity::Warning,
                        own.clone(),
                        "kept in the source language: translate this sentence by hand",
                    ));
                    kept_source += 1;
                    parts.push(own);
                }
            }
        }
        translated.push(join_sentences(&parts, profile));
        model_lines.push(join_sentences(&model_parts, profile));
    }
    let text = skeleton.assemble(unit, &translated);
    let mut findings = check_unit(&unit.id, unit.source.trim(), text.trim(), ctx);
    if kept_source > 0 {
        // The sentences kept in the source language are the last resort, flagged below as
        // warnings; a unit that is only such a sentence is not blocked for being English.
        for f in findings
            .iter_mut()
            .filter(|f| f.category == Category::Untranslated)
        {
            f.severity = f.severity.max(Severity::Warning);
        }
    }
    findings.extend(notes);
    Ok(Fallback {
        text,
        findings,
        calls,
        model_lines: (kept_source == 0).then_some(model_lines),
        kept_source,
    })
}

/// [`translate_pieces`] for fresh pieces, then once more for each that failed with what
/// was wrong with it (a number the model dropped, a placeholder it lost): cheaper than a
/// person's time. Not after a reply that ran on to its allowance (no findings).
#[allow(clippy::too_many_arguments)]
fn translate_retrying(
    backend: &mut dyn ChatBackend,
    unit: &Unit,
    texts: &[String],
    segs: &[Segment],
    request: &RequestFor,
    ctx: &CheckContext,
    what: &str,
    calls: &mut Vec<(String, Completion, &'static str)>,
) -> Result<Vec<std::result::Result<Piece, Vec<String>>>> {
    let fresh = vec![Vec::new(); texts.len()];
    let mut out = translate_pieces(
        backend, unit, texts, segs, &fresh, request, ctx, what, calls,
    )?;
    let failed: Vec<usize> = (0..out.len())
        .filter(|&k| out[k].as_ref().is_err_and(|why| !why.is_empty()))
        .collect();
    if failed.is_empty() {
        return Ok(out);
    }
    let again: Vec<&str> = failed.iter().map(|&k| texts[k].as_str()).collect();
    let again_segs: Vec<Segment> = failed.iter().map(|&k| segs[k].clone()).collect();
    let why: Vec<Vec<String>> = failed
        .iter()
        .map(|&k| out[k].clone().err().unwrap_or_default())
        .collect();
    let retried = translate_pieces(
        backend,
        unit,
        &again,
        &again_segs,
        &why,
        request,
        ctx,
        &format!("{what} retry"),
        calls,
    )?;
    for (&k, r) in failed.iter().zip(retried) {
        out[k] = r;
    }
    Ok(out)
}

/// Translate independent pieces in one batch, each with the findings of its earlier attempt
/// (`findings[i]`, empty for a first one): `Ok` for each that restores and passes its
/// checks, `Err` with what was wrong otherwise.
#[allow(clippy::too_many_arguments)]
fn translate_pieces(
    backend: &mut dyn ChatBackend,
    unit: &Unit,
    texts: &[impl AsRef<str>],
    segs: &[Segment],
    findings: &[Vec<String>],
    request: &RequestFor,
    ctx: &CheckContext,
    what: &str,
    calls: &mut Vec<(String, Completion, &'static str)>,
) -> Result<Vec<std::result::Result<Piece, Vec<String>>>> {
    let reqs = texts
        .iter()
        .zip(findings)
        .map(|(t, f)| request(t.as_ref(), f, max_new_tokens(t.as_ref())))
        .collect::<Result<Vec<_>>>()?;
    let replies = backend.complete_batch(&reqs)?;
    let mut out = Vec::with_capacity(replies.len());
    for ((seg, reply), i) in segs.iter().zip(replies).zip(1..) {
        let verdict = judge_piece(unit, seg, &reply, ctx);
        calls.push((
            format!("{} {what} {i}", unit.id),
            reply,
            if verdict.is_ok() { "ok" } else { "fallback" },
        ));
        out.push(verdict);
    }
    Ok(out)
}

/// A piece's reply typeset and restored, or what is wrong with it: a piece is one line
/// with text (an empty reply or one of several lines is not its translation — a backend
/// without the decode-time constraint can give both), not cut short, in step with its
/// source, and without error findings.
fn judge_piece(
    unit: &Unit,
    seg: &Segment,
    reply: &Completion,
    ctx: &CheckContext,
) -> std::result::Result<Piece, Vec<String>> {
    let text = verbatim::hide(reply.text.trim(), &verbatim::spans(unit, &seg.text));
    let text = typeset(ctx, &seg.text, &text);
    let text = text.as_str();
    if text.is_empty() || text.contains('\n') {
        return Err(vec!["answer with exactly one line".to_string()]);
    }
    if cut_short(reply).is_some() {
        // A reply that ran on to its allowance: asking again costs as much, for little.
        return Err(Vec::new());
    }
    let restored = restore_segment(unit, seg, text).map_err(|e| vec![e])?;
    if crate::checks::hollow(&seg.text, text) {
        // A weak model answers a heading or a table cell with "-": no translation.
        return Err(vec![
            "translate the text; never replace it with a placeholder word or a dash".to_string(),
        ]);
    }
    if out_of_step(&seg.text, text, ctx).is_some() {
        return Err(vec![
            "the translation is far longer or shorter than the sentence".to_string(),
        ]);
    }
    let src = restore_segment(unit, seg, &seg.text).unwrap_or_default();
    let errors: Vec<String> = check_unit(&unit.id, &src, &restored, ctx)
        .iter()
        .filter(|f| f.severity == Severity::Error)
        .map(|f| format!("[{}] {} → {}", f.category, f.evidence, f.action))
        .collect();
    if errors.is_empty() {
        Ok(Piece {
            restored,
            model: text.to_string(),
        })
    } else {
        Err(errors)
    }
}

/// A piece of `seg` with the placeholders it holds.
fn sub_segment(seg: &Segment, text: &str) -> Segment {
    let placeholders = PLACEHOLDER_RE
        .captures_iter(text)
        .filter_map(|c| c[1].parse::<usize>().ok())
        .filter_map(|n| n.checked_sub(1))
        .filter(|i| seg.placeholders.contains(i))
        .collect();
    Segment {
        text: text.to_string(),
        placeholders,
    }
}

/// Sentences of a line of prose: cut after `.`, `!`, `?` (or their full-width forms)
/// followed by a space, never inside a placeholder, nor inside brackets or parentheses (a
/// link's text `[1.2. Pipes](url)` or an aside stays whole with its marks).
pub fn split_sentences(text: &str) -> Vec<String> {
    sentence_ranges(text)
        .into_iter()
        .map(|r| text[r].trim().to_string())
        .collect()
}

/// The byte ranges of [`split_sentences`]' sentences in `text` (untrimmed; at least one).
pub fn sentence_ranges(text: &str) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let (mut start, mut depth) = (0, 0usize);
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    for w in chars.windows(2) {
        let ((i, c), (j, next)) = (w[0], w[1]);
        match c {
            '[' | '(' => depth += 1,
            ']' | ')' => depth = depth.saturating_sub(1),
            _ => {}
        }
        let cjk_end = SENTENCE_ENDS.contains(&c);
        let end = matches!(c, '.' | '!' | '?') || cjk_end;
        let cut = depth == 0 && end && (next == ' ' || cjk_end);
        if cut && text[start..i + c.len_utf8()].trim().len() > 1 {
            out.push(start..j);
            start = j;
        }
    }
    if start < text.len() && !text[start..].trim().is_empty() {
        out.push(start..text.len());
    }
    if out.is_empty() {
        out.push(0..text.len());
    }
    out
}

/// Clauses of a sentence: cut after `,`, `;` or `:` followed by a space, and after a dash
/// (`—`), outside quotes, brackets and placeholders; a clause of fewer than four words
/// joins the next one. One clause when the sentence has no such cut.
pub fn split_clauses(sentence: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let (mut start, mut depth, mut quoted) = (0, 0i32, false);
    let chars: Vec<(usize, char)> = sentence.char_indices().collect();
    for (n, &(i, c)) in chars.iter().enumerate() {
        match c {
            '(' | '[' | '{' | '“' | FULLWIDTH_LEFT_PAREN => depth += 1,
            ')' | ']' | '}' | '”' | FULLWIDTH_RIGHT_PAREN => depth -= 1,
            '"' => quoted = !quoted,
            _ => {}
        }
        let next = chars.get(n + 1).map(|&(_, c)| c);
        let cut = depth <= 0
            && !quoted
            && ((matches!(c, ',' | ';' | ':') && next == Some(' ')) || c == '—');
        let end = i + c.len_utf8();
        if cut && sentence[start..end].split_whitespace().count() >= 4 {
            out.push(sentence[start..end].trim().to_string());
            start = end;
        }
    }
    let rest = sentence[start..].trim();
    match out.last_mut() {
        Some(last) if rest.split_whitespace().count() < 4 && !rest.is_empty() => {
            last.push(' ');
            last.push_str(rest);
        }
        _ if !rest.is_empty() => out.push(rest.to_string()),
        _ => {}
    }
    if out.is_empty() {
        out.push(sentence.trim().to_string());
    }
    out
}

/// A clause's translation ending as its source clause does: a translation of a clause
/// that ends in `,` `;` `:` or a dash ends in the target's mark for it (the profile's
/// [`Profile::clause_mark`]: `，` `；` `：` `——` in Chinese), not in a full stop.
fn clause_end(translation: &str, source_end: char, profile: &Profile) -> String {
    let Some(mark) = profile.clause_mark(source_end) else {
        return translation.to_string();
    };
    let ends: Vec<char> = profile
        .clause_marks
        .iter()
        .flat_map(|(c, m)| std::iter::once(*c).chain(m.chars()))
        .chain([profile.full_stop, '.'])
        .collect();
    let t = translation.trim_end();
    let body = t.trim_end_matches(ends.as_slice());
    format!("{body}{mark}")
}

/// Join translated sentences (or clauses): in a language that does not space its words,
/// no space between CJK ones nor after or before full-width punctuation (`。Agent`, as
/// Chinese is typeset); one space otherwise.
fn join_sentences(parts: &[String], profile: &Profile) -> String {
    let cjk = |c: char| crate::lang::is_cjk(c) || "—“”‘’".contains(c);
    let full_width_mark =
        |c: char| matches!(c as u32, 0x3000..=0x303F | 0xFF00..=0xFF0F | 0xFF1A..=0xFF20);
    let mut out = String::new();
    for p in parts {
        let (last, first) = (out.chars().last(), p.chars().next());
        let cjk_join = !profile.spaced_words
            && ((last.is_some_and(cjk) && first.is_some_and(cjk))
                || last.is_some_and(full_width_mark)
                || first.is_some_and(full_width_mark));
        if !out.is_empty() && !cjk_join {
            out.push(' ');
        }
        out.push_str(p.trim());
    }
    out
}

fn finding(
    unit: &Unit,
    category: Category,
    severity: Severity,
    evidence: String,
    action: &str,
) -> Finding {
    Finding {
        chapter: unit.chapter.display().to_string(),
        unit: Some(unit.id.clone()),
        line: None,
        source_line: None,
        category,
        severity,
        evidence,
        action: action.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentences_split_at_ends_not_inside_placeholders() {
        assert_eq!(
            split_sentences("Use {{1}} first. Then run it! Done?"),
            vec!["Use {{1}} first.", "Then run it!", "Done?"]
        );
        assert_eq!(split_sentences("v1.5 is out"), vec!["v1.5 is out"]);
        // A link's text and an aside keep their sentence ends inside their marks.
        assert_eq!(
            split_sentences("[1.2.8. Named pipes (FIFOs)](ch01.html#fifo)"),
            vec!["[1.2.8. Named pipes (FIFOs)](ch01.html#fifo)"]
        );
        assert_eq!(
            split_sentences("See [Dr. Lee's notes](x.html). Then (as in Fig. 2. above) stop. End."),
            vec![
                "See [Dr. Lee's notes](x.html).",
                "Then (as in Fig. 2. above) stop.",
                "End."
            ]
        );
        // A stray closing mark does not stop the cuts after it.
        assert_eq!(
            split_sentences("a) One. b) Two."),
            vec!["a) One.", "b) Two."]
        );
        // Full-width ends cut without a space; the ranges cover the line.
        let zh = "先缓存。再复用！A 句. 完";
        assert_eq!(
            split_sentences(zh),
            vec!["先缓存。", "再复用！", "A 句.", "完"]
        );
        let r = sentence_ranges(zh);
        assert_eq!((r[0].start, r[3].end), (0, zh.len()));
        let zh_cn = crate::lang::profile_or_latin("zh-CN");
        assert!(r.windows(2).all(|w| w[0].end == w[1].start));
        assert_eq!(
            join_sentences(&["第一。".into(), "第二。".into()], zh_cn),
            "第一。第二。"
        );
        assert_eq!(
            join_sentences(
                &[
                    "它们。".into(),
                    "Agent 通过它访问。".into(),
                    "It works.".into(),
                    "Done.".into()
                ],
                zh_cn
            ),
            "它们。Agent 通过它访问。It works. Done."
        );
    }

    fn reply(text: &str, finish: FinishReason) -> Completion {
        Completion {
            text: text.to_string(),
            prompt_tokens: 0,
            cached_tokens: 0,
            cache_source: "none",
            completion_tokens: 9,
            latency_seconds: 0.0,
            busy_seconds: 0.0,
            ttft_seconds: 0.0,
            finish,
            decode_seconds: 0.0,
            draft_proposed: 0,
            draft_accepted: 0,
        }
    }

    fn unit(md: &str) -> Unit {
        crate::units::first_translate_unit(md)
    }

    /// A translate request for a piece, as the scheduler builds one (without terms).
    fn request(text: &str, findings: &[String], max: usize) -> Result<ChatRequest> {
        let p = crate::prompts::agents::translate_prompt(
            crate::prompts::agents::DEFAULT_GUIDE,
            "en",
            "zh-CN",
            &[],
            &[],
            findings,
            text,
            None,
        )?;
        Ok(ChatRequest {
            messages: p.messages,
            split: p.split,
            params: constrained(&GenerationParams::default(), text, "zh-CN", &[], max),
        })
    }

    #[test]
    fn a_reply_out_of_step_with_the_passage_is_refused() {
        let ctx = CheckContext::new("en", "zh-CN");
        let md = "At its core, a user memory system is an active, continuous learning process aimed at building a concise, effective predictive model of the user. It uses additional compute to extract and compress the key information scattered through long conversation histories.\n\nLet's understand this process with a concrete example. Suppose a user and an Agent talk:\n";
        let u = unit(md);
        let sk = Skeleton::of(&u);
        assert_eq!(sk.segments.len(), 2);
        // The first line skipped, the second's translation in its place, a line invented.
        let skipped =
            "用户和 Agent 的对话如下：\n用户：你好，我叫 Bo，你是谁？Agent：我是一个大型语言模型。";
        let err = accept_unit(&u, &sk, &reply(skipped, FinishReason::Eos), &ctx).unwrap_err();
        assert!(err[0].evidence.contains("line 1"), "{err:?}");
        assert_eq!(err[0].category, Category::LengthRatio);
        let good = "用户记忆系统的本质是一个主动的、持续的学习过程，其目标是构建一个关于用户的简洁模型。\n用一个具体的例子来理解这个过程。假设用户和 Agent 有以下对话：";
        assert!(accept_unit(&u, &sk, &reply(good, FinishReason::Eos), &ctx).is_ok());
        // The same text cut off by the token allowance or the constraint is not accepted.
        for cut in [FinishReason::Length, FinishReason::Constraint] {
            let err = accept_unit(&u, &sk, &reply(good, cut), &ctx).unwrap_err();
            assert!(err[0].evidence.contains("cut short"), "{err:?}");
        }
        // Short lines are checked only for running on; a same-density pair has its own
        // typical ratio.
        assert_eq!(out_of_step("Summary", "总结", &ctx), None);
        assert!(
            out_of_step(
                "Chapter 1: What a Token Is",
                "词元是语言模型从固定词汇中提取的短文本片段。词元可以是整个单词，也可以是单词的片段，或者是一个空格。",
                &ctx
            )
            .is_some(),
            "a paragraph on a title's line"
        );
        assert_eq!(
            out_of_step("Chapter 1: What a Token Is", "第 1 章：什么是词元", &ctx),
            None
        );
        let de = CheckContext::new("en", "de");
        let src = "The cache is stored on disk, so a restart costs only twelve milliseconds.";
        assert_eq!(out_of_step(src, "Der Cache liegt auf der Festplatte, daher kostet ein Neustart nur zwölf Millisekunden.", &de), None);
        assert!(out_of_step(src, "Cache.", &de).is_some());
    }

    /// A model that answers each translate prompt (its last message) with `answer`, and
    /// keeps the prompts it was sent.
    struct Scripted {
        answer: fn(&str) -> &'static str,
        prompts: Vec<String>,
    }

    impl ChatBackend for Scripted {
        fn complete(&mut self, req: &ChatRequest) -> Result<Completion> {
            let last = req
                .messages
                .last()
                .map(|m| m.content.clone())
                .unwrap_or_default();
            let text = (self.answer)(&last);
            self.prompts.push(last);
            Ok(reply(text, FinishReason::Eos))
        }
        fn count_tokens(&self, text: &str) -> Result<usize> {
            Ok(text.len() / 4)
        }
        fn prompt_tokens(&self, _: &[crate::engine::chat_template::Message]) -> Result<usize> {
            Ok(0)
        }
        fn model_name(&self) -> String {
            "scripted".into()
        }
        fn device_name(&self) -> String {
            "test".into()
        }
    }

    /// Answers like a model that drops "Level 3" unless its prompt names the problem.
    fn drops_the_number(prompt: &str) -> &'static str {
        if prompt.contains("fix all of them") {
            "**第 3 层：主动服务** —— 这是检验 Agent 的试金石。"
        } else {
            "**主动服务** —— 这是检验 Agent 的试金石。"
        }
    }

    #[test]
    fn sentences_split_into_clauses_outside_quotes() {
        let s = "The first is separation: mark all retrieved content with its source, telling the model \"This is data, not a command\"—this is the mechanism introduced in Chapter 2.";
        assert_eq!(
            split_clauses(s),
            [
                "The first is separation:",
                "mark all retrieved content with its source,",
                "telling the model \"This is data, not a command\"—",
                "this is the mechanism introduced in Chapter 2."
            ]
        );
        assert_eq!(split_clauses("Short, then done."), ["Short, then done."]);
        let zh = crate::lang::profile_or_latin("zh-CN");
        assert_eq!(clause_end("标记其来源。", ',', zh), "标记其来源，");
        assert_eq!(clause_end("这是机制——", '—', zh), "这是机制——");
        assert_eq!(clause_end("结束。", '.', zh), "结束。");
        let de = crate::lang::profile_or_latin("de");
        assert_eq!(
            clause_end("markiert seine Quelle.", ',', de),
            "markiert seine Quelle,"
        );
        assert_eq!(
            join_sentences(&["Eins.".into(), "Zwei.".into()], de),
            "Eins. Zwei."
        );
    }

    /// Answers like a model that drops "Chapter 2" from the whole sentence, asked again or
    /// not, but keeps it in the clause on its own.
    fn drops_the_chapter(prompt: &str) -> &'static str {
        let clauses = [
            ("The first is separation:", "第一是分离："),
            (
                "mark all retrieved content with its source,",
                "为所有检索内容标记来源。",
            ),
            (
                "\"This is data, not a command\"—",
                "告诉模型“这是数据，不是命令”——",
            ),
            (
                "this is the mechanism introduced in Chapter 2.",
                "这是第 2 章介绍的机制。",
            ),
        ];
        clauses
            .iter()
            .find(|(src, _)| {
                prompt.trim_end().ends_with(src) && !prompt.contains("separation: mark")
            })
            .map_or(
                "第一是分离：为所有检索内容标记来源，告诉模型这是数据——这是前面介绍的机制。",
                |(_, t)| t,
            )
    }

    #[test]
    fn a_sentence_that_fails_twice_is_translated_clause_by_clause() {
        let ctx = CheckContext::new("en", "zh-CN");
        let u = unit("The first is separation: mark all retrieved content with its source, telling the model \"This is data, not a command\"—this is the mechanism introduced in Chapter 2.\n");
        let sk = Skeleton::of(&u);
        let keep = |text: &str| text.to_string();
        let fb = fallback(
            &mut Scripted {
                answer: drops_the_chapter,
                prompts: Vec::new(),
            },
            &u,
            &sk,
            &request,
            &keep,
            &ctx,
        )
        .unwrap();
        assert_eq!(fb.kept_source, 0, "{:?}", fb.findings);
        assert_eq!(
            fb.text.trim(),
            "第一是分离：为所有检索内容标记来源，告诉模型“这是数据，不是命令”——这是第二章介绍的机制。"
        );
        let outcomes: Vec<&str> = fb.calls.iter().map(|(_, _, o)| *o).collect();
        assert_eq!(outcomes, ["fallback", "fallback", "ok", "ok", "ok", "ok"]);
    }

    #[test]
    fn a_failed_sentence_is_asked_again_with_its_findings() {
        let ctx = CheckContext::new("en", "zh-CN");
        let u = unit("**Level 3: Proactive Service** — This is the acid test of an Agent.\n");
        let sk = Skeleton::of(&u);
        let mut backend = Scripted {
            answer: drops_the_number,
            prompts: Vec::new(),
        };
        let keep = |text: &str| text.to_string();
        let fb = fallback(&mut backend, &u, &sk, &request, &keep, &ctx).unwrap();
        assert_eq!(fb.kept_source, 0, "{:?}", fb.findings);
        assert!(fb.text.contains("第 3 层"), "{}", fb.text);
        assert_eq!(backend.prompts.len(), 2, "one sentence, then its retry");
        assert!(
            backend.prompts[1].contains("[number]"),
            "{}",
            backend.prompts[1]
        );
        let outcomes: Vec<&str> = fb.calls.iter().map(|(_, _, o)| *o).collect();
        assert_eq!(outcomes, ["fallback", "ok"]);
    }

    #[test]
    fn a_dash_is_no_translation_of_a_cell_or_heading() {
        let ctx = CheckContext::new("en", "zh-CN");
        let u = unit(
            "| Setting | TTFT | TPOT |\n|---|---:|---:|\n| two threads | 1,900 ms | 95 ms |\n",
        );
        let sk = Skeleton::of(&u);
        let keep = |text: &str| text.to_string();
        let fb = fallback(
            &mut Scripted {
                answer: |_| "-",
                prompts: Vec::new(),
            },
            &u,
            &sk,
            &request,
            &keep,
            &ctx,
        )
        .unwrap();
        assert!(
            fb.text.contains("| TTFT | TPOT |"),
            "cells answered with a dash are kept in the source language: {}",
            fb.text
        );
        assert!(
            !fb.findings
                .iter()
                .any(|f| f.category == Category::Table && f.severity == Severity::Error),
            "{:?}",
            fb.findings
        );
    }

    #[test]
    fn a_dash_or_none_is_a_hollow_translation() {
        use crate::checks::hollow;
        assert!(hollow("TTFT", "-"));
        assert!(hollow("Results", "—"));
        assert!(hollow("the model", "N/A"));
        assert!(!hollow("-", "-"));
        assert!(!hollow("ok", "-"), "fewer than three letters");
        assert!(!hollow("Results", "结果"));
    }
}
