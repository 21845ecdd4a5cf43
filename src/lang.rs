//! Language codes and writing systems: the primary subtag of a code (`zh-CN` → `zh`), the
//! script a language is written in, the script of a letter. The bottom layer that the
//! glossary, the checks and the translation stages share; deterministic, no model.

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
