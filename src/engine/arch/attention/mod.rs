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
//! Three CPU paths compute it: the AVX-512 group tiles of [`tiles`] over the cache's
//! [`KeyBlocks`] ([`blocked_attention`], where [`uses_key_blocks`]), an AVX2 kernel that takes
//! up to three query heads of a kv head per read of its keys and values, and a portable row
//! kernel (both in [`causal_attention`]). Each is batch-invariant on its own.
//! [`grouped_attention_reference`] is the straightforward tensor-op version, used on GPU
//! devices and as the reference the kernels are tested against.

#[cfg(target_arch = "x86_64")]
mod tiles;

#[cfg(target_arch = "x86_64")]
use super::vexp::exp8;

use crate::engine::kv_blocks::{KeyBlocks, KvBlocks16};
use anyhow::{bail, ensure, Result};
use candle_core::{CpuStorage, CustomOp3, Layout, Shape, Storage, Tensor};
use rayon::prelude::*;

/// Queries per attention chunk during prefill: bounds the score matrix to
/// `n_head × ATTN_CHUNK × context` floats for one layer at a time.
pub const ATTN_CHUNK: usize = 256;

/// Whether CPU attention for head size `hd` reads keys as [`KeyBlocks`]: on CPUs with the
/// AVX-512 kernels (`QUIRE_CPU_KERNEL=avx2|portable` turns it off, as for the matmuls).
pub fn uses_key_blocks(hd: usize) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use crate::engine::kernels::Isa;
        tiles::supports(hd) && Isa::detect() == Isa::Vnni
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = hd;
        false
    }
}

/// Whether CPU attention for head size `hd` keeps keys and values in bf16
/// ([`KvBlocks16`]): on CPUs with the AVX-512 kernels and AVX-512 BF16, unless
/// the engine's settings ask for f32 keys and values (for comparisons).
pub fn uses_bf16_blocks(hd: usize) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static BF16: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        uses_key_blocks(hd)
            && *BF16.get_or_init(|| {
                is_x86_feature_detected!("avx512bf16")
                    && crate::engine::config::active().kv_dtype
                        != crate::engine::config::KvDtype::F32
            })
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = hd;
        false
    }
}

/// Run `f` on the f32 slice of a contiguous CPU tensor.
fn with_cpu_slice<R>(t: &Tensor, f: impl FnOnce(&[f32]) -> Result<R>) -> Result<R> {
    let (storage, layout) = t.storage_and_layout();
    let Storage::Cpu(CpuStorage::F32(data)) = &*storage else {
        bail!("attention: expected an f32 CPU tensor");
    };
    let Some((a, b)) = layout.contiguous_offsets() else {
        bail!("attention: expected a contiguous tensor");
    };
    f(&data[a..b])
}

/// Attention for `q` (`[n_head, t, hd]`, positions `offset..offset+t`) over a layer's keys
/// as [`KeyBlocks`] and its value buffer (`[n_kv_head, capacity, hd]`), with the AVX-512
/// group tiles: one task per (position, kv head) computes all the query heads of that
/// group. Returns `[t, n_head * hd]`. Only call where [`uses_key_blocks`] says so.
#[cfg(target_arch = "x86_64")]
pub fn blocked_attention(
    q: &Tensor,
    keys: &KeyBlocks,
    values: &Tensor,
    offset: usize,
    window: Option<usize>,
) -> Result<Tensor> {
    let (nh, t, hd) = q.dims3()?;
    let (nkv, cap, hd2) = values.dims3()?;
    ensure!(
        hd == hd2 && nh % nkv == 0 && nkv == keys.n_kv_head() && uses_key_blocks(hd),
        "attention: incompatible shapes {:?} {:?}",
        q.shape(),
        values.shape()
    );
    let n = offset + t;
    ensure!(
        n <= cap && keys.data().len() >= n.div_ceil(KeyBlocks::WIDTH) * nkv * hd * KeyBlocks::WIDTH,
        "attention: {n} positions exceed the cache"
    );
    let scale = 1.0 / (hd as f32).sqrt();
    with_cpu_slice(values, |v| {
        group_tasks(q, nkv, |scores: &mut Vec<f32>, qrows, g, i, out| {
            let visible = offset + i + 1;
            let kv = tiles::KvHead {
                blocks: keys.data(),
                n_kv_head: nkv,
                head: g,
                values: &v[g * cap * hd..(g * cap + visible) * hd],
            };
            let lo = first_visible(visible, window);
            // SAFETY: `uses_key_blocks` checked AVX-512 and the head size; the blocks and
            // values cover `visible` positions (checked above), and `lo < visible`.
            unsafe {
                tiles::attend_group(qrows, nh / nkv, &kv, lo, visible, hd, scale, scores, out)
            };
        })
    })
}

