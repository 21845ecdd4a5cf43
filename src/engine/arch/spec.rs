//! What an architecture is, as data: the hyper-parameters read from GGUF metadata
//! ([`ModelConfig`]) and how its blocks compute ([`ArchSpec`] with [`RopeStyle`],
//! [`QkNorm`] and [`Activation`]). Every other file of `arch` reads these types; this one
//! imports nothing from the engine, so the per-architecture files, the building blocks and
//! the KV cache can all depend on it without depending on each other.

/// Hyper-parameters read from GGUF metadata (`{arch}.*` keys).
#[derive(Debug, Clone, serde::Serialize)]
pub struct ModelConfig {
    /// `general.architecture`.
    pub architecture: String,
    /// Number of transformer blocks.
    pub n_layer: usize,
    /// Residual stream width.
    pub hidden: usize,
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads (grouped-query attention when fewer than `n_head`).
    pub n_kv_head: usize,
    /// Width of one head (`attention.key_length`, which Qwen3 and Gemma 3 set apart from
    /// `hidden / n_head`).
    pub head_dim: usize,
    /// Feed-forward inner width.
    pub ffn: usize,
    /// RoPE base frequency (of the global layers where some layers are windowed).
    pub rope_theta: f32,
    /// RoPE position scale (`1 / factor` of linear RoPE scaling; 1 without scaling).
    pub rope_freq_scale: f32,
    /// RoPE base of the sliding-window layers, where the architecture gives them their own.
    pub rope_theta_local: Option<f32>,
    /// RMSNorm epsilon.
    pub rms_eps: f32,
    /// Trained context length.
    pub context_length: usize,
    /// Vocabulary size (rows of the embedding).
    pub vocab_size: usize,
    /// Keys a windowed layer's query sees: itself and the `window - 1` before it.
    pub sliding_window: Option<usize>,
    /// Which layers attend through the sliding window (empty: none).
    pub windowed_layers: Vec<bool>,
    /// Attention score scale (`1 / sqrt(head_dim)` unless the architecture says otherwise).
    pub attn_scale: f32,
}

impl ModelConfig {
    /// Bytes of KV cache per token (keys and values, all layers) at `elem_bytes` per value
    /// (4 for f32, 2 for bf16; see `KvLayout::elem_bytes`).
    pub fn kv_bytes_per_token(&self, elem_bytes: usize) -> usize {
        2 * self.n_layer * self.n_kv_head * self.head_dim * elem_bytes
    }

    /// The sliding window of layer `layer`, if it is a windowed layer.
    pub fn window(&self, layer: usize) -> Option<usize> {
        match self.windowed_layers.get(layer) {
            Some(true) => self.sliding_window,
            _ => None,
        }
    }
}

/// How an architecture's blocks compute, beyond its hyper-parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ArchSpec {
    /// How rotary embeddings pair a head's dimensions.
    pub rope_style: RopeStyle,
    /// Per-head RMSNorm of queries and keys, and whether it comes before or after RoPE.
    pub qk_norm: QkNorm,
    /// RMSNorm of the attention output and of the MLP output before each joins the
    /// residual stream (Gemma's "sandwich" norms).
    pub post_norms: bool,
    /// The gated MLP's activation.
    pub activation: Activation,
    /// Factor applied to the token embeddings (Gemma: `sqrt(hidden)`).
    pub embed_scale: Option<f32>,
}

/// How rotary embeddings pair up the dimensions of a head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeStyle {
    /// Rotate dimension `i` with `i + d/2` (GPT-NeoX, Qwen2).
    Neox,
    /// Rotate dimensions `2i` with `2i+1` (GGUF Llama, whose Q/K rows were permuted for it).
    Interleaved,
}

/// Where a block's per-head RMSNorm of queries and keys sits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QkNorm {
    /// No q/k norm.
    None,
    /// Normalise, then rotate (Qwen3, Gemma 3).
    BeforeRope,
    /// Rotate, then normalise (Hunyuan dense).
    AfterRope,
}

/// The gated MLP's activation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// `silu(gate) · up` (SwiGLU).
    Silu,
    /// `gelu_tanh(gate) · up` (GeGLU, Gemma).
    GeluTanh,
}
