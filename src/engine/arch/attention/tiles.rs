//! AVX-512 attention for one *group tile*: the query heads that share a kv head, at one
//! position. They see the same keys, so each block of keys is loaded once for all of
//! them.
//!
//! Keys come in [`KeyBlocks`] (16 positions per block, transposed), so scores are computed
//! with the 16 positions of a block in the 16 lanes of a register: for each head dimension
//! `d`, one load of the keys' component `d` and one broadcast-FMA per query head. Each
//! lane's score is a plain chain of FMAs over `d = 0..head_dim` — no horizontal sums, and
//! nothing that depends on which other rows or positions are in the batch, so a row gives
//! the same bits after a cached prefix as in a full recompute. The weighted sum of values
//! runs over positions in order with the output in registers (64 dimensions × up to 4 heads
//! at a time).
//!
//! [`KeyBlocks`]: crate::engine::kv_blocks::KeyBlocks

use crate::engine::arch::vexp::{exp16, exp16_fast};
use crate::engine::kv_blocks::KeyBlocks;
use std::arch::x86_64::*;

const W: usize = KeyBlocks::WIDTH;

/// Most query rows scored together (2 blocks × 8 rows = 16 accumulators).
const MAX_QK_ROWS: usize = 8;
/// Most rows in one weighted-sum pass (4 rows × 4 registers = 16 accumulators).
const MAX_PV_ROWS: usize = 4;
/// Key blocks scored together by the bf16 tiles (8 rows × 3 blocks = 24 accumulators).
const QK16_BLOCKS: usize = 3;
/// Rows and head dimensions per weighted-sum pass of the bf16 tiles (8 rows × 2 registers
/// = 16 accumulators: all of a group's rows share each load of values).
const PV16_ROWS: usize = 8;
const PV16_DIMS: usize = 32;
/// Head dimensions per weighted-sum pass (4 registers).
const PV_DIMS: usize = 64;

/// Whether [`attend_group`] supports head size `hd`.
pub fn supports(hd: usize) -> bool {
    hd > 0 && hd.is_multiple_of(PV_DIMS)
}

/// Where one kv head's keys and values are.
pub struct KvHead<'a> {
    /// The layer's key blocks (all heads).
    pub blocks: &'a [f32],
    /// Key/value heads in `blocks`.
    pub n_kv_head: usize,
    /// This head's index.
    pub head: usize,
    /// This head's values, `[position][hd]` from position 0.
    pub values: &'a [f32],
}

