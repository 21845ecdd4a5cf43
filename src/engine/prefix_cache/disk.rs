//! Prefix KV entries on disk: one safetensors file per prefix, read back through memmap2.
//!
//! A file is named by the sha256 of the engine fingerprint (model file content hash,
//! tokenizer, chat template, dtype, device kind) and the prefix's token ids, and carries
//! that fingerprint, the token ids and a CRC32 of all tensor bytes. A file that is
//! truncated, corrupt or from another model is detected, reported as a warning, deleted
//! and recomputed — never used. Writes are atomic; the directory is kept under a byte
//! budget by deleting the least recently used files.

use crate::engine::arch::ModelConfig;
use crate::engine::kv_cache::KvCache;
use anyhow::{bail, Context, Result};
use candle_core::{DType, Device, Tensor};
use safetensors::tensor::{Dtype, TensorView};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// A directory of prefix KV files.
#[derive(Debug, Clone)]
pub struct DiskPrefixCache {
    /// Where the files are.
    pub dir: PathBuf,
    /// Upper bound on the total size of the files.
    pub budget_bytes: u64,
}

/// Default directory: `<user cache dir>/quire/prefix-cache` (the CLI lets
/// `$QUIRE_PREFIX_CACHE_DIR` override it).
pub fn default_dir() -> PathBuf {
    crate::paths::cache_dir().join("prefix-cache")
}

/// File key for a prefix.
pub fn key(salt: &str, tokens: &[u32]) -> String {
    let mut h = Sha256::new();
    h.update(salt.as_bytes());
    h.update((tokens.len() as u64).to_le_bytes());
    for t in tokens {
        h.update(t.to_le_bytes());
    }
    hex::encode(h.finalize())
}

fn tokens_bytes(tokens: &[u32]) -> Vec<u8> {
    tokens.iter().flat_map(|t| t.to_le_bytes()).collect()
}

/// A tensor's little-endian bytes and safetensors type (f32, or bf16 for a bf16 cache).
fn tensor_bytes(t: &Tensor) -> Result<(Vec<u8>, Dtype)> {
    Ok(match t.dtype() {
        DType::BF16 => {
            let v: Vec<half::bf16> = t.flatten_all()?.to_vec1()?;
            (
                v.iter().flat_map(|x| x.to_le_bytes()).collect(),
                Dtype::BF16,
            )
        }
        _ => {
            let v: Vec<f32> = t.flatten_all()?.to_dtype(DType::F32)?.to_vec1()?;
            (v.iter().flat_map(|x| x.to_le_bytes()).collect(), Dtype::F32)
        }
    })
}

/// Checksum over tensors in name order.
fn checksum<'a>(mut parts: Vec<(&'a str, &'a [u8])>) -> String {
    parts.sort_by(|a, b| a.0.cmp(b.0));
    let mut h = crc32fast::Hasher::new();
    for (name, data) in parts {
        h.update(name.as_bytes());
        h.update(data);
    }
    format!("{:08x}", h.finalize())
}

impl DiskPrefixCache {
    /// A cache in `dir` bounded by `budget_bytes`.
    pub fn new(dir: impl Into<PathBuf>, budget_bytes: u64) -> Self {
        Self {
            dir: dir.into(),
            budget_bytes,
        }
    }

    /// Path of the file for a prefix.
    pub fn path_for(&self, salt: &str, tokens: &[u32]) -> PathBuf {
        self.dir.join(format!("{}.safetensors", key(salt, tokens)))
    }

    /// Save all positions of `cache`. Returns the file path.
    pub fn save(&self, salt: &str, cache: &KvCache) -> Result<PathBuf> {
        let path = self.path_for(salt, cache.tokens());
        if path.is_file() {
            return Ok(path);
        }
        let mut owned: Vec<(String, Vec<usize>, Vec<u8>, Dtype)> = Vec::new();
        for layer in 0..cache.n_layer() {
            let (k, v) = cache.layer_data(layer)?;
            for (name, t) in [("k", &k), ("v", &v)] {
                let (bytes, dtype) = tensor_bytes(t)?;
                owned.push((format!("{name}.{layer}"), t.dims().to_vec(), bytes, dtype));
            }
        }
        owned.push((
            "tokens".into(),
            vec![cache.len()],
            tokens_bytes(cache.tokens()),
            Dtype::U32,
        ));
        let crc = checksum(
            owned
                .iter()
                .map(|(n, _, d, _)| (n.as_str(), d.as_slice()))
                .collect(),
        );
        let mut meta = HashMap::new();
        meta.insert("quire_fingerprint".to_string(), salt.to_string());
        meta.insert("crc32".to_string(), crc);
        meta.insert("format".to_string(), "quire-prefix-kv-v1".to_string());
        let views = owned
            .iter()
            .map(|(n, shape, data, dt)| Ok((n.clone(), TensorView::new(*dt, shape.clone(), data)?)))
            .collect::<Result<Vec<_>>>()?;
        let bytes = safetensors::tensor::serialize(views, Some(meta))?;
        crate::util::write_atomic(&path, &bytes)
            .with_context(|| format!("cannot write prefix cache file {}", path.display()))?;
        self.evict()?;
        Ok(path)
    }

