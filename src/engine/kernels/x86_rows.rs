//! One activation row (decoding) times many consecutive weight rows of a 32-weight format
//! (Q4_0, Q4_1, Q5_0, Q8_0), decoding the weights in registers: the path that streams a
//! decode step's matrices — above all a large output projection such as Gemma 3's
//! 262,144 × 640 Q8_0 table — from memory.
//!
//! What makes it faster than a call per weight row ([`super::x86::gemv_blocks_vnni`]):
//!
//! * one call per thread, monomorphised per format (no format tests in the inner loop);
//! * `R` weight rows at a time, so each load of the activations (values, offset
//!   corrections, scales) serves `R` rows, and `R` independent accumulator chains keep
//!   the multiply-add units busy;
//! * two blocks per 512-bit register (AVX-512: the register's low and high halves are the
//!   even- and odd-block accumulators of the lane order, as in [`super::x86::tile_zmm`]);
//! * each weight row's f16 block scales read eight at a time through the integer
//!   registers and converted and multiplied by the activations' scales together, instead
//!   of one scalar conversion per block;
//! * the horizontal sums of four rows done together in the lanes of one register
//!   ([`reduce4`]), in exactly the order of [`super::portable::hsum`].
//!
//! The arithmetic of each output is that of [`super::portable::tile`] — the same exact
//! integer per lane and block, the same `fma(i, d_w · d_x, acc)` into the even- or
//! odd-block accumulator, the same horizontal sum, then Q4_1's minimum term — so the
//! results are bit-identical to every other path for the same row (tested).

#![allow(clippy::missing_safety_doc, clippy::needless_range_loop)]

use super::activations::{QuantizedRows, QuantizedRowsK};
use super::formats::{Format, BLOCK, LANES};
use std::arch::x86_64::*;

/// A 32-weight block format, as compile-time constants.
trait Blocks {
    /// Bytes per block.
    const BB: usize;
    /// The format.
    const FORMAT: Format;
}

struct Q40;
struct Q41;
struct Q50;
struct Q80;

impl Blocks for Q40 {
    const BB: usize = 18;
    const FORMAT: Format = Format::Q4_0;
}
impl Blocks for Q41 {
    const BB: usize = 20;
    const FORMAT: Format = Format::Q4_1;
}
impl Blocks for Q50 {
    const BB: usize = 22;
    const FORMAT: Format = Format::Q5_0;
}
impl Blocks for Q80 {
    const BB: usize = 34;
    const FORMAT: Format = Format::Q8_0;
}

/// One activation row in the form the row kernels read, padded so that the last pair of
/// blocks can be read whole: values (zero past the row), the offset corrections `o · (−Σq)`
/// per lane (zero past the row), and the block scales (zero past the row, to a multiple of
/// 16 blocks).
struct Plan {
    nb: usize,
    qs: Vec<i8>,
    corr: Vec<i32>,
    dx: Vec<f32>,
    block_sums: Vec<f32>,
}

impl Plan {
    fn new(x: &QuantizedRows, row: usize, o: u32) -> Self {
        let (k, nb) = (x.k, x.blocks_per_row());
        let nb2 = nb.next_multiple_of(16);
        let mut qs = vec![0i8; nb2 * BLOCK];
        qs[..k].copy_from_slice(&x.qs[row * k..(row + 1) * k]);
        let mut corr = vec![0i32; nb2 * LANES];
        for (c, s) in corr
            .iter_mut()
            .zip(&x.neg_lane_sums[row * nb * LANES..(row + 1) * nb * LANES])
        {
            *c = if o == 0 { 0 } else { s << o.trailing_zeros() };
        }
        let mut dx = vec![0.0f32; nb2];
        dx[..nb].copy_from_slice(&x.d[row * nb..(row + 1) * nb]);
        let block_sums = x.block_sums[row * nb..(row + 1) * nb].to_vec();
        Self {
            nb,
            qs,
            corr,
            dx,
            block_sums,
        }
    }
}

/// The f16 scales of blocks `b..b + 8` of the row at `p` (0 for blocks at or past `nb`),
/// gathered through the integer registers.
#[inline(always)]
unsafe fn scales8<F: Blocks>(p: *const u8, b: usize, nb: usize) -> __m128i {
    let full = b + 8 <= nb;
    let ld = |i: usize| -> u64 {
        if full || b + i < nb {
            (p.add((b + i) * F::BB) as *const u16).read_unaligned() as u64
        } else {
            0
        }
    };
    let lo = ld(0) | ld(1) << 16 | ld(2) << 32 | ld(3) << 48;
    let hi = ld(4) | ld(5) << 16 | ld(6) << 32 | ld(7) << 48;
    _mm_set_epi64x(hi as i64, lo as i64)
}

