//! What plain prose keeps as written though no markup marks it: bare URLs, identifiers,
//! camel-case names, and the bibliographic references footnotes end with. The scanner
//! protects what these find.

use regex::Regex;
use std::ops::Range;
use std::sync::LazyLock;

/// Where a bibliographic reference starts: an author (`Shinn, N., et al.`, `Li, Bojie.`,
/// an organisation such as `Anthropic.`) followed by a title in italics or quotes, or by a
/// year in parentheses.
static CITATION_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"\b[A-Z][\p{L}'’-]+(?:,\s(?:(?:[A-Z]\.\s?)+|[A-Z][\p{L}-]+))?(?:,?\set\sal\.)?(?:\.?\s+[*_“\x22]|\s\((?:19|20)\d\d[a-z]?\))",
    )
    .expect("valid citation regex")
});

/// A code identifier in prose: an e-mail address, dotted (`a.b`, at least one part longer
/// than a letter, so not `e.g`) or snake_case (`user_id`).
pub(super) static IDENTIFIER_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+\b|\b[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+\b|\b[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)+\b")
        .expect("valid identifier regex")
});

/// A camel-case name: a lower-case letter followed by a capital inside one word
/// (`GraphRAG`, `ReAct`, `iPhone`; not `LLMs`, `Tool-Based` or `GPT-4`).
pub(super) static NAME_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\b[A-Za-z][A-Za-z0-9]*[a-z][A-Z][A-Za-z0-9]*\b").expect("valid name regex")
});

/// Whether an identifier match is one (not an abbreviation such as `e.g` or `U.S`).
pub(super) fn is_identifier(m: &str) -> bool {
    m.contains('_') || m.split('.').any(|p| p.len() > 1)
}

static YEAR_RE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\b(?:19|20)\d\d\b").expect("valid year regex"));

/// Where a footnote definition's `[^x]:` label ends.
pub(super) fn footnote_label_end(def: &str) -> Option<usize> {
    def.starts_with("[^")
        .then(|| def.find("]:").map(|p| p + 2))
        .flatten()
}

/// The bibliographic reference a footnote definition (`[^x]: …`) ends with, as a range of
/// `def` (from its author to the end of that line), when it has one: an author and a
/// title, and a year after them.
pub(crate) fn footnote_citation(def: &str) -> Option<Range<usize>> {
    let from = footnote_label_end(def)?;
    let m = CITATION_RE.find(def.get(from..)?)?;
    let start = from + m.start();
    let end = def[start..].find('\n').map_or(def.len(), |p| start + p);
    YEAR_RE
        .is_match(&def[start..end])
        .then(|| start..start + def[start..end].trim_end().len())
}

/// Bare URLs in prose: `http(s)://`, `ftp://` or `www.` followed by printable ASCII.
pub(crate) static BARE_URL_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)(?-u:\b)(?:https?://|ftp://|www\.)[\x21-\x7e&&[^<>`]]+")
        .expect("valid url regex")
});

/// Trim punctuation that ends a sentence rather than the URL, and unbalanced closers.
pub(crate) fn trim_url(url: &str) -> &str {
    let mut u = url;
    loop {
        let before = u.len();
        u = u.trim_end_matches(['.', ',', ';', ':', '!', '?', '\'', '"', '*', '~']);
        for (open, close) in [('(', ')'), ('[', ']'), ('{', '}')] {
            if u.ends_with(close) && u.matches(open).count() < u.matches(close).count() {
                u = &u[..u.len() - 1];
            }
        }
        if u.len() == before {
            return u;
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::units::segment::roundtrip;
    use crate::units::types::PlaceholderKind;

    #[test]
    fn identifiers_in_prose_are_kept() {
        let units = roundtrip(
            "Keys such as personal.contact.email or user_id stay, e.g. in config.json; U.S. style too. Mail john.doe@example.com.\n",
            1000,
        );
        let kept: Vec<&str> = units[0]
            .placeholders
            .iter()
            .map(|p| p.original.as_str())
            .collect();
        assert_eq!(
            kept,
            vec![
                "personal.contact.email",
                "user_id",
                "config.json",
                "john.doe@example.com"
            ]
        );
    }

    #[test]
    fn citations_in_footnotes_are_kept_as_published() {
        let text = "Text[^a][^b][^c].\n\n[^a]: The design can be found in Li, Bojie. *User as Code: Executable Memory.* arXiv:2606.16707, 2026.\n[^b]: Shinn, N., et al. *Reflexion: Language Agents.* arXiv:2303.11366, 2023.\n[^c]: Karpathy, A. “We’re missing a paradigm.” X, May 11, 2025. https://x.com/k/1\n\n[^d]: Notes on Python. *Not a citation* without a year.\n";
        let units = roundtrip(text, 1000);
        let cited: Vec<&str> = units
            .iter()
            .flat_map(|u| &u.placeholders)
            .filter(|p| p.kind == PlaceholderKind::Citation)
            .map(|p| p.original.as_str())
            .collect();
        assert_eq!(
            cited,
            vec![
                "Li, Bojie. *User as Code: Executable Memory.* arXiv:2606.16707, 2026.",
                "Shinn, N., et al. *Reflexion: Language Agents.* arXiv:2303.11366, 2023.",
                "Karpathy, A. “We’re missing a paradigm.” X, May 11, 2025. https://x.com/k/1",
            ]
        );
        let all: String = units.iter().map(|u| u.protected.as_str()).collect();
        assert!(all.contains("The design can be found in {{"), "{all}");
        assert!(all.contains("*Not a citation* without a year."), "{all}");
    }
}
