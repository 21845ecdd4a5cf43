//! The GGUF weight formats the kernels read, and their scalar decoders.
//!
//! Every format is decoded, one weight row at a time, into the same [`DecodedRow`]:
//! unsigned bytes `u`, per-lane scales `s` and (for formats with a minimum) per-block
//! offsets `t`, such that weight `i` of 32-element block `b` is
//!
//! ```text
//! w = s[8b + i/4] · (u_i − o) + t[b]        (o = Format::offset())
//! ```
//!
//! `s` has eight entries per block — one per group of four weights — because that is how
//! the integer dot products below group their sums; formats with one scale per block repeat
//! it, Q6_K (a scale per 16 weights) fills lanes 0–3 and 4–7 with its two scales. Decoding a
//! row once and reusing it for every activation row is what makes prefill fast; the scalar
//! decoders here are the reference the SIMD decoders in `x86.rs` are tested against.

use candle_core::quantized::GgmlDType;

/// Elements per kernel block (the activation quantization block and the lane grouping).
pub const BLOCK: usize = 32;
/// Lanes per block: one per group of four weights.
pub const LANES: usize = 8;

/// A weight format the kernels decode natively.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(non_camel_case_types)]
pub enum Format {
    /// 32 weights: f16 scale, 4-bit values − 8.
    Q4_0,
    /// 32 weights: f16 scale and minimum, 4-bit values.
    Q4_1,
    /// 32 weights: f16 scale, 5-bit values − 16 (the high bits packed in a u32).
    Q5_0,
    /// 32 weights: f16 scale, signed 8-bit values.
    Q8_0,
    /// 256 weights: f16 super-scale and super-minimum, eight 6-bit scales/minimums, 4-bit values.
    Q4K,
    /// 256 weights: 4+2-bit values − 32, sixteen signed 8-bit scales, f16 super-scale.
    Q6K,
}

impl Format {
    /// The kernel format for a GGUF tensor type, if there is one.
    pub fn from_ggml(t: GgmlDType) -> Option<Self> {
        Some(match t {
            GgmlDType::Q4_0 => Self::Q4_0,
            GgmlDType::Q4_1 => Self::Q4_1,
            GgmlDType::Q5_0 => Self::Q5_0,
            GgmlDType::Q8_0 => Self::Q8_0,
            GgmlDType::Q4K => Self::Q4K,
            GgmlDType::Q6K => Self::Q6K,
            _ => return None,
        })
    }

    /// Weights per storage block.
    pub fn block_elems(self) -> usize {
        match self {
            Self::Q4K | Self::Q6K => 256,
            _ => 32,
        }
    }

    /// Bytes per storage block.
    pub fn block_bytes(self) -> usize {
        match self {
            Self::Q4_0 => 18,
            Self::Q4_1 => 20,
            Self::Q5_0 => 22,
            Self::Q8_0 => 34,
            Self::Q4K => 144,
            Self::Q6K => 210,
        }
    }

    /// The integer `o` subtracted from every decoded byte (a power of two, or 0).
    pub fn offset(self) -> u32 {
        match self {
            Self::Q4_0 => 8,
            Self::Q5_0 => 16,
            Self::Q8_0 => 128,
            Self::Q6K => 32,
            Self::Q4_1 | Self::Q4K => 0,
        }
    }

    /// Whether decoded rows carry per-block offsets `t` (formats with a stored minimum).
    pub fn has_min(self) -> bool {
        matches!(self, Self::Q4_1 | Self::Q4K)
    }

    /// Whether this is a 256-weight K-quant, decoded into [`DecodedRowK`] and multiplied
    /// with activations quantized per 256 values.
    pub fn is_k_quant(self) -> bool {
        matches!(self, Self::Q4K | Self::Q6K)
    }

    /// Bytes of one row of `k` weights.
    pub fn row_bytes(self, k: usize) -> usize {
        k / self.block_elems() * self.block_bytes()
    }
}

/// One weight row in the kernels' common form (see the module docs).
#[derive(Debug, Clone)]
pub struct DecodedRow {
    /// `k` unsigned values.
    pub u: Vec<u8>,
    /// `k / 4` lane scales (eight per 32-weight block).
    pub s: Vec<f32>,
    /// `k / 32` block offsets (zero for formats without a minimum).
    pub t: Vec<f32>,
}

impl DecodedRow {
    /// Storage for a row of `k` weights (`k` a multiple of 32).
    pub fn new(k: usize) -> Self {
        Self {
            u: vec![0; k],
            s: vec![0.0; k / 4],
            t: vec![0.0; k / BLOCK],
        }
    }

    /// The weights as f32 (`out.len() == k`), for embeddings and tests.
    pub fn dequantize(&self, o: u32, out: &mut [f32]) {
        for (i, w) in out.iter_mut().enumerate() {
            let b = i / BLOCK;
            *w = self.s[i / 4] * (self.u[i] as f32 - o as f32) + self.t[b];
        }
    }
}

