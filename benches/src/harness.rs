//! Measurement and reporting shared by every suite and by the TLS rows (`benches/tls`,
//! outside the workspace, which depends on this library): timed rounds with medians,
//! interleaved rounds with the CPU each cost the clients' and the servers' threads,
//! servers on a thread of their own, and a table rendered as text, Markdown and JSON.

use core::hint::black_box;
use core::time::Duration;
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use nix::time::{ClockId, clock_gettime};
use serde_json::{Value, json};

/// The kernel thread ids of the threads [`serve_on_thread`] started: their CPU is the
/// servers', every other thread's the clients'.
static SERVER_THREADS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// This thread's kernel id (`/proc/thread-self` names it).
fn this_thread() -> Option<String> {
    let link = std::fs::read_link("/proc/thread-self").ok()?;
    Some(link.file_name()?.to_str()?.to_owned())
}

/// Counts the calling thread's CPU as the servers' from now on (for a server runtime's
/// worker threads: `Builder::on_thread_start(register_server_thread)`).
pub fn register_server_thread() {
    if let (Some(id), Ok(mut servers)) = (this_thread(), SERVER_THREADS.lock()) {
        servers.push(id);
    }
}

/// What [`cpu_split`] has seen: each live thread's CPU seconds when last read and whether
/// it is a server's, and the last-read CPU of threads that have since ended, per side.
#[derive(Default)]
struct Seen {
    threads: std::collections::HashMap<String, (f64, bool)>,
    ended: (f64, f64),
}

static SEEN: Mutex<Option<Seen>> = Mutex::new(None);

/// CPU seconds so far of this process's threads, split into (clients, servers): each
/// thread's own CPU-time clock (user and system together, the slice it runs now
/// included); threads that stand for the network or the hardware (`volley-netsim*`,
/// `volley-emulator*`) are neither. A thread that has ended (a runtime's idle blocking thread) keeps the CPU it
/// had when last read, so the figure never goes back: a round is measured by the
/// difference of two calls around it.
pub fn cpu_split() -> (f64, f64) {
    let servers = SERVER_THREADS.lock().map(|s| s.clone()).unwrap_or_default();
    let mut now = std::collections::HashMap::new();
    if let Ok(tasks) = std::fs::read_dir("/proc/self/task") {
        for task in tasks.flatten() {
            let name = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
            if stands_apart(name.trim_end()) {
                continue;
            }
            let id = task.file_name().to_string_lossy().into_owned();
            let Some(secs) = id.parse().ok().and_then(thread_cpu_of) else {
                continue;
            };
            let server = servers.contains(&id);
            now.insert(id, (secs, server));
        }
    }
    let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    let seen = seen.get_or_insert_with(Seen::default);
    for (id, &(secs, server)) in &seen.threads {
        if !now.contains_key(id) {
            match server {
                true => seen.ended.1 += secs,
                false => seen.ended.0 += secs,
            }
        }
    }
    seen.threads = now;
    let mut split = seen.ended;
    for &(secs, server) in seen.threads.values() {
        match server {
            true => split.1 += secs,
            false => split.0 += secs,
        }
    }
    split
}

/// Whether a thread of this name stands for the network or the hardware, so that its CPU
/// is neither a client's nor a server's: the link simulator's relays (`volley-netsim*`)
/// and the emulated boards' reply pacer (`volley-emulator*`, which spins while a reply is
/// due within 2 ms, as a board's own processor would be busy).
fn stands_apart(thread_name: &str) -> bool {
    thread_name.starts_with("volley-netsim") || thread_name.starts_with("volley-emulator")
}

/// The allocation counter of the binary running the suites, where it has one.
static ALLOC_COUNTS: OnceLock<fn() -> (u64, u64)> = OnceLock::new();

/// Gives the suites the binary's allocation counter (allocations and bytes allocated so
/// far, process-wide), for the tables that count allocations; without it they count none.
pub fn count_allocations_with(counts: fn() -> (u64, u64)) {
    let _ = ALLOC_COUNTS.set(counts);
}

/// Allocations and bytes allocated so far, if the binary counts them.
pub(crate) fn alloc_counts() -> Option<(u64, u64)> {
    ALLOC_COUNTS.get().map(|counts| counts())
}

/// One workload's interleaved rounds: per system, each round's calls a second and the
/// CPU microseconds a call cost the clients' and the servers' threads.
pub struct Rounds {
    /// Calls a second, per system, per round.
    pub rates: Vec<Vec<f64>>,
    /// Clients' CPU microseconds per call, per system, per round.
    pub client_us: Vec<Vec<f64>>,
    /// Servers' CPU microseconds per call, per system, per round.
    pub server_us: Vec<Vec<f64>>,
}

/// The median of some values (the mean of the middle two for an even count).
pub fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    match sorted.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

