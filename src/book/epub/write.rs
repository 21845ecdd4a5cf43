//! The translated EPUB: each document's blocks replaced by their translations (or, with
//! `bilingual`, followed by them), the language set in the package and the documents, the
//! navigation document's and NCX's labels taken from the translated headings; every other
//! entry of the zip copied as its compressed bytes, in the same order with the same times,
//! so the same translation always gives the same file.

use super::bridge;
use super::package::{self, all};
use super::{xhtml, Doc, Epub, Files};
use anyhow::{Context, Result};
use regex::Regex;
use std::collections::{BTreeMap, HashMap};
use std::io::{Cursor, Write};
use std::ops::Range;
use std::sync::LazyLock;
use zip::write::SimpleFileOptions;
use zip::CompressionMethod;

/// The class of a translation shown beside its source in a bilingual edition.
pub const BILINGUAL_CLASS: &str = "quire-translation";

/// Blocks whose translation follows them as a copy of the element (others hold the
/// translation inside, after a line break, so lists and tables keep their shape).
const CLONED: &[&str] = &["p", "div", "blockquote", "address", "aside", "center"];

/// How the EPUB is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EpubOptions {
    /// The target language's tag, written to `dc:language` and `xml:lang`.
    pub language: String,
    /// Each block followed by its translation (headings and the TOC translated only).
    pub bilingual: bool,
}

/// What writing found: the blocks whose translation could not be put back (their
/// source stays), as `file: block N`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteReport {
    /// Blocks written.
    pub blocks: usize,
    /// The blocks that kept their source.
    pub kept_source: Vec<String>,
}

/// Write the translated EPUB to `out` (atomically). `translations[d][b]` is the
/// translated Markdown of block `b` of document `d` (`None`: keep the source).
pub fn write_epub(
    epub: &Epub,
    translations: &[Vec<Option<String>>],
    opts: &EpubOptions,
    out: &std::path::Path,
) -> Result<WriteReport> {
    let files = Files::open(&epub.zip)?;
    let mut report = WriteReport::default();
    let mut replaced: BTreeMap<String, String> = BTreeMap::new();
    let mut labels: HashMap<String, String> = HashMap::new();
    for (doc, texts) in epub.docs.iter().zip(translations) {
        let inners = translated_inners(doc, texts, &mut report);
        collect_labels(doc, &inners, &mut labels);
        let text = rewrite_doc(doc, &inners, opts, epub.manifest.is_epub3());
        replaced.insert(doc.path.clone(), text);
    }
    let opf = files.text(&epub.manifest.opf_path)?;
    replaced.insert(
        epub.manifest.opf_path.clone(),
        set_dc_language(&opf, &opts.language),
    );
    for item in [epub.manifest.nav(), epub.manifest.ncx()]
        .into_iter()
        .flatten()
    {
        if replaced.contains_key(&item.path) || !files.has(&item.path) {
            continue;
        }
        let text = files.text(&item.path)?;
        let element = if item.media_type == "application/x-dtbncx+xml" {
            "text"
        } else {
            "a"
        };
        let mut text = relabel(&text, element, &labels);
        if element == "a" {
            text = set_root_lang(&text, &opts.language, epub.manifest.is_epub3());
        }
        replaced.insert(item.path.clone(), text);
    }
    let bytes = rebuild_zip(&epub.zip, &replaced)?;
    crate::util::write_atomic(out, &bytes)?;
    Ok(report)
}

/// Each block's new content: its translation as XHTML, or its source when there is none
/// or it would not be well formed.
fn translated_inners(doc: &Doc, texts: &[Option<String>], report: &mut WriteReport) -> Vec<String> {
    doc.blocks
        .iter()
        .zip(&doc.bridged)
        .enumerate()
        .map(|(k, (block, b))| {
            report.blocks += 1;
            let source = &doc.text[block.inner.clone()];
            match texts.get(k).cloned().flatten() {
                Some(md) if md.trim() == b.markdown.trim() => source.to_string(),
                Some(md) => bridge::reverse(&md, b).unwrap_or_else(|| {
                    report
                        .kept_source
                        .push(format!("{}: block {}", doc.path, k + 1));
                    source.to_string()
                }),
                None => source.to_string(),
            }
        })
        .collect()
}

/// Source text → translated text of the document's headings (then its other blocks),
/// for the navigation labels.
fn collect_labels(doc: &Doc, inners: &[String], labels: &mut HashMap<String, String>) {
    let order = doc
        .blocks
        .iter()
        .enumerate()
        .filter(|(_, b)| b.heading.is_some())
        .chain(
            doc.blocks
                .iter()
                .enumerate()
                .filter(|(_, b)| b.heading.is_none()),
        );
    for (k, block) in order {
        let key = bridge::plain_text(&doc.text[block.inner.clone()]);
        labels
            .entry(key)
            .or_insert_with(|| bridge::plain_text(&inners[k]));
    }
}

