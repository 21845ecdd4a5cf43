//! Prefix KV reuse is exact: on both real models, the logits after a cached prefix equal a
//! full recompute (max abs difference ≤ 1e-4) and greedy generations are identical, for
//! in-memory reuse, reuse from disk, and prefix lengths 0, 1, the whole prompt, and a
//! boundary where a BPE merge crosses the split.

mod common;

use common::*;
use quire::engine::backend::{ChatBackend, ChatRequest, LocalBackend};
use quire::engine::chat_template::Message;
use quire::engine::generate::GenerationParams;
use quire::engine::prefix_cache::disk::DiskPrefixCache;
use quire::engine::prefix_cache::PrefixStore;
use quire::engine::stable_prefix::{split_prompt, SplitPoint};
use quire::engine::Engine;

/// Stated tolerance for cached vs recomputed logits.
const TOL: f32 = 1e-4;

fn prompt(e: &Engine) -> Vec<u32> {
    let msgs = [
        Message::system("You translate technical English into Simplified Chinese. Keep Markdown intact. Glossary: token = 词元; prompt = 提示词; latency = 时延."),
        Message::user("Translate: The prompt is split into tokens before the model sees it."),
    ];
    e.encode(&e.template.render(&msgs, true).unwrap()).unwrap()
}

/// Logits and a 12-token greedy continuation, computing `prompt[..p]` first into a cache
/// that is then reused (via a store) for the whole prompt.
fn with_prefix(e: &Engine, prompt: &[u32], p: usize) -> (candle_core::Tensor, Vec<u32>) {
    let mut store = PrefixStore::new("test", usize::MAX);
    if p > 0 {
        let mut c = e.new_cache().unwrap();
        e.prefill(&mut c, &prompt[..p]).unwrap();
        store.insert(&c, p).unwrap();
    }
    let (mut cache, hit) = store.checkout(prompt, 64, || e.new_cache()).unwrap();
    assert_eq!(hit, p);
    // Whole prompt cached: the last token must still be computed to get logits.
    if hit == prompt.len() {
        cache.truncate(hit - 1);
    }
    let done = cache.len();
    let logits = e.prefill(&mut cache, &prompt[done..]).unwrap();
    let params = GenerationParams {
        max_new_tokens: 12,
        ..Default::default()
    };
    let gen = e
        .generate(&mut cache, prompt, &params, &mut |_| {})
        .unwrap();
    (logits, gen.tokens)
}

#[test]
fn cached_prefix_matches_recompute_on_both_models() {
    for (name, e) in both() {
        let prompt = prompt(e);
        let (full, full_gen) = with_prefix(e, &prompt, 0);
        for p in [1, prompt.len() / 2, prompt.len() - 1, prompt.len()] {
            let (logits, gen) = with_prefix(e, &prompt, p);
            let d = max_abs_diff(&full, &logits);
            assert!(
                d <= TOL,
                "{name}: prefix {p}/{}: max abs diff {d}",
                prompt.len()
            );
            assert_eq!(gen, full_gen, "{name}: prefix {p}: greedy tokens differ");
        }
    }
}

#[test]
fn merge_across_the_split_reuses_only_the_common_tokens() {
    for (name, e) in both() {
        // "Hello wor" + "ld": the split falls inside the word "world".
        let msgs = [
            Message::system("Be brief."),
            Message::user("Hello world, how are you?"),
        ];
        let split = split_prompt(
            &e.template,
            &e.tokenizer,
            &msgs,
            SplitPoint {
                message: 1,
                offset: 9,
            },
        )
        .unwrap();
        assert!(
            split.boundary_merged(),
            "{name}: expected a merge across the split"
        );
        assert!(split.stable_tokens < split.stable_text_tokens);
        assert_eq!(
            &split.tokens[..split.stable_tokens],
            &e.encode(&split.text[..split.stable_text_len]).unwrap()[..split.stable_tokens]
        );
        let (full, full_gen) = with_prefix(e, &split.tokens, 0);
        let (cached, gen) = with_prefix(e, &split.tokens, split.stable_tokens);
        assert!(max_abs_diff(&full, &cached) <= TOL, "{name}");
        assert_eq!(gen, full_gen, "{name}");
    }
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
            max_new_tokens: 10,
            ..Default::default()
        },
    }
}

