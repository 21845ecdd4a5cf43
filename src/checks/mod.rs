//! Deterministic QA of a translation against its source: structure (code blocks, headings,
//! links, images, footnotes, tables, lists, inline code, URLs, placeholders) compared
//! exactly, and content (numbers, glossary, consistency, untranslated residue, wrong
//! language, repetition loops, length outliers, unbalanced markup) checked with
//! conservative heuristics. No model is involved.
//!
//! Entry points: [`check_pair`] for one chapter, [`check_unit`] / [`check_model_output`] /
//! [`check_units`] for translation units, [`check_books`] for whole books, and
//! [`Report`] for the summary, human rendering and stable JSON.

mod align;
mod content;
mod doc;
pub mod epub;
pub mod lang;
pub mod numbers;
mod paragraphs;
pub use paragraphs::identified_share;
mod structure;
pub use structure::hollow;

pub use crate::glossary::{Glossary, GlossaryEntry};

use crate::book::{Book, Chapter};
use crate::units::{restore_placeholders, PlaceholderError, PlaceholderKind, Unit, UnitKind};
use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;

/// What a finding is about. The JSON names are the snake_case forms (`code_block`, …).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    /// Code blocks: count and byte-exact payload.
    CodeBlock,
    /// Headings: count and levels; added or missing headings.
    Heading,
    /// Link target sequence.
    Link,
    /// Image target sequence.
    Image,
    /// Footnote references and definitions.
    Footnote,
    /// Table shapes (rows × columns).
    Table,
    /// List item counts.
    List,
    /// Inline code spans, byte-exact.
    InlineCode,
    /// Placeholders missing, duplicated or leaked.
    Placeholder,
    /// Numbers of the source missing from the translation.
    Number,
    /// Bare URLs and autolinks.
    Url,
    /// Glossary terms not rendered with their target term.
    Glossary,
    /// The same source text translated differently.
    Consistency,
    /// Source-language residue in the translation.
    Untranslated,
    /// Translation prose in a language other than the target.
    WrongLanguage,
    /// Looping, repeated output.
    Repetition,
    /// Length ratio outliers (truncation, padding, missing text).
    LengthRatio,
    /// Unbalanced emphasis, brackets or quotes.
    Markup,
    /// Spaces the target language does not write (inside a CJK word).
    Spacing,
    /// Line endings of another style than the source's (CRLF or LF).
    LineEnding,
    /// An EPUB's resources, package, layout, per-block markup and table of contents.
    #[serde(rename = "epub_package")]
    Package,
}

impl Category {
    /// Every category, in report order.
    pub const ALL: [Category; 21] = [
        Category::CodeBlock,
        Category::Heading,
        Category::Link,
        Category::Image,
        Category::Footnote,
        Category::Table,
        Category::List,
        Category::InlineCode,
        Category::Placeholder,
        Category::Number,
        Category::Url,
        Category::Glossary,
        Category::Consistency,
        Category::Untranslated,
        Category::WrongLanguage,
        Category::Repetition,
        Category::LengthRatio,
        Category::Markup,
        Category::Spacing,
        Category::LineEnding,
        Category::Package,
    ];

    /// The categories of structure a translation must keep exactly (what the translation
    /// pipeline guarantees: no error in them on Quire's own output).
    pub const STRUCTURE: [Category; 12] = [
        Category::CodeBlock,
        Category::Heading,
        Category::Link,
        Category::Image,
        Category::Footnote,
        Category::Table,
        Category::List,
        Category::InlineCode,
        Category::Placeholder,
        Category::Url,
        Category::LineEnding,
        Category::Package,
    ];

