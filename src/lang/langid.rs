//! Paragraph language identification: which language a paragraph of prose is in, by
//! `whatlang` (trigram and script statistics, MIT licence, no model files). A small model
//! drifting into the wrong language (English left in a Japanese book, Chinese in a Korean
//! one, German answered in English) is flagged per paragraph.

use super::profile::Profile;
use super::ScriptCounts;
use whatlang::{Detector, Lang};

/// Fewest letters a paragraph needs before its language is told (shorter text — a
/// heading of two words, a caption — is too little to identify reliably).
pub const MIN_LETTERS: usize = 24;

/// Lowest confidence of an identification that is acted on (whatlang's own `is_reliable`
/// also wants a margin that one-sentence paragraphs rarely reach).
const MIN_CONFIDENCE: f64 = 0.6;

/// The languages told apart: the ones Quire translates between plus the neighbours a
/// model drifts into. Limiting the choice makes short paragraphs more reliable.
const CANDIDATES: [Lang; 12] = [
    Lang::Eng,
    Lang::Cmn,
    Lang::Jpn,
    Lang::Kor,
    Lang::Deu,
    Lang::Fra,
    Lang::Spa,
    Lang::Ita,
    Lang::Por,
    Lang::Nld,
    Lang::Rus,
    Lang::Vie,
];

/// What a paragraph was identified as.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Identified {
    /// The language's English name (`German`).
    pub name: &'static str,
    /// Its ISO 639-3 code (`deu`).
    pub code: &'static str,
    /// whatlang's confidence, 0–1.
    pub confidence: f64,
}

/// The language of `text` when it is not `target`'s: `None` when the text is in the
/// target language, too short to tell ([`MIN_LETTERS`]) or identified with too little
/// confidence. For
/// a CJK target a paragraph with at least a third of its weight in the target's scripts
/// counts as the target's (technical CJK prose carries many English names).
pub fn other_language(text: &str, target: &Profile) -> Option<Identified> {
    if text.chars().filter(|c| c.is_alphabetic()).count() < MIN_LETTERS {
        return None;
    }
    let info = Detector::with_allowlist(CANDIDATES.to_vec()).detect(text)?;
    if info.lang() == target.whatlang || info.confidence() < MIN_CONFIDENCE {
        return None;
    }
    if target.is_cjk() {
        let sc = ScriptCounts::of(text);
        let own: f64 = target.scripts.iter().map(|&s| sc.share(s)).sum();
        if own >= 1.0 / 3.0 && !kana_where_none_belongs(&sc, target, info.lang()) {
            return None;
        }
    }
    Some(Identified {
        name: info.lang().eng_name(),
        code: info.lang().code(),
        confidence: info.confidence(),
    })
}

/// Kana in a paragraph of a target written without it (Japanese in a Chinese book):
/// told as Japanese even where its Han characters are the target's.
fn kana_where_none_belongs(sc: &ScriptCounts, target: &Profile, found: Lang) -> bool {
    found == Lang::Jpn
        && !target.scripts.contains(&super::Script::Kana)
        && sc.share(super::Script::Kana) > 0.1
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lang::profile;

    fn p(tag: &str) -> &'static Profile {
        profile(tag).expect("a profile")
    }

    #[test]
    fn paragraphs_in_another_language_are_named() {
        let en = "The cache is stored on disk, so a restart of the server costs only a few milliseconds.";
        let de = "Der Cache wird auf der Festplatte gespeichert, daher kostet ein Neustart des Servers nur wenige Millisekunden.";
        let zh = "缓存保存在磁盘上，因此重启服务器只需要几毫秒，这让 Agent 的 Prompt 可以在多次调用之间复用前缀缓存。";
        let ja = "キャッシュはディスクに保存されるため、サーバーの再起動にかかる時間はわずか数ミリ秒です。";
        assert_eq!(other_language(en, p("de")).map(|i| i.code), Some("eng"));
        assert_eq!(other_language(de, p("de")), None);
        assert_eq!(other_language(en, p("zh-CN")).map(|i| i.code), Some("eng"));
        assert_eq!(other_language(zh, p("zh-CN")), None);
        assert_eq!(other_language(zh, p("en")).map(|i| i.code), Some("cmn"));
        assert_eq!(other_language(ja, p("ja")), None);
        assert_eq!(other_language(ja, p("zh-CN")).map(|i| i.code), Some("jpn"));
        assert_eq!(other_language(zh, p("ko")).map(|i| i.code), Some("cmn"));
        assert_eq!(
            other_language("Prompt 与 Agent", p("zh-CN")),
            None,
            "too short"
        );
    }
}
