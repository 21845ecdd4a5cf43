//! Translating a book: the manager (deterministic code, not a model) plans the units, runs
//! the glossary → translate → proofread → revise agents through the
//! [`ChatBackend`](crate::engine::backend::ChatBackend), checkpoints after every unit and
//! resumes without redoing finished work.
//!
//! Files in the output directory: `book/` (translated chapters), `glossary.json`,
//! `proofreading_report.json` and `.md`, `run.json` (every model call), the checkpoint,
//! and `memory/` (the translation memory: one file per finished unit, keyed by the unit's
//! content, the glossary, the guide, the model and the generation parameters).
//!
//! One file per stage, sequenced by [`manager::run`]: `plan` (units, glossary, guide,
//! fingerprint) → `glossary_stage` → `scheduler` (translation, with `passage`'s checks and
//! fallback cascade) → `kept_words`, `emphasis` and `originals` (terms, bold spans and
//! the originals of introduced terms written back) → `chapters` → `review` (proofreading) → `run_report` (`run.json`).
//!
//! The stages share what lies below them and never the manager: the run's options
//! (`options`, `house_terms`), its state (`state`: the checkpoint, the progress, the call
//! records) and the translation memory (`memory`).

mod bold;
mod chapters;
pub mod checkpoint;
pub mod emphasis;
pub(crate) mod expansions;
pub mod glossary_agent;
mod glossary_stage;
mod house_terms;
mod kept_words;
mod line_pairs;
pub mod manager;
mod memory;
mod options;
mod originals;
pub mod passage;
mod plan;
mod review;
mod run_report;
pub mod sample_book;
mod scheduler;
mod state;
pub mod typography;
pub mod writeback;

pub use house_terms::{inject_house_terms, HouseTerms};
pub use manager::{run, run_with_backend};
pub use options::{Mode, ProgressMode, TranslateOptions};
pub use run_report::RunSummary;
