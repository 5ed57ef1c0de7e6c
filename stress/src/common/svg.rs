//! A tiny SVG line-chart writer for `--plot`: panels stacked vertically, each with axes,
//! ticks, a legend and one polyline per series. Hand-rolled because the harness needs
//! nothing more, and a plotting crate would triple its dependency tree.

use std::fmt::Write;

/// One line on a chart.
#[derive(Debug, Clone)]
pub(crate) struct Series {
    pub(crate) name: String,
    pub(crate) points: Vec<(f64, f64)>,
}

/// One panel.
#[derive(Debug, Clone)]
pub(crate) struct Chart {
    pub(crate) title: String,
    pub(crate) x_label: String,
    pub(crate) y_label: String,
    pub(crate) series: Vec<Series>,
    /// Fixed x ticks `(position, label)`; automatic "nice" ticks when empty.
    pub(crate) x_ticks: Vec<(f64, String)>,
}

const WIDTH: f64 = 900.0;
const PANEL: f64 = 340.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 30.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;
const COLORS: [&str; 6] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
];

/// The whole picture: `charts` one under the other.
pub(crate) fn render(charts: &[Chart]) -> String {
    let height = PANEL * charts.len().max(1) as f64;
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        out,
        r#"<rect width="{WIDTH}" height="{height}" fill="white"/>"#
    );
    for (i, chart) in charts.iter().enumerate() {
        panel(&mut out, chart, i as f64 * PANEL);
    }
    out.push_str("</svg>\n");
    out
}

fn panel(out: &mut String, chart: &Chart, y0: f64) {
    let (x_min, x_max, y_max) = bounds(chart);
    let plot_w = WIDTH - LEFT - RIGHT;
    let plot_h = PANEL - TOP - BOTTOM;
    let sx = |x: f64| LEFT + (x - x_min) / (x_max - x_min) * plot_w;
    let sy = |y: f64| y0 + TOP + plot_h - y / y_max * plot_h;

    let _ = writeln!(
        out,
        r#"<text x="{}" y="{}" font-size="15" font-weight="bold">{}</text>"#,
        LEFT,
        y0 + 24.0,
        escape(&chart.title)
    );
    // Axes.
    let _ = writeln!(
        out,
        r#"<path d="M{l} {t} V{b} H{r}" stroke="black" fill="none"/>"#,
        l = LEFT,
        t = y0 + TOP,
        b = y0 + TOP + plot_h,
        r = LEFT + plot_w
    );
    // Ticks and grid lines.
    let x_ticks = if chart.x_ticks.is_empty() {
        nice_ticks(x_min, x_max)
            .into_iter()
            .map(|x| (x, short(x)))
            .collect()
    } else {
        chart.x_ticks.clone()
    };
    for (x, label) in x_ticks {
        let px = sx(x);
        let _ = writeln!(
            out,
            r##"<line x1="{px:.1}" y1="{}" x2="{px:.1}" y2="{}" stroke="#ddd"/><text x="{px:.1}" y="{}" text-anchor="middle">{}</text>"##,
            y0 + TOP,
            y0 + TOP + plot_h,
            y0 + TOP + plot_h + 16.0,
            escape(&label)
        );
    }
    for y in nice_ticks(0.0, y_max) {
        let py = sy(y);
        let _ = writeln!(
            out,
            r##"<line x1="{}" y1="{py:.1}" x2="{}" y2="{py:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
            LEFT,
            LEFT + plot_w,
            LEFT - 6.0,
            py + 4.0,
            short(y)
        );
    }
    let _ = writeln!(
        out,
        r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
        LEFT + plot_w / 2.0,
        y0 + PANEL - 12.0,
        escape(&chart.x_label)
    );
    let _ = writeln!(
        out,
        r#"<text transform="translate(18 {}) rotate(-90)" text-anchor="middle">{}</text>"#,
        y0 + TOP + plot_h / 2.0,
        escape(&chart.y_label)
    );
    // Lines and legend.
    for (i, series) in chart.series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let mut points = String::new();
        for &(x, y) in &series.points {
            let _ = write!(points, "{:.1},{:.1} ", sx(x), sy(y));
        }
        let _ = writeln!(
            out,
            r#"<polyline points="{}" fill="none" stroke="{color}" stroke-width="1.8"/>"#,
            points.trim_end()
        );
        let ly = y0 + TOP + 14.0 + 16.0 * i as f64;
        let lx = LEFT + plot_w - 220.0;
        let _ = writeln!(
            out,
            r#"<line x1="{lx}" y1="{ly}" x2="{}" y2="{ly}" stroke="{color}" stroke-width="3"/><text x="{}" y="{}">{}</text>"#,
            lx + 20.0,
            lx + 26.0,
            ly + 4.0,
            escape(&series.name)
        );
    }
}

