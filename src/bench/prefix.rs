//! `quire bench prefix`: what the prefix KV cache saves.
//!
//! N parts (by default the translatable units of the bundled sample book, as the model text
//! `translate` sends) are each sent behind one shared stable prefix of about P tokens. The
//! prompts are `translate`'s own: [`translate_prompt`] with the built-in guide and a
//! glossary — the book's `glossary.json` as house terms, padded with suggested terms until
//! the prefix is long enough — house terms written into the passage, the request and its
//! split built as the translate stage builds them and tokenized as [`LocalBackend`] does.
//! For every part the prompt is computed twice on the CPU:
//!
//! * **reuse**: the path `LocalBackend::complete` takes — `PrefixStore::checkout` (a copy of
//!   the cached prefix's KV) and a prefill of the remaining tokens;
//! * **recompute**: a fresh KV cache and a prefill of the whole prompt.
//!
//! Time to first token (TTFT) is prefill + the first greedy pick. The two paths' last-position
//! logits are compared (the engine claims they are identical). The prefix is also saved to
//! a `DiskPrefixCache` and loaded back, and the load is timed against recomputing the
//! prefix; the disk-loaded KV is checked the same way.
//!
//! [`LocalBackend`]: crate::engine::backend::LocalBackend

use super::svg::{bar_chart, Series};
use super::sys::{self, Machine};
use super::{argmax, english_text, fmt_opt, max_abs_diff, prompt_ids, table};
use crate::engine::backend::ChatRequest;
use crate::engine::generate::GenerationParams;
use crate::engine::kv_cache::KvCache;
use crate::engine::prefix_cache::disk::DiskPrefixCache;
use crate::engine::prefix_cache::PrefixStore;
use crate::engine::stable_prefix::{split_prompt, PromptSplit};
use crate::engine::{Engine, LoadOptions};
use crate::glossary::{Glossary, GlossaryEntry};
use crate::prompts::agents::{translate_prompt, DEFAULT_GUIDE};
use crate::translate::glossary_agent::house_terms;
use crate::translate::inject_house_terms;
use crate::translate::passage;
use crate::units::skeleton::Skeleton;
use crate::units::{segment_chapter, EstimateTokens, UnitKind};
use anyhow::{Context, Result};
use candle_core::Device;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Parts recomputed in full by default: a full recompute of a 1,600-token prompt takes
/// about half a minute on a 2-core CPU, so the default run pairs only the first few parts
/// (the reuse side still covers every part) and stays near three minutes.
pub const DEFAULT_MAX_RECOMPUTE: usize = 4;

/// The languages `translate` works in by default.
const SOURCE_LANG: &str = "en";
const TARGET_LANG: &str = "zh-CN";

