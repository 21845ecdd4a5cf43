//! Shared helpers for tests on the real models (fetched on first use, then cached).
#![allow(dead_code)]

pub mod server;
pub mod stand_in;

use quire::engine::{Engine, LoadOptions};
use std::path::PathBuf;
use std::sync::OnceLock;

/// The fast Qwen2 model.
pub const QWEN: &str = "qwen2.5-coder-0.5b-instruct-q4_k_m";
/// The Llama-architecture test model.
pub const SMOL: &str = "smollm2-135m-instruct-q4_1";

/// The model store as `quire` finds it (`$QUIRE_MODELS_DIR`, `$QUIRE_PYTHON`…), read once.
pub fn store() -> &'static quire::model_store::StoreConfig {
    static S: OnceLock<quire::model_store::StoreConfig> = OnceLock::new();
    S.get_or_init(quire::cli::store_config)
}

/// Path of a known model, fetching it if needed.
pub fn model_path(name: &str) -> PathBuf {
    quire::model_store::resolve_model(store(), Some(name), true, true)
        .unwrap_or_else(|e| panic!("cannot fetch {name}: {e:#}"))
}

fn load(name: &str) -> Engine {
    Engine::load(
        &model_path(name),
        &candle_core::Device::Cpu,
        &LoadOptions::default(),
    )
    .unwrap_or_else(|e| panic!("cannot load {name}: {e:#}"))
}

/// The Qwen engine, loaded once per test binary.
pub fn qwen() -> &'static Engine {
    static E: OnceLock<Engine> = OnceLock::new();
    E.get_or_init(|| load(QWEN))
}

/// The SmolLM2 engine, loaded once per test binary.
pub fn smol() -> &'static Engine {
    static E: OnceLock<Engine> = OnceLock::new();
    E.get_or_init(|| load(SMOL))
}

/// Both engines with their names.
pub fn both() -> [(&'static str, &'static Engine); 2] {
    [(QWEN, qwen()), (SMOL, smol())]
}

/// Largest absolute difference between two logit tensors.
pub fn max_abs_diff(a: &candle_core::Tensor, b: &candle_core::Tensor) -> f32 {
    let a: Vec<f32> = a.to_vec1().unwrap();
    let b: Vec<f32> = b.to_vec1().unwrap();
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// Path of a model in the model store by its manifest name: fetched (and verified) when the
/// manifest knows it; otherwise `<models dir>/<name>.gguf` if it is there (a model whose
/// manifest entry is not written yet, placed by hand). Panics with the command to run.
pub fn model_path_in_store(name: &str) -> PathBuf {
    let known = quire::model_store::Manifest::builtin()
        .map(|m| m.get(name).is_some())
        .unwrap_or(false);
    if known {
        return model_path(name);
    }
    let p = store().models_dir.join(format!("{name}.gguf"));
    assert!(
        p.is_file(),
        "model {name} is not in the manifest nor at {}: fetch it with `cargo run --release -- fetch {name}`",
        p.display()
    );
    p
}

/// The Gemma 3 model (SentencePiece tokenizer; its architecture may not run yet).
pub const GEMMA: &str = "gemma-3-270m-q4_k_m";

/// Gemma 3's tokenizer alone, built from its GGUF (no weights loaded), once per test binary.
pub fn gemma_tokenizer() -> &'static quire::engine::tokenizer::Tokenizer {
    static T: OnceLock<quire::engine::tokenizer::Tokenizer> = OnceLock::new();
    T.get_or_init(|| tokenizer_of(&model_path(GEMMA)))
}

/// The tokenizer of the GGUF at `path` (metadata only).
pub fn tokenizer_of(path: &std::path::Path) -> quire::engine::tokenizer::Tokenizer {
    let gguf = quire::engine::gguf::GgufFile::open(path)
        .unwrap_or_else(|e| panic!("cannot open {}: {e:#}", path.display()));
    quire::engine::tokenizer::Tokenizer::for_model(&gguf)
        .unwrap_or_else(|e| panic!("cannot build the tokenizer of {}: {e:#}", path.display()))
}
