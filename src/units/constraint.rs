//! The decode-time constraint for one passage: what the model may write when it translates
//! a [`super::skeleton::Skeleton`]'s segments.
//!
//! * **Lines**: one line per segment — never an empty line, never more lines (a reply that
//!   ends early is caught by the checks and goes to the fallback cascade).
//! * **Placeholders**: each of the passage's placeholders at most once, none that it lacks,
//!   and, on the last line, the end only when every one is there. Only the canonical `{{n}}` form can be
//!   written (full-width braces are refused).
//! * **Markdown that the passage lacks**: a line may not start with a heading, list,
//!   block-quote or table marker or a code fence, and backticks, table pipes and footnote
//!   labels `[^` cannot appear, unless the passage has them itself.
//! * **Emphasis**: a line has no more `**` (bold delimiters) than its source line, a line
//!   whose source opens with bold (a label: `**Level 2: Retrieval** — …`) opens with it too,
//!   and no line ends inside a bold span.
//! * **Numbers**: every run of ASCII digits outside placeholders is part of a number of its
//!   source line (`1,024` may be written `1024`), so a figure cannot be changed or invented;
//!   a number the source spells out is written in Chinese numerals or words. A month named
//!   in a date may be written as its number (`February 18, 2025` → `2025 年 2 月 18 日`).
//!
//! The checks run on bytes, the text so far plus one candidate token, so the engine can
//! ask them lazily ([`crate::engine::constraint`]).

use crate::engine::constraint::TextConstraint;
use crate::lang::punct::{
    FULLWIDTH_BRACES, FULLWIDTH_COLON, FULLWIDTH_EXCLAMATION, FULLWIDTH_QUESTION,
    FULLWIDTH_RIGHT_PAREN, FULLWIDTH_SEMICOLON, IDEOGRAPHIC_FULL_STOP, RIGHT_CORNER_BRACKET,
};
use regex::bytes::Regex;
use std::sync::LazyLock;

/// A line-start marker: heading, list item, block quote, table row or fence.
static LINE_MARKER_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?m)^[ \t]*(?:#|>|[-*+][ \t]|[0-9]{1,9}[.)][ \t]|\||```|~~~)")
        .expect("valid marker regex")
});

/// A number with an optional scale word: `1,024`, `3.5`, `150 million`, `128K`.
static SCALED_RE: LazyLock<regex::Regex> = LazyLock::new(|| {
    regex::Regex::new(
        r"(?i)([0-9][0-9,_]*(?:\.[0-9]+)?)(?:\s*(thousand|million|billion|trillion|k|m|b)\b)?",
    )
    .expect("valid number regex")
});

/// A month in a date (`February 18, 2025`, `18 Feb 2025`, `March 2024`): a full name, or
/// an abbreviation or `May` next to a number (after it or before it). Groups 1, 2 and 3
/// hold the name in each of those forms.
static MONTH_RE: LazyLock<regex::Regex> = LazyLock::new(|| {
    regex::Regex::new(
        r"\b(January|February|March|April|June|July|August|September|October|November|December)\b|\b(May|Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sept|Sep|Oct|Nov|Dec)\.?\s+[0-9]|[0-9](?:st|nd|rd|th)?\s+(May|Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sept|Sep|Oct|Nov|Dec)\b",
    )
    .expect("valid month regex")
});

/// The months named in a date of `text`, as numbers (`February` → 2): Chinese and Japanese
/// write a date's month in digits (`2025 年 2 月 18 日`).
fn month_numbers(text: &str) -> impl Iterator<Item = u32> + '_ {
    MONTH_RE.captures_iter(text).filter_map(|c| {
        let name = c.get(1).or(c.get(2)).or(c.get(3))?.as_str();
        let n = match &name[..3] {
            "Jan" => 1,
            "Feb" => 2,
            "Mar" => 3,
            "Apr" => 4,
            "May" => 5,
            "Jun" => 6,
            "Jul" => 7,
            "Aug" => 8,
            "Sep" => 9,
            "Oct" => 10,
            "Nov" => 11,
            _ => 12,
        };
        Some(n)
    })
}

/// A short quoted span (straight or curly double quotes): group 1 or 2 what is quoted.
static QUOTED_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#""([^"\n]{1,48})"|“([^”\n]{1,48})”"#).expect("valid quote regex")
});

/// A placeholder written by the model, in bytes (tolerated spacing); group 1 its number.
static PLACEHOLDER_BYTES_RE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\{\{\s*([0-9]+)\s*\}\}").expect("valid placeholder regex"));

/// A dotted, slashed or `@` name: `llama.cpp`, `config/default`, `recall@k`.
static DOTTED_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"[A-Za-z0-9_-]+(?:[./@][A-Za-z0-9_-]+)+").expect("valid name regex")
});

/// What a passage's translation may contain.
#[derive(Debug, Clone)]
pub struct PassageConstraint {
    /// Lines the translation must have.
    lines: usize,
    /// Placeholder numbers of each line of the passage (each must appear exactly once, on
    /// its own line).
    placeholders: Vec<Vec<usize>>,
    /// The passage itself has lines starting with Markdown markers.
    markers_ok: bool,
    backtick_ok: bool,
    pipe_ok: bool,
    footnote_ok: bool,
    /// The passage has `{{` text that is not a placeholder.
    braces_ok: bool,
    /// The passage itself: a repetition it has (copied, as links and placeholders are) is
    /// not a loop.
    passage: Vec<u8>,
    /// `**` delimiters of each line of the passage: a reply line may not have more.
    bold: Vec<usize>,
    /// Lines of the passage that open with a bold span: the reply line opens with one too.
    bold_lead: Vec<bool>,
    /// Digits of each line of the passage outside placeholders, as runs with the
    /// separators inside numbers (`,` `_`) removed.
    digits: Vec<Vec<Vec<u8>>>,
    /// For a target in a non-Latin script: the Latin words that may appear (lower-cased).
    latin: Option<Vec<String>>,
    /// With `latin`: the allowed words with a capital inside (`GraphRAG`, `LLMs`, and
    /// their singulars) as the passage writes them — a word written with a capital inside
    /// must be one of these (or all capitals), so `AgenT` is not `Agent`.
    mixed_case: Vec<String>,
    /// With `latin`: the letters of other scripts than Latin and the target's that the
    /// passage has (a reply may have no others: `Agент` is not a word).
    foreign: Vec<char>,
    /// The names given by [`Self::with_names`] (for the spec).
    names: Vec<String>,
    /// The words given by [`Self::with_capitalised`]: allowed only as written, with their
    /// capital (`Retrieval`, not `retrieval`).
    capitalised: Vec<String>,
    /// Lines of the passage that end a sentence (`.`, `?`, `:` …): their translation may
    /// not end on a word, as a reply the model was stopped in would.
    closed: Vec<bool>,
    /// Any digits may be written ([`PassageConstraint::any_numbers`]).
    any_numbers: bool,
}

