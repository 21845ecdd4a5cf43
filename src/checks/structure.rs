//! Structural checks: what must survive translation exactly.

use super::align::{diff, Op};
use super::doc::{Doc, Item};
use super::{Category, CheckContext, Finding, Severity};
use crate::lang::punct::IDEOGRAPHIC_FULL_STOP;
use crate::units::{code_comments, PLACEHOLDER_RE};
use regex::Regex;
use std::collections::BTreeMap;
use std::sync::LazyLock;

/// At most this many findings per category and chapter; the rest are summarised.
const MAX_PER_CATEGORY: usize = 40;

pub(crate) fn check(s: &Doc, t: &Doc, ctx: &CheckContext, out: &mut Vec<Finding>) {
    let start = out.len();
    code_blocks(s, t, ctx, out);
    headings(s, t, ctx, out);
    targets(s, &s.links, t, &t.links, Category::Link, "link", ctx, out);
    targets(
        s,
        &s.images,
        t,
        &t.images,
        Category::Image,
        "image",
        ctx,
        out,
    );
    footnotes(s, t, ctx, out);
    tables(s, t, ctx, out);
    lists(s, t, ctx, out);
    multiset(
        s,
        &s.inline_code,
        t,
        &t.inline_code,
        Category::InlineCode,
        "inline code",
        "Copy the inline code from the source byte for byte (code is never translated).",
        ctx,
        out,
    );
    multiset(
        s,
        &s.urls,
        t,
        &t.urls,
        Category::Url,
        "URL",
        "Copy the URL from the source exactly.",
        ctx,
        out,
    );
    placeholders(s, t, ctx, out);
    cap(out, start, ctx);
}

fn cap(out: &mut Vec<Finding>, start: usize, ctx: &CheckContext) {
    let mut counts: BTreeMap<Category, usize> = BTreeMap::new();
    let mut dropped: BTreeMap<Category, (usize, Severity)> = BTreeMap::new();
    let mut kept = Vec::with_capacity(out.len() - start);
    for f in out.drain(start..) {
        let n = counts.entry(f.category).or_default();
        *n += 1;
        if *n <= MAX_PER_CATEGORY {
            kept.push(f);
        } else {
            let d = dropped.entry(f.category).or_insert((0, f.severity));
            d.0 += 1;
            d.1 = d.1.min(f.severity);
        }
    }
    out.extend(kept);
    for (c, (n, sev)) in dropped {
        out.push(ctx.finding(
            c,
            sev,
            None,
            None,
            format!("{n} more {c} findings not listed"),
            "Fix the listed ones and check again.",
        ));
    }
}

fn excerpt(s: &str, max: usize) -> String {
    let one: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if one.chars().count() <= max {
        one
    } else {
        let cut: String = one.chars().take(max).collect();
        format!("{cut}…")
    }
}

fn code_blocks(s: &Doc, t: &Doc, ctx: &CheckContext, out: &mut Vec<Finding>) {
    let a: Vec<(&str, &str)> = s
        .code_blocks
        .iter()
        .map(|c| (c.info.as_str(), c.payload.as_str()))
        .collect();
    let b: Vec<(&str, &str)> = t
        .code_blocks
        .iter()
        .map(|c| (c.info.as_str(), c.payload.as_str()))
        .collect();
    let action = "Restore the source code block byte for byte; only prose and the prose of comments are translated.";
    let count = count_note("code blocks", a.len(), b.len());
    for op in diff(&a, &b) {
        match op {
            Op::Same(..) => {}
            Op::Changed(i, j) => {
                let (sc, tc) = (&s.code_blocks[i], &t.code_blocks[j]);
                if sc.info == tc.info
                    && code_comments::same_code(&sc.info, &sc.payload, &tc.payload).is_ok()
                {
                    // Only the prose of its comments was translated.
                    continue;
                }
                let what = if sc.info != tc.info {
                    format!("info string `{}` became `{}`", sc.info, tc.info)
                } else {
                    let sl: Vec<&str> = sc.payload.lines().collect();
                    let tl: Vec<&str> = tc.payload.lines().collect();
                    let k = sl
                        .iter()
                        .zip(&tl)
                        .position(|(x, y)| x != y)
                        .unwrap_or(sl.len().min(tl.len()));
                    if k < sl.len() && k < tl.len() {
                        format!(
                            "first difference at code line {}: {:?} became {:?}",
                            k + 1,
                            excerpt(sl[k], 60),
                            excerpt(tl[k], 60)
                        )
                    } else {
                        format!("{} lines became {}", sl.len(), tl.len())
                    }
                };
                out.push(ctx.finding(
                    Category::CodeBlock,
                    Severity::Error,
                    Some(t.line(tc.offset)),
                    Some(s.line(sc.offset)),
                    format!("code block altered: {what}{count}"),
                    action,
                ));
            }
            Op::Del(i) => {
                let sc = &s.code_blocks[i];
                out.push(ctx.finding(
                    Category::CodeBlock,
                    Severity::Error,
                    None,
                    Some(s.line(sc.offset)),
                    format!(
                        "code block missing from the translation: ```{} {}{count}",
                        sc.info,
                        excerpt(&sc.payload, 50)
                    ),
                    action,
                ));
            }
            Op::Ins(j) => {
                let tc = &t.code_blocks[j];
                out.push(ctx.finding(
                    Category::CodeBlock,
                    Severity::Error,
                    Some(t.line(tc.offset)),
                    None,
                    format!(
                        "code block not in the source: ```{} {}{count}",
                        tc.info,
                        excerpt(&tc.payload, 50)
                    ),
                    "Remove the added code block.",
                ));
            }
        }
    }
}

