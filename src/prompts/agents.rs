//! The agents' prompts, rendered with minijinja from `src/prompts/templates/`. Every prompt
//! puts its stable part first — the system message (guide, glossary, instructions) and the
//! fixed head of the user message — and marks where the per-call part starts, so the
//! engine computes the stable prefix once ([`crate::engine::stable_prefix`]).

use super::profile::PromptProfile;
use crate::engine::chat_template::Message;
use crate::engine::constraint::TextConstraint;
use crate::engine::stable_prefix::SplitPoint;
use crate::glossary::GlossaryEntry;
use anyhow::{anyhow, Result};
use minijinja::Environment;
use serde::Serialize;

/// The default translation guide (English → Simplified Chinese).
pub const DEFAULT_GUIDE: &str = include_str!("guide.zh-CN.md");

const TEMPLATES: &[(&str, &str)] = &[
    (
        "translate_system",
        include_str!("templates/translate_system.j2"),
    ),
    (
        "translate_user",
        include_str!("templates/translate_user.j2"),
    ),
    (
        "glossary_system",
        include_str!("templates/glossary_system.j2"),
    ),
    ("glossary_user", include_str!("templates/glossary_user.j2")),
    ("review_system", include_str!("templates/review_system.j2")),
    ("review_user", include_str!("templates/review_user.j2")),
    (
        "emphasis_system",
        include_str!("templates/emphasis_system.j2"),
    ),
    ("emphasis_user", include_str!("templates/emphasis_user.j2")),
    (
        "translate_hy_mt",
        include_str!("templates/translate_hy_mt.j2"),
    ),
];

/// Marker rendered where the per-call part of a user message begins (removed before use).
const SPLIT: &str = "\u{E001}";

/// A conversation plus the point where its per-call content starts.
#[derive(Debug, Clone)]
pub struct AgentPrompt {
    /// Messages (system, user).
    pub messages: Vec<Message>,
    /// Start of the per-call content.
    pub split: SplitPoint,
}

/// Human name of a language code: its profile's, else the code itself.
pub fn language_name(code: &str) -> String {
    crate::lang::profile(code).map_or_else(|| code.to_string(), |p| p.name.to_string())
}

fn render(name: &str, ctx: minijinja::Value) -> Result<String> {
    let mut env = Environment::new();
    env.set_keep_trailing_newline(true);
    for (n, src) in TEMPLATES {
        env.add_template(n, src)?;
    }
    env.get_template(name)?
        .render(ctx)
        .map_err(|e| anyhow!("prompt template {name}: {e}"))
}

fn with_split(system: String, user: String) -> Result<AgentPrompt> {
    let offset = user
        .find(SPLIT)
        .ok_or_else(|| anyhow!("prompt template lacks its split marker"))?;
    let user = user.replacen(SPLIT, "", 1);
    Ok(AgentPrompt {
        messages: vec![Message::system(system), Message::user(user)],
        split: SplitPoint { message: 1, offset },
    })
}

/// A glossary term as the templates see it.
#[derive(Serialize)]
struct TermView<'a> {
    source: &'a str,
    /// The preferred translation (the source itself: keep the term as it is).
    target: &'a str,
    /// A house term: required. Otherwise a suggestion.
    strict: bool,
    /// The term stays as it is in the source language.
    keep: bool,
}

fn views(terms: &[GlossaryEntry]) -> Vec<TermView<'_>> {
    terms
        .iter()
        .map(|t| TermView {
            source: &t.source,
            target: t.preferred(),
            strict: t.house,
            keep: t.keeps_source(),
        })
        .collect()
}

