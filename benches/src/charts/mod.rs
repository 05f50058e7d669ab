//! SVG charts of a suite's figures, written beside `report.md` (plotters, SVG backend):
//! SCP Mbit/s against window for volley and rig at each link setting, SFTP MB/s per
//! client and direction with the server's ceiling marked, wake-ups per frame and p99
//! latency against requests in flight, RPC calls/s per system for each workload, SFTP
//! over ssh against the round trip per system, the channel's bulk rate and round trip
//! beside its peers per link, and the codecs' MB/s per case.

mod against_rtt;

use std::path::{Path, PathBuf};

use plotters::prelude::*;
use serde_json::Value;

/// Colours for the series, in order.
const PALETTE: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

/// Writes the charts of `suite` from its `results` into `dir`; returns their paths.
pub(crate) fn write(suite: &str, results: &[Value], dir: &Path) -> Result<Vec<PathBuf>, String> {
    let path = dir.join(format!("{suite}.svg"));
    let drawn = match suite {
        "scp" => scp(results, &path),
        "sftp" => sftp(results, &path),
        "sftp-ssh" => against_rtt::draw(results, &path),
        "wake" => wake(results, &path),
        "rpc" => rpc(results, &path),
        "matrix" => matrix(results, &path),
        "channel" => channel(results, &path),
        "codec" => codec(results, &path),
        _ => return Ok(Vec::new()),
    };
    drawn.map_err(|e| format!("cannot draw {}: {e}", path.display()))?;
    Ok(vec![path])
}

type Drawn = Result<(), Box<dyn core::error::Error>>;

fn text(record: &Value, key: &str) -> String {
    record[key].as_str().unwrap_or_default().to_owned()
}

fn number(record: &Value, key: &str) -> Option<f64> {
    record[key].as_f64()
}

/// The distinct values of `key` among `rows`, in first-seen order.
fn distinct<'a>(rows: impl IntoIterator<Item = &'a Value>, key: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for r in rows {
        let value = text(r, key);
        if !out.contains(&value) {
            out.push(value);
        }
    }
    out
}

/// One series: a name and its (x, y) points.
type Series = (String, Vec<(f64, f64)>);

/// The largest x of `series`, and a y range around its points (from half the smallest,
/// at least 1e-3, to the largest), for a log-scaled y axis.
fn extent(series: &[Series]) -> (f64, f64, f64) {
    let points = series.iter().flat_map(|(_, p)| p.iter());
    let (mut x_max, mut y_min, mut y_max) = (1.0f64, f64::MAX, 1.0f64);
    for &(x, y) in points {
        x_max = x_max.max(x);
        y_min = y_min.min(y);
        y_max = y_max.max(y);
    }
    (x_max, (y_min.min(y_max) / 2.0).max(1e-3), y_max)
}

/// Draws each of `series` as a line through dots, `style(i, name)` its stroke, with a
/// legend at `position` (in `small` type, for many series).
fn draw_lines<'a, 'b: 'a, X, Y>(
    chart: &mut ChartContext<'a, SVGBackend<'b>, Cartesian2d<X, Y>>,
    series: &[Series],
    style: impl Fn(usize, &str) -> ShapeStyle,
    position: SeriesLabelPosition,
    small: bool,
) -> Drawn
where
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    for (i, (name, points)) in series.iter().enumerate() {
        let stroke = style(i, name);
        chart
            .draw_series(LineSeries::new(points.iter().copied(), stroke))?
            .label(name.as_str())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], stroke));
        chart.draw_series(
            points
                .iter()
                .map(|&p| Circle::new(p, 3, stroke.color.filled())),
        )?;
    }
    let mut labels = chart.configure_series_labels();
    labels
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(position);
    if small {
        labels.label_font(("sans-serif", 10));
    }
    labels.draw()?;
    Ok(())
}

/// Draws `series` in `area` with log-scaled axes.
fn log_panel(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
) -> Drawn {
    let (x_max, y_min, y_max) = extent(series);
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 16))
        .margin(8)
        .x_label_area_size(32)
        .y_label_area_size(56)
        .build_cartesian_2d(
            (1.0..x_max * 1.2).log_scale(),
            (y_min..y_max * 2.0).log_scale(),
        )?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .draw()?;
    let style = |i: usize, _: &str| PALETTE[i % PALETTE.len()].stroke_width(2);
    draw_lines(
        &mut chart,
        series,
        style,
        SeriesLabelPosition::LowerRight,
        false,
    )
}

