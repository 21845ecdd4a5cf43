//! Inline code shown to the model as it is written (`` `k1` ``) instead of as a placeholder
//! (`{{3}}`), and camel-case names shown as code (`` `GraphRAG` ``, restored without the
//! backticks): a sentence such as "`k1` controls term-frequency saturation" means nothing
//! with its subject hidden, and the model then moved the placeholder or put another word in
//! its place. The passage's placeholders stay the unit of record — the model's text is
//! mapped back to them before it is restored and checked — and the decode-time constraint
//! sees the mapped text, so each span is written exactly as shown, at most as often as it
//! is shown, on its own line, and before the line may end, like any placeholder.

use super::constraint::PassageConstraint;
use super::{PlaceholderKind, Unit, PLACEHOLDER_RE};
use crate::engine::constraint::TextConstraint;

/// The longest inline code span shown as it is (longer ones stay placeholders).
const MAX_SHOWN: usize = 48;

/// One placeholder shown as its code: what the model sees and the token it stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Span {
    /// The code span as written, backticks included (`` `k1` ``).
    pub shown: String,
    /// The placeholder token (`{{3}}`).
    pub token: String,
}

/// The placeholders of `passage` (a unit's model text, or a piece of it) shown as their
/// code: inline code spans of one backtick on each side, on one line, without braces, up
/// to [`MAX_SHOWN`] bytes, and camel-case names in backticks. None when the passage has a
/// backtick of its own (its spans could not be told from the model's).
pub fn spans(unit: &Unit, passage: &str) -> Vec<Span> {
    if passage.contains('`') {
        return Vec::new();
    }
    PLACEHOLDER_RE
        .captures_iter(passage)
        .filter_map(|c| {
            let idx = c[1].parse::<usize>().ok()?.checked_sub(1)?;
            let p = unit.placeholders.get(idx)?;
            let code = p.original.as_str();
            if p.kind == PlaceholderKind::Name {
                return Some(Span {
                    shown: format!("`{code}`"),
                    token: c[0].to_string(),
                });
            }
            let inner = code.strip_prefix('`')?.strip_suffix('`')?;
            let shown = p.kind == PlaceholderKind::InlineCode
                && code.len() <= MAX_SHOWN
                && !inner.is_empty()
                && !inner.contains(['`', '\n', '{', '}']);
            shown.then(|| Span {
                shown: code.to_string(),
                token: c[0].to_string(),
            })
        })
        .collect()
}

/// `passage` with each of `spans`' tokens written as its code.
pub fn show(passage: &str, spans: &[Span]) -> String {
    spans.iter().fold(passage.to_string(), |text, s| {
        text.replacen(&s.token, &s.shown, 1)
    })
}

/// The model's `text` with each shown span written back as its token: the n-th time a
/// span's code appears, the n-th token shown with that code. A backtick that starts no
/// shown span is left as it is (the checks then find what is wrong).
pub fn hide(text: &str, spans: &[Span]) -> String {
    let bytes = map(text.as_bytes(), spans, false).unwrap_or_else(|| text.as_bytes().to_vec());
    String::from_utf8(bytes).unwrap_or_else(|_| text.to_string())
}

/// `text` with the shown spans as tokens. With `partial`, a text that ends inside a shown
/// span (a prefix of one still to write) ends with `{{` instead — an unfinished placeholder
/// — and a backtick that starts no shown span is `None`; without it such a backtick stays.
fn map(text: &[u8], spans: &[Span], partial: bool) -> Option<Vec<u8>> {
    let mut used = vec![false; spans.len()];
    let mut out = Vec::with_capacity(text.len());
    let mut i = 0;
    while i < text.len() {
        if text[i] != b'`' {
            out.push(text[i]);
            i += 1;
            continue;
        }
        let rest = &text[i..];
        // The first unused token shown with this code.
        let whole =
            (0..spans.len()).find(|&k| !used[k] && rest.starts_with(spans[k].shown.as_bytes()));
        if let Some(k) = whole {
            used[k] = true;
            out.extend_from_slice(spans[k].token.as_bytes());
            i += spans[k].shown.len();
            continue;
        }
        let begun =
            (0..spans.len()).any(|k| !used[k] && spans[k].shown.as_bytes().starts_with(rest));
        if partial && begun {
            out.extend_from_slice(b"{{");
            return Some(out);
        }
        if partial {
            return None;
        }
        out.push(b'`');
        i += 1;
    }
    Some(out)
}

/// A passage constraint over text whose inline code is shown as written: the model's text
/// is mapped back to placeholders ([`hide`]) and judged by the constraint of the passage
/// with its placeholders; what a line owes is asked for as the code it shows.
#[derive(Debug, Clone)]
pub struct ShownSpans {
    inner: PassageConstraint,
    spans: Vec<Span>,
}

impl ShownSpans {
    /// `inner` (the constraint of the passage with its placeholders) for a model that sees
    /// `spans` as their code.
    pub fn new(inner: PassageConstraint, spans: Vec<Span>) -> Self {
        Self { inner, spans }
    }

