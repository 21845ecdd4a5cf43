//! x86-64 SIMD paths: AVX2 decoders for every format; tile kernels on 512-bit registers
//! (AVX-512 BW + VNNI: `vpdpbusd`, `vpdpwssd`) and on 256-bit registers (AVX2:
//! `vpmaddubsw` + `vpmaddwd`); kernels that decode the weights in registers for one to four
//! rows; and the row loops that drive the tiles. All compute the same exact integers as
//! [`super::portable`] and then the same f32 operations in the same order, so every path
//! agrees bit for bit with the portable kernel (tested): the lane order for the 32-weight
//! formats, the row order ([`super::portable::tile_k_rows`]) for the K-quants.

// The tiles index several parallel arrays (accumulators, weights, rows) by `r` and `j`.
#![allow(clippy::missing_safety_doc, clippy::needless_range_loop)]

use super::activations::{QuantizedRows, QuantizedRowsK};
use super::formats::{DecodedRow, DecodedRowK, Format, BLOCK, LANES};
use super::portable::min_term;
use std::arch::x86_64::*;

/// How far ahead (bytes) the register paths prefetch weights.
const PREFETCH_AHEAD: usize = 4096;

/// A little-endian f16 at `b[0..2]` as f32, with the F16C instruction.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn f16_at(b: &[u8]) -> f32 {
    let bits = u16::from_le_bytes([b[0], b[1]]);
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)))
}

/// Horizontal sum in the order of [`super::portable::hsum`].
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn hsum(v: __m256) -> f32 {
    let s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    let s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
    _mm_cvtss_f32(s1)
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn store_scales(row: &mut DecodedRow, b: usize, s0: f32, s1: f32) {
    let v = _mm256_setr_m128(_mm_set1_ps(s0), _mm_set1_ps(s1));
    _mm256_storeu_ps(row.s.as_mut_ptr().add(b * LANES), v);
}

#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn store_u(row: &mut DecodedRow, b: usize, u: __m256i) {
    _mm256_storeu_si256(row.u.as_mut_ptr().add(b * BLOCK) as *mut __m256i, u);
}

/// Sixteen packed bytes → 32 nibbles: low nibbles first, then high nibbles.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn nibbles_16(p: *const u8) -> __m256i {
    let v = _mm_loadu_si128(p as *const __m128i);
    let m = _mm_set1_epi8(0x0F);
    let lo = _mm_and_si128(v, m);
    let hi = _mm_and_si128(_mm_srli_epi16(v, 4), m);
    _mm256_set_m128i(hi, lo)
}

/// Bit `i` of `bits` → byte `i` = 0x10 where set, 0 where not.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn high_bits_32(bits: u32) -> __m256i {
    let v = _mm256_set1_epi32(bits as i32);
    let spread = _mm256_setr_epi8(
        0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3,
        3, 3,
    );
    let bytes = _mm256_shuffle_epi8(v, spread);
    let mask = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
    let set = _mm256_cmpeq_epi8(_mm256_and_si256(bytes, mask), mask);
    _mm256_and_si256(set, _mm256_set1_epi8(0x10))
}

/// Decode one row (see [`super::formats::decode_row_scalar`], which this matches exactly).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn decode_row(format: Format, bytes: &[u8], row: &mut DecodedRow) {
    let p = bytes.as_ptr();
    match format {
        Format::Q8_0 => {
            let flip = _mm256_set1_epi8(-128);
            for b in 0..bytes.len() / 34 {
                let blk = p.add(b * 34);
                let d = f16_at(&bytes[b * 34..]);
                store_scales(row, b, d, d);
                let q = _mm256_loadu_si256(blk.add(2) as *const __m256i);
                store_u(row, b, _mm256_xor_si256(q, flip));
            }
        }
        Format::Q4_0 | Format::Q4_1 => {
            let (bb, qoff) = if format == Format::Q4_0 {
                (18, 2)
            } else {
                (20, 4)
            };
            for b in 0..bytes.len() / bb {
                let blk = &bytes[b * bb..];
                let d = f16_at(blk);
                store_scales(row, b, d, d);
                row.t[b] = if format == Format::Q4_1 {
                    f16_at(&blk[2..])
                } else {
                    0.0
                };
                store_u(row, b, nibbles_16(p.add(b * bb + qoff)));
            }
        }
        Format::Q5_0 => {
            for b in 0..bytes.len() / 22 {
                let blk = &bytes[b * 22..];
                let d = f16_at(blk);
                store_scales(row, b, d, d);
                let qh = u32::from_le_bytes([blk[2], blk[3], blk[4], blk[5]]);
                let u = _mm256_or_si256(nibbles_16(p.add(b * 22 + 6)), high_bits_32(qh));
                store_u(row, b, u);
            }
        }
        Format::Q4K | Format::Q6K => unreachable!("K-quant rows decode into DecodedRowK"),
    }
}

/// Write the finished accumulators (plus the minimum term) to `out`.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn finish<const R: usize, const J: usize>(
    acc: &[[__m256; J]; R],
    w: [&DecodedRow; J],
    x: &QuantizedRows,
    r0: usize,
    with_min: bool,
    out: &mut [[f32; J]; R],
) {
    for r in 0..R {
        for j in 0..J {
            let mut y = hsum(acc[r][j]);
            if with_min {
                y += min_term(w[j], x, r0 + r);
            }
            out[r][j] = y;
        }
    }
}

