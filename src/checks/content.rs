//! Content checks on aligned prose segments.

use super::align::Segment;
use super::lang::{self, Script, ScriptCounts};
use super::numbers::{same_value, source_numbers_with, target_values};
use super::{Category, CheckContext, Finding, Severity};
use crate::glossary::contains_term;
use crate::lang::zh::numerals::{HUNDRED_MILLION, TEN_THOUSAND, THOUSAND};
use regex::Regex;
use std::collections::{BTreeMap, HashMap};
use std::sync::LazyLock;

fn excerpt(s: &str, max: usize) -> String {
    let one: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if one.chars().count() <= max {
        one
    } else {
        let cut: String = one.chars().take(max).collect();
        format!("{cut}…")
    }
}

fn at(seg: &Segment, mut f: Finding) -> Finding {
    f.line = seg.tgt_line;
    f.source_line = seg.src_line;
    f.unit = seg.unit.clone();
    f
}

pub(crate) fn check(segments: &[Segment], ctx: &CheckContext, out: &mut Vec<Finding>) {
    let src_script = lang::expected_script(&ctx.source_lang);
    let tgt_script = lang::expected_script(&ctx.target_lang);
    let same_lang = lang::primary(&ctx.source_lang) == lang::primary(&ctx.target_lang);
    let glossary: Vec<(String, Vec<String>, bool, &str)> = ctx
        .glossary
        .entries
        .iter()
        .map(|e| {
            (
                e.source.to_lowercase(),
                e.target.iter().map(|t| t.to_lowercase()).collect(),
                e.house,
                e.source.as_str(),
            )
        })
        .collect();
    for seg in segments {
        numbers(seg, ctx, out);
        if !glossary.is_empty() {
            let sl = seg.src.to_lowercase();
            let tl = seg.tgt.to_lowercase();
            for (i, (src, tgts, house, shown)) in glossary.iter().enumerate() {
                if contains_term(&sl, src) && !tgts.iter().any(|t| contains_term(&tl, t)) {
                    let e = &ctx.glossary.entries[i];
                    out.push(at(
                        seg,
                        ctx.finding(
                            Category::Glossary,
                            if *house {
                                Severity::Error
                            } else {
                                Severity::Warning
                            },
                            None,
                            None,
                            format!(
                                "source has {:?}, translation lacks {}{}: {:?}",
                                shown,
                                e.target
                                    .iter()
                                    .map(|t| format!("{t:?}"))
                                    .collect::<Vec<_>>()
                                    .join(" or "),
                                if *house {
                                    " (house term)"
                                } else {
                                    " (inferred term)"
                                },
                                excerpt(&seg.tgt, 60)
                            ),
                            "Use the glossary's target term.",
                        ),
                    ));
                }
            }
        }
        if !same_lang {
            language(seg, ctx, src_script, tgt_script, out);
        }
        repetition(seg, ctx, out);
        markup(seg, ctx, out);
    }
    length_ratio(segments, ctx, src_script, tgt_script, same_lang, out);
    consistency(segments, ctx, src_script, tgt_script, out);
}

static NUM_TEXT_RE: LazyLock<Regex> = LazyLock::new(|| {
    let magnitudes = format!("KkMBT{TEN_THOUSAND}{HUNDRED_MILLION}{THOUSAND}");
    Regex::new(&format!(
        r"[0-9]+(?:[.,][0-9]+)*\s?(?:[{magnitudes}]|million|billion|thousand)?"
    ))
    .expect("valid regex")
});