/// Mbit/s against window, volley and rig, writes and reads, one panel per link setting.
fn scp(results: &[Value], path: &Path) -> Drawn {
    let links = distinct(results.iter().filter(|r| r["client"].is_string()), "link");
    let root = SVGBackend::new(path, (560 * links.len().max(1) as u32, 420)).into_drawing_area();
    root.fill(&WHITE)?;
    for (link, area) in links.iter().zip(root.split_evenly((1, links.len().max(1)))) {
        let mut series: Vec<Series> = Vec::new();
        for who in ["volley", "rig"] {
            for (dir, key) in [("write", "write_mbit_s"), ("read", "read_mbit_s")] {
                let points: Vec<(f64, f64)> = results
                    .iter()
                    .filter(|r| text(r, "link") == *link)
                    .filter_map(|r| {
                        let client = text(r, "client");
                        let window = client.strip_prefix(who)?.trim().strip_prefix('w')?;
                        Some((window.parse().ok()?, number(r, key)?))
                    })
                    .collect();
                if !points.is_empty() {
                    series.push((format!("{who} {dir}"), points));
                }
            }
        }
        log_panel(&area, link, "window", "Mbit/s", &series)?;
    }
    root.present()?;
    Ok(())
}

/// A heat map per link and transport: calls/s for each N (rows) and batch (columns),
/// darker for faster, red for a cell that failed.
fn matrix(results: &[Value], path: &Path) -> Drawn {
    let rows: Vec<&Value> = results.iter().filter(|r| r["batch"].is_string()).collect();
    let mut panels: Vec<(String, String)> = Vec::new();
    for r in &rows {
        let key = (text(r, "link"), text(r, "transport"));
        if !panels.contains(&key) {
            panels.push(key);
        }
    }
    let batches = ["1", "2", "5", "10", "15", "50", "inf"];
    let ns = [50.0, 500.0, 2000.0, 10000.0];
    let (lo, hi) = rows
        .iter()
        .filter_map(|r| number(r, "calls_per_sec"))
        .fold((f64::MAX, 1.0f64), |(lo, hi), v| (lo.min(v), hi.max(v)));
    let count = panels.len().max(1) as u32;
    let root = SVGBackend::new(path, (2 * 430, 260 * count.div_ceil(2))).into_drawing_area();
    root.fill(&WHITE)?;
    let areas = root.split_evenly((count.div_ceil(2) as usize, 2));
    for ((link, transport), area) in panels.iter().zip(areas) {
        let mut chart = ChartBuilder::on(&area)
            .caption(format!("{transport}, {link}: calls/s"), ("sans-serif", 15))
            .margin(8)
            .x_label_area_size(28)
            .y_label_area_size(48)
            .build_cartesian_2d(-0.5..6.5, -0.5..3.5)?;
        chart
            .configure_mesh()
            .disable_mesh()
            .x_labels(15)
            .y_labels(9)
            .x_label_formatter(&|x: &f64| {
                let i = x.round();
                if (x - i).abs() < 0.01 && (0.0..7.0).contains(&i) {
                    batches[i as usize].to_string()
                } else {
                    String::new()
                }
            })
            .y_label_formatter(&|y: &f64| {
                let i = y.round();
                if (y - i).abs() < 0.01 && (0.0..4.0).contains(&i) {
                    format!("{}", ns[i as usize])
                } else {
                    String::new()
                }
            })
            .x_desc("batch")
            .y_desc("N")
            .draw()?;
        for r in rows
            .iter()
            .filter(|r| text(r, "link") == *link && text(r, "transport") == *transport)
        {
            let Some(x) = batches.iter().position(|b| *b == text(r, "batch")) else {
                continue;
            };
            let Some(y) = number(r, "n").and_then(|n| ns.iter().position(|v| *v == n)) else {
                continue;
            };
            let rate = number(r, "calls_per_sec").unwrap_or(0.0);
            let colour = if r["ok"].as_bool() == Some(true) {
                let t = ((rate.max(1.0).ln() - lo.max(1.0).ln())
                    / (hi.ln() - lo.max(1.0).ln()).max(1e-9))
                .clamp(0.0, 1.0);
                RGBColor(
                    (230.0 - 200.0 * t) as u8,
                    (240.0 - 150.0 * t) as u8,
                    (255.0 - 75.0 * t) as u8,
                )
            } else {
                RGBColor(214, 39, 40)
            };
            let (x, y) = (x as f64, y as f64);
            chart.draw_series([Rectangle::new(
                [(x - 0.46, y - 0.46), (x + 0.46, y + 0.46)],
                colour.filled(),
            )])?;
            chart.draw_series([Text::new(
                if rate < 1000.0 {
                    format!("{rate:.0}")
                } else {
                    format!("{:.0}k", rate / 1000.0)
                },
                (x - 0.3, y + 0.1),
                ("sans-serif", 12),
            )])?;
        }
    }
    Ok(())
}

