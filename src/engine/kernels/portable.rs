//! The tile kernels in plain Rust: the fallback where no SIMD path applies, and the
//! arithmetic the SIMD kernels must reproduce bit for bit (same integer lane sums, same
//! fused multiply-adds in the same order, same horizontal sum). For the 32-weight formats
//! that order is: lane `l` of block `b` goes into accumulator `b % 2`, lane `l`; the two
//! accumulators are added lane by lane, then summed by [`hsum`]. The K-quants add in the
//! row order of [`tile_k_rows`].

use super::activations::{QuantizedRows, QuantizedRowsK};
use super::formats::{min_len, DecodedRow, DecodedRowK, BLOCK, LANES};

/// Sum eight lane accumulators in the order the SIMD kernels use:
/// `((a0+a4) + (a2+a6)) + ((a1+a5) + (a3+a7))`.
pub fn hsum(a: &[f32; LANES]) -> f32 {
    let h = [a[0] + a[4], a[1] + a[5], a[2] + a[6], a[3] + a[7]];
    (h[0] + h[2]) + (h[1] + h[3])
}

/// `Σ_b t[b] · (d · Σq)[b]`: the part of the dot product that comes from a format's
/// per-block minimum (formats without one skip it).
pub fn min_term(w: &DecodedRow, x: &QuantizedRows, row: usize) -> f32 {
    let nb = x.blocks_per_row();
    let sums = &x.block_sums[row * nb..(row + 1) * nb];
    w.t.iter()
        .zip(sums)
        .fold(0.0f32, |acc, (t, s)| t.mul_add(*s, acc))
}

/// Q4_K's minimum term for activation row `row`: `Σ_i mins[i] · block_sums[i]` over the
/// [`min_len`] entries, element `i` fused-multiply-added into lane `i % 16` of sixteen
/// accumulators (one 512-bit register; two 256-bit ones hold lanes 0–7 and 8–15), whose
/// two halves are added lane by lane and then summed by [`hsum`]. The zero padding leaves
/// the lanes unchanged, so a kernel that walks the super-blocks one at a time (lanes 0–7
/// for even ones, 8–15 for odd ones) gets the same bits.
pub fn min_term_k(w: &DecodedRowK, x: &QuantizedRowsK, row: usize) -> f32 {
    let n = min_len(x.k);
    let sums = &x.block_sums[row * n..(row + 1) * n];
    let mut acc = [0.0f32; 2 * LANES];
    for (i, (m, s)) in w.mins.iter().zip(sums).enumerate() {
        acc[i % (2 * LANES)] = m.mul_add(*s, acc[i % (2 * LANES)]);
    }
    hsum(&std::array::from_fn(|l| acc[l] + acc[l + LANES]))
}

/// Dot products of activation rows `r0..r0+R` with the `J` decoded weight rows.
/// `o` is the format's integer offset; `with_min` adds [`min_term`].
pub fn tile<const R: usize, const J: usize>(
    w: [&DecodedRow; J],
    x: &QuantizedRows,
    r0: usize,
    o: u32,
    with_min: bool,
    out: &mut [[f32; J]; R],
) {
    let nb = x.blocks_per_row();
    let k = x.k;
    for (r, out_r) in out.iter_mut().enumerate() {
        let xr = r0 + r;
        for (j, out_rj) in out_r.iter_mut().enumerate() {
            // Even and odd blocks accumulate apart (as a 512-bit register's halves do).
            let mut acc2 = [[0.0f32; LANES]; 2];
            for b in 0..nb {
                let d = x.d[xr * nb + b];
                for (l, a) in acc2[b % 2].iter_mut().enumerate() {
                    let base = b * BLOCK + l * 4;
                    let mut sum = o as i32 * x.neg_lane_sums[(xr * nb + b) * LANES + l];
                    for e in 0..4 {
                        sum += w[j].u[base + e] as i32 * x.qs[xr * k + base + e] as i32;
                    }
                    *a = (sum as f32).mul_add(w[j].s[b * LANES + l] * d, *a);
                }
            }
            let acc: [f32; LANES] = std::array::from_fn(|l| acc2[0][l] + acc2[1][l]);
            let mut y = hsum(&acc);
            if with_min {
                y += min_term(w[j], x, xr);
            }
            *out_rj = y;
        }
    }
}

/// Dot products for K-quant rows in the *row order* (every path): per super-block one
/// exact integer, `Σ scale · (u − o) · q` over its 256 weights, converted to f32 and
/// fused-multiply-added by `d · dx` into one accumulator per output, super-block after
/// super-block; Q4_K's minimum term ([`min_term_k`]) is subtracted last. Any grouping of the integer sum gives
/// the same bits, so a kernel may add its products in whatever order its instructions
/// favour.
pub fn tile_k_rows<const R: usize, const J: usize>(
    w: [&DecodedRowK; J],
    x: &QuantizedRowsK,
    r0: usize,
    o: u32,
    with_min: bool,
    out: &mut [[f32; J]; R],
) {
    let k = x.k;
    let nsb = k / 256;
    for (r, out_r) in out.iter_mut().enumerate() {
        let xr = r0 + r;
        let q = &x.qs[xr * k..(xr + 1) * k];
        for (j, out_rj) in out_r.iter_mut().enumerate() {
            let wj = w[j];
            let mut acc = 0.0f32;
            for sb in 0..nsb {
                let range = sb * 256..(sb + 1) * 256;
                let isum: i32 = range
                    .map(|e| wj.sc[e / 2] as i32 * (wj.u[e] as i32 - o as i32) * q[e] as i32)
                    .sum();
                acc = (isum as f32).mul_add(wj.d[sb] * x.d[xr * nsb + sb], acc);
            }
            if with_min {
                acc -= min_term_k(wj, x, xr);
            }
            *out_rj = acc;
        }
    }
}

// Row loops over the portable tiles (the macro is shared with `x86`, see `super`).
row_loop!(rows, tile, DecodedRow, QuantizedRows,);
row_loop!(rows_k_rows, tile_k_rows, DecodedRowK, QuantizedRowsK,);