fn numbers(seg: &Segment, ctx: &CheckContext, out: &mut Vec<Finding>) {
    // A target written in Latin letters writes a source's numerals as words or digits.
    let latin_target = crate::lang::profile(&ctx.target_lang).is_some_and(|p| !p.is_cjk());
    let src = source_numbers_with(&seg.src, !latin_target);
    if src.is_empty() {
        return;
    }
    let tv = target_values(&seg.tgt);
    let mut missing: Vec<String> = Vec::new();
    for n in &src {
        let quoted = format!("{} (\"{}\")", n.text, words_around(&seg.src, &n.text));
        if !tv.iter().any(|&v| same_value(v, n.value)) && !missing.contains(&quoted) {
            missing.push(quoted);
        }
    }
    if missing.is_empty() {
        return;
    }
    let tgt_nums: Vec<String> = NUM_TEXT_RE
        .find_iter(&seg.tgt)
        .map(|m| m.as_str().trim().to_string())
        .filter(|t| {
            !src.iter()
                .any(|n| target_values(t).iter().any(|&v| same_value(v, n.value)))
        })
        .take(6)
        .collect();
    let extra = if tgt_nums.is_empty() {
        String::new()
    } else {
        format!("; translation has {}", tgt_nums.join(", "))
    };
    let action =
        format!("Keep every number and its magnitude (128K = 12.8{TEN_THOUSAND}, not 12.8K).");
    out.push(at(
        seg,
        ctx.finding(
            Category::Number,
            if seg.fine {
                Severity::Error
            } else {
                Severity::Warning
            },
            None,
            None,
            format!(
                "number{} {} of the source not found in the {}{}",
                if missing.len() > 1 { "s" } else { "" },
                missing.join(", "),
                if seg.fine {
                    "aligned translation paragraph"
                } else {
                    "aligned translation section"
                },
                extra
            ),
            &action,
        ),
    ));
}

/// The words around the first `needle` of `text` that stands alone (not inside a longer
/// number), three either side: what a reviser needs to find where the number goes.
fn words_around<'a>(text: &'a str, needle: &'a str) -> &'a str {
    let digit = |c: Option<char>| c.is_some_and(|c| c.is_ascii_digit());
    let at = text.match_indices(needle).map(|(i, _)| i).find(|&i| {
        !digit(text[..i].chars().next_back()) && !digit(text[i + needle.len()..].chars().next())
    });
    let Some(i) = at else {
        return needle;
    };
    // Three words either side: back to the third space before, on to the third after.
    let start = text[..i]
        .trim_end()
        .rmatch_indices(' ')
        .nth(2)
        .map_or(0, |(p, _)| p + 1);
    let after = &text[i + needle.len()..];
    let end = after
        .trim_start()
        .match_indices(' ')
        .nth(2)
        .map_or(after.len(), |(p, _)| {
            p + after.len() - after.trim_start().len()
        });
    &text[start..i + needle.len() + end]
}

/// Bibliographic references (authors, year, arXiv/DOI, URL) stay in their original
/// language in translated books; language and length checks skip them.
static CITATION_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\bet al\.|\barxiv:|\bdoi:|https?://|\b(?:19|20)[0-9]{2}\b")
        .expect("valid regex")
});

fn is_citation(seg: &Segment) -> bool {
    let hits = CITATION_RE.find_iter(&seg.src).count();
    hits >= 1 && CITATION_RE.is_match(&seg.tgt) && lang::visible_len(&seg.src) < 400 && {
        // Mostly names and titles: many capitalised words.
        let words: Vec<&str> = seg.src.split_whitespace().collect();
        let caps = words
            .iter()
            .filter(|w| w.starts_with(|c: char| c.is_uppercase()))
            .count();
        caps * 3 >= words.len()
    }
}

/// Language findings of one segment of a pair of two languages: left untranslated (as a
/// whole or in English runs) or in a wrong language.
fn language(
    seg: &Segment,
    ctx: &CheckContext,
    src_script: Script,
    tgt_script: Script,
    out: &mut Vec<Finding>,
) {
    if is_citation(seg) || identical(seg, ctx, out) {
        return;
    }
    let sc = ScriptCounts::of(&seg.tgt);
    if sc.total < 12 {
        return;
    }
    if untranslated(seg, ctx, &sc, src_script, tgt_script, out) {
        return;
    }
    if let Some(why) = wrong_language(seg, ctx, &sc, src_script, tgt_script) {
        out.push(at(
            seg,
            ctx.finding(
                Category::WrongLanguage,
                Severity::Error,
                None,
                None,
                format!(
                    "not in {}: {why}: {:?}",
                    ctx.target_lang,
                    excerpt(&seg.tgt, 60)
                ),
                "Translate into the target language.",
            ),
        ));
    }
}

