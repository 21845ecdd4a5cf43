//! How house terms (the user's `--glossary`) reach the translating model: written into the
//! passage before the model sees it ([`inject_house_terms`]), or listed in the prompt.

use crate::glossary::Glossary;

/// How house terms reach the translating model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HouseTerms {
    /// Written into the passage in place of the source term (`the 词元 count`): the model
    /// copies them; the prompt lists them too.
    #[default]
    Inject,
    /// Listed in the prompt as required translations and checked; a unit that misses one
    /// goes to the fallback.
    Prompt,
}

/// House terms are strict: they are written into the passage in the target language
/// before the model sees it (whole words, any case, with a plural ending), so even a small
/// model cannot translate them differently. The glossary check still verifies the result.
pub fn inject_house_terms(passage: &str, glossary: &Glossary) -> String {
    let mut house: Vec<_> = glossary
        .entries
        .iter()
        .filter(|e| e.house && !e.source.trim().is_empty())
        .collect();
    house.sort_by_key(|e| std::cmp::Reverse(e.source.len()));
    let mut out = passage.to_string();
    for e in house {
        let term = e.source.trim();
        // Word boundaries only at a term's word-character edges: `C++`, `.NET`, `(a|b)`.
        let word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
        let (open, close) = (
            if word(term.chars().next()) { r"\b" } else { "" },
            if word(term.chars().next_back()) {
                r"(?:es|s)?\b"
            } else {
                ""
            },
        );
        let re = regex::Regex::new(&format!("(?i){open}{}{close}", regex::escape(term)));
        if let Ok(re) = re {
            out = re
                .replace_all(&out, regex::NoExpand(e.preferred()))
                .into_owned();
        }
    }
    out
}
