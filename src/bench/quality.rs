//! `quire bench quality`: a book translated by Quire and by a naive per-paragraph
//! llama.cpp loop, measured side by side per chapter.
//!
//! * **Quire**: the production path in this process — [`crate::translate::run`] with every
//!   option at the `quire translate` default, one run per chapter (each chapter a one-file
//!   book, so each has its own wall time and blocked units), into `<out>/quire/<chapter>/`,
//!   deleted first so nothing is reused from an earlier run's translation memory.
//! * **naive**: `benches/naive_loop.py` with the python of the llama-cpp-python venv: every
//!   blank-line-separated block sent alone through the GGUF's chat template, greedy, with a
//!   fixed system prompt and the glossary's terms; code fences and blocks without letters
//!   copied. Its output and wall time are cached under `~/.cache/quire/naive-loop/`, keyed by
//!   the chapter, the model's content, the glossary and the script, so an A/B run of Quire
//!   pays only for Quire.
//!
//! Measures, for each system and chapter (see [`measure`]):
//! * **structure errors**: error-severity findings of [`crate::checks::check_pair`] in the
//!   [`Category::STRUCTURE`]; error-severity `number` findings are counted separately;
//! * **blocked units** (Quire only), from the run's [`crate::translate::RunSummary`];
//! * **house-term share** ([`house_term_share`]): per house term, source occurrences whose
//!   target appears in the translation; overall and the worst term;
//! * **untranslated source** ([`untranslated_source`]): ordinary lowercase English words
//!   left in the translation's prose ÷ the source's prose words (for a target written in
//!   Latin letters, only the source's own words carried over unchanged);
//! * **chrF** against a reference translation (`benches/chrf.py`, sacrebleu, the whole
//!   chapter as one segment), when a reference chapter exists;
//! * **wall time**, model load included on both sides.
//!
//! `--cut-bytes N` cuts every chapter at its last heading at or before byte N, and its
//! reference after the same number of headings ([`cut_at_heading`], [`cut_after_headings`]).

use super::config::BenchConfig;
use super::engine::{ensure_llama_python, ensure_sacrebleu};
use super::sys::{self, Machine};
use super::table;
use crate::book::{load_book, Book};
use crate::checks::{check_pair, Category, CheckContext, Finding, Severity};
use crate::glossary::{Glossary, GlossaryEntry};
use crate::translate::{ProgressMode, TranslateOptions};
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// What to run.
#[derive(Debug, Clone)]
pub struct QualityBenchOptions {
    /// A `.md` file or a directory of chapters; `None` for the bundled sample book.
    pub book: Option<PathBuf>,
    /// Reference translations: a directory of chapters (matched by file name, or with a
    /// leading `en-` replaced by `zh-`), or one file for a one-chapter book.
    pub reference: Option<PathBuf>,
    /// GGUF file, used by both systems.
    pub model: PathBuf,
    /// House glossary (the sample book's own when benchmarking it and none is given).
    pub glossary: Option<PathBuf>,
    /// Output directory: `input/`, `reference/`, `quire/`, `naive/` are rewritten in it.
    pub out: PathBuf,
    /// Cut each chapter at its last heading at or before this byte.
    pub cut_bytes: Option<usize>,
    /// Threads for both systems.
    pub threads: usize,
    /// Do not run the naive loop.
    pub skip_naive: bool,
    /// How Quire gives house terms to the model.
    pub house_terms: crate::translate::HouseTerms,
    /// Quire writes a term's original at its first bold introduction (as `quire
    /// translate`; `false`: `--no-term-originals`).
    pub term_originals: bool,
    /// Quire's token budget per unit (as `quire translate --unit-tokens` takes it: the CLI
    /// clamps it).
    pub unit_tokens: usize,
    /// Source language code (`en`, or `zh` for Chinese → English).
    pub source_lang: String,
    /// Target language code.
    pub target_lang: String,
    /// Quire's on-disk prefix cache (as `quire translate` has it: `$QUIRE_PREFIX_CACHE_DIR`,
    /// else the one under the user cache dir; `None`: none).
    pub prefix_cache_dir: Option<PathBuf>,
    /// Where llama.cpp's venv is (the naive loop, and chrF's sacrebleu).
    pub config: BenchConfig,
}

/// One house term's share.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TermShare {
    /// The source term.
    pub term: String,
    /// Occurrences in the source's prose (whole words, any case, plural `s`/`es`).
    pub source_occurrences: usize,
    /// Occurrences of any of its targets in the translation's prose.
    pub target_occurrences: usize,
    /// min(target, source occurrences) ÷ source occurrences.
    pub share: f64,
}

/// House-term adherence of one translation.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct HouseTermShare {
    /// House-term occurrences in the source (terms that occur).
    pub occurrences: usize,
    /// Of those, how many have their target in the translation (per term:
    /// min(target occurrences, source occurrences)).
    pub honoured: usize,
    /// honoured ÷ occurrences; `None` when no house term occurs.
    pub overall: Option<f64>,
    /// The smallest per-term share.
    pub min: Option<f64>,
    /// The term with the smallest share.
    pub min_term: Option<String>,
    /// Every house term that occurs in the source.
    pub terms: Vec<TermShare>,
}

/// A word and how often it was seen.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct WordCount {
    /// The word.
    pub word: String,
    /// Occurrences.
    pub count: usize,
}

/// English left untranslated in a translation.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Untranslated {
    /// Ordinary lowercase English words in the translation's prose (see
    /// [`untranslated_english`]).
    pub words: usize,
    /// Words (ASCII letter runs) in the source's prose.
    pub source_prose_words: usize,
    /// words ÷ source prose words; `None` for a source without prose words.
    pub share: Option<f64>,
    /// The ten most frequent such words.
    pub top: Vec<WordCount>,
}

/// The deterministic measures of one translation against its source.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Metrics {
    /// Error-severity findings in [`Category::STRUCTURE`].
    pub structure_errors: usize,
    /// Error-severity `number` findings.
    pub number_errors: usize,
    /// All error-severity findings.
    pub errors: usize,
    /// All warning-severity findings.
    pub warnings: usize,
    /// Error-severity findings per category (categories with any).
    pub errors_by_category: BTreeMap<String, usize>,
    /// Share of the translation's identified paragraphs (prose long enough to tell) that
    /// are in the target language ([`crate::checks::identified_share`]); `None` when none
    /// could be told.
    pub target_language: Option<f64>,
    /// The first ten structure errors: `category: evidence`.
    pub structure_examples: Vec<String>,
    /// House-term adherence.
    pub house_terms: HouseTermShare,
    /// Untranslated English.
    pub untranslated: Untranslated,
}

/// One system's result for one chapter.
#[derive(Debug, Clone, Serialize)]
pub struct SystemResult {
    /// The translated chapter.
    pub output: String,
    /// Deterministic measures.
    pub metrics: Metrics,
    /// chrF (0–100) against the reference, when there is one and it could be computed.
    pub chrf: Option<f64>,
    /// Why chrF is missing although there is a reference.
    pub chrf_error: Option<String>,
    /// Wall seconds, model load included (for a cached naive result: the run that made it).
    pub wall_s: f64,
    /// Whether the result came from the naive-loop cache.
    pub cached: bool,
    /// Units blocked after the last revision (Quire only).
    pub blocked_units: Option<usize>,
    /// Translatable units (Quire only).
    pub units: Option<usize>,
    /// Whether the run finished every unit (Quire only).
    pub complete: Option<bool>,
    /// What the naive script printed (naive only).
    pub script: Option<serde_json::Value>,
    /// Model seconds per stage (Quire: per agent, from its `run.json`, each second of a
    /// batched step counted once; naive: its one stage, the wall time).
    pub stage_seconds: BTreeMap<String, f64>,
}

/// Both systems on one chapter.
#[derive(Debug, Clone, Serialize)]
pub struct ChapterQuality {
    /// Chapter name (path relative to the book root).
    pub chapter: String,
    /// Bytes of the (possibly cut) source chapter.
    pub source_bytes: usize,
    /// Bytes of the chapter before cutting.
    pub original_bytes: usize,
    /// Headings kept when the chapter was cut.
    pub cut_headings: Option<usize>,
    /// The (possibly cut) source chapter as translated.
    pub input: String,
    /// The reference chapter used for chrF (a cut copy when cutting).
    pub reference: Option<String>,
    /// Quire.
    pub quire: SystemResult,
    /// The naive loop, unless skipped or failed.
    pub naive: Option<SystemResult>,
    /// Why the naive loop has no result.
    pub naive_error: Option<String>,
    /// Quire's chrF − the naive loop's.
    pub chrf_diff: Option<f64>,
}

