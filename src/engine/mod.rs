//! The inference engine: a GGUF model ([`arch`]), its [`tokenizer`], its chat template,
//! an explicit [`kv_cache::KvCache`], [`sampling`], and the generation loop in
//! [`generate`].

pub mod arch;
pub mod backend;
pub mod chat_template;
pub mod config;
pub mod constraint;
pub mod device;
pub mod generate;
pub mod gguf;
pub mod kernels;
pub mod kv_blocks;
pub mod kv_cache;
pub mod prefix_cache;
pub mod sampling;
pub mod speculative;
pub mod stable_prefix;
pub mod threads;
pub mod tokenizer;

use crate::engine::chat_template::ChatTemplate;
use anyhow::{Context, Result};
use arch::{Model, ModelConfig};
use candle_core::{Device, Tensor};
use gguf::GgufFile;
use kv_cache::KvCache;
use std::path::{Path, PathBuf};
use std::time::Instant;
use tokenizer::Tokenizer;

/// Tokens per forward call during prefill (bounds activation memory).
pub const PREFILL_BATCH: usize = 512;

/// A loaded model with everything needed to turn a conversation into text.
pub struct Engine {
    /// The network.
    pub model: Model,
    /// Its tokenizer.
    pub tokenizer: Tokenizer,
    /// Its chat template.
    pub template: ChatTemplate,
    /// Where it runs.
    pub device: Device,
    /// The GGUF file it came from.
    pub path: PathBuf,
    /// Seconds spent loading.
    pub load_seconds: f64,
    /// Parameter count.
    pub parameters: usize,
    /// Tensor types in the file with their counts.
    pub tensor_types: Vec<(String, usize)>,
    /// Which matmul kernels run: `native-vnni`, `native-avx2`, `native-portable` (Quire's
    /// own, [`kernels`]) or `candle` (GPUs, or `LoadOptions::candle_kernels`).
    pub kernels: String,
}

/// Options for [`Engine::load`].
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    /// A chat template name from `chat-templates/` or a file path, instead of the GGUF's.
    pub chat_template: Option<String>,
    /// Multiply with Candle's quantized matmul on the CPU instead of Quire's kernels: the
    /// engine as it was before its own kernels, kept for comparisons (also chosen by
    /// [`config::Kernels::Candle`]).
    pub candle_kernels: bool,
}

impl Engine {
    /// Load the GGUF model at `path` onto `device`.
    pub fn load(path: &Path, device: &Device, opts: &LoadOptions) -> Result<Self> {
        let start = Instant::now();
        let mut gguf = GgufFile::open(path)?;
        let arch = gguf.architecture()?.to_string();
        if !Model::SUPPORTED.contains(&arch.as_str()) {
            anyhow::bail!(
                "{}: architecture {arch:?} is not supported (supported: {})",
                path.display(),
                Model::SUPPORTED.join(", ")
            );
        }
        let tokenizer = Tokenizer::for_model(&gguf)?;
        let template = match &opts.chat_template {
            Some(name) => ChatTemplate::named(name)?,
            None => ChatTemplate::from_gguf(&gguf)?,
        };
        let candle = opts.candle_kernels || config::active().kernels == config::Kernels::Candle;
        gguf.native_kernels = device.is_cpu() && !candle;
        let kernels = if gguf.native_kernels {
            format!("native-{:?}", kernels::Isa::detect()).to_lowercase()
        } else {
            "candle".to_string()
        };
        let model = Model::load(&mut gguf, device)?;
        Ok(Self {
            kernels,
            parameters: gguf.parameter_count(),
            tensor_types: gguf.tensor_type_counts(),
            model,
            tokenizer,
            template,
            device: device.clone(),
            path: path.to_path_buf(),
            load_seconds: start.elapsed().as_secs_f64(),
        })
    }

    /// Model hyper-parameters.
    pub fn config(&self) -> &ModelConfig {
        self.model.config()
    }

    /// A fresh, empty KV cache.
    pub fn new_cache(&self) -> Result<KvCache> {
        KvCache::new(self.config(), &self.device)
    }

    /// Run `tokens` after what `cache` holds, in batches of [`PREFILL_BATCH`], and return the
    /// last position's logits.
    pub fn prefill(&self, cache: &mut KvCache, tokens: &[u32]) -> Result<Tensor> {
        anyhow::ensure!(!tokens.is_empty(), "nothing to prefill");
        let ctx = self.config().context_length;
        if cache.len() + tokens.len() > ctx {
            anyhow::bail!(
                "prompt too long: {} tokens (plus {} cached) exceed the model's context length of {ctx} tokens; use smaller units (--unit-tokens) or a model with a longer context",
                tokens.len(),
                cache.len()
            );
        }
        let mut logits = None;
        for chunk in tokens.chunks(PREFILL_BATCH) {
            logits = Some(self.model.forward(chunk, cache)?);
        }
        logits.context("no logits")
    }

    /// Encode text with the model's tokenizer.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        self.tokenizer.encode(text)
    }
}

/// Content hash of the running executable (cached by path, size and mtime like model files),
/// or the crate version where it cannot be read.
fn build_hash() -> &'static str {
    static HASH: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    HASH.get_or_init(|| {
        std::env::current_exe()
            .ok()
            .and_then(|exe| crate::util::content_hash(&exe).ok())
            .unwrap_or_else(|| format!("quire {}", env!("CARGO_PKG_VERSION")))
    })
}

impl Engine {
    /// Fingerprint of everything that determines KV values: the model file's content hash,
    /// the tokenizer, the chat template, the dtype, the kernels, the device kind and the
    /// Quire build (its executable's content hash: a build with other kernels computes other
    /// bits, so a prefix saved by one build is never served to another). Prefix caches are
    /// keyed by it.
    pub fn fingerprint(&self) -> Result<String> {
        let model_hash = crate::util::content_hash(&self.path)?;
        let tok = self
            .tokenizer
            .inner
            .to_string(false)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let mut h = sha2::Sha256::new();
        use sha2::Digest;
        h.update(model_hash.as_bytes());
        h.update(crate::util::sha256_hex(tok.as_bytes()).as_bytes());
        h.update(crate::util::sha256_hex(self.template.source.as_bytes()).as_bytes());
        h.update(
            kv_cache::KvLayout::for_device(self.config(), &self.device)
                .dtype_name()
                .as_bytes(),
        );
        h.update(self.kernels.as_bytes());
        h.update(device::device_kind(&self.device).as_bytes());
        h.update(build_hash().as_bytes());
        Ok(hex::encode(h.finalize()))
    }
}
