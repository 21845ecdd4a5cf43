//! A unit's structure kept out of the model's text.
//!
//! [`Skeleton::of`] splits a unit's protected text into the Markdown it must keep byte for
//! byte — block-quote markers, list markers, heading markers, footnote-definition labels,
//! table pipes and divider rows, whole-line image syntax, blank lines, hard breaks — and the
//! [`Segment`]s of prose the model translates, one per line (a table cell is a line of its
//! own). The model sees the segments one per line and must answer with exactly as many lines ([`super::constraint::PassageConstraint`] guarantees it while decoding);
//! [`Skeleton::assemble`] puts the translated segments back between the kept pieces, so no
//! marker a model could drop, merge or invent is ever in its hands.

use super::{Placeholder, Unit, PLACEHOLDER_RE};
use regex::Regex;
use std::sync::LazyLock;

/// Quote markers, then a list marker (with a task box) or a heading marker.
static PREFIX_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"^(?:[ \t]*>[ \t]?)*[ \t]*(?:(?:[-*+]|[0-9]{1,9}[.)])(?:[ \t]+\[[ xX]\])?(?:[ \t]+|$)|#{1,6}(?:[ \t]+|$))?",
    )
    .expect("valid prefix regex")
});

/// A table divider row.
static DIVIDER_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^\|?[ \t]*:?-+:?[ \t]*(?:\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*$").expect("valid regex")
});

/// A line that is only an image: `![alt]({{n}})`.
static IMAGE_LINE_RE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^(!\[)(.*)(\]\(\{\{[0-9]+\}\}\))$").expect("valid image regex"));

/// A leading footnote-definition label placeholder: `{{n}}` then spaces.
static LEADING_TOKEN_RE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^\{\{([0-9]+)\}\}[ \t]*").expect("valid regex"));

/// A trailing placeholder: spaces then `{{n}}`.
static TRAILING_TOKEN_RE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"[ \t]*\{\{([0-9]+)\}\}$").expect("valid regex"));

/// One piece of prose the model translates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    /// The protected text (placeholders numbered as in the unit).
    pub text: String,
    /// The unit's placeholders that occur in it (indices from 0).
    pub placeholders: Vec<usize>,
}

/// A unit's protected text as kept pieces and translated segments, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skeleton {
    /// `kept[i]` comes before `segments[i]`; `kept` has one more entry than `segments`.
    kept: Vec<String>,
    /// The prose.
    pub segments: Vec<Segment>,
}

fn has_letters(s: &str) -> bool {
    PLACEHOLDER_RE
        .replace_all(s, "")
        .chars()
        .any(char::is_alphabetic)
}

impl Skeleton {
    /// Split `unit.protected` into kept structure and prose segments.
    pub fn of(unit: &Unit) -> Skeleton {
        let mut b = Builder::default();
        let lines: Vec<&str> = unit.protected.split('\n').collect();
        b.table = lines
            .iter()
            .any(|l| l.contains('|') && DIVIDER_RE.is_match(l.trim()));
        for (i, line) in lines.iter().enumerate() {
            b.line(unit, line);
            if i + 1 < lines.len() {
                b.keep("\n");
            }
        }
        b.finish()
    }

