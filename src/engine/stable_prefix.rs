//! Splitting a rendered prompt into its stable prefix (shared by many calls, cached once)
//! and the per-call suffix.
//!
//! The caller says where the per-call content starts (a message and a byte offset in it).
//! We render the conversation once with an invisible marker at that point: everything
//! before the marker is the stable prefix. Then we check the tokenization: the whole
//! prompt's tokens must begin with the prefix's tokens. Where a BPE merge crosses the
//! boundary they do not, and only the common token prefix is reused — logged, because
//! such silent misses are exactly what makes other engines' prefix caches useless.

use super::chat_template::{ChatTemplate, Message};
use crate::engine::generate::common_prefix;
use crate::engine::tokenizer::Tokenizer;
use anyhow::{bail, Result};

const MARKER: &str = "\u{E000}quire-split\u{E000}";

/// Where the per-call content begins: in message `message`, at byte `offset` of its content.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SplitPoint {
    /// Index of the message.
    pub message: usize,
    /// Byte offset in its content.
    pub offset: usize,
}

/// A rendered, tokenized prompt with its stable prefix identified.
#[derive(Debug, Clone)]
pub struct PromptSplit {
    /// The whole prompt text.
    pub text: String,
    /// Its tokens.
    pub tokens: Vec<u32>,
    /// Byte length of the stable prefix text.
    pub stable_text_len: usize,
    /// Tokens of the stable prefix text on its own.
    pub stable_text_tokens: usize,
    /// Leading tokens shared by the whole prompt and the stable prefix (what can be reused).
    pub stable_tokens: usize,
}

impl PromptSplit {
    /// Whether a token merge crossed the prefix/suffix boundary.
    pub fn boundary_merged(&self) -> bool {
        self.stable_tokens < self.stable_text_tokens
    }
}

/// Render `messages` (with a generation prompt) and split them at `at`.
pub fn split_prompt(
    template: &ChatTemplate,
    tokenizer: &Tokenizer,
    messages: &[Message],
    at: SplitPoint,
) -> Result<PromptSplit> {
    let (text, stable_text_len) = stable_text(template, messages, at)?;
    let tokens = tokenizer.encode(&text)?;
    let prefix_tokens = if stable_text_len > 0 {
        tokenizer.encode(&text[..stable_text_len])?
    } else {
        Vec::new()
    };
    let stable_tokens = common_prefix(&tokens, &prefix_tokens);
    let split = PromptSplit {
        stable_text_len,
        stable_text_tokens: prefix_tokens.len(),
        stable_tokens,
        text,
        tokens,
    };
    if split.boundary_merged() {
        eprintln!(
            "note: a token merge crosses the stable-prefix boundary; reusing {} of {} prefix tokens",
            split.stable_tokens, split.stable_text_tokens
        );
    }
    Ok(split)
}

