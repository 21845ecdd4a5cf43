//! The decode-time passage constraint on the real 0.5B model: a translation keeps the
//! passage's line structure and placeholders exactly, invents no Markdown, leaves no
//! ordinary English word in a Chinese sentence — and batched decoding gives the same
//! tokens as decoding alone.

mod common;

use common::qwen;
use quire::engine::generate::GenerationParams;
use quire::prompts::agents::{translate_prompt, DEFAULT_GUIDE};
use quire::translate::passage::{constrained, restore_segment};
use quire::units::skeleton::Skeleton;
use quire::units::{segment_chapter, EstimateTokens, UnitKind, PLACEHOLDER_RE};

const CHAPTER: &str = "> Reuse the prompt prefix whenever possible.\n\n\
- Call `warm_cache()` once, then read [the guide](https://example.com/guide) and `stats()`.\n\
- Keep the Agent loop short.\n";

fn prompt(e: &quire::engine::Engine, passage: &str) -> Vec<u32> {
    let p = translate_prompt(DEFAULT_GUIDE, "en", "zh-CN", &[], &[], &[], passage, None).unwrap();
    e.encode(&e.template.render(&p.messages, true).unwrap())
        .unwrap()
}

#[test]
fn constrained_translation_keeps_structure_on_the_real_model() {
    let e = qwen();
    let ch = quire::book::Chapter {
        rel_path: "c.md".into(),
        text: CHAPTER.into(),
    };
    let units: Vec<_> = segment_chapter(&ch, 10_000, &EstimateTokens)
        .unwrap()
        .into_iter()
        .filter(|u| u.kind == UnitKind::Translate)
        .collect();
    let mut jobs = Vec::new();
    for u in &units {
        let sk = Skeleton::of(u);
        let passage = sk.model_text();
        let params = constrained(&GenerationParams::default(), &passage, "zh-CN", &[], 200);
        jobs.push((u.clone(), sk, passage, params));
    }
    let mut singles = Vec::new();
    for (u, sk, passage, params) in &jobs {
        let mut cache = e.new_cache().unwrap();
        let gen = e
            .generate(&mut cache, &prompt(e, passage), params, &mut |_| {})
            .unwrap();
        let lines: Vec<&str> = gen.text.trim().split('\n').collect();
        assert!(
            lines.len() <= sk.segments.len(),
            "{passage:?} → {:?}",
            gen.text
        );
        if lines.len() < sk.segments.len() {
            // Ended early: the fallback cascade's case (each segment alone).
            singles.push(gen.tokens);
            continue;
        }
        let mut restored = Vec::new();
        for (seg, line) in sk.segments.iter().zip(&lines) {
            restored.push(
                restore_segment(u, seg, line)
                    .unwrap_or_else(|err| panic!("{passage:?} → {:?}: {err}", gen.text)),
            );
            assert!(
                !line.trim_start().starts_with(['-', '>', '#', '|']),
                "{line:?}"
            );
            assert!(
                !line.contains("whenever") && !line.contains('`'),
                "{line:?}"
            );
        }
        let text = sk.assemble(u, &restored);
        // The Markdown the model never saw is all there.
        for marker in [
            "> ",
            "- ",
            "`warm_cache()`",
            "(https://example.com/guide)",
            "`stats()`",
        ] {
            if u.source.contains(marker) {
                assert!(text.contains(marker), "{marker:?} lost: {text:?}");
            }
        }
        assert!(PLACEHOLDER_RE.find(&text).is_none(), "{text:?}");
        singles.push(gen.tokens);
    }
    // Batched decoding applies each sequence's own constraint: same tokens.
    let prompts: Vec<Vec<u32>> = jobs.iter().map(|j| prompt(e, &j.2)).collect();
    let mut caches: Vec<_> = jobs.iter().map(|_| e.new_cache().unwrap()).collect();
    let mut batch: Vec<(&mut quire::engine::kv_cache::KvCache, &[u32])> = caches
        .iter_mut()
        .zip(&prompts)
        .map(|(c, p)| (c, p.as_slice()))
        .collect();
    let params: Vec<GenerationParams> = jobs.iter().map(|j| j.3.clone()).collect();
    let gens = e.generate_batch(&mut batch, &params).unwrap();
    for (g, s) in gens.iter().zip(&singles) {
        assert_eq!(
            &g.tokens, s,
            "batched decoding changed a constrained sequence"
        );
    }
}

/// May end only once `{{7}}` is written, and says so ([`TextConstraint::owed`]).
struct OwesAPlaceholder;

impl quire::engine::constraint::TextConstraint for OwesAPlaceholder {
    fn allows(&self, _text: &[u8], _next: &[u8]) -> bool {
        true
    }
    fn allows_end(&self, text: &[u8]) -> bool {
        text.windows(5).any(|w| w == b"{{7}}")
    }
    fn owed(&self, text: &[u8]) -> Option<Vec<u8>> {
        (!self.allows_end(text)).then(|| b"{{7}}".to_vec())
    }
}

