//! `cargo bench --bench engine`: the same measurements as `quire bench engine`, run in this
//! process (peak RSS then covers the whole bench process).
//!
//! Environment: `QUIRE_BENCH_MODEL` (default qwen2.5-coder-0.5b-instruct-q4_k_m),
//! `QUIRE_BENCH_THREADS` (default: all logical CPUs), `QUIRE_BENCH_REPEATS` (default 2), `QUIRE_BENCH_LLAMA_REPEATS` (default 3),
//! `QUIRE_BENCH_COMPARE=llama.cpp` to run llama.cpp too, `QUIRE_BENCH_JSON=1` for JSON.
//! Under `cargo test` (no `--bench` argument) it only says how to run it.

use quire::bench::engine::{self, EngineBenchOptions, QuireRunner};

fn env_usize(key: &str) -> Option<usize> {
    std::env::var(key).ok().and_then(|v| v.parse().ok())
}

fn main() -> anyhow::Result<()> {
    if !std::env::args().any(|a| a == "--bench") {
        println!("engine bench: run with `cargo bench --bench engine` (skipped under cargo test)");
        return Ok(());
    }
    quire::cli::install_engine_config()?;
    let name = std::env::var("QUIRE_BENCH_MODEL")
        .unwrap_or_else(|_| quire::cli::bench::BENCH_DEFAULT_MODEL.to_string());
    let model =
        quire::model_store::resolve_model(&quire::cli::store_config(), Some(&name), true, false)?;
    let threads = env_usize("QUIRE_BENCH_THREADS").unwrap_or_else(quire::bench::sys::logical_cpus);
    quire::cli::bench::use_threads(threads);
    let report = engine::run(&EngineBenchOptions {
        model,
        threads,
        repeats: env_usize("QUIRE_BENCH_REPEATS").unwrap_or(3),
        llama_repeats: env_usize("QUIRE_BENCH_LLAMA_REPEATS").unwrap_or(3),
        decode_tokens: engine::DECODE_TOKENS,
        compare_llama_cpp: std::env::var("QUIRE_BENCH_COMPARE").is_ok_and(|v| v == "llama.cpp"),
        quire: QuireRunner::InProcess,
        isa: quire::bench::isa::BenchIsa::Native,
        config: quire::cli::bench::bench_config(),
    })?;
    if std::env::var("QUIRE_BENCH_JSON").is_ok_and(|v| v == "1") {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", engine::render_text(&report));
    }
    Ok(())
}
