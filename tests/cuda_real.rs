//! The engine and the prefix cache on an NVIDIA GPU, against the CPU, on the real models.
//!
//! Run on a machine with a GPU: `cargo test --release --features cuda --test cuda_real --
//! --nocapture --test-threads=1` (`scripts/gpu-check.sh` does, among its other checks).
//! Each test prints what it measured:
//! * last-position logits of a prompt on CUDA vs the CPU: max |Δ| over the vocabulary,
//!   within [`LOGIT_TOL`], and the same next token unless the two candidates are a near-tie;
//! * a greedy 64-token continuation on CUDA vs the CPU: identical, or the first divergence
//!   with the two candidates' logit gap on each device (accepted only at a near-tie,
//!   [`TIE_TOL`]);
//! * a cached prefix on the GPU (in memory, from disk, through the backend) against a
//!   recompute on the GPU: bit for bit ([`PREFIX_TOL`]) against a recompute of the same
//!   chunks, and within [`LOGIT_TOL`] of a one-pass prefill (the GPU's matmul kernels
//!   change with the number of rows, so only the same chunking can be exact);
//! * rows decoded together on the GPU vs each decoded alone;
//! * a draft model for speculative decoding refused cleanly on the GPU.
//!
//! Where no GPU can be used every test passes after printing why it was skipped — the crate
//! built without the `cuda` feature, or `Device::new_cuda(0)` failing (no driver, no
//! device) — unless `QUIRE_CUDA_REQUIRED=1`, which turns the skip into a failure (the GPU
//! check script sets it, so that a broken driver cannot pass as a skip).

mod common;

use candle_core::{Device, Tensor};
use common::*;
use quire::engine::backend::{ChatBackend, ChatRequest, LocalBackend};
use quire::engine::chat_template::Message;
use quire::engine::generate::GenerationParams;
use quire::engine::kv_cache::KvCache;
use quire::engine::prefix_cache::disk::DiskPrefixCache;
use quire::engine::prefix_cache::PrefixStore;
use quire::engine::stable_prefix::SplitPoint;
use quire::engine::{Engine, LoadOptions};
use std::io::Write;

/// The default translation model (the one `quire translate` runs).
const DEFAULT: &str = "qwen2.5-coder-1.5b-instruct-q4_k_m";

/// Stated tolerance on max |Δlogit| over the whole vocabulary between two computations that
/// use different kernels: CUDA runs Candle's quantized kernels, the CPU Quire's own 8-bit
/// ones. The same bound as Quire's CPU kernels against Candle's on the CPU
/// (`engine_real.rs`, measured 0.28 on Qwen and 1.0 on SmolLM2, logits ~20–30).
const LOGIT_TOL: f32 = 1.5;
/// A greedy divergence between two kernel paths is accepted only at a near-tie: the CPU's
/// logits of the two candidates within this much of each other.
const TIE_TOL: f32 = LOGIT_TOL;
/// Cached prefix vs a recompute of the same chunks on the same device: the cache only
/// stores and copies keys and values, so the logits must be equal
/// (`prefix_cache_real.rs`'s tolerance on the CPU).
const PREFIX_TOL: f32 = 1e-4;
/// Greedy tokens compared between the devices.
const GREEDY_TOKENS: usize = 64;

/// The GPU, or why these tests cannot run here.
#[cfg(feature = "cuda")]
fn gpu() -> Result<Device, String> {
    Device::new_cuda(0).map_err(|e| {
        format!("no usable CUDA device: Device::new_cuda(0) failed ({e}); check `nvidia-smi`")
    })
}

/// The GPU, or why these tests cannot run here.
#[cfg(not(feature = "cuda"))]
fn gpu() -> Result<Device, String> {
    Err("built without the `cuda` feature; on a machine with an NVIDIA GPU run `cargo test --release --features cuda --test cuda_real` (or scripts/gpu-check.sh)".to_string())
}

