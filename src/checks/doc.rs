//! One pass of pulldown-cmark over a document, keeping what the checks compare.

use crate::units::{markdown_options, trim_url, BARE_URL_RE};
use pulldown_cmark::{CodeBlockKind, Event, LinkType, Parser, Tag, TagEnd};
use std::ops::Range;

/// A fenced or indented code block.
#[derive(Debug, Clone)]
pub(crate) struct CodeBlock {
    pub offset: usize,
    /// Info string of a fenced block (`rust`), empty for indented blocks.
    pub info: String,
    /// The code, exactly as pulldown-cmark reports it (container indentation removed).
    pub payload: String,
}

/// An item located in the document: heading text, link target, label, code…
#[derive(Debug, Clone)]
pub(crate) struct Item {
    pub offset: usize,
    pub value: String,
}

/// A heading.
#[derive(Debug, Clone)]
pub(crate) struct Heading {
    pub offset: usize,
    pub level: u8,
    pub text: String,
}

/// A table's shape.
#[derive(Debug, Clone)]
pub(crate) struct TableShape {
    pub offset: usize,
    pub rows: usize,
    pub cols: usize,
    /// The text of each cell (text and inline code), row by row.
    pub cells: Vec<String>,
}

/// A list and its number of items.
#[derive(Debug, Clone)]
pub(crate) struct ListShape {
    pub offset: usize,
    pub ordered: bool,
    pub items: usize,
}

/// Kind of a top-level block, for alignment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BlockKind {
    Heading(u8),
    Prose,
    Other,
}

/// A top-level block and the prose text in it.
#[derive(Debug, Clone)]
pub(crate) struct Block {
    pub range: Range<usize>,
    pub kind: BlockKind,
    /// Text events joined (code, URLs, HTML, math, link targets left out; bare URLs
    /// blanked), with soft breaks as spaces.
    pub prose: String,
    /// The label, when the block is a footnote definition.
    pub footnote: Option<String>,
    /// Bold (strong emphasis) spans in the block.
    pub bold: usize,
}

/// What the checks need from one Markdown document.
#[derive(Debug, Default)]
pub(crate) struct Doc {
    line_starts: Vec<usize>,
    pub code_blocks: Vec<CodeBlock>,
    pub headings: Vec<Heading>,
    pub links: Vec<Item>,
    pub images: Vec<Item>,
    pub footnote_refs: Vec<Item>,
    /// `[^x]` left as text because no definition matched.
    pub unresolved_footnotes: Vec<Item>,
    pub footnote_defs: Vec<Item>,
    pub tables: Vec<TableShape>,
    pub lists: Vec<ListShape>,
    pub inline_code: Vec<Item>,
    pub urls: Vec<Item>,
    pub blocks: Vec<Block>,
    /// Text events outside code, for placeholder-leak detection.
    pub text_runs: Vec<Item>,
}

impl Doc {
    /// 1-based line of a byte offset.
    pub fn line(&self, offset: usize) -> usize {
        self.line_starts.partition_point(|&s| s <= offset).max(1)
    }

    /// Analyse `text`.
    pub fn parse(text: &str) -> Doc {
        let mut w = Walk {
            doc: Doc {
                line_starts: std::iter::once(0)
                    .chain(text.match_indices('\n').map(|(i, _)| i + 1))
                    .collect(),
                ..Doc::default()
            },
            ..Walk::default()
        };
        for (event, r) in Parser::new_ext(text, markdown_options()).into_offset_iter() {
            let r = r.start.min(text.len())..r.end.min(text.len());
            match event {
                Event::Start(tag) => w.start(tag, &r),
                Event::End(end) => w.end(end),
                Event::Text(t) => w.text(&t, r.start),
                Event::Code(c) => w.code(&c, r.start),
                Event::FootnoteReference(label) => w.doc.footnote_refs.push(Item {
                    offset: r.start,
                    value: label.to_string(),
                }),
                Event::SoftBreak | Event::HardBreak => w.doc.push_prose(" "),
                Event::Rule if w.depth == 0 => w.doc.blocks.push(Block {
                    range: r.clone(),
                    kind: BlockKind::Other,
                    prose: String::new(),
                    footnote: None,
                    bold: 0,
                }),
                _ => {}
            }
        }
        w.doc
    }

