//! The rpc suite's workloads and the peers it runs them on that do not depend on the
//! transport: the raw length-delimited baseline (server and client), tarpc as its users
//! write it, and a call of volley's bench service, each generic over the stream. The TLS
//! rows (`benches/tls`, outside the workspace) use them through this library.

use core::net::SocketAddr;
use std::collections::{HashMap, VecDeque};
use std::sync::{OnceLock, RwLock};

use bytes::{Bytes, BytesMut};
use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_util::codec::{Framed, LengthDelimitedCodec};
use volley_rpc::Codec;
use volley_rpc_bench::{self as service, BenchClient, GetArgs, PutReply};

/// A mebibyte.
pub const MIB: usize = 1 << 20;

/// What a call does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Work {
    /// 8 bytes there and back.
    Echo,
    /// A payload up; its length and xxh3 back.
    Put,
    /// A slice of the pattern back.
    Get,
}

/// A workload: calls of one kind by some callers on one connection.
#[derive(Clone, Copy)]
pub struct Workload {
    /// Its name in the tables.
    pub name: &'static str,
    /// What each call does.
    pub work: Work,
    /// Bytes each call carries (up for a put, back for a get).
    pub payload: usize,
    /// Callers at once, each making its share of the calls in turn.
    pub callers: usize,
    /// Calls in all, per round.
    pub calls: usize,
}

impl Workload {
    /// A table row for `system` (its median `rate`, its rounds' `rates`, and `rate` over
    /// each of `anchors`) and the data point the JSON report keeps.
    pub fn row(
        &self,
        system: &str,
        rate: f64,
        rates: &[f64],
        anchors: &[f64],
    ) -> (Vec<String>, serde_json::Value) {
        let mib = rate * self.payload as f64 / MIB as f64;
        let lo = rates.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = rates.iter().copied().fold(0.0, f64::max);
        let mut row = vec![
            self.name.to_owned(),
            system.to_owned(),
            format!("{rate:.0}"),
            format!("{mib:.1}"),
            format!("{lo:.0}..{hi:.0}"),
        ];
        row.extend(
            anchors
                .iter()
                .map(|anchor| format!("{:.2}x", rate / anchor)),
        );
        let point = serde_json::json!({
            "workload": self.name, "system": system, "calls_per_sec": rate,
            "mib_per_sec": mib, "rounds": rates,
        });
        (row, point)
    }

    /// The warm-up run before the measured rounds: a tenth of the calls.
    pub fn warm_up(self) -> Self {
        Self {
            calls: self.calls / 10 + 1,
            ..self
        }
    }
}

/// Expected put hashes by (offset, length) in the pattern.
type PutHashes = RwLock<HashMap<(usize, usize), u64>>;

fn put_hashes() -> &'static PutHashes {
    static TABLE: OnceLock<PutHashes> = OnceLock::new();
    TABLE.get_or_init(PutHashes::default)
}

/// The xxh3 a put of `pattern[start..start + len]` must get back. Each is hashed once and
/// kept, and [`expect_puts`] hashes a workload's before its rounds: the client's check of
/// a reply is then a lookup, so its timed path holds what the RPC system does and not the
/// checker's own hashing (the server still hashes every payload it receives; that is the
/// call's work). One fixed pattern serves every system, so the table is shared.
pub fn put_hash(pattern: &[u8], start: usize, len: usize) -> u64 {
    let known = put_hashes()
        .read()
        .expect("the put table")
        .get(&(start, len))
        .copied();
    known.unwrap_or_else(|| {
        let hash = xxhash_rust::xxh3::xxh3_64(&pattern[start..start + len]);
        put_hashes()
            .write()
            .expect("the put table")
            .insert((start, len), hash);
        hash
    })
}

/// Hashes every payload a put workload's calls will send, before its rounds.
pub fn expect_puts(w: Workload, pattern: &[u8]) {
    if w.work == Work::Put {
        for index in 0..w.calls as u64 {
            put_hash(pattern, service::offset(index), w.payload);
        }
    }
}

/// A loopback TCP stream for the peers (raw, tarpc, tonic), set up as volley's own
/// streams are ([`volley_transport_tcp::tune`]: Nagle off, reno on loopback), so that
/// no system gains from its socket's settings alone.
pub async fn tcp(addr: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect(addr).await.expect("connect");
    volley_transport_tcp::tune(&stream).expect("socket settings");
    stream
}

