//! Gemma 3 (text): embeddings scaled by `sqrt(hidden)`, per-head q/k RMSNorm before RoPE,
//! RMSNorm after attention and after the MLP as well as before them, a GeGLU MLP (tanh
//! GELU), and interleaved sliding-window and global attention: five windowed layers for
//! each global one, the windowed layers with their own RoPE base (10,000) and no RoPE
//! scaling. GGUF norm weights already include Gemma's `1 +` offset (the converter adds it).
//!
//! A windowed layer's query at position `p` sees keys `p - window + 1 ..= p` (llama.cpp's
//! standard SWA mask). Its keys and values are kept for every position, like a global
//! layer's: a cached prefix then serves any continuation exactly, and the attention
//! kernels read only the window.

use super::spec::{Activation, ArchSpec, ModelConfig, QkNorm, RopeStyle};
use crate::engine::gguf::GgufFile;
use anyhow::{bail, Result};
use candle_core::quantized::gguf_file::Value;

/// Global (full-attention) layers come every this many layers, when the GGUF does not say.
const DEFAULT_PATTERN: usize = 6;
/// RoPE base of the windowed layers.
const LOCAL_ROPE_THETA: f32 = 10_000.0;
/// Layer count of Gemma 3 27B, the one size whose attention scale is `1/sqrt(hidden/heads)`.
const LAYERS_27B: usize = 62;

/// Gemma 3's hyper-parameters beyond the common ones: the sliding window, which layers use
/// it, the windowed layers' RoPE, and the attention scale.
pub fn configure(cfg: &mut ModelConfig, gguf: &GgufFile) -> Result<()> {
    let window = gguf.meta_usize("gemma3.attention.sliding_window")?;
    if window == 0 {
        bail!(
            "{}: gemma3.attention.sliding_window is 0",
            gguf.path.display()
        );
    }
    cfg.windowed_layers = match gguf.meta_opt("gemma3.attention.sliding_window_pattern") {
        // Newer converters write one flag per layer.
        Some(Value::Array(flags)) => {
            let flags: Vec<bool> = flags
                .iter()
                .map(|v| matches!(v, Value::Bool(true)))
                .collect();
            if flags.len() != cfg.n_layer {
                bail!(
                    "{}: sliding_window_pattern has {} entries for {} layers",
                    gguf.path.display(),
                    flags.len(),
                    cfg.n_layer
                );
            }
            flags
        }
        _ => {
            let pattern = gguf
                .meta_usize("gemma3.attention.sliding_window_pattern")
                .unwrap_or(DEFAULT_PATTERN)
                .max(1);
            (0..cfg.n_layer)
                .map(|i| i % pattern < pattern - 1)
                .collect()
        }
    };
    cfg.sliding_window = Some(window);
    cfg.rope_theta_local = Some(LOCAL_ROPE_THETA);
    cfg.attn_scale = if cfg.n_layer == LAYERS_27B {
        1.0 / ((cfg.hidden / cfg.n_head) as f32).sqrt()
    } else {
        1.0 / (cfg.head_dim as f32).sqrt()
    };
    Ok(())
}

/// Gemma 3's blocks.
pub fn spec(cfg: &ModelConfig) -> ArchSpec {
    ArchSpec {
        rope_style: RopeStyle::Neox,
        qk_norm: QkNorm::BeforeRope,
        post_norms: true,
        activation: Activation::GeluTanh,
        embed_scale: Some((cfg.hidden as f32).sqrt()),
    }
}