    /// The JSON / display name, e.g. `code_block`.
    pub fn name(self) -> &'static str {
        match self {
            Category::CodeBlock => "code_block",
            Category::Heading => "heading",
            Category::Link => "link",
            Category::Image => "image",
            Category::Footnote => "footnote",
            Category::Table => "table",
            Category::List => "list",
            Category::InlineCode => "inline_code",
            Category::Placeholder => "placeholder",
            Category::Number => "number",
            Category::Url => "url",
            Category::Glossary => "glossary",
            Category::Consistency => "consistency",
            Category::Untranslated => "untranslated",
            Category::WrongLanguage => "wrong_language",
            Category::Repetition => "repetition",
            Category::LengthRatio => "length_ratio",
            Category::Markup => "markup",
            Category::Spacing => "spacing",
            Category::LineEnding => "line_ending",
            Category::Package => "epub_package",
        }
    }
}

impl std::fmt::Display for Category {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// How bad a finding is. Errors fail the check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Structure or meaning is broken; the check fails.
    Error,
    /// Probably wrong; review.
    Warning,
    /// Worth knowing; often intended.
    Info,
}

impl Severity {
    /// `error`, `warning` or `info`.
    pub fn name(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Info => "info",
        }
    }
}

/// One problem found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    /// The chapter (its path relative to the book root).
    pub chapter: String,
    /// The unit id, for unit-level checks.
    pub unit: Option<String>,
    /// 1-based line in the translation, when the finding points into it.
    pub line: Option<usize>,
    /// 1-based line in the source, when the finding points into it.
    pub source_line: Option<usize>,
    /// What kind of problem.
    pub category: Category,
    /// How bad.
    pub severity: Severity,
    /// What was seen, quoting the text involved.
    pub evidence: String,
    /// What to do about it.
    pub action: String,
}

/// Counts per category and per severity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Summary {
    /// Number of chapters checked.
    pub chapters: usize,
    /// Findings with severity error.
    pub errors: usize,
    /// Findings with severity warning.
    pub warnings: usize,
    /// Findings with severity info.
    pub infos: usize,
    /// Findings per category; every category is present, in a fixed order.
    pub by_category: BTreeMap<Category, usize>,
}

/// The result of a check: findings, summary and verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    /// Whether there are no errors.
    pub passed: bool,
    /// Counts.
    pub summary: Summary,
    /// All findings, by chapter then position.
    pub findings: Vec<Finding>,
}

impl Report {
    /// Build the summary and verdict of `findings` over `chapters` chapters.
    pub fn from_findings(findings: Vec<Finding>, chapters: usize) -> Report {
        let mut by_category: BTreeMap<Category, usize> =
            Category::ALL.iter().map(|&c| (c, 0)).collect();
        let (mut errors, mut warnings, mut infos) = (0, 0, 0);
        for f in &findings {
            *by_category.entry(f.category).or_default() += 1;
            match f.severity {
                Severity::Error => errors += 1,
                Severity::Warning => warnings += 1,
                Severity::Info => infos += 1,
            }
        }
        Report {
            passed: errors == 0,
            summary: Summary {
                chapters,
                errors,
                warnings,
                infos,
                by_category,
            },
            findings,
        }
    }

    /// Stable, pretty-printed JSON (`passed`, `summary`, `findings`).
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|_| "{}".to_string())
    }

    /// Human-readable report: findings grouped by chapter, then the summary and verdict.
    pub fn render_human(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        let mut chapter: Option<&str> = None;
        for f in &self.findings {
            if chapter != Some(f.chapter.as_str()) {
                if chapter.is_some() {
                    out.push('\n');
                }
                let _ = writeln!(out, "{}", f.chapter);
                chapter = Some(f.chapter.as_str());
            }
            let loc = match (f.line, f.source_line, &f.unit) {
                (_, _, Some(u)) => u.clone(),
                (Some(l), _, _) => format!("line {l}"),
                (None, Some(l), _) => format!("src line {l}"),
                (None, None, None) => "-".to_string(),
            };
            let _ = writeln!(
                out,
                "  {:<7} {:<14} {:<13} {}",
                f.severity.name(),
                f.category.name(),
                loc,
                f.evidence
            );
            let _ = writeln!(out, "  {:<7} {:<14} {:<13} -> {}", "", "", "", f.action);
        }
        if !self.findings.is_empty() {
            out.push('\n');
        }
        let s = &self.summary;
        let _ = writeln!(
            out,
            "{}: {} error{}, {} warning{}, {} info in {} chapter{}",
            if self.passed { "PASS" } else { "FAIL" },
            s.errors,
            if s.errors == 1 { "" } else { "s" },
            s.warnings,
            if s.warnings == 1 { "" } else { "s" },
            s.infos,
            s.chapters,
            if s.chapters == 1 { "" } else { "s" }
        );
        let counts: Vec<String> = s
            .by_category
            .iter()
            .filter(|(_, &n)| n > 0)
            .map(|(c, n)| format!("{c} {n}"))
            .collect();
        if !counts.is_empty() {
            let _ = writeln!(out, "  {}", counts.join(", "));
        }
        out
    }
}

