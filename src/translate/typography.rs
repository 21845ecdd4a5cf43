//! The typography of a translated line, applied to the model's text (code and links are
//! still placeholders, so they are never touched): the rules the target language's
//! profile lists ([`crate::lang::Profile::typography`]), in its order. Each rule is named
//! for what it does in the language ([`Rule`]): kept terms written back where the model
//! translated them, an acronym's expansion written back ([`super::expansions`]), East Asian
//! spacing and full-width punctuation (`autocorrect`), kept terms in the singular for
//! languages that do not inflect nouns, curly quotation marks, full-width parentheses, a
//! bold span closed before a full-width mark, a caption label without a colon, chapter
//! numbers in the language's numerals, and no space inside a CJK word.

use crate::checks::CheckContext;
use crate::glossary::count_term;
use crate::lang::punct::{FULLWIDTH_COLON, FULLWIDTH_LEFT_PAREN, FULLWIDTH_RIGHT_PAREN};
use crate::lang::{ChapterNumbers, Profile, Rule};
use regex::Regex;
use std::collections::HashSet;
use std::sync::LazyLock;

/// An acronym in the plural: `LLMs`, `APIs`, `GPUs`.
static ACRONYM_PLURAL_RE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\b([A-Z][A-Z0-9]+)s\b").expect("valid acronym regex"));

/// A pair of half-width parentheses with neither parentheses nor a line break inside.
static PARENS_RE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\(([^()\n]{1,200})\)").expect("valid parentheses regex"));

/// A space between two CJK characters (ideographs, kana).
static CJK_SPACE_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"([\p{Han}\p{Hiragana}\p{Katakana}]) +([\p{Han}\p{Hiragana}\p{Katakana}])")
        .expect("valid CJK space regex")
});

/// The name of the whole line typography pass (`--skip-pass typography`).
pub const TYPOGRAPHY: &str = "typography";

/// `line`, the translation of `source` (the line the model was shown), typeset for `ctx`'s
/// target language; the terms kept in the source language are `ctx`'s glossary entries
/// that keep their source, and a kept term the model translated is written back first
/// ([`kept_terms_back`]).
pub fn typeset(ctx: &CheckContext, source: &str, line: &str) -> String {
    let profile = crate::lang::profile_or_latin(&ctx.target_lang);
    let kept: HashSet<&str> = ctx
        .glossary
        .entries
        .iter()
        .filter(|e| e.keeps_source())
        .map(|e| e.source.as_str())
        .filter(|t| t.len() >= 2 && t.chars().all(|c| c.is_ascii_alphanumeric()))
        .collect();
    let skipped = |name: &str| ctx.skipped_passes.iter().any(|s| s == name);
    let mut out = line.to_string();
    if skipped(TYPOGRAPHY) {
        return out;
    }
    for &rule in profile.typography {
        if !skipped(rule.name()) {
            out = apply(rule, profile, ctx, source, &out, &kept);
        }
    }
    out
}

/// One typography rule of `profile` applied to `line` (the translation of `source`).
fn apply(
    rule: Rule,
    profile: &Profile,
    ctx: &CheckContext,
    source: &str,
    line: &str,
    kept: &HashSet<&str>,
) -> String {
    match rule {
        Rule::KeptTermsBack => kept_terms_back(ctx, source, line),
        Rule::AcronymExpansions => super::expansions::write_back(source, line),
        Rule::CjkSpacing => autocorrect::format(line),
        Rule::UninflectedKeptTerms => {
            let out = singular(line, kept);
            ACRONYM_PLURAL_RE.replace_all(&out, "$1").into_owned()
        }
        Rule::CurlyQuotes => curly_quotes(line, profile.quotes),
        Rule::FullWidthParentheses => full_width_parens(line),
        Rule::BoldBeforeFullWidthMarks => bold_closed_before_marks(line, profile.closing_marks),
        Rule::CaptionLabelWithoutColon => caption_label(line, profile.caption_labels),
        Rule::ChapterNumberInNumerals => match &profile.chapter_numbers {
            Some(chapter) => chapter_numerals(line, chapter),
            None => line.to_string(),
        },
        Rule::NoSpaceInsideCjkWords => no_space_inside_words(source, line),
    }
}