/// [`blocked_attention`] over a layer's bf16 keys and values ([`KvBlocks16`]) with the
/// AVX-512 BF16 group tiles. Returns `[t, n_head * hd]`. Only call where
/// [`uses_bf16_blocks`] says so.
#[cfg(target_arch = "x86_64")]
pub fn blocked_attention_bf16(
    q: &Tensor,
    kv: &KvBlocks16,
    offset: usize,
    window: Option<usize>,
) -> Result<Tensor> {
    let (nh, t, hd) = q.dims3()?;
    let nkv = kv.n_kv_head();
    ensure!(
        nh % nkv == 0 && uses_bf16_blocks(hd),
        "attention: incompatible shapes {:?} for {nkv} kv heads",
        q.shape()
    );
    let n = offset + t;
    ensure!(
        kv.keys().len() >= n.div_ceil(KvBlocks16::WIDTH) * nkv * hd * KvBlocks16::WIDTH,
        "attention: {n} positions exceed the cache"
    );
    let scale = 1.0 / (hd as f32).sqrt();
    group_tasks(
        q,
        nkv,
        |scratch: &mut tiles::Scratch16, qrows, g, i, out| {
            let head = tiles::KvHead16 {
                keys: kv.keys(),
                values: kv.values(),
                n_kv_head: nkv,
                head: g,
            };
            let visible = offset + i + 1;
            // SAFETY: `uses_bf16_blocks` checked AVX-512 BF16 and the head size; the blocks cover
            // `visible` positions (checked above), and `first_visible` is below it.
            unsafe {
                tiles::attend_group_bf16(
                    qrows,
                    nh / nkv,
                    &head,
                    first_visible(visible, window),
                    visible,
                    hd,
                    scale,
                    scratch,
                    out,
                )
            };
        },
    )
}

/// Run `task(scratch, q_rows, g, i, out)` for every kv head `g` and position `i` of `q`
/// (`[n_head, t, hd]`): `q_rows` holds the `n_head / n_kv_head` query rows of group `g` at
/// position `i`, `out` receives their outputs, in `[t, n_head * hd]`. Tasks run in parallel,
/// ordered kv head first: rayon hands each thread a contiguous range, so a thread works
/// through one head's keys and values (which then stay in its L2) instead of alternating.
#[cfg(target_arch = "x86_64")]
fn group_tasks<S: Default>(
    q: &Tensor,
    nkv: usize,
    task: impl Fn(&mut S, &[f32], usize, usize, &mut [f32]) + Sync,
) -> Result<Tensor> {
    let (nh, t, hd) = q.dims3()?;
    let groups = nh / nkv;
    let q = q.contiguous()?;
    let mut out = vec![0f32; t * nh * hd];
    let out_ptr = SendPtr(out.as_mut_ptr());
    with_cpu_slice(&q, |q| {
        (0..nkv * t).into_par_iter().for_each_init(
            || (S::default(), vec![0f32; groups * hd]),
            |(scratch, qrows), idx| {
                let (g, i) = (idx / t, idx % t);
                for r in 0..groups {
                    let h = g * groups + r;
                    qrows[r * hd..(r + 1) * hd]
                        .copy_from_slice(&q[(h * t + i) * hd..(h * t + i + 1) * hd]);
                }
                let out_ptr = &out_ptr;
                // SAFETY: task (g, i) alone writes the `groups * hd` outputs of position
                // i's query heads of group g, inside `out` (t × nh × hd).
                let o = unsafe {
                    std::slice::from_raw_parts_mut(
                        out_ptr.0.add((i * nkv + g) * groups * hd),
                        groups * hd,
                    )
                };
                task(scratch, qrows, g, i, o);
            },
        );
        Ok(())
    })?;
    Ok(Tensor::from_vec(out, (t, nh * hd), q.device())?)
}

/// The output pointer shared by the attention tasks (each writes its own rows).
#[cfg(target_arch = "x86_64")]
struct SendPtr(*mut f32);
// SAFETY: tasks write disjoint ranges (see `blocked_attention`).
#[cfg(target_arch = "x86_64")]
unsafe impl Send for SendPtr {}
#[cfg(target_arch = "x86_64")]
unsafe impl Sync for SendPtr {}

/// Without x86-64 there are no AVX-512 BF16 tiles ([`uses_bf16_blocks`] is false).
#[cfg(not(target_arch = "x86_64"))]
pub fn blocked_attention_bf16(
    _q: &Tensor,
    _kv: &KvBlocks16,
    _offset: usize,
    _window: Option<usize>,
) -> Result<Tensor> {
    bail!("the bf16 attention tiles need an x86-64 CPU with AVX-512 BF16")
}