/// The tile kernel with AVX-512 (VNNI): two 32-weight blocks per 512-bit register —
/// `vpdpbusd` adds the four `u·q` products of each lane to the lane's offset correction
/// `−o·Σq`, and the register's low and high halves are the even- and odd-block
/// accumulators of the canonical order (see [`super::portable`]).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
pub unsafe fn tile_zmm<const R: usize, const J: usize>(
    w: [&DecodedRow; J],
    x: &QuantizedRows,
    r0: usize,
    o: u32,
    with_min: bool,
    out: &mut [[f32; J]; R],
) {
    let nb = x.blocks_per_row();
    let k = x.k;
    let shift = _mm_cvtsi32_si128(o.trailing_zeros() as i32);
    let halves = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    let mut acc = [[_mm512_setzero_ps(); J]; R];
    let step = |acc: &mut [[__m512; J]; R], b: usize, tail: bool| {
        let mut u = [_mm512_setzero_si512(); J];
        let mut s = [_mm512_setzero_ps(); J];
        for j in 0..J {
            if tail {
                u[j] = _mm512_zextsi256_si512(_mm256_loadu_si256(
                    w[j].u.as_ptr().add(b * BLOCK) as *const __m256i
                ));
                s[j] = _mm512_zextps256_ps512(_mm256_loadu_ps(w[j].s.as_ptr().add(b * LANES)));
            } else {
                u[j] = _mm512_loadu_si512(w[j].u.as_ptr().add(b * BLOCK) as *const _);
                s[j] = _mm512_loadu_ps(w[j].s.as_ptr().add(b * LANES));
            }
        }
        for r in 0..R {
            let xb = (r0 + r) * nb + b;
            let qp = x.qs.as_ptr().add((r0 + r) * k + b * BLOCK);
            let lp = x.neg_lane_sums.as_ptr().add(xb * LANES);
            let (q, sums, d) = if tail {
                (
                    _mm512_zextsi256_si512(_mm256_loadu_si256(qp as *const __m256i)),
                    _mm512_zextsi256_si512(_mm256_loadu_si256(lp as *const __m256i)),
                    _mm512_set1_ps(*x.d.get_unchecked(xb)),
                )
            } else {
                let d2 = _mm_castsi128_ps(_mm_loadl_epi64(x.d.as_ptr().add(xb) as *const __m128i));
                (
                    _mm512_loadu_si512(qp as *const _),
                    _mm512_loadu_si512(lp as *const _),
                    _mm512_permutexvar_ps(halves, _mm512_castps128_ps512(d2)),
                )
            };
            let c = if o == 0 {
                _mm512_setzero_si512()
            } else {
                _mm512_sll_epi32(sums, shift)
            };
            for j in 0..J {
                let i = _mm512_dpbusd_epi32(c, u[j], q);
                let f = _mm512_cvtepi32_ps(i);
                let sd = _mm512_mul_ps(s[j], d);
                acc[r][j] = if tail {
                    _mm512_mask3_fmadd_ps(f, sd, acc[r][j], 0x00FF)
                } else {
                    _mm512_fmadd_ps(f, sd, acc[r][j])
                };
            }
        }
    };
    for b in (0..nb / 2 * 2).step_by(2) {
        step(&mut acc, b, false);
    }
    if nb % 2 == 1 {
        step(&mut acc, nb - 1, true);
    }
    let mut halves_sum = [[_mm256_setzero_ps(); J]; R];
    for r in 0..R {
        for j in 0..J {
            halves_sum[r][j] = _mm256_add_ps(
                _mm512_castps512_ps256(acc[r][j]),
                _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[r][j]), 1)),
            );
        }
    }
    finish(&halves_sum, w, x, r0, with_min, out);
}

/// The tile kernel with AVX2 only: the offset is removed from the weights
/// (`w = u − o`, signed) and `vpmaddubsw` multiplies `|w|` by `q` carrying `w`'s sign.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn tile_avx2<const R: usize, const J: usize>(
    w: [&DecodedRow; J],
    x: &QuantizedRows,
    r0: usize,
    o: u32,
    with_min: bool,
    out: &mut [[f32; J]; R],
) {
    let nb = x.blocks_per_row();
    let k = x.k;
    let ones = _mm256_set1_epi16(1);
    let off = _mm256_set1_epi8(o as u8 as i8);
    // Even and odd blocks accumulate apart (the canonical order, see `super::portable`).
    let mut acc = [[[_mm256_setzero_ps(); 2]; J]; R];
    // `slot` is b % 2, passed as a constant so the accumulators stay in registers.
    let mut block = |b: usize, slot: usize| {
        let mut wabs = [_mm256_setzero_si256(); J];
        let mut wsgn = [_mm256_setzero_si256(); J];
        let mut s = [_mm256_setzero_ps(); J];
        for j in 0..J {
            let u = _mm256_loadu_si256(w[j].u.as_ptr().add(b * BLOCK) as *const __m256i);
            if o == 0 {
                wabs[j] = u;
            } else {
                wsgn[j] = _mm256_sub_epi8(u, off);
                wabs[j] = _mm256_abs_epi8(wsgn[j]);
            }
            s[j] = _mm256_loadu_ps(w[j].s.as_ptr().add(b * LANES));
        }
        for r in 0..R {
            let xb = (r0 + r) * nb + b;
            let q =
                _mm256_loadu_si256(x.qs.as_ptr().add((r0 + r) * k + b * BLOCK) as *const __m256i);
            let d = _mm256_set1_ps(*x.d.get_unchecked(xb));
            for j in 0..J {
                let qs = if o == 0 {
                    q
                } else {
                    _mm256_sign_epi8(q, wsgn[j])
                };
                let i = _mm256_madd_epi16(_mm256_maddubs_epi16(wabs[j], qs), ones);
                let a = &mut acc[r][j][slot];
                *a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i), _mm256_mul_ps(s[j], d), *a);
            }
        }
    };
    for b in (0..nb).step_by(2) {
        block(b, 0);
        if b + 1 < nb {
            block(b + 1, 1);
        }
    }
    let mut sum = [[_mm256_setzero_ps(); J]; R];
    for r in 0..R {
        for j in 0..J {
            sum[r][j] = _mm256_add_ps(acc[r][j][0], acc[r][j][1]);
        }
    }
    finish(&sum, w, x, r0, with_min, out);
}

/// Lane `r` of the result: the sum of the eight 32-bit lanes of `v[r]` (exact in any
/// order).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn hsum_i32_x4(v: [__m256i; 4]) -> __m128i {
    // Per 128-bit half, lane r: the half's sum of v[r]; then the halves added.
    let h = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
    _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1))
}

/// The sums of the eight 32-bit lanes of `a` and of `b` (exact in any order), converted to
/// f32 (as `i as f32` rounds), without leaving the vector registers.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn hsum_pair_f32(a: __m256i, b: __m256i) -> (f32, f32) {
    // [a01 a23 b01 b23 | a45 a67 b45 b67] → [a0145 a2367 b0145 b2367] → [a b a b].
    let h = _mm256_hadd_epi32(a, b);
    let q = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
    let f = _mm_cvtepi32_ps(_mm_hadd_epi32(q, q));
    (_mm_cvtss_f32(f), _mm_cvtss_f32(_mm_movehdup_ps(f)))
}

