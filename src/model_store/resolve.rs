//! Resolving `--model`: a path to a `.gguf`, a manifest name (fetched on first use), or a
//! Hugging Face repo id (`owner/repo` or `owner/repo:file.gguf`) through hf-hub when a
//! network exists.

use super::fetch::{fetch_model, is_verified, model_path};
use super::manifest::Manifest;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

/// Turn what the user wrote into a local GGUF path. `None` means the default model.
/// Manifest models are fetched when missing unless `fetch` is false.
pub fn resolve_model(spec: Option<&str>, fetch: bool, quiet: bool) -> Result<PathBuf> {
    let manifest = Manifest::builtin()?;
    let spec = spec.unwrap_or(&manifest.default);
    if let Some(entry) = manifest.get(spec) {
        let path = model_path(entry);
        if is_verified(entry, &path)? {
            return Ok(path);
        }
        if !fetch {
            bail!(
                "model {spec} is not downloaded yet; fetch it with `quire fetch {spec}` (or `cargo run --release -- fetch {spec}`)"
            );
        }
        return fetch_model(entry, quiet);
    }
    let as_path = Path::new(spec);
    if spec.ends_with(".gguf") || as_path.exists() {
        if !as_path.is_file() {
            bail!(
                "model file {spec} does not exist; pass a .gguf path, one of the known models ({}), or fetch one with `quire fetch {}`",
                manifest.names(),
                manifest.default
            );
        }
        return Ok(as_path.to_path_buf());
    }
    if spec.contains('/') {
        return resolve_hf(spec).with_context(|| {
            format!(
                "cannot resolve {spec} through Hugging Face; offline, use a local .gguf path or a known model: `quire fetch {}`",
                manifest.default
            )
        });
    }
    bail!(
        "unknown model {spec:?}: pass a .gguf path, a Hugging Face repo id, or one of {}; fetch the default with `quire fetch {}`",
        manifest.names(),
        manifest.default
    )
}

/// The draft that `--draft auto` picks for a target model, by manifest name: the 0.5B of
/// the same family (same tokenizer) for the default 1.5B.
pub const AUTO_DRAFTS: &[(&str, &str)] = &[(
    "qwen2.5-coder-1.5b-instruct-q4_k_m",
    "qwen2.5-coder-0.5b-instruct-q4_k_m",
)];

/// The draft model file `--draft` names for the target at `target`: `None` for `none`, and
/// for `auto` when the target has no known draft or it is not downloaded; any other value is
/// resolved like `--model` (fetched on first use).
pub fn resolve_draft(spec: &str, target: &Path, quiet: bool) -> Result<Option<PathBuf>> {
    match spec {
        "none" => Ok(None),
        "auto" => {
            let stem = target.file_stem().map(|s| s.to_string_lossy());
            Ok(AUTO_DRAFTS
                .iter()
                .find(|(t, _)| stem.as_deref() == Some(*t))
                .and_then(|(_, d)| resolve_model(Some(d), false, true).ok()))
        }
        given => resolve_model(Some(given), true, quiet).map(Some),
    }
}

/// `owner/repo[:file]` through hf-hub (respects `HF_HUB_OFFLINE`: only the local cache).
fn resolve_hf(spec: &str) -> Result<PathBuf> {
    let (repo, file) = match spec.split_once(':') {
        Some((r, f)) => (r.to_string(), Some(f.to_string())),
        None => (spec.to_string(), None),
    };
    let offline = std::env::var("HF_HUB_OFFLINE").is_ok_and(|v| !v.is_empty() && v != "0");
    if offline {
        let cache = hf_hub::Cache::from_env();
        let file = file.context("HF_HUB_OFFLINE is set: name the file as owner/repo:file.gguf")?;
        return cache.model(repo.clone()).get(&file).with_context(|| {
            format!("{repo}/{file} is not in the Hugging Face cache and HF_HUB_OFFLINE is set")
        });
    }
    let api = hf_hub::api::sync::Api::new()?;
    let r = api.model(repo.clone());
    let file = match file {
        Some(f) => f,
        None => {
            let info = r
                .info()
                .with_context(|| format!("cannot list files of {repo}"))?;
            let ggufs: Vec<String> = info
                .siblings
                .into_iter()
                .map(|s| s.rfilename)
                .filter(|f| f.ends_with(".gguf"))
                .collect();
            ggufs
                .iter()
                .find(|f| f.to_lowercase().contains("q4_k_m"))
                .or(ggufs.first())
                .cloned()
                .with_context(|| format!("{repo} has no .gguf file"))?
        }
    };
    Ok(r.get(&file)?)
}
