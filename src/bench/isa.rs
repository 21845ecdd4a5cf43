//! `quire bench engine --isa`: which instruction set both engines are held to, so a laptop
//! comparison (AVX2, with AVX-VNNI where the CPU has it) or a server one (AVX-512) is one
//! command on any machine that has that instruction set.
//!
//! For Quire the choice picks its kernels (the worker process gets `QUIRE_CPU_KERNEL`); for
//! llama.cpp it picks a venv of its own whose llama-cpp-python is compiled for exactly
//! that set (`GGML_NATIVE=OFF` and the `GGML_*` flags below), so neither engine uses an
//! instruction the other may not.

use anyhow::{bail, Result};
use std::path::{Path, PathBuf};

/// The instruction set of an engine comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BenchIsa {
    /// Whatever each engine picks for this CPU (Quire's best kernels; llama.cpp built with
    /// `GGML_NATIVE=ON`).
    #[default]
    Native,
    /// AVX2 + FMA + F16C (+ AVX-VNNI where the CPU has it), no AVX-512: Intel and AMD
    /// laptops.
    Avx2,
    /// AVX-512 F/BW/VL + VNNI (+ BF16 where the CPU has it).
    Avx512,
}

/// The x86 features that decide what each choice may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpuFeatures {
    /// AVX2, FMA and F16C.
    pub avx2: bool,
    /// AVX-VNNI (the VEX-encoded `vpdpbusd` of Alder Lake and later laptops).
    pub avx_vnni: bool,
    /// AVX-512 F, BW, VL and VNNI.
    pub avx512_vnni: bool,
    /// AVX-512 BF16.
    pub avx512_bf16: bool,
}

impl CpuFeatures {
    /// This CPU's features.
    pub fn detect() -> Self {
        #[cfg(target_arch = "x86_64")]
        {
            let avx2 = is_x86_feature_detected!("avx2")
                && is_x86_feature_detected!("fma")
                && is_x86_feature_detected!("f16c");
            let avx512_vnni = avx2
                && is_x86_feature_detected!("avx512f")
                && is_x86_feature_detected!("avx512bw")
                && is_x86_feature_detected!("avx512vl")
                && is_x86_feature_detected!("avx512vnni");
            Self {
                avx2,
                avx_vnni: avx2 && is_x86_feature_detected!("avxvnni"),
                avx512_vnni,
                avx512_bf16: avx512_vnni && is_x86_feature_detected!("avx512bf16"),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        Self::default()
    }
}

impl BenchIsa {
    /// The lowercase name (`native`, `avx2`, `avx512`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Native => "native",
            Self::Avx2 => "avx2",
            Self::Avx512 => "avx512",
        }
    }

    /// An error unless `cpu` can run this choice.
    pub fn check(self, cpu: CpuFeatures) -> Result<()> {
        match self {
            Self::Native => Ok(()),
            Self::Avx2 if !cpu.avx2 => {
                bail!("--isa avx2 needs a CPU with AVX2, FMA and F16C; this one lacks them (use --isa native)")
            }
            Self::Avx512 if !cpu.avx512_vnni => bail!(
                "--isa avx512 needs a CPU with AVX-512 F/BW/VL and VNNI; this one has {} (use --isa {})",
                if cpu.avx2 { "AVX2 but not AVX-512 VNNI" } else { "neither" },
                if cpu.avx2 { "avx2 or native" } else { "native" }
            ),
            _ => Ok(()),
        }
    }

