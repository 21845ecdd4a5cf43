//! The glossary agent: deterministic candidate extraction over the whole book, then one
//! short model call per candidate, all sharing one cached prompt prefix. House terms are
//! forced and never overridden; inferred terms are marked `needs_review`.

use crate::engine::backend::{ChatBackend, ChatRequest, Completion};
use crate::engine::generate::GenerationParams;
use crate::glossary::{contains_term, Glossary, GlossaryEntry};
use crate::lang::punct;
use crate::prompts::agents::glossary_prompt;
use crate::units::{Unit, UnitKind, PLACEHOLDER_RE};
use anyhow::Result;
use serde::Serialize;
use std::collections::{BTreeMap, HashSet};

/// A term worth a glossary entry, with evidence.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Candidate {
    /// The term as it appears most often.
    pub term: String,
    /// Occurrences in the book's prose.
    pub count: usize,
    /// A sentence that uses it.
    pub context: String,
}

/// Token allowance of one glossary proposal.
pub const TERM_TOKENS: usize = 16;

const STOPWORDS: &[&str] = &[
    "the", "a", "an", "and", "or", "of", "to", "in", "on", "for", "with", "is", "are", "was",
    "were", "be", "been", "it", "its", "this", "that", "these", "those", "as", "at", "by", "from",
    "but", "not", "no", "if", "then", "than", "so", "you", "your", "we", "our", "they", "their",
    "he", "she", "his", "her", "can", "will", "would", "should", "could", "may", "might", "must",
    "do", "does", "did", "has", "have", "had", "what", "which", "who", "when", "where", "why",
    "how", "all", "each", "every", "some", "any", "more", "most", "less", "much", "many", "one",
    "two", "three", "first", "second", "about", "into", "out", "up", "down", "over", "under",
    "again", "also", "only", "just", "very", "same", "other", "such", "there", "here", "them",
    "there's", "it's", "i", "between", "because", "while", "after", "before", "through", "per",
    "like", "once", "same", "still", "even", "chapter", "example", "next", "part", "number", "way",
    "make", "makes", "made", "use", "uses", "used",
];

fn is_stop(w: &str) -> bool {
    STOPWORDS.contains(&w.to_ascii_lowercase().as_str())
}

fn prose_of(unit: &Unit) -> String {
    PLACEHOLDER_RE.replace_all(&unit.protected, " ").to_string()
}

fn sentences(text: &str) -> Vec<String> {
    text.split(['.', '!', '?', '\n', '|', ':', ';'])
        .map(|s| {
            s.trim()
                .trim_start_matches(['#', '-', '*', '>', ' '])
                .trim()
                .to_string()
        })
        .filter(|s| s.split_whitespace().count() >= 4)
        .collect()
}

