//! The engine on the real models: chat template, greedy generation, a Llama forward pass.

mod common;

use common::*;
use quire::engine::generate::GenerationParams;
use quire::prompts::chat_template::{ChatTemplate, Message};

#[test]
fn qwen_template_renders_system_user_generation_prompt_byte_for_byte() {
    let e = qwen();
    let text = e
        .template
        .render(
            &[
                Message::system("You are a translator."),
                Message::user("Translate to Chinese: Hello, world."),
            ],
            true,
        )
        .unwrap();
    assert_eq!(
        text,
        "<|im_start|>system\nYou are a translator.<|im_end|>\n<|im_start|>user\nTranslate to Chinese: Hello, world.<|im_end|>\n<|im_start|>assistant\n"
    );
    // The shipped qwen2 template is the same template.
    let shipped = ChatTemplate::named("qwen2").unwrap();
    let msgs = [Message::user("Hi")];
    assert_eq!(
        shipped.render(&msgs, true).unwrap(),
        e.template.render(&msgs, true).unwrap()
    );
    // Without a system message Qwen inserts its default one.
    assert!(e
        .template
        .render(&msgs, false)
        .unwrap()
        .starts_with("<|im_start|>system\nYou are Qwen"));
}

#[test]
fn smollm2_template_renders_default_system_prompt() {
    let e = smol();
    let text = e.template.render(&[Message::user("Hi")], true).unwrap();
    assert_eq!(
        text,
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    );
}

fn greedy(e: &quire::engine::Engine, msgs: &[Message], n: usize) -> String {
    let prompt = e.encode(&e.template.render(msgs, true).unwrap()).unwrap();
    let mut cache = e.new_cache().unwrap();
    let params = GenerationParams {
        max_new_tokens: n,
        ..Default::default()
    };
    e.generate(&mut cache, &prompt, &params, &mut |_| {})
        .unwrap()
        .text
}

#[test]
fn qwen_greedy_translates_into_chinese() {
    let out = greedy(
        qwen(),
        &[
            Message::system("You are a professional translator. Translate the user's text from English into Simplified Chinese. Output only the translation."),
            Message::user("The cache makes every request faster."),
        ],
        40,
    );
    let han = out
        .chars()
        .filter(|c| ('\u{4e00}'..='\u{9fff}').contains(c))
        .count();
    assert!(han >= 5, "expected a Chinese translation, got {out:?}");
    assert!(out.contains("缓存"), "expected 缓存 (cache) in {out:?}");
}

#[test]
fn smollm2_llama_forward_pass_answers() {
    let e = smol();
    let cfg = e.config();
    assert_eq!(
        (cfg.architecture.as_str(), cfg.n_layer, cfg.hidden),
        ("llama", 30, 576)
    );
    let mut cache = e.new_cache().unwrap();
    let ids = e.encode("The capital of France is").unwrap();
    let logits = e.prefill(&mut cache, &ids).unwrap();
    let v: Vec<f32> = logits.to_vec1().unwrap();
    assert_eq!(v.len(), cfg.vocab_size);
    assert!(v.iter().all(|x| x.is_finite()));
    assert_eq!(cache.len(), ids.len());
    let out = greedy(
        e,
        &[Message::user(
            "What is the capital of France? Answer in one word.",
        )],
        12,
    );
    assert!(out.contains("Paris"), "got {out:?}");
}

#[test]
fn stop_strings_and_max_tokens_end_generation() {
    let e = qwen();
    let prompt = e
        .encode(
            &e.template
                .render(
                    &[Message::user("Count from 1 to 20, separated by commas.")],
                    true,
                )
                .unwrap(),
        )
        .unwrap();
    let mut cache = e.new_cache().unwrap();
    let params = GenerationParams {
        max_new_tokens: 60,
        stop_strings: vec!["5".into()],
        ..Default::default()
    };
    let mut streamed = String::new();
    let g = e
        .generate(&mut cache, &prompt, &params, &mut |s| streamed.push_str(s))
        .unwrap();
    assert_eq!(
        g.finish,
        quire::engine::generate::FinishReason::Stop,
        "{:?}",
        g.text
    );
    assert!(
        !g.text.contains('5') && g.text.contains('4'),
        "{:?}",
        g.text
    );
    assert_eq!(streamed, g.text);
    let mut cache = e.new_cache().unwrap();
    let params = GenerationParams {
        max_new_tokens: 3,
        ..Default::default()
    };
    let g = e
        .generate(&mut cache, &prompt, &params, &mut |_| {})
        .unwrap();
    assert_eq!(
        (g.tokens.len(), g.finish),
        (3, quire::engine::generate::FinishReason::Length)
    );
}