/// Glossary entries (English, Chinese, a sentence of context) that pad the prefix.
const TERMS: &[(&str, &str, &str)] = &[
    (
        "attention head",
        "注意力头",
        "Each attention head learns its own pattern of which earlier tokens matter.",
    ),
    (
        "batch size",
        "批大小",
        "A larger batch size uses the hardware better but needs more memory.",
    ),
    (
        "benchmark",
        "基准测试",
        "A benchmark fixes the inputs so that two systems can be compared fairly.",
    ),
    (
        "byte-pair encoding",
        "字节对编码",
        "Byte-pair encoding merges the most frequent pairs of symbols into new tokens.",
    ),
    (
        "cache hit",
        "缓存命中",
        "A cache hit means the stored result is reused instead of being computed again.",
    ),
    (
        "chat template",
        "对话模板",
        "The chat template turns a list of messages into the exact text the model reads.",
    ),
    (
        "checkpoint",
        "检查点",
        "A checkpoint stores the weights so that training can resume later.",
    ),
    (
        "context window",
        "上下文窗口",
        "The context window is the largest number of tokens the model can attend to.",
    ),
    (
        "decoder",
        "解码器",
        "A decoder generates one token at a time, each conditioned on the ones before it.",
    ),
    (
        "decode speed",
        "解码速度",
        "Decode speed is measured in tokens per second after the first token.",
    ),
    (
        "embedding table",
        "嵌入表",
        "The embedding table holds one vector for every token in the vocabulary.",
    ),
    (
        "feed-forward network",
        "前馈网络",
        "The feed-forward network applies the same two matrices to every position.",
    ),
    (
        "fine-tuning",
        "微调",
        "Fine-tuning continues training on a smaller, task-specific data set.",
    ),
    (
        "greedy decoding",
        "贪心解码",
        "Greedy decoding always picks the single most likely next token.",
    ),
    (
        "hallucination",
        "幻觉",
        "A hallucination is a fluent statement that is not supported by the source.",
    ),
    (
        "inference",
        "推理",
        "Inference is running a trained model to produce outputs, not training it.",
    ),
    (
        "key-value cache",
        "键值缓存",
        "The key-value cache stores past keys and values so they are not recomputed.",
    ),
    (
        "layer normalization",
        "层归一化",
        "Layer normalization rescales activations to keep training stable.",
    ),
    (
        "learning rate",
        "学习率",
        "The learning rate controls how far each update moves the weights.",
    ),
    (
        "logits",
        "逻辑值",
        "Logits are the unnormalised scores the model assigns to every vocabulary entry.",
    ),
    (
        "memory bandwidth",
        "内存带宽",
        "Memory bandwidth limits how quickly the weights can be streamed to the cores.",
    ),
    (
        "mixed precision",
        "混合精度",
        "Mixed precision keeps some values in 16 bits and others in 32 bits.",
    ),
    (
        "model weights",
        "模型权重",
        "The model weights are the learned parameters stored in the model file.",
    ),
    (
        "next-token prediction",
        "下一词元预测",
        "Next-token prediction is the training objective of most language models.",
    ),
    (
        "overfitting",
        "过拟合",
        "Overfitting means the model memorises the training data instead of generalising.",
    ),
    (
        "parameter",
        "参数",
        "A parameter is one learned number; small models have hundreds of millions of them.",
    ),
    (
        "perplexity",
        "困惑度",
        "Perplexity measures how surprised the model is by a held-out text.",
    ),
    (
        "positional encoding",
        "位置编码",
        "A positional encoding tells the model where each token sits in the sequence.",
    ),
    (
        "prefill",
        "预填充",
        "Prefill computes the whole prompt in parallel before the first token is generated.",
    ),
    (
        "prefix cache",
        "前缀缓存",
        "The prefix cache keeps the keys and values of a shared prompt prefix.",
    ),
    (
        "quantization",
        "量化",
        "Quantization stores weights in fewer bits to save memory and bandwidth.",
    ),
    (
        "retrieval",
        "检索",
        "Retrieval finds relevant passages and adds them to the prompt.",
    ),
    (
        "rotary position embedding",
        "旋转位置编码",
        "Rotary position embeddings rotate queries and keys by an angle that depends on position.",
    ),
    (
        "sampling temperature",
        "采样温度",
        "A higher sampling temperature makes the output more varied and less predictable.",
    ),
    (
        "self-attention",
        "自注意力",
        "Self-attention lets every token look at every earlier token in the same sequence.",
    ),
    (
        "softmax",
        "softmax 函数",
        "Softmax turns a vector of scores into probabilities that sum to one.",
    ),
    (
        "stop sequence",
        "停止序列",
        "Generation ends as soon as the output contains a stop sequence.",
    ),
    (
        "system prompt",
        "系统提示词",
        "The system prompt sets the rules that every later message must follow.",
    ),
    (
        "throughput",
        "吞吐量",
        "Throughput counts how many tokens the system produces per second in total.",
    ),
    (
        "time to first token",
        "首词元时间",
        "Time to first token is the delay before the user sees any output.",
    ),
    (
        "tokenizer",
        "分词器",
        "The tokenizer converts text into token IDs and back again.",
    ),
    (
        "top-k sampling",
        "top-k 采样",
        "Top-k sampling keeps only the k most likely tokens before drawing one.",
    ),
    (
        "top-p sampling",
        "top-p 采样",
        "Top-p sampling keeps the smallest set of tokens whose probabilities add up to p.",
    ),
    (
        "training data",
        "训练数据",
        "The training data decides what the model knows and how it writes.",
    ),
    (
        "transformer",
        "Transformer 架构",
        "The transformer stacks attention and feed-forward layers with residual connections.",
    ),
    (
        "vocabulary",
        "词表",
        "The vocabulary is the fixed list of tokens the tokenizer can produce.",
    ),
    (
        "weight tying",
        "权重共享",
        "Weight tying reuses the embedding table as the output projection.",
    ),
    (
        "zero-shot",
        "零样本",
        "A zero-shot prompt gives instructions but no worked examples.",
    ),
    (
        "footnote",
        "脚注",
        "Footnotes keep their markers; translate the footnote text itself.",
    ),
    (
        "code block",
        "代码块",
        "Code blocks are copied unchanged; only comments in prose outside them are translated.",
    ),
    (
        "inline code",
        "行内代码",
        "Inline code such as `tok.encode()` is never translated.",
    ),
    (
        "heading",
        "标题",
        "Headings keep their `#` markers and their level.",
    ),
    (
        "table",
        "表格",
        "Tables keep every pipe and divider row; only the cell text is translated.",
    ),
    (
        "link text",
        "链接文本",
        "Translate the text of a link but keep its URL exactly as written.",
    ),
    (
        "placeholder",
        "占位符",
        "Placeholders such as {{3}} are copied unchanged and in the same order.",
    ),
    (
        "unit",
        "单元",
        "A unit is one passage of a chapter sent to the model in one request.",
    ),
    (
        "glossary",
        "术语表",
        "The glossary fixes the translation of recurring technical terms.",
    ),
    (
        "proofreading",
        "校对",
        "Proofreading compares the translation with the source sentence by sentence.",
    ),
    (
        "style guide",
        "风格指南",
        "The style guide describes tone, punctuation and how to treat numbers.",
    ),
    (
        "reader",
        "读者",
        "The reader is a software engineer who reads Chinese fluently.",
    ),
];

/// One piece of per-call content.
#[derive(Debug, Clone, Serialize)]
pub struct Part {
    /// Where it came from (a unit id, or `synthetic-N`).
    pub id: String,
    /// The text sent behind the prefix (a unit's model text, before house terms are
    /// written in).
    pub text: String,
}

/// The bundled sample book, if this is a checkout of the repository.
pub fn sample_book_dir() -> Option<PathBuf> {
    [
        Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/sample-book"),
        PathBuf::from("examples/sample-book"),
    ]
    .into_iter()
    .find(|p| p.is_dir())
}

/// The translatable units of a book, segmented with a budget of `unit_tokens` estimated
/// tokens, as the text `translate` gives the model (prose segments one per line, code and
/// links as `{{n}}` placeholders).
pub fn book_parts(dir: &Path, unit_tokens: usize) -> Result<Vec<Part>> {
    let book = crate::book::load_book(dir)?;
    let mut parts = Vec::new();
    for ch in &book.chapters {
        for u in segment_chapter(ch, unit_tokens, &EstimateTokens)? {
            let text = Skeleton::of(&u).model_text();
            if u.kind == UnitKind::Translate && !text.trim().is_empty() {
                parts.push(Part {
                    id: u.id.clone(),
                    text,
                });
            }
        }
    }
    Ok(parts)
}

/// `n` synthetic parts of English prose (two to five sentences each).
pub fn synthetic_parts(n: usize, first_index: usize) -> Vec<Part> {
    let text = english_text(400 * (n + first_index) + 400);
    let paragraphs: Vec<&str> = text
        .split("\n\n")
        .filter(|p| !p.trim().is_empty())
        .collect();
    (0..n)
        .map(|i| {
            let k = first_index + i;
            Part {
                id: format!("synthetic-{}", k + 1),
                text: paragraphs[k % paragraphs.len()].trim().to_string(),
            }
        })
        .collect()
}

