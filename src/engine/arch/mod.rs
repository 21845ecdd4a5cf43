//! Model architectures: one file per architecture, each a plain forward pass over the shared
//! building blocks in [`layers`]. To add an architecture, add a file here that loads its
//! weights from GGUF names into [`layers::Block`]s and writes its forward pass, then add a
//! variant to [`Model`] and a match arm in [`Model::load`].

pub mod attention;
pub mod layers;
pub mod llama;
pub mod qwen2;
#[cfg(target_arch = "x86_64")]
pub mod vexp;

use crate::engine::gguf::GgufFile;
use crate::engine::kv_cache::KvCache;
use anyhow::{bail, Result};
use candle_core::{Device, Tensor};

/// Hyper-parameters read from GGUF metadata (`{arch}.*` keys).
#[derive(Debug, Clone, serde::Serialize)]
pub struct ModelConfig {
    /// `general.architecture`.
    pub architecture: String,
    /// Number of transformer blocks.
    pub n_layer: usize,
    /// Residual stream width.
    pub hidden: usize,
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads (grouped-query attention when fewer than `n_head`).
    pub n_kv_head: usize,
    /// Width of one head.
    pub head_dim: usize,
    /// Feed-forward inner width.
    pub ffn: usize,
    /// RoPE base frequency.
    pub rope_theta: f32,
    /// RMSNorm epsilon.
    pub rms_eps: f32,
    /// Trained context length.
    pub context_length: usize,
    /// Vocabulary size (rows of the embedding).
    pub vocab_size: usize,
}

impl ModelConfig {
    /// Read the configuration of architecture `arch` from `gguf`.
    pub fn from_gguf(gguf: &GgufFile) -> Result<Self> {
        let arch = gguf.architecture()?.to_string();
        let k = |s: &str| format!("{arch}.{s}");
        let hidden = gguf.meta_usize(&k("embedding_length"))?;
        let n_head = gguf.meta_usize(&k("attention.head_count"))?;
        let n_kv_head = gguf
            .meta_usize(&k("attention.head_count_kv"))
            .unwrap_or(n_head);
        let head_dim = gguf
            .meta_usize(&k("rope.dimension_count"))
            .unwrap_or(hidden / n_head.max(1));
        let vocab_size = match gguf.content.tensor_infos.get("token_embd.weight") {
            Some(t) => t.shape.dims()[0],
            None => bail!(
                "{}: tensor token_embd.weight is missing",
                gguf.path.display()
            ),
        };
        if n_head == 0 || n_kv_head == 0 || n_head % n_kv_head != 0 {
            bail!(
                "{}: invalid head counts {n_head}/{n_kv_head}",
                gguf.path.display()
            );
        }
        Ok(Self {
            n_layer: gguf.meta_usize(&k("block_count"))?,
            hidden,
            n_head,
            n_kv_head,
            head_dim,
            ffn: gguf.meta_usize(&k("feed_forward_length"))?,
            rope_theta: gguf.meta_f32(&k("rope.freq_base")).unwrap_or(10_000.0),
            rms_eps: gguf.meta_f32(&k("attention.layer_norm_rms_epsilon"))?,
            context_length: gguf.meta_usize(&k("context_length"))?,
            vocab_size,
            architecture: arch,
        })
    }

    /// Bytes of KV cache per token (keys and values, all layers) at `elem_bytes` per value
    /// (4 for f32, 2 for bf16; see `KvLayout::elem_bytes`).
    pub fn kv_bytes_per_token(&self, elem_bytes: usize) -> usize {
        2 * self.n_layer * self.n_kv_head * self.head_dim * elem_bytes
    }
}

/// A loaded model of one of the supported architectures.
pub enum Model {
    /// Qwen2 / Qwen2.5 (biases on Q/K/V, NeoX-style RoPE).
    Qwen2(qwen2::Qwen2),
    /// Llama family, including SmolLM2 (interleaved RoPE, optional tied output).
    Llama(llama::Llama),
}

impl Model {
    /// Names accepted in `general.architecture`.
    pub const SUPPORTED: &'static [&'static str] = &["qwen2", "llama"];

    /// Load the weights of the architecture named in the GGUF metadata.
    pub fn load(gguf: &mut GgufFile, device: &Device) -> Result<Self> {
        let cfg = ModelConfig::from_gguf(gguf)?;
        match cfg.architecture.as_str() {
            "qwen2" => Ok(Self::Qwen2(qwen2::Qwen2::load(gguf, cfg, device)?)),
            "llama" => Ok(Self::Llama(llama::Llama::load(gguf, cfg, device)?)),
            other => bail!(
                "{}: architecture {other:?} is not supported (supported: {})",
                gguf.path.display(),
                Self::SUPPORTED.join(", ")
            ),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &ModelConfig {
        match self {
            Self::Qwen2(m) => &m.blocks.cfg,
            Self::Llama(m) => &m.blocks.cfg,
        }
    }

    /// Run `tokens` (which follow the `cache.len()` tokens already in the cache), append
    /// their keys and values to `cache`, and return the logits of the last position
    /// (shape `[vocab]`, f32). On the CPU a token's results do not depend on how the
    /// tokens were split between calls (the kernels are batch-invariant), which is what
    /// makes a cached prefix exact.
    pub fn forward(&self, tokens: &[u32], cache: &mut KvCache) -> Result<Tensor> {
        crate::engine::threads::run(|| match self {
            Self::Qwen2(m) => m.forward(tokens, cache),
            Self::Llama(m) => m.forward(tokens, cache),
        })
    }

    /// Like [`Self::forward`], returning every position's logits (`[tokens, vocab]`): what
    /// speculative decoding verifies a draft with. Each row is bit-identical to the logits
    /// one-token decoding gives at that position (CPU kernels are batch-invariant).
    pub fn forward_all(&self, tokens: &[u32], cache: &mut KvCache) -> Result<Tensor> {
        crate::engine::threads::run(|| match self {
            Self::Qwen2(m) => m.forward_all(tokens, cache),
            Self::Llama(m) => m.forward_all(tokens, cache),
        })
    }

    /// One decode step for several independent sequences (see [`qwen2::Blocks::forward_rows`]):
    /// `[batch, vocab]` logits.
    pub fn forward_rows(&self, tokens: &[u32], caches: &mut [&mut KvCache]) -> Result<Tensor> {
        crate::engine::threads::run(|| match self {
            Self::Qwen2(m) => m.blocks.forward_rows(tokens, caches),
            Self::Llama(m) => m.blocks.forward_rows(tokens, caches),
        })
    }

    /// Device the weights live on.
    pub fn device(&self) -> &Device {
        match self {
            Self::Qwen2(m) => &m.blocks.device,
            Self::Llama(m) => &m.blocks.device,
        }
    }
}