/// Without x86-64 there are no AVX-512 tiles ([`uses_key_blocks`] is false).
#[cfg(not(target_arch = "x86_64"))]
pub fn blocked_attention(
    _q: &Tensor,
    _keys: &KeyBlocks,
    _values: &Tensor,
    _offset: usize,
    _window: Option<usize>,
) -> Result<Tensor> {
    bail!("attention: key blocks need the x86-64 AVX-512 kernels")
}

/// The kernel as a Candle op over `(q, keys, values)`.
/// `q`: `[n_head, t, hd]` contiguous; `keys`/`values`: the cache buffers
/// `[n_kv_head, capacity, hd]` contiguous, of which the first `offset + t` positions are valid.
/// Output: `[t, n_head * hd]`.
struct CausalAttention {
    offset: usize,
    scale: f32,
    window: Option<usize>,
}

/// The first key a query sees when `visible` keys precede it and itself (positions
/// `0..visible`): 0, or with a sliding window of `w` keys, `visible - w` (llama.cpp's
/// standard window: a key `w` or more positions back is masked).
pub fn first_visible(visible: usize, window: Option<usize>) -> usize {
    window.map_or(0, |w| visible.saturating_sub(w))
}

/// A dot product in one fixed order: eight interleaved partial sums, added pairwise, then
/// the tail. Rust never reorders float additions, so the result is the same whatever else
/// is in the batch (also the dense weights' product, `layers::DenseMatrix`).
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
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

/// The same computation with AVX2 + FMA for head size `8·L` (one row; the production path
/// is [`attend_rows_avx2`], which does this for up to three rows per key read and is tested
/// bit-identical to it): the query held in `L`
/// registers, scores for eight keys at a time (eight independent dot products reduced by a
/// transpose of horizontal adds), a vectorised `exp` ([`exp8`]), and the weighted values
/// accumulated in registers. Still one row from its own keys in key order, so still
/// batch-invariant.
#[cfg(all(test, target_arch = "x86_64"))]
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2,fma")]
unsafe fn attend_row_avx2<const L: usize>(
    q: &[f32],
    keys: &[f32],
    values: &[f32],
    visible: usize,
    scale: f32,
    scores: &mut Vec<f32>,
    out: &mut [f32],
) {
    use std::arch::x86_64::*;
    let hd = L * 8;
    scores.clear();
    scores.resize(visible.next_multiple_of(8), f32::NEG_INFINITY);
    let qv: [__m256; L] = std::array::from_fn(|c| _mm256_loadu_ps(q.as_ptr().add(c * 8)));
    let kp = keys.as_ptr();
    let scalev = _mm256_set1_ps(scale);
    let mut maxv = _mm256_set1_ps(f32::NEG_INFINITY);
    let full = visible / 8 * 8;
    for j in (0..full).step_by(8) {
        let mut a = [_mm256_setzero_ps(); 8];
        for (c, qc) in qv.iter().enumerate() {
            for (i, ai) in a.iter_mut().enumerate() {
                *ai = _mm256_fmadd_ps(*qc, _mm256_loadu_ps(kp.add((j + i) * hd + c * 8)), *ai);
            }
        }
        let t0 = _mm256_hadd_ps(a[0], a[1]);
        let t1 = _mm256_hadd_ps(a[2], a[3]);
        let t2 = _mm256_hadd_ps(a[4], a[5]);
        let t3 = _mm256_hadd_ps(a[6], a[7]);
        let u0 = _mm256_hadd_ps(t0, t1);
        let u1 = _mm256_hadd_ps(t2, t3);
        let s = _mm256_add_ps(
            _mm256_permute2f128_ps(u0, u1, 0x20),
            _mm256_permute2f128_ps(u0, u1, 0x31),
        );
        let s = _mm256_mul_ps(s, scalev);
        maxv = _mm256_max_ps(maxv, s);
        _mm256_storeu_ps(scores.as_mut_ptr().add(j), s);
    }
    let m4 = _mm_max_ps(_mm256_castps256_ps128(maxv), _mm256_extractf128_ps(maxv, 1));
    let m2 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    let mut max = _mm_cvtss_f32(_mm_max_ss(m2, _mm_shuffle_ps(m2, m2, 1)));
    for j in full..visible {
        let mut acc = _mm256_setzero_ps();
        for (c, qc) in qv.iter().enumerate() {
            acc = _mm256_fmadd_ps(*qc, _mm256_loadu_ps(kp.add(j * hd + c * 8)), acc);
        }
        let s = hsum(acc) * scale;
        max = max.max(s);
        *scores.get_unchecked_mut(j) = s;
    }
    let inv = 1.0 / exp_sum(scores, max);
    let mut acc = [_mm256_setzero_ps(); L];
    let vp = values.as_ptr();
    for j in 0..visible {
        let w = _mm256_set1_ps(*scores.get_unchecked(j) * inv);
        for (c, a) in acc.iter_mut().enumerate() {
            *a = _mm256_fmadd_ps(w, _mm256_loadu_ps(vp.add(j * hd + c * 8)), *a);
        }
    }
    for (c, a) in acc.iter().enumerate() {
        _mm256_storeu_ps(out.as_mut_ptr().add(c * 8), *a);
    }
}

