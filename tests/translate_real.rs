//! `quire translate` end to end on the real 0.5B model: structure survives, house terms are
//! honoured, a rerun does no model work, a run killed with SIGKILL resumes to the same
//! output, and a second run on the same directory is refused.

mod common;

use quire::report::{read_json, ProofreadingReport, RunReport};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/translate/mini-book")
}

fn glossary() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/sample-book/glossary.json")
}

fn translate_cmd(out: &Path, cache: &Path) -> Command {
    translate_book(&fixture(), out, cache)
}

fn translate_book(book: &Path, out: &Path, cache: &Path) -> Command {
    translate_with(book, &glossary(), out, cache)
}

fn translate_with(book: &Path, glossary: &Path, out: &Path, cache: &Path) -> Command {
    common::model_path(common::QWEN); // fetched before timing-sensitive steps
    let mut c = Command::new(env!("CARGO_BIN_EXE_quire"));
    c.arg("translate")
        .arg(book)
        .arg("--out")
        .arg(out)
        .arg("--glossary")
        .arg(glossary)
        .args([
            "--model",
            common::QWEN,
            "--quiet",
            "--glossary-terms",
            "2",
            "--review-every",
            "0",
            "--device",
            "cpu",
        ])
        .arg("--prefix-cache-dir")
        .arg(cache);
    c
}

/// A book of one chapter `name` holding `text`, in a temporary directory (`book/`),
/// translated into its `out/` (exit 0, or 1 for a unit left blocked).
fn translate_one_chapter(name: &str, text: &str) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let book = tmp.path().join("book");
    std::fs::create_dir(&book).unwrap();
    std::fs::write(book.join(name), text).unwrap();
    let out = tmp.path().join("out");
    let st = translate_book(&book, &out, &tmp.path().join("cache"))
        .status()
        .unwrap();
    assert!(st.code().is_some_and(|c| c == 0 || c == 1), "{st:?}");
    (tmp, out)
}

