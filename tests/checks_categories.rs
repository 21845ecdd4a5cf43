//! Deterministic QA: every category fires on a fixture written to break it, and nothing
//! fires on the clean translation.

use quire::checks::{check_pair, Category, CheckContext, Finding, Glossary, Report, Severity};
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/checks")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn fixture_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/checks")
        .join(name)
}

fn ctx() -> CheckContext {
    let g = Glossary::load(&fixture_path("glossary.json"), "en", "zh-CN").unwrap();
    CheckContext::new("en", "zh-CN")
        .with_glossary(g)
        .for_chapter("en.md")
}

/// The clean translation with one replacement applied.
fn mutate(from: &str, to: &str) -> String {
    let zh = fixture("zh.md");
    assert!(zh.contains(from), "fixture lacks {from:?}");
    zh.replacen(from, to, 1)
}

fn findings_for(target: &str) -> Vec<Finding> {
    check_pair(&fixture("en.md"), target, &ctx())
}

fn assert_category(target: &str, cat: Category, sev: Severity) -> Vec<Finding> {
    let f = findings_for(target);
    assert!(
        f.iter().any(|x| x.category == cat && x.severity == sev),
        "expected {cat} {sev:?}, got {:#?}",
        f
    );
    f
}

#[test]
fn clean_pair_has_no_findings() {
    let f = findings_for(&fixture("zh.md"));
    assert!(f.is_empty(), "{f:#?}");
    let g = Glossary::load(&fixture_path("glossary.toml"), "en", "zh-CN").unwrap();
    let c = CheckContext::new("en", "zh-CN").with_glossary(g);
    assert!(check_pair(&fixture("en.md"), &fixture("zh.md"), &c).is_empty());
}

#[test]
fn identical_structure_in_english_is_only_untranslated() {
    // The source checked against itself: structure is perfect, language is not.
    let f = findings_for(&fixture("en.md"));
    assert!(!f.is_empty());
    for x in &f {
        assert!(
            matches!(
                x.category,
                Category::Untranslated | Category::Glossary | Category::LengthRatio
            ),
            "{x:#?}"
        );
    }
}

#[test]
fn broken_fixture_triggers_every_category() {
    let f = findings_for(&fixture("zh-broken.md"));
    // An EPUB's package findings need two EPUBs (tests/epub.rs).
    for cat in Category::ALL
        .into_iter()
        .filter(|c| *c != Category::Package)
    {
        assert!(
            f.iter().any(|x| x.category == cat),
            "no {cat} finding in {f:#?}"
        );
    }
    let report = Report::from_findings(f, 1);
    assert!(!report.passed);
    assert_eq!(report.summary.by_category.len(), Category::ALL.len());
    for x in &report.findings {
        assert_eq!(x.chapter, "en.md");
        assert!(x.line.is_some() || x.source_line.is_some(), "{x:#?}");
        assert!(!x.evidence.is_empty() && !x.action.is_empty());
    }
}

#[test]
fn code_block_payload_is_byte_exact() {
    let f = assert_category(
        &mutate("oil_used: 12\n", "oil_used: 12 \n"),
        Category::CodeBlock,
        Severity::Error,
    );
    assert!(
        f.iter().any(|x| x.evidence.contains("code line 2")),
        "{f:#?}"
    );
    assert_category(
        &mutate(
            "```text\ndate: 1887-03-14\noil_used: 12\nweather: fog\n```\n",
            "",
        ),
        Category::CodeBlock,
        Severity::Error,
    );
    assert_category(
        &mutate("```text", "```yaml"),
        Category::CodeBlock,
        Severity::Error,
    );
}

#[test]
fn a_url_glued_to_cjk_text_is_still_found() {
    let f = findings_for(&mutate(
        "记录归档于 https://archive.example.org/ledgers ，",
        "记录归档于https://archive.example.org/ledgers，",
    ));
    assert!(!f.iter().any(|x| x.category == Category::Url), "{f:#?}");
}

#[test]
fn emptied_table_cells_and_line_endings() {
    let f = assert_category(
        &mutate("| 三月 | 31 | 12 |", "| 无 | 31 | 12 |"),
        Category::Table,
        Severity::Error,
    );
    assert!(
        f.iter().any(|x| x.evidence.contains("row 2, column 1")),
        "{f:#?}"
    );
    // Numbers kept as they are is not a lost cell.
    assert!(findings_for(&fixture("zh.md")).is_empty());
    assert_category(
        &mutate("# 守护灯光\n", "# 守护灯光\r\n"),
        Category::LineEnding,
        Severity::Error,
    );
}

#[test]
fn headings_added_missing_and_relevelled() {
    assert_category(
        &mutate("## 风暴\n", "## \n"),
        Category::Heading,
        Severity::Error,
    );
    assert_category(
        &mutate("# 守护灯光\n", "# 守护灯光\n\n# 第一部分\n"),
        Category::Heading,
        Severity::Error,
    );
    assert_category(
        &mutate("## 风暴\n", "风暴\n"),
        Category::Heading,
        Severity::Error,
    );
    assert_category(
        &mutate("## 风暴\n", "### 风暴\n"),
        Category::Heading,
        Severity::Error,
    );
}

