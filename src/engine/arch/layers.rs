//! Building blocks shared by the architectures: quantized linear layers, RMSNorm, rotary
//! embeddings, grouped-query attention over the explicit [`KvCache`] (optionally through a
//! sliding window, with per-head q/k norms), and the gated MLP (SwiGLU or GeGLU).

use crate::engine::gguf::GgufFile;
use crate::engine::kernels::QuantMatrix;
use crate::engine::kv_cache::{KvCache, LayerKv};
use anyhow::Result;
use candle_core::quantized::{QMatMul, QTensor};
use candle_core::{CpuStorage, CustomOp1, DType, Device, Layout, Module, Shape, Tensor};
use std::sync::Arc;

use super::spec::{Activation, ArchSpec, ModelConfig, QkNorm, RopeStyle};

/// How a linear layer multiplies: Quire's CPU kernels over the memory-mapped GGUF bytes,
/// or Candle's quantized matmul (GPUs, and weight types without a native kernel).
enum Weights {
    Native(Arc<QuantMatrix>),
    Dense(Arc<DenseMatrix>),
    Candle(QMatMul),
}

/// A linear layer with quantized weights and an optional f32 bias.
pub struct Linear {
    w: Weights,
    b: Option<Tensor>,
}

impl Linear {
    /// Load `{name}.weight`, and `{name}.bias` where the file has it.
    pub fn load(gguf: &mut GgufFile, name: &str, device: &Device) -> Result<Self> {
        let w = Self::weights(gguf, &format!("{name}.weight"), device)?;
        let bias = format!("{name}.bias");
        let b = if gguf.has_tensor(&bias) {
            Some(gguf.tensor(&bias, device)?.dequantize(device)?)
        } else {
            None
        };
        Ok(Self { w, b })
    }

    fn weights(gguf: &mut GgufFile, name: &str, device: &Device) -> Result<Weights> {
        // `quant_matrix` says None off the CPU (see `GgufFile::native_kernels`).
        if let Some(m) = gguf.quant_matrix(name)? {
            return Ok(Weights::Native(Arc::new(m)));
        }
        let t = gguf.tensor(name, device)?;
        if gguf.native_kernels {
            if let Some(d) = DenseMatrix::of(&t)? {
                return Ok(Weights::Dense(Arc::new(d)));
            }
        }
        Ok(Weights::Candle(QMatMul::from_qtensor(t)?))
    }

    /// `x @ Wᵀ + b` for `x` of shape `[tokens, in]`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let y = match &self.w {
            Weights::Native(m) => x.contiguous()?.apply_op1_no_bwd(&RowMatMul(m.clone()))?,
            Weights::Dense(m) => x.contiguous()?.apply_op1_no_bwd(&RowMatMul(m.clone()))?,
            Weights::Candle(w) => w.forward(x)?,
        };
        Ok(match &self.b {
            Some(b) => y.broadcast_add(b)?,
            None => y,
        })
    }
}

/// A weight matrix Quire multiplies itself on the CPU: `y = x · Wᵀ` for `m` rows of `x`
/// (`[m, cols]` → `[m, rows]`), each output depending on its own input row only.
trait RowMatrix: Send + Sync {
    fn shape(&self) -> (usize, usize);
    fn product(&self, x: &[f32], m: usize) -> Vec<f32>;
}

impl RowMatrix for QuantMatrix {
    fn shape(&self) -> (usize, usize) {
        (self.rows, self.cols)
    }
    fn product(&self, x: &[f32], m: usize) -> Vec<f32> {
        self.forward(x, m)
    }
}

/// Candle op running a [`RowMatrix`] on a contiguous f32 CPU tensor `[.., in]`.
struct RowMatMul<M: RowMatrix>(Arc<M>);

impl<M: RowMatrix> CustomOp1 for RowMatMul<M> {
    fn name(&self) -> &'static str {
        "quire-matmul"
    }

    fn cpu_fwd(
        &self,
        storage: &CpuStorage,
        layout: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let CpuStorage::F32(data) = storage else {
            candle_core::bail!("matmul expects f32 activations");
        };
        let Some((start, end)) = layout.contiguous_offsets() else {
            candle_core::bail!("matmul expects contiguous activations");
        };
        let (rows, cols) = self.0.shape();
        let dims = layout.shape().dims();
        let k = *dims.last().unwrap_or(&0);
        if k != cols {
            candle_core::bail!("matmul: input width {k}, the matrix takes {cols}");
        }
        let m = (end - start) / k.max(1);
        let y = self.0.product(&data[start..end], m);
        let mut out = dims.to_vec();
        *out.last_mut().unwrap() = rows;
        Ok((CpuStorage::F32(y), Shape::from(out)))
    }
}

