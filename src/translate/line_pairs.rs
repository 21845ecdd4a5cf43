//! The line pairs of a translated book: each source line of a unit beside the same line
//! of its translation, for the stages that repair a translation line by line once every
//! unit is done (kept words, emphasis). Only units the model translated whose translation
//! has as many lines as their source take part; a unit kept verbatim, not translated, or
//! whose lines do not correspond is left out.

use crate::units::{Unit, UnitKind};
use std::collections::BTreeMap;

/// One source line and the same line of its translation.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct LinePair {
    /// Chapter and unit index of the unit the line belongs to.
    pub unit: (usize, usize),
    /// The line's index in the unit's trimmed text.
    pub line: usize,
    /// The source line.
    pub source: String,
    /// The translation's line.
    pub text: String,
}

/// Every line pair of `units` and their `texts` (each unit's translation, `None` where not
/// translated), in book order.
pub(super) fn line_pairs(units: &[Vec<Unit>], texts: &[Vec<Option<String>>]) -> Vec<LinePair> {
    let mut pairs = Vec::new();
    for (ci, chapter) in units.iter().enumerate() {
        for (ui, unit) in chapter.iter().enumerate() {
            let Some(text) = texts[ci][ui].as_ref() else {
                continue;
            };
            let src: Vec<&str> = unit.source.trim().lines().collect();
            let tgt: Vec<&str> = text.trim().split('\n').collect();
            if unit.kind != UnitKind::Translate || src.len() != tgt.len() {
                continue;
            }
            for (line, (s, t)) in src.into_iter().zip(tgt).enumerate() {
                pairs.push(LinePair {
                    unit: (ci, ui),
                    line,
                    source: s.to_string(),
                    text: t.to_string(),
                });
            }
        }
    }
    pairs
}

/// Write repaired lines back into `texts`: for each unit (chapter and unit index), its
/// changed lines as (line index in the trimmed text, new line), the text's leading and
/// trailing whitespace kept.
pub(super) fn set_lines(
    texts: &mut [Vec<Option<String>>],
    changed: BTreeMap<(usize, usize), Vec<(usize, String)>>,
) {
    for ((ci, ui), lines) in changed {
        let Some(old) = texts[ci][ui].as_ref() else {
            continue;
        };
        let lead = &old[..old.len() - old.trim_start().len()];
        let tail = &old[old.trim_end().len()..];
        let mut body: Vec<String> = old.trim().split('\n').map(str::to_string).collect();
        for (i, t) in lines {
            body[i] = t;
        }
        texts[ci][ui] = Some(format!("{lead}{}{tail}", body.join("\n")));
    }
}

/// The units of a one-chapter book of `text` (for the tests of the stages over line pairs).
#[cfg(test)]
pub(super) fn test_units(text: &str) -> Vec<Unit> {
    let ch = crate::book::Chapter {
        rel_path: "c.md".into(),
        text: text.to_string(),
    };
    crate::units::segment_chapter(&ch, 10_000, &crate::units::EstimateTokens).unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_units_whose_lines_correspond_take_part() {
        let chapter = test_units;
        // Lines that correspond, one line short, and a code block kept verbatim.
        let units = vec![
            chapter("One line.\nTwo lines.\n"),
            chapter("Three.\nFour.\n"),
            chapter("```\ncode\n```\n"),
        ];
        assert_eq!(units[2][0].kind, UnitKind::Verbatim);
        let texts = vec![
            vec![Some("一行。\n两行。\n".to_string())],
            vec![Some("三。".to_string())],
            vec![Some(units[2][0].source.clone())],
        ];
        let pairs = line_pairs(&units, &texts);
        let got: Vec<((usize, usize), usize, &str, &str)> = pairs
            .iter()
            .map(|p| (p.unit, p.line, p.source.as_str(), p.text.as_str()))
            .collect();
        assert_eq!(
            got,
            vec![
                ((0, 0), 0, "One line.", "一行。"),
                ((0, 0), 1, "Two lines.", "两行。")
            ]
        );
    }
}