/// The shared prefix: the stable part of `translate`'s translation prompt — the built-in
/// guide and a glossary, lengthened one suggested term at a time until the rendered
/// stable prefix has at least `target_tokens` tokens.
pub struct SharedPrefix {
    /// The glossary in the prompt: the book's house terms, then the padding (one line of
    /// the prompt each).
    pub glossary: Glossary,
}

impl SharedPrefix {
    /// The request `translate` sends for `part` (a unit's model text, no revision, no
    /// worked example): house terms written into the passage, the terms found in it listed,
    /// the reply constrained to the passage's placeholders and lines.
    pub fn request(&self, part: &str) -> Result<ChatRequest> {
        let passage = inject_house_terms(part, &self.glossary);
        let found = self.glossary.found_in(part);
        let p = translate_prompt(
            DEFAULT_GUIDE,
            SOURCE_LANG,
            TARGET_LANG,
            &self.glossary.entries,
            &found,
            &[],
            &passage,
            None,
        )?;
        Ok(ChatRequest {
            messages: p.messages,
            split: p.split,
            params: passage::constrained(
                &GenerationParams::default(),
                &passage,
                TARGET_LANG,
                &found,
                passage::max_new_tokens(part),
            ),
        })
    }

    /// `part`'s prompt tokenized and split as [`crate::engine::backend::LocalBackend`]
    /// does.
    pub fn split(&self, engine: &Engine, part: &str) -> Result<PromptSplit> {
        let req = self.request(part)?;
        split_prompt(
            &engine.template,
            &engine.tokenizer,
            &req.messages,
            req.split,
        )
    }

    /// Build a prefix of about `target_tokens` tokens for `engine`'s template and tokenizer
    /// from the book's glossary (its house terms), padded with suggested terms.
    pub fn build(engine: &Engine, target_tokens: usize, book_glossary: &Glossary) -> Result<Self> {
        let mut prefix = Self {
            glossary: house_terms(book_glossary),
        };
        let tokens_of =
            |p: &Self| -> Result<usize> { Ok(p.split(engine, "Hello.")?.stable_tokens) };
        let mut have = tokens_of(&prefix)?;
        let mut added = 0usize;
        while have < target_tokens {
            prefix.glossary.entries.push(pad_term(added));
            added += 1;
            // Re-tokenize after every line near the target, every eight lines far from it.
            if added.is_multiple_of(8) || have + 8 * 40 >= target_tokens {
                have = tokens_of(&prefix)?;
            }
        }
        Ok(prefix)
    }
}

/// The `k`-th padding term: a reviewed suggestion (listed in the prompt, not written into
/// passages). Past the end of [`TERMS`] the list repeats with the round's number on each
/// term, so that every line stays distinct.
fn pad_term(k: usize) -> GlossaryEntry {
    let (en, zh, ctx) = TERMS[k % TERMS.len()];
    let round = k / TERMS.len();
    let (source, target) = if round == 0 {
        (en.to_string(), zh.to_string())
    } else {
        (format!("{en} {}", round + 1), format!("{zh} {}", round + 1))
    };
    GlossaryEntry {
        source,
        target: vec![target],
        pos: None,
        context: Some(ctx.to_string()),
        house: false,
        needs_review: false,
        replaces: Vec::new(),
    }
}

/// The glossary of the book in `dir` (`glossary.json`, as `translate` reads a house
/// glossary); empty when it has none.
pub fn book_glossary(dir: &Path) -> Result<Glossary> {
    let path = dir.join("glossary.json");
    if !path.is_file() {
        return Ok(Glossary::default());
    }
    Glossary::load(&path, SOURCE_LANG, TARGET_LANG)
}

/// What to measure.
#[derive(Debug, Clone)]
pub struct PrefixBenchOptions {
    /// GGUF file.
    pub model: PathBuf,
    /// Target length of the shared prefix in tokens.
    pub prefix_tokens: usize,
    /// Number of parts (default: every translatable unit of the book).
    pub parts: Option<usize>,
    /// Recompute only the first K parts (default: all).
    pub max_recompute: Option<usize>,
    /// Book to take parts from (default: the bundled sample book).
    pub book: Option<PathBuf>,
    /// Unit budget (estimated tokens) for segmenting the book.
    pub unit_tokens: usize,
    /// Directory for the disk prefix cache (default: a temporary directory).
    pub cache_dir: Option<PathBuf>,
    /// Where to write the SVG chart (None: no chart).
    pub svg: Option<PathBuf>,
    /// Also measure prefill tokens/s at 512, 2,048 and 4,096 tokens.
    pub prefill_scaling: bool,
    /// Threads.
    pub threads: usize,
    /// Measure each part's reuse and recompute TTFT this many times (interleaved) and keep
    /// the best of each.
    pub repeats: usize,
}

/// One part's measurements.
#[derive(Debug, Clone, Serialize)]
pub struct PartResult {
    /// Part id.
    pub id: String,
    /// Prompt tokens.
    pub prompt_tokens: usize,
    /// Tokens of the stable prefix in this prompt (after any boundary merge).
    pub stable_tokens: usize,
    /// Tokens served from the prefix cache on the reuse path.
    pub cache_hit_tokens: usize,
    /// Tokens computed on the reuse path.
    pub reuse_prefill_tokens: usize,
    /// Tokens computed on the recompute path (the whole prompt), if measured.
    pub recompute_prefill_tokens: Option<usize>,
    /// TTFT with reuse, seconds (checkout + prefill of the rest + argmax), best of the
    /// repeats.
    pub ttft_reuse_s: f64,
    /// TTFT with a fresh cache, seconds, if measured (best of the repeats).
    pub ttft_recompute_s: Option<f64>,
    /// Recompute ÷ reuse TTFT.
    pub speedup: Option<f64>,
    /// Max |logit difference| between the two paths at the last position.
    pub max_abs_logit_diff: Option<f32>,
    /// Whether both paths picked the same first token.
    pub same_first_token: Option<bool>,
}

/// Prefill speed at one prompt length.
#[derive(Debug, Clone, Serialize)]
pub struct PrefillPoint {
    /// Prompt tokens.
    pub tokens: usize,
    /// Seconds (one run, fresh cache).
    pub seconds: f64,
    /// Tokens per second.
    pub tok_s: f64,
}

