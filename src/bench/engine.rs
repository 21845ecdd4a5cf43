//! `quire bench engine`: Quire's prefill and decode speed against llama.cpp on the same
//! token ids, and against the decode limit set by the machine's memory bandwidth.
//!
//! Measures, on the CPU (or, with `quire bench engine --device cuda`, on an NVIDIA GPU
//! against llama.cpp with every layer offloaded to it — see [`run_on`]):
//! * prefill tokens/s for a 512- and a 2,048-token prompt (best of R, fresh KV cache each);
//! * decode tokens/s for exactly N greedy tokens after the 512-token prompt (a loop of
//!   `model.forward` + argmax that does not stop at EOS);
//! * model load time, and the time to first token of a cold start (load + the first,
//!   cold, 512-token prefill + the first argmax);
//! * peak RSS (`VmHWM`) of the process that ran Quire — a child process of the same binary
//!   when run from the CLI, so the number is Quire's alone;
//! * read bandwidth of memory (all threads used) and the decode limit it implies: bandwidth
//!   ÷ bytes of weights read per token (every tensor except the embedding table, of which a
//!   token reads one row — unless the output projection is tied to it, then it is read in
//!   full).
//!
//! llama.cpp runs through `benches/llama_cpp_bench.py` with the Python of a venv that has
//! llama-cpp-python.

use super::config::BenchConfig;
use super::isa::{BenchIsa, CpuFeatures};
use super::sys::{self, Bandwidth, Machine};
use super::{argmax, fmt_opt, prompt_ids, ratio, table};
use crate::engine::gguf::GgufFile;
use crate::engine::kv_cache::{KvCache, KvLayout};
use crate::engine::tokenizer::Tokenizer;
use crate::engine::{Engine, LoadOptions};
use anyhow::{bail, Context, Result};
use candle_core::Device;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// Tokens of the short prompt (prefill, and the context before decoding).
pub const SHORT_PROMPT: usize = 512;
/// Tokens of the long prompt.
pub const LONG_PROMPT: usize = 2048;
/// Greedy tokens decoded after the short prompt.
pub const DECODE_TOKENS: usize = 128;
/// llama-cpp-python version installed when the venv has to be created (the version the
/// baseline was first measured with).
pub const LLAMA_CPP_PYTHON_VERSION: &str = "0.3.36";

/// How to run Quire's side of the benchmark.
#[derive(Debug, Clone)]
pub enum QuireRunner {
    /// In this process (peak RSS is this process's, whatever else it did).
    InProcess,
    /// In a child process: this executable run as `EXE bench engine --worker-ids FILE ...`
    /// (the hidden worker mode of `quire bench engine`), so peak RSS is Quire's alone and
    /// the start is really cold.
    Child(PathBuf),
}

/// What to measure.
#[derive(Debug, Clone)]
pub struct EngineBenchOptions {
    /// GGUF file.
    pub model: PathBuf,
    /// Threads for both engines.
    pub threads: usize,
    /// Best-of repeats for each of Quire's measures.
    pub repeats: usize,
    /// Best-of repeats for llama.cpp's measures.
    pub llama_repeats: usize,
    /// Greedy tokens to decode.
    pub decode_tokens: usize,
    /// Also run llama.cpp.
    pub compare_llama_cpp: bool,
    /// Where Quire runs.
    pub quire: QuireRunner,
    /// The instruction set both engines are held to.
    pub isa: BenchIsa,
    /// Where llama.cpp's venv is.
    pub config: BenchConfig,
}

/// Quire's numbers.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct QuireNumbers {
    /// Seconds to load the model (GGUF parse, tokenizer, template, weights).
    pub load_s: f64,
    /// Load + first (cold) prefill of the short prompt + first argmax.
    pub cold_ttft_s: f64,
    /// Best seconds to prefill the short prompt.
    pub prefill_short_s: f64,
    /// Short-prompt prefill rate (tokens/s).
    pub prefill_short_tok_s: f64,
    /// Best seconds to prefill the long prompt.
    pub prefill_long_s: f64,
    /// Long-prompt prefill rate (tokens/s).
    pub prefill_long_tok_s: f64,
    /// Best seconds for the decode loop.
    pub decode_s: f64,
    /// Decode rate (tokens/s).
    pub decode_tok_s: f64,
    /// Tokens decoded per run.
    pub decode_tokens: usize,
    /// Decode of several sequences together (one forward pass per step for all of them),
    /// each after its own copy of the 512-token prompt.
    #[serde(default)]
    pub batch_decode: Vec<BatchDecode>,
    /// Peak resident set size in MiB.
    pub peak_rss_mib: Option<f64>,
    /// Which process the peak RSS covers.
    pub peak_rss_scope: String,
    /// Threads rayon used.
    pub threads: usize,
    /// Quire's matmul kernels that ran (`Vnni`, `Avx2`, `Portable`; `candle` on a GPU).
    #[serde(default)]
    pub kernels: String,
    /// The device Quire ran on (`cpu`, `cuda`, `metal`).
    #[serde(default)]
    pub device: String,
}

/// Decode of `sequences` sequences stepped together.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BatchDecode {
    /// Sequences decoded together.
    pub sequences: usize,
    /// Tokens of all sequences per second (best run).
    pub tok_s: f64,
    /// Tokens per second of each sequence (`tok_s ÷ sequences`).
    pub per_sequence_tok_s: f64,
}

/// Batch sizes whose decode `quire bench engine` measures beside the single stream.
pub const BATCH_SIZES: [usize; 2] = [4, 8];

