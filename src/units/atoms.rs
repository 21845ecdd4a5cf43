//! Atoms: the smallest pieces segmentation joins into units. A top-level block is one
//! atom, or several where it may be cut (a list between its items, a quote between its
//! blocks, a paragraph over the budget between sentences); the atoms cover the chapter
//! contiguously, with the whitespace between blocks joined to the atom before it.

use super::scan::{Scan, TopBlock, TopKind};
use super::split::split_paragraph;
use super::types::TokenCount;
use regex::Regex;
use std::ops::Range;
use std::sync::LazyLock;

/// What an atom is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum AtomKind {
    /// Prose; `starts_unit`: never joins the unit before it (a heading); `alone`: a unit of
    /// its own (a figure: a model asked for a paragraph and the figure's caption after it
    /// drops the caption).
    Prose {
        starts_unit: bool,
        alone: bool,
    },
    Verbatim,
}

impl AtomKind {
    /// Prose that joins the unit before it while the budget allows.
    const PROSE: AtomKind = AtomKind::Prose {
        starts_unit: false,
        alone: false,
    };
    /// Prose that starts a unit (a heading), which the prose after it may join.
    const STARTS_UNIT: AtomKind = AtomKind::Prose {
        starts_unit: true,
        alone: false,
    };
    /// Prose that is a unit of its own.
    const ALONE: AtomKind = AtomKind::Prose {
        starts_unit: true,
        alone: true,
    };
}

/// A one-line paragraph that captions a table, figure or listing (`Table 8-2 Applicable
/// boundaries…`): a unit of its own, like a figure (asked for a paragraph and the caption
/// after it, a small model runs the two together into one line).
static CAPTION_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(?:Table|Figure|Fig\.|Listing|Exhibit|Chart|Diagram)\s+[A-Z]?\d+(?:[.\-–]\d+)*[.:]?\s+[^\n]{1,200}$")
        .expect("valid caption regex")
});

/// A paragraph that is only an image: `![caption](target)`.
static IMAGE_PARAGRAPH_RE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^!\[[^\n]*\]\([^\n]*\)$").expect("valid image regex"));

/// Whether a paragraph is a figure or a caption, a unit of its own.
fn figure_or_caption(paragraph: &str) -> bool {
    IMAGE_PARAGRAPH_RE.is_match(paragraph.trim()) || CAPTION_RE.is_match(paragraph.trim())
}

/// A piece of the chapter: a range of its text and what it is.
#[derive(Debug, Clone)]
pub(super) struct Atom {
    pub(super) range: Range<usize>,
    pub(super) kind: AtomKind,
}

/// Cut `text` into atoms that cover it contiguously, from the top-level blocks `scan`
/// found; a paragraph over `budget` tokens (counted with `counter`) is cut between
/// sentences.
pub(super) fn build_atoms(
    text: &str,
    scan: &Scan,
    budget: usize,
    counter: &dyn TokenCount,
) -> Vec<Atom> {
    let mut atoms = Atoms {
        text,
        scan,
        budget,
        counter,
        atoms: Vec::new(),
        pending_lead: None,
    };
    let mut cursor = 0usize;
    for b in &scan.blocks {
        let start = b.range.start.max(cursor);
        let end = b.range.end.min(text.len());
        if end <= start || !text.is_char_boundary(start) || !text.is_char_boundary(end) {
            continue;
        }
        atoms.gap(cursor..start);
        atoms.block(b, start..end);
        cursor = end;
    }
    atoms.finish(cursor)
}

/// The atoms of a chapter as they are built, block by block.
struct Atoms<'a> {
    text: &'a str,
    scan: &'a Scan,
    budget: usize,
    counter: &'a dyn TokenCount,
    atoms: Vec<Atom>,
    /// Where the blank text before the first atom starts: that atom takes it.
    pending_lead: Option<usize>,
}