/// A caption's label (`图`, `表`) and number set apart from the caption by a space, not a
/// colon: `图 3-5：RAG 查询流程` → `图 3-5 RAG 查询流程`.
fn caption_label(line: &str, labels: &[&str]) -> String {
    if labels.is_empty() || !labels.iter().any(|l| line.starts_with(l)) {
        return line.to_string();
    }
    let alternatives: Vec<String> = labels.iter().map(|l| regex::escape(l)).collect();
    let pattern = format!(
        r"^({})\s*([0-9]+(?:[-.][0-9]+)*)\s*[{FULLWIDTH_COLON}:]\s*",
        alternatives.join("|")
    );
    match Regex::new(&pattern) {
        Ok(re) => re.replace(line, "$1 $2 ").into_owned(),
        Err(_) => line.to_string(),
    }
}

/// A chapter number written with digits (`第 2 章`, `第12章`) in the language's numerals
/// (`第二章`).
fn chapter_numerals(line: &str, chapter: &ChapterNumbers) -> String {
    let ChapterNumbers {
        before,
        after,
        numerals,
    } = *chapter;
    if !line.contains(before) || !line.contains(after) {
        return line.to_string();
    }
    let pattern = format!(
        r"{}\s*([0-9]{{1,2}})\s*{}",
        regex::escape(before),
        regex::escape(after)
    );
    let Ok(re) = Regex::new(&pattern) else {
        return line.to_string();
    };
    re.replace_all(line, |c: &regex::Captures| {
        let n: usize = c[1].parse().unwrap_or(0);
        match numerals(n) {
            Some(z) => format!("{before}{z}{after}"),
            None => c[0].to_string(),
        }
    })
    .into_owned()
}

/// `line` without the spaces it puts between two CJK characters where `source` (the line
/// the model was shown) has no such space: a house term written into the passage after a
/// word the model translated comes back as `系统 提示词`, one word split in two.
fn no_space_inside_words(source: &str, line: &str) -> String {
    if CJK_SPACE_RE.is_match(source) || !CJK_SPACE_RE.is_match(line) {
        return line.to_string();
    }
    // Twice: a one-character word between two spaces (`甲 乙 丙`) overlaps its matches.
    let once = CJK_SPACE_RE.replace_all(line, "$1$2");
    CJK_SPACE_RE.replace_all(&once, "$1$2").into_owned()
}

/// A bold span closed after a full-width mark with text right after it (`**…没有什么用。**无论`)
/// does not render: CommonMark does not take a `**` between a punctuation mark and a letter
/// as closing. The mark is moved out of the span (`**…没有什么用**。无论`) wherever that
/// makes the span render.
fn bold_closed_before_marks(line: &str, closing_marks: &str) -> String {
    use super::bold::bold_spans;
    let mut out = line.to_string();
    let mut from = 0;
    while let Some(i) = out[from..].find("**").map(|i| i + from) {
        from = i + 2;
        let (Some(mark), Some(next)) = (out[..i].chars().next_back(), out[i + 2..].chars().next())
        else {
            continue;
        };
        if !closing_marks.contains(mark) || next.is_whitespace() || next.is_ascii_punctuation() {
            continue;
        }
        let m = mark.len_utf8();
        let moved = format!("{}**{mark}{}", &out[..i - m], &out[i + 2..]);
        if bold_spans(&moved).len() > bold_spans(&out).len() {
            out = moved;
        }
    }
    out
}