/// llama.cpp's numbers, from two runs of the Python script.
#[derive(Debug, Clone, Serialize)]
pub struct LlamaCppNumbers {
    /// "llama-cpp-python X.Y.Z".
    pub engine: String,
    /// Seconds to load the model and create the context (short-prompt run).
    pub load_s: f64,
    /// Short-prompt prefill rate.
    pub prefill_short_tok_s: f64,
    /// Long-prompt prefill rate.
    pub prefill_long_tok_s: f64,
    /// Decode rate after the short prompt.
    pub decode_tok_s: f64,
    /// Peak RSS of the Python process, MiB (larger of the two runs).
    pub peak_rss_mib: Option<f64>,
    /// llama.cpp's own list of the CPU features it was built with
    /// (`llama_print_system_info`).
    pub system_info: Option<String>,
    /// The script's raw output for each run.
    pub raw: Vec<serde_json::Value>,
}

/// Bytes of weights a decode step reads.
#[derive(Debug, Clone, Serialize)]
pub struct WeightBytes {
    /// Size of the GGUF file.
    pub file_bytes: u64,
    /// Bytes of all tensors.
    pub tensor_bytes: u64,
    /// Bytes of `token_embd.weight`.
    pub embedding_bytes: u64,
    /// Whether the output projection is the embedding table (no `output.weight`).
    pub tied_output: bool,
    /// Bytes read per decoded token: all tensors, less the embedding table unless tied.
    pub per_token_bytes: u64,
}

/// Weight bytes read per decoded token, from the GGUF tensor table.
pub fn weight_bytes(gguf: &GgufFile) -> WeightBytes {
    let bytes = |info: &candle_core::quantized::gguf_file::TensorInfo| -> u64 {
        (info.shape.elem_count() / info.ggml_dtype.block_size() * info.ggml_dtype.type_size())
            as u64
    };
    let tensor_bytes: u64 = gguf.content.tensor_infos.values().map(bytes).sum();
    let embedding_bytes = gguf
        .content
        .tensor_infos
        .get("token_embd.weight")
        .map(bytes)
        .unwrap_or(0);
    let tied_output = !gguf.has_tensor("output.weight");
    WeightBytes {
        file_bytes: gguf.file_len,
        tensor_bytes,
        embedding_bytes,
        tied_output,
        per_token_bytes: if tied_output {
            tensor_bytes
        } else {
            tensor_bytes - embedding_bytes
        },
    }
}

/// Everything `quire bench engine` reports.
#[derive(Debug, Clone, Serialize)]
pub struct EngineReport {
    /// Model file name.
    pub model: String,
    /// Model path.
    pub model_path: String,
    /// The machine.
    pub machine: Machine,
    /// The instruction set both engines were held to.
    pub isa: BenchIsa,
    /// Best-of repeats, Quire.
    pub repeats: usize,
    /// Best-of repeats, llama.cpp.
    pub llama_repeats: usize,
    /// Load averages (1/5/15 min) when the benchmark started.
    pub load_average_start: Option<[f64; 3]>,
    /// Load averages when it ended.
    pub load_average_end: Option<[f64; 3]>,
    /// Short prompt tokens.
    pub short_prompt_tokens: usize,
    /// Long prompt tokens.
    pub long_prompt_tokens: usize,
    /// Quire.
    pub quire: QuireNumbers,
    /// Where both engines ran: `cpu`, or the GPU device Quire was given (`cuda`,
    /// `cuda:N`); on a GPU llama.cpp offloads every layer.
    pub device: String,
    /// llama.cpp, when compared and it ran.
    pub llama_cpp: Option<LlamaCppNumbers>,
    /// Why llama.cpp has no numbers, when compared and it did not run.
    pub llama_cpp_error: Option<String>,
    /// Quire ÷ llama.cpp prefill rate, 512-token prompt.
    pub prefill_ratio_512: Option<f64>,
    /// Quire ÷ llama.cpp prefill rate, 2,048-token prompt.
    pub prefill_ratio_2048: Option<f64>,
    /// Quire ÷ llama.cpp decode rate.
    pub decode_ratio: Option<f64>,
    /// Quire ÷ llama.cpp load seconds (lower is better for Quire).
    pub load_ratio: Option<f64>,
    /// Quire ÷ llama.cpp peak RSS (lower is better for Quire).
    pub peak_rss_ratio: Option<f64>,
    /// Measured memory bandwidth.
    pub bandwidth: Bandwidth,
    /// Same, GB/s.
    pub bandwidth_gb_s: f64,
    /// Weight bytes.
    pub weights: WeightBytes,
    /// Bytes of weights read per decoded token.
    pub weight_bytes_per_token: u64,
    /// KV-cache bytes read per decoded token at the short prompt's length (not in the limit).
    pub kv_bytes_per_token_at_short: u64,
    /// Element type of Quire's keys and values on this CPU (`f32` or `bf16`).
    pub kv_dtype: String,
    /// Decode limit: bandwidth ÷ weight bytes per token (tokens/s).
    pub decode_limit_tok_s: f64,
    /// Quire's decode rate as a percentage of the limit.
    pub quire_decode_pct_of_limit: f64,
    /// llama.cpp's decode rate as a percentage of the limit.
    pub llama_cpp_decode_pct_of_limit: Option<f64>,
}

/// Quire's measurements on `ids` (the long prompt; its first `short` tokens are the short
/// one). Loads the model itself, so the first prefill is a cold start.
pub fn measure_quire(
    model: &Path,
    ids: &[u32],
    short: usize,
    decode: usize,
    repeats: usize,
    rss_scope: &str,
) -> Result<QuireNumbers> {
    measure_quire_on(model, &Device::Cpu, ids, short, decode, repeats, rss_scope)
}

