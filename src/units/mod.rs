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

pub mod code_comments;
pub mod constraint;
pub mod skeleton;
pub mod verbatim;

use crate::book::Chapter;
use anyhow::Result;
use pulldown_cmark::{Event, LinkType, Options, Parser, Tag, TagEnd};
use regex::Regex;
use serde::{Deserialize, Serialize};
use std::ops::Range;
use std::path::PathBuf;
use std::sync::LazyLock;

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
    /// Prose to translate: send [`Unit::protected`], restore with [`restore_placeholders`].
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
    /// written; the model is shown it in backticks (see [`verbatim`]).
    Name,
    /// The code of a fenced block whose comments are translated: everything between two
    /// comments' prose (fences, code, comment markers), see [`code_comments`].
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

/// The placeholder token for the `n`-th protected span of a unit (from 1): `{{n}}`.
///
/// Why this form: it is short (3 tokens in Qwen/Llama vocabularies), pure ASCII, carries no
/// word a model would translate, is inert in Markdown (never parsed as markup, unlike
/// `[1]`, `<x1/>` or `%1`), and is the template syntax that instruction-tuned models are
/// trained to copy unchanged. Restoration also accepts the variants small models produce:
/// inner spaces (`{{ 1 }}`) and full-width braces (`｛｛1｝｝`). Source text that already
/// looks like a placeholder is itself protected, so a token in a model's output is never
/// ambiguous.
pub fn placeholder_token(n: usize) -> String {
    format!("{{{{{n}}}}}")
}

/// Matches a placeholder token and its tolerated variants; group 1 is the number.
pub static PLACEHOLDER_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?:\{\{|｛｛)[ \t\u{3000}]*([0-9]{1,6})[ \t\u{3000}]*(?:\}\}|｝｝)")
        .expect("valid placeholder regex")
});

/// Bare URLs in prose: `http(s)://`, `ftp://` or `www.` followed by printable ASCII.
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
static IDENTIFIER_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+\b|\b[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+\b|\b[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)+\b")
        .expect("valid identifier regex")
});

/// A camel-case name: a lower-case letter followed by a capital inside one word
/// (`GraphRAG`, `ReAct`, `iPhone`; not `LLMs`, `Tool-Based` or `GPT-4`).
static NAME_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\b[A-Za-z][A-Za-z0-9]*[a-z][A-Z][A-Za-z0-9]*\b").expect("valid name regex")
});

/// Whether an identifier match is one (not an abbreviation such as `e.g` or `U.S`).
fn is_identifier(m: &str) -> bool {
    m.contains('_') || m.split('.').any(|p| p.len() > 1)
}

static YEAR_RE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\b(?:19|20)\d\d\b").expect("valid year regex"));

