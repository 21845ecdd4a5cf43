//! Command-line interface: one file per subcommand, each with its clap arguments and `run`
//! returning the process exit code.

pub mod bench;
pub mod check;
pub mod fetch;
pub mod generate;
pub mod inspect;
pub mod serve;
pub mod translate;

use crate::engine::{device::parse_device, Engine, LoadOptions};
use crate::model_store::config::{StoreConfig, HF_OFFLINE_ENV, MODELS_DIR_ENV, PYTHON_ENV};
use anyhow::Result;
use std::path::PathBuf;

/// The engine's settings from the environment (`QUIRE_CPU_KERNEL`, `QUIRE_KV_DTYPE`), read
/// here at the edge and installed once before any model loads.
pub fn install_engine_config() -> Result<()> {
    let kernel = std::env::var("QUIRE_CPU_KERNEL").ok();
    let kv = std::env::var("QUIRE_KV_DTYPE").ok();
    let cfg = crate::engine::config::EngineConfig::default()
        .with_overrides(kernel.as_deref(), kv.as_deref())?;
    crate::engine::config::install(&cfg)
}

/// The model store's settings from the environment, read here at the edge:
/// `$QUIRE_MODELS_DIR` (when not empty) for the models directory, `$QUIRE_PYTHON` for the
/// Python that runs pip, `$HF_HUB_OFFLINE` (set, not empty, not `0`) for Hugging Face's
/// local cache only; [`StoreConfig::default`] for what is not set.
pub fn store_config() -> StoreConfig {
    let mut store = StoreConfig::default();
    if let Some(dir) = std::env::var_os(MODELS_DIR_ENV).filter(|d| !d.is_empty()) {
        store.models_dir = PathBuf::from(dir);
    }
    if let Ok(python) = std::env::var(PYTHON_ENV) {
        store.python = python;
    }
    store.hf_offline = std::env::var(HF_OFFLINE_ENV).is_ok_and(|v| !v.is_empty() && v != "0");
    store
}

/// The on-disk prefix cache directory: `--prefix-cache-dir`, else `$QUIRE_PREFIX_CACHE_DIR`,
/// else the user cache dir; `None` with `--no-disk-cache`.
pub fn prefix_cache_dir(given: Option<PathBuf>, no_disk_cache: bool) -> Option<PathBuf> {
    if no_disk_cache {
        return None;
    }
    Some(
        given
            .or_else(|| {
                std::env::var_os("QUIRE_PREFIX_CACHE_DIR")
                    .filter(|d| !d.is_empty())
                    .map(PathBuf::from)
            })
            .unwrap_or_else(crate::engine::prefix_cache::disk::default_dir),
    )
}

/// Arguments that choose and load a model.
#[derive(clap::Args, Debug, Clone)]
pub struct ModelArgs {
    /// A .gguf path, a known model name (fetched on first use), or a Hugging Face repo id
    /// (owner/repo[:file.gguf]). Default: qwen2.5-coder-1.5b-instruct-q4_k_m.
    #[arg(long, short = 'm')]
    pub model: Option<String>,
    /// auto, cpu, cuda, cuda:N or metal.
    #[arg(long, default_value = "auto")]
    pub device: String,
    /// Chat template: a name from chat-templates/ (chatml, qwen2, smollm2) or a file;
    /// default: the template stored in the GGUF.
    #[arg(long)]
    pub chat_template: Option<String>,
}

/// The model that drafts for speculative decoding (`--draft`).
#[derive(clap::Args, Debug, Clone)]
pub struct DraftArgs {
    /// A small model with the same tokenizer that guesses tokens for the model to verify
    /// (speculative decoding; the output is unchanged): a .gguf path or known model name,
    /// `auto` (qwen2.5-coder-0.5b-instruct-q4_k_m for the 1.5B when it is downloaded) or
    /// `none`.
    #[arg(long, default_value = "none")]
    pub draft: String,
}

impl DraftArgs {
    /// Load the draft for `target` (none for `none`, or for `auto` without a known,
    /// downloaded draft); a draft whose tokenizer differs from the target's is an error.
    pub fn load(&self, target: &Engine) -> Result<Option<crate::engine::speculative::Draft>> {
        crate::model_store::resolve_draft(&store_config(), &self.draft, &target.path, false)?
            .map(|path| crate::engine::speculative::Draft::load(&path, target))
            .transpose()
    }
}

impl ModelArgs {
    /// Resolve the model path (fetching a known model if needed).
    pub fn resolve(&self, quiet: bool) -> Result<PathBuf> {
        crate::model_store::resolve_model(&store_config(), self.model.as_deref(), true, quiet)
    }

    /// Resolve and load.
    pub fn load(&self, quiet: bool) -> Result<Engine> {
        let path = self.resolve(quiet)?;
        let device = parse_device(&self.device)?;
        Engine::load(
            &path,
            &device,
            &LoadOptions {
                chat_template: self.chat_template.clone(),
                ..Default::default()
            },
        )
    }
}
