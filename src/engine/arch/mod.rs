//! Model architectures. Every supported architecture is a decoder-only transformer that
//! one forward pass ([`decoder::Decoder`]) runs over the shared building blocks in
//! [`layers`]; what differs between them is data, stated once per architecture in its own
//! file: the hyper-parameters it reads from GGUF ([`ModelConfig`]), and its [`ArchSpec`]
//! (rotary style, per-head q/k norms and where they sit, norms after attention and MLP, the
//! MLP's activation, the embedding scale). llama.cpp moved the same way to one standard
//! transformer with a table of operations per architecture.
//!
//! To add an architecture: a file here with `configure` (its metadata keys) and `spec`, a
//! variant of [`Arch`], and its name in [`Arch::from_name`]. If it needs an operation the
//! blocks lack, add it to [`layers`] behind a field of [`ArchSpec`].
//!
//! Imports run one way: the shared types are in [`spec`], which imports nothing from the
//! files here; the per-architecture files, [`decoder`], [`layers`] and the KV cache import
//! it; this file imports the per-architecture files and re-exports the types of [`spec`].

pub mod attention;
pub mod decoder;
pub mod gemma3;
pub mod hunyuan_dense;
pub mod layers;
pub mod llama;
pub mod qwen2;
pub mod qwen3;
pub mod spec;
#[cfg(target_arch = "x86_64")]
pub mod vexp;

use crate::engine::gguf::GgufFile;
use crate::engine::kv_cache::KvCache;
use anyhow::{bail, Result};
use candle_core::{Device, Tensor};
pub use spec::{Activation, ArchSpec, ModelConfig, QkNorm, RopeStyle};

// Reading a configuration needs each architecture's own keys (`Arch::configure`), so it
// lives here, above the per-architecture files, rather than in `spec`.
impl ModelConfig {
    /// Read the configuration of the GGUF's architecture from `gguf`.
    pub fn from_gguf(gguf: &GgufFile) -> Result<Self> {
        let arch_name = gguf.architecture()?.to_string();
        let k = |s: &str| format!("{arch_name}.{s}");
        let hidden = gguf.meta_usize(&k("embedding_length"))?;
        let n_head = gguf.meta_usize(&k("attention.head_count"))?;
        let n_kv_head = gguf
            .meta_usize(&k("attention.head_count_kv"))
            .unwrap_or(n_head);
        let head_dim = gguf
            .meta_usize(&k("attention.key_length"))
            .or_else(|_| gguf.meta_usize(&k("rope.dimension_count")))
            .unwrap_or(hidden / n_head.max(1));
        let vocab_size = match gguf.content.tensor_infos.get("token_embd.weight") {
            Some(t) => t.shape.dims()[0],
            None => bail!(
                "{}: tensor token_embd.weight is missing",
                gguf.path.display()
            ),
        };
        if n_head == 0
            || n_kv_head == 0
            || !n_head.is_multiple_of(n_kv_head)
            || !head_dim.is_multiple_of(2)
        {
            bail!(
                "{}: invalid head counts {n_head}/{n_kv_head} or head size {head_dim}",
                gguf.path.display()
            );
        }
        let n_layer = gguf.meta_usize(&k("block_count"))?;
        let mut cfg = Self {
            n_layer,
            hidden,
            n_head,
            n_kv_head,
            head_dim,
            ffn: gguf.meta_usize(&k("feed_forward_length"))?,
            rope_theta: gguf.meta_f32(&k("rope.freq_base")).unwrap_or(10_000.0),
            rope_freq_scale: rope_freq_scale(gguf, &arch_name)?,
            rope_theta_local: None,
            rms_eps: gguf.meta_f32(&k("attention.layer_norm_rms_epsilon"))?,
            context_length: gguf.meta_usize(&k("context_length"))?,
            vocab_size,
            sliding_window: None,
            windowed_layers: Vec::new(),
            attn_scale: 1.0 / (head_dim as f32).sqrt(),
            architecture: arch_name,
        };
        Arch::of(gguf)?.configure(&mut cfg, gguf)?;
        Ok(cfg)
    }
}

/// `1 / factor` for linear RoPE scaling, 1 without; other scaling types are refused (they
/// would give wrong answers, not errors).
fn rope_freq_scale(gguf: &GgufFile, arch: &str) -> Result<f32> {
    let kind = gguf
        .meta_str(&format!("{arch}.rope.scaling.type"))
        .unwrap_or("none");
    let factor = gguf
        .meta_f32(&format!("{arch}.rope.scaling.factor"))
        .or_else(|_| gguf.meta_f32(&format!("{arch}.rope.scale_linear")))
        .unwrap_or(1.0);
    match kind {
        "none" => Ok(1.0),
        "linear" if factor > 0.0 => Ok(1.0 / factor),
        other => bail!(
            "{}: RoPE scaling {other:?} (factor {factor}) is not supported (supported: none, linear)",
            gguf.path.display()
        ),
    }
}

