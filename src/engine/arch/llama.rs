//! Llama family (Llama 2/3, SmolLM2): RMSNorm, bias-free projections, interleaved rotary
//! embeddings (GGUF's Q/K layout), SwiGLU, output optionally tied to the embedding.

use super::layers::{embed, last_logits, Block, Linear, RmsNorm, Rope, RopeStyle};
use super::qwen2::{Blocks, MAX_ROPE_POSITIONS};
use super::ModelConfig;
use crate::engine::gguf::GgufFile;
use crate::engine::kv_cache::KvCache;
use anyhow::Result;
use candle_core::{Device, Tensor};
use std::sync::Arc;

/// A Llama model.
pub struct Llama {
    /// Weights.
    pub blocks: Blocks,
}

impl Llama {
    /// Load from GGUF tensor names.
    pub fn load(gguf: &mut GgufFile, cfg: ModelConfig, device: &Device) -> Result<Self> {
        let embed = Arc::new(gguf.tensor("token_embd.weight", device)?);
        // SmolLM2 ties the output projection to the embedding table.
        let output = if gguf.has_tensor("output.weight") {
            Linear::load(gguf, "output", false, device)?
        } else {
            Linear::from_arc(embed.clone())?
        };
        let layers = (0..cfg.n_layer)
            .map(|i| Block::load(gguf, i, false, &cfg, device))
            .collect::<Result<Vec<_>>>()?;
        let out_norm = RmsNorm::load(gguf, "output_norm", cfg.rms_eps, device)?;
        let rope = Rope::new(
            &cfg,
            cfg.context_length.min(MAX_ROPE_POSITIONS),
            RopeStyle::Interleaved,
            device,
        )?;
        Ok(Self {
            blocks: Blocks {
                cfg,
                device: device.clone(),
                embed,
                layers,
                out_norm,
                output,
                rope,
            },
        })
    }

    /// Forward `tokens` after the `cache.len()` cached positions; returns last-position logits.
    /// `prompt`: these are prompt tokens (computed batch-invariantly even when alone).
    pub fn forward(&self, tokens: &[u32], cache: &mut KvCache, prompt: bool) -> Result<Tensor> {
        let b = &self.blocks;
        let offset = cache.len();
        let mut x = embed(&b.embed, tokens, &b.device)?;
        for (i, layer) in b.layers.iter().enumerate() {
            let residual = x.clone();
            let h = layer.attn_norm.forward(&x)?;
            let h = (residual + layer.attention(&h, i, offset, cache, &b.rope, &b.cfg, prompt)?)?;
            let residual = h.clone();
            let m = layer.mlp(&layer.ffn_norm.forward(&h)?, prompt)?;
            x = (residual + m)?;
        }
        cache.commit(tokens)?;
        last_logits(&x, &b.out_norm, &b.output)
    }
}
