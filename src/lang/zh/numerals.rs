//! Chinese numerals: digits (`一`, `两`, the financial `壹`, `〇`), units (`十` `百` `千`
//! `万` `亿`), the magnitude words written after a number in digits (`36.7万`, `1.5亿`),
//! and the values of numbers written with them (`三十六万七千`, `二〇二四`, `1亿2000万`).

use regex::Regex;
use std::sync::LazyLock;

/// Ten.
pub const TEN: char = '十';
/// A hundred.
pub const HUNDRED: char = '百';
/// A thousand.
pub const THOUSAND: char = '千';
/// Ten thousand (10⁴), the first scale word.
pub const TEN_THOUSAND: char = '万';
/// A hundred million (10⁸).
pub const HUNDRED_MILLION: char = '亿';

/// The scale words for large numbers and their values: the groupings (10⁴, 10⁸) a number
/// is written in (the Simplified Chinese profile's scale words).
pub const SCALE_WORDS: &[(&str, f64)] = &[("万", 1e4), ("亿", 1e8)];

/// The other magnitude words written after a number in digits: `3千`, `5百`, `2万亿`.
const OTHER_MAGNITUDES: &[(&str, f64)] = &[("千", 1e3), ("万亿", 1e12), ("百", 1e2)];

/// The magnitude words ([`magnitude`]) as a regular-expression alternation, the
/// two-character one first.
pub const MAGNITUDE_PATTERN: &str = "万亿|[万亿千百]";

/// The value of a magnitude word written after a number in digits (`万` → 10⁴, `万亿` →
/// 10¹²), or `None`.
pub fn magnitude(word: &str) -> Option<f64> {
    SCALE_WORDS
        .iter()
        .chain(OTHER_MAGNITUDES)
        .find(|(w, _)| *w == word)
        .map(|&(_, v)| v)
}

/// Whether `c` is a unit: `十`, `百`, `千`, `万` or `亿`.
pub fn is_unit(c: char) -> bool {
    matches!(c, TEN | HUNDRED | THOUSAND | TEN_THOUSAND | HUNDRED_MILLION)
}

/// The value of a digit: everyday (`一`, `两`), financial (`壹`) or zero (`零`, `〇`).
pub fn digit(c: char) -> Option<u64> {
    Some(match c {
        '零' | '〇' => 0,
        '一' | '壹' => 1,
        '二' | '两' | '贰' => 2,
        '三' | '叁' => 3,
        '四' | '肆' => 4,
        '五' | '伍' => 5,
        '六' | '陆' => 6,
        '七' | '柒' => 7,
        '八' | '捌' => 8,
        '九' | '玖' => 9,
        _ => return None,
    })
}

/// ASCII digits with several Chinese units: `1亿2000万`, `36万7千`.
static MIXED_RE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?:[0-9]+(?:\.[0-9]+)?[十百千万亿]){2,}[0-9]*").expect("valid regex")
});

/// The values of the numbers written in ASCII digits with several units (`1亿2000万`,
/// `36万7千`).
pub fn mixed_values(text: &str) -> Vec<f64> {
    MIXED_RE
        .find_iter(text)
        .filter_map(|m| parse_mixed(m.as_str()))
        .collect()
}

fn parse_mixed(s: &str) -> Option<f64> {
    let mut tokens: Vec<Tok> = Vec::new();
    let mut num = String::new();
    for c in s.chars() {
        if c.is_ascii_digit() || c == '.' {
            num.push(c);
        } else {
            if !num.is_empty() {
                tokens.push(Tok::Num(num.parse().ok()?));
                num.clear();
            }
            tokens.push(Tok::Unit(c));
        }
    }
    if !num.is_empty() {
        tokens.push(Tok::Num(num.parse().ok()?));
    }
    eval(&tokens)
}

enum Tok {
    Num(f64),
    Unit(char),
}

fn eval(tokens: &[Tok]) -> Option<f64> {
    let (mut total, mut section, mut number) = (0f64, 0f64, 0f64);
    for t in tokens {
        match *t {
            Tok::Num(n) => number = n,
            Tok::Unit(c @ (TEN | HUNDRED | THOUSAND)) => {
                let unit = match c {
                    TEN => 10.0,
                    HUNDRED => 100.0,
                    _ => 1000.0,
                };
                section += if number == 0.0 { 1.0 } else { number } * unit;
                number = 0.0;
            }
            Tok::Unit(TEN_THOUSAND) => {
                total += (section + number) * 1e4;
                section = 0.0;
                number = 0.0;
            }
            Tok::Unit(HUNDRED_MILLION) => {
                total = (total + section + number) * 1e8;
                section = 0.0;
                number = 0.0;
            }
            Tok::Unit(_) => return None,
        }
    }
    Some(total + section + number)
}

/// Numbers written in Chinese numerals, digits and units, possibly mixed with ASCII digits
/// before a unit (`36万7千`). Returns the written text and its value.
pub fn numbers(text: &str) -> Vec<(String, f64)> {
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i].1;
        if digit(c).is_none() && c != TEN {
            i += 1;
            continue;
        }
        let start = i;
        let mut j = i;
        while j < chars.len() && (digit(chars[j].1).is_some() || is_unit(chars[j].1)) {
            j += 1;
        }
        let run: Vec<char> = chars[start..j].iter().map(|&(_, c)| c).collect();
        if let Some(v) = parse(&run) {
            let end = chars.get(j).map(|&(b, _)| b).unwrap_or(text.len());
            out.push((text[chars[start].0..end].to_string(), v));
        }
        i = j.max(i + 1);
    }
    out
}

fn parse(run: &[char]) -> Option<f64> {
    if run.is_empty() {
        return None;
    }
    // Digits only (二〇二四): positional.
    if run.iter().all(|&c| digit(c).is_some()) && run.len() > 1 {
        let mut v = 0f64;
        for &c in run {
            v = v * 10.0 + digit(c)? as f64;
        }
        return Some(v);
    }
    let tokens: Vec<Tok> = run
        .iter()
        .map(|&c| match digit(c) {
            Some(d) => Tok::Num(d as f64),
            None => Tok::Unit(c),
        })
        .collect();
    eval(&tokens)
}

/// `n` (1–99) in Chinese numerals: 2 → 二, 10 → 十, 12 → 十二, 20 → 二十, 23 → 二十三.
pub fn chinese_number(n: usize) -> Option<String> {
    const DIGITS: [&str; 10] = ["零", "一", "二", "三", "四", "五", "六", "七", "八", "九"];
    match n {
        1..=9 => Some(DIGITS[n].to_string()),
        10..=19 => Some(format!("十{}", if n > 10 { DIGITS[n - 10] } else { "" })),
        20..=99 => Some(format!(
            "{}十{}",
            DIGITS[n / 10],
            if n.is_multiple_of(10) {
                ""
            } else {
                DIGITS[n % 10]
            }
        )),
        _ => None,
    }
}