fn read_book(out: &Path) -> Vec<(String, String)> {
    ["01-intro.md", "02-cache.md"]
        .iter()
        .map(|n| {
            (
                n.to_string(),
                std::fs::read_to_string(out.join("book").join(n)).unwrap(),
            )
        })
        .collect()
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn run_report(out: &Path) -> RunReport {
    read_json(&out.join("run.json")).unwrap()
}

#[test]
fn translate_rerun_resume_and_lock() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("prefix-cache");
    let a = tmp.path().join("a");

    // 1. A full run.
    let st = translate_cmd(&a, &cache).status().unwrap();
    assert!(
        st.code().is_some_and(|c| c == 0 || c == 1),
        "translate failed: {st:?}"
    );
    let book = read_book(&a);
    // Code, links and numbers survive byte for byte; a code comment is translated.
    let code = &book[0].1[book[0].1.find("```python\n# ").expect("the code block")..];
    assert!(
        code.contains("\nids = tokenizer.encode(\"Hello, world\")\nprint(len(ids))\n```"),
        "{code}"
    );
    let comment = code.lines().nth(1).unwrap();
    assert!(
        comment
            .chars()
            .any(|c| ('\u{4e00}'..='\u{9fff}').contains(&c)),
        "{comment}"
    );
    assert!(book[0].1.contains("(https://example.com/tokenizers)"));
    assert!(book[1].1.contains("`quire bench prefix`"));
    let han = book
        .iter()
        .flat_map(|(_, t)| t.chars())
        .filter(|c| ('\u{4e00}'..='\u{9fff}').contains(c))
        .count();
    assert!(han > 20, "not translated: {book:?}");
    // Deterministic checks: no structural errors; house terms honoured everywhere.
    let report: ProofreadingReport = read_json(&a.join("proofreading_report.json")).unwrap();
    let adherence = report.summary.house_term_adherence_percent;
    assert_eq!(adherence, 100.0, "{report:#?}");
    let check = Command::new(env!("CARGO_BIN_EXE_quire"))
        .arg("check")
        .arg(fixture())
        .arg(a.join("book"))
        .arg("--glossary")
        .arg(glossary())
        .arg("--json")
        .output()
        .unwrap();
    let qa: serde_json::Value = serde_json::from_slice(&check.stdout).unwrap();
    for f in qa["findings"].as_array().unwrap() {
        let cat = f["category"].as_str().unwrap();
        let structural = [
            "code_block",
            "heading",
            "link",
            "image",
            "footnote",
            "table",
            "list",
            "inline_code",
            "placeholder",
            "url",
        ];
        assert!(
            !(structural.contains(&cat) && f["severity"] == "error"),
            "structure finding: {f}"
        );
    }
    let run = run_report(&a);
    assert!(run.totals.calls >= 3);
    // Units were translated together (throughput mode): a batched call's engine time is a
    // share of its wall time.
    assert!(
        run.calls
            .iter()
            .any(|c| c.agent == "translate" && c.busy_seconds < c.latency_seconds),
        "no translation batch: {run:#?}"
    );
    assert!(
        run.totals.cached_prefix_tokens > 0,
        "the prefix cache was not used"
    );
    let ck = json(&a.join("orchestration_checkpoint.json"));
    assert!(ck["campaign_fingerprint"].as_str().unwrap().len() == 64);
    assert_eq!(ck["value"]["result"]["mode"], "orchestrated");
    assert!(ck["value"]["result"]["quire"]["complete"]
        .as_bool()
        .unwrap());

    // 2. A rerun skips every finished unit: no model call, same output, same counts.
    let st = translate_cmd(&a, &cache).status().unwrap();
    assert!(st.code().is_some_and(|c| c == 0 || c == 1));
    assert_eq!(run_report(&a).totals.calls, 0);
    assert_eq!(read_book(&a), book);
    let again: ProofreadingReport = read_json(&a.join("proofreading_report.json")).unwrap();
    assert_eq!(again.summary.revised, report.summary.revised);
    assert_eq!(again.summary.passed, report.summary.passed);

    // 3. Killed with SIGKILL after the first finished unit, then rerun: same output.
    let b = tmp.path().join("b");
    let mut child = translate_cmd(&b, &cache)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(600);
    loop {
        let done = std::fs::read_dir(b.join("memory"))
            .map(|d| d.count())
            .unwrap_or(0);
        if done >= 1 || std::time::Instant::now() > deadline {
            break;
        }
        if child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let st = translate_cmd(&b, &cache).status().unwrap();
    assert!(st.code().is_some_and(|c| c == 0 || c == 1));
    assert_eq!(
        read_book(&b),
        book,
        "resumed output differs from the uninterrupted run"
    );

    // 4. Editing one paragraph re-translates only the unit it touches.
    let edited = tmp.path().join("edited");
    std::fs::create_dir(&edited).unwrap();
    for n in ["01-intro.md", "02-cache.md"] {
        std::fs::copy(fixture().join(n), edited.join(n)).unwrap();
    }
    let ch2 = std::fs::read_to_string(edited.join("02-cache.md")).unwrap();
    std::fs::write(
        edited.join("02-cache.md"),
        ch2.replace("to measure it.", "to measure the cache."),
    )
    .unwrap();
    let st = translate_book(&edited, &a, &cache).status().unwrap();
    assert!(st.code().is_some_and(|c| c == 0 || c == 1));
    let run = run_report(&a);
    let translated: Vec<&str> = run
        .calls
        .iter()
        .filter(|c| c.agent == "translate")
        .map(|c| c.unit.as_str())
        .collect();
    assert_eq!(
        translated.len(),
        1,
        "only the edited unit is translated again: {translated:?}"
    );
    assert!(translated[0].starts_with("02-cache.md#"), "{translated:?}");
    assert_eq!(
        std::fs::read_to_string(a.join("book/01-intro.md")).unwrap(),
        book[0].1
    );

    // 5. A token budget stops the run cleanly (exit 3); a rerun continues.
    let c = tmp.path().join("c");
    let st = translate_cmd(&c, &cache)
        .arg("--max-new-tokens-total")
        .arg("1")
        .status()
        .unwrap();
    assert_eq!(st.code(), Some(3), "a budget stop exits with 3");
    let ck = json(&c.join("orchestration_checkpoint.json"));
    assert!(ck["value"]["result"]["quire"]["stopped"]
        .as_str()
        .unwrap()
        .contains("token budget"));
    assert!(!ck["value"]["result"]["quire"]["complete"]
        .as_bool()
        .unwrap());
    assert!(
        ck["value"]["result"]["quire"]["new_tokens_total"]
            .as_u64()
            .unwrap()
            <= 1,
        "no stage spends more than the budget: {}",
        ck["value"]["result"]["quire"]
    );
    let st = translate_cmd(&c, &cache).status().unwrap();
    assert!(st.code().is_some_and(|x| x == 0 || x == 1));
    assert_eq!(
        read_book(&c),
        book,
        "budget-stopped then resumed output differs"
    );

    // 6. The single-agent baseline: one growing conversation, whose context peak is larger.
    let d = tmp.path().join("d");
    let st = translate_cmd(&d, &cache)
        .args(["--mode", "single"])
        .status()
        .unwrap();
    assert!(st.code().is_some_and(|x| x == 0 || x == 1));
    let single = run_report(&d);
    assert_eq!(single.mode, "single");
    let calls: Vec<_> = single
        .calls
        .iter()
        .filter(|c| c.agent == "translate")
        .collect();
    let (first, last) = (calls[0], calls[calls.len() - 1]);
    assert!(
        last.prompt_tokens > first.prompt_tokens + first.completion_tokens,
        "the conversation grows with every unit"
    );
    assert!(single.totals.context_peak_tokens >= last.prompt_tokens);

    // 7. One unit at a time gives the same book as the batched run.
    let e = tmp.path().join("e");
    let st = translate_cmd(&e, &cache)
        .args(["--batch", "1"])
        .status()
        .unwrap();
    assert!(st.code().is_some_and(|x| x == 0 || x == 1));
    assert_eq!(
        read_book(&e),
        book,
        "--batch 1 output differs from the batched run"
    );
    assert!(run_report(&e)
        .calls
        .iter()
        .all(|c| c.busy_seconds == c.latency_seconds || c.agent != "translate"));

    // 7b. Speculative decoding (the 0.5B drafting for itself here) writes the same book,
    // and run.json reports the draft's guesses per call; a draft with another tokenizer is
    // refused before anything is written.
    let f = tmp.path().join("f");
    let st = translate_cmd(&f, &cache)
        .args(["--batch", "1", "--draft", common::QWEN])
        .status()
        .unwrap();
    assert!(st.code().is_some_and(|x| x == 0 || x == 1));
    assert_eq!(read_book(&f), book, "--draft output differs");
    let drafted = run_report(&f);
    assert!(drafted.totals.draft_proposed > 0, "{:#?}", drafted.totals);
    assert!(drafted.totals.draft_accepted > 0, "{:#?}", drafted.totals);
    assert!(drafted
        .calls
        .iter()
        .any(|c| c.draft_acceptance.is_some() && c.decode_tokens_per_second > 0.0));
    let g = tmp.path().join("g");
    let out = translate_cmd(&g, &cache)
        .args(["--draft", common::SMOL])
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("different vocabulary"), "{err}");
    assert!(!g.join("book").exists(), "nothing written");

    // 8. A second run on a directory that is in use is refused.
    let lock = std::fs::File::open(&b).unwrap();
    lock.try_lock().unwrap();
    let out = translate_cmd(&b, &cache).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("already"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn dry_run_needs_no_model_and_bad_input_is_reported() {
    let quire = env!("CARGO_BIN_EXE_quire");
    let out = Command::new(quire)
        .args(["translate", "--dry-run"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let plan = String::from_utf8_lossy(&out.stdout);
    assert!(
        plan.contains("chapter1.md") && plan.contains("Estimated time"),
        "{plan}"
    );

    let tmp = tempfile::tempdir().unwrap();
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let out = Command::new(quire)
        .arg("translate")
        .arg(&empty)
        .arg("--dry-run")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let bad = tmp.path().join("g.json");
    std::fs::write(
        &bad,
        "[\n  {\"en\": \"token\", \"zh\": \"词元\"},\n  {\"en\": \"prompt\" \"zh\": \"提示词\"}\n]",
    )
    .unwrap();
    let out = Command::new(quire)
        .arg("translate")
        .arg(fixture())
        .arg("--glossary")
        .arg(&bad)
        .arg("--dry-run")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("line 3") && err.contains("column"), "{err}");
    let file_as_out = tmp.path().join("a-file");
    std::fs::write(&file_as_out, "x").unwrap();
    let out = Command::new(quire)
        .arg("translate")
        .arg(fixture())
        .arg("--out")
        .arg(&file_as_out)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("a-file"));
}

/// A chapter written with CRLF line endings comes back with CRLF only (translated units
/// included), and `quire check` finds a mixed file.
#[test]
fn crlf_chapters_keep_their_line_endings() {
    let chapter = "# Windows notes\r\n\r\nThe cache is stored on disk.\r\n\r\n```sh\r\nquire translate\r\n```\r\n\r\n- One item\r\n- Two items\r\n";
    let (tmp, out) = translate_one_chapter("crlf.md", chapter);
    let book = tmp.path().join("book");
    let written = std::fs::read_to_string(out.join("book/crlf.md")).unwrap();
    assert_eq!(
        written.matches('\n').count(),
        written.matches("\r\n").count(),
        "{written:?}"
    );
    assert!(
        written.contains("```sh\r\nquire translate\r\n```"),
        "{written:?}"
    );
    let check = |target: &Path| {
        let o = Command::new(env!("CARGO_BIN_EXE_quire"))
            .arg("check")
            .arg(&book)
            .arg(target)
            .arg("--json")
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        v["findings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["category"] == "line_ending")
    };
    assert!(!check(&out.join("book")));
    let mixed = tmp.path().join("mixed");
    std::fs::create_dir(&mixed).unwrap();
    std::fs::write(mixed.join("crlf.md"), written.replacen("\r\n", "\n", 2)).unwrap();
    assert!(check(&mixed));
}

/// A changed `--glossary` on a rerun into the same output directory is a new campaign
/// input: `glossary.json` takes the new house terms (a removed one is no longer enforced),
/// and only the units that hold a changed term are translated again.
#[test]
fn a_changed_glossary_retranslates_only_the_units_it_touches() {
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("cache");
    let out = tmp.path().join("out");
    let st = translate_cmd(&out, &cache).status().unwrap();
    assert!(st.code().is_some_and(|c| c == 0 || c == 1), "{st:?}");
    assert!(run_report(&out).totals.calls > 0);

    // latency → 延迟 (one unit has it); embedding removed (no unit has it).
    let text = std::fs::read_to_string(glossary()).unwrap();
    let mut terms: Vec<serde_json::Value> = serde_json::from_str(&text).unwrap();
    terms.retain(|t| t["en"] != "embedding");
    for t in terms.iter_mut().filter(|t| t["en"] == "latency") {
        t["zh"] = "延迟".into();
    }
    let changed = tmp.path().join("changed.json");
    std::fs::write(&changed, serde_json::to_string(&terms).unwrap()).unwrap();
    let st = translate_with(&fixture(), &changed, &out, &cache)
        .status()
        .unwrap();
    assert!(st.code().is_some_and(|c| c == 0 || c == 1), "{st:?}");

    let written = std::fs::read_to_string(out.join("glossary.json")).unwrap();
    let g: Vec<serde_json::Value> = serde_json::from_str(&written).unwrap();
    assert!(
        g.iter()
            .any(|t| t["en"] == "latency" && t["zh"] == "延迟" && t["house"] == true),
        "{written}"
    );
    assert!(
        !g.iter()
            .any(|t| t["en"] == "embedding" && t["house"] == true),
        "{written}"
    );
    let book = read_book(&out);
    assert!(
        book[0].1.contains("延迟") && !book[0].1.contains("时延"),
        "{book:?}"
    );
    // Only the unit with `latency` was asked again; the others came from the memory.
    let report = run_report(&out);
    let asked: std::collections::BTreeSet<String> = report
        .calls
        .iter()
        .filter(|c| c.agent == "translate" || c.agent == "fallback")
        .map(|c| c.unit.split(' ').next().unwrap_or_default().to_string())
        .collect();
    // The unit with `latency` is its chapter's opening, the worked example of the chapter's
    // other prompts: that chapter is asked again, the other chapter is not.
    assert!(asked.contains("01-intro.md#000"), "{asked:?}");
    assert!(
        asked.iter().all(|u| u.starts_with("01-intro.md")),
        "{asked:?}"
    );
    assert!(report.totals.reused_units >= 1, "{:?}", report.totals);
}

/// A word the book keeps in English (capitalised in mid-sentence, `Skill`) gets the
/// model's own translation of it in `glossary.json` (`replaces`), and no translated
/// paragraph that has the term fewer times than its source still holds that translation:
/// it was written back as the term.
#[test]
fn kept_words_the_model_translates_are_written_back() {
    let chapter = "# Loading skills\n\nEvery Agent loads a Skill when a task needs it. A Skill is a folder of instructions and scripts.\n\nThe Agent keeps each Skill small, and one Skill can call another Skill.\n\nWhen no Skill fits the task, the Agent asks the user.\n";
    let (_tmp, out) = translate_one_chapter("skills.md", chapter);
    let glossary = json(&out.join("glossary.json"));
    let skill = glossary
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["en"] == "Skill")
        .unwrap_or_else(|| panic!("Skill is not a kept term: {glossary}"));
    assert_eq!(skill["zh"], "Skill");
    let words: Vec<&str> = skill["replaces"]
        .as_array()
        .unwrap_or_else(|| panic!("no rendering of Skill: {skill}"))
        .iter()
        .map(|w| w.as_str().unwrap())
        .collect();
    assert!(
        !words.is_empty() && words.iter().all(|w| !w.is_empty() && !w.is_ascii()),
        "{words:?}"
    );
    let written = std::fs::read_to_string(out.join("book/skills.md")).unwrap();
    let pairs: Vec<(&str, &str)> = chapter.split("\n\n").zip(written.split("\n\n")).collect();
    assert_eq!(pairs.len(), 4, "{written}");
    for (source, translation) in pairs {
        if translation.matches("Skill").count() < source.matches("Skill").count() {
            assert!(
                words.iter().all(|w| !translation.contains(w)),
                "{source:?} → {translation:?} still has one of {words:?}"
            );
        }
    }
}

/// The prose comments of a code block are translated on the real model; its code, strings,
/// commented-out code and directives stay byte for byte, and `quire check` finds nothing
/// wrong with the block.
#[test]
fn code_comments_are_translated_and_the_code_kept() {
    let chapter = "# Retrieval\n\nThe retriever returns the closest passages.\n\n```python\n# Find the most relevant passages in the knowledge base\nresults = retriever.search(query, top_k=3)  # three passages at most\n# results = [\nx = 1  # noqa: E501\n```\n";
    let (tmp, out) = translate_one_chapter("code.md", chapter);
    let written = std::fs::read_to_string(out.join("book/code.md")).unwrap();
    let block = &written[written.find("```python").expect("the block")..];
    let lines: Vec<&str> = block.lines().collect();
    assert_eq!(lines.len(), 6, "{block}");
    let han = |s: &str| s.chars().any(|c| ('\u{4e00}'..='\u{9fff}').contains(&c));
    assert!(lines[1].starts_with("# ") && han(lines[1]), "{block}");
    assert!(
        lines[2].starts_with("results = retriever.search(query, top_k=3)  # ") && han(lines[2]),
        "{block}"
    );
    assert_eq!(
        lines[3..],
        ["# results = [", "x = 1  # noqa: E501", "```"],
        "{block}"
    );
    let o = Command::new(env!("CARGO_BIN_EXE_quire"))
        .arg("check")
        .arg(tmp.path().join("book"))
        .arg(out.join("book"))
        .arg("--json")
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let code: Vec<_> = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["category"] == "code_block")
        .collect();
    assert!(code.is_empty(), "{code:?}");
}
