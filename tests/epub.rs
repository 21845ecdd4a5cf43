//! EPUB in, EPUB out: books made here (and, where installed, by pandoc and Calibre) go
//! through the real manager — glossary, scheduler, checks, fallback cascade, chapters —
//! with a stand-in backend that answers with Han characters and sometimes breaks the
//! markup; the EPUB written must keep every tag, resource and TOC target (`quire check`
//! finds no structure error), be the same bytes on a second run, and pass epubcheck with no
//! error the input did not have. Bad EPUBs are refused with the file inside them named,
//! exit 2, nothing written.

mod common;

use common::stand_in::StandIn;
use quire::book::epub::{Epub, Files, BILINGUAL_CLASS};
use quire::book::load_book;
use quire::checks::{check_books, Category, CheckContext, Severity};
use quire::engine::generate::FinishReason;
use quire::translate::{run_with_backend, ProgressMode, TranslateOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use zip::write::SimpleFileOptions;
use zip::CompressionMethod;

const CHAPTER: &str = r##"<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE html>
<html xmlns="http://www.w3.org/1999/xhtml" xmlns:epub="http://www.idpf.org/2007/ops" xml:lang="en" lang="en">
<head><title>Chapter One</title><link rel="stylesheet" type="text/css" href="../style.css"/></head>
<body>
<section id="ch1" epub:type="chapter">
<h1 id="h1">Chapter One: Tokens</h1>
<p class="first">A model reads <em>tokens</em>, not words. See <a href="ch2.xhtml#intro">the next
  chapter</a> and run <code>tok.encode("x")</code> to count them.<a href="#fn1" id="r1" epub:type="noteref">1</a></p>
<figure><img src="../images/fig.png" alt="A figure"/><figcaption>Tokens per word in <strong>three</strong> languages.</figcaption></figure>
<ul><li>One thousand tokens cost 3 seconds.</li><li>Caching saves time <ul><li>Prefix caching in particular.</li></ul></li></ul>
<table><tr><th>Model</th><th>Speed</th></tr><tr><td>Small model</td><td>40 tok/s</td></tr></table>
<pre><code>for t in tokens:
    print(t)  # every token</code></pre>
<blockquote><p>Tokens are the currency of language models.</p></blockquote>
</section>
<aside id="fn1" epub:type="footnote"><p>Most tokenizers use byte-pair encoding.</p></aside>
</body>
</html>
"##;

const CHAPTER2: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE html>
<html xmlns="http://www.w3.org/1999/xhtml" xml:lang="en" lang="en">
<head><title>Two</title></head>
<body><h1 id="intro">Chapter Two: The Cache</h1><p>The cache keeps keys &amp; values for 2048 tokens.</p></body>
</html>
"#;

const NAV: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE html>
<html xmlns="http://www.w3.org/1999/xhtml" xmlns:epub="http://www.idpf.org/2007/ops" xml:lang="en" lang="en">
<head><title>Contents</title></head>
<body><nav epub:type="toc" id="toc"><h1>Contents</h1><ol>
<li><a href="text/ch1.xhtml#h1">Chapter One: Tokens</a></li>
<li><a href="text/ch2.xhtml#intro">Chapter Two: The Cache</a></li>
</ol></nav></body>
</html>
"#;

const OPF: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<package xmlns="http://www.idpf.org/2007/opf" version="3.0" unique-identifier="id">
<metadata xmlns:dc="http://purl.org/dc/elements/1.1/">
<dc:identifier id="id">urn:uuid:0b0c5b7e-1d2a-4a7e-9a55-0f5f0e0a1b2c</dc:identifier>
<dc:title>Tokens</dc:title>
<dc:language>en</dc:language>
<meta property="dcterms:modified">2026-01-01T00:00:00Z</meta>
</metadata>
<manifest>
<item id="nav" href="nav.xhtml" media-type="application/xhtml+xml" properties="nav"/>
<item id="css" href="style.css" media-type="text/css"/>
<item id="fig" href="images/fig.png" media-type="image/png"/>
<item id="ch1" href="text/ch1.xhtml" media-type="application/xhtml+xml"/>
<item id="ch2" href="text/ch2.xhtml" media-type="application/xhtml+xml"/>
</manifest>
<spine><itemref idref="ch1"/><itemref idref="ch2"/></spine>
</package>
"#;

const CONTAINER: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:container">
<rootfiles><rootfile full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/></rootfiles>
</container>
"#;

/// A one-pixel PNG.
const PNG: &[u8] = &[
    0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0x00, 0x00, 0x00, 0x0D, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1F, 0x15, 0xC4,
    0x89, 0x00, 0x00, 0x00, 0x0D, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9C, 0x63, 0x00, 0x01, 0x00, 0x00,
    0x05, 0x00, 0x01, 0x0D, 0x0A, 0x2D, 0xB4, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4E, 0x44, 0xAE,
    0x42, 0x60, 0x82,
];

/// The entries of the test book, `mimetype` first.
fn entries() -> Vec<(String, Vec<u8>)> {
    [
        ("mimetype", b"application/epub+zip".to_vec()),
        ("META-INF/container.xml", CONTAINER.as_bytes().to_vec()),
        ("OEBPS/content.opf", OPF.as_bytes().to_vec()),
        ("OEBPS/nav.xhtml", NAV.as_bytes().to_vec()),
        ("OEBPS/style.css", b"p { margin: 0; }\n".to_vec()),
        ("OEBPS/images/fig.png", PNG.to_vec()),
        ("OEBPS/text/ch1.xhtml", CHAPTER.as_bytes().to_vec()),
        ("OEBPS/text/ch2.xhtml", CHAPTER2.as_bytes().to_vec()),
    ]
    .into_iter()
    .map(|(n, b)| (n.to_string(), b))
    .collect()
}

fn write_zip(path: &Path, entries: &[(String, Vec<u8>)]) {
    let mut w = zip::ZipWriter::new(std::fs::File::create(path).unwrap());
    for (name, bytes) in entries {
        let method = if name == "mimetype" {
            CompressionMethod::Stored
        } else {
            CompressionMethod::Deflated
        };
        w.start_file(
            name.as_str(),
            SimpleFileOptions::default().compression_method(method),
        )
        .unwrap();
        w.write_all(bytes).unwrap();
    }
    w.finish().unwrap();
}

fn han(text: &str) -> String {
    // Each letter a common Chinese character, so that language identification reads it as
    // Chinese.
    const HAN: [char; 26] = [
        '的', '一', '是', '在', '不', '了', '有', '和', '人', '这', '中', '大', '为', '上', '个',
        '国', '我', '以', '要', '他', '时', '来', '用', '们', '生', '到',
    ];
    let to_han = |c: char| {
        if c.is_ascii_alphabetic() {
            HAN[(c.to_ascii_lowercase() as u8 - b'a') as usize]
        } else {
            c
        }
    };
    let re = regex::Regex::new(r"\{\{[0-9]+\}\}|`[^`]*`").unwrap();
    let mut out = String::new();
    let mut at = 0;
    for m in re.find_iter(text) {
        out.extend(text[at..m.start()].chars().map(to_han));
        out.push_str(m.as_str());
        at = m.end();
    }
    out.extend(text[at..].chars().map(to_han));
    out
}

/// The passage's letters as Han characters (placeholders and code kept); with `mischief`,
/// every third call also reverses its placeholders (closing tags before opening ones) and
/// every third drops one.
fn reply(call: u64, passage: &str, mischief: bool) -> String {
    let t = han(passage);
    let ph = regex::Regex::new(r"\{\{[0-9]+\}\}").unwrap();
    match if mischief { call % 3 } else { 0 } {
        1 => {
            let found: Vec<String> = ph.find_iter(&t).map(|m| m.as_str().to_string()).collect();
            let mut it = found.iter().rev();
            ph.replace_all(&t, |_: &regex::Captures| {
                it.next().cloned().unwrap_or_default()
            })
            .into_owned()
        }
        2 => ph.replace(&t, "").into_owned(),
        _ => t,
    }
}

fn translate(input: &Path, out: &Path, bilingual: bool) -> PathBuf {
    translate_with(input, out, bilingual, false)
}

fn translate_with(input: &Path, out: &Path, bilingual: bool, mischief: bool) -> PathBuf {
    let opts = TranslateOptions {
        input: Some(input.to_path_buf()),
        out: out.to_path_buf(),
        progress: ProgressMode::Quiet,
        prefix_cache_dir: None,
        bilingual,
        ..TranslateOptions::default()
    };
    let mut backend = StandIn::new(|call, p| (reply(call, p, mischief), FinishReason::Eos));
    run_with_backend(&opts, &mut backend).unwrap();
    out.join(input.file_name().unwrap())
}

fn structure_errors(source: &Path, translation: &Path) -> Vec<String> {
    let s = load_book(source).unwrap();
    let t = load_book(translation).unwrap();
    let report = check_books(&s, &t, &CheckContext::new("en", "zh-CN")).unwrap();
    report
        .findings
        .iter()
        .filter(|f| f.severity == Severity::Error && Category::STRUCTURE.contains(&f.category))
        .map(|f| format!("{} {}: {}", f.category.name(), f.chapter, f.evidence))
        .collect()
}

fn entry_text(epub: &Path, name: &str) -> String {
    let bytes = std::fs::read(epub).unwrap();
    let files = Files::open(&bytes).unwrap();
    files.text(name).unwrap()
}

#[test]
fn an_epub_keeps_its_markup_resources_and_toc() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("tokens.epub");
    write_zip(&src, &entries());
    let out = translate(&src, &dir.path().join("out"), false);
    assert!(out.ends_with("out/tokens.epub"));
    assert_eq!(structure_errors(&src, &out), Vec::<String>::new());

    let ch1 = entry_text(&out, "OEBPS/text/ch1.xhtml");
    // Translated prose, kept code, kept ids, links and note references.
    assert!(
        ch1.contains(&format!("<h1 id=\"h1\">{}", han("Chapter"))),
        "{ch1}"
    );
    assert!(ch1.contains("<code>tok.encode(\"x\")</code>"));
    assert!(ch1.contains("<a href=\"#fn1\" id=\"r1\" epub:type=\"noteref\">1</a>"));
    assert!(ch1.contains("<img src=\"../images/fig.png\" alt=\"A figure\"/>"));
    // Code as written, its comment translated.
    assert!(
        ch1.contains(&format!(
            "<pre><code>for t in tokens:\n    print(t)  # {}",
            han("every")
        )),
        "{ch1}"
    );
    assert!(ch1.contains("xml:lang=\"zh-CN\" lang=\"zh-CN\""));
    assert!(!ch1.contains("A model reads"));
    assert!(entry_text(&out, "OEBPS/text/ch2.xhtml").contains("&amp;"));
    assert!(entry_text(&out, "OEBPS/content.opf").contains("<dc:language>zh-CN</dc:language>"));
    let nav = entry_text(&out, "OEBPS/nav.xhtml");
    assert!(
        nav.contains(&format!("<a href=\"text/ch1.xhtml#h1\">{}", han("Chapter"))),
        "{nav}"
    );
    assert!(!nav.contains("Chapter One"));

    // The same translation again: the same bytes.
    let again = translate(&src, &dir.path().join("out2"), false);
    assert_eq!(std::fs::read(&out).unwrap(), std::fs::read(&again).unwrap());
    // The Markdown view of each document is written beside it.
    assert!(dir.path().join("out/book/OEBPS/text/ch1.xhtml.md").exists());
}