impl Atoms<'_> {
    /// Add a non-empty atom, which takes the pending lead, if any.
    fn push(&mut self, range: Range<usize>, kind: AtomKind) {
        if range.is_empty() {
            return;
        }
        let start = self.pending_lead.take().unwrap_or(range.start);
        self.atoms.push(Atom {
            range: start..range.end,
            kind,
        });
    }

    /// The text between the last block and the next: separators join the previous atom
    /// (before the first atom, the first one), anything else (link reference definitions)
    /// is verbatim.
    fn gap(&mut self, gap: Range<usize>) {
        if gap.is_empty() {
            return;
        }
        if self.text[gap.clone()].trim().is_empty() {
            match self.atoms.last_mut() {
                Some(a) => a.range.end = gap.end,
                None => self.pending_lead = Some(gap.start),
            }
        } else {
            self.push(gap, AtomKind::Verbatim);
        }
    }

    /// The atoms of one top-level block `b`, clipped to `r`.
    fn block(&mut self, b: &TopBlock, r: Range<usize>) {
        match b.kind {
            TopKind::Verbatim => self.push(r, AtomKind::Verbatim),
            TopKind::Paragraph if b.math_only && b.saw_math => self.push(r, AtomKind::Verbatim),
            TopKind::Heading => self.push(r, AtomKind::STARTS_UNIT),
            // A figure, a caption or a code block's comments: a unit of its own.
            TopKind::CodeComments => self.push(r, AtomKind::ALONE),
            TopKind::Paragraph if figure_or_caption(&self.text[r.clone()]) => {
                self.push(r, AtomKind::ALONE)
            }
            TopKind::Paragraph => self.paragraph(r),
            TopKind::List | TopKind::BlockQuote => self.children(b, r),
            TopKind::Atomic => self.push(r, AtomKind::PROSE),
        }
    }

    /// A paragraph: one atom, or, over the budget, one a piece (see [`split_paragraph`]).
    fn paragraph(&mut self, r: Range<usize>) {
        if self.counter.count_tokens(&self.text[r.clone()]) > self.budget {
            let pieces = split_paragraph(self.text, r, self.scan, self.budget, self.counter);
            for piece in pieces {
                self.push(piece, AtomKind::PROSE);
            }
        } else {
            self.push(r, AtomKind::PROSE);
        }
    }

    /// A list or a block quote `b` (clipped to `r`): an atom for each of its items or
    /// blocks.
    fn children(&mut self, b: &TopBlock, r: Range<usize>) {
        // A quoted box (`> **Experiment 8-1**` …) does not join the paragraph
        // before it: a small model runs the box's title into that paragraph.
        let first = AtomKind::Prose {
            starts_unit: b.kind == TopKind::BlockQuote,
            alone: false,
        };
        let mut s = r.start;
        for c in child_cuts(self.text, &b.children, &r) {
            let kind = if s == r.start { first } else { AtomKind::PROSE };
            self.push(s..c, kind);
            s = c;
        }
        let kind = if s == r.start { first } else { AtomKind::PROSE };
        self.push(s..r.end, kind);
    }

    /// The atoms, once every block has been added and `cursor` is where the last one ends:
    /// the text after it joins the last atom when blank and is verbatim otherwise, and the
    /// atoms are made to cover the text (see [`cover`]).
    fn finish(mut self, cursor: usize) -> Vec<Atom> {
        let text = self.text;
        if cursor < text.len() {
            let gap = &text[cursor..];
            if gap.trim().is_empty() && !self.atoms.is_empty() {
                if let Some(a) = self.atoms.last_mut() {
                    a.range.end = text.len();
                }
            } else {
                self.push(cursor..text.len(), AtomKind::Verbatim);
            }
        }
        if self.atoms.is_empty() && !text.is_empty() {
            self.atoms.push(Atom {
                range: 0..text.len(),
                kind: AtomKind::Verbatim,
            });
        }
        cover(text, self.atoms)
    }
}

/// Where a list or a block quote in `r` is cut: before each of its children but the
/// first (which start at `children`), at the start of the child's line when only
/// indentation and `>` stand before it there; ascending, inside `r`.
fn child_cuts(text: &str, children: &[usize], r: &Range<usize>) -> Vec<usize> {
    let (start, end) = (r.start, r.end);
    let mut cuts: Vec<usize> = Vec::new();
    for &c in children.iter().skip(1) {
        if c <= start || c >= end || !text.is_char_boundary(c) {
            continue;
        }
        let ls = line_start(text, c);
        let prefix_ok = text[ls..c]
            .chars()
            .all(|ch| ch == ' ' || ch == '\t' || ch == '>');
        let cut = if prefix_ok { ls } else { c };
        if cut > start && cuts.last().is_none_or(|&l| cut > l) {
            cuts.push(cut);
        }
    }
    cuts
}

/// Where the line holding `pos` starts.
fn line_start(text: &str, pos: usize) -> usize {
    text[..pos].rfind('\n').map(|p| p + 1).unwrap_or(0)
}

/// Fill any hole so that atoms cover the text contiguously: a hole joins the atom before
/// it (one before the first atom, the first atom), and the last atom runs to the end.
fn cover(text: &str, atoms: Vec<Atom>) -> Vec<Atom> {
    let mut fixed: Vec<Atom> = Vec::with_capacity(atoms.len());
    let mut pos = 0;
    for mut a in atoms {
        if a.range.start > pos {
            match fixed.last_mut() {
                Some(prev) => prev.range.end = a.range.start,
                None => a.range.start = pos,
            }
        }
        pos = a.range.end;
        fixed.push(a);
    }
    if let Some(last) = fixed.last_mut() {
        last.range.end = text.len();
    }
    fixed
}

#[cfg(test)]
mod tests {
    use crate::units::segment::roundtrip;

    #[test]
    fn a_figure_is_a_unit_of_its_own() {
        let units = roundtrip(
            "As Figure 1 shows, the cache is reused.\n\n![Figure 1: The cache](fig1.svg)\n\nThe next paragraph follows.\n",
            300,
        );
        let kinds: Vec<&str> = units.iter().map(|u| u.source.trim()).collect();
        assert_eq!(
            kinds,
            [
                "As Figure 1 shows, the cache is reused.",
                "![Figure 1: The cache](fig1.svg)",
                "The next paragraph follows."
            ]
        );
    }

    #[test]
    fn captions_are_units_of_their_own_and_quoted_boxes_start_one() {
        let units = roundtrip(
            "Table 8-2 compares them.\n\nTable 8-2 Applicable boundaries of four methods\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\nThe methods differ.\n\n> **Experiment 8-1: Build a verifier**\n>\n> This experiment builds one.\n\nAfter the box.\n",
            300,
        );
        let sources: Vec<&str> = units.iter().map(|u| u.source.trim()).collect();
        assert!(
            sources.contains(&"Table 8-2 Applicable boundaries of four methods"),
            "{sources:#?}"
        );
        assert!(
            sources.contains(&"Table 8-2 compares them."),
            "{sources:#?}"
        );
        let boxed = sources
            .iter()
            .find(|s| s.contains("Experiment 8-1"))
            .unwrap();
        assert!(boxed.starts_with("> **Experiment"), "{boxed:?}");
        // A sentence that begins with "Table 2" but runs on is prose, not a caption.
        let units = roundtrip("It grows.\n\nTable 2 shows it.\nIt also shrinks.\n", 300);
        assert_eq!(units.len(), 1);
    }
}
