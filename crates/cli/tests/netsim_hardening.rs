//! `volley netsim` with many clients: a low file-descriptor limit, thousands of idle
//! flows, and rates too small to mean anything. Each test failed before its fix.

use core::time::Duration;
use std::net::UdpSocket;

use tokio::io::AsyncReadExt;
use tokio::process::{Child, Command};
use tokio::time::timeout;
use volley_proto::scp;
use volley_proto::scp::sdp::Address;

mod common;

use common::{VOLLEY, cpu_ticks, emulator, run, spawn_with};

/// Starts `volley netsim` in front of `upstream`, under `prlimit` if `nofile` is given;
/// returns it and the address clients send to.
async fn netsim(upstream: &str, nofile: Option<u32>) -> (Child, String) {
    let args = ["netsim", "--listen", "127.0.0.1:0", "--upstream", upstream];
    let mut command = match nofile {
        Some(n) => {
            let mut c = Command::new("prlimit");
            c.arg(format!("--nofile={n}:{n}")).arg(VOLLEY).args(args);
            c
        }
        None => {
            let mut c = Command::new(VOLLEY);
            c.args(args);
            c
        }
    };
    let (child, line) = spawn_with(&mut command).await;
    let addr = line
        .strip_prefix("listening ")
        .unwrap_or_else(|| panic!("unexpected line `{line}`"))
        .to_owned();
    (child, addr)
}

/// Sends one sver from a fresh socket (a new flow) and waits up to 5 s for its answer.
fn sver_from_a_new_port(target: &str) -> bool {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut request = [0u8; scp::MAX_DATAGRAM_LEN];
    let n = scp::sver_request(Address::core(0, 0, 0))
        .emit(&mut request)
        .unwrap();
    socket.send_to(&request[..n], target).unwrap();
    let mut reply = [0u8; scp::MAX_DATAGRAM_LEN];
    socket.recv(&mut reply).is_ok()
}

/// Stops `child` with SIGTERM and returns what it printed on stderr.
async fn stop(mut child: Child) -> String {
    let pid = child.id().expect("running").to_string();
    let killed = Command::new("kill").args(["-TERM", &pid]).status().await;
    assert!(killed.is_ok_and(|s| s.success()));
    let mut stderr = String::new();
    let mut pipe = child.stderr.take().expect("piped stderr");
    timeout(Duration::from_secs(10), pipe.read_to_string(&mut stderr))
        .await
        .expect("netsim exits within 10 s of SIGTERM")
        .unwrap();
    stderr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_a_low_fd_limit_every_client_is_served_by_evicting_old_flows() {
    let (_board, udp) = emulator(&[]).await;
    let (link, relay) = netsim(&udp, Some(48)).await;
    let target = relay.clone();
    let served = tokio::task::spawn_blocking(move || {
        (0..150).filter(|_| sver_from_a_new_port(&target)).count()
    })
    .await
    .unwrap();
    assert_eq!(served, 150, "clients past the fd limit were dropped");
    let stderr = stop(link).await;
    let evicted: u64 = stderr
        .trim_end()
        .rsplit(", ")
        .next()
        .and_then(|last| last.strip_suffix(" evicted"))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no eviction count in `{stderr}`"));
    assert!(evicted >= 100, "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_idle_flows_cost_no_cpu() {
    let (_board, udp) = emulator(&[]).await;
    let (link, relay) = netsim(&udp, None).await;
    let target = relay.clone();
    let served = tokio::task::spawn_blocking(move || {
        (0..3000).filter(|_| sver_from_a_new_port(&target)).count()
    })
    .await
    .unwrap();
    assert_eq!(served, 3000);
    let pid = link.id().expect("running");
    // Past the relay's 5 ms of spinning after traffic, then two seconds of nothing.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = cpu_ticks(pid);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let used = cpu_ticks(pid) - before;
    // 200 ticks would be a whole core; the relay used to take 60% of one here.
    assert!(
        used <= 10,
        "{used} ticks of CPU in 2 s idle with 3000 flows"
    );
    drop(link);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_that_rounds_to_nothing_is_refused() {
    let (ok, stderr) = run(&[
        "netsim",
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        "127.0.0.1:9",
        "--rate-mbit",
        "0.0000001",
    ])
    .await;
    assert!(!ok && stderr.contains("is under 1 bit/s"), "{stderr}");
}
