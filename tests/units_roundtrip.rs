//! Property tests: segmentation + placeholder restoration + reassembly reproduce any input
//! byte for byte, and protected material never reaches a model's input.

use proptest::prelude::*;
use quire::book::Chapter;
use quire::units::{
    reassemble, restore_placeholders, segment_chapter, EstimateTokens, Unit, UnitKind,
};
use std::path::PathBuf;

use quire::engine::constraint::TextConstraint;
use quire::translate::passage::restore_segment;
use quire::units::constraint::PassageConstraint;
use quire::units::skeleton::Skeleton;

fn chapter(text: &str) -> Chapter {
    Chapter {
        rel_path: PathBuf::from("book/ch1.md"),
        text: text.to_string(),
    }
}

fn check_roundtrip(text: &str, budget: usize) -> Vec<Unit> {
    let units = segment_chapter(&chapter(text), budget, &EstimateTokens).expect("segments");
    let joined: String = units.iter().map(|u| u.source.as_str()).collect();
    assert_eq!(joined, text, "unit sources must cover the chapter");
    let restored: Vec<String> = units
        .iter()
        .map(|u| restore_placeholders(u, &u.protected).expect("own placeholders restore"))
        .collect();
    assert_eq!(
        reassemble(&units, &restored),
        text,
        "reassembly must be exact"
    );
    for (i, u) in units.iter().enumerate() {
        assert_eq!(u.index, i);
        assert_eq!(u.id, format!("book/ch1.md#{i:03}"));
        if u.kind == UnitKind::Translate {
            assert_eq!(
                restored[i],
                u.source.trim(),
                "restore gives the trimmed source"
            );
            assert!(!u.protected.is_empty());
            // The skeleton with each segment's own text gives the source back, and the
            // decode-time constraint accepts the passage itself as a complete reply.
            let sk = Skeleton::of(u);
            let own: Vec<String> = sk
                .segments
                .iter()
                .map(|seg| restore_segment(u, seg, &seg.text).expect("own segment restores"))
                .collect();
            assert_eq!(sk.assemble(u, &own), u.source.trim(), "skeleton round trip");
            let passage = sk.model_text();
            if !passage.is_empty() {
                let c = PassageConstraint::new(&passage);
                assert!(c.allows_end(passage.as_bytes()), "{passage:?}");
            }
        } else {
            assert!(u.protected.is_empty());
            assert!(u.placeholders.is_empty());
        }
    }
    units
}

/// Inline fragments: words, markup, and everything that must be protected.
fn inline() -> impl Strategy<Value = String> {
    prop_oneof![
        "[A-Za-z]{1,8}( [a-z]{1,8}){0,6}[.!?]?",
        "[一-龥]{1,6}[。，]?",
        Just("`code()`".to_string()),
        Just("``a ` b``".to_string()),
        Just("[link text](https://example.com/a_(b) \"title\")".to_string()),
        Just("![alt text](img/x.png)".to_string()),
        Just("[ref link][ref]".to_string()),
        Just("[ref]".to_string()),
        Just("<https://auto.example.org>".to_string()),
        Just("see https://bare.example.com/path?q=1.".to_string()),
        Just("[^1]".to_string()),
        Just("[^note]".to_string()),
        Just("<span class=\"x\">".to_string()),
        Just("</span>".to_string()),
        Just("$E=mc^2$".to_string()),
        Just("$$x$$".to_string()),
        Just("**bold text**".to_string()),
        Just("*it*".to_string()),
        Just("~~gone~~".to_string()),
        Just("{{1}}".to_string()),
        Just("｛｛2｝｝".to_string()),
        Just("128K".to_string()),
        Just("\\*escaped\\*".to_string()),
        Just("&amp; &#x4e2d;".to_string()),
        Just("  \n".to_string()),
        Just("\n".to_string()),
        "[\\[\\]()*_!~^{}|#]{1,4}",
    ]
}

fn paragraph() -> impl Strategy<Value = String> {
    prop::collection::vec(inline(), 1..12).prop_map(|v| v.join(" "))
}

