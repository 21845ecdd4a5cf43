//! Kernel tests on random data: decoders against Candle's dequantizer (an independent
//! implementation of the formats), SIMD against scalar, every kernel against a plain f64
//! reference, and batch invariance.

use super::formats::{decode_row_k_scalar, decode_row_scalar, DecodedRow, DecodedRowK, Format};
use super::*;
use candle_core::quantized::GgmlDType;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const FORMATS: [(Format, GgmlDType); 6] = [
    (Format::Q4_0, GgmlDType::Q4_0),
    (Format::Q4_1, GgmlDType::Q4_1),
    (Format::Q5_0, GgmlDType::Q5_0),
    (Format::Q8_0, GgmlDType::Q8_0),
    (Format::Q4K, GgmlDType::Q4K),
    (Format::Q6K, GgmlDType::Q6K),
];

/// Random blocks of `format` with sane (finite, small) f16 scales.
fn random_matrix(format: Format, rows: usize, cols: usize, rng: &mut StdRng) -> Vec<u8> {
    let m = QuantMatrix::synthetic(format, rows, cols, rng.random()).unwrap();
    (0..rows).flat_map(|j| m.row_bytes(j).to_vec()).collect()
}

fn random_activations(m: usize, k: usize, rng: &mut StdRng) -> Vec<f32> {
    (0..m * k)
        .map(|i| {
            let v: f32 = rng.random_range(-1.0..1.0);
            // A few outliers, as real activations have.
            if i % 97 == 0 {
                v * 30.0
            } else {
                v
            }
        })
        .collect()
}

#[test]
fn scalar_decoders_match_candle() {
    let mut rng = StdRng::seed_from_u64(1);
    for (format, ggml) in FORMATS {
        let (rows, cols) = (3, 512);
        let bytes = random_matrix(format, rows, cols, &mut rng);
        let t = candle_core::quantized::ggml_file::qtensor_from_ggml(
            ggml,
            &bytes,
            vec![rows, cols],
            &candle_core::Device::Cpu,
        )
        .unwrap();
        let want: Vec<f32> = t
            .dequantize(&candle_core::Device::Cpu)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        let m = QuantMatrix::new(format, rows, cols, WeightBytes::Owned(bytes)).unwrap();
        let got = m.dequantize_rows(&[0, 1, 2]).unwrap();
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                (g - w).abs() <= 1e-6 * w.abs().max(1e-3),
                "{format:?} element {i}: ours {g}, candle {w}"
            );
        }
    }
}

#[test]
fn simd_decoders_match_scalar() {
    let mut rng = StdRng::seed_from_u64(2);
    for (format, _) in FORMATS {
        let cols = 768;
        let bytes = random_matrix(format, 1, cols, &mut rng);
        for isa in Isa::available() {
            if format.is_k_quant() {
                let mut want = DecodedRowK::new(cols);
                decode_row_k_scalar(format, &bytes, &mut want);
                let mut got = DecodedRowK::new(cols);
                super::decode_k(isa, format, &bytes, &mut got);
                assert_eq!(got.u, want.u, "{format:?} {isa:?} values");
                assert_eq!(got.sc, want.sc, "{format:?} {isa:?} scales");
                assert_eq!(got.corr, want.corr, "{format:?} {isa:?} group terms");
                assert_eq!(got.d, want.d, "{format:?} {isa:?} super-scales");
                assert_eq!(got.dmin, want.dmin, "{format:?} {isa:?} super-minimums");
            } else {
                let mut want = DecodedRow::new(cols);
                decode_row_scalar(format, &bytes, &mut want);
                let mut got = DecodedRow::new(cols);
                super::decode(isa, format, &bytes, &mut got);
                assert_eq!(got.u, want.u, "{format:?} {isa:?} values");
                assert_eq!(got.s, want.s, "{format:?} {isa:?} scales");
                assert_eq!(got.t, want.t, "{format:?} {isa:?} minimums");
            }
        }
    }
}

