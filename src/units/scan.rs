//! The scanner: one pass of pulldown-cmark over a chapter that finds its top-level blocks,
//! the spans to protect with placeholders and the inline containers a cut must not enter.

use super::code_comments;
use super::patterns::{
    footnote_citation, footnote_label_end, is_identifier, trim_url, BARE_URL_RE, IDENTIFIER_RE,
    NAME_RE,
};
use super::placeholders::PLACEHOLDER_RE;
use super::types::PlaceholderKind;
use pulldown_cmark::{Event, LinkType, Options, Parser, Tag, TagEnd};
use std::ops::Range;

/// The Markdown dialect Quire reads and checks: CommonMark plus GFM tables, footnotes,
/// strikethrough, task lists and alerts, `$`/`$$` math, and YAML (`---`) or TOML (`+++`)
/// front matter. Segmentation and QA use the same options.
pub fn markdown_options() -> Options {
    Options::ENABLE_TABLES
        | Options::ENABLE_FOOTNOTES
        | Options::ENABLE_STRIKETHROUGH
        | Options::ENABLE_TASKLISTS
        | Options::ENABLE_MATH
        | Options::ENABLE_YAML_STYLE_METADATA_BLOCKS
        | Options::ENABLE_PLUSES_DELIMITED_METADATA_BLOCKS
        | Options::ENABLE_GFM
}

/// A span of the chapter to replace by a placeholder.
#[derive(Debug, Clone)]
pub(super) struct Span {
    pub(super) range: Range<usize>,
    pub(super) kind: PlaceholderKind,
}

/// What a top-level block is, for segmentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TopKind {
    Paragraph,
    Heading,
    List,
    BlockQuote,
    Atomic,
    Verbatim,
    /// A fenced code block with comments to translate: a unit of its own.
    CodeComments,
}

/// A top-level block of the chapter.
#[derive(Debug)]
pub(super) struct TopBlock {
    pub(super) range: Range<usize>,
    pub(super) kind: TopKind,
    /// Where its children start (the items of a list, the blocks of a quote).
    pub(super) children: Vec<usize>,
    /// A paragraph with nothing in it but display math, breaks and blank text.
    pub(super) math_only: bool,
    /// Whether display math was seen in it.
    pub(super) saw_math: bool,
}

/// What the scanner found in a chapter.
#[derive(Debug, Default)]
pub(super) struct Scan {
    pub(super) blocks: Vec<TopBlock>,
    /// Protected spans, sorted and non-overlapping.
    pub(super) spans: Vec<Span>,
    /// Inline containers (emphasis, links, …) a sentence cut must not fall inside.
    pub(super) containers: Vec<Range<usize>>,
}

struct LinkFrame {
    range: Range<usize>,
    max_end: usize,
    label_kind: Option<bool>, // Some(true): inline target; Some(false): reference label
}

/// Shrink `r` to exclude surrounding whitespace.
fn trim_range(text: &str, r: Range<usize>) -> Range<usize> {
    let Some(s) = text.get(r.clone()) else {
        return r.start..r.start;
    };
    let start = r.start + (s.len() - s.trim_start().len());
    let end = r.start + s.trim_end().len();
    if end <= start {
        start..start
    } else {
        start..end
    }
}

fn add_span(text: &str, spans: &mut Vec<Span>, r: Range<usize>, kind: PlaceholderKind) {
    let r = trim_range(text, r);
    if !r.is_empty() && r.end <= text.len() {
        spans.push(Span { range: r, kind });
    }
}

/// One pass of pulldown-cmark over a chapter: its top-level blocks, the spans to protect
/// and the inline containers.
struct Scanner<'a> {
    text: &'a str,
    /// Translate the prose comments of fenced code blocks.
    code_comments: bool,
    scan: Scan,
    spans: Vec<Span>,
    depth: usize,
    skip_until: usize,
    verbatim_top: bool,
    links: Vec<LinkFrame>,
}

/// Scan `text`; `code_comments`: translate the prose comments of fenced code blocks.
pub(super) fn scan(text: &str, code_comments: bool) -> Scan {
    let mut s = Scanner {
        text,
        code_comments,
        scan: Scan::default(),
        spans: Vec::new(),
        depth: 0,
        skip_until: 0,
        verbatim_top: false,
        links: Vec::new(),
    };
    for (event, r) in Parser::new_ext(text, markdown_options()).into_offset_iter() {
        let r = r.start.min(text.len())..r.end.min(text.len());
        for f in s.links.iter_mut() {
            if r.start >= f.range.start && r.end <= f.range.end && r != f.range {
                f.max_end = f.max_end.max(r.end);
            }
        }
        match event {
            Event::Start(tag) => s.start(tag, r),
            Event::End(end) => s.end(end, r),
            Event::Rule if s.depth == 0 => s.top_verbatim(r),
            other => s.leaf(other, r),
        }
    }
    s.literals_outside_events();
    s.finish()
}

