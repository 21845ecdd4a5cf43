//! Benchmarks behind `quire bench` and `cargo bench`.
//!
//! * [`engine`]: prefill and decode speed, load time, cold time to first token and peak
//!   memory, side by side with llama.cpp (through llama-cpp-python) on the same token ids,
//!   and decode speed against the machine's memory-bandwidth limit.
//! * [`batch`]: throughput mode — several requests decoded together against one at a
//!   time.
//! * [`prefix`]: time to first token with the prefix KV cache against a full recompute,
//!   over the parts of a book behind one long shared prefix; disk load against recompute;
//!   the logit difference between the two paths; an SVG chart.
//! * [`quality`]: a book translated by Quire and by a naive per-paragraph llama.cpp loop,
//!   side by side per chapter: structure errors, blocked units, house-term share,
//!   untranslated English, chrF against a reference, wall time.
//! * [`serve`](mod@serve): `quire serve` against llama.cpp's server under concurrent
//!   clients sharing a system prompt: throughput, time to first token, cached tokens.
//!
//! The helpers here (machine description, peak RSS, memory bandwidth, deterministic text,
//! plain-text tables) are shared by both.

pub mod batch;
pub mod config;
pub mod debian_reference;
pub mod draft;
pub mod engine;
pub mod isa;
pub mod prefix;
pub mod quality;
pub mod serve;
pub mod svg;
pub mod sys;

use anyhow::{Context, Result};
use candle_core::Tensor;

/// Index of the largest logit (greedy choice), as the engine's greedy sampler picks it.
pub fn argmax(logits: &Tensor) -> Result<u32> {
    let v: Vec<f32> = logits.flatten_all()?.to_vec1()?;
    let (best, _) = v
        .iter()
        .enumerate()
        .fold((0usize, f32::NEG_INFINITY), |(bi, bv), (i, &x)| {
            if x > bv {
                (i, x)
            } else {
                (bi, bv)
            }
        });
    u32::try_from(best).context("vocabulary index overflows u32")
}

/// Largest absolute element-wise difference of two logit vectors.
pub fn max_abs_diff(a: &Tensor, b: &Tensor) -> Result<f32> {
    let a: Vec<f32> = a.flatten_all()?.to_vec1()?;
    let b: Vec<f32> = b.flatten_all()?.to_vec1()?;
    anyhow::ensure!(
        a.len() == b.len(),
        "logit vectors differ in length: {} vs {}",
        a.len(),
        b.len()
    );
    Ok(a.iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max))
}

const SENTENCES: &[&str] = &[
    "The keeper of the lighthouse wrote in his ledger every night, noting the wind, the weather and the ships that passed.",
    "A language model reads the whole prompt before it writes the first word of its answer.",
    "Each chapter of the manual begins with a short story and ends with a list of exercises for the reader.",
    "When the storm reached the harbour, the fishermen pulled their boats onto the beach and waited for the morning.",
    "The translator kept a glossary of every technical term, so that the same word was always rendered the same way.",
    "Memory bandwidth, not arithmetic, limits how fast a small computer can generate text one token at a time.",
    "She opened the old notebook and found a map of the island, drawn in pencil and annotated in three languages.",
    "Caching the keys and values of a long shared prefix lets the engine skip most of the work for every new request.",
    "The committee met on Tuesday to discuss the budget, the schedule and the new rules for the public library.",
    "In the spring the river rose above its banks, and the village moved its market to the hill behind the church.",
    "Good documentation explains not only what a function does but also why it exists and when not to use it.",
    "The train left the station at dawn and crossed the mountains before the snow closed the pass for the winter.",
    "Every book is a conversation between the author and a reader the author will probably never meet.",
    "The engineers measured the latency of each request and plotted the results on a chart that everyone could read.",
    "After dinner the children gathered around the fire and listened to their grandmother tell stories of the sea.",
    "A careful review found three inconsistent terms, two missing numbers and one sentence that had lost its meaning.",
];

