//! Rendering conversations through a model's Jinja chat template (minijinja), as the
//! model's authors do in Python (`transformers`' `apply_chat_template`: `trim_blocks`,
//! `lstrip_blocks`, Python's string methods): the template stored in the GGUF by default;
//! for a GGUF without one, the template of its family shipped in `chat-templates/`, chosen
//! from its architecture ([`family_template`]); or any shipped template by name.
//!
//! Every prompt is rendered with reasoning off (`enable_thinking = false`: Qwen3's template
//! then writes an empty `<think>` block where the reply begins), and [`strip_reasoning`]
//! removes a reasoning block a reply may still open with, so that it never reaches a book.

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
    ("gemma3", include_str!("../../chat-templates/gemma3.jinja")),
    ("qwen3", include_str!("../../chat-templates/qwen3.jinja")),
    (
        "hunyuan",
        include_str!("../../chat-templates/hunyuan.jinja"),
    ),
    (
        "hunyuan-dense",
        include_str!("../../chat-templates/hunyuan-dense.jinja"),
    ),
];

/// The shipped template for a GGUF that carries none, from its `general.architecture` and,
/// for Hunyuan, its vocabulary (`has_token`: whether a token string is in it): `gemma3` for
/// Gemma (which has no system role), `qwen3` for Qwen3, and for the Hunyuan dense family
/// (Hunyuan-MT, HY-MT1.5, Hy-MT2) `hunyuan-dense` when the vocabulary has the `<｜hy_User｜>`
/// token (the 0.5B–4B models, HY-MT1.5-1.8B, Hy-MT2-1.8B), else `hunyuan` (the
/// `<|startoftext|>`/`<|extra_0|>` format of Hunyuan-MT-7B and HY-MT1.5-7B). Everything
/// else, `qwen2` and `llama` included, gets ChatML, as before.
pub fn family_template(architecture: &str, has_token: impl Fn(&str) -> bool) -> &'static str {
    match architecture {
        "gemma" | "gemma2" | "gemma3" => "gemma3",
        "qwen3" | "qwen3moe" => "qwen3",
        "hunyuan-dense" if has_token("<｜hy_User｜>") => "hunyuan-dense",
        "hunyuan-dense" => "hunyuan",
        _ => "chatml",
    }
}

