//! Lossless re-encoding of weight blocks whose Candle CPU kernel is slow.
//!
//! The 0.5B Qwen GGUF stores most matrices as Q5_0 (its width, 896, does not fit the
//! 256-wide K-quant blocks), and Candle's Q5_0 dot product is a scalar fallback — 60% of
//! decode time in a profile. A Q5_0 value is `d × (q − 16)` with a 5-bit `q`; the same
//! integer `q − 16` fits an i8, so a Q8_0 block with the same scale `d` holds exactly the
//! same numbers and runs on Candle's vectorised Q8_0 kernels. The cost is memory:
//! 34 bytes per 32 weights instead of 22.

use anyhow::{ensure, Result};
use candle_core::quantized::{GgmlDType, QStorage, QTensor};
use candle_core::Device;
use std::borrow::Cow;

const QK: usize = 32;
const Q5_0_BYTES: usize = 2 + 4 + QK / 2;
const Q8_0_BYTES: usize = 2 + QK;

/// Re-encode Q5_0 bytes as Q8_0 bytes (same scales, same integers).
pub fn q5_0_bytes_to_q8_0(src: &[u8]) -> Result<Vec<u8>> {
    ensure!(
        src.len().is_multiple_of(Q5_0_BYTES),
        "Q5_0 data is not a whole number of blocks"
    );
    let blocks = src.len() / Q5_0_BYTES;
    let mut out = Vec::with_capacity(blocks * Q8_0_BYTES);
    for b in src.chunks_exact(Q5_0_BYTES) {
        let (d, rest) = b.split_at(2);
        let (qh, qs) = rest.split_at(4);
        let qh = u32::from_le_bytes([qh[0], qh[1], qh[2], qh[3]]);
        out.extend_from_slice(d);
        let mut q8 = [0i8; QK];
        for j in 0..QK / 2 {
            let hi0 = ((qh >> j) << 4) & 0x10;
            let hi1 = (qh >> (j + 12)) & 0x10;
            q8[j] = (((qs[j] & 0x0F) as u32 | hi0) as i32 - 16) as i8;
            q8[j + QK / 2] = (((qs[j] >> 4) as u32 | hi1) as i32 - 16) as i8;
        }
        out.extend(q8.iter().map(|&x| x as u8));
    }
    Ok(out)
}

/// A tensor the CPU kernels run fast: Q5_0 becomes an equivalent Q8_0, anything else is
/// returned as is. Only on the CPU (GPU kernels handle Q5_0 well).
pub fn for_fast_cpu(t: QTensor, device: &Device) -> Result<QTensor> {
    if t.dtype() != GgmlDType::Q5_0 || !device.is_cpu() {
        return Ok(t);
    }
    let shape = t.shape().clone();
    let bytes = q5_0_bytes_to_q8_0(&t.data()?)?;
    let storage = QStorage::from_data(Cow::Owned(bytes), device, GgmlDType::Q8_0)?;
    Ok(QTensor::new(storage, shape)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Tensor;

    #[test]
    fn q5_0_to_q8_0_is_exact() {
        let d = Device::Cpu;
        let w = Tensor::randn(0f32, 1.0, (64, 128), &d).unwrap();
        let q5 = QTensor::quantize(&w, GgmlDType::Q5_0).unwrap();
        let a: Vec<f32> = q5
            .dequantize(&d)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        let q8 = for_fast_cpu(q5, &d).unwrap();
        assert_eq!(q8.dtype(), GgmlDType::Q8_0);
        let b: Vec<f32> = q8
            .dequantize(&d)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        assert_eq!(a, b);
    }
}