/// Calls/s and calls per CPU-second of each system as horizontal bars, a row of two
/// panels per workload (volley blue, tarpc orange, the raw baseline green).
fn rpc(results: &[Value], path: &Path) -> Drawn {
    // The main table's rows (TCP, Unix, in-process): the TLS and QUIC rows are in the table.
    let rows: Vec<&Value> = results
        .iter()
        .filter(|r| r["workload"].is_string() && r["table"].is_null())
        .collect();
    let workloads = distinct(rows.iter().copied(), "workload");
    let panels = workloads.len().max(1) as u32;
    let root = SVGBackend::new(path, (2 * 440, 300 * panels)).into_drawing_area();
    root.fill(&WHITE)?;
    let areas = root.split_evenly((panels as usize, 2));
    for (i, workload) in workloads.iter().enumerate() {
        let of = |key: &str| -> Vec<(String, f64)> {
            rows.iter()
                .filter(|r| text(r, "workload") == *workload)
                .filter_map(|r| Some((text(r, "system"), number(r, key)?)))
                .collect()
        };
        bar_panel(
            &areas[2 * i],
            &format!("{workload}: calls/s"),
            &of("calls_per_sec"),
            &|x| format!("{:.0}k", x / 1000.0),
        )?;
        bar_panel(
            &areas[2 * i + 1],
            &format!("{workload}: calls per CPU-second"),
            &of("calls_per_cpu_sec"),
            &|x| format!("{:.0}k", x / 1000.0),
        )?;
    }
    Ok(())
}