/// Deterministic candidates: capitalised or repeated multi-word phrases and hyphenated
/// compounds in prose (code, links and other placeholders excluded), ranked by
/// frequency × length, house terms removed, at most `limit`.
pub fn extract_candidates(units: &[Unit], house: &Glossary, limit: usize) -> Vec<Candidate> {
    let mut counts: BTreeMap<String, (usize, String, String)> = BTreeMap::new();
    let house_terms: Vec<String> = house
        .entries
        .iter()
        .map(|e| e.source.to_lowercase())
        .collect();
    for unit in units.iter().filter(|u| u.kind == UnitKind::Translate) {
        for sentence in sentences(&prose_of(unit)) {
            let words: Vec<&str> = sentence
                .split(|c: char| !(c.is_alphanumeric() || c == '-' || c == '\''))
                .filter(|w| !w.is_empty())
                .collect();
            let mut seen_here = HashSet::new();
            for n in 1..=3 {
                for win in words.windows(n) {
                    if win
                        .iter()
                        .any(|w| is_stop(w) || w.chars().all(|c| c.is_ascii_digit()))
                    {
                        continue;
                    }
                    let phrase = win.join(" ");
                    let acronym = n == 1
                        && phrase.len() >= 2
                        && phrase
                            .chars()
                            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit());
                    // A single word is a term only as a hyphenated compound (`zero-shot`);
                    // plain words are vocabulary the model translates best in context.
                    let long_word = n == 1
                        && phrase.len() >= 7
                        && phrase.contains('-')
                        && phrase.chars().all(|c| c.is_ascii_lowercase() || c == '-');
                    let multi = n >= 2
                        && win.iter().all(|w| {
                            w.len() >= 2
                                && w.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
                        });
                    // Acronyms are kept as they are ([`keep_terms`]), never sent to the model.
                    if acronym || !(long_word || multi) {
                        continue;
                    }
                    let key = phrase.to_lowercase();
                    if !seen_here.insert(key.clone()) {
                        continue;
                    }
                    let e = counts
                        .entry(key)
                        .or_insert((0, phrase.clone(), sentence.clone()));
                    e.0 += 1;
                }
            }
        }
    }
    let mut cands: Vec<Candidate> = counts
        .into_iter()
        .filter(|(k, (n, phrase, _))| {
            let words = k.split(' ').count();
            let marked = phrase
                .split(' ')
                .skip(1)
                .any(|w| w.chars().any(|c| c.is_ascii_uppercase()))
                || phrase.contains('-');
            let min = match (words, phrase.chars().any(|c| c.is_ascii_uppercase())) {
                (1, true) => 1,
                (1, false) => 3,
                _ if marked => 1,
                _ => 3,
            };
            *n >= min
                && !house_terms
                    .iter()
                    .any(|h| contains_term(k, h) || contains_term(h, k))
        })
        .map(|(_, (count, term, context))| Candidate {
            term,
            count,
            context,
        })
        .collect();
    // Prefer longer phrases; drop a phrase contained in a more frequent longer one.
    cands.sort_by(|a, b| {
        let sa = a.count * a.term.split(' ').count();
        let sb = b.count * b.term.split(' ').count();
        sb.cmp(&sa).then(a.term.cmp(&b.term))
    });
    let mut picked: Vec<Candidate> = Vec::new();
    for c in cands {
        let lc = c.term.to_lowercase();
        if picked.iter().any(|p| {
            let lp = p.term.to_lowercase();
            (contains_term(&lp, &lc) && p.count >= c.count) || contains_term(&lc, &lp)
        }) {
            continue;
        }
        picked.push(c);
        if picked.len() >= limit {
            break;
        }
    }
    picked
}

/// Clean a model's one-term answer: first line, no quotes, no trailing punctuation, no
/// review mark, no romanisation in brackets.
pub fn clean_term(answer: &str) -> String {
    let line = answer
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    let line = line
        .split(['(', punct::FULLWIDTH_LEFT_PAREN])
        .next()
        .unwrap_or("");
    let line = line.replace(crate::lang::zh::REVIEW_MARK, "");
    let line = line
        .rsplit([':', punct::FULLWIDTH_COLON])
        .next()
        .unwrap_or("");
    line.trim()
        .trim_matches(|c: char| punct::TERM_WRAPPERS.contains(c))
        .trim()
        .to_string()
}

/// The house terms as a run's glossary holds them: strict, reviewed, with their preferred
/// target only.
pub fn house_terms(house: &Glossary) -> Glossary {
    Glossary {
        entries: house
            .entries
            .iter()
            .map(|e| GlossaryEntry {
                target: vec![e.preferred().to_string()],
                house: true,
                needs_review: false,
                ..e.clone()
            })
            .collect(),
    }
}