/// Block fragments; each ends with a newline.
fn block() -> impl Strategy<Value = String> {
    prop_oneof![
        paragraph().prop_map(|p| format!("{p}\n")),
        (1usize..7, paragraph()).prop_map(|(l, p)| format!(
            "{} {}\n",
            "#".repeat(l),
            p.replace('\n', " ")
        )),
        Just("```rust\nfn main() { CODEPAYLOAD(); }\n```\n".to_string()),
        Just("~~~\nCODEPAYLOAD\n\n~~~\n".to_string()),
        Just("Intro:\n\n    CODEPAYLOAD indented\n".to_string()),
        Just("<div align=\"center\">\nCODEPAYLOAD html\n</div>\n".to_string()),
        Just("<!-- CODEPAYLOAD comment -->\n".to_string()),
        Just("$$\nCODEPAYLOAD = 1\n$$\n".to_string()),
        Just("---\n".to_string()),
        Just("***\n".to_string()),
        Just("[ref]: https://ref.example.com \"Ref\"\n".to_string()),
        prop::collection::vec(paragraph(), 1..4).prop_map(|items| items
            .iter()
            .map(|i| format!("- {}\n", i.replace('\n', " ")))
            .collect::<String>()),
        prop::collection::vec(paragraph(), 1..4).prop_map(|items| items
            .iter()
            .enumerate()
            .map(|(n, i)| format!("{}. {}\n", n + 1, i.replace('\n', " ")))
            .collect::<String>()),
        paragraph().prop_map(|p| format!(
            "- item\n\n  ```\n  CODEPAYLOAD\n  ```\n\n- {}\n",
            p.replace('\n', " ")
        )),
        paragraph().prop_map(|p| format!("> {}\n>\n> second\n", p.replace('\n', " "))),
        (paragraph(), paragraph()).prop_map(|(a, b)| format!(
            "| {} | b |\n|---|:-:|\n| {} | 2 |\n",
            a.replace(['\n', '|'], " "),
            b.replace(['\n', '|'], " ")
        )),
        paragraph().prop_map(|p| format!("[^1]: {}\n", p.replace('\n', " "))),
        paragraph().prop_map(|p| format!("[^note]: {}\n\n    more text\n", p.replace('\n', " "))),
        Just("- [ ] task\n- [x] done\n".to_string()),
        Just("> [!NOTE]\n> alert\n".to_string()),
    ]
}