#[test]
fn link_and_image_targets() {
    assert_category(
        &mutate(
            "https://harbour.example.org/rules",
            "https://harbour.example.org/rule",
        ),
        Category::Link,
        Severity::Error,
    );
    assert_category(
        &mutate(
            "[港口规则](https://harbour.example.org/rules \"Rules\")",
            "港口规则",
        ),
        Category::Link,
        Severity::Error,
    );
    assert_category(
        &mutate("images/ledger-page.png", "images/ledger.png"),
        Category::Image,
        Severity::Error,
    );
}

#[test]
fn footnotes_duplicated_missing_and_unresolved() {
    assert_category(
        &mutate("[^rules]。", "[^rules][^rules]。"),
        Category::Footnote,
        Severity::Error,
    );
    assert_category(
        &mutate("[^rules]。", "。"),
        Category::Footnote,
        Severity::Error,
    );
    let f = assert_category(
        &mutate("[^rules]: 这些", "[^rule]: 这些"),
        Category::Footnote,
        Severity::Error,
    );
    assert!(
        f.iter().any(|x| x.evidence.contains("definition")),
        "{f:#?}"
    );
}

#[test]
fn table_shape_and_list_items() {
    assert_category(
        &mutate("| 四月 | 30 | 9 |\n", ""),
        Category::Table,
        Severity::Error,
    );
    // Extra cells are dropped by GFM, so the shape is unchanged...
    assert!(findings_for(&mutate("| 三月 | 31 | 12 |", "| 三月 | 31 | 12 | x |")).is_empty());
    // ...but a broken delimiter row loses the table.
    assert_category(
        &mutate("|-------|--------|-----|", "|-------|--------|"),
        Category::Table,
        Severity::Error,
    );
    assert_category(&mutate("- 透镜\n", ""), Category::List, Severity::Error);
}

#[test]
fn inline_code_and_urls() {
    assert_category(
        &mutate("`ledger.add()`", "`账簿.add()`"),
        Category::InlineCode,
        Severity::Error,
    );
    assert_category(
        &mutate(
            "https://archive.example.org/ledgers",
            "https://archive.example.org/ledger",
        ),
        Category::Url,
        Severity::Error,
    );
    assert_category(
        &mutate("<https://mirror.example.org>", "镜像站"),
        Category::Url,
        Severity::Error,
    );
}

#[test]
fn leaked_placeholders() {
    assert_category(
        &mutate("守塔人检查三样东西：", "守塔人检查{{2}}三样东西："),
        Category::Placeholder,
        Severity::Error,
    );
    assert_category(
        &mutate("守塔人检查三样东西：", "守塔人检查 ｛｛2｝｝ 三样东西："),
        Category::Placeholder,
        Severity::Error,
    );
    assert_category(
        &mutate("守塔人检查三样东西：", "守塔人检查 __PH_1__ 三样东西："),
        Category::Placeholder,
        Severity::Error,
    );
}

#[test]
fn numbers_with_chinese_normalisation() {
    // The clean fixture already writes 367,000 as 36.7万 and 1.5 billion as 15亿.
    let f = assert_category(&mutate("128K", "12.8K"), Category::Number, Severity::Error);
    assert!(
        f.iter()
            .any(|x| x.evidence.contains("128K") && x.evidence.contains("12.8K")),
        "{f:#?}"
    );
    // The missing number is quoted with the words around it, for the reviser.
    assert!(
        f.iter().any(|x| x
            .evidence
            .contains("128K (\"model has a 128K token context.\")")),
        "{f:#?}"
    );
    assert!(findings_for(&mutate("128K", "12.8万")).is_empty());
    let f = findings_for(&mutate("36.7万", "367,000"));
    assert!(f.is_empty(), "{f:#?}");
    assert!(findings_for(&mutate("15亿", "十五亿")).is_err_free());
    // 1.5 billion is 15亿; 1.5亿 is 150 million.
    assert_category(&mutate("15亿", "1.5亿"), Category::Number, Severity::Error);
    assert_category(
        &mutate("1887 年，", "1877 年，"),
        Category::Number,
        Severity::Error,
    );
}

trait ErrFree {
    fn is_err_free(&self) -> bool;
}

impl ErrFree for Vec<Finding> {
    fn is_err_free(&self) -> bool {
        !self.iter().any(|f| f.severity == Severity::Error)
    }
}

#[test]
fn glossary_house_terms_are_strict_inferred_warn() {
    assert_category(
        &mutate("港务局的代理人", "港务局的特工"),
        Category::Glossary,
        Severity::Error,
    );
    assert_category(
        &mutate("- 透镜\n", "- 玻璃\n"),
        Category::Glossary,
        Severity::Warning,
    );
    assert!(
        findings_for(&mutate("- 透镜\n", "- 镜片\n")).is_empty(),
        "alternatives accepted"
    );
}

