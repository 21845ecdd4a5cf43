//! Qwen2 / Qwen2.5: a Llama-shaped decoder with biases on the Q, K and V projections and
//! NeoX-style rotary embeddings. Weights keep their GGUF quantization.

use super::layers::{all_logits, last_logits, Block, Embedding, Linear, RmsNorm, Rope, RopeStyle};
use super::ModelConfig;
use crate::engine::gguf::GgufFile;
use crate::engine::kv_cache::KvCache;
use anyhow::Result;
use candle_core::{Device, Tensor};

/// Weights and tables shared by the decoder-only architectures.
pub struct Blocks {
    /// Hyper-parameters.
    pub cfg: ModelConfig,
    /// Where the weights live.
    pub device: Device,
    /// Token embedding table (kept quantized; rows are dequantized on lookup).
    pub embed: Embedding,
    /// Transformer blocks.
    pub layers: Vec<Block>,
    /// Final norm.
    pub out_norm: RmsNorm,
    /// Output projection to the vocabulary.
    pub output: Linear,
    /// Rotary tables.
    pub rope: Rope,
}

impl Blocks {
    /// Load the weights every decoder here shares, by llama.cpp's tensor names: the
    /// embedding, `n_layer` blocks (with Q/K/V biases when `qkv_bias`), the final norm, and
    /// the output projection — `output.weight`, or the embedding when the model ties them.
    pub fn load(
        gguf: &mut GgufFile,
        cfg: ModelConfig,
        device: &Device,
        qkv_bias: bool,
        style: RopeStyle,
    ) -> Result<Self> {
        let embed = Embedding::load(gguf, "token_embd.weight", device)?;
        let output = if gguf.has_tensor("output.weight") {
            Linear::load(gguf, "output", false, device)?
        } else {
            embed.as_output()?
        };
        let layers = (0..cfg.n_layer)
            .map(|i| Block::load(gguf, i, qkv_bias, &cfg, device))
            .collect::<Result<Vec<_>>>()?;
        let out_norm = RmsNorm::load(gguf, "output_norm", cfg.rms_eps, device)?;
        let rope = Rope::new(
            &cfg,
            cfg.context_length.min(MAX_ROPE_POSITIONS),
            style,
            device,
        )?;
        Ok(Self {
            cfg,
            device: device.clone(),
            embed,
            layers,
            out_norm,
            output,
            rope,
        })
    }
}

impl Blocks {
    /// One decode step for several independent sequences: `tokens[i]` follows what
    /// `caches[i]` holds. Every matrix product runs once for the whole batch; each row's
    /// numbers are bit-identical to decoding that sequence alone (the kernels are
    /// batch-invariant), so batching changes throughput, never output. Returns
    /// `[batch, vocab]` logits. (Both architectures here apply the residual stream as
    /// `x + attn(norm(x))`, `x + mlp(norm(x))`.)
    pub fn forward_rows(&self, tokens: &[u32], caches: &mut [&mut KvCache]) -> Result<Tensor> {
        anyhow::ensure!(
            tokens.len() == caches.len(),
            "{} tokens for {} sequences",
            tokens.len(),
            caches.len()
        );
        let mut x = self.embed.forward(tokens, &self.device)?;
        for (i, layer) in self.layers.iter().enumerate() {
            let h = layer.attn_norm.forward(&x)?;
            x = (x + layer.attention_rows(&h, i, caches, &self.rope, &self.cfg)?)?;
            let h = layer.ffn_norm.forward(&x)?;
            x = (x + layer.mlp(&h)?)?;
        }
        for (cache, &t) in caches.iter_mut().zip(tokens) {
            cache.commit(&[t])?;
        }
        all_logits(&x, &self.out_norm, &self.output)
    }
}

/// A Qwen2 model.
pub struct Qwen2 {
    /// Weights.
    pub blocks: Blocks,
}

/// Longest position for which rotary tables are precomputed (bounded for memory).
pub const MAX_ROPE_POSITIONS: usize = 32_768;

impl Qwen2 {
    /// Load from GGUF tensor names (Q/K/V biases, NeoX rotary embeddings).
    pub fn load(gguf: &mut GgufFile, cfg: ModelConfig, device: &Device) -> Result<Self> {
        Ok(Self {
            blocks: Blocks::load(gguf, cfg, device, true, RopeStyle::Neox)?,
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
            let h = layer.attn_norm.forward(&x)?;
            x = (x + layer.attention(&h, i, offset, cache, &b.rope, &b.cfg)?)?;
            let h = layer.ffn_norm.forward(&x)?;
            x = (x + layer.mlp(&h)?)?;
        }
        cache.commit(tokens)?;
        Ok(x)
    }
}
