//! The manager: [`run`] sequences the stages over a run's state (`state.rs`) — plan
//! (`plan.rs`), glossary, translation (the scheduler), the write-back passes, chapters,
//! proofreading (`review.rs`) and the run report (`run_report.rs`) — after loading the
//! model and resuming the output directory's checkpoint.

use super::checkpoint::{Checkpoint, UnitRecord, UnitState};
use super::plan::{fingerprint, load_plan, print_plan, Plan};
use super::state::RunState;
use super::{chapters, glossary_stage, review, run_report, scheduler, writeback};
use crate::engine::backend::{ChatBackend, LocalBackend};
use crate::engine::generate::GenerationParams;
use crate::engine::prefix_cache::disk::DiskPrefixCache;
use crate::prompts::profile::{ProfileChoice, PromptProfile};
use crate::util::sha256_hex;
use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

// The types of a run, also reachable from here.
pub use super::house_terms::inject_house_terms;
pub use super::memory::Exchange;
pub use super::options::{Mode, ProgressMode, TranslateOptions};
pub use super::run_report::RunSummary;

/// Exclusive lock on the output directory for the life of the run: an OS advisory lock
/// (`flock`) held on the directory itself on Unix, so no file a person could delete holds
/// it; elsewhere on a `.quire.lock` file inside it.
struct DirLock {
    _file: std::fs::File,
}

fn lock_dir(out: &Path) -> Result<DirLock> {
    #[cfg(unix)]
    let (file, what) = (
        std::fs::File::open(out)
            .with_context(|| format!("cannot open the output directory {}", out.display()))?,
        out.to_path_buf(),
    );
    #[cfg(not(unix))]
    let (file, what) = {
        let path = out.join(".quire.lock");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .with_context(|| format!("cannot write in the output directory {}", out.display()))?;
        (file, path)
    };
    match file.try_lock() {
        Ok(()) => Ok(DirLock { _file: file }),
        Err(std::fs::TryLockError::WouldBlock) => bail!(
            "another `quire translate` is already writing to {} (lock held on {}); wait for it to finish or use another --out",
            out.display(),
            what.display()
        ),
        Err(std::fs::TryLockError::Error(e)) => Err(e).context("cannot lock the output directory"),
    }
}

/// Run `quire translate`: plan, glossary, translation, chapters, proofreading, run report —
/// each stage checkpointed, so a rerun continues where this one stopped.
pub fn run(opts: &TranslateOptions) -> Result<Option<RunSummary>> {
    let plan = load_plan(opts)?;
    if opts.dry_run {
        print_plan(&plan, opts);
        return Ok(None);
    }
    let created = !opts.out.exists();
    std::fs::create_dir_all(&opts.out)
        .with_context(|| format!("cannot create output directory {}", opts.out.display()))?;
    let lock = lock_dir(&opts.out)?;
    let loaded = load_model(opts, &plan);
    if loaded.is_err() && created {
        // Nothing was written: leave no empty output directory behind.
        drop(lock);
        std::fs::remove_file(opts.out.join(".quire.lock")).ok();
        std::fs::remove_dir(&opts.out).ok();
    }
    let (mut backend, model_path, profile, fp, inputs) = loaded?;
    stages(opts, &plan, &mut backend, &model_path, profile, fp, inputs).map(Some)
}

/// [`run`] over any backend, for a book (`opts.input`) and an output directory: the same
/// stages, checkpoints and reports, the backend's model name in the fingerprint (so a
/// resume with another backend or model starts fresh). `quire translate --backend openai`
/// runs this way with a [`crate::remote::RemoteBackend`]; tests drive the manager with
/// stand-in backends.
pub fn run_with_backend(
    opts: &TranslateOptions,
    backend: &mut dyn ChatBackend,
) -> Result<RunSummary> {
    let plan = load_plan(opts)?;
    std::fs::create_dir_all(&opts.out)
        .with_context(|| format!("cannot create output directory {}", opts.out.display()))?;
    let _lock = lock_dir(&opts.out)?;
    let name = backend.model_name();
    let profile = backend_profile(opts)?;
    let params = translate_params(profile, &opts.skip_passes)?;
    let (fp, inputs) = fingerprint(&plan, opts, &name, "", &params);
    stages(opts, &plan, backend, Path::new(&name), profile, fp, inputs)
}