    fn push_prose(&mut self, s: &str) {
        if let Some(b) = self.blocks.last_mut() {
            b.prose.push_str(s);
        }
    }

    /// Record bare URLs and unresolved footnote references of a text event, and append
    /// its prose (URLs blanked) to the current block.
    fn scan_text(&mut self, t: &str, offset: usize) {
        let mut prose = String::with_capacity(t.len());
        let mut last = 0;
        for m in BARE_URL_RE.find_iter(t) {
            let u = trim_url(m.as_str());
            self.urls.push(Item {
                offset: offset + m.start(),
                value: u.to_string(),
            });
            prose.push_str(&t[last..m.start()]);
            prose.push(' ');
            last = m.start() + u.len();
        }
        prose.push_str(&t[last..]);
        let mut rest = t;
        let mut base = 0;
        while let Some(p) = rest.find("[^") {
            let after = &rest[p + 2..];
            match after.find(']') {
                Some(q) if q > 0 && !after[..q].contains(char::is_whitespace) => {
                    self.unresolved_footnotes.push(Item {
                        offset: offset + base + p,
                        value: after[..q].to_string(),
                    });
                    base += p + 2 + q;
                    rest = &after[q..];
                }
                _ => {
                    base += p + 2;
                    rest = after;
                }
            }
        }
        self.push_prose(&prose);
    }
}

/// One pass over a document ([`Doc::parse`]): the [`Doc`] being filled, the nesting depth,
/// and the constructs open at this point whose events belong to them.
#[derive(Default)]
struct Walk {
    doc: Doc,
    depth: usize,
    code: Option<CodeBlock>,
    heading: Option<Heading>,
    table: Option<TableShape>,
    /// Open lists: shape, depth of their items.
    lists: Vec<(ListShape, usize)>,
    in_image: usize,
    in_metadata: bool,
    in_html_block: bool,
}

impl Walk {
    /// A tag opens: at the top level a new block; a construct opened, or counted in the
    /// one around it.
    fn start(&mut self, tag: Tag, r: &Range<usize>) {
        if self.depth == 0 {
            self.open_block(&tag, r);
        }
        self.depth += 1;
        match tag {
            Tag::CodeBlock(kind) => {
                let info = match kind {
                    CodeBlockKind::Fenced(i) => i.to_string(),
                    CodeBlockKind::Indented => String::new(),
                };
                self.code = Some(CodeBlock {
                    offset: r.start,
                    info,
                    payload: String::new(),
                });
            }
            Tag::Heading { level, .. } => {
                self.heading = Some(Heading {
                    offset: r.start,
                    level: level as u8,
                    text: String::new(),
                })
            }
            Tag::Table(cols) => {
                self.table = Some(TableShape {
                    offset: r.start,
                    rows: 0,
                    cols: cols.len(),
                    cells: Vec::new(),
                })
            }
            Tag::TableHead | Tag::TableRow => {
                if let Some(t) = self.table.as_mut() {
                    t.rows += 1;
                }
            }
            Tag::TableCell => {
                if let Some(t) = self.table.as_mut() {
                    t.cells.push(String::new());
                }
            }
            Tag::List(start) => self.lists.push((
                ListShape {
                    offset: r.start,
                    ordered: start.is_some(),
                    items: 0,
                },
                self.depth + 1,
            )),
            Tag::Item => {
                if let Some((l, d)) = self.lists.last_mut() {
                    if *d == self.depth {
                        l.items += 1;
                    }
                }
            }
            Tag::Strong => {
                if let Some(b) = self.doc.blocks.last_mut() {
                    b.bold += 1;
                }
            }
            Tag::FootnoteDefinition(label) => self.doc.footnote_defs.push(Item {
                offset: r.start,
                value: label.to_string(),
            }),
            Tag::Link {
                link_type,
                dest_url,
                ..
            } => {
                let item = Item {
                    offset: r.start,
                    value: dest_url.to_string(),
                };
                if matches!(link_type, LinkType::Autolink | LinkType::Email) {
                    self.doc.urls.push(item);
                } else {
                    self.doc.links.push(item);
                }
            }
            Tag::Image { dest_url, .. } => {
                self.in_image += 1;
                self.doc.images.push(Item {
                    offset: r.start,
                    value: dest_url.to_string(),
                });
            }
            Tag::MetadataBlock(_) => self.in_metadata = true,
            Tag::HtmlBlock => self.in_html_block = true,
            _ => {}
        }
    }

