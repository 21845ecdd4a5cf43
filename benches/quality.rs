//! `cargo bench --bench quality`: the same measurements as `quire bench quality` — a book
//! translated by Quire and by a naive per-paragraph llama.cpp loop, side by side per
//! chapter — into target/quire-bench/quality.
//!
//! Environment: `QUIRE_BENCH_MODEL` (default qwen2.5-coder-0.5b-instruct-q4_k_m),
//! `QUIRE_BENCH_BOOK` (default: the bundled sample book), `QUIRE_BENCH_REFERENCE` (a
//! directory of reference chapters; none by default, then chrF is "–"),
//! `QUIRE_BENCH_GLOSSARY`, `QUIRE_BENCH_CUT_BYTES`, `QUIRE_BENCH_THREADS`,
//! `QUIRE_BENCH_SKIP_NAIVE=1` for Quire only, `QUIRE_BENCH_JSON=1` for JSON.
//! Under `cargo test` (no `--bench` argument) it only says how to run it.

use quire::bench::quality::{self, QualityBenchOptions};
use std::path::PathBuf;

fn env_usize(key: &str) -> Option<usize> {
    std::env::var(key).ok().and_then(|v| v.parse().ok())
}

fn env_path(key: &str) -> Option<PathBuf> {
    std::env::var_os(key)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

fn main() -> anyhow::Result<()> {
    if !std::env::args().any(|a| a == "--bench") {
        println!(
            "quality bench: run with `cargo bench --bench quality` (skipped under cargo test)"
        );
        return Ok(());
    }
    quire::cli::install_engine_config()?;
    let name = std::env::var("QUIRE_BENCH_MODEL")
        .unwrap_or_else(|_| quire::cli::bench::BENCH_DEFAULT_MODEL.to_string());
    let model =
        quire::model_store::resolve_model(&quire::cli::store_config(), Some(&name), true, false)?;
    let threads = env_usize("QUIRE_BENCH_THREADS").unwrap_or_else(quire::bench::sys::logical_cpus);
    quire::cli::bench::use_threads(threads);
    let report = quality::run(&QualityBenchOptions {
        book: env_path("QUIRE_BENCH_BOOK"),
        reference: env_path("QUIRE_BENCH_REFERENCE"),
        model,
        glossary: env_path("QUIRE_BENCH_GLOSSARY"),
        out: PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/quire-bench/quality"),
        cut_bytes: env_usize("QUIRE_BENCH_CUT_BYTES"),
        threads,
        skip_naive: std::env::var("QUIRE_BENCH_SKIP_NAIVE").is_ok_and(|v| v == "1"),
        house_terms: Default::default(),
        term_originals: true,
        unit_tokens: quire::cli::translate::unit_tokens(
            env_usize("QUIRE_BENCH_UNIT_TOKENS").unwrap_or(300),
        ),
        source_lang: "en".to_string(),
        target_lang: "zh-CN".to_string(),
        prefix_cache_dir: quire::cli::prefix_cache_dir(None, false),
        config: quire::cli::bench::bench_config(),
    })?;
    if std::env::var("QUIRE_BENCH_JSON").is_ok_and(|v| v == "1") {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", quality::render_text(&report));
    }
    Ok(())
}