#[test]
fn consistency_of_repeated_text() {
    let zh = fixture("zh.md");
    let i = zh.rfind("代理人在每一页上签名。").unwrap();
    let t = format!(
        "{}代理人会在每页签字。{}",
        &zh[..i],
        &zh[i + "代理人在每一页上签名。".len()..]
    );
    assert_category(&t, Category::Consistency, Severity::Warning);
}

#[test]
fn untranslated_and_wrong_language() {
    assert_category(
        &mutate("每年冬天，风暴都考验着灯光，守塔人在最漫长的夜里保持清醒。", "Storms tested the light every winter, and the keeper stayed awake through the longest nights."),
        Category::Untranslated,
        Severity::Error,
    );
    assert_category(
        &mutate("每年冬天，风暴都考验着灯光，守塔人在最漫长的夜里保持清醒。", "每年冬天，风暴都考验着灯光，and the keeper stayed awake through all of the longest nights."),
        Category::Untranslated,
        Severity::Warning,
    );
    assert_category(
        &mutate(
            "每年冬天，风暴都考验着灯光，守塔人在最漫长的夜里保持清醒。",
            "毎年冬になると、嵐が灯りを試し、守り人は一番長い夜を起きて過ごした。",
        ),
        Category::WrongLanguage,
        Severity::Error,
    );
    assert_category(
        &mutate(
            "每年冬天，风暴都考验着灯光，守塔人在最漫长的夜里保持清醒。",
            "每年冬天，風暴都考驗著燈光，守塔人在最漫長的夜裡保持清醒。這個們說對時為來會。",
        ),
        Category::WrongLanguage,
        Severity::Error,
    );
}

#[test]
fn repetition_loops() {
    assert_category(
        &mutate(
            "保持清醒。",
            "保持清醒清醒清醒清醒清醒清醒清醒清醒清醒清醒。",
        ),
        Category::Repetition,
        Severity::Error,
    );
    assert_category(
        &mutate("保持清醒。", "保持清醒。守塔人在最漫长的夜里保持清醒。守塔人在最漫长的夜里保持清醒。守塔人在最漫长的夜里保持清醒。"),
        Category::Repetition,
        Severity::Error,
    );
}

#[test]
fn length_ratio_outliers() {
    assert_category(
        &mutate(
            "守塔人每晚都在账簿上记录。港务局的代理人每月阅读一次。",
            "账簿，代理人。",
        ),
        Category::LengthRatio,
        Severity::Warning,
    );
}

#[test]
fn markup_balance() {
    assert_category(
        &mutate("守塔人检查三样东西：", "守塔人检查**“三样”**东西："),
        Category::Markup,
        Severity::Warning,
    );
    assert_category(
        &mutate("守塔人检查三样东西：", "守塔人检查（三样东西："),
        Category::Markup,
        Severity::Warning,
    );
    assert_category(
        &mutate("守塔人检查三样东西：", "守塔人检查“三样东西："),
        Category::Markup,
        Severity::Warning,
    );
    // Emphasis that renders is fine.
    assert!(findings_for(&mutate(
        "守塔人检查三样东西：",
        "守塔人检查 **三样** 东西："
    ))
    .is_empty());
}

#[test]
fn a_bold_span_the_translation_lost_is_a_warning() {
    let src = "# Night\n\nThe keeper checks **three things** and **the lamp** every night.\n";
    let markup = |tgt: &str| -> Vec<Finding> {
        check_pair(src, tgt, &CheckContext::new("en", "zh-CN"))
            .into_iter()
            .filter(|f| f.category == Category::Markup)
            .collect()
    };
    let lost = markup("# 夜晚\n\n守塔人每晚检查**三样东西**和灯。\n");
    assert_eq!(lost.len(), 1, "{lost:#?}");
    assert_eq!(lost[0].severity, Severity::Warning);
    assert!(
        lost[0].evidence.contains("1 of the source's 2 bold spans"),
        "{}",
        lost[0].evidence
    );
    assert!(markup("# 夜晚\n\n守塔人每晚检查**三样东西**和**灯**。\n").is_empty());
}

#[test]
fn json_names_are_stable() {
    let f = findings_for(&fixture("zh-broken.md"));
    let report = Report::from_findings(f, 1);
    let v: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
    assert_eq!(v["passed"], false);
    let cats: Vec<String> = v["summary"]["by_category"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    let mut expected: Vec<String> = [
        "code_block",
        "heading",
        "link",
        "image",
        "footnote",
        "table",
        "list",
        "inline_code",
        "placeholder",
        "number",
        "url",
        "glossary",
        "consistency",
        "untranslated",
        "wrong_language",
        "repetition",
        "length_ratio",
        "markup",
        "spacing",
        "line_ending",
        "epub_package",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut got = cats.clone();
    got.sort();
    expected.sort();
    assert_eq!(got, expected);
    let first = &v["findings"][0];
    for key in [
        "chapter",
        "unit",
        "line",
        "source_line",
        "category",
        "severity",
        "evidence",
        "action",
    ] {
        assert!(first.get(key).is_some(), "finding lacks {key}: {first}");
    }
    assert!(["error", "warning", "info"].contains(&first["severity"].as_str().unwrap()));
}
