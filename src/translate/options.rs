//! The options of a run: everything `quire translate` needs ([`TranslateOptions`]), the
//! mode and how progress is shown.

use super::house_terms::HouseTerms;
use crate::prompts::profile::ProfileChoice;
use serde::Serialize;
use std::path::PathBuf;
use std::time::Duration;

/// Orchestrated agents, or one growing conversation for comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Independent calls per unit behind one cached prefix.
    Orchestrated,
    /// A single-agent baseline: one conversation that grows with every unit.
    Single,
}

/// How progress is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgressMode {
    /// A progress bar with ETA on stderr.
    Bar,
    /// Nothing but the final summary.
    Quiet,
    /// One JSON object per event on stdout.
    JsonLines,
}

/// Everything `quire translate` needs.
#[derive(Debug, Clone)]
pub struct TranslateOptions {
    /// A `.md` file or a directory; `None` for the bundled sample book.
    pub input: Option<PathBuf>,
    /// Output directory.
    pub out: PathBuf,
    /// Source language code.
    pub source_lang: String,
    /// Target language code.
    pub target_lang: String,
    /// House glossary file (the sample book's when translating it and none is given).
    pub glossary: Option<PathBuf>,
    /// Guide file (default: the built-in guide).
    pub guide: Option<PathBuf>,
    /// Model spec for `--model`.
    pub model: Option<String>,
    /// Device name.
    pub device: String,
    /// Chat template override.
    pub chat_template: Option<String>,
    /// Token budget per unit.
    pub unit_tokens: usize,
    /// Translate the prose comments of fenced code blocks (the code stays byte for byte).
    pub code_comments: bool,
    /// Write a bilingual edition: each block of the source followed by its translation
    /// (headings and the table of contents translated only).
    pub bilingual: bool,
    /// Print the plan and stop.
    pub dry_run: bool,
    /// Orchestrated or single-agent.
    pub mode: Mode,
    /// Stop cleanly once this many new tokens have been generated.
    pub max_new_tokens_total: Option<usize>,
    /// Stop cleanly once this much wall time has passed.
    pub deadline: Option<Duration>,
    /// Most glossary candidates sent to the model.
    pub glossary_terms: usize,
    /// Also review every Nth clean unit with the model (0 = only flagged units).
    pub review_every: usize,
    /// Progress display.
    pub progress: ProgressMode,
    /// Prefix cache directory (`None`: no disk cache).
    pub prefix_cache_dir: Option<PathBuf>,
    /// Units translated together in orchestrated mode (throughput mode; 1 = one at a time).
    pub batch: usize,
    /// Whole-unit revisions (with the findings as instructions) before the fallback cascade.
    pub revisions: usize,
    /// How house terms reach the model.
    pub house_terms: HouseTerms,
    /// Draft model for speculative decoding: a model spec, `auto` or `none` (the book is
    /// the same either way).
    pub draft: String,
    /// Write a term's original after its translation where a chapter first introduces it
    /// in bold (`**实体消歧**（Entity Disambiguation）`).
    pub term_originals: bool,
    /// Write-back passes switched off by name (`--skip-pass`; see
    /// [`super::writeback::pass_names`]).
    pub skip_passes: Vec<String>,
    /// The translation agent's prompts: `auto` (from the model's GGUF metadata), Quire's
    /// guide-led prompt, or a translation model's own documented format.
    pub prompt_profile: ProfileChoice,
    /// Where known models live and how they are fetched (the CLI reads it from the
    /// environment).
    pub store: crate::model_store::StoreConfig,
}

impl Default for TranslateOptions {
    /// `quire translate` with nothing on its command line and nothing in the environment:
    /// the bundled sample book into `out`, English → Simplified Chinese, every option at its
    /// CLI default (a test in `src/cli/translate.rs` holds the two together).
    fn default() -> Self {
        TranslateOptions {
            input: None,
            out: PathBuf::from("out"),
            source_lang: "en".to_string(),
            target_lang: "zh-CN".to_string(),
            glossary: None,
            guide: None,
            model: None,
            device: "auto".to_string(),
            chat_template: None,
            unit_tokens: 300,
            code_comments: true,
            bilingual: false,
            dry_run: false,
            mode: Mode::Orchestrated,
            max_new_tokens_total: None,
            deadline: None,
            glossary_terms: 8,
            review_every: 0,
            progress: ProgressMode::Bar,
            prefix_cache_dir: Some(crate::engine::prefix_cache::disk::default_dir()),
            batch: crate::engine::kernels::SMALL_BATCH,
            revisions: 0,
            house_terms: HouseTerms::Inject,
            draft: "none".to_string(),
            term_originals: true,
            skip_passes: Vec::new(),
            prompt_profile: ProfileChoice::Auto,
            store: crate::model_store::StoreConfig::default(),
        }
    }
}
