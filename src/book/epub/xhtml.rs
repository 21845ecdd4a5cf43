//! An XHTML document read into a small tree with the byte range of every node, and the
//! blocks of text it holds: the leaf block elements (`p`, `h1`–`h6`, `li`, `td`, …) and
//! the runs of text with inline markup that sit beside block elements in a container
//! (`<li>Text <ul>…</ul></li>`). Everything outside a block's inner range is never
//! touched, so ids, classes, links and the document's layout come out as they went in.

use anyhow::{bail, Result};
use quick_xml::events::Event;
use quick_xml::Reader;
use std::ops::Range;

/// Elements that hold blocks or are blocks (their content never runs inline).
const BLOCK: &[&str] = &[
    "address",
    "article",
    "aside",
    "blockquote",
    "body",
    "caption",
    "center",
    "dd",
    "details",
    "dialog",
    "div",
    "dl",
    "dt",
    "fieldset",
    "figcaption",
    "figure",
    "footer",
    "form",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "header",
    "hgroup",
    "hr",
    "html",
    "legend",
    "li",
    "main",
    "menu",
    "nav",
    "ol",
    "p",
    "section",
    "summary",
    "table",
    "tbody",
    "td",
    "tfoot",
    "th",
    "thead",
    "tr",
    "ul",
];

/// Block-level elements kept exactly as written: code, scripts, styles, the head.
const KEPT: &[&str] = &[
    "head", "pre", "script", "style", "template", "noscript", "textarea", "object",
];

/// Inline elements whose content is not prose: kept whole, as one placeholder.
pub(super) const ATOMIC: &[&str] = &[
    "code", "kbd", "samp", "var", "tt", "math", "svg", "ruby", "script", "style", "img", "br",
    "wbr", "video", "audio", "iframe", "object", "input", "button", "select", "textarea",
];

/// One node of the tree, with its byte range in the document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Node {
    /// The whole node: from `<` of the start tag to `>` of the end tag, or the text.
    pub range: Range<usize>,
    pub kind: NodeKind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum NodeKind {
    /// An element: its local name in lower case, the end of its start tag, the start of
    /// its end tag (both `range.end` for an empty element) and its children.
    Element {
        name: String,
        start_tag_end: usize,
        end_tag_start: usize,
        children: Vec<Node>,
    },
    /// Character data between tags (entity references excluded).
    Text,
    /// An entity or character reference, `&name;`.
    Ref,
    /// A comment, CDATA section, processing instruction or declaration.
    Other,
}

impl Node {
    pub(super) fn name(&self) -> Option<&str> {
        match &self.kind {
            NodeKind::Element { name, .. } => Some(name),
            _ => None,
        }
    }

    pub(super) fn children(&self) -> &[Node] {
        match &self.kind {
            NodeKind::Element { children, .. } => children,
            _ => &[],
        }
    }

    /// The range between the start and end tags.
    pub(super) fn inner(&self) -> Range<usize> {
        match &self.kind {
            NodeKind::Element {
                start_tag_end,
                end_tag_start,
                ..
            } => *start_tag_end..*end_tag_start,
            _ => self.range.clone(),
        }
    }

    /// The start tag's bytes.
    pub(super) fn start_tag<'a>(&self, doc: &'a str) -> &'a str {
        match &self.kind {
            NodeKind::Element { start_tag_end, .. } => &doc[self.range.start..*start_tag_end],
            _ => "",
        }
    }

    /// The end tag's bytes (empty for an empty element).
    pub(super) fn end_tag<'a>(&self, doc: &'a str) -> &'a str {
        match &self.kind {
            NodeKind::Element { end_tag_start, .. } => &doc[*end_tag_start..self.range.end],
            _ => "",
        }
    }
}

/// The local name of a qualified name, lower case (`epub:switch` → `switch`).
fn local(qname: &str) -> String {
    qname.rsplit(':').next().unwrap_or("").to_ascii_lowercase()
}

/// A well-formedness error at a byte position of a document.
#[derive(Debug)]
pub struct XmlError {
    pub pos: usize,
    pub message: String,
}