/// [`measure_quire`] on `device`. On a GPU the device is synchronized before each prefill
/// time is read (kernels run asynchronously); the decode loop's argmax copies the logits
/// to the host each step, which waits for them.
pub fn measure_quire_on(
    model: &Path,
    device: &Device,
    ids: &[u32],
    short: usize,
    decode: usize,
    repeats: usize,
    rss_scope: &str,
) -> Result<QuireNumbers> {
    anyhow::ensure!(
        short <= ids.len() && short > 0,
        "short prompt longer than the prompt"
    );
    let t0 = Instant::now();
    let engine = Engine::load(model, device, &LoadOptions::default())?;
    engine.device.synchronize()?;
    let load_s = t0.elapsed().as_secs_f64();
    let cfg = engine.config().clone();
    anyhow::ensure!(
        ids.len() + 16 <= cfg.context_length && short + decode + 16 <= cfg.context_length,
        "the model's context ({}) is too short for this benchmark",
        cfg.context_length
    );
    eprintln!("quire: loaded {} in {load_s:.2}s", model.display());
    let repeats = repeats.max(1);
    let (mut best_short, mut best_decode, mut best_long) =
        (f64::INFINITY, f64::INFINITY, f64::INFINITY);
    let mut cold_ttft_s = f64::NAN;
    for r in 0..repeats {
        let mut cache = KvCache::with_capacity(&cfg, &engine.device, short + decode + 16)?;
        let t = Instant::now();
        let mut logits = engine.prefill(&mut cache, &ids[..short])?;
        engine.device.synchronize()?;
        let prefill = t.elapsed().as_secs_f64();
        let mut next = argmax(&logits)?;
        if r == 0 {
            cold_ttft_s = load_s + t.elapsed().as_secs_f64();
        }
        best_short = best_short.min(prefill);
        let t = Instant::now();
        for _ in 0..decode {
            logits = engine.model.forward(&[next], &mut cache)?;
            next = argmax(&logits)?;
        }
        let dec = t.elapsed().as_secs_f64();
        best_decode = best_decode.min(dec);
        eprintln!(
            "quire: run {}/{repeats}: prefill {short} tokens {prefill:.2}s ({:.1} tok/s), decode {decode} tokens {dec:.2}s ({:.1} tok/s)",
            r + 1,
            short as f64 / prefill,
            decode as f64 / dec
        );
    }
    let batch_decode = if decode > 0 && engine.device.is_cpu() {
        BATCH_SIZES
            .iter()
            .map(|&n| measure_batch_decode(&engine, &ids[..short], n, decode, repeats))
            .collect::<Result<Vec<_>>>()?
    } else {
        Vec::new()
    };
    for r in 0..repeats {
        let mut cache = KvCache::with_capacity(&cfg, &engine.device, ids.len() + 16)?;
        let t = Instant::now();
        engine.prefill(&mut cache, ids)?;
        engine.device.synchronize()?;
        let dt = t.elapsed().as_secs_f64();
        best_long = best_long.min(dt);
        eprintln!(
            "quire: run {}/{repeats}: prefill {} tokens {dt:.2}s ({:.1} tok/s)",
            r + 1,
            ids.len(),
            ids.len() as f64 / dt
        );
    }
    Ok(QuireNumbers {
        load_s,
        cold_ttft_s,
        prefill_short_s: best_short,
        prefill_short_tok_s: short as f64 / best_short,
        prefill_long_s: best_long,
        prefill_long_tok_s: ids.len() as f64 / best_long,
        decode_s: best_decode,
        decode_tok_s: if decode > 0 {
            decode as f64 / best_decode
        } else {
            f64::NAN
        },
        decode_tokens: decode,
        batch_decode,
        peak_rss_mib: sys::peak_rss_mib(),
        peak_rss_scope: rss_scope.to_string(),
        threads: rayon::current_num_threads(),
        kernels: if engine.device.is_cpu() {
            format!("{:?}", crate::engine::kernels::Isa::detect())
        } else {
            engine.kernels.clone()
        },
        device: crate::engine::device::device_kind(&engine.device).to_string(),
    })
}

/// Best aggregate decode rate of `n` sequences stepped together for `decode` tokens, each
/// continuing its own copy of the prompt's cache with its own greedy token.
fn measure_batch_decode(
    engine: &Engine,
    prompt: &[u32],
    n: usize,
    decode: usize,
    repeats: usize,
) -> Result<BatchDecode> {
    let cfg = engine.config();
    let mut base = KvCache::with_capacity(cfg, &engine.device, prompt.len() + 1)?;
    let first = argmax(&engine.prefill(&mut base, prompt)?)?;
    let mut best = f64::INFINITY;
    for r in 0..repeats {
        let mut caches = (0..n)
            .map(|_| base.fork(prompt.len(), decode + 16))
            .collect::<Result<Vec<_>>>()?;
        let mut next = vec![first; n];
        let t = Instant::now();
        for _ in 0..decode {
            let logits = {
                let mut refs: Vec<&mut KvCache> = caches.iter_mut().collect();
                engine.model.forward_rows(&next, &mut refs)?
            };
            for (row, token) in next.iter_mut().enumerate() {
                *token = argmax(&logits.get(row)?)?;
            }
        }
        let dt = t.elapsed().as_secs_f64();
        best = best.min(dt);
        eprintln!(
            "quire: run {}/{repeats}: decode {decode} tokens x {n} sequences {dt:.2}s ({:.1} tok/s in all)",
            r + 1,
            (n * decode) as f64 / dt
        );
    }
    let tok_s = (n * decode) as f64 / best;
    Ok(BatchDecode {
        sequences: n,
        tok_s,
        per_sequence_tok_s: tok_s / n as f64,
    })
}

/// The benchmark's prompt: `n` token ids of deterministic English text.
pub fn bench_ids(model: &Path, n: usize) -> Result<Vec<u32>> {
    let gguf = GgufFile::open(model)?;
    let tok = Tokenizer::for_model(&gguf)?;
    prompt_ids(|t| tok.encode(t), n)
}

/// Where the llama.cpp baseline script is.
pub fn llama_script() -> Option<PathBuf> {
    [
        Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/llama_cpp_bench.py"),
        PathBuf::from("benches/llama_cpp_bench.py"),
    ]
    .into_iter()
    .find(|p| p.is_file())
}