/// Unquantized weights (F32, F16 or BF16 in the GGUF) as f32 rows, multiplied with a fixed
/// order of additions per output ([`super::attention::dot`]): every output depends only on
/// its own input row, as with the quantized kernels, so a cached prefix stays exact.
/// (Candle's f32 matmul picks its blocking by the number of rows, which changes the last
/// bits.)
pub struct DenseMatrix {
    rows: usize,
    cols: usize,
    w: Vec<f32>,
}

impl DenseMatrix {
    /// `t` (`[rows, cols]`) as f32 rows when it is a float tensor on the CPU.
    fn of(t: &QTensor) -> Result<Option<Self>> {
        use candle_core::quantized::GgmlDType;
        let float = matches!(t.dtype(), GgmlDType::F32 | GgmlDType::F16 | GgmlDType::BF16);
        let dims = t.shape().dims().to_vec();
        if !float || !t.device().is_cpu() || dims.len() != 2 {
            return Ok(None);
        }
        let w = t
            .dequantize(&Device::Cpu)?
            .to_dtype(DType::F32)?
            .flatten_all()?
            .to_vec1()?;
        Ok(Some(Self {
            rows: dims[0],
            cols: dims[1],
            w,
        }))
    }

    /// `x @ Wᵀ` for `m` rows of `x` (`[m, cols]`): `[m, rows]`.
    fn forward(&self, x: &[f32], m: usize) -> Vec<f32> {
        use rayon::prelude::*;
        const BLOCK: usize = 64;
        let k = self.cols;
        // Outputs weight row by weight row (each row of W read once for all of x), then
        // transposed.
        let mut yt = vec![0f32; self.rows * m];
        yt.par_chunks_mut(BLOCK * m)
            .enumerate()
            .for_each(|(b, out)| {
                for (r, o) in out.chunks_mut(m).enumerate() {
                    let n = b * BLOCK + r;
                    let w = &self.w[n * k..(n + 1) * k];
                    for (i, y) in o.iter_mut().enumerate() {
                        *y = super::attention::dot(&x[i * k..(i + 1) * k], w);
                    }
                }
            });
        let mut y = vec![0f32; m * self.rows];
        for (n, col) in yt.chunks(m).enumerate() {
            for (i, v) in col.iter().enumerate() {
                y[i * self.rows + n] = *v;
            }
        }
        y
    }
}

impl RowMatrix for DenseMatrix {
    fn shape(&self) -> (usize, usize) {
        (self.rows, self.cols)
    }
    fn product(&self, x: &[f32], m: usize) -> Vec<f32> {
        self.forward(x, m)
    }
}

/// Root-mean-square layer norm with a learned scale.
pub struct RmsNorm {
    w: Tensor,
    eps: f32,
}

impl RmsNorm {
    /// Load `{name}.weight`.
    pub fn load(gguf: &mut GgufFile, name: &str, eps: f32, device: &Device) -> Result<Self> {
        let w = gguf
            .tensor(&format!("{name}.weight"), device)?
            .dequantize(device)?;
        Ok(Self { w, eps })
    }

    /// Normalise the last dimension.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Ok(candle_nn::ops::rms_norm(x, &self.w, self.eps)?)
    }
}

/// Precomputed cos/sin tables for rotary embeddings.
pub struct Rope {
    cos: Tensor,
    sin: Tensor,
    style: RopeStyle,
    max_pos: usize,
}

impl Rope {
    /// Tables for positions `0..max_pos` of heads of `head_dim`: dimension pair `i` turns by
    /// `pos · scale · theta^(−2i/head_dim) / factors[i]` (`factors`: Llama 3's
    /// `rope_freqs.weight`, where the model has them).
    pub fn new(
        head_dim: usize,
        theta: f32,
        scale: f32,
        factors: Option<&[f32]>,
        max_pos: usize,
        style: RopeStyle,
        device: &Device,
    ) -> Result<Self> {
        let half = head_dim / 2;
        let inv: Vec<f32> = (0..half)
            .map(|i| {
                let f = 1.0 / theta.powf(2.0 * i as f32 / head_dim as f32);
                scale * f / factors.map_or(1.0, |d| d[i])
            })
            .collect();
        let mut angles = Vec::with_capacity(max_pos * half);
        for p in 0..max_pos {
            for f in &inv {
                angles.push(p as f32 * f);
            }
        }
        let t = Tensor::from_vec(angles, (max_pos, half), device)?;
        Ok(Self {
            cos: t.cos()?,
            sin: t.sin()?,
            style,
            max_pos,
        })
    }