/// " (source has N WHAT, translation M)" when the counts differ, else nothing.
fn count_note(what: &str, source: usize, target: usize) -> String {
    if source == target {
        String::new()
    } else {
        format!(" (source has {source} {what}, translation {target})")
    }
}

fn headings(s: &Doc, t: &Doc, ctx: &CheckContext, out: &mut Vec<Finding>) {
    let a: Vec<u8> = s.headings.iter().map(|h| h.level).collect();
    let b: Vec<u8> = t.headings.iter().map(|h| h.level).collect();
    let count = count_note("headings", a.len(), b.len());
    for op in diff(&a, &b) {
        match op {
            Op::Same(i, j) => {
                let (sh, th) = (&s.headings[i], &t.headings[j]);
                if th.text.trim().is_empty() && !sh.text.trim().is_empty() {
                    out.push(ctx.finding(
                        Category::Heading,
                        Severity::Error,
                        Some(t.line(th.offset)),
                        Some(s.line(sh.offset)),
                        format!(
                            "heading lost its text: h{} {:?} became empty",
                            sh.level,
                            excerpt(&sh.text, 60)
                        ),
                        "Translate the heading's text.",
                    ));
                }
            }
            Op::Changed(i, j) => {
                let (sh, th) = (&s.headings[i], &t.headings[j]);
                out.push(ctx.finding(
                    Category::Heading,
                    Severity::Error,
                    Some(t.line(th.offset)),
                    Some(s.line(sh.offset)),
                    format!(
                        "heading level changed: h{} {:?} became h{} {:?}{count}",
                        sh.level,
                        excerpt(&sh.text, 40),
                        th.level,
                        excerpt(&th.text, 40)
                    ),
                    "Use the source heading's level.",
                ));
            }
            Op::Del(i) => {
                let sh = &s.headings[i];
                out.push(ctx.finding(
                    Category::Heading,
                    Severity::Error,
                    None,
                    Some(s.line(sh.offset)),
                    format!(
                        "heading missing from the translation: h{} {:?}{count}",
                        sh.level,
                        excerpt(&sh.text, 60)
                    ),
                    "Translate the heading and keep it at its level.",
                ));
            }
            Op::Ins(j) => {
                let th = &t.headings[j];
                out.push(ctx.finding(
                    Category::Heading,
                    Severity::Error,
                    Some(t.line(th.offset)),
                    None,
                    format!(
                        "heading not in the source: h{} {:?}{count}",
                        th.level,
                        excerpt(&th.text, 60)
                    ),
                    "Remove the added heading (or restore the Markdown it came from).",
                ));
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn targets(
    s: &Doc,
    a: &[Item],
    t: &Doc,
    b: &[Item],
    cat: Category,
    what: &str,
    ctx: &CheckContext,
    out: &mut Vec<Finding>,
) {
    let ka: Vec<&str> = a.iter().map(|x| x.value.as_str()).collect();
    let kb: Vec<&str> = b.iter().map(|x| x.value.as_str()).collect();
    let ops = diff(&ka, &kb);
    // A target deleted in one place and inserted in another was moved.
    let mut del_pool: BTreeMap<&str, usize> = BTreeMap::new();
    let mut ins_pool: BTreeMap<&str, usize> = BTreeMap::new();
    for op in &ops {
        match *op {
            Op::Del(i) | Op::Changed(i, _) => *del_pool.entry(ka[i]).or_default() += 1,
            _ => {}
        }
        match *op {
            Op::Ins(j) | Op::Changed(_, j) => *ins_pool.entry(kb[j]).or_default() += 1,
            _ => {}
        }
    }
    let mut moved: BTreeMap<&str, usize> = BTreeMap::new();
    for (k, &d) in &del_pool {
        if let Some(&i) = ins_pool.get(k) {
            moved.insert(k, d.min(i));
        }
    }
    let mut moved_del = moved.clone();
    let mut moved_ins = moved;
    let take = |pool: &mut BTreeMap<&str, usize>, k: &str| -> bool {
        match pool.get_mut(k) {
            Some(n) if *n > 0 => {
                *n -= 1;
                true
            }
            _ => false,
        }
    };
    let mut reported_moves = 0;
    for op in ops {
        let (del, ins) = match op {
            Op::Same(..) => (None, None),
            Op::Changed(i, j) => (Some(i), Some(j)),
            Op::Del(i) => (Some(i), None),
            Op::Ins(j) => (None, Some(j)),
        };
        let del = del.filter(|&i| {
            if take(&mut moved_del, ka[i]) {
                reported_moves += 1;
                false
            } else {
                true
            }
        });
        let ins = ins.filter(|&j| !take(&mut moved_ins, kb[j]));
        match (del, ins) {
            (Some(i), Some(j)) => out.push(ctx.finding(
                cat,
                Severity::Error,
                Some(t.line(b[j].offset)),
                Some(s.line(a[i].offset)),
                format!("{what} target changed: {:?} became {:?}", ka[i], kb[j]),
                "Keep the source link target exactly; translate only the link text.",
            )),
            (Some(i), None) => out.push(ctx.finding(
                cat,
                Severity::Error,
                None,
                Some(s.line(a[i].offset)),
                format!("{what} missing from the translation: {:?}", ka[i]),
                "Restore the link with its source target.",
            )),
            (None, Some(j)) => out.push(ctx.finding(
                cat,
                Severity::Warning,
                Some(t.line(b[j].offset)),
                None,
                format!("{what} not in the source: {:?}", kb[j]),
                "Remove the added link unless it is intended.",
            )),
            (None, None) => {}
        }
    }
    if reported_moves > 0 {
        out.push(ctx.finding(
            cat,
            Severity::Info,
            None,
            None,
            format!("{reported_moves} {what} target(s) appear in a different order than in the source"),
            "Usually fine (sentence order changed); check that each link still sits on the right words.",
        ));
    }
}

fn footnotes(s: &Doc, t: &Doc, ctx: &CheckContext, out: &mut Vec<Finding>) {
    let count = |v: &[Item]| {
        let mut m: BTreeMap<String, (usize, usize)> = BTreeMap::new();
        for x in v {
            let e = m.entry(x.value.clone()).or_insert((0, x.offset));
            e.0 += 1;
        }
        m
    };
    let sr = count(&s.footnote_refs);
    let tr = count(&t.footnote_refs);
    let sd = count(&s.footnote_defs);
    let td = count(&t.footnote_defs);
    let su = count(&s.unresolved_footnotes);
    let tu = count(&t.unresolved_footnotes);
    let act = "Keep each footnote reference [^x] exactly where the source has it, once per source occurrence.";
    for (label, &(n, off)) in &sr {
        let m = tr.get(label).map(|x| x.0).unwrap_or(0);
        if m < n {
            out.push(ctx.finding(
                Category::Footnote,
                Severity::Error,
                None,
                Some(s.line(off)),
                format!("footnote reference [^{label}] appears {n} time(s) in the source, {m} in the translation"),
                act,
            ));
        }
    }
    for (label, &(m, off)) in &tr {
        let n = sr.get(label).map(|x| x.0).unwrap_or(0);
        if m > n {
            out.push(ctx.finding(
                Category::Footnote,
                Severity::Error,
                Some(t.line(off)),
                None,
                if n == 0 {
                    format!("footnote reference [^{label}] is not in the source")
                } else {
                    format!("footnote reference [^{label}] duplicated: {m} time(s) in the translation, {n} in the source")
                },
                act,
            ));
        }
    }
    for (label, &(n, off)) in &sd {
        let m = td.get(label).map(|x| x.0).unwrap_or(0);
        if m < n {
            out.push(ctx.finding(
                Category::Footnote,
                Severity::Error,
                None,
                Some(s.line(off)),
                format!("footnote definition [^{label}]: missing from the translation"),
                "Translate the footnote definition and keep its [^label]: prefix.",
            ));
        }
    }
    for (label, &(m, off)) in &td {
        let n = sd.get(label).map(|x| x.0).unwrap_or(0);
        if m > n {
            out.push(ctx.finding(
                Category::Footnote,
                Severity::Error,
                Some(t.line(off)),
                None,
                format!("footnote definition [^{label}] is not in the source (or is duplicated)"),
                "Remove the extra footnote definition.",
            ));
        }
    }
    for (label, &(m, off)) in &tu {
        let n = su.get(label).map(|x| x.0).unwrap_or(0);
        if m > n {
            out.push(ctx.finding(
                Category::Footnote,
                Severity::Error,
                Some(t.line(off)),
                None,
                format!("footnote reference [^{label}] is not linked to any definition (shown as plain text)"),
                "Use the exact source label so the reference resolves.",
            ));
        }
    }
}

fn tables(s: &Doc, t: &Doc, ctx: &CheckContext, out: &mut Vec<Finding>) {
    let a: Vec<(usize, usize)> = s.tables.iter().map(|x| (x.rows, x.cols)).collect();
    let b: Vec<(usize, usize)> = t.tables.iter().map(|x| (x.rows, x.cols)).collect();
    for op in diff(&a, &b) {
        match op {
            Op::Same(i, j) => emptied_cells(s, i, t, j, ctx, out),
            Op::Changed(i, j) => out.push(ctx.finding(
                Category::Table,
                Severity::Error,
                Some(t.line(t.tables[j].offset)),
                Some(s.line(s.tables[i].offset)),
                format!(
                    "table shape changed: {}×{} (rows×columns, header included) became {}×{}",
                    a[i].0, a[i].1, b[j].0, b[j].1
                ),
                "Keep every row and column of the source table.",
            )),
            Op::Del(i) => out.push(ctx.finding(
                Category::Table,
                Severity::Error,
                None,
                Some(s.line(s.tables[i].offset)),
                format!("table ({}×{}) missing from the translation", a[i].0, a[i].1),
                "Restore the table (check the delimiter row |---| and pipes).",
            )),
            Op::Ins(j) => out.push(ctx.finding(
                Category::Table,
                Severity::Error,
                Some(t.line(t.tables[j].offset)),
                None,
                format!("table ({}×{}) not in the source", b[j].0, b[j].1),
                "Remove the added table.",
            )),
        }
    }
}

/// Whether `translation` of `source` (a table cell, a heading, any short piece) lost its
/// content: the source has words (three letters or digits or more) and the translation has
/// none, or is a bare "none" (`无`, `N/A`), or only punctuation (`-`, `…`) — unless the source
/// was that already.
pub fn hollow(source: &str, translation: &str) -> bool {
    let trim = |x: &str| {
        x.trim()
            .trim_end_matches([IDEOGRAPHIC_FULL_STOP, '.'])
            .to_string()
    };
    let (a, b) = (trim(source), trim(translation));
    let words = a.chars().filter(|c| c.is_alphanumeric()).count();
    let nothing = b.chars().filter(|c| c.is_alphanumeric()).count() == 0
        || crate::lang::NONE_WORDS.contains(&b.as_str());
    words >= 3 && nothing && a != b
}

/// Cells of a table of the same shape whose content the translation dropped: a source
/// cell with words became empty or a bare "none" ([`hollow`]).
fn emptied_cells(s: &Doc, i: usize, t: &Doc, j: usize, ctx: &CheckContext, out: &mut Vec<Finding>) {
    let (st, tt) = (&s.tables[i], &t.tables[j]);
    let cols = st.cols.max(1);
    for (k, (a, b)) in st.cells.iter().zip(&tt.cells).enumerate() {
        let b = b.trim().trim_end_matches([IDEOGRAPHIC_FULL_STOP, '.']);
        if hollow(a, b) {
            out.push(ctx.finding(
                Category::Table,
                Severity::Error,
                Some(t.line(tt.offset)),
                Some(s.line(st.offset)),
                format!(
                    "table cell (row {}, column {}) lost its content: {:?} became {:?}",
                    k / cols + 1,
                    k % cols + 1,
                    excerpt(a.trim(), 60),
                    b
                ),
                "Translate the cell's content; never replace it with a placeholder word.",
            ));
        }
    }
}

fn lists(s: &Doc, t: &Doc, ctx: &CheckContext, out: &mut Vec<Finding>) {
    // Lists are recorded when they end, so nested lists come first; order by position.
    let mut sl = s.lists.clone();
    let mut tl = t.lists.clone();
    sl.sort_by_key(|l| l.offset);
    tl.sort_by_key(|l| l.offset);
    let a: Vec<(bool, usize)> = sl.iter().map(|l| (l.ordered, l.items)).collect();
    let b: Vec<(bool, usize)> = tl.iter().map(|l| (l.ordered, l.items)).collect();
    let kind = |o: bool| if o { "ordered" } else { "bulleted" };
    for op in diff(&a, &b) {
        match op {
            Op::Same(..) => {}
            Op::Changed(i, j) => out.push(ctx.finding(
                Category::List,
                Severity::Error,
                Some(t.line(tl[j].offset)),
                Some(s.line(sl[i].offset)),
                format!(
                    "{} list of {} items became {} list of {} items",
                    kind(a[i].0),
                    a[i].1,
                    kind(b[j].0),
                    b[j].1
                ),
                "Keep one translated item per source item, with the source list markers.",
            )),
            Op::Del(i) => out.push(ctx.finding(
                Category::List,
                Severity::Error,
                None,
                Some(s.line(sl[i].offset)),
                format!(
                    "{} list of {} items missing from the translation",
                    kind(a[i].0),
                    a[i].1
                ),
                "Restore the list markers (a blank line before the list may be needed).",
            )),
            Op::Ins(j) => out.push(ctx.finding(
                Category::List,
                Severity::Warning,
                Some(t.line(tl[j].offset)),
                None,
                format!(
                    "{} list of {} items not in the source",
                    kind(b[j].0),
                    b[j].1
                ),
                "Check that no paragraph was turned into a list.",
            )),
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn multiset(
    s: &Doc,
    a: &[Item],
    t: &Doc,
    b: &[Item],
    cat: Category,
    what: &str,
    action: &str,
    ctx: &CheckContext,
    out: &mut Vec<Finding>,
) {
    let mut sa: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for x in a {
        sa.entry(x.value.as_str()).or_default().push(x.offset);
    }
    let mut tb: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for x in b {
        tb.entry(x.value.as_str()).or_default().push(x.offset);
    }
    let mut missing: Vec<(usize, &str, usize, usize)> = Vec::new();
    for (k, offs) in &sa {
        let m = tb.get(k).map(Vec::len).unwrap_or(0);
        if m < offs.len() {
            missing.push((offs[m], k, offs.len(), m));
        }
    }
    missing.sort();
    for (off, k, n, m) in missing {
        out.push(ctx.finding(
            cat,
            Severity::Error,
            None,
            Some(s.line(off)),
            format!(
                "{what} {:?} appears {n} time(s) in the source, {m} in the translation",
                excerpt(k, 80)
            ),
            action,
        ));
    }
    let mut extra: Vec<(usize, &str)> = Vec::new();
    for (k, offs) in &tb {
        let n = sa.get(k).map(Vec::len).unwrap_or(0);
        if offs.len() > n {
            extra.push((offs[n], k));
        }
    }
    extra.sort();
    for (off, k) in extra {
        out.push(ctx.finding(
            cat,
            Severity::Warning,
            Some(t.line(off)),
            None,
            format!("{what} {:?} is not in the source", excerpt(k, 80)),
            "Check whether it replaced a source item (altered) or was added.",
        ));
    }
}

/// Placeholder forms of Quire and of other tools that leak into translations.
static LEAK_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?x)
        __[A-Z]{1,12}_?[0-9]{1,4}__
        | ⟦[^⟧\n]{0,16}⟧
        | \[\[[A-Z_]{1,16}[0-9]{0,4}\]\]
        | \b(?:PLACEHOLDER|PH|PROTECTED|TOKEN|CODE|URL)_[0-9]{1,4}\b
        | <x[0-9]{1,4}\s*/>
        | @@[0-9]{1,4}@@",
    )
    .expect("valid leak regex")
});

fn placeholders(s: &Doc, t: &Doc, ctx: &CheckContext, out: &mut Vec<Finding>) {
    let collect = |d: &Doc| {
        let mut m: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for run in &d.text_runs {
            for mt in PLACEHOLDER_RE
                .find_iter(&run.value)
                .chain(LEAK_RE.find_iter(&run.value))
            {
                m.entry(mt.as_str().to_string())
                    .or_default()
                    .push(run.offset + mt.start());
            }
        }
        m
    };
    let sm = collect(s);
    let tm = collect(t);
    for (k, offs) in &tm {
        let n = sm.get(k).map(Vec::len).unwrap_or(0);
        if offs.len() > n {
            out.push(ctx.finding(
                Category::Placeholder,
                Severity::Error,
                Some(t.line(offs[n])),
                None,
                format!(
                    "placeholder {k:?} leaked into the translation ({} time(s), {n} in the source)",
                    offs.len()
                ),
                "Restore the original text the placeholder stood for (re-translate the unit).",
            ));
        }
    }
}
