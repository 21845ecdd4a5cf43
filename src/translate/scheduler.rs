//! The translate stage: every unit through the translation agent, with checks, one
//! revision and the fallback cascade ([`super::passage`]).
//!
//! In orchestrated mode up to `--batch` units are in flight: each round sends one request
//! per unit in flight (its first attempt or its revision) as one batch — throughput mode,
//! whose replies are exactly those the requests get one at a time — then checks every
//! reply. A unit leaves the flight when it passes or has used its revision (then the
//! fallback finishes it) and is checkpointed at once. Units found in the translation memory
//! are done without a call. Single mode's growing conversation takes one unit at a time.
//!
//! A chapter's opening unit goes first: when the model's reply for it passes whole, that
//! exchange becomes an earlier turn of every later prompt of the chapter — a worked example
//! in the chapter's own terms and voice (the title and introduction are where a chapter
//! names its subject), inside the stable prefix, so it costs one prefill per chapter. The
//! rest of the chapter waits for it; other chapters' units fill the batch meanwhile.

use super::checkpoint::UnitState;
use super::glossary_stage::Terms;
use super::manager::{inject_house_terms, Exchange, Manager, MemoryEntry, Mode};
use super::passage;
use crate::checks::{Finding, Severity};
use crate::engine::backend::{ChatBackend, ChatRequest, Completion};
use crate::engine::chat_template::Message;
use crate::engine::generate::GenerationParams;
use crate::engine::stable_prefix::SplitPoint;
use crate::prompts::agents::translate_prompt;
use crate::units::skeleton::Skeleton;
use crate::units::verbatim;
use crate::units::{Unit, UnitKind};
use crate::util::{sha256_hex, write_atomic};
use anyhow::Result;
use std::collections::VecDeque;

/// What the stage produced.
#[derive(Default)]
pub struct Translated {
    /// Restored translation of each unit (`None`: not translated, e.g. the run stopped).
    pub texts: Vec<Vec<Option<String>>>,
    /// Units reused from the translation memory.
    pub reused: usize,
    /// Units that needed more than one attempt.
    pub revised: usize,
    /// Largest prompt + completion seen (tokens).
    pub context_peak: usize,
    /// What the orchestrated mode's peak is (or would be, in single mode).
    pub orchestrated_peak: usize,
    /// Why the run stopped early (a budget or the deadline).
    pub stopped: Option<String>,
}

/// A unit being translated: where it is in the plan, its translation-memory key, and its
/// attempts so far (the findings to fix next and the best attempt).
struct UnitJob {
    ci: usize,
    ui: usize,
    key: String,
    attempt: usize,
    findings_text: Vec<String>,
    best: Option<Attempt>,
    /// The chapter's worked example this unit's prompts carry.
    example: Option<Exchange>,
}

/// A unit's best attempt so far: its error count, restored text and findings, and, for a
/// chapter's opening that passed whole, its exchange.
struct Attempt {
    errors: usize,
    text: String,
    findings: Vec<Finding>,
    exchange: Option<Exchange>,
}

/// How many ready units ahead of the queue's front a round may pick from to group units of
/// a similar length.
const LOOKAHEAD: usize = 8;

/// Token allowance for a unit's translation.
pub fn max_new_tokens_for(unit: &Unit) -> usize {
    passage::max_new_tokens(&unit.protected)
}

/// Run the stage over every translatable unit of the plan.
pub fn run(m: &mut Manager, backend: &mut dyn ChatBackend, terms: &Terms) -> Result<Translated> {
    let mut s = Scheduler {
        out: Translated {
            texts: m.plan.units.iter().map(|u| vec![None; u.len()]).collect(),
            ..Default::default()
        },
        history: Vec::new(),
        queue: m
            .plan
            .units
            .iter()
            .enumerate()
            .flat_map(|(ci, units)| {
                units
                    .iter()
                    .enumerate()
                    .filter(|(_, u)| u.kind == UnitKind::Translate)
                    .map(move |(ui, _)| (ci, ui))
            })
            .collect(),
        flight: Vec::new(),
        params: GenerationParams::default(),
        openings: m
            .plan
            .units
            .iter()
            .map(|u| u.iter().position(|u| u.kind == UnitKind::Translate))
            .collect(),
        examples: vec![None; m.plan.units.len()],
    };
    let batch = match m.opts.mode {
        Mode::Orchestrated => m.opts.batch.max(1),
        Mode::Single => 1,
    };
    loop {
        s.fill_flight(m, terms, batch);
        if s.flight.is_empty() || !s.reserve(m)? {
            break;
        }
        let (reqs, own) = s.requests(m, terms)?;
        let replies = if reqs.len() == 1 {
            vec![backend.complete(&reqs[0])?]
        } else {
            backend.complete_batch(&reqs)?
        };
        let jobs: Vec<UnitJob> = s.flight.drain(..).collect();
        for ((job, done), own) in jobs.into_iter().zip(replies).zip(own) {
            s.take_reply(m, backend, terms, job, done, own)?;
        }
        if s.out.stopped.is_some() {
            // Units still being revised go back to planned (as a crash would leave them).
            for job in s.flight.drain(..) {
                m.set_state(&m.plan.units[job.ci][job.ui], UnitState::Planned)?;
            }
            break;
        }
    }
    m.progress.finish_and_clear();
    Ok(s.out)
}

