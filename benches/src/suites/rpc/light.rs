//! The light-load table: an open-loop client (each call sent at its scheduled time, not
//! after the last reply) at a fixed rate, for volley on tokio's default multi-thread
//! runtime at both ends, volley tuned (current-thread runtimes, whose readers spin), and
//! tarpc on the default runtime at both ends; each system's server and client CPU per
//! call and its latency percentiles, every reply checked.

use core::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use hdrhistogram::Histogram;

use super::*;

/// Rates, calls a second.
const RATES: [f64; 2] = [1_000.0, 10_000.0];

/// Servers on tokio's default multi-thread runtime (a worker per core), each worker
/// counted as a server thread: volley over TCP, tarpc and the raw baseline.
#[derive(Clone, Copy)]
pub(super) struct DefaultServers {
    pub(super) volley: SocketAddr,
    pub(super) tarpc: SocketAddr,
    pub(super) raw: SocketAddr,
}

pub(super) fn start_default_servers() -> DefaultServers {
    harness::serve_on_workers(|| async {
        let volley = bench_tcp_server().await;
        let pattern = service::pattern(PATTERN);
        let addrs = DefaultServers {
            volley: volley.local_addr().expect("address"),
            tarpc: servers::tarpc_tcp_server(pattern.clone()).await,
            raw: servers::raw_tcp_server(pattern).await,
        };
        (addrs, volley)
    })
}

/// One system's round at one rate: (client µs CPU a call, server µs CPU a call,
/// [p50, p99, p99.9] µs).
type Sample = (f64, f64, [u64; 3]);

/// Sends `calls` calls of `w` at `rate` a second from one task, each at its time
/// whatever is in flight, checking every reply. Each call's latency counts from when it
/// is sent, not from when it was due: tokio's timer wakes the sender up to a millisecond
/// late, which would otherwise be every system's p50.
pub async fn open_loop(
    caller: impl Caller,
    w: Workload,
    rate: f64,
    calls: u64,
) -> Result<[u64; 3], String> {
    let mut latency = Histogram::<u64>::new(3).map_err(|e| e.to_string())?;
    let mut in_flight = FuturesUnordered::new();
    let start = tokio::time::Instant::now();
    let mut record = |result: (Result<(), String>, Duration)| -> Result<(), String> {
        result.0?;
        let us = u64::try_from(result.1.as_micros())
            .unwrap_or(u64::MAX)
            .max(1);
        latency.record(us).map_err(|e| e.to_string())
    };
    for i in 0..calls {
        let due = start + Duration::from_secs_f64(i as f64 / rate);
        loop {
            tokio::select! {
                biased;
                () = tokio::time::sleep_until(due) => break,
                Some(done) = in_flight.next() => record(done)?,
            }
        }
        let mut caller = caller.clone();
        in_flight.push(async move {
            let sent = Instant::now();
            let result = caller.call(w, i).await;
            (result, sent.elapsed())
        });
    }
    while let Some(done) = in_flight.next().await {
        record(done)?;
    }
    Ok([0.5, 0.99, 0.999].map(|q| latency.value_at_quantile(q)))
}

/// The light-load table's columns.
pub const LIGHT_COLUMNS: [&str; 7] = [
    "calls/s",
    "system",
    "client CPU µs/call",
    "server CPU µs/call",
    "p50 µs",
    "p99 µs",
    "p99.9 µs",
];

/// One system's open-loop round: `calls` calls of a workload at a rate, on the system's
/// own client runtime; its latency percentiles, or what went wrong.
pub type OpenLoopRound<'a> = Box<dyn Fn(Workload, f64, u64) -> Result<[u64; 3], String> + 'a>;

/// What [`light_load`] measured: table rows, data points and failures.
#[derive(Default)]
pub struct Light {
    /// Rows under [`LIGHT_COLUMNS`].
    pub rows: Vec<Vec<String>>,
    /// A data point per row.
    pub data: Vec<serde_json::Value>,
    /// A line per round that failed.
    pub failures: Vec<String>,
}