/// The Latin words of `passage` that [`PassageConstraint::latin_names_only`] takes for names
/// by their place: two letters or fewer, a digit, a capital inside, a capitalised word cited
/// by a placeholder, or a capital that neither opens a sentence nor stands in a title-case
/// phrase.
fn name_words(passage: &str) -> Vec<String> {
    let bytes = passage.as_bytes();
    // A capital after an opening quote or bracket opens a sentence when what is quoted
    // is one (four words or more); a quoted or bracketed term (`"**Agentic RAG**"`) is
    // a name like any other.
    let quoted_sentence = |open: u8, from: usize| {
        let close = if open == b'(' { b')' } else { open };
        let span = bytes[from..]
            .split(|&b| b == close)
            .next()
            .unwrap_or_default();
        span.split(u8::is_ascii_whitespace)
            .filter(|w| !w.is_empty())
            .count()
            >= 4
    };
    let sentence_start = |start: usize| {
        bytes[..start]
            .iter()
            .rev()
            .find(|c| !c.is_ascii_whitespace() && !b"*_".contains(c))
            .is_none_or(|&c| {
                b".!?:\n".contains(&c) || (b"\"'(".contains(&c) && quoted_sentence(c, start))
            })
    };
    let titled = title_case_words(bytes);
    latin_runs(bytes)
        .filter(|&(start, end, w)| {
            let caps = w.iter().filter(|c| c.is_ascii_uppercase()).count();
            // A capitalised word with a placeholder right after it is cited there
            // (`Voyager{{3}}`: a footnote reference): a name, even opening a sentence.
            let cited = caps >= 1 && bytes[end..].starts_with(b"{{");
            w.len() <= 2
                || w.iter().any(u8::is_ascii_digit)
                || inner_capital(w)
                || cited
                || (caps >= 1 && !sentence_start(start) && !titled.contains(&start))
        })
        .map(|(_, _, w)| String::from_utf8_lossy(w).into_owned())
        .collect()
}

/// The words `passage` writes with a capital where no sentence or title makes it one
/// (`Agentic` in `the core idea of **Agentic RAG**`): a book's names. A word the book
/// writes so may stay English where it opens a sentence too
/// ([`PassageConstraint::with_capitalised`]): held to the passage alone, `Agentic RAG is like…`
/// let the model write only the glossary's `Agent` and end the word there (`Agent RAG`).
pub fn capitalised_names(passage: &str) -> Vec<String> {
    let mut names: Vec<String> = name_words(passage)
        .into_iter()
        .filter(|w| w.bytes().any(|c| c.is_ascii_uppercase()))
        .collect();
    names.sort();
    names.dedup();
    names
}

impl PassageConstraint {
    /// The constraint for translating `passage` (the model's text: one segment per line).
    pub fn new(passage: &str) -> Self {
        let placeholders = passage
            .split('\n')
            .map(|line| {
                super::PLACEHOLDER_RE
                    .captures_iter(line)
                    .filter_map(|c| c[1].parse().ok())
                    .collect()
            })
            .collect();
        Self {
            lines: passage.split('\n').count(),
            passage: passage.as_bytes().to_vec(),
            bold: passage
                .split('\n')
                .map(|l| l.matches("**").count())
                .collect(),
            bold_lead: passage
                .split('\n')
                .map(|l| l.trim_start().starts_with("**") && l.matches("**").count() >= 2)
                .collect(),
            digits: passage.split('\n').map(source_digits).collect(),
            placeholders,
            markers_ok: LINE_MARKER_RE.is_match(passage.as_bytes()),
            backtick_ok: passage.contains('`'),
            pipe_ok: passage.contains('|'),
            footnote_ok: passage.contains("[^"),
            braces_ok: super::PLACEHOLDER_RE
                .replace_all(passage, "")
                .contains("{{"),
            latin: None,
            mixed_case: Vec::new(),
            foreign: Vec::new(),
            names: Vec::new(),
            capitalised: Vec::new(),
            closed: passage.split('\n').map(ends_sentence).collect(),
            any_numbers: false,
        }
    }

    /// Any digits may be written: for a source that writes numbers in its own numerals
    /// (`一万次`, `第二章`), whose translation writes them in digits (`10,000 times`,
    /// `Chapter 2`).
    pub fn any_numbers(mut self) -> Self {
        self.any_numbers = true;
        self
    }

    /// For a target language in a non-Latin script (Chinese, Japanese, Korean): a Latin
    /// word may only be one the passage keeps as a name — a word of the passage with a
    /// capital letter or a digit (`Agent`, `LLM`, `GPT-4`), or of at most two letters
    /// (units such as `ms`) — so no ordinary English word is left in a translated sentence.
    /// A capital that only opens a sentence, or that stands in a title-case phrase of three
    /// or more words (`A Paradigm Shift Toward Tool-Based Retrieval`, `Figure 3: Agentic RAG
    /// System Architecture`), does not make a name; a capital inside a word (`GraphRAG`,
    /// `ReAct`) or a digit always does, and so do words quoted on their own (`"bank"` in
    /// `"bank" in "river bank"`: the English word itself is the subject), a capitalised
    /// word with a placeholder right after it (`Voyager{{3}}`, cited by a footnote), and words of
    /// dotted, slashed or `@` names (`recall@k`). A name may be written in the singular (`Agents` →
    /// `Agent`), as Chinese nouns have no plural. Letters of another script (Cyrillic,
    /// Greek…) may only be ones the passage has.
    pub fn latin_names_only(mut self, passage: &str) -> Self {
        let bytes = passage.as_bytes();
        let mut words = name_words(passage);
        // Words quoted on their own (up to three: `"bank"`, `"river bank"`) are mentioned,
        // not used: the text speaks of the English words themselves, which a translation
        // keeps (`"kitty"` translated is no longer the example of a synonym).
        for c in QUOTED_RE.captures_iter(bytes) {
            let q = c.get(1).or(c.get(2)).map_or(&[][..], |m| m.as_bytes());
            if q.split(u8::is_ascii_whitespace)
                .filter(|w| !w.is_empty())
                .count()
                <= 3
            {
                words
                    .extend(latin_runs(q).map(|(_, _, w)| String::from_utf8_lossy(w).into_owned()));
            }
        }
        // Words of dotted or slashed names (`llama.cpp`, `en/zh`) are names too.
        for m in DOTTED_RE.find_iter(bytes) {
            words.extend(
                latin_runs(m.as_bytes()).map(|(_, _, w)| String::from_utf8_lossy(w).into_owned()),
            );
        }
        self.foreign = passage
            .chars()
            .filter(|&c| foreign_letter(c))
            .collect::<std::collections::BTreeSet<char>>()
            .into_iter()
            .collect();
        self.latin = Some(Vec::new());
        self.allow_words(words)
    }

    /// With [`Self::latin_names_only`]: the Latin words of `names` (the glossary's terms
    /// of this passage kept as they are, or whose translation has Latin words) may appear
    /// too, whatever their place in the passage (`Anthropic` opening a sentence).
    pub fn with_names<S: AsRef<str>>(mut self, names: impl IntoIterator<Item = S>) -> Self {
        if self.latin.is_none() {
            return self;
        }
        let mut words = Vec::new();
        for name in names {
            self.names.push(name.as_ref().to_string());
            words.extend(
                latin_runs(name.as_ref().as_bytes())
                    .map(|(_, _, w)| String::from_utf8_lossy(w).into_owned()),
            );
        }
        self.allow_words(words)
    }

    /// With [`Self::latin_names_only`]: the book's names ([`capitalised_names`]) that the
    /// passage writes may appear wherever they stand, but only with their capital, as
    /// names: `Agentic` opening a sentence, never `retrieval` for `Retrieval`.
    pub fn with_capitalised<S: AsRef<str>>(mut self, names: impl IntoIterator<Item = S>) -> Self {
        if self.latin.is_none() {
            return self;
        }
        let here: std::collections::HashSet<&[u8]> = self
            .passage
            .split(|c| !c.is_ascii_alphanumeric())
            .filter(|w| w.first().is_some_and(u8::is_ascii_uppercase))
            .collect();
        let names = names.into_iter().map(|n| n.as_ref().to_string());
        let here: Vec<String> = names.filter(|n| here.contains(n.as_bytes())).collect();
        self.capitalised.extend(here);
        self.capitalised.sort();
        self.capitalised.dedup();
        self
    }

