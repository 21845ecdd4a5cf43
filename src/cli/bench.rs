//! `quire bench engine|prefix|batch|quality|serve`: measurements printed side by side (tables on stdout,
//! progress on stderr, `--json` for machines).

use crate::bench::config::{BenchConfig, LLAMA_CPP_VENV_ENV};
use crate::bench::engine::{self, EngineBenchOptions, QuireRunner};
use crate::bench::prefix::{self, PrefixBenchOptions};
use crate::bench::quality::{self, QualityBenchOptions};
use crate::bench::sys;
use anyhow::{Context, Result};
use std::path::PathBuf;

/// The model the benchmarks use unless told otherwise.
pub const BENCH_DEFAULT_MODEL: &str = "qwen2.5-coder-0.5b-instruct-q4_k_m";

/// The benchmarks' settings from the environment, read here at the edge:
/// `$QUIRE_LLAMA_CPP_VENV` (when not empty) for the user's llama-cpp-python venv.
pub fn bench_config() -> BenchConfig {
    BenchConfig {
        llama_cpp_venv: std::env::var_os(LLAMA_CPP_VENV_ENV)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from),
    }
}

/// Use `threads` threads for a benchmark that runs the engine in this process:
/// `RAYON_NUM_THREADS`, which Candle's CPU kernels read, set here at the edge before the
/// benchmark starts a thread, and rayon's global pool ([`sys::use_threads`]). Returns the
/// thread count in effect.
pub fn use_threads(threads: usize) -> usize {
    let threads = threads.max(1);
    std::env::set_var("RAYON_NUM_THREADS", threads.to_string());
    sys::use_threads(threads)
}

/// Arguments of `quire bench`.
#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// Which benchmark.
    #[command(subcommand)]
    pub command: BenchCommand,
}

/// The benchmarks.
#[derive(clap::Subcommand, Debug)]
pub enum BenchCommand {
    /// Prefill (512 and 2,048 tokens) and decode (128 tokens) speed, load time, cold time to
    /// first token, peak RSS, and decode speed against the memory-bandwidth limit;
    /// optionally side by side with llama.cpp.
    Engine(EngineArgs),
    /// Time to first token with prefix KV reuse vs full recompute over the parts of a book
    /// behind one shared prefix; disk load vs recompute; logit differences; an SVG chart.
    Prefix(PrefixArgs),
    /// Throughput mode: aggregate decode tokens/s of several requests decoded together
    /// (batch 1, 2, 4) against the same requests one after another.
    Batch(BatchArgs),
    /// Translation quality: a book translated by Quire and by a naive per-paragraph
    /// llama.cpp loop, side by side per chapter — structure errors, blocked units,
    /// house-term share, untranslated English, chrF against a reference, wall time.
    Quality(QualityArgs),
    /// `quire serve` against llama.cpp's server (same model and threads): N concurrent
    /// clients sharing a long system prompt — throughput, time to first token p50/p95 and
    /// cached-token share, side by side.
    Serve(ServeArgs),
}

/// Arguments of `quire bench serve`.
#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// A .gguf path or a known model name (default: `quire translate`'s default model).
    #[arg(long, short = 'm')]
    pub model: Option<String>,
    /// Concurrent clients, one level each.
    #[arg(long, value_delimiter = ',', default_value = "1,4,16")]
    pub clients: Vec<usize>,
    /// Requests each client sends, one after another.
    #[arg(long, default_value_t = 2)]
    pub requests_per_client: usize,
    /// `max_tokens` of every request.
    #[arg(long, default_value_t = 64)]
    pub max_tokens: usize,
    /// Threads for both servers (default: all logical CPUs).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Run `quire serve` only.
    #[arg(long)]
    pub skip_llama: bool,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Also write the JSON report to this file.
    #[arg(long)]
    pub json_file: Option<PathBuf>,
}

