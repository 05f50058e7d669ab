//! What a call costs beside its speed: allocations and bytes allocated per call against
//! the payload size, and what spinning for a pool buffer buys.

#[allow(clippy::wildcard_imports)]
use super::*;

/// The allocations table's columns.
const ALLOC_COLUMNS: [&str; 5] = [
    "system",
    "call",
    "payload",
    "allocs/call",
    "bytes alloc/call",
];

/// The allocations table: measured here under the counting allocator (`volley-bench`);
/// under `volley-bench-plain`, which runs the speed tables without the counters' shared
/// atomics, by `volley-bench rpc-allocations` beside it.
pub(super) fn allocations_table(
    runtime: &tokio::runtime::Runtime,
    servers: &Servers,
    pattern: &Bytes,
    report: &mut Report,
) -> Option<Table> {
    if harness::alloc_counts().is_some() {
        return Some(runtime.block_on(allocations(servers, pattern, report)));
    }
    let counting = std::env::current_exe()
        .map_err(|e| format!("cannot find this binary: {e}"))
        .map(|exe| exe.with_file_name("volley-bench"));
    match counting.and_then(|binary| child_table(&binary, &[ALLOCATIONS_CHILD], &ALLOC_COLUMNS)) {
        Ok((table, _, data)) => {
            report.data.extend(data);
            Some(table)
        }
        Err(e) => {
            report
                .notes
                .push(format!("the allocations table failed: {e}"));
            report.failures += 1;
            None
        }
    }
}

/// The argument that makes `volley-bench` print the allocations table as JSON.
pub(crate) const ALLOCATIONS_CHILD: &str = "rpc-allocations";

/// `volley-bench rpc-allocations`: starts the servers, measures the allocations table and
/// prints it as one JSON object (what [`child_table`] reads).
pub(crate) fn allocations_child() -> Result<(), String> {
    if harness::alloc_counts().is_none() {
        return Err(format!(
            "{ALLOCATIONS_CHILD} counts allocations: run it with volley-bench, not volley-bench-plain"
        ));
    }
    let dir = std::env::temp_dir().join(format!("volley-bench-allocs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let servers = start_servers(dir.clone());
    let (current, _multi) = harness::client_runtimes();
    let mut report = Report::new("rpc", "allocations per call", Mode::Quick);
    let pattern = service::pattern(PATTERN);
    let table = current.block_on(allocations(&servers, &pattern, &mut report));
    let _ = std::fs::remove_dir_all(&dir);
    let out = json!({
        "title": table.title,
        "columns": table.columns,
        "rows": table.rows,
        "notes": [],
        "data": report.data,
    });
    println!("{out}");
    Ok(())
}

/// Allocations and bytes allocated per call, both ends in this process, for put and get
/// at 8 B, 64 KiB and 1 MiB: volley's must not grow with the payload.
pub(super) async fn allocations(servers: &Servers, pattern: &Bytes, report: &mut Report) -> Table {
    let mut table = Table {
        title: "Allocations per call, client and server together (TCP, 1 caller, 200 calls)".into(),
        columns: ALLOC_COLUMNS.to_vec(),
        rows: Vec::new(),
    };
    for system in ["volley tcp, tuned", "tarpc, current-thread"] {
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
                let before = harness::alloc_counts();
                measure(&client, w, pattern).await.expect("measured run");
                let counts = before.zip(harness::alloc_counts());
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
        title: format!(
            "Spin-then-await for a pool buffer (in-process link, one-buffer pools, \
             ARTIQ's take_i32_list of {LIST} i32s: arguments too long to travel inline)"
        ),
        columns: vec![
            "callers",
            "spin",
            "calls/s",
            "spin 100 / spin 0",
            "CPU µs/call",
            "spin 100 / spin 0 per CPU",
            "buffers at once/spun/awaited",
        ],
        rows: Vec::new(),
    };
    for tasks in [1usize, 64] {
        let w = Workload {
            name: "spin",
            work: Work::Echo,
            payload: 4 * LIST,
            callers: tasks,
            calls: if tasks == 1 { 4000 } else { 40_000 },
        };
        let mut clients = Vec::new();
        for spin in [0u32, 100] {
            let pool = PoolConfig {
                buffers: 1,
                spin,
                ..PoolConfig::default()
            };
            let ours = local_to(&servers.artiq_local, pool);
            let config = Config {
                pool,
                ..Config::default()
            };
            let peer: Peer<Artiq> = volley(config, ours).await;
            let client = Each::new(ArtiqClient::new(peer.clone()), pattern);
            callers(Workload { calls: 500, ..w }, client.clone())
                .await
                .expect("warm-up");
            clients.push((spin, peer, client, Vec::new(), Vec::new()));
        }
        for round in 0..mode.rounds() {
            for k in 0..2 {
                let (_, _, client, rates, cpu) = &mut clients[(k + round) % 2];
                let (start, cpu0) = (Instant::now(), artiq::cpu_now());
                callers(w, client.clone()).await.expect("run");
                rates.push(w.calls as f64 / start.elapsed().as_secs_f64());
                cpu.push((artiq::cpu_now() - cpu0) * 1e6 / w.calls as f64);
            }
        }
        let (base, base_cpu) = (median(&clients[0].3), median(&clients[0].4));
        for (spin, peer, _, rates, cpu) in &clients {
            let (rate, cpu) = (median(rates), median(cpu));
            let stats = peer.pool_stats();
            table.rows.push(vec![
                format!("{tasks}"),
                format!("{spin}"),
                format!("{rate:.0}"),
                format!("{:.2}x", rate / base),
                format!("{cpu:.1}"),
                format!("{:.2}x", base_cpu / cpu),
                format!("{}/{}/{}", stats.at_once, stats.by_spinning, stats.awaited),
            ]);
            report.data.push(json!({
                "spin_callers": tasks, "spin": spin, "calls_per_sec": rate, "cpu_us_per_call": cpu,
                "pool_at_once": stats.at_once, "pool_by_spinning": stats.by_spinning,
                "pool_awaited": stats.awaited,
            }));
        }
    }
    table
}

/// i32s in the spin table's list: 64 (65 bytes encoded), past a payload's inline room, so
/// each call takes a pool buffer.
const LIST: usize = 64;

impl Caller for Each<ArtiqClient> {
    fn call(
        &mut self,
        _w: Workload,
        _index: u64,
    ) -> impl Future<Output = Result<(), String>> + Send {
        let list = vec![123i32; LIST];
        async move {
            self.client
                .take_i32_list(list)
                .await
                .map_err(|e| e.to_string())
        }
    }
}
