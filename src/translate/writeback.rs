//! The write-back passes: what the translation lost and the book's conventions put back
//! into it, as one ordered list of named passes. Each pass has one interface
//! ([`WriteBack`]), a name that `--skip-pass NAME` switches it off by, and one line in the
//! run's log. Two kinds:
//! * line passes — the target's typography ([`super::typography`]; each of its profile's
//!   rules is a pass too, by its [`Rule::name`], `acronym-expansions` among them) — run on
//!   every translated line as it comes back, so the checks see typeset text;
//! * book passes — `kept_words`, `emphasis`, `originals` — run once over the whole book
//!   after translation, in [`BOOK_PASSES`]'s order, by [`run_book_passes`].

use super::state::RunState;
use crate::engine::backend::ChatBackend;
use crate::glossary::Glossary;
use crate::lang::Rule;
use crate::units::Unit;
use anyhow::{bail, Result};

/// What a book pass works on: every unit of the book and its translation, the run's
/// glossary and target language.
pub(super) struct BookText<'a> {
    /// The units of each chapter.
    pub units: &'a [Vec<Unit>],
    /// The restored translation of each unit (`None`: not translated).
    pub texts: &'a mut [Vec<Option<String>>],
    /// The run's glossary.
    pub glossary: &'a Glossary,
    /// The target language code.
    pub target_lang: &'a str,
}

/// A write-back pass over the whole book.
pub(super) trait WriteBack {
    /// The name `--skip-pass` and the log know it by.
    fn name(&self) -> &'static str;
    /// Run the pass; its report line, or `None` when it changed nothing.
    fn run(
        &self,
        m: &mut RunState,
        backend: &mut dyn ChatBackend,
        book: &mut BookText,
    ) -> Result<Option<String>>;
}

/// Kept terms the model still translated: its words for them learned from the
/// translations and written back ([`super::kept_words`]).
struct KeptWords;

impl WriteBack for KeptWords {
    fn name(&self) -> &'static str {
        "kept_words"
    }

    fn run(
        &self,
        _m: &mut RunState,
        _backend: &mut dyn ChatBackend,
        book: &mut BookText,
    ) -> Result<Option<String>> {
        let learned =
            super::kept_words::write_back(book.units, book.texts, book.glossary, book.target_lang);
        let lines: Vec<String> = learned
            .iter()
            .map(|l| {
                format!(
                    "kept term {:?}: the model's word {:?} in {} lines, {} written back",
                    l.term, l.word, l.lines, l.written
                )
            })
            .collect();
        Ok((!lines.is_empty()).then(|| lines.join("\n")))
    }
}

/// Bold spans the model dropped, found in their lines and written back
/// ([`super::emphasis`]).
struct Emphasis;

impl WriteBack for Emphasis {
    fn name(&self) -> &'static str {
        "emphasis"
    }

    fn run(
        &self,
        m: &mut RunState,
        backend: &mut dyn ChatBackend,
        book: &mut BookText,
    ) -> Result<Option<String>> {
        let bold = super::emphasis::write_back(m, backend, book.units, book.texts, book.glossary)?;
        Ok((bold.lines > 0).then(|| {
            format!(
                "emphasis: {} lines had lost bold spans, {} written back ({} asked)",
                bold.lines, bold.spans, bold.asked
            )
        }))
    }
}

/// The originals of the terms each chapter introduces in bold ([`super::originals`]).
struct Originals;

impl WriteBack for Originals {
    fn name(&self) -> &'static str {
        "originals"
    }

    fn run(
        &self,
        _m: &mut RunState,
        _backend: &mut dyn ChatBackend,
        book: &mut BookText,
    ) -> Result<Option<String>> {
        let n = super::originals::write_back(book.units, book.texts, book.target_lang);
        let s = if n == 1 { "" } else { "s" };
        Ok(
            (n > 0)
                .then(|| format!("originals: {n} term{s} introduced in bold given the original")),
        )
    }
}

/// The book passes, in the order they run.
pub(super) const BOOK_PASSES: [&dyn WriteBack; 3] = [&KeptWords, &Emphasis, &Originals];

pub use super::typography::TYPOGRAPHY;

/// Every pass name `--skip-pass` accepts: the book passes, `typography`, and each
/// typography rule.
pub fn pass_names() -> Vec<&'static str> {
    let mut names: Vec<&'static str> = BOOK_PASSES.iter().map(|p| p.name()).collect();
    names.push(TYPOGRAPHY);
    names.extend(Rule::ALL.iter().map(|r| r.name()));
    names
}

/// `--skip-pass` names checked: an unknown one is an error that lists the known ones.
pub fn check_skipped(skipped: &[String]) -> Result<()> {
    let known = pass_names();
    for s in skipped {
        if !known.contains(&s.as_str()) {
            bail!(
                "unknown pass --skip-pass {s:?}: the passes are {}",
                known.join(", ")
            );
        }
    }
    Ok(())
}

/// Run the book passes not in `skipped`, in order, logging one report line each (a pass
/// that changed nothing logs nothing; a skipped one says so).
pub(super) fn run_book_passes(
    m: &mut RunState,
    backend: &mut dyn ChatBackend,
    book: &mut BookText,
    skipped: &[String],
) -> Result<()> {
    for pass in BOOK_PASSES {
        if skipped.iter().any(|s| s == pass.name()) {
            m.log(format!("{}: skipped (--skip-pass)", pass.name()));
            continue;
        }
        if let Some(line) = pass.run(m, backend, book)? {
            m.log(line);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pass_names_are_unique_and_checked() {
        let names = pass_names();
        let mut sorted = names.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), names.len(), "{names:?}");
        assert_eq!(
            &names[..4],
            ["kept_words", "emphasis", "originals", "typography"]
        );
        assert!(names.contains(&"acronym-expansions") && names.contains(&"cjk-spacing"));
        assert!(check_skipped(&["emphasis".into(), "curly-quotes".into()]).is_ok());
        let e = check_skipped(&["bold".into()]).unwrap_err().to_string();
        assert!(
            e.contains("\"bold\"") && e.contains("kept_words, emphasis"),
            "{e}"
        );
    }
}