/// Where a footnote definition's `[^x]:` label ends.
fn footnote_label_end(def: &str) -> Option<usize> {
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

/// A placeholder restoration failure: the model's output lost, repeated or invented
/// placeholders. The unit should be translated again.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unit {unit}: {}", self.describe())]
pub struct PlaceholderError {
    /// The unit's id.
    pub unit: String,
    /// Tokens of the unit missing from the output.
    pub missing: Vec<String>,
    /// Tokens of the unit that appear more than once.
    pub duplicated: Vec<String>,
    /// Placeholder-like tokens in the output that the unit does not have.
    pub unknown: Vec<String>,
}

impl PlaceholderError {
    fn describe(&self) -> String {
        let mut parts = Vec::new();
        if !self.missing.is_empty() {
            parts.push(format!("missing placeholders {}", self.missing.join(" ")));
        }
        if !self.duplicated.is_empty() {
            parts.push(format!(
                "duplicated placeholders {}",
                self.duplicated.join(" ")
            ));
        }
        if !self.unknown.is_empty() {
            parts.push(format!("invented placeholders {}", self.unknown.join(" ")));
        }
        parts.join("; ")
    }
}

/// Put each placeholder's original text back into a model's output for `unit`.
///
/// Every placeholder of the unit must appear exactly once (tolerated variants: `{{ 1 }}`,
/// `｛｛1｝｝`); otherwise the error lists the missing, duplicated and invented tokens. For a
/// verbatim unit the output is ignored and the source returned.
pub fn restore_placeholders(unit: &Unit, model_output: &str) -> Result<String, PlaceholderError> {
    if unit.kind == UnitKind::Verbatim {
        return Ok(unit.source.clone());
    }
    let n = unit.placeholders.len();
    let mut counts = vec![0usize; n];
    let mut unknown = Vec::new();
    let mut out = String::with_capacity(model_output.len() + 64);
    let mut last = 0;
    for caps in PLACEHOLDER_RE.captures_iter(model_output) {
        let whole = caps.get(0).expect("group 0");
        let idx = caps[1].parse::<usize>().unwrap_or(0);
        out.push_str(&model_output[last..whole.start()]);
        if (1..=n).contains(&idx) {
            counts[idx - 1] += 1;
            out.push_str(&unit.placeholders[idx - 1].original);
        } else {
            unknown.push(whole.as_str().to_string());
            out.push_str(whole.as_str());
        }
        last = whole.end();
    }
    out.push_str(&model_output[last..]);
    let missing: Vec<String> = (0..n)
        .filter(|&i| counts[i] == 0)
        .map(|i| unit.placeholders[i].token.clone())
        .collect();
    let duplicated: Vec<String> = (0..n)
        .filter(|&i| counts[i] > 1)
        .map(|i| unit.placeholders[i].token.clone())
        .collect();
    if missing.is_empty() && duplicated.is_empty() && unknown.is_empty() {
        Ok(out)
    } else {
        Err(PlaceholderError {
            unit: unit.id.clone(),
            missing,
            duplicated,
            unknown,
        })
    }
}

/// Give back to the model the camel-case names (`PlaceholderKind::Name`) for which
/// `translated` is true — names a house glossary translates — as the words they are: each
/// leaves the unit's placeholders and stands in its passage as written; the placeholders
/// after it are renumbered. A unit without such a name is unchanged.
pub fn release_names(unit: &mut Unit, translated: impl Fn(&str) -> bool) {
    let released = |p: &Placeholder| p.kind == PlaceholderKind::Name && translated(&p.original);
    if !unit.placeholders.iter().any(released) {
        return;
    }
    let old = std::mem::take(&mut unit.placeholders);
    let mut protected = String::with_capacity(unit.protected.len());
    let mut last = 0;
    for caps in PLACEHOLDER_RE.captures_iter(&unit.protected) {
        let whole = caps.get(0).expect("group 0");
        protected.push_str(&unit.protected[last..whole.start()]);
        last = whole.end();
        let Some(p) = caps[1]
            .parse::<usize>()
            .ok()
            .and_then(|i| old.get(i.checked_sub(1)?))
        else {
            protected.push_str(whole.as_str());
            continue;
        };
        if released(p) {
            protected.push_str(&p.original);
        } else {
            let token = placeholder_token(unit.placeholders.len() + 1);
            protected.push_str(&token);
            unit.placeholders.push(Placeholder { token, ..p.clone() });
        }
    }
    protected.push_str(&unit.protected[last..]);
    unit.protected = protected;
}

/// Join translated units into a chapter.
///
/// `translated[i]` is the restored translation of `units[i]` (see
/// [`restore_placeholders`]); it is trimmed and wrapped in the unit's own leading and
/// trailing whitespace, so block separators survive whatever the model did with them.
/// Verbatim units, and translate units without an entry, contribute their source. Between
/// two pieces of a paragraph split at a sentence boundary, the separating spaces are
/// dropped when both sides are CJK (Chinese and Japanese do not space sentences).
/// With `translated[i] == restore_placeholders(&units[i], &units[i].protected)` the result
/// is the chapter text byte for byte.
pub fn reassemble(units: &[Unit], translated: &[String]) -> String {
    let pieces: Vec<(&str, &str, &str, bool)> = units
        .iter()
        .enumerate()
        .map(|(i, u)| match (u.kind, translated.get(i)) {
            (UnitKind::Translate, Some(t)) => (
                u.leading_whitespace(),
                t.trim(),
                u.trailing_whitespace(),
                t.trim() != u.source.trim(),
            ),
            _ => (u.source.as_str(), "", "", false),
        })
        .collect();
    let mut out = String::with_capacity(units.iter().map(|u| u.source.len()).sum::<usize>() + 16);
    for (i, (lead, body, trail, changed)) in pieces.iter().enumerate() {
        out.push_str(lead);
        out.push_str(body);
        let next_body = pieces.get(i + 1).map(|p| p.1).unwrap_or("");
        let drop_space = *changed
            && !trail.is_empty()
            && trail.chars().all(|c| c == ' ')
            && body.chars().last().is_some_and(is_cjk)
            && next_body.chars().next().is_some_and(is_cjk)
            && pieces.get(i + 1).is_some_and(|p| p.0.is_empty());
        if !drop_space {
            out.push_str(trail);
        }
    }
    out
}

/// Whether `c` is a CJK ideograph, kana, Hangul syllable or CJK/full-width punctuation.
pub fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x3000..=0x303F | 0x3040..=0x30FF | 0x3400..=0x4DBF | 0x4E00..=0x9FFF
        | 0xAC00..=0xD7AF | 0xF900..=0xFAFF | 0xFF00..=0xFFEF | 0x20000..=0x2FA1F)
}