/// Q4_K's minimum term with two 256-bit accumulators (lanes 0–7 and 8–15 of
/// [`super::portable::min_term_k`]).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn min_term_k_avx2(mins: *const f32, x: &QuantizedRowsK, row: usize) -> f32 {
    let n = super::formats::min_len(x.k);
    let s = x.block_sums.as_ptr().add(row * n);
    let mut a = [_mm256_setzero_ps(); 2];
    for c in (0..n).step_by(16) {
        for (h, a) in a.iter_mut().enumerate() {
            let i = c + h * 8;
            *a = _mm256_fmadd_ps(_mm256_loadu_ps(mins.add(i)), _mm256_loadu_ps(s.add(i)), *a);
        }
    }
    hsum(_mm256_add_ps(a[0], a[1]))
}

/// `acc + Σ pairs a·b` (`vpdpwssd`) as one instruction. Written as inline assembly because
/// LLVM's generic tuning splits the intrinsic into `vpmaddwd` + `vpaddd`, which costs the
/// K-quant tile a third more instructions in its inner loop.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
pub(super) unsafe fn dpwssd512(acc: __m512i, a: __m512i, b: __m512i) -> __m512i {
    let mut acc = acc;
    std::arch::asm!(
        "vpdpwssd {acc}, {a}, {b}",
        acc = inout(zmm_reg) acc,
        a = in(zmm_reg) a,
        b = in(zmm_reg) b,
        options(pure, nomem, nostack, preserves_flags)
    );
    acc
}

/// The four 32-weight blocks of half `n` (0 or 1) of the Q6_K super-block at `sb`: each
/// value is its low four bits from `ql` and its high two from `qh` (0..=63).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn q6k_blocks(sb: *const u8, n: usize) -> [__m256i; 4] {
    let lo4 = _mm256_set1_epi8(0x0F);
    let hi2 = _mm256_set1_epi8(0x30);
    let ql0 = _mm256_loadu_si256(sb.add(n * 64) as *const __m256i);
    let ql1 = _mm256_loadu_si256(sb.add(n * 64 + 32) as *const __m256i);
    let qh = _mm256_loadu_si256(sb.add(128 + n * 32) as *const __m256i);
    let join = |low: __m256i, high: __m256i| {
        _mm256_or_si256(_mm256_and_si256(low, lo4), _mm256_and_si256(high, hi2))
    };
    [
        join(ql0, _mm256_slli_epi16(qh, 4)),
        join(ql1, _mm256_slli_epi16(qh, 2)),
        join(_mm256_srli_epi16(ql0, 4), qh),
        join(_mm256_srli_epi16(ql1, 4), _mm256_srli_epi16(qh, 2)),
    ]
}

/// Decode one Q4_K or Q6_K row (matches [`super::formats::decode_row_k_scalar`] exactly).
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn decode_row_k(format: Format, bytes: &[u8], row: &mut DecodedRowK) {
    let p = bytes.as_ptr();
    let lo4 = _mm256_set1_epi8(0x0F);
    let store_u = |row: &mut DecodedRowK, b: usize, u: __m256i| {
        _mm256_storeu_si256(row.u.as_mut_ptr().add(b * BLOCK) as *mut __m256i, u)
    };
    let store_sc = |row: &mut DecodedRowK, b: usize, s0: i16, s1: i16| {
        let v = _mm256_setr_m128i(_mm_set1_epi16(s0), _mm_set1_epi16(s1));
        _mm256_storeu_si256(row.sc.as_mut_ptr().add(b * 16) as *mut __m256i, v)
    };
    match format {
        Format::Q4K => {
            for sb in 0..bytes.len() / 144 {
                let blk = &bytes[sb * 144..sb * 144 + 144];
                row.d[sb] = f16_at(blk);
                row.dmin[sb] = f16_at(&blk[2..]);
                let (scs, ms) = super::formats::q4k_scales_mins(&blk[4..16]);
                for pair in 0..4 {
                    let v = _mm256_loadu_si256(p.add(sb * 144 + 16 + pair * 32) as *const __m256i);
                    let halves = [
                        _mm256_and_si256(v, lo4),
                        _mm256_and_si256(_mm256_srli_epi16(v, 4), lo4),
                    ];
                    for (half, u) in halves.into_iter().enumerate() {
                        let j = pair * 2 + half;
                        let (sc, m) = (scs[j], ms[j]);
                        let b = sb * 8 + j;
                        store_sc(row, b, sc as i16, sc as i16);
                        row.corr[b * 2] = m as i16;
                        row.corr[b * 2 + 1] = m as i16;
                        row.mins[b] = row.dmin[sb] * m as f32;
                        store_u(row, b, u);
                    }
                }
            }
        }
        Format::Q6K => {
            for sb in 0..bytes.len() / 210 {
                let base = sb * 210;
                row.d[sb] = f16_at(&bytes[base + 208..]);
                row.dmin[sb] = 0.0;
                for n in 0..2 {
                    let parts = q6k_blocks(p.add(base), n);
                    let sc = &bytes[base + 192 + n * 8..base + 200 + n * 8];
                    for (part, u) in parts.into_iter().enumerate() {
                        let b = sb * 8 + n * 4 + part;
                        let s0 = sc[part * 2] as i8 as i16;
                        let s1 = sc[part * 2 + 1] as i8 as i16;
                        store_sc(row, b, s0, s1);
                        row.corr[b * 2] = s0;
                        row.corr[b * 2 + 1] = s1;
                        store_u(row, b, u);
                    }
                }
            }
        }
        _ => unreachable!("only K-quants decode into DecodedRowK"),
    }
}

/// Eight K-quant weight rows interleaved for [`tile_k8_avx2`]: four weights of each row in
/// turn, so one 256-bit register holds weights `4g..4g+4` of a block for all eight rows and
/// `vpmaddubsw` leaves each row's products in that row's own lanes.
pub struct InterleavedK8 {
    /// Per block, per group of four weights `g`, per row: the four values (`8 · k` bytes).
    u: Vec<u8>,
    /// Per block and half block (16 weights), per row: its scale, twice (16 lanes).
    sc: Vec<i16>,
    /// Per super-block, per row: `d`.
    d: Vec<f32>,
    /// Per super-block, per pair of 16-weight groups `p`, per row: the two group terms
    /// (`corr[2p]`, `corr[2p + 1]`).
    corr: Vec<i16>,
}

