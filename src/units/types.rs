//! The unit types: a [`Unit`] of a chapter, its [`Placeholder`]s and what they stand for,
//! and the token counts that size a unit.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Counts model tokens in a text; the engine implements it with the model's tokenizer.
pub trait TokenCount {
    /// Number of tokens `text` encodes to.
    fn count_tokens(&self, text: &str) -> usize;
}

/// A tokenizer-free, deliberately conservative token estimate: one token per 3 ASCII
/// characters (real BPE vocabularies average about 4 for English), one per ASCII digit
/// (Qwen and Llama 3 split numbers into single digits), and `UTF-8 length - 1` per other
/// character (2 for CJK, where current tokenizers need about 1 to 1.5).
#[derive(Debug, Clone, Copy, Default)]
pub struct EstimateTokens;

impl TokenCount for EstimateTokens {
    fn count_tokens(&self, text: &str) -> usize {
        let (mut ascii, mut digits, mut other) = (0usize, 0usize, 0usize);
        for c in text.chars() {
            if c.is_ascii_digit() {
                digits += 1;
            } else if c.is_ascii() {
                ascii += 1;
            } else {
                other += c.len_utf8().saturating_sub(1).max(1);
            }
        }
        ascii.div_ceil(3) + digits + other
    }
}

/// Whether a unit is sent to a model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UnitKind {
    /// Prose to translate: send [`Unit::protected`], restore with
    /// [`restore_placeholders`](super::restore_placeholders).
    Translate,
    /// Code, HTML, math, front matter, rules, reference definitions or text without
    /// letters: copied back verbatim, never sent to a model.
    Verbatim,
}

/// What a placeholder stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlaceholderKind {
    /// Inline code span, backticks included.
    InlineCode,
    /// A code block nested in prose (e.g. inside a list item).
    CodeBlock,
    /// An HTML block nested in prose.
    HtmlBlock,
    /// Inline HTML (a tag or comment).
    InlineHtml,
    /// Inline or display math, delimiters included.
    Math,
    /// A bare URL in text.
    Url,
    /// A whole autolink `<https://…>` / `<mail@…>`, or a whole link whose text is its label.
    Autolink,
    /// A link or image destination (with its title), between `](` and `)`.
    LinkTarget,
    /// A reference link label, between `][` and `]`.
    LinkLabel,
    /// A footnote reference `[^x]` or the `[^x]:` opening a footnote definition.
    FootnoteLabel,
    /// Source text that looks like a placeholder, protected so restoration is unambiguous.
    Literal,
    /// An identifier written in prose without backticks: an e-mail address, a dotted name
    /// (`work.position.title`, `config.json`) or a snake_case one (`user_id`).
    Identifier,
    /// A bibliographic reference in a footnote definition (authors, title, venue, year):
    /// books keep the works they cite as published.
    Citation,
    /// A camel-case name in prose (`GraphRAG`, `OpenViking`, `LlamaIndex`): kept as
    /// written; the model is shown it in backticks (see [`verbatim`](super::verbatim)).
    Name,
    /// The code of a fenced block whose comments are translated: everything between two
    /// comments' prose (fences, code, comment markers), see
    /// [`code_comments`](super::code_comments).
    Code,
}

/// One placeholder of a unit: the token the model sees and the original bytes it replaces.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placeholder {
    /// The token in [`Unit::protected`], e.g. `{{3}}`.
    pub token: String,
    /// The exact source bytes it stands for.
    pub original: String,
    /// What the original is.
    pub kind: PlaceholderKind,
}

/// A contiguous span of a chapter: either prose to translate or text kept verbatim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unit {
    /// Stable id `<chapter path>#<index, 3 digits>`, e.g. `chapter1.md#003` (index from 0).
    pub id: String,
    /// The chapter's path relative to the book root.
    pub chapter: PathBuf,
    /// Position in the chapter, from 0.
    pub index: usize,
    /// Whether it is translated or kept verbatim.
    pub kind: UnitKind,
    /// The original bytes of the span, separators (blank lines) included.
    pub source: String,
    /// What to send to the model: the source without its leading and trailing whitespace,
    /// protected spans replaced by placeholder tokens. Empty for verbatim units.
    pub protected: String,
    /// The placeholders of `protected`, in order (`{{1}}` first).
    pub placeholders: Vec<Placeholder>,
}

impl Unit {
    /// The whitespace the source starts with (kept around the translation on reassembly).
    pub fn leading_whitespace(&self) -> &str {
        let core = self.source.trim_start();
        &self.source[..self.source.len() - core.len()]
    }

    /// The whitespace the source ends with (blank lines separating it from the next unit).
    pub fn trailing_whitespace(&self) -> &str {
        let core = self.source.trim_end();
        &self.source[core.len()..]
    }

    /// Hex sha256 of the unit's kind and source: equal for identical spans, whatever their
    /// position, so translations can be cached and reused.
    pub fn content_hash(&self) -> String {
        content_hash(self)
    }
}

/// Hex sha256 of a unit's kind and source bytes (see [`Unit::content_hash`]).
pub fn content_hash(unit: &Unit) -> String {
    let tag = match unit.kind {
        UnitKind::Translate => "T\0",
        UnitKind::Verbatim => "V\0",
    };
    let mut bytes = Vec::with_capacity(tag.len() + unit.source.len());
    bytes.extend_from_slice(tag.as_bytes());
    bytes.extend_from_slice(unit.source.as_bytes());
    crate::util::sha256_hex(&bytes)
}