/// The prompt profile for a run over another backend ([`run_with_backend`]): the one
/// chosen, or for `auto` the one of the local GGUF named by `--model` (a server's model
/// whose file is here, as `--backend openai` takes it for counting tokens), `Guide` without.
fn backend_profile(opts: &TranslateOptions) -> Result<PromptProfile> {
    let model = match (opts.prompt_profile, &opts.model) {
        (ProfileChoice::Auto, Some(spec)) => Some(crate::model_store::resolve_model(
            &opts.store,
            Some(spec),
            false,
            opts.progress != ProgressMode::Bar,
        )?),
        _ => None,
    };
    opts.prompt_profile
        .resolve(model.as_deref())
        .context("choosing the prompt profile (--prompt-profile)")
}

/// The translation parameters that go into the run's fingerprint and the translation
/// memory's keys: the generation parameters, and the prompt profile where it is not the
/// guide's (so a unit translated under one profile is not reused under another, while the
/// default's fingerprint — and every checkpoint and memory entry made with it — stays as
/// it was before profiles existed), and the write-back passes switched off, if any.
fn translate_params(profile: PromptProfile, skipped: &[String]) -> Result<String> {
    let params = serde_json::to_string(&GenerationParams::default())?;
    let mut params = match profile {
        PromptProfile::Guide => params,
        other => format!("{params}|prompt-profile:{}", other.name()),
    };
    // Passes switched off change the typeset text the memory holds (none: as before).
    if !skipped.is_empty() {
        params.push_str(&format!("|skip-pass:{}", skipped.join(",")));
    }
    Ok(params)
}

/// Glossary, translation, chapters, proofreading and the run report, over a loaded plan.
fn stages(
    opts: &TranslateOptions,
    plan: &Plan,
    backend: &mut dyn ChatBackend,
    model_path: &Path,
    profile: PromptProfile,
    fp: String,
    inputs: BTreeMap<String, String>,
) -> Result<RunSummary> {
    let mut m = RunState::resume(opts, plan, backend, profile, fp);
    let calls_before = m.checkpoint.value.result.tracker_calls.len();
    m.start(inputs);
    m.save()?;

    // 1. Glossary, 2. translation (with checks, revision and the fallback cascade).
    let terms = glossary_stage::run(&mut m, backend)?;
    let mut done = scheduler::run(&mut m, backend, &terms)?;
    // 3. The write-back passes over the whole book: kept terms the model still
    //    translated, bold spans it dropped, the originals of terms introduced in bold.
    let ctx = &terms.ctx;
    let mut skipped = opts.skip_passes.clone();
    if !opts.term_originals {
        skipped.push("originals".to_string());
    }
    let mut book = writeback::BookText {
        units: &plan.units,
        texts: &mut done.texts,
        glossary: &ctx.glossary,
        target_lang: &ctx.target_lang,
    };
    writeback::run_book_passes(&mut m, backend, &mut book, &skipped)?;
    // 4. Chapters: finished units translated, the rest (if the run stopped) left in the source.
    let chapter_texts = chapters::write(&mut m, &done.texts)?;
    // 5. Proofreading: deterministic QA over every unit, then a model review of flagged
    //    units and a sample of clean ones.
    let mut stopped = done.stopped.clone();
    let proof = review::run(&mut m, backend, &terms, &done, &chapter_texts, &mut stopped)?;
    // 6. run.json and the final checkpoint.
    let summary = run_report::finish(
        &mut m,
        &*backend,
        model_path,
        calls_before,
        &done,
        &proof,
        stopped,
    )?;
    Ok(summary)
}