/// Languages, glossary and the chapter name findings are attributed to.
#[derive(Debug, Clone)]
pub struct CheckContext {
    /// Source language code (BCP 47), `en` by default.
    pub source_lang: String,
    /// Target language code, `zh-CN` by default.
    pub target_lang: String,
    /// Glossary terms to enforce.
    pub glossary: Arc<Glossary>,
    /// Chapter name put in findings.
    pub chapter: String,
    /// Write-back passes switched off (`--skip-pass`): typography rules by name, or
    /// `typography` for all of them.
    pub skipped_passes: Arc<[String]>,
}

impl Default for CheckContext {
    fn default() -> Self {
        CheckContext::new("en", "zh-CN")
    }
}

impl CheckContext {
    /// A context for a language pair, without glossary.
    pub fn new(source_lang: &str, target_lang: &str) -> CheckContext {
        CheckContext {
            source_lang: source_lang.to_string(),
            target_lang: target_lang.to_string(),
            glossary: Arc::new(Glossary::default()),
            chapter: String::new(),
            skipped_passes: Arc::from(Vec::new()),
        }
    }

    /// The same context with write-back passes switched off.
    pub fn with_skipped_passes(mut self, skipped: &[String]) -> CheckContext {
        self.skipped_passes = Arc::from(skipped.to_vec());
        self
    }

    /// The same context with a glossary.
    pub fn with_glossary(mut self, glossary: Glossary) -> CheckContext {
        self.glossary = Arc::new(glossary);
        self
    }

    /// The same context for another chapter name.
    pub fn for_chapter(&self, chapter: &str) -> CheckContext {
        CheckContext {
            chapter: chapter.to_string(),
            ..self.clone()
        }
    }

    pub(crate) fn finding(
        &self,
        category: Category,
        severity: Severity,
        line: Option<usize>,
        source_line: Option<usize>,
        evidence: String,
        action: &str,
    ) -> Finding {
        Finding {
            chapter: self.chapter.clone(),
            unit: None,
            line,
            source_line,
            category,
            severity,
            evidence,
            action: action.to_string(),
        }
    }
}

/// Check one chapter's translation against its source. Findings carry `ctx.chapter`
/// and line numbers in both files.
pub fn check_pair(source: &str, target: &str, ctx: &CheckContext) -> Vec<Finding> {
    let s = doc::Doc::parse(source);
    let t = doc::Doc::parse(target);
    let mut out = Vec::new();
    structure::check(&s, &t, ctx, &mut out);
    line_endings(source, target, ctx, &mut out);
    let segments = align::segments(&s, &t);
    content::check(&segments, ctx, &mut out);
    paragraphs::check(source, target, &t, ctx, &mut out);
    sort_findings(&mut out);
    out
}