/// x range over all series (or the fixed ticks) and the top of the y axis (0 is the bottom).
fn bounds(chart: &Chart) -> (f64, f64, f64) {
    let xs = chart
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .chain(chart.x_ticks.iter().map(|t| t.0));
    let (mut x_min, mut x_max) = (f64::INFINITY, f64::NEG_INFINITY);
    for x in xs.filter(|x| x.is_finite()) {
        x_min = x_min.min(x);
        x_max = x_max.max(x);
    }
    if x_min.partial_cmp(&x_max) != Some(std::cmp::Ordering::Less) {
        (x_min, x_max) = if x_min.is_finite() {
            (x_min, x_min + 1.0)
        } else {
            (0.0, 1.0)
        };
    }
    let y_max = chart
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .filter(|y| y.is_finite())
        .fold(0.0f64, f64::max);
    // Headroom, and a top that is one of the tick values.
    let y_max = nice_ticks(0.0, (y_max * 1.08).max(1e-9))
        .last()
        .copied()
        .filter(|&t| t >= y_max)
        .unwrap_or(y_max * 1.1)
        .max(1e-9);
    (x_min, x_max, y_max)
}

/// About five round tick values covering `[lo, hi]` (steps of 1, 2 or 5 times a power of ten).
fn nice_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let range = hi - lo;
    if range.is_nan() || range <= 0.0 || !range.is_finite() {
        return vec![lo];
    }
    let rough = range / 5.0;
    let magnitude = 10f64.powf(rough.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * magnitude)
        .find(|&s| s >= rough)
        .unwrap_or(10.0 * magnitude);
    let mut ticks = Vec::new();
    let mut t = (lo / step).floor() * step;
    while t <= hi + step * 0.5 && ticks.len() < 20 {
        if t >= lo - step * 1e-9 {
            ticks.push(t);
        }
        t += step;
    }
    ticks
}

/// A tick label: 1.5M, 250k, 12, 0.25.
fn short(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        format!("{}M", trim(v / 1e6))
    } else if a >= 1e4 {
        format!("{}k", trim(v / 1e3))
    } else {
        trim(v)
    }
}

fn trim(v: f64) -> String {
    let s = format!("{v:.2}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" {
        "0".to_string()
    } else {
        s.to_string()
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_and_cover_the_range() {
        assert_eq!(nice_ticks(0.0, 10.0), [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        let t = nice_ticks(0.0, 1234.0);
        assert!(t[0] == 0.0 && *t.last().unwrap() >= 1234.0 - 250.0);
        assert_eq!(nice_ticks(3.0, 3.0), [3.0]);
    }

    #[test]
    fn renders_a_well_formed_document() {
        let chart = Chart {
            title: "a <b>".into(),
            x_label: "x".into(),
            y_label: "y".into(),
            series: vec![Series {
                name: "s".into(),
                points: vec![(0.0, 1.0), (1.0, 3.0)],
            }],
            x_ticks: Vec::new(),
        };
        let svg = render(&[chart.clone(), chart]);
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains("a &lt;b&gt;"));
    }
}
