//! Rendering conversations through a model's Jinja chat template (minijinja), as the
//! model's authors do in Python: the template stored in the GGUF by default, or one of the
//! templates shipped in `chat-templates/`.

use crate::engine::gguf::GgufFile;
use anyhow::{anyhow, Context, Result};
use minijinja::{Environment, Error, ErrorKind};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// "system", "user" or "assistant".
    pub role: String,
    /// The text.
    pub content: String,
}

impl Message {
    /// A message with `role` and `content`.
    pub fn new(role: &str, content: impl Into<String>) -> Self {
        Self {
            role: role.to_string(),
            content: content.into(),
        }
    }
    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        Self::new("system", content)
    }
    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Self::new("user", content)
    }
    /// An assistant message.
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::new("assistant", content)
    }
}

/// Templates shipped with Quire (`chat-templates/*.jinja`), by name.
pub const BUILTIN_TEMPLATES: &[(&str, &str)] = &[
    ("chatml", include_str!("../../chat-templates/chatml.jinja")),
    ("qwen2", include_str!("../../chat-templates/qwen2.jinja")),
    (
        "smollm2",
        include_str!("../../chat-templates/smollm2.jinja"),
    ),
];

/// A chat template with the special-token strings it may refer to.
#[derive(Debug, Clone)]
pub struct ChatTemplate {
    /// Jinja source.
    pub source: String,
    /// Where it came from ("gguf", a built-in name, or a path).
    pub origin: String,
    /// `bos_token` as seen by the template.
    pub bos_token: String,
    /// `eos_token` as seen by the template.
    pub eos_token: String,
}

fn raise_exception(msg: String) -> Result<String, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, msg))
}

fn strftime_now(fmt: String) -> String {
    // Templates use this for "today's date" in system prompts; a fixed clock keeps prompts
    // (and therefore prefix caches) stable across runs.
    let _ = fmt;
    "26 Jul 2024".to_string()
}

impl ChatTemplate {
    /// The template embedded in the GGUF (`tokenizer.chat_template`), or ChatML when absent.
    pub fn from_gguf(gguf: &GgufFile) -> Result<Self> {
        let tok = |key: &str| -> String {
            let Ok(id) = gguf.meta_usize(key) else {
                return String::new();
            };
            gguf.meta("tokenizer.ggml.tokens")
                .ok()
                .and_then(|v| v.to_vec().ok())
                .and_then(|v| v.get(id).and_then(|t| t.to_string().ok().cloned()))
                .unwrap_or_default()
        };
        let (source, origin) = match gguf.meta_str("tokenizer.chat_template") {
            Ok(s) => (s.to_string(), "gguf".to_string()),
            Err(_) => (
                builtin("chatml")?.to_string(),
                "chatml (no template in GGUF)".to_string(),
            ),
        };
        let t = Self {
            source,
            origin,
            bos_token: tok("tokenizer.ggml.bos_token_id"),
            eos_token: tok("tokenizer.ggml.eos_token_id"),
        };
        t.check()?;
        Ok(t)
    }

    /// A built-in template by name, or a template file by path.
    pub fn named(name: &str) -> Result<Self> {
        let source = match builtin(name) {
            Ok(s) => s.to_string(),
            Err(_) if Path::new(name).is_file() => std::fs::read_to_string(name)
                .with_context(|| format!("cannot read chat template {name}"))?,
            Err(e) => return Err(e),
        };
        let t = Self {
            source,
            origin: name.to_string(),
            bos_token: String::new(),
            eos_token: String::new(),
        };
        t.check()?;
        Ok(t)
    }

    fn env(&self) -> Result<Environment<'_>> {
        let mut env = Environment::new();
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_template("chat", &self.source)
            .map_err(|e| anyhow!("chat template ({}) does not parse: {e}", self.origin))?;
        Ok(env)
    }

    fn check(&self) -> Result<()> {
        self.env().map(|_| ())
    }

    /// Render `messages`; with `add_generation_prompt` the text ends where the assistant's
    /// reply begins.
    pub fn render(&self, messages: &[Message], add_generation_prompt: bool) -> Result<String> {
        let env = self.env()?;
        let tmpl = env.get_template("chat")?;
        tmpl.render(minijinja::context! {
            messages => messages,
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos_token,
            eos_token => self.eos_token,
        })
        .map_err(|e| anyhow!("chat template ({}) failed to render: {e}", self.origin))
    }
}

fn builtin(name: &str) -> Result<&'static str> {
    BUILTIN_TEMPLATES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, s)| *s)
        .ok_or_else(|| {
            let names: Vec<_> = BUILTIN_TEMPLATES.iter().map(|(n, _)| *n).collect();
            anyhow!(
                "unknown chat template {name:?}: use one of {} or a file path",
                names.join(", ")
            )
        })
}
