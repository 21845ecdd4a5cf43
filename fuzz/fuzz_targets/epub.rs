//! The EPUB reader never panics: arbitrary bytes as a zip, and arbitrary text as the one
//! spine document of a valid container (the XHTML walker, the Markdown bridge and its
//! way back run on whatever parses).
#![no_main]

use libfuzzer_sys::fuzz_target;
use quire::book::epub::{write_epub, Epub, EpubOptions};
use std::io::Write;
use std::path::Path;

fn zip_with(doc: &[u8]) -> Vec<u8> {
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let opts = zip::write::SimpleFileOptions::default();
    let files: [(&str, &[u8]); 4] = [
        ("mimetype", b"application/epub+zip"),
        (
            "META-INF/container.xml",
            br#"<container><rootfiles><rootfile full-path="c.opf"/></rootfiles></container>"#,
        ),
        (
            "c.opf",
            br#"<package version="3.0"><metadata/><manifest><item id="a" href="a.xhtml" media-type="application/xhtml+xml"/></manifest><spine><itemref idref="a"/></spine></package>"#,
        ),
        ("a.xhtml", doc),
    ];
    for (name, bytes) in files {
        w.start_file(name, opts).unwrap();
        w.write_all(bytes).unwrap();
    }
    w.finish().unwrap().into_inner()
}

fuzz_target!(|data: &[u8]| {
    let _ = Epub::from_bytes(Path::new("fuzz.epub"), data.to_vec());
    let Ok(epub) = Epub::from_bytes(Path::new("fuzz.epub"), zip_with(data)) else {
        return;
    };
    // Each block's own Markdown as its "translation", written back.
    let blocks: Vec<Vec<Option<String>>> = epub
        .docs
        .iter()
        .map(|d| d.bridged.iter().map(|b| Some(b.markdown.clone())).collect())
        .collect();
    let dir = std::env::temp_dir().join("quire-fuzz-epub");
    let opts = EpubOptions { language: "zh-CN".into(), bilingual: data.len() % 2 == 0 };
    let _ = write_epub(&epub, &blocks, &opts, &dir.join("out.epub"));
});