    /// Load the entry for exactly `tokens`, if a valid one exists. Invalid files are
    /// reported, deleted, and treated as absent.
    pub fn load(
        &self,
        salt: &str,
        tokens: &[u32],
        cfg: &ModelConfig,
        device: &Device,
        extra: usize,
    ) -> Result<Option<KvCache>> {
        let path = self.path_for(salt, tokens);
        if !path.is_file() {
            return Ok(None);
        }
        match read_file(&path, salt, tokens, cfg, device, extra) {
            Ok(c) => {
                // Touch for LRU eviction.
                let _ = std::fs::File::options()
                    .append(true)
                    .open(&path)
                    .and_then(|f| f.set_modified(std::time::SystemTime::now()));
                Ok(Some(c))
            }
            Err(e) => {
                eprintln!(
                    "warning: ignoring prefix cache file {}: {e:#}; it will be recomputed",
                    path.display()
                );
                let _ = std::fs::remove_file(&path);
                Ok(None)
            }
        }
    }

    /// Delete least recently used files until the directory fits the budget.
    pub fn evict(&self) -> Result<()> {
        let mut files: Vec<(std::time::SystemTime, u64, PathBuf)> =
            match std::fs::read_dir(&self.dir) {
                Ok(rd) => rd
                    .filter_map(|e| e.ok())
                    .filter(|e| e.path().extension().is_some_and(|x| x == "safetensors"))
                    .filter_map(|e| {
                        let m = e.metadata().ok()?;
                        Some((m.modified().ok()?, m.len(), e.path()))
                    })
                    .collect(),
                Err(_) => return Ok(()),
            };
        let mut total: u64 = files.iter().map(|f| f.1).sum();
        files.sort();
        for (_, size, path) in files {
            if total <= self.budget_bytes {
                break;
            }
            if std::fs::remove_file(&path).is_ok() {
                total -= size;
            }
        }
        Ok(())
    }
}

fn read_file(
    path: &Path,
    salt: &str,
    tokens: &[u32],
    cfg: &ModelConfig,
    device: &Device,
    extra: usize,
) -> Result<KvCache> {
    let file = std::fs::File::open(path)?;
    // SAFETY: the file is opened read-only and only read through this map; a concurrent
    // writer replaces files by rename, never in place.
    let mmap = unsafe { memmap2::Mmap::map(&file)? };
    let st = safetensors::SafeTensors::deserialize(&mmap)
        .context("not a valid safetensors file (truncated?)")?;
    let (_, meta) = safetensors::SafeTensors::read_metadata(&mmap)?;
    let meta = meta.metadata().clone().unwrap_or_default();
    if meta.get("quire_fingerprint").map(String::as_str) != Some(salt) {
        bail!("written for another model, tokenizer, template or device");
    }
    let names = st.names();
    let parts: Vec<(&str, &[u8])> = names
        .iter()
        .map(|n| Ok((*n, st.tensor(n)?.data())))
        .collect::<Result<Vec<_>>>()?;
    let crc = checksum(parts);
    if meta.get("crc32") != Some(&crc) {
        bail!("checksum mismatch (file corrupt)");
    }
    if st.tensor("tokens")?.data() != tokens_bytes(tokens).as_slice() {
        bail!("token ids differ from the requested prefix");
    }
    let mut layers = Vec::with_capacity(cfg.n_layer);
    for layer in 0..cfg.n_layer {
        let load = |name: String| -> Result<Tensor> {
            let view = st
                .tensor(&name)
                .with_context(|| format!("tensor {name} missing"))?;
            let dtype = match view.dtype() {
                Dtype::F32 => DType::F32,
                Dtype::BF16 => DType::BF16,
                other => bail!("tensor {name} has type {other:?}, not f32 or bf16"),
            };
            Ok(Tensor::from_raw_buffer(
                view.data(),
                dtype,
                view.shape(),
                device,
            )?)
        };
        layers.push((load(format!("k.{layer}"))?, load(format!("v.{layer}"))?));
    }
    KvCache::from_layers(cfg, device, layers, tokens.to_vec(), extra)
}