/// Everything `quire bench prefix` reports.
#[derive(Debug, Clone, Serialize)]
pub struct PrefixReport {
    /// Model file name.
    pub model: String,
    /// The machine.
    pub machine: Machine,
    /// Where the parts came from.
    pub parts_source: String,
    /// Target prefix length.
    pub prefix_tokens_target: usize,
    /// Stable prefix tokens of the first part's prompt.
    pub prefix_tokens: usize,
    /// Glossary lines in the prefix.
    pub glossary_lines: usize,
    /// Per part.
    pub parts: Vec<PartResult>,
    /// Parts measured both ways (the totals below cover these).
    pub paired_parts: usize,
    /// Each TTFT is the best of this many runs.
    pub repeats: usize,
    /// Σ TTFT with reuse over paired parts.
    pub ttft_reuse_total_s: f64,
    /// Σ TTFT with recompute over paired parts.
    pub ttft_recompute_total_s: f64,
    /// Σ TTFT with reuse over all parts.
    pub ttft_reuse_total_all_s: f64,
    /// Σ recompute ÷ Σ reuse TTFT (paired parts).
    pub measured_speedup: f64,
    /// Mean cache-hit tokens P over paired parts.
    pub mean_hit_tokens: f64,
    /// Mean suffix tokens S computed with reuse over paired parts.
    pub mean_suffix_tokens: f64,
    /// (P + S) / S.
    pub ideal_speedup: f64,
    /// The formula used for `ideal_speedup`.
    pub ideal_formula: String,
    /// measured ÷ ideal.
    pub speedup_ratio: f64,
    /// Seconds to compute the prefix once (fresh cache, after a warm-up).
    pub prefix_compute_s: f64,
    /// Seconds to save the prefix to disk.
    pub disk_save_s: f64,
    /// Best seconds to load the prefix from disk (`DiskPrefixCache::load`, warm page cache).
    pub disk_load_s: f64,
    /// Size of the prefix file, MiB.
    pub disk_file_mib: f64,
    /// load ÷ recompute.
    pub disk_load_ratio: f64,
    /// Max |logit difference| over all parts, reuse vs recompute.
    pub max_abs_logit_diff: f32,
    /// Max |logit difference|, disk-loaded prefix vs recompute (first part).
    pub max_abs_logit_diff_disk: Option<f32>,
    /// Prefill speed at 512, 2,048, 4,096 tokens (with `--prefill-scaling`).
    pub prefill_scaling: Vec<PrefillPoint>,
    /// With `--prefill-scaling`: a fresh prefill of `n` tokens fitted as
    /// `n·a + b·n²/2` (`a`: seconds per token, `b`: seconds per token per visible position,
    /// i.e. attention), least squares over the scaling points.
    pub prefill_fit: Option<PrefillFit>,
    /// The speedup reuse could reach if a token cost exactly what the fit says — per paired
    /// part `(P+S)·a + b(P+S)²/2` recomputed vs `S·a + b(S·P + S²/2)` reused, summed: the
    /// token-count ideal with attention's quadratic cost counted.
    pub attention_aware_ideal: Option<f64>,
    /// measured ÷ `attention_aware_ideal`.
    pub attention_aware_ratio: Option<f64>,
    /// Peak RSS of the process, MiB.
    pub peak_rss_mib: Option<f64>,
    /// Load averages (1/5/15 min) when the benchmark started.
    pub load_average_start: Option<[f64; 3]>,
    /// Load averages when it ended.
    pub load_average_end: Option<[f64; 3]>,
    /// SVG chart path.
    pub svg: Option<String>,
}

fn ttft(
    engine: &Engine,
    cache: &mut KvCache,
    tokens: &[u32],
    start: Instant,
) -> Result<(candle_core::Tensor, u32, f64)> {
    let logits = engine.prefill(cache, tokens)?;
    let first = argmax(&logits)?;
    Ok((logits, first, start.elapsed().as_secs_f64()))
}

/// The parts to measure: the book's translatable units (default: the sample book's), cut
/// to `--parts` or topped up with synthetic parts; with where they came from and the book.
fn select_parts(opts: &PrefixBenchOptions) -> Result<(Vec<Part>, String, Option<PathBuf>)> {
    let book_dir = opts.book.clone().or_else(sample_book_dir);
    let (mut parts, mut source) = match &book_dir {
        Some(dir) => match book_parts(dir, opts.unit_tokens) {
            Ok(p) if !p.is_empty() => (p, format!("translatable units of {}", dir.display())),
            Ok(_) => (
                Vec::new(),
                format!("{} has no translatable units", dir.display()),
            ),
            Err(e) => (Vec::new(), format!("cannot read {}: {e:#}", dir.display())),
        },
        None => (Vec::new(), "no sample book found".to_string()),
    };
    let want = opts
        .parts
        .unwrap_or(if parts.is_empty() { 12 } else { parts.len() });
    if parts.len() > want {
        parts.truncate(want);
    } else if parts.len() < want {
        let extra = want - parts.len();
        parts.extend(synthetic_parts(extra, 0));
        source = if source.starts_with("translatable") {
            format!("{source} + {extra} synthetic parts")
        } else {
            format!("{want} synthetic parts ({source})")
        };
    }
    anyhow::ensure!(!parts.is_empty(), "no parts to measure");
    Ok((parts, source, book_dir))
}

/// The prefix's round trip through the disk cache in `cache_dir`.
struct DiskRound {
    save_s: f64,
    /// Best of three loads.
    load_s: f64,
    file_mib: f64,
    /// The last cache loaded, for the logit comparison on the first part.
    loaded: Option<KvCache>,
}

