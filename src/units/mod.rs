//! Translation units: a chapter split at safe Markdown block boundaries, with everything a
//! model must not touch either kept out of the model's input or replaced by placeholders.
//!
//! * [`segment_chapter`] parses a chapter with pulldown-cmark (CommonMark + GFM tables,
//!   footnotes, strikethrough, task lists, math, front matter) and cuts it into [`Unit`]s
//!   whose sources cover the chapter contiguously. Cuts fall only between top-level blocks,
//!   between the items of a top-level list, between the children of a top-level block
//!   quote, or (for a paragraph over the token budget) between sentences — never inside a
//!   code block, table, list item, HTML block, math block, footnote definition or front
//!   matter.
//! * Code blocks, HTML blocks, display-math paragraphs, front matter, rules and link
//!   reference definitions at top level become [`UnitKind::Verbatim`] units: never sent to a
//!   model, copied back byte for byte.
//! * Inside prose, inline code, URLs and autolinks, link and image targets, reference labels,
//!   footnote labels, inline HTML, math and nested code/HTML blocks become placeholders
//!   `{{1}}`, `{{2}}`, … (see [`placeholder_token`]); [`restore_placeholders`] puts each
//!   original back exactly once and reports missing, duplicated and invented ones.
//! * [`reassemble`] joins the translated units; with the untranslated units it reproduces
//!   the chapter byte for byte.
//!
//! The files: `types.rs` (units, placeholders, token counts), `placeholders.rs` (the token
//! form and restoration), `patterns.rs` (what plain prose keeps as written), `scan.rs` (the
//! pulldown-cmark pass), `atoms.rs` and `split.rs` (the pieces a chapter is cut into) and
//! `segment.rs` (units from atoms, and reassembly).

pub use crate::book::code_comments;
pub mod constraint;
pub mod skeleton;
pub mod verbatim;

mod atoms;
mod patterns;
mod placeholders;
mod scan;
mod segment;
mod split;
mod types;

pub(crate) use patterns::{footnote_citation, trim_url, BARE_URL_RE};
pub use placeholders::{
    placeholder_token, release_names, restore_placeholders, PlaceholderError, PLACEHOLDER_RE,
};
pub use scan::markdown_options;
pub use segment::{is_cjk, reassemble, segment_chapter, segment_chapter_with};
pub use types::{
    content_hash, EstimateTokens, Placeholder, PlaceholderKind, TokenCount, Unit, UnitKind,
};

#[cfg(test)]
pub(crate) use segment::first_translate_unit;