/// 1-based line and column of byte `pos` in `text`.
pub fn line_col(text: &str, pos: usize) -> (usize, usize) {
    let before = &text[..pos.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

/// Parse `doc` into its top-level nodes; an error for XML that is not well formed
/// (mismatched or unclosed tags, bad syntax).
pub(super) fn parse(doc: &str) -> Result<Vec<Node>, XmlError> {
    let mut reader = Reader::from_str(doc);
    reader.config_mut().check_end_names = true;
    // Each open element: (name, start, start_tag_end, children so far).
    let mut stack: Vec<(String, usize, usize, Vec<Node>)> = Vec::new();
    let mut top: Vec<Node> = Vec::new();
    loop {
        let start = reader.buffer_position() as usize;
        let event = reader.read_event().map_err(|e| XmlError {
            pos: reader.error_position() as usize,
            message: e.to_string(),
        })?;
        let end = reader.buffer_position() as usize;
        let node = match event {
            Event::Eof => break,
            Event::Start(e) => {
                stack.push((local(e.name().as_ref()), start, end, Vec::new()));
                continue;
            }
            Event::End(_) => {
                let Some((name, s, ste, children)) = stack.pop() else {
                    return Err(XmlError {
                        pos: start,
                        message: "end tag without a start tag".into(),
                    });
                };
                Node {
                    range: s..end,
                    kind: NodeKind::Element {
                        name,
                        start_tag_end: ste,
                        end_tag_start: start,
                        children,
                    },
                }
            }
            Event::Empty(e) => Node {
                range: start..end,
                kind: NodeKind::Element {
                    name: local(e.name().as_ref()),
                    start_tag_end: end,
                    end_tag_start: end,
                    children: Vec::new(),
                },
            },
            Event::Text(_) => Node {
                range: start..end,
                kind: NodeKind::Text,
            },
            Event::GeneralRef(_) => Node {
                range: start..end,
                kind: NodeKind::Ref,
            },
            _ => Node {
                range: start..end,
                kind: NodeKind::Other,
            },
        };
        match stack.last_mut() {
            Some(parent) => parent.3.push(node),
            None => top.push(node),
        }
    }
    if let Some((name, s, ..)) = stack.last() {
        return Err(XmlError {
            pos: *s,
            message: format!("element <{name}> is never closed"),
        });
    }
    Ok(top)
}

/// Parse `doc`, with an error naming `file`, line and column.
pub(super) fn parse_named(file: &str, doc: &str) -> Result<Vec<Node>> {
    parse(doc).or_else(|e| {
        let (line, col) = line_col(doc, e.pos);
        bail!(
            "{file}: line {line}, column {col}: not well-formed XML: {} (fix the file, e.g. \
             open and save it in Sigil or Calibre's editor, then run again)",
            e.message
        )
    })
}

/// A block of text to translate: the byte range of its content in the document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    /// The content: between the element's tags (trimmed of surrounding whitespace), or
    /// the run of inline nodes.
    pub inner: Range<usize>,
    /// The whole element when the block is one (`<p …>…</p>`); `None` for a run of
    /// inline nodes beside block elements.
    pub element: Option<Range<usize>>,
    /// The element's local name (`p`, `h2`, `td`), empty for a run.
    pub name: String,
    /// The heading level for `h1`–`h6`.
    pub heading: Option<u8>,
    /// Inside a footnote or endnote (`epub:type="footnote"`, `role="doc-endnote"`…).
    pub footnote: bool,
}

impl Block {
    /// Whether the block is the prose of a code comment.
    pub fn is_comment(&self) -> bool {
        self.name == "comment"
    }
}

fn is_block(name: &str) -> bool {
    BLOCK.contains(&name) || KEPT.contains(&name)
}

/// Whether the node is a block element or holds one.
fn holds_block(node: &Node) -> bool {
    match node.name() {
        Some(n) if is_block(n) => true,
        Some(n) if ATOMIC.contains(&n) => false,
        Some(_) => node.children().iter().any(holds_block),
        None => false,
    }
}

/// Whether the nodes have a letter in their prose (atomic elements excluded).
fn has_letters(doc: &str, nodes: &[Node]) -> bool {
    nodes.iter().any(|n| match &n.kind {
        NodeKind::Text => doc[n.range.clone()].chars().any(char::is_alphabetic),
        NodeKind::Element { name, children, .. } => {
            !ATOMIC.contains(&name.as_str()) && has_letters(doc, children)
        }
        _ => false,
    })
}

/// The range `r` of `doc` without leading and trailing XML whitespace.
fn trim(doc: &str, r: Range<usize>) -> Range<usize> {
    let s = &doc[r.clone()];
    let ws = |c: char| matches!(c, ' ' | '\t' | '\n' | '\r');
    let lead = s.len() - s.trim_start_matches(ws).len();
    let trail = s.len() - s.trim_end_matches(ws).len();
    r.start + lead..(r.end - trail).max(r.start + lead)
}

/// The blocks of a document's `<body>` (or of the whole document when it has none), in
/// document order.
pub(super) fn blocks(doc: &str, nodes: &[Node]) -> Vec<Block> {
    let mut out = Vec::new();
    match find(nodes, "body") {
        Some(body) => collect(doc, body, &mut out),
        None => {
            for n in nodes {
                if n.name().is_some() {
                    collect(doc, n, &mut out);
                }
            }
        }
    }
    let mut notes = Vec::new();
    notes_in(doc, nodes, &mut notes);
    for b in &mut out {
        b.footnote = notes
            .iter()
            .any(|r| r.start <= b.inner.start && b.inner.end <= r.end);
    }
    out
}

/// The ranges of the footnotes and endnotes under `nodes` (their `epub:type` or ARIA role).
fn notes_in(doc: &str, nodes: &[Node], out: &mut Vec<Range<usize>>) {
    for n in nodes {
        let tag = n.start_tag(doc);
        let note = ["footnote", "endnote", "rearnote"].iter().any(|t| {
            tag.contains(&format!("epub:type=\"{t}")) || tag.contains(&format!("doc-{t}"))
        });
        if note {
            out.push(n.range.clone());
        } else {
            notes_in(doc, n.children(), out);
        }
    }
}

/// The first element named `name`, depth first.
pub(super) fn find<'a>(nodes: &'a [Node], name: &str) -> Option<&'a Node> {
    for n in nodes {
        if n.name() == Some(name) {
            return Some(n);
        }
        if let Some(f) = find(n.children(), name) {
            return Some(f);
        }
    }
    None
}