/// The sum of a register's eight lanes, as both AVX2 kernels reduce a key's score and the
/// softmax sum: `((x0 + x4) + (x2 + x6)) + ((x1 + x5) + (x3 + x7))`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn hsum(v: std::arch::x86_64::__m256) -> f32 {
    use std::arch::x86_64::*;
    let s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)))
}

/// Replace each score (a multiple of eight, padded with −∞) by `exp(score − max)` and return
/// their sum, lane by lane over the blocks of eight, then [`hsum`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn exp_sum(scores: &mut [f32], max: f32) -> f32 {
    use std::arch::x86_64::*;
    let maxv = _mm256_set1_ps(max);
    let mut sumv = _mm256_setzero_ps();
    for c in scores.chunks_exact_mut(8) {
        let e = exp8(_mm256_sub_ps(_mm256_loadu_ps(c.as_ptr()), maxv));
        _mm256_storeu_ps(c.as_mut_ptr(), e);
        sumv = _mm256_add_ps(sumv, e);
    }
    hsum(sumv)
}

/// Query rows sharing a kv head, at most this many per [`attend_rows_avx2`] call.
#[cfg(target_arch = "x86_64")]
const GROUP_ROWS: usize = 3;

/// [`attend_row_avx2`] for `R` query rows of one kv head at once (rows `r` at
/// `q[r * q_stride..][..hd]`, outputs `out[r * hd..][..hd]`, scores in `scores[r]`): every
/// key and value is loaded once for all of them instead of once per row. Each row's
/// arithmetic is the row kernel's operation for operation — the same chain of fused
/// multiply-adds per score and the same reduction trees (the horizontal-add tree in whole
/// blocks of eight keys, the other for the last keys), the same max, exponentials and sum,
/// each output the same chain over the keys in order — so the outputs are bit-for-bit
/// those of [`attend_row_avx2`] (tested), and as batch-invariant.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx2,fma")]
unsafe fn attend_rows_avx2<const L: usize, const R: usize>(
    q: &[f32],
    q_stride: usize,
    keys: &[f32],
    values: &[f32],
    visible: usize,
    scale: f32,
    scores: &mut [Vec<f32>; GROUP_ROWS],
    out: &mut [f32],
) {
    use std::arch::x86_64::*;
    let hd = L * 8;
    let padded = visible.next_multiple_of(8);
    for s in scores.iter_mut().take(R) {
        s.clear();
        s.resize(padded, f32::NEG_INFINITY);
    }
    let qp = q.as_ptr();
    let kp = keys.as_ptr();
    let scalev = _mm256_set1_ps(scale);
    let full = visible / 8 * 8;
    // Scores, four keys at a time for the R rows: each key's accumulator is the chain over
    // the head's chunks, reduced as the row kernel reduces it.
    for j in (0..full).step_by(4) {
        let mut a = [[_mm256_setzero_ps(); 4]; R];
        for c in 0..L {
            let k: [__m256; 4] =
                std::array::from_fn(|i| _mm256_loadu_ps(kp.add((j + i) * hd + c * 8)));
            for (r, ar) in a.iter_mut().enumerate() {
                let qc = _mm256_loadu_ps(qp.add(r * q_stride + c * 8));
                for (ai, ki) in ar.iter_mut().zip(&k) {
                    *ai = _mm256_fmadd_ps(qc, *ki, *ai);
                }
            }
        }
        for (r, ar) in a.iter().enumerate() {
            let t0 = _mm256_hadd_ps(ar[0], ar[1]);
            let t1 = _mm256_hadd_ps(ar[2], ar[3]);
            let u = _mm256_hadd_ps(t0, t1);
            let s4 = _mm_add_ps(_mm256_castps256_ps128(u), _mm256_extractf128_ps(u, 1));
            let s4 = _mm_mul_ps(s4, _mm256_castps256_ps128(scalev));
            _mm_storeu_ps(scores[r].as_mut_ptr().add(j), s4);
        }
    }
    for j in full..visible {
        for (r, sr) in scores.iter_mut().enumerate().take(R) {
            let mut acc = _mm256_setzero_ps();
            for c in 0..L {
                let qc = _mm256_loadu_ps(qp.add(r * q_stride + c * 8));
                acc = _mm256_fmadd_ps(qc, _mm256_loadu_ps(kp.add(j * hd + c * 8)), acc);
            }
            *sr.get_unchecked_mut(j) = hsum(acc) * scale;
        }
    }
    // Softmax per row, then each weight scaled by its row's 1 / sum (as the row kernel
    // scales it when it uses it).
    for sr in scores.iter_mut().take(R) {
        let max = sr[..visible]
            .iter()
            .fold(f32::NEG_INFINITY, |m, &s| m.max(s));
        let inv = 1.0 / exp_sum(sr, max);
        for p in &mut sr[..visible] {
            *p *= inv;
        }
    }
    // Weighted values, four chunks of the head at a time: each output chunk is the chain
    // over the keys in order.
    let vp = values.as_ptr();
    for c0 in (0..L).step_by(4) {
        let mut acc = [[_mm256_setzero_ps(); 4]; R];
        for j in 0..visible {
            let v: [__m256; 4] =
                std::array::from_fn(|c| _mm256_loadu_ps(vp.add(j * hd + (c0 + c) * 8)));
            for (r, ar) in acc.iter_mut().enumerate() {
                let w = _mm256_set1_ps(*scores[r].get_unchecked(j));
                for (ac, vc) in ar.iter_mut().zip(&v) {
                    *ac = _mm256_fmadd_ps(w, *vc, *ac);
                }
            }
        }
        for (r, ar) in acc.iter().enumerate() {
            for (c, ac) in ar.iter().enumerate() {
                _mm256_storeu_ps(out.as_mut_ptr().add(r * hd + (c0 + c) * 8), *ac);
            }
        }
    }
}

