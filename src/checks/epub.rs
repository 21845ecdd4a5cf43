//! An EPUB translation against its source: what must come out as it went in.
//!
//! * every resource other than the translated documents, the package and the navigation
//!   files, byte for byte (CSS, fonts, images…), and no entry added or lost;
//! * the package's manifest and spine;
//! * each document's layout outside its blocks of text (ids, classes, sections, code),
//!   the root's language attributes aside;
//! * per block, the same tags with the same attributes, the same code, images and note
//!   references (their order may follow the target language's word order);
//! * the table of contents: the same entries pointing at the same targets.

use super::{Category, Finding, Severity};
use crate::book::epub::{Doc, Epub};
use std::collections::BTreeMap;

fn finding(chapter: &str, evidence: String, action: &str) -> Finding {
    Finding {
        chapter: chapter.to_string(),
        unit: None,
        line: None,
        source_line: None,
        category: Category::Package,
        severity: Severity::Error,
        evidence,
        action: action.to_string(),
    }
}

/// The findings of an EPUB translation against its source.
pub fn compare(source: &Epub, target: &Epub) -> Vec<Finding> {
    let mut out = Vec::new();
    resources(source, target, &mut out);
    if source.manifest.items != target.manifest.items
        || source.manifest.spine != target.manifest.spine
    {
        out.push(finding(
            &source.manifest.opf_path,
            "the manifest or spine differs from the source's".into(),
            "translate the source again; Quire never changes the package's items",
        ));
    }
    for doc in &source.docs {
        match target.docs.iter().find(|d| d.path == doc.path) {
            Some(t) => documents(doc, t, &mut out),
            None => out.push(finding(
                &doc.path,
                "the document's text is missing from the translation".into(),
                "translate the source again",
            )),
        }
    }
    out.extend(toc(source, target));
    out
}

/// Every entry but the documents, package and navigation files: the same bytes.
fn resources(source: &Epub, target: &Epub, out: &mut Vec<Finding>) {
    let rewritten = |e: &Epub, name: &str| {
        name == "mimetype"
            || name == e.manifest.opf_path
            || e.docs.iter().any(|d| d.path == name)
            || e.manifest.nav().is_some_and(|n| n.path == name)
            || e.manifest.ncx().is_some_and(|n| n.path == name)
    };
    let (Ok(s), Ok(t)) = (entries(source), entries(target)) else {
        out.push(finding(
            &target.path.display().to_string(),
            "cannot unpack".into(),
            "re-export the EPUB",
        ));
        return;
    };
    for (name, bytes) in &s {
        if rewritten(source, name) {
            continue;
        }
        match t.get(name) {
            Some(b) if b == bytes => {}
            Some(_) => out.push(finding(
                name,
                "the resource's bytes differ from the source's".into(),
                "copy the source's file back",
            )),
            None => out.push(finding(
                name,
                "missing from the translation".into(),
                "copy the source's file back",
            )),
        }
    }
    for name in t.keys().filter(|n| !s.contains_key(*n)) {
        out.push(finding(
            name,
            "not in the source".into(),
            "remove it, or translate the source again",
        ));
    }
}

fn entries(e: &Epub) -> anyhow::Result<BTreeMap<String, Vec<u8>>> {
    let files = crate::book::epub::Files::open(&e.zip)?;
    let mut out = BTreeMap::new();
    for name in files.names() {
        if !name.ends_with('/') {
            out.insert(name.clone(), files.bytes(name)?);
        }
    }
    Ok(out)
}