/// The activations as the kernels see them (dequantized), `m × k`.
fn dequantized(x: &Activations) -> Vec<f64> {
    match x {
        Activations::Blocks(q) => (0..q.m * q.k)
            .map(|i| q.qs[i] as f64 * q.d[i / 32] as f64)
            .collect(),
        Activations::K(q) => (0..q.m * q.k)
            .map(|i| q.qs[i] as f64 * q.d[i / 256] as f64)
            .collect(),
    }
}

/// `x · Wᵀ` in f64 from the dequantized weights and the dequantized activations.
fn reference(w: &QuantMatrix, x: &Activations) -> Vec<f64> {
    let (n, k, m) = (w.rows, w.cols, x.m());
    let ids: Vec<u32> = (0..n as u32).collect();
    let wf = w.dequantize_rows(&ids).unwrap();
    let xf = dequantized(x);
    let mut y = vec![0.0f64; m * n];
    for r in 0..m {
        for j in 0..n {
            y[r * n + j] = (0..k).map(|i| wf[j * k + i] as f64 * xf[r * k + i]).sum();
        }
    }
    y
}

#[test]
fn every_kernel_matches_the_reference_and_each_other_bit_for_bit() {
    let mut rng = StdRng::seed_from_u64(3);
    // 544 = 17 blocks: an odd block count exercises the 512-bit kernel's tail.
    for (format, k) in FORMATS
        .iter()
        .flat_map(|&(f, _)| [(f, 512), (f, 544)])
        .filter(|&(f, k)| k % f.block_elems() == 0)
    {
        let n = 37;
        let w = QuantMatrix::new(
            format,
            n,
            k,
            WeightBytes::Owned(random_matrix(format, n, k, &mut rng)),
        )
        .unwrap();
        // 1–15 rows take the register paths, 16 and more the interleaved K-quant tiles
        // (23 = 8 + 8 + 4 + 2 + 1 rows: every step of the AVX-512 one).
        for m in [1, 2, 3, 4, 5, 13, 21, 23] {
            let q = Activations::quantize(format, &random_activations(m, k, &mut rng), m, k);
            let want = reference(&w, &q);
            let mut portable = vec![0.0; m * n];
            matmul(Isa::Portable, &w, &q, &mut portable);
            let scale = want.iter().fold(0.0f64, |a, v| a.max(v.abs()));
            for (g, r) in portable.iter().zip(&want) {
                assert!(
                    (*g as f64 - r).abs() <= 1e-5 * scale,
                    "{format:?} m={m}: kernel {g}, reference {r}"
                );
            }
            for isa in Isa::available() {
                let mut y = vec![0.0; m * n];
                matmul(isa, &w, &q, &mut y);
                assert_eq!(
                    y.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    portable.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    "{format:?} m={m}: {isa:?} differs from the portable kernel"
                );
            }
        }
    }
}

#[test]
fn a_row_gives_the_same_bits_alone_and_inside_a_batch() {
    let mut rng = StdRng::seed_from_u64(4);
    for (format, _) in FORMATS {
        let (n, k, m) = (37, 1024, 19);
        let w = QuantMatrix::new(
            format,
            n,
            k,
            WeightBytes::Owned(random_matrix(format, n, k, &mut rng)),
        )
        .unwrap();
        let x = random_activations(m, k, &mut rng);
        let batch = w.forward(&x, m);
        for r in [0, 4, 10, 18] {
            let alone = w.forward(&x[r * k..(r + 1) * k], 1);
            assert_eq!(
                alone.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                batch[r * n..(r + 1) * n]
                    .iter()
                    .map(|v| v.to_bits())
                    .collect::<Vec<_>>(),
                "{format:?} row {r}"
            );
        }
    }
}

#[test]
fn wrong_sizes_are_refused() {
    assert!(QuantMatrix::new(Format::Q8_0, 2, 32, WeightBytes::Owned(vec![0; 67])).is_err());
    assert!(QuantMatrix::new(Format::Q4K, 1, 128, WeightBytes::Owned(vec![0; 72])).is_err());
    let m = QuantMatrix::new(Format::Q8_0, 2, 32, WeightBytes::Owned(vec![0; 68])).unwrap();
    assert!(m.dequantize_rows(&[2]).is_err());
}