/// Attention for `rows` query rows (`q`: `[rows][hd]`) over positions `lo..visible` of one
/// kv head (`lo` > 0 for a sliding window); writes `out` (`[rows][hd]`). `scores` is
/// scratch space. The blocks before `lo`'s block are skipped and the lanes before `lo` in
/// its block masked, so a row's result depends only on its own position.
///
/// # Safety
/// The CPU must have AVX-512F; `hd` must satisfy [`supports`]; `kv.blocks` must hold
/// `visible.div_ceil(16)` blocks and `kv.values` `visible` rows; `lo < visible`.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f")]
pub unsafe fn attend_group(
    q: &[f32],
    rows: usize,
    kv: &KvHead,
    lo: usize,
    visible: usize,
    hd: usize,
    scale: f32,
    scores: &mut Vec<f32>,
    out: &mut [f32],
) {
    // Work from the block that holds `lo`: positions below are relative to its start.
    let b0 = lo / W;
    let (lo, visible) = (lo - b0 * W, visible - b0 * W);
    let nb = visible.div_ceil(W);
    let stride = nb * W;
    scores.clear();
    // Scores, then one reciprocal sum per row.
    scores.resize(rows * stride + rows, 0.0);
    let block_stride = kv.n_kv_head * hd * W;
    let head_off = kv.head * hd * W;
    // Scores, block pair by block pair; all row chunks use a block while it is in L1.
    score_tiles(nb, rows, 2, |b, nblk, r0, r| {
        let args = QkArgs {
            q: q.as_ptr().add(r0 * hd),
            keys: kv.blocks.as_ptr().add((b0 + b) * block_stride + head_off),
            block_stride,
            hd,
            scores: scores.as_mut_ptr().add(r0 * stride + b * W),
            score_stride: stride,
            first_pos: b * W,
            lo,
            visible,
            scale,
        };
        macro_rules! qk {
            ($($n:literal)*) => {
                match (r, nblk) {
                    $(($n, 2) => qk_tile::<$n, 2>(&args), ($n, _) => qk_tile::<$n, 1>(&args),)*
                    _ => unreachable!(),
                }
            };
        }
        qk!(1 2 3 4 5 6 7 8);
    });
    // Softmax per row: max, exponentials and their sum, all in position order.
    let inv = scores.as_mut_ptr().add(rows * stride);
    for r in 0..rows {
        let s = scores.as_mut_ptr().add(r * stride);
        let maxv = row_max(s, nb);
        let mut sumv = _mm512_setzero_ps();
        for c in 0..nb {
            let e = exp16(_mm512_sub_ps(_mm512_loadu_ps(s.add(c * W)), maxv));
            _mm512_storeu_ps(s.add(c * W), e);
            sumv = _mm512_add_ps(sumv, e);
        }
        *inv.add(r) = 1.0 / _mm512_reduce_add_ps(sumv);
    }
    // Weighted values, 64 dimensions × up to 4 rows per pass; rows split evenly.
    row_chunks(rows, MAX_PV_ROWS, |r0, r| {
        for d0 in (0..hd).step_by(PV_DIMS) {
            let args = PvArgs {
                probs: scores.as_ptr().add(r0 * stride),
                prob_stride: stride,
                values: kv.values.as_ptr().add(b0 * W * hd + d0),
                hd,
                visible,
                inv: inv.add(r0),
                out: out.as_mut_ptr().add(r0 * hd + d0),
            };
            match r {
                1 => pv_tile::<1>(&args),
                2 => pv_tile::<2>(&args),
                3 => pv_tile::<3>(&args),
                4 => pv_tile::<4>(&args),
                _ => unreachable!(),
            }
        }
    });
}

/// Call `f(b, nblk, r0, r)` for every score tile: `nblk` (≤ `max_blocks`) key blocks from
/// block `b`, query rows `r0..r0 + r` (≤ [`MAX_QK_ROWS`]); all row chunks of a block run
/// while its keys are in L1.
#[inline]
fn score_tiles(
    nb: usize,
    rows: usize,
    max_blocks: usize,
    mut f: impl FnMut(usize, usize, usize, usize),
) {
    let mut b = 0;
    while b < nb {
        let nblk = (nb - b).min(max_blocks);
        let mut r0 = 0;
        while r0 < rows {
            let r = (rows - r0).min(MAX_QK_ROWS);
            f(b, nblk, r0, r);
            r0 += r;
        }
        b += nblk;
    }
}

/// Call `f(r0, r)` for `rows` split evenly into chunks of at most `max` rows.
#[inline]
fn row_chunks(rows: usize, max: usize, mut f: impl FnMut(usize, usize)) {
    let chunks = rows.div_ceil(max);
    let mut r0 = 0;
    for c in 0..chunks {
        let r = (rows - r0) / (chunks - c);
        f(r0, r);
        r0 += r;
    }
}

/// Write a score tile: `acc[r][n]` × `scale` to row `r`, block `n` of `scores`, with lanes
/// before `lo` or at or past `visible` set to −∞.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn store_scores<const R: usize, const NB: usize>(
    acc: &[[__m512; NB]; R],
    scores: *mut f32,
    stride: usize,
    first_pos: usize,
    lo: usize,
    visible: usize,
    scale: f32,
) {
    let scale = _mm512_set1_ps(scale);
    let neg = _mm512_set1_ps(f32::NEG_INFINITY);
    for n in 0..NB {
        let start = first_pos + n * W;
        let live = visible.saturating_sub(start).min(W);
        let dead = lo.saturating_sub(start).min(W);
        let below: u32 = if live == W {
            0xffff
        } else {
            (1u32 << live) - 1
        };
        let mask = (below & !((1u32 << dead) - 1)) as __mmask16;
        for (r, acc) in acc.iter().enumerate() {
            let s = _mm512_mask_blend_ps(mask, neg, _mm512_mul_ps(acc[n], scale));
            _mm512_storeu_ps(scores.add(r * stride + n * W), s);
        }
    }
}

