//! A grouped bar chart as a standalone SVG document, written by hand: a few dozen lines
//! of markup do not need a plotting crate (and its build time on small machines).

use std::fmt::Write;

/// One series of a bar chart: a name for the legend, a fill colour, and one value per
/// category (`None` draws no bar).
#[derive(Debug, Clone)]
pub struct Series {
    /// Legend label.
    pub name: String,
    /// CSS colour.
    pub color: String,
    /// Values, one per category.
    pub values: Vec<Option<f64>>,
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A "nice" step (1, 2 or 5 × 10^k) giving about `ticks` intervals up to `max`.
fn nice_step(max: f64, ticks: usize) -> f64 {
    let raw = (max / ticks.max(1) as f64).max(f64::MIN_POSITIVE);
    let mag = 10f64.powf(raw.log10().floor());
    let norm = raw / mag;
    let m = if norm <= 1.0 {
        1.0
    } else if norm <= 2.0 {
        2.0
    } else if norm <= 5.0 {
        5.0
    } else {
        10.0
    };
    m * mag
}

/// Render a grouped bar chart: one group per category, one bar per series ("n/m", not
/// measured, where a value is missing), a y axis from 0 with gridlines, category labels
/// under the groups and a legend. `subtitle` may hold several lines.
pub fn bar_chart(
    title: &str,
    subtitle: &str,
    x_label: &str,
    y_label: &str,
    categories: &[String],
    series: &[Series],
) -> String {
    let subtitle_lines: Vec<&str> = subtitle.lines().collect();
    let (left, right, bottom) = (70.0, 20.0, 76.0);
    let top = 50.0 + 16.0 * subtitle_lines.len() as f64;
    let min_group = (36.0 + 14.0 * series.len() as f64).max(40.0);
    let plot_w = (categories.len().max(1) as f64 * min_group).max(680.0);
    let group_w = plot_w / categories.len().max(1) as f64;
    let plot_h = 320.0;
    let width = left + plot_w + right;
    let height = top + plot_h + bottom;
    let max = series
        .iter()
        .flat_map(|s| s.values.iter().flatten())
        .fold(0.0f64, |a, &v| a.max(v))
        .max(1e-9);
    let step = nice_step(max, 5);
    let y_max = (max / step).ceil() * step;
    let y = |v: f64| top + plot_h - v / y_max * plot_h;

    let mut s = String::new();
    let _ = writeln!(
        s,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="sans-serif" font-size="12">"##
    );
    let _ = writeln!(s, r##"<rect width="100%" height="100%" fill="white"/>"##);
    let _ = writeln!(
        s,
        r##"<text x="{left}" y="22" font-size="16" font-weight="bold">{}</text>"##,
        escape(title)
    );
    for (i, line) in subtitle_lines.iter().enumerate() {
        let _ = writeln!(
            s,
            r##"<text x="{left}" y="{}" fill="#444">{}</text>"##,
            42 + 16 * i,
            escape(line)
        );
    }
    // Grid and y ticks.
    let mut v = 0.0;
    while v <= y_max + step / 2.0 {
        let yy = y(v);
        let _ = writeln!(
            s,
            r##"<line x1="{left}" y1="{yy:.1}" x2="{:.1}" y2="{yy:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            left + plot_w,
            left - 6.0,
            yy + 4.0,
            trim_number(v, step)
        );
        v += step;
    }
    let _ = writeln!(
        s,
        r##"<text transform="translate(18 {:.1}) rotate(-90)" text-anchor="middle">{}</text>"##,
        top + plot_h / 2.0,
        escape(y_label)
    );
    // Bars.
    let bar_w = ((group_w - 12.0) / series.len().max(1) as f64).min(40.0);
    let bars_w = bar_w * series.len() as f64;
    for (ci, cat) in categories.iter().enumerate() {
        let gx = left + ci as f64 * group_w + (group_w - bars_w) / 2.0;
        for (si, ser) in series.iter().enumerate() {
            let x = gx + si as f64 * bar_w;
            if let Some(Some(val)) = ser.values.get(ci) {
                let yy = y(*val);
                let _ = writeln!(
                    s,
                    r##"<rect x="{x:.1}" y="{yy:.1}" width="{:.1}" height="{:.1}" fill="{}"><title>{}: {}: {val:.3}</title></rect>"##,
                    bar_w - 1.0,
                    (top + plot_h - yy).max(0.0),
                    escape(&ser.color),
                    escape(cat),
                    escape(&ser.name)
                );
            } else {
                let _ = writeln!(
                    s,
                    r##"<text x="{:.1}" y="{:.1}" text-anchor="middle" fill="#999" font-size="10">n/m</text>"##,
                    x + bar_w / 2.0,
                    top + plot_h - 4.0
                );
            }
        }
        let _ = writeln!(
            s,
            r##"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
            gx + bars_w / 2.0,
            top + plot_h + 16.0,
            escape(cat)
        );
    }
    // Axes.
    let _ = writeln!(
        s,
        r##"<line x1="{left}" y1="{top}" x2="{left}" y2="{:.1}" stroke="#333"/><line x1="{left}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#333"/>"##,
        top + plot_h,
        top + plot_h,
        left + plot_w,
        top + plot_h
    );
    let _ = writeln!(
        s,
        r##"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
        left + plot_w / 2.0,
        top + plot_h + 34.0,
        escape(x_label)
    );
    // Legend.
    let mut lx = left;
    let ly = top + plot_h + 60.0;
    for ser in series {
        let _ = writeln!(
            s,
            r##"<rect x="{lx:.1}" y="{:.1}" width="12" height="12" fill="{}"/><text x="{:.1}" y="{ly:.1}">{}</text>"##,
            ly - 10.0,
            escape(&ser.color),
            lx + 16.0,
            escape(&ser.name)
        );
        lx += 24.0 + 7.0 * ser.name.chars().count() as f64;
    }
    s.push_str("</svg>\n");
    s
}

fn trim_number(v: f64, step: f64) -> String {
    let decimals = if step >= 1.0 {
        0
    } else {
        (-step.log10().floor()) as usize
    };
    format!("{v:.decimals$}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chart_is_wellformed_svg() {
        let cats = vec!["1".to_string(), "2 & <3>".to_string()];
        let series = vec![
            Series {
                name: "a".into(),
                color: "#1f77b4".into(),
                values: vec![Some(0.2), Some(1.7)],
            },
            Series {
                name: "b".into(),
                color: "#ff7f0e".into(),
                values: vec![None, Some(0.9)],
            },
        ];
        let svg = bar_chart("t", "sub\nline 2", "part", "seconds", &cats, &series);
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<rect").count(), 1 + 3 + 2);
        assert!(svg.contains("2 &amp; &lt;3&gt;"));
        assert!(svg.contains("n/m") && svg.contains("line 2"));
    }

    #[test]
    fn nice_steps() {
        for (max, want) in [(10.0, 2.0), (0.9, 0.2), (37.0, 10.0)] {
            assert!((nice_step(max, 5) - want).abs() < 1e-12, "{max}");
        }
    }
}
