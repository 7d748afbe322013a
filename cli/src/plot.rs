//! SVG charts for `--plot`: foreground latency over time (`unlink-bench`) and the latency
//! distribution of each method (`bench`), drawn with plotters' SVG backend.

use plotters::prelude::*;
use std::path::Path;

/// Checks, before a run, that the chart can be written at `path` (its directory exists and
/// takes files, it is not a directory): a run should not end in a failure it could have
/// told at the start. A file this makes is removed again.
pub fn check_writable(path: &Path) -> Result<(), String> {
    let existed = std::fs::symlink_metadata(path).is_ok();
    let opened = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path);
    match opened {
        Ok(_) => {
            if !existed {
                let _ = std::fs::remove_file(path);
            }
            Ok(())
        }
        Err(e) => Err(format!(
            "could not open \"{}\" to draw the plot: {e}\nHINT:  Name a file in a directory that exists and that you can write to.",
            path.display()
        )),
    }
}

/// One line of a chart: its name and its points.
pub type Series = (String, Vec<(f64, f64)>);

fn colour(i: usize) -> RGBColor {
    [
        RGBColor(200, 40, 40),
        RGBColor(30, 100, 200),
        RGBColor(20, 150, 60),
        RGBColor(150, 80, 180),
        RGBColor(220, 140, 0),
    ][i % 5]
}

/// Draws `series` as lines on a log-scale y axis.
fn draw(
    path: &Path,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: &[Series],
) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| format!("could not draw \"{}\": {e}", path.display());
    let pts = series.iter().flat_map(|(_, p)| p.iter());
    let x_max = pts.clone().map(|p| p.0).fold(0.0f64, f64::max).max(1e-9);
    let y_max = pts.clone().map(|p| p.1).fold(0.0f64, f64::max).max(1e-9) * 1.5;
    let y_min = pts
        .map(|p| p.1)
        .filter(|&y| y > 0.0)
        .fold(f64::INFINITY, f64::min)
        .min(y_max / 10.0)
        * 0.7;
    let root = SVGBackend::new(path, (860, 420)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(64)
        .build_cartesian_2d(0f64..x_max, (y_min..y_max).log_scale())
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .x_labels(10)
        .y_labels(8)
        .max_light_lines(0)
        .draw()
        .map_err(|e| err(&e))?;
    for (i, (name, points)) in series.iter().enumerate() {
        let c = colour(i);
        let clamped = points.iter().map(|&(x, y)| (x, y.max(y_min)));
        chart
            .draw_series(LineSeries::new(clamped, c.stroke_width(2)))
            .map_err(|e| err(&e))?
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

/// Foreground latency over time, one line per mode (`unlink-bench --plot`).
pub fn timeline(path: &Path, title: &str, series: &[Series]) -> Result<(), String> {
    draw(
        path,
        title,
        "time (s)",
        "worst foreground latency in each 100 ms (ms)",
        series,
    )
}

/// Latency distributions, one line per method (`bench --plot`): x is the percentile as
/// "nines" (1 = p90, 2 = p99, 3 = p99.9), y the latency in microseconds.
pub fn distribution(path: &Path, title: &str, series: &[Series]) -> Result<(), String> {
    draw(
        path,
        title,
        "percentile in nines (0 = p0, 1 = p90, 2 = p99, 3 = p99.9, 4 = p99.99)",
        "latency (us)",
        series,
    )
}

/// Points of a latency distribution from a histogram in microseconds: (nines, us).
pub fn curve(hist: &hdrhistogram::Histogram<u64>) -> Vec<(f64, f64)> {
    (0..=40)
        .map(|k| {
            let nines = f64::from(k) / 10.0;
            let q = 1.0 - 10f64.powf(-nines);
            (nines, hist.value_at_quantile(q) as f64)
        })
        .collect()
}
