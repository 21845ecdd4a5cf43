//! The bundled sample book (`examples/sample-book/`), compiled into the binary so that
//! `quire translate` with no input works from any directory.

use crate::book::{Book, Chapter};
use std::path::PathBuf;

/// Chapters: (file name, text).
pub const CHAPTERS: &[(&str, &str)] = &[
    (
        "chapter1.md",
        include_str!("../../examples/sample-book/chapter1.md"),
    ),
    (
        "chapter2.md",
        include_str!("../../examples/sample-book/chapter2.md"),
    ),
    (
        "chapter3.md",
        include_str!("../../examples/sample-book/chapter3.md"),
    ),
];

/// The sample book's house glossary (JSON).
pub const GLOSSARY_JSON: &str = include_str!("../../examples/sample-book/glossary.json");

/// The sample book as a [`Book`] (root: `examples/sample-book`).
pub fn book() -> Book {
    Book {
        root: PathBuf::from("examples/sample-book"),
        chapters: CHAPTERS
            .iter()
            .map(|(name, text)| Chapter {
                rel_path: PathBuf::from(name),
                text: text.to_string(),
            })
            .collect(),
        epub: None,
    }
}