    /// Rebuild from a [`TextConstraint::spec`]: the passage constraint's, plus `shown`.
    pub fn from_spec(spec: &serde_json::Value) -> Option<Self> {
        let inner = PassageConstraint::from_spec(spec)?;
        let spans = spec
            .get("shown")?
            .as_array()?
            .iter()
            .map(|pair| {
                let pair = pair.as_array()?;
                Some(Span {
                    shown: pair.first()?.as_str()?.to_string(),
                    token: pair.get(1)?.as_str()?.to_string(),
                })
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Self { inner, spans })
    }
}

impl TextConstraint for ShownSpans {
    fn allows(&self, text: &[u8], next: &[u8]) -> bool {
        let Some(before) = map(text, &self.spans, true) else {
            return false;
        };
        let mut all = text.to_vec();
        all.extend_from_slice(next);
        let Some(after) = map(&all, &self.spans, true) else {
            return false;
        };
        // `before` alone carries the loop rule; `after` every other.
        self.inner.allows(&before, b"") && self.inner.allows(b"", &after)
    }

    fn allows_end(&self, text: &[u8]) -> bool {
        map(text, &self.spans, true).is_some_and(|t| self.inner.allows_end(&t))
    }

    fn owed(&self, text: &[u8]) -> Option<Vec<u8>> {
        let owed = self.inner.owed(&map(text, &self.spans, true)?)?;
        let shown = self
            .spans
            .iter()
            .find(|s| s.token.as_bytes() == owed.as_slice())
            .map(|s| s.shown.as_bytes().to_vec());
        Some(shown.unwrap_or(owed))
    }

    fn spec(&self) -> Option<serde_json::Value> {
        let mut spec = self.inner.spec()?;
        let shown: Vec<[&str; 2]> = self
            .spans
            .iter()
            .map(|s| [s.shown.as_str(), s.token.as_str()])
            .collect();
        spec.as_object_mut()?
            .insert("shown".to_string(), serde_json::json!(shown));
        Some(spec)
    }
}

/// A constraint from a server request's description: a passage constraint, with its shown
/// spans when it has them; `None` for anything else.
pub fn constraint_from_spec(
    spec: &serde_json::Value,
) -> Option<crate::engine::constraint::Constraint> {
    use crate::engine::constraint::Constraint;
    if spec.get("shown").is_some() {
        return ShownSpans::from_spec(spec).map(Constraint::new);
    }
    PassageConstraint::from_spec(spec).map(Constraint::new)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(md: &str) -> Unit {
        crate::units::first_translate_unit(md)
    }

    #[test]
    fn inline_code_is_shown_and_mapped_back() {
        let u = unit(
            "Here `k1` controls saturation and `b` length; `k1` again, see [docs](https://x.y).\n",
        );
        let passage = crate::units::skeleton::Skeleton::of(&u).model_text();
        let sp = spans(&u, &passage);
        assert_eq!(sp.len(), 3, "{passage} {sp:?}");
        let shown = show(&passage, &sp);
        assert!(
            shown.contains("`k1` controls") && shown.contains("`b` length"),
            "{shown}"
        );
        assert!(
            shown.contains("{{"),
            "the link stays a placeholder: {shown}"
        );
        let reply = "这里 `k1` 控制饱和度，`b` 控制长度；又是 `k1`";
        let hidden = hide(reply, &sp);
        assert_eq!(hidden.matches("{{").count(), 3, "{hidden}");
        assert!(!hidden.contains('`'));
        // The first `k1` is the first token shown with that code.
        assert!(
            hidden.find(&sp[0].token) < hidden.find(&sp[2].token),
            "{hidden}"
        );
    }

    #[test]
    fn a_camel_case_name_is_shown_in_backticks_and_restored_plain() {
        let u = unit("GraphRAG builds a graph, and `k1` stays code.\n");
        let passage = crate::units::skeleton::Skeleton::of(&u).model_text();
        let sp = spans(&u, &passage);
        let shown = show(&passage, &sp);
        assert!(shown.starts_with("`GraphRAG` builds"), "{shown}");
        let hidden = hide("`GraphRAG` 构建图，`k1` 保持为代码。", &sp);
        let restored = crate::units::restore_placeholders(&u, &hidden).unwrap();
        assert_eq!(restored, "GraphRAG 构建图，`k1` 保持为代码。");
    }

    #[test]
    fn the_constraint_judges_the_mapped_text() {
        let u = unit("Here `k1` controls saturation.\n");
        let passage = crate::units::skeleton::Skeleton::of(&u).model_text();
        let sp = spans(&u, &passage);
        let c = ShownSpans::new(PassageConstraint::new(&passage), sp.clone());
        assert!(c.allows(b"", "这里 `k".as_bytes()), "a span being written");
        assert!(c.allows("这里 ".as_bytes(), "`k1` 控制饱和度。".as_bytes()));
        assert!(
            !c.allows("这里 ".as_bytes(), b"`x"),
            "code the passage does not show"
        );
        assert!(!c.allows("这里 `k1` 和 ".as_bytes(), b"`k1`"), "once only");
        assert!(!c.allows_end("控制饱和度。".as_bytes()), "the span is owed");
        assert_eq!(c.owed("控制饱和度".as_bytes()), Some(b"`k1`".to_vec()));
        assert!(c.allows_end("这里 `k1` 控制饱和度。".as_bytes()));
        let back = ShownSpans::from_spec(&c.spec().unwrap()).unwrap();
        assert_eq!(back.spans, c.spans);
    }
}
