//! `--device auto|cpu|cuda[:N]|metal`.

use anyhow::{bail, Result};
use candle_core::Device;

/// Resolve a device name. `auto` picks CUDA, then Metal, when compiled in and present,
/// otherwise the CPU.
pub fn parse_device(name: &str) -> Result<Device> {
    let name = name.trim().to_ascii_lowercase();
    match name.as_str() {
        "cpu" => Ok(Device::Cpu),
        "auto" => {
            if candle_core::utils::cuda_is_available() {
                if let Ok(d) = Device::new_cuda(0) {
                    return Ok(d);
                }
            }
            if candle_core::utils::metal_is_available() {
                if let Ok(d) = Device::new_metal(0) {
                    return Ok(d);
                }
            }
            Ok(Device::Cpu)
        }
        "metal" => Device::new_metal(0).map_err(|e| {
            anyhow::anyhow!("metal device unavailable ({e}); build with `--features metal` on macOS, or use --device cpu")
        }),
        s if s == "cuda" || s.starts_with("cuda:") => {
            let idx: usize = match s.strip_prefix("cuda:") {
                Some(n) => n.parse().map_err(|_| anyhow::anyhow!("bad device {s:?}: expected cuda:N"))?,
                None => 0,
            };
            Device::new_cuda(idx).map_err(|e| {
                anyhow::anyhow!("cuda device {idx} unavailable ({e}); build with `--features cuda` on a machine with an NVIDIA GPU, or use --device cpu")
            })
        }
        other => bail!("unknown device {other:?}: use auto, cpu, cuda, cuda:N or metal"),
    }
}

/// Short name of a device kind, used in cache keys and reports.
pub fn device_kind(device: &Device) -> &'static str {
    match device {
        Device::Cpu => "cpu",
        Device::Cuda(_) => "cuda",
        Device::Metal(_) => "metal",
    }
}