/// A loaded model: the backend, its file, the prompt profile resolved for it, the run's
/// fingerprint and its input hashes.
type Loaded = (
    LocalBackend,
    PathBuf,
    PromptProfile,
    String,
    BTreeMap<String, String>,
);

/// Load the model into a backend (with the disk prefix cache when one is configured),
/// resolve the prompt profile for it and fingerprint the run's inputs.
fn load_model(opts: &TranslateOptions, plan: &Plan) -> Result<Loaded> {
    let model_path = crate::model_store::resolve_model(
        &opts.store,
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
    let profile = opts
        .prompt_profile
        .resolve(Some(&engine.path))
        .context("choosing the prompt profile (--prompt-profile)")?;
    let model_hash = crate::model_store::content_hash(&model_path)?;
    let template = engine.template.source.clone();
    let disk = opts
        .prefix_cache_dir
        .as_ref()
        .map(|d| DiskPrefixCache::new(d, 4 << 30));
    let quiet = opts.progress != ProgressMode::Bar;
    let draft = crate::model_store::resolve_draft(&opts.store, &opts.draft, &model_path, quiet)?
        .map(|path| crate::engine::speculative::Draft::load(&path, &engine))
        .transpose()?;
    let backend = LocalBackend::new(engine, 2 << 30, disk)?.with_draft(draft);
    let (fp, inputs) = fingerprint(
        plan,
        opts,
        &model_hash,
        &template,
        &translate_params(profile, &opts.skip_passes)?,
    );
    Ok((backend, model_path, profile, fp, inputs))
}

impl<'a> RunState<'a> {
    /// The run's state over the output directory's checkpoint when it has the same fingerprint
    /// (the elapsed time carried over), or over a fresh one.
    fn resume(
        opts: &'a TranslateOptions,
        plan: &'a Plan,
        backend: &dyn ChatBackend,
        profile: PromptProfile,
        fp: String,
    ) -> Self {
        let out = opts.out.clone();
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
        let total_units = plan.translatable().count();
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
        RunState {
            opts,
            plan,
            out,
            checkpoint,
            started: Instant::now(),
            elapsed_before,
            model_name: backend.model_name(),
            device: backend.device_name(),
            provider: backend.provider(),
            profile,
            progress: bar,
        }
    }

    /// Record this run's task, guide, plan and inputs in the checkpoint; a unit new to the
    /// plan, or whose source changed, starts over as PLANNED; units no longer planned go.
    fn start(&mut self, inputs: BTreeMap<String, String>) {
        let (opts, plan, profile) = (self.opts, self.plan, self.profile);
        let r = &mut self.checkpoint.value.result;
        r.mode = format!("{:?}", opts.mode).to_lowercase();
        r.out_dir = self.out.display().to_string();
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
        if profile != PromptProfile::Guide {
            // The guide reaches only the guide's prompts.
            ctx.guide = format!(
                "{} (not sent: prompt profile {})",
                ctx.guide,
                profile.name()
            );
        }
        ctx.plan = plan.translatable().map(|u| u.id.clone()).collect();
        for u in plan.translatable() {
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::backend::Completion;
    use crate::glossary::Glossary;

    #[test]
    fn house_terms_are_injected_as_whole_words() {
        let g = Glossary {
            entries: vec![crate::glossary::GlossaryEntry::house("token", "词元")],
        };
        assert_eq!(
            inject_house_terms("Tokens and a token, not tokenizer {{1}}.", &g),
            "词元 and a 词元, not tokenizer {{1}}."
        );
    }

    #[test]
    fn house_terms_with_punctuation_edges_and_dollar_targets() {
        use crate::glossary::GlossaryEntry;
        let g = Glossary {
            entries: vec![
                GlossaryEntry::house("C++", "C++ 语言"),
                GlossaryEntry::house(".NET", "点网"),
                GlossaryEntry::house("(a|b)", "甲或乙"),
                GlossaryEntry::house("token", "词元$0"),
            ],
        };
        assert_eq!(
            inject_house_terms("Write C++ on .NET, match (a|b) per token.", &g),
            "Write C++ 语言 on 点网, match 甲或乙 per 词元$0."
        );
    }

    /// A stand-in model: a translate prompt's passage comes back with each word as a Han
    /// character (placeholders and lines kept); anything else gets "好". Every request's
    /// messages are kept.
    struct StandIn {
        seen: Vec<Vec<crate::engine::chat_template::Message>>,
    }

    /// The passage of a translate prompt, guide's or Hy-MT's.
    fn asked_passage(user: &str) -> Option<&str> {
        if let Some(at) = user.rfind("Translate into") {
            let rest = &user[at..];
            return Some(&rest[rest.find(":\n\n")? + 3..]);
        }
        let at = user.find("不要额外解释：")? + "不要额外解释：".len();
        Some(user[at..].trim_start_matches('\n'))
    }

    impl ChatBackend for StandIn {
        fn complete(&mut self, req: &crate::engine::backend::ChatRequest) -> Result<Completion> {
            self.seen.push(req.messages.clone());
            let user = &req.messages.last().expect("a message").content;
            let text = match asked_passage(user) {
                Some(p) => {
                    // A word becomes one Han character.
                    let mut out = String::new();
                    for c in p.trim_end().chars() {
                        if !c.is_ascii_alphabetic() {
                            out.push(c);
                        } else if !out.ends_with('词') {
                            out.push('词');
                        }
                    }
                    out
                }
                None => "好".to_string(),
            };
            Ok(Completion {
                text,
                prompt_tokens: 10,
                cached_tokens: 0,
                cache_source: "none",
                completion_tokens: 5,
                latency_seconds: 0.0,
                busy_seconds: 0.0,
                ttft_seconds: 0.0,
                finish: crate::engine::generate::FinishReason::Eos,
                decode_seconds: 0.0,
                draft_proposed: 0,
                draft_accepted: 0,
            })
        }
        fn count_tokens(&self, text: &str) -> Result<usize> {
            Ok(text.len() / 4 + 1)
        }
        fn prompt_tokens(
            &self,
            messages: &[crate::engine::chat_template::Message],
        ) -> Result<usize> {
            Ok(messages.iter().map(|m| m.content.len() / 4 + 4).sum())
        }
        fn model_name(&self) -> String {
            "stand-in".into()
        }
        fn device_name(&self) -> String {
            "none".into()
        }
    }

    const BOOK: &str = "# The Cache\n\nA prefix cache keeps the keys and values of a prompt, \
        computed once for the stable part of every conversation the agents send.\n\n\
        It is reused for every part of a chapter, from memory or from the disk, so that a \
        long book pays for its guide and glossary only once.\n\n\
        The translation memory keeps every finished unit under a key of its inputs.\n";

    /// Options for the book in `dir` (`src/ch1.md`, written here) into `dir/out`.
    fn options(dir: &Path, profile: &str, mode: &str) -> TranslateOptions {
        let src = dir.join("src");
        std::fs::create_dir_all(&src).unwrap();
        std::fs::write(src.join("ch1.md"), BOOK).unwrap();
        use clap::ValueEnum;
        TranslateOptions {
            input: Some(src),
            out: dir.join("out"),
            progress: ProgressMode::Quiet,
            prompt_profile: ProfileChoice::from_str(profile, false).unwrap(),
            mode: Mode::from_str(mode, false).unwrap(),
            unit_tokens: 32,
            ..TranslateOptions::default()
        }
    }

    /// The translate prompts among `seen` (guide's or Hy-MT's).
    fn translate_prompts(
        seen: &[Vec<crate::engine::chat_template::Message>],
    ) -> Vec<&Vec<crate::engine::chat_template::Message>> {
        seen.iter()
            .filter(|m| {
                m.last()
                    .is_some_and(|u| asked_passage(&u.content).is_some())
            })
            .collect()
    }

    #[test]
    fn the_guide_profile_keeps_the_fingerprint_of_before() {
        // Checkpoints and translation memory made before profiles existed stay valid.
        let before = serde_json::to_string(&GenerationParams::default()).unwrap();
        assert_eq!(translate_params(PromptProfile::Guide, &[]).unwrap(), before);
        assert_ne!(translate_params(PromptProfile::HyMt, &[]).unwrap(), before);
        let defaults = TranslateOptions::default();
        assert_eq!(defaults.prompt_profile, ProfileChoice::Auto);
        // No model file: auto is the guide's.
        assert_eq!(backend_profile(&defaults).unwrap(), PromptProfile::Guide);
    }

    #[test]
    fn the_chosen_profile_writes_the_translate_prompts_and_keys_the_memory() {
        let dir = tempfile::tempdir().unwrap();
        let fp = |opts: &TranslateOptions| {
            Checkpoint::load(&opts.out)
                .expect("a checkpoint")
                .campaign_fingerprint
        };
        // The default (auto, no model file: the guide's prompt).
        let guide = options(dir.path(), "auto", "orchestrated");
        let mut b = StandIn { seen: Vec::new() };
        let s = run_with_backend(&guide, &mut b).unwrap();
        assert!(s.complete);
        let asked = translate_prompts(&b.seen);
        assert!(!asked.is_empty());
        assert!(asked.iter().all(|m| m[0].role == "system"));
        let guide_fp = fp(&guide);

        // Hy-MT's prompt: one user message, and nothing reused from the guide's run.
        let hy = options(dir.path(), "hy-mt", "orchestrated");
        let mut b = StandIn { seen: Vec::new() };
        let s = run_with_backend(&hy, &mut b).unwrap();
        assert!(s.complete);
        assert_eq!(s.reused, 0);
        let asked = translate_prompts(&b.seen);
        assert!(!asked.is_empty());
        for m in &asked {
            assert_eq!(m.len(), 1, "{m:?}");
            assert_eq!(m[0].role, "user");
            assert!(m[0].content.contains("将以下文本翻译为中文"), "{m:?}");
        }
        assert_ne!(fp(&hy), guide_fp);
        let book = std::fs::read_to_string(hy.out.join("book/ch1.md")).unwrap();
        assert!(book.starts_with("# 词"), "{book}");

        // The guide's again: its fingerprint as before, its units from the memory.
        let mut b = StandIn { seen: Vec::new() };
        let s = run_with_backend(&guide, &mut b).unwrap();
        assert!(s.complete);
        assert!(s.reused > 0);
        assert!(translate_prompts(&b.seen).is_empty());
        assert_eq!(fp(&guide), guide_fp);
    }

    #[test]
    fn single_mode_takes_a_profile_without_a_system_message() {
        let dir = tempfile::tempdir().unwrap();
        let opts = options(dir.path(), "hy-mt", "single");
        let mut b = StandIn { seen: Vec::new() };
        let s = run_with_backend(&opts, &mut b).unwrap();
        assert!(s.complete);
        let asked = translate_prompts(&b.seen);
        assert!(asked.len() > 1);
        for m in &asked {
            assert!(m.iter().all(|m| m.role != "system"), "{m:?}");
        }
        // One growing conversation: later prompts hold the earlier units and replies
        // (the fallback's pieces are asked on their own).
        let grown: Vec<_> = asked.iter().filter(|m| m.len() > 1).collect();
        assert!(!grown.is_empty());
        for m in grown {
            for (i, m) in m.iter().enumerate() {
                assert_eq!(m.role, if i % 2 == 0 { "user" } else { "assistant" });
            }
        }
    }
}
