//! The one forward pass every architecture runs: token embeddings (scaled where the
//! architecture says), the blocks, the final norm and the output projection. What differs
//! between architectures lives in each block's [`ArchSpec`] and the [`ModelConfig`].

use super::layers::{all_logits, last_logits, Attn, Block, Embedding, Linear, RmsNorm, Rope};
use super::spec::{ArchSpec, ModelConfig};
use crate::engine::gguf::GgufFile;
use crate::engine::kv_cache::KvCache;
use anyhow::{ensure, Result};
use candle_core::{Device, Tensor};
use std::sync::Arc;

/// Longest position for which rotary tables are precomputed (bounded for memory).
pub const MAX_ROPE_POSITIONS: usize = 32_768;

/// A decoder-only transformer's weights and tables.
pub struct Decoder {
    /// Hyper-parameters.
    pub cfg: ModelConfig,
    /// How the blocks compute.
    pub spec: ArchSpec,
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
}

impl Decoder {
    /// Load the weights by llama.cpp's tensor names: the embedding, `n_layer` blocks, the
    /// final norm, and the output projection — `output.weight`, or the embedding when the
    /// model ties them. Windowed layers get their own rotary tables where the architecture
    /// gives them another base; `rope_freqs.weight` (Llama 3) divides the frequencies.
    pub fn load(
        gguf: &mut GgufFile,
        cfg: ModelConfig,
        spec: ArchSpec,
        device: &Device,
    ) -> Result<Self> {
        let embed = Embedding::load(gguf, "token_embd.weight", device)?;
        let output = if gguf.has_tensor("output.weight") {
            Linear::load(gguf, "output", device)?
        } else {
            embed.as_output(gguf.native_kernels)?
        };
        let factors = if gguf.has_tensor("rope_freqs.weight") {
            let f = gguf
                .tensor("rope_freqs.weight", device)?
                .dequantize(device)?
                .flatten_all()?
                .to_vec1::<f32>()?;
            ensure!(
                f.len() == cfg.head_dim / 2,
                "{}: rope_freqs.weight has {} factors for head size {}",
                gguf.path.display(),
                f.len(),
                cfg.head_dim
            );
            Some(f)
        } else {
            None
        };
        let max_pos = cfg.context_length.min(MAX_ROPE_POSITIONS);
        let rope = |theta: f32, scale: f32| {
            Rope::new(
                cfg.head_dim,
                theta,
                scale,
                factors.as_deref(),
                max_pos,
                spec.rope_style,
                device,
            )
            .map(Arc::new)
        };
        let global = rope(cfg.rope_theta, cfg.rope_freq_scale)?;
        let local = match cfg.rope_theta_local {
            Some(theta) => rope(theta, 1.0)?,
            None => global.clone(),
        };
        let layers = (0..cfg.n_layer)
            .map(|i| {
                let r = if cfg.window(i).is_some() {
                    local.clone()
                } else {
                    global.clone()
                };
                Block::load(gguf, i, &spec, r, &cfg, device)
            })
            .collect::<Result<Vec<_>>>()?;
        let out_norm = RmsNorm::load(gguf, "output_norm", cfg.rms_eps, device)?;
        Ok(Self {
            cfg,
            spec,
            device: device.clone(),
            embed,
            layers,
            out_norm,
            output,
        })
    }

    /// Forward `tokens` after the `cache.len()` cached positions; returns last-position logits.
    pub fn forward(&self, tokens: &[u32], cache: &mut KvCache) -> Result<Tensor> {
        let offset = cache.len();
        let x = self.hidden(tokens, &mut Attn::Seq { offset, cache })?;
        cache.commit(tokens)?;
        last_logits(&x, &self.out_norm, &self.output)
    }

    /// Like [`Self::forward`], with every position's logits: `[tokens, vocab]`.
    pub fn forward_all(&self, tokens: &[u32], cache: &mut KvCache) -> Result<Tensor> {
        let offset = cache.len();
        let x = self.hidden(tokens, &mut Attn::Seq { offset, cache })?;
        cache.commit(tokens)?;
        all_logits(&x, &self.out_norm, &self.output)
    }

    /// One decode step for several independent sequences: `tokens[i]` follows what
    /// `caches[i]` holds. Every matrix product runs once for the whole batch; each row's
    /// numbers are bit-identical to decoding that sequence alone (the kernels are
    /// batch-invariant), so batching changes throughput, never output. Returns
    /// `[batch, vocab]` logits.
    pub fn forward_rows(&self, tokens: &[u32], caches: &mut [&mut KvCache]) -> Result<Tensor> {
        ensure!(
            tokens.len() == caches.len(),
            "{} tokens for {} sequences",
            tokens.len(),
            caches.len()
        );
        let x = self.hidden(tokens, &mut Attn::Rows(caches))?;
        for (cache, &t) in caches.iter_mut().zip(tokens) {
            cache.commit(&[t])?;
        }
        all_logits(&x, &self.out_norm, &self.output)
    }

    /// The residual stream after the last block (`[tokens, hidden]`); the keys and values
    /// of `tokens` are written to the cache(s) of `attn`, not yet committed.
    fn hidden(&self, tokens: &[u32], attn: &mut Attn) -> Result<Tensor> {
        let mut x = self.embed.forward(tokens, &self.device)?;
        if let Some(s) = self.spec.embed_scale {
            x = (x * s as f64)?;
        }
        for (i, layer) in self.layers.iter().enumerate() {
            x = layer.forward(&x, i, attn, &self.cfg)?;
        }
        Ok(x)
    }
}