/// The translation agent's prompt for one passage (one line per segment). `findings` are
/// the problems of a previous attempt (revision). `example`, a passage of the same chapter
/// and its accepted translation, goes before the passage as an earlier turn of the
/// conversation — part of the stable prefix, so it is computed once per chapter.
#[allow(clippy::too_many_arguments)]
pub fn translate_prompt(
    guide: &str,
    source_lang: &str,
    target_lang: &str,
    glossary: &[GlossaryEntry],
    unit_terms: &[GlossaryEntry],
    findings: &[String],
    passage: &str,
    example: Option<(&str, &str)>,
) -> Result<AgentPrompt> {
    let system = render(
        "translate_system",
        minijinja::context! {
            guide => guide.trim(), source_lang, target_lang, glossary => views(glossary),
            source_name => language_name(source_lang),
        },
    )?;
    let user = render(
        "translate_user",
        minijinja::context! {
            target_name => language_name(target_lang), split => SPLIT,
            terms => views(unit_terms), findings, passage,
            lines => passage.split('\n').count(),
        },
    )?;
    let mut prompt = with_split(system, user)?;
    if let Some((passage, reply)) = example {
        let asked = render(
            "translate_user",
            minijinja::context! {
                target_name => language_name(target_lang), split => "",
                terms => Vec::<TermView>::new(), findings => Vec::<String>::new(), passage,
                lines => passage.split('\n').count(),
            },
        )?;
        prompt.messages.splice(
            1..1,
            [Message::user(asked), Message::assistant(reply.to_string())],
        );
        prompt.split.message += 2;
    }
    Ok(prompt)
}

/// The translation agent's prompt for `profile`: [`translate_prompt`] for
/// [`PromptProfile::Guide`] (byte for byte), [`hy_mt_translate_prompt`] for
/// [`PromptProfile::HyMt`] (which takes only the languages, the passage's terms and the
/// passage).
#[allow(clippy::too_many_arguments)]
pub fn translate_prompt_for(
    profile: PromptProfile,
    guide: &str,
    source_lang: &str,
    target_lang: &str,
    glossary: &[GlossaryEntry],
    unit_terms: &[GlossaryEntry],
    findings: &[String],
    passage: &str,
    example: Option<(&str, &str)>,
) -> Result<AgentPrompt> {
    match profile {
        PromptProfile::Guide => translate_prompt(
            guide,
            source_lang,
            target_lang,
            glossary,
            unit_terms,
            findings,
            passage,
            example,
        ),
        PromptProfile::HyMt => {
            hy_mt_translate_prompt(source_lang, target_lang, unit_terms, passage)
        }
    }
}

/// The translation prompt Tencent documents for its translation models (HY-MT1.5's model
/// card; Hy-MT2's has the same wording): one user message and no system message (the models
/// have none). A pair with Chinese on either side gets the Chinese instruction
/// ("将以下文本翻译为中文，注意只需要输出翻译后的结果，不要额外解释：", a blank line, the passage),
/// any other pair the English one ("Translate the following segment into French, without
/// additional explanation.", a blank line, the passage). The passage's terms (`unit_terms`)
/// go first in the cards' terminology-intervention format: "参考下面的翻译：", one
/// "TERM 翻译成 TRANSLATION" line each, a blank line, the Chinese instruction and the
/// passage on the next line. The guide, a chapter's worked example and a previous attempt's
/// findings are not sent: the documented formats have no place for them. The per-call part
/// starts after the instruction, or at the start where the terms (which differ per passage)
/// lead.
pub fn hy_mt_translate_prompt(
    source_lang: &str,
    target_lang: &str,
    unit_terms: &[GlossaryEntry],
    passage: &str,
) -> Result<AgentPrompt> {
    let (target_en, target_zh) = crate::lang::names::hy_mt_names(target_lang);
    let chinese = [source_lang, target_lang]
        .iter()
        .any(|l| crate::lang::names::hy_mt_chinese(l));
    let user = render(
        "translate_hy_mt",
        minijinja::context! {
            terms => views(unit_terms), chinese, target_en, target_zh, passage, split => SPLIT,
        },
    )?;
    let offset = user
        .find(SPLIT)
        .ok_or_else(|| anyhow!("prompt template lacks its split marker"))?;
    Ok(AgentPrompt {
        messages: vec![Message::user(user.replacen(SPLIT, "", 1))],
        split: SplitPoint { message: 0, offset },
    })
}

