//! Resolving `--model`: a path to a `.gguf`, a manifest name (fetched on first use), or a
//! Hugging Face repo id (`owner/repo` or `owner/repo:file.gguf`) through hf-hub when a
//! network exists.

use super::config::{StoreConfig, HF_OFFLINE_ENV};
use super::fetch::{fetch_model, is_verified, model_path};
use super::manifest::Manifest;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

/// Turn what the user wrote into a local GGUF path. `None` means the default model.
/// Manifest models are looked for in (and fetched into) `store`'s models directory when
/// missing, unless `fetch` is false.
pub fn resolve_model(
    store: &StoreConfig,
    spec: Option<&str>,
    fetch: bool,
    quiet: bool,
) -> Result<PathBuf> {
    let manifest = Manifest::builtin()?;
    let spec = spec.unwrap_or(&manifest.default);
    if let Some(entry) = manifest.get(spec) {
        let path = model_path(store, entry);
        if is_verified(entry, &path)? {
            return Ok(path);
        }
        if !fetch {
            bail!(
                "model {spec} is not downloaded yet; fetch it with `quire fetch {spec}` (or `cargo run --release -- fetch {spec}`)"
            );
        }
        return fetch_model(store, entry, quiet);
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
        return resolve_hf(store, spec).with_context(|| {
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
pub fn resolve_draft(
    store: &StoreConfig,
    spec: &str,
    target: &Path,
    quiet: bool,
) -> Result<Option<PathBuf>> {
    match spec {
        "none" => Ok(None),
        "auto" => {
            let stem = target.file_stem().map(|s| s.to_string_lossy());
            Ok(AUTO_DRAFTS
                .iter()
                .find(|(t, _)| stem.as_deref() == Some(*t))
                .and_then(|(_, d)| resolve_model(store, Some(d), false, true).ok()))
        }
        given => resolve_model(store, Some(given), true, quiet).map(Some),
    }
}

/// `owner/repo[:file]` through hf-hub (only the local cache when `store.hf_offline`, as
/// `HF_HUB_OFFLINE` asks).
fn resolve_hf(store: &StoreConfig, spec: &str) -> Result<PathBuf> {
    let (repo, file) = match spec.split_once(':') {
        Some((r, f)) => (r.to_string(), Some(f.to_string())),
        None => (spec.to_string(), None),
    };
    if store.hf_offline {
        let cache = hf_hub::Cache::from_env();
        let file = file.with_context(|| {
            format!("{HF_OFFLINE_ENV} is set: name the file as owner/repo:file.gguf")
        })?;
        return cache.model(repo.clone()).get(&file).with_context(|| {
            format!("{repo}/{file} is not in the Hugging Face cache and {HF_OFFLINE_ENV} is set")
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

#[cfg(test)]
mod tests {
    use super::*;

    fn store_in(dir: &Path) -> StoreConfig {
        StoreConfig {
            models_dir: dir.to_path_buf(),
            python: "python3".to_string(),
            hf_offline: true,
        }
    }

    #[test]
    fn a_known_model_is_looked_for_in_the_configured_directory() {
        let dir = tempfile::tempdir().unwrap();
        let store = store_in(dir.path());
        let name = "smollm2-135m-instruct-q4_1";
        let err = resolve_model(&store, Some(name), false, true)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("not downloaded yet") && err.contains(name),
            "{err}"
        );
        // `auto` finds no downloaded draft there: none, and nothing is fetched.
        let target = dir.path().join("qwen2.5-coder-1.5b-instruct-q4_k_m.gguf");
        assert_eq!(resolve_draft(&store, "auto", &target, true).unwrap(), None);
        assert_eq!(resolve_draft(&store, "none", &target, true).unwrap(), None);
        // A .gguf path is taken as it is, wherever the store is.
        let file = dir.path().join("mine.gguf");
        std::fs::write(&file, b"GGUF").unwrap();
        let spec = file.to_str().unwrap();
        assert_eq!(
            resolve_model(&store, Some(spec), false, true).unwrap(),
            file
        );
    }

    #[test]
    fn offline_a_repo_id_needs_its_file_named() {
        let dir = tempfile::tempdir().unwrap();
        let err = resolve_model(&store_in(dir.path()), Some("owner/repo"), true, true).unwrap_err();
        assert!(
            format!("{err:#}").contains("HF_HUB_OFFLINE is set: name the file"),
            "{err:#}"
        );
    }
}