impl InterleavedK8 {
    /// Storage for rows of `k` weights.
    pub fn new(k: usize) -> Self {
        Self {
            u: vec![0; 8 * k],
            sc: vec![0; k / 32 * 2 * 16],
            d: vec![0.0; k / 256 * 8],
            corr: vec![0; k / 256 * 8 * 16],
        }
    }

    /// Interleave eight decoded rows.
    pub fn fill(&mut self, rows: &[DecodedRowK; 8]) {
        let k = rows[0].u.len();
        for b in 0..k / BLOCK {
            for g in 0..8 {
                for (j, row) in rows.iter().enumerate() {
                    let dst = ((b * 8 + g) * 8 + j) * 4;
                    self.u[dst..dst + 4].copy_from_slice(&row.u[b * BLOCK + 4 * g..][..4]);
                }
            }
            for h in 0..2 {
                for (j, row) in rows.iter().enumerate() {
                    let s = row.sc[(b * BLOCK + h * 16) / 2];
                    let dst = ((b * 2 + h) * 8 + j) * 2;
                    self.sc[dst] = s;
                    self.sc[dst + 1] = s;
                }
            }
        }
        for sb in 0..k / 256 {
            for (j, row) in rows.iter().enumerate() {
                self.d[sb * 8 + j] = row.d[sb];
                for p in 0..8 {
                    let dst = ((sb * 8 + p) * 8 + j) * 2;
                    self.corr[dst] = row.corr[sb * 16 + 2 * p];
                    self.corr[dst + 1] = row.corr[sb * 16 + 2 * p + 1];
                }
            }
        }
    }
}

/// The K-quant tile on AVX2, in the row order of [`super::portable::tile_k_rows`]: activation
/// rows `r0..r0+R` times eight interleaved weight rows. Each `vpmaddubsw` multiplies four
/// weights of every row by the same four activations (broadcast); `G` of them are added in
/// 16 bits (8 for Q4_K, whose values are 0..=15; 2 for Q6_K's 0..=63 — the most that cannot
/// overflow) before one `vpmaddwd` by the rows' scales, so the integer products take about
/// 1.1 (Q4_K) or 1.5 (Q6_K) multiplies per 32 instead of 2. Lane `j` of the sums is row
/// `j`'s exact integer per super-block.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
#[allow(clippy::too_many_arguments)]
pub unsafe fn tile_k8_avx2<const R: usize, const G: usize>(
    w: &InterleavedK8,
    rows: &[DecodedRowK; 8],
    x: &QuantizedRowsK,
    r0: usize,
    o: u32,
    with_min: bool,
    out: &mut [[f32; 8]; R],
) {
    let k = x.k;
    let nsb = k / 256;
    let shift = _mm_cvtsi32_si128(o.trailing_zeros() as i32);
    let xq: [*const i8; R] = std::array::from_fn(|r| x.qs.as_ptr().add((r0 + r) * k));
    let mut acc = [_mm256_setzero_ps(); R];
    for sb in 0..nsb {
        let mut isum = [_mm256_setzero_si256(); R];
        for b in sb * 8..sb * 8 + 8 {
            for g0 in (0..8).step_by(G) {
                let mut p = [_mm256_setzero_si256(); R];
                for g in g0..g0 + G {
                    let wv =
                        _mm256_loadu_si256(w.u.as_ptr().add((b * 8 + g) * 32) as *const __m256i);
                    for r in 0..R {
                        let q4 = (xq[r].add(b * BLOCK + 4 * g) as *const i32).read_unaligned();
                        p[r] =
                            _mm256_add_epi16(p[r], _mm256_maddubs_epi16(wv, _mm256_set1_epi32(q4)));
                    }
                }
                let sv =
                    _mm256_loadu_si256(w.sc.as_ptr().add((b * 2 + g0 / 4) * 16) as *const __m256i);
                for r in 0..R {
                    isum[r] = _mm256_add_epi32(isum[r], _mm256_madd_epi16(p[r], sv));
                }
            }
        }
        if o != 0 {
            for r in 0..R {
                let gs = x.group_sums.as_ptr().add(((r0 + r) * k + sb * 256) / 16) as *const i32;
                let mut c = _mm256_setzero_si256();
                for p in 0..8 {
                    let cv = _mm256_loadu_si256(
                        w.corr.as_ptr().add((sb * 8 + p) * 16) as *const __m256i
                    );
                    let g2 = _mm256_set1_epi32(gs.add(p).read_unaligned());
                    c = _mm256_add_epi32(c, _mm256_madd_epi16(g2, cv));
                }
                isum[r] = _mm256_sub_epi32(isum[r], _mm256_sll_epi32(c, shift));
            }
        }
        let dw = _mm256_loadu_ps(w.d.as_ptr().add(sb * 8));
        for r in 0..R {
            let dd = _mm256_mul_ps(dw, _mm256_set1_ps(*x.d.get_unchecked((r0 + r) * nsb + sb)));
            acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r]), dd, acc[r]);
        }
    }
    for r in 0..R {
        _mm256_storeu_ps(out[r].as_mut_ptr(), acc[r]);
        if with_min {
            for (j, row) in rows.iter().enumerate() {
                out[r][j] -= min_term_k_avx2(row.mins.as_ptr(), x, r0 + r);
            }
        }
    }
}

/// Sixteen K-quant weight rows interleaved for [`tile_k16_zmm`]: four weights of each row
/// in turn, so one 512-bit register holds weights `4g..4g+4` of a block for all sixteen
/// rows and `vpdpbusd` adds each row's four products into that row's own 32-bit lane.
pub struct InterleavedK16 {
    /// Per block, per group of four weights `g`, per row: the four values (`16 · k` bytes).
    u: Vec<u8>,
    /// Per block and half block (16 weights), per row: its scale.
    sc: Vec<i32>,
    /// Per super-block, per row: `d`.
    d: Vec<f32>,
    /// Per super-block, per pair of 16-weight groups `p`, per row: the two group terms
    /// (`corr[2p]`, `corr[2p + 1]`).
    corr: Vec<i16>,
    /// Per entry `i` of [`super::formats::min_len`], per row: Q4_K's minimum `mins[i]`.
    mins: Vec<f32>,
}

