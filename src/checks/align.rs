//! Aligning source and translation: sections by heading levels, then paragraphs 1:1 when
//! a section has as many prose blocks on both sides. Also the sequence diff used by the
//! structural checks.

use super::doc::{BlockKind, Doc};
use crate::units::code_comments;

/// An aligned stretch of prose: source and translation text with their first lines.
#[derive(Debug, Clone)]
pub(crate) struct Segment {
    pub src: String,
    pub tgt: String,
    pub src_line: Option<usize>,
    pub tgt_line: Option<usize>,
    /// Paired block to block (strong evidence) rather than section to section.
    pub fine: bool,
    /// The unit the segment is, for unit-level checks.
    pub unit: Option<String>,
    /// Bold spans in the source's and the translation's blocks.
    pub bold: (usize, usize),
}

/// A diff operation between two sequences.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Same(usize, usize),
    Changed(usize, usize),
    Del(usize),
    Ins(usize),
}

/// Longest-common-subsequence diff; unmatched elements between two matches are paired
/// as `Changed` in order, the rest are `Del`/`Ins`. Very long inputs are compared by
/// position.
pub(crate) fn diff<T: PartialEq>(a: &[T], b: &[T]) -> Vec<Op> {
    let (n, m) = (a.len(), b.len());
    let mut raw: Vec<Op> = Vec::with_capacity(n.max(m));
    if n.saturating_mul(m) > 4_000_000 {
        for i in 0..n.max(m) {
            raw.push(match (i < n, i < m) {
                (true, true) if a[i] == b[i] => Op::Same(i, i),
                (true, true) => Op::Changed(i, i),
                (true, false) => Op::Del(i),
                _ => Op::Ins(i),
            });
        }
        return raw;
    }
    // dp[i][j] = LCS of a[i..], b[j..]
    let w = m + 1;
    let mut dp = vec![0u32; (n + 1) * w];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            dp[i * w + j] = if a[i] == b[j] {
                dp[(i + 1) * w + j + 1] + 1
            } else {
                dp[(i + 1) * w + j].max(dp[i * w + j + 1])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    while i < n && j < m {
        if a[i] == b[j] {
            raw.push(Op::Same(i, j));
            i += 1;
            j += 1;
        } else if dp[(i + 1) * w + j] >= dp[i * w + j + 1] {
            raw.push(Op::Del(i));
            i += 1;
        } else {
            raw.push(Op::Ins(j));
            j += 1;
        }
    }
    raw.extend((i..n).map(Op::Del));
    raw.extend((j..m).map(Op::Ins));
    // Pair deletions and insertions between matches.
    let mut out = Vec::with_capacity(raw.len());
    let mut dels = Vec::new();
    let mut inss = Vec::new();
    let flush = |out: &mut Vec<Op>, dels: &mut Vec<usize>, inss: &mut Vec<usize>| {
        let k = dels.len().min(inss.len());
        for x in 0..k {
            out.push(Op::Changed(dels[x], inss[x]));
        }
        out.extend(dels[k..].iter().map(|&d| Op::Del(d)));
        out.extend(inss[k..].iter().map(|&d| Op::Ins(d)));
        dels.clear();
        inss.clear();
    };
    for op in raw {
        match op {
            Op::Del(d) => dels.push(d),
            Op::Ins(d) => inss.push(d),
            other => {
                flush(&mut out, &mut dels, &mut inss);
                out.push(other);
            }
        }
    }
    flush(&mut out, &mut dels, &mut inss);
    out
}

struct Section {
    key: u8,
    blocks: Vec<usize>,
}

fn sections(doc: &Doc) -> Vec<Section> {
    let mut out: Vec<Section> = Vec::new();
    for (i, b) in doc.blocks.iter().enumerate() {
        match b.kind {
            BlockKind::Heading(l) => out.push(Section {
                key: l,
                blocks: vec![i],
            }),
            _ => match out.last_mut() {
                Some(s) => s.blocks.push(i),
                None => out.push(Section {
                    key: 0,
                    blocks: vec![i],
                }),
            },
        }
    }
    out
}

fn prose_blocks(doc: &Doc, blocks: &[usize]) -> Vec<usize> {
    blocks
        .iter()
        .copied()
        .filter(|&i| {
            let b = &doc.blocks[i];
            b.kind != BlockKind::Other && b.footnote.is_none() && !b.prose.trim().is_empty()
        })
        .collect()
}

fn join(doc: &Doc, blocks: &[usize]) -> String {
    let mut s = String::new();
    for &i in blocks {
        if !s.is_empty() {
            s.push('\n');
        }
        s.push_str(doc.blocks[i].prose.trim());
    }
    s
}

fn bold(doc: &Doc, blocks: &[usize]) -> usize {
    blocks.iter().map(|&i| doc.blocks[i].bold).sum()
}

fn first_line(doc: &Doc, blocks: &[usize]) -> Option<usize> {
    blocks.first().map(|&i| doc.line(doc.blocks[i].range.start))
}

/// Aligned segments of two documents.
pub(crate) fn segments(src: &Doc, tgt: &Doc) -> Vec<Segment> {
    let ss = sections(src);
    let ts = sections(tgt);
    let sk: Vec<u8> = ss.iter().map(|s| s.key).collect();
    let tk: Vec<u8> = ts.iter().map(|s| s.key).collect();
    let matches: Vec<(usize, usize)> = diff(&sk, &tk)
        .into_iter()
        .filter_map(|op| match op {
            Op::Same(i, j) => Some((i, j)),
            _ => None,
        })
        .collect();
    // Groups of sections: each match with the unmatched sections that follow it.
    let mut groups: Vec<(std::ops::Range<usize>, std::ops::Range<usize>)> = Vec::new();
    let first = matches.first().copied().unwrap_or((ss.len(), ts.len()));
    if first.0 > 0 || first.1 > 0 {
        groups.push((0..first.0, 0..first.1));
    }
    for (k, &(i, j)) in matches.iter().enumerate() {
        let (ni, nj) = matches.get(k + 1).copied().unwrap_or((ss.len(), ts.len()));
        groups.push((i..ni, j..nj));
    }
    let mut out = Vec::new();
    for (sr, tr) in groups {
        let sb: Vec<usize> = ss[sr.clone()]
            .iter()
            .flat_map(|s| s.blocks.clone())
            .collect();
        let tb: Vec<usize> = ts[tr.clone()]
            .iter()
            .flat_map(|s| s.blocks.clone())
            .collect();
        let sp = prose_blocks(src, &sb);
        let tp = prose_blocks(tgt, &tb);
        for (a, b) in align_blocks(src, &sp, tgt, &tp) {
            let fine = !a.is_empty() && !b.is_empty();
            out.push(Segment {
                src: join(src, &a),
                tgt: join(tgt, &b),
                src_line: first_line(src, &a),
                tgt_line: first_line(tgt, &b),
                fine,
                unit: None,
                bold: (bold(src, &a), bold(tgt, &b)),
            });
        }
    }
    // Footnote definitions pair by label (the footnote check reports unpaired ones).
    for (i, b) in src.blocks.iter().enumerate() {
        let Some(label) = &b.footnote else { continue };
        if let Some(j) = tgt
            .blocks
            .iter()
            .position(|t| t.footnote.as_ref() == Some(label))
        {
            out.push(Segment {
                src: join(src, &[i]),
                tgt: join(tgt, &[j]),
                src_line: first_line(src, &[i]),
                tgt_line: first_line(tgt, &[j]),
                fine: true,
                unit: None,
                bold: (bold(src, &[i]), bold(tgt, &[j])),
            });
        }
    }
    out
}

/// Per-block features for alignment.
struct Feat {
    len: f64,
    lower: String,
    anchors: Vec<String>,
    numbers: Vec<f64>,
    values: Vec<f64>,
}

fn features(doc: &Doc, i: usize) -> Feat {
    let text = &doc.blocks[i].prose;
    let mut anchors: Vec<String> = Vec::new();
    for w in text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-')) {
        let w = w.trim_matches('-');
        let has_upper = w.chars().skip(1).any(|c| c.is_ascii_uppercase())
            || (w.len() >= 3 && w.starts_with(|c: char| c.is_ascii_uppercase()));
        if w.len() >= 2 && has_upper {
            let l = w.to_ascii_lowercase();
            if !anchors.contains(&l) {
                anchors.push(l);
            }
        }
    }
    Feat {
        len: super::lang::visible_len(text) as f64,
        lower: text.to_lowercase(),
        anchors,
        numbers: super::numbers::source_numbers(text)
            .iter()
            .map(|n| n.value)
            .collect(),
        values: super::numbers::target_values(text),
    }
}