    /// Rotate `x` of shape `[1, heads, tokens, head_dim]` whose first token is at `offset`.
    pub fn apply(&self, x: &Tensor, offset: usize) -> Result<Tensor> {
        let t = x.dim(2)?;
        anyhow::ensure!(
            offset + t <= self.max_pos,
            "position {} is past the model's context length {}",
            offset + t,
            self.max_pos
        );
        let cos = self.cos.narrow(0, offset, t)?;
        let sin = self.sin.narrow(0, offset, t)?;
        Ok(match self.style {
            RopeStyle::Neox => candle_nn::rotary_emb::rope(&x.contiguous()?, &cos, &sin)?,
            RopeStyle::Interleaved => candle_nn::rotary_emb::rope_i(&x.contiguous()?, &cos, &sin)?,
        })
    }
}

/// Where a block's attention reads and writes keys and values: one sequence whose new
/// tokens start at `offset`, or a batch of sequences with one new token each.
pub enum Attn<'a, 'b> {
    /// One sequence.
    Seq {
        /// Position of the first new token.
        offset: usize,
        /// Its cache.
        cache: &'a mut KvCache,
    },
    /// Row `i` of the batch is the next token of the sequence in cache `i`.
    Rows(&'a mut [&'b mut KvCache]),
}

/// One transformer block's weights.
pub struct Block {
    /// Norm before attention.
    pub attn_norm: RmsNorm,
    /// Query projection.
    pub q: Linear,
    /// Key projection.
    pub k: Linear,
    /// Value projection.
    pub v: Linear,
    /// Attention output projection.
    pub o: Linear,
    /// Per-head query and key norms, where the architecture has them.
    pub qk_norm: Option<(RmsNorm, RmsNorm)>,
    /// Where the q/k norms sit.
    pub qk_norm_at: QkNorm,
    /// Norm of the attention output (Gemma).
    pub post_attn_norm: Option<RmsNorm>,
    /// Norm before the MLP.
    pub ffn_norm: RmsNorm,
    /// MLP gate projection.
    pub gate: Linear,
    /// MLP up projection.
    pub up: Linear,
    /// MLP down projection.
    pub down: Linear,
    /// Norm of the MLP output (Gemma).
    pub post_ffn_norm: Option<RmsNorm>,
    /// The MLP's activation.
    pub activation: Activation,
    /// Rotary tables of this layer.
    pub rope: Arc<Rope>,
    /// Sliding window, for a windowed layer.
    pub window: Option<usize>,
}

impl Block {
    /// Load block `i` with llama.cpp's tensor names (`blk.{i}.attn_q`, ...) for `spec`.
    pub fn load(
        gguf: &mut GgufFile,
        i: usize,
        spec: &ArchSpec,
        rope: Arc<Rope>,
        cfg: &ModelConfig,
        device: &Device,
    ) -> Result<Self> {
        let p = format!("blk.{i}");
        let eps = cfg.rms_eps;
        let mut norm = |name: &str| RmsNorm::load(gguf, &format!("{p}.{name}"), eps, device);
        let attn_norm = norm("attn_norm")?;
        let ffn_norm = norm("ffn_norm")?;
        let qk_norm = match spec.qk_norm {
            QkNorm::None => None,
            _ => Some((norm("attn_q_norm")?, norm("attn_k_norm")?)),
        };
        let (post_attn_norm, post_ffn_norm) = if spec.post_norms {
            (
                Some(norm("post_attention_norm")?),
                Some(norm("post_ffw_norm")?),
            )
        } else {
            (None, None)
        };
        let mut linear = |name: &str| Linear::load(gguf, &format!("{p}.{name}"), device);
        Ok(Self {
            attn_norm,
            q: linear("attn_q")?,
            k: linear("attn_k")?,
            v: linear("attn_v")?,
            o: linear("attn_output")?,
            qk_norm,
            qk_norm_at: spec.qk_norm,
            post_attn_norm,
            ffn_norm,
            gate: linear("ffn_gate")?,
            up: linear("ffn_up")?,
            down: linear("ffn_down")?,
            post_ffn_norm,
            activation: spec.activation,
            rope,
            window: cfg.window(i),
        })
    }