/// `sd[b] = d_w[b] · d_x[b]` for every block of the row at `p` (padding blocks get 0), and
/// for Q4_1 the minimum term `Σ_b t[b] · block_sums[b]` in block order (as
/// [`super::portable::min_term`]).
#[inline(always)]
unsafe fn row_scales<F: Blocks>(p: *const u8, plan: &Plan, sd: &mut [f32]) -> f32 {
    let nb = plan.nb;
    for b in (0..nb).step_by(8) {
        let d = _mm256_cvtph_ps(scales8::<F>(p, b, nb));
        let v = _mm256_mul_ps(d, _mm256_loadu_ps(plan.dx.as_ptr().add(b)));
        _mm256_storeu_ps(sd.as_mut_ptr().add(b), v);
    }
    let mut tt = 0.0f32;
    if F::FORMAT == Format::Q4_1 {
        for b in 0..nb {
            let bits = (p.add(b * F::BB + 2) as *const u16).read_unaligned();
            let t = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)));
            tt = t.mul_add(*plan.block_sums.get_unchecked(b), tt);
        }
    }
    tt
}

/// Sixteen packed bytes at `p` and at `p + BB` → the two blocks' 64 unsigned 4-bit values
/// (each block: low nibbles, then high nibbles, as [`super::x86::decode_row`] lays them).
#[inline(always)]
unsafe fn nibbles_pair<F: Blocks>(p: *const u8) -> __m512i {
    let v = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128(p as *const __m128i)),
        _mm_loadu_si128(p.add(F::BB) as *const __m128i),
        1,
    );
    let z = _mm512_permutexvar_epi64(
        _mm512_setr_epi64(0, 1, 0, 1, 2, 3, 2, 3),
        _mm512_castsi256_si512(v),
    );
    let shifts = _mm512_setr_epi64(
        0,
        0,
        0x0004_0004_0004_0004,
        0x0004_0004_0004_0004,
        0,
        0,
        0x0004_0004_0004_0004,
        0x0004_0004_0004_0004,
    );
    _mm512_and_si512(_mm512_srlv_epi16(z, shifts), _mm512_set1_epi8(0x0F))
}

/// The unsigned values `u` of blocks `b` (low half) and `b + 1` (high half) of the row at
/// `p`. `half`: only block `b` exists (the high half is zero).
#[inline(always)]
unsafe fn u_pair<F: Blocks>(p: *const u8, b: usize, half: bool) -> __m512i {
    let blk = p.add(b * F::BB);
    match F::FORMAT {
        Format::Q8_0 => {
            let lo = _mm256_loadu_si256(blk.add(2) as *const __m256i);
            let z = if half {
                _mm512_castsi256_si512(lo)
            } else {
                _mm512_inserti64x4(
                    _mm512_castsi256_si512(lo),
                    _mm256_loadu_si256(blk.add(F::BB + 2) as *const __m256i),
                    1,
                )
            };
            let z = _mm512_xor_si512(z, _mm512_set1_epi8(-128));
            if half {
                _mm512_zextsi256_si512(_mm512_castsi512_si256(z))
            } else {
                z
            }
        }
        _ => {
            let qoff = match F::FORMAT {
                Format::Q4_0 => 2,
                Format::Q4_1 => 4,
                _ => 6,
            };
            let z = if half {
                let v = _mm_loadu_si128(blk.add(qoff) as *const __m128i);
                let m = _mm_set1_epi8(0x0F);
                let lo = _mm_and_si128(v, m);
                let hi = _mm_and_si128(_mm_srli_epi16(v, 4), m);
                _mm512_zextsi256_si512(_mm256_set_m128i(hi, lo))
            } else {
                nibbles_pair::<F>(blk.add(qoff))
            };
            if F::FORMAT == Format::Q5_0 {
                let h0 = (blk.add(2) as *const u32).read_unaligned() as u64;
                let h1 = if half {
                    0
                } else {
                    (blk.add(F::BB + 2) as *const u32).read_unaligned() as u64
                };
                _mm512_mask_add_epi8(z, h0 | h1 << 32, z, _mm512_set1_epi8(0x10))
            } else {
                z
            }
        }
    }
}

/// The horizontal sums of four rows' accumulators (low half: even blocks, high half: odd
/// blocks), each in the order of [`super::portable::hsum`] applied to the halves' lane-wise
/// sum, computed together: lane `r` of the result is row `r`'s sum.
#[inline(always)]
unsafe fn reduce4(z: [__m512; 4]) -> __m128 {
    // a_r = even + odd, lane by lane: chunks [a0[0..4], a0[4..8], a1[0..4], a1[4..8]].
    let s01 = _mm512_add_ps(
        _mm512_shuffle_f32x4(z[0], z[1], 0x44),
        _mm512_shuffle_f32x4(z[0], z[1], 0xEE),
    );
    let s23 = _mm512_add_ps(
        _mm512_shuffle_f32x4(z[2], z[3], 0x44),
        _mm512_shuffle_f32x4(z[2], z[3], 0xEE),
    );
    // h_r = a_r[0..4] + a_r[4..8]: chunk r = [h0, h1, h2, h3] of row r.
    let h = _mm512_add_ps(
        _mm512_shuffle_f32x4(s01, s23, 0x88),
        _mm512_shuffle_f32x4(s01, s23, 0xDD),
    );
    // [h0 + h2, h1 + h3, ..] then (h0 + h2) + (h1 + h3) in each chunk's lane 0.
    let g = _mm512_add_ps(h, _mm512_shuffle_ps(h, h, 0x4E));
    let f = _mm512_add_ps(g, _mm512_movehdup_ps(g));
    _mm512_castps512_ps128(_mm512_permutexvar_ps(
        _mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
        f,
    ))
}

