//! The translate stage: every unit through the translation agent, with checks, one
//! revision and the fallback cascade ([`super::passage`]).
//!
//! In orchestrated mode up to `--batch` units are in flight, decoded together as the
//! backend's continuous batch ([`ChatBackend::complete_stream`]): a reply is checked the
//! moment it ends and the slot goes to the next unit (or a revision) at once — throughput
//! mode, whose replies are exactly those the requests get one at a time. A unit that
//! passes is checkpointed at once; one that still fails after its revision waits for the
//! batch to drain, then the fallback finishes it. Units found in the translation memory
//! are done without a call. Single mode's growing conversation takes one unit at a time.
//!
//! A chapter's opening unit goes first: when the model's reply for it passes whole, that
//! exchange becomes an earlier turn of every later prompt of the chapter — a worked example
//! in the chapter's own terms and voice (the title and introduction are where a chapter
//! names its subject), inside the stable prefix, so it costs one prefill per chapter. The
//! rest of the chapter waits for it; other chapters' units fill the batch meanwhile.

use super::checkpoint::UnitState;
use super::glossary_stage::Terms;
use super::house_terms::inject_house_terms;
use super::memory::{Exchange, MemoryEntry};
use super::options::Mode;
use super::passage;
use super::plan::max_new_tokens_for;
use super::state::RunState;
use crate::checks::{Finding, Severity};
use crate::engine::backend::{ChatBackend, ChatRequest, Completion, RequestFeed};
use crate::engine::chat_template::Message;
use crate::engine::generate::GenerationParams;
use crate::engine::stable_prefix::SplitPoint;
use crate::prompts::agents::translate_prompt_for;
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

/// Run the stage over every translatable unit of the plan.
pub fn run(m: &mut RunState, backend: &mut dyn ChatBackend, terms: &Terms) -> Result<Translated> {
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
        revisions: VecDeque::new(),
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
        let mut feed = Feed {
            s: &mut s,
            m: &mut *m,
            terms,
            live: Vec::new(),
            next_id: 0,
            fallbacks: Vec::new(),
            own: Vec::new(),
        };
        backend.complete_stream(batch, &mut feed)?;
        let Feed { fallbacks, own, .. } = feed;
        for (messages, completion_tokens) in own {
            let prompt = backend.prompt_tokens(&messages)?;
            s.out.orchestrated_peak = s.out.orchestrated_peak.max(prompt + completion_tokens);
        }
        if fallbacks.is_empty() {
            break;
        }
        for job in fallbacks {
            s.finish_by_fallback(m, backend, terms, job)?;
        }
    }
    // A run stopped early: units waiting for their revision go back to planned (as a crash
    // would leave them).
    for job in s.revisions.drain(..) {
        m.set_state(&m.plan.units[job.ci][job.ui], UnitState::Planned)?;
    }
    m.progress.finish_and_clear();
    Ok(s.out)
}

/// The stage as the backend's continuous batch sees it: the next unit's request when one
/// is ready, each reply checked the moment it arrives. A unit that still fails after its
/// attempts waits in `fallbacks`: the fallback calls the model itself, so it runs once the
/// batch has drained (and the units of a chapter whose opening it finishes wait for it).
struct Feed<'a, 'm> {
    s: &'a mut Scheduler,
    m: &'a mut RunState<'m>,
    terms: &'a Terms,
    /// Units whose requests are decoding: their ids, jobs and token allowances (reserved
    /// against the budget).
    live: Vec<(usize, UnitJob, usize)>,
    next_id: usize,
    fallbacks: Vec<UnitJob>,
    /// Single mode: each unit's own prompt and reply length (the orchestrated peak).
    own: Vec<(Vec<Message>, usize)>,
}