impl Scanner<'_> {
    fn add(&mut self, r: Range<usize>, kind: PlaceholderKind) {
        add_span(self.text, &mut self.spans, r, kind);
    }

    /// Placeholder look-alikes in text no event covers (a table row's cells past the
    /// header's count): protected like those in prose, so the unit's own `{{n}}` stay unique.
    fn literals_outside_events(&mut self) {
        let ranges: Vec<Range<usize>> = (self.scan.blocks.iter())
            .filter(|b| b.kind != TopKind::Verbatim)
            .map(|b| b.range.clone())
            .collect();
        for r in ranges {
            let Some(block) = self.text.get(r.clone()) else {
                continue;
            };
            for m in PLACEHOLDER_RE.find_iter(block) {
                let m = r.start + m.start()..r.start + m.end();
                if !self
                    .spans
                    .iter()
                    .any(|s| s.range.start < m.end && m.start < s.range.end)
                {
                    self.add(m, PlaceholderKind::Literal);
                }
            }
        }
    }

    /// A top-level block kept verbatim (a rule, or text pulldown-cmark gives outside one).
    fn top_verbatim(&mut self, r: Range<usize>) {
        self.scan.blocks.push(TopBlock {
            range: r,
            kind: TopKind::Verbatim,
            children: Vec::new(),
            math_only: false,
            saw_math: false,
        });
    }

    /// Whether the top-level block `r` is a fenced code block with prose comments to
    /// translate; if so, protect all of it but the comments' prose.
    fn commented_code(&mut self, r: Range<usize>) -> bool {
        let Some(block) = self.text.get(r.clone()) else {
            return false;
        };
        if !self.code_comments || block.starts_with([' ', '\t']) {
            return false;
        }
        let prose = code_comments::prose_ranges(block);
        if prose.is_empty() {
            return false;
        }
        let mut at = r.start;
        for p in prose {
            let p = r.start + p.start..r.start + p.end;
            self.code_lines(at..p.start);
            self.text_spans(p.clone());
            at = p.end;
        }
        self.code_lines(at..r.end);
        true
    }

    /// Protect code line by line, so that a comment's line keeps its own code before and
    /// after it and every other line is a placeholder alone.
    fn code_lines(&mut self, r: Range<usize>) {
        let mut at = r.start;
        for piece in self.text[r.clone()].split_inclusive('\n') {
            self.add(at..at + piece.len(), PlaceholderKind::Code);
            at += piece.len();
        }
    }

    /// The start of a block or an inline container.
    fn start(&mut self, tag: Tag, r: Range<usize>) {
        let inside_skip = r.start < self.skip_until;
        if self.depth == 0 {
            let kind = match &tag {
                Tag::Paragraph => TopKind::Paragraph,
                Tag::Heading { .. } => TopKind::Heading,
                Tag::List(_) => TopKind::List,
                Tag::BlockQuote(_) => TopKind::BlockQuote,
                Tag::CodeBlock(_) if self.commented_code(r.clone()) => TopKind::CodeComments,
                Tag::CodeBlock(_) | Tag::HtmlBlock | Tag::MetadataBlock(_) => TopKind::Verbatim,
                _ => TopKind::Atomic,
            };
            self.verbatim_top = matches!(kind, TopKind::Verbatim | TopKind::CodeComments);
            self.scan.blocks.push(TopBlock {
                range: r.clone(),
                kind,
                children: Vec::new(),
                math_only: kind == TopKind::Paragraph,
                saw_math: false,
            });
        } else if self.depth == 1 {
            if let Some(b) = self.scan.blocks.last_mut() {
                b.children.push(r.start);
                if b.kind == TopKind::Paragraph {
                    b.math_only = false;
                }
            }
        } else if let Some(b) = self.scan.blocks.last_mut() {
            b.math_only = false;
        }
        self.depth += 1;
        if self.verbatim_top || inside_skip {
            return;
        }
        match tag {
            Tag::CodeBlock(_) => {
                self.add(r.clone(), PlaceholderKind::CodeBlock);
                self.skip_until = r.end;
            }
            Tag::HtmlBlock => {
                self.add(r.clone(), PlaceholderKind::HtmlBlock);
                self.skip_until = r.end;
            }
            Tag::MetadataBlock(_) => self.skip_until = r.end,
            Tag::FootnoteDefinition(_) => self.footnote_definition(r),
            Tag::Link { link_type, .. } | Tag::Image { link_type, .. } => self.link(link_type, r),
            Tag::Emphasis
            | Tag::Strong
            | Tag::Strikethrough
            | Tag::Superscript
            | Tag::Subscript => self.scan.containers.push(r),
            _ => {}
        }
    }

    /// A link or an image. An autolink, or a link whose text is its label (a collapsed or
    /// shortcut reference), is a placeholder whole; an inline or full reference link is a
    /// container whose target or label is protected where it ends ([`link_target_span`]).
    fn link(&mut self, link_type: LinkType, r: Range<usize>) {
        let is_image = self
            .text
            .get(r.start..)
            .is_some_and(|s| s.starts_with("!["));
        let label_kind = match link_type {
            LinkType::Inline => Some(true),
            LinkType::Reference | LinkType::ReferenceUnknown => Some(false),
            _ => None,
        };
        match label_kind {
            None => {
                let kind = if matches!(link_type, LinkType::Autolink | LinkType::Email) {
                    PlaceholderKind::Autolink
                } else {
                    PlaceholderKind::LinkLabel
                };
                self.add(r.clone(), kind);
                self.skip_until = r.end;
            }
            Some(_) => {
                let text_start = r.start + if is_image { 2 } else { 1 };
                self.links.push(LinkFrame {
                    range: r.clone(),
                    max_end: text_start.min(r.end),
                    label_kind,
                });
                self.scan.containers.push(r);
            }
        }
    }

    /// A footnote definition's `[^x]:` label, and the bibliographic reference it ends with.
    fn footnote_definition(&mut self, r: Range<usize>) {
        let Some(s) = self.text.get(r.clone()) else {
            return;
        };
        if let Some(end) = footnote_label_end(s) {
            self.add(r.start..r.start + end, PlaceholderKind::FootnoteLabel);
            if let Some(c) = footnote_citation(s) {
                self.add(
                    r.start + c.start..r.start + c.end,
                    PlaceholderKind::Citation,
                );
            }
        }
    }

    fn end(&mut self, end: TagEnd, r: Range<usize>) {
        self.depth = self.depth.saturating_sub(1);
        if matches!(end, TagEnd::Link | TagEnd::Image) {
            if let Some(pos) = self.links.iter().rposition(|f| f.range == r) {
                let f = self.links.remove(pos);
                link_target_span(self.text, &f, &mut self.spans);
            }
        }
        if self.depth == 0 {
            self.verbatim_top = false;
        }
    }

    /// An event inside a block: text, code, math, HTML, footnote references, breaks.
    fn leaf(&mut self, other: Event, r: Range<usize>) {
        if self.depth == 0 {
            // Not expected from pulldown-cmark; keep such text verbatim.
            self.top_verbatim(r);
            return;
        }
        let is_math = matches!(other, Event::DisplayMath(_));
        let blank_text = matches!(&other, Event::Text(t) if t.trim().is_empty());
        if let Some(b) = self.scan.blocks.last_mut() {
            if is_math {
                b.saw_math = true;
            } else if !matches!(other, Event::SoftBreak | Event::HardBreak) && !blank_text {
                b.math_only = false;
            }
        }
        if self.verbatim_top || r.start < self.skip_until {
            return;
        }
        match other {
            Event::Code(_) => self.add(r, PlaceholderKind::InlineCode),
            Event::InlineMath(_) | Event::DisplayMath(_) => self.add(r, PlaceholderKind::Math),
            Event::InlineHtml(_) | Event::Html(_) => self.add(r, PlaceholderKind::InlineHtml),
            Event::FootnoteReference(_) => self.add(r, PlaceholderKind::FootnoteLabel),
            Event::Text(_) => self.text_spans(r),
            _ => {}
        }
    }

    /// Protected spans inside plain text: bare URLs, identifiers, placeholder look-alikes.
    fn text_spans(&mut self, r: Range<usize>) {
        let Some(s) = self.text.get(r.clone()) else {
            return;
        };
        for m in BARE_URL_RE.find_iter(s) {
            let u = trim_url(m.as_str());
            self.add(
                r.start + m.start()..r.start + m.start() + u.len(),
                PlaceholderKind::Url,
            );
        }
        for m in IDENTIFIER_RE.find_iter(s) {
            if is_identifier(m.as_str()) {
                self.add(
                    r.start + m.start()..r.start + m.end(),
                    PlaceholderKind::Identifier,
                );
            }
        }
        for m in NAME_RE.find_iter(s) {
            self.add(
                r.start + m.start()..r.start + m.end(),
                PlaceholderKind::Name,
            );
        }
        for m in PLACEHOLDER_RE.find_iter(s) {
            self.add(
                r.start + m.start()..r.start + m.end(),
                PlaceholderKind::Literal,
            );
        }
    }

    /// Sort the spans, keeping the outermost of overlapping ones.
    fn finish(mut self) -> Scan {
        let text = self.text;
        let mut spans = std::mem::take(&mut self.spans);
        spans.sort_by(|a, b| {
            a.range
                .start
                .cmp(&b.range.start)
                .then(b.range.end.cmp(&a.range.end))
        });
        let mut kept: Vec<Span> = Vec::with_capacity(spans.len());
        for s in spans {
            if !text.is_char_boundary(s.range.start) || !text.is_char_boundary(s.range.end) {
                continue;
            }
            match kept.last() {
                Some(last) if s.range.start < last.range.end => {}
                _ => kept.push(s),
            }
        }
        self.scan.spans = kept;
        self.scan
    }
}