/// Save `prefix_cache` (the prefill of `prefix_ids`) to disk, drop it, and load it back
/// three times.
fn disk_round(
    engine: &Engine,
    salt: &str,
    prefix_cache: KvCache,
    prefix_ids: &[u32],
    cache_dir: &Path,
) -> Result<DiskRound> {
    let disk = DiskPrefixCache::new(cache_dir, 8 << 30);
    let t = Instant::now();
    let file = disk.save(salt, &prefix_cache)?;
    let save_s = t.elapsed().as_secs_f64();
    let file_mib = std::fs::metadata(&file)
        .map(|m| m.len() as f64 / (1024.0 * 1024.0))
        .unwrap_or(f64::NAN);
    drop(prefix_cache);
    let mut load_s = f64::INFINITY;
    let mut loaded = None;
    for _ in 0..3 {
        let t = Instant::now();
        let c = disk
            .load(salt, prefix_ids, engine.config(), &engine.device, 512)?
            .context("the prefix file just saved could not be loaded")?;
        load_s = load_s.min(t.elapsed().as_secs_f64());
        loaded = Some(c);
    }
    Ok(DiskRound {
        save_s,
        load_s,
        file_mib,
        loaded,
    })
}

/// What every part is measured with: the engine, the shared prefix's length, the repeats.
struct PartBench<'a> {
    engine: &'a Engine,
    stable: usize,
    repeats: usize,
}

/// One part's TTFT with reuse and, when `recompute`, with a fresh cache: the best of
/// `repeats` each, interleaved, so drift in the machine's speed hits both alike; every
/// repeat must give the same logits. With `from_disk` (first part) the disk-loaded prefix's
/// logits are compared with the recompute's too: the second value returned.
fn measure_part(
    b: &PartBench,
    store: &mut PrefixStore,
    part: &Part,
    sp: &PromptSplit,
    recompute: bool,
    mut from_disk: Option<KvCache>,
) -> Result<(PartResult, Option<f32>)> {
    let (engine, stable) = (b.engine, b.stable);
    let mut max_diff_disk = None;
    let tokens = &sp.tokens;
    let extra = tokens.len().saturating_sub(stable) + 16;
    let mut ttft_reuse_s = f64::INFINITY;
    let mut reuse = None;
    let mut hit = 0;
    let (mut ttft_rec, mut diff, mut same) = (None::<f64>, None, None);
    for _ in 0..b.repeats {
        let t = Instant::now();
        let (mut cache, h) = store.checkout(tokens, extra, || engine.new_cache())?;
        hit = h.min(tokens.len() - 1);
        cache.truncate(hit);
        let (logits, first, s) = ttft(engine, &mut cache, &tokens[hit..], t)?;
        drop(cache);
        ttft_reuse_s = ttft_reuse_s.min(s);
        let (logits_reuse, first_reuse) = reuse.get_or_insert((logits, first));
        if recompute {
            let t = Instant::now();
            let mut cache = engine.new_cache()?;
            let (logits_rec, first_rec, s) = ttft(engine, &mut cache, tokens, t)?;
            ttft_rec = Some(ttft_rec.map_or(s, |r| r.min(s)));
            let d = max_abs_diff(logits_reuse, &logits_rec)?;
            diff = Some(diff.map_or(d, |x: f32| x.max(d)));
            same = Some(same.unwrap_or(true) && first_rec == *first_reuse);
            if let Some(mut c) = from_disk.take() {
                if sp.stable_tokens == stable {
                    let logits_disk = engine.prefill(&mut c, &tokens[stable..])?;
                    max_diff_disk = Some(max_abs_diff(&logits_disk, &logits_rec)?);
                }
            }
        }
    }
    let result = PartResult {
        id: part.id.clone(),
        prompt_tokens: tokens.len(),
        stable_tokens: sp.stable_tokens,
        cache_hit_tokens: hit,
        reuse_prefill_tokens: tokens.len() - hit,
        recompute_prefill_tokens: ttft_rec.map(|_| tokens.len()),
        ttft_reuse_s,
        ttft_recompute_s: ttft_rec,
        speedup: ttft_rec.map(|r| r / ttft_reuse_s),
        max_abs_logit_diff: diff,
        same_first_token: same,
    };
    Ok((result, max_diff_disk))
}

/// Fresh prefills of 512, 2,048 and 4,096 tokens (those that fit the context), timed.
fn prefill_scaling(engine: &Engine) -> Result<Vec<PrefillPoint>> {
    let cfg = engine.config();
    let mut scaling = Vec::new();
    let ids = prompt_ids(|t| engine.encode(t), 4096)?;
    for len in [512usize, 2048, 4096] {
        if len + 16 > cfg.context_length {
            eprintln!(
                "prefill scaling: {len} tokens exceed the context ({}), skipped",
                cfg.context_length
            );
            continue;
        }
        let mut c = KvCache::with_capacity(cfg, &engine.device, len + 16)?;
        let t = Instant::now();
        engine.prefill(&mut c, &ids[..len])?;
        let s = t.elapsed().as_secs_f64();
        eprintln!(
            "prefill scaling: {len} tokens in {s:.2}s ({:.1} tok/s)",
            len as f64 / s
        );
        scaling.push(PrefillPoint {
            tokens: len,
            seconds: s,
            tok_s: len as f64 / s,
        });
    }
    Ok(scaling)
}

/// The shared prefix (guide and the book's glossary, about `--prefix-tokens` long) and each
/// part's prompt behind it, split at the stable prefix; every prompt must fit the context.
fn prompts(
    engine: &Engine,
    opts: &PrefixBenchOptions,
    parts: &[Part],
    book_dir: Option<&Path>,
) -> Result<(SharedPrefix, Vec<PromptSplit>)> {
    let cfg = engine.config();
    let glossary = book_dir.map(book_glossary).transpose()?.unwrap_or_default();
    let prefix = SharedPrefix::build(engine, opts.prefix_tokens, &glossary)?;
    let splits: Vec<PromptSplit> = parts
        .iter()
        .map(|p| prefix.split(engine, &p.text))
        .collect::<Result<_>>()?;
    for s in &splits {
        anyhow::ensure!(
            s.tokens.len() + 16 <= cfg.context_length,
            "a prompt of {} tokens does not fit the model's context of {}",
            s.tokens.len(),
            cfg.context_length
        );
    }
    Ok((prefix, splits))
}

