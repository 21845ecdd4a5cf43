//! The engine on the real models: chat template, greedy generation, a Llama forward pass.

mod common;

use common::*;
use quire::engine::chat_template::{ChatTemplate, Message};
use quire::engine::generate::GenerationParams;
use quire::engine::{Engine, LoadOptions};

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

/// Quire's own CPU kernels against the engine as it was before them (Candle's quantized
/// matmul, which quantizes activations differently): last-position logits of a real prompt
/// on both models agree within a stated tolerance and pick the same next token.
#[test]
fn native_kernels_match_the_candle_engine() {
    // Tolerance on max |Δlogit| over the whole vocabulary: two different 8-bit activation
    // quantizations through 24 (Qwen) / 30 (SmolLM2) layers. Measured 0.28 (Qwen, logits
    // ~20) and 1.0 (SmolLM2, logits ~30); against llama.cpp both engines are within
    // 0.1–0.3 on the top-5 (`logits_match_llama_cpp_reference`).
    const TOL: f32 = 1.5;
    for (name, native) in both() {
        let candle = Engine::load(
            &model_path(name),
            &candle_core::Device::Cpu,
            &LoadOptions {
                candle_kernels: true,
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(candle.kernels, "candle");
        assert!(native.kernels.starts_with("native"), "{}", native.kernels);
        let prompt = native
            .encode("The prefix cache stores keys and values for every layer of the model.")
            .unwrap();
        let logits = |e: &Engine| -> Vec<f32> {
            let mut cache = e.new_cache().unwrap();
            e.prefill(&mut cache, &prompt).unwrap().to_vec1().unwrap()
        };
        let (a, b) = (logits(native), logits(&candle));
        let diff = a
            .iter()
            .zip(&b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0f32, f32::max);
        let argmax = |v: &[f32]| {
            v.iter()
                .enumerate()
                .max_by(|x, y| x.1.total_cmp(y.1))
                .map(|(i, _)| i)
                .unwrap()
        };
        eprintln!("{name}: max |native − candle| logit difference {diff:.4}");
        assert!(diff <= TOL, "{name}: logits differ by {diff}");
        assert_eq!(argmax(&a), argmax(&b), "{name}: next token differs");
    }
}

/// Last-position logits against llama.cpp's for the same prompt ids
/// (`tests/fixtures/reference/*.json`, llama-cpp-python 0.3.36 on this model file): the
/// same top-1 token (Qwen), and the top-5 logits within the tolerance two engines' different
/// activation quantizations leave (the Candle-kernel engine is printed alongside).
#[test]
fn logits_match_llama_cpp_reference() {
    for (name, fixture) in [
        (QWEN, "qwen2.5-coder-0.5b.json"),
        (SMOL, "smollm2-135m.json"),
    ] {
        let text = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/reference")
                .join(fixture),
        )
        .unwrap();
        let r: serde_json::Value = serde_json::from_str(&text).unwrap();
        let ids: Vec<u32> = r["prompt_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        let mut worst = [0.0f32; 2];
        for (slot, candle) in [false, true].into_iter().enumerate() {
            let e = Engine::load(
                &model_path(name),
                &candle_core::Device::Cpu,
                &LoadOptions {
                    candle_kernels: candle,
                    ..Default::default()
                },
            )
            .unwrap();
            let mut cache = e.new_cache().unwrap();
            let logits: Vec<f32> = e.prefill(&mut cache, &ids).unwrap().to_vec1().unwrap();
            for t in r["top5"].as_array().unwrap() {
                let id = t["id"].as_u64().unwrap() as usize;
                let want = t["logit"].as_f64().unwrap() as f32;
                worst[slot] = worst[slot].max((logits[id] - want).abs());
            }
            let top = logits
                .iter()
                .enumerate()
                .max_by(|a, b| a.1.total_cmp(b.1))
                .unwrap()
                .0;
            // SmolLM2's top logits lie 0.1 apart: only Qwen's top-1 is demanded.
            if !candle && name == QWEN {
                assert_eq!(top as u64, r["top5"][0]["id"].as_u64().unwrap(), "{name}");
            }
        }
        eprintln!(
            "{name}: max |Δ top-5 logit| vs llama.cpp: native {:.4}, candle {:.4}",
            worst[0], worst[1]
        );
        assert!(worst[0] <= 1.0, "{name}: {}", worst[0]);
    }
}

/// Throughput mode: several prompts decoded together give exactly the tokens each gives
/// alone (the batched rows go through the batch kernels, single decoding through the
/// single-row kernels; both are bit-identical), on both models.
#[test]
fn batched_generation_equals_sequential() {
    for (name, e) in both() {
        let texts = [
            "Translate to Chinese: The cache is computed once.",
            "Write one sentence about lighthouses.",
            "List three prime numbers.",
        ];
        let prompts: Vec<Vec<u32>> = texts
            .iter()
            .map(|t| {
                e.encode(&e.template.render(&[Message::user(*t)], true).unwrap())
                    .unwrap()
            })
            .collect();
        let params = GenerationParams {
            max_new_tokens: 12,
            ..Default::default()
        };
        let alone: Vec<_> = prompts
            .iter()
            .map(|p| {
                let mut cache = e.new_cache().unwrap();
                e.generate(&mut cache, p, &params, &mut |_| {}).unwrap()
            })
            .collect();
        let mut caches: Vec<_> = prompts.iter().map(|_| e.new_cache().unwrap()).collect();
        let mut jobs: Vec<(&mut quire::engine::kv_cache::KvCache, &[u32])> = caches
            .iter_mut()
            .zip(&prompts)
            .map(|(c, p)| (c, p.as_slice()))
            .collect();
        let together = e
            .generate_batch(&mut jobs, std::slice::from_ref(&params))
            .unwrap();
        for (a, b) in alone.iter().zip(&together) {
            assert!(!a.tokens.is_empty(), "{name}");
            assert_eq!(a.tokens, b.tokens, "{name}");
            assert_eq!(a.text, b.text, "{name}");
            assert_eq!(a.finish, b.finish, "{name}");
        }
    }
}

/// `quire bench engine --isa avx2` holds Quire's worker to its AVX2 kernels on the real
/// model, and the report says so.
#[test]
fn bench_engine_isa_avx2_runs_the_avx2_kernels() {
    #[cfg(target_arch = "x86_64")]
    let avx2 = is_x86_feature_detected!("avx2")
        && is_x86_feature_detected!("fma")
        && is_x86_feature_detected!("f16c");
    #[cfg(not(target_arch = "x86_64"))]
    let avx2 = false;
    if !avx2 {
        eprintln!("skipped: this CPU has no AVX2");
        return;
    }
    let model = model_path(QWEN);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_quire"))
        .args(["bench", "engine", "--isa", "avx2", "--json"])
        .args(["--repeats", "1", "--decode-tokens", "4", "--model"])
        .arg(&model)
        .output()
        .expect("quire runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON report");
    assert_eq!(r["isa"], "avx2");
    assert_eq!(r["quire"]["kernels"], "Avx2");
    assert!(r["quire"]["prefill_short_tok_s"].as_f64().unwrap() > 0.0);
    assert!(r["llama_cpp"].is_null(), "no llama.cpp without --compare");
}
