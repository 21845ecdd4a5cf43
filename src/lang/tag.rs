//! BCP 47 language tags (`zh-Hans`, `zh-CN`, `ja`, `pt-BR`) read into Quire's profiles,
//! and the language pairs Quire translates.

use super::profile::Profile;
use super::profiles;
use anyhow::{bail, Result};

/// A language pair Quire translates, as the profiles of its two sides.
#[derive(Debug, Clone, Copy)]
pub struct Pair {
    /// The source language.
    pub source: &'static Profile,
    /// The target language.
    pub target: &'static Profile,
}

/// The pairs Quire translates (source primary subtag, target primary subtag): each has a
/// guide, number and punctuation rules and checks.
const PAIRS: &[(&str, &str)] = &[
    ("en", "zh"),
    ("en", "ja"),
    ("en", "ko"),
    ("en", "de"),
    ("en", "fr"),
    ("en", "es"),
    ("zh", "en"),
];

/// The subtags of a well-formed tag (letters and digits, 1–8 each, `-` or `_` between),
/// or `None`.
fn subtags(tag: &str) -> Option<Vec<String>> {
    let parts: Vec<String> = tag
        .trim()
        .split(['-', '_'])
        .map(str::to_ascii_lowercase)
        .collect();
    let ok = parts
        .iter()
        .all(|p| (1..=8).contains(&p.len()) && p.chars().all(|c| c.is_ascii_alphanumeric()));
    let first = parts.first()?;
    (ok && (2..=3).contains(&first.len()) && first.chars().all(|c| c.is_ascii_alphabetic()))
        .then_some(parts)
}

/// The profile of a BCP 47 tag, or `None` for a language Quire has no profile for (or a
/// malformed tag). Chinese must be the simplified script: `zh`, `zh-CN`, `zh-SG`,
/// `zh-Hans`, `zh-Hans-CN`; `zh-TW`, `zh-HK`, `zh-MO` and `zh-Hant` are Traditional
/// Chinese, which has no profile yet. Other regions and scripts (`de-AT`, `en-GB`,
/// `pt-BR`) select the language's profile, or none.
pub fn profile(tag: &str) -> Option<&'static Profile> {
    let parts = subtags(tag)?;
    let primary = parts[0].as_str();
    if primary == "zh" {
        let traditional = parts[1..]
            .iter()
            .any(|p| matches!(p.as_str(), "hant" | "tw" | "hk" | "mo"));
        if traditional {
            return None;
        }
    }
    profiles::ALL
        .iter()
        .copied()
        .find(|p| p.primary() == primary)
}

/// The supported pairs, written for an error message: `en → zh-CN, ja, …; zh-CN → en`.
pub fn supported_pairs_text() -> String {
    fn code(primary: &'static str) -> &'static str {
        profiles::ALL
            .iter()
            .find(|p| p.primary() == primary)
            .map_or(primary, |p| p.code)
    }
    let mut sources: Vec<&str> = Vec::new();
    for (s, _) in PAIRS {
        if !sources.contains(s) {
            sources.push(s);
        }
    }
    sources
        .iter()
        .map(|s| {
            let targets: Vec<&str> = PAIRS
                .iter()
                .filter(|(f, _)| f == s)
                .map(|(_, t)| code(t))
                .collect();
            format!("{} → {}", code(s), targets.join(", "))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

impl Pair {
    /// The pair `from` → `to` (BCP 47 tags), or an error naming the supported pairs.
    pub fn new(from: &str, to: &str) -> Result<Pair> {
        let known = |tag: &str, flag: &str| {
            match profile(tag) {
            Some(p) => Ok(p),
            None => bail!(
                "unsupported language {flag} {tag:?}: supported pairs: {} (BCP 47 tags such as zh-Hans, zh-CN, ja, de-DE are read by their language)",
                supported_pairs_text()
            ),
        }
        };
        let (source, target) = (known(from, "--from")?, known(to, "--to")?);
        if !PAIRS.contains(&(source.primary(), target.primary())) {
            bail!(
                "unsupported language pair {from} → {to}: supported pairs: {}",
                supported_pairs_text()
            );
        }
        Ok(Pair { source, target })
    }
}

/// The profile for a target or source code the pipeline was given (already checked by
/// [`Pair::new`] at the edge); a code without a profile gets English's (a Latin-script
/// language: no typography rules beyond kept terms, the source's punctuation).
pub fn profile_or_latin(tag: &str) -> &'static Profile {
    profile(tag).unwrap_or(&profiles::EN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bcp47_tags_select_profiles() {
        for t in ["zh", "zh-CN", "zh-Hans", "zh_cn", "zh-Hans-CN", "ZH-sg"] {
            assert_eq!(profile(t).map(|p| p.code), Some("zh-CN"), "{t}");
        }
        for t in [
            "zh-TW", "zh-Hant", "zh-HK", "pt-BR", "xx", "", "e", "en--", "1a",
        ] {
            assert!(profile(t).is_none(), "{t}");
        }
        assert_eq!(profile("de-AT").map(|p| p.code), Some("de"));
        assert_eq!(profile("en-GB").map(|p| p.code), Some("en"));
        assert_eq!(profile("ja-JP").map(|p| p.code), Some("ja"));
    }

    #[test]
    fn pairs_are_checked_with_the_supported_list() {
        for (f, t) in [
            ("en", "zh-Hans"),
            ("en-US", "ja"),
            ("en", "ko"),
            ("zh-CN", "en"),
        ] {
            assert!(Pair::new(f, t).is_ok(), "{f} → {t}");
        }
        let e = Pair::new("en", "pt-BR").unwrap_err().to_string();
        assert!(
            e.contains("\"pt-BR\"") && e.contains("en → zh-CN, ja, ko, de, fr, es"),
            "{e}"
        );
        let e = Pair::new("de", "fr").unwrap_err().to_string();
        assert!(
            e.contains("pair de → fr") && e.contains("zh-CN → en"),
            "{e}"
        );
        assert!(Pair::new("en", "zh-TW").is_err());
    }
}