/// Run the prefix benchmark.
pub fn run(opts: &PrefixBenchOptions) -> Result<PrefixReport> {
    let threads = sys::use_threads(opts.threads);
    let machine = Machine::detect(threads);
    let load_average_start = sys::load_average();
    sys::warn_if_busy();
    let engine = Engine::load(&opts.model, &Device::Cpu, &LoadOptions::default())?;
    eprintln!(
        "prefix bench: loaded {} in {:.2}s",
        opts.model.display(),
        engine.load_seconds
    );
    let (parts, source, book_dir) = select_parts(opts)?;

    // Shared prefix and prompts.
    let (prefix, splits) = prompts(&engine, opts, &parts, book_dir.as_deref())?;
    let stable = splits[0].stable_tokens;
    let prefix_ids = splits[0].tokens[..stable].to_vec();
    eprintln!(
        "prefix bench: {} parts ({source}); shared prefix {stable} tokens ({} glossary lines)",
        parts.len(),
        prefix.glossary.entries.len()
    );
    let (mut store, timing, from_disk) = prefix_once(&engine, opts, &prefix_ids, stable)?;
    let bench = PartBench {
        engine: &engine,
        stable,
        repeats: opts.repeats.max(1),
    };
    let max_recompute = opts.max_recompute.unwrap_or(parts.len());
    let (results, max_diff_disk) = measure_parts(
        &bench,
        &mut store,
        &parts,
        &splits,
        max_recompute,
        from_disk,
    )?;
    let totals = Totals::of(&results);
    let scaling = if opts.prefill_scaling {
        prefill_scaling(&engine)?
    } else {
        Vec::new()
    };
    let fit = fit_prefill(&scaling);
    let attention_aware_ideal = fit
        .as_ref()
        .map(|f| totals.attention_aware_ideal(&results, f));
    let model = opts
        .model
        .file_stem()
        .map(|s| s.to_string_lossy().to_string())
        .unwrap_or_default();
    let mut report = PrefixReport {
        model,
        machine,
        parts_source: source,
        prefix_tokens_target: opts.prefix_tokens,
        prefix_tokens: stable,
        glossary_lines: prefix.glossary.entries.len(),
        paired_parts: totals.paired,
        repeats: bench.repeats,
        ttft_reuse_total_s: totals.reuse,
        ttft_recompute_total_s: totals.recompute,
        ttft_reuse_total_all_s: results.iter().map(|r| r.ttft_reuse_s).sum(),
        measured_speedup: totals.measured(),
        mean_hit_tokens: totals.mean_hit,
        mean_suffix_tokens: totals.mean_suffix,
        ideal_speedup: totals.ideal(),
        ideal_formula: "(P + S) / S, P = mean cache-hit tokens, S = mean tokens computed with reuse, over the parts measured both ways (= Σ prompt tokens ÷ Σ reuse-computed tokens)".into(),
        speedup_ratio: totals.measured() / totals.ideal(),
        prefix_compute_s: timing.compute_s,
        disk_save_s: timing.save_s,
        disk_load_s: timing.load_s,
        disk_file_mib: timing.file_mib,
        disk_load_ratio: timing.load_s / timing.compute_s,
        max_abs_logit_diff: results.iter().filter_map(|r| r.max_abs_logit_diff).fold(0.0, f32::max),
        max_abs_logit_diff_disk: max_diff_disk,
        prefill_scaling: scaling,
        prefill_fit: fit,
        attention_aware_ideal,
        attention_aware_ratio: attention_aware_ideal.map(|i| totals.measured() / i),
        peak_rss_mib: sys::peak_rss_mib(),
        load_average_start,
        load_average_end: sys::load_average(),
        svg: None,
        parts: results,
    };
    if let Some(path) = &opts.svg {
        write_svg(&report, path)?;
        report.svg = Some(path.display().to_string());
    }
    Ok(report)
}

/// How long the shared prefix took to compute, save and load.
struct PrefixTiming {
    compute_s: f64,
    save_s: f64,
    load_s: f64,
    file_mib: f64,
}

/// Warm up, compute the shared prefix once into a memory store, and save and load it
/// through the disk cache; the loaded cache (to check against the first part) comes back.
fn prefix_once(
    engine: &Engine,
    opts: &PrefixBenchOptions,
    prefix_ids: &[u32],
    stable: usize,
) -> Result<(PrefixStore, PrefixTiming, Option<KvCache>)> {
    // Warm-up (thread pool, allocator, page cache of the weights).
    {
        let mut c = engine.new_cache()?;
        engine.prefill(&mut c, &prefix_ids[..prefix_ids.len().min(64)])?;
    }
    let salt = engine.fingerprint()?;
    let mut store = PrefixStore::new(salt.clone(), usize::MAX);
    let t = Instant::now();
    let mut prefix_cache = engine.new_cache()?;
    engine.prefill(&mut prefix_cache, prefix_ids)?;
    let compute_s = t.elapsed().as_secs_f64();
    store.insert(&prefix_cache, stable)?;
    eprintln!("prefix bench: prefix computed in {compute_s:.2}s");
    let tmp;
    let cache_dir = match &opts.cache_dir {
        Some(d) => d.clone(),
        None => {
            tmp = tempfile::tempdir()?;
            tmp.path().to_path_buf()
        }
    };
    let disk = disk_round(engine, &salt, prefix_cache, prefix_ids, &cache_dir)?;
    eprintln!(
        "prefix bench: disk save {:.3}s, load {:.3}s ({:.1} MiB)",
        disk.save_s, disk.load_s, disk.file_mib
    );
    let timing = PrefixTiming {
        compute_s,
        save_s: disk.save_s,
        load_s: disk.load_s,
        file_mib: disk.file_mib,
    };
    Ok((store, timing, disk.loaded))
}

