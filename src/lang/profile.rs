//! What the pipeline knows about writing one language: a [`Profile`] is plain data (the
//! values live in [`super::profiles`]) plus the few questions generic code asks of it.

use super::Script;

/// A typography rule applied to each translated line ([`crate::translate::typography`]),
/// named for what it does in the language. A profile lists its rules in the order they run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// A term kept in the source language that the model translated anyway is written
    /// back where the model put its word for it.
    KeptTermsBack,
    /// An acronym's expansion the model translated or dropped is written back beside it.
    AcronymExpansions,
    /// East Asian spacing and punctuation (`autocorrect`): one space between CJK text and a
    /// Latin word or a number, full-width punctuation in CJK sentences.
    CjkSpacing,
    /// Kept terms and acronyms written in the singular (the language does not inflect
    /// nouns for number): `Agents` → `Agent`, `LLMs` → `LLM`.
    UninflectedKeptTerms,
    /// A space between two CJK characters that the source line does not have there is
    /// dropped (`系统 提示词` → `系统提示词`, where a house term follows a translated word).
    NoSpaceInsideCjkWords,
    /// Straight double quotes around CJK text as the language's curly ones, without
    /// spaces between them and the text around them.
    CurlyQuotes,
    /// Half-width parentheses in a CJK sentence written full-width.
    FullWidthParentheses,
    /// A bold span closed after a full-width mark moved so that it renders.
    BoldBeforeFullWidthMarks,
    /// A figure or table label set apart from its caption by a space, not a colon
    /// (`图 3-5：标题` → `图 3-5 标题`).
    CaptionLabelWithoutColon,
    /// A chapter number written in the language's numerals (`第 2 章` → `第二章`).
    ChapterNumberInNumerals,
}

impl Rule {
    /// Every rule, in the order of [`Rule::name`]s listed by `--skip-pass`.
    pub const ALL: [Rule; 10] = [
        Rule::KeptTermsBack,
        Rule::AcronymExpansions,
        Rule::CjkSpacing,
        Rule::UninflectedKeptTerms,
        Rule::NoSpaceInsideCjkWords,
        Rule::CurlyQuotes,
        Rule::FullWidthParentheses,
        Rule::BoldBeforeFullWidthMarks,
        Rule::CaptionLabelWithoutColon,
        Rule::ChapterNumberInNumerals,
    ];

    /// The rule's name (`--skip-pass NAME` switches it off).
    pub fn name(self) -> &'static str {
        match self {
            Rule::KeptTermsBack => "kept-terms-back",
            Rule::AcronymExpansions => "acronym-expansions",
            Rule::CjkSpacing => "cjk-spacing",
            Rule::UninflectedKeptTerms => "uninflected-kept-terms",
            Rule::NoSpaceInsideCjkWords => "no-space-inside-cjk-words",
            Rule::CurlyQuotes => "curly-quotes",
            Rule::FullWidthParentheses => "full-width-parentheses",
            Rule::BoldBeforeFullWidthMarks => "bold-before-full-width-marks",
            Rule::CaptionLabelWithoutColon => "caption-label-without-colon",
            Rule::ChapterNumberInNumerals => "chapter-number-in-numerals",
        }
    }
}

/// A chapter number as a language writes it in its own numerals: the words around the
/// number (`第` and `章` in `第二章`) and the numerals.
#[derive(Debug, Clone, Copy)]
pub struct ChapterNumbers {
    /// The word before the number (`第`).
    pub before: &'static str,
    /// The word after the number (`章`).
    pub after: &'static str,
    /// A number (1–99) in the language's numerals (`二`), or `None`.
    pub numerals: fn(usize) -> Option<String>,
}

/// One language as Quire writes (or reads) it.
#[derive(Debug)]
pub struct Profile {
    /// The canonical tag Quire uses for it (`zh-CN`, `ja`, `de`…).
    pub code: &'static str,
    /// Its English name, as prompts name it (`Simplified Chinese`).
    pub name: &'static str,
    /// The scripts its letters are written in, the main one first.
    pub scripts: &'static [Script],
    /// Whether words are separated by spaces (no for Chinese and Japanese).
    pub spaced_words: bool,
    /// The mark that ends a translated clause for each source clause mark (`,` → `，`);
    /// a mark not listed is kept as the source has it.
    pub clause_marks: &'static [(char, &'static str)],
    /// The mark that ends a sentence (`。`, `.`).
    pub full_stop: char,
    /// The marks that end a sentence or clause, full-width where the language has them.
    pub closing_marks: &'static str,
    /// Opening and closing double quotation marks.
    pub quotes: (char, char),
    /// Scale words for large numbers and their values (`万` = 10⁴, `亿` = 10⁸): the
    /// groupings a number of the source may be written in.
    pub scale_words: &'static [(&'static str, f64)],
    /// Typography rules applied to each translated line, in order.
    pub typography: &'static [Rule],
    /// The built-in translation guide into this language (from English; for English, from
    /// Chinese), and its file name as run reports name it.
    pub guide: (&'static str, &'static str),
    /// The lowest share of a paragraph's letters in the language's scripts for it to be
    /// counted as translated (the untranslated check).
    pub min_script_share: f64,
    /// How long a translation from English typically is, in visible characters per source
    /// character (the length-ratio check).
    pub length_from_en: f64,
    /// The language as `whatlang` names it (paragraph language identification).
    pub whatlang: whatlang::Lang,
    /// How the language writes a chapter number in its own numerals (`第二章`); `None`: it
    /// writes digits.
    pub chapter_numbers: Option<ChapterNumbers>,
    /// Figure and table labels that open a caption (`图`, `表`).
    pub caption_labels: &'static [&'static str],
    /// Worked examples of the emphasis agent (which words of a translated line render a
    /// bold phrase of its source): (line, translation, phrase, reply).
    pub emphasis_examples: &'static [(&'static str, &'static str, &'static str, &'static str)],
    /// Words the language writes with a capital that are still translated (as a source:
    /// capitalised, but not names the glossary agent keeps), lower-cased.
    pub capitalised_common_words: &'static [&'static str],
}

impl Profile {
    /// The primary subtag (`zh-CN` → `zh`).
    pub fn primary(&self) -> &'static str {
        self.code.split('-').next().unwrap_or(self.code)
    }

    /// The main script.
    pub fn script(&self) -> Script {
        self.scripts.first().copied().unwrap_or(Script::Latin)
    }

    /// Whether the language is written in CJK characters (Han, kana or Hangul).
    pub fn is_cjk(&self) -> bool {
        matches!(self.script(), Script::Han | Script::Kana | Script::Hangul)
    }

    /// Whether the profile applies `rule`.
    pub fn has(&self, rule: Rule) -> bool {
        self.typography.contains(&rule)
    }

    /// The mark that ends a translated clause whose source ends in `source_end`.
    pub fn clause_mark(&self, source_end: char) -> Option<&'static str> {
        self.clause_marks
            .iter()
            .find(|(c, _)| *c == source_end)
            .map(|(_, m)| *m)
    }

    /// Whether a letter belongs to one of the language's scripts.
    pub fn writes(&self, c: char) -> bool {
        super::script_of(c).is_some_and(|s| self.scripts.contains(&s))
    }
}