/// The prompt text of `messages` (with a generation prompt) and the byte length of its
/// stable prefix: everything the template writes before the point `at` (0, with a warning,
/// where the template transforms message text around it so that the point cannot be
/// located).
pub fn stable_text(
    template: &ChatTemplate,
    messages: &[Message],
    at: SplitPoint,
) -> Result<(String, usize)> {
    let Some(m) = messages.get(at.message) else {
        bail!(
            "split point names message {} of {}",
            at.message,
            messages.len()
        );
    };
    if !m.content.is_char_boundary(at.offset) {
        bail!("split point {} is not a character boundary", at.offset);
    }
    let mut marked = messages.to_vec();
    marked[at.message].content.insert_str(at.offset, MARKER);
    let with_marker = template.render(&marked, true)?;
    let text = template.render(messages, true)?;
    let stable_text_len = match with_marker.find(MARKER) {
        Some(pos) if with_marker.replacen(MARKER, "", 1) == text => pos,
        _ => {
            eprintln!(
                "warning: the chat template ({}) transforms message text, so the stable prefix cannot be located; no prefix reuse for this prompt",
                template.origin
            );
            0
        }
    };
    Ok((text, stable_text_len))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::glossary::GlossaryEntry;
    use crate::prompts::agents::{self, AgentPrompt, DEFAULT_GUIDE};
    use crate::prompts::profile::PromptProfile;

    /// The agents' prompts for two different parts of a chapter (and a translate prompt
    /// with a worked example as an earlier turn).
    fn prompt_pairs(profile: PromptProfile) -> Vec<(&'static str, AgentPrompt, AgentPrompt)> {
        let glossary = vec![GlossaryEntry::house("prefix cache", "前缀缓存")];
        let example = Some(("The cache is on disk.", "缓存在磁盘上。"));
        let translate = |passage: &str, example| {
            agents::translate_prompt_for(
                profile,
                DEFAULT_GUIDE,
                "en",
                "zh-CN",
                &glossary,
                &[],
                &[],
                passage,
                example,
            )
            .unwrap()
        };
        let review = |source: &str, translation: &str| {
            agents::review_prompt("en", "zh-CN", &glossary, source, translation).unwrap()
        };
        let glossary_ask = |term: &str| {
            agents::glossary_prompt("en", "zh-CN", &glossary, term, "A sentence.").unwrap()
        };
        vec![
            (
                "translate",
                translate("First part, {{1}} kept.", None),
                translate("Second part.\nTwo lines.", None),
            ),
            (
                "translate with a worked example",
                translate("First part.", example),
                translate("Second part.", example),
            ),
            (
                "review",
                review("One.", "一。"),
                review("Two words.", "两个词。"),
            ),
            (
                "glossary",
                glossary_ask("KV cache"),
                glossary_ask("decoder"),
            ),
        ]
    }

    /// The per-call text of a prompt: its split message from the split point on.
    fn per_call(p: &AgentPrompt) -> String {
        p.messages[p.split.message].content[p.split.offset..].to_string()
    }

    fn assert_shared_prefix(template: &ChatTemplate, profile: PromptProfile) {
        for (agent, a, b) in prompt_pairs(profile) {
            let (text_a, len_a) = stable_text(template, &a.messages, a.split).unwrap();
            let (text_b, len_b) = stable_text(template, &b.messages, b.split).unwrap();
            let what = format!("{} / {agent} / {profile:?}", template.origin);
            assert!(len_a > 0, "{what}: no stable prefix located");
            assert_eq!(text_a[..len_a], text_b[..len_b], "{what}: prefixes differ");
            // The prefix ends before the per-call text, which follows it in the prompt.
            let rest = &text_a[len_a..];
            let part = per_call(&a);
            let part = part.trim();
            assert!(
                rest.contains(part) && !text_a[..len_a].contains(part),
                "{what}: the per-call text {part:?} is not after the prefix"
            );
        }
    }

    #[test]
    fn every_family_template_keeps_a_shared_prefix() {
        for name in [
            "gemma3",
            "qwen3",
            "hunyuan",
            "hunyuan-dense",
            "qwen2",
            "chatml",
        ] {
            let t = ChatTemplate::named(name).unwrap();
            for profile in [PromptProfile::Guide, PromptProfile::HyMt] {
                assert_shared_prefix(&t, profile);
            }
        }
    }

    #[test]
    fn gemma_folds_the_system_message_into_the_cached_prefix() {
        // Gemma has no system role: the system text opens the first user turn, and the
        // prefix still runs through it and the fixed head of the user message.
        let t = ChatTemplate::named("gemma3").unwrap();
        let (_, a, _) = prompt_pairs(PromptProfile::Guide).remove(0);
        let (text, len) = stable_text(&t, &a.messages, a.split).unwrap();
        let system = a.messages[0].content.trim_end();
        let head = &a.messages[1].content[..a.split.offset];
        assert!(text.starts_with("<bos><start_of_turn>user\n"));
        assert!(text[..len].contains(system));
        assert!(text[..len].ends_with(head), "{:?}", &text[..len]);
        assert_eq!(
            text.matches("<start_of_turn>").count(),
            2,
            "one user turn, then the model's"
        );
    }

    #[test]
    fn a_split_point_outside_the_messages_is_refused() {
        let t = ChatTemplate::named("chatml").unwrap();
        let m = [Message::user("héllo")];
        assert!(stable_text(
            &t,
            &m,
            SplitPoint {
                message: 1,
                offset: 0
            }
        )
        .is_err());
        assert!(stable_text(
            &t,
            &m,
            SplitPoint {
                message: 0,
                offset: 2
            }
        )
        .is_err());
    }
}
