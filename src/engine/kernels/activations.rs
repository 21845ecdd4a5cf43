//! Activations quantized to 8 bits for the integer dot products.
//!
//! Each row is cut into blocks of 32 values, each block gets its own f32 scale
//! `d = max|x| / 127` and values `q = round(x / d)` in −127..=127 — per row and per block,
//! so a row's numbers never depend on the other rows of the batch (the property that makes
//! a cached prefix exact). Per block the quantizer also stores what the kernels need
//! besides the values: the negated sums of each group of four values (to subtract a
//! format's integer offset inside the integer dot product) and `d · Σq` (for formats with a
//! minimum). With AVX-512 the block quantizers run sixteen values at a time (the private
//! `simd` module below), bit-identical to the scalar ones.

use super::formats::{min_len, BLOCK, LANES};
#[cfg(target_arch = "x86_64")]
use super::isa::Isa;
use rayon::prelude::*;

/// `round(v · inv)` clamped to ±127 (half away from zero, without a libm call).
#[inline]
fn quantize_one(v: f32, inv: f32) -> i8 {
    let x = (v * inv).clamp(-127.0, 127.0);
    (x + 0.5f32.copysign(x)) as i8
}

/// Rows per parallel task when quantizing (small batches stay on one thread).
const ROWS_PER_TASK: usize = 16;

/// `m` rows of `k` activations, quantized per 32-value block.
#[derive(Debug, Clone)]
pub struct QuantizedRows {
    /// Rows.
    pub m: usize,
    /// Values per row (a multiple of 32).
    pub k: usize,
    /// `m × k` quantized values.
    pub qs: Vec<i8>,
    /// `m × k/32` block scales.
    pub d: Vec<f32>,
    /// `m × k/32 × 8` negated sums of each group of four values.
    pub neg_lane_sums: Vec<i32>,
    /// `m × k/32` products `d · Σq` per block.
    pub block_sums: Vec<f32>,
}

impl QuantizedRows {
    /// Quantize `x` (`m × k`, row-major).
    pub fn quantize(x: &[f32], m: usize, k: usize) -> Self {
        assert_eq!(x.len(), m * k, "activation buffer is not m × k");
        assert!(
            k.is_multiple_of(BLOCK),
            "row length {k} is not a multiple of {BLOCK}"
        );
        let nb = m * k / BLOCK;
        let mut out = Self {
            m,
            k,
            qs: vec![0; m * k],
            d: vec![0.0; nb],
            neg_lane_sums: vec![0; nb * LANES],
            block_sums: vec![0.0; nb],
        };
        let nbr = k / BLOCK;
        x.par_chunks(k * ROWS_PER_TASK)
            .zip(out.qs.par_chunks_mut(k * ROWS_PER_TASK))
            .zip(out.d.par_chunks_mut(nbr * ROWS_PER_TASK))
            .zip(
                out.neg_lane_sums
                    .par_chunks_mut(nbr * LANES * ROWS_PER_TASK),
            )
            .zip(out.block_sums.par_chunks_mut(nbr * ROWS_PER_TASK))
            .for_each(|((((x, qs), ds), nls), bsums)| {
                for (b, (xb, qb)) in x
                    .chunks_exact(BLOCK)
                    .zip(qs.chunks_exact_mut(BLOCK))
                    .enumerate()
                {
                    let (d, total) = quantize_block(xb, qb, &mut nls[b * LANES..(b + 1) * LANES]);
                    ds[b] = d;
                    bsums[b] = d * total as f32;
                }
            });
        out
    }

    /// Blocks per row.
    pub fn blocks_per_row(&self) -> usize {
        self.k / BLOCK
    }
}

/// Quantize one 32-value block: values into `qs`, the negated sum of every 4 into
/// `neg_lane_sums`; returns the scale and the sum of the values. With AVX-512 sixteen
/// values at a time ([`simd::quantize_block`], bit-identical, tested).
fn quantize_block(x: &[f32], qs: &mut [i8], neg_lane_sums: &mut [i32]) -> (f32, i32) {
    #[cfg(target_arch = "x86_64")]
    if Isa::detect() == Isa::Vnni {
        // SAFETY: the Vnni path implies AVX-512 F, BW and AVX2; the slices hold 32, 32, 8.
        return unsafe { simd::quantize_block(x, qs, neg_lane_sums) };
    }
    quantize_block_scalar(x, qs, neg_lane_sums)
}

