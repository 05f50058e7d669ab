//! What every benchmark binary shares, the TLS rows' (`benches/tls`, outside the
//! workspace) included: medians, servers on a thread of their own, and interleaved
//! rounds. Only tokio, futures and std: `benches/tls` includes this file as it is.

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
/// so that no system always follows the same one. Calls a second, per system.
pub(crate) fn interleaved(
    systems: usize,
    rounds: usize,
    calls: usize,
    mut seconds: impl FnMut(usize, bool) -> f64,
) -> Vec<Vec<f64>> {
    for i in 0..systems {
        seconds(i, true);
    }
    let mut rates = vec![Vec::new(); systems];
    for round in 0..rounds {
        for k in 0..systems {
            let i = (k + round) % systems;
            rates[i].push(calls as f64 / seconds(i, false));
        }
    }
    rates
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
