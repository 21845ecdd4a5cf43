//! EPUB 2 and 3 books: read from the zip container, their spine's XHTML documents turned
//! into Markdown chapters for the pipeline (one line per block of text), and written back
//! with every block's translation in place and everything else — CSS, fonts, images,
//! ids, classes, links, the spine and manifest — as it was.
//!
//! `xhtml` reads a document into a tree and finds its blocks, `bridge` turns a block into
//! Markdown and back, `package` reads the container and the OPF, `write` builds the
//! translated EPUB (and the bilingual edition), `check` compares two EPUBs.

mod bridge;
mod package;
mod write;
mod xhtml;

pub use bridge::Bridged;
pub use package::{Manifest, ManifestItem};
pub use write::{write_epub, EpubOptions, WriteReport, BILINGUAL_CLASS};
pub use xhtml::Block;

use super::Chapter;
use anyhow::{bail, Context, Result};
use std::io::Read;
use std::path::{Path, PathBuf};

/// The most bytes an EPUB may hold once unpacked (a zip bomb is refused before it fills
/// memory).
pub const MAX_UNPACKED: u64 = 1 << 30;
/// The most one entry may expand to, relative to its compressed size, when it is large.
const MAX_RATIO: u64 = 100;

/// A spine document with text to translate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Doc {
    /// Its path inside the zip (`EPUB/text/ch001.xhtml`).
    pub path: String,
    /// Its text as stored.
    pub text: String,
    /// Its blocks, in document order.
    pub blocks: Vec<Block>,
    /// Each block as Markdown.
    pub bridged: Vec<Bridged>,
}

impl Doc {
    /// The content ranges of the document's `pre` elements (code), in order.
    pub fn code_ranges(&self) -> Vec<std::ops::Range<usize>> {
        let Ok(nodes) = xhtml::parse(&self.text) else {
            return Vec::new();
        };
        let mut pres = Vec::new();
        package::all(&nodes, "pre", &mut pres);
        pres.iter().map(|n| n.inner()).collect()
    }
}

/// An EPUB read into memory.
#[derive(Clone, PartialEq, Eq)]
pub struct Epub {
    /// The file it was read from.
    pub path: PathBuf,
    /// The zip file's bytes.
    pub zip: Vec<u8>,
    /// The package (OPF) and its manifest.
    pub manifest: Manifest,
    /// The spine documents that have text, in reading order.
    pub docs: Vec<Doc>,
}

impl std::fmt::Debug for Epub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Epub")
            .field("path", &self.path)
            .field("bytes", &self.zip.len())
            .field("opf", &self.manifest.opf_path)
            .field("docs", &self.docs.len())
            .finish()
    }
}

/// Whether `path` names an EPUB file.
pub fn is_epub_path(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case("epub"))
}

impl Epub {
    /// Read an EPUB: refused with an error naming the file inside it for DRM, a missing
    /// container or package, a malformed OPF or XHTML document, an unsafe path, or more
    /// than [`MAX_UNPACKED`] bytes unpacked.
    pub fn read(path: &Path) -> Result<Epub> {
        let zip = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
        Epub::from_bytes(path, zip)
            .with_context(|| format!("cannot read the EPUB {}", path.display()))
    }

    /// [`Epub::read`] from the file's bytes.
    pub fn from_bytes(path: &Path, zip: Vec<u8>) -> Result<Epub> {
        let files = Files::open(&zip)?;
        let manifest = package::read(&files)?;
        let mut docs = Vec::new();
        for href in manifest.spine_documents() {
            let text = files.text(&href)?;
            let nodes = xhtml::parse_named(&href, &text)?;
            let blocks = xhtml::blocks(&text, &nodes);
            if blocks.is_empty() {
                continue;
            }
            let bridged = blocks
                .iter()
                .map(|b| {
                    let mut inside = Vec::new();
                    xhtml::nodes_in(&nodes, &b.inner, &mut inside);
                    let inside: Vec<&xhtml::Node> = inside.iter().collect();
                    bridge::forward(&text, &inside, b.heading, b.footnote)
                })
                .collect();
            docs.push(Doc {
                path: href,
                text,
                blocks,
                bridged,
            });
        }
        Ok(Epub {
            path: path.to_path_buf(),
            zip,
            manifest,
            docs,
        })
    }

