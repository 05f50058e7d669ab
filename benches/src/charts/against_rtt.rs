//! The `sftp-ssh` chart: files/s (trees) and MB/s (one large file) against the round
//! trip, one line per system and direction.

use std::path::Path;

use plotters::prelude::*;
use serde_json::Value;

use super::{Drawn, PALETTE, Series, distinct, draw_lines, extent, number, text};

pub(super) fn draw(results: &[Value], path: &Path) -> Drawn {
    let rows: Vec<&Value> = results.iter().filter(|r| r["system"].is_string()).collect();
    let root = SVGBackend::new(path, (1200, 520)).into_drawing_area();
    root.fill(&WHITE)?;
    let panels = [
        ("Tree", "files_per_sec", "trees of small files: files/s"),
        ("File", "mb_per_sec", "one 256 MiB file: MB/s"),
    ];
    for ((kind, key, title), area) in panels.into_iter().zip(root.split_evenly((1, 2))) {
        let mine: Vec<&Value> = rows
            .iter()
            .copied()
            .filter(|r| text(r, "kind") == kind)
            .collect();
        // Trees of one size only, so the lines compare like with like.
        let files = mine
            .iter()
            .filter_map(|r| number(r, "files"))
            .fold(0.0, f64::max);
        let mine: Vec<&Value> = mine
            .into_iter()
            .filter(|r| number(r, "files") == Some(files) || kind == "File")
            .collect();
        let mut series: Vec<Series> = Vec::new();
        for system in distinct(mine.iter().copied(), "system") {
            for direction in ["get", "put"] {
                let mut points: Vec<(f64, f64)> = mine
                    .iter()
                    .filter(|r| text(r, "system") == system && text(r, "direction") == direction)
                    .filter_map(|r| Some((number(r, "rtt_ms")?, number(r, key)?)))
                    .collect();
                points.sort_by(|a, b| a.0.total_cmp(&b.0));
                if !points.is_empty() {
                    series.push((format!("{system} {direction}"), points));
                }
            }
        }
        panel(&area, title, &series)?;
    }
    root.present()?;
    Ok(())
}

/// `series` against RTT (linear, from 0) on a log-scaled y axis.
fn panel(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    title: &str,
    series: &[Series],
) -> Drawn {
    let (x_max, y_min, y_max) = extent(series);
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 16))
        .margin(8)
        .x_label_area_size(32)
        .y_label_area_size(56)
        .build_cartesian_2d(0.0..x_max * 1.1, (y_min..y_max * 2.0).log_scale())?;
    chart.configure_mesh().x_desc("RTT (ms)").draw()?;
    // A colour per system; get drawn thicker than put.
    let style = |i: usize, name: &str| {
        let colour = PALETTE[(i / 2) % PALETTE.len()];
        colour.stroke_width(if name.ends_with("get") { 2 } else { 1 })
    };
    draw_lines(
        &mut chart,
        series,
        style,
        SeriesLabelPosition::UpperRight,
        true,
    )
}