/// Sums over the chapters for one system.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SystemTotals {
    /// Structure errors.
    pub structure_errors: usize,
    /// Number errors.
    pub number_errors: usize,
    /// Blocked units (Quire only).
    pub blocked_units: Option<usize>,
    /// House-term occurrences in the sources.
    pub house_occurrences: usize,
    /// Of those, honoured.
    pub house_honoured: usize,
    /// honoured ÷ occurrences.
    pub house_share: Option<f64>,
    /// The smallest per-term share in any chapter.
    pub house_min: Option<f64>,
    /// Untranslated English words.
    pub untranslated_words: usize,
    /// Source prose words.
    pub source_prose_words: usize,
    /// untranslated ÷ source prose words.
    pub untranslated_share: Option<f64>,
    /// Mean chrF over the chapters that have one.
    pub chrf_mean: Option<f64>,
    /// Chapters behind `chrf_mean`.
    pub chrf_chapters: usize,
    /// Wall seconds, all chapters.
    pub wall_s: f64,
    /// Chapters measured.
    pub chapters: usize,
}

/// Everything `quire bench quality` reports.
#[derive(Debug, Clone, Serialize)]
pub struct QualityReport {
    /// Model file name.
    pub model: String,
    /// Model path.
    pub model_path: String,
    /// The machine.
    pub machine: Machine,
    /// Load averages when the benchmark started.
    pub load_average_start: Option<[f64; 3]>,
    /// Load averages when it ended.
    pub load_average_end: Option<[f64; 3]>,
    /// The book.
    pub book: String,
    /// The reference directory or file.
    pub reference: Option<String>,
    /// The glossary file (or "bundled sample glossary").
    pub glossary: Option<String>,
    /// House terms in the glossary.
    pub house_terms: usize,
    /// Target language.
    pub target_lang: String,
    /// The `--cut-bytes` limit.
    pub cut_bytes: Option<usize>,
    /// Output directory.
    pub out_dir: String,
    /// Whether the naive loop was skipped.
    pub naive_skipped: bool,
    /// The naive loop's engine ("llama-cpp-python X.Y.Z"), when it ran.
    pub naive_engine: Option<String>,
    /// How chrF was computed.
    pub chrf_method: Option<String>,
    /// The categories counted as structure errors.
    pub structure_categories: Vec<String>,
    /// Per chapter.
    pub chapters: Vec<ChapterQuality>,
    /// Quire over all chapters.
    pub quire_totals: SystemTotals,
    /// The naive loop over the chapters it translated.
    pub naive_totals: Option<SystemTotals>,
}

// ---------------------------------------------------------------------------------------
// Pure parts: cutting, reference names, prose, the measures.

/// Byte offsets of the ATX heading lines (`#` to `######` then a space or the line's end)
/// of a Markdown text, outside fenced code blocks.
pub fn heading_starts(text: &str) -> Vec<usize> {
    let mut out = Vec::new();
    let mut fence: Option<(char, usize)> = None;
    let mut pos = 0usize;
    for line in text.split_inclusive('\n') {
        let start = pos;
        pos += line.len();
        let body = line.trim_end_matches(['\n', '\r']);
        let indent = body.len() - body.trim_start_matches(' ').len();
        let trimmed = &body[indent..];
        let fence_run = |c: char| trimmed.chars().take_while(|&x| x == c).count();
        if let Some((c, n)) = fence {
            if indent <= 3 && fence_run(c) >= n && trimmed.trim_start_matches(c).trim().is_empty() {
                fence = None;
            }
            continue;
        }
        if indent <= 3 {
            for c in ['`', '~'] {
                let n = fence_run(c);
                if n >= 3 {
                    fence = Some((c, n));
                }
            }
            if fence.is_some() {
                continue;
            }
        }
        if indent == 0 {
            let hashes = body.chars().take_while(|&c| c == '#').count();
            let rest = &body[hashes..];
            if (1..=6).contains(&hashes) && (rest.is_empty() || rest.starts_with([' ', '\t'])) {
                out.push(start);
            }
        }
    }
    out
}

/// Cut a chapter at its last heading line that starts at or before byte `max_bytes`
/// (the first heading of the text does not count, so something is always kept): the text
/// before that heading, and how many headings it keeps. `None` when the chapter is not
/// longer than `max_bytes` or has no such heading (then it is used whole).
pub fn cut_at_heading(text: &str, max_bytes: usize) -> Option<(String, usize)> {
    if text.len() <= max_bytes {
        return None;
    }
    let starts = heading_starts(text);
    let (k, &at) = starts
        .iter()
        .enumerate()
        .rfind(|&(_, &s)| s <= max_bytes && !text[..s].trim().is_empty())?;
    Some((format!("{}\n", text[..at].trim_end()), k))
}

/// The text before the heading with index `headings` (0-based), i.e. the text that keeps
/// `headings` headings — the reference's cut matching a source cut by [`cut_at_heading`].
/// The whole text when it has no more headings than that.
pub fn cut_after_headings(text: &str, headings: usize) -> String {
    match heading_starts(text).get(headings) {
        Some(&at) => format!("{}\n", text[..at].trim_end()),
        None => text.to_string(),
    }
}

/// File names a chapter's reference may have, in the order tried: with a leading `en-` in
/// the file name replaced by `zh-` (first, so that a directory holding both the English and
/// the Chinese chapters works), then the same relative path.
pub fn reference_candidates(rel: &Path) -> Vec<PathBuf> {
    reference_candidates_for(rel, ("en", "zh"))
}

/// [`reference_candidates`] for a language pair (primary subtags): a leading `<from>-` of
/// the file name replaced by `<to>-` (`zh-chapter8.md` → `en-chapter8.md` from Chinese).
pub fn reference_candidates_for(rel: &Path, (from, to): (&str, &str)) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(rest) = rel
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_prefix(&format!("{from}-")))
    {
        out.push(rel.with_file_name(format!("{to}-{rest}")));
    }
    out.push(rel.to_path_buf());
    out
}

/// The reference chapter for `rel`: `reference` itself when it is a file and the book has
/// one chapter, else the first of [`reference_candidates`] that exists under it — never the
/// file `source` (the chapter itself).
pub fn find_reference(
    reference: &Path,
    rel: &Path,
    chapters: usize,
    source: Option<&Path>,
    langs: (&str, &str),
) -> Option<PathBuf> {
    let same = |p: &Path| {
        source.is_some_and(
            |s| matches!((p.canonicalize(), s.canonicalize()), (Ok(a), Ok(b)) if a == b),
        )
    };
    if reference.is_file() {
        return (chapters == 1 && !same(reference)).then(|| reference.to_path_buf());
    }
    reference_candidates_for(rel, langs)
        .into_iter()
        .map(|c| reference.join(c))
        .find(|p| p.is_file() && !same(p))
}

/// The prose of a Markdown text: its text outside code blocks, inline code, HTML, math,
/// front matter, autolinks and the bibliographic references of footnotes (kept as
/// published), with bare URLs blanked (link targets are not text). Blocks end with a
/// newline; inline code and breaks become spaces.
pub fn prose_text(markdown: &str) -> String {
    use pulldown_cmark::{Event, LinkType, Parser, Tag, TagEnd};
    let uncited: String = markdown
        .split_inclusive('\n')
        .map(|line| match crate::units::footnote_citation(line) {
            Some(c) => format!("{}{}", &line[..c.start], &line[c.end..]),
            None => line.to_string(),
        })
        .collect();
    let markdown = uncited.as_str();
    let mut out = String::new();
    let mut skip = 0usize;
    let mut links: Vec<bool> = Vec::new();
    for ev in Parser::new_ext(markdown, crate::units::markdown_options()) {
        match ev {
            Event::Start(Tag::CodeBlock(_) | Tag::MetadataBlock(_)) => skip += 1,
            Event::End(TagEnd::CodeBlock | TagEnd::MetadataBlock(_)) => {
                skip = skip.saturating_sub(1);
                out.push('\n');
            }
            Event::Start(Tag::Link { link_type, .. }) => {
                let auto = matches!(link_type, LinkType::Autolink | LinkType::Email);
                skip += usize::from(auto);
                links.push(auto);
            }
            Event::End(TagEnd::Link) => {
                skip = skip.saturating_sub(usize::from(links.pop() == Some(true)));
            }
            Event::End(
                TagEnd::Paragraph
                | TagEnd::Heading(_)
                | TagEnd::Item
                | TagEnd::TableCell
                | TagEnd::FootnoteDefinition
                | TagEnd::BlockQuote(_),
            ) => out.push('\n'),
            Event::Text(t) if skip == 0 => out.push_str(&t),
            Event::Code(_)
            | Event::Html(_)
            | Event::InlineHtml(_)
            | Event::InlineMath(_)
            | Event::DisplayMath(_)
            | Event::FootnoteReference(_)
            | Event::SoftBreak
            | Event::HardBreak => out.push(' '),
            _ => {}
        }
    }
    crate::units::BARE_URL_RE
        .replace_all(&out, " ")
        .into_owned()
}