/// Whether [`attend_row_avx2`] can run here for head size `hd` (64 or 128).
fn use_avx2(hd: usize) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        (hd == 64 || hd == 128)
            && crate::engine::config::active().kernels != crate::engine::config::Kernels::Portable
            && is_x86_feature_detected!("avx2")
            && is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = hd;
        false
    }
}

/// [`attend_rows_avx2`] for head size `hd` (64 or 128) and `rows` (1 to [`GROUP_ROWS`]).
///
/// # Safety
/// As [`attend_rows_avx2`]: AVX2 + FMA present, `keys`/`values` hold `visible` rows of
/// `hd`, `q` the rows' queries `q_stride` apart, `out` `rows * hd` values.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
unsafe fn attend_rows(
    hd: usize,
    rows: usize,
    q: &[f32],
    q_stride: usize,
    keys: &[f32],
    values: &[f32],
    visible: usize,
    scale: f32,
    scores: &mut [Vec<f32>; GROUP_ROWS],
    out: &mut [f32],
) {
    let f = match (hd, rows) {
        (64, 1) => attend_rows_avx2::<8, 1>,
        (64, 2) => attend_rows_avx2::<8, 2>,
        (64, _) => attend_rows_avx2::<8, 3>,
        (_, 1) => attend_rows_avx2::<16, 1>,
        (_, 2) => attend_rows_avx2::<16, 2>,
        _ => attend_rows_avx2::<16, 3>,
    };
    f(q, q_stride, keys, values, visible, scale, scores, out)
}