/// The glossary agent's prompt for one candidate term.
pub fn glossary_prompt(
    source_lang: &str,
    target_lang: &str,
    house: &[GlossaryEntry],
    term: &str,
    context: &str,
) -> Result<AgentPrompt> {
    let names = (language_name(source_lang), language_name(target_lang));
    let system = render(
        "glossary_system",
        minijinja::context! {
            source_name => names.0, target_name => names.1.clone(), house => views(house),
        },
    )?;
    let user = render(
        "glossary_user",
        minijinja::context! { target_name => names.1, split => SPLIT, term, context },
    )?;
    with_split(system, user)
}

/// The proofreading agent's prompt for one unit.
pub fn review_prompt(
    source_lang: &str,
    target_lang: &str,
    glossary: &[GlossaryEntry],
    source: &str,
    translation: &str,
) -> Result<AgentPrompt> {
    let names = (language_name(source_lang), language_name(target_lang));
    let system = render(
        "review_system",
        minijinja::context! {
            source_name => names.0, target_name => names.1, glossary => views(glossary),
        },
    )?;
    let user = render(
        "review_user",
        minijinja::context! { split => SPLIT, source, translation },
    )?;
    with_split(system, user)
}

/// The emphasis agent's prompt: which words of `translation` (one line) translate
/// `phrase`, a bold span of `source` (the line it translates). The stable part ends after
/// the two lines, so the questions about one line's phrases share its prefix.
pub fn emphasis_prompt(
    source_lang: &str,
    target_lang: &str,
    source: &str,
    translation: &str,
    phrase: &str,
) -> Result<AgentPrompt> {
    let names = (language_name(source_lang), language_name(target_lang));
    let system = render(
        "emphasis_system",
        minijinja::context! { source_name => names.0.clone(), target_name => names.1 },
    )?;
    let ask = |source: &str, translation: &str, phrase: &str| {
        render(
            "emphasis_user",
            minijinja::context! {
                source_name => names.0.clone(), split => SPLIT, source, translation, phrase,
            },
        )
    };
    let mut prompt = with_split(system, ask(source, translation, phrase)?)?;
    // Worked examples as earlier turns (where the target's profile has them): part of the
    // stable prefix.
    let examples = crate::lang::profile_or_latin(target_lang).emphasis_examples;
    if !examples.is_empty() {
        let mut turns = Vec::new();
        for (s, t, p, a) in examples {
            turns.push(Message::user(ask(s, t, p)?.replacen(SPLIT, "", 1)));
            turns.push(Message::assistant(a.to_string()));
        }
        let n = turns.len();
        prompt.messages.splice(1..1, turns);
        prompt.split.message += n;
    }
    Ok(prompt)
}

/// An answer that is a piece of one text, held to it at decode time: every token keeps the
/// reply a substring of `text`, with no line break and no emphasis or code delimiter in it,
/// and the reply may end only where it is non-empty, whole characters, and not padded with
/// spaces. (A backend that cannot apply decode-time constraints gets the instruction in
/// the prompt only; the caller checks the reply again.)
pub struct PieceOf {
    /// The text the reply is copied from.
    pub text: String,
}

impl TextConstraint for PieceOf {
    fn allows(&self, text: &[u8], next: &[u8]) -> bool {
        if next
            .iter()
            .any(|b| matches!(b, b'\n' | b'\r' | b'*' | b'`'))
        {
            return false;
        }
        let reply = [text, next].concat();
        reply.first() != Some(&b' ') && contains_bytes(self.text.as_bytes(), &reply)
    }

    fn allows_end(&self, text: &[u8]) -> bool {
        std::str::from_utf8(text)
            .is_ok_and(|t| !t.trim().is_empty() && t.trim() == t && self.text.contains(t))
    }
}

/// Whether `needle` occurs in `haystack` (bytes; a token may end inside a character).
fn contains_bytes(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || haystack.windows(needle.len()).any(|w| w == needle)
}