/// Any stream framed with length prefixes (raw and tarpc).
/// Payloads at least this long the raw ends write to the socket themselves, after what the
/// codec holds, rather than copy them into the codec's buffer.
const UNCOPIED: usize = 64 * 1024;

/// Queues one raw frame, `head` then `payload`: a short frame through the codec's buffer
/// (flushed later, with its batch), a long one flushed at once with what is queued before
/// it and its payload written from where it lies, not copied (the length prefix is the
/// codec's default, 4 bytes big-endian).
async fn send_raw<S: AsyncRead + AsyncWrite + Unpin>(
    framed: &mut Framed<S, LengthDelimitedCodec>,
    head: &[u8],
    payload: &Bytes,
) -> std::io::Result<()> {
    use tokio::io::AsyncWriteExt;
    if payload.len() < UNCOPIED {
        let mut frame = BytesMut::with_capacity(head.len() + payload.len());
        frame.extend_from_slice(head);
        frame.extend_from_slice(payload);
        return framed.feed(frame.freeze()).await;
    }
    SinkExt::<Bytes>::flush(framed).await?;
    let len = u32::try_from(head.len() + payload.len())
        .map_err(|_| std::io::Error::other("a frame over 4 GiB"))?;
    let mut prefix = [0u8; 4 + 17];
    prefix[..4].copy_from_slice(&len.to_be_bytes());
    prefix[4..4 + head.len()].copy_from_slice(head);
    let io = framed.get_mut();
    io.write_all(&prefix[..4 + head.len()]).await?;
    io.write_all(payload).await
}

/// Calls per CPU-second of a system whose calls cost `cpu` (client, server) µs each.
pub fn per_cpu(cpu: (f64, f64)) -> f64 {
    1e6 / (cpu.0 + cpu.1).max(1e-9)
}

/// Adds the CPU columns to a table row and its data point: client and server CPU µs a
/// call (`cpu`), calls per CPU-second, and that over `anchor_per_cpu` (the anchor's).
pub fn cpu_columns(
    row: &mut Vec<String>,
    point: &mut serde_json::Value,
    cpu: (f64, f64),
    anchor_per_cpu: f64,
) {
    row.extend([
        format!("{:.1}", cpu.0),
        format!("{:.1}", cpu.1),
        format!("{:.0}", per_cpu(cpu)),
        format!("{:.2}x", per_cpu(cpu) / anchor_per_cpu),
    ]);
    point["client_cpu_us_per_call"] = serde_json::json!(cpu.0);
    point["server_cpu_us_per_call"] = serde_json::json!(cpu.1);
    point["calls_per_cpu_sec"] = serde_json::json!(per_cpu(cpu));
}

/// Length-delimited frames on `stream`, up to 64 MiB each (the raw baseline's and
/// tarpc's transport).
pub fn length_delimited<S: AsyncRead + AsyncWrite>(stream: S) -> Framed<S, LengthDelimitedCodec> {
    LengthDelimitedCodec::builder()
        .max_frame_length(64 * MIB)
        .new_framed(stream)
}

/// One caller's way to make a call: each caller task holds its own (a clone of the
/// client and of the pattern, made once), so a call clones nothing. A clone per call is
/// an atomic count raised and lowered, which every system would pay on every call
/// without it being the system's cost.
pub trait Caller: Clone + Send + 'static {
    /// Makes call `index` of `w`, its reply checked.
    fn call(&mut self, w: Workload, index: u64) -> impl Future<Output = Result<(), String>> + Send;
}

/// A client and the pattern the calls send and check against.
#[derive(Clone)]
pub struct Each<T> {
    /// This caller's client.
    pub client: T,
    /// The pattern puts send and gets are checked against.
    pub pattern: Bytes,
}

impl<T> Each<T> {
    /// A caller of `client`, holding its own handle on `pattern`.
    pub fn new(client: T, pattern: &Bytes) -> Self {
        Self {
            client,
            pattern: pattern.clone(),
        }
    }
}

impl<C: Codec> Caller for Each<BenchClient<C>> {
    fn call(&mut self, w: Workload, index: u64) -> impl Future<Output = Result<(), String>> + Send {
        volley_call(&self.client, w, index, &self.pattern)
    }
}

impl Caller for Each<TarpcBenchClient> {
    fn call(&mut self, w: Workload, index: u64) -> impl Future<Output = Result<(), String>> + Send {
        tarpc_call(&self.client, w, index, &self.pattern)
    }
}

