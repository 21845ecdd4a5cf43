//! Loading books: natural chapter order, recursion, and clear errors.

use quire::book::load_book;

#[test]
fn directory_in_natural_order_recursive() {
    let dir = tempfile::tempdir().unwrap();
    for name in [
        "chapter10.md",
        "chapter2.md",
        "chapter1.markdown",
        "notes.txt",
        ".hidden.md",
    ] {
        std::fs::write(dir.path().join(name), format!("# {name}\n")).unwrap();
    }
    std::fs::create_dir(dir.path().join("part2")).unwrap();
    std::fs::write(dir.path().join("part2/chapter3.md"), "x\n").unwrap();
    let book = load_book(dir.path()).unwrap();
    let names: Vec<String> = book.chapters.iter().map(|c| c.name()).collect();
    assert_eq!(
        names,
        vec![
            "chapter1.markdown",
            "chapter2.md",
            "chapter10.md",
            "part2/chapter3.md"
        ]
    );
    assert_eq!(book.chapters[1].text, "# chapter2.md\n");
}

#[test]
fn single_file_book_keeps_exact_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("book.md");
    std::fs::write(&p, "\u{feff}# T\r\n\r\ntext  \n").unwrap();
    let book = load_book(&p).unwrap();
    assert_eq!(book.chapters.len(), 1);
    assert_eq!(book.chapters[0].rel_path.to_str(), Some("book.md"));
    assert_eq!(book.chapters[0].text, "\u{feff}# T\r\n\r\ntext  \n");
}

#[test]
fn clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let err = format!("{:#}", load_book(dir.path()).unwrap_err());
    assert!(err.contains("no Markdown files"), "{err}");
    let txt = dir.path().join("a.txt");
    std::fs::write(&txt, "x").unwrap();
    let err = format!("{:#}", load_book(&txt).unwrap_err());
    assert!(err.contains("not a Markdown file"), "{err}");
    let bad = dir.path().join("bad.md");
    std::fs::write(&bad, b"# ok\nhello \xe4\xb8 world\n").unwrap();
    let err = format!("{:#}", load_book(&bad).unwrap_err());
    assert!(
        err.contains("bad.md") && err.contains("byte offset 11") && err.contains("line 2"),
        "{err}"
    );
    let err = format!("{:#}", load_book(dir.path()).unwrap_err());
    assert!(err.contains("bad.md") && err.contains("UTF-8"), "{err}");
    let err = format!(
        "{:#}",
        load_book(&dir.path().join("missing.md")).unwrap_err()
    );
    assert!(err.contains("missing.md"), "{err}");
}