/// The supported architectures, by `general.architecture`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arch {
    /// Qwen2 / Qwen2.5.
    Qwen2,
    /// Llama 2/3, SmolLM2, Mistral (with Llama 3's RoPE frequency factors).
    Llama,
    /// Qwen3 (dense).
    Qwen3,
    /// Gemma 3 (text).
    Gemma3,
    /// Tencent Hunyuan dense (Hunyuan-MT, Hy-MT).
    HunyuanDense,
}

impl Arch {
    /// Names accepted in `general.architecture`.
    pub const SUPPORTED: &'static [&'static str] =
        &["qwen2", "llama", "qwen3", "gemma3", "hunyuan-dense"];

    /// The architecture called `name` in GGUF metadata.
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "qwen2" => Self::Qwen2,
            "llama" => Self::Llama,
            "qwen3" => Self::Qwen3,
            "gemma3" => Self::Gemma3,
            "hunyuan-dense" => Self::HunyuanDense,
            _ => return None,
        })
    }

    /// The architecture of `gguf`, or an error listing the supported ones.
    pub fn of(gguf: &GgufFile) -> Result<Self> {
        let name = gguf.architecture()?;
        match Self::from_name(name) {
            Some(a) => Ok(a),
            None => bail!(
                "{}: architecture {name:?} is not supported (supported: {})",
                gguf.path.display(),
                Self::SUPPORTED.join(", ")
            ),
        }
    }

    /// Read the architecture's own hyper-parameters into `cfg`.
    fn configure(self, cfg: &mut ModelConfig, gguf: &GgufFile) -> Result<()> {
        match self {
            Self::Gemma3 => gemma3::configure(cfg, gguf),
            Self::Qwen2 | Self::Llama | Self::Qwen3 | Self::HunyuanDense => Ok(()),
        }
    }

    /// How the architecture's blocks compute.
    pub fn spec(self, cfg: &ModelConfig) -> ArchSpec {
        match self {
            Self::Qwen2 => qwen2::spec(),
            Self::Llama => llama::spec(),
            Self::Qwen3 => qwen3::spec(),
            Self::Gemma3 => gemma3::spec(cfg),
            Self::HunyuanDense => hunyuan_dense::spec(),
        }
    }
}

/// A loaded model of one of the supported architectures.
pub struct Model {
    /// Which architecture.
    pub arch: Arch,
    /// Its weights and forward pass.
    pub decoder: decoder::Decoder,
}

impl Model {
    /// Names accepted in `general.architecture`.
    pub const SUPPORTED: &'static [&'static str] = Arch::SUPPORTED;

    /// Load the weights of the architecture named in the GGUF metadata.
    pub fn load(gguf: &mut GgufFile, device: &Device) -> Result<Self> {
        let arch = Arch::of(gguf)?;
        let cfg = ModelConfig::from_gguf(gguf)?;
        let spec = arch.spec(&cfg);
        Ok(Self {
            arch,
            decoder: decoder::Decoder::load(gguf, cfg, spec, device)?,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &ModelConfig {
        &self.decoder.cfg
    }

    /// Run `tokens` (which follow the `cache.len()` tokens already in the cache), append
    /// their keys and values to `cache`, and return the logits of the last position
    /// (shape `[vocab]`, f32). On the CPU a token's results do not depend on how the
    /// tokens were split between calls (the kernels are batch-invariant), which is what
    /// makes a cached prefix exact.
    pub fn forward(&self, tokens: &[u32], cache: &mut KvCache) -> Result<Tensor> {
        crate::engine::threads::run(|| self.decoder.forward(tokens, cache))
    }

    /// Like [`Self::forward`], returning every position's logits (`[tokens, vocab]`): what
    /// speculative decoding verifies a draft with. Each row is bit-identical to the logits
    /// one-token decoding gives at that position (CPU kernels are batch-invariant).
    pub fn forward_all(&self, tokens: &[u32], cache: &mut KvCache) -> Result<Tensor> {
        crate::engine::threads::run(|| self.decoder.forward_all(tokens, cache))
    }

    /// One decode step for several independent sequences (see
    /// [`decoder::Decoder::forward_rows`]): `[batch, vocab]` logits.
    pub fn forward_rows(&self, tokens: &[u32], caches: &mut [&mut KvCache]) -> Result<Tensor> {
        crate::engine::threads::run(|| self.decoder.forward_rows(tokens, caches))
    }

    /// Device the weights live on.
    pub fn device(&self) -> &Device {
        &self.decoder.device
    }
}