/// Blocks `b` and `b + 1` (only `b` where `HALF`) of `R` rows into their accumulators.
#[inline(always)]
unsafe fn pair_zmm<F: Blocks, const R: usize, const HALF: bool>(
    p: *const u8,
    row_bytes: usize,
    plan: &Plan,
    sd: &[f32],
    b: usize,
    acc: &mut [__m512; R],
) {
    let stride = plan.dx.len();
    let halves = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    let q = _mm512_loadu_si512(plan.qs.as_ptr().add(b * BLOCK) as *const _);
    let c = _mm512_loadu_si512(plan.corr.as_ptr().add(b * LANES) as *const _);
    for r in 0..R {
        let u = u_pair::<F>(p.add(r * row_bytes), b, HALF);
        let i = _mm512_dpbusd_epi32(c, u, q);
        let s2 = _mm_castpd_ps(_mm_load_sd(sd.as_ptr().add(r * stride + b) as *const f64));
        let s = _mm512_permutexvar_ps(halves, _mm512_castps128_ps512(s2));
        let f = _mm512_cvtepi32_ps(i);
        acc[r] = if HALF {
            _mm512_mask3_fmadd_ps(f, s, acc[r], 0x00FF)
        } else {
            _mm512_fmadd_ps(f, s, acc[r])
        };
    }
}

/// `R` (1–4) consecutive weight rows starting at `p` (rows `row_bytes` apart) times the
/// planned activation row; `sd` is scratch for `R` rows' block scales.
#[inline(always)]
unsafe fn rows_zmm<F: Blocks, const R: usize>(
    p: *const u8,
    row_bytes: usize,
    plan: &Plan,
    sd: &mut [f32],
    out: *mut f32,
) {
    let nb = plan.nb;
    let stride = plan.dx.len();
    let mut tt = [0.0f32; R];
    for r in 0..R {
        tt[r] = row_scales::<F>(p.add(r * row_bytes), plan, &mut sd[r * stride..]);
    }
    let mut acc = [_mm512_setzero_ps(); R];
    for b in (0..nb & !1).step_by(2) {
        pair_zmm::<F, R, false>(p, row_bytes, plan, sd, b, &mut acc);
    }
    if nb % 2 == 1 {
        pair_zmm::<F, R, true>(p, row_bytes, plan, sd, nb - 1, &mut acc);
    }
    let mut y = [0.0f32; 8];
    for g in 0..R.div_ceil(4) {
        let sums = reduce4(std::array::from_fn(|r| {
            if 4 * g + r < R {
                acc[4 * g + r]
            } else {
                _mm512_setzero_ps()
            }
        }));
        _mm_storeu_ps(y.as_mut_ptr().add(4 * g), sums);
    }
    for r in 0..R {
        let mut v = y[r];
        if F::FORMAT == Format::Q4_1 {
            v += tt[r];
        }
        *out.add(r) = v;
    }
}

/// Weight rows in `bytes` (whole rows of `row_bytes`) times activation row `row` of `x`,
/// `out[i]` for row `i`: four rows at a time, then the rest.
#[inline(always)]
unsafe fn gemv_rows_zmm<F: Blocks>(
    bytes: &[u8],
    row_bytes: usize,
    x: &QuantizedRows,
    row: usize,
    out: &mut [f32],
) {
    let plan = Plan::new(x, row, F::FORMAT.offset());
    let mut sd = vec![0.0f32; 4 * plan.dx.len()];
    let n = out.len();
    debug_assert_eq!(bytes.len(), n * row_bytes);
    let p = bytes.as_ptr();
    let o = out.as_mut_ptr();
    let mut j = 0;
    while j + 4 <= n {
        rows_zmm::<F, 4>(p.add(j * row_bytes), row_bytes, &plan, &mut sd, o.add(j));
        j += 4;
    }
    while j < n {
        rows_zmm::<F, 1>(p.add(j * row_bytes), row_bytes, &plan, &mut sd, o.add(j));
        j += 1;
    }
}

