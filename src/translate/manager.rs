//! The manager: plan, per-unit state machine, budgets, checkpoints, resume, outputs.

use super::checkpoint::{Checkpoint, TrackerCall, UnitRecord, UnitState};
use super::glossary_agent::GlossaryLine;
use super::glossary_stage;
use super::scheduler::{self, max_new_tokens_for};
use crate::book::{load_book, Book};
use crate::checks::glossary::{contains_term, Glossary};
use crate::checks::{check_units, Finding, Report, Severity};
use crate::engine::backend::{ChatBackend, ChatRequest, Completion, LocalBackend};
use crate::engine::generate::GenerationParams;
use crate::engine::prefix_cache::disk::DiskPrefixCache;
use crate::prompts::agents::{review_prompt, TermLine, DEFAULT_GUIDE};
use crate::units::{
    reassemble, restore_placeholders, segment_chapter, EstimateTokens, TokenCount, Unit, UnitKind,
};
use crate::util::{sha256_hex, write_atomic};
use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

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
    pub house_terms: super::glossary_stage::HouseTerms,
}

/// Assumed speeds for the dry-run estimate (tokens/s on a 2-core CPU, 1.5B model).
const EST_PREFILL_TPS: f64 = 150.0;
const EST_DECODE_TPS: f64 = 35.0;

/// A unit's finished translation, stored in the translation memory.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct MemoryEntry {
    pub(super) unit_id: String,
    pub(super) source_hash: String,
    pub(super) translation: String,
    pub(super) state: UnitState,
    pub(super) attempts: usize,
    pub(super) errors: usize,
    pub(super) findings: Vec<Finding>,
    /// The passage the model was given and its accepted reply, line for line, when the
    /// whole unit passed in one reply (a chapter's opening is its worked example).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) exchange: Option<Exchange>,
}

/// A passage as the translation agent saw it and the reply it accepted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Exchange {
    /// The passage (the unit's model text, house terms written in).
    pub passage: String,
    /// The accepted reply, one line per line of the passage, as typeset.
    pub reply: String,
}

/// What `translate` works on: the book, its units, the house glossary and the guide.
pub(super) struct Plan {
    pub(super) book: Book,
    pub(super) units: Vec<Vec<Unit>>,
    pub(super) house: Glossary,
    pub(super) guide: String,
    pub(super) guide_origin: String,
}

fn load_plan(opts: &TranslateOptions) -> Result<Plan> {
    let (book, default_glossary) = match &opts.input {
        Some(p) => (load_book(p)?, None),
        None => (
            super::sample_book::book(),
            Some(super::sample_book::GLOSSARY_JSON),
        ),
    };
    if book.chapters.is_empty() || book.chapters.iter().all(|c| c.text.trim().is_empty()) {
        bail!(
            "the book at {} is empty: nothing to translate",
            book.root.display()
        );
    }
    let house = match (&opts.glossary, default_glossary) {
        (Some(p), _) => Glossary::load(p, &opts.source_lang, &opts.target_lang)?,
        (None, Some(json)) => Glossary::parse_json(json, &opts.source_lang, &opts.target_lang)?,
        (None, None) => Glossary::default(),
    };
    let (guide, guide_origin) = match &opts.guide {
        Some(p) => (
            std::fs::read_to_string(p)
                .with_context(|| format!("cannot read guide {}", p.display()))?,
            p.display().to_string(),
        ),
        None => (
            DEFAULT_GUIDE.to_string(),
            "built-in guide.zh-CN.md".to_string(),
        ),
    };
    let counter = EstimateTokens;
    let units = book
        .chapters
        .iter()
        .map(|c| segment_chapter(c, opts.unit_tokens, &counter))
        .collect::<Result<Vec<_>>>()?;
    Ok(Plan {
        book,
        units,
        house,
        guide,
        guide_origin,
    })
}

/// Glossary lines as prompt lines.
pub(super) fn term_lines(g: &[GlossaryLine]) -> Vec<TermLine> {
    g.iter()
        .map(|l| TermLine {
            source: l.en.clone(),
            target: l.zh.clone(),
            strict: l.house,
        })
        .collect()
}

/// The glossary lines whose source term occurs in `unit`.
pub(super) fn unit_terms(unit: &Unit, g: &[GlossaryLine]) -> Vec<TermLine> {
    let lower = unit.source.to_lowercase();
    g.iter()
        .filter(|l| contains_term(&lower, &l.en.to_lowercase()))
        .map(|l| TermLine {
            source: l.en.clone(),
            target: l.zh.clone(),
            strict: l.house,
        })
        .collect()
}