/// The largest of a row's `nb` blocks of scores, in every lane.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn row_max(s: *const f32, nb: usize) -> __m512 {
    let mut maxv = _mm512_set1_ps(f32::NEG_INFINITY);
    for c in 0..nb {
        maxv = _mm512_max_ps(maxv, _mm512_loadu_ps(s.add(c * W)));
    }
    _mm512_set1_ps(_mm512_reduce_max_ps(maxv))
}

/// One score tile's inputs: queries and keys as `Q` and `K` (f32, or bf16 pairs and bf16).
struct QkArgs<Q, K> {
    q: *const Q,
    keys: *const K,
    block_stride: usize,
    hd: usize,
    scores: *mut f32,
    score_stride: usize,
    first_pos: usize,
    lo: usize,
    visible: usize,
    scale: f32,
}

/// Scores of `R` query rows against `NB` consecutive key blocks: `R × NB` accumulators,
/// each a chain of FMAs over the head dimensions; lanes at or past `visible` become −∞.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn qk_tile<const R: usize, const NB: usize>(a: &QkArgs<f32, f32>) {
    let mut acc = [[_mm512_setzero_ps(); NB]; R];
    for d in 0..a.hd {
        let k: [__m512; NB] =
            std::array::from_fn(|n| _mm512_loadu_ps(a.keys.add(n * a.block_stride + d * W)));
        for (r, acc) in acc.iter_mut().enumerate() {
            let qv = _mm512_set1_ps(*a.q.add(r * a.hd + d));
            for n in 0..NB {
                acc[n] = _mm512_fmadd_ps(qv, k[n], acc[n]);
            }
        }
    }
    store_scores(
        &acc,
        a.scores,
        a.score_stride,
        a.first_pos,
        a.lo,
        a.visible,
        a.scale,
    );
}

struct PvArgs {
    probs: *const f32,
    prob_stride: usize,
    values: *const f32,
    hd: usize,
    visible: usize,
    inv: *const f32,
    out: *mut f32,
}

/// `out[r][0..64] = inv[r] · Σ_j probs[r][j] · values[j][0..64]` for `R` rows, positions in
/// order, the 4 × `R` output registers held across all positions.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn pv_tile<const R: usize>(a: &PvArgs) {
    let mut acc = [[_mm512_setzero_ps(); 4]; R];
    for j in 0..a.visible {
        let vp = a.values.add(j * a.hd);
        let v: [__m512; 4] = std::array::from_fn(|c| _mm512_loadu_ps(vp.add(c * W)));
        for (r, acc) in acc.iter_mut().enumerate() {
            let w = _mm512_set1_ps(*a.probs.add(r * a.prob_stride + j));
            for c in 0..4 {
                acc[c] = _mm512_fmadd_ps(w, v[c], acc[c]);
            }
        }
    }
    for (r, acc) in acc.iter().enumerate() {
        let inv = _mm512_set1_ps(*a.inv.add(r));
        for (c, x) in acc.iter().enumerate() {
            _mm512_storeu_ps(a.out.add(r * a.hd + c * W), _mm512_mul_ps(*x, inv));
        }
    }
}

/// Where one kv head's keys and values are, in the bf16 blocks of [`KvBlocks16`].
///
/// [`KvBlocks16`]: crate::engine::kv_blocks::KvBlocks16
pub struct KvHead16<'a> {
    /// The layer's key blocks (all heads): `[block][kv_head][hd/2][16][2]`.
    pub keys: &'a [u16],
    /// The layer's value blocks (all heads): `[block][kv_head][8][hd][2]`.
    pub values: &'a [u16],
    /// Key/value heads in the blocks.
    pub n_kv_head: usize,
    /// This head's index.
    pub head: usize,
}