    /// The block on the residual stream `x` (`[tokens, hidden]`):
    /// `x + post(attn(norm(x)))`, then `x + post(mlp(norm(x)))`, where `post` is the
    /// architecture's post-norm or nothing.
    pub fn forward(
        &self,
        x: &Tensor,
        layer: usize,
        attn: &mut Attn,
        cfg: &ModelConfig,
    ) -> Result<Tensor> {
        let post = |n: &Option<RmsNorm>, y: Tensor| match n {
            Some(n) => n.forward(&y),
            None => Ok(y),
        };
        let a = self.attention(&self.attn_norm.forward(x)?, layer, attn, cfg)?;
        let x = (x + post(&self.post_attn_norm, a)?)?;
        let m = self.mlp(&self.ffn_norm.forward(&x)?)?;
        Ok((x + post(&self.post_ffn_norm, m)?)?)
    }

    /// Self-attention for `x` (`[tokens, hidden]`, already normalised); appends this
    /// layer's keys/values to the cache(s). For a batch of sequences the projections run
    /// on the whole batch (the weights are read once); rotary embeddings and attention run
    /// per sequence at its own position over its own cache.
    pub fn attention(
        &self,
        x: &Tensor,
        layer: usize,
        attn: &mut Attn,
        cfg: &ModelConfig,
    ) -> Result<Tensor> {
        let (q, k, v) = (self.q.forward(x)?, self.k.forward(x)?, self.v.forward(x)?);
        let out = match attn {
            Attn::Seq { offset, cache } => self.attend(&q, &k, &v, layer, *offset, cache, cfg)?,
            Attn::Rows(caches) => {
                let mut rows = Vec::with_capacity(caches.len());
                for (i, cache) in caches.iter_mut().enumerate() {
                    let offset = cache.len();
                    rows.push(self.attend(
                        &q.narrow(0, i, 1)?,
                        &k.narrow(0, i, 1)?,
                        &v.narrow(0, i, 1)?,
                        layer,
                        offset,
                        cache,
                        cfg,
                    )?);
                }
                Tensor::cat(&rows, 0)?
            }
        };
        self.o.forward(&out)
    }

    /// Gated feed-forward for `x` (`[tokens, hidden]`, already normalised).
    pub fn mlp(&self, x: &Tensor) -> Result<Tensor> {
        let gate = self.gate.forward(x)?;
        let up = self.up.forward(x)?;
        let h = match self.activation {
            Activation::Silu => swiglu(&gate, &up)?,
            Activation::GeluTanh => (gate.gelu()? * up)?,
        };
        self.down.forward(&h)
    }

    /// Query/key norms, rotary embeddings, the cache append and attention for one
    /// sequence's projected `q`/`k`/`v` (`[tokens, heads × head_dim]`, first token at
    /// `offset`): `[tokens, n_head × head_dim]`.
    #[allow(clippy::too_many_arguments)]
    fn attend(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        layer: usize,
        offset: usize,
        cache: &mut KvCache,
        cfg: &ModelConfig,
    ) -> Result<Tensor> {
        let t = q.dim(0)?;
        let (nh, nkv, hd) = (cfg.n_head, cfg.n_kv_head, cfg.head_dim);
        let mut q = q.reshape((1, t, nh, hd))?;
        let mut k = k.reshape((1, t, nkv, hd))?;
        let norms = |q: &mut Tensor, k: &mut Tensor| -> Result<()> {
            if let Some((qn, kn)) = &self.qk_norm {
                *q = qn.forward(&q.contiguous()?)?;
                *k = kn.forward(&k.contiguous()?)?;
            }
            Ok(())
        };
        if self.qk_norm_at == QkNorm::BeforeRope {
            norms(&mut q, &mut k)?;
        }
        let mut q = self.rope.apply(&q.transpose(1, 2)?, offset)?;
        let mut k = self.rope.apply(&k.transpose(1, 2)?, offset)?;
        if self.qk_norm_at == QkNorm::AfterRope {
            norms(&mut q, &mut k)?;
        }
        let default_scale = 1.0 / (hd as f32).sqrt();
        if cfg.attn_scale != default_scale {
            // The kernels scale scores by 1/sqrt(hd); the queries carry the rest.
            q = (q * (cfg.attn_scale / default_scale) as f64)?;
        }
        let v = v.reshape((1, t, nkv, hd))?.transpose(1, 2)?;
        cache.append(layer, &k.squeeze(0)?, &v.squeeze(0)?.contiguous()?)?;
        let q = q.squeeze(0)?;
        let w = self.window;
        match cache.layer(layer) {
            LayerKv::Bf16(kv) => super::attention::blocked_attention_bf16(&q, kv, offset, w),
            LayerKv::KeyBlocks { keys, values } => {
                super::attention::blocked_attention(&q, keys, values, offset, w)
            }
            LayerKv::Rows { keys, values } => {
                super::attention::causal_attention(&q, keys, values, offset, w)
            }
        }
    }
}

