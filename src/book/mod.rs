//! Loading a book: one Markdown file, a directory of Markdown chapters in natural order,
//! or an EPUB (its spine's documents as Markdown chapters, see [`epub`]).
//!
//! A chapter keeps its exact bytes (decoded as UTF-8, nothing normalised), so that
//! segmentation and reassembly can reproduce it byte for byte.

pub mod bilingual;
pub mod code_comments;
pub mod epub;

use anyhow::{bail, Context, Result};
use std::cmp::Ordering;
use std::path::{Path, PathBuf};

/// A book: the path it was loaded from and its chapters in reading order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Book {
    /// The file or directory the book was loaded from.
    pub root: PathBuf,
    /// Chapters in natural sort order of their relative paths (an EPUB's in spine order).
    pub chapters: Vec<Chapter>,
    /// The EPUB the chapters were read from, to write the translation back into.
    pub epub: Option<std::sync::Arc<epub::Epub>>,
}

/// One chapter: a Markdown file's path relative to the book root and its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chapter {
    /// Path relative to the book root (e.g. `chapter1.md`, `part1/intro.md`); for a
    /// single-file book, just the file name.
    pub rel_path: PathBuf,
    /// The chapter's text exactly as stored in the file.
    pub text: String,
}

impl Chapter {
    /// The relative path with `/` separators on every platform, used in unit ids and reports.
    pub fn name(&self) -> String {
        path_to_slash(&self.rel_path)
    }
}

/// `path` with `/` separators, whatever the platform.
pub fn path_to_slash(path: &Path) -> String {
    path.components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join("/")
}

/// Whether `path` names a Markdown file (`.md` or `.markdown`, any case).
pub fn is_markdown_path(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .map(|e| e.eq_ignore_ascii_case("md") || e.eq_ignore_ascii_case("markdown"))
        .unwrap_or(false)
}

/// Load a book from a Markdown file or a directory searched recursively for `.md` and
/// `.markdown` files (hidden files and directories are skipped), in natural sort order
/// (`chapter2.md` before `chapter10.md`).
///
/// Errors name the offending path: a missing path, a file that is not Markdown, a
/// directory without Markdown files, an unreadable directory or file, and text that is
/// not UTF-8 (with the byte offset of the first invalid byte).
pub fn load_book(path: &Path) -> Result<Book> {
    let meta = std::fs::metadata(path)
        .with_context(|| format!("cannot read book path {}", path.display()))?;
    if meta.is_file() && epub::is_epub_path(path) {
        let book = epub::Epub::read(path)?;
        return Ok(Book {
            root: path.to_path_buf(),
            chapters: book.chapters(),
            epub: Some(std::sync::Arc::new(book)),
        });
    }
    if meta.is_file() {
        if !is_markdown_path(path) {
            bail!(
                "{} is not a Markdown file or an EPUB (expected a .md, .markdown or .epub file, or a directory of Markdown files)",
                path.display()
            );
        }
        let text = read_markdown(path)?;
        let name = path
            .file_name()
            .map(PathBuf::from)
            .unwrap_or_else(|| path.to_path_buf());
        return Ok(Book {
            root: path.to_path_buf(),
            chapters: vec![Chapter {
                rel_path: name,
                text,
            }],
            epub: None,
        });
    }
    if !meta.is_dir() {
        bail!("{} is neither a file nor a directory", path.display());
    }
    let mut files = Vec::new();
    collect_markdown(path, path, &mut files)?;
    if files.is_empty() {
        bail!(
            "the book directory {} contains no Markdown files (.md or .markdown)",
            path.display()
        );
    }
    files.sort_by(|a, b| natural_path_cmp(a, b));
    let mut chapters = Vec::with_capacity(files.len());
    for rel in files {
        let text = read_markdown(&path.join(&rel))?;
        chapters.push(Chapter {
            rel_path: rel,
            text,
        });
    }
    Ok(Book {
        root: path.to_path_buf(),
        chapters,
        epub: None,
    })
}

