//! Quantized matrix multiplication on the CPU: `y = x · Wᵀ` for GGUF weights.
//!
//! How a product is computed (one weight matrix `W`, `n × k`, and `m` activation rows):
//!
//! 1. the activations are quantized to 8 bits, per 32 values for the 32-weight formats and
//!    per 256 values for the K-quants ([`activations`]);
//! 2. the output columns are split into chunks that rayon spreads over the cores;
//! 3. for one to four rows ([`SMALL_BATCH`]: decoding, throughput mode) each weight row is
//!    decoded in registers and used at once (K-quants on x86: up to 15 rows, in groups of
//!    four); for more, each weight row is decoded once per pass into a common form
//!    ([`formats::DecodedRow`], [`formats::DecodedRowK`]) and multiplied with every
//!    activation row of the pass, in tiles of 4 activation rows × up to 4 weight rows
//!    (K-quants: 8 weight rows interleaved by [`x86::InterleavedK8`] on AVX2, 16 by
//!    [`x86::InterleavedK16`] on AVX-512, times up to 8 activation rows);
//! 4. the kernels ([`x86`]: 512-bit AVX-512 VNNI or 256-bit AVX2; else [`portable`]) form
//!    exact integer sums and accumulate them in f32 in one fixed order; for one activation
//!    row (and two to four of the 32-weight formats on AVX-512) [`x86_rows`] takes each
//!    thread's weight rows in one call, four rows at a time.
//!
//! Every output element is computed by the same sequence of operations whatever `m`,
//! the path, the tile it falls in or the thread that runs it, so a row's result never
//! depends on the rest of the batch: a prompt computed in one piece or token by token
//! (after a cached prefix), or a sequence decoded alone or in a batch, gives bit-identical
//! numbers. The VNNI, AVX2 and portable paths agree bit for bit: the 32-weight formats in
//! the lane order of [`portable::tile`], the K-quants in the *row order* of
//! [`portable::tile_k_rows`] (one exact integer per output and super-block), which lets the
//! interleaved tiles add many products before each scale multiply and keep each weight
//! row in a lane of its own.
//!
//! Adding a weight format = a [`formats::Format`] variant, its scalar decoder, its SIMD
//! decoder, and its case in the register-decoding kernels.
//!
//! Imports run one way: [`formats`] and `isa` import no other kernel file; [`activations`]
//! (the quantizers, scalar and SIMD) imports them; [`portable`] imports those; [`x86`]
//! imports the portable reference as well; [`x86_rows`] imports [`x86`]; this file drives
//! them all.