/// Horizontal bars, one per `(name, value)`, in `area`: volley's in the first colour,
/// its peers' in others.
fn bar_panel(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    caption: &str,
    bars: &[(String, f64)],
    x_format: &dyn Fn(&f64) -> String,
) -> Drawn {
    let x_max = bars.iter().map(|b| b.1).fold(1e-9, f64::max);
    let n = bars.len().max(1) as f64;
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 15))
        .margin(8)
        .x_label_area_size(28)
        .y_label_area_size(170)
        .build_cartesian_2d(0.0..x_max * 1.08, -0.5..n - 0.5)?;
    let names: Vec<String> = bars.iter().map(|b| b.0.clone()).collect();
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(bars.len() * 2 + 1)
        .y_label_formatter(&|y: &f64| {
            let i = y.round();
            if (y - i).abs() < 0.01 && i >= 0.0 {
                names.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .x_label_formatter(x_format)
        .draw()?;
    let peers: Vec<String> = bars
        .iter()
        .map(|b| b.0.split_whitespace().next().unwrap_or_default().to_owned())
        .filter(|first| first != "volley")
        .fold(Vec::new(), |mut seen, first| {
            if !seen.contains(&first) {
                seen.push(first);
            }
            seen
        });
    chart.draw_series(bars.iter().enumerate().map(|(i, (name, x))| {
        let first = name.split_whitespace().next().unwrap_or_default();
        let colour = if first == "volley" {
            PALETTE[0]
        } else {
            let k = peers.iter().position(|p| p == first).unwrap_or(0);
            PALETTE[1 + k % (PALETTE.len() - 1)]
        };
        let y = i as f64;
        Rectangle::new([(0.0, y - 0.35), (*x, y + 0.35)], colour.filled())
    }))?;
    Ok(())
}

/// The channel suite: per link, MiB/s moving 1 MiB messages, the CPU a GiB cost both
/// ends, and the round trip of a small call, one bar per system.
fn channel(results: &[Value], path: &Path) -> Drawn {
    let rows: Vec<&Value> = results.iter().filter(|r| r["link"].is_string()).collect();
    let links = distinct(rows.iter().copied(), "link");
    let root =
        SVGBackend::new(path, (3 * 400, 260 * links.len().max(1) as u32)).into_drawing_area();
    root.fill(&WHITE)?;
    let areas = root.split_evenly((links.len().max(1), 3));
    for (i, link) in links.iter().enumerate() {
        let of = |value: &dyn Fn(&Value) -> Option<f64>| -> Vec<(String, f64)> {
            rows.iter()
                .filter(|r| text(r, "link") == *link)
                .filter_map(|r| Some((text(r, "system"), value(r)?)))
                .collect()
        };
        bar_panel(
            &areas[3 * i],
            &format!("{link}: 1 MiB messages, MiB/s"),
            &of(&|r| number(r, "mib_per_sec_1mib")),
            &|x| format!("{x:.0}"),
        )?;
        bar_panel(
            &areas[3 * i + 1],
            &format!("{link}: CPU s/GiB, both ends"),
            &of(&|r| Some(number(r, "client_cpu_s_per_gib")? + number(r, "server_cpu_s_per_gib")?)),
            &|x| format!("{x:.1}"),
        )?;
        bar_panel(
            &areas[3 * i + 2],
            &format!("{link}: round trip, us"),
            &of(&|r| number(r, "round_trip_us")),
            &|x| format!("{x:.0}"),
        )?;
    }
    Ok(())
}

/// The codec suite: MB/s per case.
fn codec(results: &[Value], path: &Path) -> Drawn {
    let bars: Vec<(String, f64)> = results
        .iter()
        .filter_map(|r| Some((r["case"].as_str()?.to_owned(), number(r, "mb_per_sec")?)))
        .collect();
    let root = SVGBackend::new(path, (900, 60 + 34 * bars.len().max(1) as u32)).into_drawing_area();
    root.fill(&WHITE)?;
    bar_panel(
        &root,
        "volley-proto codecs: MB/s (bytes handled per second)",
        &bars,
        &|x| format!("{x:.0}"),
    )
}

/// MB/s per client, get and put, with the server's ceiling (volley's rate over how busy
/// it kept sftp-server) marked as a dashed line per direction.
fn sftp(results: &[Value], path: &Path) -> Drawn {
    let rows: Vec<&Value> = results
        .iter()
        .filter(|r| r["direction"].is_string())
        .collect();
    let clients = distinct(rows.iter().copied(), "client");
    let y_max = rows
        .iter()
        .filter_map(|r| {
            let rate = number(r, "mb_per_sec")?;
            Some(rate.max(rate / number(r, "server_busy")?.max(0.05)))
        })
        .fold(1.0, f64::max);
    let root = SVGBackend::new(path, (900, 460)).into_drawing_area();
    root.fill(&WHITE)?;
    let n = clients.len().max(1) as f64;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "SFTP against OpenSSH's sftp-server (MB/s)",
            ("sans-serif", 16),
        )
        .margin(10)
        .x_label_area_size(40)
        .y_label_area_size(56)
        .build_cartesian_2d(-0.5..n - 0.5, 0.0..y_max * 1.1)?;
    let names = clients.clone();
    chart
        .configure_mesh()
        .x_labels(clients.len() * 2 + 1)
        .x_label_formatter(&|x: &f64| {
            let i = x.round();
            if (x - i).abs() < 0.01 && i >= 0.0 {
                names.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .y_desc("MB/s")
        .draw()?;
    for (d, direction) in ["get", "put"].into_iter().enumerate() {
        let colour = PALETTE[d];
        let offset = if d == 0 { -0.15 } else { 0.15 };
        let points: Vec<(f64, f64)> = rows
            .iter()
            .filter(|r| text(r, "direction") == direction)
            .filter_map(|r| {
                let i = clients.iter().position(|c| *c == text(r, "client"))?;
                Some((i as f64 + offset, number(r, "mb_per_sec")?))
            })
            .collect();
        chart
            .draw_series(
                points.iter().map(|&(x, y)| {
                    Rectangle::new([(x - 0.12, 0.0), (x + 0.12, y)], colour.filled())
                }),
            )?
            .label(direction)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], colour.filled()));
        let ceiling = rows
            .iter()
            .find(|r| text(r, "direction") == direction && text(r, "client") == "volley")
            .and_then(|r| Some(number(r, "mb_per_sec")? / number(r, "server_busy")?.max(0.05)));
        if let Some(ceiling) = ceiling {
            chart
                .draw_series(DashedLineSeries::new(
                    [(-0.5, ceiling), (n - 0.5, ceiling)],
                    6,
                    4,
                    colour.stroke_width(1),
                ))?
                .label(format!("{direction}: sftp-server ceiling"))
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], colour));
        }
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

