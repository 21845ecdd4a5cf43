//! Llama family (Llama 2/3, SmolLM2, Mistral): RMSNorm, bias-free projections, interleaved
//! rotary embeddings (GGUF's Q/K layout), SwiGLU, output optionally tied to the embedding.
//! Llama 3.1+ GGUFs carry `rope_freqs.weight`, per-dimension divisors of the rotary
//! frequencies, which the decoder applies wherever the file has them.

use super::spec::{Activation, ArchSpec, QkNorm, RopeStyle};

/// Llama's blocks: pre-norm attention and SwiGLU MLP, interleaved RoPE.
pub fn spec() -> ArchSpec {
    ArchSpec {
        rope_style: RopeStyle::Interleaved,
        qk_norm: QkNorm::None,
        post_norms: false,
        activation: Activation::Silu,
        embed_scale: None,
    }
}
