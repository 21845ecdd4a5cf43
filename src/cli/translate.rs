//! `quire translate [INPUT] --out DIR`: translate a Markdown book on this device, or
//! through an OpenAI-compatible server (`--backend openai`).

use crate::prompts::profile::ProfileChoice;
use crate::remote::{RemoteBackend, RemoteConfig};
use crate::translate::{run, run_with_backend, Mode, ProgressMode, RunSummary, TranslateOptions};
use anyhow::{bail, Context, Result};
use std::path::PathBuf;
use std::time::Duration;

/// Arguments of `quire translate`.
#[derive(clap::Args, Debug)]
pub struct TranslateArgs {
    /// A .md file, a directory of chapters, or an .epub; default: the bundled sample book.
    pub input: Option<PathBuf>,
    /// Output directory (book/, glossary.json, reports, run.json, checkpoint).
    #[arg(long, short, default_value = "out")]
    pub out: PathBuf,
    /// Source language (BCP 47 tag): en, or zh for Chinese → English.
    #[arg(long, default_value = "en")]
    pub from: String,
    /// Target language (BCP 47 tag): zh-CN (zh, zh-Hans), ja, ko, de, fr, es; en from zh.
    #[arg(long, default_value = "zh-CN")]
    pub to: String,
    /// House glossary: JSON list of {"en","zh","pos","context"} (or {"source","target"}), or TOML.
    #[arg(long)]
    pub glossary: Option<PathBuf>,
    /// Translation guide (default: the built-in guide of the target language).
    #[arg(long)]
    pub guide: Option<PathBuf>,
    /// Model: a .gguf path, a known name, or a Hugging Face repo id. With --backend openai
    /// (optional): a local GGUF of the served model, whose tokenizer and chat template
    /// count tokens (its weights are not loaded; without it, counts are estimates).
    #[arg(long, short = 'm')]
    pub model: Option<String>,
    /// Where the model runs: local (this device's engine) or openai (an OpenAI-compatible
    /// server at --base-url: llama-server, vLLM, quire serve, a hosted API).
    #[arg(long, value_enum, default_value = "local")]
    pub backend: Backend,
    /// With --backend openai: the API root, e.g. http://127.0.0.1:8080/v1.
    #[arg(long, value_name = "URL")]
    pub base_url: Option<String>,
    /// With --backend openai: the model name sent to the server (default: the first model
    /// the server lists at GET {base-url}/models).
    #[arg(long, value_name = "NAME")]
    pub api_model: Option<String>,
    /// With --backend openai: read the API key (sent as a bearer token) from this
    /// environment variable.
    #[arg(long, value_name = "VAR")]
    pub api_key_env: Option<String>,
    /// With --backend openai: requests in flight at once, and the default --batch.
    #[arg(long, default_value_t = 4, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=64))]
    pub concurrency: usize,
    /// With --backend openai: retries of a call on 429, 5xx, timeouts and connection errors
    /// (exponential backoff from 0.5 s, at most 30 s, or the server's Retry-After).
    #[arg(long, default_value_t = 5)]
    pub max_retries: usize,
    /// With --backend openai: time limit of one call, in seconds.
    #[arg(long, default_value_t = 600, value_name = "SECONDS")]
    pub request_timeout: u64,
    /// auto, cpu, cuda, cuda:N or metal (local backend only).
    #[arg(long, default_value = "auto")]
    pub device: String,
    /// Chat template override (name from chat-templates/ or a file).
    #[arg(long)]
    pub chat_template: Option<String>,
    /// Speculative decoding (local backend): a draft model with the same tokenizer (a
    /// .gguf path or known name), `auto` (the 0.5B for the 1.5B when downloaded) or `none`.
    /// The book is byte-identical either way; calls decoded in a batch decode without it.
    #[arg(long, default_value = "none")]
    pub draft: String,
    /// Token budget per translation unit.
    #[arg(long, default_value_t = 300)]
    pub unit_tokens: usize,
    /// Keep the comments of code blocks as written (by default the prose of `#`, `//` and
    /// `--` comments is translated; the code itself always stays byte for byte).
    #[arg(long)]
    pub keep_code_comments: bool,
    /// A bilingual edition: each source block followed by its translation (EPUB: a copy of
    /// the block with the class `quire-translation`; Markdown: the translation in a block
    /// quote after each source paragraph). Headings and the table of contents are
    /// translated only.
    #[arg(long)]
    pub bilingual: bool,
    /// Print the plan, units, token budget per agent and an estimated time; load no model.
    #[arg(long)]
    pub dry_run: bool,
    /// orchestrated (default) or single (one growing conversation, for comparison).
    #[arg(long, value_enum, default_value = "orchestrated")]
    pub mode: Mode,
    /// Stop cleanly after this many generated tokens (rerun to continue).
    #[arg(long)]
    pub max_new_tokens_total: Option<usize>,
    /// Stop cleanly after this long: seconds, or with a unit (90s, 20m, 2h).
    #[arg(long)]
    pub deadline: Option<String>,
    /// Most glossary candidates proposed to the model.
    #[arg(long, default_value_t = 8)]
    pub glossary_terms: usize,
    /// Also have the model review every Nth clean unit (0: flagged units only).
    #[arg(long, default_value_t = 0)]
    pub review_every: usize,
    /// Whole-unit revisions (the findings as instructions) before a failing unit goes to
    /// the fallback (segments, then sentences). 0: straight to the fallback — on dev-eval
    /// chapter 8 a revision fixed 1 of 13 failing units.
    #[arg(long, default_value_t = 0)]
    pub revisions: usize,
    /// How house terms reach the model: written into the passage (inject) or listed in the
    /// prompt and checked (prompt).
    #[arg(long, value_enum, default_value = "inject")]
    pub house_terms: crate::translate::HouseTerms,
    /// Do not write a term's English original after its translation where a chapter
    /// first introduces it in bold (`**实体消歧**（Entity Disambiguation）`).
    #[arg(long)]
    pub no_term_originals: bool,
    /// Switch a write-back pass off (repeatable): kept_words, emphasis, originals,
    /// typography (every typography rule), or one typography rule by name
    /// (acronym-expansions, cjk-spacing, curly-quotes, … — an unknown name lists them).
    #[arg(long = "skip-pass", value_name = "NAME")]
    pub skip_passes: Vec<String>,
    /// The translation agent's prompts: auto (from the model's GGUF metadata: hy-mt for
    /// Tencent's Hunyuan translation models, else guide), guide (Quire's prompt with the
    /// translation guide and glossary) or hy-mt (the Hunyuan translation models' documented
    /// prompt). With --backend openai, auto reads the GGUF given by --model, else is guide.
    #[arg(long, value_enum, default_value = "auto")]
    pub prompt_profile: ProfileChoice,
    /// No progress bar; only the final summary.
    #[arg(long, short)]
    pub quiet: bool,
    /// Progress as JSON lines on stdout (for scripts).
    #[arg(long, conflicts_with = "quiet")]
    pub json_lines: bool,
    /// Prefix KV cache directory (default: the user cache dir; local backend only — a
    /// server keeps its own prefix cache).
    #[arg(long)]
    pub prefix_cache_dir: Option<PathBuf>,
    /// Do not keep prefix KV caches on disk.
    #[arg(long)]
    pub no_disk_cache: bool,
    /// Units translated together (throughput mode: one forward pass advances all of them;
    /// the output is the same as one at a time). 1 = one at a time; single mode always is.
    /// Default: 4; with --backend openai, --concurrency (units sent together).
    #[arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=64))]
    pub batch: Option<usize>,
}