/// Protect the target (`](…)`) or the reference label (`][…]`) of the link `f` that has
/// just ended: what follows the last event inside it.
fn link_target_span(text: &str, f: &LinkFrame, spans: &mut Vec<Span>) {
    let Some(inline) = f.label_kind else { return };
    let end = f.range.end;
    let from = f.max_end.min(end);
    let Some(tail) = text.get(from..end) else {
        return;
    };
    let (open, kind) = if inline {
        ("](", PlaceholderKind::LinkTarget)
    } else {
        ("][", PlaceholderKind::LinkLabel)
    };
    let close = if inline { ')' } else { ']' };
    if let Some(p) = tail.find(open) {
        let start = from + p + 2;
        if end > start && text[..end].ends_with(close) {
            let r = trim_range(text, start..end - 1);
            if !r.is_empty() {
                spans.push(Span { range: r, kind });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::units::segment::{segment_chapter, segment_chapter_with};
    use crate::units::skeleton;
    use crate::units::types::{EstimateTokens, UnitKind};

    #[test]
    fn code_comments_are_translated_and_code_kept() {
        let md = "Intro text.\n\n```python\n# 1. User query\nquery = \"Refund process\"  # what the user asks\nresults = retriever.search(query)  # top_k results\n# x = 1\n# \"Refunds take 3 days\",\n```\n\nAfter.\n";
        let ch = crate::book::Chapter {
            rel_path: "c.md".into(),
            text: md.to_string(),
        };
        let units = segment_chapter(&ch, 10_000, &EstimateTokens).unwrap();
        let all: String = units.iter().map(|u| u.source.as_str()).collect();
        assert_eq!(all, md);
        let code = units
            .iter()
            .find(|u| u.source.contains("```python"))
            .expect("a code unit");
        assert_eq!(code.kind, UnitKind::Translate);
        let sk = skeleton::Skeleton::of(code);
        assert_eq!(
            sk.model_text(),
            "1. User query\nwhat the user asks\n{{5}} results\nRefunds take 3 days"
        );
        let zh: Vec<String> = [
            "1. 用户提问",
            "用户问的内容",
            "top_k 个结果",
            "退款需要 3 天",
        ]
        .map(String::from)
        .to_vec();
        let out = sk.assemble(code, &zh);
        assert_eq!(
            out,
            "```python\n# 1. 用户提问\nquery = \"Refund process\"  # 用户问的内容\nresults = retriever.search(query)  # top_k 个结果\n# x = 1\n# \"退款需要 3 天\",\n```"
        );
        let ctx = crate::checks::CheckContext::default();
        let findings = crate::checks::check_unit("c", code.source.trim(), &out, &ctx);
        assert!(
            findings
                .iter()
                .all(|f| f.category != crate::checks::Category::CodeBlock),
            "{findings:?}"
        );
        let dropped = out.replace("退款需要 3 天", "退款需要天");
        let findings = crate::checks::check_unit("c", code.source.trim(), &dropped, &ctx);
        assert!(
            findings
                .iter()
                .any(|f| f.category == crate::checks::Category::Number),
            "a number dropped from a comment: {findings:?}"
        );
        let broken = out.replace("search(query)", "search(q)");
        let findings = crate::checks::check_unit("c", code.source.trim(), &broken, &ctx);
        assert!(
            findings
                .iter()
                .any(|f| f.category == crate::checks::Category::CodeBlock),
            "{findings:?}"
        );
        let kept = segment_chapter_with(&ch, 10_000, &EstimateTokens, false).unwrap();
        assert!(kept
            .iter()
            .filter(|u| u.source.contains("```"))
            .all(|u| u.kind == UnitKind::Verbatim));
    }
}