impl InterleavedK16 {
    /// Storage for rows of `k` weights.
    pub fn new(k: usize) -> Self {
        Self {
            u: vec![0; 16 * k],
            sc: vec![0; k / 32 * 2 * 16],
            d: vec![0.0; k / 256 * 16],
            corr: vec![0; k / 256 * 8 * 32],
            mins: vec![0.0; super::formats::min_len(k) * 16],
        }
    }

    /// Interleave sixteen decoded rows (the values by 16 × 16 transposes of 32-bit groups).
    #[target_feature(enable = "avx512f")]
    pub unsafe fn fill(&mut self, rows: &[DecodedRowK; 16]) {
        let k = rows[0].u.len();
        // Sixteen groups of four values of each row in, sixteen rows of one group out.
        for t0 in (0..k / 4).step_by(16) {
            let a: [__m512i; 16] = std::array::from_fn(|j| {
                _mm512_loadu_si512(rows[j].u.as_ptr().add(t0 * 4) as *const _)
            });
            for (g, v) in transpose_16x16(a).into_iter().enumerate() {
                _mm512_storeu_si512(self.u.as_mut_ptr().add((t0 + g) * 64) as *mut _, v);
            }
        }
        for (j, row) in rows.iter().enumerate() {
            // One scale per 16 weights: `sc` holds one per pair.
            for (h, s) in row.sc.iter().step_by(8).enumerate() {
                *self.sc.get_unchecked_mut(h * 16 + j) = *s as i32;
            }
            for (sb, d) in row.d.iter().enumerate() {
                *self.d.get_unchecked_mut(sb * 16 + j) = *d;
            }
            for (p, pair) in row.corr.chunks_exact(2).enumerate() {
                let dst = (p * 16 + j) * 2;
                *self.corr.get_unchecked_mut(dst) = pair[0];
                *self.corr.get_unchecked_mut(dst + 1) = pair[1];
            }
            for (i, m) in row.mins.iter().enumerate() {
                *self.mins.get_unchecked_mut(i * 16 + j) = *m;
            }
        }
    }
}

/// Transpose a 16 × 16 matrix of 32-bit elements: element `g` of `a[j]` becomes element
/// `j` of the result's `g`.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn transpose_16x16(a: [__m512i; 16]) -> [__m512i; 16] {
    // Within each 128-bit lane: pairs of rows, then quads (c[4i + e], lane L: rows
    // 4i..4i+4 of group 4L + e).
    let b: [__m512i; 16] = std::array::from_fn(|x| {
        let i = x / 2;
        if x % 2 == 0 {
            _mm512_unpacklo_epi32(a[2 * i], a[2 * i + 1])
        } else {
            _mm512_unpackhi_epi32(a[2 * i], a[2 * i + 1])
        }
    });
    let c: [__m512i; 16] = std::array::from_fn(|x| {
        let (i, e) = (x / 4, x % 4);
        let (p, q) = (b[4 * i + e / 2], b[4 * i + 2 + e / 2]);
        if e % 2 == 0 {
            _mm512_unpacklo_epi64(p, q)
        } else {
            _mm512_unpackhi_epi64(p, q)
        }
    });
    // Then a 4 × 4 transpose of 128-bit lanes for each e: lane Q of out[4L + e] is lane L
    // of c[4Q + e].
    let mut out = [_mm512_setzero_si512(); 16];
    for e in 0..4 {
        let d0 = _mm512_shuffle_i32x4::<0x44>(c[e], c[4 + e]);
        let d1 = _mm512_shuffle_i32x4::<0xEE>(c[e], c[4 + e]);
        let d2 = _mm512_shuffle_i32x4::<0x44>(c[8 + e], c[12 + e]);
        let d3 = _mm512_shuffle_i32x4::<0xEE>(c[8 + e], c[12 + e]);
        out[e] = _mm512_shuffle_i32x4::<0x88>(d0, d2);
        out[4 + e] = _mm512_shuffle_i32x4::<0xDD>(d0, d2);
        out[8 + e] = _mm512_shuffle_i32x4::<0x88>(d1, d3);
        out[12 + e] = _mm512_shuffle_i32x4::<0xDD>(d1, d3);
    }
    out
}

