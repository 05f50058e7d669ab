//! What every benchmark binary shares, the TLS rows' (`benches/tls`, outside the
//! workspace) included: medians, servers on a thread of their own, interleaved rounds,
//! and the CPU each round cost the clients' and the servers' threads. Only tokio, futures
//! and std: `benches/tls` includes this file as it is.

use std::sync::Mutex;

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
pub(crate) fn register_server_thread() {
    if let (Some(id), Ok(mut servers)) = (this_thread(), SERVER_THREADS.lock()) {
        servers.push(id);
    }
}

/// CPU seconds so far of this process's threads, split into (clients, servers): each
/// thread's time on a CPU from its scheduler statistics (nanoseconds, user and system
/// together); the link simulator's threads (named `volley-netsim*`) are neither. A thread that has ended is no longer counted, so a round is measured by the
/// difference of two calls around it, in which no thread of the suite's own ends.
pub(crate) fn cpu_split() -> (f64, f64) {
    let servers = SERVER_THREADS.lock().map(|s| s.clone()).unwrap_or_default();
    let mut split = (0.0, 0.0);
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return split;
    };
    for task in tasks.flatten() {
        // The link simulator's relays stand for the network: neither side's CPU.
        let name = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if name.starts_with("volley-netsim") {
            continue;
        }
        let ns = std::fs::read_to_string(task.path().join("schedstat"))
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
            .unwrap_or(0);
        let secs = ns as f64 * 1e-9;
        match servers.iter().any(|t| task.file_name().to_str() == Some(t)) {
            true => split.1 += secs,
            false => split.0 += secs,
        }
    }
    split
}

/// One workload's interleaved rounds: per system, each round's calls a second and the
/// CPU microseconds a call cost the clients' and the servers' threads.
pub(crate) struct Rounds {
    /// Calls a second, per system, per round.
    pub(crate) rates: Vec<Vec<f64>>,
    /// Clients' CPU microseconds per call, per system, per round.
    pub(crate) client_us: Vec<Vec<f64>>,
    /// Servers' CPU microseconds per call, per system, per round.
    pub(crate) server_us: Vec<Vec<f64>>,
}

/// The median of some values (the mean of the middle two for an even count).
pub(crate) fn median(values: &[f64]) -> f64 {
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
pub(crate) fn interleaved(
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
pub(crate) fn serve_on_thread<T, K, F, Fut>(make: F) -> T
where
    T: Send + 'static,
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = (T, K)>,
{
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        register_server_thread();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime");
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
pub(crate) fn client_runtimes() -> (tokio::runtime::Runtime, tokio::runtime::Runtime) {
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
