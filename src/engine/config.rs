//! The engine's settings, built once at the edge (the CLI reads its flags and the
//! `QUIRE_CPU_KERNEL` / `QUIRE_KV_DTYPE` environment variables there) and installed before
//! a model loads. Nothing inside the engine reads the environment.
//!
//! The CPU kernels are chosen per process (the matmul and attention kernels are free
//! functions on the engine's thread pool), so [`install`] fixes the choice for the process:
//! installing the same settings again is fine, other ones are an error.

use anyhow::{bail, Result};
use std::sync::OnceLock;

/// Which CPU matrix-multiply kernels run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Kernels {
    /// The best of Quire's kernels this CPU runs (AVX-512 VNNI, AVX2, or plain Rust).
    #[default]
    Auto,
    /// Quire's AVX2 kernels (where the CPU has AVX2 and FMA).
    Avx2,
    /// Quire's plain-Rust kernels.
    Portable,
    /// Candle's quantized matmul (the engine before its own kernels; for comparisons).
    Candle,
}

/// Element type of the CPU KV cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum KvDtype {
    /// bf16 where the CPU has AVX-512 BF16, f32 elsewhere.
    #[default]
    Auto,
    /// f32 keys and values everywhere (for comparisons).
    F32,
}

/// Everything that chooses how the engine computes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct EngineConfig {
    /// CPU matmul kernels.
    pub kernels: Kernels,
    /// KV cache element type on the CPU.
    pub kv_dtype: KvDtype,
    /// Worker threads (default: all logical CPUs, or `RAYON_NUM_THREADS`).
    pub threads: Option<usize>,
}

impl EngineConfig {
    /// Parse the values of `QUIRE_CPU_KERNEL` and `QUIRE_KV_DTYPE` (the CLI passes them in;
    /// unknown values are an error naming the variable).
    pub fn with_overrides(
        mut self,
        cpu_kernel: Option<&str>,
        kv_dtype: Option<&str>,
    ) -> Result<Self> {
        if let Some(k) = cpu_kernel.filter(|k| !k.is_empty()) {
            self.kernels = match k {
                "auto" | "native" | "vnni" => Kernels::Auto,
                "avx2" => Kernels::Avx2,
                "portable" => Kernels::Portable,
                "candle" => Kernels::Candle,
                other => bail!(
                    "QUIRE_CPU_KERNEL={other:?} is not a kernel choice (auto, avx2, portable, candle)"
                ),
            };
        }
        if let Some(d) = kv_dtype.filter(|d| !d.is_empty()) {
            self.kv_dtype = match d {
                "auto" | "bf16" => KvDtype::Auto,
                "f32" => KvDtype::F32,
                other => bail!("QUIRE_KV_DTYPE={other:?} is not a KV dtype (auto, f32)"),
            };
        }
        Ok(self)
    }
}

static ACTIVE: OnceLock<EngineConfig> = OnceLock::new();

/// Fix the engine's settings for this process (sizing the thread pool when `threads` is
/// set). Installing the same settings again is fine; different ones are an error.
pub fn install(cfg: &EngineConfig) -> Result<()> {
    let active = ACTIVE.get_or_init(|| {
        if let Some(n) = cfg.threads {
            // The global pool may already exist (a caller sized it): keep it then.
            let _ = rayon::ThreadPoolBuilder::new()
                .num_threads(n.max(1))
                .build_global();
        }
        cfg.clone()
    });
    if active != cfg {
        bail!("engine settings {cfg:?} differ from the ones this process already runs with ({active:?})");
    }
    Ok(())
}

/// The settings in force: the installed ones, or the defaults.
pub fn active() -> &'static EngineConfig {
    ACTIVE.get_or_init(EngineConfig::default)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overrides_parse_and_bad_values_are_errors() {
        let c = EngineConfig::default()
            .with_overrides(Some("candle"), Some("f32"))
            .unwrap();
        assert_eq!(c.kernels, Kernels::Candle);
        assert_eq!(c.kv_dtype, KvDtype::F32);
        let d = EngineConfig::default()
            .with_overrides(None, Some(""))
            .unwrap();
        assert_eq!(d, EngineConfig::default());
        let err = EngineConfig::default()
            .with_overrides(Some("gpu9"), None)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("QUIRE_CPU_KERNEL") && err.contains("gpu9"),
            "{err}"
        );
        assert!(EngineConfig::default()
            .with_overrides(None, Some("f16"))
            .is_err());
    }
}