/// The document with every block's content replaced (or, bilingual, followed) by its
/// translation, and the root's language set.
fn rewrite_doc(doc: &Doc, inners: &[String], opts: &EpubOptions, epub3: bool) -> String {
    let mut edits: Vec<(Range<usize>, String)> = Vec::new();
    for (block, inner) in doc.blocks.iter().zip(inners) {
        let source = &doc.text[block.inner.clone()];
        if !opts.bilingual || block.heading.is_some() || block.is_comment() || inner == source {
            edits.push((block.inner.clone(), inner.clone()));
        } else {
            edits.push(bilingual_edit(doc, block, inner));
        }
    }
    let mut text = doc.text.clone();
    for (range, with) in edits.into_iter().rev() {
        text.replace_range(range, &with);
    }
    if opts.bilingual {
        text = add_style(&text);
    }
    set_root_lang(&text, &opts.language, epub3)
}

/// A bilingual block: a copy of the element after it (without its id) holding the
/// translation, or the translation inside the element after a line break.
fn bilingual_edit(doc: &Doc, block: &xhtml::Block, inner: &str) -> (Range<usize>, String) {
    let source = &doc.text[block.inner.clone()];
    match &block.element {
        Some(el) if CLONED.contains(&block.name.as_str()) => {
            let outer = &doc.text[el.clone()];
            let start_len = block.inner.start - el.start;
            let start_tag = &doc.text[el.start..el.start + start_len];
            let start_tag =
                start_tag[..start_tag.rfind('>').map_or(start_tag.len(), |i| i + 1)].to_string();
            let end_tag = format!("</{}>", qualified_name(&start_tag));
            let clone = format!(
                "{}{}{end_tag}",
                with_class(&without_id(&start_tag)),
                without_ids(inner)
            );
            (el.clone(), format!("{outer}\n{clone}"))
        }
        _ => (
            block.inner.clone(),
            format!(
                "{source}<br/><span class=\"{BILINGUAL_CLASS}\">{}</span>",
                without_ids(inner)
            ),
        ),
    }
}

/// The element name of a start tag as written (`p`, `html:p`).
fn qualified_name(start_tag: &str) -> &str {
    let body = start_tag.trim_start_matches('<');
    &body[..body
        .find(|c: char| c.is_whitespace() || c == '>' || c == '/')
        .unwrap_or(body.len())]
}

static ID_ATTR: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r#"\s(?:xml:)?id\s*=\s*("[^"]*"|'[^']*')"#).unwrap());
static CLASS_ATTR: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r#"(\sclass\s*=\s*)("([^"]*)"|'([^']*)')"#).unwrap());

fn without_id(tag: &str) -> String {
    ID_ATTR.replace_all(tag, "").into_owned()
}

/// Block content with the ids of its elements removed (a copy must not repeat them).
fn without_ids(inner: &str) -> String {
    let wrapped = format!("<q>{inner}</q>");
    let Ok(nodes) = xhtml::parse(&wrapped) else {
        return inner.to_string();
    };
    let mut tags = Vec::new();
    fn starts<'a>(nodes: &'a [xhtml::Node], out: &mut Vec<&'a xhtml::Node>) {
        for n in nodes {
            if n.name().is_some() {
                out.push(n);
                starts(n.children(), out);
            }
        }
    }
    starts(nodes[0].children(), &mut tags);
    let mut out = wrapped.clone();
    for n in tags.iter().rev() {
        let tag = n.start_tag(&wrapped);
        out.replace_range(n.range.start..n.range.start + tag.len(), &without_id(tag));
    }
    out[3..out.len() - 4].to_string()
}

fn with_class(tag: &str) -> String {
    if let Some(c) = CLASS_ATTR.captures(tag) {
        let old = c.get(3).or(c.get(4)).map_or("", |m| m.as_str());
        let whole = c.get(0).unwrap();
        return format!(
            "{}{}\"{old} {BILINGUAL_CLASS}\"{}",
            &tag[..whole.start()],
            &c[1],
            &tag[whole.end()..]
        );
    }
    let name_end = 1 + qualified_name(tag).len();
    format!(
        "{} class=\"{BILINGUAL_CLASS}\"{}",
        &tag[..name_end],
        &tag[name_end..]
    )
}

/// The bilingual edition's style, in the document's head.
fn add_style(doc: &str) -> String {
    let style = format!(
        "<style type=\"text/css\">.{BILINGUAL_CLASS} {{ color: #1f4e79; }} \
         p.{BILINGUAL_CLASS}, div.{BILINGUAL_CLASS} {{ margin-top: 0.2em; }}</style>\n"
    );
    match doc.find("</head>") {
        Some(i) => format!("{}{style}{}", &doc[..i], &doc[i..]),
        None => doc.to_string(),
    }
}

