//! Small shared helpers: atomic file writes and content hashing.

use anyhow::{Context, Result};
use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::path::Path;

/// Write `bytes` to `path` atomically: a temp file in the same directory, fsync, rename.
/// A crash leaves either the old file or the new one, never a partial one.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or_else(|| Path::new("."));
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create directory {}", dir.display()))?;
    // Mode 0666 less the umask, as any new file gets (a temporary file would be 0600):
    // publishers share what Quire writes.
    let mut builder = tempfile::Builder::new();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        builder.permissions(std::fs::Permissions::from_mode(0o666));
    }
    let mut tmp = builder
        .tempfile_in(dir)
        .with_context(|| format!("cannot create a temporary file in {}", dir.display()))?;
    tmp.write_all(bytes)
        .with_context(|| format!("cannot write {}", path.display()))?;
    tmp.as_file().sync_all().ok();
    tmp.persist(path)
        .with_context(|| format!("cannot move the temporary file onto {}", path.display()))?;
    Ok(())
}

/// Hex sha256 of a byte slice.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Hex sha256 of a file's content, read in 1 MiB blocks; `on_block` sees each block's size.
pub fn sha256_file_with(path: &Path, on_block: &mut dyn FnMut(usize)) -> Result<String> {
    let mut f =
        std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
        on_block(n);
    }
    Ok(hex::encode(h.finalize()))
}

/// sha256 of a file's content, remembered per (path, size, mtime) under the user cache dir
/// so that a gigabyte model file is hashed once, not on every run.
pub fn content_hash(path: &Path) -> Result<String> {
    let meta = std::fs::metadata(path)?;
    let canon = std::fs::canonicalize(path)?;
    let stamp = format!(
        "{} {} {:?}",
        canon.display(),
        meta.len(),
        meta.modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
    );
    let memo = crate::paths::cache_dir()
        .join("file-hashes")
        .join(sha256_hex(stamp.as_bytes()));
    if let Ok(h) = std::fs::read_to_string(&memo) {
        if h.len() == 64 {
            return Ok(h);
        }
    }
    let h = sha256_file_with(path, &mut |_| {})?;
    write_atomic(&memo, h.as_bytes())?;
    Ok(h)
}

/// A text's line-ending style.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineEnding {
    /// Every line break is `\r\n`.
    Crlf,
    /// Every line break is `\n` alone.
    Lf,
}

/// How many line breaks of each style a text has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LineBreaks {
    /// `\r\n` breaks.
    pub crlf: usize,
    /// `\n` breaks without a `\r` before them.
    pub lf: usize,
}

impl LineEnding {
    /// The style of a text whose line breaks are all of one style; `None` for a text
    /// without line breaks or with both.
    pub fn of(text: &str) -> Option<LineEnding> {
        let b = Self::mixed(text)?;
        match (b.crlf, b.lf) {
            (0, _) => Some(LineEnding::Lf),
            (_, 0) => Some(LineEnding::Crlf),
            _ => None,
        }
    }

    /// The count of each style; `None` for a text without line breaks.
    pub fn mixed(text: &str) -> Option<LineBreaks> {
        let all = text.matches('\n').count();
        let crlf = text.matches("\r\n").count();
        (all > 0).then_some(LineBreaks {
            crlf,
            lf: all - crlf,
        })
    }

    /// `text` with every line break in this style.
    pub fn apply(self, text: &str) -> String {
        let lf = text.replace("\r\n", "\n");
        match self {
            LineEnding::Lf => lf,
            LineEnding::Crlf => lf.replace('\n', "\r\n"),
        }
    }
}

impl std::fmt::Display for LineEnding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LineEnding::Crlf => "CRLF",
            LineEnding::Lf => "LF",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn styles_are_told_apart_and_applied() {
        assert_eq!(LineEnding::of("a\r\nb\r\n"), Some(LineEnding::Crlf));
        assert_eq!(LineEnding::of("a\nb\n"), Some(LineEnding::Lf));
        assert_eq!(LineEnding::of("a\r\nb\n"), None);
        assert_eq!(LineEnding::of("no break"), None);
        assert_eq!(
            LineEnding::mixed("a\r\nb\nc\n"),
            Some(LineBreaks { crlf: 1, lf: 2 })
        );
        assert_eq!(LineEnding::Crlf.apply("a\r\nb\nc"), "a\r\nb\r\nc");
        assert_eq!(LineEnding::Lf.apply("a\r\nb\nc"), "a\nb\nc");
    }

    #[cfg(unix)]
    #[test]
    fn atomic_writes_follow_the_umask_not_0600() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("book.md");
        write_atomic(&p, b"text").unwrap();
        let probe = dir.path().join("probe");
        std::fs::write(&probe, b"").unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&p), mode(&probe));
    }
}
