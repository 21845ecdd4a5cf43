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
        let mut doc = Doc {
            line_starts: std::iter::once(0)
                .chain(text.match_indices('\n').map(|(i, _)| i + 1))
                .collect(),
            ..Doc::default()
        };
        let mut depth = 0usize;
        let mut code: Option<CodeBlock> = None;
        let mut heading: Option<Heading> = None;
        let mut table: Option<TableShape> = None;
        let mut lists: Vec<(ListShape, usize)> = Vec::new(); // shape, depth of items
        let mut in_image = 0usize;
        let mut in_metadata = false;
        let mut in_html_block = false;
        for (event, r) in Parser::new_ext(text, markdown_options()).into_offset_iter() {
            let r = r.start.min(text.len())..r.end.min(text.len());
            match event {
                Event::Start(tag) => {
                    if depth == 0 {
                        let kind = match &tag {
                            Tag::Heading { level, .. } => BlockKind::Heading(*level as u8),
                            Tag::CodeBlock(_) | Tag::HtmlBlock | Tag::MetadataBlock(_) => {
                                BlockKind::Other
                            }
                            _ => BlockKind::Prose,
                        };
                        let footnote = match &tag {
                            Tag::FootnoteDefinition(l) => Some(l.to_string()),
                            _ => None,
                        };
                        doc.blocks.push(Block {
                            range: r.clone(),
                            kind,
                            prose: String::new(),
                            footnote,
                            bold: 0,
                        });
                    }
                    depth += 1;
                    match tag {
                        Tag::CodeBlock(kind) => {
                            let info = match kind {
                                CodeBlockKind::Fenced(i) => i.to_string(),
                                CodeBlockKind::Indented => String::new(),
                            };
                            code = Some(CodeBlock {
                                offset: r.start,
                                info,
                                payload: String::new(),
                            });
                        }
                        Tag::Heading { level, .. } => {
                            heading = Some(Heading {
                                offset: r.start,
                                level: level as u8,
                                text: String::new(),
                            })
                        }
                        Tag::Table(cols) => {
                            table = Some(TableShape {
                                offset: r.start,
                                rows: 0,
                                cols: cols.len(),
                                cells: Vec::new(),
                            })
                        }
                        Tag::TableHead | Tag::TableRow => {
                            if let Some(t) = table.as_mut() {
                                t.rows += 1;
                            }
                        }
                        Tag::TableCell => {
                            if let Some(t) = table.as_mut() {
                                t.cells.push(String::new());
                            }
                        }
                        Tag::List(start) => lists.push((
                            ListShape {
                                offset: r.start,
                                ordered: start.is_some(),
                                items: 0,
                            },
                            depth + 1,
                        )),
                        Tag::Item => {
                            if let Some((l, d)) = lists.last_mut() {
                                if *d == depth {
                                    l.items += 1;
                                }
                            }
                        }
                        Tag::Strong => {
                            if let Some(b) = doc.blocks.last_mut() {
                                b.bold += 1;
                            }
                        }
                        Tag::FootnoteDefinition(label) => doc.footnote_defs.push(Item {
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
                                doc.urls.push(item);
                            } else {
                                doc.links.push(item);
                            }
                        }
                        Tag::Image { dest_url, .. } => {
                            in_image += 1;
                            doc.images.push(Item {
                                offset: r.start,
                                value: dest_url.to_string(),
                            });
                        }
                        Tag::MetadataBlock(_) => in_metadata = true,
                        Tag::HtmlBlock => in_html_block = true,
                        _ => {}
                    }
                }
                Event::End(end) => {
                    depth = depth.saturating_sub(1);
                    match end {
                        TagEnd::CodeBlock => {
                            if let Some(c) = code.take() {
                                doc.code_blocks.push(c);
                            }
                        }
                        TagEnd::Heading(_) => {
                            if let Some(h) = heading.take() {
                                doc.headings.push(h);
                            }
                        }
                        TagEnd::Table => {
                            if let Some(t) = table.take() {
                                doc.tables.push(t);
                            }
                        }
                        TagEnd::List(_) => {
                            if let Some((l, _)) = lists.pop() {
                                doc.lists.push(l);
                            }
                        }
                        TagEnd::Image => in_image = in_image.saturating_sub(1),
                        TagEnd::MetadataBlock(_) => in_metadata = false,
                        TagEnd::HtmlBlock => in_html_block = false,
                        TagEnd::Paragraph | TagEnd::TableCell | TagEnd::Item => doc.push_prose(" "),
                        _ => {}
                    }
                }
                Event::Text(t) => {
                    if let Some(c) = code.as_mut() {
                        c.payload.push_str(&t);
                        continue;
                    }
                    if in_metadata || in_html_block {
                        continue;
                    }
                    if let Some(h) = heading.as_mut() {
                        h.text.push_str(&t);
                    }
                    let _ = in_image;
                    if let Some(cell) = table.as_mut().and_then(|t| t.cells.last_mut()) {
                        cell.push_str(&t);
                    }
                    doc.text_runs.push(Item {
                        offset: r.start,
                        value: t.to_string(),
                    });
                    doc.scan_text(&t, r.start);
                }
                Event::Code(c) => {
                    if let Some(cell) = table.as_mut().and_then(|t| t.cells.last_mut()) {
                        cell.push_str(&c);
                    }
                    doc.inline_code.push(Item {
                        offset: r.start,
                        value: c.to_string(),
                    });
                    if let Some(h) = heading.as_mut() {
                        h.text.push('`');
                        h.text.push_str(&c);
                        h.text.push('`');
                    }
                }
                Event::FootnoteReference(label) => doc.footnote_refs.push(Item {
                    offset: r.start,
                    value: label.to_string(),
                }),
                Event::SoftBreak | Event::HardBreak => doc.push_prose(" "),
                Event::Rule if depth == 0 => doc.blocks.push(Block {
                    range: r.clone(),
                    kind: BlockKind::Other,
                    prose: String::new(),
                    footnote: None,
                    bold: 0,
                }),
                _ => {}
            }
        }
        doc
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