/// One activation row (`row` of `x`) times the consecutive weight rows in `bytes` (whole
/// rows of `row_bytes`, a 32-weight format), with AVX-512 VNNI: `out[i]` gets row `i`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
pub unsafe fn gemv_blocks_rows_zmm(
    format: Format,
    bytes: &[u8],
    row_bytes: usize,
    x: &QuantizedRows,
    row: usize,
    out: &mut [f32],
) {
    match format {
        Format::Q4_0 => gemv_rows_zmm::<Q40>(bytes, row_bytes, x, row, out),
        Format::Q4_1 => gemv_rows_zmm::<Q41>(bytes, row_bytes, x, row, out),
        Format::Q5_0 => gemv_rows_zmm::<Q50>(bytes, row_bytes, x, row, out),
        Format::Q8_0 => gemv_rows_zmm::<Q80>(bytes, row_bytes, x, row, out),
        Format::Q4K | Format::Q6K => unreachable!("K-quant rows take the K-quant kernels"),
    }
}

/// Block `b` of the row at `p` as the AVX2 product reads it: the signed weights `u − o`
/// (for Q4_1, whose offset is 0, the unsigned values).
#[inline(always)]
unsafe fn w_block<F: Blocks>(p: *const u8, b: usize) -> __m256i {
    let blk = p.add(b * F::BB);
    let nib = |off: usize| {
        let v = _mm_loadu_si128(blk.add(off) as *const __m128i);
        let m = _mm_set1_epi8(0x0F);
        _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m), _mm_and_si128(v, m))
    };
    match F::FORMAT {
        Format::Q8_0 => _mm256_loadu_si256(blk.add(2) as *const __m256i),
        Format::Q4_0 => _mm256_sub_epi8(nib(2), _mm256_set1_epi8(8)),
        Format::Q4_1 => nib(4),
        _ => {
            let qh = (blk.add(2) as *const u32).read_unaligned();
            let v = _mm256_set1_epi32(qh as i32);
            let spread = _mm256_setr_epi8(
                0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3,
                3, 3, 3, 3,
            );
            let bytes = _mm256_shuffle_epi8(v, spread);
            let mask = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
            let set = _mm256_cmpeq_epi8(_mm256_and_si256(bytes, mask), mask);
            let u = _mm256_or_si256(nib(6), _mm256_and_si256(set, _mm256_set1_epi8(0x10)));
            _mm256_sub_epi8(u, _mm256_set1_epi8(16))
        }
    }
}

/// Block `b` of `R` rows into accumulator `SLOT` (`b % 2`) of each, with AVX2: the exact
/// integer per lane from `vpmaddubsw` (`|w|` times `q` carrying `w`'s sign) and
/// `vpmaddwd`, as [`super::x86::tile_avx2`].
#[inline(always)]
unsafe fn block_ymm<F: Blocks, const R: usize, const SLOT: usize>(
    p: *const u8,
    row_bytes: usize,
    plan: &Plan,
    sd: &[f32],
    b: usize,
    acc: &mut [[__m256; 2]; R],
) {
    let stride = plan.dx.len();
    let ones = _mm256_set1_epi16(1);
    let q = _mm256_loadu_si256(plan.qs.as_ptr().add(b * BLOCK) as *const __m256i);
    for r in 0..R {
        let w = w_block::<F>(p.add(r * row_bytes), b);
        let prod = if F::FORMAT == Format::Q4_1 {
            _mm256_maddubs_epi16(w, q)
        } else {
            _mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(q, w))
        };
        let f = _mm256_cvtepi32_ps(_mm256_madd_epi16(prod, ones));
        let s = _mm256_broadcast_ss(&*sd.as_ptr().add(r * stride + b));
        acc[r][SLOT] = _mm256_fmadd_ps(f, s, acc[r][SLOT]);
    }
}

/// [`rows_zmm`] with AVX2: one block per 256-bit register, into the even- or odd-block
/// accumulator.
#[inline(always)]
unsafe fn rows_ymm<F: Blocks, const R: usize>(
    p: *const u8,
    row_bytes: usize,
    plan: &Plan,
    sd: &mut [f32],
    out: *mut f32,
) {
    let nb = plan.nb;
    let stride = plan.dx.len();
    let mut tt = [0.0f32; R];
    for r in 0..R {
        tt[r] = row_scales::<F>(p.add(r * row_bytes), plan, &mut sd[r * stride..]);
    }
    let mut acc = [[_mm256_setzero_ps(); 2]; R];
    for b in (0..nb & !1).step_by(2) {
        block_ymm::<F, R, 0>(p, row_bytes, plan, sd, b, &mut acc);
        block_ymm::<F, R, 1>(p, row_bytes, plan, sd, b + 1, &mut acc);
    }
    if nb % 2 == 1 {
        block_ymm::<F, R, 0>(p, row_bytes, plan, sd, nb - 1, &mut acc);
    }
    for r in 0..R {
        let v = _mm256_add_ps(acc[r][0], acc[r][1]);
        let s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
        let mut y = _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
        if F::FORMAT == Format::Q4_1 {
            y += tt[r];
        }
        *out.add(r) = y;
    }
}