/// Arguments of `quire bench quality`.
#[derive(clap::Args, Debug)]
pub struct QualityArgs {
    /// A .md file or a directory of chapters (default: the bundled sample book and its
    /// glossary).
    pub book: Option<PathBuf>,
    /// Reference translations: a directory of chapters, matched by file name or with a
    /// leading `en-` replaced by `zh-` (or one file for a one-chapter book). Without one,
    /// chrF is shown as "–".
    #[arg(long)]
    pub reference: Option<PathBuf>,
    /// A .gguf path or a known model name, for both systems (default: `quire translate`'s
    /// default model).
    #[arg(long, short = 'm')]
    pub model: Option<String>,
    /// House glossary (JSON or TOML), given to both systems.
    #[arg(long)]
    pub glossary: Option<PathBuf>,
    /// Output directory (its input/, reference/, quire/ and naive/ are rewritten).
    #[arg(long, default_value = "target/quire-bench/quality")]
    pub out: PathBuf,
    /// Cut each chapter at its last heading at or before this byte (and the reference
    /// after the same number of headings), for long chapters.
    #[arg(long)]
    pub cut_bytes: Option<usize>,
    /// Threads for both systems (default: all logical CPUs).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Run Quire only (no naive llama.cpp loop).
    #[arg(long)]
    pub skip_naive: bool,
    /// How Quire gives house terms to the model (as `quire translate --house-terms`).
    #[arg(long, value_enum, default_value = "inject")]
    pub house_terms: crate::translate::HouseTerms,
    /// Quire does not write a term's original at its first bold introduction (as `quire
    /// translate --no-term-originals`).
    #[arg(long)]
    pub no_term_originals: bool,
    /// Quire's token budget per unit (as `quire translate --unit-tokens`).
    #[arg(long, default_value_t = 300)]
    pub unit_tokens: usize,
    /// Source language (BCP 47; as `quire translate --from`): en, or zh with --to en.
    #[arg(long, default_value = "en")]
    pub from: String,
    /// Target language (BCP 47; as `quire translate --to`).
    #[arg(long, default_value = "zh-CN")]
    pub to: String,
    /// Translate this chapter of the Debian Reference (ch01, ch05, …) from its installed
    /// English HTML and score against its installed translation into --to (packages
    /// debian-reference-en and -<lang>; converted with pandoc into --out), in place of BOOK
    /// and --reference.
    #[arg(long, value_name = "CHAPTER", conflicts_with_all = ["book", "reference"])]
    pub debian_reference: Option<String>,
    /// Where the Debian Reference's HTML is installed.
    #[arg(long, value_name = "DIR", default_value = crate::bench::debian_reference::DEFAULT_DIR)]
    pub debian_reference_dir: PathBuf,
    /// Print one JSON object instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Also write the JSON object to this file (tables still go to stdout).
    #[arg(long)]
    pub json_file: Option<PathBuf>,
}

/// Arguments of `quire bench batch`.
#[derive(clap::Args, Debug)]
pub struct BatchArgs {
    /// A .gguf path or a known model name.
    #[arg(long, short = 'm', default_value = BENCH_DEFAULT_MODEL)]
    pub model: String,
    /// Batch sizes (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
    pub batches: Vec<usize>,
    /// Most new tokens per request.
    #[arg(long, default_value_t = 64)]
    pub tokens: usize,
    /// Threads (default: all logical CPUs).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Print one JSON object instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Also write the JSON object to this file (tables still go to stdout).
    #[arg(long)]
    pub json_file: Option<PathBuf>,
}

