//! Numbers in prose, normalised to values so that `367,000` matches `36.7万` and
//! `1.5 billion` matches `15亿`, while `128K` does not match `12.8K`.

use crate::lang::zh::numerals;
use regex::Regex;
use std::sync::LazyLock;

/// A number found in source prose and the value it denotes.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceNumber {
    /// The text as written, e.g. `128K`.
    pub text: String,
    /// Its value, e.g. `128000`.
    pub value: f64,
}

static NUM_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(&format!(
        r"(?x)
        (?P<num>[0-9]+(?:,[0-9]{{3}})+(?:\.[0-9]+)?|[0-9]+(?:\.[0-9]+)?)
        (?:[\u{{20}}\u{{a0}}]?(?P<suffix>
            thousand|million|billion|trillion|bn|[KkMBT](?:[^A-Za-z]|$)
            |{}
        ))?",
        numerals::MAGNITUDE_PATTERN
    ))
    .expect("valid number regex")
});

/// The suffix without the character the regex consumed after a one-letter magnitude
/// (`B模型` → `B`, `K,` → `K`).
fn suffix_core(s: &str) -> &str {
    let mut chars = s.chars();
    match (chars.next(), chars.next()) {
        (Some(c), Some(_)) if "KkMBT".contains(c) => &s[..1],
        _ => s.trim_end_matches(|c: char| !c.is_alphanumeric() && !numerals::is_unit(c)),
    }
}

fn suffix_scale(s: &str) -> Option<f64> {
    let s = suffix_core(s);
    Some(match s {
        "thousand" | "K" | "k" => 1e3,
        "million" | "M" => 1e6,
        "billion" | "bn" | "B" => 1e9,
        "trillion" | "T" => 1e12,
        _ => return numerals::magnitude(s),
    })
}

fn parse_plain(num: &str) -> Option<f64> {
    num.replace(',', "").parse::<f64>().ok()
}

/// Numbers of English source prose. A magnitude suffix (`K`, `M`, `B`, `thousand`,
/// `million`, `billion`) scales the value; lower-case `m` is not taken as million.
pub fn source_numbers(text: &str) -> Vec<SourceNumber> {
    source_numbers_with(text, true)
}

/// [`source_numbers`], with the Chinese numerals (`一`, `三十六万七千`) only when
/// `numerals` (a target that writes them; an English translation writes `一个` as `a`).
pub fn source_numbers_with(text: &str, numerals: bool) -> Vec<SourceNumber> {
    let mut out = Vec::new();
    for caps in NUM_RE.captures_iter(text) {
        let num = &caps["num"];
        // Skip digits glued to a preceding digit group separator we did not match.
        let Some(mut value) = parse_plain(num) else {
            continue;
        };
        let mut shown = num.to_string();
        if let Some(sfx) = caps.name("suffix") {
            if let Some(scale) = suffix_scale(sfx.as_str()) {
                value *= scale;
                shown.push_str(suffix_core(sfx.as_str()));
            }
        }
        out.push(SourceNumber { text: shown, value });
    }
    if numerals {
        out.extend(
            numerals::numbers(text)
                .into_iter()
                .map(|(t, v)| SourceNumber { text: t, value: v }),
        );
    }
    out
}

/// Every value a target text may be expressing: plain numbers, the same scaled by a
/// following magnitude (`万`, `亿`, `千`, `K`, `M`, `B`, `million`…), and Chinese
/// numerals (`三十六万七千`, `两`, `二〇二四`).
pub fn target_values(text: &str) -> Vec<f64> {
    let mut out = Vec::new();
    for caps in NUM_RE.captures_iter(text) {
        let Some(value) = parse_plain(&caps["num"]) else {
            continue;
        };
        match caps.name("suffix").and_then(|s| suffix_scale(s.as_str())) {
            Some(scale) => {
                out.push(value * scale);
                // `128K` written for `128`: lenient on the unscaled reading only when the
                // suffix is a Chinese unit, which translators add to plain numbers.
                if !caps["suffix"].chars().next().is_some_and(|c| c.is_ascii()) {
                    out.push(value);
                }
            }
            None => out.push(value),
        }
    }
    out.extend(numerals::numbers(text).into_iter().map(|(_, v)| v));
    out.extend(numerals::mixed_values(text));
    out
}

/// Whether two values are the same number (relative tolerance for decimal scaling).
pub fn same_value(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chinese_numerals_of_a_source_only_where_the_target_writes_them() {
        let src = "一个 Agent 处理了 36.7万 次任务，见第二章。";
        let with: Vec<f64> = source_numbers_with(src, true)
            .iter()
            .map(|n| n.value)
            .collect();
        let without: Vec<f64> = source_numbers_with(src, false)
            .iter()
            .map(|n| n.value)
            .collect();
        assert!(with.contains(&1.0) && with.contains(&2.0) && with.contains(&367000.0));
        assert_eq!(without, vec![367000.0]);
    }

    fn has(target: &str, v: f64) -> bool {
        target_values(target).iter().any(|&t| same_value(t, v))
    }

    #[test]
    fn chinese_normalisation() {
        let src = source_numbers("revenue of 367,000 and 150 million users, 128K context");
        let vals: Vec<f64> = src.iter().map(|n| n.value).collect();
        assert_eq!(vals, vec![367000.0, 150e6, 128000.0]);
        assert!(has("收入 36.7万", 367000.0));
        assert!(has("1.5亿用户", 150e6));
        assert!(has("128K 上下文", 128000.0));
        assert!(has("12.8万", 128000.0));
        assert!(!has("12.8K 上下文", 128000.0));
        assert!(has("三十六万七千", 367000.0));
        assert!(has("第三章", 3.0));
        assert!(has("两个", 2.0));
        assert!(has("二〇二四年", 2024.0));
        assert!(has("1亿2000万", 1.2e8));
        assert!(has("36万7千", 367000.0));
    }

    #[test]
    fn identifiers_and_versions() {
        let v: Vec<f64> = source_numbers("GPT-4o, H100 and Qwen2.5-7B, 50%, 5m")
            .iter()
            .map(|n| n.value)
            .collect();
        assert_eq!(v, vec![4.0, 100.0, 2.5, 7e9, 50.0, 5.0]);
        assert!(has("Qwen2.5-7B", 7e9));
    }
}

#[cfg(test)]
mod magnitude_next_to_cjk {
    use super::*;

    #[test]
    fn one_letter_magnitude_before_cjk_text() {
        assert_eq!(source_numbers("a 1.5B model")[0].value, 1.5e9);
        assert!(target_values("1.5B模型").contains(&1.5e9));
        assert!(target_values("128K词元的上下文").contains(&128e3));
        assert!(!target_values("12.8K词元").contains(&128e3));
    }
}