/// Run the agent: ask the model for each candidate's translation. Returns the full
/// glossary (house terms first, then inferred ones) and the model calls made.
pub fn build_glossary(
    backend: &mut dyn ChatBackend,
    candidates: &[Candidate],
    house: &Glossary,
    source_lang: &str,
    target_lang: &str,
    on_call: &mut dyn FnMut(&Candidate, &Completion),
) -> Result<Glossary> {
    let mut glossary = house_terms(house);
    let house = &glossary.entries;
    // The candidates are independent: one batch (decoded together where the backend can).
    let reqs = candidates
        .iter()
        .map(|c| term_request(source_lang, target_lang, house, c))
        .collect::<Result<Vec<_>>>()?;
    let replies = backend.complete_batch(&reqs)?;
    for (c, done) in candidates.iter().zip(&replies) {
        on_call(c, done);
        let zh = clean_term(&done.text);
        if !valid_proposal(&c.term, &zh) {
            continue;
        }
        glossary.entries.push(inferred(&c.term, zh, &c.context));
    }
    Ok(glossary)
}

/// The request that asks the model for one term's translation (the suggestion prompt).
fn term_request(
    source_lang: &str,
    target_lang: &str,
    house: &[GlossaryEntry],
    c: &Candidate,
) -> Result<ChatRequest> {
    let p = glossary_prompt(source_lang, target_lang, house, &c.term, &c.context)?;
    Ok(ChatRequest {
        messages: p.messages,
        split: p.split,
        params: GenerationParams {
            max_new_tokens: TERM_TOKENS,
            ..Default::default()
        },
    })
}

/// An inferred term, to be reviewed.
fn inferred(term: &str, target: String, context: &str) -> GlossaryEntry {
    GlossaryEntry {
        source: term.to_string(),
        target: vec![target],
        pos: None,
        context: Some(context.to_string()).filter(|c| !c.is_empty()),
        house: false,
        needs_review: true,
        replaces: Vec::new(),
    }
}

/// Whether a model's proposed translation of `term` can be a glossary entry: not empty,
/// not the term itself, no formula (`=`, `+`), not the term plus other words, no English
/// word the term lacks, and not far longer than a term (at most 4 characters per word of
/// the term, plus 4).
pub fn valid_proposal(term: &str, proposal: &str) -> bool {
    let p = proposal.trim();
    if p.is_empty() || p.eq_ignore_ascii_case(term) || p.contains(['=', '+', '\n']) {
        return false;
    }
    let lower_term = term.to_lowercase();
    let lower = p.to_lowercase();
    if lower.contains(&lower_term) {
        return false;
    }
    let foreign_word = lower
        .split(|c: char| !c.is_ascii_alphabetic())
        .filter(|w| w.len() >= 2)
        .any(|w| {
            !lower_term
                .split(|c: char| !c.is_ascii_alphabetic())
                .any(|t| t == w)
        });
    // Only words of the term (a truncation such as `prefix` for `prefix cache`).
    let only_term_words = p.is_ascii();
    let words = term.split_whitespace().count().max(1);
    !foreign_word && !only_term_words && p.chars().count() <= 4 * words + 4
}

/// `text` without quoted passages (`"…"`, `“…”`): quoted speech and examples are written
/// as people write, not in the book's terminology ("a Senior Software Engineer at TechCorp").
fn without_quotes(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut quoted = false;
    for c in text.chars() {
        match c {
            '"' => quoted = !quoted,
            '“' => quoted = true,
            '”' => quoted = false,
            '\n' => {
                quoted = false;
                out.push(c);
            }
            _ if !quoted => out.push(c),
            _ => {}
        }
    }
    out
}

/// A title-case sentence (a caption or a bold title: after the first word, three quarters
/// or more of the words of four letters or more capitalised, at least three of them), where
/// capitals mark the title, not terms.
fn title_case(words: &[&str]) -> bool {
    let long: Vec<&&str> = words.iter().skip(1).filter(|w| w.len() >= 4).collect();
    let caps = long
        .iter()
        .filter(|w| w.starts_with(|c: char| c.is_ascii_uppercase()))
        .count();
    long.len() >= 3 && caps * 4 >= long.len() * 3
}