/// Words of prose: runs of ASCII letters.
fn prose_words(prose: &str) -> usize {
    prose
        .split(|c: char| !c.is_ascii_alphabetic())
        .filter(|w| !w.is_empty())
        .count()
}

/// Ordinary English words in a text's prose (see [`prose_text`]), as the untranslated
/// measure counts them: the text is split into Latin tokens (ASCII letters and digits with
/// `_ . / @ : + # - '` inside); a token with a digit or any of `_ . / @ : + #` after trimming
/// its punctuation is an identifier, path, version or URL and is skipped; the rest is split
/// at hyphens and apostrophes, and every part of three or more letters, all lowercase, is a
/// word. Capitalised words, acronyms and CamelCase names (kept on purpose in technical
/// Chinese) are not counted.
pub fn lowercase_english_words(prose: &str) -> Vec<&str> {
    let is_tok = |c: char| c.is_ascii_alphanumeric() || "_./@:+#-'’".contains(c);
    let mut out = Vec::new();
    for tok in prose.split(|c: char| !is_tok(c)) {
        let tok = tok.trim_matches(|c: char| ".,:;!?'’-".contains(c));
        if tok.is_empty()
            || tok
                .chars()
                .any(|c| c.is_ascii_digit() || "_./@:+#".contains(c))
        {
            continue;
        }
        for part in tok.split(['-', '\'', '’']) {
            if part.len() >= 3 && part.chars().all(|c| c.is_ascii_lowercase()) {
                out.push(part);
            }
        }
    }
    out
}

/// What of the source language is left in the translation: for an English source into a
/// CJK target [`untranslated_english`]; into a target written in Latin letters (German,
/// French…) only the source's own words carried over unchanged ([`carried_over_words`]: its
/// ordinary words are words of the target language); for a CJK source the CJK characters of
/// the translation's prose ÷ the source prose's (`words` counts characters, `top` the most
/// frequent ones).
pub fn untranslated_source(
    source: &str,
    translation: &str,
    source_lang: &str,
    target_lang: &str,
) -> Untranslated {
    let profile = crate::lang::profile_or_latin(source_lang);
    if !profile.is_cjk() {
        if crate::lang::profile_or_latin(target_lang).is_cjk() {
            return untranslated_english(source, translation);
        }
        return carried_over_words(source, translation);
    }
    let letters = |t: &str| -> Vec<char> {
        prose_text(t)
            .chars()
            .filter(|&c| profile.writes(c))
            .collect()
    };
    let (src, left) = (letters(source).len(), letters(translation));
    let mut counts: BTreeMap<char, usize> = BTreeMap::new();
    for &c in &left {
        *counts.entry(c).or_default() += 1;
    }
    let mut top: Vec<WordCount> = counts
        .into_iter()
        .map(|(c, n)| WordCount {
            word: c.to_string(),
            count: n,
        })
        .collect();
    top.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.word.cmp(&b.word)));
    top.truncate(10);
    Untranslated {
        words: left.len(),
        source_prose_words: src,
        share: (src > 0).then(|| left.len() as f64 / src as f64),
        top,
    }
}

/// Untranslated English: [`lowercase_english_words`] of the translation's prose ÷ the words
/// (ASCII letter runs) of the source's prose, with the ten most frequent words.
pub fn untranslated_english(source: &str, translation: &str) -> Untranslated {
    let prose = prose_text(translation);
    word_counts(source, lowercase_english_words(&prose))
}

/// Untranslated words for a target in Latin letters: the translation's
/// [`lowercase_english_words`] that are also words of the source's prose (`the`, `shell`
/// left as written; `und`, `der` are the target's own) ÷ the source's prose words.
pub fn carried_over_words(source: &str, translation: &str) -> Untranslated {
    let source_prose = prose_text(source);
    let own: std::collections::BTreeSet<&str> =
        lowercase_english_words(&source_prose).into_iter().collect();
    let prose = prose_text(translation);
    let words = lowercase_english_words(&prose)
        .into_iter()
        .filter(|w| own.contains(w))
        .collect();
    word_counts(source, words)
}

/// `words` (left in a translation) counted against the source's prose words, with the ten
/// most frequent.
fn word_counts(source: &str, words: Vec<&str>) -> Untranslated {
    let source_prose_words = prose_words(&prose_text(source));
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for w in &words {
        *counts.entry(w).or_default() += 1;
    }
    let mut top: Vec<WordCount> = counts
        .into_iter()
        .map(|(w, n)| WordCount {
            word: w.to_string(),
            count: n,
        })
        .collect();
    top.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.word.cmp(&b.word)));
    top.truncate(10);
    Untranslated {
        words: words.len(),
        source_prose_words,
        share: (source_prose_words > 0).then(|| words.len() as f64 / source_prose_words as f64),
        top,
    }
}

/// A pattern for a term: whole words where the term starts or ends with a Latin letter or
/// digit (with an optional plural `s`/`es` for source terms), a plain substring otherwise.
fn term_pattern(term: &str, plural: bool) -> String {
    let t = term.trim();
    let latin_start = t.starts_with(|c: char| c.is_ascii_alphanumeric());
    let latin_end = t.ends_with(|c: char| c.is_ascii_alphanumeric());
    format!(
        "{}{}{}{}",
        if latin_start { r"\b" } else { "" },
        regex::escape(t),
        if plural && latin_end { "(?:es|s)?" } else { "" },
        if latin_end { r"\b" } else { "" }
    )
}

/// House-term share of a translation: for every house term of `terms` that occurs in the
/// source's prose, its occurrences there (whole words, any case, plural `s`/`es`) and the
/// occurrences of any of its targets in the translation's prose; a term's share is
/// min(target, source) ÷ source occurrences, the overall share the sum of those minima ÷
/// the sum of source occurrences.
pub fn house_term_share(
    source: &str,
    translation: &str,
    terms: &[GlossaryEntry],
) -> HouseTermShare {
    let src = prose_text(source);
    let tgt = prose_text(translation);
    let mut shares = Vec::new();
    for e in terms
        .iter()
        .filter(|e| e.house && !e.source.trim().is_empty())
    {
        let Ok(sre) = regex::Regex::new(&format!("(?i){}", term_pattern(&e.source, true))) else {
            continue;
        };
        let n_src = sre.find_iter(&src).count();
        if n_src == 0 {
            continue;
        }
        let mut targets: Vec<&String> = e.target.iter().filter(|t| !t.trim().is_empty()).collect();
        targets.sort_by_key(|t| std::cmp::Reverse(t.len()));
        let alt = targets
            .iter()
            .map(|t| term_pattern(t, false))
            .collect::<Vec<_>>()
            .join("|");
        let n_tgt = if alt.is_empty() {
            0
        } else {
            regex::Regex::new(&format!("(?i)(?:{alt})"))
                .map(|r| r.find_iter(&tgt).count())
                .unwrap_or(0)
        };
        shares.push(TermShare {
            term: e.source.clone(),
            source_occurrences: n_src,
            target_occurrences: n_tgt,
            share: n_tgt.min(n_src) as f64 / n_src as f64,
        });
    }
    let occurrences: usize = shares.iter().map(|s| s.source_occurrences).sum();
    let honoured: usize = shares
        .iter()
        .map(|s| s.target_occurrences.min(s.source_occurrences))
        .sum();
    let worst = shares
        .iter()
        .min_by(|a, b| a.share.total_cmp(&b.share).then(b.term.cmp(&a.term)));
    HouseTermShare {
        occurrences,
        honoured,
        overall: (occurrences > 0).then(|| honoured as f64 / occurrences as f64),
        min: worst.map(|w| w.share),
        min_term: worst.map(|w| w.term.clone()),
        terms: shares,
    }
}