struct Scheduler {
    out: Translated,
    /// Single mode's conversation so far.
    history: Vec<Message>,
    queue: VecDeque<(usize, usize)>,
    flight: Vec<UnitJob>,
    params: GenerationParams,
    /// Each chapter's opening unit (its first to translate).
    openings: Vec<Option<usize>>,
    /// Each chapter's worked example: `None` until its opening is finished, then the
    /// opening's exchange if it passed whole.
    examples: Vec<Option<Option<Exchange>>>,
}

impl Scheduler {
    /// Fill the flight; units found in the translation memory are done at once.
    fn fill_flight(&mut self, m: &mut Manager, terms: &Terms, batch: usize) {
        while self.flight.len() < batch && self.out.stopped.is_none() {
            // The next unit whose chapter's example is settled, or an opening.
            let single = m.opts.mode == Mode::Single;
            let ready = |&(ci, ui): &(usize, usize)| {
                single || self.openings[ci] == Some(ui) || self.examples[ci].is_some()
            };
            // Among the next few ready units, the one closest in length to the flight's
            // first: a round lasts as long as its longest reply, so units of a size decode
            // together (every reply is the one it gets alone, so only the time changes).
            // (Nothing waits on an opening that is not in flight; the front is a safe pick.)
            let size = |&(ci, ui): &(usize, usize)| max_new_tokens_for(&m.plan.units[ci][ui]);
            let lead = self.flight.first().map(|j| size(&(j.ci, j.ui)));
            let Some(at) = self
                .queue
                .iter()
                .enumerate()
                .filter(|(_, q)| ready(q))
                .take(if lead.is_some() { LOOKAHEAD } else { 1 })
                .min_by_key(|(_, q)| lead.map_or(0, |l| size(q).abs_diff(l)))
                .map(|(at, _)| at)
                .or_else(|| (self.flight.is_empty() && !self.queue.is_empty()).then_some(0))
            else {
                break;
            };
            let (ci, ui) = self.queue.remove(at).expect("in the queue");
            let unit = &m.plan.units[ci][ui];
            let example = match &self.examples[ci] {
                Some(Some(ex)) if !single => Some(ex.clone()),
                _ => None,
            };
            let key = sha256_hex(
                format!(
                    "{}|{}|{}|{}|{:?}|{}{}",
                    unit.content_hash(),
                    terms.unit_hash(&unit.source),
                    m.inputs_key(),
                    m.opts.target_lang,
                    m.opts.mode,
                    unit.id,
                    example
                        .as_ref()
                        .map(|e| format!("|{}|{}", e.passage, e.reply))
                        .unwrap_or_default()
                )
                .as_bytes(),
            );
            if let Some(e) = m.read_memory(&key, unit) {
                if self.openings[ci] == Some(ui) {
                    self.examples[ci] = Some(e.exchange.clone());
                }
                self.out.texts[ci][ui] = Some(e.translation.clone());
                m.reuse_unit(unit, &key, &e);
                self.out.reused += 1;
                // Revised in the run that translated it: still a revised unit of the book.
                if e.attempts > 1 {
                    self.out.revised += 1;
                }
                m.progress.inc(1);
                continue;
            }
            self.flight.push(UnitJob {
                ci,
                ui,
                key,
                attempt: 0,
                findings_text: Vec::new(),
                best: None,
                example,
            });
        }
    }

    /// Budgets: each request of the round reserves its whole token allowance; the requests
    /// that do not fit go back to planned and the run stops after this round. `false`
    /// when nothing is left to send.
    fn reserve(&mut self, m: &mut Manager) -> Result<bool> {
        let mut reserved = 0;
        let mut fit = 0;
        for job in &self.flight {
            reserved += max_new_tokens_for(&m.plan.units[job.ci][job.ui]);
            if let Some(reason) = m.over_budget(reserved) {
                self.out.stopped = Some(reason);
                break;
            }
            fit += 1;
        }
        for job in self.flight.drain(fit..) {
            m.set_state(&m.plan.units[job.ci][job.ui], UnitState::Planned)?;
        }
        Ok(!self.flight.is_empty())
    }