/// House terms are strict: they are written into the passage in the target language
/// before the model sees it (whole words, any case, with a plural ending), so even a small
/// model cannot translate them differently. The glossary check still verifies the result.
pub fn inject_house_terms(passage: &str, glossary: &[GlossaryLine]) -> String {
    let mut house: Vec<&GlossaryLine> = glossary
        .iter()
        .filter(|l| l.house && !l.en.trim().is_empty())
        .collect();
    house.sort_by_key(|l| std::cmp::Reverse(l.en.len()));
    let mut out = passage.to_string();
    for l in house {
        let re = regex::Regex::new(&format!(r"(?i)\b{}(?:es|s)?\b", regex::escape(l.en.trim())));
        if let Ok(re) = re {
            out = re.replace_all(&out, l.zh.as_str()).into_owned();
        }
    }
    out
}

/// The manager's state while it runs the stages: options, plan, checkpoint, progress.
pub(super) struct Manager<'a> {
    pub(super) opts: &'a TranslateOptions,
    pub(super) plan: &'a Plan,
    pub(super) out: PathBuf,
    pub(super) checkpoint: Checkpoint,
    started: Instant,
    elapsed_before: f64,
    model_name: String,
    device: String,
    pub(super) progress: ProgressBar,
}

impl Manager<'_> {
    fn event(&self, v: serde_json::Value) {
        if self.opts.progress == ProgressMode::JsonLines {
            println!("{v}");
        }
    }

    pub(super) fn record_call(&mut self, agent: &str, note: &str, c: &Completion, outcome: &str) {
        self.checkpoint.value.result.quire.cached_prefix_tokens += c.cached_tokens;
        self.checkpoint.value.result.quire.new_tokens_total += c.completion_tokens;
        self.checkpoint
            .value
            .result
            .tracker_calls
            .push(TrackerCall {
                agent: agent.into(),
                prompt_tokens: c.prompt_tokens,
                completion_tokens: c.completion_tokens,
                note: note.into(),
                latency_seconds: c.latency_seconds,
                provider: "local".into(),
                model: self.model_name.clone(),
                outcome: outcome.into(),
                cached_prefix_tokens: c.cached_tokens,
                cache_source: c.cache_source.into(),
                device: self.device.clone(),
                ttft_seconds: c.ttft_seconds,
                busy_seconds: c.busy_seconds,
            });
        self.event(
            json!({"event": "call", "agent": agent, "note": note, "prompt_tokens": c.prompt_tokens,
            "cached_tokens": c.cached_tokens, "completion_tokens": c.completion_tokens,
            "latency_seconds": c.latency_seconds, "outcome": outcome}),
        );
    }

    /// Refuse a dispatch that would break a budget; `Some(reason)` means stop.
    pub(super) fn over_budget(&self, reserve: usize) -> Option<String> {
        if let Some(limit) = self.opts.max_new_tokens_total {
            let used = self.checkpoint.value.result.quire.new_tokens_total;
            if used + reserve > limit {
                return Some(format!(
                    "token budget: {used} of {limit} new tokens used, next call reserves {reserve}"
                ));
            }
        }
        if let Some(d) = self.opts.deadline {
            if self.started.elapsed() >= d {
                return Some(format!("deadline of {}s reached", d.as_secs()));
            }
        }
        None
    }

    fn context_size(&self) -> usize {
        serde_json::to_vec(&self.checkpoint.value.result.manager_context_final)
            .map(|v| v.len())
            .unwrap_or(0)
    }

    pub(super) fn save(&mut self) -> Result<()> {
        let mut progress = BTreeMap::new();
        for r in self.checkpoint.value.result.quire.units.values() {
            *progress
                .entry(format!("{:?}", r.state).to_uppercase())
                .or_insert(0) += 1;
        }
        self.checkpoint.value.result.manager_context_final.progress = progress;
        let size = self.context_size();
        let r = &mut self.checkpoint.value.result;
        r.manager_context_peak = r.manager_context_peak.max(size);
        self.checkpoint.value.elapsed_seconds =
            self.elapsed_before + self.started.elapsed().as_secs_f64();
        self.checkpoint.save(&self.out)
    }

    pub(super) fn set_state(&mut self, unit: &Unit, state: UnitState) -> Result<()> {
        if let Some(r) = self.checkpoint.value.result.quire.units.get_mut(&unit.id) {
            r.state = state;
        }
        self.event(json!({"event": "state", "unit": unit.id, "state": state}));
        Ok(())
    }

    /// Add a line to the manager's call log (in the checkpoint).
    pub(super) fn log(&mut self, line: String) {
        self.checkpoint
            .value
            .result
            .manager_context_final
            .call_log
            .push(line);
    }

    /// Hash of the inputs that make a translation-memory entry (guide, model, template,
    /// generation parameters).
    pub(super) fn inputs_key(&self) -> String {
        inputs_key(self)
    }

    /// Where a translation-memory entry lives.
    pub(super) fn memory_path(&self, key: &str) -> PathBuf {
        memory_path(&self.out, key)
    }

    /// A finished translation of `unit` from the memory, if one matches.
    pub(super) fn read_memory(&self, key: &str, unit: &Unit) -> Option<MemoryEntry> {
        read_memory(&self.out, key, unit)
    }

    /// Record a unit taken from the translation memory.
    pub(super) fn reuse_unit(&mut self, unit: &Unit, key: &str, e: &MemoryEntry) {
        let r = &mut self.checkpoint.value.result;
        let rec = r.quire.units.get_mut(&unit.id).expect("planned");
        let was_final = rec.state.is_final() && rec.memory_key.as_deref() == Some(key);
        rec.state = e.state;
        rec.memory_key = Some(key.to_string());
        rec.output_hash = Some(sha256_hex(e.translation.as_bytes()));
        rec.attempts = e.attempts;
        rec.errors = e.errors;
        if !was_final {
            r.manager_context_final
                .call_log
                .push(format!("{}: reused from translation memory", unit.id));
        }
    }

    /// Record a unit just finished (its memory entry written) and checkpoint.
    pub(super) fn finish_unit(&mut self, unit: &Unit, key: &str, e: &MemoryEntry) -> Result<()> {
        {
            let r = &mut self.checkpoint.value.result;
            let rec = r.quire.units.get_mut(&unit.id).expect("planned");
            rec.state = e.state;
            rec.memory_key = Some(key.to_string());
            rec.output_hash = Some(sha256_hex(e.translation.as_bytes()));
            rec.attempts = e.attempts;
            rec.errors = e.errors;
            r.manager_context_final.call_log.push(format!(
                "{}: {:?} after {} attempt(s)",
                unit.id, e.state, e.attempts
            ));
            r.manager_context_final.file_index.insert(
                format!("memory/{key}.json"),
                sha256_hex(e.translation.as_bytes()),
            );
        }
        self.set_state(unit, e.state)?;
        self.save()?;
        self.progress.inc(1);
        Ok(())
    }
}