/// Align prose blocks with a banded dynamic programme over 1:1, 2:1, 1:2, 1:0 and 0:1
/// steps, scoring length agreement and shared anchors (numbers, Latin names, acronyms).
/// Returns groups of source and target block indices; an empty side means unmatched.
fn align_blocks(src: &Doc, sp: &[usize], tgt: &Doc, tp: &[usize]) -> Vec<(Vec<usize>, Vec<usize>)> {
    let (n, m) = (sp.len(), tp.len());
    if n == 0 || m == 0 {
        if n == 0 && m == 0 {
            return Vec::new();
        }
        return vec![(sp.to_vec(), tp.to_vec())];
    }
    let sf: Vec<Feat> = sp.iter().map(|&i| features(src, i)).collect();
    let tf: Vec<Feat> = tp.iter().map(|&i| features(tgt, i)).collect();
    let ratio = (tf.iter().map(|f| f.len).sum::<f64>() + 1.0)
        / (sf.iter().map(|f| f.len).sum::<f64>() + 1.0);
    let cost = |si: &[usize], ti: &[usize]| -> f64 {
        let sl: f64 = si.iter().map(|&i| sf[i].len).sum();
        let tl: f64 = ti.iter().map(|&j| tf[j].len).sum();
        let len_cost = (((tl + 4.0) / ((sl + 4.0) * ratio)).ln()).abs();
        let (mut total, mut hit) = (0usize, 0usize);
        for &i in si {
            for a in &sf[i].anchors {
                total += 1;
                if ti.iter().any(|&j| tf[j].lower.contains(a.as_str())) {
                    hit += 1;
                }
            }
            for &v in &sf[i].numbers {
                total += 1;
                if ti.iter().any(|&j| {
                    tf[j]
                        .values
                        .iter()
                        .any(|&w| super::numbers::same_value(v, w))
                }) {
                    hit += 1;
                }
            }
        }
        let anchor_cost = if total == 0 {
            0.0
        } else {
            2.0 * (1.0 - hit as f64 / total as f64)
        };
        len_cost + anchor_cost
    };
    const SKIP: f64 = 2.5;
    const MERGE: f64 = 1.2;
    let band = 25 + n.abs_diff(m);
    let inf = f64::INFINITY;
    let w = m + 1;
    let mut dp = vec![inf; (n + 1) * w];
    let mut back = vec![(0u8, 0u8); (n + 1) * w];
    dp[0] = 0.0;
    for i in 0..=n {
        let center = i * m / n.max(1);
        let lo = center.saturating_sub(band);
        let hi = (center + band).min(m);
        for j in lo..=hi {
            let here = dp[i * w + j];
            if here == inf {
                continue;
            }
            let steps: [(usize, usize, f64); 5] = [
                (1, 1, 0.0),
                (1, 0, SKIP),
                (0, 1, SKIP),
                (2, 1, MERGE),
                (1, 2, MERGE),
            ];
            for (di, dj, extra) in steps {
                let (ni, nj) = (i + di, j + dj);
                if ni > n || nj > m {
                    continue;
                }
                let c = if di == 0 || dj == 0 {
                    extra
                } else {
                    let si: Vec<usize> = (i..ni).collect();
                    let ti: Vec<usize> = (j..nj).collect();
                    cost(&si, &ti) + extra
                };
                let k = ni * w + nj;
                if here + c < dp[k] {
                    dp[k] = here + c;
                    back[k] = (di as u8, dj as u8);
                }
            }
        }
    }
    if dp[n * w + m] == inf {
        return vec![(sp.to_vec(), tp.to_vec())];
    }
    let mut groups = Vec::new();
    let (mut i, mut j) = (n, m);
    while i > 0 || j > 0 {
        let (di, dj) = back[i * w + j];
        let (di, dj) = (di as usize, dj as usize);
        if di == 0 && dj == 0 {
            break;
        }
        groups.push((sp[i - di..i].to_vec(), tp[j - dj..j].to_vec()));
        i -= di;
        j -= dj;
    }
    groups.reverse();
    groups
}

