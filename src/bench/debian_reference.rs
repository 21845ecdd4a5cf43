//! Human references for English → German, French, Spanish, Japanese (and Chinese): the
//! Debian Reference, as the `debian-reference-<lang>` packages install it (DocBook HTML
//! under `/usr/share/debian-reference/`). A chapter is read where installed and turned
//! into Markdown with `pandoc` into the bench's output directory; nothing is copied into
//! the repository.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where the packages install the chapters.
pub const DEFAULT_DIR: &str = "/usr/share/debian-reference";

/// The file-name language of a target in the packages (`de`, `ja`, `zh-cn`).
fn package_lang(primary: &str) -> String {
    match primary {
        "zh" => "zh-cn".to_string(),
        other => other.to_string(),
    }
}

/// A chapter name as the packages write it: `ch01`, `pr01`, `apa`.
fn valid_chapter(chapter: &str) -> bool {
    (2..=8).contains(&chapter.len()) && chapter.chars().all(|c| c.is_ascii_alphanumeric())
}

/// The English chapter and its translation into `target_primary` as Markdown files under
/// `out` (`en-<chapter>.md`, `<lang>-<chapter>.md`), converted from `dir` with pandoc.
pub fn chapter_pair(
    dir: &Path,
    chapter: &str,
    target_primary: &str,
    out: &Path,
) -> Result<(PathBuf, PathBuf)> {
    if !valid_chapter(chapter) {
        bail!("bad Debian Reference chapter {chapter:?}: use a name such as ch01, ch05, pr01");
    }
    let lang = package_lang(target_primary);
    let html = |l: &str| dir.join(format!("{chapter}.{l}.html"));
    let (en, tr) = (html("en"), html(&lang));
    for (p, pkg) in [(&en, "en"), (&tr, lang.as_str())] {
        if !p.is_file() {
            bail!(
                "{} not found: install the Debian Reference (apt-get install debian-reference-{pkg}) or pass --debian-reference-dir",
                p.display()
            );
        }
    }
    std::fs::create_dir_all(out).with_context(|| format!("cannot create {}", out.display()))?;
    let book = out.join(format!("en-{chapter}.md"));
    let reference = out.join(format!("{}-{chapter}.md", target_primary));
    to_markdown(&en, &book)?;
    to_markdown(&tr, &reference)?;
    Ok((book, reference))
}

/// `html` as GitHub Markdown without raw HTML (DocBook's divs and spans dropped).
fn to_markdown(html: &Path, md: &Path) -> Result<()> {
    let status = Command::new("pandoc")
        .args([
            "-f",
            "html-native_divs-native_spans",
            "-t",
            "gfm-raw_html",
            "--wrap=none",
        ])
        .arg(html)
        .arg("-o")
        .arg(md)
        .status()
        .context("cannot run pandoc (needed to read the Debian Reference's HTML)")?;
    if !status.success() {
        bail!("pandoc failed on {} ({status})", html.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chapter_names_and_missing_packages_are_clear_errors() {
        let dir = tempfile::tempdir().unwrap();
        let e = chapter_pair(dir.path(), "../x", "de", dir.path()).unwrap_err();
        assert!(
            e.to_string().contains("bad Debian Reference chapter"),
            "{e}"
        );
        let e = chapter_pair(dir.path(), "ch01", "zh", dir.path()).unwrap_err();
        assert!(e.to_string().contains("debian-reference-en"), "{e}");
        std::fs::write(dir.path().join("ch01.en.html"), "<p>x</p>").unwrap();
        let e = chapter_pair(dir.path(), "ch01", "zh", dir.path()).unwrap_err();
        assert!(e.to_string().contains("debian-reference-zh-cn"), "{e}");
    }
}
