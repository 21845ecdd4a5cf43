//! Where Quire keeps its files on this machine.

use std::path::PathBuf;

/// Quire's cache directory: `<user cache dir>/quire` (`~/.cache/quire` on Linux), or
/// `<temp dir>/quire` where the user has none. The models, the prefix KV caches, remembered
/// file hashes and the benchmarks' venvs and results live under it, each in its own folder.
pub fn cache_dir() -> PathBuf {
    dirs::cache_dir()
        .unwrap_or_else(std::env::temp_dir)
        .join("quire")
}
