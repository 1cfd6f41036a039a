//! `perf --plot FILE.svg`: the percentile curve of each latency result
//! beside its baseline's, as HdrHistogram's plots draw them.
//!
//! One panel per latency row, the latency (ns, log scale) against the
//! percentile on a "nines" axis: `x = -log10(1 - p/100)`, so 0 is 0 %, 1 is
//! 90 %, 2 is 99 %, 3 is 99.9 %, and each decade of the tail gets the same
//! width. Each curve ends at its maximum, at `x = log10(samples)`.

use std::path::Path;

use plotters::prelude::*;

use super::stats::Measurement;
use crate::plot;

/// Width of the picture, pixels.
const WIDTH: u32 = 900;

/// Height of one panel, pixels.
const PANEL: u32 = 340;

/// Height of the title above the panels, pixels.
const TITLE: u32 = 40;

/// The test's colour.
const TEST: RGBColor = RGBColor(0x1f, 0x77, 0xb4);

/// The baseline's colour.
const BASE: RGBColor = RGBColor(0xd6, 0x27, 0x28);

/// Where on the nines axis percentile `p` (0 to 100) lies.
pub fn nines(p: f64) -> f64 {
    let tail = (1.0 - p / 100.0).max(1e-12);
    -tail.log10()
}

/// How the nines axis labels its whole positions: `0%`, `90%`, `99%`,
/// `99.9%` ...; nothing between them.
pub fn nines_label(x: f64) -> String {
    let k = x.round();
    if (x - k).abs() > 1e-6 || k < 0.0 {
        return String::new();
    }
    match k as u32 {
        0 => "0%".into(),
        1 => "90%".into(),
        k => format!("99.{}%", "9".repeat(k as usize - 2)).replace(".%", "%"),
    }
}

/// The rows `--plot` draws: latency results with a curve, each with its
/// baseline (when it has a curve too).
fn panels(
    rows: &[(Measurement, Option<Measurement>)],
) -> Vec<(&Measurement, Option<&Measurement>)> {
    rows.iter()
        .filter(|(m, _)| m.latency.is_some() && !m.curve.is_empty())
        .map(|(m, b)| (m, b.as_ref().filter(|b| !b.curve.is_empty())))
        .collect()
}

/// How a curve is named in a legend: test, size and median.
fn series_name(m: &Measurement) -> String {
    let mut size = switchyard::config::format_size(m.size);
    if size.ends_with(|c: char| c.is_ascii_digit()) {
        size.push_str(" B");
    }
    let p50 = m.latency.map_or(0.0, |l| l.p50);
    format!("{} {size} (p50 {p50:.0} ns, {} samples)", m.test, m.iters)
}

/// The SVG of `rows`' latency curves under the title `title`; `None` when
/// no row has a curve.
///
/// # Errors
///
/// What plotters reports (it draws into a string, so nothing in practice).
pub fn render(
    rows: &[(Measurement, Option<Measurement>)],
    title: &str,
) -> Result<Option<String>, String> {
    let panels = panels(rows);
    if panels.is_empty() {
        return Ok(None);
    }
    let mut svg = String::new();
    {
        let height = TITLE + PANEL * panels.len() as u32;
        let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE).map_err(plot::error)?;
        let root = root
            .titled(title, ("sans-serif", 14))
            .map_err(plot::error)?;
        for (area, (m, b)) in root.split_evenly((panels.len(), 1)).iter().zip(&panels) {
            panel(area, m, *b)?;
        }
        root.present().map_err(plot::error)?;
    }
    Ok(Some(svg))
}

/// One panel: `m`'s curve and its baseline `b`'s.
fn panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    m: &Measurement,
    b: Option<&Measurement>,
) -> Result<(), String> {
    let curves: Vec<(&Measurement, RGBColor)> = std::iter::once((m, TEST))
        .chain(b.map(|b| (b, BASE)))
        .collect();
    let points = || curves.iter().flat_map(|(c, _)| c.curve.iter());
    let xmax = points().map(|p| nines(p[0])).fold(1.0, f64::max).ceil();
    let lo = points().map(|p| p[1]).fold(f64::INFINITY, f64::min);
    let hi = points().map(|p| p[1]).fold(0.0, f64::max);
    let (lo, hi) = ((lo * 0.8).max(0.5), (hi * 1.25).max(lo.max(0.5) * 2.0));
    let caption = match b {
        Some(b) => format!("{} beside its baseline {}", m.test, b.test),
        None => format!("{} (no baseline)", m.test),
    };
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 16))
        .margin(12)
        // Room for the last percentile's label.
        .margin_right(36)
        .x_label_area_size(36)
        .y_label_area_size(64)
        .build_cartesian_2d(0f64..xmax, (lo..hi).log_scale())
        .map_err(plot::error)?;
    chart
        .configure_mesh()
        .x_labels(xmax as usize + 1)
        .x_label_formatter(&|x| nines_label(*x))
        .y_label_formatter(&|y| plot::number(*y))
        .x_desc("percentile")
        .y_desc("latency (ns)")
        .draw()
        .map_err(plot::error)?;
    for (c, colour) in curves {
        let style = colour.stroke_width(2);
        chart
            .draw_series(LineSeries::new(
                c.curve.iter().map(|p| (nines(p[0]), p[1])),
                style,
            ))
            .map_err(plot::error)?
            .label(series_name(c))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font(("sans-serif", 13))
        .draw()
        .map_err(plot::error)
}

