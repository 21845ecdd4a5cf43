//! Speculative decoding on the real models: with the 0.5B drafting for the default 1.5B,
//! the output is byte-identical to plain decoding (greedy, seeded sampling, a decode-time
//! passage constraint, stop strings), the draft's guesses are verified in one forward pass
//! and many are kept; a draft with another tokenizer is refused.

mod common;

use common::*;
use quire::engine::chat_template::Message;
use quire::engine::generate::{Generation, GenerationParams};
use quire::engine::sampling::SamplingParams;
use quire::engine::speculative::Draft;
use quire::engine::{Engine, LoadOptions};
use quire::prompts::agents::{translate_prompt, DEFAULT_GUIDE};
use quire::translate::passage::constrained;
use std::sync::OnceLock;

/// The default translation model.
const DEFAULT: &str = "qwen2.5-coder-1.5b-instruct-q4_k_m";

fn target() -> &'static Engine {
    static E: OnceLock<Engine> = OnceLock::new();
    E.get_or_init(|| {
        Engine::load(
            &model_path(DEFAULT),
            &candle_core::Device::Cpu,
            &LoadOptions::default(),
        )
        .unwrap()
    })
}

fn draft_for(t: &Engine) -> Draft {
    let e = Engine::load(
        &model_path(QWEN),
        &candle_core::Device::Cpu,
        &LoadOptions::default(),
    )
    .unwrap();
    Draft::new(e, t).unwrap()
}

const PARAGRAPH: &str = "The prefix cache stores the keys and values of the system prompt once, so every later request that starts with the same prompt skips its prefill. On a laptop this turns a two-second wait into a few milliseconds.";

fn translation_prompt(e: &Engine, text: &str) -> Vec<u32> {
    let msgs = [
        Message::system("You are a professional translator. Translate the user's text into Simplified Chinese. Output only the translation."),
        Message::user(text),
    ];
    e.encode(&e.template.render(&msgs, true).unwrap()).unwrap()
}

fn plain(e: &Engine, prompt: &[u32], params: &GenerationParams) -> Generation {
    let mut cache = e.new_cache().unwrap();
    e.generate(&mut cache, prompt, params, &mut |_| {}).unwrap()
}

fn drafted(
    e: &Engine,
    prompt: &[u32],
    params: &GenerationParams,
    draft: &mut Draft,
) -> (Generation, String) {
    let mut cache = e.new_cache().unwrap();
    let mut streamed = String::new();
    let g = e
        .generate_speculative(&mut cache, prompt, params, draft, 0, &mut |t| {
            streamed.push_str(t)
        })
        .unwrap();
    // The cache holds the prompt and what was fed of the reply, nothing rejected.
    assert_eq!(&cache.tokens()[..prompt.len()], prompt);
    assert!(cache.len() <= prompt.len() + g.tokens.len());
    assert_eq!(
        &cache.tokens()[prompt.len()..],
        &g.tokens[..cache.len() - prompt.len()]
    );
    (g, streamed)
}

fn assert_same(a: &Generation, b: &Generation, what: &str) {
    assert!(!a.tokens.is_empty(), "{what}: nothing generated");
    assert_eq!(a.tokens, b.tokens, "{what}: tokens differ");
    assert_eq!(a.text, b.text, "{what}: text differs");
    assert_eq!(a.finish, b.finish, "{what}: finish differs");
}

#[test]
fn the_05b_drafting_for_the_15b_gives_the_plain_greedy_translation() {
    let t = target();
    let mut draft = draft_for(t).without_pace_guard();
    let prompt = translation_prompt(t, PARAGRAPH);
    let params = GenerationParams {
        max_new_tokens: 80,
        ..Default::default()
    };
    let alone = plain(t, &prompt, &params);
    let (with, streamed) = drafted(t, &prompt, &params, &mut draft);
    assert_same(&alone, &with, "greedy");
    assert_eq!(streamed, with.text, "streamed text");
    assert!(
        with.draft_proposed >= 20,
        "{} proposed",
        with.draft_proposed
    );
    // Translation text: the 0.5B guesses a good share of the 1.5B's tokens (about half).
    assert!(
        with.draft_accepted * 4 >= with.draft_proposed,
        "{} of {} accepted",
        with.draft_accepted,
        with.draft_proposed
    );
    assert!(
        with.draft_accepted < with.draft_proposed,
        "some guesses rejected"
    );
}

#[test]
fn drafting_keeps_sampling_constraints_and_stop_strings_exact() {
    let t = target();
    let mut draft = draft_for(t).without_pace_guard();
    // Seeded sampling: the target's sampler runs on the same logits in the same order.
    let prompt = translation_prompt(t, PARAGRAPH);
    let sampled = GenerationParams {
        max_new_tokens: 48,
        sampling: SamplingParams {
            temperature: 0.9,
            seed: 7,
            ..Default::default()
        },
        ..Default::default()
    };
    assert_same(
        &plain(t, &prompt, &sampled),
        &drafted(t, &prompt, &sampled, &mut draft).0,
        "sampled",
    );
    // A decode-time passage constraint (placeholders, no invented Markdown).
    let passage = "Call {{1}} once, then read {{2}}.\nKeep the Agent loop short.";
    let p = translate_prompt(DEFAULT_GUIDE, "en", "zh-CN", &[], &[], &[], passage, None).unwrap();
    let cprompt = t
        .encode(&t.template.render(&p.messages, true).unwrap())
        .unwrap();
    let cparams = constrained(&GenerationParams::default(), passage, "zh-CN", &[], 96);
    let (c, _) = drafted(t, &cprompt, &cparams, &mut draft);
    assert_same(&plain(t, &cprompt, &cparams), &c, "constrained");
    assert!(
        c.text.contains("{{1}}") && c.text.contains("{{2}}"),
        "{:?}",
        c.text
    );
    // A stop string that falls inside a run of accepted guesses.
    let first = plain(t, &prompt, &GenerationParams::default());
    let stop: String = first.text.chars().skip(6).take(2).collect();
    let stopping = GenerationParams {
        stop_strings: vec![stop.clone()],
        ..Default::default()
    };
    let (s, streamed) = drafted(t, &prompt, &stopping, &mut draft);
    assert_same(&plain(t, &prompt, &stopping), &s, "stop string");
    assert!(
        !s.text.contains(&stop) && streamed == s.text,
        "{:?}",
        s.text
    );
}

#[test]
fn the_pace_guard_measures_both_ways_and_changes_nothing() {
    let t = target();
    let mut draft = draft_for(t);
    let prompt = translation_prompt(t, PARAGRAPH);
    let params = GenerationParams {
        max_new_tokens: 64,
        ..Default::default()
    };
    let (g, _) = drafted(t, &prompt, &params, &mut draft);
    assert_same(&plain(t, &prompt, &params), &g, "guarded");
    let (plain_pace, _) = draft.pace();
    assert!(
        plain_pace.is_some_and(|p| p > 0.0),
        "plain decoding measured"
    );
}

#[test]
fn a_draft_with_another_tokenizer_is_refused() {
    let e = Engine::load(
        &model_path(SMOL),
        &candle_core::Device::Cpu,
        &LoadOptions::default(),
    )
    .unwrap();
    let err = Draft::new(e, qwen()).err().expect("refused").to_string();
    assert!(err.contains("different vocabulary"), "{err}");
}
