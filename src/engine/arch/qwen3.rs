//! Qwen3 (dense): Qwen2's block without Q/K/V biases, with a per-head RMSNorm of queries
//! and keys before RoPE; the head size (`attention.key_length`) is not `hidden / heads`.

use super::spec::{Activation, ArchSpec, QkNorm, RopeStyle};

/// Qwen3's blocks: q/k norms before NeoX RoPE, SwiGLU MLP.
pub fn spec() -> ArchSpec {
    ArchSpec {
        rope_style: RopeStyle::Neox,
        qk_norm: QkNorm::BeforeRope,
        post_norms: false,
        activation: Activation::Silu,
        embed_scale: None,
    }
}
