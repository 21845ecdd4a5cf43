//! A block of XHTML as one line of Markdown, and back.
//!
//! The translation pipeline works on Markdown: a block's inline tags go in as inline HTML
//! (so the units make each tag a placeholder the model must keep), inline `<code>` as a
//! Markdown code span (shown to the model as written, like Markdown's own), and elements
//! whose content is not prose (`<img>`, `<math>`, `<svg>`, noteref links, comments) as a
//! single `<q-atom n="K"/>` tag. On the way back every tag is matched against the block's
//! own tags, every code span and atom put back as its original bytes, and all other text
//! escaped for XML; a result that is not well formed is refused, so a broken block can
//! never reach the book.

use super::xhtml::{self, Node, NodeKind, ATOMIC};

/// A block as Markdown, with what its Markdown stands for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Bridged {
    /// One line of Markdown (a heading line for `h1`–`h6`).
    pub markdown: String,
    /// The block's tags as written in the Markdown (whitespace inside them normalised).
    pub tags: Vec<String>,
    /// Code spans: the Markdown (`` `x` ``) and the original element.
    pub codes: Vec<(String, String)>,
    /// The original bytes of each `<q-atom n="K"/>`.
    pub atoms: Vec<String>,
}

/// The label of a note's Markdown footnote definition.
const NOTE_LABEL: &str = "[^note]: ";

/// A tag with the whitespace XML normalises in attribute values made plain spaces.
fn normalize_tag(tag: &str) -> String {
    tag.replace(['\n', '\r', '\t'], " ")
}

/// Whether an element is a note reference (its number is kept as written).
fn is_noteref(start_tag: &str) -> bool {
    start_tag.contains("noteref") || start_tag.contains("footnote-ref")
}

/// The Markdown for the nodes of a block.
pub fn forward(doc: &str, nodes: &[&Node], heading: Option<u8>, footnote: bool) -> Bridged {
    let mut b = Bridged::default();
    let mut text = String::new();
    for (i, n) in nodes.iter().enumerate() {
        let next = nodes.get(i + 1).map(|m| &doc[m.range.clone()]);
        emit(doc, n, next, &mut b, &mut text);
    }
    let line = text.trim_matches(' ');
    b.markdown = match heading {
        Some(level) => format!("{} {}", "#".repeat(level as usize), line),
        // A note as a Markdown footnote definition, so that the units keep a cited work
        // as published, as they do for a Markdown book's notes.
        None if footnote => format!("{NOTE_LABEL}{}", escape_line_start(line)),
        None => escape_line_start(line),
    };
    b
}

fn emit(doc: &str, n: &Node, next: Option<&str>, b: &mut Bridged, out: &mut String) {
    let raw = &doc[n.range.clone()];
    match &n.kind {
        NodeKind::Text => {
            let mut space = false;
            for c in raw.chars() {
                if matches!(c, ' ' | '\t' | '\n' | '\r') {
                    space = true;
                    continue;
                }
                if std::mem::take(&mut space) {
                    out.push(' ');
                }
                if matches!(c, '\\' | '`' | '*') {
                    out.push('\\');
                }
                out.push(c);
            }
            if space {
                out.push(' ');
            }
        }
        NodeKind::Ref => out.push_str(&decode_ref(raw, next.unwrap_or(""))),
        NodeKind::Other => atom(raw, b, out),
        NodeKind::Element { name, children, .. } => {
            let start = n.start_tag(doc);
            if name == "code" && children.iter().all(|c| c.kind == NodeKind::Text) {
                let code = &doc[n.inner()];
                if !code.is_empty() && !code.contains(['`', '\n', '\r']) {
                    let md = format!("`{code}`");
                    out.push_str(&md);
                    b.codes.push((md, raw.to_string()));
                    return;
                }
            }
            if ATOMIC.contains(&name.as_str()) || is_noteref(start) {
                return atom(raw, b, out);
            }
            if let Some(mark) = emphasis_mark(start, n.end_tag(doc)) {
                // Plain emphasis as Markdown's, which the units and the model know (a
                // cited work's title in italics, a term introduced in bold).
                out.push_str(mark);
                for (i, c) in children.iter().enumerate() {
                    let next = children.get(i + 1).map(|m| &doc[m.range.clone()]);
                    emit(doc, c, next, b, out);
                }
                out.push_str(mark);
                return;
            }
            let tag = normalize_tag(start);
            out.push_str(&tag);
            b.tags.push(tag);
            let end = n.end_tag(doc);
            if end.is_empty() {
                return;
            }
            for (i, c) in children.iter().enumerate() {
                let next = children.get(i + 1).map(|m| &doc[m.range.clone()]);
                emit(doc, c, next.or(Some(end)), b, out);
            }
            let end = normalize_tag(end);
            out.push_str(&end);
            b.tags.push(end);
        }
    }
}