/// `silu(gate) · up` element by element, where `silu(g) = g / (1 + e^−g)`: on the CPU one
/// fused pass ([`SwiGlu`]), elsewhere Candle's ops.
pub fn swiglu(gate: &Tensor, up: &Tensor) -> Result<Tensor> {
    if gate.device().is_cpu() && gate.dtype() == DType::F32 && up.dtype() == DType::F32 {
        return Ok(gate
            .contiguous()?
            .apply_op2_no_bwd(&up.contiguous()?, &SwiGlu)?);
    }
    Ok((gate.silu()? * up)?)
}

/// The fused SwiGLU as a Candle op: one pass, no intermediate tensors; with AVX-512 the
/// vectorised `exp` ([`super::vexp::exp16`]) on every element (the last partial register
/// masked), so an element's result never depends on the tensor's length.
struct SwiGlu;

/// Elements below which the op stays on the calling thread (a decoding step's few
/// thousand values are not worth a hand-off).
const SWIGLU_PARALLEL_MIN: usize = 1 << 16;

impl candle_core::CustomOp2 for SwiGlu {
    fn name(&self) -> &'static str {
        "quire-swiglu"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (CpuStorage::F32(g), CpuStorage::F32(u)) = (s1, s2) else {
            candle_core::bail!("swiglu expects f32 tensors");
        };
        let (Some((g0, g1)), Some((u0, u1))) = (l1.contiguous_offsets(), l2.contiguous_offsets())
        else {
            candle_core::bail!("swiglu expects contiguous tensors");
        };
        if l1.shape() != l2.shape() {
            candle_core::bail!(
                "swiglu: shapes {:?} and {:?} differ",
                l1.shape(),
                l2.shape()
            );
        }
        let (g, u) = (&g[g0..g1], &u[u0..u1]);
        let mut out = vec![0f32; g.len()];
        if g.len() < SWIGLU_PARALLEL_MIN {
            swiglu_slice(g, u, &mut out);
        } else {
            use rayon::prelude::*;
            out.par_chunks_mut(SWIGLU_PARALLEL_MIN / 4)
                .zip(g.par_chunks(SWIGLU_PARALLEL_MIN / 4))
                .zip(u.par_chunks(SWIGLU_PARALLEL_MIN / 4))
                .for_each(|((o, g), u)| swiglu_slice(g, u, o));
        }
        Ok((CpuStorage::F32(out), l1.shape().clone()))
    }
}