/// Every deterministic measure of `translation` against `source`: the check findings
/// (`ctx` carries the glossary and languages), house-term share over `ctx`'s glossary, and
/// untranslated English.
pub fn measure(source: &str, translation: &str, ctx: &CheckContext) -> Metrics {
    let findings: Vec<Finding> = check_pair(source, translation, ctx);
    let errors: Vec<&Finding> = findings
        .iter()
        .filter(|f| f.severity == Severity::Error)
        .collect();
    let mut errors_by_category = BTreeMap::new();
    for f in &errors {
        *errors_by_category
            .entry(f.category.name().to_string())
            .or_default() += 1;
    }
    let structure: Vec<&&Finding> = errors
        .iter()
        .filter(|f| Category::STRUCTURE.contains(&f.category))
        .collect();
    Metrics {
        structure_errors: structure.len(),
        number_errors: errors
            .iter()
            .filter(|f| f.category == Category::Number)
            .count(),
        errors: errors.len(),
        warnings: findings
            .iter()
            .filter(|f| f.severity == Severity::Warning)
            .count(),
        errors_by_category,
        structure_examples: structure
            .iter()
            .take(10)
            .map(|f| format!("{}: {}", f.category.name(), f.evidence))
            .collect(),
        house_terms: house_term_share(source, translation, &ctx.glossary.entries),
        untranslated: untranslated_source(source, translation, &ctx.source_lang, &ctx.target_lang),
        target_language: {
            let (told, target) = crate::checks::identified_share(translation, &ctx.target_lang);
            (told > 0).then(|| target as f64 / told as f64)
        },
    }
}

// ---------------------------------------------------------------------------------------
// Running the systems.

/// A script of the repository's `benches/` directory.
pub fn bench_script(name: &str) -> Result<PathBuf> {
    [
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("benches")
            .join(name),
        Path::new("benches").join(name),
    ]
    .into_iter()
    .find(|p| p.is_file())
    .with_context(|| format!("benches/{name} not found (run from the repository)"))
}

/// Where naive-loop results are cached: `<Quire's cache dir>/naive-loop`.
pub fn naive_cache_dir() -> PathBuf {
    crate::paths::cache_dir().join("naive-loop")
}

/// The naive-loop cache key: sha256 over the chapter, the model's content hash, the
/// glossary given to the script, the script and the target language (each length-prefixed).
pub fn naive_cache_key(
    chapter: &[u8],
    model_hash: &str,
    glossary: &[u8],
    script: &[u8],
    target_lang: &str,
) -> String {
    let mut h = Sha256::new();
    for part in [
        chapter,
        model_hash.as_bytes(),
        glossary,
        script,
        target_lang.as_bytes(),
    ] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part);
    }
    hex::encode(h.finalize())
}

#[derive(Serialize, Deserialize)]
struct CachedRun {
    wall_s: f64,
    script: serde_json::Value,
}

fn last_json_line(stdout: &[u8]) -> Result<serde_json::Value> {
    let stdout = String::from_utf8_lossy(stdout);
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .context("no JSON line in the script's output")?;
    serde_json::from_str(line).with_context(|| format!("cannot parse the script's output: {line}"))
}

/// The naive side's fixed inputs.
struct Naive {
    python: PathBuf,
    script: PathBuf,
    script_bytes: Vec<u8>,
    model_hash: String,
    glossary_file: Option<PathBuf>,
    glossary_bytes: Vec<u8>,
}

/// Translate one chapter with the naive loop (or take it from the cache) into `output`;
/// returns (wall seconds, script JSON, cached).
fn run_naive(
    n: &Naive,
    opts: &QualityBenchOptions,
    input: &Path,
    chapter: &str,
    output: &Path,
) -> Result<(f64, serde_json::Value, bool)> {
    let key = naive_cache_key(
        chapter.as_bytes(),
        &n.model_hash,
        &n.glossary_bytes,
        &n.script_bytes,
        &opts.target_lang,
    );
    let dir = naive_cache_dir();
    let (md, js) = (
        dir.join(format!("{key}.md")),
        dir.join(format!("{key}.json")),
    );
    if let (Ok(text), Ok(meta)) = (std::fs::read(&md), std::fs::read(&js)) {
        if let Ok(c) = serde_json::from_slice::<CachedRun>(&meta) {
            crate::util::write_atomic(output, &text)?;
            return Ok((c.wall_s, c.script, true));
        }
    }
    if let Some(parent) = output.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let mut cmd = Command::new(&n.python);
    cmd.arg(&n.script)
        .arg("--model")
        .arg(&opts.model)
        .args(["--threads", &opts.threads.to_string()])
        .arg("--input")
        .arg(input)
        .arg("--output")
        .arg(output)
        .args(["--source-lang", &opts.source_lang])
        .args(["--target-lang", &opts.target_lang]);
    if let Some(g) = &n.glossary_file {
        cmd.arg("--glossary-json").arg(g);
    }
    let t = Instant::now();
    let out = cmd
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("cannot run {}", n.python.display()))?;
    let wall_s = t.elapsed().as_secs_f64();
    if !out.status.success() {
        bail!("{} exited with {}", n.script.display(), out.status);
    }
    let script = last_json_line(&out.stdout)?;
    let text = std::fs::read(output)
        .with_context(|| format!("the naive loop wrote no {}", output.display()))?;
    crate::util::write_atomic(&md, &text)?;
    crate::util::write_atomic(
        &js,
        serde_json::to_string_pretty(&CachedRun {
            wall_s,
            script: script.clone(),
        })?
        .as_bytes(),
    )?;
    Ok((wall_s, script, false))
}

/// chrF of `hyp` against `reference` with `benches/chrf.py`: (score, method).
fn chrf(python: &Path, hyp: &Path, reference: &Path) -> Result<(f64, String)> {
    let script = bench_script("chrf.py")?;
    let out = Command::new(python)
        .arg(&script)
        .arg("--hypothesis")
        .arg(hyp)
        .arg("--reference")
        .arg(reference)
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("cannot run {}", python.display()))?;
    if !out.status.success() {
        bail!("{} exited with {}", script.display(), out.status);
    }
    let v = last_json_line(&out.stdout)?;
    let score = v
        .get("chrf")
        .and_then(|x| x.as_f64())
        .context("chrf.py printed no `chrf`")?;
    let method = format!(
        "{} ({}, sacrebleu {})",
        v.get("segmentation")
            .and_then(|x| x.as_str())
            .unwrap_or("?"),
        v.get("signature").and_then(|x| x.as_str()).unwrap_or("?"),
        v.get("sacrebleu").and_then(|x| x.as_str()).unwrap_or("?")
    );
    Ok((score, method))
}

/// A directory name for a chapter: its relative path with separators as `__`, no extension.
fn chapter_dir_name(rel: &Path) -> String {
    rel.with_extension("")
        .to_string_lossy()
        .replace(['/', '\\'], "__")
}

fn remove_dir(dir: &Path) -> Result<()> {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("cannot remove {}", dir.display())),
    }
}

fn totals<'a>(results: impl Iterator<Item = &'a SystemResult>) -> SystemTotals {
    let mut t = SystemTotals::default();
    let mut chrf_sum = 0.0;
    for r in results {
        let m = &r.metrics;
        t.chapters += 1;
        t.structure_errors += m.structure_errors;
        t.number_errors += m.number_errors;
        if let Some(b) = r.blocked_units {
            t.blocked_units = Some(t.blocked_units.unwrap_or(0) + b);
        }
        t.house_occurrences += m.house_terms.occurrences;
        t.house_honoured += m.house_terms.honoured;
        if let Some(x) = m.house_terms.min {
            t.house_min = Some(t.house_min.map_or(x, |y: f64| y.min(x)));
        }
        t.untranslated_words += m.untranslated.words;
        t.source_prose_words += m.untranslated.source_prose_words;
        if let Some(c) = r.chrf {
            chrf_sum += c;
            t.chrf_chapters += 1;
        }
        t.wall_s += r.wall_s;
    }
    t.house_share =
        (t.house_occurrences > 0).then(|| t.house_honoured as f64 / t.house_occurrences as f64);
    t.untranslated_share = (t.source_prose_words > 0)
        .then(|| t.untranslated_words as f64 / t.source_prose_words as f64);
    t.chrf_mean = (t.chrf_chapters > 0).then(|| chrf_sum / t.chrf_chapters as f64);
    t
}

/// The house glossary, as (glossary, file given to both systems, name for the report):
/// `--glossary`, else the sample book's own (written to `out`) when benchmarking it.
fn load_glossary(
    opts: &QualityBenchOptions,
    sample: bool,
    out: &Path,
) -> Result<(Glossary, Option<PathBuf>, Option<String>)> {
    Ok(match (&opts.glossary, sample) {
        (Some(p), _) => (
            Glossary::load(p, &opts.source_lang, &opts.target_lang)?,
            Some(p.clone()),
            Some(p.display().to_string()),
        ),
        (None, true) => {
            let p = out.join("sample-glossary.json");
            crate::util::write_atomic(&p, crate::translate::sample_book::GLOSSARY_JSON.as_bytes())?;
            (
                Glossary::parse_json(
                    crate::translate::sample_book::GLOSSARY_JSON,
                    "en",
                    &opts.target_lang,
                )?,
                Some(p),
                Some("bundled sample glossary".to_string()),
            )
        }
        (None, false) => (Glossary::default(), None, None),
    })
}