/// The K-quant tile on AVX-512 VNNI, in the row order of [`super::portable::tile_k_rows`]:
/// activation rows `r0..r0+R` times sixteen interleaved weight rows. Each `vpdpbusd`
/// multiplies four weights of every row by the same four activations (a broadcast) and adds
/// them into the row's lane; the `4 · G` weights that share a scale (a Q4_K block, `G` = 8;
/// half a Q6_K block, `G` = 4) are summed that way before one `vpmulld` by the rows'
/// scales — about 1.1 (Q4_K) or 1.25 (Q6_K) multiplies per 64 products, against 2 for a
/// `vpmaddubsw` + `vpdpwssd` pair — and lane `j` of the sum is row `j`'s exact integer per
/// super-block, so no horizontal sum is needed. Q4_K's minimum term is computed sixteen
/// rows at a time in the lane order of [`super::portable::min_term_k`]. Row `r` of the
/// results goes to `y[r · n .. r · n + jn]` (`jn` ≤ 16: the weight rows that exist).
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
#[allow(clippy::too_many_arguments)]
pub unsafe fn tile_k16_zmm<const R: usize, const G: usize>(
    w: &InterleavedK16,
    x: &QuantizedRowsK,
    r0: usize,
    o: u32,
    with_min: bool,
    y: *mut f32,
    n: usize,
    jn: usize,
) {
    let k = x.k;
    let nsb = k / 256;
    let shift = _mm_cvtsi32_si128(o.trailing_zeros() as i32);
    let xq: [*const i8; R] = std::array::from_fn(|r| x.qs.as_ptr().add((r0 + r) * k));
    let mut acc = [_mm512_setzero_ps(); R];
    for sb in 0..nsb {
        let mut isum = [_mm512_setzero_si512(); R];
        for b in sb * 8..sb * 8 + 8 {
            for g0 in (0..8).step_by(G) {
                let mut p = [_mm512_setzero_si512(); R];
                for g in g0..g0 + G {
                    let wv = _mm512_loadu_si512(w.u.as_ptr().add((b * 8 + g) * 64) as *const _);
                    for r in 0..R {
                        let q4 = (xq[r].add(b * BLOCK + 4 * g) as *const i32).read_unaligned();
                        p[r] = _mm512_dpbusd_epi32(p[r], wv, _mm512_set1_epi32(q4));
                    }
                }
                let sv = _mm512_loadu_si512(w.sc.as_ptr().add((b * 2 + g0 / 4) * 16) as *const _);
                for r in 0..R {
                    isum[r] = _mm512_add_epi32(isum[r], _mm512_mullo_epi32(p[r], sv));
                }
            }
        }
        if o != 0 {
            for r in 0..R {
                let gs = x.group_sums.as_ptr().add(((r0 + r) * k + sb * 256) / 16) as *const i32;
                let mut c = _mm512_setzero_si512();
                for p in 0..8 {
                    let cv = _mm512_loadu_si512(w.corr.as_ptr().add((sb * 8 + p) * 32) as *const _);
                    let g2 = _mm512_set1_epi32(gs.add(p).read_unaligned());
                    c = _mm512_add_epi32(c, _mm512_madd_epi16(g2, cv));
                }
                isum[r] = _mm512_sub_epi32(isum[r], _mm512_sll_epi32(c, shift));
            }
        }
        let dw = _mm512_loadu_ps(w.d.as_ptr().add(sb * 16));
        for r in 0..R {
            let dd = _mm512_mul_ps(dw, _mm512_set1_ps(*x.d.get_unchecked((r0 + r) * nsb + sb)));
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[r]), dd, acc[r]);
        }
    }
    for r in 0..R {
        if with_min {
            acc[r] = _mm512_sub_ps(acc[r], min_terms_k16(w, x, r0 + r));
        }
        _mm512_mask_storeu_ps(y.add(r * n), (1u32 << jn).wrapping_sub(1) as u16, acc[r]);
    }
}

/// Q4_K's minimum terms of sixteen interleaved rows for activation row `row`, lane `j` for
/// weight row `j`: sixteen accumulators stand for [`super::portable::min_term_k`]'s sixteen
/// lanes, then its additions in its order.
#[inline]
#[target_feature(enable = "avx2,fma,f16c,avx512f")]
unsafe fn min_terms_k16(w: &InterleavedK16, x: &QuantizedRowsK, row: usize) -> __m512 {
    let n = super::formats::min_len(x.k);
    let s = x.block_sums.as_ptr().add(row * n);
    let mut a = [_mm512_setzero_ps(); 16];
    for c in (0..n).step_by(16) {
        for (l, a) in a.iter_mut().enumerate() {
            let m = _mm512_loadu_ps(w.mins.as_ptr().add((c + l) * 16));
            *a = _mm512_fmadd_ps(m, _mm512_set1_ps(*s.add(c + l)), *a);
        }
    }
    let h: [__m512; 8] = std::array::from_fn(|l| _mm512_add_ps(a[l], a[l + 8]));
    _mm512_add_ps(
        _mm512_add_ps(_mm512_add_ps(h[0], h[4]), _mm512_add_ps(h[2], h[6])),
        _mm512_add_ps(_mm512_add_ps(h[1], h[5]), _mm512_add_ps(h[3], h[7])),
    )
}

