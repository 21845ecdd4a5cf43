//! Vectorised `e^x` (x86-64): eight lanes with AVX2 + FMA, sixteen with AVX-512, the same
//! method and the same results lane for lane. Used by the attention kernels' softmax and
//! the fused SwiGLU.
//!
//! # Safety
//! Each function needs the CPU features it is compiled for.

#![allow(clippy::missing_safety_doc)]

use std::arch::x86_64::*;

/// `e^x` for eight lanes: `x = n·ln2 + r` (ln2 split in two for accuracy), `e^r` by its
/// degree-6 Taylor polynomial on |r| ≤ ln2/2 (relative error < 2e-7), times `2^n` put
/// straight into the exponent bits; below −87.3 the result is 0 (so −∞ gives 0).
#[inline]
#[target_feature(enable = "avx2,fma")]
pub unsafe fn exp8(x: __m256) -> __m256 {
    let underflow = _mm256_cmp_ps(x, _mm256_set1_ps(-87.3), _CMP_LT_OQ);
    let x = _mm256_max_ps(x, _mm256_set1_ps(-87.3));
    let n = _mm256_round_ps(
        _mm256_mul_ps(x, _mm256_set1_ps(std::f32::consts::LOG2_E)),
        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC,
    );
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693_145_75), x);
    let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428_606_8e-6), r);
    let mut p = _mm256_set1_ps(1.0 / 720.0);
    for c in [1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0] {
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
    }
    let pow2 = _mm256_slli_epi32(
        _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)),
        23,
    );
    let e = _mm256_mul_ps(p, _mm256_castsi256_ps(pow2));
    _mm256_andnot_ps(underflow, e)
}

/// `e^x` for sixteen lanes, the same method as the AVX2 `exp8`: `x = n·ln2 + r`, a degree-6
/// polynomial for `e^r`, `2^n` in the exponent bits; below −87.3 (and for −∞) it is 0.
#[inline]
#[target_feature(enable = "avx512f")]
pub unsafe fn exp16(x: __m512) -> __m512 {
    let underflow = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.3), _CMP_LT_OQ);
    let x = _mm512_max_ps(x, _mm512_set1_ps(-87.3));
    let n = _mm512_roundscale_ps(
        _mm512_mul_ps(x, _mm512_set1_ps(std::f32::consts::LOG2_E)),
        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC,
    );
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693_145_75), x);
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428_606_8e-6), r);
    let mut p = _mm512_set1_ps(1.0 / 720.0);
    for c in [1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0] {
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
    }
    let pow2 = _mm512_slli_epi32(
        _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)),
        23,
    );
    let e = _mm512_mul_ps(p, _mm512_castsi512_ps(pow2));
    _mm512_maskz_mov_ps(!underflow, e)
}

/// `exp(x)` for 16 lanes with relative error below 5e-6 (degree-5 polynomial; `vscalefps`
/// applies the power of two and rounds results below 2⁻¹⁴⁹ to zero): for attention
/// probabilities, which are rounded to bf16 (relative step 2⁻⁸) right after. Lanes below
/// −104.5 give 0, as do −∞ lanes.
#[inline]
#[target_feature(enable = "avx512f")]
pub unsafe fn exp16_fast(x: __m512) -> __m512 {
    let x = _mm512_max_ps(x, _mm512_set1_ps(-110.0));
    let n = _mm512_roundscale_ps(
        _mm512_mul_ps(x, _mm512_set1_ps(std::f32::consts::LOG2_E)),
        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC,
    );
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(std::f32::consts::LN_2), x);
    let mut p = _mm512_set1_ps(1.0 / 120.0);
    for c in [1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0] {
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
    }
    _mm512_scalef_ps(p, n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vector_exp_is_accurate() {
        if !(is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")) {
            return;
        }
        for i in 0..20_000 {
            let x = -90.0 + i as f32 * 0.0046;
            let lanes = [x; 8];
            // SAFETY: AVX2 + FMA checked above.
            let got = unsafe {
                use std::arch::x86_64::*;
                let mut out = [0f32; 8];
                _mm256_storeu_ps(out.as_mut_ptr(), exp8(_mm256_loadu_ps(lanes.as_ptr())));
                out[0]
            };
            let want = (x as f64).exp();
            if x < -87.3 {
                assert_eq!(got, 0.0, "exp({x})");
            } else {
                assert!(
                    ((got as f64) - want).abs() <= 3e-7 * want,
                    "exp({x}) = {got}, want {want}"
                );
            }
        }
    }

    #[test]
    fn fast_exp16_is_accurate_enough_for_bf16() {
        if !is_x86_feature_detected!("avx512f") {
            return;
        }
        for i in 0..30_000 {
            let x = -120.0 + i as f32 * 0.004;
            let got = unsafe {
                let mut out = [0f32; 16];
                _mm512_storeu_ps(out.as_mut_ptr(), exp16_fast(_mm512_set1_ps(x)));
                out[0]
            };
            let want = (x as f64).exp();
            if x < -104.5 {
                assert_eq!(got, 0.0, "exp({x})");
            } else {
                // Relative error, or one unit of the smallest subnormal.
                assert!(
                    ((got as f64) - want).abs() <= 5e-6 * want + 1.5e-45,
                    "exp({x}) = {got}, want {want}"
                );
            }
        }
        let z = unsafe {
            let mut out = [1f32; 16];
            _mm512_storeu_ps(
                out.as_mut_ptr(),
                exp16_fast(_mm512_set1_ps(f32::NEG_INFINITY)),
            );
            out[0]
        };
        assert_eq!(z, 0.0);
    }

    #[test]
    fn vector_exp16_matches_exp8() {
        if !is_x86_feature_detected!("avx512f") {
            return;
        }
        for i in 0..20_000 {
            let x = -90.0 + i as f32 * 0.0046;
            // SAFETY: AVX-512 (implies AVX2 + FMA) checked above.
            let (a, b) = unsafe {
                use std::arch::x86_64::*;
                let mut a = [0f32; 16];
                let mut b = [0f32; 8];
                _mm512_storeu_ps(a.as_mut_ptr(), exp16(_mm512_set1_ps(x)));
                _mm256_storeu_ps(b.as_mut_ptr(), exp8(_mm256_set1_ps(x)));
                (a[0], b[0])
            };
            assert_eq!(a, b, "exp({x})");
        }
    }
}