/// [`quantize_block`] in plain Rust (the reference).
pub fn quantize_block_scalar(x: &[f32], qs: &mut [i8], neg_lane_sums: &mut [i32]) -> (f32, i32) {
    let amax = x.iter().fold(0.0f32, |a, v| a.max(v.abs()));
    let d = amax / 127.0;
    let inv = if d > 0.0 { 1.0 / d } else { 0.0 };
    let mut total = 0i32;
    for (lane, (xl, ql)) in x.chunks_exact(4).zip(qs.chunks_exact_mut(4)).enumerate() {
        let mut sum = 0i32;
        for (v, q) in xl.iter().zip(ql.iter_mut()) {
            *q = quantize_one(*v, inv);
            sum += *q as i32;
        }
        neg_lane_sums[lane] = -sum;
        total += sum;
    }
    (d, total)
}

/// Quantize one 256-value block: values into `qs`, the sum of every 16 into `gsums`;
/// returns the scale. With AVX-512 the same arithmetic runs 16 values at a time
/// ([`simd::quantize_k_block`], bit-identical, tested).
fn quantize_k_block(x: &[f32], qs: &mut [i8], gsums: &mut [i16]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if Isa::detect() == Isa::Vnni {
        // SAFETY: the Vnni path implies AVX-512 F and BW; the slices hold 256, 256 and 16.
        return unsafe { simd::quantize_k_block(x, qs, gsums) };
    }
    quantize_k_block_scalar(x, qs, gsums)
}

/// [`quantize_k_block`] in plain Rust (the reference).
pub fn quantize_k_block_scalar(x: &[f32], qs: &mut [i8], gsums: &mut [i16]) -> f32 {
    let amax = x.iter().fold(0.0f32, |a, v| a.max(v.abs()));
    let d = amax / 127.0;
    let inv = if d > 0.0 { 1.0 / d } else { 0.0 };
    for (g, (xg, qg)) in x.chunks_exact(16).zip(qs.chunks_exact_mut(16)).enumerate() {
        let mut sum = 0i16;
        for (v, q) in xg.iter().zip(qg.iter_mut()) {
            *q = quantize_one(*v, inv);
            sum += *q as i16;
        }
        gsums[g] = sum;
    }
    d
}

/// `m` rows of `k` activations quantized per 256 values, for K-quant weights: one f32
/// scale per 256 values (so a whole super-block's integer sums can be added up before any
/// float work), the sum of every 16 values, and the scaled sum of every 32 (the
/// activations' side of Q4_K's minimum term, see [`min_len`]).
///
/// [`min_len`]: super::formats::min_len
#[derive(Debug, Clone)]
pub struct QuantizedRowsK {
    /// Rows.
    pub m: usize,
    /// Values per row (a multiple of 256).
    pub k: usize,
    /// `m × k` quantized values.
    pub qs: Vec<i8>,
    /// `m × k/256` scales.
    pub d: Vec<f32>,
    /// `m × k/16` sums of each group of 16 values.
    pub group_sums: Vec<i16>,
    /// `m × min_len(k)`: `d · Σ q` of each 32-value block, then zeros.
    pub block_sums: Vec<f32>,
}

impl QuantizedRowsK {
    /// Quantize `x` (`m × k`, row-major).
    pub fn quantize(x: &[f32], m: usize, k: usize) -> Self {
        assert_eq!(x.len(), m * k, "activation buffer is not m × k");
        assert!(
            k.is_multiple_of(256),
            "row length {k} is not a multiple of 256"
        );
        let mut out = Self {
            m,
            k,
            qs: vec![0; m * k],
            d: vec![0.0; m * k / 256],
            group_sums: vec![0; m * k / 16],
            block_sums: vec![0.0; m * min_len(k)],
        };
        let ml = min_len(k);
        x.par_chunks(k * ROWS_PER_TASK)
            .zip(out.qs.par_chunks_mut(k * ROWS_PER_TASK))
            .zip(out.d.par_chunks_mut(k / 256 * ROWS_PER_TASK))
            .zip(out.group_sums.par_chunks_mut(k / 16 * ROWS_PER_TASK))
            .zip(out.block_sums.par_chunks_mut(ml * ROWS_PER_TASK))
            .for_each(|((((x, qs), ds), gsums), bsums)| {
                for (b, (xb, qb)) in x
                    .chunks_exact(256)
                    .zip(qs.chunks_exact_mut(256))
                    .enumerate()
                {
                    let d = quantize_k_block(xb, qb, &mut gsums[b * 16..b * 16 + 16]);
                    ds[b] = d;
                    // Row `b / nsb`, super-block `b % nsb`.
                    let (row, sb) = (b / (k / 256), b % (k / 256));
                    for l in 0..8 {
                        let pair = gsums[b * 16 + 2 * l] as i32 + gsums[b * 16 + 2 * l + 1] as i32;
                        bsums[row * ml + sb * 8 + l] = d * pair as f32;
                    }
                }
            });
        out
    }
}

