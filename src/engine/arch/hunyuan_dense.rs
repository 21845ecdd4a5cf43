//! Tencent Hunyuan dense models (Hunyuan-MT, Hy-MT; llama.cpp's `LLM_ARCH_HUNYUAN_DENSE`):
//! a Llama-shaped block with NeoX RoPE whose queries and keys are RMS-normalised per head
//! *after* RoPE; projection biases wherever the GGUF has them. The converter bakes
//! Hunyuan's NTK "alpha" RoPE scaling into `rope.freq_base`, so the base is used as read.

use super::spec::{Activation, ArchSpec, QkNorm, RopeStyle};

/// Hunyuan's blocks: q/k norms after NeoX RoPE, SwiGLU MLP.
pub fn spec() -> ArchSpec {
    ArchSpec {
        rope_style: RopeStyle::Neox,
        qk_norm: QkNorm::AfterRope,
        post_norms: false,
        activation: Activation::Silu,
        embed_scale: None,
    }
}