fn collect_markdown(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let entries = std::fs::read_dir(dir)
        .with_context(|| format!("cannot read directory {}", dir.display()))?;
    for entry in entries {
        let entry = entry.with_context(|| format!("cannot read directory {}", dir.display()))?;
        let name = entry.file_name();
        if name.to_string_lossy().starts_with('.') {
            continue;
        }
        let path = entry.path();
        let meta =
            std::fs::metadata(&path).with_context(|| format!("cannot read {}", path.display()))?;
        if meta.is_dir() {
            collect_markdown(root, &path, out)?;
        } else if meta.is_file() && is_markdown_path(&path) {
            let rel = path.strip_prefix(root).unwrap_or(&path).to_path_buf();
            out.push(rel);
        }
    }
    Ok(())
}

/// Read a Markdown file as UTF-8; invalid UTF-8 is an error naming the file and byte offset.
pub fn read_markdown(path: &Path) -> Result<String> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    decode_markdown(path, bytes)
}

/// Decode bytes read from `path` as UTF-8. The error names the file, the byte offset of
/// the first invalid byte, and its line and column.
pub fn decode_markdown(path: &Path, bytes: Vec<u8>) -> Result<String> {
    match String::from_utf8(bytes) {
        Ok(text) => Ok(text),
        Err(err) => {
            let offset = err.utf8_error().valid_up_to();
            let bytes = err.as_bytes();
            let line = bytes[..offset].iter().filter(|&&b| b == b'\n').count() + 1;
            let line_start = bytes[..offset]
                .iter()
                .rposition(|&b| b == b'\n')
                .map(|p| p + 1)
                .unwrap_or(0);
            bail!(
                "{} is not valid UTF-8: invalid byte 0x{:02x} at byte offset {} (line {}, byte {} of the line)",
                path.display(),
                bytes.get(offset).copied().unwrap_or(0),
                offset,
                line,
                offset - line_start + 1
            )
        }
    }
}

/// Natural ordering of paths: component by component, digit runs compared as numbers.
pub fn natural_path_cmp(a: &Path, b: &Path) -> Ordering {
    let ac: Vec<String> = a
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let bc: Vec<String> = b
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    for (x, y) in ac.iter().zip(bc.iter()) {
        match natural_cmp(x, y) {
            Ordering::Equal => continue,
            other => return other,
        }
    }
    ac.len().cmp(&bc.len())
}

/// Natural ordering of strings: digit runs compare by value (`ch2` < `ch10`), other text
/// case-insensitively, with the plain byte order as the final tie-break.
pub fn natural_cmp(a: &str, b: &str) -> Ordering {
    let (mut x, mut y) = (a, b);
    loop {
        match (x.is_empty(), y.is_empty()) {
            (true, true) => return a.cmp(b),
            (true, false) => return Ordering::Less,
            (false, true) => return Ordering::Greater,
            _ => {}
        }
        let xd = x.starts_with(|c: char| c.is_ascii_digit());
        let yd = y.starts_with(|c: char| c.is_ascii_digit());
        let xe = run_end(x, xd);
        let ye = run_end(y, yd);
        let (xr, yr) = (&x[..xe], &y[..ye]);
        let ord = match (xd, yd) {
            (true, true) => {
                let xt = xr.trim_start_matches('0');
                let yt = yr.trim_start_matches('0');
                xt.len().cmp(&yt.len()).then_with(|| xt.cmp(yt))
            }
            (false, false) => xr.to_lowercase().cmp(&yr.to_lowercase()),
            (true, false) => Ordering::Less,
            (false, true) => Ordering::Greater,
        };
        if ord != Ordering::Equal {
            return ord;
        }
        x = &x[xe..];
        y = &y[ye..];
    }
}

fn run_end(s: &str, digits: bool) -> usize {
    s.char_indices()
        .find(|(_, c)| c.is_ascii_digit() != digits)
        .map(|(i, _)| i)
        .unwrap_or(s.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn natural_order_puts_2_before_10() {
        let mut v = vec!["chapter10.md", "chapter2.md", "Chapter1.md", "appendix.md"];
        v.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(
            v,
            vec!["appendix.md", "Chapter1.md", "chapter2.md", "chapter10.md"]
        );
    }

    #[test]
    fn invalid_utf8_names_file_and_offset() {
        let err = decode_markdown(Path::new("book/ch1.md"), b"ok\nab\xffcd".to_vec()).unwrap_err();
        let msg = format!("{err:#}");
        assert!(msg.contains("book/ch1.md"), "{msg}");
        assert!(msg.contains("byte offset 5"), "{msg}");
        assert!(msg.contains("line 2"), "{msg}");
    }
}