/// Set (or add) an attribute in a start tag.
fn set_attr(tag: &str, name: &str, value: &str) -> String {
    let re = Regex::new(&format!(
        r#"(\s{}\s*=\s*)("[^"]*"|'[^']*')"#,
        regex::escape(name)
    ))
    .unwrap();
    if re.is_match(tag) {
        return re
            .replace(tag, |c: &regex::Captures| format!("{}\"{value}\"", &c[1]))
            .into_owned();
    }
    let name_end = 1 + qualified_name(tag).len();
    format!(
        "{} {name}=\"{value}\"{}",
        &tag[..name_end],
        &tag[name_end..]
    )
}

/// The root `<html>` element with `xml:lang` (and, in EPUB 3 or where present, `lang`)
/// set to `language`.
fn set_root_lang(doc: &str, language: &str, epub3: bool) -> String {
    let Ok(nodes) = xhtml::parse(doc) else {
        return doc.to_string();
    };
    let Some(html) = xhtml::find(&nodes, "html") else {
        return doc.to_string();
    };
    let tag = html.start_tag(doc);
    let has_lang = Regex::new(r#"\slang\s*="#).unwrap().is_match(tag);
    let mut new = set_attr(tag, "xml:lang", language);
    if epub3 || has_lang {
        new = set_attr(&new, "lang", language);
    }
    format!(
        "{}{new}{}",
        &doc[..html.range.start],
        &doc[html.range.start + tag.len()..]
    )
}

/// The package with its (first) `dc:language` set to `language`, or one added.
fn set_dc_language(opf: &str, language: &str) -> String {
    if let Some(r) = package::element_inner(opf, "language") {
        return format!("{}{language}{}", &opf[..r.start], &opf[r.end..]);
    }
    match opf
        .find("</metadata>")
        .or_else(|| opf.find("</opf:metadata>"))
    {
        Some(i) => format!(
            "{}  <dc:language>{language}</dc:language>\n  {}",
            &opf[..i],
            &opf[i..]
        ),
        None => opf.to_string(),
    }
}

/// The navigation document or NCX with each label (`<a>` or `<text>`) whose text is a
/// source heading replaced by its translation.
fn relabel(doc: &str, element: &str, labels: &HashMap<String, String>) -> String {
    let Ok(nodes) = xhtml::parse(doc) else {
        return doc.to_string();
    };
    let mut found = Vec::new();
    all(&nodes, element, &mut found);
    let mut edits: Vec<(Range<usize>, String)> = found
        .iter()
        .filter(|n| n.children().iter().all(|c| c.name().is_none()))
        .filter_map(|n| {
            let r = n.inner();
            let key = bridge::plain_text(&doc[r.clone()]);
            labels
                .get(&key)
                .filter(|t| **t != key)
                .map(|t| (r, t.clone()))
        })
        .collect();
    edits.sort_by_key(|(r, _)| r.start);
    let mut text = doc.to_string();
    for (r, with) in edits.into_iter().rev() {
        text.replace_range(r, &with);
    }
    text
}

/// The zip with the `replaced` entries' new text (deflated, with their old times) and
/// every other entry copied as it is; `mimetype` first and stored, as EPUB requires.
fn rebuild_zip(zip_bytes: &[u8], replaced: &BTreeMap<String, String>) -> Result<Vec<u8>> {
    let mut archive = zip::ZipArchive::new(Cursor::new(zip_bytes))?;
    let mut w = zip::ZipWriter::new(Cursor::new(Vec::new()));
    let mimetype_time = archive
        .by_name("mimetype")
        .ok()
        .and_then(|f| f.last_modified())
        .unwrap_or_default();
    w.start_file(
        "mimetype",
        SimpleFileOptions::default()
            .compression_method(CompressionMethod::Stored)
            .last_modified_time(mimetype_time),
    )?;
    w.write_all(b"application/epub+zip")?;
    for i in 0..archive.len() {
        let f = archive.by_index_raw(i)?;
        let name = f.name()?.into_owned();
        if name == "mimetype" {
            continue;
        }
        match replaced.get(&name) {
            Some(text) => {
                let time = f.last_modified().unwrap_or_default();
                drop(f);
                w.start_file(
                    name.as_str(),
                    SimpleFileOptions::default()
                        .compression_method(CompressionMethod::Deflated)
                        .last_modified_time(time),
                )?;
                w.write_all(text.as_bytes())
                    .with_context(|| format!("cannot write {name}"))?;
            }
            None => w.raw_copy_file(f)?,
        }
    }
    Ok(w.finish()?.into_inner())
}