    /// This round's requests; in single mode also each unit's own prompt (to report what
    /// the orchestrated mode's context would have been).
    #[allow(clippy::type_complexity)]
    fn requests(
        &mut self,
        m: &mut Manager,
        terms: &Terms,
    ) -> Result<(Vec<ChatRequest>, Vec<Option<Vec<Message>>>)> {
        let mut reqs = Vec::with_capacity(self.flight.len());
        let mut own_prompts = Vec::with_capacity(self.flight.len());
        for job in &self.flight {
            let unit = &m.plan.units[job.ci][job.ui];
            let state = if job.attempt == 0 {
                UnitState::Running
            } else {
                UnitState::Revising
            };
            m.set_state(unit, state)?;
            let req = unit_request(
                m,
                terms,
                unit,
                &Skeleton::of(unit).model_text(),
                &job.findings_text,
                &self.params,
                None,
                job.example.as_ref(),
            )?;
            let (messages, split, own) = match m.opts.mode {
                Mode::Orchestrated => (req.messages, req.split, None),
                Mode::Single => {
                    // One growing conversation: system once, then every unit and reply.
                    if self.history.is_empty() {
                        self.history.push(req.messages[0].clone());
                    }
                    let mut msgs = self.history.clone();
                    msgs.push(req.messages[1].clone());
                    let split = SplitPoint {
                        message: msgs.len() - 1,
                        offset: 0,
                    };
                    (msgs, split, Some(req.messages))
                }
            };
            reqs.push(ChatRequest {
                messages,
                split,
                params: req.params,
            });
            own_prompts.push(own);
        }
        m.progress.set_message(
            self.flight
                .iter()
                .map(|j| {
                    format!(
                        "{} (attempt {})",
                        m.plan.units[j.ci][j.ui].id,
                        j.attempt + 1
                    )
                })
                .collect::<Vec<_>>()
                .join(", "),
        );
        Ok((reqs, own_prompts))
    }

    /// Check one reply: back into the flight for its revision, or finished.
    fn take_reply(
        &mut self,
        m: &mut Manager,
        backend: &mut dyn ChatBackend,
        terms: &Terms,
        mut job: UnitJob,
        done: Completion,
        own: Option<Vec<Message>>,
    ) -> Result<()> {
        let unit = &m.plan.units[job.ci][job.ui];
        let attempt = job.attempt;
        self.out.context_peak = self
            .out
            .context_peak
            .max(done.prompt_tokens + done.completion_tokens);
        let orchestrated_prompt = match &own {
            None => done.prompt_tokens,
            Some(messages) => backend.prompt_tokens(messages)?,
        };
        self.out.orchestrated_peak = self
            .out
            .orchestrated_peak
            .max(orchestrated_prompt + done.completion_tokens);
        m.set_state(unit, UnitState::Reviewing)?;
        let skeleton = Skeleton::of(unit);
        let (text, findings) = match passage::accept_unit(unit, &skeleton, &done, &terms.ctx) {
            Ok((text, findings)) => (Some(text), findings),
            Err(findings) => (None, findings),
        };
        let errors: Vec<&Finding> = findings
            .iter()
            .filter(|f| f.severity == Severity::Error)
            .collect();
        let n_err = errors.len();
        let outcome = match (n_err, attempt < m.opts.revisions) {
            (0, _) => "ok",
            (_, true) => "revise",
            _ => "fallback",
        };
        let agent = if attempt == 0 { "translate" } else { "revise" };
        m.record_call(agent, &unit.id, &done, outcome);
        if let Some(f) = errors.first() {
            // The call log says why a unit needed more: its first error.
            let evidence: String = f.evidence.chars().take(120).collect();
            m.log(format!(
                "{}: {outcome} after [{}] {evidence}",
                unit.id, f.category
            ));
        }
        job.findings_text = errors
            .iter()
            .map(|f| format!("[{}] {} → {}", f.category, f.evidence, f.action))
            .collect();
        if let Some(text) = text {
            if job.best.as_ref().is_none_or(|b| n_err < b.errors) {
                // Only a chapter's opening becomes a worked example.
                let opening = self.openings[job.ci] == Some(job.ui);
                let exchange = (n_err == 0 && opening).then(|| {
                    let shown = verbatim::spans(unit, &skeleton.model_text());
                    let lines = verbatim::hide(done.text.trim(), &shown)
                        .split('\n')
                        .filter(|l| !l.trim().is_empty())
                        .zip(
                            (skeleton.segments.iter().map(|s| s.text.as_str()))
                                .chain(std::iter::repeat("")),
                        )
                        .map(|(l, source)| passage::typeset(&terms.ctx, source, l))
                        .collect::<Vec<_>>()
                        .join("\n");
                    worked_example(unit, &skeleton, terms, &lines)
                });
                job.best = Some(Attempt {
                    errors: n_err,
                    text,
                    findings,
                    exchange,
                });
            }
        }
        if n_err > 0 && attempt < m.opts.revisions {
            job.attempt += 1;
            self.flight.push(job);
            return Ok(());
        }
        self.finish(m, backend, terms, job, &skeleton)
    }

