//! Causal grouped-query attention kernel for the CPU, exact under prefix reuse.
//!
//! Each query row is computed from its own visible keys only — scores in key order, a
//! max, exponentials, a sum in key order, the weighted values in key order — so its result
//! is bit-for-bit the same whether the row was computed in one batch with the whole prompt
//! or after a cached prefix. Batched matrix products and vectorised softmax do not have
//! that property: their summation order depends on how many (masked) keys a batch has,
//! which is what makes cached and recomputed logits disagree in other engines. No score
//! matrix is materialised: a row's scores live in a per-thread buffer.
//!
//! [`grouped_attention_reference`] is the straightforward tensor-op version, used on GPU
//! devices and as the reference the kernel is tested against.

use super::layers::ATTN_CHUNK;
use anyhow::Result;
use candle_core::{CpuStorage, CustomOp3, Layout, Shape, Tensor};
use rayon::prelude::*;

/// The kernel as a Candle op over `(q, keys, values)`.
/// `q`: `[n_head, t, hd]` contiguous; `keys`/`values`: the cache buffers
/// `[n_kv_head, capacity, hd]` contiguous, of which the first `offset + t` positions are valid.
/// Output: `[t, n_head * hd]`.
struct CausalAttention {
    offset: usize,
    scale: f32,
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    // Eight independent accumulators in a fixed order: vectorises, and is deterministic.
    let mut acc = [0f32; 8];
    let chunks = a.len() / 8;
    for c in 0..chunks {
        for l in 0..8 {
            acc[l] += a[c * 8 + l] * b[c * 8 + l];
        }
    }
    let mut s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for i in chunks * 8..a.len() {
        s += a[i] * b[i];
    }
    s
}

/// One query row against keys `0..visible` of one kv head.
#[allow(clippy::too_many_arguments)]
fn attend_row(
    q: &[f32],
    keys: &[f32],
    values: &[f32],
    visible: usize,
    hd: usize,
    scale: f32,
    scores: &mut Vec<f32>,
    out: &mut [f32],
) {
    scores.clear();
    let mut max = f32::NEG_INFINITY;
    for j in 0..visible {
        let s = dot(q, &keys[j * hd..(j + 1) * hd]) * scale;
        max = max.max(s);
        scores.push(s);
    }
    let mut sum = 0f32;
    for s in scores.iter_mut() {
        *s = (*s - max).exp();
        sum += *s;
    }
    let inv = 1.0 / sum;
    out.fill(0.0);
    for (j, &p) in scores.iter().enumerate() {
        let w = p * inv;
        let v = &values[j * hd..(j + 1) * hd];
        for (o, x) in out.iter_mut().zip(v) {
            *o += w * x;
        }
    }
}

impl CustomOp3 for CausalAttention {
    fn name(&self) -> &'static str {
        "quire-causal-attention"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (nh, t, hd) = l1.shape().dims3()?;
        let (nkv, cap, hd2) = l2.shape().dims3()?;
        if hd != hd2 || l3.shape() != l2.shape() || nh % nkv != 0 {
            candle_core::bail!(
                "attention: incompatible shapes {:?} {:?}",
                l1.shape(),
                l2.shape()
            );
        }
        let (Some((q0, q1)), Some((k0, k1)), Some((v0, v1))) = (
            l1.contiguous_offsets(),
            l2.contiguous_offsets(),
            l3.contiguous_offsets(),
        ) else {
            candle_core::bail!("attention: inputs must be contiguous");
        };
        let q = &s1.as_slice::<f32>()?[q0..q1];
        let k = &s2.as_slice::<f32>()?[k0..k1];
        let v = &s3.as_slice::<f32>()?[v0..v1];
        let groups = nh / nkv;
        let (offset, scale) = (self.offset, self.scale);
        if offset + t > cap {
            candle_core::bail!(
                "attention: {} positions exceed cache capacity {cap}",
                offset + t
            );
        }
        let mut out = vec![0f32; t * nh * hd];
        // Rows of the output are [t][nh][hd]; one task per (token, head).
        out.par_chunks_mut(hd).enumerate().for_each_init(
            || Vec::with_capacity(offset + t),
            |scores, (idx, o)| {
                let (i, h) = (idx / nh, idx % nh);
                let g = h / groups;
                let qrow = &q[(h * t + i) * hd..(h * t + i + 1) * hd];
                let base = g * cap * hd;
                let visible = offset + i + 1;
                attend_row(
                    qrow,
                    &k[base..base + visible * hd],
                    &v[base..base + visible * hd],
                    visible,
                    hd,
                    scale,
                    scores,
                    o,
                );
            },
        );
        Ok((CpuStorage::F32(out), Shape::from((t, nh * hd))))
    }
}