/// Each rate (1,000 and 10,000 calls a second) for `secs` seconds, each system in turn, `rounds` rounds in
/// rotating order; medians of each system's CPU per call and percentiles.
pub fn light_load(rounds: usize, secs: f64, systems: &[(&str, OpenLoopRound<'_>)]) -> Light {
    let mut out = Light::default();
    for rate in RATES {
        let calls = (rate * secs) as u64;
        let w = Workload {
            name: "light",
            work: Work::Echo,
            payload: 8,
            callers: 1,
            calls: calls as usize,
        };
        let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); systems.len()];
        for round in 0..rounds {
            for k in 0..systems.len() {
                let i = (k + round) % systems.len();
                let before = harness::cpu_split();
                let result = (systems[i].1)(w, rate, calls);
                let after = harness::cpu_split();
                match result {
                    Ok(p) => samples[i].push((
                        (after.0 - before.0) * 1e6 / calls as f64,
                        (after.1 - before.1) * 1e6 / calls as f64,
                        p,
                    )),
                    Err(e) => out
                        .failures
                        .push(format!("light load, {} at {rate}/s: {e}", systems[i].0)),
                }
            }
        }
        for (i, (name, _)) in systems.iter().enumerate() {
            let s = &samples[i];
            if s.is_empty() {
                continue;
            }
            let med = |f: &dyn Fn(&Sample) -> f64| median(&s.iter().map(f).collect::<Vec<_>>());
            let (client, server) = (med(&|x| x.0), med(&|x| x.1));
            let p = [0, 1, 2].map(|j| med(&|x| x.2[j] as f64));
            out.rows.push(vec![
                format!("{rate:.0}"),
                (*name).into(),
                format!("{client:.1}"),
                format!("{server:.1}"),
                format!("{:.0}", p[0]),
                format!("{:.0}", p[1]),
                format!("{:.0}", p[2]),
            ]);
            out.data.push(json!({
                "table": "light load", "calls_per_sec": rate, "system": name,
                "client_cpu_us_per_call": client, "server_cpu_us_per_call": server,
                "p50_us": p[0], "p99_us": p[1], "p999_us": p[2],
            }));
        }
    }
    out
}

/// Seconds a rate runs for in `mode`.
pub(super) fn light_secs(mode: Mode) -> f64 {
    match mode {
        Mode::Quick => 2.0,
        Mode::Full => 5.0,
    }
}

/// The light-load table: each rate, each system, interleaved rounds, medians.
pub(super) fn light_table(
    mode: Mode,
    servers: &Servers,
    current: &tokio::runtime::Runtime,
    multi: &tokio::runtime::Runtime,
    pattern: &Bytes,
    report: &mut Report,
) -> Table {
    let secs = light_secs(mode);
    let systems: [(&str, SocketAddr, bool, bool); 3] = [
        (
            "volley tcp (default runtimes)",
            servers.default.volley,
            true,
            false,
        ),
        (
            "volley tcp (tuned: current-thread, spinning)",
            servers.volley,
            false,
            false,
        ),
        (
            "tarpc (default runtimes)",
            servers.default.tarpc,
            true,
            true,
        ),
    ];
    let runtime = |multi_client: bool| if multi_client { multi } else { current };
    let clients: Vec<Client> = systems
        .iter()
        .map(|&(_, addr, on_multi, is_tarpc)| {
            runtime(on_multi).block_on(async move {
                match is_tarpc {
                    true => Client::Tarpc(peers::tarpc_client(length_delimited(tcp(addr).await))),
                    false => {
                        let link = FramedLink::connect_tcp(addr).await.expect("connect");
                        Client::Volley(volley(Config::default(), link).await)
                    }
                }
            })
        })
        .collect();
    let rounds: Vec<(&str, OpenLoopRound<'_>)> = systems
        .iter()
        .zip(&clients)
        .map(|(&(name, _, on_multi, _), client)| {
            let on = runtime(on_multi);
            let round: OpenLoopRound<'_> = Box::new(move |w, rate, calls| {
                on.block_on(async {
                    match client {
                        Client::Tarpc(c) => {
                            open_loop(Each::new(c.clone(), pattern), w, rate, calls).await
                        }
                        Client::Volley(p) => {
                            let caller = Each::new(BenchClient::new(p.clone()), pattern);
                            open_loop(caller, w, rate, calls).await
                        }
                        _ => Err("only volley and tarpc clients here".into()),
                    }
                })
            });
            (name, round)
        })
        .collect();
    let light = light_load(mode.rounds().min(3), secs, &rounds);
    for failure in light.failures {
        report.failures += 1;
        report.notes.push(format!("FAILED: {failure}"));
    }
    report.data.extend(light.data);
    report.notes.push(
        "light load: default runtimes are tokio's multi-thread runtime at both ends (a worker \
         per core; volley's readers do not spin there); tuned is volley's current-thread \
         setup at both ends, whose readers spin up to 250 µs after traffic; tonic's rows \
         (with volley tcp on the default runtimes again beside them) come from the TLS \
         binary (benches/tls), a process of their own"
            .into(),
    );
    Table {
        title: format!(
            "{LIGHT_TITLE}, 8 B echo, {secs} s a rate (µs; CPU per call from each thread's \
             CPU-time clock)"
        ),
        columns: LIGHT_COLUMNS.to_vec(),
        rows: light.rows,
    }
}

/// How the light-load table's title begins (the TLS binary's rows join it).
pub const LIGHT_TITLE: &str = "Light load: one open-loop client over TCP, each call sent at its time (latency from its sending)";
