//! `quire check SOURCE TRANSLATION`: deterministic QA of a translation against its source.

use crate::book::load_book;
use crate::checks::{check_books, CheckContext, Glossary};
use anyhow::{Context, Result};
use std::path::PathBuf;

/// Arguments of `quire check`.
#[derive(clap::Args, Debug)]
pub struct CheckArgs {
    /// The source: a Markdown file or a directory of chapters.
    pub source: PathBuf,
    /// The translation: a file, or a directory with the same chapter names.
    pub translation: PathBuf,
    /// Glossary (JSON list of {"en","zh"} or {"source","target"} terms, or TOML).
    #[arg(long, value_name = "FILE")]
    pub glossary: Option<PathBuf>,
    /// Print the report as JSON (stable field names) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Source language (BCP 47 code).
    #[arg(long, default_value = "en", value_name = "LANG")]
    pub source_lang: String,
    /// Target language (BCP 47 code).
    #[arg(long, default_value = "zh-CN", value_name = "LANG")]
    pub target_lang: String,
}

/// Run `quire check`; returns the process exit code: 0 when no errors were found, 1 when
/// some were, 2 when the inputs could not be read (the message goes to stderr).
pub fn run(args: CheckArgs) -> Result<i32> {
    match run_inner(&args) {
        Ok(code) => Ok(code),
        Err(err) => {
            eprintln!("error: {err:#}");
            Ok(2)
        }
    }
}

fn run_inner(args: &CheckArgs) -> Result<i32> {
    let source = load_book(&args.source).context("cannot load the source")?;
    let target = load_book(&args.translation).context("cannot load the translation")?;
    let mut ctx = CheckContext::new(&args.source_lang, &args.target_lang);
    if let Some(path) = &args.glossary {
        ctx = ctx.with_glossary(Glossary::load(path, &args.source_lang, &args.target_lang)?);
    }
    let report = check_books(&source, &target, &ctx)?;
    if args.json {
        println!("{}", report.to_json());
    } else {
        print!("{}", report.render_human());
    }
    Ok(if report.passed { 0 } else { 1 })
}