#[test]
fn a_model_that_would_end_is_steered_to_what_the_text_owes() {
    let e = qwen();
    let messages = [quire::engine::chat_template::Message::user(
        "Reply with one short greeting in Chinese.".to_string(),
    )];
    let prompt = e
        .encode(&e.template.render(&messages, true).unwrap())
        .unwrap();
    let params = GenerationParams {
        max_new_tokens: 48,
        constraint: Some(quire::engine::constraint::Constraint::new(OwesAPlaceholder)),
        ..GenerationParams::default()
    };
    let mut cache = e.new_cache().unwrap();
    let gen = e
        .generate(&mut cache, &prompt, &params, &mut |_| {})
        .unwrap();
    // Where the model would have stopped, it writes what it owes and then stops.
    assert!(gen.text.contains("{{7}}"), "{:?}", gen.text);
    assert_eq!(
        gen.finish,
        quire::engine::generate::FinishReason::Eos,
        "{:?}",
        gen.text
    );
}

/// On the real model: a sentence's translation ends as a sentence (not on the word the
/// constraint refused to let grow), a title-case heading's words are translated, and no
/// letter of another script appears.
#[test]
fn sentences_end_whole_and_title_words_are_translated_on_the_real_model() {
    let e = qwen();
    let passages = [
        "The next chapter turns to \"tools\": how Agents interact with the external world through tool design, the MCP interoperability standard, and event-driven architecture.",
        "Agentic RAG: A Paradigm Shift Toward Tool-Based Knowledge Retrieval",
    ];
    for passage in passages {
        let glossary = [quire::glossary::GlossaryEntry::house("Agent", "Agent")];
        let params = constrained(
            &GenerationParams::default(),
            passage,
            "zh-CN",
            &glossary,
            200,
        );
        let mut cache = e.new_cache().unwrap();
        let gen = e
            .generate(&mut cache, &prompt(e, passage), &params, &mut |_| {})
            .unwrap();
        let reply = gen.text.trim();
        assert!(!reply.is_empty(), "{passage:?}");
        assert!(
            reply
                .chars()
                .filter(|c| c.is_alphabetic())
                .all(|c| c.is_ascii() || quire::units::is_cjk(c)),
            "{passage:?} → {reply:?}"
        );
        if passage.ends_with('.') {
            assert!(
                !reply.chars().last().unwrap().is_alphanumeric(),
                "{passage:?} → {reply:?}"
            );
        } else {
            for word in ["Paradigm", "paradigm", "Shift", "Knowledge", "Retrieval"] {
                assert!(!reply.contains(word), "{passage:?} → {reply:?}");
            }
        }
    }
}

/// One paragraph translated by the real model with its inline code and names shown as
/// written: the passage as the model saw it, the reply, and the reply restored.
fn translate_shown(
    e: &quire::engine::Engine,
    text: &str,
    spans: usize,
) -> (String, String, String) {
    use quire::units::verbatim;
    let ch = quire::book::Chapter {
        rel_path: "c.md".into(),
        text: text.to_string(),
    };
    let unit = segment_chapter(&ch, 10_000, &EstimateTokens)
        .unwrap()
        .into_iter()
        .find(|u| u.kind == UnitKind::Translate)
        .unwrap();
    let sk = Skeleton::of(&unit);
    let passage = sk.model_text();
    let shown = verbatim::spans(&unit, &passage);
    assert_eq!(shown.len(), spans, "{passage}");
    let display = verbatim::show(&passage, &shown);
    let params = quire::translate::passage::constrained_shown(
        &GenerationParams::default(),
        &passage,
        ("en", "zh-CN"),
        &[],
        &[],
        shown.clone(),
        200,
    );
    let mut cache = e.new_cache().unwrap();
    let gen = e
        .generate(&mut cache, &prompt(e, &display), &params, &mut |_| {})
        .unwrap();
    let reply = gen.text.trim().to_string();
    let hidden = verbatim::hide(&reply, &shown);
    let restored = restore_segment(&unit, &sk.segments[0], &hidden).unwrap();
    (display, reply, restored)
}

/// On the real model: inline code shown as written (`` `k1` ``) is written back exactly
/// once and where its sentence needs it, and maps back to the unit's placeholders.
#[test]
fn inline_code_shown_as_written_comes_back_exactly_on_the_real_model() {
    let (display, reply, restored) = translate_shown(
        qwen(),
        "BM25 introduces two parameters. `k1` controls term-frequency saturation, and `b` controls document-length normalization.\n",
        2,
    );
    assert!(display.contains("`k1` controls"), "{display}");
    assert_eq!(reply.matches("`k1`").count(), 1, "{reply}");
    assert_eq!(reply.matches("`b`").count(), 1, "{reply}");
    assert!(
        restored.contains("`k1`") && restored.contains("`b`"),
        "{restored}"
    );
    // `k1` stays the subject of its clause: written before the word for saturation.
    let (k1, sat) = (reply.find("`k1`").unwrap(), reply.find("饱和"));
    assert!(sat.is_none_or(|s| k1 < s), "{reply}");
}