    /// `words` (as written) and their singulars join the Latin words that may appear:
    /// lower-cased in `latin`, and as written in `mixed_case` when they have a capital
    /// inside.
    fn allow_words(mut self, mut words: Vec<String>) -> Self {
        let Some(mut allowed) = self.latin.take() else {
            return self;
        };
        let singulars: Vec<String> = words
            .iter()
            .filter(|w| w.len() >= 4)
            .flat_map(|w| {
                let ies = w.strip_suffix("ies").map(|s| format!("{s}y"));
                let es = w.strip_suffix("es").map(str::to_string);
                let s = w.strip_suffix('s').map(str::to_string);
                [ies, es, s].into_iter().flatten()
            })
            .collect();
        words.extend(singulars);
        self.mixed_case.extend(
            words
                .iter()
                .filter(|w| inner_capital(w.as_bytes()))
                .cloned(),
        );
        self.mixed_case.sort();
        self.mixed_case.dedup();
        allowed.extend(words.iter().map(|w| w.to_ascii_lowercase()));
        allowed.sort();
        allowed.dedup();
        self.latin = Some(allowed);
        self
    }

    /// Rebuild a constraint from its [`TextConstraint::spec`] (what a client sends to
    /// `quire serve`); `None` for anything else.
    pub fn from_spec(spec: &serde_json::Value) -> Option<Self> {
        if spec.get("kind")?.as_str()? != SPEC_KIND {
            return None;
        }
        let passage = spec.get("passage")?.as_str()?;
        let c = Self::new(passage);
        // A list of strings under `key`, empty when absent; `None` when it is not one.
        let strings = |key: &str| -> Option<Vec<&str>> {
            match spec.get(key) {
                None => Some(Vec::new()),
                Some(v) => v.as_array()?.iter().map(|n| n.as_str()).collect(),
            }
        };
        let names = strings("names")?;
        let capitalised = strings("capitalised")?;
        let c = match spec.get("any_numbers").and_then(|v| v.as_bool()) {
            Some(true) => c.any_numbers(),
            _ => c,
        };
        match spec.get("latin_names_only")?.as_bool()? {
            true => Some(
                c.latin_names_only(passage)
                    .with_names(names)
                    .with_capitalised(capitalised),
            ),
            false => Some(c),
        }
    }

    /// Every Latin word of `text` is allowed; the last one, when it may still grow, begins
    /// an allowed word.
    fn latin_ok(&self, text: &[u8]) -> bool {
        let Some(allowed) = &self.latin else {
            return true;
        };
        latin_runs(text).all(|(_, end, w)| {
            // A single letter (a variable, `A/B`) may stand anywhere; a two-letter word
            // only where the passage has it (`ms`): the start of a refused name (`Ag` of
            // `Agentic`) is not a word.
            if w.len() == 1 {
                return true;
            }
            let growing = end == text.len();
            // A capital inside a word: the passage's own spelling, or all capitals.
            if inner_capital(w) && !w.iter().all(|c| !c.is_ascii_lowercase()) {
                let w = String::from_utf8_lossy(w);
                return if growing {
                    self.mixed_case.iter().any(|a| a.starts_with(&*w))
                } else {
                    self.mixed_case.iter().any(|a| *a == w)
                };
            }
            let written = String::from_utf8_lossy(w);
            let w = written.to_ascii_lowercase();
            if growing {
                allowed.iter().any(|a| a.starts_with(&w))
                    || self.capitalised.iter().any(|a| a.starts_with(&*written))
            } else {
                allowed.contains(&w) || self.capitalised.iter().any(|a| *a == written)
            }
        })
    }

    /// No letter of another script than the passage's and the target's: complete ones
    /// must be letters the passage has, and a character still being written (its first
    /// bytes only) may not begin one of another script (Greek, Cyrillic and the other
    /// two-byte scripts after Latin-1).
    fn foreign_ok(&self, text: &[u8]) -> bool {
        if self.latin.is_none() {
            return true;
        }
        let (done, open) = match std::str::from_utf8(text) {
            Ok(s) => (s, &[][..]),
            Err(e) => (
                std::str::from_utf8(&text[..e.valid_up_to()]).unwrap_or_default(),
                &text[e.valid_up_to()..],
            ),
        };
        let complete = done
            .chars()
            .all(|c| !foreign_letter(c) || self.foreign.contains(&c));
        let lead_ok = match open.first() {
            Some(&b) if (0xC4..=0xDF).contains(&b) => self
                .foreign
                .iter()
                .any(|c| c.encode_utf8(&mut [0; 4]).as_bytes()[0] == b),
            _ => true,
        };
        complete && lead_ok
    }

    /// Every finished line (with `complete`, the last one too) whose source line ends a
    /// sentence ends with punctuation, a closing mark or a placeholder, not on a word: a
    /// model whose next word the constraint refused would otherwise end there, its
    /// sentence cut off (`…转向“工具”：Agent`).
    fn finished_lines_close(&self, text: &[u8], complete: bool) -> bool {
        let lines: Vec<&[u8]> = text.split(|&b| b == b'\n').collect();
        let done = if complete {
            lines.len()
        } else {
            lines.len() - 1
        };
        lines[..done]
            .iter()
            .zip(&self.closed)
            .all(|(line, &closed)| !closed || !ends_on_a_word(line))
    }

    /// Whether `text` ends in a loop the passage does not have itself.
    fn looping(&self, text: &[u8]) -> bool {
        looping(text).is_some_and(|tail| !contains(&self.passage, tail))
    }

    /// Whether `text` breaks no rule (it may still be unfinished).
    fn valid_prefix(&self, text: &[u8]) -> bool {
        if text.first() == Some(&b'\n') || contains(text, b"\n\n") {
            return false;
        }
        if text.iter().filter(|&&b| b == b'\n').count() >= self.lines {
            return false;
        }
        if FULLWIDTH_BRACES
            .iter()
            .any(|brace| contains(text, brace.as_bytes()))
        {
            return false;
        }
        if (!self.backtick_ok && text.contains(&b'`'))
            || (!self.pipe_ok && text.contains(&b'|'))
            || (!self.footnote_ok && contains(text, b"[^"))
            || (!self.markers_ok && LINE_MARKER_RE.is_match(text))
        {
            return false;
        }
        self.latin_ok(text)
            && self.foreign_ok(text)
            && self.finished_lines_close(text, false)
            && self.lines_placeholders_ok(text, false)
            && self.bold_ok(text, false)
            && self.digits_ok(text)
    }

    /// No line has more bold delimiters than its source line (emphasis the passage lacks
    /// cannot be invented), a line whose source opens with bold opens with it, and a
    /// finished line (with `complete`, the last one too) closes every bold span it opened.
    fn bold_ok(&self, text: &[u8], complete: bool) -> bool {
        let lines: Vec<&[u8]> = text.split(|&b| b == b'\n').collect();
        let last = lines.len() - 1;
        lines
            .iter()
            .zip(self.bold.iter().zip(&self.bold_lead))
            .enumerate()
            .all(|(i, (line, (&max, &lead)))| {
                let n = String::from_utf8_lossy(line).matches("**").count();
                let opens = if line.len() < 2 {
                    b"**".starts_with(line)
                } else {
                    line.starts_with(b"**")
                };
                let finished = complete || i < last;
                n <= max
                    && (!lead || opens)
                    && (!finished || n.is_multiple_of(2) || !max.is_multiple_of(2))
            })
    }