/// Where `quire translate` runs the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Backend {
    /// The on-device engine with its prefix KV cache.
    Local,
    /// An OpenAI-compatible /chat/completions server.
    Openai,
}

/// Refuse a language pair Quire has no profile for: its output would silently be checked
/// as (and steered towards) another language. Tags are BCP 47 (`zh-Hans`, `ja-JP`).
fn check_languages(from: &str, to: &str) -> Result<()> {
    crate::lang::Pair::new(from, to).map(|_| ())
}

/// The unit budget, clamped to what a reply can hold (a larger unit's translation would be
/// cut short by the output cap) and to a useful minimum, saying so when it changes.
pub fn unit_tokens(asked: usize) -> usize {
    use crate::translate::passage::{MAX_NEW_TOKENS, MAX_UNIT_TOKENS};
    let used = asked.clamp(32, MAX_UNIT_TOKENS);
    if used != asked {
        eprintln!(
            "note: --unit-tokens {asked} → {used} (a unit's translation must fit a reply of at most {MAX_NEW_TOKENS} tokens; units are 32–{MAX_UNIT_TOKENS} tokens)"
        );
    }
    used
}

/// Parse "90", "90s", "20m", "2h".
pub fn parse_duration(s: &str) -> Result<Duration> {
    let s = s.trim();
    let (num, mult) = match s.chars().last() {
        Some('s') => (&s[..s.len() - 1], 1.0),
        Some('m') => (&s[..s.len() - 1], 60.0),
        Some('h') => (&s[..s.len() - 1], 3600.0),
        _ => (s, 1.0),
    };
    let v = match num.trim().parse::<f64>() {
        Ok(v) if v >= 0.0 => v * mult,
        _ => bail!("bad --deadline {s:?}: use seconds or a number with s, m or h (e.g. 20m)"),
    };
    Duration::try_from_secs_f64(v).map_err(|_| {
        anyhow::anyhow!("bad --deadline {s:?}: too long (at most about 584 billion years; omit --deadline for none)")
    })
}

