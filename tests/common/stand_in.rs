//! A stand-in chat backend for tests of the pipeline's structure guarantees: it answers a
//! translate prompt with whatever `reply` makes of the passage, and every other prompt
//! (glossary proposals, reviews) with `OK`. Never presented as translation: the tests that
//! use it check what the manager does with any answer; the real-model tests check the rest.

use quire::engine::backend::{ChatBackend, ChatRequest, Completion};
use quire::engine::chat_template::Message;
use quire::engine::generate::FinishReason;

/// The passage a translate prompt asks for (the text after the instruction line).
pub fn passage(messages: &[Message]) -> Option<String> {
    let user = &messages.last()?.content;
    let at = user.rfind("Translate into")?;
    let rest = &user[at..];
    let start = rest.find(":\n\n")? + 3;
    Some(rest[start..].trim_end().to_string())
}

/// Answers with `reply(call number, passage)`: the text and how the reply ended.
pub struct StandIn<F: FnMut(u64, &str) -> (String, FinishReason)> {
    pub calls: u64,
    pub reply: F,
}

impl<F: FnMut(u64, &str) -> (String, FinishReason)> StandIn<F> {
    pub fn new(reply: F) -> Self {
        StandIn { calls: 0, reply }
    }
}

impl<F: FnMut(u64, &str) -> (String, FinishReason)> ChatBackend for StandIn<F> {
    fn complete(&mut self, req: &ChatRequest) -> anyhow::Result<Completion> {
        self.calls += 1;
        let (text, finish) = match passage(&req.messages) {
            Some(p) => (self.reply)(self.calls, &p),
            None => ("OK".to_string(), FinishReason::Eos),
        };
        Ok(Completion {
            completion_tokens: text.chars().count(),
            text,
            prompt_tokens: 100,
            cached_tokens: 0,
            cache_source: "none",
            latency_seconds: 0.0,
            busy_seconds: 0.0,
            ttft_seconds: 0.0,
            finish,
            decode_seconds: 0.0,
            draft_proposed: 0,
            draft_accepted: 0,
        })
    }
    fn count_tokens(&self, text: &str) -> anyhow::Result<usize> {
        Ok(text.len() / 4 + 1)
    }
    fn prompt_tokens(&self, messages: &[Message]) -> anyhow::Result<usize> {
        Ok(messages.iter().map(|m| m.content.len() / 4 + 1).sum())
    }
    fn model_name(&self) -> String {
        "stand-in".into()
    }
    fn device_name(&self) -> String {
        "none".into()
    }
}