/// [`gemv_rows_zmm`] with AVX2.
#[inline(always)]
unsafe fn gemv_rows_ymm<F: Blocks>(
    bytes: &[u8],
    row_bytes: usize,
    x: &QuantizedRows,
    row: usize,
    out: &mut [f32],
) {
    let plan = Plan::new(x, row, 0);
    let mut sd = vec![0.0f32; 4 * plan.dx.len()];
    let n = out.len();
    debug_assert_eq!(bytes.len(), n * row_bytes);
    let p = bytes.as_ptr();
    let o = out.as_mut_ptr();
    let mut j = 0;
    while j + 4 <= n {
        rows_ymm::<F, 4>(p.add(j * row_bytes), row_bytes, &plan, &mut sd, o.add(j));
        j += 4;
    }
    while j < n {
        rows_ymm::<F, 1>(p.add(j * row_bytes), row_bytes, &plan, &mut sd, o.add(j));
        j += 1;
    }
}

/// [`gemv_blocks_rows_zmm`] with AVX2 (+ FMA, F16C).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn gemv_blocks_rows_ymm(
    format: Format,
    bytes: &[u8],
    row_bytes: usize,
    x: &QuantizedRows,
    row: usize,
    out: &mut [f32],
) {
    match format {
        Format::Q4_0 => gemv_rows_ymm::<Q40>(bytes, row_bytes, x, row, out),
        Format::Q4_1 => gemv_rows_ymm::<Q41>(bytes, row_bytes, x, row, out),
        Format::Q5_0 => gemv_rows_ymm::<Q50>(bytes, row_bytes, x, row, out),
        Format::Q8_0 => gemv_rows_ymm::<Q80>(bytes, row_bytes, x, row, out),
        Format::Q4K | Format::Q6K => unreachable!("K-quant rows take the K-quant kernels"),
    }
}

// ---------------------------------------------------------------------------------------
// Two to four activation rows (batched decoding) times many weight rows, AVX-512.

/// The f16 block scales of the row at `p` as f32 (`dw[b]`; 0 for padding blocks).
#[inline(always)]
unsafe fn row_dw<F: Blocks>(p: *const u8, nb: usize, dw: &mut [f32]) {
    for b in (0..nb).step_by(8) {
        _mm256_storeu_ps(
            dw.as_mut_ptr().add(b),
            _mm256_cvtph_ps(scales8::<F>(p, b, nb)),
        );
    }
}

/// Q4_1's minimum term of the row at `p` for one activation row (as
/// [`super::portable::min_term`]).
#[inline(always)]
unsafe fn min_term_q41<F: Blocks>(p: *const u8, plan: &Plan) -> f32 {
    let mut tt = 0.0f32;
    for b in 0..plan.nb {
        let bits = (p.add(b * F::BB + 2) as *const u16).read_unaligned();
        let t = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)));
        tt = t.mul_add(*plan.block_sums.get_unchecked(b), tt);
    }
    tt
}

/// `R` consecutive weight rows at `p` times the `M` planned activation rows: output
/// `(m, r)` goes to `out[m · n + r]`. The same arithmetic per output as [`rows_zmm`]
/// (`d_w · d_x` formed per lane from the same two f32 values).
#[inline(always)]
unsafe fn rows_zmm_m<F: Blocks, const R: usize, const M: usize>(
    p: *const u8,
    row_bytes: usize,
    plans: &[Plan],
    dw: &mut [f32],
    out: *mut f32,
    n: usize,
) {
    let nb = plans[0].nb;
    let stride = plans[0].dx.len();
    for r in 0..R {
        row_dw::<F>(p.add(r * row_bytes), nb, &mut dw[r * stride..]);
    }
    let halves = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    let spread = |v: *const f32| {
        _mm512_permutexvar_ps(
            halves,
            _mm512_castps128_ps512(_mm_castpd_ps(_mm_load_sd(v as *const f64))),
        )
    };
    let mut acc = [[_mm512_setzero_ps(); R]; M];
    let mut b = 0;
    while b < nb {
        let half = b + 1 == nb;
        let q: [__m512i; M] = std::array::from_fn(|m| {
            _mm512_loadu_si512(plans[m].qs.as_ptr().add(b * BLOCK) as *const _)
        });
        let c: [__m512i; M] = std::array::from_fn(|m| {
            _mm512_loadu_si512(plans[m].corr.as_ptr().add(b * LANES) as *const _)
        });
        let dx: [__m512; M] = std::array::from_fn(|m| spread(plans[m].dx.as_ptr().add(b)));
        for r in 0..R {
            let u = u_pair::<F>(p.add(r * row_bytes), b, half);
            let dwr = spread(dw.as_ptr().add(r * stride + b));
            for m in 0..M {
                let f = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(c[m], u, q[m]));
                let s = _mm512_mul_ps(dwr, dx[m]);
                acc[m][r] = if half {
                    _mm512_mask3_fmadd_ps(f, s, acc[m][r], 0x00FF)
                } else {
                    _mm512_fmadd_ps(f, s, acc[m][r])
                };
            }
        }
        b += 2;
    }
    for m in 0..M {
        let mut y = [0.0f32; 4];
        let sums = reduce4(std::array::from_fn(|r| {
            if r < R {
                acc[m][r]
            } else {
                _mm512_setzero_ps()
            }
        }));
        _mm_storeu_ps(y.as_mut_ptr(), sums);
        for r in 0..R {
            let mut v = y[r];
            if F::FORMAT == Format::Q4_1 {
                v += min_term_q41::<F>(p.add(r * row_bytes), &plans[m]);
            }
            *out.add(m * n + r) = v;
        }
    }
}