/// Generate a function that runs a tile kernel over activation rows `r0..r1` — four at a
/// time, then the remainder — and writes `y[r·n + j0 + jj]`: one call per group of weight
/// rows instead of one per tile.
macro_rules! row_loop {
    ($name:ident, $tile:ident, $row:ty, $x:ty, $(#[$attr:meta])*) => {
        /// The row loop over the tile kernel of the same path.
        ///
        /// # Safety
        /// `y` must hold `r1 × n` values, columns `j0..j0 + J` must be this caller's alone,
        /// and the CPU must have the features the kernel is compiled for.
        #[allow(clippy::too_many_arguments)]
        $(#[$attr])*
        pub unsafe fn $name<const J: usize>(
            w: [&$row; J],
            x: &$x,
            r0: usize,
            r1: usize,
            o: u32,
            with_min: bool,
            y: *mut f32,
            n: usize,
            j0: usize,
        ) {
            let mut r = r0;
            macro_rules! step {
                ($rr:literal) => {{
                    let mut t = [[0.0f32; J]; $rr];
                    $tile::<$rr, J>(w, x, r, o, with_min, &mut t);
                    for (ri, tr) in t.iter().enumerate() {
                        for (ji, v) in tr.iter().enumerate() {
                            *y.add((r + ri) * n + j0 + ji) = *v;
                        }
                    }
                    r += $rr;
                }};
            }
            while r + 4 <= r1 {
                step!(4);
            }
            match r1 - r {
                3 => step!(3),
                2 => step!(2),
                1 => step!(1),
                _ => {}
            }
            let _ = r;
        }
    };
}

pub mod activations;
pub mod formats;
mod isa;
pub mod portable;
#[cfg(target_arch = "x86_64")]
pub mod x86;
#[cfg(target_arch = "x86_64")]
pub mod x86_rows;

use activations::{QuantizedRows, QuantizedRowsK};
use anyhow::{ensure, Result};
use formats::{DecodedRow, DecodedRowK, Format};
pub use isa::Isa;
use rayon::prelude::*;
use std::sync::Arc;

/// Where a matrix's bytes live: memory-mapped from the model file, or owned.
pub enum WeightBytes {
    /// A range of a memory-mapped file.
    Mapped(Arc<memmap2::Mmap>, std::ops::Range<usize>),
    /// Bytes in memory (tests, synthetic weights).
    Owned(Vec<u8>),
}

impl WeightBytes {
    #[inline]
    fn as_slice(&self) -> &[u8] {
        match self {
            Self::Mapped(map, range) => &map[range.clone()],
            Self::Owned(v) => v,
        }
    }
}

/// A quantized weight matrix of `rows` output features × `cols` inputs, stored row by row
/// in a GGUF block format.
pub struct QuantMatrix {
    /// Block format.
    pub format: Format,
    /// Output features (`n`).
    pub rows: usize,
    /// Input features (`k`).
    pub cols: usize,
    data: WeightBytes,
}

impl QuantMatrix {
    /// Wrap `data`, checking that it holds exactly `rows × cols` weights of `format`.
    pub fn new(format: Format, rows: usize, cols: usize, data: WeightBytes) -> Result<Self> {
        ensure!(
            cols.is_multiple_of(format.block_elems()),
            "a {format:?} row of {cols} weights is not a whole number of {}-weight blocks",
            format.block_elems()
        );
        let want = rows * format.row_bytes(cols);
        let have = data.as_slice().len();
        ensure!(
            have == want,
            "{format:?} matrix {rows}×{cols} needs {want} bytes, got {have}"
        );
        Ok(Self {
            format,
            rows,
            cols,
            data,
        })
    }

    /// A matrix of random blocks with small, finite scales (for tests and benches).
    pub fn synthetic(format: Format, rows: usize, cols: usize, seed: u64) -> Result<Self> {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut data: Vec<u8> = (0..rows * format.row_bytes(cols))
            .map(|_| rng.random())
            .collect();
        for blk in data.chunks_exact_mut(format.block_bytes()) {
            let mut scale = || half::f16::from_f32(rng.random_range(0.001f32..0.05)).to_le_bytes();
            match format {
                Format::Q4_1 | Format::Q4K => {
                    blk[0..2].copy_from_slice(&scale());
                    blk[2..4].copy_from_slice(&scale());
                }
                Format::Q6K => blk[208..210].copy_from_slice(&scale()),
                _ => blk[0..2].copy_from_slice(&scale()),
            }
        }
        Self::new(format, rows, cols, WeightBytes::Owned(data))
    }

    /// Bytes of the whole matrix.
    pub fn byte_len(&self) -> usize {
        self.data.as_slice().len()
    }

    /// The stored bytes of row `j`.
    #[inline]
    pub fn row_bytes(&self, j: usize) -> &[u8] {
        let rb = self.format.row_bytes(self.cols);
        &self.data.as_slice()[j * rb..(j + 1) * rb]
    }

    /// Rows `ids` as f32 (`ids.len() × cols`), e.g. an embedding lookup.
    pub fn dequantize_rows(&self, ids: &[u32]) -> Result<Vec<f32>> {
        let mut out = vec![0.0; ids.len() * self.cols];
        let o = self.format.offset();
        let (mut row, mut row_k) = if self.format.is_k_quant() {
            (DecodedRow::new(0), DecodedRowK::new(self.cols))
        } else {
            (DecodedRow::new(self.cols), DecodedRowK::new(0))
        };
        for (&id, dst) in ids.iter().zip(out.chunks_exact_mut(self.cols)) {
            ensure!(
                (id as usize) < self.rows,
                "row {id} is outside a matrix of {} rows",
                self.rows
            );
            let bytes = self.row_bytes(id as usize);
            if self.format.is_k_quant() {
                formats::decode_row_k_scalar(self.format, bytes, &mut row_k);
                row_k.dequantize(o, dst);
            } else {
                formats::decode_row_scalar(self.format, bytes, &mut row);
                row.dequantize(o, dst);
            }
        }
        Ok(out)
    }

    /// `x · Wᵀ` for `x` of `m × cols` f32 values: `m × rows` f32 values.
    pub fn forward(&self, x: &[f32], m: usize) -> Vec<f32> {
        let q = Activations::quantize(self.format, x, m, self.cols);
        let mut y = vec![0.0; m * self.rows];
        matmul(Isa::detect(), self, &q, &mut y);
        y
    }
}

/// Activations quantized for one weight format family.
pub enum Activations {
    /// Per 32 values (32-weight formats).
    Blocks(QuantizedRows),
    /// Per 256 values (K-quants).
    K(QuantizedRowsK),
}

impl Activations {
    /// Quantize `x` (`m × k`) the way `format`'s kernel reads it.
    pub fn quantize(format: Format, x: &[f32], m: usize, k: usize) -> Self {
        if format.is_k_quant() {
            Self::K(QuantizedRowsK::quantize(x, m, k))
        } else {
            Self::Blocks(QuantizedRows::quantize(x, m, k))
        }
    }

    /// Rows.
    pub fn m(&self) -> usize {
        match self {
            Self::Blocks(q) => q.m,
            Self::K(q) => q.m,
        }
    }

    /// Values per row.
    pub fn k(&self) -> usize {
        match self {
            Self::Blocks(q) => q.k,
            Self::K(q) => q.k,
        }
    }
}

fn decode(isa: Isa, format: Format, bytes: &[u8], row: &mut DecodedRow) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Isa::Vnni`/`Isa::Avx2` are only produced after detecting AVX2/FMA/F16C.
        Isa::Vnni | Isa::Avx2 => unsafe { x86::decode_row(format, bytes, row) },
        _ => formats::decode_row_scalar(format, bytes, row),
    }
}

fn decode_k(isa: Isa, format: Format, bytes: &[u8], row: &mut DecodedRowK) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as in `decode`.
        Isa::Vnni | Isa::Avx2 => unsafe { x86::decode_row_k(format, bytes, row) },
        _ => formats::decode_row_k_scalar(format, bytes, row),
    }
}

/// Activation rows per pass of the outer loop: as many as keep the pass's quantized
/// activations (about 2.3 bytes per value with their scales and sums) within about a
/// megabyte (one core's L2 here; measured 2% faster than half of it), so decoding a weight
/// row is amortised over many rows.
fn rows_per_pass(k: usize) -> usize {
    ((1024 * 1024) / (2 * k + k / 4)).clamp(4, 512) / 4 * 4
}

struct OutPtr(*mut f32);
// SAFETY: each task writes a disjoint set of output columns (see `matmul`).
unsafe impl Send for OutPtr {}
unsafe impl Sync for OutPtr {}

/// Run the `jn`-weight-row kernel of `isa` (`$zmm`/`$avx2` in `x86`, `$portable` in
/// `portable`) over activation rows `r0..r1`.
macro_rules! dispatch_rows {
    ($isa:expr, $rows:expr, $jn:expr, $x:expr, $r0:expr, $r1:expr, $o:expr, $min:expr,
     $y:expr, $n:expr, $j0:expr, $zmm:ident, $avx2:ident, $portable:ident) => {{
        macro_rules! go {
            ($j:literal) => {{
                let w = std::array::from_fn::<_, $j, _>(|i| &$rows[i]);
                // SAFETY: the ISA was detected (see `Isa`); `y` is the m × n output and
                // columns j0..j0 + jn belong to the calling task alone (see `drive`).
                unsafe {
                    match $isa {
                        #[cfg(target_arch = "x86_64")]
                        Isa::Vnni => x86::$zmm::<$j>(w, $x, $r0, $r1, $o, $min, $y, $n, $j0),
                        #[cfg(target_arch = "x86_64")]
                        Isa::Avx2 => x86::$avx2::<$j>(w, $x, $r0, $r1, $o, $min, $y, $n, $j0),
                        _ => portable::$portable::<$j>(w, $x, $r0, $r1, $o, $min, $y, $n, $j0),
                    }
                }
            }};
        }
        match $jn {
            4 => go!(4),
            3 => go!(3),
            2 => go!(2),
            _ => go!(1),
        }
    }};
}

/// Column `j` of `x · Wᵀ` for activation rows `r0..` (up to four: `out[..]`), by the
/// register-decoding kernels of `isa` (VNNI or AVX2) for `x`'s format family.
#[cfg(target_arch = "x86_64")]
fn small_batch_column(
    isa: Isa,
    w: &QuantMatrix,
    x: &Activations,
    j: usize,
    r0: usize,
    out: &mut [f32; 4],
) {
    let bytes = w.row_bytes(j);
    macro_rules! rows {
        ($r:literal, $q:expr, $vnni:ident, $avx2:ident) => {{
            // SAFETY: the ISA was detected (see `Isa`).
            let v: [f32; $r] = unsafe {
                if isa == Isa::Vnni {
                    x86::$vnni::<$r>(w.format, bytes, $q, r0)
                } else {
                    x86::$avx2::<$r>(w.format, bytes, $q, r0)
                }
            };
            out[..$r].copy_from_slice(&v);
        }};
    }
    match x {
        Activations::Blocks(q) => match q.m - r0 {
            1 => rows!(1, q, gemv_blocks_vnni, gemv_blocks_avx2),
            2 => rows!(2, q, gemv_blocks_vnni, gemv_blocks_avx2),
            3 => rows!(3, q, gemv_blocks_vnni, gemv_blocks_avx2),
            _ => rows!(4, q, gemv_blocks_vnni, gemv_blocks_avx2),
        },
        Activations::K(q) => match q.m - r0 {
            1 => rows!(1, q, gemv_k_vnni, gemv_k_avx2),
            2 => rows!(2, q, gemv_k_vnni, gemv_k_avx2),
            3 => rows!(3, q, gemv_k_vnni, gemv_k_avx2),
            _ => rows!(4, q, gemv_k_vnni, gemv_k_avx2),
        },
    }
}

/// `y = x · Wᵀ` (`y`: `m × w.rows`, row-major) with the kernel `isa`.
pub fn matmul(isa: Isa, w: &QuantMatrix, x: &Activations, y: &mut [f32]) {
    assert_eq!(x.k(), w.cols, "activation width does not match the matrix");
    assert_eq!(y.len(), x.m() * w.rows, "output buffer is not m × n");
    match x {
        Activations::Blocks(q) => {
            assert!(
                !w.format.is_k_quant(),
                "K-quant weights need per-256 activations"
            );
            #[cfg(target_arch = "x86_64")]
            if q.m == 1 && isa == Isa::Vnni {
                // SAFETY: the ISA was detected (see `Isa`).
                return one_row(w, y, |bytes, rb, out| unsafe {
                    x86_rows::gemv_blocks_rows_zmm(w.format, bytes, rb, q, 0, out)
                });
            }
            #[cfg(target_arch = "x86_64")]
            if q.m == 1 && isa == Isa::Avx2 {
                // SAFETY: the ISA was detected (see `Isa`).
                return one_row(w, y, |bytes, rb, out| unsafe {
                    x86_rows::gemv_blocks_rows_ymm(w.format, bytes, rb, q, 0, out)
                });
            }
            #[cfg(target_arch = "x86_64")]
            if (2..=SMALL_BATCH).contains(&q.m) && isa == Isa::Vnni {
                return few_rows(w, q.m, y, |bytes, rb, r0, m, out, n| unsafe {
                    // SAFETY: the ISA was detected (see `Isa`); `few_rows` hands out the
                    // task's own columns.
                    x86_rows::gemv_blocks_rows_zmm_m(w.format, bytes, rb, q, r0, m, out, n)
                });
            }
            #[cfg(target_arch = "x86_64")]
            if q.m <= SMALL_BATCH && isa != Isa::Portable {
                return gemv(w, q.m, y, |j, r0, out| {
                    small_batch_column(isa, w, x, j, r0, out)
                });
            }
            drive(
                w,
                q.m,
                y,
                tile_cols(isa),
                || DecodedRow::new(w.cols),
                |j, row| decode(isa, w.format, w.row_bytes(j), row),
                |rows, jn, r0, r1, j, y| {
                    let (o, min) = (w.format.offset(), w.format.has_min());
                    dispatch_rows!(
                        isa, rows, jn, q, r0, r1, o, min, y, w.rows, j, rows_zmm, rows_avx2, rows
                    )
                },
            )
        }
        Activations::K(q) => {
            assert!(
                w.format.is_k_quant(),
                "32-weight formats need per-32 activations"
            );
            #[cfg(target_arch = "x86_64")]
            if q.m == 1 && isa == Isa::Vnni {
                // SAFETY: the ISA was detected (see `Isa`).
                return one_row(w, y, |bytes, rb, out| unsafe {
                    x86_rows::gemv_k_rows_zmm(w.format, bytes, rb, q, 0, out)
                });
            }
            #[cfg(target_arch = "x86_64")]
            if q.m == 1 && isa == Isa::Avx2 {
                // SAFETY: the ISA was detected (see `Isa`).
                return one_row(w, y, |bytes, rb, out| unsafe {
                    x86_rows::gemv_k_rows_ymm(w.format, bytes, rb, q, 0, out)
                });
            }
            #[cfg(target_arch = "x86_64")]
            if q.m <= SMALL_BATCH && isa != Isa::Portable {
                return gemv(w, q.m, y, |j, r0, out| {
                    small_batch_column(isa, w, x, j, r0, out)
                });
            }
            #[cfg(target_arch = "x86_64")]
            if isa != Isa::Portable {
                // Below 16 rows the interleaved tiles' decoding and repacking is not paid
                // back (AVX2: 14–19 GMAC/s at 5–8 rows against 26 for groups of four).
                if q.m < 4 * SMALL_BATCH {
                    return gemv(w, q.m, y, |j, r0, out| {
                        small_batch_column(isa, w, x, j, r0, out)
                    });
                }
                return if isa == Isa::Vnni {
                    drive_k16(w, q, y)
                } else {
                    drive_k8(w, q, y)
                };
            }
            drive(
                w,
                q.m,
                y,
                2,
                || DecodedRowK::new(w.cols),
                |j, row| decode_k(isa, w.format, w.row_bytes(j), row),
                |rows, jn, r0, r1, j, y| {
                    let (o, min) = (w.format.offset(), w.format.has_min());
                    let wr = |i: usize| &rows[i.min(jn - 1)];
                    // SAFETY: as in `dispatch_rows`.
                    unsafe {
                        match jn {
                            2 => portable::rows_k_rows::<2>(
                                std::array::from_fn(wr),
                                q,
                                r0,
                                r1,
                                o,
                                min,
                                y,
                                w.rows,
                                j,
                            ),
                            _ => {
                                portable::rows_k_rows::<1>([wr(0)], q, r0, r1, o, min, y, w.rows, j)
                            }
                        }
                    }
                },
            )
        }
    }
}

/// The AVX2 K-quant product for more than [`SMALL_BATCH`] rows: weight rows go eight at a
/// time through [`x86::InterleavedK8`] into [`x86::tile_k8_avx2`], four activation rows at
/// a time.
#[cfg(target_arch = "x86_64")]
fn drive_k8(w: &QuantMatrix, q: &QuantizedRowsK, y: &mut [f32]) {
    let (o, min) = (w.format.offset(), w.format.has_min());
    let q4k = w.format == Format::Q4K;
    drive_interleaved::<8, _>(
        w,
        q,
        y,
        &[4, 3, 2, 1],
        x86::InterleavedK8::new,
        |il, rows| il.fill(rows),
        |il, rows, r, rr, dst, n, jn| {
            macro_rules! go {
                ($rr:literal) => {{
                    let mut t = [[0.0f32; 8]; $rr];
                    // SAFETY: `Isa::Avx2` is only chosen after detecting AVX2/FMA/F16C.
                    unsafe {
                        if q4k {
                            x86::tile_k8_avx2::<$rr, 8>(il, rows, q, r, o, min, &mut t)
                        } else {
                            x86::tile_k8_avx2::<$rr, 2>(il, rows, q, r, o, min, &mut t)
                        }
                    }
                    for (ri, tr) in t.iter().enumerate() {
                        // SAFETY: as `drive_interleaved` promises for `dst`.
                        unsafe { std::ptr::copy_nonoverlapping(tr.as_ptr(), dst.add(ri * n), jn) };
                    }
                }};
            }
            match rr {
                4 => go!(4),
                3 => go!(3),
                2 => go!(2),
                _ => go!(1),
            }
        },
    )
}

/// The AVX-512 K-quant product for more than [`SMALL_BATCH`] rows: weight rows go sixteen
/// at a time through [`x86::InterleavedK16`] into [`x86::tile_k16_zmm`], up to eight
/// activation rows at a time (32 registers hold eight rows' three accumulators).
#[cfg(target_arch = "x86_64")]
fn drive_k16(w: &QuantMatrix, q: &QuantizedRowsK, y: &mut [f32]) {
    let (o, min) = (w.format.offset(), w.format.has_min());
    let q4k = w.format == Format::Q4K;
    drive_interleaved::<16, _>(
        w,
        q,
        y,
        &[8, 4, 2, 1],
        x86::InterleavedK16::new,
        // SAFETY: `Isa::Vnni` is only chosen after detecting AVX-512 F/BW/VL/VNNI.
        |il, rows| unsafe { il.fill(rows) },
        |il, _, r, rr, dst, n, jn| {
            macro_rules! go {
                ($rr:literal) => {{
                    // SAFETY: `Isa::Vnni` is only chosen after detecting AVX-512 F/BW/VL/VNNI;
                    // `dst` as `drive_interleaved` promises.
                    unsafe {
                        if q4k {
                            x86::tile_k16_zmm::<$rr, 8>(il, q, r, o, min, dst, n, jn)
                        } else {
                            x86::tile_k16_zmm::<$rr, 4>(il, q, r, o, min, dst, n, jn)
                        }
                    }
                }};
            }
            match rr {
                8 => go!(8),
                4 => go!(4),
                2 => go!(2),
                _ => go!(1),
            }
        },
    )
}

/// Activation rows per pass of the interleaved K-quant tiles: their weight rows are decoded
/// and interleaved once per pass, which costs more than a plain decode, so the pass is
/// longer than [`rows_per_pass`]'s L2-sized one even where its activations then stream
/// from L3 (a 1.5B `ffn_down`, 8960 wide: 4.6 MB). Measured on the 1.5B's Q6_K `ffn_down`
/// (AMD EPYC Zen 4, 512 rows): 154 → 241 GMAC/s on AVX-512, 106 → 169 on AVX2; its Q4_K
/// `ffn_up` (1536 wide, where 300 rows already fit) unchanged.
#[cfg(target_arch = "x86_64")]
const INTERLEAVED_PASS: usize = 512;

/// The loop nest of the interleaved K-quant tiles: column chunks in parallel; within a
/// chunk, passes over the activation rows; within a pass, `N` weight rows decoded and
/// interleaved at a time and multiplied with activation rows in steps of the largest of
/// `steps` that fits: `tile(il, rows, r, count, dst, n, jn)` writes rows `r..r + count`
/// of the group's `jn` columns, row `i` at `dst + i · n` (`dst` points at `y[r · n + j]`,
/// inside `y`, in columns that belong to the calling task alone).
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
fn drive_interleaved<const N: usize, Il>(
    w: &QuantMatrix,
    q: &QuantizedRowsK,
    y: &mut [f32],
    steps: &[usize],
    new: impl Fn(usize) -> Il + Sync,
    fill: impl Fn(&mut Il, &[DecodedRowK; N]) + Sync,
    tile: impl Fn(&Il, &[DecodedRowK; N], usize, usize, *mut f32, usize, usize) + Sync,
) {
    let (n, k, m) = (w.rows, w.cols, q.m);
    let tasks = rayon::current_num_threads().max(1) * 4;
    let chunk = n.div_ceil(tasks).next_multiple_of(N);
    let pass = INTERLEAVED_PASS;
    let out = OutPtr(y.as_mut_ptr());
    (0..n.div_ceil(chunk)).into_par_iter().for_each(|c| {
        let out = &out;
        let (j0, j1) = (c * chunk, ((c + 1) * chunk).min(n));
        // Rows past the end of the matrix keep whatever they last held: their outputs are
        // not written.
        let mut rows: [DecodedRowK; N] = std::array::from_fn(|_| DecodedRowK::new(k));
        let mut il = new(k);
        for t0 in (0..m).step_by(pass) {
            let t1 = (t0 + pass).min(m);
            for j in (j0..j1).step_by(N) {
                let jn = (j1 - j).min(N);
                for (i, row) in rows.iter_mut().enumerate().take(jn) {
                    decode_k(Isa::Avx2, w.format, w.row_bytes(j + i), row);
                }
                fill(&mut il, &rows);
                prefetch_rows(w, j + jn, (j + 2 * N).min(j1));
                let mut r = t0;
                while r < t1 {
                    let rr = *steps.iter().find(|&&s| s <= t1 - r).unwrap_or(&1);
                    // SAFETY: (r.., j..j + jn) is inside y, and columns j0..j1 belong to
                    // this task alone.
                    tile(&il, &rows, r, rr, unsafe { out.0.add(r * n + j) }, n, jn);
                    r += rr;
                }
            }
        }
    });
}

/// Batches up to this many rows (decoding, throughput mode) take the path that decodes
/// each weight row in registers for all rows at once; larger ones decode into a buffer
/// and run the tiles.
pub const SMALL_BATCH: usize = 4;

/// One activation row (decoding): each thread's share of the weight rows goes to
/// `rows(bytes, row_bytes, out)` in one call (or four, for a large matrix) — consecutive
/// rows, one output each — so the kernel runs its loop over rows itself, several rows at a
/// time ([`x86_rows`]).
#[cfg(target_arch = "x86_64")]
fn one_row(w: &QuantMatrix, y: &mut [f32], rows: impl Fn(&[u8], usize, &mut [f32]) + Sync) {
    let rb = w.format.row_bytes(w.cols);
    // A matrix of several megabytes (an output projection) in four chunks per thread, so a
    // thread that the OS delays hands its last chunks to the others; smaller ones in one
    // chunk per thread (fewer hand-offs).
    let per_thread = if w.byte_len() >= 4 << 20 { 4 } else { 1 };
    let tasks = rayon::current_num_threads().max(1) * per_thread;
    let chunk = w.rows.div_ceil(tasks).next_multiple_of(4).max(1);
    let data = w.data.as_slice();
    y.par_chunks_mut(chunk).enumerate().for_each(|(c, out)| {
        let first = c * chunk;
        rows(&data[first * rb..(first + out.len()) * rb], rb, out);
    });
}

/// Two to four activation rows: each thread's share of the weight rows goes to
/// `rows(bytes, row_bytes, 0, m, out, n)` in one call, `out` pointing at `y[j0]` (row `i`,
/// column `j0 + jj` at `out[i · n + jj]`).
#[cfg(target_arch = "x86_64")]
#[allow(clippy::type_complexity)]
fn few_rows(
    w: &QuantMatrix,
    m: usize,
    y: &mut [f32],
    rows: impl Fn(&[u8], usize, usize, usize, *mut f32, usize) + Sync,
) {
    let (n, rb) = (w.rows, w.format.row_bytes(w.cols));
    let per_thread = if w.byte_len() >= 4 << 20 { 4 } else { 1 };
    let tasks = rayon::current_num_threads().max(1) * per_thread;
    let chunk = n.div_ceil(tasks).next_multiple_of(4).max(1);
    let data = w.data.as_slice();
    let out = OutPtr(y.as_mut_ptr());
    (0..n.div_ceil(chunk)).into_par_iter().for_each(|c| {
        let out = &out;
        let (j0, j1) = (c * chunk, ((c + 1) * chunk).min(n));
        // SAFETY: columns j0..j1 of every row belong to this task alone.
        rows(
            &data[j0 * rb..j1 * rb],
            rb,
            0,
            m,
            unsafe { out.0.add(j0) },
            n,
        );
    });
}

/// A few activation rows: `row(j, r0, out)` fills `out` with column `j` of rows `r0..`
/// (up to four), for every group of four rows while the weight row is in cache; columns
/// are split in one chunk per thread.
#[cfg(target_arch = "x86_64")]
fn gemv(
    w: &QuantMatrix,
    m: usize,
    y: &mut [f32],
    row: impl Fn(usize, usize, &mut [f32; 4]) + Sync,
) {
    let n = w.rows;
    let chunk = n.div_ceil(rayon::current_num_threads().max(1)).max(1);
    let out = OutPtr(y.as_mut_ptr());
    (0..n.div_ceil(chunk)).into_par_iter().for_each(|c| {
        let out = &out;
        let mut col = [0.0f32; 4];
        for j in c * chunk..((c + 1) * chunk).min(n) {
            for r0 in (0..m).step_by(4) {
                row(j, r0, &mut col);
                for (r, v) in col.iter().enumerate().take(m - r0) {
                    // SAFETY: (r0 + r, j) is inside y, and column j belongs to this task
                    // alone.
                    unsafe { *out.0.add((r0 + r) * n + j) = *v };
                }
            }
        }
    });
}

/// Most weight rows in one tile: four where AVX-512's 32 vector registers hold a 4 × 4
/// tile's accumulators, two with AVX2's 16.
fn tile_cols(isa: Isa) -> usize {
    if isa == Isa::Vnni {
        4
    } else {
        2
    }
}

/// Ask the CPU to start loading weight rows `j0..j1` into cache (the next group's, while
/// the tiles compute with this one's): for a short batch the tiles are too brief for the
/// hardware prefetcher to hide the memory latency of the next rows.
#[inline]
fn prefetch_rows(w: &QuantMatrix, j0: usize, j1: usize) {
    #[cfg(target_arch = "x86_64")]
    if j0 < j1 {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let rb = w.format.row_bytes(w.cols);
        let bytes = &w.data.as_slice()[j0 * rb..j1 * rb];
        for line in (0..bytes.len()).step_by(64) {
            // SAFETY: prefetching is a hint; the address is inside `bytes`.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(bytes.as_ptr().add(line) as *const i8) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (w, j0, j1);
}

/// The loop nest shared by both families: column chunks in parallel; within a chunk,
/// passes over the activation rows; within a pass, `jmax` weight rows decoded at a time and
/// multiplied with up to four activation rows at a time.
#[allow(clippy::too_many_arguments)]
fn drive<Row, New, Dec, Tile>(
    w: &QuantMatrix,
    m: usize,
    y: &mut [f32],
    jmax: usize,
    new: New,
    dec: Dec,
    tile: Tile,
) where
    New: Fn() -> Row + Sync,
    Dec: Fn(usize, &mut Row) + Sync,
    Tile: Fn(&[Row; 4], usize, usize, usize, usize, *mut f32) + Sync,
{
    let (n, k) = (w.rows, w.cols);
    // One chunk per thread for a single row (decode: fewer hand-offs between threads),
    // several per thread for batches (load balance).
    let per_thread = if m <= 4 { 1 } else { 4 };
    let tasks = rayon::current_num_threads().max(1) * per_thread;
    let chunk = n.div_ceil(tasks).next_multiple_of(jmax).max(jmax);
    let pass = rows_per_pass(k);
    let out = OutPtr(y.as_mut_ptr());
    (0..n.div_ceil(chunk)).into_par_iter().for_each(|c| {
        let out = &out;
        let (j0, j1) = (c * chunk, ((c + 1) * chunk).min(n));
        let mut rows = [new(), new(), new(), new()];
        for t0 in (0..m).step_by(pass) {
            let t1 = (t0 + pass).min(m);
            let mut j = j0;
            while j < j1 {
                let jn = (j1 - j).min(jmax);
                for (i, row) in rows.iter_mut().enumerate().take(jn) {
                    dec(j + i, row);
                }
                prefetch_rows(w, j + jn, (j + 2 * jmax).min(j1));
                tile(&rows, jn, t0, t1, j, out.0);
                j += jn;
            }
        }
    });
}

#[cfg(test)]
mod tests;