/// Split a chapter into units under a token `budget` per translate unit (counted with
/// `counter` on the source text, which over-counts the placeholder form).
///
/// The units' sources concatenate to the chapter text. A heading always starts a unit; a
/// block that alone exceeds the budget stays whole unless it is a paragraph, which is cut
/// at sentence boundaries (or, for one overlong sentence, between words outside inline
/// markup). The prose comments of fenced code blocks are translated (a unit per block,
/// everything else in it a placeholder): [`segment_chapter_with`] can keep them.
pub fn segment_chapter(
    chapter: &Chapter,
    budget: usize,
    counter: &dyn TokenCount,
) -> Result<Vec<Unit>> {
    segment_chapter_with(chapter, budget, counter, true)
}

/// [`segment_chapter`], with `code_comments: false` keeping every code block verbatim.
pub fn segment_chapter_with(
    chapter: &Chapter,
    budget: usize,
    counter: &dyn TokenCount,
    code_comments: bool,
) -> Result<Vec<Unit>> {
    let text = chapter.text.as_str();
    let scan = scan(text, code_comments);
    let atoms = build_atoms(text, &scan, budget, counter);
    let name = chapter.name();
    let mut units: Vec<Unit> = Vec::new();
    let mut cur: Option<(Range<usize>, usize)> = None; // open prose group and its tokens
                                                       // Whether the last unit was made from verbatim atoms (and may absorb the next one);
                                                       // prose that became verbatim for lack of letters stays a unit of its own.
    let mut open_verbatim = false;
    let push = |units: &mut Vec<Unit>, range: Range<usize>, kind: UnitKind| {
        let unit = make_unit(&name, chapter, units.len(), kind, range, text, &scan.spans);
        units.push(unit);
    };
    for atom in atoms {
        match atom.kind {
            AtomKind::Verbatim => {
                if let Some((r, _)) = cur.take() {
                    push(&mut units, r, UnitKind::Translate);
                    open_verbatim = false;
                }
                match units.last_mut() {
                    Some(last) if open_verbatim => last.source.push_str(&text[atom.range]),
                    _ => {
                        push(&mut units, atom.range, UnitKind::Verbatim);
                        open_verbatim = true;
                    }
                }
            }
            AtomKind::Prose { starts_unit, alone } => {
                open_verbatim = false;
                let t = counter.count_tokens(&text[atom.range.clone()]);
                match cur.take() {
                    Some((r, tokens)) if !starts_unit && !alone && tokens + t <= budget => {
                        cur = Some((r.start..atom.range.end, tokens + t));
                    }
                    Some((r, _)) => {
                        push(&mut units, r, UnitKind::Translate);
                        cur = Some((atom.range, t));
                    }
                    None => cur = Some((atom.range, t)),
                }
                if alone {
                    if let Some((r, _)) = cur.take() {
                        push(&mut units, r, UnitKind::Translate);
                    }
                }
            }
        }
    }
    if let Some((r, _)) = cur.take() {
        push(&mut units, r, UnitKind::Translate);
    }
    Ok(units)
}

