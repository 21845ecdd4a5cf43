//! The glossary: source terms and the target terms a translation must use — one type for
//! the glossary agent, the translation prompts, the checks and `glossary.json`.
//!
//! JSON: a list of objects (or `{"terms": [...]}`), each with the source term under
//! `"source"` or the source language code (`"en"`) and the target term (a string or a list
//! of accepted alternatives) under `"target"` or the target language code (`"zh"`,
//! `"zh-CN"`); optional `"pos"`, `"context"`, and `"house": false` / `"inferred": true` /
//! `"origin": "inferred"` for terms inferred rather than house style.
//!
//! TOML: `[[term]]` (or `[[terms]]`, `[[entry]]`) tables with the same keys, or a
//! `[terms]` table of `"source" = "target"` pairs.
//!
//! House terms are strict (a missing target term is an error); inferred ones warn. A term
//! the glossary agent inferred is marked `"needs_review": true` until a person has looked
//! at it ([`Glossary::to_json`] writes the form `translate` leaves in `glossary.json`).

use anyhow::{anyhow, bail, Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::Path;

/// One glossary term.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GlossaryEntry {
    /// The source-language term, matched case-insensitively on word boundaries (with an
    /// optional plural `s`/`es`).
    pub source: String,
    /// Accepted target terms; the first is preferred.
    pub target: Vec<String>,
    /// Part of speech, if given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pos: Option<String>,
    /// Usage note, if given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// House (strict) term: a miss is an error. Inferred terms only warn.
    pub house: bool,
    /// Inferred by a model and not yet reviewed by a person.
    #[serde(default)]
    pub needs_review: bool,
    /// For a term kept in the source language: the target-language words a model writes
    /// for it (`Skill` → `技能`). Where a translated line has the term fewer times than its
    /// source line, these are written back as the term, up to the missing count, so the
    /// book keeps the term the same way everywhere.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replaces: Vec<String>,
}

impl GlossaryEntry {
    /// A house term (strict) with one target and no note.
    pub fn house(source: &str, target: &str) -> Self {
        GlossaryEntry {
            source: source.to_string(),
            target: vec![target.to_string()],
            pos: None,
            context: None,
            house: true,
            needs_review: false,
            replaces: Vec::new(),
        }
    }

    /// The preferred target term (the first).
    pub fn preferred(&self) -> &str {
        self.target.first().map(String::as_str).unwrap_or("")
    }

    /// Whether the term stays as it is in the translation (its target is the source).
    pub fn keeps_source(&self) -> bool {
        self.source == self.preferred()
    }
}

/// A glossary: its terms in file order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Glossary {
    /// The terms.
    pub entries: Vec<GlossaryEntry>,
}

