//! `rpc`: volley-rpc beside tarpc 0.38 (the Rust anchor on the same stack: tokio, serde,
//! bincode) and a raw tokio length-delimited baseline, on one loopback connection each:
//! sequential 8-byte calls, 64 concurrent callers, 1 MiB put and 1 MiB get. volley runs
//! over TCP (bincode and postcard), a Unix socket and the in-process link. Then ARTIQ's
//! `test_performance` table over volley TCP, allocations per call against payload size,
//! what spinning for a pool buffer buys, and a light-load table (an open-loop client at
//! 1,000 and 10,000 calls a second: CPU per call and latency percentiles).
//!
//! Every system does the same work per call: echo returns its 8 bytes, put hashes the
//! payload with xxh3 and returns length and hash, get returns a slice of a fixed pattern
//! at an offset from the call's index; the client checks each reply. The headline rows
//! (`raw tokio`, `tarpc`, `volley tcp`) run both ends on tokio's multi-thread runtime, as
//! `#[tokio::main]` gives; beside them each runs with its server on one current-thread
//! runtime of its own and its client on a current-thread (`tuned` for volley, whose readers
//! spin there) or a two-worker one. Each round runs every system once, in rotating order,
//! and the table gives medians.

use core::net::SocketAddr;
use core::sync::atomic::{AtomicU64, Ordering};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use serde_json::json;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::codec::{Framed, LengthDelimitedCodec};
use volley_rpc::link::MessageLink;
use volley_rpc::link::framed::FramedLink;
use volley_rpc::link::local::{self, LocalLink};
use volley_rpc::{
    Bincode, Codec, Config, Endpoint, LeArray, Peer, PoolConfig, Postcard, Reply, Router, Service,
    serve,
};
use volley_rpc_bench::{self as service, Bench, BenchClient, BenchState};
use volley_transport_tcp::Listener;

use crate::harness::{self, Mode, Report, Table, median};

mod artiq;
mod costs;
pub mod light;
pub mod peers;
mod servers;

use artiq::{Arrivals, Artiq, ArtiqClient, artiq_router, artiq_table};
pub(crate) use costs::{ALLOCATIONS_CHILD, allocations_child};
use costs::{allocations_table, spinning};
use peers::{
    Caller, Each, MIB, TarpcBenchClient, Work, Workload, callers, check, length_delimited, raw_run,
    raw_server, tarpc_serve, tcp,
};
pub(crate) use servers::bench_tcp_server;
use servers::{RawCall, RawReply, Servers, local_to, start_servers};
/// Pattern bytes: the largest payload plus room for every offset.
const PATTERN: usize = MIB + 4096;

// ---------------------------------------------------------------------------------------
// The clients.

/// A connected client of one system.
enum Client {
    Raw(Arc<tokio::sync::Mutex<Framed<TcpStream, LengthDelimitedCodec>>>),
    Tarpc(TarpcBenchClient),
    Volley(Peer<Bench, Bincode>),
    Postcard(Peer<Bench, Postcard>),
    RawLocal(tokio::sync::mpsc::Sender<RawCall>),
}

/// Each system, and whether its client runs on the 2-worker runtime (else the
/// current-thread one). A plain name (`raw tokio`, `tarpc`, `volley tcp`) runs on the
/// default runtimes, what `#[tokio::main]` gives and most users run: the server on tokio's
/// multi-thread runtime (a worker per core), the client on a 2-worker one. `current-thread`
/// and `tuned` rows run the server on one current-thread runtime and the client on
/// another (`tuned`: volley's, whose readers spin up to 250 us there before they sleep);
/// `mt client` rows the server so and the client on the 2-worker runtime. tarpc and the
/// raw baseline run all three ways and are compared at their best per workload; volley
/// over TCP shows all three.
const SYSTEMS: [(&str, bool); 13] = [
    ("raw tokio", true),
    ("raw tokio, current-thread", false),
    ("raw tokio, mt client", true),
    ("tarpc", true),
    ("tarpc, current-thread", false),
    ("tarpc, mt client", true),
    ("volley tcp", true),
    ("volley tcp, tuned", false),
    ("volley tcp, mt client", true),
    ("volley tcp postcard, tuned", false),
    ("volley unix, tuned", false),
    ("volley in-process, tuned", false),
    ("mpsc + oneshot, current-thread", false),
];

