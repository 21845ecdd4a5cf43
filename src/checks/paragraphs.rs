//! Chapter-level checks of each paragraph of a translation on its own: the language it is
//! in (paragraph language identification, [`crate::lang::langid`]) and spaces inside CJK
//! words. Both ask the target's profile; a target without one is not checked.

use super::doc::{BlockKind, Doc};
use super::{Category, CheckContext, Finding, Severity};
use crate::lang::{langid, Profile, Rule};
use regex::Regex;
use std::sync::LazyLock;

/// A space between two CJK characters (ideographs, kana), with the character before
/// them (a digit there makes the first a number's unit: `36.7万 升` is not one word).
static CJK_SPACE_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(.?)([\p{Han}\p{Hiragana}\p{Katakana}] +[\p{Han}\p{Hiragana}\p{Katakana}])")
        .expect("valid CJK space regex")
});

/// How many prose paragraphs of `target` could be identified, and how many of them are
/// in the target language (the bench's language-identification share).
pub fn identified_share(target: &str, target_lang: &str) -> (usize, usize) {
    let Some(profile) = crate::lang::profile(target_lang) else {
        return (0, 0);
    };
    let doc = Doc::parse(target);
    let mut told = 0;
    let mut other = 0;
    for b in doc.blocks.iter().filter(|b| b.kind == BlockKind::Prose) {
        if b.prose.chars().filter(|c| c.is_alphabetic()).count() < langid::MIN_LETTERS {
            continue;
        }
        told += 1;
        other += usize::from(langid::other_language(&b.prose, profile).is_some());
    }
    (told, told - other)
}

/// Paragraphs not in the target language, and spaces inside CJK words the source does
/// not have. A paragraph already flagged on its line (`untranslated`, `wrong_language`)
/// is not flagged again.
pub(super) fn check(
    source: &str,
    target: &str,
    t: &Doc,
    ctx: &CheckContext,
    out: &mut Vec<Finding>,
) {
    let Some(profile) = crate::lang::profile(&ctx.target_lang) else {
        return;
    };
    let source_lang = crate::lang::profile(&ctx.source_lang);
    let flagged: Vec<usize> = out
        .iter()
        .filter(|f| matches!(f.category, Category::Untranslated | Category::WrongLanguage))
        .filter_map(|f| f.line)
        .collect();
    for b in &t.blocks {
        if !matches!(b.kind, BlockKind::Prose | BlockKind::Heading(_)) {
            continue;
        }
        let line = t.line(b.range.start);
        if !flagged.contains(&line) {
            if let Some(f) = language(&b.prose, profile, source_lang, ctx, line) {
                out.push(f);
            }
        }
        if profile.has(Rule::NoSpaceInsideCjkWords) {
            // The block as written (its prose joins table cells and drops code spans).
            let text = target.get(b.range.clone()).unwrap_or_default();
            out.extend(spaces_inside_words(source, text, ctx, line));
        }
    }
}

/// A finding for a paragraph identified as another language than the target's: the
/// source's (`untranslated`) or a third one (`wrong_language`).
fn language(
    prose: &str,
    target: &Profile,
    source: Option<&Profile>,
    ctx: &CheckContext,
    line: usize,
) -> Option<Finding> {
    let found = langid::other_language(prose, target)?;
    let is_source = source.is_some_and(|s| s.whatlang.code() == found.code);
    let (category, what) = if is_source {
        (Category::Untranslated, "the source language")
    } else {
        (Category::WrongLanguage, "not the target language")
    };
    Some(ctx.finding(
        category,
        Severity::Warning,
        Some(line),
        None,
        format!(
            "paragraph identified as {} ({what}, {} wanted; confidence {:.2}): {:?}",
            found.name,
            target.name,
            found.confidence,
            excerpt(prose)
        ),
        "Translate the paragraph into the target language.",
    ))
}

/// One finding per space inside a CJK word (`系统 提示词`) that the source text does not
/// have.
fn spaces_inside_words(source: &str, text: &str, ctx: &CheckContext, line: usize) -> Vec<Finding> {
    CJK_SPACE_RE
        .captures_iter(text)
        .filter(|c| !c[1].starts_with(|d: char| d.is_ascii_digit()))
        .filter_map(|c| c.get(2))
        .filter(|m| !source.contains(m.as_str()))
        .map(|m| {
            ctx.finding(
                Category::Spacing,
                Severity::Warning,
                Some(line),
                None,
                format!("a space inside a word: {:?}", m.as_str()),
                "Remove the space: CJK words are written without spaces inside.",
            )
        })
        .collect()
}

fn excerpt(s: &str) -> String {
    let cut: String = s.chars().take(60).collect();
    if cut.len() < s.len() {
        format!("{cut}…")
    } else {
        cut
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn findings(source: &str, target: &str, to: &str) -> Vec<Finding> {
        let mut out = Vec::new();
        let ctx = CheckContext::new("en", to);
        check(source, target, &Doc::parse(target), &ctx, &mut out);
        out
    }

    #[test]
    fn paragraphs_in_other_languages_and_spaces_inside_words_are_found() {
        let src = "The system prompt is cached.\n\nThe cache is stored on disk, so a restart costs only milliseconds.\n";
        let zh = "系统 提示词会被缓存。\n\nThe cache is stored on disk, so a restart costs only milliseconds.\n";
        let f = findings(src, zh, "zh-CN");
        assert!(
            f.iter()
                .any(|x| x.category == Category::Spacing && x.evidence.contains("统 提")),
            "{f:#?}"
        );
        assert!(
            f.iter()
                .any(|x| x.category == Category::Untranslated && x.line == Some(3)),
            "{f:#?}"
        );
        let de = "Der Cache wird auf der Festplatte gespeichert, daher kostet ein Neustart nur Millisekunden.\n\nLa caché se almacena en el disco, así que un reinicio cuesta solo milisegundos.\n";
        let f = findings(src, de, "de");
        assert_eq!(f.len(), 1, "{f:#?}");
        assert_eq!(
            (f[0].category, f[0].line),
            (Category::WrongLanguage, Some(3))
        );
        assert_eq!(identified_share(de, "de"), (2, 1));
        assert!(findings(src, "系统提示词会被缓存。\n", "zh-CN").is_empty());
        assert!(findings("系统 提示词", "系统 提示词会被缓存。\n", "zh-CN").is_empty());
    }
}
