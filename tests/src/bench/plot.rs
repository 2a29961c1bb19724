//! Latency and bandwidth against message size, one SVG per placement (plotters).

use std::path::Path;

use plotters::prelude::*;

use super::report::{Rec, TRANSPORTS};

fn colour(t: &str) -> RGBColor {
    match t {
        "ni" => RGBColor(200, 30, 30),
        "tcp" => RGBColor(30, 90, 200),
        "unix" => RGBColor(30, 150, 60),
        _ => RGBColor(120, 60, 160),
    }
}

type Series = Vec<(String, Vec<(f64, f64)>)>;

fn series(recs: &[Rec], metric: &str, placement: &str) -> Series {
    let mut out = Vec::new();
    for t in TRANSPORTS {
        let mut pts: Vec<(f64, f64)> = recs
            .iter()
            .filter(|r| {
                r.transport == *t
                    && r.point.metric == metric
                    && r.placement == placement
                    && r.point.ranks == 2
                    && r.point.size > 0
                    && r.point.error.is_none()
            })
            .filter_map(|r| r.value().map(|v| (r.point.size as f64, v)))
            .filter(|(_, v)| v.is_finite() && *v > 0.0)
            .collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        if !pts.is_empty() {
            out.push((t.to_string(), pts));
        }
    }
    out
}

fn range(s: &Series, f: impl Fn(&(f64, f64)) -> f64) -> (f64, f64) {
    let vals: Vec<f64> = s.iter().flat_map(|(_, p)| p.iter().map(&f)).collect();
    let lo = vals.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = vals.iter().copied().fold(0.0, f64::max);
    if !lo.is_finite() || hi <= 0.0 {
        return (1.0, 10.0);
    }
    (lo / 1.5, hi * 1.5)
}

fn panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    title: &str,
    ylabel: &str,
    s: &Series,
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let e = |x: DrawingAreaErrorKind<DB::ErrorType>| x.to_string();
    let (x0, x1) = range(s, |p| p.0);
    let (y0, y1) = range(s, |p| p.1);
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d((x0..x1).log_scale(), (y0..y1).log_scale())
        .map_err(e)?;
    chart
        .configure_mesh()
        .x_desc("message size (bytes)")
        .y_desc(ylabel)
        .x_label_formatter(&|v| {
            // Ticks fall on powers of ten: decimal units.
            let b = *v;
            if b >= 1e6 {
                format!("{:.0}M", b / 1e6)
            } else if b >= 1e3 {
                format!("{:.0}k", b / 1e3)
            } else {
                format!("{b:.0}")
            }
        })
        .y_label_formatter(&|v| {
            let v = *v;
            if v >= 100.0 {
                format!("{v:.0}")
            } else if v >= 1.0 {
                format!("{v:.1}")
            } else {
                format!("{v:.2}")
            }
        })
        .draw()
        .map_err(e)?;
    for (name, pts) in s {
        let c = colour(name);
        chart
            .draw_series(LineSeries::new(pts.iter().copied(), c.stroke_width(2)))
            .map_err(e)?
            .label(name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2)));
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 3, c.filled())))
            .map_err(e)?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()
        .map_err(e)?;
    Ok(())
}

/// Write `path` (SVG) for `placement`: latency (left) and bandwidth (right) against size.
pub fn plot(recs: &[Rec], placement: &str, describe: &str, path: &Path) -> Result<bool, String> {
    let lat = series(recs, "latency", placement);
    let bw = series(recs, "bw", placement);
    if lat.is_empty() && bw.is_empty() {
        return Ok(false);
    }
    let root = SVGBackend::new(path, (1300, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| x.to_string())?;
    let (top, body) = root.split_vertically(36);
    top.draw(&Text::new(
        format!("ni-bench, placement {describe}"),
        (12, 10),
        ("sans-serif", 15),
    ))
    .map_err(|x| x.to_string())?;
    let (l, r) = body.split_horizontally(650);
    panel(
        &l,
        "ping-pong latency (half round trip)",
        "microseconds",
        &lat,
    )?;
    panel(&r, "streaming bandwidth (window 64)", "MB/s", &bw)?;
    root.present().map_err(|x| x.to_string())?;
    Ok(true)
}
