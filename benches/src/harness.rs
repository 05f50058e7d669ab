//! Measurement and reporting shared by every suite: timed rounds with medians, and a
//! table rendered as text, Markdown and JSON.

use core::hint::black_box;
use core::time::Duration;
use std::time::Instant;

pub(crate) use crate::kit::{median, serve_on_thread};
use serde_json::{Value, json};

/// How long a run may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// A few minutes for everything on 2 cores.
    Quick,
    /// The whole grid, more rounds.
    Full,
}

impl Mode {
    /// Rounds per measurement: odd, so the median is a measured value.
    pub(crate) fn rounds(self) -> usize {
        match self {
            Self::Quick => 5,
            Self::Full => 15,
        }
    }

    /// Wall time of one round of a throughput measurement.
    pub(crate) fn round_time(self) -> Duration {
        match self {
            Self::Quick => Duration::from_millis(60),
            Self::Full => Duration::from_millis(200),
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Quick => "quick",
            Self::Full => "full",
        }
    }
}

/// Per-round rates of one measurement.
#[derive(Clone, Debug)]
pub(crate) struct Samples {
    /// Operations per second, one per round.
    pub(crate) ops_per_sec: Vec<f64>,
    /// Bytes each operation moved.
    pub(crate) bytes_per_op: u64,
}

impl Samples {
    pub(crate) fn median(&self) -> f64 {
        median(&self.ops_per_sec)
    }

    pub(crate) fn median_mb_per_sec(&self) -> f64 {
        self.median() * self.bytes_per_op as f64 / 1e6
    }

    pub(crate) fn min(&self) -> f64 {
        self.ops_per_sec
            .iter()
            .copied()
            .fold(f64::INFINITY, f64::min)
    }

    pub(crate) fn max(&self) -> f64 {
        self.ops_per_sec.iter().copied().fold(0.0, f64::max)
    }
}

/// Times `op` in `mode.rounds()` rounds of about `mode.round_time()` each, after a
/// calibration run that picks the iteration count. `op` returns a value that is kept
/// alive so the optimiser cannot drop the work.
pub(crate) fn throughput<T>(mode: Mode, bytes_per_op: u64, mut op: impl FnMut() -> T) -> Samples {
    // Calibrate: double the batch until one takes at least 10 ms.
    let mut batch: u64 = 1;
    let per_op = loop {
        let start = Instant::now();
        for _ in 0..batch {
            black_box(op());
        }
        let elapsed = start.elapsed();
        if elapsed >= Duration::from_millis(10) || batch >= 1 << 30 {
            break elapsed.as_secs_f64() / batch as f64;
        }
        batch *= 2;
    };
    let iterations = ((mode.round_time().as_secs_f64() / per_op.max(1e-12)) as u64).max(1);
    let ops_per_sec = (0..mode.rounds())
        .map(|_| {
            let start = Instant::now();
            for _ in 0..iterations {
                black_box(op());
            }
            iterations as f64 / start.elapsed().as_secs_f64()
        })
        .collect();
    Samples {
        ops_per_sec,
        bytes_per_op,
    }
}

/// A suite's results: a titled table plus the raw figures as JSON.
#[derive(Debug)]
pub(crate) struct Report {
    pub(crate) suite: &'static str,
    pub(crate) title: String,
    pub(crate) mode: Mode,
    /// Rounds behind each median (a suite may run fewer than `mode.rounds()`).
    pub(crate) rounds: usize,
    pub(crate) columns: Vec<&'static str>,
    pub(crate) rows: Vec<Vec<String>>,
    pub(crate) notes: Vec<String>,
    pub(crate) data: Vec<Value>,
    /// Further tables after the main one.
    pub(crate) tables: Vec<Table>,
    /// Checks that failed (a lost reply, a wrong byte): the run exits non-zero.
    pub(crate) failures: usize,
}

/// A titled table of its own inside a report.
#[derive(Debug, Default)]
pub(crate) struct Table {
    pub(crate) title: String,
    pub(crate) columns: Vec<&'static str>,
    pub(crate) rows: Vec<Vec<String>>,
}