impl Glossary {
    /// Load a glossary file: `.toml` as TOML, anything else as JSON (falling back to TOML
    /// when the text does not look like JSON). Language codes pick the keys of
    /// `{"en": …, "zh": …}` entries. Malformed files give line and column.
    pub fn load(path: &Path, source_lang: &str, target_lang: &str) -> Result<Glossary> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read glossary {}", path.display()))?;
        if text.trim().is_empty() {
            bail!(
                "glossary {} is empty: give at least one term, or leave out --glossary",
                path.display()
            );
        }
        let is_toml = path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| e.eq_ignore_ascii_case("toml"));
        let looks_json = text.trim_start().starts_with(['[', '{']) && !is_toml;
        let result = if is_toml || !looks_json {
            Glossary::parse_toml(&text, source_lang, target_lang)
        } else {
            Glossary::parse_json(&text, source_lang, target_lang)
        };
        result.with_context(|| format!("invalid glossary {}", path.display()))
    }

    /// Refuse a source term listed twice with different targets: both would be required
    /// at once, which no translation can satisfy. The same term listed twice with the same
    /// targets is kept once.
    pub fn without_duplicates(mut self) -> Result<Glossary> {
        let mut seen: Vec<(usize, GlossaryEntry)> = Vec::new();
        for (i, e) in self.entries.drain(..).enumerate() {
            match seen
                .iter()
                .find(|(_, s)| s.source.trim().eq_ignore_ascii_case(e.source.trim()))
            {
                Some((j, s)) if s.target != e.target => bail!(
                    "term #{} ({:?} → {:?}) conflicts with term #{} ({:?} → {:?}): keep one target per source term",
                    i + 1,
                    e.source,
                    e.target.join(" | "),
                    j + 1,
                    s.source,
                    s.target.join(" | ")
                ),
                Some(_) => {}
                None => seen.push((i, e)),
            }
        }
        self.entries = seen.into_iter().map(|(_, e)| e).collect();
        Ok(self)
    }

    /// Parse JSON glossary text.
    pub fn parse_json(text: &str, source_lang: &str, target_lang: &str) -> Result<Glossary> {
        let value: Value = serde_json::from_str(text).map_err(|e| {
            anyhow!(
                "JSON error at line {}, column {}: {}",
                e.line(),
                e.column(),
                e
            )
        })?;
        let list = match &value {
            Value::Array(a) => a.clone(),
            Value::Object(o) => match o.get("terms").or_else(|| o.get("entries")) {
                Some(Value::Array(a)) => a.clone(),
                _ => bail!("expected a JSON list of terms, or an object with a \"terms\" list"),
            },
            _ => bail!("expected a JSON list of terms"),
        };
        let mut entries = Vec::with_capacity(list.len());
        for (i, item) in list.iter().enumerate() {
            let Value::Object(obj) = item else {
                bail!("term #{} is not an object", i + 1);
            };
            let get = |k: &str| obj.get(k);
            entries.push(make_entry(i, &get, source_lang, target_lang)?);
        }
        Ok(Glossary { entries })
    }

    /// Parse TOML glossary text.
    pub fn parse_toml(text: &str, source_lang: &str, target_lang: &str) -> Result<Glossary> {
        let table: toml::Table = toml::from_str(text).map_err(|e| {
            let (line, col) = e.span().map(|s| line_col(text, s.start)).unwrap_or((0, 0));
            anyhow!("TOML error at line {line}, column {col}: {}", e.message())
        })?;
        let mut entries = Vec::new();
        for key in ["term", "terms", "entry", "entries"] {
            match table.get(key) {
                Some(toml::Value::Array(items)) => {
                    for (i, item) in items.iter().enumerate() {
                        let toml::Value::Table(t) = item else {
                            bail!("[[{key}]] #{} is not a table", i + 1);
                        };
                        let json: serde_json::Map<String, Value> = t
                            .iter()
                            .map(|(k, v)| (k.clone(), toml_to_json(v)))
                            .collect();
                        let get = |k: &str| json.get(k);
                        entries.push(make_entry(i, &get, source_lang, target_lang)?);
                    }
                }
                Some(toml::Value::Table(t)) => {
                    for (src, tgt) in t {
                        let target = match tgt {
                            toml::Value::String(s) => vec![s.clone()],
                            toml::Value::Array(a) => a
                                .iter()
                                .filter_map(|v| v.as_str().map(str::to_string))
                                .collect(),
                            _ => {
                                bail!("[{key}] \"{src}\" must map to a string or a list of strings")
                            }
                        };
                        entries.push(GlossaryEntry {
                            source: src.clone(),
                            target,
                            pos: None,
                            context: None,
                            house: true,
                            needs_review: false,
                            replaces: Vec::new(),
                        });
                    }
                }
                Some(_) => bail!("\"{key}\" must be an array of tables or a table"),
                None => {}
            }
        }
        if entries.is_empty() && !table.is_empty() {
            bail!("no [[term]] tables or [terms] table found");
        }
        Ok(Glossary { entries })
    }

    /// Whether the glossary has no terms.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The terms whose source term occurs in `text` (whole words, any case, with an
    /// optional plural ending), in glossary order.
    pub fn found_in(&self, text: &str) -> Vec<GlossaryEntry> {
        let lower = text.to_lowercase();
        self.entries
            .iter()
            .filter(|e| contains_term(&lower, &e.source.to_lowercase()))
            .cloned()
            .collect()
    }

    /// The glossary as JSON text (`pretty`: indented, as `glossary.json` is written): a list
    /// of objects with the source term under the source language's code and the target
    /// term under the target's (`"en"`, `"zh"`; `"source"`, `"target"` when the two codes
    /// are the same), then `pos`, `context`, `house` and `needs_review`. A term with one
    /// target has it as a string, otherwise as a list. [`Glossary::load`] reads it back.
    pub fn to_json(&self, source_lang: &str, target_lang: &str, pretty: bool) -> Result<String> {
        let (sp, tp) = (
            crate::lang::primary(source_lang),
            crate::lang::primary(target_lang),
        );
        let keys = if sp.is_empty() || tp.is_empty() || sp == tp {
            ("source".to_string(), "target".to_string())
        } else {
            (sp, tp)
        };
        let list: Vec<Keyed> = self
            .entries
            .iter()
            .map(|entry| Keyed { entry, keys: &keys })
            .collect();
        Ok(if pretty {
            serde_json::to_string_pretty(&list)?
        } else {
            serde_json::to_string(&list)?
        })
    }
}

