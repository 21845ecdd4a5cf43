//! The chapters stage: each chapter put back together from its units — translated where
//! the unit finished, in the source language where the run stopped before it — and written
//! under `book/`, mirroring the input tree.

use super::state::RunState;
use crate::book::epub::{Doc, Epub, EpubOptions};
use crate::units::{reassemble, restore_placeholders, Unit};
use crate::util::{sha256_hex, write_atomic, LineEnding};
use anyhow::Result;
use regex::Regex;
use std::sync::LazyLock;

/// A chapter as written: its name and the text of each of its units.
pub(super) struct ChapterText {
    pub(super) name: String,
    pub(super) texts: Vec<String>,
}

/// Write every chapter and record it in the checkpoint's file index.
pub(super) fn write(
    m: &mut RunState,
    translations: &[Vec<Option<String>>],
) -> Result<Vec<ChapterText>> {
    let plan = m.plan;
    let book_dir = m.out.join("book");
    let mut chapter_texts = Vec::new();
    let mut epub_blocks = Vec::new();
    for (ci, chapter) in plan.book.chapters.iter().enumerate() {
        let units = &plan.units[ci];
        let texts: Vec<String> = units
            .iter()
            .zip(&translations[ci])
            .map(|(u, t)| {
                t.clone().unwrap_or_else(|| {
                    restore_placeholders(u, &u.protected).unwrap_or_else(|_| u.source.clone())
                })
            })
            .collect();
        // A chapter written with one line-ending style throughout keeps it (translated
        // units come back with LF).
        let mut text = reassemble(units, &texts);
        if m.opts.bilingual && plan.book.epub.is_none() {
            match crate::book::bilingual::interleave(&chapter.text, &text) {
                Some(both) => text = both,
                None => eprintln!(
                    "warning: {}: the translation's blocks do not pair with the source's; written without the source",
                    chapter.name()
                ),
            }
        }
        let text = match LineEnding::of(&chapter.text) {
            Some(style) => style.apply(&text),
            None => text,
        };
        let path = book_dir.join(&chapter.rel_path);
        write_atomic(&path, text.as_bytes())?;
        m.checkpoint
            .value
            .result
            .manager_context_final
            .file_index
            .insert(
                format!("book/{}", chapter.name()),
                sha256_hex(text.as_bytes()),
            );
        if let Some(epub) = &plan.book.epub {
            epub_blocks.push(block_texts(&epub.docs[ci], units, &texts));
        }
        chapter_texts.push(ChapterText {
            name: chapter.name(),
            texts,
        });
    }
    if let Some(epub) = &plan.book.epub {
        write_epub(m, epub, &epub_blocks)?;
    }
    Ok(chapter_texts)
}

/// The translated EPUB, under the input's file name in the output directory.
fn write_epub(m: &mut RunState, epub: &Epub, blocks: &[Vec<Option<String>>]) -> Result<()> {
    let name = epub.file_name();
    let path = m.out.join(&name);
    let opts = EpubOptions {
        language: m.opts.target_lang.clone(),
        bilingual: m.opts.bilingual,
    };
    let report = crate::book::epub::write_epub(epub, blocks, &opts, &path)?;
    for block in &report.kept_source {
        eprintln!("warning: {block}: the translation's markup did not fit the source's; the source is kept");
    }
    let bytes = std::fs::read(&path)?;
    m.checkpoint
        .value
        .result
        .manager_context_final
        .file_index
        .insert(name, sha256_hex(&bytes));
    Ok(())
}

/// The translated Markdown of each block of `doc`, from its chapter's units and their
/// texts (`None`: keep the source). A unit whose translation has another number of blocks
/// than its source keeps its source; an empty block keeps its source.
fn block_texts(doc: &Doc, units: &[Unit], texts: &[String]) -> Vec<Option<String>> {
    // Stands for a block left empty, so that the chapter still splits into its blocks.
    const EMPTY: &str = "\u{1}";
    let fixed: Vec<String> = units
        .iter()
        .zip(texts)
        .map(|(u, t)| {
            let (s, t) = (blocks_of(u.source.trim()), blocks_of(t.trim()));
            if s.len() == t.len() {
                let t: Vec<&str> = t
                    .iter()
                    .map(|b| if b.is_empty() { EMPTY } else { b })
                    .collect();
                t.join("\n\n")
            } else {
                u.source.clone()
            }
        })
        .collect();
    let text = reassemble(units, &fixed);
    let paras = blocks_of(text.trim());
    if paras.len() != doc.blocks.len() {
        return vec![None; doc.blocks.len()];
    }
    paras
        .into_iter()
        .map(|p| (!p.contains(EMPTY)).then(|| p.to_string()))
        .collect()
}

/// The blocks of Markdown text: split at blank lines, each trimmed (empty ones kept).
fn blocks_of(text: &str) -> Vec<&str> {
    static BLANK: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"\n[ \t]*\n").unwrap());
    if text.is_empty() {
        return Vec::new();
    }
    BLANK.split(text).map(str::trim).collect()
}