/// One K-quant weight row (Q4_K, Q6_K) in the kernels' form. Weight `i` of super-block
/// `sb` (256 weights), in 16-weight group `g`, is
///
/// ```text
/// w = d[sb] · sc[i/2] · (u_i − o) − dmin[sb] · corr[16·sb + g]      (Q4_K, o = 0)
/// w = d[sb] · sc[i/2] · (u_i − o)                                    (Q6_K, o = 32)
/// ```
///
/// `sc` holds one 16-bit scale per pair of weights (the layout `vpmaddwd` multiplies by);
/// `corr` holds per 16-weight group the Q4_K minimum, or for Q6_K the group's scale (the
/// kernels use it to subtract the offset `o` with the activations' group sums).
///
/// `mins` holds Q4_K's minimum per 32 weights as f32 (`dmin · m`, exact), zero-padded to
/// [`min_len`]: the minimum term is a plain float dot product with the activations'
/// `block_sums`, computed once per output after the integer tile (see
/// [`super::portable::min_term`]).
#[derive(Debug, Clone)]
pub struct DecodedRowK {
    /// `k` unsigned values.
    pub u: Vec<u8>,
    /// `k / 2` scales (one per pair of weights).
    pub sc: Vec<i16>,
    /// `k / 16` group minimums (Q4_K) or group scales (Q6_K).
    pub corr: Vec<i16>,
    /// `k / 256` super-block scales.
    pub d: Vec<f32>,
    /// `k / 256` super-block minimum scales (Q4_K; zero for Q6_K).
    pub dmin: Vec<f32>,
    /// [`min_len`]`(k)` minimums per 32 weights (Q4_K), then zeros.
    pub mins: Vec<f32>,
}

/// Length of the per-32 minimum and block-sum vectors for rows of `k` values: `k / 32`
/// rounded up to a multiple of 16 (whole 512-bit registers; the padding is zeros).
pub fn min_len(k: usize) -> usize {
    (k / 32).next_multiple_of(16)
}

impl DecodedRowK {
    /// Storage for a row of `k` weights (`k` a multiple of 256).
    pub fn new(k: usize) -> Self {
        Self {
            u: vec![0; k],
            sc: vec![0; k / 2],
            corr: vec![0; k / 16],
            d: vec![0.0; k / 256],
            dmin: vec![0.0; k / 256],
            mins: vec![0.0; min_len(k)],
        }
    }

    /// The weights as f32 (`out.len() == k`).
    pub fn dequantize(&self, o: u32, out: &mut [f32]) {
        for (i, w) in out.iter_mut().enumerate() {
            let sb = i / 256;
            let step = self.d[sb] * self.sc[i / 2] as f32;
            let min = if o == 0 {
                self.dmin[sb] * self.corr[i / 16] as f32
            } else {
                0.0
            };
            *w = step * (self.u[i] as f32 - o as f32) - min;
        }
    }
}

/// Decode one Q4_K or Q6_K row with plain scalar code.
pub fn decode_row_k_scalar(format: Format, bytes: &[u8], row: &mut DecodedRowK) {
    match format {
        Format::Q4K => {
            for (sb, blk) in bytes.chunks_exact(144).enumerate() {
                row.d[sb] = f16_at(blk);
                row.dmin[sb] = f16_at(&blk[2..]);
                let scales = &blk[4..16];
                let qs = &blk[16..144];
                for j in 0..8 {
                    let (sc, m) = q4k_scale_min(scales, j);
                    let b = sb * 8 + j;
                    row.sc[b * 16..b * 16 + 16].fill(sc as i16);
                    row.corr[b * 2..b * 2 + 2].fill(m as i16);
                    row.mins[b] = row.dmin[sb] * m as f32;
                    let q = &qs[(j / 2) * 32..(j / 2) * 32 + 32];
                    for (i, &v) in q.iter().enumerate() {
                        row.u[b * BLOCK + i] = if j % 2 == 0 { v & 0x0F } else { v >> 4 };
                    }
                }
            }
        }
        Format::Q6K => {
            for (sb, blk) in bytes.chunks_exact(210).enumerate() {
                let (ql, rest) = blk.split_at(128);
                let (qh, rest) = rest.split_at(64);
                let (scales, d) = rest.split_at(16);
                row.d[sb] = f16_at(d);
                row.dmin[sb] = 0.0;
                for n in 0..2 {
                    let ql = &ql[n * 64..n * 64 + 64];
                    let qh = &qh[n * 32..n * 32 + 32];
                    let sc = &scales[n * 8..n * 8 + 8];
                    for part in 0..4 {
                        let b = sb * 8 + n * 4 + part;
                        for half in 0..2 {
                            let s = sc[part * 2 + half] as i8 as i16;
                            row.sc[b * 16 + half * 8..b * 16 + half * 8 + 8].fill(s);
                            row.corr[b * 2 + half] = s;
                        }
                        for l in 0..32 {
                            let low = match part {
                                0 => ql[l] & 0x0F,
                                1 => ql[l + 32] & 0x0F,
                                2 => ql[l] >> 4,
                                _ => ql[l + 32] >> 4,
                            };
                            let high = (qh[l] >> (2 * part)) & 3;
                            row.u[b * BLOCK + l] = low | (high << 4);
                        }
                    }
                }
            }
        }
        _ => unreachable!("only K-quants decode into DecodedRowK"),
    }
}