fn collect(doc: &str, el: &Node, out: &mut Vec<Block>) {
    let name = el.name().unwrap_or("");
    if name == "pre" {
        return comment_blocks(doc, el, out);
    }
    if KEPT.contains(&name) || ATOMIC.contains(&name) {
        return;
    }
    let children = el.children();
    if !children.iter().any(holds_block) {
        if has_letters(doc, children) {
            let heading = match name.as_bytes() {
                [b'h', d @ b'1'..=b'6'] => Some(d - b'0'),
                _ => None,
            };
            out.push(Block {
                inner: trim(doc, el.inner()),
                element: Some(el.range.clone()),
                name: name.to_string(),
                heading,
                footnote: false,
            });
        }
        return;
    }
    let mut run: Vec<&Node> = Vec::new();
    for child in children {
        if holds_block(child) {
            flush(doc, &run, out);
            run.clear();
            collect(doc, child, out);
        } else {
            run.push(child);
        }
    }
    flush(doc, &run, out);
}

/// A run of inline nodes beside block elements becomes a block when it has letters.
fn flush(doc: &str, run: &[&Node], out: &mut Vec<Block>) {
    let (Some(first), Some(last)) = (run.first(), run.last()) else {
        return;
    };
    let owned: Vec<Node> = run.iter().map(|n| (*n).clone()).collect();
    if has_letters(doc, &owned) {
        out.push(Block {
            inner: trim(doc, first.range.start..last.range.end),
            element: None,
            name: String::new(),
            heading: None,
            footnote: false,
        });
    }
}

/// The nodes inside `range` of a document (a block's content), text nodes cut to it.
pub(super) fn nodes_in(nodes: &[Node], range: &Range<usize>, out: &mut Vec<Node>) {
    for n in nodes {
        if n.range.end <= range.start || n.range.start >= range.end {
            continue;
        }
        if n.range.start >= range.start && n.range.end <= range.end {
            out.push(n.clone());
        } else if n.kind == NodeKind::Text {
            out.push(Node {
                range: n.range.start.max(range.start)..n.range.end.min(range.end),
                kind: NodeKind::Text,
            });
        } else {
            nodes_in(n.children(), range, out);
        }
    }
}