/// A translation identical to its source of three words or more (whitespace aside):
/// reported as left untranslated; whether it was.
fn identical(seg: &Segment, ctx: &CheckContext, out: &mut Vec<Finding>) -> bool {
    let norm = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    let src_words = seg
        .src
        .split_whitespace()
        .filter(|w| w.chars().any(char::is_alphabetic))
        .count();
    if src_words >= 3 && norm(&seg.src) == norm(&seg.tgt) {
        out.push(at(
            seg,
            ctx.finding(
                Category::Untranslated,
                Severity::Error,
                None,
                None,
                format!("left untranslated: {:?}", excerpt(&seg.tgt, 80)),
                "Translate this text.",
            ),
        ));
        return true;
    }
    false
}

/// Untranslated text in a translation whose script counts are `sc`: the whole segment in
/// the source's script (then `true`: nothing more to check), runs of English in a target of
/// another script, or a translation that reads as English in one of the same script.
fn untranslated(
    seg: &Segment,
    ctx: &CheckContext,
    sc: &ScriptCounts,
    src_script: Script,
    tgt_script: Script,
    out: &mut Vec<Finding>,
) -> bool {
    if tgt_script != src_script {
        // Whole segment in the source script.
        if sc.share(tgt_script) < 0.1 && sc.share(src_script) > 0.8 {
            out.push(at(
                seg,
                ctx.finding(
                    Category::Untranslated,
                    Severity::Error,
                    None,
                    None,
                    format!(
                        "translation is in the source language: {:?}",
                        excerpt(&seg.tgt, 80)
                    ),
                    "Translate this text.",
                ),
            ));
            return true;
        }
        if src_script == Script::Latin && lang::primary(&ctx.source_lang) == "en" {
            english_runs(seg, ctx, out);
        }
    } else if lang::primary(&ctx.source_lang) == "en" {
        let (share, words) = lang::en_stopword_share(&seg.tgt);
        if words >= 8 && share >= 0.3 {
            out.push(at(
                seg,
                ctx.finding(
                    Category::Untranslated,
                    Severity::Warning,
                    None,
                    None,
                    format!(
                        "reads as English ({:.0}% English function words): {:?}",
                        share * 100.0,
                        excerpt(&seg.tgt, 80)
                    ),
                    "Translate this text.",
                ),
            ));
        }
    }
    false
}

/// Runs of English left in a translation into another script.
fn english_runs(seg: &Segment, ctx: &CheckContext, out: &mut Vec<Finding>) {
    let runs = lang::latin_runs(&seg.tgt, 7);
    if !runs.is_empty() {
        let shown: Vec<String> = runs
            .iter()
            .take(2)
            .map(|r| format!("{:?}", excerpt(r, 70)))
            .collect();
        out.push(at(
            seg,
            ctx.finding(
                Category::Untranslated,
                Severity::Warning,
                None,
                None,
                format!("English left in the translation: {}", shown.join(", ")),
                "Translate the English passage (keep it only if it is a quotation or a name).",
            ),
        ));
    }
}