/// Wake-ups per frame and p99 latency against requests in flight, per signalling mode.
fn wake(results: &[Value], path: &Path) -> Drawn {
    let rows: Vec<&Value> = results.iter().filter(|r| r["signal"].is_string()).collect();
    let signals = distinct(rows.iter().copied(), "signal");
    let root = SVGBackend::new(path, (1000, 420)).into_drawing_area();
    root.fill(&WHITE)?;
    let panels = root.split_evenly((1, 2));
    for ((key, title, unit), area) in [
        (
            "wakeups_per_frame",
            "Wake-ups per frame",
            "wake-ups / frame",
        ),
        ("p99_us", "p99 latency", "us"),
    ]
    .into_iter()
    .zip(panels.iter())
    {
        let series: Vec<Series> = signals
            .iter()
            .map(|signal| {
                let points = rows
                    .iter()
                    .filter(|r| text(r, "signal") == *signal)
                    .filter_map(|r| Some((number(r, "in_flight")?, number(r, key)?.max(1e-3))))
                    .collect();
                (signal.clone(), points)
            })
            .collect();
        log_panel(area, title, "requests in flight", unit, &series)?;
    }
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Each suite's chart is drawn from records of the shape the suite writes.
    #[test]
    fn every_chart_draws_its_series() {
        let dir = std::env::temp_dir().join(format!("volley-charts-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut scp = Vec::new();
        for link in ["RTT 0", "RTT 1 ms"] {
            for (who, w, rate) in [
                ("volley", 1, 300.0),
                ("volley", 16, 2700.0),
                ("rig", 1, 50.0),
                ("rig", 16, 190.0),
            ] {
                scp.push(json!({"client": format!("{who} w{w}"), "link": link,
                    "write_mbit_s": rate, "read_mbit_s": rate * 0.9}));
            }
        }
        let sftp = vec![
            json!({"client": "volley", "direction": "get", "mb_per_sec": 1900.0, "server_busy": 0.95}),
            json!({"client": "volley", "direction": "put", "mb_per_sec": 1800.0, "server_busy": 0.96}),
            json!({"client": "OpenSSH sftp -D", "direction": "get", "mb_per_sec": 1700.0, "server_busy": 0.9}),
            json!({"socketpair_ceiling_mb_per_sec": 5000.0}),
        ];
        let wake = vec![
            json!({"in_flight": 1, "signal": "batched", "wakeups_per_frame": 1.0, "p99_us": 40.0}),
            json!({"in_flight": 64, "signal": "batched", "wakeups_per_frame": 0.1, "p99_us": 90.0}),
            json!({"in_flight": 64, "signal": "per frame", "wakeups_per_frame": 1.0, "p99_us": 150.0}),
        ];
        let rpc = vec![
            json!({"workload": "8 B sequential", "system": "tarpc", "calls_per_sec": 18000.0}),
            json!({"workload": "8 B sequential", "system": "volley tcp", "calls_per_sec": 80000.0}),
            json!({"workload": "1 MiB put", "system": "raw tokio", "calls_per_sec": 1800.0}),
            json!({"artiq": "bytes", "size": "1 MB", "h2d_mean": 1.0}),
        ];
        let matrix = vec![
            json!({"link": "loopback", "transport": "udp", "n": 500, "batch": "inf", "ok": true, "calls_per_sec": 12000.0}),
            json!({"link": "loopback", "transport": "udp", "n": 50, "batch": "1", "ok": false, "calls_per_sec": 900.0}),
        ];
        let channel = vec![
            json!({"link": "loopback", "system": "volley channel", "mib_per_sec_1mib": 3900.0, "round_trip_us": 17.0}),
            json!({"link": "loopback", "system": "quinn", "mib_per_sec_1mib": 600.0, "round_trip_us": 80.0}),
        ];
        let codec = vec![
            json!({"case": "SCP read request emit", "mb_per_sec": 900.0}),
            json!({"case": "sftp_write_head_vs_copy_ratio", "ratio": 80.0}),
        ];
        for (suite, data, labels) in [
            ("scp", scp, &["volley write", "rig read", "RTT 1 ms"][..]),
            (
                "channel",
                channel,
                &["volley channel", "quinn", "round trip"][..],
            ),
            ("codec", codec, &["SCP read request emit", "MB/s"][..]),
            (
                "sftp",
                sftp,
                &["get", "sftp-server ceiling", "OpenSSH sftp -D"][..],
            ),
            ("wake", wake, &["batched", "per frame", "p99 latency"][..]),
            ("rpc", rpc, &["8 B sequential", "tarpc", "volley tcp"][..]),
            ("matrix", matrix, &["udp, loopback", "inf", "12k"][..]),
        ] {
            let paths = write(suite, &data, &dir).unwrap();
            let svg = std::fs::read_to_string(&paths[0]).unwrap();
            assert!(svg.starts_with("<svg"), "{suite}");
            for label in labels {
                assert!(svg.contains(label), "{suite}: no `{label}`");
            }
        }
        assert!(write("no such suite", &[], &dir).unwrap().is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