/// The end of a run: draws `rows` into `--plot`'s file if asked, then
/// drops the curves (the table and `--json` show the percentiles).
///
/// # Errors
///
/// As [`write()`].
pub(super) fn finish(
    o: &super::Options,
    rows: &mut [(Measurement, Option<Measurement>)],
    title: &str,
) -> Result<(), String> {
    if let Some(path) = &o.plot {
        write(path, rows, title)?;
    }
    for (m, b) in rows.iter_mut() {
        m.curve = Vec::new();
        if let Some(b) = b {
            b.curve = Vec::new();
        }
    }
    Ok(())
}

/// Writes the picture of `rows` to `path`.
///
/// # Errors
///
/// No latency result to draw, or the file cannot be written.
pub fn write(
    path: &Path,
    rows: &[(Measurement, Option<Measurement>)],
    title: &str,
) -> Result<(), String> {
    let svg = render(rows, title)?.ok_or_else(|| {
        format!(
            "--plot {}: no latency result to draw (put-lat, get-lat, atomic-lat or tcp-pingpong)",
            path.display()
        )
    })?;
    plot::save(path, &svg)
}

#[cfg(test)]
mod test {
    use super::*;

    #[test]
    fn nines_axis() {
        assert_eq!(nines(0.0), 0.0);
        assert!((nines(90.0) - 1.0).abs() < 1e-9);
        assert!((nines(99.9) - 3.0).abs() < 1e-9);
        assert!(nines(100.0).is_finite());
        let labels: Vec<String> = (0..5).map(|x| nines_label(x as f64)).collect();
        assert_eq!(labels, ["0%", "90%", "99%", "99.9%", "99.99%"]);
        assert_eq!(nines_label(1.5), "");
        assert_eq!(nines_label(-1.0), "");
    }

    fn lat(test: &str, scale: u64) -> Measurement {
        let mut s: Vec<u64> = (1..=2000).map(|i| 100 * scale + i % 97).collect();
        Measurement::latency(test, 8, 2000, &mut s, 1.0)
    }

    #[test]
    fn picture_of_a_test_and_its_baseline() {
        let rows = vec![
            (lat("put-lat", 5), Some(lat("cacheline", 1))),
            (lat("get-lat", 7), None),
            (Measurement::throughput("put-bw", 64, 10, 1.0), None),
        ];
        let svg = render(&rows, "switchyard perf: a <test> & more")
            .unwrap()
            .unwrap();
        let doc = plot::check_svg(&svg);
        let texts = plot::texts(&doc);
        for want in [
            "switchyard perf: a <test> & more",
            "put-lat beside its baseline cacheline",
            "get-lat (no baseline)",
            "percentile",
            "latency (ns)",
            "99.9%",
        ] {
            assert!(texts.iter().any(|t| t == want), "{want}: {texts:?}");
        }
        for want in ["put-lat 8 B (p50", "cacheline 8 B (p50", "get-lat 8 B (p50"] {
            assert!(
                texts.iter().any(|t| t.starts_with(want)),
                "{want}: {texts:?}"
            );
        }
        // Three curves (two in the first panel, one in the second), each
        // drawn as a polyline in its colour, plus its legend mark.
        let lines = |colour: &str| {
            doc.descendants()
                .filter(|n| n.has_tag_name("polyline"))
                .filter(|n| n.attribute("stroke") == Some(colour))
                .filter(|n| {
                    n.attribute("points")
                        .is_some_and(|p| p.split(' ').count() > 20)
                })
                .count()
        };
        assert_eq!(lines("#1F77B4"), 2);
        assert_eq!(lines("#D62728"), 1);
        // put-bw has no curve: nothing to draw alone.
        assert!(render(&rows[2..], "t").unwrap().is_none());
        let e = write(Path::new("/nonexistent/x.svg"), &rows[2..], "t").unwrap_err();
        assert!(e.contains("no latency result"), "{e}");
    }
}
