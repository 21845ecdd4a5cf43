//! Segmentation plus full QA of a synthetic ~250 KB book (written by this bench).
//!
//! Run with `cargo bench --bench checks`. Prints the book size and the time of each stage
//! (best of several runs).

use quire::book::{Book, Chapter};
use quire::checks::{check_books, CheckContext, Glossary};
use quire::units::{reassemble, restore_placeholders, segment_chapter, EstimateTokens};
use std::path::PathBuf;
use std::time::{Duration, Instant};

const PAIRS: &[(&str, &str)] = &[
    (
        "The keeper wrote every night in a ledger, and the agent of the harbour board read it once a month.",
        "守塔人每晚都在账簿上记录，港务局的代理人每月阅读一次。",
    ),
    (
        "In 1887 the lamp burned 367,000 litres of oil, and a modern model has a 128K token context.",
        "1887 年，这盏灯烧掉了 36.7万 升灯油，而现代模型拥有 128K token 的上下文。",
    ),
    (
        "Use `ledger.add()` to append an entry and read the [harbour rules](https://harbour.example.org/rules) first.",
        "使用 `ledger.add()` 追加记录，并先阅读[港口规则](https://harbour.example.org/rules)。",
    ),
    (
        "Storms tested the light every winter, and the keeper stayed awake through the longest nights of the year.",
        "每年冬天，风暴都考验着灯光，守塔人在一年中最漫长的夜里保持清醒。",
    ),
    (
        "Records are archived at https://archive.example.org/ledgers for 25 years, as the rules require.",
        "记录按照规则要求在 https://archive.example.org/ledgers 归档 25 年。",
    ),
];

fn chapter(n: usize, target_bytes: usize) -> (String, String) {
    let (mut en, mut zh) = (String::new(), String::new());
    en.push_str(&format!("# Chapter {n}: The Light\n\n"));
    zh.push_str(&format!("# 第 {n} 章：灯光\n\n"));
    let mut k = n;
    let mut section = 0;
    while en.len() < target_bytes {
        section += 1;
        en.push_str(&format!("## Section {n}.{section}\n\n"));
        zh.push_str(&format!("## 第 {n}.{section} 节\n\n"));
        for _ in 0..4 {
            let mut pe = Vec::new();
            let mut pz = Vec::new();
            for _ in 0..4 {
                k = (k * 1_103_515_245 + 12_345) % (1 << 31);
                pe.push(PAIRS[k % PAIRS.len()].0);
                pz.push(PAIRS[k % PAIRS.len()].1);
            }
            en.push_str(&pe.join(" "));
            zh.push_str(&pz.join(""));
            en.push_str(&format!("[^n{n}s{section}]\n\n"));
            zh.push_str(&format!("[^n{n}s{section}]\n\n"));
        }
        let code = format!("```python\ndef entry_{section}(ledger):\n    return ledger.add({section}, oil=12)\n```\n\n");
        en.push_str(&code);
        zh.push_str(&code);
        en.push_str(
            "| Month | Nights | Oil |\n|---|---|---|\n| March | 31 | 12 |\n| April | 30 | 9 |\n\n",
        );
        zh.push_str(
            "| 月份 | 夜数 | 灯油 |\n|---|---|---|\n| 三月 | 31 | 12 |\n| 四月 | 30 | 9 |\n\n",
        );
        en.push_str("- the wick\n- the lens\n- the oil level\n\n![A page](images/page.png)\n\n");
        zh.push_str("- 灯芯\n- 透镜\n- 油位\n\n![一页](images/page.png)\n\n");
        en.push_str(&format!("[^n{n}s{section}]: The rules date from 1850.\n\n"));
        zh.push_str(&format!("[^n{n}s{section}]: 这些规则始于 1850 年。\n\n"));
    }
    (en, zh)
}

fn best<T>(runs: usize, mut f: impl FnMut() -> T) -> (Duration, T) {
    let mut best = Duration::MAX;
    let mut last = None;
    for _ in 0..runs {
        let t = Instant::now();
        let v = f();
        best = best.min(t.elapsed());
        last = Some(v);
    }
    (best, last.expect("at least one run"))
}

fn main() {
    let chapters = 10;
    let mut src = Vec::new();
    let mut tgt = Vec::new();
    for n in 1..=chapters {
        let (en, zh) = chapter(n, 25_000);
        let name = PathBuf::from(format!("chapter{n}.md"));
        src.push(Chapter {
            rel_path: name.clone(),
            text: en,
        });
        tgt.push(Chapter {
            rel_path: name,
            text: zh,
        });
    }
    let bytes: usize = src.iter().map(|c| c.text.len()).sum();
    let tbytes: usize = tgt.iter().map(|c| c.text.len()).sum();
    let source = Book {
        root: PathBuf::from("bench-en"),
        chapters: src,
        epub: None,
    };
    let target = Book {
        root: PathBuf::from("bench-zh"),
        chapters: tgt,
        epub: None,
    };
    let glossary = Glossary::parse_json(
        r#"[{"en":"agent","zh":"代理人"},{"en":"ledger","zh":"账簿"},{"en":"lens","zh":"透镜"}]"#,
        "en",
        "zh-CN",
    )
    .expect("glossary");
    let ctx = CheckContext::new("en", "zh-CN").with_glossary(glossary);

    let (seg_time, units) = best(5, || {
        source
            .chapters
            .iter()
            .map(|c| segment_chapter(c, 1024, &EstimateTokens).expect("segments"))
            .collect::<Vec<_>>()
    });
    let unit_count: usize = units.iter().map(Vec::len).sum();
    let (rt_time, ok) = best(5, || {
        units.iter().zip(&source.chapters).all(|(us, c)| {
            let restored: Vec<String> = us
                .iter()
                .map(|u| restore_placeholders(u, &u.protected).expect("restore"))
                .collect();
            reassemble(us, &restored) == c.text
        })
    });
    assert!(ok, "round trip failed");
    let (qa_time, report) = best(5, || check_books(&source, &target, &ctx).expect("check"));
    println!(
        "book: {chapters} chapters, {:.1} KB source, {:.1} KB translation",
        bytes as f64 / 1024.0,
        tbytes as f64 / 1024.0
    );
    println!(
        "segmentation: {unit_count} units in {:.1} ms",
        seg_time.as_secs_f64() * 1e3
    );
    println!(
        "restore + reassemble (round trip): {:.1} ms",
        rt_time.as_secs_f64() * 1e3
    );
    println!(
        "full QA (18 categories): {:.1} ms, {} findings, passed: {}",
        qa_time.as_secs_f64() * 1e3,
        report.findings.len(),
        report.passed
    );
    if std::env::var_os("QUIRE_BENCH_VERBOSE").is_some() {
        print!("{}", report.render_human());
    }
    println!(
        "segmentation + QA: {:.1} ms",
        (seg_time + qa_time).as_secs_f64() * 1e3
    );
}
