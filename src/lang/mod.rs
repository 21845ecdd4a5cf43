//! Languages: codes and writing systems (the primary subtag of a code, `zh-CN` → `zh`; the
//! script of a letter), BCP 47 tags and the supported pairs ([`tag`]), and one
//! [`Profile`] per language holding everything the pipeline needs to know about writing it
//! (scripts, punctuation, quotation marks, number forms, spacing, typography rules, the
//! built-in guide, check thresholds); what a whole script shares, whatever the language
//! ([`punct`]: the full-width punctuation of CJK text); Chinese numerals and the two
//! written standards of Chinese ([`zh`]); languages' names as the Hunyuan translation
//! prompt gives them ([`names`]). The bottom layer that the glossary, the checks and
//! the translation stages share; deterministic, no model. Generic code asks the profile;
//! no other module branches on a language code.

use std::collections::HashMap;

pub mod langid;
pub mod names;
mod profile;
mod profiles;
pub mod punct;
pub mod tag;
pub mod zh;

pub use profile::{ChapterNumbers, Profile, Rule};
pub use tag::{profile, profile_or_latin, supported_pairs_text, Pair};
pub use zh::numerals::chinese_number;

/// A bare "none" written for something that has content (a table cell, a heading), in the
/// languages Quire writes: `无`, `N/A`.
pub const NONE_WORDS: [&str; 7] = ["无", "空", "N/A", "n/a", "None", "none", "暂无"];

/// Writing systems the checks and the translation stages tell apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Script {
    /// Latin letters.
    Latin,
    /// Han ideographs (Chinese, Japanese kanji).
    Han,
    /// Hiragana and katakana.
    Kana,
    /// Hangul.
    Hangul,
    /// Cyrillic.
    Cyrillic,
    /// Arabic.
    Arabic,
    /// Greek.
    Greek,
    /// Anything else alphabetic.
    Other,
}

/// The script of a letter, or `None` for non-letters.
pub fn script_of(c: char) -> Option<Script> {
    let u = c as u32;
    Some(match u {
        0x41..=0x5A | 0x61..=0x7A | 0xC0..=0x24F => Script::Latin,
        0x3040..=0x30FF | 0x31F0..=0x31FF | 0xFF66..=0xFF9D => Script::Kana,
        0x3400..=0x4DBF | 0x4E00..=0x9FFF | 0xF900..=0xFAFF | 0x20000..=0x2FA1F => Script::Han,
        0xAC00..=0xD7AF | 0x1100..=0x11FF | 0x3130..=0x318F => Script::Hangul,
        0x400..=0x4FF => Script::Cyrillic,
        0x600..=0x6FF => Script::Arabic,
        0x370..=0x3FF => Script::Greek,
        _ if c.is_alphabetic() => Script::Other,
        _ => return None,
    })
}

/// Weighted script counts: one per Han/Kana/Hangul character, two per word of an
/// alphabetic script (a word carries about as much as two ideographs).
#[derive(Debug, Default, Clone)]
pub struct ScriptCounts {
    counts: HashMap<Script, usize>,
    /// Total weight.
    pub total: usize,
}

impl ScriptCounts {
    /// Count the scripts of `text`.
    pub fn of(text: &str) -> ScriptCounts {
        let mut sc = ScriptCounts::default();
        let mut in_word: Option<Script> = None;
        for c in text.chars() {
            let s = script_of(c);
            match s {
                Some(Script::Han) | Some(Script::Kana) | Some(Script::Hangul) => {
                    in_word = None;
                    *sc.counts.entry(s.expect("some")).or_default() += 1;
                    sc.total += 1;
                }
                Some(s) => {
                    if in_word != Some(s) {
                        *sc.counts.entry(s).or_default() += 2;
                        sc.total += 2;
                        in_word = Some(s);
                    }
                }
                None => {
                    if !c.is_alphanumeric() && c != '\'' && c != '-' {
                        in_word = None;
                    }
                }
            }
        }
        sc
    }

    /// Weight of one script.
    pub fn get(&self, s: Script) -> usize {
        self.counts.get(&s).copied().unwrap_or(0)
    }

    /// Share of one script in the total (0 when empty).
    pub fn share(&self, s: Script) -> f64 {
        if self.total == 0 {
            0.0
        } else {
            self.get(s) as f64 / self.total as f64
        }
    }

    /// The script with the largest weight.
    pub fn dominant(&self) -> Option<Script> {
        let mut v: Vec<(&Script, &usize)> = self.counts.iter().collect();
        v.sort_by(|a, b| {
            b.1.cmp(a.1)
                .then(format!("{:?}", a.0).cmp(&format!("{:?}", b.0)))
        });
        v.first().map(|(s, _)| **s)
    }
}

/// The script a language is written in (by primary subtag); `zh`→Han, `ja`→Han+Kana…
pub fn expected_script(lang: &str) -> Script {
    match primary(lang).as_str() {
        "zh" | "ja" => Script::Han,
        "ko" => Script::Hangul,
        "ru" | "uk" | "bg" | "sr" | "be" | "kk" | "mk" => Script::Cyrillic,
        "ar" | "fa" | "ur" => Script::Arabic,
        "el" => Script::Greek,
        _ => Script::Latin,
    }
}

/// Lower-cased primary language subtag (`zh-CN` → `zh`).
pub fn primary(lang: &str) -> String {
    lang.split(['-', '_'])
        .next()
        .unwrap_or("")
        .to_ascii_lowercase()
}

/// Whether `c` is written without spaces around it in East Asian text: a CJK ideograph,
/// kana, a Hangul syllable, or CJK / full-width punctuation.
pub fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x3000..=0x303F | 0x3040..=0x30FF | 0x3400..=0x4DBF | 0x4E00..=0x9FFF
        | 0xAC00..=0xD7AF | 0xF900..=0xFAFF | 0xFF00..=0xFFEF | 0x20000..=0x2FA1F)
}

/// Whether a language code is Chinese (primary subtag `zh`), in either written standard.
pub fn is_chinese(lang: &str) -> bool {
    primary(lang) == "zh"
}

/// Whether a target language code means Traditional Chinese.
pub fn is_traditional_zh(lang: &str) -> bool {
    let l = lang.to_ascii_lowercase();
    l.starts_with("zh")
        && (l.contains("tw") || l.contains("hk") || l.contains("hant") || l.contains("mo"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_scripts() {
        assert_eq!(primary("zh-CN"), "zh");
        assert_eq!(primary("EN_us"), "en");
        assert_eq!(primary(""), "");
        assert_eq!(expected_script("zh-Hans"), Script::Han);
        assert_eq!(expected_script("ja"), Script::Han);
        assert_eq!(expected_script("ru"), Script::Cyrillic);
        assert_eq!(expected_script("en"), Script::Latin);
        assert!(is_traditional_zh("zh-TW") && is_traditional_zh("zh-Hant"));
        assert!(!is_traditional_zh("zh-CN") && !is_traditional_zh("ja-TW"));
        assert_eq!(script_of('a'), Some(Script::Latin));
        assert_eq!(script_of('词'), Some(Script::Han));
        assert_eq!(script_of('カ'), Some(Script::Kana));
        assert_eq!(script_of('7'), None);
    }
}