/// The python of llama-cpp-python's venv: the user's venv of `config`
/// (`$QUIRE_LLAMA_CPP_VENV`: a venv directory, or its python executable), else
/// `<Quire's cache dir>/llama-cpp-python/venv` (`~/.cache/quire/llama-cpp-python/venv`).
pub fn llama_python_path(config: &BenchConfig) -> PathBuf {
    if let Some(p) = &config.llama_cpp_venv {
        return if p.is_file() {
            p.clone()
        } else {
            p.join("bin").join("python")
        };
    }
    crate::paths::cache_dir().join("llama-cpp-python/venv/bin/python")
}

fn can_import(python: &Path, modules: &str) -> bool {
    python.is_file()
        && Command::new(python)
            .args(["-c", &format!("import {modules}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
}

fn has_llama_cpp(python: &Path) -> bool {
    can_import(python, "llama_cpp, numpy")
}

/// Make sure `python` (a venv's python, as from [`ensure_llama_python`]) can
/// `import sacrebleu` (chrF for `quire bench quality`), installing it with the venv's pip
/// when it cannot.
pub fn ensure_sacrebleu(python: &Path) -> Result<()> {
    if can_import(python, "sacrebleu") {
        return Ok(());
    }
    let pip = python.with_file_name("pip");
    eprintln!("chrF: installing sacrebleu with {}", pip.display());
    let st = Command::new(&pip)
        .args(["install", "-q", "sacrebleu"])
        .stdout(Stdio::null())
        .status()
        .with_context(|| format!("cannot run {}", pip.display()))?;
    if !st.success() || !can_import(python, "sacrebleu") {
        bail!("installing sacrebleu with {} failed", pip.display());
    }
    Ok(())
}

/// The file in a venv Quire created that records the `CMAKE_ARGS` its llama.cpp was built
/// with.
pub const BUILD_STAMP: &str = "quire-llama-cmake-args";

/// Whether the venv's [`BUILD_STAMP`] records exactly `cmake_args`.
fn built_with(venv: &Path, cmake_args: &str) -> bool {
    std::fs::read_to_string(venv.join(BUILD_STAMP)).is_ok_and(|s| s == cmake_args)
}

/// A python that can `import llama_cpp`: the configured venv, created (and
/// llama-cpp-python built from source, sacrebleu installed alongside) if it is missing.
pub fn ensure_llama_python(config: &BenchConfig) -> Result<PathBuf> {
    ensure_llama_python_for(config, BenchIsa::Native)
}

/// [`ensure_llama_python`] for llama.cpp built for `isa` (its own venv; see
/// [`BenchIsa::llama_python`] and [`BenchIsa::llama_cmake_args`]).
///
/// A venv Quire created records the build options in [`BUILD_STAMP`]; one whose record is
/// missing or differs (built by an older Quire, e.g. with ggml's AMX path, which dies with
/// SIGILL in VMs that list AMX) is rebuilt. A venv named by `$QUIRE_LLAMA_CPP_VENV` is the
/// user's and is used as it is.
pub fn ensure_llama_python_for(config: &BenchConfig, isa: BenchIsa) -> Result<PathBuf> {
    ensure_llama_venv(
        isa.llama_python(&llama_python_path(config)),
        &isa.llama_cmake_args(CpuFeatures::detect()),
        &format!("--isa {}", isa.name()),
        config.llama_cpp_venv.is_some(),
    )
}

/// `CMAKE_ARGS` for llama-cpp-python on an NVIDIA GPU: the native CPU build's options
/// (AMX off, see [`BenchIsa::llama_cmake_args`]) with `GGML_CUDA=ON`, for the GPUs of this
/// machine only (`CMAKE_CUDA_ARCHITECTURES=native`: one architecture compiles in minutes,
/// all of them in far more).
pub fn llama_cuda_cmake_args(cpu: CpuFeatures) -> String {
    BenchIsa::Native.llama_cmake_args(cpu).replace(
        "-DGGML_CUDA=OFF",
        "-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=native",
    )
}

/// A python whose llama-cpp-python offloads to CUDA: `$QUIRE_LLAMA_CPP_VENV` when set (the
/// user's venv, used as it is: `scripts/gpu-check.sh` builds one with `GGML_CUDA=ON`),
/// else a sibling `…/venv-cuda` of the default venv, created and built with
/// [`llama_cuda_cmake_args`] if missing. Whether that build can offload is checked when
/// the benchmark runs (`llama_supports_gpu_offload`).
pub fn ensure_llama_python_cuda(config: &BenchConfig) -> Result<PathBuf> {
    let python = llama_python_path(config);
    let users_venv = config.llama_cpp_venv.is_some();
    let python = if users_venv {
        python
    } else {
        let venv = python
            .parent()
            .and_then(Path::parent)
            .context("cannot tell the venv directory from the python path")?;
        venv.with_file_name("venv-cuda").join("bin").join("python")
    };
    ensure_llama_venv(
        python,
        &llama_cuda_cmake_args(CpuFeatures::detect()),
        "--device cuda",
        users_venv,
    )
}

/// The venv of `python`, with llama-cpp-python built with `cmake_args` (`what` names the
/// choice in messages; a `users_venv` is used as it is once it has llama-cpp-python); see
/// [`ensure_llama_python_for`].
fn ensure_llama_venv(
    python: PathBuf,
    cmake_args: &str,
    what: &str,
    users_venv: bool,
) -> Result<PathBuf> {
    let venv = python
        .parent()
        .and_then(Path::parent)
        .context("cannot tell the venv directory from the python path")?
        .to_path_buf();
    let installed = has_llama_cpp(&python);
    if installed && (users_venv || built_with(&venv, cmake_args)) {
        return Ok(python);
    }
    if installed {
        eprintln!(
            "llama.cpp: the llama-cpp-python in {} was built with other options than this Quire's ({cmake_args}); rebuilding it (about 15 minutes on 2 cores)",
            venv.display()
        );
    } else {
        eprintln!(
            "llama.cpp: no llama-cpp-python at {}; creating the venv {} and installing llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION} for {what} (it compiles llama.cpp: about 15 minutes on 2 cores)",
            python.display(),
            venv.display(),
        );
    }
    if !python.is_file() {
        let sys_python = ["python3", "python"]
            .into_iter()
            .find(|p| {
                Command::new(p)
                    .arg("--version")
                    .stdout(Stdio::null())
                    .status()
                    .is_ok_and(|s| s.success())
            })
            .context("no python3 on PATH to create the venv with")?;
        let st = Command::new(sys_python)
            .args(["-m", "venv"])
            .arg(&venv)
            .status()?;
        if !st.success() {
            bail!("`{sys_python} -m venv {}` failed", venv.display());
        }
    }
    let pip = venv.join("bin").join("pip");
    let st = Command::new(&pip)
        .args([
            "install",
            "-q",
            // A wheel cached by an earlier build would ignore CMAKE_ARGS, and an installed
            // one built with other options must be compiled again.
            "--no-cache-dir",
            "--force-reinstall",
            &format!("llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}"),
            "numpy",
            // chrF for `quire bench quality` (checked separately by `ensure_sacrebleu`).
            "sacrebleu",
        ])
        .env("CMAKE_ARGS", cmake_args)
        .env(
            "CMAKE_BUILD_PARALLEL_LEVEL",
            sys::logical_cpus().to_string(),
        )
        .stdout(Stdio::null())
        .status()
        .with_context(|| format!("cannot run {}", pip.display()))?;
    if !st.success() || !has_llama_cpp(&python) {
        bail!(
            "installing llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION} into {} failed",
            venv.display()
        );
    }
    let stamp = venv.join(BUILD_STAMP);
    crate::util::write_atomic(&stamp, cmake_args.as_bytes())
        .with_context(|| format!("cannot record the build options in {}", stamp.display()))?;
    Ok(python)
}

/// Runs `benches/llama_cpp_bench.py` (its path is the first argument) with every layer
/// offloaded to the GPU: `Llama(n_gpu_layers=-1)` unless the script names a number. Exits
/// with a message when the llama-cpp-python was built without GPU support.
const LLAMA_GPU_WRAPPER: &str = r#"import runpy, sys
import llama_cpp
if not llama_cpp.llama_supports_gpu_offload():
    sys.exit("llama.cpp: this llama-cpp-python cannot offload to a GPU; build it with CMAKE_ARGS='-DGGML_CUDA=ON' (scripts/gpu-check.sh does)")
_init = llama_cpp.Llama.__init__
def _offload(self, *args, **kwargs):
    kwargs.setdefault("n_gpu_layers", -1)
    _init(self, *args, **kwargs)
llama_cpp.Llama.__init__ = _offload
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"#;

#[allow(clippy::too_many_arguments)]
fn run_llama_script(
    python: &Path,
    script: &Path,
    model: &Path,
    threads: usize,
    ids_file: &Path,
    decode: usize,
    repeats: usize,
    gpu: bool,
) -> Result<serde_json::Value> {
    let mut cmd = Command::new(python);
    if gpu {
        cmd.args(["-c", LLAMA_GPU_WRAPPER]);
    }
    let out = cmd
        .arg(script)
        .arg("--model")
        .arg(model)
        .args(["--threads", &threads.to_string()])
        .arg("--prompt-ids")
        .arg(ids_file)
        .args([
            "--decode",
            &decode.to_string(),
            "--repeats",
            &repeats.to_string(),
        ])
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("cannot run {}", python.display()))?;
    if !out.status.success() {
        bail!("{} exited with {}", script.display(), out.status);
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .context("no JSON line in the script's output")?;
    serde_json::from_str(line).with_context(|| format!("cannot parse the script's output: {line}"))
}

fn num(v: &serde_json::Value, key: &str) -> Result<f64> {
    v.get(key)
        .and_then(|x| x.as_f64())
        .with_context(|| format!("llama.cpp script output lacks a number `{key}`: {v}"))
}

/// llama.cpp on the same ids: one run with the short prompt and decoding, one with the long
/// prompt and no decoding; with `gpu`, every layer offloaded to the GPU.
#[allow(clippy::too_many_arguments)]
pub fn measure_llama_cpp(
    python: &Path,
    model: &Path,
    threads: usize,
    ids: &[u32],
    short: usize,
    decode: usize,
    repeats: usize,
    gpu: bool,
) -> Result<LlamaCppNumbers> {
    let script =
        llama_script().context("benches/llama_cpp_bench.py not found (run from the repository)")?;
    let dir = tempfile::tempdir()?;
    let short_file = dir.path().join("ids_short.json");
    let long_file = dir.path().join("ids_long.json");
    std::fs::write(&short_file, serde_json::to_vec(&ids[..short])?)?;
    std::fs::write(&long_file, serde_json::to_vec(ids)?)?;
    eprintln!("llama.cpp: {short}-token prompt + {decode} decoded tokens, best of {repeats}");
    let a = run_llama_script(
        python,
        &script,
        model,
        threads,
        &short_file,
        decode,
        repeats,
        gpu,
    )?;
    eprintln!("llama.cpp: {}-token prompt, best of {repeats}", ids.len());
    let b = run_llama_script(python, &script, model, threads, &long_file, 0, repeats, gpu)?;
    let rss = [a.get("peak_rss_mib"), b.get("peak_rss_mib")]
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_f64())
        .fold(None, |m: Option<f64>, x| Some(m.map_or(x, |m| m.max(x))));
    Ok(LlamaCppNumbers {
        engine: format!(
            "{}{}",
            a.get("engine")
                .and_then(|v| v.as_str())
                .unwrap_or("llama.cpp"),
            if gpu { " (GPU, all layers)" } else { "" }
        ),
        load_s: num(&a, "load_s")?,
        prefill_short_tok_s: num(&a, "prefill_tok_s")?,
        prefill_long_tok_s: num(&b, "prefill_tok_s")?,
        decode_tok_s: if decode > 0 {
            num(&a, "decode_tok_s")?
        } else {
            f64::NAN
        },
        peak_rss_mib: rss,
        system_info: a
            .get("system_info")
            .and_then(|v| v.as_str())
            .map(|s| s.trim().trim_end_matches('|').trim().to_string()),
        raw: vec![a, b],
    })
}

fn run_quire_child(
    exe: &Path,
    opts: &EngineBenchOptions,
    device: &str,
    ids: &[u32],
) -> Result<QuireNumbers> {
    let dir = tempfile::tempdir()?;
    let ids_file = dir.path().join("ids.json");
    std::fs::write(&ids_file, serde_json::to_vec(ids)?)?;
    let mut cmd = Command::new(exe);
    cmd.args(["bench", "engine", "--model"])
        .arg(&opts.model)
        .args([
            "--threads",
            &opts.threads.to_string(),
            "--repeats",
            &opts.repeats.to_string(),
        ])
        .args(["--decode-tokens", &opts.decode_tokens.to_string()])
        .args(["--device", device])
        .arg("--worker-ids")
        .arg(&ids_file)
        .env("RAYON_NUM_THREADS", opts.threads.to_string());
    if opts.isa != BenchIsa::Native {
        cmd.env("QUIRE_CPU_KERNEL", opts.isa.quire_kernel());
    }
    let out = cmd
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("cannot run {}", exe.display()))?;
    if !out.status.success() {
        bail!("the Quire worker process exited with {}", out.status);
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .context("no JSON from the Quire worker")?;
    Ok(serde_json::from_str(line)?)
}

/// Run the whole engine benchmark on the CPU.
pub fn run(opts: &EngineBenchOptions) -> Result<EngineReport> {
    run_on(opts, "cpu")
}

/// Refuse a combination of device, instruction set and runner that cannot be measured,
/// before anything is built or loaded.
fn check_options(opts: &EngineBenchOptions, device: &str, on_gpu: bool) -> Result<()> {
    if device == "auto" {
        bail!("--device auto: name the device to measure (cpu, cuda, cuda:N or metal)");
    }
    if on_gpu && opts.isa != BenchIsa::Native {
        bail!(
            "--isa {} holds CPU kernels to an instruction set; with --device {device} use --isa native",
            opts.isa.name()
        );
    }
    if on_gpu && opts.compare_llama_cpp && !device.starts_with("cuda") {
        bail!("--compare llama.cpp on a GPU is wired for --device cuda[:N] only, not {device}");
    }
    if on_gpu {
        // Refused here, before llama.cpp's venv is built or anything is measured, when this
        // build or machine has no such device.
        crate::engine::device::parse_device(device)?;
    }
    opts.isa.check(CpuFeatures::detect())?;
    if opts.isa != BenchIsa::Native && matches!(opts.quire, QuireRunner::InProcess) {
        bail!(
            "--isa {} runs Quire in its own worker process; drop --in-process (or set QUIRE_CPU_KERNEL and use --isa native)",
            opts.isa.name()
        );
    }
    Ok(())
}

/// Run the whole engine benchmark with Quire on `device` (`cpu`, `cuda`, `cuda:N` or
/// `metal`, as [`crate::engine::device::parse_device`] reads it). On `cuda…` llama.cpp runs
/// from a llama-cpp-python built with `GGML_CUDA=ON` ([`ensure_llama_python_cuda`]) with
/// every layer offloaded; the memory-bandwidth limit, measured on host memory, then does not
/// bound either engine and is reported only for reference.
pub fn run_on(opts: &EngineBenchOptions, device: &str) -> Result<EngineReport> {
    let device = device.trim().to_ascii_lowercase();
    let on_gpu = device != "cpu";
    check_options(opts, &device, on_gpu)?;
    let threads = opts.threads.max(1);
    if matches!(opts.quire, QuireRunner::InProcess) {
        sys::use_threads(threads);
    }
    let machine = Machine::detect(threads);
    let load_average_start = sys::load_average();
    sys::warn_if_busy();
    let gguf = GgufFile::open(&opts.model)?;
    let weights = weight_bytes(&gguf);
    let cfg = crate::engine::arch::ModelConfig::from_gguf(&gguf)?;
    drop(gguf);
    let ids = bench_ids(&opts.model, LONG_PROMPT)?;

    // Settle llama.cpp's python first: creating it compiles for minutes and must not
    // overlap with the measurements.
    let mut llama_error = None;
    let python = if opts.compare_llama_cpp {
        let python = if on_gpu {
            ensure_llama_python_cuda(&opts.config)
        } else {
            ensure_llama_python_for(&opts.config, opts.isa)
        };
        match python {
            Ok(p) => Some(p),
            Err(e) => {
                eprintln!("warning: llama.cpp comparison unavailable: {e:#}");
                llama_error = Some(format!("{e:#}"));
                None
            }
        }
    } else {
        None
    };

    // Memory bandwidth moves with the (shared) machine's state: measured before the engines
    // run and again after, the best of both taken as the limit.
    eprintln!("memory bandwidth: {threads} threads reading 512 MiB, best of 5 (before)");
    let bandwidth_before = sys::memory_bandwidth(threads, 512, 5);

    let quire = match &opts.quire {
        QuireRunner::InProcess => measure_quire_on(
            &opts.model,
            &crate::engine::device::parse_device(&device)?,
            &ids,
            SHORT_PROMPT,
            opts.decode_tokens,
            opts.repeats,
            "whole benchmark process",
        )?,
        QuireRunner::Child(exe) => run_quire_child(exe, opts, &device, &ids)?,
    };

    let llama = match &python {
        Some(py) => match measure_llama_cpp(
            py,
            &opts.model,
            threads,
            &ids,
            SHORT_PROMPT,
            opts.decode_tokens,
            opts.llama_repeats.max(1),
            on_gpu,
        ) {
            Ok(n) => Some(n),
            Err(e) => {
                eprintln!("warning: llama.cpp run failed: {e:#}");
                llama_error = Some(format!("{e:#}"));
                None
            }
        },
        None => None,
    };

    eprintln!("memory bandwidth: {threads} threads reading 512 MiB, best of 5 (after)");
    let bandwidth = bandwidth_before.merge(sys::memory_bandwidth(threads, 512, 5));
    let limit = bandwidth.read_gb_s * 1e9 / weights.per_token_bytes as f64;
    // A GPU cache stores f32 rows; the CPU's layout depends on the CPU.
    let kv = if on_gpu {
        KvLayout::Rows
    } else {
        KvLayout::for_device(&cfg, &Device::Cpu)
    };
    let l = llama.as_ref();
    Ok(EngineReport {
        model: opts
            .model
            .file_stem()
            .map(|s| s.to_string_lossy().to_string())
            .unwrap_or_default(),
        model_path: opts.model.display().to_string(),
        machine,
        isa: opts.isa,
        repeats: opts.repeats,
        llama_repeats: opts.llama_repeats.max(1),
        load_average_start,
        load_average_end: sys::load_average(),
        short_prompt_tokens: SHORT_PROMPT,
        long_prompt_tokens: ids.len(),
        prefill_ratio_512: ratio(
            Some(quire.prefill_short_tok_s),
            l.map(|l| l.prefill_short_tok_s),
        ),
        prefill_ratio_2048: ratio(
            Some(quire.prefill_long_tok_s),
            l.map(|l| l.prefill_long_tok_s),
        ),
        decode_ratio: ratio(Some(quire.decode_tok_s), l.map(|l| l.decode_tok_s)),
        load_ratio: ratio(Some(quire.load_s), l.map(|l| l.load_s)),
        peak_rss_ratio: ratio(quire.peak_rss_mib, l.and_then(|l| l.peak_rss_mib)),
        bandwidth_gb_s: bandwidth.read_gb_s,
        bandwidth,
        weight_bytes_per_token: weights.per_token_bytes,
        kv_bytes_per_token_at_short: (cfg.kv_bytes_per_token(kv.elem_bytes()) * SHORT_PROMPT)
            as u64,
        kv_dtype: kv.dtype_name().to_string(),
        weights,
        decode_limit_tok_s: limit,
        quire_decode_pct_of_limit: 100.0 * quire.decode_tok_s / limit,
        llama_cpp_decode_pct_of_limit: l.map(|l| 100.0 * l.decode_tok_s / limit),
        quire,
        device,
        llama_cpp: llama,
        llama_cpp_error: llama_error,
    })
}

/// The table's rows: each measure, Quire's and llama.cpp's figures, their ratio.
fn table_rows(r: &EngineReport) -> Vec<Vec<String>> {
    let q = &r.quire;
    let l = r.llama_cpp.as_ref();
    let row = |name: String,
               qv: Option<f64>,
               lv: Option<f64>,
               digits: usize,
               better: &str|
     -> Vec<String> {
        vec![
            name,
            fmt_opt(qv, digits),
            fmt_opt(lv, digits),
            fmt_opt(ratio(qv, lv), 2),
            better.to_string(),
        ]
    };
    let rows = vec![
        row(
            format!("prefill {} tok (tok/s)", r.short_prompt_tokens),
            Some(q.prefill_short_tok_s),
            l.map(|l| l.prefill_short_tok_s),
            1,
            "higher",
        ),
        row(
            format!("prefill {} tok (tok/s)", r.long_prompt_tokens),
            Some(q.prefill_long_tok_s),
            l.map(|l| l.prefill_long_tok_s),
            1,
            "higher",
        ),
        row(
            format!("decode {} tok (tok/s)", q.decode_tokens),
            Some(q.decode_tok_s),
            l.map(|l| l.decode_tok_s),
            2,
            "higher",
        ),
    ];
    let mut rows = rows;
    for b in &q.batch_decode {
        rows.push(row(
            format!(
                "decode {} tok × {} sequences (tok/s, all)",
                q.decode_tokens, b.sequences
            ),
            Some(b.tok_s),
            l.map(|l| l.decode_tok_s),
            2,
            "higher",
        ));
    }
    rows.extend([
        row(
            "model load (s)".into(),
            Some(q.load_s),
            l.map(|l| l.load_s),
            3,
            "lower",
        ),
        row(
            "cold TTFT, 512 tok (s)".into(),
            Some(q.cold_ttft_s),
            None,
            3,
            "lower",
        ),
        row(
            "peak RSS (MiB)".into(),
            q.peak_rss_mib,
            l.and_then(|l| l.peak_rss_mib),
            0,
            "lower",
        ),
    ]);
    rows
}

/// The report as text tables.
pub fn render_text(r: &EngineReport) -> String {
    let q = &r.quire;
    let l = r.llama_cpp.as_ref();
    let rows = table_rows(r);
    let mut s = String::new();
    s.push_str(&format!(
        "model    {} ({:.1} MB file)\n",
        r.model,
        r.weights.file_bytes as f64 / 1e6
    ));
    s.push_str(&format!("machine  {}\n", r.machine.describe()));
    s.push_str(&format!(
        "isa      --isa {}: Quire kernels {}{}\n",
        r.isa.name(),
        q.kernels,
        l.and_then(|l| l.system_info.as_deref())
            .map(|i| format!("; llama.cpp built with {i}"))
            .unwrap_or_default()
    ));
    s.push_str(&format!(
        "method   {}, the same {}/{} token ids for both engines, best of {} (Quire) / {} (llama.cpp), greedy decode of exactly {} tokens after the {}-token prompt\nload     load average {} at start, {} at end (1/5/15 min; above 0 means other work shared the CPUs)\n\n",
        if r.device == "cpu" {
            "CPU".to_string()
        } else {
            format!(
                "device {} (Quire: {} kernels; llama.cpp: every layer offloaded)",
                r.device, q.kernels
            )
        },
        r.short_prompt_tokens,
        r.long_prompt_tokens,
        r.repeats,
        r.llama_repeats,
        q.decode_tokens,
        r.short_prompt_tokens,
        sys::load_average_text(r.load_average_start),
        sys::load_average_text(r.load_average_end)
    ));
    s.push_str(&table(
        &[
            "measure",
            "Quire",
            l.map(|l| l.engine.as_str()).unwrap_or("llama.cpp"),
            "Quire ÷ llama.cpp",
            "better",
        ],
        &rows,
    ));
    if let Some(e) = &r.llama_cpp_error {
        s.push_str(&format!("\nllama.cpp: not measured ({e})\n"));
    }
    s.push_str(&format!(
        "\npeak RSS of Quire covers: {}; llama.cpp's is its Python process (ru_maxrss). Model file in the OS page cache (warm disk).\n",
        q.peak_rss_scope
    ));
    if !q.batch_decode.is_empty() {
        s.push_str(
            "decode × N sequences: N copies of the 512-token prompt's cache stepped together, one forward pass a step (how `quire translate` decodes its units); the llama.cpp column is its single-stream decode.\n",
        );
    }
    s.push_str(&bandwidth_text(r));
    s
}

/// The memory-bandwidth limit on decode and each engine's share of it.
fn bandwidth_text(r: &EngineReport) -> String {
    let (q, l) = (&r.quire, r.llama_cpp.as_ref());
    let mut s = String::new();
    let w = &r.weights;
    if r.device != "cpu" {
        s.push_str(&format!(
            "\nthe limit below is the host's memory, for reference only: both engines decoded on {}\n",
            r.device
        ));
    }
    s.push_str(&format!(
        "\nmemory-bandwidth limit on decode\n  read bandwidth        {:.2} GB/s ({} threads, {} MiB buffer, best of {} runs before and after the engines ran; slowest {:.1})\n  weight bytes / token  {:.1} MB (tensors {:.1} MB{}; embedding table {:.1} MB)\n  KV bytes / token      {:.1} MB at {} tokens of context ({}; not in the limit)\n  decode limit          {:.1} tok/s\n  Quire                 {:.2} tok/s = {:.0}% of the limit\n",
        r.bandwidth.read_gb_s,
        r.bandwidth.threads,
        r.bandwidth.buffer_mib,
        r.bandwidth.runs,
        r.bandwidth.slowest_gb_s,
        w.per_token_bytes as f64 / 1e6,
        w.tensor_bytes as f64 / 1e6,
        if w.tied_output { ", output tied to the embedding so it is read in full" } else { " less the embedding table (one row read per token)" },
        w.embedding_bytes as f64 / 1e6,
        r.kv_bytes_per_token_at_short as f64 / 1e6,
        r.short_prompt_tokens,
        r.kv_dtype,
        r.decode_limit_tok_s,
        q.decode_tok_s,
        r.quire_decode_pct_of_limit
    ));
    if let (Some(l), Some(p)) = (l, r.llama_cpp_decode_pct_of_limit) {
        s.push_str(&format!(
            "  llama.cpp             {:.2} tok/s = {p:.0}% of the limit\n",
            l.decode_tok_s
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_llama_python_is_the_users_venv_or_quires_own() {
        let own = llama_python_path(&BenchConfig::default());
        assert_eq!(
            own,
            crate::paths::cache_dir().join("llama-cpp-python/venv/bin/python")
        );
        let dir = tempfile::tempdir().unwrap();
        let users = |p: &Path| BenchConfig {
            llama_cpp_venv: Some(p.to_path_buf()),
        };
        // A venv directory: its bin/python; a python executable: itself.
        assert_eq!(
            llama_python_path(&users(dir.path())),
            dir.path().join("bin/python")
        );
        let exe = dir.path().join("python3.12");
        std::fs::write(&exe, b"").unwrap();
        assert_eq!(llama_python_path(&users(&exe)), exe);
    }

    #[test]
    fn the_cuda_build_of_llama_cpp_keeps_the_cpu_options_and_turns_cuda_on() {
        let cpu = CpuFeatures::default();
        let args = llama_cuda_cmake_args(cpu);
        assert!(args.contains("-DGGML_CUDA=ON") && !args.contains("-DGGML_CUDA=OFF"));
        assert!(args.contains("-DCMAKE_CUDA_ARCHITECTURES=native"));
        assert!(args.contains("-DGGML_AMX_TILE=OFF"), "{args}");
        assert_ne!(args, BenchIsa::Native.llama_cmake_args(cpu));
    }

    #[test]
    fn a_venv_counts_as_built_only_with_the_same_options() {
        let dir = tempfile::tempdir().unwrap();
        let args = BenchIsa::Native.llama_cmake_args(CpuFeatures::default());
        assert!(
            !built_with(dir.path(), &args),
            "no record: built by an older Quire"
        );
        std::fs::write(dir.path().join(BUILD_STAMP), "-DGGML_NATIVE=ON").unwrap();
        assert!(!built_with(dir.path(), &args), "other options (AMX on)");
        std::fs::write(dir.path().join(BUILD_STAMP), &args).unwrap();
        assert!(built_with(dir.path(), &args));
    }
}