impl TranslateArgs {
    /// The arguments `quire translate` gets with nothing on its command line: every
    /// option at its CLI default (the bundled sample book, output to `out`).
    pub fn defaults() -> TranslateArgs {
        #[derive(clap::Parser)]
        struct Wrapper {
            #[command(flatten)]
            args: TranslateArgs,
        }
        <Wrapper as clap::Parser>::parse_from(["quire-translate"]).args
    }

    /// The server settings for `--backend openai` (`None` for the local backend): flags
    /// checked, the key read from `--api-key-env`. No request is made; `api_model` is empty
    /// when `--api-model` was not given ([`remote_run`] asks the server).
    pub fn remote_config(&self) -> Result<Option<RemoteConfig>> {
        if self.backend == Backend::Local {
            let given = [
                ("--base-url", self.base_url.is_some()),
                ("--api-model", self.api_model.is_some()),
                ("--api-key-env", self.api_key_env.is_some()),
            ];
            if let Some((flag, _)) = given.iter().find(|(_, g)| *g) {
                bail!("{flag} is for --backend openai (the local backend runs the model on this device)");
            }
            return Ok(None);
        }
        let Some(base_url) = &self.base_url else {
            bail!("--backend openai needs --base-url URL: the server's API root, e.g. http://127.0.0.1:8080/v1");
        };
        let api_key = self.api_key_env.as_deref().map(read_key).transpose()?;
        Ok(Some(RemoteConfig {
            api_key,
            concurrency: self.concurrency,
            timeout: Duration::from_secs(self.request_timeout.max(1)),
            max_retries: self.max_retries,
            ..RemoteConfig::new(base_url.trim(), self.api_model.clone().unwrap_or_default())
        }))
    }

    /// The translation options these arguments ask for.
    pub fn to_options(self) -> Result<TranslateOptions> {
        let args = self;
        check_languages(&args.from, &args.to)?;
        crate::translate::writeback::check_skipped(&args.skip_passes)?;
        Ok(TranslateOptions {
            input: args.input,
            out: args.out,
            source_lang: args.from,
            target_lang: args.to,
            glossary: args.glossary,
            guide: args.guide,
            model: args.model,
            device: args.device,
            chat_template: args.chat_template,
            unit_tokens: unit_tokens(args.unit_tokens),
            code_comments: !args.keep_code_comments,
            bilingual: args.bilingual,
            dry_run: args.dry_run,
            mode: args.mode,
            max_new_tokens_total: args.max_new_tokens_total,
            deadline: args.deadline.as_deref().map(parse_duration).transpose()?,
            glossary_terms: args.glossary_terms,
            review_every: args.review_every,
            progress: if args.json_lines {
                ProgressMode::JsonLines
            } else if args.quiet {
                ProgressMode::Quiet
            } else {
                ProgressMode::Bar
            },
            prefix_cache_dir: super::prefix_cache_dir(args.prefix_cache_dir, args.no_disk_cache),
            batch: args.batch.unwrap_or(match args.backend {
                Backend::Local => crate::engine::kernels::SMALL_BATCH,
                Backend::Openai => args.concurrency,
            }),
            revisions: args.revisions,
            house_terms: args.house_terms,
            draft: args.draft,
            term_originals: !args.no_term_originals,
            skip_passes: args.skip_passes,
            prompt_profile: args.prompt_profile,
            store: super::store_config(),
        })
    }
}

/// The API key from the environment variable `var` (read here, at the edge).
fn read_key(var: &str) -> Result<String> {
    match std::env::var(var) {
        Ok(k) if !k.trim().is_empty() => Ok(k.trim().to_string()),
        Ok(_) => bail!("--api-key-env {var}: the environment variable {var} is empty"),
        Err(_) => bail!("--api-key-env {var}: the environment variable {var} is not set"),
    }
}