/// The shape a verdict is held to at decode time: `OK`, or one to three lines that each
/// start with `- ` and name a problem. Left free, the small models answer a translation
/// they find faithful with prose ("The translation is faithful and fluent."), which the
/// report would list as a problem. (A backend that cannot apply decode-time constraints
/// gets the instruction in the prompt only.)
pub struct VerdictShape;

impl TextConstraint for VerdictShape {
    fn allows(&self, text: &[u8], next: &[u8]) -> bool {
        verdict_prefix(&[text, next].concat())
    }

    fn allows_end(&self, text: &[u8]) -> bool {
        text == b"OK" || {
            let body = text.strip_suffix(b"\n").unwrap_or(text);
            verdict_prefix(text) && body.split(|&b| b == b'\n').all(|l| l.len() > 2)
        }
    }
}

/// Whether `t` can still become a verdict of [`VerdictShape`]'s shape.
fn verdict_prefix(t: &[u8]) -> bool {
    if b"OK".starts_with(t) {
        return true;
    }
    let lines: Vec<&[u8]> = t.split(|&b| b == b'\n').collect();
    lines.len() <= 3
        && lines.iter().enumerate().all(|(i, l)| {
            if i + 1 == lines.len() {
                b"- ".starts_with(l) || l.starts_with(b"- ")
            } else {
                l.starts_with(b"- ") && l.len() > 2
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stable_part_is_identical_across_units() {
        let g = vec![GlossaryEntry::house("token", "词元")];
        let a = translate_prompt(
            DEFAULT_GUIDE,
            "en",
            "zh-CN",
            &g,
            &[],
            &[],
            "First {{1}} passage.",
            None,
        )
        .unwrap();
        let b = translate_prompt(
            DEFAULT_GUIDE,
            "en",
            "zh-CN",
            &g,
            &g,
            &["missing {{2}}".into()],
            "Second.",
            None,
        )
        .unwrap();
        assert_eq!(a.messages[0], b.messages[0]);
        assert_eq!(a.split, b.split);
        let head = |p: &AgentPrompt| p.messages[1].content[..p.split.offset].to_string();
        assert_eq!(head(&a), head(&b));
        assert!(
            a.messages[1].content.ends_with("First {{1}} passage.\n"),
            "{:?}",
            a.messages[1].content
        );
        assert!(a.messages[0].content.contains("token → 词元"));
        assert!(b.messages[1]
            .content
            .contains("Terms in this passage: token → 词元."));
        assert!(!a.messages[1].content.contains('\u{E001}'));
    }

    #[test]
    fn a_worked_example_is_an_earlier_turn_inside_the_stable_prefix() {
        let ex = Some((
            "The cache is on disk.\nIt is fast.",
            "缓存在磁盘上。\n它很快。",
        ));
        let p = |passage: &str| {
            translate_prompt(DEFAULT_GUIDE, "en", "zh-CN", &[], &[], &[], passage, ex).unwrap()
        };
        let (a, b) = (p("First."), p("Second passage."));
        assert_eq!(a.messages.len(), 4);
        assert_eq!(a.messages[2].role, "assistant");
        assert_eq!(a.messages[2].content, "缓存在磁盘上。\n它很快。");
        assert!(a.messages[1].content.contains("(2 lines:"));
        assert!(a.messages[1]
            .content
            .ends_with("The cache is on disk.\nIt is fast.\n"));
        assert_eq!(a.split.message, 3);
        assert_eq!(a.messages[..3], b.messages[..3]);
        let head = |p: &AgentPrompt| p.messages[3].content[..p.split.offset].to_string();
        assert_eq!(head(&a), head(&b));
        assert!(a.messages[3].content.ends_with("First.\n"));
        assert!(!a.messages[1].content.contains('\u{E001}'));
    }

    #[test]
    fn the_guide_profile_is_todays_prompt() {
        let g = vec![GlossaryEntry::house("token", "词元")];
        let ex = Some(("The cache is on disk.", "缓存在磁盘上。"));
        for (terms, findings, example) in [
            (&[][..], &[][..], None),
            (&g[..], &["missing {{2}}".to_string()][..], ex),
        ] {
            let a = translate_prompt(
                DEFAULT_GUIDE,
                "en",
                "zh-CN",
                &g,
                terms,
                findings,
                "A {{1}} passage.",
                example,
            )
            .unwrap();
            let b = translate_prompt_for(
                PromptProfile::Guide,
                DEFAULT_GUIDE,
                "en",
                "zh-CN",
                &g,
                terms,
                findings,
                "A {{1}} passage.",
                example,
            )
            .unwrap();
            assert_eq!(a.messages, b.messages);
            assert_eq!(a.split, b.split);
        }
    }

    #[test]
    fn the_hy_mt_profile_sends_the_documented_prompt() {
        let p = |terms: &[GlossaryEntry], to: &str, passage: &str| {
            translate_prompt_for(
                PromptProfile::HyMt,
                DEFAULT_GUIDE,
                "en",
                to,
                &[GlossaryEntry::house("cache", "缓存")],
                terms,
                &["ignored".into()],
                passage,
                Some(("ignored", "忽略")),
            )
            .unwrap()
        };
        let plain = p(&[], "zh-CN", "The cache is on disk.\nIt is fast.");
        assert_eq!(plain.messages.len(), 1);
        assert_eq!(plain.messages[0].role, "user");
        let text = &plain.messages[0].content;
        assert_eq!(
            text,
            "将以下文本翻译为中文，注意只需要输出翻译后的结果，不要额外解释：\n\nThe cache is on disk.\nIt is fast."
        );
        assert_eq!(
            &text[plain.split.offset..],
            "The cache is on disk.\nIt is fast."
        );
        assert_eq!(plain.split.message, 0);
        // Another passage shares everything before the split.
        let other = p(&[], "zh-CN", "Second.");
        assert_eq!(
            other.messages[0].content[..other.split.offset],
            text[..plain.split.offset]
        );

        let terms = [
            GlossaryEntry::house("prefix cache", "前缀缓存"),
            GlossaryEntry::house("token", "词元"),
        ];
        let with_terms = p(&terms, "zh", "The prefix cache holds every token.");
        assert_eq!(
            with_terms.messages[0].content,
            "参考下面的翻译：\nprefix cache 翻译成 前缀缓存\ntoken 翻译成 词元\n\n将以下文本翻译为中文，注意只需要输出翻译后的结果，不要额外解释：\nThe prefix cache holds every token."
        );
        assert_eq!(with_terms.split.offset, 0);

        let french = translate_prompt_for(
            PromptProfile::HyMt,
            DEFAULT_GUIDE,
            "en",
            "fr",
            &[],
            &[],
            &[],
            "Hello.",
            None,
        )
        .unwrap();
        assert_eq!(
            french.messages[0].content,
            "Translate the following segment into French, without additional explanation.\n\nHello."
        );
        assert!(!text.contains('\u{E001}'));
    }

    #[test]
    fn a_verdict_is_ok_or_up_to_three_problem_lines() {
        let v = VerdictShape;
        // Byte by byte, as tokens could bring it.
        let grows = |t: &str| {
            (1..=t.len()).all(|i| v.allows(&t.as_bytes()[..i - 1], &t.as_bytes()[i - 1..i]))
        };
        for good in ["OK", "- 漏译了第二句。", "- one\n- two\n- three"] {
            assert!(grows(good) && v.allows_end(good.as_bytes()), "{good:?}");
        }
        assert!(!v.allows(b"", b"The"), "prose is not a verdict");
        assert!(!v.allows(b"OK", b"."), "nothing after OK");
        assert!(!v.allows(b"- a\n- b\n- c", b"\n"), "three lines at most");
        assert!(!v.allows(b"- a", b"\n\n"), "no empty line");
        assert!(!v.allows(b"- a\n", b"b"), "every line is a problem line");
        for unfinished in ["", "O", "-", "- ", "- a\n- "] {
            assert!(!v.allows_end(unfinished.as_bytes()), "{unfinished:?}");
        }
    }
}