fn make_unit(
    name: &str,
    chapter: &Chapter,
    index: usize,
    kind: UnitKind,
    range: Range<usize>,
    text: &str,
    spans: &[Span],
) -> Unit {
    let source = text[range.clone()].to_string();
    let mut unit = Unit {
        id: format!("{name}#{index:03}"),
        chapter: chapter.rel_path.clone(),
        index,
        kind,
        source,
        protected: String::new(),
        placeholders: Vec::new(),
    };
    if kind == UnitKind::Verbatim {
        return unit;
    }
    let lead = unit.leading_whitespace().len();
    let trail = unit.trailing_whitespace().len();
    let core = range.start + lead..range.end - trail;
    if core.is_empty() {
        unit.kind = UnitKind::Verbatim;
        return unit;
    }
    let first = spans.partition_point(|s| s.range.start < core.start);
    let mut protected = String::with_capacity(core.len());
    let mut pos = core.start;
    for span in &spans[first..] {
        if span.range.start >= core.end {
            break;
        }
        if span.range.end > core.end || span.range.start < pos {
            continue;
        }
        protected.push_str(&text[pos..span.range.start]);
        let token = placeholder_token(unit.placeholders.len() + 1);
        protected.push_str(&token);
        unit.placeholders.push(Placeholder {
            token,
            original: text[span.range.clone()].to_string(),
            kind: span.kind,
        });
        pos = span.range.end;
    }
    protected.push_str(&text[pos..core.end]);
    let has_letters = PLACEHOLDER_RE
        .replace_all(&protected, "")
        .chars()
        .any(char::is_alphabetic);
    if !has_letters {
        unit.kind = UnitKind::Verbatim;
        unit.placeholders.clear();
        return unit;
    }
    unit.protected = protected;
    unit
}

