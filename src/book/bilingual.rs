//! The bilingual edition of a Markdown chapter: each source block followed by its
//! translation in a block quote (which GitHub, mdBook and pandoc all render set apart);
//! headings appear once, translated, so the table of contents stays single; blocks the
//! translation left as they were (code, HTML, math) appear once.

/// The blocks of Markdown text, split at blank lines.
fn blocks(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        if line.trim().is_empty() {
            let b = text[start..at].trim_matches('\n');
            if !b.trim().is_empty() {
                out.push(b);
            }
            start = at + line.len();
        }
        at += line.len();
    }
    let b = text[start..].trim_matches('\n');
    if !b.trim().is_empty() {
        out.push(b);
    }
    out
}

/// `text` as a block quote.
fn quote(text: &str) -> String {
    text.lines()
        .map(|l| {
            if l.trim().is_empty() {
                ">".to_string()
            } else {
                format!("> {l}")
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The bilingual chapter from the source chapter and its translation; `None` when they
/// do not have the same number of blocks (the translation is then written alone).
pub fn interleave(source: &str, translation: &str) -> Option<String> {
    let (s, t) = (blocks(source), blocks(translation));
    if s.len() != t.len() {
        return None;
    }
    let parts: Vec<String> = s
        .iter()
        .zip(&t)
        .map(|(s, t)| {
            if s == t {
                s.to_string()
            } else if s.trim_start().starts_with('#') {
                t.to_string()
            } else {
                format!("{s}\n\n{}", quote(t))
            }
        })
        .collect();
    Some(parts.join("\n\n") + "\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_then_quoted_translation_headings_once() {
        let src = "# Title\n\nFirst paragraph.\nSecond line.\n\n```\ncode\n```\n\n- a\n- b\n";
        let tr = "# 标题\n\n第一段。\n第二行。\n\n```\ncode\n```\n\n- 甲\n- 乙\n";
        assert_eq!(
            interleave(src, tr).unwrap(),
            "# 标题\n\nFirst paragraph.\nSecond line.\n\n> 第一段。\n> 第二行。\n\n```\ncode\n```\n\n- a\n- b\n\n> - 甲\n> - 乙\n"
        );
        assert_eq!(interleave("a\n\nb\n", "甲\n"), None);
    }
}