/// A line on the terminal even when the test harness captures output (a passing test's
/// `eprintln!` is swallowed; a direct write to stderr is not).
fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// The GPU for `test`, or `None` after printing why it is skipped (a panic instead when
/// `QUIRE_CUDA_REQUIRED=1`).
fn gpu_for(test: &str) -> Option<Device> {
    match gpu() {
        Ok(d) => Some(d),
        Err(why) => {
            let required = std::env::var("QUIRE_CUDA_REQUIRED").is_ok_and(|v| v == "1");
            assert!(!required, "{test}: QUIRE_CUDA_REQUIRED=1 but {why}");
            say(&format!("cuda_real::{test}: SKIPPED: {why}"));
            None
        }
    }
}

fn load_on(name: &str, device: &Device) -> Engine {
    Engine::load(&model_path(name), device, &LoadOptions::default())
        .unwrap_or_else(|e| panic!("cannot load {name} on {device:?}: {e:#}"))
}

/// The models the GPU is checked on: both test models (Qwen2 and Llama architectures) and
/// the default translation model. The CPU engines are loaded once per test binary.
fn models() -> [(&'static str, &'static Engine); 3] {
    static DEFAULT_CPU: std::sync::OnceLock<Engine> = std::sync::OnceLock::new();
    [
        (QWEN, qwen()),
        (SMOL, smol()),
        (
            DEFAULT,
            DEFAULT_CPU.get_or_init(|| load_on(DEFAULT, &Device::Cpu)),
        ),
    ]
}

fn chat_prompt(e: &Engine) -> Vec<u32> {
    let msgs = [
        Message::system("You are a professional translator. Translate the user's technical English into Simplified Chinese. Keep Markdown, code and numbers exactly. Glossary: token = 词元; prompt = 提示词; latency = 时延."),
        Message::user("The prefix cache stores the keys and values of the system prompt once, so every later request that starts with the same prompt skips its prefill."),
    ];
    e.encode(&e.template.render(&msgs, true).unwrap()).unwrap()
}

fn to_vec(t: &Tensor) -> Vec<f32> {
    t.to_device(&Device::Cpu)
        .and_then(|t| t.to_dtype(candle_core::DType::F32))
        .and_then(|t| t.to_vec1())
        .unwrap()
}

fn argmax(v: &[f32]) -> u32 {
    v.iter()
        .enumerate()
        .max_by(|a, b| a.1.total_cmp(b.1))
        .map(|(i, _)| i as u32)
        .unwrap()
}

