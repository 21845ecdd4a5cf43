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
    let mut tmp = tempfile::NamedTempFile::new_in(dir)
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
    let memo = dirs::cache_dir()
        .unwrap_or_else(std::env::temp_dir)
        .join("quire")
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