/// Translate through the server of `config`: the model name asked of the server when not
/// given, the server checked before the output directory is created, tokens counted with
/// the local GGUF named by `--model` if any; then [`run_with_backend`].
pub fn remote_run(opts: &TranslateOptions, mut config: RemoteConfig) -> Result<RunSummary> {
    let asked = config.api_model.trim().is_empty();
    if asked {
        config.api_model = first_model(&config)?;
    }
    let mut backend = RemoteBackend::new(config)?;
    if let Some(spec) = &opts.model {
        let quiet = opts.progress != ProgressMode::Bar;
        let path = crate::model_store::resolve_model(&opts.store, Some(spec), false, quiet)?;
        backend = backend
            .with_local_tokenizer(&path, opts.chat_template.as_deref())
            .with_context(|| format!("cannot count tokens with {}", path.display()))?;
    }
    backend.check_server()?;
    run_with_backend(opts, &mut backend)
}

/// The first model the server lists.
fn first_model(config: &RemoteConfig) -> Result<String> {
    let models = crate::remote::list_models(config).with_context(|| {
        format!(
            "cannot ask the server at {} for its models; name one with --api-model",
            config.base_url
        )
    })?;
    models.into_iter().next().with_context(|| {
        format!(
            "the server at {} lists no models; name one with --api-model",
            config.base_url
        )
    })
}

/// Run `quire translate`.
pub fn run_cli(args: TranslateArgs) -> Result<i32> {
    let remote = args.remote_config()?;
    let opts = args.to_options()?;
    let json = opts.progress == ProgressMode::JsonLines;
    let summary = match remote {
        Some(config) if !opts.dry_run => Some(remote_run(&opts, config)?),
        _ => run(&opts)?,
    };
    let Some(s) = summary else { return Ok(0) };
    if json {
        println!("{}", serde_json::json!({"event": "summary", "summary": s}));
    } else {
        eprintln!(
            "\n{} — {} of {} units passed, {} revised, {} blocked, {} reused from memory{}",
            if s.complete { "done" } else { "stopped" },
            s.passed,
            s.units,
            s.revised,
            s.blocked,
            s.reused,
            if s.remaining > 0 {
                format!(", {} left", s.remaining)
            } else {
                String::new()
            }
        );
        eprintln!(
            "structure/QA errors: {} | house-term adherence: {:.1}% | calls: {} | cache-hit rate: {:.0}% | {:.1} tok/s | wall {:.0}s | context peak {} tokens (orchestrated: {}) | manager state peak {} bytes",
            s.qa_errors, s.house_term_adherence, s.calls, s.cache_hit_rate * 100.0, s.tokens_per_second, s.wall_seconds,
            s.context_peak_tokens, s.orchestrated_context_peak_tokens, s.manager_context_peak_bytes
        );
        let o = s.out_dir.display();
        let epub = opts
            .input
            .as_deref()
            .filter(|p| crate::book::epub::is_epub_path(p))
            .and_then(|p| p.file_name())
            .map(|n| format!("{o}/{}  ", n.to_string_lossy()))
            .unwrap_or_default();
        eprintln!("files: {epub}{o}/book/  {o}/glossary.json  {o}/proofreading_report.md  {o}/run.json  {o}/orchestration_checkpoint.json");
    }
    Ok(if s.complete && s.blocked == 0 && s.qa_errors == 0 {
        0
    } else if s.complete {
        1
    } else {
        3
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_library_default_is_the_cli_default() {
        // Every flag at its clap default gives `TranslateOptions::default()`, but for what the
        // CLI reads from the environment (`$QUIRE_PREFIX_CACHE_DIR`, the model store's
        // variables), which it lays over those same defaults.
        let from_cli = TranslateArgs::defaults().to_options().unwrap();
        let expected = TranslateOptions {
            prefix_cache_dir: super::super::prefix_cache_dir(None, false),
            store: super::super::store_config(),
            ..TranslateOptions::default()
        };
        assert_eq!(format!("{from_cli:#?}"), format!("{expected:#?}"));
        let d = TranslateOptions::default();
        assert_eq!(
            d.prefix_cache_dir,
            Some(crate::engine::prefix_cache::disk::default_dir())
        );
        assert_eq!(d.store, crate::model_store::StoreConfig::default());
        assert_eq!((d.unit_tokens, unit_tokens(d.unit_tokens)), (300, 300));
        assert_eq!(d.target_lang, "zh-CN");
    }
}