/// Why a translation whose script counts are `sc` is in a wrong language, if it is: a
/// script that is neither the target's nor the source's, or (Chinese) the other written
/// standard's characters.
fn wrong_language(
    seg: &Segment,
    ctx: &CheckContext,
    sc: &ScriptCounts,
    src_script: Script,
    tgt_script: Script,
) -> Option<String> {
    // Every script the target's profile writes (Japanese: Han and kana).
    let target = crate::lang::profile(&ctx.target_lang);
    let target_writes = |s: Script| target.is_some_and(|p| p.scripts.contains(&s));
    for s in [
        Script::Kana,
        Script::Hangul,
        Script::Cyrillic,
        Script::Arabic,
        Script::Greek,
        Script::Han,
        Script::Latin,
        Script::Other,
    ] {
        if s == tgt_script || s == src_script || target_writes(s) {
            continue;
        }
        let share = sc.share(s);
        let threshold = if s == Script::Kana { 0.1 } else { 0.25 };
        if share >= threshold && sc.get(s) >= 5 {
            return Some(format!(
                "{:.0}% of the letters are {:?} script",
                share * 100.0,
                s
            ));
        }
    }
    if lang::is_chinese(&ctx.target_lang) {
        let trad = lang::is_traditional_zh(&ctx.target_lang);
        let (n, han) = lang::wrong_chinese_standard(&seg.tgt, trad);
        if n >= 3 && n * 20 >= han {
            return Some(format!(
                "{n} of {han} Chinese characters are {} forms",
                if trad { "Simplified" } else { "Traditional" }
            ));
        }
    }
    None
}

fn repetition(seg: &Segment, ctx: &CheckContext, out: &mut Vec<Finding>) {
    if let Some((chunk, n)) = lang::repeated_run(&seg.tgt, 4) {
        // A translation is denser than its source: look for longer loops there.
        let src_loops = lang::repeated_run_upto(&seg.src, 4, 600).is_some()
            || lang::repeated_sentences(&seg.src, 12)
                .iter()
                .any(|r| r.1 >= n.min(4));
        if !src_loops {
            out.push(at(
                seg,
                ctx.finding(
                    Category::Repetition,
                    if n >= 8 || chunk.chars().count() >= 10 {
                        Severity::Error
                    } else {
                        Severity::Warning
                    },
                    None,
                    None,
                    format!("{:?} repeated {n} times in a row", excerpt(&chunk, 40)),
                    "Looping output: translate the unit again.",
                ),
            ));
            return;
        }
    }
    let reps = lang::repeated_sentences(&seg.tgt, 12);
    if !reps.is_empty() {
        let src_reps = lang::repeated_sentences(&seg.src, 12);
        let max_src = src_reps.iter().map(|r| r.1).max().unwrap_or(1);
        if let Some((s, n)) = reps.iter().max_by_key(|r| r.1).filter(|r| r.1 > max_src) {
            out.push(at(
                seg,
                ctx.finding(
                    Category::Repetition,
                    if *n >= 3 {
                        Severity::Error
                    } else {
                        Severity::Warning
                    },
                    None,
                    None,
                    format!(
                        "sentence repeated {n} times (at most {max_src} in the source): {:?}",
                        excerpt(s, 60)
                    ),
                    "Remove the repetition or translate the unit again.",
                ),
            ));
        }
    }
}

