//! Property test: whatever a model answers, the book Quire writes keeps its structure and
//! the run never panics. Generated Markdown books are translated through the real manager
//! (glossary, scheduler, checks, fallback cascade, chapters, proofreading) with a stand-in
//! backend that answers adversarially: placeholders dropped or repeated, fences and headings
//! invented, lines merged or split, CRLF line endings, empty and huge replies. The stages
//! that write into the finished translations (kept words, bold spans, the originals of
//! introduced terms) run on every book.

mod common;

use common::stand_in::StandIn;
use proptest::prelude::*;
use quire::book::load_book;
use quire::checks::{check_books, Category, CheckContext, Severity};
use quire::engine::generate::FinishReason;
use quire::translate::{run_with_backend, ProgressMode, TranslateOptions};

/// What the stand-in does to a passage.
#[derive(Debug, Clone, Copy)]
enum Mischief {
    /// A plausible translation: letters become Han characters, placeholders kept.
    Faithful,
    DropPlaceholder,
    RepeatPlaceholder,
    InventFence,
    InventHeading,
    MergeLines,
    SplitLine,
    Crlf,
    Empty,
    Huge,
}

const ALL: [Mischief; 10] = [
    Mischief::Faithful,
    Mischief::DropPlaceholder,
    Mischief::RepeatPlaceholder,
    Mischief::InventFence,
    Mischief::InventHeading,
    Mischief::MergeLines,
    Mischief::SplitLine,
    Mischief::Crlf,
    Mischief::Empty,
    Mischief::Huge,
];

/// A seeded plan of mischief.
fn mischief(seed: u64, call: u64) -> Mischief {
    let x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(call.wrapping_mul(1442695040888963407));
    ALL[((x >> 33) % ALL.len() as u64) as usize]
}

fn han(text: &str) -> String {
    let mut out = String::new();
    let mut in_ph = false;
    for c in text.chars() {
        match c {
            '{' => {
                in_ph = true;
                out.push(c)
            }
            '}' => {
                in_ph = false;
                out.push(c)
            }
            c if in_ph || !c.is_ascii_alphabetic() => out.push(c),
            _ => out.push('中'),
        }
    }
    out
}

fn reply(m: Mischief, passage: &str) -> String {
    let t = han(passage);
    let first_ph = regex::Regex::new(r"\{\{[0-9]+\}\}").unwrap();
    match m {
        Mischief::Faithful => t,
        Mischief::DropPlaceholder => first_ph.replace(&t, "").into_owned(),
        Mischief::RepeatPlaceholder => match first_ph.find(&t) {
            Some(p) => format!("{t} {}", p.as_str()),
            None => format!("{t} {{{{1}}}}"),
        },
        Mischief::InventFence => format!("```\n{t}\n```"),
        Mischief::InventHeading => format!("# 标题\n\n{t}"),
        Mischief::MergeLines => t.replace("\n\n", "").replace('\n', ""),
        Mischief::SplitLine => match t.find('。') {
            Some(p) => format!("{}\n\n{}", &t[..p], &t[p..]),
            None => format!("{t}\n\n多余的一行"),
        },
        Mischief::Crlf => t.replace('\n', "\r\n"),
        Mischief::Empty => String::new(),
        Mischief::Huge => t.repeat(40),
    }
}

/// Markdown blocks a book is made of.
fn block() -> impl Strategy<Value = String> {
    let words = "[A-Z][a-z]{2,7}( [a-z]{2,8}){3,12}\\.";
    prop_oneof![
        words.prop_map(|w| format!("## {w}")),
        (words, words).prop_map(|(a, b)| format!("{a} It calls `warm_cache()` once. {b}")),
        words.prop_map(|w| format!(
            "{w} See [the guide](https://example.com/guide) and **bold words** here."
        )),
        words.prop_map(|w| format!("{w} A note follows.[^n1]")),
        // A term introduced in bold: its original is written after the translation.
        words.prop_map(|w| format!("**Entity Disambiguation** is a task. {w}")),
        (words, words).prop_map(|(a, b)| format!("- {a}\n- {b}")),
        words.prop_map(|w| format!("> {w}\n>\n> Quoted again.")),
        (words, words).prop_map(|(a, b)| format!("| Name | Value |\n|---|---|\n| {a} | {b} |")),
        Just("```python\nprint(len(ids))\n```".to_string()),
        words.prop_map(|w| format!(
            "```python\n# {w}\nids = load(\"x # y\")  # {w}\nprint(len(ids))\n```"
        )),
        words.prop_map(|w| format!("![{w}](images/fig.svg)")),
        words.prop_map(|w| format!("1. {w}\n2. Second step with 3 items.")),
    ]
}

fn book() -> impl Strategy<Value = (String, bool)> {
    (prop::collection::vec(block(), 2..7), any::<bool>()).prop_map(|(blocks, crlf)| {
        let mut md = format!("# Chapter\n\n{}\n", blocks.join("\n\n"));
        if md.contains("[^n1]") {
            md.push_str("\n[^n1]: The note, with https://example.com/note inside.\n");
        }
        if crlf {
            md = md.replace('\n', "\r\n");
        }
        (md, crlf)
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn the_written_book_keeps_its_structure((md, crlf) in book(), seed in any::<u64>()) {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        std::fs::create_dir(&src).unwrap();
        std::fs::write(src.join("ch1.md"), &md).unwrap();
        let opts = TranslateOptions {
            input: Some(src.clone()),
            out: dir.path().join("out"),
            progress: ProgressMode::Quiet,
            review_every: 0,
            ..TranslateOptions::default()
        };
        let mut backend = StandIn::new(|call, passage| {
            let m = mischief(seed, call);
            let finish = if matches!(m, Mischief::Huge) { FinishReason::Length } else { FinishReason::Eos };
            (reply(m, passage), finish)
        });
        let summary = run_with_backend(&opts, &mut backend).unwrap();
        prop_assert!(summary.complete);
        prop_assert_eq!(summary.blocked, 0, "a unit the fallback could not translate keeps its source, flagged");
        let written = std::fs::read_to_string(opts.out.join("book/ch1.md")).unwrap();
        if crlf {
            prop_assert_eq!(written.matches('\n').count(), written.matches("\r\n").count());
        }
        let report = check_books(
            &load_book(&src).unwrap(),
            &load_book(&opts.out.join("book")).unwrap(),
            &CheckContext::new("en", "zh-CN"),
        )
        .unwrap();
        for f in &report.findings {
            prop_assert!(
                !(Category::STRUCTURE.contains(&f.category) && f.severity == Severity::Error),
                "{:?}\n--- source\n{}\n--- written\n{}", f, md, written
            );
        }
    }
}