/// Every part measured with reuse, and the first `max_recompute` also recomputed (the first
/// of them checked against the prefix loaded from disk).
fn measure_parts(
    bench: &PartBench,
    store: &mut PrefixStore,
    parts: &[Part],
    splits: &[PromptSplit],
    max_recompute: usize,
    mut from_disk: Option<KvCache>,
) -> Result<(Vec<PartResult>, Option<f32>)> {
    let mut results = Vec::with_capacity(parts.len());
    let mut max_diff_disk = None;
    for (i, (part, sp)) in parts.iter().zip(splits).enumerate() {
        let recompute = i < max_recompute;
        let disk_check = if recompute && i == 0 {
            from_disk.take()
        } else {
            None
        };
        let (r, diff_disk) = measure_part(bench, store, part, sp, recompute, disk_check)?;
        max_diff_disk = max_diff_disk.or(diff_disk);
        eprintln!(
            "part {}/{} {}: {} tokens, {} cached; TTFT reuse {:.3}s, recompute {}",
            i + 1,
            parts.len(),
            part.id,
            r.prompt_tokens,
            r.cache_hit_tokens,
            r.ttft_reuse_s,
            r.ttft_recompute_s
                .map(|s| format!("{s:.3}s"))
                .unwrap_or_else(|| "skipped".into())
        );
        results.push(r);
    }
    Ok((results, max_diff_disk))
}

/// The sums and means over the parts measured both ways.
struct Totals {
    paired: usize,
    reuse: f64,
    recompute: f64,
    mean_hit: f64,
    mean_suffix: f64,
}

impl Totals {
    fn of(results: &[PartResult]) -> Totals {
        let paired: Vec<&PartResult> = results
            .iter()
            .filter(|r| r.ttft_recompute_s.is_some())
            .collect();
        let n = paired.len().max(1) as f64;
        Totals {
            paired: paired.len(),
            reuse: paired.iter().map(|r| r.ttft_reuse_s).sum(),
            recompute: paired.iter().filter_map(|r| r.ttft_recompute_s).sum(),
            mean_hit: paired
                .iter()
                .map(|r| r.cache_hit_tokens as f64)
                .sum::<f64>()
                / n,
            mean_suffix: paired
                .iter()
                .map(|r| r.reuse_prefill_tokens as f64)
                .sum::<f64>()
                / n,
        }
    }

    fn measured(&self) -> f64 {
        self.recompute / self.reuse
    }

    fn ideal(&self) -> f64 {
        (self.mean_hit + self.mean_suffix) / self.mean_suffix
    }

    /// The ideal speed-up under the fitted cost model, attention included.
    fn attention_aware_ideal(&self, results: &[PartResult], f: &PrefillFit) -> f64 {
        let (mut rec, mut reuse) = (0.0, 0.0);
        for r in results.iter().filter(|r| r.ttft_recompute_s.is_some()) {
            let (p, s) = (r.cache_hit_tokens as f64, r.reuse_prefill_tokens as f64);
            rec += (p + s) * f.a + f.b * (p + s) * (p + s) / 2.0;
            reuse += s * f.a + f.b * (s * p + s * s / 2.0);
        }
        rec / reuse
    }
}

/// A fresh prefill's cost model, `n·a + b·n²/2` seconds for `n` tokens.
#[derive(Debug, Clone, Serialize)]
pub struct PrefillFit {
    /// Seconds per token (everything but attention).
    pub a: f64,
    /// Seconds per token per visible position (attention).
    pub b: f64,
}

/// Least-squares fit of `seconds / n = a + b·n/2` over the scaling points (None with fewer
/// than two).
fn fit_prefill(points: &[PrefillPoint]) -> Option<PrefillFit> {
    if points.len() < 2 {
        return None;
    }
    let xy: Vec<(f64, f64)> = points
        .iter()
        .map(|p| (p.tokens as f64 / 2.0, p.seconds / p.tokens as f64))
        .collect();
    let n = xy.len() as f64;
    let (mx, my) = (
        xy.iter().map(|p| p.0).sum::<f64>() / n,
        xy.iter().map(|p| p.1).sum::<f64>() / n,
    );
    let sxx: f64 = xy.iter().map(|p| (p.0 - mx) * (p.0 - mx)).sum();
    let sxy: f64 = xy.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let b = sxy / sxx;
    Some(PrefillFit { a: my - b * mx, b })
}

/// The per-part TTFT chart (reuse vs recompute).
pub fn chart(r: &PrefixReport) -> String {
    let cats: Vec<String> = (1..=r.parts.len()).map(|i| i.to_string()).collect();
    let series = vec![
        Series {
            name: "TTFT with prefix reuse".into(),
            color: "#2b7bb9".into(),
            values: r.parts.iter().map(|p| Some(p.ttft_reuse_s)).collect(),
        },
        Series {
            name: "TTFT with full recompute".into(),
            color: "#e8743b".into(),
            values: r.parts.iter().map(|p| p.ttft_recompute_s).collect(),
        },
    ];
    bar_chart(
        &format!("Prefix KV reuse vs recompute: {}", r.model),
        &format!(
            "{} parts behind a {}-token shared prefix; measured speedup {:.1}× over {} parts (ideal {:.1}×)\n{}, {} threads; n/m = recompute not measured",
            r.parts.len(),
            r.prefix_tokens,
            r.measured_speedup,
            r.paired_parts,
            r.ideal_speedup,
            r.machine.cpu_model,
            r.machine.threads
        ),
        "part",
        "time to first token (s)",
        &cats,
        &series,
    )
}

fn write_svg(r: &PrefixReport, path: &Path) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    std::fs::write(path, chart(r)).with_context(|| format!("cannot write {}", path.display()))
}