/// A chapter ready for both systems: its (possibly cut) text written to `input/`, and its
/// reference (a cut copy under `reference/` when cutting).
struct Prepared {
    name: String,
    rel: PathBuf,
    text: String,
    original_bytes: usize,
    cut_headings: Option<usize>,
    input: PathBuf,
    reference: Option<PathBuf>,
}

/// Inputs (cut when asked) and references for every chapter of `book`.
fn prepare_chapters(opts: &QualityBenchOptions, book: &Book, out: &Path) -> Result<Vec<Prepared>> {
    let mut chapters = Vec::new();
    let langs = (
        crate::lang::primary(&opts.source_lang),
        crate::lang::primary(&opts.target_lang),
    );
    let langs = (langs.0.as_str(), langs.1.as_str());
    for c in &book.chapters {
        let cut = opts.cut_bytes.and_then(|n| cut_at_heading(&c.text, n));
        if let (Some(n), None) = (opts.cut_bytes, &cut) {
            if c.text.len() > n {
                eprintln!(
                    "quality: {}: no heading at or before byte {n} to cut at; using the whole chapter",
                    c.name()
                );
            }
        }
        let text = cut
            .as_ref()
            .map_or_else(|| c.text.clone(), |(t, _)| t.clone());
        // The chapter's own file (none for the bundled sample book).
        let source = opts.book.as_ref().map(|b| {
            if b.is_dir() {
                b.join(&c.rel_path)
            } else {
                b.clone()
            }
        });
        let input = out.join("input").join(&c.rel_path);
        if let Some(p) = input.parent() {
            std::fs::create_dir_all(p)?;
        }
        crate::util::write_atomic(&input, text.as_bytes())?;
        let mut reference = opts.reference.as_deref().and_then(|r| {
            find_reference(
                r,
                &c.rel_path,
                book.chapters.len(),
                source.as_deref(),
                langs,
            )
        });
        if let (Some(r), Some((_, k))) = (&reference, &cut) {
            let full = std::fs::read_to_string(r)
                .with_context(|| format!("cannot read reference {}", r.display()))?;
            let copy = out.join("reference").join(&c.rel_path);
            if let Some(p) = copy.parent() {
                std::fs::create_dir_all(p)?;
            }
            crate::util::write_atomic(&copy, cut_after_headings(&full, *k).as_bytes())?;
            reference = Some(copy);
        }
        if opts.reference.is_some() && reference.is_none() {
            eprintln!("quality: {}: no reference chapter; chrF –", c.name());
        }
        chapters.push(Prepared {
            name: c.name(),
            rel: c.rel_path.clone(),
            text,
            original_bytes: c.text.len(),
            cut_headings: cut.map(|(_, k)| k),
            input,
            reference,
        });
    }
    Ok(chapters)
}

/// Python for the naive loop and chrF, when either is needed (`Err`: why there is none).
fn find_python(opts: &QualityBenchOptions, chapters: &[Prepared]) -> Result<PathBuf, String> {
    let needs_python = !opts.skip_naive || chapters.iter().any(|c| c.reference.is_some());
    if needs_python {
        match ensure_llama_python(&opts.config).and_then(|p| ensure_sacrebleu(&p).map(|()| p)) {
            Ok(p) => Ok(p),
            Err(e) => {
                eprintln!("warning: no python for the naive loop and chrF: {e:#}");
                Err(format!("{e:#}"))
            }
        }
    } else {
        Err("not needed".to_string())
    }
}

/// The naive loop's fixed inputs: the script, the model's hash and the glossary as the
/// script reads it (written to `out`). `Err`: why the naive side does not run.
fn prepare_naive(
    opts: &QualityBenchOptions,
    python: &Result<PathBuf, String>,
    glossary: &Glossary,
    out: &Path,
) -> Result<Naive, String> {
    if opts.skip_naive {
        return Err("skipped (--skip-naive)".to_string());
    }
    python.clone().and_then(|python| {
        (|| -> Result<Naive> {
            let script = bench_script("naive_loop.py")?;
            let (glossary_file, glossary_bytes) = if glossary.is_empty() {
                (None, Vec::new())
            } else {
                let list: Vec<serde_json::Value> = glossary
                    .entries
                    .iter()
                    .map(|e| serde_json::json!({"source": e.source, "target": e.target}))
                    .collect();
                let bytes = serde_json::to_vec_pretty(&list)?;
                let p = out.join("naive-glossary.json");
                crate::util::write_atomic(&p, &bytes)?;
                (Some(p), bytes)
            };
            Ok(Naive {
                script_bytes: std::fs::read(&script)?,
                script,
                python,
                model_hash: crate::model_store::content_hash(&opts.model)?,
                glossary_file,
                glossary_bytes,
            })
        })()
        .map_err(|e| format!("{e:#}"))
    })
}

/// chrF scoring with the bench's python, remembering the method of the first score.
struct Scorer {
    python: Result<PathBuf, String>,
    method: Option<String>,
}

impl Scorer {
    /// (chrF, why it is missing) of `hyp` against `reference`; both `None` without one.
    fn score(&mut self, hyp: &Path, reference: Option<&PathBuf>) -> (Option<f64>, Option<String>) {
        let Some(r) = reference else {
            return (None, None);
        };
        match &self.python {
            Ok(py) => match chrf(py, hyp, r) {
                Ok((s, m)) => {
                    self.method.get_or_insert(m);
                    (Some(s), None)
                }
                Err(e) => {
                    eprintln!("warning: chrF failed: {e:#}");
                    (None, Some(format!("{e:#}")))
                }
            },
            Err(e) => (None, Some(e.clone())),
        }
    }
}

/// Quire on one chapter: the production path (`quire translate`'s defaults) into
/// `out/quire/<chapter>/`, timed, measured and scored.
fn quire_chapter(
    opts: &QualityBenchOptions,
    c: &Prepared,
    position: (usize, usize),
    glossary_path: &Option<PathBuf>,
    cctx: &CheckContext,
    scorer: &mut Scorer,
) -> Result<SystemResult> {
    let qdir = opts.out.join("quire").join(chapter_dir_name(&c.rel));
    let topts = TranslateOptions {
        input: Some(c.input.clone()),
        out: qdir.clone(),
        glossary: glossary_path.clone(),
        source_lang: opts.source_lang.clone(),
        target_lang: opts.target_lang.clone(),
        model: Some(opts.model.display().to_string()),
        progress: ProgressMode::Quiet,
        house_terms: opts.house_terms,
        term_originals: opts.term_originals,
        unit_tokens: opts.unit_tokens,
        prefix_cache_dir: opts.prefix_cache_dir.clone(),
        ..TranslateOptions::default()
    };
    eprintln!(
        "quality: [{}/{}] {}: Quire translating ({} bytes)",
        position.0,
        position.1,
        c.name,
        c.text.len()
    );
    let t = Instant::now();
    let summary =
        crate::translate::run(&topts)?.context("the translation run returned no summary")?;
    let wall_s = t.elapsed().as_secs_f64();
    let file_name = c.rel.file_name().context("chapter without a file name")?;
    let qout = qdir.join("book").join(file_name);
    let qtext = std::fs::read_to_string(&qout)
        .with_context(|| format!("Quire wrote no {}", qout.display()))?;
    eprintln!(
        "quality: {}: Quire done in {wall_s:.1}s ({} units, {} blocked)",
        c.name, summary.units, summary.blocked
    );
    let (qchrf, qchrf_err) = scorer.score(&qout, c.reference.as_ref());
    Ok(SystemResult {
        output: qout.display().to_string(),
        metrics: measure(&c.text, &qtext, cctx),
        chrf: qchrf,
        chrf_error: qchrf_err,
        wall_s,
        cached: false,
        blocked_units: Some(summary.blocked),
        units: Some(summary.units),
        complete: Some(summary.complete),
        script: None,
        stage_seconds: stage_seconds(&qdir.join("run.json")),
    })
}

/// Model seconds per agent in a run's `run.json` (its calls' `busy_seconds`, which count
/// each second of a batched step once); empty when the file cannot be read.
fn stage_seconds(run_json: &Path) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    let Ok(text) = std::fs::read_to_string(run_json) else {
        return out;
    };
    let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) else {
        return out;
    };
    for call in v["calls"].as_array().into_iter().flatten() {
        if let (Some(agent), Some(busy)) = (call["agent"].as_str(), call["busy_seconds"].as_f64()) {
            *out.entry(agent.to_string()).or_insert(0.0) += busy;
        }
    }
    out
}