/// `w.callers` tasks, caller k making calls k, k + C, ... one at a time.
pub async fn callers(w: Workload, caller: impl Caller) -> Result<(), String> {
    let mut tasks = Vec::new();
    for k in 0..w.callers {
        let mut caller = caller.clone();
        tasks.push(tokio::spawn(async move {
            for i in (k..w.calls).step_by(w.callers) {
                caller.call(w, i as u64).await?;
            }
            Ok::<(), String>(())
        }));
    }
    for t in tasks {
        t.await.map_err(|e| e.to_string())??;
    }
    Ok(())
}

/// `Ok` if the reply was right.
pub fn check(ok: bool, what: &str) -> Result<(), String> {
    if ok {
        Ok(())
    } else {
        Err(format!("{what}: wrong reply"))
    }
}

/// One call of volley's bench service, its reply checked.
pub async fn volley_call<C: Codec>(
    bench: &BenchClient<C>,
    w: Workload,
    index: u64,
    pattern: &Bytes,
) -> Result<(), String> {
    let start = service::offset(index);
    match w.work {
        Work::Echo => {
            let v = bench.echo(index).await.map_err(|e| e.to_string())?;
            check(v == index, "echo")
        }
        Work::Put => {
            let body = pattern.slice(start..start + w.payload);
            let want = PutReply {
                len: w.payload as u64,
                hash: put_hash(pattern, start, w.payload),
            };
            let r = bench.put().segment(body).await.map_err(|e| e.to_string())?;
            check(r == want, "put")
        }
        Work::Get => {
            let args = GetArgs {
                index,
                len: w.payload as u64,
            };
            let r = bench.get(args).reply().await.map_err(|e| e.to_string())?;
            check(
                r.segments.len() == 1 && r.segments[0] == pattern[start..start + w.payload],
                "get",
            )
        }
    }
}

/// One call of the tarpc service, its reply checked.
pub async fn tarpc_call(
    c: &TarpcBenchClient,
    w: Workload,
    index: u64,
    pattern: &Bytes,
) -> Result<(), String> {
    let ctx = tarpc::context::current();
    let start = service::offset(index);
    match w.work {
        Work::Echo => {
            let v = c.echo(ctx, index).await.map_err(|e| e.to_string())?;
            check(v == index, "echo")
        }
        Work::Put => {
            let body = pattern.slice(start..start + w.payload);
            let want = (w.payload as u64, put_hash(pattern, start, w.payload));
            let r = c.put(ctx, body).await.map_err(|e| e.to_string())?;
            check(r == want, "put")
        }
        Work::Get => {
            let r = c
                .get(ctx, index, w.payload as u64)
                .await
                .map_err(|e| e.to_string())?;
            check(r == pattern[start..start + w.payload], "get")
        }
    }
}