/// `line` with each kept term that `source` writes (capitalised as the term, any plural)
/// more often than `line` has it written back where the model put one of its words for it
/// ([`crate::glossary::GlossaryEntry::replaces`]: `Prompts and Skills` translated as
/// `提示和技能` → `Prompt和Skill`): at most as many times as the term is missing, first
/// occurrences first, longer words before shorter ones.
fn kept_terms_back(ctx: &CheckContext, source: &str, line: &str) -> String {
    let mut out = line.to_string();
    for e in ctx
        .glossary
        .entries
        .iter()
        .filter(|e| e.keeps_source() && !e.replaces.is_empty())
    {
        let words: Vec<&str> = e.replaces.iter().map(String::as_str).collect();
        out = term_back(source, &out, &e.source, &words).0;
    }
    out
}

/// How many times `source` writes `term` (capitalised as the term, any plural) more
/// often than `line` has it (in any case).
pub(crate) fn term_missing(source: &str, line: &str, term: &str) -> usize {
    let wanted = count_term(source, term, usize::MAX);
    if wanted == 0 {
        return 0;
    }
    wanted - count_term(&line.to_lowercase(), &term.to_lowercase(), wanted)
}

/// `line` with `term` written back in place of `words` (longer words first, first
/// occurrences first) as many times as it is missing ([`term_missing`]), and how many
/// times it was written.
pub(crate) fn term_back(source: &str, line: &str, term: &str, words: &[&str]) -> (String, usize) {
    let mut out = line.to_string();
    let mut missing = term_missing(source, line, term);
    let mut written = 0;
    let mut words = words.to_vec();
    words.sort_by_key(|w| std::cmp::Reverse(w.len()));
    for w in words {
        while missing > 0 {
            let Some(at) = out.find(w) else { break };
            out.replace_range(at..at + w.len(), term);
            missing -= 1;
            written += 1;
        }
    }
    (out, written)
}

/// Half-width parentheses in a Chinese sentence written full-width, as Chinese books do,
/// without spaces outside them (`**视觉变换器** (ViT) 的` → `**视觉变换器**（ViT）的`): a pair
/// that holds Chinese, or follows Chinese text, bold or a placeholder. A link's `](…)`, a
/// call such as `f(x)` and a pair after a Latin word around Latin text (`GPT-4o (2024)`)
/// stay as written.
fn full_width_parens(line: &str) -> String {
    if !line.contains('(') || !line.chars().any(crate::units::is_cjk) {
        return line.to_string();
    }
    let mut out = String::with_capacity(line.len() + 8);
    let mut last = 0;
    for m in PARENS_RE.find_iter(line) {
        let before = line[..m.start()].trim_end_matches(' ');
        let inner = &line[m.start() + 1..m.end() - 1];
        let prev = before.chars().next_back();
        let chinese = prev.is_some_and(|c| crate::units::is_cjk(c) || "*}`".contains(c));
        let link = line[..m.start()].ends_with(']');
        if link || !(chinese || inner.chars().any(crate::units::is_cjk)) {
            continue;
        }
        out.push_str(&line[last..before.len().max(last)]);
        out.push(FULLWIDTH_LEFT_PAREN);
        out.push_str(inner.trim());
        out.push(FULLWIDTH_RIGHT_PAREN);
        let rest = &line[m.end()..];
        last = m.end() + (rest.len() - rest.trim_start_matches(' ').len());
    }
    out.push_str(&line[last..]);
    out
}

/// `line` with its straight double quotes as curly ones, when it is Chinese text (it has
/// CJK characters) and its quotes pair up; spaces between a quote and CJK text, or inside
/// the quotes, are dropped (`用户搜索 " 模型蒸馏 "。` → `用户搜索“模型蒸馏”。`). An odd
/// number of quotes is left as it is: which one is missing cannot be told.
fn curly_quotes(line: &str, (open_q, close_q): (char, char)) -> String {
    let n = line.matches('"').count();
    if n == 0 || !n.is_multiple_of(2) || !line.chars().any(crate::units::is_cjk) {
        return line.to_string();
    }
    let mut chars = Vec::with_capacity(line.len());
    let mut open = true;
    for c in line.chars() {
        chars.push(match c {
            '"' if open => open_q,
            '"' => close_q,
            c => c,
        });
        if c == '"' {
            open = !open;
        }
    }
    // CJK text or full-width punctuation (both `is_cjk`).
    let chinese = |c: Option<&char>| c.is_some_and(|&c| crate::units::is_cjk(c));
    let mut out = String::with_capacity(line.len() + n * 2);
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != ' ' {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        let end = (i..chars.len())
            .find(|&k| chars[k] != ' ')
            .unwrap_or(chars.len());
        let (before, after) = (i.checked_sub(1).map(|k| &chars[k]), chars.get(end));
        let drop = (after == Some(&open_q) && chinese(before))
            || (before == Some(&close_q) && chinese(after))
            || before == Some(&open_q)
            || after == Some(&close_q);
        if !drop {
            out.extend(&chars[i..end]);
        }
        i = end;
    }
    out
}