/// Arguments of `quire bench engine`.
#[derive(clap::Args, Debug)]
pub struct EngineArgs {
    /// A .gguf path or a known model name.
    #[arg(long, short = 'm', default_value = BENCH_DEFAULT_MODEL)]
    pub model: String,
    /// Where Quire runs: cpu, cuda, cuda:N or metal (a GPU needs a build with `--features
    /// cuda` / `metal`). With cuda, `--compare llama.cpp` offloads every layer of llama.cpp
    /// to the GPU, from a llama-cpp-python built with GGML_CUDA=ON ($QUIRE_LLAMA_CPP_VENV,
    /// else …/venv-cuda beside the default venv, created if missing).
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// Threads for both engines (default: all logical CPUs).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Also run this engine on the same token ids (only `llama.cpp`, through
    /// benches/llama_cpp_bench.py and the llama-cpp-python venv at $QUIRE_LLAMA_CPP_VENV or
    /// ~/.cache/quire/llama-cpp-python/venv, created if missing).
    #[arg(long, value_parser = ["llama.cpp"])]
    pub compare: Option<String>,
    /// Hold both engines to one instruction set: `avx2` (laptops: AVX2 + FMA + F16C, plus
    /// AVX-VNNI where the CPU has it; no AVX-512), `avx512`, or `native` (each engine's
    /// best for this CPU). Quire's worker runs those kernels; llama.cpp runs from a venv of
    /// its own built for that set (…/venv-avx2, …/venv-avx512, created if missing). A set
    /// this CPU lacks is refused.
    #[arg(long, value_enum, default_value = "native")]
    pub isa: crate::bench::isa::BenchIsa,
    /// Print one JSON object instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Also write the JSON object to this file (tables still go to stdout).
    #[arg(long)]
    pub json_file: Option<PathBuf>,
    /// Best-of repeats for each of Quire's measures (as many as llama.cpp's by default).
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
    /// Best-of repeats for llama.cpp's measures.
    #[arg(long, default_value_t = 3)]
    pub llama_repeats: usize,
    /// Greedy tokens to decode after the 512-token prompt.
    #[arg(long, default_value_t = engine::DECODE_TOKENS)]
    pub decode_tokens: usize,
    /// Measure Quire in this process instead of a child process (peak RSS then covers the
    /// whole benchmark).
    #[arg(long)]
    pub in_process: bool,
    /// Measure speculative decoding instead: translation paragraphs decoded by the model
    /// alone, with this draft model (a .gguf path or known name) guessing every round, and
    /// with the draft behind its pace guard; JSON keys `draft_speedup`, `draft_acceptance`,
    /// `draft_identical`.
    #[arg(long)]
    pub draft: Option<String>,
    /// With --draft: a Markdown file whose prose paragraphs are translated (default: the
    /// bundled sample book).
    #[arg(long, requires = "draft")]
    pub draft_text: Option<PathBuf>,
    /// With --draft: paragraphs to translate.
    #[arg(long, default_value_t = 4, requires = "draft")]
    pub draft_paragraphs: usize,
    /// Internal: run Quire's measurements on these token ids and print JSON.
    #[arg(long, hide = true)]
    pub worker_ids: Option<PathBuf>,
}

/// Arguments of `quire bench prefix`.
#[derive(clap::Args, Debug)]
pub struct PrefixArgs {
    /// A .gguf path or a known model name.
    #[arg(long, short = 'm', default_value = BENCH_DEFAULT_MODEL)]
    pub model: String,
    /// Length of the shared prefix in tokens (guide + glossary, padded).
    #[arg(long, default_value_t = 1500)]
    pub prefix_tokens: usize,
    /// Number of parts (default: every translatable unit of the book; synthetic parts
    /// are added if the book has fewer).
    #[arg(long)]
    pub parts: Option<usize>,
    /// Recompute (full prefill) only the first K parts; the totals and speedups cover
    /// those K. A full recompute takes minutes per part on a small CPU; raise it (or pass a
    /// large number for all parts) on a fast machine.
    #[arg(long, default_value_t = prefix::DEFAULT_MAX_RECOMPUTE)]
    pub max_recompute: usize,
    /// Book to take the parts from (default: the bundled examples/sample-book).
    #[arg(long)]
    pub book: Option<PathBuf>,
    /// Unit budget (estimated tokens) used to segment the book.
    #[arg(long, default_value_t = 400)]
    pub unit_tokens: usize,
    /// Print one JSON object instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Also write the JSON object to this file (tables still go to stdout).
    #[arg(long)]
    pub json_file: Option<PathBuf>,
    /// Where to write the per-part TTFT chart.
    #[arg(long, default_value = "target/quire-bench/prefix.svg")]
    pub svg: PathBuf,
    /// Do not write the chart.
    #[arg(long)]
    pub no_svg: bool,
    /// Directory for the on-disk prefix cache (default: a temporary directory, removed).
    #[arg(long)]
    pub cache_dir: Option<PathBuf>,
    /// Also report prefill tokens/s at 512, 2,048 and 4,096 tokens.
    #[arg(long)]
    pub prefill_scaling: bool,
    /// Measure each part's TTFT with reuse and with recompute this many times
    /// (interleaved) and keep the best of each.
    #[arg(long, default_value_t = 3)]
    pub repeats: usize,
    /// Threads (default: all logical CPUs).
    #[arg(long)]
    pub threads: Option<usize>,
}