/// `text` without the reasoning block it may open with: a leading `<think>…</think>` (after
/// any whitespace) and the line breaks after it are removed; a reply that opens a reasoning
/// block and never closes it (cut short while reasoning) has no answer, and gives `""`.
/// Text that does not open with `<think>` is returned as it is. For the place where a
/// model's reply comes back to the agents, so that a reasoning model's thoughts never reach
/// a book.
pub fn strip_reasoning(text: &str) -> &str {
    const OPEN: &str = "<think>";
    const CLOSE: &str = "</think>";
    let Some(inside) = text.trim_start().strip_prefix(OPEN) else {
        return text;
    };
    match inside.find(CLOSE) {
        Some(end) => inside[end + CLOSE.len()..].trim_start_matches(['\n', '\r']),
        None => "",
    }
}

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
    /// The template embedded in the GGUF (`tokenizer.chat_template`); when absent, the
    /// shipped template of the model's family ([`family_template`]; ChatML for the others).
    pub fn from_gguf(gguf: &GgufFile) -> Result<Self> {
        let tokens = gguf
            .meta("tokenizer.ggml.tokens")
            .ok()
            .and_then(|v| v.to_vec().ok());
        let tok = |key: &str| -> String {
            let Ok(id) = gguf.meta_usize(key) else {
                return String::new();
            };
            tokens
                .and_then(|v| v.get(id))
                .and_then(|t| t.to_string().ok().cloned())
                .unwrap_or_default()
        };
        let (source, origin) = match gguf.meta_str("tokenizer.chat_template") {
            Ok(s) => (s.to_string(), "gguf".to_string()),
            Err(_) => {
                let arch = gguf.architecture().unwrap_or_default();
                let has_token = |t: &str| {
                    tokens.is_some_and(|v| {
                        v.iter()
                            .any(|x| x.to_string().is_ok_and(|x| x.as_str() == t))
                    })
                };
                let name = family_template(arch, has_token);
                let origin = if name == "chatml" {
                    "chatml (no template in GGUF)".to_string()
                } else {
                    format!("{name} (no template in GGUF; shipped for architecture {arch})")
                };
                (builtin(name)?.to_string(), origin)
            }
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
        // As `transformers` renders chat templates (and llama.cpp's Jinja engine does).
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
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
    /// reply begins. Reasoning is off (`enable_thinking` is false; templates without that
    /// switch ignore it).
    pub fn render(&self, messages: &[Message], add_generation_prompt: bool) -> Result<String> {
        self.render_with(messages, add_generation_prompt, Some(false))
    }

    /// [`Self::render`] with `enable_thinking` as given (`None`: undefined, as
    /// `apply_chat_template` leaves it unless asked).
    fn render_with(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
        enable_thinking: Option<bool>,
    ) -> Result<String> {
        let env = self.env()?;
        let tmpl = env.get_template("chat")?;
        let mut ctx = minijinja::context! {
            messages => messages,
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos_token,
            eos_token => self.eos_token,
        };
        if let Some(on) = enable_thinking {
            ctx = minijinja::context! { enable_thinking => on, ..ctx };
        }
        tmpl.render(ctx)
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn fixture(name: &str) -> Value {
        let p = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/templates")
            .join(name);
        serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap()
    }

    fn template(source: &str, origin: &str, bos: &str, eos: &str) -> ChatTemplate {
        let t = ChatTemplate {
            source: source.to_string(),
            origin: origin.to_string(),
            bos_token: bos.to_string(),
            eos_token: eos.to_string(),
        };
        t.check().unwrap();
        t
    }

    fn shipped(name: &str) -> ChatTemplate {
        ChatTemplate::named(name).unwrap()
    }

    fn messages(v: &Value) -> Vec<Message> {
        serde_json::from_value(v.clone()).unwrap()
    }

    #[test]
    fn templates_render_as_python_jinja2_does() {
        // Every (template, conversation) of tests/fixtures/templates/families.json: the
        // model authors' own templates (Qwen3's and Gemma 3's, as their GGUFs carry them),
        // the shipped ones and the default model's GGUF template, rendered by minijinja
        // exactly as transformers renders them with jinja2.
        let f = fixture("families.json");
        let qwen25 = fixture("qwen2.5-coder-0.5b.json");
        let specials = |name: &str| match name {
            "gemma3" => ("<bos>", "<eos>"),
            "hunyuan" => ("<|startoftext|>", "<|eos|>"),
            "hunyuan-dense" => ("<｜hy_begin▁of▁sentence｜>", "<｜hy_place▁holder▁no▁2｜>"),
            "qwen2" | "qwen3" => ("", "<|im_end|>"),
            _ => ("", ""),
        };
        let mut checked = 0;
        for r in f["renderings"].as_array().unwrap() {
            let kind = r["template"].as_str().unwrap();
            let t = match kind.split_once(':').unwrap() {
                ("reference", name) => {
                    let refr = &f["references"][name];
                    template(
                        refr["template"].as_str().unwrap(),
                        kind,
                        refr["bos_token"].as_str().unwrap(),
                        refr["eos_token"].as_str().unwrap(),
                    )
                }
                ("shipped", name) => {
                    let (bos, eos) = specials(name);
                    template(builtin(name).unwrap(), kind, bos, eos)
                }
                ("gguf", _) => template(
                    qwen25["chat_template"].as_str().unwrap(),
                    kind,
                    qwen25["bos_token"].as_str().unwrap(),
                    qwen25["eos_token"].as_str().unwrap(),
                ),
                other => panic!("unknown template kind {other:?}"),
            };
            let conv = &f["conversations"][r["conversation"].as_str().unwrap()];
            let got = t.render_with(
                &messages(&conv["messages"]),
                conv["add_generation_prompt"].as_bool().unwrap(),
                r["enable_thinking"].as_bool(),
            );
            match r["rendered"].as_str() {
                Some(want) => assert_eq!(got.unwrap(), want, "{kind} on {}", r["conversation"]),
                None => assert!(
                    got.is_err(),
                    "{kind} on {}: jinja2 refused it",
                    r["conversation"]
                ),
            }
            checked += 1;
        }
        assert!(checked >= 60, "{checked} renderings");
    }

    #[test]
    fn shipped_family_templates_agree_with_the_authors_templates() {
        // gemma3 and qwen3 render every fixture conversation as Google's and Qwen's own
        // templates do (Quire's way: reasoning off).
        let f = fixture("families.json");
        for (mine, theirs) in [("gemma3", "gemma3-it"), ("qwen3", "qwen3")] {
            let refr = &f["references"][theirs];
            let reference = template(
                refr["template"].as_str().unwrap(),
                theirs,
                refr["bos_token"].as_str().unwrap(),
                refr["eos_token"].as_str().unwrap(),
            );
            let ours = ChatTemplate {
                bos_token: reference.bos_token.clone(),
                ..shipped(mine)
            };
            for (name, conv) in f["conversations"].as_object().unwrap() {
                let msgs = messages(&conv["messages"]);
                let gen = conv["add_generation_prompt"].as_bool().unwrap();
                assert_eq!(
                    ours.render(&msgs, gen).unwrap(),
                    reference.render(&msgs, gen).unwrap(),
                    "{mine} vs {theirs} on {name}"
                );
            }
        }
    }

    #[test]
    fn the_default_models_templates_render_as_their_fixtures_say() {
        // The llama.cpp-fixture templates (Qwen2.5 GGUF, SmolLM2 GGUF), without a model.
        for name in ["qwen2.5-coder-0.5b.json", "smollm2-135m.json"] {
            let f = fixture(name);
            let t = template(
                f["chat_template"].as_str().unwrap(),
                name,
                f["bos_token"].as_str().unwrap(),
                f["eos_token"].as_str().unwrap(),
            );
            let got = t
                .render(
                    &messages(&f["messages"]),
                    f["add_generation_prompt"].as_bool().unwrap(),
                )
                .unwrap();
            assert_eq!(got, f["rendered"].as_str().unwrap(), "{name}");
        }
    }

    #[test]
    fn the_default_models_prompts_are_unchanged() {
        // The agents' prompts through the Qwen2.5 GGUF template (the default model family's;
        // the 1.5B's differs from this 0.5B's only inside the tools branch's text) render
        // byte for byte as before the renderer took transformers' settings (trim_blocks,
        // lstrip_blocks) and the reasoning switch.
        use crate::glossary::GlossaryEntry;
        use crate::prompts::agents;
        let f = fixture("qwen2.5-coder-0.5b.json");
        let source = f["chat_template"].as_str().unwrap();
        let before = |messages: &[Message]| -> String {
            let mut env = Environment::new();
            env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
            env.add_function("raise_exception", raise_exception);
            env.add_function("strftime_now", strftime_now);
            env.add_template("chat", source).unwrap();
            env.get_template("chat")
                .unwrap()
                .render(minijinja::context! {
                    messages => messages,
                    add_generation_prompt => true,
                    bos_token => f["bos_token"].as_str().unwrap(),
                    eos_token => f["eos_token"].as_str().unwrap(),
                })
                .unwrap()
        };
        let now = template(
            source,
            "gguf",
            f["bos_token"].as_str().unwrap(),
            f["eos_token"].as_str().unwrap(),
        );
        let g = vec![GlossaryEntry::house("prefix cache", "前缀缓存")];
        let guide = agents::DEFAULT_GUIDE;
        let prompts = [
            agents::translate_prompt(guide, "en", "zh-CN", &g, &g, &[], "A {{1}}.\nB.", None),
            agents::translate_prompt(
                guide,
                "en",
                "zh-CN",
                &g,
                &[],
                &["missing {{1}}".into()],
                "C.",
                Some(("A.", "甲。")),
            ),
            agents::glossary_prompt("en", "zh-CN", &g, "KV cache", "The KV cache grows."),
            agents::review_prompt("en", "zh-CN", &g, "One.", "一。"),
            agents::emphasis_prompt(
                "en",
                "zh-CN",
                "The **cache** is warm.",
                "缓存是热的。",
                "cache",
            ),
        ];
        for p in prompts {
            let p = p.unwrap();
            assert_eq!(now.render(&p.messages, true).unwrap(), before(&p.messages));
        }
    }

    #[test]
    fn gemma_folds_the_system_message_into_the_first_user_turn() {
        let msgs = [
            Message::system("Translate into Chinese."),
            Message::user("Hello.\n"),
        ];
        assert_eq!(
            shipped("gemma3").render(&msgs, true).unwrap(),
            "<bos><start_of_turn>user\nTranslate into Chinese.\n\nHello.<end_of_turn>\n<start_of_turn>model\n"
        );
        let err = shipped("gemma3")
            .render(&[Message::user("a"), Message::user("b")], true)
            .unwrap_err();
        assert!(format!("{err:#}").contains("alternate"), "{err:#}");
    }

    #[test]
    fn qwen3_turns_reasoning_off_where_the_reply_begins() {
        let msgs = [Message::system("S"), Message::user("U")];
        let text = shipped("qwen3").render(&msgs, true).unwrap();
        assert_eq!(
            text,
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
        );
        // Templates without the switch ignore it: ChatML as it always was.
        assert_eq!(
            shipped("chatml").render(&msgs, true).unwrap(),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n"
        );
    }

    #[test]
    fn hunyuan_formats_are_the_documented_ones() {
        // The <|startoftext|> format (Hunyuan-MT-7B, HY-MT1.5-7B): <|extra_0|> is where the
        // reply begins; no <|startoftext|> right after a leading system message.
        let sys_user = [Message::system("S"), Message::user("U")];
        let example = [
            Message::system("S"),
            Message::user("U1"),
            Message::assistant("A1"),
            Message::user("U2"),
        ];
        let h = shipped("hunyuan");
        assert_eq!(
            h.render(&sys_user, true).unwrap(),
            "<|startoftext|>S<|extra_4|>U<|extra_0|>"
        );
        assert_eq!(
            h.render(&[Message::user("U")], true).unwrap(),
            "<|startoftext|>U<|extra_0|>"
        );
        assert_eq!(
            h.render(&example, true).unwrap(),
            "<|startoftext|>S<|extra_4|>U1<|extra_0|>A1<|eos|><|startoftext|>U2<|extra_0|>"
        );
        // The <｜hy_…｜> format (HY-MT1.5-1.8B, Hy-MT2-1.8B; llama.cpp's hunyuan-dense).
        let d = shipped("hunyuan-dense");
        assert_eq!(
            d.render(&sys_user, true).unwrap(),
            "<｜hy_begin▁of▁sentence｜>S<｜hy_place▁holder▁no▁3｜><｜hy_User｜>U<｜hy_Assistant｜>"
        );
        assert_eq!(
            d.render(&[Message::user("U")], true).unwrap(),
            "<｜hy_begin▁of▁sentence｜><｜hy_User｜>U<｜hy_Assistant｜>"
        );
        assert_eq!(
            d.render(&example, true).unwrap(),
            "<｜hy_begin▁of▁sentence｜>S<｜hy_place▁holder▁no▁3｜><｜hy_User｜>U1<｜hy_Assistant｜>A1<｜hy_place▁holder▁no▁2｜><｜hy_User｜>U2<｜hy_Assistant｜>"
        );
        assert_eq!(
            d.render(&[Message::user("U")], false).unwrap(),
            "<｜hy_begin▁of▁sentence｜><｜hy_User｜>U<｜hy_place▁holder▁no▁8｜>"
        );
    }

    #[test]
    fn a_gguf_without_a_template_gets_its_familys() {
        let none = |_: &str| false;
        let hy = |t: &str| t == "<｜hy_User｜>";
        assert_eq!(family_template("gemma3", none), "gemma3");
        assert_eq!(family_template("qwen3", none), "qwen3");
        assert_eq!(family_template("hunyuan-dense", none), "hunyuan");
        assert_eq!(family_template("hunyuan-dense", hy), "hunyuan-dense");
        // Unchanged for the architectures Quire ran before.
        assert_eq!(family_template("qwen2", none), "chatml");
        assert_eq!(family_template("llama", none), "chatml");
        for (name, _) in BUILTIN_TEMPLATES {
            ChatTemplate::named(name).unwrap();
        }
    }

    #[test]
    fn a_leading_reasoning_block_is_stripped() {
        assert_eq!(
            strip_reasoning("<think>\nplan\n</think>\n\n你好。"),
            "你好。"
        );
        assert_eq!(
            strip_reasoning("<think>\n\n</think>\n\n你好。\n再见。"),
            "你好。\n再见。"
        );
        assert_eq!(strip_reasoning("\n<think>x</think>答"), "答");
        // Cut short while reasoning: no answer.
        assert_eq!(strip_reasoning("<think>\nstill thinking"), "");
        // Only a leading block; anything else is the answer as written.
        assert_eq!(strip_reasoning("你好。"), "你好。");
        assert_eq!(
            strip_reasoning("Use <think> tags.</think>"),
            "Use <think> tags.</think>"
        );
        assert_eq!(strip_reasoning("  indented"), "  indented");
    }
}
