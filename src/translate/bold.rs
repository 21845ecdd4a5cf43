//! The bold spans of a Markdown line, for the passes that keep a translation's emphasis
//! (typography, emphasis, originals).

use pulldown_cmark::{Event, Options, Parser, Tag};
use std::ops::Range;

/// A bold span of a line: its byte range (delimiters included) and its inner text.
#[derive(Debug, Clone, PartialEq)]
pub struct Bold {
    /// Byte range in the line, delimiters included.
    pub range: Range<usize>,
    /// The text between the delimiters.
    pub inner: String,
}

/// The bold spans of one Markdown line, in order.
pub fn bold_spans(line: &str) -> Vec<Bold> {
    Parser::new_ext(line, Options::all())
        .into_offset_iter()
        .filter_map(|(e, r)| match e {
            Event::Start(Tag::Strong) if r.len() > 4 => Some(Bold {
                inner: line[r.start + 2..r.end - 2].to_string(),
                range: r,
            }),
            _ => None,
        })
        .collect()
}