/// `*` for `<em>…</em>` and `**` for `<strong>…</strong>` written without attributes.
fn emphasis_mark(start: &str, end: &str) -> Option<&'static str> {
    match (start, end) {
        ("<em>", "</em>") => Some("*"),
        ("<strong>", "</strong>") => Some("**"),
        _ => None,
    }
}

fn atom(raw: &str, b: &mut Bridged, out: &mut String) {
    out.push_str(&format!("<q-atom n=\"{}\"/>", b.atoms.len()));
    b.atoms.push(raw.to_string());
}

/// An entity reference as the model should read it: `&amp;` `&gt;` `&quot;` `&apos;` and
/// character references as their characters, except where the character would be read as
/// markup (`<`, or `&` starting something that looks like a reference).
fn decode_ref(raw: &str, next: &str) -> String {
    let body = &raw[1..raw.len() - 1];
    let c = match body {
        "amp" => Some('&'),
        "gt" => Some('>'),
        "quot" => Some('"'),
        "apos" => Some('\''),
        _ => body
            .strip_prefix("#x")
            .or_else(|| body.strip_prefix("#X"))
            .and_then(|h| u32::from_str_radix(h, 16).ok())
            .or_else(|| body.strip_prefix('#').and_then(|d| d.parse().ok()))
            .and_then(char::from_u32),
    };
    match c {
        Some('&') if looks_like_ref(next) => raw.to_string(),
        Some('<') | None => raw.to_string(),
        Some(c) if matches!(c, '\\' | '`' | '*') => format!("\\{c}"),
        Some(c) => c.to_string(),
    }
}

/// Whether `s` starts like the rest of a reference (`name;`, `#123;`).
fn looks_like_ref(s: &str) -> bool {
    let body: String = s
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '#')
        .collect();
    !body.is_empty() && s[body.len()..].starts_with(';')
}

/// Runs of XML whitespace as one space, trimmed.
fn collapse(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut space = false;
    for c in s.chars() {
        if matches!(c, ' ' | '\t' | '\n' | '\r') {
            space = true;
        } else {
            if space && !out.is_empty() {
                out.push(' ');
            }
            space = false;
            out.push(c);
        }
    }
    out
}

/// A backslash before a first character Markdown would read as block syntax.
fn escape_line_start(line: &str) -> String {
    let digits = line.chars().take_while(char::is_ascii_digit).count();
    let mut chars = line.chars();
    let first = chars.next();
    // `*` opens emphasis unless a space follows (then it would be a list item).
    let list_star = first == Some('*') && chars.next().is_none_or(|c| c == ' ' || c == '\t');
    if list_star
        || matches!(
            first,
            Some('#' | '>' | '-' | '+' | '=' | '|' | '[' | '~' | '_')
        )
    {
        format!("\\{line}")
    } else if digits > 0 && matches!(line[digits..].chars().next(), Some('.' | ')')) {
        format!("{}\\{}", &line[..digits], &line[digits..])
    } else {
        line.to_string()
    }
}