/// The report as text tables.
pub fn render_text(r: &PrefixReport) -> String {
    let mut s = String::new();
    s.push_str(&format!(
        "model    {}\nmachine  {}\nload     load average {} at start, {} at end (1/5/15 min; above 0 means other work shared the CPUs)\n",
        r.model,
        r.machine.describe(),
        sys::load_average_text(r.load_average_start),
        sys::load_average_text(r.load_average_end)
    ));
    s.push_str(&format!(
        "parts    {} ({})\nprefix   {} tokens (target {}): translation guide + {} glossary lines, rendered with the model's chat template\n\n",
        r.parts.len(),
        r.parts_source,
        r.prefix_tokens,
        r.prefix_tokens_target,
        r.glossary_lines
    ));
    let rows: Vec<Vec<String>> = r
        .parts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            vec![
                format!("{} {}", i + 1, p.id),
                p.prompt_tokens.to_string(),
                p.cache_hit_tokens.to_string(),
                p.reuse_prefill_tokens.to_string(),
                p.recompute_prefill_tokens
                    .map(|n| n.to_string())
                    .unwrap_or_else(|| "-".into()),
                format!("{:.3}", p.ttft_reuse_s),
                fmt_opt(p.ttft_recompute_s, 3),
                fmt_opt(p.speedup, 1),
                p.max_abs_logit_diff
                    .map(|d| format!("{d:.2e}"))
                    .unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    s.push_str(&table(
        &[
            "part",
            "prompt tok",
            "cache hit",
            "computed (reuse)",
            "computed (recompute)",
            "TTFT reuse s",
            "TTFT recompute s",
            "speedup",
            "max |Δlogit|",
        ],
        &rows,
    ));
    if r.paired_parts < r.parts.len() {
        s.push_str(&format!(
            "(recompute measured for the first {} of {} parts only — --max-recompute; totals below cover those)\n",
            r.paired_parts,
            r.parts.len()
        ));
    }
    s.push_str(&format!(
        "\nTTFTs: best of {} runs each, reuse and recompute interleaved\ntotals over {} parts: TTFT reuse {:.2}s, recompute {:.2}s (reuse over all {} parts: {:.2}s)\n",
        r.repeats,
        r.paired_parts,
        r.ttft_reuse_total_s,
        r.ttft_recompute_total_s,
        r.parts.len(),
        r.ttft_reuse_total_all_s
    ));
    s.push_str(&format!(
        "measured speedup   {:.2}×  (Σ recompute TTFT ÷ Σ reuse TTFT)\nideal speedup      {:.2}×  ((P + S) / S with P = {:.1} mean cache-hit tokens, S = {:.1} mean suffix tokens)\nmeasured / ideal   {:.2}\n",
        r.measured_speedup, r.ideal_speedup, r.mean_hit_tokens, r.mean_suffix_tokens, r.speedup_ratio
    ));
    s.push_str(&format!(
        "prefix from disk   load {:.4}s vs recompute {:.3}s → disk_load_ratio {:.2e} ({:.0}× faster; file {:.1} MiB, save {:.3}s; warm page cache)\n",
        r.disk_load_s,
        r.prefix_compute_s,
        r.disk_load_ratio,
        1.0 / r.disk_load_ratio,
        r.disk_file_mib,
        r.disk_save_s
    ));
    s.push_str(&format!(
        "max |Δlogit|       {:.3e} reuse vs recompute over all parts{}\n",
        r.max_abs_logit_diff,
        r.max_abs_logit_diff_disk
            .map(|d| format!("; {d:.3e} disk-loaded prefix vs recompute (part 1)"))
            .unwrap_or_default()
    ));
    let diverged = r
        .parts
        .iter()
        .filter(|p| p.same_first_token == Some(false))
        .count();
    if diverged > 0 {
        s.push_str(&format!(
            "first token differs between the paths in {diverged} parts\n"
        ));
    }
    if !r.prefill_scaling.is_empty() {
        s.push_str("\nprefill scaling (one run each, fresh cache)\n");
        let rows: Vec<Vec<String>> = r
            .prefill_scaling
            .iter()
            .map(|p| {
                vec![
                    p.tokens.to_string(),
                    format!("{:.2}", p.seconds),
                    format!("{:.1}", p.tok_s),
                ]
            })
            .collect();
        s.push_str(&table(&["prompt tokens", "seconds", "tok/s"], &rows));
        if let (Some(f), Some(i), Some(q)) = (
            &r.prefill_fit,
            r.attention_aware_ideal,
            r.attention_aware_ratio,
        ) {
            s.push_str(&format!(
                "fit: n tokens cost n·{:.3} ms + n²/2·{:.2} µs (attention); with that cost per token the \
                 best reuse can do on these parts is {i:.2}× → measured / attention-aware ideal {q:.2}\n",
                f.a * 1e3,
                f.b * 1e6
            ));
        }
    }
    s.push_str(&format!(
        "\npeak RSS           {} MiB (this process)\n",
        fmt_opt(r.peak_rss_mib, 0)
    ));
    if let Some(p) = &r.svg {
        s.push_str(&format!("chart              {p}\n"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn synthetic_parts_are_distinct_and_nonempty() {
        let p = synthetic_parts(5, 0);
        assert_eq!(p.len(), 5);
        assert!(p.iter().all(|x| !x.text.is_empty()));
        assert_eq!(p[4].id, "synthetic-5");
    }

    #[test]
    fn parts_get_the_translate_prompt() {
        let house = Glossary::parse_json(r#"[{"en":"token","zh":"词元"}]"#, "en", "zh-CN").unwrap();
        let prefix = SharedPrefix {
            glossary: Glossary {
                entries: house_terms(&house)
                    .entries
                    .into_iter()
                    .chain([pad_term(0), pad_term(TERMS.len())])
                    .collect(),
            },
        };
        let req = prefix.request("Count the tokens of {{1}}.").unwrap();
        let system = &req.messages[0].content;
        assert!(system.starts_with(DEFAULT_GUIDE.trim()), "{system}");
        assert!(system.contains("- token → 词元\n"), "{system}");
        assert!(
            system.contains("- attention head 2 → 注意力头 2\n"),
            "{system}"
        );
        let user = &req.messages[1].content;
        assert_eq!(req.split.message, 1);
        assert!(user[req.split.offset..].starts_with("Terms in this passage: token → 词元."));
        assert!(user.ends_with("Count the 词元 of {{1}}.\n"), "{user}");
    }

    #[test]
    fn sample_book_has_parts() {
        if let Some(dir) = sample_book_dir() {
            let parts = book_parts(&dir, 400).unwrap();
            assert!(!parts.is_empty());
            assert!(!book_glossary(&dir).unwrap().is_empty());
        }
    }
}