#[test]
fn a_model_that_breaks_markup_never_breaks_the_epub() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("tokens.epub");
    write_zip(&src, &entries());
    for bilingual in [false, true] {
        let out = translate_with(
            &src,
            &dir.path().join(format!("out{bilingual}")),
            bilingual,
            true,
        );
        Epub::read(&out).expect("well formed");
        if !bilingual {
            assert_eq!(structure_errors(&src, &out), Vec::<String>::new());
        }
    }
}

#[test]
fn a_bilingual_epub_shows_source_and_translation() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("tokens.epub");
    write_zip(&src, &entries());
    let out = translate(&src, &dir.path().join("out"), true);
    let ch1 = entry_text(&out, "OEBPS/text/ch1.xhtml");
    assert!(ch1.contains("A model reads <em>tokens</em>"), "{ch1}");
    assert!(
        ch1.contains(&format!("<p class=\"first {BILINGUAL_CLASS}\">")),
        "{ch1}"
    );
    assert!(
        ch1.contains(&format!(
            "One thousand tokens cost 3 seconds.<br/><span class=\"{BILINGUAL_CLASS}\">"
        )),
        "{ch1}"
    );
    // Headings translated only; ids never doubled.
    assert!(!ch1.contains("Chapter One: Tokens</h1>"));
    assert_eq!(ch1.matches("id=\"r1\"").count(), 1);
    Epub::read(&out).expect("well formed");
}

