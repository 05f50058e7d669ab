//! What a call costs beside its speed: allocations and bytes allocated per call against
//! the payload size, and what spinning for a pool buffer buys.

#[allow(clippy::wildcard_imports)]
use super::*;

/// Allocations and bytes allocated per call, both ends in this process, for put and get
/// at 8 B, 64 KiB and 1 MiB: volley's must not grow with the payload.
pub(super) async fn allocations(servers: &Servers, pattern: &Bytes, report: &mut Report) -> Table {
    let mut table = Table {
        title: "Allocations per call, client and server together (TCP, 1 caller, 200 calls)".into(),
        columns: vec![
            "system",
            "call",
            "payload",
            "allocs/call",
            "bytes alloc/call",
        ],
        rows: Vec::new(),
    };
    for system in ["volley tcp", "tarpc"] {
        let client = connect(system, servers, PoolConfig::default()).await;
        for work in [Work::Put, Work::Get] {
            for payload in [8usize, 64 * 1024, MIB] {
                let w = Workload {
                    name: "alloc",
                    work,
                    payload,
                    callers: 1,
                    calls: 200,
                };
                measure(&client, Workload { calls: 20, ..w }, pattern)
                    .await
                    .expect("warm-up");
                let before = crate::alloc_counts();
                measure(&client, w, pattern).await.expect("measured run");
                let counts = before.zip(crate::alloc_counts());
                let per_call = |f: fn((u64, u64)) -> u64| {
                    counts.map(|(a, b)| (f(b) - f(a)) as f64 / w.calls as f64)
                };
                let allocs = per_call(|c| c.0).unwrap_or(f64::NAN);
                let bytes = per_call(|c| c.1).unwrap_or(f64::NAN);
                let call = if work == Work::Put { "put" } else { "get" };
                table.rows.push(vec![
                    system.into(),
                    call.into(),
                    format!("{payload}"),
                    format!("{allocs:.1}"),
                    format!("{bytes:.0}"),
                ]);
                report.data.push(json!({
                    "alloc_system": system, "call": call, "payload": payload,
                    "allocs_per_call": allocs, "alloc_bytes_per_call": bytes,
                }));
            }
        }
    }
    table
}

/// What spinning for a pool buffer buys: echo at 1 and 64 callers with one buffer per
/// end (as ARTIQ's cores share one), spin 100 against spin 0, interleaved rounds.
pub(super) async fn spinning(
    mode: Mode,
    servers: &Servers,
    pattern: &Bytes,
    report: &mut Report,
) -> Table {
    let mut table = Table {
        title: "Spin-then-await for a pool buffer (in-process link, one-buffer pools, 8 B echo)"
            .into(),
        columns: vec![
            "callers",
            "spin",
            "calls/s",
            "spin 100 / spin 0",
            "buffers at once/spun/awaited",
        ],
        rows: Vec::new(),
    };
    for callers in [1usize, 64] {
        let w = Workload {
            name: "spin",
            work: Work::Echo,
            payload: 8,
            callers,
            calls: if callers == 1 { 4000 } else { 40_000 },
        };
        let mut clients = Vec::new();
        for spin in [0u32, 100] {
            let pool = PoolConfig {
                buffers: 1,
                spin,
                ..PoolConfig::default()
            };
            let client = connect("volley in-process", servers, pool).await;
            measure(&client, Workload { calls: 500, ..w }, pattern)
                .await
                .expect("warm-up");
            clients.push((spin, client, Vec::new()));
        }
        for round in 0..mode.rounds() {
            for k in 0..2 {
                let (_, client, rates) = &mut clients[(k + round) % 2];
                let secs = measure(client, w, pattern).await.expect("run");
                rates.push(w.calls as f64 / secs);
            }
        }
        let base = median(&clients[0].2);
        for (spin, client, rates) in &clients {
            let rate = median(rates);
            let Client::Volley(peer) = client else {
                unreachable!("in-process is volley")
            };
            let stats = peer.pool().stats();
            table.rows.push(vec![
                format!("{callers}"),
                format!("{spin}"),
                format!("{rate:.0}"),
                format!("{:.2}x", rate / base),
                format!("{}/{}/{}", stats.at_once, stats.by_spinning, stats.awaited),
            ]);
            report.data.push(json!({
                "spin_callers": callers, "spin": spin, "calls_per_sec": rate,
                "pool_at_once": stats.at_once, "pool_by_spinning": stats.by_spinning,
                "pool_awaited": stats.awaited,
            }));
        }
    }
    table
}