#[test]
fn backend_reuses_prefix_from_memory_and_from_disk() {
    let dir = tempfile::tempdir().unwrap();
    for (name, _) in both() {
        let load = || {
            Engine::load(
                &model_path(name),
                &candle_core::Device::Cpu,
                &Default::default(),
            )
            .unwrap()
        };
        let disk = DiskPrefixCache::new(dir.path(), 1 << 30);
        let mut a = LocalBackend::new(load(), 1 << 30, Some(disk.clone())).unwrap();
        let r1 = a.complete(&request("Latency matters.")).unwrap();
        assert_eq!((r1.cached_tokens, r1.cache_source), (0, "none"), "{name}");
        let r2 = a.complete(&request("Tokens are cheap.")).unwrap();
        assert_eq!(r2.cache_source, "memory", "{name}");
        assert!(r2.cached_tokens > 40, "{name}: {}", r2.cached_tokens);
        // A new backend (as in a new process) finds the prefix on disk.
        let mut b = LocalBackend::new(load(), 1 << 30, Some(disk.clone())).unwrap();
        let r3 = b.complete(&request("Tokens are cheap.")).unwrap();
        assert_eq!(r3.cache_source, "disk", "{name}");
        assert_eq!(r3.cached_tokens, r2.cached_tokens);
        assert_eq!(r3.text, r2.text, "{name}: disk reuse changed the output");
        // The same with no cache at all.
        let mut c = LocalBackend::new(load(), 1 << 30, None).unwrap();
        let r4 = c.complete(&request("Tokens are cheap.")).unwrap();
        assert_eq!(r4.cached_tokens, 0);
        assert_eq!(
            r4.text, r2.text,
            "{name}: cached output differs from recompute"
        );
        // Throughput mode: the same requests decoded together give the same replies, and
        // all but the first find the prefix in memory; each keeps its own token limit. Six
        // requests with four slots: the short ones leave early and the last two take their
        // slots mid-batch (continuous batching).
        let texts = [
            "Latency matters.",
            "Tokens are cheap.",
            "Caches save time.",
            "Batches share weights.",
            "Kernels are exact.",
            "Slots are reused.",
        ];
        let reqs: Vec<_> = texts
            .iter()
            .zip([10, 4, 7, 12, 3, 9])
            .map(|(t, n)| {
                let mut r = request(t);
                r.params.max_new_tokens = n;
                r
            })
            .collect();
        let alone: Vec<_> = reqs.iter().map(|r| a.complete(r).unwrap()).collect();
        let together = c.complete_batch(&reqs).unwrap();
        for (x, y) in alone.iter().zip(&together) {
            assert_eq!(x.text, y.text, "{name}: batched reply differs");
            assert_eq!(x.completion_tokens, y.completion_tokens, "{name}");
        }
        assert!(
            together[1..].iter().all(|r| r.cache_source == "memory"),
            "{name}"
        );
    }
}

#[test]
fn disk_entry_logits_equal_recompute_and_corruption_is_rejected() {
    let e = qwen();
    let dir = tempfile::tempdir().unwrap();
    let disk = DiskPrefixCache::new(dir.path(), 1 << 30);
    let prompt = prompt(e);
    let p = prompt.len() - 5;
    let mut c = e.new_cache().unwrap();
    e.prefill(&mut c, &prompt[..p]).unwrap();
    let path = disk.save("salt", &c).unwrap();
    let (full, _) = with_prefix(e, &prompt, 0);
    let mut loaded = disk
        .load("salt", &prompt[..p], e.config(), &e.device, 16)
        .unwrap()
        .expect("entry on disk");
    let logits = e.prefill(&mut loaded, &prompt[p..]).unwrap();
    assert!(max_abs_diff(&full, &logits) <= TOL);
    // Another fingerprint never sees it.
    assert!(disk
        .load("other", &prompt[..p], e.config(), &e.device, 0)
        .unwrap()
        .is_none());
    // Flip one byte in the tensor data: checksum mismatch, ignored and deleted.
    let mut bytes = std::fs::read(&path).unwrap();
    let n = bytes.len();
    bytes[n - 100] ^= 0x55;
    std::fs::write(&path, &bytes).unwrap();
    assert!(disk
        .load("salt", &prompt[..p], e.config(), &e.device, 0)
        .unwrap()
        .is_none());
    assert!(!path.exists(), "a corrupt file is removed");
    // A truncated file is ignored too.
    disk.save("salt", &c).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    assert!(disk
        .load("salt", &prompt[..p], e.config(), &e.device, 0)
        .unwrap()
        .is_none());
}

#[test]
fn kv_cache_grows_truncates_and_forks() {
    let e = smol();
    let mut c = quire::engine::kv_cache::KvCache::with_capacity(e.config(), &e.device, 4).unwrap();
    let ids = e
        .encode("one two three four five six seven eight nine ten")
        .unwrap();
    e.prefill(&mut c, &ids).unwrap();
    // Started at 4 positions and doubled as needed.
    assert!(
        c.capacity() >= ids.len()
            && c.capacity().is_multiple_of(4)
            && (c.capacity() / 4).is_power_of_two()
    );
    assert_eq!(c.tokens(), ids.as_slice());
    let f = c.fork(3, 0).unwrap();
    assert_eq!(f.len(), 3);
    assert_eq!(f.tokens(), &ids[..3]);
    c.truncate(2);
    assert_eq!(c.len(), 2);
    assert_eq!(
        c.bytes_per_token(),
        e.config().kv_bytes_per_token(c.layout().elem_bytes())
    );
}

#[test]
fn store_evicts_least_recently_used_under_budget() {
    let e = smol();
    let per_token = e.new_cache().unwrap().bytes_per_token();
    let mk = |text: &str| {
        let mut c = e.new_cache().unwrap();
        e.prefill(&mut c, &e.encode(text).unwrap()).unwrap();
        c
    };
    let a = mk("alpha beta gamma delta epsilon zeta eta theta");
    let b = mk("one two three four five six seven eight nine");
    let c = mk("red orange yellow green blue indigo violet");
    // Room for any two of them, not for all three.
    let budget = per_token * (a.len() + b.len().max(c.len()));
    let mut store = PrefixStore::new("s", budget);
    store.insert(&a, a.len()).unwrap();
    store.insert(&b, b.len()).unwrap();
    // Touch a, then insert c: b is the least recently used and goes.
    let _ = store.checkout(a.tokens(), 0, || e.new_cache()).unwrap();
    store.insert(&c, c.len()).unwrap();
    assert!(store.bytes() <= budget);
    assert!(store.stats.evictions >= 1);
    assert!(store.longest_match(b.tokens()).map(|m| m.1).unwrap_or(0) < b.len());
    assert_eq!(store.longest_match(a.tokens()).unwrap().1, a.len());
    assert_eq!(store.longest_match(c.tokens()).unwrap().1, c.len());
}