/// The XHTML content of a block from its translated Markdown; `None` when the result is
/// not well formed (a tag lost or out of order).
pub fn reverse(md: &str, b: &Bridged) -> Option<String> {
    let md = md.trim();
    let md = if b.markdown.starts_with('#') {
        md.trim_start_matches('#').trim_start()
    } else if b.markdown.starts_with(NOTE_LABEL) {
        md.strip_prefix(NOTE_LABEL.trim_end())
            .unwrap_or(md)
            .trim_start()
    } else {
        md
    };
    let mut out = String::with_capacity(md.len() + 16);
    let mut codes_used = vec![false; b.codes.len()];
    let mut open: Vec<&str> = Vec::new();
    let mut i = 0;
    while i < md.len() {
        let rest = &md[i..];
        if let Some((len, atom)) = atom_at(rest, b) {
            out.push_str(atom);
            i += len;
        } else if let Some(tag) = b
            .tags
            .iter()
            .filter(|t| rest.starts_with(t.as_str()))
            .max_by_key(|t| t.len())
        {
            out.push_str(tag);
            i += tag.len();
        } else if let Some(k) = (0..b.codes.len())
            .find(|&k| !codes_used[k] && rest.starts_with(b.codes[k].0.as_str()))
            .or_else(|| (0..b.codes.len()).find(|&k| rest.starts_with(b.codes[k].0.as_str())))
        {
            codes_used[k] = true;
            out.push_str(&b.codes[k].1);
            i += b.codes[k].0.len();
        } else {
            let mut chars = rest.chars();
            let c = chars.next().unwrap_or(' ');
            match (c, chars.next()) {
                ('\\', Some(p)) if p.is_ascii_punctuation() => {
                    push_escaped(&mut out, p);
                    i += 1 + p.len_utf8();
                }
                ('&', _) if is_reference(rest) => {
                    out.push('&');
                    i += 1;
                }
                ('\n' | '\r', _) => {
                    out.push(' ');
                    i += 1;
                }
                ('*', _) => {
                    let run = rest.bytes().take_while(|&c| c == b'*').count();
                    let tags: &[&str] = match run {
                        1 => &["em"],
                        2 => &["strong"],
                        3 if open.ends_with(&["strong", "em"]) => &["em", "strong"],
                        3 if open.ends_with(&["em", "strong"]) => &["strong", "em"],
                        3 => &["strong", "em"],
                        _ => return None,
                    };
                    for tag in tags {
                        if open.last() == Some(tag) {
                            open.pop();
                            out.push_str(&format!("</{tag}>"));
                        } else if open.contains(tag) {
                            return None;
                        } else {
                            open.push(tag);
                            out.push_str(&format!("<{tag}>"));
                        }
                    }
                    i += run;
                }
                _ => {
                    push_escaped(&mut out, c);
                    i += c.len_utf8();
                }
            }
        }
    }
    if !open.is_empty() {
        return None;
    }
    let wrapped = format!("<q>{out}</q>");
    xhtml::parse(&wrapped).ok()?;
    Some(out)
}

/// `<q-atom n="K"/>` at the start of `s`: its length and the original it stands for.
fn atom_at<'a>(s: &str, b: &'a Bridged) -> Option<(usize, &'a str)> {
    let rest = s.strip_prefix("<q-atom n=\"")?;
    let digits = rest.chars().take_while(char::is_ascii_digit).count();
    let k: usize = rest[..digits].parse().ok()?;
    rest[digits..].strip_prefix("\"/>")?;
    Some((11 + digits + 3, b.atoms.get(k)?.as_str()))
}

/// Whether `s` starts with an XML reference (`&amp;`, `&#169;`, `&#xA9;`, `&name;`).
fn is_reference(s: &str) -> bool {
    s.strip_prefix('&').is_some_and(looks_like_ref)
}

fn push_escaped(out: &mut String, c: char) {
    match c {
        '&' => out.push_str("&amp;"),
        '<' => out.push_str("&lt;"),
        '>' => out.push_str("&gt;"),
        c => out.push(c),
    }
}

