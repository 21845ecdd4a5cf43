//! `cargo bench --bench prefix`: the same measurements as `quire bench prefix` (prefix KV
//! reuse vs recompute over the sample book's units), written to
//! target/quire-bench/prefix.svg as well.
//!
//! Environment: `QUIRE_BENCH_MODEL` (default qwen2.5-coder-0.5b-instruct-q4_k_m),
//! `QUIRE_BENCH_THREADS`, `QUIRE_BENCH_PREFIX_TOKENS` (default 1500), `QUIRE_BENCH_PARTS`,
//! `QUIRE_BENCH_MAX_RECOMPUTE`, `QUIRE_BENCH_REPEATS` (default 3), `QUIRE_BENCH_JSON=1` for JSON.
//! Under `cargo test` (no `--bench` argument) it only says how to run it.

use quire::bench::prefix::{self, PrefixBenchOptions};
use std::path::PathBuf;

fn env_usize(key: &str) -> Option<usize> {
    std::env::var(key).ok().and_then(|v| v.parse().ok())
}

fn main() -> anyhow::Result<()> {
    if !std::env::args().any(|a| a == "--bench") {
        println!("prefix bench: run with `cargo bench --bench prefix` (skipped under cargo test)");
        return Ok(());
    }
    quire::cli::install_engine_config()?;
    let name = std::env::var("QUIRE_BENCH_MODEL")
        .unwrap_or_else(|_| quire::cli::bench::BENCH_DEFAULT_MODEL.to_string());
    let model =
        quire::model_store::resolve_model(&quire::cli::store_config(), Some(&name), true, false)?;
    let threads = env_usize("QUIRE_BENCH_THREADS").unwrap_or_else(quire::bench::sys::logical_cpus);
    quire::cli::bench::use_threads(threads);
    let report = prefix::run(&PrefixBenchOptions {
        model,
        prefix_tokens: env_usize("QUIRE_BENCH_PREFIX_TOKENS").unwrap_or(1500),
        parts: env_usize("QUIRE_BENCH_PARTS"),
        max_recompute: env_usize("QUIRE_BENCH_MAX_RECOMPUTE")
            .or(Some(prefix::DEFAULT_MAX_RECOMPUTE)),
        book: None,
        unit_tokens: 400,
        cache_dir: None,
        svg: Some(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/quire-bench/prefix.svg")),
        prefill_scaling: false,
        threads,
        repeats: env_usize("QUIRE_BENCH_REPEATS").unwrap_or(3),
    })?;
    if std::env::var("QUIRE_BENCH_JSON").is_ok_and(|v| v == "1") {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", prefix::render_text(&report));
    }
    Ok(())
}