/// A plain word (letters and digits; `\b` is Unicode-aware, so a word run into CJK text
/// is not one).
static WORD_RE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\b[A-Za-z0-9]+\b").expect("valid word regex"));

/// `text` with the plural of each kept word (`Agents`, `Boxes`) written as the kept word.
/// `kept` holds plain words only (multi-word terms are left alone).
fn singular(text: &str, kept: &HashSet<&str>) -> String {
    if kept.is_empty() {
        return text.to_string();
    }
    WORD_RE
        .replace_all(text, |c: &regex::Captures| {
            let w = &c[0];
            let stem = [w.strip_suffix('s'), w.strip_suffix("es")]
                .into_iter()
                .flatten()
                .find(|stem| kept.contains(stem));
            stem.unwrap_or(w).to_string()
        })
        .into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::glossary::{Glossary, GlossaryEntry};

    const MARKS: &str = "。，、；：？！";

    fn ctx(lang: &str, keep: &[&str]) -> CheckContext {
        let entries = keep
            .iter()
            .map(|t| GlossaryEntry::house(t, t))
            .collect::<Vec<_>>();
        CheckContext::new("en", lang).with_glossary(Glossary { entries })
    }

    #[test]
    fn chinese_lines_are_spaced_singular_and_number_chapters_in_chinese() {
        let c = ctx("zh-CN", &["Agent", "Skill"]);
        assert_eq!(
            typeset(&c, "", "第2章介绍了Agents和Skills，以及LLMs的APIs。"),
            "第二章介绍了 Agent 和 Skill，以及 LLM 的 API。"
        );
        assert_eq!(
            typeset(&c, "", "见第 12 章与第20章、第 100 章"),
            "见第十二章与第二十章、第 100 章"
        );
        // Words that only end like a kept term, and plurals of words not kept, stay.
        assert_eq!(
            typeset(&c, "", "SubAgents 与 Agentic 系统，Windows 与 Kubernetes"),
            "SubAgents 与 Agentic 系统，Windows 与 Kubernetes"
        );
        assert_eq!(crate::lang::chinese_number(10).as_deref(), Some("十"));
        assert_eq!(crate::lang::chinese_number(31).as_deref(), Some("三十一"));
        assert_eq!(
            typeset(&c, "", "用户搜索 \" 模型蒸馏 \"。搜索 \"kitty\" 不会找到"),
            "用户搜索“模型蒸馏”。搜索“kitty”不会找到"
        );
        assert_eq!(
            typeset(&c, "", "一个 \" 未配对的引号"),
            "一个 \" 未配对的引号",
            "an odd quote is left"
        );
        assert_eq!(
            typeset(&c, "", "图 3-5：RAG 查询流程"),
            "图 3-5 RAG 查询流程",
            "a caption's label"
        );
        assert_eq!(typeset(&c, "", "如图 3-5：所示"), "如图 3-5：所示");
        // Placeholders are never touched.
        assert_eq!(typeset(&c, "", "运行{{1}}即可"), "运行{{1}}即可");
    }

    #[test]
    fn kept_terms_the_model_translated_are_written_back_up_to_the_missing_count() {
        let mut entries = vec![
            GlossaryEntry::house("Skill", "Skill"),
            GlossaryEntry::house("Prompt", "Prompt"),
        ];
        entries[0].replaces = vec!["技能".into()];
        entries[1].replaces = vec!["提示".into(), "提示词".into()];
        let c = CheckContext::new("en", "zh-CN").with_glossary(Glossary { entries });
        assert_eq!(
            typeset(
                &c,
                "Prompts and Skills must be checked.",
                "提示词和技能必须检查。"
            ),
            "Prompt 和 Skill 必须检查。",
            "the longer word first, plural source forms count"
        );
        assert_eq!(
            typeset(&c, "A Skill library and its skills", "Skill 库和它的技能"),
            "Skill 库和它的技能",
            "the term is already there, and a lower-case use is not the kept term"
        );
        assert_eq!(
            typeset(
                &c,
                "Skill learning, then the Skill.",
                "技能学习，然后是技能和技能库。"
            ),
            "Skill 学习，然后是 Skill 和技能库。",
            "at most as many as are missing, first ones first"
        );
        assert_eq!(
            typeset(&c, "", "技能"),
            "技能",
            "nothing to write back without the term in the source"
        );
    }

    #[test]
    fn latin_script_targets_are_left_alone() {
        let c = ctx("de", &["Agent"]);
        assert_eq!(
            typeset(&c, "", "Die Agents im Kapitel 2"),
            "Die Agents im Kapitel 2"
        );
    }

    #[test]
    fn an_acronyms_expansion_is_written_back_in_english() {
        let c = ctx("zh-CN", &[]);
        let src = "Two ANN (Approximate Nearest Neighbor) algorithms differ.";
        assert_eq!(
            typeset(&c, src, "两种 ANN (近似最近邻) 算法不同。"),
            "两种 ANN（Approximate Nearest Neighbor，近似最近邻）算法不同。"
        );
        let de = ctx("de", &[]);
        assert_eq!(
            typeset(&de, src, "Zwei ANN (Nachbar)"),
            "Zwei ANN (Nachbar)"
        );
    }

    #[test]
    fn a_bold_span_closed_after_a_full_width_mark_is_closed_before_it() {
        assert_eq!(
            bold_closed_before_marks("结论：**简单 RAG 几乎没有什么用。**无论如何", MARKS),
            "结论：**简单 RAG 几乎没有什么用**。无论如何"
        );
        // Rendering already (a space or the line's end after it), or not a closing run.
        for ok in [
            "**案例 1：计数问题。** 在第二章",
            "**案例 1：计数问题。**",
            "前面：**粗体**词。",
        ] {
            assert_eq!(bold_closed_before_marks(ok, MARKS), ok);
        }
        let zh = ctx("zh-CN", &[]);
        let src = "Both point to one conclusion: **naive RAG is not enough.** Whether stored…";
        let line = typeset(
            &zh,
            src,
            "都指向同一个结论：**简单 RAG 远远不够。**无论存储在哪里",
        );
        assert!(line.contains("**简单 RAG 远远不够**。无论"), "{line}");
    }

    #[test]
    fn parentheses_in_chinese_sentences_are_full_width() {
        for (line, want) in [
            (
                "基于 **视觉变换器** (ViT) 的编码器",
                "基于 **视觉变换器**（ViT）的编码器",
            ),
            ("**L0 (摘要)** 是概述", "**L0（摘要）** 是概述"),
            (
                "生成 {{2}} (L0) 和 {{3}} (L1) 文件",
                "生成 {{2}}（L0）和 {{3}}（L1）文件",
            ),
            (
                "事实片段：(用户，计划) 和 (用户，海滩)",
                "事实片段：（用户，计划）和（用户，海滩）",
            ),
            ("见 [文档]({{1}}) 和 f(x)", "见 [文档]({{1}}) 和 f(x)"),
            ("发布于 GPT-4o (2024) 之后", "发布于 GPT-4o (2024) 之后"),
            ("English only (kept)", "English only (kept)"),
        ] {
            assert_eq!(full_width_parens(line), want, "{line}");
        }
    }
}