/// Terms to keep as they are, found without a model: acronyms (`LLM`, `GAIA`) and words
/// the book writes with a capital letter in mid-sentence nearly every time it uses them
/// (`Agent`, `Prompt`): technical writers mark the terms they keep untranslated that way.
/// Labels followed by a number (`Figure 8-2`) and common translated names are excluded.
/// At most `limit`, most frequent first. `source` is the book's language (its profile's
/// capitalised common words are not kept).
pub fn keep_terms(
    units: &[Unit],
    house: &Glossary,
    limit: usize,
    source: &crate::lang::Profile,
) -> Vec<Candidate> {
    // word → (capitalised mid-sentence, all uses, followed by a number, context)
    let mut stats: BTreeMap<String, (usize, usize, usize, String)> = BTreeMap::new();
    // word → mid-sentence capitalised uses next to another capitalised word (not an
    // acronym): a name written in title case (`Contextual Retrieval`), whose words are
    // capitalised for the name, not kept one by one.
    let mut in_phrase: BTreeMap<String, usize> = BTreeMap::new();
    let title_word = |w: &str| {
        w.len() >= 2
            && w.starts_with(|c: char| c.is_ascii_uppercase())
            && w.chars()
                .skip(1)
                .all(|c| c.is_ascii_lowercase() || c == '-')
    };
    for unit in units.iter().filter(|u| u.kind == UnitKind::Translate) {
        // Headings are left out: title case capitalises every word.
        let text: String = prose_of(unit)
            .lines()
            .filter(|l| !l.trim_start().starts_with('#'))
            .collect::<Vec<_>>()
            .join("\n");
        for sentence in sentences(&without_quotes(&text)) {
            let words: Vec<&str> = sentence
                .split(|c: char| !(c.is_alphanumeric() || c == '-'))
                .filter(|w| !w.is_empty())
                .collect();
            if title_case(&words) {
                continue;
            }
            for (i, w) in words.iter().enumerate() {
                let first = w.chars().next().unwrap_or(' ');
                if w.len() < 2 || !first.is_ascii_alphabetic() {
                    continue;
                }
                let e = stats
                    .entry(w.to_string())
                    .or_insert((0, 0, 0, sentence.clone()));
                e.1 += 1;
                if i > 0 && first.is_ascii_uppercase() {
                    e.0 += 1;
                    let next = words.get(i + 1).is_some_and(|n| title_word(n));
                    let prev = i > 1 && title_word(words[i - 1]);
                    if title_word(w) && (next || prev) {
                        *in_phrase.entry(w.to_string()).or_default() += 1;
                    }
                }
                if words
                    .get(i + 1)
                    .is_some_and(|n| n.starts_with(|c: char| c.is_ascii_digit()))
                {
                    e.2 += 1;
                }
            }
        }
    }
    let lower_counts: BTreeMap<String, usize> = stats
        .iter()
        .filter(|(w, _)| w.chars().all(|c| c.is_ascii_lowercase() || c == '-'))
        .map(|(w, s)| (w.clone(), s.1))
        .collect();
    let mut keep: Vec<Candidate> = stats
        .iter()
        .filter_map(|(w, &(mid, _, numbered, ref context))| {
            let acronym = w.len() >= 2
                && w.chars().any(|c| c.is_ascii_uppercase())
                && w.chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit());
            let lower = w.to_ascii_lowercase();
            let lower_uses = lower_counts.get(&lower).copied().unwrap_or(0);
            let capitalised_term = w.len() >= 3
                && w.chars().next().is_some_and(|c| c.is_ascii_uppercase())
                && w.chars().skip(1).any(|c| c.is_ascii_lowercase())
                && mid >= 2
                && lower_uses * 4 <= mid
                && numbered * 2 < mid
                && in_phrase.get(w).copied().unwrap_or(0) * 2 < mid
                && !source.capitalised_common_words.contains(&lower.as_str())
                && !is_stop(w);
            let total = mid.max(1);
            ((acronym || capitalised_term)
                && !house
                    .entries
                    .iter()
                    .any(|h| h.source.eq_ignore_ascii_case(w)))
            .then(|| Candidate {
                term: w.clone(),
                count: total,
                context: context.clone(),
            })
        })
        .collect();
    // A plural whose singular is kept too is the same term (`Agents` → `Agent`).
    let singulars: HashSet<String> = keep.iter().map(|c| c.term.clone()).collect();
    keep.retain(|c| {
        !c.term
            .strip_suffix('s')
            .is_some_and(|s| singulars.contains(s))
    });
    // A plural kept on its own is named by its singular when the book writes that with a
    // capital too (`Skills` → `Skill`): the target languages have no plural.
    for c in &mut keep {
        let singular = c
            .term
            .strip_suffix('s')
            .filter(|s| !s.ends_with('s') && stats.get(*s).is_some_and(|st| st.0 > 0));
        if let Some(s) = singular {
            c.term = s.to_string();
        }
    }
    keep.sort_by(|a, b| b.count.cmp(&a.count).then(a.term.cmp(&b.term)));
    keep.truncate(limit);
    keep
}