/// The AVX2 path of [`CausalAttention`]: one task per (position, kv head, run of up to
/// [`GROUP_ROWS`] of its query heads), each through [`attend_rows_avx2`]; `dims` is
/// `(n_head, n_kv_head, t, hd, capacity)`. Only call where [`use_avx2`] says so.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
fn grouped_rows_avx2(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    (nh, nkv, t, hd, cap): (usize, usize, usize, usize, usize),
    offset: usize,
    window: Option<usize>,
    scale: f32,
    out: &mut [f32],
) {
    let groups = nh / nkv;
    let runs = groups.div_ceil(GROUP_ROWS);
    let out_ptr = SendPtr(out.as_mut_ptr());
    (0..t * nkv * runs).into_par_iter().for_each_init(
        || std::array::from_fn::<Vec<f32>, GROUP_ROWS, _>(|_| Vec::new()),
        |scores, idx| {
            // kv head first, as in `group_tasks`: a thread's range stays on one head's keys.
            let (g, i, run) = (idx / (t * runs), idx / runs % t, idx % runs);
            let h0 = g * groups + run * GROUP_ROWS;
            let rows = GROUP_ROWS.min(g * groups + groups - h0);
            let visible = offset + i + 1;
            let lo = first_visible(visible, window);
            let (a, b) = ((g * cap + lo) * hd, (g * cap + visible) * hd);
            let (keys, values) = (&k[a..b], &v[a..b]);
            let qs = &q[(h0 * t + i) * hd..((h0 + rows - 1) * t + i + 1) * hd];
            let out_ptr = &out_ptr;
            // SAFETY: task (i, g, run) alone writes the outputs of position i's heads
            // h0..h0 + rows, inside `out` (t × nh × hd).
            let o = unsafe {
                std::slice::from_raw_parts_mut(out_ptr.0.add((i * nh + h0) * hd), rows * hd)
            };
            // SAFETY: `use_avx2` checked AVX2 + FMA and that hd is 64 or 128; the key and
            // value slices hold `visible` rows of `hd`, `qs` the rows' queries `t * hd`
            // apart.
            unsafe {
                attend_rows(
                    hd,
                    rows,
                    qs,
                    t * hd,
                    keys,
                    values,
                    visible - lo,
                    scale,
                    scores,
                    o,
                )
            }
        },
    );
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
        let (offset, scale, window) = (self.offset, self.scale, self.window);
        if offset + t > cap {
            candle_core::bail!(
                "attention: {} positions exceed cache capacity {cap}",
                offset + t
            );
        }
        let mut out = vec![0f32; t * nh * hd];
        #[cfg(target_arch = "x86_64")]
        if use_avx2(hd) {
            grouped_rows_avx2(
                q,
                k,
                v,
                (nh, nkv, t, hd, cap),
                offset,
                window,
                scale,
                &mut out,
            );
            return Ok((CpuStorage::F32(out), Shape::from((t, nh * hd))));
        }
        // Rows of the output are [t][nh][hd]; one task per (token, head).
        out.par_chunks_mut(hd).enumerate().for_each_init(
            || Vec::with_capacity(offset + t),
            |scores, (idx, o)| {
                let (i, h) = (idx / nh, idx % nh);
                let g = h / groups;
                let qrow = &q[(h * t + i) * hd..(h * t + i + 1) * hd];
                let visible = offset + i + 1;
                let lo = first_visible(visible, window);
                let (a, b) = ((g * cap + lo) * hd, (g * cap + visible) * hd);
                attend_row(qrow, &k[a..b], &v[a..b], visible - lo, hd, scale, scores, o);
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
    window: Option<usize>,
) -> Result<Tensor> {
    let hd = q.dim(2)?;
    if q.device().is_cpu() {
        let op = CausalAttention {
            offset,
            scale: 1.0 / (hd as f32).sqrt(),
            window,
        };
        return Ok(q.contiguous()?.apply_op3_no_bwd(keys, values, &op)?);
    }
    let (nh, t, _) = q.dims3()?;
    let n = offset + t;
    let out = grouped_attention_reference(
        q,
        &keys.narrow(1, 0, n)?,
        &values.narrow(1, 0, n)?,
        offset,
        window,
    )?;
    Ok(out.transpose(0, 1)?.reshape((t, nh * hd))?)
}

/// Grouped-query causal attention from tensor ops. `q`: `[n_head, t, hd]`; `keys`/`values`:
/// `[n_kv_head, offset + t, hd]`; with a sliding `window`, keys that far back or more are
/// masked. Queries are processed in chunks of [`ATTN_CHUNK`] so only one chunk's scores
/// exist at a time. Returns `[n_head, t, hd]`.
pub fn grouped_attention_reference(
    q: &Tensor,
    keys: &Tensor,
    values: &Tensor,
    offset: usize,
    window: Option<usize>,
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
        let scores = if len > 1 || window.is_some() {
            let mut m = vec![0f32; len * n_keys];
            for i in 0..len {
                let visible = offset + start + i + 1;
                let row = &mut m[i * n_keys..(i + 1) * n_keys];
                let lo = first_visible(visible, window);
                let (before, rest) = row.split_at_mut(lo);
                for x in before.iter_mut().chain(&mut rest[visible - lo..]) {
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
        // hd 16 runs the portable row kernel; 64 and 128 the AVX2 one where the CPU has it.
        for hd in [16, 64, 128] {
            check_kernel(hd);
        }
    }

    #[test]
    fn group_tiles_match_tensor_reference_and_are_batch_invariant() {
        // Groups of 1, 3, 6, 7 (the test models' 3 and 7, Qwen 1.5B's 6) and 12 (> 8 rows
        // per score tile); position counts that end mid-block.
        for (hd, nh, nkv) in [
            (64, 6, 2),
            (128, 12, 2),
            (64, 14, 2),
            (64, 9, 3),
            (64, 3, 3),
        ] {
            for total in [1, 16, 43, 70] {
                for window in WINDOWS {
                    check_group_tiles(hd, nh, nkv, total, window);
                }
            }
        }
        check_group_tiles(64, 12, 1, 37, None);
    }

    /// No window, and sliding windows that end inside, at and past a block of 16 keys.
    const WINDOWS: [Option<usize>; 5] = [None, Some(1), Some(7), Some(16), Some(21)];

    fn check_group_tiles(hd: usize, nh: usize, nkv: usize, total: usize, w: Option<usize>) {
        if !uses_key_blocks(hd) {
            return;
        }
        let d = Device::Cpu;
        let cap = 96;
        let q = Tensor::randn(0f32, 1.0, (nh, total, hd), &d).unwrap();
        let k = Tensor::randn(0f32, 1.0, (nkv, cap, hd), &d).unwrap();
        let v = Tensor::randn(0f32, 1.0, (nkv, cap, hd), &d).unwrap();
        let mut blocks = KeyBlocks::new(nkv, hd);
        // Written in two appends, as a cache would.
        let split = total / 3;
        for (start, len) in [(0, split), (split, total - split)] {
            let part = k.narrow(1, start, len).unwrap().contiguous().unwrap();
            blocks.write(start, &part.flatten_all().unwrap().to_vec1().unwrap(), len);
        }
        let fast = blocked_attention(&q, &blocks, &v, 0, w).unwrap();
        let diff = max_abs_diff(&fast, &reference_rows(&q, &k, &v, total, w));
        assert!(
            diff < 1e-5,
            "hd {hd} heads {nh}/{nkv} positions {total} window {w:?}: {diff}"
        );
        let half = total.div_ceil(2);
        let short = blocks.prefix(half, half);
        check_reuse_invariance(&q, &fast, half, |q, cached, prefix_copy| {
            let b = if prefix_copy { &short } else { &blocks };
            blocked_attention(q, b, &v, cached, w).unwrap()
        });
    }

    #[test]
    fn bf16_group_tiles_match_rounded_reference_and_are_batch_invariant() {
        for (hd, nh, nkv) in [(64, 14, 2), (128, 12, 2), (64, 9, 3), (64, 3, 3)] {
            for total in [1, 16, 43, 70] {
                for window in WINDOWS {
                    check_bf16_tiles(hd, nh, nkv, total, window);
                }
            }
        }
        check_bf16_tiles(64, 12, 1, 37, None);
    }

    fn check_bf16_tiles(hd: usize, nh: usize, nkv: usize, total: usize, w: Option<usize>) {
        if !uses_bf16_blocks(hd) {
            return;
        }
        let d = Device::Cpu;
        let round = |t: Tensor| {
            t.to_dtype(candle_core::DType::BF16)
                .unwrap()
                .to_dtype(candle_core::DType::F32)
                .unwrap()
        };
        let q = round(Tensor::randn(0f32, 1.0, (nh, total, hd), &d).unwrap());
        let k = round(Tensor::randn(0f32, 1.0, (nkv, total, hd), &d).unwrap());
        let v = round(Tensor::randn(0f32, 1.0, (nkv, total, hd), &d).unwrap());
        let mut blocks = KvBlocks16::new(nkv, hd);
        // Written in two appends, as a cache would.
        let split = total / 3;
        for (start, len) in [(0, split), (split, total - split)] {
            let part = |t: &Tensor| -> Vec<f32> {
                t.narrow(1, start, len)
                    .unwrap()
                    .contiguous()
                    .unwrap()
                    .flatten_all()
                    .unwrap()
                    .to_vec1()
                    .unwrap()
            };
            blocks.write(start, &part(&k), &part(&v), len);
        }
        let fast = blocked_attention_bf16(&q, &blocks, 0, w).unwrap();
        // Queries, keys and values are bf16 values already; the kernel also rounds the
        // probabilities to bf16 (relative error 2⁻⁹), so outputs of size ~1 agree to ~1e-2.
        let diff = max_abs_diff(&fast, &reference_rows(&q, &k, &v, total, w));
        assert!(
            diff < 2e-2,
            "hd {hd} heads {nh}/{nkv} positions {total} window {w:?}: {diff}"
        );
        let half = total.div_ceil(2);
        let short = blocks.prefix(half, half);
        check_reuse_invariance(&q, &fast, half, |q, cached, prefix_copy| {
            let b = if prefix_copy { &short } else { &blocks };
            blocked_attention_bf16(q, b, cached, w).unwrap()
        });
    }

    /// Every split of `q`'s positions into cached positions + new rows gives the rows of
    /// `fast` (all positions in one call) bit for bit, and so does a prefix copy of the cache
    /// (`attend(q_rows, cached, true)`) for the first `half` positions.
    fn check_reuse_invariance(
        q: &Tensor,
        fast: &Tensor,
        half: usize,
        attend: impl Fn(&Tensor, usize, bool) -> Tensor,
    ) {
        let total = q.dim(1).unwrap();
        for cached in [0, 1, total / 2, total - 1] {
            let rows = total - cached;
            let tail = attend(&q.narrow(1, cached, rows).unwrap(), cached, false);
            assert_eq!(
                flat(&tail),
                flat(&fast.narrow(0, cached, rows).unwrap()),
                "{:?}: rows after {cached} cached positions differ",
                q.shape()
            );
        }
        let short = attend(&q.narrow(1, 0, half).unwrap(), 0, true);
        assert_eq!(flat(&short), flat(&fast.narrow(0, 0, half).unwrap()));
    }

    /// The tensor-op reference as `[total, n_head * hd]` rows.
    fn reference_rows(
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        total: usize,
        window: Option<usize>,
    ) -> Tensor {
        let (nh, _, hd) = q.dims3().unwrap();
        grouped_attention_reference(
            q,
            &k.narrow(1, 0, total).unwrap(),
            &v.narrow(1, 0, total).unwrap(),
            0,
            window,
        )
        .unwrap()
        .transpose(0, 1)
        .unwrap()
        .reshape((total, nh * hd))
        .unwrap()
    }

    fn max_abs_diff(a: &Tensor, b: &Tensor) -> f32 {
        (a - b)
            .unwrap()
            .abs()
            .unwrap()
            .max_all()
            .unwrap()
            .to_scalar::<f32>()
            .unwrap()
    }

    fn flat(t: &Tensor) -> Vec<f32> {
        t.flatten_all().unwrap().to_vec1().unwrap()
    }

    /// The AVX2 kernel for one to three rows gives each row bit for bit what the one-row
    /// kernel gives it, for key counts that end inside and on a block of eight.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn grouped_rows_equal_the_row_kernel_bit_for_bit() {
        if !use_avx2(64) {
            return;
        }
        let d = Device::Cpu;
        for hd in [64, 128] {
            for visible in [1, 3, 7, 8, 9, 16, 43, 100] {
                let q = flat(&Tensor::randn(0f32, 1.0, (3, hd), &d).unwrap());
                let k = flat(&Tensor::randn(0f32, 1.0, (visible, hd), &d).unwrap());
                let v = flat(&Tensor::randn(0f32, 1.0, (visible, hd), &d).unwrap());
                let mut one = vec![0f32; 3 * hd];
                let mut scores = Vec::new();
                for (r, o) in one.chunks_mut(hd).enumerate() {
                    let qr = &q[r * hd..(r + 1) * hd];
                    // SAFETY: AVX2 + FMA checked above; slices of `visible` rows of `hd`.
                    unsafe {
                        match hd {
                            64 => attend_row_avx2::<8>(qr, &k, &v, visible, 0.125, &mut scores, o),
                            _ => attend_row_avx2::<16>(qr, &k, &v, visible, 0.125, &mut scores, o),
                        }
                    }
                }
                for rows in 1..=GROUP_ROWS {
                    let mut out = vec![0f32; rows * hd];
                    let mut s = std::array::from_fn(|_| Vec::new());
                    let qs = &q[..rows * hd];
                    // SAFETY: as above; row r's query at r * hd.
                    unsafe {
                        attend_rows(hd, rows, qs, hd, &k, &v, visible, 0.125, &mut s, &mut out)
                    };
                    assert_eq!(
                        out,
                        one[..rows * hd],
                        "hd {hd}, {visible} keys, {rows} rows"
                    );
                }
            }
        }
    }

    fn check_kernel(hd: usize) {
        // Groups of 3, 7 (runs of 3, 3, 1), 1 and 5 (3, 2) query heads per kv head.
        for (nh, nkv) in [(6, 2), (7, 1), (4, 4), (10, 2)] {
            check_kernel_shape(hd, nh, nkv);
        }
    }

    fn check_kernel_shape(hd: usize, nh: usize, nkv: usize) {
        let d = Device::Cpu;
        let cap = 64;
        let total = 43;
        let q = Tensor::randn(0f32, 1.0, (nh, total, hd), &d).unwrap();
        let k = Tensor::randn(0f32, 1.0, (nkv, cap, hd), &d).unwrap();
        let v = Tensor::randn(0f32, 1.0, (nkv, cap, hd), &d).unwrap();
        for w in WINDOWS {
            let fast = causal_attention(&q, &k, &v, 0, w).unwrap();
            let diff = max_abs_diff(&fast, &reference_rows(&q, &k, &v, total, w));
            assert!(diff < 1e-5, "hd {hd} heads {nh}/{nkv} window {w:?}: {diff}");
            // The last 15 rows computed after 25 cached positions are bit-identical.
            let tail = causal_attention(&q.narrow(1, 25, 15).unwrap(), &k, &v, 25, w).unwrap();
            assert_eq!(flat(&tail), flat(&fast.narrow(0, 25, 15).unwrap()));
        }
    }
}