    /// Record a finished unit and checkpoint. A unit that still fails goes through the
    /// fallback cascade (segments, sentences, source sentence) first.
    fn finish(
        &mut self,
        m: &mut Manager,
        backend: &mut dyn ChatBackend,
        terms: &Terms,
        mut job: UnitJob,
        skeleton: &Skeleton,
    ) -> Result<()> {
        let unit = &m.plan.units[job.ci][job.ui];
        let mut attempts = job.attempt + 1;
        let (n_err, text, findings, exchange) = match job.best.take() {
            Some(best) if best.errors == 0 => (0, best.text, best.findings, best.exchange),
            _ => {
                let params = self.params.clone();
                let example = job.example.as_ref();
                let request = |text: &str, findings: &[String], max: usize| {
                    unit_request(m, terms, unit, text, findings, &params, Some(max), example)
                };
                let keep = |text: &str| inject_house_terms(text, &terms.glossary);
                let fb = passage::fallback(backend, unit, skeleton, &request, &keep, &terms.ctx)?;
                for (note, c, outcome) in &fb.calls {
                    m.record_call("fallback", note, c, outcome);
                }
                attempts += 1;
                let n = fb
                    .findings
                    .iter()
                    .filter(|f| f.severity == Severity::Error)
                    .count();
                // An opening finished piece by piece is still the chapter's worked example
                // when every piece passed: its lines are the model's own translation.
                let opening = self.openings[job.ci] == Some(job.ui);
                let exchange = match (&fb.model_lines, n, opening) {
                    (Some(lines), 0, true) => {
                        Some(worked_example(unit, skeleton, terms, &lines.join("\n")))
                    }
                    _ => None,
                };
                (n, fb.text, fb.findings, exchange)
            }
        };
        if self.openings[job.ci] == Some(job.ui) {
            self.examples[job.ci] = Some(exchange.clone());
        }
        let state = if n_err == 0 {
            UnitState::Passed
        } else {
            UnitState::Blocked
        };
        if attempts > 1 {
            self.out.revised += 1;
        }
        if m.opts.mode == Mode::Single {
            self.history.push(Message::user(unit.protected.clone()));
            self.history.push(Message::assistant(text.clone()));
        }
        let entry = MemoryEntry {
            unit_id: unit.id.clone(),
            source_hash: unit.content_hash(),
            translation: text.clone(),
            state,
            attempts,
            errors: n_err,
            findings,
            exchange,
        };
        write_atomic(
            &m.memory_path(&job.key),
            serde_json::to_string_pretty(&entry)?.as_bytes(),
        )?;
        self.out.texts[job.ci][job.ui] = Some(text);
        m.finish_unit(unit, &job.key, &entry)?;
        Ok(())
    }
}

/// A chapter opening's worked example: the unit's passage and its accepted `reply` (the
/// typeset lines, placeholders as tokens), both with the inline code the model was shown.
fn worked_example(unit: &Unit, skeleton: &Skeleton, terms: &Terms, reply: &str) -> Exchange {
    let model_text = skeleton.model_text();
    let shown = verbatim::spans(unit, &model_text);
    Exchange {
        passage: verbatim::show(&terms.passage(&model_text), &shown),
        reply: verbatim::show(reply, &shown),
    }
}

/// The translation request for `passage` (a unit's model text, or a piece of it in the
/// fallback): the agent's prompt with the unit's terms, the chapter's worked example and
/// the passage's constraint.
#[allow(clippy::too_many_arguments)]
fn unit_request(
    m: &Manager,
    terms: &Terms,
    unit: &Unit,
    passage: &str,
    findings: &[String],
    params: &GenerationParams,
    max_new_tokens: Option<usize>,
    example: Option<&Exchange>,
) -> Result<ChatRequest> {
    let opts = m.opts;
    let passage = terms.passage(passage);
    let found = terms.glossary.found_in(&unit.source);
    // Inline code is shown as written; the constraint judges the text mapped back.
    let shown = verbatim::spans(unit, &passage);
    let p = translate_prompt(
        &m.plan.guide,
        &opts.source_lang,
        &opts.target_lang,
        &terms.glossary.entries,
        &found,
        findings,
        &verbatim::show(&passage, &shown),
        example.map(|e| (e.passage.as_str(), e.reply.as_str())),
    )?;
    let max = max_new_tokens.unwrap_or_else(|| max_new_tokens_for(unit));
    Ok(ChatRequest {
        messages: p.messages,
        split: p.split,
        params: passage::constrained_shown(params, &passage, &opts.target_lang, &found, shown, max),
    })
}