/// Run `quire bench`.
pub fn run(args: BenchArgs) -> Result<i32> {
    match args.command {
        BenchCommand::Engine(a) => run_engine(a),
        BenchCommand::Prefix(a) => run_prefix(a),
        BenchCommand::Batch(a) => run_batch(a),
        BenchCommand::Quality(a) => run_quality(a),
        BenchCommand::Serve(a) => run_serve(a),
    }
}

fn run_serve(a: ServeArgs) -> Result<i32> {
    anyhow::ensure!(
        a.clients.iter().all(|&c| c >= 1),
        "--clients: every level needs at least one client"
    );
    let threads = a.threads.unwrap_or_else(sys::logical_cpus).max(1);
    let model = crate::model_store::resolve_model(
        &super::store_config(),
        a.model.as_deref(),
        true,
        a.json,
    )?;
    let report = crate::bench::serve::run(&crate::bench::serve::ServeBenchOptions {
        model,
        threads,
        clients: a.clients,
        requests_per_client: a.requests_per_client,
        max_tokens: a.max_tokens,
        llama: !a.skip_llama,
        quire_exe: std::env::current_exe().context("cannot find this executable")?,
        config: bench_config(),
    })?;
    emit(
        &report,
        a.json,
        a.json_file.as_deref(),
        crate::bench::serve::render,
    )
}

fn run_quality(a: QualityArgs) -> Result<i32> {
    crate::lang::Pair::new(&a.from, &a.to)?;
    let (book, reference) = match &a.debian_reference {
        Some(chapter) => {
            let (b, r) = crate::bench::debian_reference::chapter_pair(
                &a.debian_reference_dir,
                chapter,
                &crate::lang::primary(&a.to),
                &a.out.join("debian-reference"),
            )?;
            (Some(b), Some(r))
        }
        None => (a.book, a.reference),
    };
    let threads = a.threads.unwrap_or_else(sys::logical_cpus).max(1);
    let model = crate::model_store::resolve_model(
        &super::store_config(),
        a.model.as_deref(),
        true,
        a.json,
    )?;
    use_threads(threads);
    let report = quality::run(&QualityBenchOptions {
        book,
        reference,
        model,
        glossary: a.glossary,
        out: a.out,
        cut_bytes: a.cut_bytes,
        threads,
        skip_naive: a.skip_naive,
        house_terms: a.house_terms,
        term_originals: !a.no_term_originals,
        unit_tokens: super::translate::unit_tokens(a.unit_tokens),
        source_lang: a.from,
        target_lang: a.to,
        prefix_cache_dir: super::prefix_cache_dir(None, false),
        config: bench_config(),
    })?;
    emit(
        &report,
        a.json,
        a.json_file.as_deref(),
        quality::render_text,
    )
}

fn run_batch(a: BatchArgs) -> Result<i32> {
    let threads = a.threads.unwrap_or_else(sys::logical_cpus).max(1);
    let model =
        crate::model_store::resolve_model(&super::store_config(), Some(&a.model), true, a.json)?;
    anyhow::ensure!(
        a.batches.iter().all(|&b| b >= 1),
        "--batches: every batch size must be at least 1"
    );
    use_threads(threads);
    let report = crate::bench::batch::run(&crate::bench::batch::BatchBenchOptions {
        model,
        batches: a.batches,
        tokens: a.tokens,
        threads,
    })?;
    emit(
        &report,
        a.json,
        a.json_file.as_deref(),
        crate::bench::batch::render_text,
    )
}