fn swiglu_slice(g: &[f32], u: &[f32], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if crate::engine::kernels::Isa::detect() == crate::engine::kernels::Isa::Vnni {
        // SAFETY: the Vnni path implies AVX-512 F; the three slices have one length.
        unsafe { swiglu_avx512(g, u, out) };
        return;
    }
    for ((o, &g), &u) in out.iter_mut().zip(g).zip(u) {
        *o = g / (1.0 + (-g).exp()) * u;
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn swiglu_avx512(g: &[f32], u: &[f32], out: &mut [f32]) {
    use std::arch::x86_64::*;
    let n = g.len();
    let (one, cap) = (_mm512_set1_ps(1.0), _mm512_set1_ps(88.0));
    let mut i = 0;
    while i < n {
        let live = (n - i).min(16);
        let mask: __mmask16 = if live == 16 {
            0xffff
        } else {
            (1u16 << live) - 1
        };
        let x = _mm512_maskz_loadu_ps(mask, g.as_ptr().add(i));
        let up = _mm512_maskz_loadu_ps(mask, u.as_ptr().add(i));
        // e^−x, capped so that very negative gates give a finite (huge) value, not ∞·0.
        let e = super::vexp::exp16(_mm512_min_ps(_mm512_sub_ps(_mm512_setzero_ps(), x), cap));
        let s = _mm512_div_ps(x, _mm512_add_ps(one, e));
        _mm512_mask_storeu_ps(out.as_mut_ptr().add(i), mask, _mm512_mul_ps(s, up));
        i += 16;
    }
}

/// A token embedding table, kept quantized; rows are dequantized on lookup.
pub enum Embedding {
    /// Memory-mapped GGUF rows (CPU).
    Native(Arc<QuantMatrix>),
    /// A Candle tensor (GPUs, and types without a native kernel).
    Candle(Arc<QTensor>),
}

impl Embedding {
    /// Load tensor `name` (`[vocab, hidden]`).
    pub fn load(gguf: &mut GgufFile, name: &str, device: &Device) -> Result<Self> {
        // `quant_matrix` says None off the CPU (see `GgufFile::native_kernels`).
        if let Some(m) = gguf.quant_matrix(name)? {
            return Ok(Self::Native(Arc::new(m)));
        }
        Ok(Self::Candle(Arc::new(gguf.tensor(name, device)?)))
    }

    /// Rows for `tokens`: `[t, hidden]` f32.
    pub fn forward(&self, tokens: &[u32], device: &Device) -> Result<Tensor> {
        match self {
            Self::Native(m) => Ok(Tensor::from_vec(
                m.dequantize_rows(tokens)?,
                (tokens.len(), m.cols),
                device,
            )?),
            Self::Candle(t) => {
                let ids = Tensor::new(tokens, device)?;
                Ok(t.embedding(&ids)?.to_dtype(DType::F32)?)
            }
        }
    }

    /// The same table as an output projection (models with tied embeddings); a float table
    /// multiplies through [`DenseMatrix`] when `native` (Quire's CPU kernels) is on.
    pub fn as_output(&self, native: bool) -> Result<Linear> {
        Ok(Linear {
            w: match self {
                Self::Native(m) => Weights::Native(m.clone()),
                Self::Candle(t) => match DenseMatrix::of(t)?.filter(|_| native) {
                    Some(d) => Weights::Dense(Arc::new(d)),
                    None => Weights::Candle(QMatMul::from_arc(t.clone())?),
                },
            },
            b: None,
        })
    }
}

/// Logits of every row of `x` (`[rows, hidden]`) after the final norm: `[rows, vocab]`.
pub fn all_logits(x: &Tensor, norm: &RmsNorm, output: &Linear) -> Result<Tensor> {
    Ok(output.forward(&norm.forward(x)?)?.to_dtype(DType::F32)?)
}

/// Logits of the last row of `x` (`[t, hidden]`) after the final norm: `[vocab]`.
pub fn last_logits(x: &Tensor, norm: &RmsNorm, output: &Linear) -> Result<Tensor> {
    let t = x.dim(0)?;
    let last = x.narrow(0, t - 1, 1)?;
    let h = norm.forward(&last)?;
    Ok(output.forward(&h)?.squeeze(0)?.to_dtype(DType::F32)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fused_swiglu_matches_candle_and_ignores_length() {
        let d = Device::Cpu;
        let n = 1000; // not a multiple of 16
        let mut g: Vec<f32> = (0..n)
            .map(|i| ((i * 37 % 211) as f32 - 105.0) / 9.0)
            .collect();
        g[..6].copy_from_slice(&[0.0, -0.0, 100.0, -100.0, 88.5, -88.5]);
        let u: Vec<f32> = (0..n)
            .map(|i| ((i * 13 % 29) as f32 - 14.0) / 3.0)
            .collect();
        let gt = Tensor::from_vec(g.clone(), (1, n), &d).unwrap();
        let ut = Tensor::from_vec(u.clone(), (1, n), &d).unwrap();
        let fused: Vec<f32> = swiglu(&gt, &ut)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        let reference: Vec<f32> = (gt.silu().unwrap() * &ut)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        for (i, (a, b)) in fused.iter().zip(&reference).enumerate() {
            assert!(a.is_finite(), "{i}: {a}");
            assert!((a - b).abs() <= 1e-6 * b.abs().max(1.0), "{i}: {a} vs {b}");
        }
        // The first 37 values alone give the same bits as inside the longer tensor.
        let short = swiglu(&gt.narrow(1, 0, 37).unwrap(), &ut.narrow(1, 0, 37).unwrap())
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        assert_eq!(short, fused[..37]);
        // Large tensors take the parallel path, with the same bits.
        let rows = SWIGLU_PARALLEL_MIN / n + 2;
        let big_g = Tensor::from_vec(g.repeat(rows), (rows, n), &d).unwrap();
        let big_u = Tensor::from_vec(u.repeat(rows), (rows, n), &d).unwrap();
        let big = swiglu(&big_g, &big_u)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        assert_eq!(&big[(rows - 1) * n..], &fused[..]);
    }
}