/// One K-quant weight row (its stored bytes) times activation rows `r0..r0+R`, decoding
/// in registers: the path for decoding (one to four rows), where a separate decode pass
/// would cost as much as the product. Bit-identical to [`tile_k16_zmm`] (AVX-512) or [`tile_k8_avx2`] (AVX2)
/// for the same rows (integer sums are exact in any order, and the float steps are the same).
#[inline(always)]
unsafe fn gemv_k_body<const R: usize, const VNNI: bool>(
    format: Format,
    bytes: &[u8],
    x: &QuantizedRowsK,
    r0: usize,
) -> [f32; R] {
    let k = x.k;
    let nsb = k / 256;
    let o = format.offset();
    let with_min = format.has_min();
    let shift = _mm_cvtsi32_si128(o.trailing_zeros() as i32);
    let lo4 = _mm256_set1_epi8(0x0F);
    let p = bytes.as_ptr();
    let xq: [*const i8; R] = std::array::from_fn(|r| x.qs.as_ptr().add((r0 + r) * k));
    // Each row's sum: in lane `r` for several rows, else in `row_acc`, with the lane sums
    // of an even super-block waiting for the next one (`pending`, `d_prev`).
    let mut acc4 = _mm_setzero_ps();
    let mut row_acc = 0.0f32;
    let mut pending = _mm256_setzero_si256();
    let mut d_prev = 0.0f32;
    // Q4_K's minimum term in the order of `super::portable::min_term_k`: lanes 0–7 take the
    // even super-blocks, 8–15 the odd ones.
    let mut accm = [[_mm256_setzero_ps(); 2]; R];
    let ml = super::formats::min_len(k);
    let dot = |isum: __m256i, u: __m256i, sc: __m256i, q: *const i8| -> __m256i {
        let prod = _mm256_maddubs_epi16(u, _mm256_loadu_si256(q as *const __m256i));
        if VNNI {
            _mm256_dpwssd_epi32(isum, prod, sc)
        } else {
            _mm256_add_epi32(isum, _mm256_madd_epi16(prod, sc))
        }
    };
    let sb_bytes = format.row_bytes(256);
    for sb in 0..nsb {
        // The rows of a task are consecutive in the file: ask for the bytes a few
        // super-blocks ahead now, so memory keeps streaming while this one is computed.
        for line in (0..sb_bytes).step_by(64) {
            _mm_prefetch::<_MM_HINT_T0>(
                p.wrapping_add(sb * sb_bytes + PREFETCH_AHEAD + line) as *const i8
            );
        }
        // Two integer accumulators (even and odd blocks) to shorten the dependency chain.
        let mut is = [[_mm256_setzero_si256(); 2]; R];
        let xs: [*const i8; R] = std::array::from_fn(|r| xq[r].add(sb * 256));
        let (d, corr) = match format {
            Format::Q4K => {
                let blk = &bytes[sb * 144..sb * 144 + 144];
                let (sc, mn) = super::formats::q4k_scales_mins(&blk[4..16]);
                if VNNI {
                    // 512-bit form: one register holds a pair's two blocks (low nibbles = the
                    // even block in lanes 0–7, high nibbles = the odd one in lanes 8–15), the
                    // activations of both are contiguous, so each pair takes one `vpmaddubsw`
                    // and one `vpdpwssd` per row; the halves are the even and odd sums.
                    let scales = _mm512_cvtepu8_epi16(_mm256_castsi128_si256(_mm_loadl_epi64(
                        sc.as_ptr() as *const __m128i,
                    )));
                    let lo4z = _mm512_set1_epi8(0x0F);
                    let shifts =
                        _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
                    let mut iz = [_mm512_setzero_si512(); R];
                    for pair in 0..4 {
                        let v = _mm512_broadcast_i64x4(_mm256_loadu_si256(
                            p.add(sb * 144 + 16 + pair * 32) as *const __m256i,
                        ));
                        let u = _mm512_and_si512(_mm512_srlv_epi16(v, shifts), lo4z);
                        let pick = _mm512_inserti64x4(
                            _mm512_set1_epi16(2 * pair as i16),
                            _mm256_set1_epi16(2 * pair as i16 + 1),
                            1,
                        );
                        let s = _mm512_permutexvar_epi16(pick, scales);
                        for r in 0..R {
                            let q = _mm512_loadu_si512(xs[r].add(pair * 64) as *const _);
                            iz[r] = dpwssd512(iz[r], _mm512_maddubs_epi16(u, q), s);
                        }
                    }
                    for r in 0..R {
                        is[r][0] = _mm512_castsi512_si256(iz[r]);
                        is[r][1] = _mm512_extracti64x4_epi64(iz[r], 1);
                    }
                } else {
                    for pair in 0..4 {
                        let v =
                            _mm256_loadu_si256(p.add(sb * 144 + 16 + pair * 32) as *const __m256i);
                        let u0 = _mm256_and_si256(v, lo4);
                        let u1 = _mm256_and_si256(_mm256_srli_epi16(v, 4), lo4);
                        let s0 = _mm256_set1_epi16(sc[pair * 2] as i16);
                        let s1 = _mm256_set1_epi16(sc[pair * 2 + 1] as i16);
                        for r in 0..R {
                            is[r][0] = dot(is[r][0], u0, s0, xs[r].add(pair * 64));
                            is[r][1] = dot(is[r][1], u1, s1, xs[r].add(pair * 64 + 32));
                        }
                    }
                }
                let dmin = f16_at(&blk[2..]);
                let mins = _mm256_mul_ps(
                    _mm256_set1_ps(dmin),
                    _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(
                        mn.as_ptr() as *const __m128i
                    ))),
                );
                for r in 0..R {
                    let s = _mm256_loadu_ps(x.block_sums.as_ptr().add((r0 + r) * ml + sb * 8));
                    accm[r][sb % 2] = _mm256_fmadd_ps(mins, s, accm[r][sb % 2]);
                }
                (f16_at(blk), _mm256_setzero_si256())
            }
            _ => {
                let base = sb * 210;
                for n in 0..2 {
                    let parts = q6k_blocks(p.add(base), n);
                    let sc = p.add(base + 192 + n * 8) as *const i8;
                    for (part, u) in parts.into_iter().enumerate() {
                        let s = _mm256_setr_m128i(
                            _mm_set1_epi16(*sc.add(part * 2) as i16),
                            _mm_set1_epi16(*sc.add(part * 2 + 1) as i16),
                        );
                        for r in 0..R {
                            is[r][part % 2] =
                                dot(is[r][part % 2], u, s, xs[r].add(n * 128 + part * 32));
                        }
                    }
                }
                let corr =
                    _mm256_cvtepi8_epi16(_mm_loadu_si128(p.add(base + 192) as *const __m128i));
                (f16_at(&bytes[base + 208..]), corr)
            }
        };
        let mut v = [_mm256_setzero_si256(); R];
        for r in 0..R {
            let even = if o == 0 {
                is[r][0]
            } else {
                let gs = _mm256_loadu_si256(
                    x.group_sums.as_ptr().add(((r0 + r) * k + sb * 256) / 16) as *const __m256i,
                );
                let c = _mm256_madd_epi16(gs, corr);
                _mm256_sub_epi32(is[r][0], _mm256_sll_epi32(c, shift))
            };
            v[r] = _mm256_add_epi32(even, is[r][1]);
        }
        // The row order (see `super::portable::tile_k_rows`): one exact integer per
        // super-block, added into the row's sum super-block after super-block. The lanes
        // are summed for several rows at once (fewer shuffles than one by one): a single
        // row pairs each even super-block with the next.
        let dx = |r: usize, sb: usize| *x.d.get_unchecked((r0 + r) * nsb + sb);
        if R > 1 {
            let ints = _mm_cvtepi32_ps(hsum_i32_x4(std::array::from_fn(|r| {
                if r < R {
                    v[r]
                } else {
                    _mm256_setzero_si256()
                }
            })));
            let dxs = _mm_setr_ps(
                dx(0, sb),
                dx(1.min(R - 1), sb),
                dx(2.min(R - 1), sb),
                dx(3.min(R - 1), sb),
            );
            acc4 = _mm_fmadd_ps(ints, _mm_mul_ps(_mm_set1_ps(d), dxs), acc4);
        } else if sb % 2 == 0 && sb + 1 < nsb {
            pending = v[0];
        } else {
            // Odd super-block count: the last one goes alone (its pair is zero).
            let (a, b) = if sb % 2 == 0 {
                (v[0], _mm256_setzero_si256())
            } else {
                (pending, v[0])
            };
            let (f0, f1) = hsum_pair_f32(a, b);
            if sb % 2 == 0 {
                row_acc = f0.mul_add(d * dx(0, sb), row_acc);
            } else {
                row_acc = f0.mul_add(d_prev * dx(0, sb - 1), row_acc);
                row_acc = f1.mul_add(d * dx(0, sb), row_acc);
            }
        }
        d_prev = d;
    }
    let mut sums = [0.0f32; 4];
    _mm_storeu_ps(sums.as_mut_ptr(), acc4);
    if R == 1 {
        sums[0] = row_acc;
    }
    std::array::from_fn(|r| {
        let mut y = sums[r];
        if with_min {
            // The zero padding of an odd super-block count adds 0·0 to the odd lanes,
            // which leaves them unchanged: nothing to replay here.
            y -= hsum(_mm256_add_ps(accm[r][0], accm[r][1]));
        }
        y
    })
}