fn memory_path(out: &Path, key: &str) -> PathBuf {
    out.join("memory").join(format!("{key}.json"))
}

fn read_memory(out: &Path, key: &str, unit: &Unit) -> Option<MemoryEntry> {
    let text = std::fs::read_to_string(memory_path(out, key)).ok()?;
    let e: MemoryEntry = serde_json::from_str(&text).ok()?;
    (e.source_hash == unit.content_hash() && e.state.is_final()).then_some(e)
}

/// Exclusive lock on the output directory for the life of the run.
struct DirLock {
    _file: std::fs::File,
}

fn lock_dir(out: &Path) -> Result<DirLock> {
    let path = out.join(".quire.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("cannot write in the output directory {}", out.display()))?;
    match file.try_lock() {
        Ok(()) => Ok(DirLock { _file: file }),
        Err(std::fs::TryLockError::WouldBlock) => bail!(
            "another `quire translate` is already writing to {} (lock {}); wait for it to finish or use another --out",
            out.display(),
            path.display()
        ),
        Err(std::fs::TryLockError::Error(e)) => Err(e).context("cannot lock the output directory"),
    }
}

/// The outcome of a run, for the summary and tests.
#[derive(Debug, Clone, Serialize)]
pub struct RunSummary {
    /// Units in the book (translatable ones).
    pub units: usize,
    /// Units that passed every hard check.
    pub passed: usize,
    /// Units that needed at least one revision.
    pub revised: usize,
    /// Units blocked after the last revision.
    pub blocked: usize,
    /// Units reused from the translation memory (no model call).
    pub reused: usize,
    /// Units left for a later run (budget or deadline).
    pub remaining: usize,
    /// Whether the whole book was translated.
    pub complete: bool,
    /// Structure/QA errors in the final chapters.
    pub qa_errors: usize,
    /// House-term adherence in percent (occurrences honoured ÷ occurrences).
    pub house_term_adherence: f64,
    /// Model calls made in this run.
    pub calls: usize,
    /// Prompt tokens served from the prefix cache ÷ prompt tokens, this run.
    pub cache_hit_rate: f64,
    /// Wall seconds of this run.
    pub wall_seconds: f64,
    /// Generated tokens per second of model time, this run.
    pub tokens_per_second: f64,
    /// Largest prompt seen (tokens) — the context peak.
    pub context_peak_tokens: usize,
    /// The orchestrated mode's context peak for the same units (equal to
    /// `context_peak_tokens` in orchestrated mode; computed alongside in single mode).
    pub orchestrated_context_peak_tokens: usize,
    /// Manager context peak (bytes).
    pub manager_context_peak_bytes: usize,
    /// Output directory.
    pub out_dir: PathBuf,
}

/// Fingerprint of everything that determines the output.
fn fingerprint(
    plan: &Plan,
    opts: &TranslateOptions,
    model_hash: &str,
    template: &str,
    params: &str,
) -> (String, BTreeMap<String, String>) {
    let mut inputs = BTreeMap::new();
    for c in &plan.book.chapters {
        inputs.insert(
            format!("chapter:{}", c.name()),
            sha256_hex(c.text.as_bytes()),
        );
    }
    inputs.insert(
        "glossary".into(),
        sha256_hex(
            serde_json::to_string(&plan.house)
                .unwrap_or_default()
                .as_bytes(),
        ),
    );
    inputs.insert("guide".into(), sha256_hex(plan.guide.as_bytes()));
    inputs.insert("model".into(), model_hash.to_string());
    inputs.insert("template".into(), sha256_hex(template.as_bytes()));
    inputs.insert(
        "params".into(),
        sha256_hex(
            format!(
                "{params}|{}|{}|{}|{:?}",
                opts.source_lang, opts.target_lang, opts.unit_tokens, opts.mode
            )
            .as_bytes(),
        ),
    );
    let all = serde_json::to_string(&inputs).unwrap_or_default();
    (sha256_hex(all.as_bytes()), inputs)
}

fn print_plan(plan: &Plan, opts: &TranslateOptions) {
    let counter = EstimateTokens;
    let mut total_in = 0usize;
    let mut n = 0usize;
    println!(
        "Plan: {} chapter(s) from {}",
        plan.book.chapters.len(),
        plan.book.root.display()
    );
    for (c, units) in plan.book.chapters.iter().zip(&plan.units) {
        println!("  {} — {} unit(s)", c.name(), units.len());
        for u in units {
            let t = counter.count_tokens(&u.protected);
            let kind = match u.kind {
                UnitKind::Translate => format!(
                    "translate ~{t} tokens, {} placeholder(s), max {} new",
                    u.placeholders.len(),
                    max_new_tokens_for(u)
                ),
                UnitKind::Verbatim => "verbatim (never sent to the model)".to_string(),
            };
            println!("    {:<24} {kind}", u.id);
            if u.kind == UnitKind::Translate {
                total_in += t;
                n += 1;
            }
        }
    }
    let guide_tokens = counter.count_tokens(&plan.guide) + plan.house.entries.len() * 12;
    println!("Token budget per agent (estimates):");
    println!("  glossary : ≤{} candidate calls × (prefix ~{} cached + ~40 per term), ≤16 new tokens each", opts.glossary_terms, guide_tokens / 2);
    println!("  translate: {n} calls × (prefix ~{guide_tokens} cached once + ~{} per unit), ~{} new tokens in all", total_in / n.max(1), total_in * 2);
    println!(
        "  proofread: flagged units (+ every {}th clean one) × ~{} tokens",
        opts.review_every.max(1),
        2 * total_in / n.max(1) + 200
    );
    println!(
        "  revise   : at most {} per unit that fails hard checks, then the fallback (segments, sentences)",
        opts.revisions
    );
    let secs = (guide_tokens as f64 + total_in as f64) / EST_PREFILL_TPS
        + (total_in as f64 * 2.0) / EST_DECODE_TPS;
    println!("Estimated time: ~{:.0} min (assumes {EST_PREFILL_TPS:.0} tok/s prefill, {EST_DECODE_TPS:.0} tok/s decode; measure with `quire bench engine`)", secs / 60.0);
}

/// Run `quire translate`.
pub fn run(opts: &TranslateOptions) -> Result<Option<RunSummary>> {
    let plan = load_plan(opts)?;
    if opts.dry_run {
        print_plan(&plan, opts);
        return Ok(None);
    }
    std::fs::create_dir_all(&opts.out)
        .with_context(|| format!("cannot create output directory {}", opts.out.display()))?;
    let out = opts.out.clone();
    let _lock = lock_dir(&out)?;

    // The model.
    let model_path = crate::model_store::resolve_model(
        opts.model.as_deref(),
        true,
        opts.progress != ProgressMode::Bar,
    )?;
    let device = crate::engine::device::parse_device(&opts.device)?;
    let engine = crate::engine::Engine::load(
        &model_path,
        &device,
        &crate::engine::LoadOptions {
            chat_template: opts.chat_template.clone(),
            ..Default::default()
        },
    )?;
    let model_hash = crate::model_store::content_hash(&model_path)?;
    let template = engine.template.source.clone();
    let disk = opts
        .prefix_cache_dir
        .as_ref()
        .map(|d| DiskPrefixCache::new(d, 4 << 30));
    let mut backend = LocalBackend::new(engine, 2 << 30, disk)?;
    let translate_params = GenerationParams::default();
    let (fp, inputs) = fingerprint(
        &plan,
        opts,
        &model_hash,
        &template,
        &serde_json::to_string(&translate_params)?,
    );

    let previous = Checkpoint::load(&out);
    let (checkpoint, elapsed_before) = match previous {
        Some(c) if c.campaign_fingerprint == fp => {
            let e = c.value.elapsed_seconds;
            (c, e)
        }
        _ => (
            Checkpoint {
                campaign_fingerprint: fp.clone(),
                ..Default::default()
            },
            0.0,
        ),
    };
    let total_units: usize = plan
        .units
        .iter()
        .flatten()
        .filter(|u| u.kind == UnitKind::Translate)
        .count();
    let bar = match opts.progress {
        ProgressMode::Bar => ProgressBar::new(total_units as u64),
        _ => ProgressBar::hidden(),
    };
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} units  ETA {eta}  {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut m = Manager {
        opts,
        plan: &plan,
        out: out.clone(),
        checkpoint,
        started: Instant::now(),
        elapsed_before,
        model_name: backend.model_name(),
        device: backend.device_name(),
        progress: bar,
    };
    let calls_before = m.checkpoint.value.result.tracker_calls.len();
    {
        let r = &mut m.checkpoint.value.result;
        r.mode = format!("{:?}", opts.mode).to_lowercase();
        r.out_dir = out.display().to_string();
        r.quire.inputs = inputs;
        r.quire.stopped = None;
        let ctx = &mut r.manager_context_final;
        ctx.task = format!(
            "translate {} ({} → {})",
            plan.book.root.display(),
            opts.source_lang,
            opts.target_lang
        );
        ctx.guide = format!(
            "{} sha256:{}",
            plan.guide_origin,
            &sha256_hex(plan.guide.as_bytes())[..16]
        );
        ctx.plan = plan
            .units
            .iter()
            .flatten()
            .filter(|u| u.kind == UnitKind::Translate)
            .map(|u| u.id.clone())
            .collect();
        for u in plan
            .units
            .iter()
            .flatten()
            .filter(|u| u.kind == UnitKind::Translate)
        {
            r.quire.units.entry(u.id.clone()).or_insert(UnitRecord {
                state: UnitState::Planned,
                source_hash: u.content_hash(),
                memory_key: None,
                output_hash: None,
                attempts: 0,
                errors: 0,
            });
            // A unit whose source changed starts over.
            let rec = r.quire.units.get_mut(&u.id).expect("inserted");
            if rec.source_hash != u.content_hash() {
                *rec = UnitRecord {
                    state: UnitState::Planned,
                    source_hash: u.content_hash(),
                    memory_key: None,
                    output_hash: None,
                    attempts: 0,
                    errors: 0,
                };
            }
        }
        let ids: std::collections::HashSet<&String> = ctx.plan.iter().collect();
        r.quire.units.retain(|k, _| ids.contains(k));
    }
    m.save()?;

    // 1. Glossary, 2. translation (with checks, revision and the fallback cascade).
    let terms = glossary_stage::run(&mut m, &mut backend)?;
    let done = scheduler::run(&mut m, &mut backend, &terms)?;
    let translations = &done.texts;
    let (glossary_lines, all_terms, ctx) = (&terms.lines, &terms.all, &terms.ctx);
    let mut stopped = done.stopped.clone();
    let (reused, revised) = (done.reused, done.revised);
    let (context_peak, orchestrated_peak) = (done.context_peak, done.orchestrated_peak);

    // 3. Chapters: finished units translated, the rest (if the run stopped) left in the source.
    let book_dir = out.join("book");
    let mut chapter_texts = Vec::new();
    for (ci, chapter) in plan.book.chapters.iter().enumerate() {
        let units = &plan.units[ci];
        let texts: Vec<String> = units
            .iter()
            .zip(&translations[ci])
            .map(|(u, t)| {
                t.clone().unwrap_or_else(|| {
                    restore_placeholders(u, &u.protected).unwrap_or_else(|_| u.source.clone())
                })
            })
            .collect();
        let text = reassemble(units, &texts);
        let path = book_dir.join(&chapter.rel_path);
        write_atomic(&path, text.as_bytes())?;
        m.checkpoint
            .value
            .result
            .manager_context_final
            .file_index
            .insert(
                format!("book/{}", chapter.name()),
                sha256_hex(text.as_bytes()),
            );
        chapter_texts.push((chapter.name(), texts, text));
    }

    // 4. Proofreading: deterministic QA over every unit, then a model review of flagged
    //    units and a sample of clean ones.
    let mut issues: Vec<serde_json::Value> = Vec::new();
    let mut qa_findings: Vec<Finding> = Vec::new();
    for (ci, (name, texts, _)) in chapter_texts.iter().enumerate() {
        let cctx = ctx.for_chapter(name);
        let done: Vec<String> = texts.clone();
        qa_findings.extend(check_units(&plan.units[ci], &done, &cctx));
    }
    let mut reviewed = 0usize;
    let mut clean_seen = 0usize;
    if stopped.is_none() {
        // 1. Which units get a model review (flagged ones, and every n-th clean one), and
        //    which of those reviews are already on disk from an earlier run.
        struct Review {
            unit: String,
            key: String,
            req: ChatRequest,
            verdict: Option<String>,
        }
        let mut reviews: Vec<Review> = Vec::new();
        let mut pending = 0usize;
        'select: for (ci, units) in plan.units.iter().enumerate() {
            for (ui, unit) in units.iter().enumerate() {
                let Some(t) = &translations[ci][ui] else {
                    continue;
                };
                if unit.kind != UnitKind::Translate {
                    continue;
                }
                let flagged = qa_findings.iter().any(|f| {
                    f.unit.as_deref() == Some(&unit.id) && f.severity <= Severity::Warning
                });
                if !flagged {
                    clean_seen += 1;
                }
                let sample = opts.review_every > 0
                    && !flagged
                    && clean_seen % opts.review_every == 1 % opts.review_every.max(1);
                if !(flagged || sample) {
                    continue;
                }
                let p = review_prompt(
                    &opts.source_lang,
                    &opts.target_lang,
                    all_terms,
                    unit.source.trim(),
                    t.trim(),
                )?;
                // A review already done for the same inputs and texts (an earlier run) is
                // read back instead of asked again: reruns make no model calls.
                let key = format!(
                    "review-{}",
                    sha256_hex(
                        format!("{}{}", inputs_key(&m), serde_json::to_string(&p.messages)?)
                            .as_bytes()
                    )
                );
                let verdict = std::fs::read_to_string(memory_path(&out, &key)).ok();
                if verdict.is_none() {
                    // Every review still to ask reserves its whole token allowance.
                    if let Some(reason) = m.over_budget(96 * (pending + 1)) {
                        stopped = Some(reason);
                        break 'select;
                    }
                    pending += 1;
                }
                reviews.push(Review {
                    unit: unit.id.clone(),
                    key,
                    req: ChatRequest {
                        messages: p.messages,
                        split: p.split,
                        params: GenerationParams {
                            max_new_tokens: 96,
                            ..Default::default()
                        },
                    },
                    verdict,
                });
            }
        }
        // 2. The reviews to ask are independent: one batch (throughput mode), whose replies
        //    are the ones asked one at a time would give.
        let asks: Vec<usize> = (0..reviews.len())
            .filter(|&i| reviews[i].verdict.is_none())
            .collect();
        let reqs: Vec<ChatRequest> = asks.iter().map(|&i| reviews[i].req.clone()).collect();
        let replies = backend.complete_batch(&reqs)?;
        for (&i, done) in asks.iter().zip(&replies) {
            let verdict = done.text.trim().to_string();
            let outcome = if verdict.to_uppercase().starts_with("OK") {
                "ok"
            } else {
                "issues"
            };
            m.record_call("proofread", &reviews[i].unit, done, outcome);
            write_atomic(&memory_path(&out, &reviews[i].key), verdict.as_bytes())?;
            reviews[i].verdict = Some(verdict);
        }
        // 3. Their findings, in book order.
        for r in &reviews {
            let verdict = r.verdict.as_deref().unwrap_or_default();
            reviewed += 1;
            if !verdict.to_uppercase().starts_with("OK") {
                for line in verdict
                    .lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty())
                    .take(3)
                {
                    issues.push(json!({"unit": r.unit, "source": "model_review", "severity": "info", "issue": line.trim_start_matches("- ")}));
                }
            }
        }
    }
    for f in &qa_findings {
        issues.push(json!({"unit": f.unit, "chapter": f.chapter, "source": "qa", "category": f.category, "severity": f.severity, "evidence": f.evidence, "action": f.action}));
    }
    let units_need_revision: Vec<String> = m
        .checkpoint
        .value
        .result
        .quire
        .units
        .iter()
        .filter(|(_, r)| r.state == UnitState::Blocked)
        .map(|(k, _)| k.clone())
        .chain(
            qa_findings
                .iter()
                .filter(|f| f.severity == Severity::Error)
                .filter_map(|f| f.unit.clone()),
        )
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let report = Report::from_findings(qa_findings.clone(), plan.book.chapters.len());
    let (adherent, occurrences) = house_adherence(&plan, translations, glossary_lines);
    let adherence = if occurrences == 0 {
        100.0
    } else {
        100.0 * adherent as f64 / occurrences as f64
    };

    let states = &m.checkpoint.value.result.quire.units;
    let passed = states
        .values()
        .filter(|r| r.state == UnitState::Passed)
        .count();
    let blocked = states
        .values()
        .filter(|r| r.state == UnitState::Blocked)
        .count();
    let remaining = states.values().filter(|r| !r.state.is_final()).count();
    let complete = remaining == 0;
    let summary_json = json!({
        "units": total_units, "passed": passed, "blocked": blocked, "revised": revised,
        "remaining": remaining, "qa_errors": report.summary.errors, "qa_warnings": report.summary.warnings,
        "house_term_adherence_percent": adherence, "model_reviews": reviewed,
        "by_category": report.summary.by_category,
    });
    let proof = json!({"issues": issues, "units_need_revision": units_need_revision, "summary": summary_json});
    write_atomic(
        &out.join("proofreading_report.json"),
        serde_json::to_string_pretty(&proof)?.as_bytes(),
    )?;
    write_atomic(
        &out.join("proofreading_report.md"),
        proofreading_markdown(&proof, &report).as_bytes(),
    )?;

    // 5. run.json and the final checkpoint.
    let calls: Vec<TrackerCall> = m.checkpoint.value.result.tracker_calls[calls_before..].to_vec();
    let prompt_total: usize = calls.iter().map(|c| c.prompt_tokens).sum();
    let cached_total: usize = calls.iter().map(|c| c.cached_prefix_tokens).sum();
    let completion_total: usize = calls.iter().map(|c| c.completion_tokens).sum();
    let model_seconds: f64 = calls.iter().map(|c| c.busy_seconds).sum();
    let wall = m.started.elapsed().as_secs_f64();
    let hit_rate = if prompt_total == 0 {
        0.0
    } else {
        cached_total as f64 / prompt_total as f64
    };
    let tps = if model_seconds > 0.0 {
        completion_total as f64 / model_seconds
    } else {
        0.0
    };
    let run_json = json!({
        "model": m.model_name, "model_path": model_path.display().to_string(), "device": m.device,
        "mode": m.checkpoint.value.result.mode,
        "calls": calls.iter().map(|c| json!({"agent": c.agent, "unit": c.note, "prompt_tokens": c.prompt_tokens,
            "cached_prefix_tokens": c.cached_prefix_tokens, "cache_source": c.cache_source, "completion_tokens": c.completion_tokens,
            "latency_seconds": c.latency_seconds, "busy_seconds": c.busy_seconds, "ttft_seconds": c.ttft_seconds, "outcome": c.outcome, "model": c.model, "device": c.device})).collect::<Vec<_>>(),
        "totals": {"calls": calls.len(), "prompt_tokens": prompt_total, "cached_prefix_tokens": cached_total,
            "completion_tokens": completion_total, "cache_hit_rate": hit_rate, "wall_seconds": wall,
            "model_seconds": model_seconds, "tokens_per_second": tps, "reused_units": reused,
            "context_peak_tokens": context_peak, "orchestrated_context_peak_tokens": orchestrated_peak, "prefix_cache": backend.store.stats},
    });
    write_atomic(
        &out.join("run.json"),
        serde_json::to_string_pretty(&run_json)?.as_bytes(),
    )?;
    {
        let r = &mut m.checkpoint.value.result;
        r.report = json!({"path": "proofreading_report.json", "summary": summary_json});
        r.quire.complete = complete;
        r.quire.stopped = stopped.clone();
    }
    m.save()?;
    let summary = RunSummary {
        units: total_units,
        passed,
        revised,
        blocked,
        reused,
        remaining,
        complete,
        qa_errors: report.summary.errors,
        house_term_adherence: adherence,
        calls: calls.len(),
        cache_hit_rate: hit_rate,
        wall_seconds: wall,
        tokens_per_second: tps,
        context_peak_tokens: context_peak,
        orchestrated_context_peak_tokens: orchestrated_peak,
        manager_context_peak_bytes: m.checkpoint.value.result.manager_context_peak,
        out_dir: out.clone(),
    };
    if let Some(reason) = &stopped {
        eprintln!("stopped early: {reason}; {remaining} unit(s) left — rerun the same command to continue");
    }
    Ok(Some(summary))
}

