//! `quire check` end to end, book pairing, and the unit-level check API.

use quire::book::{load_book, Chapter};
use quire::checks::{
    check_books, check_model_output, check_units, Category, CheckContext, Severity,
};
use quire::units::{restore_placeholders, segment_chapter, EstimateTokens, UnitKind};
use std::path::{Path, PathBuf};
use std::process::Command;

fn fixture_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/checks")
        .join(name)
}

fn quire(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_quire"))
        .args(args)
        .output()
        .expect("run quire");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn cli_exit_codes_and_outputs() {
    let en = fixture_path("en.md");
    let zh = fixture_path("zh.md");
    let broken = fixture_path("zh-broken.md");
    let glossary = fixture_path("glossary.json");
    let (code, out, _) = quire(&[
        "check",
        en.to_str().unwrap(),
        zh.to_str().unwrap(),
        "--glossary",
        glossary.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}");
    assert!(out.starts_with("PASS"), "{out}");
    let (code, out, _) = quire(&["check", en.to_str().unwrap(), broken.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(
        out.contains("FAIL") && out.contains("code_block") && out.contains("->"),
        "{out}"
    );
    let (code, out, _) = quire(&[
        "check",
        en.to_str().unwrap(),
        broken.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(code, 1);
    let v: serde_json::Value = serde_json::from_str(&out).expect("valid JSON");
    assert_eq!(v["passed"], false);
    assert!(v["summary"]["errors"].as_u64().unwrap() > 0);
    let (code, _, err) = quire(&["check", en.to_str().unwrap(), "/nonexistent/zh.md"]);
    assert_eq!(code, 2);
    assert!(err.contains("/nonexistent/zh.md"), "{err}");
    let bad = tempfile::NamedTempFile::with_suffix(".json").unwrap();
    std::fs::write(bad.path(), "[{\"en\": \"a\",\n \"zh\" }]").unwrap();
    let (code, _, err) = quire(&[
        "check",
        en.to_str().unwrap(),
        zh.to_str().unwrap(),
        "--glossary",
        bad.path().to_str().unwrap(),
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("line 2"), "{err}");
}

#[test]
fn directory_books_pair_by_chapter_name() {
    let src = tempfile::tempdir().unwrap();
    let tgt = tempfile::tempdir().unwrap();
    let en = std::fs::read_to_string(fixture_path("en.md")).unwrap();
    let zh = std::fs::read_to_string(fixture_path("zh.md")).unwrap();
    let broken = std::fs::read_to_string(fixture_path("zh-broken.md")).unwrap();
    for name in ["chapter2.md", "chapter10.md"] {
        std::fs::write(src.path().join(name), &en).unwrap();
    }
    std::fs::write(tgt.path().join("chapter2.md"), &zh).unwrap();
    std::fs::write(tgt.path().join("chapter10.md"), &broken).unwrap();
    let s = load_book(src.path()).unwrap();
    let t = load_book(tgt.path()).unwrap();
    let report = check_books(&s, &t, &CheckContext::default()).unwrap();
    assert_eq!(report.summary.chapters, 2);
    assert!(!report.passed);
    assert!(report.findings.iter().all(|f| f.chapter == "chapter10.md"));
    let (code, out, _) = quire(&[
        "check",
        src.path().to_str().unwrap(),
        tgt.path().to_str().unwrap(),
    ]);
    assert_eq!(code, 1);
    assert!(
        out.contains("chapter10.md") && out.contains("2 chapters"),
        "{out}"
    );
    std::fs::remove_file(tgt.path().join("chapter2.md")).unwrap();
    let t = load_book(tgt.path()).unwrap();
    let err = check_books(&s, &t, &CheckContext::default()).unwrap_err();
    assert!(err.to_string().contains("chapter2.md"), "{err}");
}

#[test]
fn unit_level_checks_for_the_pipeline() {
    let chapter = Chapter {
        rel_path: PathBuf::from("ch1.md"),
        text: "The agent reads `ledger.add()` docs at [the site](https://s.example) on 128K pages.\n\n## Next\n\nThe agent reads the ledger.\n\n## Next\n\nThe agent reads the ledger.\n".to_string(),
    };
    let units = segment_chapter(&chapter, 1000, &EstimateTokens).unwrap();
    let u = &units[0];
    assert_eq!(u.kind, UnitKind::Translate);
    assert_eq!(
        u.protected,
        "The agent reads {{1}} docs at [the site]({{2}}) on 128K pages."
    );
    let ctx = CheckContext::default();
    // A good model output restores and passes.
    let (restored, findings) = check_model_output(
        u,
        "代理人在 128K 页上阅读 {{1}} 文档，见[网站]({{2}})。",
        &ctx,
    );
    let restored = restored.unwrap();
    assert!(restored.contains("`ledger.add()`") && restored.contains("(https://s.example)"));
    assert!(findings.is_empty(), "{findings:#?}");
    // A lost placeholder is a placeholder error naming the unit.
    let (res, findings) = check_model_output(
        u,
        "代理人在 128K 页上阅读文档，见[网站]({{2}}){{2}}。",
        &ctx,
    );
    assert!(res.is_err());
    assert!(findings
        .iter()
        .all(|f| f.category == Category::Placeholder && f.severity == Severity::Error));
    assert!(findings
        .iter()
        .any(|f| f.evidence.contains("missing") && f.evidence.contains("{{1}}")));
    assert!(findings.iter().any(|f| f.evidence.contains("duplicated")));
    assert_eq!(findings[0].unit.as_deref(), Some("ch1.md#000"));
    // A wrong magnitude is a number error on that unit.
    let (_, findings) = check_model_output(
        u,
        "代理人在 12.8K 页上阅读 {{1}} 文档，见[网站]({{2}})。",
        &ctx,
    );
    assert!(
        findings
            .iter()
            .any(|f| f.category == Category::Number && f.unit.as_deref() == Some("ch1.md#000")),
        "{findings:#?}"
    );
    // Across units: the same source sentence translated two ways.
    let translations: Vec<String> = units
        .iter()
        .map(|u| match u.index {
            1 => "## 下一节\n\n代理人阅读账簿。".to_string(),
            2 => "## 下一节\n\n代理人在读账本。".to_string(),
            _ => restore_placeholders(u, &u.protected).unwrap(),
        })
        .collect();
    let findings = check_units(&units, &translations, &ctx);
    assert!(
        findings.iter().any(|f| f.category == Category::Consistency),
        "{findings:#?}"
    );
    assert!(
        findings.iter().any(
            |f| f.category == Category::Untranslated && f.unit.as_deref() == Some("ch1.md#000")
        ),
        "{findings:#?}"
    );
}

#[test]
fn a_code_comment_left_in_english_is_reported() {
    let chapter = Chapter {
        rel_path: PathBuf::from("ch1.md"),
        text: "Run it:\n\n```python\n# Count the tokens of a prompt.\nn = count(p)  # the total\n```\n".to_string(),
    };
    let units = segment_chapter(&chapter, 1000, &EstimateTokens).unwrap();
    assert_eq!(units.len(), 2);
    let code = &units[1];
    let ctx = CheckContext::default();
    let kept = |t: &[&str]| {
        let translations: Vec<String> = t.iter().map(|s| s.to_string()).collect();
        check_units(&units, &translations, &ctx)
            .into_iter()
            .filter(|f| f.category == Category::Untranslated && f.unit.as_deref() == Some(&code.id))
            .map(|f| f.evidence)
            .collect::<Vec<_>>()
    };
    // The first comment copied, the second translated: one warning, for the first.
    let half = "```python\n# Count the tokens of a prompt.\nn = count(p)  # 总数\n```";
    let found = kept(&["运行它：", half]);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].contains("Count the tokens of a prompt."),
        "{found:?}"
    );
    // Both translated: none; the same block as a verbatim unit (`--keep-code-comments`): none.
    let both = "```python\n# 统计提示词的词元数。\nn = count(p)  # 总数\n```";
    assert!(kept(&["运行它：", both]).is_empty());
    let verbatim =
        quire::units::segment_chapter_with(&chapter, 1000, &EstimateTokens, false).unwrap();
    let translations = vec!["运行它：".to_string(), code.source.clone()];
    assert!(check_units(&verbatim, &translations, &ctx)
        .iter()
        .all(|f| f.category != Category::Untranslated));
}