fn refused(entries: &[(String, Vec<u8>)], expect: &str) {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("bad.epub");
    write_zip(&src, entries);
    let out = dir.path().join("out");
    let o = Command::new(env!("CARGO_BIN_EXE_quire"))
        .args([
            "translate",
            src.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--dry-run",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains(expect), "expected {expect:?} in: {err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(!out.exists(), "nothing is written");
}

fn with(name: &str, bytes: &[u8]) -> Vec<(String, Vec<u8>)> {
    let mut e = entries();
    match e.iter_mut().find(|(n, _)| n == name) {
        Some(entry) => entry.1 = bytes.to_vec(),
        None => e.push((name.to_string(), bytes.to_vec())),
    }
    e
}

#[test]
fn bad_epubs_are_refused_with_the_file_named() {
    let drm = r#"<encryption xmlns="urn:oasis:names:tc:opendocument:xmlns:container" xmlns:enc="http://www.w3.org/2001/04/xmlenc#">
<enc:EncryptedData><enc:EncryptionMethod Algorithm="http://www.w3.org/2001/04/xmlenc#aes128-cbc"/>
<enc:CipherData><enc:CipherReference URI="OEBPS/text/ch1.xhtml"/></enc:CipherData></enc:EncryptedData></encryption>"#;
    refused(
        &with("META-INF/encryption.xml", drm.as_bytes()),
        "OEBPS/text/ch1.xhtml is encrypted (DRM)",
    );
    let no_container: Vec<_> = entries()
        .into_iter()
        .filter(|(n, _)| n != "META-INF/container.xml")
        .collect();
    refused(&no_container, "META-INF/container.xml is missing");
    refused(
        &with("OEBPS/content.opf", b"<package><manifest></package>"),
        "OEBPS/content.opf: line 1",
    );
    let broken = CHAPTER.replace("</em>", "");
    refused(
        &with("OEBPS/text/ch1.xhtml", broken.as_bytes()),
        "OEBPS/text/ch1.xhtml: line 9",
    );
    refused(
        &with("../evil.xhtml", b"x"),
        "../evil.xhtml: an absolute path or a path out of the book",
    );
    refused(
        &with("OEBPS/zeros.bin", &vec![0u8; 64 << 20]),
        "OEBPS/zeros.bin: unpacks to 67108864 bytes",
    );
    let not_utf8 = CHAPTER
        .replace("Tokens</h1>", "Tok\u{e9}ns</h1>")
        .replace('\u{e9}', "\u{1}");
    let mut bytes = not_utf8.into_bytes();
    let at = bytes.iter().position(|&b| b == 1).unwrap();
    bytes[at] = 0xE9;
    refused(
        &with("OEBPS/text/ch1.xhtml", &bytes),
        "OEBPS/text/ch1.xhtml: not UTF-8",
    );
}

/// The external tools, where installed (CI installs them and sets QUIRE_EPUB_TOOLS=1,
/// so there they must be found).
fn tool(name: &str) -> bool {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {name}")])
        .output()
        .is_ok_and(|o| o.status.success());
    if !found && std::env::var_os("QUIRE_EPUB_TOOLS").is_some() {
        panic!("{name} is not installed but QUIRE_EPUB_TOOLS is set (apt-get install pandoc calibre epubcheck)");
    }
    if !found {
        eprintln!("skipped: {name} is not installed");
    }
    found
}

/// epubcheck's error and warning messages, without the file name prefix.
fn epubcheck(path: &Path) -> Vec<String> {
    let o = Command::new("java")
        .args([
            "-jar",
            "/usr/share/java/epubcheck.jar",
            path.to_str().unwrap(),
        ])
        .output()
        .or_else(|_| Command::new("epubcheck").arg(path).output())
        .unwrap();
    let text =
        String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr);
    let name = path.to_string_lossy().into_owned();
    text.lines()
        .filter(|l| l.starts_with("ERROR") || l.starts_with("WARNING") || l.starts_with("FATAL"))
        .map(|l| {
            // Positions may move when text is translated; the message and file stay.
            let l = l.replace(&name, "");
            regex::Regex::new(r"\(\d+,\d+\)")
                .unwrap()
                .replace_all(&l, "")
                .into_owned()
        })
        .collect()
}

fn sample_markdown(dir: &Path) -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/sample-book");
    let mut out = Vec::new();
    // The sample's image is not shipped; keep the book self-contained.
    let image = regex::Regex::new(r"!\[[^\]]*\]\([^)]*\)").unwrap();
    for n in ["chapter1.md", "chapter2.md", "chapter3.md"] {
        let text = std::fs::read_to_string(root.join(n)).unwrap();
        let text = image.replace_all(&text, "");
        let p = dir.join(n);
        std::fs::write(&p, text.as_bytes()).unwrap();
        out.push(p);
    }
    out
}

#[test]
fn pandoc_and_calibre_books_pass_epubcheck_after_translation() {
    if !tool("pandoc") || !tool("ebook-convert") || !tool("java") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let md = sample_markdown(dir.path());
    let pandoc = dir.path().join("sample-pandoc.epub");
    let ok = Command::new("pandoc")
        .args(&md)
        .args(["--metadata", "title=Sample", "--metadata", "lang=en", "-o"])
        .arg(&pandoc)
        .status()
        .unwrap();
    assert!(ok.success());
    let calibre = dir.path().join("sample-calibre.epub");
    let html = dir.path().join("sample.html");
    assert!(Command::new("pandoc")
        .args(&md)
        .args(["-s", "--metadata", "title=Sample", "-o"])
        .arg(&html)
        .status()
        .unwrap()
        .success());
    let ok = Command::new("ebook-convert")
        .arg(&html)
        .arg(&calibre)
        .args(["--epub-version", "3", "--language", "en"])
        .output()
        .unwrap();
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    for (src, name) in [(&pandoc, "pandoc"), (&calibre, "calibre")] {
        for bilingual in [false, true] {
            let out_dir = dir.path().join(format!("out-{name}-{bilingual}"));
            let out = translate_with(src, &out_dir, bilingual, true);
            if !bilingual {
                assert_eq!(structure_errors(src, &out), Vec::<String>::new(), "{name}");
            }
            let before = epubcheck(src);
            let new: Vec<String> = epubcheck(&out)
                .into_iter()
                .filter(|m| !before.contains(m))
                .collect();
            assert!(
                new.is_empty(),
                "{name} bilingual={bilingual}: epubcheck found new problems: {new:#?}"
            );
        }
    }
}