    /// Every digit run of every line (outside placeholders) is a number of its source line
    /// (or one of its groups: `3` and `5` of `3.5`); the run the text ends in, still being
    /// written, begins one.
    fn digits_ok(&self, text: &[u8]) -> bool {
        if self.any_numbers {
            return true;
        }
        let lines: Vec<&[u8]> = text.split(|&b| b == b'\n').collect();
        let last = lines.len() - 1;
        lines
            .iter()
            .zip(&self.digits)
            .enumerate()
            .all(|(i, (line, own))| {
                digit_runs(line).all(|(start, run)| {
                    let open = i == last && start + run.len() == line.len();
                    after_placeholder_open(&line[..start])
                        || own
                            .iter()
                            .any(|n| n.as_slice() == run || (open && n.starts_with(run)))
                })
            })
    }

    /// Each line holds only its own placeholders; every finished line (and with
    /// `complete`, the last one too) holds all of them.
    fn lines_placeholders_ok(&self, text: &[u8], complete: bool) -> bool {
        let lines: Vec<&[u8]> = text.split(|&b| b == b'\n').collect();
        lines.iter().enumerate().all(|(i, line)| {
            let Some(own) = self.placeholders.get(i) else {
                return false;
            };
            placeholders_ok(own, line, complete || i + 1 < lines.len(), self.braces_ok)
        })
    }
}

/// Every `{{` in `text` starts one of `allowed`, none twice; with `complete`, every one is
/// there and none is left open. With `braces_ok` (the passage has such text of its own), a
/// `{{` that is not a placeholder is text; otherwise it cannot be written (`{{}}`, `{{x}}`).
fn placeholders_ok(allowed: &[usize], text: &[u8], complete: bool, braces_ok: bool) -> bool {
    let mut seen = vec![false; allowed.len()];
    let mut i = 0;
    while let Some(off) = find(&text[i..], b"{{") {
        let start = i + off + 2;
        let mut j = start;
        while j < text.len() && text[j] == b' ' {
            j += 1;
        }
        let digits_start = j;
        while j < text.len() && text[j].is_ascii_digit() && j - digits_start < 6 {
            j += 1;
        }
        let digits = &text[digits_start..j];
        while j < text.len() && text[j] == b' ' {
            j += 1;
        }
        if j >= text.len() || (j + 1 == text.len() && text[j] == b'}') {
            if complete {
                // The line is over: an unclosed `{{…` is text, where the passage has such.
                return braces_ok && seen.iter().all(|&s| s);
            }
            if digits.is_empty() {
                // Only the start of a placeholder still to write (or of the passage's
                // own brace text).
                return braces_ok || seen.iter().any(|&s| !s);
            }
            // Unfinished: the digits so far must begin an unused placeholder.
            return allowed
                .iter()
                .zip(&seen)
                .any(|(p, &s)| !s && p.to_string().as_bytes().starts_with(digits));
        }
        if digits.is_empty() || !text[j..].starts_with(b"}}") {
            // `{{` followed by something else (`{{name}}`, `{{7G`) is text, not a
            // placeholder: only where the passage has such text (a `{` just before a
            // placeholder, `{{{1}}`, is a brace of its own).
            if !braces_ok && text.get(start) != Some(&b'{') {
                return false;
            }
            i = start - 1;
            continue;
        }
        let n: usize = std::str::from_utf8(digits)
            .ok()
            .and_then(|d| d.parse().ok())
            .unwrap_or(0);
        match allowed.iter().position(|&p| p == n) {
            Some(k) if !seen[k] => seen[k] = true,
            _ => return false,
        }
        i = j + 2;
    }
    !complete || seen.iter().all(|&s| s)
}

/// The loop the last line of `text` ends in, if any: three or more copies of the same
/// bytes in a row, covering at least 48 bytes (`的的的…` sixteen times, a clause three
/// times). A model that loops never leaves it on its own; it would fill its token allowance.
fn looping(text: &[u8]) -> Option<&[u8]> {
    let line = &text[text.iter().rposition(|&b| b == b'\n').map_or(0, |p| p + 1)..];
    (1..=200).find_map(|p: usize| {
        let reps = 3.max(48_usize.div_ceil(p));
        let span = p * reps;
        let tail = line.get(line.len().checked_sub(span)?..)?;
        tail.chunks(p).all(|c| c == &tail[..p]).then_some(tail)
    })
}

impl TextConstraint for PassageConstraint {
    /// Nothing is allowed after a loop (generation stops there, cut short).
    fn allows(&self, text: &[u8], next: &[u8]) -> bool {
        if self.looping(text) {
            return false;
        }
        let mut all = Vec::with_capacity(text.len() + next.len());
        all.extend_from_slice(text);
        all.extend_from_slice(next);
        self.valid_prefix(&all)
    }

    /// The end needs every placeholder once the last line is reached. A reply that ends
    /// early (the model skipped or merged a line) may stop and goes to the fallback cascade:
    /// made to go on, a model that skipped a line fills the missing one with a repeat, and
    /// every later line is off by one.
    fn allows_end(&self, text: &[u8]) -> bool {
        if self.looping(text) {
            return false;
        }
        let trimmed = trim_end(text);
        let lines = trimmed.iter().filter(|&&b| b == b'\n').count() + 1;
        !trimmed.is_empty()
            && !text.ends_with(b"\n")
            && self.bold_ok(trimmed, true)
            && self.finished_lines_close(trimmed, true)
            && (lines < self.lines || self.lines_placeholders_ok(trimmed, true))
    }

    /// What the current line still owes before it may end: the first of its placeholders
    /// it has not written, else the `**` that closes a bold span it opened.
    fn owed(&self, text: &[u8]) -> Option<Vec<u8>> {
        let line_no = text.iter().filter(|&&b| b == b'\n').count();
        let line = &text[text.iter().rposition(|&b| b == b'\n').map_or(0, |p| p + 1)..];
        let missing = self.placeholders.get(line_no)?.iter().find(|&&n| {
            !PLACEHOLDER_BYTES_RE
                .captures_iter(line)
                .any(|c| c[1] == *n.to_string().as_bytes())
        });
        if let Some(n) = missing {
            return Some(format!("{{{{{n}}}}}").into_bytes());
        }
        let bold = String::from_utf8_lossy(line).matches("**").count();
        (!bold.is_multiple_of(2)).then(|| b"**".to_vec())
    }

    /// The passage, whether Latin words are limited to its names and the names given
    /// besides: all a server needs.
    fn spec(&self) -> Option<serde_json::Value> {
        let mut spec = serde_json::json!({
            "kind": SPEC_KIND,
            "passage": std::str::from_utf8(&self.passage).ok()?,
            "latin_names_only": self.latin.is_some(),
            "names": self.names,
            "capitalised": self.capitalised,
        });
        if self.any_numbers {
            spec["any_numbers"] = serde_json::Value::Bool(true);
        }
        Some(spec)
    }
}

/// The `kind` of a passage constraint's description.
const SPEC_KIND: &str = "quire.passage/1";