    /// The text the model sees: the segments, one per line.
    pub fn model_text(&self) -> String {
        self.segments
            .iter()
            .map(|s| s.text.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The unit's text with `translated[i]` (restored, no placeholders left) in place of
    /// segment `i`; the kept pieces have their placeholders restored from `unit`.
    pub fn assemble(&self, unit: &Unit, translated: &[String]) -> String {
        let mut out = String::new();
        for (i, kept) in self.kept.iter().enumerate() {
            out.push_str(&restore_all(kept, &unit.placeholders));
            if let Some(t) = translated.get(i) {
                out.push_str(t.trim());
            }
        }
        out
    }
}

/// Replace every placeholder token of `placeholders` in `text` by its original (the kept
/// pieces hold tokens the model never saw).
fn restore_all(text: &str, placeholders: &[Placeholder]) -> String {
    PLACEHOLDER_RE
        .replace_all(text, |c: &regex::Captures| {
            let n: usize = c[1].parse().unwrap_or(0);
            match n.checked_sub(1).and_then(|i| placeholders.get(i)) {
                Some(p) if c[0] == p.token => p.original.clone(),
                _ => c[0].to_string(),
            }
        })
        .into_owned()
}

#[derive(Default)]
struct Builder {
    kept: Vec<String>,
    segments: Vec<Segment>,
    pending: String,
    /// The unit holds a table (a divider row): lines with pipes are rows.
    table: bool,
}

impl Builder {
    fn keep(&mut self, s: &str) {
        self.pending.push_str(s);
    }

    fn segment(&mut self, text: &str) {
        let text = text.trim();
        self.kept.push(std::mem::take(&mut self.pending));
        let placeholders = PLACEHOLDER_RE
            .captures_iter(text)
            .filter_map(|c| c[1].parse::<usize>().ok())
            .filter_map(|n| n.checked_sub(1))
            .collect();
        self.segments.push(Segment {
            text: text.to_string(),
            placeholders,
        });
    }

    /// Keep what surrounds the prose of `s`, and make the prose a segment.
    fn prose(&mut self, s: &str) {
        if !has_letters(s) {
            self.keep(s);
            return;
        }
        let start = s.len() - s.trim_start().len();
        let end = s.trim_end().len();
        self.keep(&s[..start]);
        self.segment(&s[start..end]);
        self.keep(&s[end..]);
    }

    fn line(&mut self, unit: &Unit, line: &str) {
        let prefix_len = PREFIX_RE.find(line).map_or(0, |m| m.end());
        let (prefix, mut rest) = line.split_at(prefix_len);
        self.keep(prefix);
        // A footnote definition's `[^x]:` label, or the code before a comment.
        if let Some(c) = LEADING_TOKEN_RE.captures(rest) {
            let n: usize = c[1].parse().unwrap_or(0);
            let is_def = n
                .checked_sub(1)
                .and_then(|i| unit.placeholders.get(i))
                .is_some_and(|p| {
                    (p.kind == super::PlaceholderKind::FootnoteLabel
                        && p.original.trim_end().ends_with(':'))
                        || p.kind == super::PlaceholderKind::Code
                });
            if is_def {
                let m = c.get(0).expect("group 0");
                self.keep(m.as_str());
                rest = &rest[m.end()..];
            }
        }
        let mut body = rest.trim_end_matches([' ', '\t', '\r']);
        let mut tail = &rest[body.len()..];
        // The code after a comment's words (a closing quote and comma).
        if let Some(c) = TRAILING_TOKEN_RE.captures(body) {
            let n: usize = c[1].parse().unwrap_or(0);
            let code = n
                .checked_sub(1)
                .and_then(|i| unit.placeholders.get(i))
                .is_some_and(|p| p.kind == super::PlaceholderKind::Code);
            if code {
                let m = c.get(0).expect("group 0");
                body = &rest[..m.start()];
                tail = &rest[m.start()..];
            }
        }
        if self.table && body.contains('|') {
            if DIVIDER_RE.is_match(body) {
                self.keep(body);
            } else {
                self.table_row(body);
            }
        } else if let Some(c) = IMAGE_LINE_RE.captures(body.trim()) {
            let lead = &body[..body.len() - body.trim_start().len()];
            self.keep(lead);
            self.keep(&c[1]);
            self.prose(&c[2]);
            self.keep(&c[3]);
        } else {
            self.prose(body);
        }
        self.keep(tail);
    }

    /// Cells are segments; pipes (not escaped) and padding are kept.
    fn table_row(&mut self, row: &str) {
        let mut cell_start = 0;
        let bytes = row.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] == b'\\' {
                i += 2;
                continue;
            }
            if bytes[i] == b'|' {
                self.prose(&row[cell_start..i]);
                self.keep("|");
                cell_start = i + 1;
            }
            i += 1;
        }
        self.prose(&row[cell_start.min(row.len())..]);
    }

    fn finish(mut self) -> Skeleton {
        self.kept.push(self.pending);
        Skeleton {
            kept: self.kept,
            segments: self.segments,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::{segment_chapter, EstimateTokens, UnitKind};

    fn units(md: &str) -> Vec<Unit> {
        let ch = crate::book::Chapter {
            rel_path: "c.md".into(),
            text: md.to_string(),
        };
        segment_chapter(&ch, 10_000, &EstimateTokens)
            .unwrap()
            .into_iter()
            .filter(|u| u.kind == UnitKind::Translate)
            .collect()
    }

    fn roundtrip(md: &str) {
        for u in units(md) {
            let sk = Skeleton::of(&u);
            let own: Vec<String> = sk
                .segments
                .iter()
                .map(|s| restore_all(&s.text, &u.placeholders))
                .collect();
            assert_eq!(sk.assemble(&u, &own), u.source.trim(), "{md:?}");
        }
    }

    #[test]
    fn markers_stay_out_of_the_model_text() {
        let md = "> Reuse the prompt prefix.\n>\n> It saves `time`.\n\n- one item\n- two items\n\n# A heading\n\n| Name | Value |\n|---|---|\n| speed | fast |\n\n![A chart](img.png)\n\nText[^n].\n\n[^n]: A note with https://example.com here.\n";
        roundtrip(md);
        let all: Vec<String> = units(md)
            .iter()
            .map(|u| Skeleton::of(u).model_text())
            .collect();
        let text = all.join("\n");
        for line in text.lines() {
            assert!(
                !line.starts_with(['>', '-', '#', '|', '!']),
                "marker in model text: {line:?}"
            );
        }
        assert!(text.contains("Reuse the prompt prefix."));
        assert!(text.contains("speed\nfast") || text.contains("speed"));
        assert!(text.contains("A chart"));
    }

    #[test]
    fn assemble_replaces_segments_only() {
        let u = &units("- one item\n- two {{x}} items\n")[0];
        let sk = Skeleton::of(u);
        assert_eq!(sk.segments.len(), 2);
        let out = sk.assemble(u, &["一".into(), "二".into()]);
        assert_eq!(out, "- 一\n- 二");
    }

    #[test]
    fn roundtrips_varied_markdown() {
        for md in [
            "Plain paragraph  \nwith a hard break.\n",
            "1. First\n2. Second with `code`\n   continued line\n",
            "> - quoted list\n>   more\n",
            "* [ ] task\n* [x] done\n",
            "Cells | without | leading pipe\n--- | --- | ---\na | b | c\n",
            "## Heading with [link](http://x.y)\n",
        ] {
            roundtrip(md);
        }
    }
}
