//! `volley rpc serve` under a mixed attack from one machine, while a well-behaved client
//! keeps calling: every one of its calls is answered, and the server's memory and CPU
//! stay within bounds read from `/proc`. The server's stderr is a pipe nobody reads, as
//! when its log stalls. Each attack is one this server used to fall to:
//! connections that never say hello (they held every slot), a partial largest frame
//! before the hello (16 MiB of memory each), hellos of another service by the thousand
//! (a warning each, written by the serving thread), and a peer calling without reading
//! its answers (its queued replies cost far more than their wire bytes).

mod common;

use core::net::SocketAddr;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use core::time::Duration;
use std::io::Write;
use std::sync::Arc;

use bytes::Bytes;
use common::*;
use tokio::time::timeout;
use volley_proto::rpc::{CodecId, HELLO_LEN, Head, Hello, Kind, WIRE_VERSION};
use volley_proto::wire::frame::Header;
use volley_rpc::link::framed::{FRAME_TYPE, FramedLink};
use volley_rpc::{Config, Endpoint, Service};
use volley_rpc_bench::{Bench, bench::Echo};
use volley_transport_tcp::{Framed, Role};

/// The server's resident memory, in KiB.
fn vm_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/PID/status")
}

/// An RPC message's head for a frame.
fn head(kind: Kind, call_id: u32, method: u32, args: usize) -> Vec<u8> {
    let mut head = [0u8; 16];
    let n = Head {
        kind,
        call_id,
        method,
        deadline_us: None,
        metadata: false,
    }
    .emit(args, [], &mut head)
    .unwrap();
    head[..n].to_vec()
}

fn hello(fingerprint: u64) -> Bytes {
    Bytes::copy_from_slice(
        &Hello {
            version: WIRE_VERSION,
            codec: CodecId::BINCODE2,
            max_message: 1 << 20,
            credit: 256,
            fingerprint,
            calls: fingerprint,
            capabilities: 0,
        }
        .emit(),
    )
}

/// Connections that send nothing at all, kept open (blocking sockets, never read).
fn silent_connections(addr: SocketAddr, n: usize) -> Vec<std::net::TcpStream> {
    (0..n)
        .filter_map(|_| std::net::TcpStream::connect(addr).ok())
        .collect()
}

/// Connections that start a largest frame before any hello and trickle nothing more.
fn partial_frames(addr: SocketAddr, n: usize) -> Vec<std::net::TcpStream> {
    (0..n)
        .filter_map(|_| {
            let mut s = std::net::TcpStream::connect(addr).ok()?;
            s.write_all(&Header::new(FRAME_TYPE, 0, 16 << 20).unwrap().emit())
                .ok()?;
            let _ = s.write_all(&[0u8; 60_000]);
            Some(s)
        })
        .collect()
}

/// Hellos of another service, each on a connection of its own.
async fn bad_hellos(addr: SocketAddr, n: usize) -> usize {
    let config = volley_rpc::link::framed::config(Role::Initiator);
    let mut sent = 0;
    for _ in 0..n {
        let Ok(Ok((framed, _incoming))) =
            timeout(Duration::from_secs(5), Framed::connect_tcp(addr, config)).await
        else {
            continue;
        };
        let h = head(Kind::HELLO, 0, 0, HELLO_LEN);
        if framed.send(FRAME_TYPE, 0, &h, hello(0xbad)).await.is_ok() {
            sent += 1;
        }
    }
    sent
}