#[inline(always)]
unsafe fn gemv_rows_zmm_m<F: Blocks, const M: usize>(
    bytes: &[u8],
    row_bytes: usize,
    x: &QuantizedRows,
    r0: usize,
    out: *mut f32,
    n: usize,
) {
    let plans: Vec<Plan> = (0..M)
        .map(|m| Plan::new(x, r0 + m, F::FORMAT.offset()))
        .collect();
    let mut dw = vec![0.0f32; 4 * plans[0].dx.len()];
    let rows = bytes.len() / row_bytes;
    let p = bytes.as_ptr();
    let mut j = 0;
    // Four weight rows at a time for two activation rows; two for three or four (the
    // accumulators and the activations' registers must fit in 32).
    const fn step(m: usize) -> usize {
        if m <= 2 {
            4
        } else {
            2
        }
    }
    while j + step(M) <= rows {
        if M <= 2 {
            rows_zmm_m::<F, 4, M>(
                p.add(j * row_bytes),
                row_bytes,
                &plans,
                &mut dw,
                out.add(j),
                n,
            );
            j += 4;
        } else {
            rows_zmm_m::<F, 2, M>(
                p.add(j * row_bytes),
                row_bytes,
                &plans,
                &mut dw,
                out.add(j),
                n,
            );
            j += 2;
        }
    }
    while j < rows {
        rows_zmm_m::<F, 1, M>(
            p.add(j * row_bytes),
            row_bytes,
            &plans,
            &mut dw,
            out.add(j),
            n,
        );
        j += 1;
    }
}

/// Activation rows `r0..r0 + m` of `x` (`m` = 2–4) times the consecutive weight rows in
/// `bytes` (a 32-weight format), with AVX-512 VNNI: row `r0 + i` times weight row `j` goes
/// to `out[i · n + j]`.
///
/// # Safety
/// The CPU must have AVX-512 F/BW/VL/VNNI; `out` must hold `(m − 1) · n + rows` values.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
#[allow(clippy::too_many_arguments)]
pub unsafe fn gemv_blocks_rows_zmm_m(
    format: Format,
    bytes: &[u8],
    row_bytes: usize,
    x: &QuantizedRows,
    r0: usize,
    m: usize,
    out: *mut f32,
    n: usize,
) {
    macro_rules! go {
        ($f:ty) => {
            match m {
                2 => gemv_rows_zmm_m::<$f, 2>(bytes, row_bytes, x, r0, out, n),
                3 => gemv_rows_zmm_m::<$f, 3>(bytes, row_bytes, x, r0, out, n),
                _ => gemv_rows_zmm_m::<$f, 4>(bytes, row_bytes, x, r0, out, n),
            }
        };
    }
    match format {
        Format::Q4_0 => go!(Q40),
        Format::Q4_1 => go!(Q41),
        Format::Q5_0 => go!(Q50),
        Format::Q8_0 => go!(Q80),
        Format::Q4K | Format::Q6K => unreachable!("K-quant rows take the K-quant kernels"),
    }
}

// ---------------------------------------------------------------------------------------
// K-quants (Q4_K, Q6_K): one activation row times `J` weight rows at a time.

/// How far ahead (bytes) the K-quant rows kernel prefetches the weights (as the other
/// register paths).
const PREFETCH_AHEAD: usize = 4096;