fn run_engine(a: EngineArgs) -> Result<i32> {
    // Refused before anything is fetched or loaded.
    a.isa.check(crate::bench::isa::CpuFeatures::detect())?;
    let threads = a.threads.unwrap_or_else(sys::logical_cpus).max(1);
    let store = super::store_config();
    let model = crate::model_store::resolve_model(
        &store,
        Some(&a.model),
        true,
        a.json || a.worker_ids.is_some(),
    )?;
    let on_cpu = a.device.trim().eq_ignore_ascii_case("cpu");
    if let Some(draft) = &a.draft {
        anyhow::ensure!(
            on_cpu,
            "--draft measures speculative decoding, which needs Quire's CPU kernels: drop --device {}",
            a.device
        );
        let draft = crate::model_store::resolve_model(&store, Some(draft), true, a.json)?;
        use_threads(threads);
        let report = crate::bench::draft::run(&crate::bench::draft::DraftBenchOptions {
            model,
            draft,
            text: a.draft_text,
            paragraphs: a.draft_paragraphs.max(1),
            tokens: a.decode_tokens,
            threads,
        })?;
        return emit(
            &report,
            a.json,
            a.json_file.as_deref(),
            crate::bench::draft::render_text,
        );
    }
    if let Some(ids_file) = &a.worker_ids {
        use_threads(threads);
        let ids: Vec<u32> = serde_json::from_slice(
            &std::fs::read(ids_file)
                .with_context(|| format!("cannot read {}", ids_file.display()))?,
        )?;
        let n = engine::measure_quire_on(
            &model,
            &crate::engine::device::parse_device(&a.device)?,
            &ids,
            engine::SHORT_PROMPT,
            a.decode_tokens,
            a.repeats,
            "Quire worker process only",
        )?;
        println!("{}", serde_json::to_string(&n)?);
        return Ok(0);
    }
    let quire = if a.in_process {
        use_threads(threads);
        QuireRunner::InProcess
    } else {
        QuireRunner::Child(std::env::current_exe().context("cannot find this executable")?)
    };
    let report = engine::run_on(
        &EngineBenchOptions {
            model,
            threads,
            repeats: a.repeats.max(1),
            llama_repeats: a.llama_repeats.max(1),
            decode_tokens: a.decode_tokens,
            compare_llama_cpp: a.compare.is_some(),
            quire,
            isa: a.isa,
            config: bench_config(),
        },
        &a.device,
    )?;
    emit(&report, a.json, a.json_file.as_deref(), engine::render_text)
}

fn run_prefix(a: PrefixArgs) -> Result<i32> {
    let threads = a.threads.unwrap_or_else(sys::logical_cpus).max(1);
    let model =
        crate::model_store::resolve_model(&super::store_config(), Some(&a.model), true, a.json)?;
    use_threads(threads);
    let report = prefix::run(&PrefixBenchOptions {
        model,
        prefix_tokens: a.prefix_tokens,
        parts: a.parts,
        max_recompute: Some(a.max_recompute),
        book: a.book,
        unit_tokens: a.unit_tokens,
        cache_dir: a.cache_dir,
        svg: (!a.no_svg).then_some(a.svg),
        prefill_scaling: a.prefill_scaling,
        threads,
        repeats: a.repeats,
    })?;
    emit(&report, a.json, a.json_file.as_deref(), prefix::render_text)
}

/// Print a report as JSON or as text tables, and write the JSON to `json_file` if given.
fn emit<R: serde::Serialize>(
    report: &R,
    json: bool,
    json_file: Option<&std::path::Path>,
    render: fn(&R) -> String,
) -> Result<i32> {
    let text = serde_json::to_string_pretty(report)?;
    if let Some(f) = json_file {
        crate::util::write_atomic(f, text.as_bytes())?;
    }
    if json {
        println!("{text}");
    } else {
        print!("{}", render(report));
    }
    Ok(0)
}