/// Scratch space of [`attend_group_bf16`], reused across calls.
#[derive(Default)]
pub struct Scratch16 {
    scores: Vec<f32>,
    probs: Vec<u16>,
    q: Vec<u16>,
}

/// [`attend_group`] on bf16 keys, values, queries and probabilities with f32 accumulation
/// (`vdpbf16ps`: two products per lane per instruction, twice the f32 FMA rate); scores,
/// softmax and outputs in f32. Every lane is still one fixed chain of instructions, so a
/// row's result does not depend on the batch.
///
/// # Safety
/// The CPU must have AVX-512F and AVX-512 BF16; `hd` must satisfy [`supports`]; the blocks
/// must hold `visible.div_ceil(16)` blocks; `lo < visible`.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
pub unsafe fn attend_group_bf16(
    q: &[f32],
    rows: usize,
    kv: &KvHead16,
    lo: usize,
    visible: usize,
    hd: usize,
    scale: f32,
    scratch: &mut Scratch16,
    out: &mut [f32],
) {
    // As in `attend_group`: from the block that holds `lo`, positions relative to it.
    let b0 = lo / W;
    let (lo, visible) = (lo - b0 * W, visible - b0 * W);
    let nb = visible.div_ceil(W);
    let stride = nb * W;
    let Scratch16 {
        scores,
        probs,
        q: qb,
    } = scratch;
    scores.clear();
    scores.resize(rows * stride + rows, 0.0);
    probs.clear();
    probs.resize(rows * stride, 0);
    // Queries to bf16, in order (pairs of dimensions are 32-bit elements).
    qb.clear();
    qb.resize(rows * hd, 0);
    for (src, dst) in q[..rows * hd].chunks_exact(32).zip(qb.chunks_exact_mut(32)) {
        let lo = _mm512_loadu_ps(src.as_ptr());
        let hi = _mm512_loadu_ps(src.as_ptr().add(16));
        let b: __m512i = std::mem::transmute(_mm512_cvtne2ps_pbh(hi, lo));
        _mm512_storeu_si512(dst.as_mut_ptr() as *mut __m512i, b);
    }
    let block_stride = kv.n_kv_head * hd * W;
    let head_off = kv.head * hd * W;
    score_tiles(nb, rows, QK16_BLOCKS, |b, nblk, r0, r| {
        let args = QkArgs {
            q: qb.as_ptr().add(r0 * hd) as *const u32,
            keys: kv.keys.as_ptr().add((b0 + b) * block_stride + head_off),
            block_stride,
            hd,
            scores: scores.as_mut_ptr().add(r0 * stride + b * W),
            score_stride: stride,
            first_pos: b * W,
            lo,
            visible,
            scale,
        };
        macro_rules! qk {
            ($($n:literal)*) => {
                match (r, nblk) {
                    $(($n, 3) => qk_tile16::<$n, 3>(&args),
                      ($n, 2) => qk_tile16::<$n, 2>(&args),
                      ($n, _) => qk_tile16::<$n, 1>(&args),)*
                    _ => unreachable!(),
                }
            };
        }
        qk!(1 2 3 4 5 6 7 8);
    });
    // Softmax per row in f32; the probabilities then go to bf16 for the weighted sum.
    let inv = scores.as_mut_ptr().add(rows * stride);
    for r in 0..rows {
        let s = scores.as_mut_ptr().add(r * stride);
        let maxv = row_max(s, nb);
        let mut sumv = _mm512_setzero_ps();
        let p = probs.as_mut_ptr().add(r * stride);
        for c in 0..nb {
            let e = exp16_fast(_mm512_sub_ps(_mm512_loadu_ps(s.add(c * W)), maxv));
            sumv = _mm512_add_ps(sumv, e);
            let pb: __m256i = std::mem::transmute(_mm512_cvtneps_pbh(e));
            _mm256_storeu_si256(p.add(c * W) as *mut __m256i, pb);
        }
        *inv.add(r) = 1.0 / _mm512_reduce_add_ps(sumv);
    }
    // Weighted values, 32 dimensions × up to 8 rows per pass (a group's rows share each
    // load of values).
    row_chunks(rows, PV16_ROWS, |r0, r| {
        for d0 in (0..hd).step_by(PV16_DIMS) {
            let args = PvArgs16 {
                probs: probs.as_ptr().add(r0 * stride) as *const u32,
                prob_stride: stride / 2,
                values: kv.values.as_ptr().add(b0 * block_stride),
                block_stride,
                head_off,
                d0,
                hd,
                pairs: visible.div_ceil(2),
                inv: inv.add(r0),
                out: out.as_mut_ptr().add(r0 * hd + d0),
            };
            match r {
                1 => pv_tile16::<1>(&args),
                2 => pv_tile16::<2>(&args),
                3 => pv_tile16::<3>(&args),
                4 => pv_tile16::<4>(&args),
                5 => pv_tile16::<5>(&args),
                6 => pv_tile16::<6>(&args),
                7 => pv_tile16::<7>(&args),
                8 => pv_tile16::<8>(&args),
                _ => unreachable!(),
            }
        }
    });
}