/// Attention for `q` (`[n_head, t, hd]`, positions `offset..offset+t`) over the cache buffers
/// `keys`/`values` (`[n_kv_head, capacity, hd]`). Returns `[t, n_head * hd]`.
pub fn causal_attention(
    q: &Tensor,
    keys: &Tensor,
    values: &Tensor,
    offset: usize,
) -> Result<Tensor> {
    let hd = q.dim(2)?;
    if q.device().is_cpu() {
        let op = CausalAttention {
            offset,
            scale: 1.0 / (hd as f32).sqrt(),
        };
        return Ok(q.contiguous()?.apply_op3_no_bwd(keys, values, &op)?);
    }
    let (nh, t, _) = q.dims3()?;
    let n = offset + t;
    let out =
        grouped_attention_reference(q, &keys.narrow(1, 0, n)?, &values.narrow(1, 0, n)?, offset)?;
    Ok(out.transpose(0, 1)?.reshape((t, nh * hd))?)
}

/// Grouped-query causal attention from tensor ops. `q`: `[n_head, t, hd]`; `keys`/`values`:
/// `[n_kv_head, offset + t, hd]`. Queries are processed in chunks of [`ATTN_CHUNK`] so only
/// one chunk's scores exist at a time. Returns `[n_head, t, hd]`.
pub fn grouped_attention_reference(
    q: &Tensor,
    keys: &Tensor,
    values: &Tensor,
    offset: usize,
) -> Result<Tensor> {
    let (nh, t, hd) = q.dims3()?;
    let nkv = keys.dim(0)?;
    let groups = nh / nkv;
    let scale = 1.0 / (hd as f64).sqrt();
    let q = q.reshape((nkv, groups, t, hd))?;
    let mut outs = Vec::new();
    let mut start = 0;
    while start < t {
        let len = ATTN_CHUNK.min(t - start);
        let n_keys = offset + start + len;
        let qc = q
            .narrow(2, start, len)?
            .contiguous()?
            .reshape((nkv, groups * len, hd))?;
        let k = keys.narrow(1, 0, n_keys)?;
        let v = values.narrow(1, 0, n_keys)?;
        let scores = (qc.matmul(&k.t()?)? * scale)?;
        let scores = if len > 1 {
            let mut m = vec![0f32; len * n_keys];
            for i in 0..len {
                for x in &mut m[i * n_keys + offset + start + i + 1..(i + 1) * n_keys] {
                    *x = f32::NEG_INFINITY;
                }
            }
            let mask = Tensor::from_vec(m, (len, n_keys), q.device())?;
            scores
                .reshape((nkv, groups, len, n_keys))?
                .broadcast_add(&mask)?
                .reshape((nkv, groups * len, n_keys))?
        } else {
            scores
        };
        let probs = candle_nn::ops::softmax_last_dim(&scores)?;
        outs.push(
            probs
                .matmul(&v.contiguous()?)?
                .reshape((nkv, groups, len, hd))?,
        );
        start += len;
    }
    Ok(Tensor::cat(&outs, 2)?.reshape((nh, t, hd))?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    #[test]
    fn kernel_matches_tensor_reference_and_is_batch_invariant() {
        let d = Device::Cpu;
        let (nh, nkv, hd, cap) = (6, 2, 16, 64);
        let total = 40;
        let q = Tensor::randn(0f32, 1.0, (nh, total, hd), &d).unwrap();
        let k = Tensor::randn(0f32, 1.0, (nkv, cap, hd), &d).unwrap();
        let v = Tensor::randn(0f32, 1.0, (nkv, cap, hd), &d).unwrap();
        let fast = causal_attention(&q, &k, &v, 0).unwrap();
        let reference = grouped_attention_reference(
            &q,
            &k.narrow(1, 0, total).unwrap(),
            &v.narrow(1, 0, total).unwrap(),
            0,
        )
        .unwrap()
        .transpose(0, 1)
        .unwrap()
        .reshape((total, nh * hd))
        .unwrap();
        let diff = (fast.clone() - reference)
            .unwrap()
            .abs()
            .unwrap()
            .max_all()
            .unwrap()
            .to_scalar::<f32>()
            .unwrap();
        assert!(diff < 1e-5, "{diff}");
        // The last 15 rows computed after 25 cached positions are bit-identical.
        let tail = causal_attention(&q.narrow(1, 25, 15).unwrap(), &k, &v, 25).unwrap();
        let same = fast.narrow(0, 25, 15).unwrap();
        assert_eq!(
            tail.flatten_all().unwrap().to_vec1::<f32>().unwrap(),
            same.flatten_all().unwrap().to_vec1::<f32>().unwrap()
        );
    }
}