/// Super-block `sb` of the K-quant row at `p` times the activation values `xs` (its 256
/// values) and group sums `gs` (16): eight 32-bit lanes whose total is the super-block's
/// exact integer, the super-scale `d`, and for Q4_K the eight block minimums `dmin · m`.
#[inline(always)]
unsafe fn k_superblock<const Q4K: bool, const VNNI: bool>(
    p: *const u8,
    sb: usize,
    xs: *const i8,
    gs: *const i16,
) -> (__m256i, f32, __m256) {
    let lo4 = _mm256_set1_epi8(0x0F);
    let dot = |isum: __m256i, u: __m256i, sc: __m256i, q: *const i8| -> __m256i {
        let prod = _mm256_maddubs_epi16(u, _mm256_loadu_si256(q as *const __m256i));
        if VNNI {
            _mm256_dpwssd_epi32(isum, prod, sc)
        } else {
            _mm256_add_epi32(isum, _mm256_madd_epi16(prod, sc))
        }
    };
    let mut is = [_mm256_setzero_si256(); 2];
    if Q4K {
        let blk = std::slice::from_raw_parts(p.add(sb * 144), 144);
        let (sc, mn) = super::formats::q4k_scales_mins(&blk[4..16]);
        if VNNI {
            let scales = _mm512_cvtepu8_epi16(_mm256_castsi128_si256(_mm_loadl_epi64(
                sc.as_ptr() as *const __m128i
            )));
            let lo4z = _mm512_set1_epi8(0x0F);
            let shifts = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
            let mut iz = _mm512_setzero_si512();
            for pair in 0..4 {
                let v = _mm512_broadcast_i64x4(_mm256_loadu_si256(
                    blk.as_ptr().add(16 + pair * 32) as *const __m256i,
                ));
                let u = _mm512_and_si512(_mm512_srlv_epi16(v, shifts), lo4z);
                let pick = _mm512_inserti64x4(
                    _mm512_set1_epi16(2 * pair as i16),
                    _mm256_set1_epi16(2 * pair as i16 + 1),
                    1,
                );
                let s = _mm512_permutexvar_epi16(pick, scales);
                let q = _mm512_loadu_si512(xs.add(pair * 64) as *const _);
                iz = super::x86::dpwssd512(iz, _mm512_maddubs_epi16(u, q), s);
            }
            is[0] = _mm512_castsi512_si256(iz);
            is[1] = _mm512_extracti64x4_epi64(iz, 1);
        } else {
            for pair in 0..4 {
                let v = _mm256_loadu_si256(blk.as_ptr().add(16 + pair * 32) as *const __m256i);
                let u0 = _mm256_and_si256(v, lo4);
                let u1 = _mm256_and_si256(_mm256_srli_epi16(v, 4), lo4);
                let s0 = _mm256_set1_epi16(sc[pair * 2] as i16);
                let s1 = _mm256_set1_epi16(sc[pair * 2 + 1] as i16);
                is[0] = dot(is[0], u0, s0, xs.add(pair * 64));
                is[1] = dot(is[1], u1, s1, xs.add(pair * 64 + 32));
            }
        }
        let dmin = super::x86::f16_at(&blk[2..]);
        let mins = _mm256_mul_ps(
            _mm256_set1_ps(dmin),
            _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(
                mn.as_ptr() as *const __m128i
            ))),
        );
        (
            _mm256_add_epi32(is[0], is[1]),
            super::x86::f16_at(blk),
            mins,
        )
    } else {
        let base = p.add(sb * 210);
        for n in 0..2 {
            let parts = super::x86::q6k_blocks(base, n);
            let sc = base.add(192 + n * 8) as *const i8;
            for (part, u) in parts.into_iter().enumerate() {
                let s = _mm256_setr_m128i(
                    _mm_set1_epi16(*sc.add(part * 2) as i16),
                    _mm_set1_epi16(*sc.add(part * 2 + 1) as i16),
                );
                is[part % 2] = dot(is[part % 2], u, s, xs.add(n * 128 + part * 32));
            }
        }
        let corr = _mm256_cvtepi8_epi16(_mm_loadu_si128(base.add(192) as *const __m128i));
        let d = super::x86::f16_at(std::slice::from_raw_parts(base.add(208), 2));
        // The offset 32 = 1 << 5: subtract 32 · Σ scale · (group sum).
        let c = _mm256_madd_epi16(_mm256_loadu_si256(gs as *const __m256i), corr);
        let even = _mm256_sub_epi32(is[0], _mm256_slli_epi32(c, 5));
        (_mm256_add_epi32(even, is[1]), d, _mm256_setzero_ps())
    }
}