/// The naive loop on one chapter (or its cached result), measured and scored: (result,
/// why there is none). The engine the script names is kept in `naive_engine`.
fn naive_chapter(
    opts: &QualityBenchOptions,
    n: &Naive,
    c: &Prepared,
    cctx: &CheckContext,
    scorer: &mut Scorer,
    naive_engine: &mut Option<String>,
) -> (Option<SystemResult>, Option<String>) {
    let nout = opts.out.join("naive").join(&c.rel);
    eprintln!("quality: {}: naive loop", c.name);
    match run_naive(n, opts, &c.input, &c.text, &nout) {
        Ok((wall_s, script, cached)) => {
            eprintln!(
                "quality: {}: naive loop {wall_s:.1}s{}",
                c.name,
                if cached { " (cached)" } else { "" }
            );
            if let Some(e) = script.get("engine").and_then(|e| e.as_str()) {
                naive_engine.get_or_insert_with(|| e.to_string());
            }
            let ntext = std::fs::read_to_string(&nout).unwrap_or_default();
            let (nchrf, nchrf_err) = scorer.score(&nout, c.reference.as_ref());
            (
                Some(SystemResult {
                    output: nout.display().to_string(),
                    metrics: measure(&c.text, &ntext, cctx),
                    chrf: nchrf,
                    chrf_error: nchrf_err,
                    wall_s,
                    cached,
                    blocked_units: None,
                    units: None,
                    complete: None,
                    script: Some(script),
                    stage_seconds: BTreeMap::from([("translate".to_string(), wall_s)]),
                }),
                None,
            )
        }
        Err(e) => {
            eprintln!("warning: naive loop failed on {}: {e:#}", c.name);
            (None, Some(format!("{e:#}")))
        }
    }
}

/// Run the whole quality benchmark.
pub fn run(opts: &QualityBenchOptions) -> Result<QualityReport> {
    let threads = sys::use_threads(opts.threads.max(1));
    let machine = Machine::detect(threads);
    let load_average_start = sys::load_average();
    sys::warn_if_busy();

    // The book and its glossary.
    let sample = opts.book.is_none();
    let book: Book = match &opts.book {
        Some(p) => load_book(p)?,
        None => crate::translate::sample_book::book(),
    };
    let out = &opts.out;
    std::fs::create_dir_all(out)
        .with_context(|| format!("cannot create output directory {}", out.display()))?;
    let (glossary, glossary_path, glossary_name) = load_glossary(opts, sample, out)?;
    let house_terms = glossary.entries.iter().filter(|e| e.house).count();
    let ctx =
        CheckContext::new(&opts.source_lang, &opts.target_lang).with_glossary(glossary.clone());

    // Fresh working directories, then inputs (cut when asked) and references.
    for d in ["input", "reference", "quire", "naive"] {
        remove_dir(&out.join(d))?;
    }
    let chapters = prepare_chapters(opts, &book, out)?;

    // Python for the naive loop and chrF.
    let python = find_python(opts, &chapters);
    let naive = prepare_naive(opts, &python, &glossary, out);

    let mut scorer = Scorer {
        python,
        method: None,
    };
    let mut naive_engine = None;
    let mut results = Vec::new();
    for (i, c) in chapters.iter().enumerate() {
        let cctx = ctx.for_chapter(&c.name);
        let position = (i + 1, chapters.len());
        let quire = quire_chapter(opts, c, position, &glossary_path, &cctx, &mut scorer)?;
        let (naive_result, naive_error) = match &naive {
            Err(e) => (None, Some(e.clone())),
            Ok(n) => naive_chapter(opts, n, c, &cctx, &mut scorer, &mut naive_engine),
        };
        let chrf_diff = match (quire.chrf, naive_result.as_ref().and_then(|n| n.chrf)) {
            (Some(a), Some(b)) => Some(a - b),
            _ => None,
        };
        results.push(ChapterQuality {
            chapter: c.name.clone(),
            source_bytes: c.text.len(),
            original_bytes: c.original_bytes,
            cut_headings: c.cut_headings,
            input: c.input.display().to_string(),
            reference: c.reference.as_ref().map(|r| r.display().to_string()),
            quire,
            naive: naive_result,
            naive_error,
            chrf_diff,
        });
    }

    let quire_totals = totals(results.iter().map(|c| &c.quire));
    let naive_totals = results
        .iter()
        .any(|c| c.naive.is_some())
        .then(|| totals(results.iter().filter_map(|c| c.naive.as_ref())));
    Ok(QualityReport {
        model: opts
            .model
            .file_stem()
            .map(|s| s.to_string_lossy().to_string())
            .unwrap_or_default(),
        model_path: opts.model.display().to_string(),
        machine,
        load_average_start,
        load_average_end: sys::load_average(),
        book: match &opts.book {
            Some(p) => p.display().to_string(),
            None => "bundled sample book".to_string(),
        },
        reference: opts.reference.as_ref().map(|r| r.display().to_string()),
        glossary: glossary_name,
        house_terms,
        target_lang: opts.target_lang.clone(),
        cut_bytes: opts.cut_bytes,
        out_dir: out.display().to_string(),
        naive_skipped: opts.skip_naive,
        naive_engine,
        chrf_method: scorer.method,
        structure_categories: Category::STRUCTURE
            .iter()
            .map(|c| c.name().to_string())
            .collect(),
        chapters: results,
        quire_totals,
        naive_totals,
    })
}

// ---------------------------------------------------------------------------------------
// Text rendering.

const DASH: &str = "–";

fn num(x: Option<f64>, digits: usize) -> String {
    match x {
        Some(v) if v.is_finite() => format!("{v:.digits$}"),
        _ => DASH.to_string(),
    }
}

fn signed(x: Option<f64>, digits: usize) -> String {
    match x {
        Some(v) if v.is_finite() => format!("{v:+.digits$}"),
        _ => DASH.to_string(),
    }
}

fn pct(x: Option<f64>) -> Option<f64> {
    x.map(|v| 100.0 * v)
}

fn diff(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    Some(a? - b?)
}

/// One table row: measure, Quire, naive, Quire − naive.
fn row(
    name: &str,
    q: Option<f64>,
    n: Option<f64>,
    digits: usize,
    q_note: &str,
    n_note: &str,
) -> Vec<String> {
    let cell = |v: Option<f64>, note: &str| {
        let s = num(v, digits);
        if note.is_empty() || v.is_none() {
            s
        } else {
            format!("{s} {note}")
        }
    };
    vec![
        name.to_string(),
        cell(q, q_note),
        cell(n, n_note),
        signed(diff(q, n), digits),
    ]
}

fn count(x: usize) -> Option<f64> {
    Some(x as f64)
}

fn system_rows(q: &SystemResult, n: Option<&SystemResult>) -> Vec<Vec<String>> {
    let (qm, nm) = (&q.metrics, n.map(|n| &n.metrics));
    let term = |m: &Metrics| {
        m.house_terms
            .min_term
            .as_ref()
            .map(|t| format!("({t})"))
            .unwrap_or_default()
    };
    vec![
        row(
            "structure errors",
            count(qm.structure_errors),
            nm.and_then(|m| count(m.structure_errors)),
            0,
            "",
            "",
        ),
        row(
            "number errors",
            count(qm.number_errors),
            nm.and_then(|m| count(m.number_errors)),
            0,
            "",
            "",
        ),
        row(
            "blocked units",
            q.blocked_units.and_then(count),
            None,
            0,
            "",
            "",
        ),
        row(
            "house terms, all (%)",
            pct(qm.house_terms.overall),
            nm.and_then(|m| pct(m.house_terms.overall)),
            1,
            "",
            "",
        ),
        row(
            "house terms, worst term (%)",
            pct(qm.house_terms.min),
            nm.and_then(|m| pct(m.house_terms.min)),
            1,
            &term(qm),
            &nm.map(term).unwrap_or_default(),
        ),
        row(
            "untranslated source (%)",
            pct(qm.untranslated.share),
            nm.and_then(|m| pct(m.untranslated.share)),
            2,
            "",
            "",
        ),
        row(
            "paragraphs in the target language (%)",
            pct(qm.target_language),
            nm.and_then(|m| pct(m.target_language)),
            1,
            "",
            "",
        ),
        row("chrF", q.chrf, n.and_then(|n| n.chrf), 2, "", ""),
        row(
            "wall (s)",
            Some(q.wall_s),
            n.map(|n| n.wall_s),
            1,
            "",
            if n.is_some_and(|n| n.cached) {
                "(cached)"
            } else {
                ""
            },
        ),
    ]
}

