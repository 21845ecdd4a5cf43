//! The languages Quire writes, as data: one [`Profile`] each.

use super::profile::{ChapterNumbers, Profile, Rule};
use super::zh::numerals::{self, chinese_number};
use super::Script;
use whatlang::Lang;

/// English words written with a capital (document parts, languages, months, days, some
/// proper nouns) that are still translated: not names to keep.
const EN_CAPITALISED_COMMON_WORDS: &[&str] = &[
    "chapter",
    "figure",
    "table",
    "section",
    "appendix",
    "experiment",
    "example",
    "part",
    "english",
    "chinese",
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
    "monday",
    "tuesday",
    "wednesday",
    "thursday",
    "friday",
    "saturday",
    "sunday",
    "china",
    "internet",
];

/// Clause marks of Chinese text for the source's clause ends.
const ZH_CLAUSE_MARKS: &[(char, &str)] = &[(',', "，"), (';', "；"), (':', "："), ('—', "——")];
/// Japanese: the reading comma and a full-width colon.
const JA_CLAUSE_MARKS: &[(char, &str)] = &[(',', "、"), (';', "；"), (':', "："), ('—', "——")];
/// Languages written with Western punctuation end a clause with the source's mark.
const LATIN_CLAUSE_MARKS: &[(char, &str)] = &[(',', ","), (';', ";"), (':', ":"), ('—', "—")];

/// Worked examples of the emphasis agent for Chinese: (line, translation, phrase, reply).
const ZH_EMPHASIS_EXAMPLES: &[(&str, &str, &str, &str)] = &[
    (
        "The **prefix cache** is stored on disk, so a restart is cheap.",
        "前缀缓存保存在磁盘上，因此重启的代价很低。",
        "prefix cache",
        "前缀缓存",
    ),
    (
        "Each step writes a checkpoint; this is what makes a run **resumable** after a crash.",
        "每一步都会写入检查点，这正是运行在崩溃后可以恢复的原因。",
        "resumable",
        "可以恢复",
    ),
];

/// Simplified Chinese as Chinese technical books write it.
pub(super) static ZH_HANS: Profile = Profile {
    code: "zh-CN",
    name: "Simplified Chinese",
    scripts: &[Script::Han],
    spaced_words: false,
    clause_marks: ZH_CLAUSE_MARKS,
    full_stop: '。',
    closing_marks: "。，、；：？！",
    quotes: ('“', '”'),
    scale_words: numerals::SCALE_WORDS,
    typography: &[
        Rule::KeptTermsBack,
        Rule::AcronymExpansions,
        Rule::CjkSpacing,
        Rule::UninflectedKeptTerms,
        Rule::CurlyQuotes,
        Rule::FullWidthParentheses,
        Rule::BoldBeforeFullWidthMarks,
        Rule::CaptionLabelWithoutColon,
        Rule::ChapterNumberInNumerals,
        Rule::NoSpaceInsideCjkWords,
    ],
    guide: (include_str!("../prompts/guide.zh-CN.md"), "guide.zh-CN.md"),
    min_script_share: 0.5,
    length_from_en: 0.33,
    whatlang: Lang::Cmn,
    chapter_numbers: Some(ChapterNumbers {
        before: "第",
        after: "章",
        numerals: chinese_number,
    }),
    caption_labels: &["图", "表"],
    emphasis_examples: ZH_EMPHASIS_EXAMPLES,
    capitalised_common_words: &[],
};

/// Japanese.
pub(super) static JA: Profile = Profile {
    code: "ja",
    name: "Japanese",
    scripts: &[Script::Han, Script::Kana],
    spaced_words: false,
    clause_marks: JA_CLAUSE_MARKS,
    full_stop: '。',
    closing_marks: "。、；：？！",
    quotes: ('「', '」'),
    scale_words: &[("万", 1e4), ("億", 1e8)],
    typography: &[
        Rule::KeptTermsBack,
        Rule::CjkSpacing,
        Rule::UninflectedKeptTerms,
        Rule::NoSpaceInsideCjkWords,
    ],
    guide: (include_str!("../prompts/guide.ja.md"), "guide.ja.md"),
    min_script_share: 0.5,
    length_from_en: 0.4,
    whatlang: Lang::Jpn,
    chapter_numbers: None,
    caption_labels: &[],
    emphasis_examples: &[],
    capitalised_common_words: &[],
};

/// Korean: Hangul, words separated by spaces, Western punctuation.
pub(super) static KO: Profile = Profile {
    code: "ko",
    name: "Korean",
    scripts: &[Script::Hangul],
    spaced_words: true,
    clause_marks: LATIN_CLAUSE_MARKS,
    full_stop: '.',
    closing_marks: ".,;:?!",
    quotes: ('“', '”'),
    scale_words: &[("만", 1e4), ("억", 1e8)],
    typography: &[
        Rule::KeptTermsBack,
        Rule::CjkSpacing,
        Rule::UninflectedKeptTerms,
    ],
    guide: (include_str!("../prompts/guide.ko.md"), "guide.ko.md"),
    min_script_share: 0.5,
    length_from_en: 0.45,
    whatlang: Lang::Kor,
    chapter_numbers: None,
    caption_labels: &[],
    emphasis_examples: &[],
    capitalised_common_words: &[],
};

/// A Latin-script language written from English: the source's punctuation, no number
/// scale words, kept terms written back.
const fn latin(
    code: &'static str,
    name: &'static str,
    quotes: (char, char),
    guide: (&'static str, &'static str),
    whatlang: Lang,
) -> Profile {
    Profile {
        code,
        name,
        scripts: &[Script::Latin],
        spaced_words: true,
        clause_marks: LATIN_CLAUSE_MARKS,
        full_stop: '.',
        closing_marks: ".,;:?!",
        quotes,
        scale_words: &[],
        typography: &[Rule::KeptTermsBack],
        guide,
        min_script_share: 0.5,
        length_from_en: 1.1,
        whatlang,
        chapter_numbers: None,
        caption_labels: &[],
        emphasis_examples: &[],
        capitalised_common_words: &[],
    }
}

/// German.
pub(super) static DE: Profile = latin(
    "de",
    "German",
    ('„', '“'),
    (include_str!("../prompts/guide.de.md"), "guide.de.md"),
    Lang::Deu,
);
/// French.
pub(super) static FR: Profile = latin(
    "fr",
    "French",
    ('«', '»'),
    (include_str!("../prompts/guide.fr.md"), "guide.fr.md"),
    Lang::Fra,
);
/// Spanish.
pub(super) static ES: Profile = latin(
    "es",
    "Spanish",
    ('«', '»'),
    (include_str!("../prompts/guide.es.md"), "guide.es.md"),
    Lang::Spa,
);
/// English (as a target, from Chinese; as the source of every other pair).
pub(super) static EN: Profile = Profile {
    capitalised_common_words: EN_CAPITALISED_COMMON_WORDS,
    ..latin(
        "en",
        "English",
        ('“', '”'),
        (include_str!("../prompts/guide.en.md"), "guide.en.md"),
        Lang::Eng,
    )
};

/// Every profile, targets first in the order `--help` lists them.
pub(super) static ALL: [&Profile; 7] = [&ZH_HANS, &JA, &KO, &DE, &FR, &ES, &EN];