/// A translation whose line endings are not all of the style of a source that uses one
/// style throughout (every line break CRLF, or every one LF).
fn line_endings(source: &str, target: &str, ctx: &CheckContext, out: &mut Vec<Finding>) {
    use crate::util::LineEnding;
    let (Some(style), Some(seen)) = (LineEnding::of(source), LineEnding::mixed(target)) else {
        return;
    };
    let other = match style {
        LineEnding::Crlf => seen.lf,
        LineEnding::Lf => seen.crlf,
    };
    if other > 0 {
        // The first line that ends in the other style.
        let first = target
            .split_inclusive('\n')
            .position(|l| l.ends_with('\n') && LineEnding::of(l) != Some(style))
            .map(|i| i + 1);
        out.push(ctx.finding(
            Category::LineEnding,
            Severity::Error,
            first,
            None,
            format!(
                "the source's line breaks are all {style}, the translation has {other} of the other style ({} CRLF, {} LF)",
                seen.crlf, seen.lf
            ),
            "Write the translation with the source's line endings.",
        ));
    }
}

/// Check one unit's translation (placeholders already restored) against its source.
/// Findings carry the unit id and no line numbers.
pub fn check_unit(unit_id: &str, source: &str, target: &str, ctx: &CheckContext) -> Vec<Finding> {
    let s = doc::Doc::parse(source);
    let t = doc::Doc::parse(target);
    let mut out = Vec::new();
    structure::check(&s, &t, ctx, &mut out);
    let segments = vec![align::whole(&s, &t)];
    content::check(&segments, ctx, &mut out);
    for f in &mut out {
        f.unit = Some(unit_id.to_string());
        f.line = None;
        f.source_line = None;
    }
    out
}

/// Turn a placeholder restoration failure into `placeholder` findings (errors).
pub fn placeholder_findings(err: &PlaceholderError, ctx: &CheckContext) -> Vec<Finding> {
    let mut out = Vec::new();
    let action = "Translate the unit again; keep every {{n}} token exactly once.";
    for (list, what) in [
        (&err.missing, "missing"),
        (&err.duplicated, "duplicated"),
        (&err.unknown, "invented (not in the source)"),
    ] {
        if !list.is_empty() {
            let mut f = ctx.finding(
                Category::Placeholder,
                Severity::Error,
                None,
                None,
                format!("placeholders {what}: {}", list.join(" ")),
                action,
            );
            f.unit = Some(err.unit.clone());
            out.push(f);
        }
    }
    out
}

/// Restore a model's raw output for `unit` and check it: on success the restored text and
/// the unit's findings; on a placeholder failure the error (re-translate) and its findings.
pub fn check_model_output(
    unit: &Unit,
    model_output: &str,
    ctx: &CheckContext,
) -> (Result<String, PlaceholderError>, Vec<Finding>) {
    match restore_placeholders(unit, model_output) {
        Ok(text) => {
            let findings = if unit.kind == UnitKind::Translate {
                check_unit(&unit.id, unit.source.trim(), text.trim(), ctx)
            } else {
                Vec::new()
            };
            (Ok(text), findings)
        }
        Err(err) => {
            let findings = placeholder_findings(&err, ctx);
            (Err(err), findings)
        }
    }
}

/// Check the restored translations of a chapter's units: each unit on its own, plus
/// cross-unit consistency and length outliers. `translations[i]` belongs to `units[i]`;
/// verbatim units and missing entries are skipped.
pub fn check_units(units: &[Unit], translations: &[String], ctx: &CheckContext) -> Vec<Finding> {
    let mut out = Vec::new();
    let mut segments = Vec::new();
    for (u, t) in units.iter().zip(translations) {
        if u.kind != UnitKind::Translate {
            continue;
        }
        let s = doc::Doc::parse(u.source.trim());
        let d = doc::Doc::parse(t.trim());
        let mut found = Vec::new();
        structure::check(&s, &d, ctx, &mut found);
        paragraphs::check(u.source.trim(), t.trim(), &d, ctx, &mut found);
        for f in &mut found {
            f.unit = Some(u.id.clone());
            f.line = None;
            f.source_line = None;
        }
        out.extend(found);
        if u.placeholders
            .iter()
            .any(|p| p.kind == PlaceholderKind::Code)
        {
            out.extend(
                comments_left_in_english(&s, &d, ctx)
                    .into_iter()
                    .map(|mut f| {
                        f.unit = Some(u.id.clone());
                        f
                    }),
            );
        }
        let mut seg = align::whole(&s, &d);
        seg.unit = Some(u.id.clone());
        segments.push(seg);
    }
    content::check(&segments, ctx, &mut out);
    out
}