    /// `QUIRE_CPU_KERNEL` for Quire's worker process: `avx2` holds it to the AVX2 kernels;
    /// the AVX-512 kernels are the best ones, which `auto` picks on a CPU that passed
    /// [`check`](Self::check).
    pub fn quire_kernel(self) -> &'static str {
        match self {
            Self::Avx2 => "avx2",
            Self::Native | Self::Avx512 => "auto",
        }
    }

    /// `CMAKE_ARGS` for building llama-cpp-python for this choice on `cpu`.
    pub fn llama_cmake_args(self, cpu: CpuFeatures) -> String {
        let on = |b: bool| if b { "ON" } else { "OFF" };
        let isa = match self {
            Self::Native => "-DGGML_NATIVE=ON".to_string(),
            Self::Avx2 => format!(
                "-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
                 -DGGML_AVX_VNNI={} -DGGML_AVX512=OFF",
                on(cpu.avx_vnni)
            ),
            Self::Avx512 => format!(
                "-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
                 -DGGML_AVX512=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16={}",
                on(cpu.avx512_bf16)
            ),
        };
        // AMX off: Quire has no AMX kernels, and a VM that lists AMX without granting the
        // tile state kills ggml's AMX path with SIGILL at the first matrix product. The
        // GGML_AMX_* options only count without GGML_NATIVE; `-march=native` turns the AMX
        // code on by itself, so the compiler is told no AMX too (an explicit `-mno-…` wins
        // over `-march` whatever the order). x86 only: other compilers reject the flags.
        let no_amx = if cfg!(target_arch = "x86_64") {
            " \"-DCMAKE_C_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16\" \
             \"-DCMAKE_CXX_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16\""
        } else {
            ""
        };
        format!(
            "{isa} -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF{no_amx} \
             -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_BLAS=OFF -DLLAMA_CURL=OFF"
        )
    }

    /// The python of this choice's llama-cpp-python venv: for `native`, `native_python`
    /// (the configured venv); otherwise a sibling venv named for the choice
    /// (`…/venv-avx2`, `…/venv-avx512`).
    pub fn llama_python(self, native_python: &Path) -> PathBuf {
        if self == Self::Native {
            return native_python.to_path_buf();
        }
        let venv = native_python
            .parent()
            .and_then(Path::parent)
            .unwrap_or(Path::new("."));
        let name = format!(
            "{}-{}",
            venv.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| "venv".into()),
            self.name()
        );
        venv.with_file_name(name).join("bin").join("python")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LAPTOP: CpuFeatures = CpuFeatures {
        avx2: true,
        avx_vnni: true,
        avx512_vnni: false,
        avx512_bf16: false,
    };
    const ZEN3: CpuFeatures = CpuFeatures {
        avx2: true,
        avx_vnni: false,
        avx512_vnni: false,
        avx512_bf16: false,
    };
    const SERVER: CpuFeatures = CpuFeatures {
        avx2: true,
        avx_vnni: true,
        avx512_vnni: true,
        avx512_bf16: true,
    };

    #[test]
    fn a_choice_the_cpu_lacks_is_refused_with_what_to_use() {
        let e = BenchIsa::Avx512.check(ZEN3).unwrap_err().to_string();
        assert!(e.contains("AVX-512") && e.contains("--isa avx2"), "{e}");
        let e = BenchIsa::Avx2
            .check(CpuFeatures::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("AVX2") && e.contains("--isa native"), "{e}");
        assert!(BenchIsa::Avx2.check(SERVER).is_ok());
        assert!(BenchIsa::Avx512.check(SERVER).is_ok());
        assert!(BenchIsa::Native.check(CpuFeatures::default()).is_ok());
    }

    #[test]
    fn llama_cpp_is_built_for_exactly_the_chosen_set() {
        let a = BenchIsa::Avx2.llama_cmake_args(LAPTOP);
        assert!(a.contains("-DGGML_NATIVE=OFF") && a.contains("-DGGML_AVX2=ON"));
        assert!(a.contains("-DGGML_AVX_VNNI=ON") && a.contains("-DGGML_AVX512=OFF"));
        // No AVX-VNNI instruction where the CPU would fault on it.
        assert!(BenchIsa::Avx2
            .llama_cmake_args(ZEN3)
            .contains("-DGGML_AVX_VNNI=OFF"));
        let s = BenchIsa::Avx512.llama_cmake_args(SERVER);
        assert!(s.contains("-DGGML_AVX512=ON") && s.contains("-DGGML_AVX512_VNNI=ON"));
        assert!(s.contains("-DGGML_AVX512_BF16=ON"));
        assert!(BenchIsa::Native
            .llama_cmake_args(ZEN3)
            .starts_with("-DGGML_NATIVE=ON"));
        for isa in [BenchIsa::Native, BenchIsa::Avx2, BenchIsa::Avx512] {
            let a = isa.llama_cmake_args(SERVER);
            assert!(
                a.contains("-DGGML_CUDA=OFF") && a.contains("-DGGML_AMX_TILE=OFF"),
                "{a}"
            );
            // `-march=native` would turn ggml's AMX code on regardless of GGML_AMX_*.
            #[cfg(target_arch = "x86_64")]
            assert!(a.contains("\"-DCMAKE_CXX_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16\""));
        }
    }

    #[test]
    fn each_choice_has_its_own_venv_and_kernel() {
        let native = Path::new("/c/llama-cpp-python/venv/bin/python");
        assert_eq!(BenchIsa::Native.llama_python(native), native);
        assert_eq!(
            BenchIsa::Avx2.llama_python(native),
            Path::new("/c/llama-cpp-python/venv-avx2/bin/python")
        );
        assert_eq!(
            BenchIsa::Avx512.llama_python(native),
            Path::new("/c/llama-cpp-python/venv-avx512/bin/python")
        );
        assert_eq!(BenchIsa::Avx2.quire_kernel(), "avx2");
        assert_eq!(BenchIsa::Avx512.quire_kernel(), "auto");
    }
}