/// A document's layout and each block's markup. The prose blocks are compared one to one;
/// code is compared with its comments left out (a comment's translation may be written in
/// any script), the rest of the layout byte for byte.
fn documents(source: &Doc, target: &Doc, out: &mut Vec<Finding>) {
    let prose = |d: &Doc| -> Vec<usize> {
        (0..d.blocks.len())
            .filter(|&k| !d.blocks[k].is_comment())
            .collect()
    };
    let (sp, tp) = (prose(source), prose(target));
    if sp.len() != tp.len() {
        out.push(finding(
            &source.path,
            format!(
                "{} blocks of text in the source, {} in the translation",
                sp.len(),
                tp.len()
            ),
            "a block was added or lost: translate the document again",
        ));
        return;
    }
    if skeleton(source) != skeleton(target) {
        out.push(finding(
            &source.path,
            "the markup outside the blocks of text differs from the source's".into(),
            "translate the document again; only text inside blocks may change",
        ));
    }
    if code_without_comments(source) != code_without_comments(target) {
        out.push(finding(
            &source.path,
            "a code block differs from the source's outside its comments".into(),
            "copy the source's code back; only comments may be translated",
        ));
    }
    for (n, (&ks, &kt)) in sp.iter().zip(&tp).enumerate() {
        let (s, t) = (&source.bridged[ks], &target.bridged[kt]);
        let mut what = Vec::new();
        if sorted(&s.tags) != sorted(&t.tags) {
            what.push("tags or attributes");
        }
        if sorted(&s.atoms) != sorted(&t.atoms) {
            what.push("images, notes or other kept elements");
        }
        if codes(s) != codes(t) {
            what.push("inline code");
        }
        if !what.is_empty() {
            out.push(finding(
                &source.path,
                format!(
                    "block {}: {} differ from the source's: {}",
                    n + 1,
                    what.join(", "),
                    s.markdown
                ),
                "fix the block's markup to match the source",
            ));
        }
    }
}

/// Each code block's lines with everything from a comment marker on left out.
fn code_without_comments(doc: &Doc) -> Vec<String> {
    static COMMENT: std::sync::LazyLock<regex::Regex> =
        std::sync::LazyLock::new(|| regex::Regex::new(r"(?m)(#|//|--).*$").unwrap());
    doc.code_ranges()
        .into_iter()
        .map(|r| COMMENT.replace_all(&doc.text[r], "").into_owned())
        .collect()
}

fn codes(b: &crate::book::epub::Bridged) -> Vec<&str> {
    let mut v: Vec<&str> = b.codes.iter().map(|c| c.1.as_str()).collect();
    v.sort_unstable();
    v
}

fn sorted(v: &[String]) -> Vec<&String> {
    let mut v: Vec<&String> = v.iter().collect();
    v.sort();
    v
}

/// The document without its prose blocks' text, its code and the root element's start tag.
fn skeleton(doc: &Doc) -> String {
    let mut cut: Vec<std::ops::Range<usize>> = doc
        .blocks
        .iter()
        .filter(|b| !b.is_comment())
        .map(|b| b.inner.clone())
        .chain(doc.code_ranges())
        .collect();
    cut.sort_by_key(|r| r.start);
    let mut text = String::new();
    let mut at = 0;
    for r in cut {
        if r.start < at {
            continue;
        }
        text.push_str(&doc.text[at..r.start]);
        text.push('\u{1}');
        at = r.end;
    }
    text.push_str(&doc.text[at..]);
    match (
        text.find("<html"),
        text.find("<html")
            .and_then(|i| text[i..].find('>').map(|j| i + j)),
    ) {
        (Some(i), Some(j)) => format!("{}{}", &text[..i], &text[j + 1..]),
        _ => text,
    }
}

/// The table of contents' targets, in order, in the navigation document and the NCX.
fn toc(source: &Epub, target: &Epub) -> Vec<Finding> {
    let (s, t) = (nav_targets(source), nav_targets(target));
    if s == t {
        return Vec::new();
    }
    let file = source
        .manifest
        .nav()
        .or(source.manifest.ncx())
        .map(|n| n.path.clone());
    vec![finding(
        &file.unwrap_or_default(),
        format!(
            "the table of contents' entries differ: {} targets in the source, {} in the translation",
            s.len(),
            t.len()
        ),
        "translate the source again; the table of contents must point where the source's does",
    )]
}

/// Every `href`/`src` in the navigation document and NCX, in order.
fn nav_targets(e: &Epub) -> Vec<String> {
    let Ok(files) = crate::book::epub::Files::open(&e.zip) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let re = regex::Regex::new(r#"\s(?:href|src)\s*=\s*("[^"]*"|'[^']*')"#).unwrap();
    for item in [e.manifest.nav(), e.manifest.ncx()].into_iter().flatten() {
        let Ok(text) = files.text(&item.path) else {
            continue;
        };
        out.extend(re.captures_iter(&text).map(|c| c[1].to_string()));
    }
    out
}
