//! The SVG chart: cycles per second of every subject, one panel per backend with its own linear
//! axis, so the ratios within a backend read straight off the bars.

use std::path::Path;

use anyhow::{Result, anyhow};
use plotters::prelude::*;

use super::{Report, fmt_rate};
use crate::peers::{Kind, SubjectId};

/// Width of the chart, in pixels.
const WIDTH: u32 = 1100;
/// Height of one backend's panel, in pixels.
const PANEL: u32 = 230;

fn color(kind: Kind) -> RGBColor {
    match kind {
        Kind::Library => RGBColor(31, 119, 180),
        Kind::Coordinator => RGBColor(120, 170, 215),
        Kind::RawProtocol => RGBColor(44, 160, 44),
        Kind::RawLock => RGBColor(150, 150, 150),
        Kind::Peer => RGBColor(214, 96, 39),
        Kind::Diagnostic => RGBColor(190, 170, 215),
    }
}

struct Bar {
    label: &'static str,
    rate: f64,
    kind: Kind,
}

/// Draws the chart into `path`.
pub(super) fn render(r: &Report, path: &Path) -> Result<()> {
    let panels: Vec<(String, Vec<Bar>)> = r
        .backends
        .iter()
        .filter_map(|&b| {
            let bars: Vec<Bar> = SubjectId::on(b)
                .into_iter()
                .filter_map(|id| {
                    r.rate(b, id).map(|rate| Bar {
                        label: id.label(),
                        rate,
                        kind: id.kind(),
                    })
                })
                .collect();
            (!bars.is_empty()).then(|| (format!("{}: acquire+release cycles/s", b.label()), bars))
        })
        .collect();
    let n = u32::try_from(panels.len().max(1)).unwrap_or(1);
    let root = SVGBackend::new(path, (WIDTH, PANEL * n)).into_drawing_area();
    root.fill(&WHITE)
        .map_err(|e| anyhow!("drawing the chart: {e:?}"))?;
    let areas = root.split_evenly((panels.len().max(1), 1));
    for (area, (title, bars)) in areas.iter().zip(&panels) {
        panel(area, title, bars).map_err(|e| anyhow!("drawing the chart: {e}"))?;
    }
    root.present()
        .map_err(|e| anyhow!("writing {}: {e:?}", path.display()))?;
    Ok(())
}

fn panel(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    title: &str,
    bars: &[Bar],
) -> Result<(), String> {
    let max = bars.iter().map(|b| b.rate).fold(0.0, f64::max) * 1.18;
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 17))
        .margin(8)
        .margin_right(40)
        .x_label_area_size(28)
        .y_label_area_size(300)
        .build_cartesian_2d(
            0f64..max.max(1.0),
            (0..bars.len().saturating_sub(1)).into_segmented(),
        )
        .map_err(|e| format!("{e:?}"))?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .max_light_lines(1)
        .y_labels(bars.len())
        .y_label_formatter(&|v| match v {
            SegmentValue::CenterOf(i) => bars
                .get(row(bars.len(), *i))
                .map(|b| b.label)
                .unwrap_or("")
                .to_owned(),
            _ => String::new(),
        })
        .x_label_formatter(&|x| fmt_rate(*x))
        .label_style(("sans-serif", 13))
        .draw()
        .map_err(|e| format!("{e:?}"))?;
    chart
        .draw_series(bars.iter().enumerate().map(|(k, b)| {
            let i = row(bars.len(), k);
            let mut rect = Rectangle::new(
                [
                    (0.0, SegmentValue::Exact(i)),
                    (b.rate, SegmentValue::Exact(i + 1)),
                ],
                color(b.kind).filled(),
            );
            rect.set_margin(4, 4, 0, 0);
            rect
        }))
        .map_err(|e| format!("{e:?}"))?;
    chart
        .draw_series(bars.iter().enumerate().map(|(k, b)| {
            let i = row(bars.len(), k);
            Text::new(
                format!(" {}", fmt_rate(b.rate)),
                (b.rate, SegmentValue::CenterOf(i)),
                ("sans-serif", 12),
            )
        }))
        .map_err(|e| format!("{e:?}"))?;
    Ok(())
}

/// The first bar at the top: bar `k` of `n` sits in segment `n - 1 - k` (and back).
fn row(n: usize, k: usize) -> usize {
    n.saturating_sub(1).saturating_sub(k)
}
