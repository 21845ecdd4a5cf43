//! The comments of fenced code blocks: prose a translated book translates (technical books
//! translate `# Load the index` to `# 加载索引`) while every byte of code stays as written.
//!
//! [`prose_ranges`] finds, in one fenced block, the comment text worth translating: line
//! comments (`#`, `//` or `--`, by the fence's language) that read as prose, not commented-out
//! code or tool directives. Strings are skipped (a `#` inside `"…"` starts no comment), so is
//! Python's triple-quoted text. A fence without a language (directory trees, sample output)
//! only has its trailing `   # comment`s translated. [`same_code`] is the check's half: two
//! versions of a block differ only inside the comments that [`prose_ranges`] would translate.

use std::ops::Range;

/// How a language writes a line comment, and which quotes open strings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Syntax {
    marker: &'static str,
    /// `'…'` is a string (not Rust's lifetimes and character literals).
    single_quotes: bool,
    /// Python's `"""…"""` and `'''…'''` may span lines.
    triple_quotes: bool,
    /// Only comments after code on the same line (a plain fence: `dir/   # what it holds`).
    trailing_only: bool,
}

/// The comment syntax of a fence's info string, `None` for languages whose comments are
/// not recognised (their blocks stay verbatim).
fn syntax(info: &str) -> Option<Syntax> {
    let lang = info
        .split(|c: char| c.is_whitespace() || c == ',' || c == '{')
        .next()
        .unwrap_or("")
        .trim_start_matches('.')
        .to_ascii_lowercase();
    let s = |marker, single_quotes, triple_quotes, trailing_only| {
        Some(Syntax {
            marker,
            single_quotes,
            triple_quotes,
            trailing_only,
        })
    };
    match lang.as_str() {
        "python" | "py" | "python3" | "py3" => s("#", true, true, false),
        "sh" | "bash" | "shell" | "zsh" | "fish" | "yaml" | "yml" | "toml" | "ruby" | "rb"
        | "r" | "perl" | "pl" | "dockerfile" | "make" | "makefile" | "cmake" | "nix" | "elixir"
        | "julia" | "powershell" | "ps1" => s("#", true, false, false),
        "rust" | "rs" => s("//", false, false, false),
        "c" | "h" | "cpp" | "c++" | "cc" | "cxx" | "hpp" | "java" | "kotlin" | "kt" | "scala"
        | "swift" | "go" | "golang" | "js" | "javascript" | "jsx" | "mjs" | "ts" | "typescript"
        | "tsx" | "cs" | "csharp" | "dart" | "jsonc" | "json5" | "proto" | "protobuf"
        | "groovy" | "zig" => s("//", true, false, false),
        "sql" | "lua" | "haskell" | "hs" => s("--", true, false, false),
        "" | "text" | "txt" | "plain" | "plaintext" => s("#", false, false, true),
        _ => None,
    }
}

/// Tool directives that look like prose but must stay as written.
const DIRECTIVES: &[&str] = &[
    "!",
    "-*-",
    "noqa",
    "type:",
    "pragma",
    "pylint:",
    "fmt:",
    "isort:",
    "mypy:",
    "eslint",
    "@ts-",
    "prettier-",
    "nolint",
    "#",
    "region",
    "endregion",
    "SPDX-",
    "Copyright",
    "language=",
    "shellcheck",
    "cspell:",
    "codespell:",
];

/// Whether a comment's text reads as prose to translate: words, not code.
fn is_prose(text: &str) -> bool {
    let t = text.trim();
    if t.is_empty() || DIRECTIVES.iter().any(|d| t.starts_with(d)) {
        return false;
    }
    if t.contains(['=', '{', '}', ';', '[', ']', '<', '>', '$', '\\']) || t.contains("()") {
        return false;
    }
    let words: Vec<&str> = t
        .split_whitespace()
        .filter(|w| w.chars().filter(|c| c.is_alphabetic()).count() >= 2)
        .collect();
    match words.as_slice() {
        [] => false,
        [one] => {
            let core = one.trim_matches(|c: char| !c.is_alphanumeric());
            core.chars().count() >= 3 && core.chars().all(char::is_alphabetic)
        }
        _ => true,
    }
}

/// The part of a comment's prose the model translates: from its first letter or digit
/// (arrows, bullets and an opening quote stay as written) to its end, or to the closing quote
/// when it is quoted (`"Refund policy: …",` keeps its quotes and comma).
fn words(prose: &str) -> Range<usize> {
    let Some(start) = prose.find(|c: char| c.is_alphanumeric()) else {
        return 0..prose.len();
    };
    let lead = &prose[..start];
    if !lead
        .chars()
        .all(|c| c.is_whitespace() || "\"'“‘→←⇒-*•".contains(c))
    {
        return 0..prose.len();
    }
    let quote = lead.chars().next_back();
    let close = match quote {
        Some('"') => Some('"'),
        Some('\'') => Some('\''),
        Some('“') => Some('”'),
        _ => None,
    };
    let end = close
        .and_then(|q| prose.rfind(q))
        .filter(|&e| e > start)
        .unwrap_or(prose.len());
    start..prose[..end].trim_end().len()
}