fn top_words(m: &Metrics) -> String {
    if m.untranslated.top.is_empty() {
        return "none".to_string();
    }
    m.untranslated
        .top
        .iter()
        .map(|w| {
            if w.count > 1 {
                format!("{}×{}", w.word, w.count)
            } else {
                w.word.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

const HEADERS: [&str; 4] = ["measure", "Quire", "naive", "Quire − naive"];

/// The report as plain text: a header, one table per chapter, totals.
pub fn render_text(r: &QualityReport) -> String {
    let mut s = render_header(r);
    for c in &r.chapters {
        s.push_str(&render_chapter(c));
    }
    if r.chapters.len() > 1 {
        s.push_str(&render_totals(r));
    }
    s
}

/// The report's header: model, machine, book, glossary, reference, systems, measures, load.
fn render_header(r: &QualityReport) -> String {
    let mut s = String::new();
    s.push_str(&format!("model      {}\n", r.model));
    s.push_str(&format!("machine    {}\n", r.machine.describe()));
    s.push_str(&format!(
        "book       {} ({} chapter{}{}), target {}\n",
        r.book,
        r.chapters.len(),
        if r.chapters.len() == 1 { "" } else { "s" },
        r.cut_bytes
            .map(|n| format!(", cut at the last heading at or before byte {n}"))
            .unwrap_or_default(),
        r.target_lang
    ));
    s.push_str(&format!(
        "glossary   {}\n",
        r.glossary.as_ref().map_or_else(
            || "none".to_string(),
            |g| format!("{g} ({} house terms)", r.house_terms)
        )
    ));
    s.push_str(&format!(
        "reference  {}\n",
        r.reference.as_deref().unwrap_or("none (chrF –)")
    ));
    s.push_str(&format!(
        "systems    Quire: `quire translate` defaults, in process, one run per chapter\n           naive: benches/naive_loop.py, {}, one call per blank-line block, greedy{}\n",
        r.naive_engine.as_deref().unwrap_or("llama-cpp-python"),
        if r.naive_skipped { " (skipped)" } else { "" }
    ));
    s.push_str(&format!(
        "chrF       {}\n",
        r.chrf_method.as_deref().unwrap_or("not computed")
    ));
    s.push_str(&format!(
        "measures   structure errors = error findings in {}; house terms = source occurrences with their target in the translation; untranslated = lowercase English words in the translation's prose (into Latin letters: the source's own words carried over) ÷ source prose words; wall includes model load\n",
        r.structure_categories.join("/")
    ));
    s.push_str(&format!(
        "load       load average {} at start, {} at end\n",
        sys::load_average_text(r.load_average_start),
        sys::load_average_text(r.load_average_end)
    ));
    s
}

/// One chapter of the report: its line, its table, its untranslated words and errors.
fn render_chapter(c: &ChapterQuality) -> String {
    let mut s = String::new();
    s.push_str(&format!(
        "\n{}  ({} bytes{}; reference: {})\n",
        c.chapter,
        c.source_bytes,
        c.cut_headings
            .map(|k| format!(
                ", cut from {} bytes keeping {k} heading{}",
                c.original_bytes,
                if k == 1 { "" } else { "s" }
            ))
            .unwrap_or_default(),
        c.reference.as_deref().unwrap_or(DASH)
    ));
    s.push_str(&table(&HEADERS, &system_rows(&c.quire, c.naive.as_ref())));
    s.push_str(&format!(
        "untranslated words: Quire {}",
        top_words(&c.quire.metrics)
    ));
    if let Some(n) = &c.naive {
        s.push_str(&format!("; naive {}", top_words(&n.metrics)));
    }
    s.push('\n');
    for (who, m) in std::iter::once(("Quire", &c.quire.metrics))
        .chain(c.naive.as_ref().map(|n| ("naive", &n.metrics)))
    {
        if !m.structure_examples.is_empty() {
            s.push_str(&format!(
                "{who} structure errors: {}\n",
                m.structure_examples.join(" | ")
            ));
        }
    }
    s.push_str(&stage_line(&c.quire, c.naive.as_ref()));
    if let Some(e) = &c.naive_error {
        s.push_str(&format!("naive: not measured ({e})\n"));
    }
    if let Some(e) = &c.quire.chrf_error {
        s.push_str(&format!("chrF: not computed ({e})\n"));
    }
    s
}

/// Model seconds per stage, both systems on one line (nothing when neither has any).
fn stage_line(quire: &SystemResult, naive: Option<&SystemResult>) -> String {
    let stages = |r: &SystemResult| {
        r.stage_seconds
            .iter()
            .map(|(stage, secs)| format!("{stage} {secs:.1}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut parts = Vec::new();
    if !quire.stage_seconds.is_empty() {
        parts.push(format!("Quire {}", stages(quire)));
    }
    if let Some(n) = naive.filter(|n| !n.stage_seconds.is_empty()) {
        parts.push(format!("naive {} (its wall)", stages(n)));
    }
    if parts.is_empty() {
        return String::new();
    }
    format!("model seconds per stage: {}\n", parts.join("; "))
}

/// The totals over all chapters (a report of more than one chapter).
fn render_totals(r: &QualityReport) -> String {
    let mut s = String::new();
    let q = &r.quire_totals;
    let n = r.naive_totals.as_ref();
    s.push_str(
        "\nall chapters (house terms and untranslated pooled; chrF the mean over chapters with a reference)\n",
    );
    let rows = vec![
        row(
            "structure errors",
            count(q.structure_errors),
            n.and_then(|n| count(n.structure_errors)),
            0,
            "",
            "",
        ),
        row(
            "number errors",
            count(q.number_errors),
            n.and_then(|n| count(n.number_errors)),
            0,
            "",
            "",
        ),
        row(
            "blocked units",
            q.blocked_units.and_then(count),
            None,
            0,
            "",
            "",
        ),
        row(
            "house terms, all (%)",
            pct(q.house_share),
            n.and_then(|n| pct(n.house_share)),
            1,
            "",
            "",
        ),
        row(
            "house terms, worst (%)",
            pct(q.house_min),
            n.and_then(|n| pct(n.house_min)),
            1,
            "",
            "",
        ),
        row(
            "untranslated source (%)",
            pct(q.untranslated_share),
            n.and_then(|n| pct(n.untranslated_share)),
            2,
            "",
            "",
        ),
        row(
            "chrF (mean)",
            q.chrf_mean,
            n.and_then(|n| n.chrf_mean),
            2,
            "",
            "",
        ),
        row("wall (s)", Some(q.wall_s), n.map(|n| n.wall_s), 1, "", ""),
    ];
    s.push_str(&table(&HEADERS, &rows));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHAPTER: &str = "# Title\n\nIntro text.\n\n## One\n\nFirst.\n\n```python\n# not a heading\nx = 1\n```\n\n## Two\n\nSecond.\n\n#hashtag is not a heading\n\n## Three\n\nThird.\n";

    #[test]
    fn headings_skip_code_and_hashtags() {
        let starts = heading_starts(CHAPTER);
        let lines: Vec<&str> = starts
            .iter()
            .map(|&s| CHAPTER[s..].lines().next().unwrap())
            .collect();
        assert_eq!(lines, ["# Title", "## One", "## Two", "## Three"]);
    }

    #[test]
    fn cut_at_last_heading_before_the_limit() {
        let two = CHAPTER.find("## Two").unwrap();
        let three = CHAPTER.find("## Three").unwrap();
        // A limit between "## Two" and "## Three" cuts before "## Two": 2 headings kept.
        let (cut, kept) = cut_at_heading(CHAPTER, three - 1).unwrap();
        assert_eq!(kept, 2);
        assert_eq!(cut, format!("{}\n", CHAPTER[..two].trim_end()));
        assert!(cut.contains("# not a heading") && !cut.contains("Second"));
        // A heading exactly at the limit is cut at.
        assert_eq!(cut_at_heading(CHAPTER, three).unwrap().1, 3);
        // Short chapters and chapters with only the title before the limit stay whole.
        assert_eq!(cut_at_heading(CHAPTER, CHAPTER.len()), None);
        assert_eq!(cut_at_heading(CHAPTER, 5), None);
        // The reference keeps the same number of headings.
        let reference = "# 标题\n\n引言。\n\n## 一\n\n第一。\n\n## 二\n\n第二。\n\n## 三\n";
        assert_eq!(
            cut_after_headings(reference, kept),
            "# 标题\n\n引言。\n\n## 一\n\n第一。\n"
        );
        assert_eq!(cut_after_headings(reference, 9), reference);
    }

    const EN_ZH: (&str, &str) = ("en", "zh");

    #[test]
    fn reference_names() {
        assert_eq!(
            reference_candidates_for(Path::new("zh-chapter8.md"), ("zh", "en")),
            vec![
                PathBuf::from("en-chapter8.md"),
                PathBuf::from("zh-chapter8.md")
            ]
        );
        assert_eq!(
            reference_candidates(Path::new("en-chapter8.md")),
            [
                PathBuf::from("zh-chapter8.md"),
                PathBuf::from("en-chapter8.md")
            ]
        );
        assert_eq!(
            reference_candidates(Path::new("part1/en-ch.md")),
            [
                PathBuf::from("part1/zh-ch.md"),
                PathBuf::from("part1/en-ch.md")
            ]
        );
        assert_eq!(
            reference_candidates(Path::new("chapter1.md")),
            [PathBuf::from("chapter1.md")]
        );
        // English and Chinese chapters side by side in one directory (the dev-eval layout).
        let dir = tempfile::tempdir().unwrap();
        let (en, zh) = (
            dir.path().join("en-chapter3.md"),
            dir.path().join("zh-chapter3.md"),
        );
        std::fs::write(&en, "en").unwrap();
        std::fs::write(&zh, "zh").unwrap();
        std::fs::write(dir.path().join("en-chapter4.md"), "en").unwrap();
        let rel = Path::new("en-chapter3.md");
        assert_eq!(
            find_reference(dir.path(), rel, 2, Some(&en), EN_ZH),
            Some(zh.clone())
        );
        // No Chinese chapter: the English one is the source itself, not a reference.
        let en4 = dir.path().join("en-chapter4.md");
        let rel4 = Path::new("en-chapter4.md");
        assert_eq!(find_reference(dir.path(), rel4, 2, Some(&en4), EN_ZH), None);
        // A same-name reference in another directory.
        let refs = tempfile::tempdir().unwrap();
        std::fs::write(refs.path().join("en-chapter4.md"), "zh").unwrap();
        assert_eq!(
            find_reference(refs.path(), rel4, 2, Some(&en4), EN_ZH),
            Some(refs.path().join("en-chapter4.md"))
        );
        // A reference file serves a one-chapter book only.
        assert_eq!(
            find_reference(&zh, Path::new("x.md"), 1, None, EN_ZH),
            Some(zh.clone())
        );
        assert_eq!(find_reference(&zh, Path::new("x.md"), 2, None, EN_ZH), None);
        assert_eq!(find_reference(&en, rel, 1, Some(&en), EN_ZH), None);
    }

    #[test]
    fn untranslated_counts_ordinary_lowercase_words_in_prose() {
        let source = "The model reads the prompt. See `max_tokens` and https://example.com/a.\n\n```\nlet x = foo();\n```\n";
        let translation = "模型读取 prompt，然后 the model 输出。参见 `max_tokens` 和 https://example.com/a 以及 [文档](https://example.com/docs)。\n\nAgent、GPU、llama.cpp、v1.5、RoPE、zero-shot、it's\n\n```\nlet x = foo();\n```\n";
        let u = untranslated_english(source, translation);
        // prompt, the, model, zero, shot — not "it"/"s" (short), Agent/GPU/RoPE (not
        // lowercase), llama.cpp/v1.5 (identifiers), code, inline code, URLs, link targets.
        assert_eq!(u.words, 5, "{u:?}");
        // The model reads the prompt. See and: 7 words (code, inline code, URL left out).
        assert_eq!(u.source_prose_words, 7);
        assert_eq!(u.top.len(), 5);
        assert!(u.top.iter().all(|w| w.count == 1));
        assert_eq!(
            lowercase_english_words("e.g. well-known don't GPU"),
            ["well", "known", "don"]
        );
        // A footnote's bibliographic reference is kept as published, not untranslated.
        let cited = "正文[^a]。\n\n[^a]: 设计见 Li, Bojie. *User as Code: Executable Memory for Agents.* arXiv:2606.16707, 2026.\n";
        assert_eq!(untranslated_english("Text[^a].\n", cited).words, 0);
    }

    #[test]
    fn stage_seconds_sum_each_agents_busy_time() {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("run.json");
        std::fs::write(
            &run,
            r#"{"calls": [{"agent": "translate", "busy_seconds": 2.5},
                          {"agent": "fallback", "busy_seconds": 1.0},
                          {"agent": "translate", "busy_seconds": 0.5}]}"#,
        )
        .unwrap();
        let q = stage_seconds(&run);
        assert_eq!(q.len(), 2);
        assert!((q["translate"] - 3.0).abs() < 1e-9 && (q["fallback"] - 1.0).abs() < 1e-9);
        assert!(stage_seconds(&dir.path().join("missing.json")).is_empty());
        let result = |stage_seconds| SystemResult {
            output: String::new(),
            metrics: measure("A.\n", "甲。\n", &CheckContext::new("en", "zh-CN")),
            chrf: None,
            chrf_error: None,
            wall_s: 9.0,
            cached: false,
            blocked_units: None,
            units: None,
            complete: None,
            script: None,
            stage_seconds,
        };
        let naive = result(BTreeMap::from([("translate".to_string(), 9.0)]));
        assert_eq!(
            stage_line(&result(q), Some(&naive)),
            "model seconds per stage: Quire fallback 1.0, translate 3.0; naive translate 9.0 (its wall)\n"
        );
        assert_eq!(stage_line(&result(BTreeMap::new()), None), "");
    }

    #[test]
    fn untranslated_into_a_latin_target_counts_only_the_sources_words() {
        let source = "The shell reads the command and runs it.\n";
        let translation = "Die shell liest den Befehl und the führt ihn aus.\n";
        let u = untranslated_source(source, translation, "en", "de");
        // "shell" and "the" are carried over; "liest", "den", "und", "ihn", "aus" are German.
        assert_eq!(u.words, 2, "{u:?}");
        assert_eq!(u.source_prose_words, 8);
        // Into Chinese every ordinary lowercase English word still counts.
        let zh = "模型 shell 读取 the 命令。\n";
        assert_eq!(untranslated_source(source, zh, "en", "zh-CN").words, 2);
    }

    #[test]
    fn house_terms_shares() {
        let g = Glossary::parse_json(
            r#"[{"en":"token","zh":"词元"},{"en":"latency","zh":["时延","延迟"]},{"en":"prompt","zh":"提示词","house":false}]"#,
            "en",
            "zh-CN",
        )
        .unwrap();
        let source = "A token, two tokens and `token` in code. Latency matters. The prompt.";
        let translation = "一个词元，两个 token，代码里的 `token`。延迟很重要。提示。";
        let h = house_term_share(source, translation, &g.entries);
        assert_eq!(h.occurrences, 3);
        assert_eq!(h.honoured, 2);
        assert_eq!(h.min_term.as_deref(), Some("token"));
        assert!((h.min.unwrap() - 0.5).abs() < 1e-9);
        assert!((h.overall.unwrap() - 2.0 / 3.0).abs() < 1e-9);
        assert_eq!(house_term_share("No terms.", "", &g.entries).overall, None);
    }

    #[test]
    fn metrics_count_structure_errors() {
        let ctx = CheckContext::default();
        let source = "# Title\n\nSee [docs](https://a.example/x).\n\n```\ncode\n```\n";
        let good = "# 标题\n\n参见[文档](https://a.example/x)。\n\n```\ncode\n```\n";
        let bad = "标题\n\n参见文档。\n";
        assert_eq!(measure(source, good, &ctx).structure_errors, 0);
        let m = measure(source, bad, &ctx);
        assert!(m.structure_errors >= 3, "{m:?}");
        assert_eq!(m.structure_examples.len(), m.structure_errors.min(10));
    }

    #[test]
    fn cache_key_covers_every_input() {
        let k = naive_cache_key(b"ch", "m", b"g", b"s", "zh-CN");
        assert_eq!(k.len(), 64);
        assert_ne!(k, naive_cache_key(b"ch", "m", b"g", b"s2", "zh-CN"));
        assert_ne!(k, naive_cache_key(b"c", "hm", b"g", b"s", "zh-CN"));
        assert_ne!(k, naive_cache_key(b"ch", "m", b"", b"s", "zh-CN"));
    }

    #[test]
    fn translate_defaults_are_the_cli_defaults() {
        // Quire's runs start from `quire translate`'s defaults (held to the CLI's by a test in
        // src/cli/translate.rs).
        let o = TranslateOptions::default();
        assert_eq!(o.unit_tokens, 300);
        assert_eq!(o.target_lang, "zh-CN");
        assert!(o.input.is_none() && !o.dry_run && o.prefix_cache_dir.is_some());
    }
}