/// [`qk_tile`] with `vdpbf16ps`: per pair of head dimensions, one load of 16 positions'
/// keys and one broadcast-dot per query row.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn qk_tile16<const R: usize, const NB: usize>(a: &QkArgs<u32, u16>) {
    let mut acc = [[_mm512_setzero_ps(); NB]; R];
    for e in 0..a.hd / 2 {
        let k: [__m512bh; NB] = std::array::from_fn(|n| {
            std::mem::transmute(_mm512_loadu_si512(
                a.keys.add(n * a.block_stride + e * 2 * W) as *const __m512i,
            ))
        });
        for (r, acc) in acc.iter_mut().enumerate() {
            let qv: __m512bh =
                std::mem::transmute(_mm512_set1_epi32(*a.q.add(r * a.hd / 2 + e) as i32));
            for n in 0..NB {
                acc[n] = _mm512_dpbf16_ps(acc[n], qv, k[n]);
            }
        }
    }
    store_scores(
        &acc,
        a.scores,
        a.score_stride,
        a.first_pos,
        a.lo,
        a.visible,
        a.scale,
    );
}

struct PvArgs16 {
    probs: *const u32,
    prob_stride: usize,
    values: *const u16,
    block_stride: usize,
    head_off: usize,
    d0: usize,
    hd: usize,
    pairs: usize,
    inv: *const f32,
    out: *mut f32,
}

/// [`pv_tile`] with `vdpbf16ps` over pairs of positions: each lane adds
/// `p[j]·v[j][d] + p[j+1]·v[j+1][d]`.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn pv_tile16<const R: usize>(a: &PvArgs16) {
    const C: usize = PV16_DIMS / W;
    let mut acc = [[_mm512_setzero_ps(); C]; R];
    let pair_len = a.hd * 2;
    for j2 in 0..a.pairs {
        let pos = j2 * 2;
        let vp = a
            .values
            .add((pos / W) * a.block_stride + a.head_off + (pos % W / 2) * pair_len + a.d0 * 2);
        let v: [__m512bh; C] = std::array::from_fn(|c| {
            std::mem::transmute(_mm512_loadu_si512(vp.add(c * 2 * W) as *const __m512i))
        });
        for (r, acc) in acc.iter_mut().enumerate() {
            let w: __m512bh = std::mem::transmute(_mm512_set1_epi32(
                *a.probs.add(r * a.prob_stride + j2) as i32,
            ));
            for c in 0..C {
                acc[c] = _mm512_dpbf16_ps(acc[c], w, v[c]);
            }
        }
    }
    for (r, acc) in acc.iter().enumerate() {
        let inv = _mm512_set1_ps(*a.inv.add(r));
        for (c, x) in acc.iter().enumerate() {
            _mm512_storeu_ps(a.out.add(r * a.hd + c * W), _mm512_mul_ps(*x, inv));
        }
    }
}
