//! Llama family (Llama 2/3, SmolLM2): RMSNorm, bias-free projections, interleaved rotary
//! embeddings (GGUF's Q/K layout), SwiGLU, output optionally tied to the embedding.

use super::layers::{all_logits, last_logits, RopeStyle};
use super::qwen2::Blocks;
use super::ModelConfig;
use crate::engine::gguf::GgufFile;
use crate::engine::kv_cache::KvCache;
use anyhow::Result;
use candle_core::{Device, Tensor};

/// A Llama model.
pub struct Llama {
    /// Weights.
    pub blocks: Blocks,
}

impl Llama {
    /// Load from GGUF tensor names (no biases, interleaved rotary embeddings; SmolLM2 ties
    /// the output projection to the embedding).
    pub fn load(gguf: &mut GgufFile, cfg: ModelConfig, device: &Device) -> Result<Self> {
        Ok(Self {
            blocks: Blocks::load(gguf, cfg, device, false, RopeStyle::Interleaved)?,
        })
    }

    /// Forward `tokens` after the `cache.len()` cached positions; returns last-position logits.
    pub fn forward(&self, tokens: &[u32], cache: &mut KvCache) -> Result<Tensor> {
        let b = &self.blocks;
        last_logits(&self.hidden(tokens, cache)?, &b.out_norm, &b.output)
    }

    /// Like [`Self::forward`], with every position's logits: `[tokens, vocab]`.
    pub fn forward_all(&self, tokens: &[u32], cache: &mut KvCache) -> Result<Tensor> {
        let b = &self.blocks;
        all_logits(&self.hidden(tokens, cache)?, &b.out_norm, &b.output)
    }

    /// The residual stream after the last block (`[tokens, hidden]`); the keys and values
    /// of `tokens` are committed to `cache`.
    fn hidden(&self, tokens: &[u32], cache: &mut KvCache) -> Result<Tensor> {
        let b = &self.blocks;
        let offset = cache.len();
        let mut x = b.embed.forward(tokens, &b.device)?;
        for (i, layer) in b.layers.iter().enumerate() {
            let residual = x.clone();
            let h = layer.attn_norm.forward(&x)?;
            let h = (residual + layer.attention(&h, i, offset, cache, &b.rope, &b.cfg)?)?;
            let residual = h.clone();
            let m = layer.mlp(&layer.ffn_norm.forward(&h)?)?;
            x = (residual + m)?;
        }
        cache.commit(tokens)?;
        Ok(x)
    }
}