/// The one-activation-row kernels that take many weight rows per call (four at a time,
/// then the rest; for the 32-weight formats two blocks per 512-bit register, then a lone
/// last block) give the bits of the portable kernel for every row count, every block or
/// super-block count (odd ones included) and every activation row of a batch.
#[cfg(target_arch = "x86_64")]
#[test]
fn many_row_kernels_match_the_portable_kernel_bit_for_bit() {
    let mut rng = StdRng::seed_from_u64(5);
    let best = Isa::best();
    for (format, _) in FORMATS {
        let ks: &[usize] = if format.is_k_quant() {
            &[256, 512, 768, 1536]
        } else {
            &[32, 64, 96, 544, 640, 896]
        };
        for &k in ks {
            for n in [1, 2, 3, 4, 5, 7, 8, 9, 17] {
                let w = QuantMatrix::new(
                    format,
                    n,
                    k,
                    WeightBytes::Owned(random_matrix(format, n, k, &mut rng)),
                )
                .unwrap();
                let m = 3;
                let q = Activations::quantize(format, &random_activations(m, k, &mut rng), m, k);
                let mut want = vec![0.0; m * n];
                matmul(Isa::Portable, &w, &q, &mut want);
                // Two to four rows at once (batched decoding) through `matmul`, every ISA.
                for mm in 2..=4 {
                    let qm =
                        Activations::quantize(format, &random_activations(mm, k, &mut rng), mm, k);
                    let mut want_m = vec![0.0; mm * n];
                    matmul(Isa::Portable, &w, &qm, &mut want_m);
                    for isa in Isa::available() {
                        let mut got = vec![0.0; mm * n];
                        matmul(isa, &w, &qm, &mut got);
                        assert_eq!(
                            got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                            want_m.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                            "{format:?} {isa:?} k={k} n={n} m={mm}"
                        );
                    }
                }
                let bytes: Vec<u8> = (0..n).flat_map(|j| w.row_bytes(j).to_vec()).collect();
                let rb = format.row_bytes(k);
                for row in 0..m {
                    let want_row: Vec<u32> = want[row * n..(row + 1) * n]
                        .iter()
                        .map(|v| v.to_bits())
                        .collect();
                    let mut got = vec![0.0f32; n];
                    // SAFETY: AVX2/FMA/F16C (and AVX-512 VNNI) are checked by `Isa::best`.
                    if best != Isa::Portable {
                        unsafe {
                            match &q {
                                Activations::Blocks(qb) => x86_rows::gemv_blocks_rows_ymm(
                                    format, &bytes, rb, qb, row, &mut got,
                                ),
                                Activations::K(qk) => {
                                    x86_rows::gemv_k_rows_ymm(format, &bytes, rb, qk, row, &mut got)
                                }
                            }
                        };
                        let bits: Vec<u32> = got.iter().map(|v| v.to_bits()).collect();
                        assert_eq!(bits, want_row, "{format:?} AVX2 k={k} n={n} row {row}");
                    }
                    if best == Isa::Vnni {
                        unsafe {
                            match &q {
                                Activations::Blocks(qb) => x86_rows::gemv_blocks_rows_zmm(
                                    format, &bytes, rb, qb, row, &mut got,
                                ),
                                Activations::K(qk) => {
                                    x86_rows::gemv_k_rows_zmm(format, &bytes, rb, qk, row, &mut got)
                                }
                            }
                        };
                        let bits: Vec<u32> = got.iter().map(|v| v.to_bits()).collect();
                        assert_eq!(bits, want_row, "{format:?} AVX-512 k={k} n={n} row {row}");
                    }
                }
            }
        }
    }
}

#[test]
fn an_empty_batch_gives_an_empty_product() {
    for (format, _) in FORMATS {
        let w = QuantMatrix::synthetic(format, 5, 256, 1).unwrap();
        for isa in Isa::available() {
            let q = Activations::quantize(format, &[], 0, 256);
            let mut y = vec![];
            matmul(isa, &w, &q, &mut y);
        }
    }
}