/// Runs of Latin letters, digits and hyphens that contain a letter: (start, end, bytes).
fn latin_runs(text: &[u8]) -> impl Iterator<Item = (usize, usize, &[u8])> {
    let word = |c: u8| c.is_ascii_alphanumeric() || c == b'-' || c == b'_';
    let mut i = 0;
    std::iter::from_fn(move || {
        while i < text.len() {
            if !word(text[i]) {
                i += 1;
                continue;
            }
            let start = i;
            while i < text.len() && word(text[i]) {
                i += 1;
            }
            let run = &text[start..i];
            if run.iter().any(u8::is_ascii_alphabetic) {
                return Some((start, i, run));
            }
        }
        None
    })
}

/// Runs of ASCII digits in `text`: (start, digits).
fn digit_runs(text: &[u8]) -> impl Iterator<Item = (usize, &[u8])> {
    let mut i = 0;
    std::iter::from_fn(move || {
        while i < text.len() && !text[i].is_ascii_digit() {
            i += 1;
        }
        let start = i;
        while i < text.len() && text[i].is_ascii_digit() {
            i += 1;
        }
        (i > start).then(|| (start, &text[start..i]))
    })
}

/// Whether `before` ends in a placeholder's opening (`{{`, `{{ `): the digits that follow
/// are its number, not a figure.
fn after_placeholder_open(before: &[u8]) -> bool {
    let mut end = before.len();
    while end > 0 && before[end - 1] == b' ' {
        end -= 1;
    }
    before[..end].ends_with(b"{{")
}

/// The numbers of a source line as digit strings, placeholders left out: each group of
/// digits (`1`, `024`, `3`, `5`), each number with its separators (`,` `_`) removed
/// (`1024`), and the groups of its value in 万 and 亿 (`367,000` = `36.7万`,
/// `150 million` = `1.5亿`), as Chinese writes large numbers.
fn source_digits(line: &str) -> Vec<Vec<u8>> {
    let text = super::PLACEHOLDER_RE.replace_all(line, " ");
    let b = text.as_bytes();
    let mut numbers: Vec<Vec<u8>> = digit_runs(b).map(|(_, r)| r.to_vec()).collect();
    let mut joined = Vec::with_capacity(b.len());
    for (i, &c) in b.iter().enumerate() {
        let inside =
            i > 0 && i + 1 < b.len() && b[i - 1].is_ascii_digit() && b[i + 1].is_ascii_digit();
        if !(inside && (c == b',' || c == b'_')) {
            joined.push(c);
        }
    }
    numbers.extend(digit_runs(&joined).map(|(_, r)| r.to_vec()));
    for c in SCALED_RE.captures_iter(&text) {
        let Ok(v) = c[1].replace([',', '_'], "").parse::<f64>() else {
            continue;
        };
        let scale = match c.get(2).map(|m| m.as_str().to_ascii_lowercase()).as_deref() {
            Some("thousand" | "k") => 1e3,
            Some("million" | "m") => 1e6,
            Some("billion" | "b") => 1e9,
            Some("trillion") => 1e12,
            _ => 1.0,
        };
        for unit in [1.0, 1e4, 1e8] {
            let scaled = v * scale / unit;
            if (1.0..1e15).contains(&scaled) {
                let written = format!("{scaled:.4}");
                let written = written.trim_end_matches('0').trim_end_matches('.');
                numbers.extend(digit_runs(written.as_bytes()).map(|(_, r)| r.to_vec()));
            }
        }
    }
    numbers.extend(month_numbers(&text).map(|m| m.to_string().into_bytes()));
    numbers.sort();
    numbers.dedup();
    numbers
}

/// Capitalised words of `text` (their start offsets) that stand in a title-case phrase:
/// three or more capitalised words in a row (acronyms, names with an inner capital,
/// numbers and short function words such as `of` may come between them; a comma or any
/// lower-case word ends the phrase). Headings, captions and bold labels are written so;
/// their capitals say nothing about names.
fn title_case_words(text: &[u8]) -> std::collections::HashSet<usize> {
    const FUNCTION: &[&[u8]] = &[
        b"a", b"an", b"the", b"of", b"and", b"or", b"to", b"for", b"in", b"on", b"with", b"from",
        b"by", b"at", b"as", b"vs", b"via", b"into",
    ];
    let mut titled = std::collections::HashSet::new();
    let mut phrase: Vec<usize> = Vec::new();
    let mut last_end = 0;
    let mut close = |phrase: &mut Vec<usize>| {
        if phrase.len() >= 3 {
            titled.extend(phrase.iter().copied());
        }
        phrase.clear();
    };
    for (start, end, w) in latin_runs(text) {
        let gap_ok = text[last_end..start]
            .iter()
            .all(|c| c.is_ascii_digit() || b" \t:&/-".contains(c));
        if !gap_ok {
            close(&mut phrase);
        }
        last_end = end;
        if w[0].is_ascii_uppercase() && !inner_capital(w) && !w.iter().any(u8::is_ascii_digit) {
            phrase.push(start);
        } else if inner_capital(w) || w.iter().any(u8::is_ascii_digit) || FUNCTION.contains(&w) {
            continue;
        } else {
            close(&mut phrase);
        }
    }
    close(&mut phrase);
    titled
}

/// A capital letter that does not open the word or one of its hyphenated parts: an
/// acronym (`LLM`), a camel-case name (`GraphRAG`, `ReAct`).
fn inner_capital(w: &[u8]) -> bool {
    w.iter()
        .enumerate()
        .any(|(i, c)| c.is_ascii_uppercase() && i > 0 && w[i - 1] != b'-')
}

/// A letter of neither the Latin script's ASCII part nor the Chinese, Japanese and Korean
/// ones: accented Latin, Greek, Cyrillic, Arabic…
fn foreign_letter(c: char) -> bool {
    c.is_alphabetic() && !c.is_ascii() && !super::is_cjk(c)
}

/// Whether a source line ends a sentence: its last mark, after closing quotes,
/// brackets, emphasis and placeholders, is `.`, `!`, `?`, `:` or `;` (or a full-width one).
fn ends_sentence(line: &str) -> bool {
    let mut t = line.trim_end();
    loop {
        let before = t.len();
        t = t.trim_end_matches([
            ')',
            ']',
            '"',
            '\'',
            '”',
            '’',
            '*',
            '_',
            '`',
            FULLWIDTH_RIGHT_PAREN,
            RIGHT_CORNER_BRACKET,
        ]);
        if let Some(m) = super::PLACEHOLDER_RE.find_iter(t).last() {
            if m.end() == t.len() {
                t = &t[..m.start()];
            }
        }
        t = t.trim_end();
        if t.len() == before {
            break;
        }
    }
    t.ends_with([
        '.',
        '!',
        '?',
        ':',
        ';',
        IDEOGRAPHIC_FULL_STOP,
        FULLWIDTH_EXCLAMATION,
        FULLWIDTH_QUESTION,
        FULLWIDTH_COLON,
        FULLWIDTH_SEMICOLON,
        '…',
    ])
}

/// Whether a reply line ends on a letter or digit (Latin or CJK), not on a mark.
fn ends_on_a_word(line: &[u8]) -> bool {
    String::from_utf8_lossy(trim_end(line))
        .chars()
        .last()
        .is_some_and(char::is_alphanumeric)
}