fn max_abs(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// Last-position logits after prefilling `tokens` into a fresh cache, in one call.
fn logits_after(e: &Engine, tokens: &[u32]) -> Vec<f32> {
    let mut cache = e.new_cache().unwrap();
    to_vec(&e.prefill(&mut cache, tokens).unwrap())
}

/// Last-position logits after prefilling `tokens[..split]` and then `tokens[split..]`.
fn logits_in_two(e: &Engine, tokens: &[u32], split: usize) -> Vec<f32> {
    let mut cache = e.new_cache().unwrap();
    e.prefill(&mut cache, &tokens[..split]).unwrap();
    to_vec(&e.prefill(&mut cache, &tokens[split..]).unwrap())
}

fn greedy(e: &Engine, prompt: &[u32], n: usize) -> Vec<u32> {
    let mut cache = e.new_cache().unwrap();
    let params = GenerationParams {
        max_new_tokens: n,
        ..Default::default()
    };
    e.generate(&mut cache, prompt, &params, &mut |_| {})
        .unwrap()
        .tokens
}

/// The first index where two token sequences differ (a shorter one ends there: its EOS).
fn first_divergence(a: &[u32], b: &[u32]) -> Option<usize> {
    (0..a.len().max(b.len())).find(|&i| a.get(i) != b.get(i))
}

/// Compares `ours` (from `engine_ours`) with `reference` (from `engine_ref`) after `prompt`:
/// prints "identical", or the first divergence with each candidate's logit on both
/// engines, and returns the reference engine's gap between its pick and ours there.
fn explain_divergence(
    what: &str,
    prompt: &[u32],
    reference: &[u32],
    ours: &[u32],
    engine_ref: &Engine,
    engine_ours: &Engine,
) -> Option<f32> {
    let Some(i) = first_divergence(reference, ours) else {
        say(&format!("{what}: identical ({} tokens)", reference.len()));
        return None;
    };
    let mut ctx = prompt.to_vec();
    ctx.extend_from_slice(&reference[..i]);
    let (lr, lo) = (
        logits_after(engine_ref, &ctx),
        logits_after(engine_ours, &ctx),
    );
    let (pick_r, pick_o) = (argmax(&lr), argmax(&lo));
    let (gap_r, gap_o) = (
        lr[pick_r as usize] - lr[pick_o as usize],
        lo[pick_o as usize] - lo[pick_r as usize],
    );
    let piece = |t: u32| {
        engine_ref
            .tokenizer
            .decode(&[t], false)
            .unwrap_or_else(|_| "?".to_string())
    };
    say(&format!(
        "{what}: first divergence at token {i} of {}/{}: reference picks {pick_r} {:?}, ours {pick_o} {:?}; gap on the reference {gap_r:.4}, on ours {gap_o:.4} (a near-tie is ≤ {TIE_TOL})",
        reference.len(),
        ours.len(),
        piece(pick_r),
        piece(pick_o),
    ));
    Some(gap_r)
}

#[test]
fn cuda_logits_match_the_cpu_within_tolerance() {
    let Some(gpu) = gpu_for("cuda_logits_match_the_cpu_within_tolerance") else {
        return;
    };
    for (name, cpu) in models() {
        let g = load_on(name, &gpu);
        say(&format!("{name}: kernels on the GPU: {}", g.kernels));
        let prompt = chat_prompt(cpu);
        let (lc, lg) = (logits_after(cpu, &prompt), logits_after(&g, &prompt));
        assert!(
            lg.iter().all(|x| x.is_finite()),
            "{name}: non-finite logits on the GPU"
        );
        let d = max_abs(&lc, &lg);
        let (tc, tg) = (argmax(&lc), argmax(&lg));
        let gap = lc[tc as usize] - lc[tg as usize];
        say(&format!(
            "{name}: {} prompt tokens, max |Δlogit| cuda vs cpu = {d:.4} (tolerance {LOGIT_TOL}); next token cpu {tc}, cuda {tg}{}",
            prompt.len(),
            if tc == tg {
                String::new()
            } else {
                format!(" (cpu gap {gap:.4})")
            }
        ));
        assert!(d <= LOGIT_TOL, "{name}: logits differ by {d}");
        assert!(
            tc == tg || gap <= TIE_TOL,
            "{name}: next token differs (cpu {tc}, cuda {tg}) with a cpu gap of {gap}"
        );
    }
}

#[test]
fn cuda_greedy_continuation_matches_the_cpu() {
    let Some(gpu) = gpu_for("cuda_greedy_continuation_matches_the_cpu") else {
        return;
    };
    for (name, cpu) in models() {
        let g = load_on(name, &gpu);
        let prompt = chat_prompt(cpu);
        let (tc, tg) = (
            greedy(cpu, &prompt, GREEDY_TOKENS),
            greedy(&g, &prompt, GREEDY_TOKENS),
        );
        let what = format!("{name}: greedy {GREEDY_TOKENS} tokens, cuda vs cpu");
        if let Some(gap) = explain_divergence(&what, &prompt, &tc, &tg, cpu, &g) {
            assert!(
                gap <= TIE_TOL,
                "{what}: diverged where the cpu's gap is {gap} (> {TIE_TOL}): not a near-tie"
            );
        }
    }
}

/// Logits and a 12-token greedy continuation after `prompt`, with `prompt[..p]` computed
/// first into a cache that a [`PrefixStore`] then hands back (a copy on the device).
fn with_store(e: &Engine, prompt: &[u32], p: usize) -> (Vec<f32>, Vec<u32>, usize) {
    let mut store = PrefixStore::new("cuda-test", usize::MAX);
    if p > 0 {
        let mut c = e.new_cache().unwrap();
        e.prefill(&mut c, &prompt[..p]).unwrap();
        store.insert(&c, p).unwrap();
    }
    let (mut cache, hit) = store.checkout(prompt, 64, || e.new_cache()).unwrap();
    assert_eq!(hit, p);
    if hit == prompt.len() {
        cache.truncate(hit - 1);
    }
    let done = cache.len();
    let logits = to_vec(&e.prefill(&mut cache, &prompt[done..]).unwrap());
    let params = GenerationParams {
        max_new_tokens: 12,
        ..Default::default()
    };
    let gen = e
        .generate(&mut cache, prompt, &params, &mut |_| {})
        .unwrap();
    (logits, gen.tokens, done)
}

/// The same computation without any cache: the same chunks, into a fresh cache, then the
/// same greedy continuation.
fn recompute_in_chunks(e: &Engine, prompt: &[u32], split: usize) -> (Vec<f32>, Vec<u32>) {
    let mut cache = e.new_cache().unwrap();
    if split > 0 {
        e.prefill(&mut cache, &prompt[..split]).unwrap();
    }
    let logits = to_vec(&e.prefill(&mut cache, &prompt[split..]).unwrap());
    let params = GenerationParams {
        max_new_tokens: 12,
        ..Default::default()
    };
    let gen = e
        .generate(&mut cache, prompt, &params, &mut |_| {})
        .unwrap();
    (logits, gen.tokens)
}

fn request(user: &str) -> ChatRequest {
    let sys = "You are a careful technical translator. Translate English Markdown into Simplified Chinese. \
               Keep code, links and numbers exactly. Glossary: token → 词元, prompt → 提示词, latency → 时延, embedding → 嵌入向量.";
    ChatRequest {
        messages: vec![
            Message::system(sys),
            Message::user(format!("Translate:\n{user}")),
        ],
        split: SplitPoint {
            message: 1,
            offset: "Translate:\n".len(),
        },
        params: GenerationParams {
            max_new_tokens: 16,
            ..Default::default()
        },
    }
}

#[test]
fn cuda_cached_prefix_equals_recompute_on_the_gpu() {
    let Some(gpu) = gpu_for("cuda_cached_prefix_equals_recompute_on_the_gpu") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    for name in [QWEN, SMOL] {
        let e = load_on(name, &gpu);
        let prompt = chat_prompt(&e);
        let one_pass = logits_after(&e, &prompt);
        // In memory: the store's copy of the keys and values on the GPU.
        for p in [1, prompt.len() / 2, prompt.len() - 1, prompt.len()] {
            let (cached, cached_gen, split) = with_store(&e, &prompt, p);
            let (fresh, fresh_gen) = recompute_in_chunks(&e, &prompt, split);
            let d = max_abs(&cached, &fresh);
            let d1 = max_abs(&cached, &one_pass);
            say(&format!(
                "{name}: prefix {p}/{} from memory: max |Δ| vs recompute of the same chunks {d:.2e} (tolerance {PREFIX_TOL:e}), vs a one-pass prefill {d1:.4} (tolerance {LOGIT_TOL}); greedy {}",
                prompt.len(),
                if cached_gen == fresh_gen { "identical" } else { "DIFFERS" }
            ));
            assert!(d <= PREFIX_TOL, "{name}: prefix {p}: max |Δ| {d}");
            assert!(d1 <= LOGIT_TOL, "{name}: prefix {p}: vs one pass {d1}");
            assert_eq!(cached_gen, fresh_gen, "{name}: prefix {p}: greedy differs");
        }
        // On disk: written from the GPU, read back onto it.
        let disk = DiskPrefixCache::new(dir.path(), 1 << 30);
        let p = prompt.len() - 5;
        let mut c = e.new_cache().unwrap();
        e.prefill(&mut c, &prompt[..p]).unwrap();
        disk.save(name, &c).unwrap();
        let mut loaded: KvCache = disk
            .load(name, &prompt[..p], e.config(), &e.device, 16)
            .unwrap()
            .expect("the entry just written");
        let from_disk = to_vec(&e.prefill(&mut loaded, &prompt[p..]).unwrap());
        let d = max_abs(&from_disk, &logits_in_two(&e, &prompt, p));
        say(&format!(
            "{name}: prefix {p}/{} from disk: max |Δ| vs recompute of the same chunks {d:.2e}",
            prompt.len()
        ));
        assert!(d <= PREFIX_TOL, "{name}: from disk: max |Δ| {d}");
        // Through the backend, as `quire translate` uses it: memory, then a new backend
        // that finds the prefix on disk, then no cache at all.
        let disk = DiskPrefixCache::new(dir.path().join("backend"), 1 << 30);
        let mut a = LocalBackend::new(load_on(name, &gpu), 1 << 30, Some(disk.clone())).unwrap();
        a.complete(&request("Latency matters.")).unwrap();
        let r2 = a.complete(&request("Tokens are cheap.")).unwrap();
        assert_eq!(r2.cache_source, "memory", "{name}");
        let mut b = LocalBackend::new(load_on(name, &gpu), 1 << 30, Some(disk)).unwrap();
        let r3 = b.complete(&request("Tokens are cheap.")).unwrap();
        assert_eq!(r3.cache_source, "disk", "{name}");
        let mut none = LocalBackend::new(load_on(name, &gpu), 1 << 30, None).unwrap();
        let r4 = none.complete(&request("Tokens are cheap.")).unwrap();
        say(&format!(
            "{name}: backend: {} tokens reused from memory and from disk, replies {}; without a cache the reply is {}",
            r2.cached_tokens,
            if r2.text == r3.text { "identical" } else { "DIFFER" },
            if r4.text == r2.text {
                "identical too"
            } else {
                "different (a one-pass prefill runs other GPU kernels than prefix + suffix)"
            }
        ));
        assert_eq!(r3.cached_tokens, r2.cached_tokens, "{name}");
        assert_eq!(r3.text, r2.text, "{name}: disk reuse changed the reply");
    }
}

#[test]
fn cuda_rows_decoded_together_match_decoding_alone() {
    let Some(gpu) = gpu_for("cuda_rows_decoded_together_match_decoding_alone") else {
        return;
    };
    let e = load_on(QWEN, &gpu);
    let texts = [
        "Latency matters.",
        "The tokenizer splits text into tokens before the model sees it.",
        "Batches share one read of the weights.",
    ];
    let prompts: Vec<Vec<u32>> = texts
        .iter()
        .map(|t| {
            let msgs = [
                Message::system("Translate the user's text into Simplified Chinese."),
                Message::user(*t),
            ];
            e.encode(&e.template.render(&msgs, true).unwrap()).unwrap()
        })
        .collect();
    let params = GenerationParams {
        max_new_tokens: 24,
        ..Default::default()
    };
    let alone: Vec<Vec<u32>> = prompts.iter().map(|p| greedy(&e, p, 24)).collect();
    let mut caches: Vec<KvCache> = prompts.iter().map(|_| e.new_cache().unwrap()).collect();
    let mut jobs: Vec<(&mut KvCache, &[u32])> = caches
        .iter_mut()
        .zip(&prompts)
        .map(|(c, p)| (c, p.as_slice()))
        .collect();
    let together = e
        .generate_batch(&mut jobs, std::slice::from_ref(&params))
        .unwrap();
    for (i, (a, t)) in alone.iter().zip(&together).enumerate() {
        let what = format!(
            "{QWEN}: row {i} of {} decoded together vs alone, cuda",
            texts.len()
        );
        if let Some(gap) = explain_divergence(&what, &prompts[i], a, &t.tokens, &e, &e) {
            assert!(
                gap <= TIE_TOL,
                "{what}: diverged where the gap is {gap} (> {TIE_TOL}): not a near-tie"
            );
        }
    }
}

#[test]
fn cuda_draft_model_is_refused_with_a_reason() {
    let Some(gpu) = gpu_for("cuda_draft_model_is_refused_with_a_reason") else {
        return;
    };
    let target = load_on(QWEN, &gpu);
    let err = match quire::engine::speculative::Draft::load(&model_path(QWEN), &target) {
        Ok(_) => panic!("a draft on the GPU was accepted, but exactness rests on CPU kernels"),
        Err(e) => format!("{e:#}"),
    };
    say(&format!("{QWEN}: --draft on the GPU: {err}"));
    assert!(err.contains("CPU kernels"), "{err}");
}