/// The systems whose `/ raw` divides by the in-process anchor (mpsc + oneshot, the last system), not
/// by raw tokio over TCP.
fn in_process(system: &str) -> bool {
    system.contains("in-process")
}

/// A volley connection over `link`, after its hello.
async fn volley<S: Service, C: Codec, L: MessageLink>(config: Config, link: L) -> Peer<S, C> {
    Endpoint::new(config)
        .expect("settings")
        .connect(link)
        .await
        .expect("hello")
}

async fn connect(system: &str, servers: &Servers, pool: PoolConfig) -> Client {
    let config = Config {
        pool,
        ..Config::default()
    };
    match system {
        "raw tokio" => {
            let stream = tcp(servers.default.raw).await;
            return Client::Raw(Arc::new(tokio::sync::Mutex::new(length_delimited(stream))));
        }
        "tarpc" => {
            let stream = tcp(servers.default.tarpc).await;
            return Client::Tarpc(peers::tarpc_client(length_delimited(stream)));
        }
        "volley tcp" => {
            let link = FramedLink::connect_tcp(servers.default.volley).await;
            return Client::Volley(volley(config, link.expect("connect")).await);
        }
        _ => {}
    }
    let system = system
        .trim_end_matches(", mt client")
        .trim_end_matches(", current-thread")
        .trim_end_matches(", tuned");
    let framed = |addr| async move { FramedLink::connect_tcp(addr).await.expect("connect") };
    match system {
        "raw tokio" => Client::Raw(Arc::new(tokio::sync::Mutex::new(length_delimited(
            tcp(servers.raw).await,
        )))),
        "tarpc" => Client::Tarpc(peers::tarpc_client(length_delimited(
            tcp(servers.tarpc).await,
        ))),
        "volley tcp" => Client::Volley(volley(config, framed(servers.volley).await).await),
        "volley tcp postcard" => {
            Client::Postcard(volley(config, framed(servers.postcard).await).await)
        }
        "volley unix" => Client::Volley(
            volley(
                config,
                FramedLink::connect_unix(&servers.unix)
                    .await
                    .expect("connect"),
            )
            .await,
        ),
        "mpsc + oneshot" => {
            let (tx, rx) = tokio::sync::mpsc::channel(1024);
            servers.raw_local.send(rx).expect("the server thread runs");
            Client::RawLocal(tx)
        }
        _ => Client::Volley(volley(config, local_to(&servers.local, pool)).await),
    }
}

/// Runs one workload on one client: seconds taken, or an error if a reply was wrong.
async fn measure(client: &Client, w: Workload, pattern: &Bytes) -> Result<f64, String> {
    let start = Instant::now();
    match client {
        Client::Raw(framed) => raw_run(framed, w, pattern).await?,
        Client::Tarpc(c) => callers(w, Each::new(c.clone(), pattern)).await?,
        Client::Volley(p) => callers(w, Each::new(BenchClient::new(p.clone()), pattern)).await?,
        Client::Postcard(p) => {
            callers(w, Each::new(BenchClient::new(p.clone()), pattern)).await?;
        }
        Client::RawLocal(tx) => callers(w, Each::new(tx.clone(), pattern)).await?,
    }
    Ok(start.elapsed().as_secs_f64())
}

impl Caller for Each<tokio::sync::mpsc::Sender<RawCall>> {
    fn call(&mut self, w: Workload, index: u64) -> impl Future<Output = Result<(), String>> + Send {
        // A sender of its own for each call: the anchor measured faster so than sending
        // on the task's sender, and a ceiling is taken at its best.
        let tx = self.client.clone();
        async move { raw_local_call(&tx, w, index, &self.pattern).await }
    }
}