/// One segment covering two whole texts (a unit and its translation).
pub(crate) fn whole(src: &Doc, tgt: &Doc) -> Segment {
    let sb: Vec<usize> = (0..src.blocks.len()).collect();
    let tb: Vec<usize> = (0..tgt.blocks.len()).collect();
    let sp = prose_blocks(src, &sb);
    let (mut s, mut t) = (join(src, &sp), join(tgt, &prose_blocks(tgt, &tb)));
    // The translated comments of code blocks are prose too.
    if src.code_blocks.len() == tgt.code_blocks.len() {
        for (a, b) in src.code_blocks.iter().zip(&tgt.code_blocks) {
            if a.info != b.info || a.payload == b.payload {
                continue;
            }
            for (x, y) in code_comments::comment_pairs(&a.info, &a.payload, &b.payload) {
                for (out, text) in [(&mut s, x), (&mut t, y)] {
                    if !out.is_empty() {
                        out.push('\n');
                    }
                    out.push_str(&text);
                }
            }
        }
    }
    Segment {
        src: s,
        tgt: t,
        src_line: None,
        tgt_line: None,
        fine: true,
        unit: None,
        bold: (bold(src, &sb), bold(tgt, &tb)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diff_pairs_changes() {
        let ops = diff(&[1, 2, 3, 4], &[1, 9, 3, 4, 5]);
        assert_eq!(
            ops,
            vec![
                Op::Same(0, 0),
                Op::Changed(1, 1),
                Op::Same(2, 2),
                Op::Same(3, 3),
                Op::Ins(4)
            ]
        );
    }
}
