//! Placeholders: the token that stands for a protected span in a model's input, putting
//! the originals back into a model's output, and giving camel-case names back to the model.

use super::types::{Placeholder, PlaceholderKind, Unit, UnitKind};
use regex::Regex;
use std::sync::LazyLock;

/// The placeholder token for the `n`-th protected span of a unit (from 1): `{{n}}`.
///
/// Why this form: it is short (3 tokens in Qwen/Llama vocabularies), pure ASCII, carries no
/// word a model would translate, is inert in Markdown (never parsed as markup, unlike
/// `[1]`, `<x1/>` or `%1`), and is the template syntax that instruction-tuned models are
/// trained to copy unchanged. Restoration also accepts the variants small models produce:
/// inner spaces (`{{ 1 }}`) and full-width braces (`｛｛1｝｝`). Source text that already
/// looks like a placeholder is itself protected, so a token in a model's output is never
/// ambiguous.
pub fn placeholder_token(n: usize) -> String {
    format!("{{{{{n}}}}}")
}

/// Matches a placeholder token and its tolerated variants; group 1 is the number.
pub static PLACEHOLDER_RE: LazyLock<Regex> = LazyLock::new(|| {
    let [open, close] = crate::lang::punct::FULLWIDTH_BRACES;
    let space = r"[ \t\u{3000}]*";
    Regex::new(&format!(
        r"(?:\{{\{{|{open}{open}){space}([0-9]{{1,6}}){space}(?:\}}\}}|{close}{close})"
    ))
    .expect("valid placeholder regex")
});

/// A placeholder restoration failure: the model's output lost, repeated or invented
/// placeholders. The unit should be translated again.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unit {unit}: {}", self.describe())]
pub struct PlaceholderError {
    /// The unit's id.
    pub unit: String,
    /// Tokens of the unit missing from the output.
    pub missing: Vec<String>,
    /// Tokens of the unit that appear more than once.
    pub duplicated: Vec<String>,
    /// Placeholder-like tokens in the output that the unit does not have.
    pub unknown: Vec<String>,
}

impl PlaceholderError {
    fn describe(&self) -> String {
        let mut parts = Vec::new();
        if !self.missing.is_empty() {
            parts.push(format!("missing placeholders {}", self.missing.join(" ")));
        }
        if !self.duplicated.is_empty() {
            parts.push(format!(
                "duplicated placeholders {}",
                self.duplicated.join(" ")
            ));
        }
        if !self.unknown.is_empty() {
            parts.push(format!("invented placeholders {}", self.unknown.join(" ")));
        }
        parts.join("; ")
    }
}

/// Put each placeholder's original text back into a model's output for `unit`.
///
/// Every placeholder of the unit must appear exactly once (tolerated variants: `{{ 1 }}`,
/// `｛｛1｝｝`); otherwise the error lists the missing, duplicated and invented tokens. For a
/// verbatim unit the output is ignored and the source returned.
pub fn restore_placeholders(unit: &Unit, model_output: &str) -> Result<String, PlaceholderError> {
    if unit.kind == UnitKind::Verbatim {
        return Ok(unit.source.clone());
    }
    let n = unit.placeholders.len();
    let mut counts = vec![0usize; n];
    let mut unknown = Vec::new();
    let mut out = String::with_capacity(model_output.len() + 64);
    let mut last = 0;
    for caps in PLACEHOLDER_RE.captures_iter(model_output) {
        let whole = caps.get(0).expect("group 0");
        let idx = caps[1].parse::<usize>().unwrap_or(0);
        out.push_str(&model_output[last..whole.start()]);
        if (1..=n).contains(&idx) {
            counts[idx - 1] += 1;
            out.push_str(&unit.placeholders[idx - 1].original);
        } else {
            unknown.push(whole.as_str().to_string());
            out.push_str(whole.as_str());
        }
        last = whole.end();
    }
    out.push_str(&model_output[last..]);
    let missing: Vec<String> = (0..n)
        .filter(|&i| counts[i] == 0)
        .map(|i| unit.placeholders[i].token.clone())
        .collect();
    let duplicated: Vec<String> = (0..n)
        .filter(|&i| counts[i] > 1)
        .map(|i| unit.placeholders[i].token.clone())
        .collect();
    if missing.is_empty() && duplicated.is_empty() && unknown.is_empty() {
        Ok(out)
    } else {
        Err(PlaceholderError {
            unit: unit.id.clone(),
            missing,
            duplicated,
            unknown,
        })
    }
}

/// Give back to the model the camel-case names (`PlaceholderKind::Name`) for which
/// `translated` is true — names a house glossary translates — as the words they are: each
/// leaves the unit's placeholders and stands in its passage as written; the placeholders
/// after it are renumbered. A unit without such a name is unchanged.
pub fn release_names(unit: &mut Unit, translated: impl Fn(&str) -> bool) {
    let released = |p: &Placeholder| p.kind == PlaceholderKind::Name && translated(&p.original);
    if !unit.placeholders.iter().any(released) {
        return;
    }
    let old = std::mem::take(&mut unit.placeholders);
    let mut protected = String::with_capacity(unit.protected.len());
    let mut last = 0;
    for caps in PLACEHOLDER_RE.captures_iter(&unit.protected) {
        let whole = caps.get(0).expect("group 0");
        protected.push_str(&unit.protected[last..whole.start()]);
        last = whole.end();
        let Some(p) = caps[1]
            .parse::<usize>()
            .ok()
            .and_then(|i| old.get(i.checked_sub(1)?))
        else {
            protected.push_str(whole.as_str());
            continue;
        };
        if released(p) {
            protected.push_str(&p.original);
        } else {
            let token = placeholder_token(unit.placeholders.len() + 1);
            protected.push_str(&token);
            unit.placeholders.push(Placeholder { token, ..p.clone() });
        }
    }
    protected.push_str(&unit.protected[last..]);
    unit.protected = protected;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::segment::roundtrip;

    #[test]
    fn placeholder_form() {
        assert_eq!(placeholder_token(12), "{{12}}");
        assert!(PLACEHOLDER_RE.is_match("x {{ 3 }} y"));
        assert!(PLACEHOLDER_RE.is_match("x ｛｛3｝｝ y"));
    }

    #[test]
    fn camel_case_names_are_kept_and_can_be_released() {
        let mut units = roundtrip(
            "GraphRAG and LlamaIndex beat plain RAG; LLMs, GPT-4 and Tool-Based agents stay words.\n",
            1000,
        );
        let names: Vec<&str> = units[0]
            .placeholders
            .iter()
            .filter(|p| p.kind == PlaceholderKind::Name)
            .map(|p| p.original.as_str())
            .collect();
        assert_eq!(names, vec!["GraphRAG", "LlamaIndex"]);
        assert!(units[0]
            .protected
            .starts_with("{{1}} and {{2}} beat plain RAG; LLMs, GPT-4"));
        // A name a house glossary translates goes back into the passage as a word; the
        // placeholders after it are renumbered and the unit still restores to its source.
        release_names(&mut units[0], |n| n == "GraphRAG");
        assert_eq!(units[0].placeholders.len(), 1);
        assert_eq!(units[0].placeholders[0].original, "LlamaIndex");
        assert!(
            units[0].protected.starts_with("GraphRAG and {{1}} beat"),
            "{}",
            units[0].protected
        );
        let restored = restore_placeholders(&units[0], &units[0].protected).unwrap();
        assert_eq!(restored, units[0].source.trim_end());
        release_names(&mut units[0], |_| false);
        assert_eq!(units[0].placeholders.len(), 1);
    }
}