fn inputs_key(m: &Manager) -> String {
    let i = &m.checkpoint.value.result.quire.inputs;
    sha256_hex(
        format!(
            "{:?}{:?}{:?}{:?}",
            i.get("guide"),
            i.get("model"),
            i.get("template"),
            i.get("params")
        )
        .as_bytes(),
    )
}

/// House-term occurrences honoured: for each unit and house term present in its source,
/// whether the translation contains the required target.
fn house_adherence(
    plan: &Plan,
    translations: &[Vec<Option<String>>],
    g: &[GlossaryLine],
) -> (usize, usize) {
    let (mut ok, mut all) = (0, 0);
    for (ci, units) in plan.units.iter().enumerate() {
        for (ui, u) in units.iter().enumerate() {
            let (Some(t), UnitKind::Translate) = (&translations[ci][ui], u.kind) else {
                continue;
            };
            let lower = u.source.to_lowercase();
            for l in g.iter().filter(|l| l.house) {
                if contains_term(&lower, &l.en.to_lowercase()) {
                    all += 1;
                    if t.contains(&l.zh) {
                        ok += 1;
                    }
                }
            }
        }
    }
    (ok, all)
}

fn proofreading_markdown(proof: &serde_json::Value, report: &Report) -> String {
    let mut s = String::from("# Proofreading report\n\n");
    let sum = &proof["summary"];
    s.push_str(&format!(
        "- Units: {} (passed {}, blocked {}, revised {}, remaining {})\n- QA: {} error(s), {} warning(s)\n- House-term adherence: {:.1}%\n- Model reviews: {}\n\n",
        sum["units"], sum["passed"], sum["blocked"], sum["revised"], sum["remaining"], sum["qa_errors"], sum["qa_warnings"],
        sum["house_term_adherence_percent"].as_f64().unwrap_or(0.0), sum["model_reviews"]
    ));
    if let Some(list) = proof["units_need_revision"].as_array() {
        if !list.is_empty() {
            s.push_str("## Units that need revision\n\n");
            for u in list {
                s.push_str(&format!("- {}\n", u.as_str().unwrap_or("")));
            }
            s.push('\n');
        }
    }
    s.push_str("## Findings\n\n");
    for f in &report.findings {
        s.push_str(&format!(
            "- **{}** `{}` {} — {} → {}\n",
            f.severity.name(),
            f.category,
            f.unit.clone().unwrap_or_else(|| f.chapter.clone()),
            f.evidence.replace('\n', " "),
            f.action
        ));
    }
    if let Some(list) = proof["issues"].as_array() {
        let reviews: Vec<_> = list
            .iter()
            .filter(|i| i["source"] == "model_review")
            .collect();
        if !reviews.is_empty() {
            s.push_str("\n## Model review notes\n\n");
            for i in reviews {
                s.push_str(&format!(
                    "- {}: {}\n",
                    i["unit"].as_str().unwrap_or(""),
                    i["issue"].as_str().unwrap_or("")
                ));
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn house_terms_are_injected_as_whole_words() {
        let g = vec![GlossaryLine {
            en: "token".into(),
            zh: "词元".into(),
            pos: String::new(),
            context: String::new(),
            house: true,
            needs_review: false,
        }];
        assert_eq!(
            inject_house_terms("Tokens and a token, not tokenizer {{1}}.", &g),
            "词元 and a 词元, not tokenizer {{1}}."
        );
    }
}