/// A call of the raw in-process anchor: a tokio mpsc queue there, a oneshot back.
async fn raw_local_call(
    tx: &tokio::sync::mpsc::Sender<RawCall>,
    w: Workload,
    index: u64,
    pattern: &Bytes,
) -> Result<(), String> {
    let start = service::offset(index);
    let body = match w.work {
        Work::Put => pattern.slice(start..start + w.payload),
        _ => Bytes::new(),
    };
    let (reply, answer) = tokio::sync::oneshot::channel();
    tx.send(RawCall {
        work: w.work,
        index,
        len: w.payload,
        body: body.clone(),
        reply,
    })
    .await
    .map_err(|_| "mpsc + oneshot: the server ended")?;
    match answer.await.map_err(|_| "mpsc + oneshot: no reply")? {
        RawReply::Echo(v) => check(v == index, "echo"),
        RawReply::Put(len, hash) => check(
            len == w.payload as u64 && hash == peers::put_hash(pattern, start, w.payload),
            "put",
        ),
        RawReply::Get(bytes) => check(bytes == pattern[start..start + w.payload], "get"),
    }
}

// ---------------------------------------------------------------------------------------

pub(crate) fn run(mode: Mode) -> Report {
    let dir = std::env::temp_dir().join(format!("volley-bench-rpc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let servers = start_servers(dir.clone());
    let (current, multi) = harness::client_runtimes();
    let runtime_of = |i: usize| if SYSTEMS[i].1 { &multi } else { &current };
    let runtime = &current;
    let pattern = service::pattern(PATTERN);
    let scale = match mode {
        Mode::Quick => 1,
        Mode::Full => 3,
    };
    let workloads = [
        Workload {
            name: "8 B sequential",
            work: Work::Echo,
            payload: 8,
            callers: 1,
            calls: 4000 * scale,
        },
        Workload {
            name: "8 B, 64 callers",
            work: Work::Echo,
            payload: 8,
            callers: 64,
            calls: 40_000 * scale,
        },
        Workload {
            name: "1 MiB put",
            work: Work::Put,
            payload: MIB,
            callers: 1,
            calls: 150 * scale,
        },
        Workload {
            name: "1 MiB get",
            work: Work::Get,
            payload: MIB,
            callers: 1,
            calls: 150 * scale,
        },
    ];
    let rounds = mode.rounds();
    let mut report = Report::new(
        "rpc",
        "RPC on one loopback connection: volley-rpc, tarpc 0.38, raw tokio length-delimited",
        mode,
    );
    report.columns = vec![
        "workload",
        "system",
        "calls/s",
        "MiB/s",
        "min..max calls/s",
        "/ tarpc",
        "/ raw",
        "client CPU µs/call",
        "server CPU µs/call",
        "calls/CPU-s",
        "/ tarpc per CPU",
    ];
    let clients: Vec<Client> = (0..SYSTEMS.len())
        .map(|i| runtime_of(i).block_on(connect(SYSTEMS[i].0, &servers, PoolConfig::default())))
        .collect();
    for w in workloads {
        peers::expect_puts(w, &pattern);
        let rounds = harness::interleaved(SYSTEMS.len(), rounds, w.calls, |i, warm| {
            let w = if warm { w.warm_up() } else { w };
            runtime_of(i)
                .block_on(measure(&clients[i], w, &pattern))
                .unwrap_or_else(|e| panic!("{} {}: {e}", SYSTEMS[i].0, w.name))
        });
        let rates = &rounds.rates;
        let medians: Vec<f64> = rates.iter().map(|r| median(r)).collect();
        let cpu: Vec<(f64, f64)> = (0..SYSTEMS.len())
            .map(|i| (median(&rounds.client_us[i]), median(&rounds.server_us[i])))
            .collect();
        let per_cpu = |i: usize| peers::per_cpu(cpu[i]);
        // Each anchor at its best runtime setup for this workload.
        let at = |name: &str| SYSTEMS.iter().position(|s| s.0 == name).expect("a system");
        let setups = |name: &str| {
            [
                name.to_owned(),
                format!("{name}, current-thread"),
                format!("{name}, mt client"),
            ]
            .map(|s| at(&s))
        };
        let best = |name: &str, of: &dyn Fn(usize) -> f64| {
            setups(name).into_iter().map(of).fold(0.0, f64::max)
        };
        let (raw, tarpc) = (
            best("raw tokio", &|i| medians[i]),
            best("tarpc", &|i| medians[i]),
        );
        let tarpc_per_cpu = best("tarpc", &per_cpu);
        // The setup users run, like for like.
        let (v, t) = (at("volley tcp"), at("tarpc"));
        report.notes.push(format!(
            "{}: on the default runtimes volley tcp / tarpc = {:.2}x calls/s, {:.2}x calls per CPU-second",
            w.name,
            medians[v] / medians[t],
            per_cpu(v) / per_cpu(t)
        ));
        let raw_local = medians[SYSTEMS.len() - 1];
        for (i, (system, _)) in SYSTEMS.iter().enumerate() {
            let rate = medians[i];
            let raw = if in_process(system) { raw_local } else { raw };
            let (mut row, mut point) = w.row(system, rate, &rates[i], &[tarpc, raw]);
            peers::cpu_columns(&mut row, &mut point, cpu[i], tarpc_per_cpu);
            point["client_cpu_rounds_us"] = json!(rounds.client_us[i]);
            point["server_cpu_rounds_us"] = json!(rounds.server_us[i]);
            report.rows.push(row);
            report.data.push(point);
        }
    }
    drop(clients);
    let table = runtime.block_on(artiq_table(mode, &servers, &mut report));
    report.tables.push(table);
    if let Some(table) = allocations_table(runtime, &servers, &pattern, &mut report) {
        report.tables.push(table);
    }
    let table = runtime.block_on(spinning(mode, &servers, &pattern, &mut report));
    report.tables.push(table);
    let table = light::light_table(mode, &servers, &current, &multi, &pattern, &mut report);
    report.tables.push(table);
    report.notes.push(
        "every reply checked (echo value, put length and xxh3, get bytes against the pattern); \
         the client's expected put hashes are computed before the rounds (the servers hash \
         every payload they get, in the timed path); every TCP socket, the peers' too, set up \
         by volley_transport_tcp::tune (Nagle off, reno on loopback); plain names (raw tokio, tarpc, volley tcp) run on the default runtimes: the server on tokio's multi-thread runtime (a worker per core), the client on a 2-worker one, as #[tokio::main] gives; current-thread and tuned: server and client each on a current-thread runtime (tuned: volley's readers spin there up to 250 µs before they sleep); mt client: the server so, the client on the 2-worker runtime; one connection per system; each caller task holds its own clone of the client, so a call clones nothing; / tarpc and / raw divide by the best of each anchor's three setups"
            .into(),
    );
    report.notes.push(
        "CPU: each thread's time on a CPU (user and system, from its own CPU-time clock) \
         over the round, divided by the calls: the servers' thread apart, every other thread \
         (the client runtime's, the caller's) the client's; / tarpc per CPU divides calls per \
         CPU-second (client and server together) by the better of tarpc's two setups; \
         volley's readers spin up to 250 µs before they sleep, which these columns include"
            .into(),
    );
    report.notes.push(
        "mpsc + oneshot: the in-process anchor, not a ceiling: the same callers sending each call \
         through a tokio mpsc queue (1024) to one server task that answers on a oneshot (no \
         codec, no ids, no credit; its server task sleeps between calls where volley's reader \
         spins); the in-process rows' / raw divides by it"
            .into(),
    );
    report.notes.push(
        "raw tokio: LengthDelimitedCodec frames, the same number outstanding as callers, \
         answered in order by one task per connection (no request ids, no dispatch), each end \
         feeding while replies or requests are already read and flushing once when none is; \
         a payload of 64 KiB or more (a put's, a get's reply) is written to the socket from \
         where it lies after what the codec holds, not copied: the machine's baseline"
            .into(),
    );
    tls_rows(mode, &mut report);
    let _ = std::fs::remove_dir_all(&dir);
    report
}

/// The columns of the TLS and QUIC table `volley-bench-tls` prints.
pub const TLS_COLUMNS: [&str; 12] = [
    "workload",
    "system",
    "calls/s",
    "MiB/s",
    "min..max calls/s",
    "/ tarpc tls",
    "/ tonic tls",
    "/ anchor",
    "client CPU µs/call",
    "server CPU µs/call",
    "calls/CPU-s",
    "/ tarpc tls per CPU",
];

/// Runs the TLS and QUIC rows (`benches/tls`, built by `cargo xtask bench`, which names
/// the binary in `VOLLEY_BENCH_TLS`) and adds their table, notes and data.
fn tls_rows(mode: Mode, report: &mut Report) {
    let Some(binary) = std::env::var_os("VOLLEY_BENCH_TLS") else {
        report.notes.push(
            "TLS and QUIC rows not run: they come from benches/tls, which `cargo xtask bench \
             --suite rpc` builds (VOLLEY_BENCH_TLS names its binary)"
                .into(),
        );
        report.failures += 1;
        return;
    };
    let flag = match mode {
        Mode::Quick => "--quick",
        Mode::Full => "--full",
    };
    eprintln!(
        "rpc: the TLS and QUIC rows ({})",
        PathBuf::from(&binary).display()
    );
    let (table, notes, data) =
        match child_table(PathBuf::from(&binary).as_path(), &[flag], &TLS_COLUMNS) {
            Ok(got) => got,
            Err(e) => {
                report
                    .notes
                    .push(format!("the TLS and QUIC rows failed: {e}"));
                report.failures += 1;
                return;
            }
        };
    report.tables.push(table);
    for note in notes {
        report.notes.push(format!("TLS/QUIC: {note}"));
    }
    for mut point in data {
        match point["table"].as_str() {
            // tonic's light-load rows join the light-load table.
            Some("light load") => {
                let row: Vec<String> = light::LIGHT_COLUMNS
                    .iter()
                    .map(|c| point["row"][c].as_str().unwrap_or_default().to_owned())
                    .collect();
                if let Some(light) = report
                    .tables
                    .iter_mut()
                    .find(|t| t.title.starts_with(light::LIGHT_TITLE))
                {
                    light.rows.push(row);
                    light.rows.sort_by_key(|r| r[0].parse::<u64>().unwrap_or(0));
                }
                point["row"].take();
            }
            Some("failure") => {
                report.failures += 1;
                report.notes.push(format!(
                    "FAILED (TLS binary): {}",
                    point["what"].as_str().unwrap_or_default()
                ));
                continue;
            }
            _ => point["table"] = json!("tls"),
        }
        report.data.push(point);
    }
}

/// The table, notes and data points of a bench binary that prints one table as a JSON
/// object (`title`, `columns`, `rows`, `notes`, `data`), its columns checked.
fn child_table(
    binary: &std::path::Path,
    args: &[&str],
    columns: &[&'static str],
) -> Result<(Table, Vec<String>, Vec<serde_json::Value>), String> {
    let output = std::process::Command::new(binary)
        .args(args)
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", binary.display()))?;
    if !output.status.success() {
        return Err(format!(
            "{} {}: {}",
            binary.display(),
            args.join(" "),
            output.status
        ));
    }
    let out: serde_json::Value = serde_json::from_slice(&output.stdout)
        .map_err(|e| format!("{} printed no JSON table: {e}", binary.display()))?;
    let strings = |v: &serde_json::Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .map(|s| s.as_str().unwrap_or_default().to_owned())
            .collect()
    };
    let got = strings(&out["columns"]);
    if got != columns {
        return Err(format!(
            "{} printed the columns {got:?}, not {columns:?}",
            binary.display()
        ));
    }
    let table = Table {
        title: out["title"].as_str().unwrap_or_default().to_owned(),
        columns: columns.to_vec(),
        rows: out["rows"]
            .as_array()
            .into_iter()
            .flatten()
            .map(strings)
            .collect(),
    };
    let data = out["data"].as_array().cloned().unwrap_or_default();
    Ok((table, strings(&out["notes"]), data))
}