fn trim_end(t: &[u8]) -> &[u8] {
    let mut end = t.len();
    while end > 0 && matches!(t[end - 1], b' ' | b'\t' | b'\r') {
        end -= 1;
    }
    &t[..end]
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    find(hay, needle).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(c: &PassageConstraint, s: &str) -> bool {
        c.valid_prefix(s.as_bytes())
    }

    #[test]
    fn nothing_after_a_loop() {
        let c = PassageConstraint::new("A long sentence about memory.\nAnother one.");
        let clause = "这是一个测试，并且重复了。";
        let looped = clause.repeat(3);
        assert!(!c.allows(looped.as_bytes(), "好".as_bytes()));
        assert!(!c.allows_end(looped.as_bytes()));
        assert!(!c.allows("的".repeat(16).as_bytes(), "好".as_bytes()));
        // Twice is not a loop, nor a short run, nor a loop on an earlier line.
        assert!(c.allows(clause.repeat(2).as_bytes(), "好".as_bytes()));
        assert!(c.allows("的的的".as_bytes(), "好".as_bytes()));
        // A repetition the passage has itself is copied, not a loop.
        let own = "See [ref link][ref] [ref link][ref] [ref link][ref]";
        let c2 = PassageConstraint::new(own);
        assert!(c2.allows_end(own.as_bytes()));
        let earlier = format!("{looped}\n第二行");
        assert!(c.allows(earlier.as_bytes(), "。".as_bytes()));
    }

    #[test]
    fn placeholders_at_most_once_and_all_before_the_end() {
        let c = PassageConstraint::new("Call {{1}} then {{12}}.");
        assert!(ok(&c, "调用 {{1}} 然后 {{1"));
        assert!(ok(&c, "调用 {{ 1 }}"));
        assert!(!ok(&c, "调用 {{1}} 然后 {{1}}"), "twice");
        let two = PassageConstraint::new("First {{1}}.\nSecond {{2}}.");
        assert!(!ok(&two, "第一 {{2}}"), "a placeholder of another line");
        assert!(!ok(&two, "第一。\n"), "a line ends without its placeholder");
        assert!(!ok(&two, "第一。\n"), "a line ends without its placeholder");
        assert!(ok(&two, "第一 {{1}}。\n第二 {{2}}"));
        assert!(!ok(&c, "调用 {{3"), "no placeholder starts with 3");
        assert!(
            !ok(&c, "调用 {{x}}"),
            "not a placeholder: not in the passage"
        );
        assert!(!ok(&c, "调用 {{}} 然后"), "an empty one neither");
        assert!(
            ok(&c, "调用 {{{1}}"),
            "a brace of its own before a placeholder"
        );
        let one = PassageConstraint::new("Call {{1}} now.");
        assert!(
            !ok(&one, "调用 {{1}} 以及 {{"),
            "no placeholder left to start"
        );
        assert!(
            !ok(&one, "调用 {{1}} 以及 {{  }"),
            "nor a brace run after it"
        );
        assert!(!ok(&c, "调用 {{1x"), "not a placeholder either");
        let own = PassageConstraint::new("Render {{1}} with {{name}} filled in.");
        assert!(
            ok(&own, "用 {{name}} 渲染 {{1"),
            "the passage's own braces are text"
        );
        assert!(!ok(&c, "调用 ｛｛1｝｝"));
        assert!(!c.allows_end(b"\xe8\xb0\x83 {{1}}"), "{{12}} missing");
        assert!(c.allows_end("调用 {{1}} 然后 {{12}}。".as_bytes()));
        assert!(!c.allows_end("调用 {{1}} 然后 {{12".as_bytes()));
    }

    #[test]
    fn exactly_one_line_per_segment() {
        let c = PassageConstraint::new("First.\nSecond.");
        assert!(ok(&c, "第一。\n"), "a separator begun");
        assert!(ok(&c, "第一。\n第二"));
        assert!(!ok(&c, "第一。\n\n"), "an empty line");
        assert!(!ok(&c, "\n"), "leading newline");
        assert!(!ok(&c, "第一。\n第二。\n"), "a third line begun");
        assert!(!ok(&c, "第一。\n第二。\n第三"), "extra line");
        assert!(
            c.allows_end("第一。".as_bytes()),
            "a short reply may end (it goes to the fallback)"
        );
        let p = PassageConstraint::new("First {{1}}.\nSecond {{2}}.");
        assert!(
            !p.allows_end("第一 {{1}}。\n第二。".as_bytes()),
            "{{2}} missing on the last line"
        );
        assert!(c.allows_end("第一。\n第二。".as_bytes()));
        assert!(!c.allows_end("第一。\n".as_bytes()), "not on a separator");
        assert!(!c.allows_end(b""));
    }

    #[test]
    fn markdown_the_passage_lacks_cannot_start() {
        let c = PassageConstraint::new("Plain prose, 3 items in 2024.");
        for bad in [
            "```",
            "# 标题",
            "> 引用",
            "- 项",
            "* 项",
            "1. 项",
            "| 表",
            "正文 `x",
            "注[^1]",
        ] {
            assert!(!ok(&c, bad), "{bad:?}");
        }
        for good in ["正文 - 破折号", "3 个项目", "2024年"] {
            assert!(ok(&c, good), "{good:?}");
        }
        let with = PassageConstraint::new("a | b with `x` and [^n]");
        assert!(ok(&with, "甲 | 乙 `x` [^n]"));
        let bold = PassageConstraint::new("A **bold** word.\nNo emphasis here.");
        assert!(ok(&bold, "一个**粗体**词。\n这里"));
        assert!(!ok(&bold, "一个**粗体**词**"), "a third delimiter");
        assert!(
            !ok(&bold, "一个**粗体**词。\n这里**"),
            "bold the line lacks"
        );
    }

    #[test]
    fn a_bold_label_stays_bold_and_no_line_ends_inside_bold() {
        let c = PassageConstraint::new(
            "**Level 2: Retrieval** — the Agent looks back.\nPlain **word** here.",
        );
        assert!(ok(&c, "*"));
        assert!(ok(&c, "**第二层"));
        assert!(!ok(&c, "第二层"), "the label must open the line");
        assert!(!ok(&c, "*第"), "a single star is not bold");
        assert!(
            !ok(&c, "**第二层：检索 —— Agent 回顾。\n"),
            "bold left open"
        );
        assert!(ok(&c, "**第二层：检索** —— Agent 回顾。\n"));
        assert!(
            ok(&c, "**第二层：检索** —— Agent 回顾。\n这里的词"),
            "mid-line bold may go"
        );
        assert!(!c.allows_end("**第二层：检索** —— 回顾。\n这里的**词".as_bytes()));
        assert!(c.allows_end("**第二层：检索** —— 回顾。\n这里的**词**。".as_bytes()));
        let odd = PassageConstraint::new("**unbalanced source");
        assert!(ok(&odd, "未闭合"), "one delimiter is not a label");
        assert!(
            odd.allows_end("**未闭合".as_bytes()),
            "the source's own odd count"
        );
    }

    #[test]
    fn what_a_line_owes_before_it_ends() {
        let c = PassageConstraint::new("As {{1}} says{{2}}.\nThe **key** is {{3}}.");
        assert_eq!(
            c.owed("正如 {{1}} 所说。".as_bytes()),
            Some(b"{{2}}".to_vec())
        );
        assert_eq!(
            c.owed("正如 {{ 2 }} 所说".as_bytes()),
            Some(b"{{1}}".to_vec())
        );
        assert_eq!(c.owed("正如 {{1}} 所说{{2}}。".as_bytes()), None);
        let second = "正如 {{1}} 所说{{2}}。\n**关键**是 {{3}}";
        assert_eq!(c.owed(second.as_bytes()), None);
        let open = "正如 {{1}} 所说{{2}}。\n{{3}} 是**关键";
        assert_eq!(c.owed(open.as_bytes()), Some(b"**".to_vec()));
    }

    #[test]
    fn a_dated_month_may_be_written_as_its_number() {
        let c = PassageConstraint::new(
            "It expires on February 18, 2025, or 3 Mar 2026.\nIt may rain in May.",
        );
        assert!(ok(
            &c,
            "它将于 2025 年 2 月 18 日或 2026 年 3 月 3 日过期。"
        ));
        assert!(
            !ok(&c, "它将于 2025 年 4 月"),
            "a month the line does not name"
        );
        assert!(
            !ok(
                &c,
                "它将于 2025 年 2 月 18 日或 2026 年 3 月 3 日过期。\n5 月"
            ),
            "May without a number is not a date"
        );
        assert_eq!(
            month_numbers("in May 2024, on 1st Sept and in December").collect::<Vec<_>>(),
            [5, 9, 12]
        );
    }

    #[test]
    fn a_source_with_its_own_numerals_allows_any_digits() {
        let passage = "他处理了一万次相似任务，见第二章。";
        assert!(!ok(&PassageConstraint::new(passage), "He handled 10,000"));
        let c = PassageConstraint::new(passage).any_numbers();
        assert!(ok(&c, "He handled 10,000 similar tasks; see Chapter 2."));
        let back = PassageConstraint::from_spec(&c.spec().unwrap()).unwrap();
        assert!(ok(&back, "He handled 10,000"), "kept through the spec");
    }

    #[test]
    fn digits_come_from_the_source_line() {
        let c = PassageConstraint::new(
            "**Level 2** needs 1,024 tokens in 3.5 ms, see {{12}}.\nTwo cars, 2025.",
        );
        assert!(ok(
            &c,
            "**第 2 层**需要 1024 个词元，耗时 3.5 ms，见 {{12}}。\n两辆车，2025"
        ));
        assert!(ok(&c, "**第 2 层**需要 1,024 个"));
        assert!(!ok(&c, "**第 4"), "a number the line lacks");
        assert!(!ok(&c, "**第 2 层**需要 2048"), "an invented figure");
        assert!(
            !ok(&c, "**第二层**需要 1024 个词元，见 {{12}}。\n2 辆车"),
            "spelled out in the source"
        );
        assert!(
            ok(&c, "**第二层**需要 1024 个词元，见 {{12}}。\n两辆车，20"),
            "a number being written"
        );
        assert!(
            !ok(&c, "**第二层**需要 1024 个词元，见 {{12}}。\n两辆车，3.5"),
            "another line's number"
        );
        assert!(
            ok(&c, "**第二层** 见 {{ 12 }}"),
            "a placeholder's number is not a figure"
        );
        let big = PassageConstraint::new("367,000 users, 150 million tokens, 128K context.");
        assert!(ok(&big, "36.7 万用户，1.5 亿个词元，128K 上下文"));
        assert!(ok(&big, "367000 名用户，15000 万个词元，12.8 万"));
        assert!(!ok(&big, "37 万"), "a rounded figure is another figure");
    }

    #[test]
    fn only_names_stay_latin_in_a_cjk_target() {
        let c =
            PassageConstraint::new("Reuse the Agent prefix whenever possible, in 40 ms with LLM.")
                .latin_names_only("Reuse the Agent prefix whenever possible, in 40 ms with LLM.");
        assert!(ok(&c, "尽可能复用 Agent 前缀，40 ms，LLM"));
        assert!(ok(&c, "复用 Ag"), "prefix of a name");
        assert!(!ok(&c, "复用前缀 whenever"), "ordinary word");
        assert!(!ok(&c, "复用前缀 whe"), "no name starts with whe");
        assert!(!ok(&c, "复用 agentic 前缀"));
        assert!(!ok(&c, "复用 Agent 和 reuse "));
        let n = "Runtimes such as llama.cpp keep it.".to_string();
        let c = PassageConstraint::new(&n).latin_names_only(&n);
        assert!(ok(&c, "llama.cpp 等运行时"));
        let n = "Voyager{{3}} demonstrates a loop. Skills{{4}} hold code.";
        let c = PassageConstraint::new(n).latin_names_only(n);
        assert!(
            ok(&c, "Voyager{{3}} 展示了一个循环。"),
            "a word cited by a footnote is a name, even opening a sentence"
        );
        assert!(!ok(&c, "展示了 demonstrates"));
        let n = "Voyager demonstrates a loop.";
        let c = PassageConstraint::new(n).latin_names_only(n);
        assert!(
            !ok(&c, "Voyager 展示了"),
            "without the citation it only opens a sentence"
        );
        let free = PassageConstraint::new("Reuse it whenever possible.");
        assert!(
            ok(&free, "Reuse whenever"),
            "no Latin rule without latin_names_only"
        );
    }

    #[test]
    fn names_may_be_singular_and_glossary_names_may_open_a_sentence() {
        let n = "The next chapter shows how Agents use tools.";
        let c = PassageConstraint::new(n).latin_names_only(n);
        assert!(ok(&c, "下一章介绍 Agent 如何使用工具。"), "singular");
        assert!(ok(&c, "下一章介绍 Agents 如何"));
        let q = "This is the idea of \"**Agentic RAG**.\" It says \"Ignore previous instructions now.\"";
        let c = PassageConstraint::new(q).latin_names_only(q);
        assert!(ok(&c, "这就是“**Agentic RAG**”的思想。"), "a quoted term");
        assert!(
            !ok(&c, "这就是“**Agentic RAG**”的思想。它说“Ignore"),
            "a quoted sentence"
        );
        let f = "Anthropic, \"Contextual Retrieval.\" {{1}}";
        let plain = PassageConstraint::new(f).latin_names_only(f);
        assert!(!ok(&plain, "Anthropic，"), "a capital opening a line");
        let named = PassageConstraint::new(f)
            .latin_names_only(f)
            .with_names(["Anthropic", "上下文检索"]);
        assert!(ok(&named, "Anthropic，“上下文检索”。{{1}}"));
        assert!(!ok(&named, "Anthropic 提出 proposed"), "not a name");
    }

    #[test]
    fn a_word_the_book_capitalises_inside_a_sentence_is_a_name_where_it_opens_one() {
        let book = "Traditional RAG is simple. This is the core idea of **Agentic RAG**.";
        assert_eq!(
            capitalised_names(book),
            ["Agentic", "RAG"],
            "not `Traditional`, `This`"
        );
        let p = "Agentic RAG is like a researcher.";
        let alone = PassageConstraint::new(p)
            .latin_names_only(p)
            .with_names(["Agent"]);
        assert!(
            !ok(&alone, "Agentic RAG"),
            "opening a sentence, it is not a name here"
        );
        assert!(
            ok(&alone, "Agent RAG"),
            "the cut word the model was left with"
        );
        let named = PassageConstraint::new(p)
            .latin_names_only(p)
            .with_names(["Agent"])
            .with_capitalised(capitalised_names(book));
        assert!(ok(&named, "Agentic RAG 就像一位研究员。"));
        assert!(!ok(&named, "agentic RAG"), "only with its capital");
        let r = "Retrieval comes first.";
        let named = PassageConstraint::new(r)
            .latin_names_only(r)
            .with_capitalised(["Retrieval", "Agentic"]);
        assert!(ok(&named, "Retrieval 先行。"));
        assert!(!ok(&named, "先 retrieval"), "not the lower-case word");
        assert!(!ok(&named, "Agentic"), "a name the passage does not have");
    }

    #[test]
    fn words_quoted_on_their_own_and_at_names_stay_english() {
        let n = "The word \"bank\" differs in \"river bank\"; searching \"kitty\" misses recall@k, and \"the model ignores every instruction\" is a sentence.";
        let c = PassageConstraint::new(n).latin_names_only(n);
        assert!(ok(
            &c,
            "“bank”在“river bank”中不同；搜索“kitty”会漏掉 recall@k"
        ));
        assert!(!ok(&c, "模型 ignores"), "a quoted sentence is translated");
    }

    #[test]
    fn a_capital_inside_a_word_is_the_passages_spelling() {
        let n = "GraphRAG and two LLMs help Agents, as MCP does.";
        let c = PassageConstraint::new(n).latin_names_only(n);
        assert!(ok(&c, "GraphRAG 和两个 LLM 帮助 Agent，如 MCP 所做。"));
        assert!(
            ok(&c, "Graphrag 与 LLMs，AGENT"),
            "lower case or all capitals"
        );
        assert!(!ok(&c, "AgenT"), "a capital the passage does not write");
        assert!(!ok(&c, "GraphRag"));
        assert!(ok(&c, "GraphR"), "a prefix of the passage's spelling");
    }

    #[test]
    fn capitals_of_a_title_case_phrase_are_not_names() {
        let h = "Agentic RAG: A Paradigm Shift Toward Tool-Based Knowledge Retrieval";
        let c = PassageConstraint::new(h).latin_names_only(h);
        assert!(ok(&c, "智能体化 RAG：知识检索的范式转变"));
        assert!(!ok(&c, "Agentic RAG"), "a word of the title");
        assert!(!ok(&c, "智能体化 RAG：一种 paradigm "));
        let cap = "Figure 3-13: Agentic RAG System Architecture";
        let c = PassageConstraint::new(cap).latin_names_only(cap);
        assert!(!ok(&c, "图 3-13：Agentic "));
        assert!(!ok(&c, "图 3-13：Ag RAG"), "the start of a refused word");
        assert!(ok(&c, "图 3-13：智能体化 RAG 系统架构"));
        // Two capitalised words, or names between lower-case words, stay names.
        let p =
            "We then used Contextual Retrieval, as OpenAI and Google DeepMind do with GraphRAG.";
        let c = PassageConstraint::new(p).latin_names_only(p);
        assert!(ok(
            &c,
            "我们随后像 OpenAI 和 Google DeepMind 用 GraphRAG 那样使用 Contextual Retrieval。"
        ));
        assert_eq!(
            title_case_words(b"Comparison of Agentic RAG and Non-Agentic RAG").len(),
            3
        );
        assert!(title_case_words(b"Honda, Tesla and BMW cars").is_empty());
    }

    #[test]
    fn no_letters_of_another_script_than_the_passage_has() {
        let p = "Agentic RAG grows with the Agent.";
        let c = PassageConstraint::new(p).latin_names_only(p);
        assert!(!ok(&c, "Agент RAG"), "Cyrillic");
        assert!(!ok(&c, "Ag\u{3b1}"), "Greek");
        assert!(
            !c.allows("Ag".as_bytes(), &[0xD0]),
            "the first byte of a Cyrillic letter"
        );
        assert!(
            c.allows("增长".as_bytes(), &[0xE9]),
            "the first byte of a CJK character"
        );
        assert!(ok(&c, "随 Agent 增长 ×，约 ° ·"), "symbols are not letters");
        assert!(
            !ok(&c, "随 Agent 增长 é"),
            "an accented letter the passage lacks"
        );
        let greek = "The decay rate \u{3bb} is small.";
        let c = PassageConstraint::new(greek).latin_names_only(greek);
        assert!(ok(&c, "衰减率 \u{3bb} 很小。"));
        assert!(!ok(&c, "衰减率 \u{3bc}"), "only the passage's own letters");
        let free = PassageConstraint::new(p);
        assert!(
            ok(&free, "Agент"),
            "no script rule without latin_names_only"
        );
    }

    #[test]
    fn a_line_that_ends_a_sentence_does_not_end_on_a_word() {
        let c = PassageConstraint::new(
            "It turns to \"tools\": how Agents act.\nSee the figure.\nRAG Technique",
        );
        assert!(
            !ok(&c, "它转向“工具”：Agent\n"),
            "cut off before the line ends"
        );
        assert!(ok(&c, "它转向“工具”：Agent 如何行动。\n见图。\n"));
        assert!(!ok(&c, "它转向“工具”。\n见图\n"));
        assert!(
            !c.allows_end("它转向“工具”：Agent".as_bytes()),
            "a short reply"
        );
        assert!(c.allows_end("它转向“工具”：Agent 如何行动。\n见图。\nRAG 技术".as_bytes()));
        let ends = [
            "**Phase 1.**",
            "Done (see {{1}}).",
            "“Quoted.”",
            "Why?{{2}}",
            "The list:",
        ];
        assert!(ends.iter().all(|l| ends_sentence(l)), "{ends:?}");
        assert!(!ends_sentence("Run {{1}}") && !ends_sentence("## RAG Technique"));
        assert!(ends_on_a_word("工具".as_bytes()) && ends_on_a_word(b"Agent "));
        assert!(!ends_on_a_word("工具。".as_bytes()) && !ends_on_a_word(b"{{1}}"));
    }

    #[test]
    fn allows_extends_text_by_one_token() {
        let c = PassageConstraint::new("Use {{1}}.");
        assert!(c.allows("使用 ".as_bytes(), b"{{"));
        assert!(c.allows("使用 {{".as_bytes(), b"1"));
        assert!(!c.allows("使用 {{".as_bytes(), b"2"));
        assert!(c.allows("使用 {{1".as_bytes(), b"}}"));
        assert!(!c.allows("使用 {{1}}".as_bytes(), b"\n"));
    }

    #[test]
    fn the_spec_rebuilds_the_same_constraint() {
        let passage = "The **cache** keeps {{1}} keys.\nUse `Agent` with llama.cpp.";
        let original = PassageConstraint::new(passage)
            .latin_names_only(passage)
            .with_names(["Keeps"]);
        let spec = original.spec().expect("a passage constraint travels");
        let rebuilt = PassageConstraint::from_spec(&spec).expect("its spec rebuilds it");
        let probes: [(&str, &str); 6] = [
            ("缓存", " keeps"),
            ("**缓存**", "**"),
            ("缓存保存 {{1}} 个键。\n使用 ", "`Agent`"),
            ("缓存保存 ", "{{2}}"),
            ("", "# "),
            ("缓存保存 {{1}} 个键。\n", "llama"),
        ];
        for (text, next) in probes {
            assert_eq!(
                original.allows(text.as_bytes(), next.as_bytes()),
                rebuilt.allows(text.as_bytes(), next.as_bytes()),
                "{text:?} + {next:?}"
            );
        }
        assert!(
            original.allows("缓存".as_bytes(), b" keeps"),
            "a name given"
        );
        assert!(!original.allows("缓存".as_bytes(), b" cache"));
        assert_eq!(spec["names"], serde_json::json!(["Keeps"]));
        let plain = PassageConstraint::new(passage).spec().unwrap();
        assert_eq!(plain["latin_names_only"], false);
        assert!(PassageConstraint::from_spec(&serde_json::json!({"kind": "other"})).is_none());
        assert!(PassageConstraint::from_spec(&serde_json::json!("x")).is_none());
    }
}