/// One 32-weight-format row (its stored bytes) times activation rows `r0..r0+R`,
/// decoding in registers; bit-identical to [`tile_zmm`] / [`tile_avx2`] for the same rows.
#[inline(always)]
unsafe fn gemv_blocks_body<const R: usize, const VNNI: bool>(
    format: Format,
    bytes: &[u8],
    x: &QuantizedRows,
    r0: usize,
) -> [f32; R] {
    let nb = x.blocks_per_row();
    let o = format.offset();
    let shift = _mm_cvtsi32_si128(o.trailing_zeros() as i32);
    let off = _mm256_set1_epi8(o as u8 as i8);
    let ones = _mm256_set1_epi16(1);
    let flip = _mm256_set1_epi8(-128);
    let bb = format.block_bytes();
    let p = bytes.as_ptr();
    let mut acc = [[_mm256_setzero_ps(); 2]; R];
    let mut tt = [0.0f32; R];
    // `slot` is b % 2, passed as a constant so the accumulators stay in registers.
    // (A macro, not a closure: this body has no target features of its own to lend one.)
    macro_rules! block {
        ($b:expr, $slot:literal) => {{
            let b: usize = $b;
            let slot: usize = $slot;
            let blk = &bytes[b * bb..(b + 1) * bb];
            let d = f16_at(blk);
            let u = match format {
                Format::Q8_0 => _mm256_xor_si256(
                    _mm256_loadu_si256(p.add(b * bb + 2) as *const __m256i),
                    flip,
                ),
                Format::Q5_0 => {
                    let qh = u32::from_le_bytes([blk[2], blk[3], blk[4], blk[5]]);
                    _mm256_or_si256(nibbles_16(p.add(b * bb + 6)), high_bits_32(qh))
                }
                Format::Q4_1 => nibbles_16(p.add(b * bb + 4)),
                _ => nibbles_16(p.add(b * bb + 2)),
            };
            let dw = _mm256_set1_ps(d);
            let (wabs, wsgn) = if VNNI || o == 0 {
                (u, u)
            } else {
                let ws = _mm256_sub_epi8(u, off);
                (_mm256_abs_epi8(ws), ws)
            };
            for r in 0..R {
                let xb = (r0 + r) * nb + b;
                let q = _mm256_loadu_si256(
                    x.qs.as_ptr().add((r0 + r) * x.k + b * BLOCK) as *const __m256i
                );
                let i = if VNNI {
                    let c = if o == 0 {
                        _mm256_setzero_si256()
                    } else {
                        let sums = _mm256_loadu_si256(
                            x.neg_lane_sums.as_ptr().add(xb * LANES) as *const __m256i
                        );
                        _mm256_sll_epi32(sums, shift)
                    };
                    _mm256_dpbusd_epi32(c, u, q)
                } else if o == 0 {
                    _mm256_madd_epi16(_mm256_maddubs_epi16(wabs, q), ones)
                } else {
                    _mm256_madd_epi16(_mm256_maddubs_epi16(wabs, _mm256_sign_epi8(q, wsgn)), ones)
                };
                let dx = _mm256_set1_ps(*x.d.get_unchecked(xb));
                acc[r][slot] =
                    _mm256_fmadd_ps(_mm256_cvtepi32_ps(i), _mm256_mul_ps(dw, dx), acc[r][slot]);
                if format == Format::Q4_1 {
                    tt[r] = f16_at(&blk[2..]).mul_add(*x.block_sums.get_unchecked(xb), tt[r]);
                }
            }
        }};
    }
    for b in (0..nb).step_by(2) {
        // As in `gemv_k_body`: the next bytes of this task's consecutive rows, ahead.
        _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(b * bb + PREFETCH_AHEAD) as *const i8);
        block!(b, 0);
        if b + 1 < nb {
            block!(b + 1, 1);
        }
    }
    std::array::from_fn(|r| {
        let mut y = hsum(_mm256_add_ps(acc[r][0], acc[r][1]));
        if format.has_min() {
            y += tt[r];
        }
        y
    })
}

/// The entry points of a register path (`$body`, generic over the row count and VNNI):
/// `$vnni` and `$avx2` for one to four activation rows and one weight row.
macro_rules! register_path {
    ($body:ident, $x:ty, $vnni:ident, $avx2:ident) => {
        #[doc = concat!("[`", stringify!($body), "`] with AVX-512 VNNI.")]
        #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512vl,avx512bw,avx512vnni")]
        pub unsafe fn $vnni<const R: usize>(
            format: Format,
            bytes: &[u8],
            x: &$x,
            r0: usize,
        ) -> [f32; R] {
            $body::<R, true>(format, bytes, x, r0)
        }

        #[doc = concat!("[`", stringify!($body), "`] with AVX2.")]
        #[target_feature(enable = "avx2,fma,f16c")]
        pub unsafe fn $avx2<const R: usize>(
            format: Format,
            bytes: &[u8],
            x: &$x,
            r0: usize,
        ) -> [f32; R] {
            $body::<R, false>(format, bytes, x, r0)
        }
    };
}

register_path!(gemv_k_body, QuantizedRowsK, gemv_k_vnni, gemv_k_avx2);
register_path!(
    gemv_blocks_body,
    QuantizedRows,
    gemv_blocks_vnni,
    gemv_blocks_avx2
);

row_loop!(
    rows_zmm,
    tile_zmm,
    DecodedRow,
    QuantizedRows,
    #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
);
row_loop!(
    rows_avx2,
    tile_avx2,
    DecodedRow,
    QuantizedRows,
    #[target_feature(enable = "avx2,fma,f16c")]
);