/// Aligned plain-text columns: header, rule, rows.
fn aligned(columns: &[&str], rows: &[Vec<String>]) -> String {
    let widths: Vec<usize> = (0..columns.len())
        .map(|i| {
            rows.iter()
                .map(|r| r.get(i).map_or(0, String::len))
                .chain([columns[i].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut out = String::new();
        for (i, cell) in cells.enumerate() {
            if i == 0 {
                out.push_str(&format!("{cell:<w$}", w = widths[0]));
            } else {
                out.push_str(&format!("  {cell:>w$}", w = widths[i]));
            }
        }
        out.push('\n');
        out
    };
    let mut out = line(&mut columns.iter().copied());
    let rules: Vec<String> = widths.iter().map(|&w| "-".repeat(w)).collect();
    out.push_str(&line(&mut rules.iter().map(String::as_str)));
    for row in rows {
        out.push_str(&line(&mut row.iter().map(String::as_str)));
    }
    out
}

/// A Markdown table.
fn markdown_table(columns: &[&str], rows: &[Vec<String>]) -> String {
    let mut out = format!(
        "| {} |\n|{}|\n",
        columns.join(" | "),
        columns.iter().map(|_| "---").collect::<Vec<_>>().join("|"),
    );
    for row in rows {
        out.push_str(&format!("| {} |\n", row.join(" | ")));
    }
    out
}

impl Report {
    pub(crate) fn new(suite: &'static str, title: impl Into<String>, mode: Mode) -> Self {
        Self {
            suite,
            title: title.into(),
            mode,
            rounds: mode.rounds(),
            columns: Vec::new(),
            rows: Vec::new(),
            notes: Vec::new(),
            data: Vec::new(),
            tables: Vec::new(),
            failures: 0,
        }
    }

    /// Plain text for the terminal: aligned columns.
    pub(crate) fn text(&self) -> String {
        let mut out = format!(
            "\n{} ({} mode, {} rounds, medians)\n",
            self.title,
            self.mode.name(),
            self.rounds
        );
        out.push_str(&aligned(&self.columns, &self.rows));
        for table in &self.tables {
            out.push_str(&format!("\n{}\n", table.title));
            out.push_str(&aligned(&table.columns, &table.rows));
        }
        for note in &self.notes {
            out.push_str(&format!("note: {note}\n"));
        }
        out
    }

    /// A Markdown section for `report.md`.
    pub(crate) fn markdown(&self) -> String {
        let mut out = format!(
            "## {}\n\n{} mode, {} rounds, medians.\n\n{}",
            self.title,
            self.mode.name(),
            self.rounds,
            markdown_table(&self.columns, &self.rows),
        );
        for table in &self.tables {
            out.push_str(&format!(
                "\n### {}\n\n{}",
                table.title,
                markdown_table(&table.columns, &table.rows)
            ));
        }
        for note in &self.notes {
            out.push_str(&format!("\n{note}\n"));
        }
        out
    }

    /// The raw figures.
    pub(crate) fn json(&self) -> Value {
        json!({
            "suite": self.suite,
            "title": self.title,
            "mode": self.mode.name(),
            "rounds": self.rounds,
            "results": self.data,
            "notes": self.notes,
        })
    }
}

/// Formats a rate with an SI suffix: 1.23 M, 456 k.
pub(crate) fn si(value: f64) -> String {
    if value >= 1e9 {
        format!("{:.2} G", value / 1e9)
    } else if value >= 1e6 {
        format!("{:.2} M", value / 1e6)
    } else if value >= 1e3 {
        format!("{:.1} k", value / 1e3)
    } else {
        format!("{value:.1}")
    }
}

/// CPU seconds (user + system) of every child this process has waited for
/// (`getrusage(RUSAGE_CHILDREN)`, microsecond resolution).
pub(crate) fn children_cpu() -> f64 {
    use nix::sys::resource::{UsageWho, getrusage};
    getrusage(UsageWho::RUSAGE_CHILDREN).map_or(0.0, |u| {
        let secs = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
        secs(u.user_time()) + secs(u.system_time())
    })
}

/// `volley-bench wrap-server OUT CMD [ARG...]`: runs CMD on this process's stdin and
/// stdout, then writes the CPU seconds it used to OUT and exits as it did, so that a
/// suite can charge a server its own CPU whichever client started it.
pub(crate) fn wrap_server(mut args: impl Iterator<Item = String>) -> Result<i32, String> {
    let usage = "usage: volley-bench wrap-server OUT CMD [ARG...]";
    let out = args.next().ok_or(usage)?;
    let cmd = args.next().ok_or(usage)?;
    let status = std::process::Command::new(&cmd)
        .args(args)
        .status()
        .map_err(|e| format!("cannot run {cmd}: {e}"))?;
    std::fs::write(&out, format!("{}\n", children_cpu()))
        .map_err(|e| format!("cannot write {out}: {e}"))?;
    Ok(status.code().unwrap_or(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert!(median(&[]).is_nan());
    }

    #[test]
    fn si_suffixes() {
        assert_eq!(si(1_234_567.0), "1.23 M");
        assert_eq!(si(45_600.0), "45.6 k");
        assert_eq!(si(12.0), "12.0");
    }
}