/// A peer that says hello, then calls echo as fast as it can and never reads a reply.
async fn never_reads(addr: SocketAddr, for_how_long: Duration) -> u64 {
    let config = volley_rpc::link::framed::config(Role::Initiator);
    let (framed, _incoming) = Framed::connect_tcp(addr, config).await.unwrap();
    framed.pause_reading();
    let h = head(Kind::HELLO, 0, 0, HELLO_LEN);
    framed
        .send(FRAME_TYPE, 0, &h, hello(Bench::FINGERPRINT))
        .await
        .unwrap();
    let args = {
        let mut out = bytes::BytesMut::new();
        <volley_rpc::Bincode as volley_rpc::Codec>::encode(&7u64, &mut out).unwrap();
        out.freeze()
    };
    let method = <Echo as volley_rpc::Method>::ID;
    let until = tokio::time::Instant::now() + for_how_long;
    let mut sent = 0u64;
    while tokio::time::Instant::now() < until {
        let h = head(Kind::CALL, (sent as u32) * 2 + 1, method, args.len());
        match timeout(
            Duration::from_secs(1),
            framed.send(FRAME_TYPE, 0, &h, args.clone()),
        )
        .await
        {
            Ok(Ok(())) => sent += 1,
            _ => break,
        }
    }
    sent
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mixed_attack_costs_bounded_memory_and_cpu_and_loses_no_good_call() {
    let (server, line) = spawn(&[
        "rpc",
        "serve",
        "--max-connections",
        "64",
        "--handshake-timeout-s",
        "1",
        "--keepalive-s",
        "0.5",
        "--idle-timeout-s",
        "5",
    ])
    .await;
    let pid = server.id().expect("running");
    let addr: SocketAddr = line
        .strip_prefix("listening tcp=")
        .unwrap_or_else(|| panic!("unexpected line `{line}`"))
        .parse()
        .unwrap();
    let rss_before = vm_rss_kib(pid);
    let cpu_before = cpu_ticks(pid);

    // The well-behaved client, connected first, calling all through the attack.
    let good = Endpoint::<Bench>::new(Config::default())
        .unwrap()
        .connect(FramedLink::connect_tcp(addr).await.unwrap())
        .await
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let answered = Arc::new(AtomicU64::new(0));
    let caller = {
        let (stop, answered) = (stop.clone(), answered.clone());
        tokio::spawn(async move {
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let value = i;
                let got = timeout(Duration::from_secs(10), good.call::<Echo>(&value))
                    .await
                    .unwrap_or_else(|_| panic!("good call {i} took over 10 s"))
                    .unwrap_or_else(|e| panic!("good call {i} failed: {e}"));
                assert_eq!(got, value);
                answered.fetch_add(1, Ordering::Relaxed);
                i += 1;
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
    };

    // The attack, all at once, bounded in count and time.
    let attack = timeout(Duration::from_secs(60), async {
        let silent = tokio::task::spawn_blocking(move || silent_connections(addr, 200));
        let partial = tokio::task::spawn_blocking(move || partial_frames(addr, 40));
        let flood = tokio::spawn(never_reads(addr, Duration::from_secs(4)));
        let hellos = bad_hellos(addr, 1500).await;
        let silent = silent.await.unwrap();
        let partial = partial.await.unwrap();
        let flooded = flood.await.unwrap();
        (
            silent.len(),
            partial.len(),
            hellos,
            flooded,
            silent,
            partial,
        )
    })
    .await
    .expect("the attack finished within 60 s");
    let (silent, partial, hellos, flooded, _held_silent, _held_partial) = attack;
    eprintln!(
        "attack: {silent} silent connections, {partial} partial largest frames, \
         {hellos} bad hellos, {flooded} calls never read"
    );
    // Past the handshake timeout, the silent ones are gone and new clients get in.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let late = Endpoint::<Bench>::new(Config::default())
        .unwrap()
        .connect(FramedLink::connect_tcp(addr).await.unwrap())
        .await
        .expect("a new client is served once the attack's connections are dropped");
    assert_eq!(late.call::<Echo>(&42).await.unwrap(), 42);

    stop.store(true, Ordering::Relaxed);
    timeout(Duration::from_secs(20), caller)
        .await
        .expect("the good caller stopped")
        .expect("every good call was answered");
    let rss_after = vm_rss_kib(pid);
    let cpu = cpu_ticks(pid) - cpu_before;
    eprintln!(
        "server: VmRSS {rss_before} -> {rss_after} KiB, {cpu} CPU ticks, \
         {} good calls answered",
        answered.load(Ordering::Relaxed)
    );
    assert!(answered.load(Ordering::Relaxed) > 100);
    // Bounds with a 2x margin over what this attack was measured to cost.
    assert!(
        rss_after.saturating_sub(rss_before) < RSS_GROWTH_KIB,
        "VmRSS grew {rss_before} -> {rss_after} KiB"
    );
    assert!(cpu < CPU_TICKS, "{cpu} CPU ticks");
}

/// Twice the largest growth measured under this attack (three debug-build runs on a
/// 2-core machine: +28.8, +36.5 and +29.6 MiB).
const RSS_GROWTH_KIB: u64 = 75 * 1024;
/// Twice the most CPU measured under this attack (the same runs: 239, 329 and 253 ticks
/// of 10 ms).
const CPU_TICKS: u64 = 700;

/// A padded UDP channel initial (packet type 1, ids, packet number 0, zero padding), as
/// a client that never answers sends it.
fn silent_initial(i: u64) -> Vec<u8> {
    let mut d = vec![0u8; volley_proto::channel::MIN_DATAGRAM];
    d[0] = 1;
    d[1..9].copy_from_slice(&(0x5000 + i).to_le_bytes());
    d[9..17].copy_from_slice(&(0x9000 + i).to_le_bytes());
    d
}

#[tokio::test]
async fn half_open_udp_setups_do_not_lock_clients_out() {
    let (_server, line) = spawn(&["rpc", "serve", "--transport", "udp"]).await;
    let addr = line
        .strip_prefix("listening udp=")
        .unwrap_or_else(|| panic!("unexpected line `{line}`"))
        .to_owned();
    // 80 initials from 80 ports that never answer: past the 64 half-open setups the
    // server used to hold for 10 s each, refusing everyone else meanwhile.
    let silent: Vec<std::net::UdpSocket> = (0..80)
        .map(|i| {
            let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            socket.send_to(&silent_initial(i), &addr).unwrap();
            socket
        })
        .collect();
    // Each silent port is answered once: an accept (the first setups) or a retry.
    let mut retries = 0;
    let mut buf = [0u8; 2048];
    for socket in &silent {
        socket
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let n = socket.recv(&mut buf).expect("an answer within 5 s");
        retries += usize::from(buf[0] == 4 && n < 64);
    }
    assert!(retries >= 60, "{retries} of 80 answered with a retry");
    let started = std::time::Instant::now();
    let (ok, stderr) = run(&[
        "rpc",
        "bench",
        "--transport",
        "udp",
        "--connect",
        &addr,
        "--calls",
        "200",
    ])
    .await;
    assert!(ok, "a real client still gets in: {stderr}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}