/// Scanning state carried from one line to the next.
#[derive(Debug, Default)]
struct State {
    /// Inside a triple-quoted string opened by this quote.
    triple: Option<&'static str>,
}

/// The byte offset of the line comment's marker in `line`, if the line has one.
fn comment_start(line: &str, syn: Syntax, state: &mut State) -> Option<usize> {
    let b = line.as_bytes();
    let mut i = 0;
    if let Some(q) = state.triple {
        let end = line.find(q)?;
        state.triple = None;
        i = end + q.len();
    }
    let mut code_before = b[..i].iter().any(|c| !c.is_ascii_whitespace());
    while i < b.len() {
        let c = b[i];
        if syn.triple_quotes && (b[i..].starts_with(b"\"\"\"") || b[i..].starts_with(b"'''")) {
            let q = if c == b'"' { "\"\"\"" } else { "'''" };
            match line[i + 3..].find(q) {
                Some(e) => i += 3 + e + 3,
                None => {
                    state.triple = Some(q);
                    return None;
                }
            }
            code_before = true;
            continue;
        }
        if c == b'"' || c == b'`' || (c == b'\'' && syn.single_quotes) {
            // A string: to its closing quote on this line, or the line is all string.
            let mut j = i + 1;
            while j < b.len() && b[j] != c {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            if j >= b.len() {
                return None;
            }
            i = j + 1;
            code_before = true;
            continue;
        }
        if b[i..].starts_with(syn.marker.as_bytes()) {
            let after_space = i == 0 || b[i - 1] == b' ' || b[i - 1] == b'\t';
            let trailing_ok = !syn.trailing_only || (code_before && line[..i].ends_with("  "));
            if after_space && trailing_ok {
                return Some(i);
            }
        }
        if !c.is_ascii_whitespace() {
            code_before = true;
        }
        i += 1;
    }
    None
}

/// The fence's info string and the payload lines of a fenced block (`block` from its
/// opening fence to its closing one), with the payload's byte offset in `block`.
fn fenced(block: &str) -> Option<(&str, usize)> {
    let first_end = block.find('\n')?;
    let opening = block[..first_end].trim_start();
    let fence = opening.chars().next()?;
    if fence != '`' && fence != '~' {
        return None;
    }
    let info = opening.trim_start_matches(fence).trim();
    Some((info, first_end + 1))
}

/// The byte ranges, in `block` (a whole fenced code block, fences included), of the comment
/// text to translate: each a comment's prose after its marker and spaces, trailing spaces
/// excluded. Empty when the fence's language is not recognised or no comment is prose.
pub fn prose_ranges(block: &str) -> Vec<Range<usize>> {
    let Some((info, start)) = fenced(block) else {
        return Vec::new();
    };
    let Some(syn) = syntax(info) else {
        return Vec::new();
    };
    let mut state = State::default();
    let mut out = Vec::new();
    let mut pos = start;
    for line in block[start..].split_inclusive('\n') {
        let body = line.trim_end_matches(['\n', '\r']);
        let closing = {
            let t = body.trim();
            !t.is_empty() && (t.chars().all(|c| c == '`') || t.chars().all(|c| c == '~'))
        };
        if !closing {
            if let Some(m) = comment_start(body, syn, &mut state) {
                let after = m + syn.marker.len();
                let text = &body[after..];
                let lead = text.len() - text.trim_start().len();
                let prose = text.trim();
                if is_prose(prose) {
                    let inner = words(prose);
                    let from = pos + after + lead + inner.start;
                    out.push(from..from + inner.len());
                }
            }
        }
        pos += line.len();
    }
    out
}

/// Whether `translated` is `source` (both a fenced block's payload under the info string
/// `info`) with at most the prose comments that [`prose_ranges`] finds in the source changed:
/// `Err(line)` names the first line (from 0) whose code differs.
pub fn same_code(info: &str, source: &str, translated: &str) -> Result<(), usize> {
    let head = format!("```{info}\n");
    let ranges = prose_ranges(&format!("{head}{source}"));
    let mut ranges = ranges.iter().peekable();
    let sl: Vec<&str> = source.split_inclusive('\n').collect();
    let tl: Vec<&str> = translated.split_inclusive('\n').collect();
    let mut at = head.len();
    for (k, s) in sl.iter().enumerate() {
        let t = tl.get(k).ok_or(k)?;
        let end = at + s.len();
        let comment = ranges
            .next_if(|r| r.start >= at && r.end <= end)
            .map(|r| r.start - at);
        let ok = match comment {
            None => s == t,
            Some(c) => t.starts_with(&s[..c]) && !t[c..].trim().is_empty(),
        };
        if !ok {
            return Err(k);
        }
        at = end;
    }
    if tl.len() == sl.len() {
        Ok(())
    } else {
        Err(sl.len().min(tl.len()))
    }
}

/// The words of each prose comment of `source` (a fenced block's payload under `info`)
/// and what `translated` has in their place, for the lines whose code is unchanged: what
/// the checks read as prose.
pub fn comment_pairs(info: &str, source: &str, translated: &str) -> Vec<(String, String)> {
    let head = format!("```{info}\n");
    let ranges = prose_ranges(&format!("{head}{source}"));
    let mut ranges = ranges.iter().peekable();
    let (sl, tl): (Vec<&str>, Vec<&str>) = (
        source.split_inclusive('\n').collect(),
        translated.split_inclusive('\n').collect(),
    );
    let mut out = Vec::new();
    let mut at = head.len();
    for (k, s) in sl.iter().enumerate() {
        let end = at + s.len();
        let range = ranges.next_if(|r| r.start >= at && r.end <= end);
        if let (Some(r), Some(t)) = (range, tl.get(k)) {
            let (c, e) = (r.start - at, r.end - at);
            let tail = s.len() - e;
            if t.len() >= c + tail && t.starts_with(&s[..c]) && t.ends_with(&s[e..]) {
                out.push((s[c..e].to_string(), t[c..t.len() - tail].to_string()));
            }
        }
        at = end;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prose(block: &str) -> Vec<&str> {
        prose_ranges(block).into_iter().map(|r| &block[r]).collect()
    }

    #[test]
    fn python_comments_but_not_strings_code_or_directives() {
        let block = "```python\n# 1. User query\nquery = \"What is # this?\"  # the question\n# results = [\n#   \"Refund policy: full refunds within 7 days\",\n# ]\nx = 1  # noqa: E501\n\"\"\"Docstring\n# not a comment\n\"\"\"\n#!/not/a/shebang here\n```\n";
        assert_eq!(
            prose(block),
            [
                "1. User query",
                "the question",
                "Refund policy: full refunds within 7 days"
            ]
        );
    }

    #[test]
    fn slash_languages_skip_urls_in_strings_and_rust_lifetimes() {
        let block = "```rust\nfn f<'a>(s: &'a str) {} // borrows the text\nlet u = \"http://x.y\"; // a plain link\nlet v = a//b;\n```";
        assert_eq!(prose(block), ["borrows the text", "a plain link"]);
        let js = "```js\nconst s = 'it // is'; // single quotes are strings\n```";
        assert_eq!(prose(js), ["single quotes are strings"]);
    }

    #[test]
    fn arrows_and_quotes_stay_out_of_the_prose() {
        let block = "```python\nx = f()  # ← injected here\n# → \"You can ask.\"\n# 'single quoted'\n# (optional) the count\n```";
        assert_eq!(
            prose(block),
            [
                "injected here",
                "You can ask.",
                "single quoted",
                "(optional) the count"
            ]
        );
    }

    #[test]
    fn plain_fences_translate_only_trailing_comments() {
        let block = "```\nviking://\n├── resources/          # External knowledge: documents\n# apt install foo\nissue #12 is open\n```\n";
        assert_eq!(prose(block), ["External knowledge: documents"]);
    }

    #[test]
    fn unknown_languages_and_non_fences_have_none() {
        assert!(prose("```haskell-ish\n# Some words here\n```").is_empty());
        assert!(prose("    # indented code\n").is_empty());
        assert!(prose("```json\n{\"a\": 1}\n```").is_empty());
    }

    #[test]
    fn comments_pair_with_their_translations() {
        let src = "# Load the index\nindex = load()  # from disk\n# \"Wait 30 seconds\",\n";
        let zh = "# 加载索引\nindex = load()  # 从磁盘\n# \"等待 30 秒\",\n";
        let pairs = comment_pairs("python", src, zh);
        let want = [
            ("Load the index", "加载索引"),
            ("from disk", "从磁盘"),
            ("Wait 30 seconds", "等待 30 秒"),
        ];
        assert_eq!(pairs.len(), 3);
        for ((s, t), (ws, wt)) in pairs.iter().zip(want) {
            assert_eq!((s.as_str(), t.as_str()), (ws, wt));
        }
    }

    #[test]
    fn same_code_allows_only_the_prose_comments_to_change() {
        let src = "# Load the index\nindex = load()  # from disk\n# x = 1\n";
        assert_eq!(
            same_code(
                "python",
                src,
                "# 加载索引\nindex = load()  # 从磁盘\n# x = 1\n"
            ),
            Ok(())
        );
        assert_eq!(
            same_code(
                "python",
                src,
                "# 加载索引\nindex = load2()  # 从磁盘\n# x = 1\n"
            ),
            Err(1)
        );
        assert_eq!(
            same_code(
                "python",
                src,
                "# 加载索引\nindex = load()  # 从磁盘\n# x = 2\n"
            ),
            Err(2)
        );
        assert_eq!(same_code("python", src, "# 加载索引\n"), Err(1));
        assert_eq!(
            same_code("python", src, "# \nindex = load()  # 从磁盘\n# x = 1\n"),
            Err(0)
        );
    }
}