fn markup(seg: &Segment, ctx: &CheckContext, out: &mut Vec<Finding>) {
    let mut warn = |evidence: String, action: &str| {
        out.push(at(
            seg,
            ctx.finding(
                Category::Markup,
                Severity::Warning,
                None,
                None,
                evidence,
                action,
            ),
        ))
    };
    let se = lang::literal_emphasis(&seg.src);
    let te = lang::literal_emphasis(&seg.tgt);
    if te > se {
        warn(
            format!("{} literal ** or __ shown as text (emphasis did not render): {:?}", te - se, excerpt(around(&seg.tgt, "**").unwrap_or(&seg.tgt), 60)),
            "Balance the emphasis markers; next to CJK punctuation put the ** outside the quotes/brackets or add a space.",
        );
    }
    let (sbold, tbold) = seg.bold;
    if seg.fine && tbold < sbold {
        warn(
            format!(
                "{} of the source's {sbold} bold spans not in the translation: {:?}",
                sbold - tbold,
                excerpt(&seg.tgt, 60)
            ),
            "Put ** around the words that translate each bold phrase of the source.",
        );
    }
    let sb = lang::bracket_balance(&seg.src);
    let tb = lang::bracket_balance(&seg.tgt);
    let mut bad = Vec::new();
    for ((name, s), (_, t)) in sb.iter().zip(&tb) {
        if *t != 0 && *s == 0 {
            bad.push(format!("{name} off by {t:+}"));
        }
    }
    let sq = seg.src.matches('"').count();
    let tq = seg.tgt.matches('"').count();
    if !tq.is_multiple_of(2) && sq.is_multiple_of(2) {
        bad.push("odd number of \" quotes".to_string());
    }
    if !bad.is_empty() {
        warn(
            format!("unbalanced {}: {:?}", bad.join(", "), excerpt(&seg.tgt, 60)),
            "Close every bracket and quote the source closes.",
        );
    }
}

fn around<'a>(text: &'a str, needle: &str) -> Option<&'a str> {
    let p = text.find(needle)?;
    let start = text.floor_char_boundary(p.saturating_sub(30));
    let end = text.ceil_char_boundary((p + 40).min(text.len()));
    Some(&text[start..end])
}

fn length_ratio(
    segments: &[Segment],
    ctx: &CheckContext,
    src_script: Script,
    tgt_script: Script,
    same_lang: bool,
    out: &mut Vec<Finding>,
) {
    let mut ratios: Vec<(usize, f64)> = Vec::new();
    for (i, seg) in segments.iter().enumerate() {
        let sl = lang::visible_len(&seg.src);
        let tl = lang::visible_len(&seg.tgt);
        if tl == 0 && seg.src.chars().filter(|c| c.is_alphabetic()).count() >= 20 {
            // A unit with no translation is an error; a chapter paragraph without an aligned
            // counterpart may have been merged into a neighbour.
            let unit = seg.unit.is_some();
            out.push(at(
                seg,
                ctx.finding(
                    Category::LengthRatio,
                    if unit { Severity::Error } else { Severity::Warning },
                    None,
                    None,
                    if unit {
                        format!("no translation for {:?}", excerpt(&seg.src, 60))
                    } else {
                        format!("no aligned translation paragraph (missing, or merged into a neighbour) for {:?}", excerpt(&seg.src, 60))
                    },
                    "Translate the missing text.",
                ),
            ));
            continue;
        }
        if sl >= 60 && seg.fine && !is_citation(seg) {
            ratios.push((i, tl as f64 / sl as f64));
        }
    }
    let base = if ratios.len() >= 8 {
        let mut v: Vec<f64> = ratios.iter().map(|r| r.1).collect();
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    } else if same_lang {
        1.0
    } else {
        lang::typical_length_ratio(src_script, tgt_script)
    };
    for (i, r) in ratios {
        let seg = &segments[i];
        let (lo, hi) = (base / 2.5, base * 2.5);
        if r < lo || r > hi {
            out.push(at(
                seg,
                ctx.finding(
                    Category::LengthRatio,
                    Severity::Warning,
                    None,
                    None,
                    format!(
                        "translation is {:.2}× the source length (typical here {:.2}×): {}",
                        r,
                        base,
                        if r < lo {
                            "text may be missing"
                        } else {
                            "text may be added or repeated"
                        }
                    ),
                    if r < lo {
                        "Check for dropped sentences."
                    } else {
                        "Check for added or repeated text."
                    },
                ),
            ));
        }
    }
}

static TERM_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\b[A-Za-z][A-Za-z0-9]*[A-Z][A-Za-z0-9]*\b|\b[A-Z][a-z0-9]{2,}\b")
        .expect("valid regex")
});