/// The raw baseline: `w.callers` frames outstanding on the one connection, a new one sent
/// as each reply comes (fed while more replies are already read, flushed once when none
/// is), replies checked in order.
pub async fn raw_run<S: AsyncRead + AsyncWrite + Unpin>(
    framed: &tokio::sync::Mutex<Framed<S, LengthDelimitedCodec>>,
    w: Workload,
    pattern: &Bytes,
) -> Result<(), String> {
    let mut framed = framed.lock().await;
    // A request's head and its payload (a slice of the pattern for a put, not copied).
    let request = |index: u64| {
        let op = match w.work {
            Work::Echo => 1u8,
            Work::Put => 2,
            Work::Get => 3,
        };
        let mut head = [0u8; 17];
        head[0] = op;
        head[1..9].copy_from_slice(&index.to_le_bytes());
        head[9..].copy_from_slice(&(w.payload as u64).to_le_bytes());
        let start = service::offset(index);
        let payload = match w.work {
            Work::Echo => Bytes::copy_from_slice(&index.to_le_bytes()),
            Work::Put => pattern.slice(start..start + w.payload),
            Work::Get => Bytes::new(),
        };
        (head, payload)
    };
    let mut expected = VecDeque::new();
    let mut sent = 0u64;
    while sent < w.callers.min(w.calls) as u64 {
        let (head, payload) = request(sent);
        send_raw(&mut framed, &head, &payload)
            .await
            .map_err(|e| e.to_string())?;
        expected.push_back(sent);
        sent += 1;
    }
    SinkExt::<Bytes>::flush(&mut *framed)
        .await
        .map_err(|e| e.to_string())?;
    while let Some(index) = expected.pop_front() {
        let reply = framed
            .next()
            .await
            .ok_or("raw: connection closed")?
            .map_err(|e| e.to_string())?;
        let start = service::offset(index);
        let ok = match w.work {
            Work::Echo => reply[..] == index.to_le_bytes(),
            Work::Put => {
                reply.len() == 16
                    && reply[..8] == (w.payload as u64).to_le_bytes()
                    && reply[8..] == put_hash(pattern, start, w.payload).to_le_bytes()
            }
            Work::Get => reply[..] == pattern[start..start + w.payload],
        };
        check(ok, "raw")?;
        if sent < w.calls as u64 {
            let (head, payload) = request(sent);
            send_raw(&mut framed, &head, &payload)
                .await
                .map_err(|e| e.to_string())?;
            expected.push_back(sent);
            sent += 1;
        }
        // Feed while more replies are read already, flush once when none is: a batch a
        // write, as the server does (and as volley's writer gathers what is queued).
        if framed.read_buffer().is_empty() {
            SinkExt::<Bytes>::flush(&mut *framed)
                .await
                .map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}

/// tarpc, as its users write it (Bytes through serde).
#[tarpc::service]
pub trait TarpcBench {
    /// Returns its 8 bytes.
    async fn echo(value: u64) -> u64;
    /// Returns the payload's length and xxh3.
    async fn put(body: Bytes) -> (u64, u64);
    /// Returns `len` bytes of the pattern at an offset from `index`.
    async fn get(index: u64, len: u64) -> Bytes;
}

/// The tarpc bench service's server.
#[derive(Clone)]
pub struct TarpcServer {
    /// The pattern gets answer from.
    pub pattern: Bytes,
}

impl TarpcBench for TarpcServer {
    async fn echo(self, _: tarpc::context::Context, value: u64) -> u64 {
        value
    }

    async fn put(self, _: tarpc::context::Context, body: Bytes) -> (u64, u64) {
        (body.len() as u64, xxhash_rust::xxh3::xxh3_64(&body))
    }

    async fn get(self, _: tarpc::context::Context, index: u64, len: u64) -> Bytes {
        let start = service::offset(index);
        self.pattern.slice(start..start + len as usize)
    }
}

/// Serves tarpc on one framed connection, each request in a task of its own.
pub fn tarpc_serve<S>(framed: Framed<S, LengthDelimitedCodec>, pattern: Bytes)
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    use tarpc::server::Channel;
    let transport =
        tarpc::serde_transport::new(framed, tarpc::tokio_serde::formats::Bincode::default());
    tokio::spawn(
        tarpc::server::BaseChannel::with_defaults(transport)
            .execute(TarpcServer { pattern }.serve())
            .for_each(|response| async move {
                tokio::spawn(response);
            }),
    );
}

/// A tarpc client on one framed connection.
pub fn tarpc_client<S>(framed: Framed<S, LengthDelimitedCodec>) -> TarpcBenchClient
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let transport =
        tarpc::serde_transport::new(framed, tarpc::tokio_serde::formats::Bincode::default());
    TarpcBenchClient::new(tarpc::client::Config::default(), transport).spawn()
}

/// The raw baseline's server: one task per connection, frames answered in order.
/// A frame is `op u8 | index u64 | len u64 | payload`.
pub async fn raw_server<S: AsyncRead + AsyncWrite + Unpin>(stream: S, pattern: Bytes) {
    let mut framed = length_delimited(stream);
    while let Some(Ok(frame)) = framed.next().await {
        if frame.len() < 17 {
            return;
        }
        let index = u64::from_le_bytes(frame[1..9].try_into().expect("8 bytes"));
        let len = u64::from_le_bytes(frame[9..17].try_into().expect("8 bytes")) as usize;
        let reply = match frame[0] {
            1 => frame.freeze().slice(17..),
            2 => {
                let body = &frame[17..];
                let mut out = BytesMut::with_capacity(16);
                out.extend_from_slice(&(body.len() as u64).to_le_bytes());
                out.extend_from_slice(&xxhash_rust::xxh3::xxh3_64(body).to_le_bytes());
                out.freeze()
            }
            _ => {
                let start = service::offset(index);
                pattern.slice(start..start + len)
            }
        };
        // Feed while more frames are ready, flush when none is: as a careful user would.
        if send_raw(&mut framed, &[], &reply).await.is_err() {
            return;
        }
        if framed.read_buffer().is_empty() && SinkExt::<Bytes>::flush(&mut framed).await.is_err() {
            return;
        }
    }
}