/// The text of a block's XHTML content, tags left out (references kept as written).
pub fn plain_text(inner: &str) -> String {
    let wrapped = format!("<q>{inner}</q>");
    let Ok(nodes) = xhtml::parse(&wrapped) else {
        return inner.to_string();
    };
    let mut out = String::new();
    fn walk(doc: &str, nodes: &[Node], out: &mut String) {
        for n in nodes {
            match &n.kind {
                NodeKind::Text | NodeKind::Ref => out.push_str(&doc[n.range.clone()]),
                NodeKind::Element { children, .. } => walk(doc, children, out),
                NodeKind::Other => {}
            }
        }
    }
    walk(&wrapped, &nodes, &mut out);
    collapse(&out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bridge(inner: &str, heading: Option<u8>) -> Bridged {
        let doc = format!("<p>{inner}</p>");
        let nodes = xhtml::parse(&doc).unwrap();
        let kids: Vec<&Node> = nodes[0].children().iter().collect();
        forward(&doc, &kids, heading, false)
    }

    #[test]
    fn tags_codes_atoms_and_references_round_trip() {
        let inner = "Use <code>ls -l</code> and <em class=\"x\"\n  id=\"e1\">R&amp;D</em> &lt;tags&gt; \
                     at 5&#160;km<a href=\"#fn1\" epub:type=\"noteref\">1</a><br/> a\\b `c` &amp;amp;";
        let b = bridge(inner, None);
        assert_eq!(
            b.markdown,
            "Use `ls -l` and <em class=\"x\"   id=\"e1\">R&D</em> &lt;tags> at 5\u{a0}km\
             <q-atom n=\"0\"/><q-atom n=\"1\"/> a\\\\b \\`c\\` &amp;amp;"
        );
        let back = reverse(&b.markdown, &b).unwrap();
        assert_eq!(
            back,
            "Use <code>ls -l</code> and <em class=\"x\"   id=\"e1\">R&amp;D</em> &lt;tags&gt; \
             at 5\u{a0}km<a href=\"#fn1\" epub:type=\"noteref\">1</a><br/> a\\b `c` &amp;amp;"
        );
        // A translation that moves the emphasis and the code keeps every tag.
        let zh =
            "<em class=\"x\"   id=\"e1\">研发</em>使用 `ls -l`<q-atom n=\"1\"/><q-atom n=\"0\"/>";
        assert_eq!(
            reverse(zh, &b).unwrap(),
            "<em class=\"x\"   id=\"e1\">研发</em>使用 <code>ls -l</code><br/><a href=\"#fn1\" \
             epub:type=\"noteref\">1</a>"
        );
    }

    #[test]
    fn plain_emphasis_travels_as_markdown() {
        let b = bridge(
            "A <em>cited</em> work, <strong>a term</strong>, <strong><em>both</em></strong>, 2*3",
            None,
        );
        assert_eq!(b.markdown, "A *cited* work, **a term**, ***both***, 2\\*3");
        assert!(b.tags.is_empty());
        assert_eq!(
            reverse("一部*被引*的作品，**术语**，***两者***，2\\*3", &b).unwrap(),
            "一部<em>被引</em>的作品，<strong>术语</strong>，<strong><em>两者</em></strong>，2*3"
        );
        assert_eq!(reverse("*a **b* c**", &b), None);
        assert_eq!(reverse("*open", &b), None);
    }

    #[test]
    fn broken_nesting_and_stray_markup() {
        let b = bridge("a <em class=\"k\">b</em> c", None);
        assert_eq!(reverse("</em>x<em class=\"k\">", &b), None);
        assert_eq!(reverse("x < y & z", &b).unwrap(), "x &lt; y &amp; z");
        assert_eq!(reverse("<b>x</b>", &b).unwrap(), "&lt;b&gt;x&lt;/b&gt;");
    }

    #[test]
    fn headings_and_line_starts() {
        let b = bridge("Intro <em>x</em>", Some(2));
        assert_eq!(b.markdown, "## Intro *x*");
        assert_eq!(reverse("## 引言 *x*", &b).unwrap(), "引言 <em>x</em>");
        assert_eq!(
            bridge("# not a heading", None).markdown,
            "\\# not a heading"
        );
        assert_eq!(bridge("1. First", None).markdown, "1\\. First");
        let bold = bridge("<strong>Note:</strong> read this", None);
        assert_eq!(bold.markdown, "**Note:** read this");
        assert_eq!(
            reverse("**注意：**读这个", &bold).unwrap(),
            "<strong>注意：</strong>读这个"
        );
        assert_eq!(
            reverse("1\\. First", &bridge("1. First", None)).unwrap(),
            "1. First"
        );
        assert_eq!(plain_text("A <em>b</em> &amp; c"), "A b &amp; c");
        let doc = "<p>Shinn, N. Reflexion. 2023.</p>";
        let nodes = xhtml::parse(doc).unwrap();
        let kids: Vec<&Node> = nodes[0].children().iter().collect();
        let note = forward(doc, &kids, None, true);
        assert_eq!(note.markdown, "[^note]: Shinn, N. Reflexion. 2023.");
        assert_eq!(reverse("[^note]: 见 Shinn。", &note).unwrap(), "见 Shinn。");
    }
}