impl RequestFeed for Feed<'_, '_> {
    fn next_request(&mut self) -> Result<Option<(usize, ChatRequest)>> {
        let single = self.m.opts.mode == Mode::Single;
        // Single mode's conversation takes units strictly one after another.
        if self.s.out.stopped.is_some()
            || (single && !(self.live.is_empty() && self.fallbacks.is_empty()))
        {
            return Ok(None);
        }
        let lead = self.live.first().map(|(_, j, _)| (j.ci, j.ui));
        let busy = !(self.live.is_empty() && self.fallbacks.is_empty());
        let job = match self.s.revisions.pop_front() {
            Some(job) => job,
            None => match self.s.next_job(self.m, self.terms, lead, busy) {
                Some(job) => job,
                None => return Ok(None),
            },
        };
        // Budgets: each request in flight reserves its whole token allowance; one that does
        // not fit goes back to planned and the run stops once the flight has landed.
        let unit = &self.m.plan.units[job.ci][job.ui];
        let allowance = max_new_tokens_for(unit);
        let reserved: usize = self.live.iter().map(|(_, _, a)| a).sum();
        if let Some(reason) = self.m.over_budget(reserved + allowance) {
            self.s.out.stopped = Some(reason);
            self.m.set_state(unit, UnitState::Planned)?;
            return Ok(None);
        }
        let (req, own) = self.s.request(self.m, self.terms, &job)?;
        if let Some(messages) = own {
            self.own.push((messages, 0));
        }
        let id = self.next_id;
        self.next_id += 1;
        self.live.push((id, job, allowance));
        let m = &*self.m;
        self.m.progress.set_message(
            self.live
                .iter()
                .map(|(_, j, _)| {
                    format!(
                        "{} (attempt {})",
                        m.plan.units[j.ci][j.ui].id,
                        j.attempt + 1
                    )
                })
                .collect::<Vec<_>>()
                .join(", "),
        );
        Ok(Some((id, req)))
    }

    fn reply(&mut self, id: usize, done: Completion) -> Result<()> {
        let at = (self.live.iter().position(|(i, _, _)| *i == id))
            .ok_or_else(|| anyhow::anyhow!("a reply to request {id}, which is not in flight"))?;
        let (_, job, _) = self.live.remove(at);
        if let Some(own) = self
            .own
            .last_mut()
            .filter(|_| self.m.opts.mode == Mode::Single)
        {
            own.1 = done.completion_tokens;
        }
        if let Some(job) = self.s.take_reply(self.m, self.terms, job, done)? {
            self.fallbacks.push(job);
        }
        Ok(())
    }
}

struct Scheduler {
    out: Translated,
    /// Single mode's conversation so far.
    history: Vec<Message>,
    queue: VecDeque<(usize, usize)>,
    /// Units whose next attempt (a revision) is due, sent before new units.
    revisions: VecDeque<UnitJob>,
    params: GenerationParams,
    /// Each chapter's opening unit (its first to translate).
    openings: Vec<Option<usize>>,
    /// Each chapter's worked example: `None` until its opening is finished, then the
    /// opening's exchange if it passed whole.
    examples: Vec<Option<Option<Exchange>>>,
}