    /// A top-level block opens with `tag`.
    fn open_block(&mut self, tag: &Tag, r: &Range<usize>) {
        let kind = match tag {
            Tag::Heading { level, .. } => BlockKind::Heading(*level as u8),
            Tag::CodeBlock(_) | Tag::HtmlBlock | Tag::MetadataBlock(_) => BlockKind::Other,
            _ => BlockKind::Prose,
        };
        let footnote = match tag {
            Tag::FootnoteDefinition(l) => Some(l.to_string()),
            _ => None,
        };
        self.doc.blocks.push(Block {
            range: r.clone(),
            kind,
            prose: String::new(),
            footnote,
            bold: 0,
        });
    }

    /// A tag closes: the construct it closes is recorded.
    fn end(&mut self, end: TagEnd) {
        self.depth = self.depth.saturating_sub(1);
        match end {
            TagEnd::CodeBlock => {
                if let Some(c) = self.code.take() {
                    self.doc.code_blocks.push(c);
                }
            }
            TagEnd::Heading(_) => {
                if let Some(h) = self.heading.take() {
                    self.doc.headings.push(h);
                }
            }
            TagEnd::Table => {
                if let Some(t) = self.table.take() {
                    self.doc.tables.push(t);
                }
            }
            TagEnd::List(_) => {
                if let Some((l, _)) = self.lists.pop() {
                    self.doc.lists.push(l);
                }
            }
            TagEnd::Image => self.in_image = self.in_image.saturating_sub(1),
            TagEnd::MetadataBlock(_) => self.in_metadata = false,
            TagEnd::HtmlBlock => self.in_html_block = false,
            TagEnd::Paragraph | TagEnd::TableCell | TagEnd::Item => self.doc.push_prose(" "),
            _ => {}
        }
    }

    /// A text event: code, a heading's or a table cell's text, prose.
    fn text(&mut self, t: &str, offset: usize) {
        if let Some(c) = self.code.as_mut() {
            c.payload.push_str(t);
            return;
        }
        if self.in_metadata || self.in_html_block {
            return;
        }
        if let Some(h) = self.heading.as_mut() {
            h.text.push_str(t);
        }
        let _ = self.in_image;
        if let Some(cell) = self.table.as_mut().and_then(|t| t.cells.last_mut()) {
            cell.push_str(t);
        }
        self.doc.text_runs.push(Item {
            offset,
            value: t.to_string(),
        });
        self.doc.scan_text(t, offset);
    }

    /// Inline code: in a table cell's text and a heading's (in backticks).
    fn code(&mut self, c: &str, offset: usize) {
        if let Some(cell) = self.table.as_mut().and_then(|t| t.cells.last_mut()) {
            cell.push_str(c);
        }
        self.doc.inline_code.push(Item {
            offset,
            value: c.to_string(),
        });
        if let Some(h) = self.heading.as_mut() {
            h.text.push('`');
            h.text.push_str(c);
            h.text.push('`');
        }
    }
}