/// The prose of the comments in a `pre` element, as blocks: for highlighted code (pandoc,
/// Calibre: `<span class="co">`), each comment span's text after its marker; for plain
/// text, the comments [`prose_ranges`](crate::book::code_comments::prose_ranges) finds for
/// the block's language (`class="language-python"`, `sourceCode python`).
fn comment_blocks(doc: &str, pre: &Node, out: &mut Vec<Block>) {
    let mut spans = Vec::new();
    comment_spans(doc, pre.children(), &mut spans);
    let ranges: Vec<Range<usize>> = if !spans.is_empty() {
        spans
            .into_iter()
            .flat_map(|s| {
                let text = &doc[s.clone()];
                let lang = match text.trim_start().chars().next() {
                    Some('/') => "js",
                    Some('-') => "sql",
                    _ => "sh",
                };
                shifted(lang, text, s.start)
            })
            .collect()
    } else {
        let code = match pre.children() {
            [only] if only.name() == Some("code") => only,
            _ => pre,
        };
        if code.children().iter().any(|c| c.name().is_some()) {
            return;
        }
        let lang = language(&format!("{} {}", pre.start_tag(doc), code.start_tag(doc)));
        shifted(&lang, &doc[code.inner()], code.inner().start)
    };
    out.extend(ranges.into_iter().map(|r| Block {
        inner: r,
        element: None,
        name: "comment".into(),
        heading: None,
        footnote: false,
    }));
}

/// The comment prose ranges of `code` (at `offset` in the document) for `lang`.
fn shifted(lang: &str, code: &str, offset: usize) -> Vec<Range<usize>> {
    let header = format!("```{lang}\n");
    let block = format!("{header}{code}\n```\n");
    crate::book::code_comments::prose_ranges(&block)
        .into_iter()
        .filter(|r| r.start >= header.len() && r.end <= header.len() + code.len())
        .filter(|r| block[r.clone()].chars().any(char::is_alphabetic))
        .map(|r| r.start - header.len() + offset..r.end - header.len() + offset)
        .collect()
}

/// The content ranges of the comment spans (`class="co"`, text only) under `nodes`.
fn comment_spans(doc: &str, nodes: &[Node], out: &mut Vec<Range<usize>>) {
    for n in nodes {
        let start = n.start_tag(doc);
        let comment = n.name().is_some()
            && regex_class_co(start)
            && n.children().iter().all(|c| c.name().is_none());
        if comment {
            out.push(n.inner());
        } else {
            comment_spans(doc, n.children(), out);
        }
    }
}

/// Whether a start tag has the class `co` (a comment in pandoc's and Kate's highlighting).
fn regex_class_co(start_tag: &str) -> bool {
    let Some(at) = start_tag.find("class=") else {
        return false;
    };
    let rest = &start_tag[at + 6..];
    let quote = rest.chars().next().unwrap_or('"');
    let value = rest[1..].split(quote).next().unwrap_or("");
    value.split_whitespace().any(|c| c == "co")
}

/// The code's language from its tags' classes (`language-python`, `sourceCode python`).
fn language(tags: &str) -> String {
    for word in tags.split(|c: char| c.is_whitespace() || c == '"' || c == '\'') {
        if let Some(l) = word
            .strip_prefix("language-")
            .or_else(|| word.strip_prefix("lang-"))
        {
            return l.to_string();
        }
    }
    let words: Vec<&str> = tags
        .split(|c: char| c.is_whitespace() || c == '"' || c == '\'')
        .collect();
    words
        .windows(2)
        .find(|w| w[0] == "sourceCode" && w[1] != "sourceCode" && !w[1].contains('='))
        .map(|w| w[1].to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(doc: &str) -> Vec<String> {
        let nodes = parse(doc).unwrap();
        blocks(doc, &nodes)
            .iter()
            .map(|b| doc[b.inner.clone()].to_string())
            .collect()
    }

    #[test]
    fn leaf_blocks_and_runs_beside_blocks() {
        let doc =
            "<html><head><title>T</title></head><body>\n<h1 id=\"a\">Hello <em>world</em></h1>\n\
                   <ul><li>One</li><li>Two <b>x</b>\n<ul><li>Inner</li></ul></li></ul>\
                   <pre>code here</pre><p>  </p><p><img src=\"a.png\"/></p></body></html>";
        assert_eq!(
            texts(doc),
            ["Hello <em>world</em>", "One", "Two <b>x</b>", "Inner"]
        );
        let nodes = parse(doc).unwrap();
        let b = blocks(doc, &nodes);
        assert_eq!(b[0].heading, Some(1));
        assert_eq!(b[2].element, None);
    }

    #[test]
    fn not_well_formed_is_an_error_with_position() {
        let doc = "<html>\n<body><p>a <em>b</p></body></html>";
        let e = parse(doc).unwrap_err();
        assert_eq!(line_col(doc, e.pos).0, 2);
        assert!(parse("<html><body><p>a</p>").is_err());
        let msg = parse_named("OEBPS/c.xhtml", doc).unwrap_err().to_string();
        assert!(msg.contains("OEBPS/c.xhtml: line 2"), "{msg}");
    }
}
