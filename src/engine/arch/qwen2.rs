//! Qwen2 / Qwen2.5: a Llama-shaped decoder with biases on the Q, K and V projections
//! (loaded wherever the GGUF has them) and NeoX-style rotary embeddings.

use super::spec::{Activation, ArchSpec, QkNorm, RopeStyle};

/// Qwen2's blocks: pre-norm attention and SwiGLU MLP, NeoX RoPE.
pub fn spec() -> ArchSpec {
    ArchSpec {
        rope_style: RopeStyle::Neox,
        qk_norm: QkNorm::None,
        post_norms: false,
        activation: Activation::Silu,
        embed_scale: None,
    }
}