/// Glossary terms that keep `terms` as they are (inferred, to be reviewed).
pub fn keep_lines(terms: &[Candidate]) -> Vec<GlossaryEntry> {
    terms
        .iter()
        .map(|c| inferred(&c.term, c.term.clone(), &c.context))
        .collect()
}

/// Whether a kept term is a word the model may translate although asked to keep it
/// (`Skill`, `Rubric`: it has a lower-case letter), not an acronym, which it keeps.
pub fn asks_rendering(term: &str) -> bool {
    term.chars().any(|c| c.is_ascii_lowercase())
}

/// The kept terms' entries, with the model's own translation of each kept word as the
/// words that stand for it ([`GlossaryEntry::replaces`]): asked with the suggestion prompt
/// (one batch), and kept only when it is a short run of the target's own script with no
/// Latin letter or digit (`Skill` → `技能`). Only for targets in a non-Latin script, where a
/// translated term is another script's word; `on_call` gets each model call.
pub fn kept_entries(
    backend: &mut dyn ChatBackend,
    terms: &[Candidate],
    house: &Glossary,
    source_lang: &str,
    target_lang: &str,
    on_call: &mut dyn FnMut(&Candidate, &Completion),
) -> Result<Vec<GlossaryEntry>> {
    let mut entries = keep_lines(terms);
    if !crate::lang::profile_or_latin(target_lang).is_cjk() {
        return Ok(entries);
    }
    let asked: Vec<usize> = (0..terms.len())
        .filter(|&i| asks_rendering(&terms[i].term))
        .collect();
    let reqs = asked
        .iter()
        .map(|&i| term_request(source_lang, target_lang, &house.entries, &terms[i]))
        .collect::<Result<Vec<_>>>()?;
    let replies = backend.complete_batch(&reqs)?;
    for (&i, done) in asked.iter().zip(&replies) {
        on_call(&terms[i], done);
        let r = clean_term(&done.text);
        if valid_rendering(&r) {
            entries[i].replaces = vec![r];
        }
    }
    Ok(entries)
}