/// The block quantizers on AVX-512: the arithmetic of the scalar ones sixteen values at a
/// time, so the same bits (tested below).
#[cfg(target_arch = "x86_64")]
// `g` indexes the loads, the stores and the sums together.
#[allow(clippy::needless_range_loop)]
mod simd {
    use std::arch::x86_64::*;

    /// [`super::quantize_k_block_scalar`] sixteen values at a time: the same
    /// maximum, scale, clamp, round-half-away-from-zero and truncation, so the same bits.
    ///
    /// # Safety
    /// The CPU must have AVX-512 F and BW; `x` and `qs` must hold 256 values, `gsums` 16.
    #[target_feature(enable = "avx512f,avx512bw")]
    pub unsafe fn quantize_k_block(x: &[f32], qs: &mut [i8], gsums: &mut [i16]) -> f32 {
        debug_assert!(x.len() >= 256 && qs.len() >= 256 && gsums.len() >= 16);
        let xp = x.as_ptr();
        let mut m = _mm512_setzero_ps();
        for g in 0..16 {
            m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_loadu_ps(xp.add(g * 16))));
        }
        let d = _mm512_reduce_max_ps(m) / 127.0;
        let inv = _mm512_set1_ps(if d > 0.0 { 1.0 / d } else { 0.0 });
        let (lo, hi) = (_mm512_set1_ps(-127.0), _mm512_set1_ps(127.0));
        let (half, sign) = (_mm512_set1_ps(0.5), _mm512_set1_ps(-0.0));
        for g in 0..16 {
            let v = _mm512_mul_ps(_mm512_loadu_ps(xp.add(g * 16)), inv);
            let v = _mm512_min_ps(_mm512_max_ps(v, lo), hi);
            // copysign(0.5, v) with integer bit operations (AVX-512 F only).
            let bits = _mm512_and_si512(_mm512_castps_si512(v), _mm512_castps_si512(sign));
            let r = _mm512_add_ps(
                v,
                _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(half), bits)),
            );
            let q = _mm512_cvttps_epi32(r);
            _mm_storeu_si128(
                qs.as_mut_ptr().add(g * 16) as *mut __m128i,
                _mm512_cvtepi32_epi8(q),
            );
            gsums[g] = _mm512_reduce_add_epi32(q) as i16;
        }
        d
    }

    /// [`super::quantize_block_scalar`] sixteen values at a time (the same
    /// arithmetic as [`quantize_k_block`]); the sums of 4 come from `vpmaddubsw`/`vpmaddwd`
    /// on the stored bytes (exact integers).
    ///
    /// # Safety
    /// The CPU must have AVX-512 F and BW and AVX2; `x` and `qs` must hold 32 values,
    /// `neg_lane_sums` 8.
    #[target_feature(enable = "avx2,avx512f,avx512bw")]
    pub unsafe fn quantize_block(
        x: &[f32],
        qs: &mut [i8],
        neg_lane_sums: &mut [i32],
    ) -> (f32, i32) {
        debug_assert!(x.len() >= 32 && qs.len() >= 32 && neg_lane_sums.len() >= 8);
        let xp = x.as_ptr();
        let (a, b) = (_mm512_loadu_ps(xp), _mm512_loadu_ps(xp.add(16)));
        let d = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(a), _mm512_abs_ps(b))) / 127.0;
        let inv = _mm512_set1_ps(if d > 0.0 { 1.0 / d } else { 0.0 });
        let (lo, hi) = (_mm512_set1_ps(-127.0), _mm512_set1_ps(127.0));
        let (half, sign) = (_mm512_set1_epi32(0x3f00_0000), _mm512_set1_epi32(i32::MIN));
        for (h, v) in [a, b].into_iter().enumerate() {
            let v = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(v, inv), lo), hi);
            let half = _mm512_or_si512(half, _mm512_and_si512(_mm512_castps_si512(v), sign));
            let q = _mm512_cvttps_epi32(_mm512_add_ps(v, _mm512_castsi512_ps(half)));
            _mm_storeu_si128(
                qs.as_mut_ptr().add(h * 16) as *mut __m128i,
                _mm512_cvtepi32_epi8(q),
            );
        }
        let q = _mm256_loadu_si256(qs.as_ptr() as *const __m256i);
        let pairs = _mm256_maddubs_epi16(_mm256_set1_epi8(1), q);
        let fours = _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
        _mm256_storeu_si256(
            neg_lane_sums.as_mut_ptr() as *mut __m256i,
            _mm256_sub_epi32(_mm256_setzero_si256(), fours),
        );
        let s4 = _mm_add_epi32(
            _mm256_castsi256_si128(fours),
            _mm256_extracti128_si256(fours, 1),
        );
        let s2 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0b01_00_11_10));
        let s1 = _mm_add_epi32(s2, _mm_shuffle_epi32(s2, 0b10_11_00_01));
        (d, _mm_cvtsi128_si32(s1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantization_is_per_row_and_close() {
        let k = 64;
        let x: Vec<f32> = (0..2 * k)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0)
            .collect();
        let both = QuantizedRows::quantize(&x, 2, k);
        let second = QuantizedRows::quantize(&x[k..], 1, k);
        assert_eq!(&both.qs[k..], &second.qs[..]);
        assert_eq!(&both.d[2..], &second.d[..]);
        for (i, v) in x.iter().enumerate() {
            let back = both.qs[i] as f32 * both.d[i / BLOCK];
            assert!((back - v).abs() <= both.d[i / BLOCK] * 0.5 + 1e-6);
        }
        let lanes: i32 = both.neg_lane_sums[..LANES].iter().sum();
        let direct: i32 = both.qs[..BLOCK].iter().map(|&q| q as i32).sum();
        assert_eq!(-lanes, direct);
    }

    #[test]
    fn blocks_quantize_alike_in_every_path() {
        let mut state = 0x2545_F491_4F6C_DD1Du64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        };
        for case in 0..200 {
            let scale = [1e-3f32, 1.0, 37.0, 1e4][case % 4];
            let mut x: Vec<f32> = (0..256).map(|_| next() * scale).collect();
            if case % 5 == 0 {
                x[7] = 0.0;
                x[8] = -0.0;
                x[9] = -x[10].abs().max(1e-3) * 3.0; // the block's extreme, negative
            }
            if case == 3 {
                x.fill(0.0);
            }
            for blk in 0..8 {
                let xs = &x[blk * 32..blk * 32 + 32];
                let (mut qa, mut la) = ([0i8; 32], [0i32; 8]);
                let (mut qb, mut lb) = ([0i8; 32], [0i32; 8]);
                let a = quantize_block_scalar(xs, &mut qa, &mut la);
                let b = quantize_block(xs, &mut qb, &mut lb);
                assert_eq!((a.0.to_bits(), a.1), (b.0.to_bits(), b.1), "case {case}");
                assert_eq!((qa, la), (qb, lb), "case {case}");
            }
            let (mut qa, mut ga) = ([0i8; 256], [0i16; 16]);
            let (mut qb, mut gb) = ([0i8; 256], [0i16; 16]);
            let da = quantize_k_block_scalar(&x, &mut qa, &mut ga);
            let db = quantize_k_block(&x, &mut qb, &mut gb);
            assert_eq!(da.to_bits(), db.to_bits(), "case {case}");
            assert_eq!(qa, qb, "case {case}");
            assert_eq!(ga, gb, "case {case}");
        }
    }

    #[test]
    fn zero_block_quantizes_to_zero() {
        let q = QuantizedRows::quantize(&[0.0; 32], 1, 32);
        assert!(q.qs.iter().all(|&v| v == 0));
        assert_eq!(q.d[0], 0.0);
    }
}