/// A document of blocks; with `separated`, blocks are always separated by a blank line
/// (so they cannot merge and the protection invariants hold), otherwise anything goes.
fn document(separated: bool) -> impl Strategy<Value = String> {
    let sep = if separated {
        prop_oneof![Just("\n"), Just("\n\n")].boxed()
    } else {
        prop_oneof![Just(""), Just("\n"), Just("\n\n"), Just("\r\n")].boxed()
    };
    (
        prop::option::of(Just("---\ntitle: CODEPAYLOAD\n---\n\n".to_string())),
        prop::collection::vec((block(), sep), 0..14),
        prop_oneof![Just(""), Just("\n"), Just("  ")],
    )
        .prop_map(|(fm, blocks, tail)| {
            let mut s = fm.unwrap_or_default();
            for (b, sep) in blocks {
                s.push_str(&b);
                s.push_str(sep);
            }
            s.push_str(tail);
            s
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn roundtrip_structured_markdown(doc in document(true), budget in prop_oneof![Just(0usize), 1usize..40, Just(400usize)]) {
        let units = check_roundtrip(&doc, budget);
        for u in &units {
            prop_assert!(!u.protected.contains("CODEPAYLOAD"), "protected material leaked into {:?}", u.protected);
            prop_assert!(!u.protected.contains("https://"), "URL leaked into {:?}", u.protected);
            prop_assert!(!u.protected.contains("code()"), "code span leaked into {:?}", u.protected);
        }
    }

    #[test]
    fn roundtrip_merged_blocks(doc in document(false), budget in 0usize..80) {
        check_roundtrip(&doc, budget);
    }

    #[test]
    fn roundtrip_markdown_soup(doc in "[#*_`\\[\\]()<>!$|+:>~^{}\\\\ \t\n\r-a-c0-2一。.&;\"'=]{0,300}", budget in 0usize..60) {
        check_roundtrip(&doc, budget);
    }

    #[test]
    fn roundtrip_any_string(doc in any::<String>(), budget in 0usize..100) {
        check_roundtrip(&doc, budget);
    }
}

#[test]
fn splits_long_paragraph_at_sentences() {
    let para: String = (0..40)
        .map(|i| format!("Sentence number {i} has `code{i}` and a [link](https://x.io/{i}). "))
        .collect();
    let doc = format!("# Title\n\n{}\n\nNext paragraph.\n", para.trim_end());
    let units = check_roundtrip(&doc, 60);
    let translate: Vec<&Unit> = units
        .iter()
        .filter(|u| u.kind == UnitKind::Translate)
        .collect();
    assert!(
        translate.len() > 5,
        "long paragraph must be split: {}",
        translate.len()
    );
    for u in &translate[1..translate.len() - 1] {
        let core = u.source.trim();
        assert!(
            core.starts_with("Sentence"),
            "cut at a sentence start: {core:?}"
        );
        assert!(
            core.ends_with(')') || core.ends_with('.'),
            "cut after a sentence end: {core:?}"
        );
    }
}

#[test]
fn never_cuts_inside_protected_blocks() {
    let doc = "Intro.\n\n| a | b |\n|---|---|\n| x | y |\n| z | w |\n\n- one\n- two\n  still two\n\n```\nx\n\ny\n```\n\n[^1]: Foot\n\n    note para\n";
    let units = check_roundtrip(doc, 0);
    let sources: Vec<&str> = units.iter().map(|u| u.source.as_str()).collect();
    assert!(sources
        .iter()
        .any(|s| s.starts_with("| a | b |") && s.contains("| z | w |")));
    assert!(sources.iter().any(|s| s.starts_with("- two\n  still two")));
    assert!(sources.iter().any(|s| s.starts_with("```\nx\n\ny\n```")));
    assert!(sources
        .iter()
        .any(|s| s.starts_with("[^1]: Foot\n\n    note para")));
}

#[test]
fn verbatim_blocks_are_not_sent() {
    let doc = "---\ntitle: T\n---\n\nText with `a` and <b>x</b>.\n\n```py\nprint(1)\n```\n\n<div>\nraw\n</div>\n\n$$\nx\n$$\n\n[r]: https://r.example\n";
    let units = check_roundtrip(doc, 1000);
    let kinds: Vec<UnitKind> = units.iter().map(|u| u.kind).collect();
    assert_eq!(
        kinds,
        vec![UnitKind::Verbatim, UnitKind::Translate, UnitKind::Verbatim]
    );
    assert_eq!(units[1].protected, "Text with {{1}} and {{2}}x{{3}}.");
    assert!(units[2].source.starts_with("```py"));
}

#[test]
fn links_keep_text_translatable_and_targets_protected() {
    let doc = "See [the docs](https://d.example/x \"Docs\"), ![a chart](c.png), [ref text][lbl], [short], <https://a.example> and [^n].\n\n[lbl]: https://l.example\n[short]: https://s.example\n[^n]: Note.\n";
    let units = check_roundtrip(doc, 1000);
    assert_eq!(
        units[0].protected,
        "See [the docs]({{1}}), ![a chart]({{2}}), [ref text][{{3}}], {{4}}, {{5}} and {{6}}."
    );
    let originals: Vec<&str> = units[0]
        .placeholders
        .iter()
        .map(|p| p.original.as_str())
        .collect();
    assert_eq!(
        originals,
        vec![
            "https://d.example/x \"Docs\"",
            "c.png",
            "lbl",
            "[short]",
            "<https://a.example>",
            "[^n]"
        ]
    );
    let foot = units
        .iter()
        .find(|u| u.source.starts_with("[^n]:"))
        .expect("footnote unit");
    assert_eq!(foot.protected, "{{1}} Note.");
}

#[test]
fn nested_code_in_list_item_is_a_placeholder() {
    let doc = "1. Run:\n\n   ```sh\n   make all\n   ```\n\n2. Done.\n";
    let units = check_roundtrip(doc, 1000);
    assert_eq!(units.len(), 1);
    assert!(!units[0].protected.contains("make all"));
    assert_eq!(
        units[0].placeholders[0].original,
        "```sh\n   make all\n   ```"
    );
}

#[test]
fn placeholder_lookalikes_in_source_are_protected() {
    let doc = "Template {{1}} and {{name}} stay.\n";
    let units = check_roundtrip(doc, 1000);
    assert_eq!(units[0].protected, "Template {{1}} and {{name}} stay.");
    assert_eq!(units[0].placeholders[0].original, "{{1}}");
}

#[test]
fn restore_reports_missing_duplicated_and_invented() {
    let doc = "Use `a`, `b` and `c` here.\n";
    let units = check_roundtrip(doc, 1000);
    let u = &units[0];
    assert_eq!(u.protected, "Use {{1}}, {{2}} and {{3}} here.");
    let ok = restore_placeholders(u, "用 {{ 1 }}、｛｛2｝｝和{{3}}。").unwrap();
    assert_eq!(ok, "用 `a`、`b`和`c`。");
    let err = restore_placeholders(u, "用 {{1}}、{{1}} 和 {{7}}。").unwrap_err();
    assert_eq!(err.missing, vec!["{{2}}", "{{3}}"]);
    assert_eq!(err.duplicated, vec!["{{1}}"]);
    assert_eq!(err.unknown, vec!["{{7}}"]);
    let msg = err.to_string();
    assert!(
        msg.contains("book/ch1.md#000") && msg.contains("missing"),
        "{msg}"
    );
}

#[test]
fn reassemble_keeps_separators_and_joins_cjk_sentences() {
    let para = "First sentence here. Second sentence here.";
    let doc = format!("{para}\n\n## Next\n");
    let units = segment_chapter(&chapter(&doc), 10, &EstimateTokens).unwrap();
    assert_eq!(units.len(), 3, "{units:#?}");
    let out = reassemble(
        &units,
        &[
            "第一句。\n".to_string(),
            "第二句。".to_string(),
            "## 下一节\n\n".to_string(),
        ],
    );
    assert_eq!(out, "第一句。第二句。\n\n## 下一节\n");
}

#[test]
fn content_hash_is_stable_and_position_independent() {
    let a = check_roundtrip("Same text.\n", 1000);
    let b = check_roundtrip("```\nx\n```\n\nSame text.\n", 1000);
    assert_eq!(a[0].content_hash(), b[1].content_hash());
    assert_eq!(a[0].content_hash(), quire::units::content_hash(&a[0]));
    assert_ne!(a[0].content_hash(), b[0].content_hash());
    assert_eq!(a[0].content_hash().len(), 64);
}

#[test]
fn token_estimate_is_conservative() {
    use quire::units::TokenCount;
    let e = EstimateTokens;
    // Typical BPE counts: ~10 tokens for this English sentence, ~8 for the Chinese one.
    assert!(e.count_tokens("The quick brown fox jumps over the lazy dog today.") >= 12);
    assert!(e.count_tokens("用户记忆是持久的、可审查的") >= 13);
    assert_eq!(e.count_tokens(""), 0);
}

#[test]
fn placeholder_form_is_inert_markdown_and_short() {
    use pulldown_cmark::{Event, Parser};
    use quire::units::{markdown_options, placeholder_token, TokenCount};
    // Next to CJK text, inside emphasis, links and tables, a token stays literal text.
    for md in [
        "用{{1}}追加",
        "**{{2}}** and *{{3}}*",
        "[文本]({{4}})",
        "| {{5}} | x |\n|---|---|\n| {{6}} | y |",
        "- {{7}}",
    ] {
        let text: String = Parser::new_ext(md, markdown_options())
            .filter_map(|e| match e {
                Event::Text(t) => Some(t.to_string()),
                Event::Start(pulldown_cmark::Tag::Link { dest_url, .. }) => {
                    Some(dest_url.to_string())
                }
                _ => None,
            })
            .collect();
        assert!(
            quire::units::PLACEHOLDER_RE.is_match(&text),
            "{md:?} -> {text:?}"
        );
    }
    assert!(EstimateTokens.count_tokens(&placeholder_token(12)) <= 4);
}

#[test]
fn literal_placeholder_in_a_table_continuation_row() {
    check_roundtrip("| a | b |\n|---|:-:|\n| A | 2 |\nA || {{1}}\n", 0);
}