/// Whether a model's translation of a kept word can stand for it: one to eight
/// characters, none of them ASCII, whitespace or punctuation (a word of the target's
/// script, not a phrase, an explanation or the term again).
pub fn valid_rendering(r: &str) -> bool {
    let n = r.chars().count();
    (1..=8).contains(&n) && r.chars().all(|c| c.is_alphabetic() && !c.is_ascii())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cleans_model_answers() {
        assert_eq!(clean_term("“键值缓存”\n"), "键值缓存");
        assert_eq!(clean_term("预填充 (yù tián chōng)"), "预填充");
        assert_eq!(clean_term("Translation: 量化[待审]。"), "量化");
    }

    #[test]
    fn house_terms_keep_the_words_they_replace() {
        let mut agent = GlossaryEntry::house("Agent", "Agent");
        agent.replaces = vec!["智能体".into()];
        let run = house_terms(&Glossary {
            entries: vec![agent],
        });
        assert_eq!(run.entries[0].replaces, ["智能体"]);
    }

    #[test]
    fn renderings_of_kept_words_are_short_words_of_another_script() {
        assert!(asks_rendering("Skill") && asks_rendering("GraphRAG"));
        assert!(!asks_rendering("LLM") && !asks_rendering("CAIL2018"));
        assert!(valid_rendering("技能") && valid_rendering("评分标准"));
        for bad in [
            "",
            "Skill",
            "技能 Skill",
            "技能（Skill）",
            "技能，也就是能力",
            "技能2",
        ] {
            assert!(!valid_rendering(bad), "{bad:?}");
        }
    }

    #[test]
    fn junk_proposals_are_rejected() {
        assert!(!valid_proposal("LLM", "现代代理 = LLM + 上下文 + 工具"));
        assert!(!valid_proposal(
            "TTFT",
            "时间到第一个词元的时间非常长的解释"
        ));
        assert!(!valid_proposal("prefix cache", "prefix cache 缓存"));
        assert!(!valid_proposal("prefix cache", "prefix"));
        assert!(!valid_proposal("cache", "cache"));
        assert!(valid_proposal("prefix cache", "前缀缓存"));
        assert!(valid_proposal("time to first token", "首词元时间"));
    }

    #[test]
    fn capitalised_terms_and_acronyms_are_kept() {
        let ch = crate::book::Chapter {
            rel_path: "c.md".into(),
            text: "## Senior Engineer Notes\n\nAn Agent calls the LLM twice. Each Agent keeps a Prompt in memory. \
                   The Prompt and the Agent see Figure 2 and Figure 3 here. \
                   Every agent has a Prompt and an Agent loop. Tools help the Agent. \
                   She was \"a Senior Engineer at Acme\" and \"a Senior Engineer at Initech\" before. \
                   The Agent read the Comparison of Four Memory Strategies and the Summary of Memory Strategies. \
                   Rules go into Skills, and Skills grow. A Skill is small; a skill is learned; old Skills fade. \
                   We use Contextual Retrieval here, and Contextual Retrieval there. \
                   The Agent also uses Advanced JSON Cards, and Advanced JSON Cards last.\n\n\
                   ![Comparison of Four Memory Strategies](fig.svg)"
                .into(),
        };
        let units =
            crate::units::segment_chapter(&ch, 10_000, &crate::units::EstimateTokens).unwrap();
        let keep: Vec<String> = keep_terms(
            &units,
            &Glossary::default(),
            10,
            crate::lang::profile_or_latin("en"),
        )
        .into_iter()
        .map(|c| c.term)
        .collect();
        assert!(keep.contains(&"Agent".to_string()), "{keep:?}");
        assert!(!keep.contains(&"Senior".to_string()), "quoted: {keep:?}");
        assert!(
            !keep.contains(&"Strategies".to_string()),
            "title case: {keep:?}"
        );
        assert!(keep.contains(&"Prompt".to_string()), "{keep:?}");
        assert!(keep.contains(&"LLM".to_string()), "{keep:?}");
        assert!(!keep.contains(&"Figure".to_string()), "{keep:?}");
        // Kept in the plural more often than not, named by the singular the book also uses.
        assert!(keep.contains(&"Skill".to_string()), "{keep:?}");
        assert!(!keep.contains(&"Skills".to_string()), "{keep:?}");
        assert!(
            !keep.contains(&"Tools".to_string()),
            "sentence start: {keep:?}"
        );
        // Words capitalised as part of a title-case name are not kept one by one…
        assert!(
            !keep.contains(&"Contextual".to_string()),
            "title-case name: {keep:?}"
        );
        // …but a capitalised word next to an acronym still is.
        assert!(keep.contains(&"Cards".to_string()), "{keep:?}");
    }
}