    /// The chapters the pipeline translates: one per document with text, named after the
    /// document (`EPUB/text/ch001.xhtml.md`), one Markdown block per block of text.
    pub fn chapters(&self) -> Vec<Chapter> {
        self.docs
            .iter()
            .map(|d| Chapter {
                rel_path: PathBuf::from(format!("{}.md", d.path)),
                text: d
                    .bridged
                    .iter()
                    .map(|b| b.markdown.as_str())
                    .collect::<Vec<_>>()
                    .join("\n\n")
                    + "\n",
            })
            .collect()
    }

    /// The same book with the comments of its code blocks left as written
    /// (`--keep-code-comments`).
    pub fn without_code_comments(&self) -> Epub {
        let mut e = self.clone();
        for d in &mut e.docs {
            let keep: Vec<bool> = d.blocks.iter().map(|b| !b.is_comment()).collect();
            let mut k = keep.iter();
            d.blocks.retain(|_| *k.next().unwrap_or(&true));
            let mut k = keep.iter();
            d.bridged.retain(|_| *k.next().unwrap_or(&true));
        }
        e.docs.retain(|d| !d.blocks.is_empty());
        e
    }

    /// The file name the translation is written under (the input's).
    pub fn file_name(&self) -> String {
        self.path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "book.epub".into())
    }
}

/// The entries of a zip, checked for unsafe names and sizes, read on demand.
pub struct Files<'a> {
    archive: zip::ZipArchive<std::io::Cursor<&'a [u8]>>,
    names: Vec<String>,
}

impl<'a> Files<'a> {
    /// Open a zip, refusing unsafe entry names and sizes over the limits.
    pub fn open(bytes: &'a [u8]) -> Result<Files<'a>> {
        let mut archive = zip::ZipArchive::new(std::io::Cursor::new(bytes))
            .context("not a zip archive (an EPUB is a zip file): is the file complete?")?;
        let mut names = Vec::new();
        let mut total = 0u64;
        for i in 0..archive.len() {
            let f = archive.by_index_raw(i)?;
            let name = f.name()?.into_owned();
            if f.enclosed_name().is_none() || name.starts_with('/') || name.contains('\\') {
                bail!("{name}: an absolute path or a path out of the book in the zip; refusing to read it");
            }
            total += f.size();
            if total > MAX_UNPACKED
                || (f.size() > (16 << 20)
                    && f.size() > f.compressed_size().saturating_mul(MAX_RATIO))
            {
                bail!(
                    "{name}: unpacks to {} bytes ({} compressed): a zip bomb, or a book over the {} MiB limit",
                    f.size(),
                    f.compressed_size(),
                    MAX_UNPACKED >> 20
                );
            }
            names.push(name);
        }
        Ok(Files { archive, names })
    }

    /// The entries' names, in the zip's order.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Whether the zip has an entry named `name`.
    pub fn has(&self, name: &str) -> bool {
        self.names.iter().any(|n| n == name)
    }

    /// An entry's bytes (never more than its declared size).
    pub fn bytes(&self, name: &str) -> Result<Vec<u8>> {
        let mut archive = self.archive.clone();
        let f = archive
            .by_name(name)
            .with_context(|| format!("{name}: missing from the EPUB"))?;
        let size = f.size();
        let mut out = Vec::with_capacity(size.min(MAX_UNPACKED) as usize);
        f.take(size.min(MAX_UNPACKED) + 1)
            .read_to_end(&mut out)
            .with_context(|| format!("{name}: cannot unpack"))?;
        if out.len() as u64 > size {
            bail!("{name}: unpacks to more than its declared size (a zip bomb?)");
        }
        Ok(out)
    }

    /// An entry as UTF-8 text.
    pub fn text(&self, name: &str) -> Result<String> {
        let bytes = self.bytes(name)?;
        let bytes = bytes
            .strip_prefix(b"\xEF\xBB\xBF")
            .map(<[u8]>::to_vec)
            .unwrap_or(bytes);
        String::from_utf8(bytes).map_err(|e| {
            anyhow::anyhow!(
                "{name}: not UTF-8 (first invalid byte at offset {}); save it as UTF-8",
                e.utf8_error().valid_up_to()
            )
        })
    }
}