/// Read a little-endian f16 at `b[0..2]` as f32.
pub fn f16_at(b: &[u8]) -> f32 {
    half::f16::from_le_bytes([b[0], b[1]]).to_f32()
}

fn fill_block(row: &mut DecodedRow, b: usize, scale: f32, min: f32) {
    row.s[b * LANES..(b + 1) * LANES].fill(scale);
    row.t[b] = min;
}

/// The 6-bit scale and minimum of sub-block `j` (0..8) of a Q4_K block.
pub fn q4k_scale_min(scales: &[u8], j: usize) -> (u8, u8) {
    if j < 4 {
        (scales[j] & 63, scales[j + 4] & 63)
    } else {
        (
            (scales[j + 4] & 0x0F) | ((scales[j - 4] >> 6) << 4),
            (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4),
        )
    }
}

/// All eight 6-bit scales and minimums of a Q4_K block at once (the same values as
/// [`q4k_scale_min`]), unpacked with 32-bit word operations: bytes 0–3 hold scales 0–3 (low
/// six bits) and the top bits of scales 4–7; bytes 4–7 the same for the minimums; bytes
/// 8–11 the low four bits of scales 4–7 (low nibbles) and minimums 4–7 (high nibbles).
#[inline]
pub fn q4k_scales_mins(scales: &[u8]) -> ([u8; 8], [u8; 8]) {
    let word =
        |i: usize| u32::from_le_bytes([scales[i], scales[i + 1], scales[i + 2], scales[i + 3]]);
    let (a, b, c) = (word(0), word(4), word(8));
    const LOW6: u32 = 0x3F3F_3F3F;
    const LOW4: u32 = 0x0F0F_0F0F;
    const LOW2: u32 = 0x0303_0303;
    let sc_hi = (c & LOW4) | (((a >> 6) & LOW2) << 4);
    let m_hi = ((c >> 4) & LOW4) | (((b >> 6) & LOW2) << 4);
    let sc = (a & LOW6) as u64 | (sc_hi as u64) << 32;
    let m = (b & LOW6) as u64 | (m_hi as u64) << 32;
    (sc.to_le_bytes(), m.to_le_bytes())
}

/// Decode one row (`bytes` = `format.row_bytes(k)`) with plain scalar code.
pub fn decode_row_scalar(format: Format, bytes: &[u8], row: &mut DecodedRow) {
    let k = row.u.len();
    debug_assert_eq!(bytes.len(), format.row_bytes(k));
    match format {
        Format::Q8_0 => {
            for (b, blk) in bytes.chunks_exact(34).enumerate() {
                fill_block(row, b, f16_at(blk), 0.0);
                for (i, &q) in blk[2..].iter().enumerate() {
                    row.u[b * BLOCK + i] = q ^ 0x80;
                }
            }
        }
        Format::Q4_0 | Format::Q4_1 => {
            let (bb, qoff) = if format == Format::Q4_0 {
                (18, 2)
            } else {
                (20, 4)
            };
            for (b, blk) in bytes.chunks_exact(bb).enumerate() {
                let min = if format == Format::Q4_1 {
                    f16_at(&blk[2..])
                } else {
                    0.0
                };
                fill_block(row, b, f16_at(blk), min);
                for (i, &q) in blk[qoff..].iter().enumerate() {
                    row.u[b * BLOCK + i] = q & 0x0F;
                    row.u[b * BLOCK + i + 16] = q >> 4;
                }
            }
        }
        Format::Q5_0 => {
            for (b, blk) in bytes.chunks_exact(22).enumerate() {
                fill_block(row, b, f16_at(blk), 0.0);
                let qh = u32::from_le_bytes([blk[2], blk[3], blk[4], blk[5]]);
                for (i, &q) in blk[6..].iter().enumerate() {
                    let h0 = ((qh >> i) & 1) as u8;
                    let h1 = ((qh >> (i + 16)) & 1) as u8;
                    row.u[b * BLOCK + i] = (q & 0x0F) | (h0 << 4);
                    row.u[b * BLOCK + i + 16] = (q >> 4) | (h1 << 4);
                }
            }
        }
        Format::Q4K | Format::Q6K => {
            unreachable!("K-quant rows decode into DecodedRowK")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q4k_scales_unpack_alike_one_at_a_time_and_all_at_once() {
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        for _ in 0..10_000 {
            let mut scales = [0u8; 12];
            for b in &mut scales {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                *b = state as u8;
            }
            let (sc, m) = q4k_scales_mins(&scales);
            for j in 0..8 {
                assert_eq!((sc[j], m[j]), q4k_scale_min(&scales, j), "{scales:?} {j}");
            }
        }
    }
}