/// The prompt tokens of a request to translate `paragraph` into Simplified Chinese (one
/// system message shared by every request, the paragraph as the user message).
pub fn translation_prompt(
    engine: &crate::engine::Engine,
    paragraph: &str,
) -> anyhow::Result<Vec<u32>> {
    use crate::engine::chat_template::Message;
    let msgs = [
        Message::system("You are a professional translator. Translate the user's text into Simplified Chinese. Output only the translation."),
        Message::user(paragraph),
    ];
    engine.encode(&engine.template.render(&msgs, true)?)
}

/// Deterministic English prose of at least `min_chars` bytes: sentences from a fixed pool in
/// a pseudo-random (fixed-seed) order, in paragraphs of four or five sentences.
pub fn english_text(min_chars: usize) -> String {
    let mut out = String::with_capacity(min_chars + 256);
    let mut state: u64 = 0x2545_F491_4F6C_DD1D;
    let mut in_paragraph = 0;
    while out.len() < min_chars {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let s = SENTENCES[((state >> 33) as usize) % SENTENCES.len()];
        if in_paragraph > 0 {
            out.push(' ');
        }
        out.push_str(s);
        in_paragraph += 1;
        if in_paragraph >= 4 + ((state >> 20) as usize % 2) {
            out.push_str("\n\n");
            in_paragraph = 0;
        }
    }
    out
}

/// `n` token ids from tokenizing [`english_text`] with `encode` and truncating: the same
/// ids for every engine, and the ids for a shorter length are a prefix of a longer one's.
pub fn prompt_ids(encode: impl Fn(&str) -> Result<Vec<u32>>, n: usize) -> Result<Vec<u32>> {
    let mut chars = n * 5 + 64;
    loop {
        let ids = encode(&english_text(chars))?;
        if ids.len() >= n {
            return Ok(ids[..n].to_vec());
        }
        chars *= 2;
    }
}

/// A plain-text table: column widths fitted to the content; the first column left-aligned,
/// the others right-aligned.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let cols = headers.len();
    let mut width: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate().take(cols) {
            width[i] = width[i].max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| -> String {
        let mut s = String::new();
        for (i, cell) in cells.iter().enumerate() {
            let pad = width[i].saturating_sub(cell.chars().count());
            if i > 0 {
                s.push_str("  ");
            }
            if i == 0 {
                s.push_str(cell);
                s.push_str(&" ".repeat(pad));
            } else {
                s.push_str(&" ".repeat(pad));
                s.push_str(cell);
            }
        }
        s.trim_end().to_string()
    };
    let mut out = line(headers.to_vec());
    out.push('\n');
    out.push_str(&line(
        width
            .iter()
            .map(|w| "-".repeat(*w))
            .collect::<Vec<_>>()
            .iter()
            .map(String::as_str)
            .collect(),
    ));
    out.push('\n');
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
        out.push('\n');
    }
    out
}

/// `x` with `digits` decimals, or "n/a".
pub fn fmt_opt(x: Option<f64>, digits: usize) -> String {
    match x {
        Some(v) if v.is_finite() => format!("{v:.digits$}"),
        _ => "n/a".to_string(),
    }
}

/// `a ÷ b` when both exist and `b` is not zero.
pub fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b != 0.0 => Some(a / b),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_deterministic_and_long_enough() {
        let a = english_text(5000);
        assert!(a.len() >= 5000);
        assert_eq!(a, english_text(5000));
        assert!(english_text(10_000).starts_with(&a[..4000]));
    }

    #[test]
    fn table_aligns_columns() {
        let t = table(&["a", "bb"], &[vec!["xyz".into(), "1".into()]]);
        assert_eq!(t, "a    bb\n---  --\nxyz   1\n");
    }

    #[test]
    fn argmax_and_diff() {
        let a = Tensor::new(&[0.5f32, 2.0, -1.0], &candle_core::Device::Cpu).unwrap();
        let b = Tensor::new(&[0.5f32, 1.5, -1.0], &candle_core::Device::Cpu).unwrap();
        assert_eq!(argmax(&a).unwrap(), 1);
        assert_eq!(max_abs_diff(&a, &b).unwrap(), 0.5);
    }
}