/// An entry as `glossary.json` holds it: keyed by language codes.
struct Keyed<'a> {
    entry: &'a GlossaryEntry,
    keys: &'a (String, String),
}

impl Serialize for Keyed<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let e = self.entry;
        let mut m = s.serialize_map(None)?;
        m.serialize_entry(&self.keys.0, &e.source)?;
        match e.target.as_slice() {
            [one] => m.serialize_entry(&self.keys.1, one)?,
            all => m.serialize_entry(&self.keys.1, all)?,
        }
        m.serialize_entry("pos", e.pos.as_deref().unwrap_or(""))?;
        m.serialize_entry("context", e.context.as_deref().unwrap_or(""))?;
        m.serialize_entry("house", &e.house)?;
        m.serialize_entry("needs_review", &e.needs_review)?;
        if !e.replaces.is_empty() {
            m.serialize_entry("replaces", &e.replaces)?;
        }
        m.end()
    }
}

fn toml_to_json(v: &toml::Value) -> Value {
    match v {
        toml::Value::String(s) => Value::String(s.clone()),
        toml::Value::Boolean(b) => Value::Bool(*b),
        toml::Value::Integer(i) => Value::from(*i),
        toml::Value::Float(f) => Value::from(*f),
        toml::Value::Array(a) => Value::Array(a.iter().map(toml_to_json).collect()),
        toml::Value::Table(t) => Value::Object(
            t.iter()
                .map(|(k, v)| (k.clone(), toml_to_json(v)))
                .collect(),
        ),
        toml::Value::Datetime(d) => Value::String(d.to_string()),
    }
}

fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = &text[..text.floor_char_boundary(offset)];
    let line = before.matches('\n').count() + 1;
    let col = before
        .rsplit('\n')
        .next()
        .map(|l| l.chars().count() + 1)
        .unwrap_or(1);
    (line, col)
}

fn make_entry<'a>(
    i: usize,
    get: &dyn Fn(&str) -> Option<&'a Value>,
    source_lang: &str,
    target_lang: &str,
) -> Result<GlossaryEntry> {
    let sp = crate::lang::primary(source_lang);
    let tp = crate::lang::primary(target_lang);
    let source = get("source")
        .or_else(|| get(source_lang))
        .or_else(|| get(&sp))
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| anyhow!("term #{} has no \"source\" (or \"{sp}\") string", i + 1))?
        .to_string();
    let target_value = get("target")
        .or_else(|| get(target_lang))
        .or_else(|| get(&tp))
        .ok_or_else(|| {
            anyhow!(
                "term #{} (\"{source}\") has no \"target\" (or \"{tp}\")",
                i + 1
            )
        })?;
    let target = string_list(target_value, "the target")
        .map_err(|e| anyhow!("term #{} (\"{source}\"): {e}", i + 1))?;
    if target.is_empty() {
        bail!("term #{} (\"{source}\") has an empty target", i + 1);
    }
    let inferred = get("inferred").and_then(Value::as_bool).unwrap_or(false)
        || get("origin")
            .or_else(|| get("kind"))
            .and_then(Value::as_str)
            .is_some_and(|s| s.eq_ignore_ascii_case("inferred"));
    let house = get("house")
        .or_else(|| get("strict"))
        .and_then(Value::as_bool)
        .unwrap_or(!inferred);
    let text = |k: &str| {
        get(k)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    };
    let replaces = match get("replaces") {
        None | Some(Value::Null) => Vec::new(),
        Some(v) => string_list(v, "\"replaces\"")
            .map_err(|e| anyhow!("term #{} (\"{source}\"): {e}", i + 1))?,
    };
    Ok(GlossaryEntry {
        source,
        target,
        pos: text("pos"),
        context: text("context"),
        house,
        needs_review: get("needs_review")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        replaces,
    })
}