impl Scheduler {
    /// The next unit to send to the model, its chapter's example settled (or an opening);
    /// units found in the translation memory are done on the way. Among the next few
    /// ready units it takes the one closest in length to `lead`, the oldest unit in flight:
    /// a round of a backend without continuous batching lasts as long as its longest
    /// reply, so units of a size decode together (every reply is the one it gets alone, so
    /// only the time changes). With nothing `busy` (no unit in flight or awaiting the
    /// fallback) the queue's front is taken even if not ready: nothing it waits for is
    /// coming.
    fn next_job(
        &mut self,
        m: &mut RunState,
        terms: &Terms,
        lead: Option<(usize, usize)>,
        busy: bool,
    ) -> Option<UnitJob> {
        let single = m.opts.mode == Mode::Single;
        loop {
            let ready = |&(ci, ui): &(usize, usize)| {
                single || self.openings[ci] == Some(ui) || self.examples[ci].is_some()
            };
            let size = |&(ci, ui): &(usize, usize)| max_new_tokens_for(&m.plan.units[ci][ui]);
            let lead = lead.map(|l| size(&l));
            let at = self
                .queue
                .iter()
                .enumerate()
                .filter(|(_, q)| ready(q))
                .take(if lead.is_some() { LOOKAHEAD } else { 1 })
                .min_by_key(|(_, q)| lead.map_or(0, |l| size(q).abs_diff(l)))
                .map(|(at, _)| at)
                .or_else(|| (!busy && !self.queue.is_empty()).then_some(0))?;
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
            return Some(UnitJob {
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

    /// A unit's request for its next attempt; in single mode also the unit's own prompt (to
    /// report what the orchestrated mode's context would have been).
    fn request(
        &mut self,
        m: &mut RunState,
        terms: &Terms,
        job: &UnitJob,
    ) -> Result<(ChatRequest, Option<Vec<Message>>)> {
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
        Ok(match m.opts.mode {
            Mode::Orchestrated => (req, None),
            Mode::Single => {
                // One growing conversation: the prompt's opening (the system message; none
                // for a profile without one) once, then every unit and reply.
                let (asked, opening) = req
                    .messages
                    .split_last()
                    .ok_or_else(|| anyhow::anyhow!("a translation prompt with no message"))?;
                if self.history.is_empty() {
                    self.history.extend_from_slice(opening);
                }
                let mut messages = self.history.clone();
                messages.push(asked.clone());
                let split = SplitPoint {
                    message: messages.len() - 1,
                    offset: 0,
                };
                let own = req.messages;
                let req = ChatRequest {
                    messages,
                    split,
                    params: req.params,
                };
                (req, Some(own))
            }
        })
    }

    /// Check one reply: the unit is due for its revision, finished, or (returned) due for
    /// the fallback.
    fn take_reply(
        &mut self,
        m: &mut RunState,
        terms: &Terms,
        mut job: UnitJob,
        done: Completion,
    ) -> Result<Option<UnitJob>> {
        let unit = &m.plan.units[job.ci][job.ui];
        let attempt = job.attempt;
        self.out.context_peak = self
            .out
            .context_peak
            .max(done.prompt_tokens + done.completion_tokens);
        if m.opts.mode == Mode::Orchestrated {
            self.out.orchestrated_peak = self
                .out
                .orchestrated_peak
                .max(done.prompt_tokens + done.completion_tokens);
        }
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
            if self.out.stopped.is_some() {
                m.set_state(unit, UnitState::Planned)?;
            } else {
                self.revisions.push_back(job);
            }
            return Ok(None);
        }
        match job.best.take() {
            Some(best) if best.errors == 0 => {
                let attempts = job.attempt + 1;
                let done = (0, best.text, best.findings, best.exchange);
                self.finish(m, job, attempts, done)?;
                Ok(None)
            }
            _ => Ok(Some(job)),
        }
    }

    /// Finish a unit that still fails through the fallback cascade (segments, sentences,
    /// source sentence).
    fn finish_by_fallback(
        &mut self,
        m: &mut RunState,
        backend: &mut dyn ChatBackend,
        terms: &Terms,
        job: UnitJob,
    ) -> Result<()> {
        let unit = &m.plan.units[job.ci][job.ui];
        let skeleton = &Skeleton::of(unit);
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
        let attempts = job.attempt + 2;
        self.finish(m, job, attempts, (n, fb.text, fb.findings, exchange))
    }

    /// Record a finished unit (its error count, text, findings and worked example, after
    /// `attempts` tries) and checkpoint.
    fn finish(
        &mut self,
        m: &mut RunState,
        job: UnitJob,
        attempts: usize,
        (n_err, text, findings, exchange): (usize, String, Vec<Finding>, Option<Exchange>),
    ) -> Result<()> {
        let unit = &m.plan.units[job.ci][job.ui];
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
    m: &RunState,
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
    let p = translate_prompt_for(
        m.profile,
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
        params: passage::constrained_shown(
            params,
            &passage,
            (&opts.source_lang, &opts.target_lang),
            &found,
            &terms.names,
            shown,
            max,
        ),
    })
}
