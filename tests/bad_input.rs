//! Bad model files and oversized prompts give clear errors, never panics.

mod common;

use candle_core::quantized::gguf_file;
use candle_core::Device;
use quire::engine::{Engine, LoadOptions};
use std::io::Write;
use std::path::Path;

fn load_err(path: &Path) -> String {
    match Engine::load(path, &Device::Cpu, &LoadOptions::default()) {
        Ok(_) => panic!("{} loaded but should not", path.display()),
        Err(e) => format!("{e:#}"),
    }
}

#[test]
fn missing_file_names_the_path() {
    let err = load_err(Path::new("/nonexistent/model.gguf"));
    assert!(err.contains("/nonexistent/model.gguf"), "{err}");
}

#[test]
fn bad_magic_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("notes.gguf");
    std::fs::write(&p, b"# just some markdown, not a model at all\n").unwrap();
    let err = load_err(&p);
    assert!(
        err.contains("bad magic") && err.contains("notes.gguf"),
        "{err}"
    );
}

#[test]
fn short_file_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("short.gguf");
    std::fs::write(&p, b"GGUF").unwrap();
    let err = load_err(&p);
    assert!(err.contains("too short"), "{err}");
}

#[test]
fn truncated_real_model_is_reported() {
    let src = common::model_path(common::SMOL);
    let dir = tempfile::tempdir().unwrap();
    // Cut inside the tensor data: the header parses, the offsets run past the end.
    let p = dir.path().join("cut.gguf");
    let bytes = std::fs::read(&src).unwrap();
    std::fs::write(&p, &bytes[..bytes.len() - 4096]).unwrap();
    let err = load_err(&p);
    assert!(
        err.contains("truncated") && err.contains("cut.gguf"),
        "{err}"
    );
    // Cut inside the header (the vocabulary arrays).
    let p2 = dir.path().join("header.gguf");
    std::fs::write(&p2, &bytes[..200_000]).unwrap();
    let err = load_err(&p2);
    assert!(err.contains("header.gguf"), "{err}");
}

/// A tiny GGUF written by the test: valid format, unsupported architecture.
#[test]
fn unsupported_architecture_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("tiny.gguf");
    let t = candle_core::Tensor::zeros((4, 32), candle_core::DType::F32, &Device::Cpu).unwrap();
    let q = candle_core::quantized::QTensor::quantize(&t, candle_core::quantized::GgmlDType::F32)
        .unwrap();
    let mut f = std::fs::File::create(&p).unwrap();
    let s = |x: &str| gguf_file::Value::String(x.into());
    let meta = [
        ("general.architecture", s("mamba")),
        ("tokenizer.ggml.model", s("gpt2")),
        (
            "tokenizer.ggml.tokens",
            gguf_file::Value::Array(vec![s("a"), s("b"), s("c"), s("d")]),
        ),
        (
            "tokenizer.ggml.merges",
            gguf_file::Value::Array(vec![s("a b")]),
        ),
        ("tokenizer.ggml.pre", s("gpt2")),
    ];
    let meta_refs: Vec<(&str, &gguf_file::Value)> = meta.iter().map(|(k, v)| (*k, v)).collect();
    gguf_file::write(&mut f, &meta_refs, &[("token_embd.weight", &q)]).unwrap();
    f.flush().unwrap();
    let err = load_err(&p);
    assert!(
        err.contains("mamba") && err.contains("not supported"),
        "{err}"
    );
}

#[test]
fn prompt_longer_than_context_is_an_error() {
    let e = common::smol();
    let mut cache = e.new_cache().unwrap();
    let ids = vec![100u32; e.config().context_length + 10];
    let err = format!("{:#}", e.prefill(&mut cache, &ids).unwrap_err());
    assert!(
        err.contains("prompt too long") && err.contains("8192"),
        "{err}"
    );
    assert_eq!(cache.len(), 0, "nothing half-written is kept");
}

#[test]
fn cli_reports_missing_model_with_fetch_hint() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_quire"))
        .args(["inspect", "no-such-model"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("quire fetch"), "{err}");
}