/// Whether `term` occurs in `haystack_lower` (already lower-cased) as a whole word, with
/// an optional plural ending; non-Latin terms match as plain substrings.
pub fn contains_term(haystack_lower: &str, term_lower: &str) -> bool {
    count_term(haystack_lower, term_lower, 1) > 0
}

/// A string, or a list of strings, as trimmed non-empty strings; `what` names the field in
/// the error for anything else.
fn string_list(value: &Value, what: &str) -> Result<Vec<String>> {
    let items: Vec<&str> = match value {
        Value::String(s) => vec![s],
        Value::Array(a) => a
            .iter()
            .map(|v| {
                v.as_str()
                    .ok_or_else(|| anyhow!("{what} must list strings, found {v}"))
            })
            .collect::<Result<_>>()?,
        _ => bail!("{what} must be a string or a list of strings"),
    };
    Ok(items
        .into_iter()
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(str::to_string)
        .collect())
}

/// How many times `term` occurs in `haystack_lower` as [`contains_term`] matches it,
/// counting at most `limit`.
pub fn count_term(haystack_lower: &str, term_lower: &str, limit: usize) -> usize {
    if term_lower.is_empty() || limit == 0 {
        return 0;
    }
    let mut found = 0;
    let latin_edges = term_lower.starts_with(|c: char| c.is_ascii_alphanumeric())
        || term_lower.ends_with(|c: char| c.is_ascii_alphanumeric());
    if !latin_edges {
        return haystack_lower.matches(term_lower).count().min(limit);
    }
    let is_word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut from = 0;
    while let Some(p) = haystack_lower[from..].find(term_lower) {
        let start = from + p;
        let end = start + term_lower.len();
        let before_ok = haystack_lower[..start]
            .chars()
            .next_back()
            .is_none_or(|c| !is_word(c));
        let rest = &haystack_lower[end..];
        let after_ok = {
            let rest2 = rest
                .strip_prefix("es")
                .filter(|r| r.chars().next().is_none_or(|c| !is_word(c)))
                .or_else(|| {
                    rest.strip_prefix('s')
                        .filter(|r| r.chars().next().is_none_or(|c| !is_word(c)))
                })
                .unwrap_or(rest);
            rest2.chars().next().is_none_or(|c| !is_word(c))
        };
        if before_ok && after_ok {
            found += 1;
            if found == limit {
                return found;
            }
            from = end;
            continue;
        }
        from = start + term_lower.chars().next().map(char::len_utf8).unwrap_or(1);
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_forms() {
        let g = Glossary::parse_json(
            r#"[{"en":"agent","zh":"智能体","pos":"noun"},{"source":"RAG","target":["检索增强生成","RAG"],"inferred":true}]"#,
            "en",
            "zh-CN",
        )
        .unwrap();
        assert_eq!(g.entries.len(), 2);
        assert!(g.entries[0].house);
        assert!(!g.entries[1].house);
        assert_eq!(g.entries[1].target.len(), 2);
    }

    #[test]
    fn malformed_json_has_position() {
        let err =
            Glossary::parse_json("[\n {\"en\": \"a\",\n  \"zh\" \"b\"}]", "en", "zh").unwrap_err();
        let msg = format!("{err:#}");
        assert!(msg.contains("line 3"), "{msg}");
        assert!(msg.contains("column"), "{msg}");
    }

    #[test]
    fn toml_forms() {
        let g = Glossary::parse_toml(
            "[[term]]\nsource = \"agent\"\ntarget = \"智能体\"\n\n[terms]\n\"context window\" = \"上下文窗口\"\n",
            "en",
            "zh",
        )
        .unwrap();
        assert_eq!(g.entries.len(), 2);
        let err = Glossary::parse_toml("[[term]]\nsource = \"a\nx", "en", "zh").unwrap_err();
        let msg = format!("{err:#}");
        assert!(
            msg.contains("TOML error at line ") && msg.contains("column"),
            "{msg}"
        );
    }

    #[test]
    fn glossary_json_is_keyed_by_the_run_languages_and_reads_back() {
        let text = r#"[{"en":"agent","zh":"智能体","pos":"noun","context":"An agent acts.","house":true,"needs_review":false},{"en":"memory system","zh":"记忆系统","pos":"","context":"","house":false,"needs_review":true}]"#;
        let g = Glossary::parse_json(text, "en", "zh-CN").unwrap();
        assert!(g.entries[1].needs_review && !g.entries[1].house);
        assert_eq!(g.entries[1].pos, None);
        assert_eq!(g.to_json("en", "zh-CN", false).unwrap(), text);
        let pretty = g.to_json("en", "zh-CN", true).unwrap();
        assert!(pretty.starts_with("[\n  {\n    \"en\": \"agent\",\n    \"zh\": \"智能体\","));
        assert_eq!(Glossary::parse_json(&pretty, "en", "zh-CN").unwrap(), g);
        let ja = g.to_json("en", "ja", false).unwrap();
        assert!(ja.contains(r#""ja":"智能体""#), "{ja}");
        assert_eq!(Glossary::parse_json(&ja, "en", "ja").unwrap(), g);
    }

    #[test]
    fn term_matching() {
        assert!(contains_term("the agents work", "agent"));
        assert!(contains_term("an agent.", "agent"));
        assert!(!contains_term("agentic flows", "agent"));
        assert!(contains_term("用智能体完成", "智能体"));
        assert!(contains_term("batches of work", "batch"));
        assert_eq!(count_term("Skills, a Skill and SubSkill", "Skill", 9), 2);
        assert_eq!(
            count_term("skill skills skill", "skill", 2),
            2,
            "at most the limit"
        );
        assert_eq!(count_term("技能和技能", "技能", 9), 2);
    }

    #[test]
    fn a_kept_terms_replacements_travel_in_glossary_json() {
        let text = r#"[{"en":"Skill","zh":"Skill","pos":"","context":"","house":false,"needs_review":true,"replaces":["技能"]}]"#;
        let g = Glossary::parse_json(text, "en", "zh-CN").unwrap();
        assert_eq!(g.entries[0].replaces, ["技能"]);
        assert_eq!(g.to_json("en", "zh-CN", false).unwrap(), text);
        let one = text.replace(r#"["技能"]"#, r#""技能""#);
        assert_eq!(Glossary::parse_json(&one, "en", "zh-CN").unwrap(), g);
        let bad = text.replace(r#"["技能"]"#, "[3]");
        let e = Glossary::parse_json(&bad, "en", "zh-CN").unwrap_err();
        assert!(
            e.to_string().contains("\"replaces\" must list strings"),
            "{e}"
        );
    }

    #[test]
    fn a_target_list_with_anything_but_strings_is_refused() {
        let text = r#"[{"en":"token","zh":["词元", 3]}]"#;
        let e = Glossary::parse_json(text, "en", "zh-CN").unwrap_err();
        assert!(
            e.to_string()
                .contains("term #1 (\"token\"): the target must list strings"),
            "{e}"
        );
        let e =
            Glossary::parse_json(r#"[{"en":"token","zh":{"a":1}}]"#, "en", "zh-CN").unwrap_err();
        assert!(e.to_string().contains("must be a string or a list"), "{e}");
        let ok = Glossary::parse_json(r#"[{"en":"token","zh":[" 词元 ",""]}]"#, "en", "zh-CN");
        assert_eq!(ok.unwrap().entries[0].target, ["词元"]);
    }
}