fn consistency(
    segments: &[Segment],
    ctx: &CheckContext,
    src_script: Script,
    tgt_script: Script,
    out: &mut Vec<Finding>,
) {
    let norm = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    // The same source paragraph or heading translated differently.
    let mut by_src: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, seg) in segments.iter().enumerate() {
        if !seg.fine || lang::visible_len(&seg.src) < 8 {
            continue;
        }
        by_src.entry(norm(&seg.src)).or_default().push(i);
    }
    for (src, idx) in &by_src {
        let mut variants: Vec<String> = Vec::new();
        for &i in idx {
            let t = norm(&segments[i].tgt);
            if !variants.contains(&t) {
                variants.push(t);
            }
        }
        if variants.len() > 1 {
            let seg = &segments[idx[1]];
            let shown: Vec<String> = variants
                .iter()
                .take(3)
                .map(|v| format!("{:?}", excerpt(v, 40)))
                .collect();
            out.push(at(
                seg,
                ctx.finding(
                    Category::Consistency,
                    Severity::Warning,
                    None,
                    None,
                    format!(
                        "{:?} occurs {} times and is translated {} ways: {}",
                        excerpt(src, 40),
                        idx.len(),
                        variants.len(),
                        shown.join(" / ")
                    ),
                    "Translate repeated text the same way.",
                ),
            ));
        }
    }
    // A term kept in the source form in most places but not in some.
    if src_script == tgt_script {
        return;
    }
    let mut terms: HashMap<String, (usize, Vec<usize>)> = HashMap::new();
    for (i, seg) in segments.iter().enumerate() {
        let words: Vec<&str> = seg.src.split_whitespace().collect();
        let capitalised = words
            .iter()
            .filter(|w| w.starts_with(|c: char| c.is_uppercase()))
            .count();
        if !seg.fine || capitalised * 5 >= words.len() * 3 {
            // Titles capitalise ordinary words.
            continue;
        }
        let tl = seg.tgt.to_lowercase();
        let mut seen: Vec<&str> = Vec::new();
        for m in TERM_RE.find_iter(&seg.src) {
            let term = m.as_str();
            if seen.contains(&term) || lang::is_en_stopword(&term.to_ascii_lowercase()) {
                continue;
            }
            // A single capital may just start a sentence or a title: count such words only
            // mid-sentence (after a lower-case word or a comma).
            let multi_caps = term.chars().filter(|c| c.is_ascii_uppercase()).count() >= 2;
            let prev = seg.src[..m.start()].trim_end().chars().next_back();
            if !multi_caps && !prev.is_some_and(|c| c.is_lowercase() || c == ',') {
                continue;
            }
            seen.push(term);
            let e = terms.entry(term.to_string()).or_insert((0, Vec::new()));
            if tl.contains(&term.to_lowercase()) {
                e.0 += 1;
            } else {
                e.1.push(i);
            }
        }
    }
    let mut list: Vec<(&String, &(usize, Vec<usize>))> = terms.iter().collect();
    list.sort_by(|a, b| a.0.cmp(b.0));
    for (term, (kept, not_kept)) in list {
        let n = kept + not_kept.len();
        if n >= 4 && *kept >= 3 && !not_kept.is_empty() && (*kept as f64) >= 0.75 * n as f64 {
            let lines: Vec<String> = not_kept
                .iter()
                .take(5)
                .filter_map(|&i| segments[i].tgt_line.map(|l| l.to_string()))
                .collect();
            let seg = &segments[not_kept[0]];
            out.push(at(
                seg,
                ctx.finding(
                    Category::Consistency,
                    Severity::Info,
                    None,
                    None,
                    format!(
                        "{term:?} is kept as is in {kept} of {n} paragraphs but rendered differently in {}{}",
                        not_kept.len(),
                        if lines.is_empty() { String::new() } else { format!(" (lines {})", lines.join(", ")) }
                    ),
                    "Render the term the same way everywhere (add it to the glossary).",
                ),
            ));
        }
    }
}