/// `J` (1–4) consecutive K-quant weight rows at `p` (`row_bytes` apart) times activation
/// row `row` of `x`, in the row order of [`super::portable::tile_k_rows`]: per super-block
/// the rows' exact integers are summed together (lane `j` for row `j`), converted and
/// fused-multiply-added by `d_j · dx` into lane `j` of one accumulator; Q4_K's minimum term
/// as [`super::portable::min_term_k`] (even super-blocks in lanes 0–7, odd in 8–15).
#[inline(always)]
unsafe fn rows_k<const Q4K: bool, const VNNI: bool, const J: usize>(
    p: *const u8,
    row_bytes: usize,
    x: &QuantizedRowsK,
    row: usize,
    lanes: &mut [__m256i],
    scales: &mut [f32],
    out: *mut f32,
) {
    let k = x.k;
    let nsb = k / 256;
    let ml = super::formats::min_len(k);
    let xq = x.qs.as_ptr().add(row * k);
    let mut acc = _mm_setzero_ps();
    let mut accm = [[_mm256_setzero_ps(); 2]; J];
    let sb_bytes = if Q4K { 144 } else { 210 };
    // The rows one after the other, as they lie in memory (the next bytes prefetched a few
    // kilobytes ahead): each super-block's lane sums and scale kept for the second pass.
    for j in 0..J {
        let pj = p.add(j * row_bytes);
        for sb in 0..nsb {
            for line in (0..sb_bytes).step_by(64) {
                _mm_prefetch::<_MM_HINT_T0>(
                    pj.wrapping_add(sb * sb_bytes + PREFETCH_AHEAD + line) as *const i8
                );
            }
            let xs = xq.add(sb * 256);
            let gs = x.group_sums.as_ptr().add((row * k + sb * 256) / 16);
            let (v, d, mins) = k_superblock::<Q4K, VNNI>(pj, sb, xs, gs);
            *lanes.get_unchecked_mut(j * nsb + sb) = v;
            *scales.get_unchecked_mut(j * nsb + sb) = d;
            if Q4K {
                let s = _mm256_loadu_ps(x.block_sums.as_ptr().add(row * ml + sb * 8));
                accm[j][sb % 2] = _mm256_fmadd_ps(mins, s, accm[j][sb % 2]);
            }
        }
    }
    // The row order: per super-block the rows' integers summed together (lane j: row j).
    for sb in 0..nsb {
        let v = std::array::from_fn(|j| *lanes.get_unchecked(j.min(J - 1) * nsb + sb));
        let ints = _mm_cvtepi32_ps(super::x86::hsum_i32_x4(v));
        let dx = _mm_set1_ps(*x.d.get_unchecked(row * nsb + sb));
        let dw = _mm_setr_ps(
            *scales.get_unchecked(sb),
            *scales.get_unchecked(1.min(J - 1) * nsb + sb),
            *scales.get_unchecked(2.min(J - 1) * nsb + sb),
            *scales.get_unchecked(3.min(J - 1) * nsb + sb),
        );
        acc = _mm_fmadd_ps(ints, _mm_mul_ps(dw, dx), acc);
    }
    let mut y = [0.0f32; 4];
    _mm_storeu_ps(y.as_mut_ptr(), acc);
    for j in 0..J {
        let mut v = y[j];
        if Q4K {
            v -= super::x86::hsum(_mm256_add_ps(accm[j][0], accm[j][1]));
        }
        *out.add(j) = v;
    }
}

#[inline(always)]
unsafe fn gemv_rows_k<const Q4K: bool, const VNNI: bool>(
    bytes: &[u8],
    row_bytes: usize,
    x: &QuantizedRowsK,
    row: usize,
    out: &mut [f32],
) {
    let n = out.len();
    debug_assert_eq!(bytes.len(), n * row_bytes);
    let p = bytes.as_ptr();
    let o = out.as_mut_ptr();
    let nsb = x.k / 256;
    let mut lanes = vec![_mm256_setzero_si256(); 4 * nsb];
    let mut scales = vec![0.0f32; 4 * nsb];
    let mut j = 0;
    while j + 4 <= n {
        let pj = p.add(j * row_bytes);
        rows_k::<Q4K, VNNI, 4>(pj, row_bytes, x, row, &mut lanes, &mut scales, o.add(j));
        j += 4;
    }
    while j < n {
        let pj = p.add(j * row_bytes);
        rows_k::<Q4K, VNNI, 1>(pj, row_bytes, x, row, &mut lanes, &mut scales, o.add(j));
        j += 1;
    }
}

/// One activation row (`row` of `x`) times the consecutive K-quant weight rows in `bytes`
/// (whole rows of `row_bytes`), with AVX-512 VNNI: `out[i]` gets row `i`.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
pub unsafe fn gemv_k_rows_zmm(
    format: Format,
    bytes: &[u8],
    row_bytes: usize,
    x: &QuantizedRowsK,
    row: usize,
    out: &mut [f32],
) {
    match format {
        Format::Q4K => gemv_rows_k::<true, true>(bytes, row_bytes, x, row, out),
        Format::Q6K => gemv_rows_k::<false, true>(bytes, row_bytes, x, row, out),
        _ => unreachable!("32-weight formats take the block kernels"),
    }
}

/// [`gemv_k_rows_zmm`] with AVX2 (+ FMA, F16C).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn gemv_k_rows_ymm(
    format: Format,
    bytes: &[u8],
    row_bytes: usize,
    x: &QuantizedRowsK,
    row: usize,
    out: &mut [f32],
) {
    match format {
        Format::Q4K => gemv_rows_k::<true, false>(bytes, row_bytes, x, row, out),
        Format::Q6K => gemv_rows_k::<false, false>(bytes, row_bytes, x, row, out),
        _ => unreachable!("32-weight formats take the block kernels"),
    }
}