/// Rates of `systems` systems doing `calls` calls each, interleaved: `seconds(i, warm)`
/// runs system `i` once (a warm-up run first, with `warm` set and its time ignored),
/// then `rounds` rounds each run every system once in an order rotated by one a round,
/// so that no system always follows the same one. Calls a second and CPU per call, per
/// system and round (the CPU of everything the process did in the round: the suites run
/// one system at a time).
pub fn interleaved(
    systems: usize,
    rounds: usize,
    calls: usize,
    mut seconds: impl FnMut(usize, bool) -> f64,
) -> Rounds {
    for i in 0..systems {
        seconds(i, true);
    }
    let mut out = Rounds {
        rates: vec![Vec::new(); systems],
        client_us: vec![Vec::new(); systems],
        server_us: vec![Vec::new(); systems],
    };
    let per_call = 1e6 / calls.max(1) as f64;
    for round in 0..rounds {
        for k in 0..systems {
            let i = (k + round) % systems;
            let before = cpu_split();
            let secs = seconds(i, false);
            let after = cpu_split();
            out.rates[i].push(calls as f64 / secs);
            out.client_us[i].push((after.0 - before.0) * per_call);
            out.server_us[i].push((after.1 - before.1) * per_call);
        }
    }
    out
}

/// Runs servers on a thread of their own with a current-thread runtime: `make` starts
/// them and gives back what the suite needs (`T`, sent back here) and what must stay
/// alive for them to keep serving (`K`, held on that thread until the process ends).
pub fn serve_on_thread<T, K, F, Fut>(make: F) -> T
where
    T: Send + 'static,
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = (T, K)>,
{
    serve_on(tokio::runtime::Builder::new_current_thread(), make)
}

/// The same on tokio's default multi-thread runtime (a worker per core, as
/// `#[tokio::main]` gives), every worker counted as a server thread.
pub fn serve_on_workers<T, K, F, Fut>(make: F) -> T
where
    T: Send + 'static,
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = (T, K)>,
{
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.on_thread_start(register_server_thread);
    serve_on(builder, make)
}

fn serve_on<T, K, F, Fut>(mut builder: tokio::runtime::Builder, make: F) -> T
where
    T: Send + 'static,
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = (T, K)>,
{
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        register_server_thread();
        let runtime = builder.enable_all().build().expect("a tokio runtime");
        runtime.block_on(async move {
            let (ready, _keep) = make().await;
            let _ = tx.send(ready);
            futures::future::pending::<()>().await;
        });
    });
    rx.recv().expect("the servers started")
}

/// The two runtimes clients are measured on: a current-thread one, and a 2-worker one
/// ("mt client").
pub fn client_runtimes() -> (tokio::runtime::Runtime, tokio::runtime::Runtime) {
    let current = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let multi = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    (current, multi)
}

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

/// The calling thread's CPU seconds so far (user and system).
fn thread_cpu() -> f64 {
    clock_gettime(ClockId::CLOCK_THREAD_CPUTIME_ID).map_or(0.0, seconds)
}

/// A thread of this process's CPU seconds so far (user and system, the slice it runs now
/// included, which its `/proc` scheduler statistics leave out until its next tick), by its
/// kernel id, from its CPU-time clock (Linux names a thread's clock by its id complemented,
/// shifted left by 3, with 6 for "per thread, scheduler time"); none once it has ended.
fn thread_cpu_of(tid: i32) -> Option<f64> {
    clock_gettime(ClockId::from_raw((!tid << 3) | 6))
        .ok()
        .map(seconds)
}

fn seconds(t: nix::sys::time::TimeSpec) -> f64 {
    t.tv_sec() as f64 + t.tv_nsec() as f64 * 1e-9
}

/// Per-round rates of one measurement.
#[derive(Clone, Debug)]
pub(crate) struct Samples {
    /// Operations per second, one per round.
    pub(crate) ops_per_sec: Vec<f64>,
    /// The measuring thread's CPU nanoseconds per operation, one per round.
    pub(crate) cpu_ns_per_op: Vec<f64>,
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
    let (ops_per_sec, cpu_ns_per_op) = (0..mode.rounds())
        .map(|_| {
            let (start, cpu) = (Instant::now(), thread_cpu());
            for _ in 0..iterations {
                black_box(op());
            }
            let elapsed = start.elapsed().as_secs_f64();
            (
                iterations as f64 / elapsed,
                (thread_cpu() - cpu) * 1e9 / iterations as f64,
            )
        })
        .unzip();
    Samples {
        ops_per_sec,
        cpu_ns_per_op,
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
    fn a_threads_clock_read_by_its_id_is_its_own_cpu_time() {
        let tid: i32 = std::fs::read_link("/proc/thread-self")
            .ok()
            .and_then(|p| p.file_name()?.to_str()?.parse().ok())
            .expect("this thread's id");
        // Some work, so that the clock has moved on from zero.
        let mut x = 0u64;
        for i in 0..1_000_000u64 {
            x = black_box(x.wrapping_mul(31).wrapping_add(i));
        }
        let own = thread_cpu();
        let by_id = thread_cpu_of(tid).expect("a live thread's clock");
        let after = thread_cpu();
        assert!(own > 0.0, "the thread ran");
        assert!(
            own <= by_id && by_id <= after,
            "{own} <= {by_id} <= {after}"
        );
        assert_eq!(thread_cpu_of(-7), None, "no such thread");
    }

    #[test]
    fn the_network_and_the_hardware_are_neither_side() {
        assert!(stands_apart("volley-netsim-r"));
        assert!(stands_apart("volley-emulator"));
        assert!(!stands_apart("tokio-runtime-w"));
        assert!(!stands_apart("volley-bench"));
    }

    #[test]
    fn si_suffixes() {
        assert_eq!(si(1_234_567.0), "1.23 M");
        assert_eq!(si(45_600.0), "45.6 k");
        assert_eq!(si(12.0), "12.0");
    }
}
