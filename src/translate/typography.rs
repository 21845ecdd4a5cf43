//! The typography of a translated line, applied to the model's text (code and links are
//! still placeholders, so they are never touched).
//!
//! For Chinese, Japanese and Korean, the conventions of technical publishing:
//! * a term the book keeps in English that the model translated anyway is written back
//!   (the glossary's [`crate::glossary::GlossaryEntry::replaces`], `技能` → `Skill`), as
//!   many times as the line is short of it;
//! * spacing and punctuation by `autocorrect`: a space between CJK and Latin words or
//!   numbers, full-width punctuation in CJK sentences;
//! * terms kept in English are written in the singular, since these languages do not
//!   inflect nouns: `Agents` → `Agent` for a kept term `Agent`, `LLMs` → `LLM` for any
//!   acronym;
//! * for Chinese, a chapter number in Chinese numerals: `第 2 章` → `第二章`, as Chinese
//!   books write it, and straight double quotes as curly ones (`"蒸馏"` → `“蒸馏”`), without
//!   spaces between them and the Chinese text around them, half-width parentheses in a
//!   Chinese sentence as full-width ones (`(ViT)` → `（ViT）`), and a figure or table label
//!   set apart from its caption by a space, not a colon (`图 3-5：RAG 查询流程` → `图 3-5 RAG
//!   查询流程`), and an acronym's English expansion the model translated or dropped written
//!   back (see [`super::expansions`]).

use crate::checks::CheckContext;
use crate::glossary::count_term;
use regex::Regex;
use std::collections::HashSet;
use std::sync::LazyLock;

/// An acronym in the plural: `LLMs`, `APIs`, `GPUs`.
static ACRONYM_PLURAL_RE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\b([A-Z][A-Z0-9]+)s\b").expect("valid acronym regex"));

/// A figure or table label opening a caption with a colon: `图 3-5：`, `表3-3:`.
static CAPTION_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(图|表)\s*([0-9]+(?:[-.][0-9]+)*)\s*[：:]\s*").expect("valid caption regex")
});

/// A pair of half-width parentheses with neither parentheses nor a line break inside.
static PARENS_RE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\(([^()\n]{1,200})\)").expect("valid parentheses regex"));

/// A chapter number written with digits: `第 2 章`, `第12章`.
static CHAPTER_RE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"第\s*([0-9]{1,2})\s*章").expect("valid chapter regex"));

/// Whether a language is written in a non-Latin script (Chinese, Japanese, Korean).
pub fn non_latin_script(lang: &str) -> bool {
    let l = lang.to_ascii_lowercase();
    ["zh", "ja", "ko"]
        .iter()
        .any(|p| l == *p || l.starts_with(&format!("{p}-")))
}

/// `line`, the translation of `source` (the line the model was shown), typeset for `ctx`'s
/// target language; the terms kept in the source language are `ctx`'s glossary entries
/// that keep their source, and a kept term the model translated is written back first
/// ([`kept_terms_back`]).
pub fn typeset(ctx: &CheckContext, source: &str, line: &str) -> String {
    if !non_latin_script(&ctx.target_lang) {
        return line.to_string();
    }
    let zh = ctx.target_lang.to_ascii_lowercase().starts_with("zh");
    let mut line = kept_terms_back(ctx, source, line);
    if zh {
        line = super::expansions::write_back(source, &line);
    }
    let line = line.as_str();
    let kept: HashSet<&str> = ctx
        .glossary
        .entries
        .iter()
        .filter(|e| e.keeps_source())
        .map(|e| e.source.as_str())
        .filter(|t| t.len() >= 2 && t.chars().all(|c| c.is_ascii_alphanumeric()))
        .collect();
    let mut out = singular(&autocorrect::format(line), &kept);
    out = ACRONYM_PLURAL_RE.replace_all(&out, "$1").into_owned();
    if zh {
        out = curly_quotes(&out);
        out = full_width_parens(&out);
        out = bold_closed_before_marks(&out);
        out = CAPTION_RE.replace(&out, "$1 $2 ").into_owned();
        out = CHAPTER_RE
            .replace_all(&out, |c: &regex::Captures| {
                let n: usize = c[1].parse().unwrap_or(0);
                match chinese_number(n) {
                    Some(z) => format!("第{z}章"),
                    None => c[0].to_string(),
                }
            })
            .into_owned();
    }
    out
}

/// Full-width marks that may end a bold span's words.
const CLOSING_MARKS: &str = "。，、；：？！";

/// A bold span closed after a full-width mark with text right after it (`**…没有什么用。**无论`)
/// does not render: CommonMark does not take a `**` between a punctuation mark and a letter
/// as closing. The mark is moved out of the span (`**…没有什么用**。无论`) wherever that
/// makes the span render.
fn bold_closed_before_marks(line: &str) -> String {
    use super::emphasis::bold_spans;
    let mut out = line.to_string();
    let mut from = 0;
    while let Some(i) = out[from..].find("**").map(|i| i + from) {
        from = i + 2;
        let (Some(mark), Some(next)) = (out[..i].chars().next_back(), out[i + 2..].chars().next())
        else {
            continue;
        };
        if !CLOSING_MARKS.contains(mark) || next.is_whitespace() || next.is_ascii_punctuation() {
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
        out.push('（');
        out.push_str(inner.trim());
        out.push('）');
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
fn curly_quotes(line: &str) -> String {
    let n = line.matches('"').count();
    if n == 0 || !n.is_multiple_of(2) || !line.chars().any(crate::units::is_cjk) {
        return line.to_string();
    }
    let mut chars = Vec::with_capacity(line.len());
    let mut open = true;
    for c in line.chars() {
        chars.push(match c {
            '"' if open => '“',
            '"' => '”',
            c => c,
        });
        if c == '"' {
            open = !open;
        }
    }
    let chinese = |c: Option<&char>| {
        c.is_some_and(|&c| crate::units::is_cjk(c) || "，。：；？！、（）".contains(c))
    };
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
        let drop = (after == Some(&'“') && chinese(before))
            || (before == Some(&'”') && chinese(after))
            || before == Some(&'“')
            || after == Some(&'”');
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

/// `n` (1–99) in Chinese numerals: 2 → 二, 10 → 十, 12 → 十二, 20 → 二十, 23 → 二十三.
fn chinese_number(n: usize) -> Option<String> {
    const DIGITS: [&str; 10] = ["零", "一", "二", "三", "四", "五", "六", "七", "八", "九"];
    match n {
        1..=9 => Some(DIGITS[n].to_string()),
        10..=19 => Some(format!("十{}", if n > 10 { DIGITS[n - 10] } else { "" })),
        20..=99 => Some(format!(
            "{}十{}",
            DIGITS[n / 10],
            if n.is_multiple_of(10) {
                ""
            } else {
                DIGITS[n % 10]
            }
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::glossary::{Glossary, GlossaryEntry};

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
        assert_eq!(chinese_number(10).as_deref(), Some("十"));
        assert_eq!(chinese_number(31).as_deref(), Some("三十一"));
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
            bold_closed_before_marks("结论：**简单 RAG 几乎没有什么用。**无论如何"),
            "结论：**简单 RAG 几乎没有什么用**。无论如何"
        );
        // Rendering already (a space or the line's end after it), or not a closing run.
        for ok in [
            "**案例 1：计数问题。** 在第二章",
            "**案例 1：计数问题。**",
            "前面：**粗体**词。",
        ] {
            assert_eq!(bold_closed_before_marks(ok), ok);
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