/// On the real model: camel-case names (`GraphRAG`, `LlamaIndex`) are shown in backticks,
/// written back whole, and restored as the plain names of the source (left as words, the
/// 1.5B took `GraphRAG` apart into `图 R 图`).
#[test]
fn camel_case_names_come_back_whole_on_the_real_model() {
    let (display, reply, restored) = translate_shown(
        qwen(),
        "GraphRAG builds a knowledge graph from the documents before any question is asked, while LlamaIndex retrieves plain text chunks.\n",
        2,
    );
    assert!(display.starts_with("`GraphRAG` builds"), "{display}");
    assert_eq!(reply.matches("`GraphRAG`").count(), 1, "{reply}");
    assert_eq!(reply.matches("`LlamaIndex`").count(), 1, "{reply}");
    assert_eq!(restored.matches("GraphRAG").count(), 1, "{restored}");
    assert_eq!(restored.matches("LlamaIndex").count(), 1, "{restored}");
    assert!(!restored.contains('`'), "{restored}");
    assert!(restored.chars().any(quire::units::is_cjk), "{restored}");
}

/// The proofreading agent's reply on the real model, held to its shape at decode time: `OK`
/// or up to three `- ` problem lines, for a faithful translation and for one that drops
/// half its source alike (left free, the models sometimes answer with prose such as "The
/// translation is faithful and fluent.", which the report would list as a problem).
#[test]
fn a_review_verdict_is_ok_or_problem_lines_on_the_real_model() {
    use quire::engine::constraint::Constraint;
    use quire::prompts::agents::{review_prompt, VerdictShape};
    let e = qwen();
    let source = "The cache is stored on disk. A restart therefore costs only a few milliseconds.";
    for translation in [
        "缓存保存在磁盘上。因此重启只需几毫秒。",
        "缓存保存在磁盘上。",
    ] {
        let p = review_prompt("en", "zh-CN", &[], source, translation).unwrap();
        let ids = e
            .encode(&e.template.render(&p.messages, true).unwrap())
            .unwrap();
        let params = GenerationParams {
            max_new_tokens: 96,
            constraint: Some(Constraint::new(VerdictShape)),
            ..Default::default()
        };
        let mut cache = e.new_cache().unwrap();
        let gen = e.generate(&mut cache, &ids, &params, &mut |_| {}).unwrap();
        let v = gen.text.trim();
        assert!(
            v == "OK"
                || (v.lines().count() <= 3
                    && v.lines().all(|l| l.starts_with("- ") && l.len() > 2)),
            "{translation:?} → {v:?}"
        );
        eprintln!("{translation:?} → {v:?}");
    }
}

/// The emphasis agent on the real model: asked which words of a translated line render a
/// bold phrase the translation dropped, it answers with a piece of the line (held to one at
/// decode time), and the phrase's emphasis is written back there.
#[test]
fn a_dropped_bold_phrase_is_found_in_its_line_and_written_back() {
    use quire::prompts::agents::emphasis_prompt;
    use quire::translate::emphasis::{accept, bold_spans, question, wrap};
    let e = qwen();
    let cases = [
        (
            "Two **structured indexing** techniques tackle how knowledge should be organized.",
            "两种结构化索引技术解决了知识应该如何组织的问题。",
            "structured indexing",
            "索引",
        ),
        (
            "A query counts as a hit when one relevant document is retrieved: this is the **hit rate**.",
            "只要检索到一篇相关文档，查询就算命中：这就是命中率。",
            "hit rate",
            "命中",
        ),
    ];
    for (source, line, phrase, expect) in cases {
        let req = question(
            emphasis_prompt("en", "zh-CN", source, line, phrase).unwrap(),
            line,
        );
        let prompt = e
            .encode(&e.template.render(&req.messages, true).unwrap())
            .unwrap();
        let mut cache = e.new_cache().unwrap();
        let gen = e
            .generate(&mut cache, &prompt, &req.params, &mut |_| {})
            .unwrap();
        let answer = accept(phrase, line, &gen.text, "zh-CN")
            .unwrap_or_else(|| panic!("{phrase:?} in {line:?}: {:?} not taken", gen.text));
        assert!(answer.contains(expect), "{phrase:?} → {answer:?}");
        let near = source.find("**").unwrap() as f64 / source.len() as f64;
        let bold = wrap(line, &answer, near).unwrap();
        let spans = bold_spans(&bold);
        assert_eq!(spans.len(), 1, "{bold:?}");
        assert_eq!(spans[0].inner, answer);
    }
}