#[derive(Debug, Clone)]
struct Span {
    range: Range<usize>,
    kind: PlaceholderKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TopKind {
    Paragraph,
    Heading,
    List,
    BlockQuote,
    Atomic,
    Verbatim,
    /// A fenced code block with comments to translate: a unit of its own.
    CodeComments,
}

#[derive(Debug)]
struct TopBlock {
    range: Range<usize>,
    kind: TopKind,
    children: Vec<usize>,
    math_only: bool,
    saw_math: bool,
}

#[derive(Debug, Default)]
struct Scan {
    blocks: Vec<TopBlock>,
    /// Protected spans, sorted and non-overlapping.
    spans: Vec<Span>,
    /// Inline containers (emphasis, links, …) a sentence cut must not fall inside.
    containers: Vec<Range<usize>>,
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

fn scan(text: &str, code_comments: bool) -> Scan {
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
        let text = self.text;
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
            Tag::Link { link_type, .. } | Tag::Image { link_type, .. } => {
                let is_image = text.get(r.start..).is_some_and(|s| s.starts_with("!["));
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
            Tag::Emphasis
            | Tag::Strong
            | Tag::Strikethrough
            | Tag::Superscript
            | Tag::Subscript => self.scan.containers.push(r),
            _ => {}
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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AtomKind {
    /// Prose; `starts_unit`: never joins the unit before it (a heading); `alone`: a unit of
    /// its own (a figure: a model asked for a paragraph and the figure's caption after it
    /// drops the caption).
    Prose {
        starts_unit: bool,
        alone: bool,
    },
    Verbatim,
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

#[derive(Debug, Clone)]
struct Atom {
    range: Range<usize>,
    kind: AtomKind,
}

fn line_start(text: &str, pos: usize) -> usize {
    text[..pos].rfind('\n').map(|p| p + 1).unwrap_or(0)
}

fn build_atoms(text: &str, scan: &Scan, budget: usize, counter: &dyn TokenCount) -> Vec<Atom> {
    let mut atoms: Vec<Atom> = Vec::new();
    let mut cursor = 0usize;
    let mut pending_lead: Option<usize> = None; // leading whitespace before the first atom
    let push =
        |atoms: &mut Vec<Atom>, range: Range<usize>, kind: AtomKind, lead: &mut Option<usize>| {
            if range.is_empty() {
                return;
            }
            let start = lead.take().unwrap_or(range.start);
            atoms.push(Atom {
                range: start..range.end,
                kind,
            });
        };
    for b in &scan.blocks {
        let start = b.range.start.max(cursor);
        let end = b.range.end.min(text.len());
        if end <= start || !text.is_char_boundary(start) || !text.is_char_boundary(end) {
            continue;
        }
        // The gap before the block: separators join the previous atom, anything else
        // (link reference definitions) is verbatim.
        if start > cursor {
            let gap = &text[cursor..start];
            if gap.trim().is_empty() {
                match atoms.last_mut() {
                    Some(a) => a.range.end = start,
                    None => pending_lead = Some(cursor),
                }
            } else {
                push(
                    &mut atoms,
                    cursor..start,
                    AtomKind::Verbatim,
                    &mut pending_lead,
                );
            }
        }
        let prose = AtomKind::Prose {
            starts_unit: false,
            alone: false,
        };
        let alone = AtomKind::Prose {
            starts_unit: true,
            alone: true,
        };
        match b.kind {
            TopKind::Verbatim => push(
                &mut atoms,
                start..end,
                AtomKind::Verbatim,
                &mut pending_lead,
            ),
            TopKind::Paragraph if b.math_only && b.saw_math => push(
                &mut atoms,
                start..end,
                AtomKind::Verbatim,
                &mut pending_lead,
            ),
            TopKind::Heading => push(
                &mut atoms,
                start..end,
                AtomKind::Prose {
                    starts_unit: true,
                    alone: false,
                },
                &mut pending_lead,
            ),
            // A figure, a caption or a code block's comments: a unit of its own.
            TopKind::CodeComments => push(&mut atoms, start..end, alone, &mut pending_lead),
            TopKind::Paragraph
                if IMAGE_PARAGRAPH_RE.is_match(text[start..end].trim())
                    || CAPTION_RE.is_match(text[start..end].trim()) =>
            {
                push(&mut atoms, start..end, alone, &mut pending_lead)
            }
            TopKind::Paragraph => {
                if counter.count_tokens(&text[start..end]) > budget {
                    for piece in split_paragraph(text, start..end, scan, budget, counter) {
                        push(&mut atoms, piece, prose, &mut pending_lead);
                    }
                } else {
                    push(&mut atoms, start..end, prose, &mut pending_lead);
                }
            }
            TopKind::List | TopKind::BlockQuote => {
                let mut cuts: Vec<usize> = Vec::new();
                for &c in b.children.iter().skip(1) {
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
                // A quoted box (`> **Experiment 8-1**` …) does not join the paragraph
                // before it: a small model runs the box's title into that paragraph.
                let first = AtomKind::Prose {
                    starts_unit: b.kind == TopKind::BlockQuote,
                    alone: false,
                };
                let mut s = start;
                for c in cuts {
                    let kind = if s == start { first } else { prose };
                    push(&mut atoms, s..c, kind, &mut pending_lead);
                    s = c;
                }
                let kind = if s == start { first } else { prose };
                push(&mut atoms, s..end, kind, &mut pending_lead);
            }
            TopKind::Atomic => push(&mut atoms, start..end, prose, &mut pending_lead),
        }
        cursor = end;
    }
    if cursor < text.len() {
        let gap = &text[cursor..];
        if gap.trim().is_empty() && !atoms.is_empty() {
            if let Some(a) = atoms.last_mut() {
                a.range.end = text.len();
            }
        } else {
            push(
                &mut atoms,
                cursor..text.len(),
                AtomKind::Verbatim,
                &mut pending_lead,
            );
        }
    }
    if atoms.is_empty() && !text.is_empty() {
        atoms.push(Atom {
            range: 0..text.len(),
            kind: AtomKind::Verbatim,
        });
    }
    // Fill any hole so that atoms cover the text contiguously.
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

/// Cut positions inside `range` where a sentence ends (after the following whitespace),
/// outside protected spans and inline containers.
fn sentence_cuts(text: &str, range: &Range<usize>, forbidden: &[Range<usize>]) -> Vec<usize> {
    let s = &text[range.clone()];
    let mut cuts = Vec::new();
    let chars: Vec<(usize, char)> = s.char_indices().collect();
    let mut i = 0;
    while i < chars.len() {
        let (_, c) = chars[i];
        let cjk_end = matches!(c, '。' | '！' | '？');
        if matches!(c, '.' | '!' | '?') || cjk_end {
            let mut j = i + 1;
            while j < chars.len()
                && matches!(
                    chars[j].1,
                    '"' | '\'' | ')' | ']' | '”' | '’' | '）' | '」' | '』' | '*' | '_'
                )
            {
                j += 1;
            }
            let ws_start = j;
            while j < chars.len() && chars[j].1.is_whitespace() {
                j += 1;
            }
            let has_ws = j > ws_start;
            if j < chars.len() && (has_ws || cjk_end) {
                let next = chars[j].1;
                if !next.is_lowercase() {
                    let cut = range.start + chars[j].0;
                    if !forbidden.iter().any(|f| f.start < cut && cut < f.end) {
                        cuts.push(cut);
                    }
                }
            }
            i = j.max(i + 1);
        } else {
            i += 1;
        }
    }
    cuts
}

/// Cut positions after any whitespace run, outside protected spans and inline containers.
fn word_cuts(text: &str, range: &Range<usize>, forbidden: &[Range<usize>]) -> Vec<usize> {
    let s = &text[range.clone()];
    let mut cuts = Vec::new();
    let mut prev_ws = false;
    for (i, c) in s.char_indices() {
        if !c.is_whitespace() && prev_ws {
            let cut = range.start + i;
            if !forbidden.iter().any(|f| f.start < cut && cut < f.end) {
                cuts.push(cut);
            }
        }
        prev_ws = c.is_whitespace();
    }
    cuts
}

/// Split an overlong paragraph into pieces of at most `budget` tokens where possible.
fn split_paragraph(
    text: &str,
    range: Range<usize>,
    scan: &Scan,
    budget: usize,
    counter: &dyn TokenCount,
) -> Vec<Range<usize>> {
    let forbidden: Vec<Range<usize>> = scan
        .spans
        .iter()
        .map(|s| s.range.clone())
        .chain(scan.containers.iter().cloned())
        .filter(|r| r.start < range.end && r.end > range.start)
        .collect();
    let mut pieces = Vec::new();
    let mut bounds = vec![range.start];
    bounds.extend(sentence_cuts(text, &range, &forbidden));
    bounds.push(range.end);
    // Sentences, each cut further between words when it alone exceeds the budget.
    let mut sentences: Vec<Range<usize>> = Vec::new();
    for w in bounds.windows(2) {
        let r = w[0]..w[1];
        if r.is_empty() {
            continue;
        }
        if counter.count_tokens(&text[r.clone()]) > budget {
            let mut b = vec![r.start];
            b.extend(word_cuts(text, &r, &forbidden));
            b.push(r.end);
            let words: Vec<Range<usize>> = b
                .windows(2)
                .map(|w| w[0]..w[1])
                .filter(|r| !r.is_empty())
                .collect();
            sentences.extend(pack(text, words, budget, counter));
        } else {
            sentences.push(r);
        }
    }
    pieces.extend(pack(text, sentences, budget, counter));
    pieces
}

/// Greedily join adjacent ranges while their token count stays within the budget.
fn pack(
    text: &str,
    ranges: Vec<Range<usize>>,
    budget: usize,
    counter: &dyn TokenCount,
) -> Vec<Range<usize>> {
    let mut out: Vec<Range<usize>> = Vec::new();
    let mut cur: Option<(Range<usize>, usize)> = None;
    for r in ranges {
        let t = counter.count_tokens(&text[r.clone()]);
        cur = match cur.take() {
            Some((c, ct)) if ct + t <= budget => Some((c.start..r.end, ct + t)),
            Some((c, _)) => {
                out.push(c);
                Some((r, t))
            }
            None => Some((r, t)),
        };
    }
    if let Some((c, _)) = cur {
        out.push(c);
    }
    out
}

/// The first unit to translate of a one-chapter book `md` (for tests).
#[cfg(test)]
pub(crate) fn first_translate_unit(md: &str) -> Unit {
    let ch = crate::book::Chapter {
        rel_path: "c.md".into(),
        text: md.to_string(),
    };
    segment_chapter(&ch, 10_000, &EstimateTokens)
        .expect("a chapter")
        .into_iter()
        .find(|u| u.kind == UnitKind::Translate)
        .expect("a unit to translate")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chapter(text: &str) -> Chapter {
        Chapter {
            rel_path: PathBuf::from("ch1.md"),
            text: text.to_string(),
        }
    }

    fn roundtrip(text: &str, budget: usize) -> Vec<Unit> {
        let units = segment_chapter(&chapter(text), budget, &EstimateTokens).unwrap();
        let restored: Vec<String> = units
            .iter()
            .map(|u| restore_placeholders(u, &u.protected).unwrap())
            .collect();
        assert_eq!(reassemble(&units, &restored), text);
        let joined: String = units.iter().map(|u| u.source.as_str()).collect();
        assert_eq!(joined, text);
        units
    }

    #[test]
    fn placeholder_form() {
        assert_eq!(placeholder_token(12), "{{12}}");
        assert!(PLACEHOLDER_RE.is_match("x {{ 3 }} y"));
        assert!(PLACEHOLDER_RE.is_match("x ｛｛3｝｝ y"));
    }

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

    #[test]
    fn simple_roundtrip() {
        let units = roundtrip("# T\n\nHello `x` world.\n\n```\ncode\n```\n", 100);
        assert_eq!(units.len(), 2);
        assert_eq!(units[0].protected, "# T\n\nHello {{1}} world.");
        assert_eq!(units[1].kind, UnitKind::Verbatim);
    }

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
    fn camel_case_names_are_kept_and_can_be_released() {
        let mut units = roundtrip(
            "GraphRAG and LlamaIndex beat plain RAG; LLMs, GPT-4 and Tool-Based agents stay words.\n",
            1000,
        );
        let names: Vec<&str> = units[0]
            .placeholders
            .iter()
            .filter(|p| p.kind == PlaceholderKind::Name)
            .map(|p| p.original.as_str())
            .collect();
        assert_eq!(names, vec!["GraphRAG", "LlamaIndex"]);
        assert!(units[0]
            .protected
            .starts_with("{{1}} and {{2}} beat plain RAG; LLMs, GPT-4"));
        // A name a house glossary translates goes back into the passage as a word; the
        // placeholders after it are renumbered and the unit still restores to its source.
        release_names(&mut units[0], |n| n == "GraphRAG");
        assert_eq!(units[0].placeholders.len(), 1);
        assert_eq!(units[0].placeholders[0].original, "LlamaIndex");
        assert!(
            units[0].protected.starts_with("GraphRAG and {{1}} beat"),
            "{}",
            units[0].protected
        );
        let restored = restore_placeholders(&units[0], &units[0].protected).unwrap();
        assert_eq!(restored, units[0].source.trim_end());
        release_names(&mut units[0], |_| false);
        assert_eq!(units[0].placeholders.len(), 1);
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