/// The prose comments of a code-comments unit (one whose code is placeholders, see
/// [`crate::units::code_comments`]) that its translation still has word for word in the
/// source language: one warning each, so that a comment the fallback kept in English, or
/// that the model copied, is in the report for a person to translate.
fn comments_left_in_english(src: &doc::Doc, tgt: &doc::Doc, ctx: &CheckContext) -> Vec<Finding> {
    let mut out = Vec::new();
    for (a, b) in src.code_blocks.iter().zip(&tgt.code_blocks) {
        if a.info != b.info {
            continue;
        }
        for (x, y) in crate::units::code_comments::comment_pairs(&a.info, &a.payload, &b.payload) {
            let words = x
                .split_whitespace()
                .filter(|w| w.chars().any(char::is_alphabetic));
            if x.trim() == y.trim() && words.count() >= 2 {
                out.push(ctx.finding(
                    Category::Untranslated,
                    Severity::Warning,
                    None,
                    None,
                    format!("code comment left in the source language: {:?}", x.trim()),
                    "Translate the comment (the code around it stays as it is).",
                ));
            }
        }
    }
    out
}

/// Check every chapter of a translated book against the source book. Two single-file
/// books are paired whatever their names; directories are paired by relative path, and
/// chapters present on one side only are an error.
pub fn check_books(source: &Book, target: &Book, ctx: &CheckContext) -> Result<Report> {
    let pairs: Vec<(&Chapter, &Chapter)> =
        if source.chapters.len() == 1 && target.chapters.len() == 1 && !is_dir_book(source) {
            vec![(&source.chapters[0], &target.chapters[0])]
        } else {
            let mut pairs = Vec::new();
            let mut missing = Vec::new();
            for c in &source.chapters {
                match target.chapters.iter().find(|t| t.rel_path == c.rel_path) {
                    Some(t) => pairs.push((c, t)),
                    None => missing.push(c.name()),
                }
            }
            let extra: Vec<String> = target
                .chapters
                .iter()
                .filter(|t| !source.chapters.iter().any(|c| c.rel_path == t.rel_path))
                .map(|t| t.name())
                .collect();
            if !missing.is_empty() || !extra.is_empty() {
                let mut msg = String::from("the source and translation chapters differ:");
                if !missing.is_empty() {
                    msg.push_str(&format!(
                        " missing from {}: {};",
                        target.root.display(),
                        missing.join(", ")
                    ));
                }
                if !extra.is_empty() {
                    msg.push_str(&format!(
                        " not in {}: {};",
                        source.root.display(),
                        extra.join(", ")
                    ));
                }
                bail!("{}", msg.trim_end_matches(';'));
            }
            pairs
        };
    let mut findings = Vec::new();
    for (s, t) in &pairs {
        let c = ctx.for_chapter(&s.name());
        findings.extend(check_pair(&s.text, &t.text, &c));
    }
    if let (Some(s), Some(t)) = (&source.epub, &target.epub) {
        findings.extend(epub::compare(s, t));
    }
    Ok(Report::from_findings(findings, pairs.len()))
}

fn is_dir_book(b: &Book) -> bool {
    b.root.is_dir()
}

fn sort_findings(v: &mut [Finding]) {
    v.sort_by_key(|f| {
        (
            f.line.or(f.source_line).unwrap_or(usize::MAX),
            f.category,
            f.severity,
        )
    });
}
