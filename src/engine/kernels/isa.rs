//! Which tile kernel runs: the best instruction set this CPU has, unless the engine's
//! settings ask for a slower one. A leaf: every kernel file and the attention kernels may
//! read it.

use crate::engine::config::Kernels;
use std::sync::OnceLock;

/// Which tile kernel runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isa {
    /// AVX-512 VNNI (plus AVX2 decoders).
    Vnni,
    /// AVX2 + FMA.
    Avx2,
    /// Plain Rust.
    Portable,
}

impl Isa {
    /// The best kernel this CPU runs, unless the installed [`EngineConfig`] asks for AVX2 or
    /// plain Rust (for comparisons; a choice the CPU cannot run falls back to the best one).
    ///
    /// [`EngineConfig`]: crate::engine::config::EngineConfig
    pub fn detect() -> Self {
        static ISA: OnceLock<Isa> = OnceLock::new();
        *ISA.get_or_init(|| {
            let best = Self::best();
            match crate::engine::config::active().kernels {
                Kernels::Portable => Self::Portable,
                Kernels::Avx2 if best != Self::Portable => Self::Avx2,
                _ => best,
            }
        })
    }

    /// The best kernel this CPU supports.
    pub fn best() -> Self {
        #[cfg(target_arch = "x86_64")]
        {
            if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
                if !is_x86_feature_detected!("f16c") {
                    return Self::Portable;
                }
                if is_x86_feature_detected!("avx512f")
                    && is_x86_feature_detected!("avx512vl")
                    && is_x86_feature_detected!("avx512bw")
                    && is_x86_feature_detected!("avx512vnni")
                {
                    return Self::Vnni;
                }
                return Self::Avx2;
            }
        }
        Self::Portable
    }

    /// Every kernel this CPU can run (for tests and benches).
    pub fn available() -> Vec<Self> {
        match Self::best() {
            Self::Vnni => vec![Self::Vnni, Self::Avx2, Self::Portable],
            Self::Avx2 => vec![Self::Avx2, Self::Portable],
            Self::Portable => vec![Self::Portable],
        }
    }
}
