//! `volley rpc serve` and `volley rpc bench` as scripts use them: the listening line, the
//! last line's exact shape, every call kind verified, and clear refusals.

mod common;

use core::time::Duration;

use common::*;
use tokio::process::Command;
use tokio::time::timeout;

/// Runs `volley rpc bench` and returns (success, last stdout line, stderr).
async fn bench(args: &[&str]) -> (bool, String, String) {
    let output = timeout(
        Duration::from_secs(120),
        Command::new(VOLLEY)
            .args(["rpc", "bench"])
            .args(args)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .unwrap_or_else(|_| panic!("volley rpc bench {args:?} did not finish within 120 s"))
    .expect("volley runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    (
        output.status.success(),
        stdout.lines().last().unwrap_or("").to_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// The fields of `calls=N ok=K failed=F secs=S calls/s=R MiB/s=M reconnects=C
/// cpu_us_per_call=U p50_us=A p99_us=B p999_us=C`, in order.
fn fields(line: &str) -> Vec<(String, f64)> {
    line.split(' ')
        .map(|field| {
            let (key, value) = field
                .split_once('=')
                .unwrap_or_else(|| panic!("`{field}` in `{line}` is not key=value"));
            (
                key.to_owned(),
                value
                    .parse()
                    .unwrap_or_else(|_| panic!("`{value}` in `{line}`")),
            )
        })
        .collect()
}

#[tokio::test]
async fn every_call_kind_is_verified_end_to_end() {
    let (_server, line) = spawn(&["rpc", "serve", "--listen", "127.0.0.1:0"]).await;
    let addr = line
        .strip_prefix("listening tcp=")
        .unwrap_or_else(|| panic!("unexpected line `{line}`"))
        .to_owned();
    let runs: &[&[&str]] = &[
        &[],
        &[
            "--call",
            "echo",
            "--calls",
            "3000",
            "--concurrency",
            "8",
            "--batch",
            "0",
        ],
        &[
            "--call",
            "put",
            "--calls",
            "200",
            "--concurrency",
            "3",
            "--payload",
            "100000",
            "--batch",
            "5",
        ],
        &[
            "--call",
            "get",
            "--calls",
            "300",
            "--concurrency",
            "4",
            "--payload",
            "65537",
            "--batch",
            "2",
        ],
        &[
            "--call",
            "send",
            "--calls",
            "500",
            "--concurrency",
            "2",
            "--payload",
            "3000",
            "--batch",
            "7",
        ],
        &["--call", "get", "--calls", "3", "--payload", "16000000"],
        &["--call", "put", "--calls", "10", "--payload", "0"],
    ];
    for extra in runs {
        let mut args = vec!["--connect", addr.as_str()];
        args.extend_from_slice(extra);
        let (ok, last, stderr) = bench(&args).await;
        assert!(ok, "{args:?}: {stderr}");
        let fields = fields(&last);
        let keys: Vec<&str> = fields.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            keys,
            [
                "calls",
                "ok",
                "failed",
                "secs",
                "calls/s",
                "MiB/s",
                "reconnects",
                "cpu_us_per_call",
                "p50_us",
                "p99_us",
                "p999_us"
            ],
            "{last}"
        );
        let calls = extra
            .iter()
            .position(|a| *a == "--calls")
            .map_or(10_000.0, |i| extra[i + 1].parse().unwrap());
        assert_eq!(fields[0].1, calls, "{last}");
        assert_eq!(fields[1].1, calls, "every call verified: {last}");
        assert_eq!(fields[2].1, 0.0, "{last}");
    }
}

#[tokio::test]
async fn every_call_kind_over_udp() {
    let (_server, line) = spawn(&["rpc", "serve", "--transport", "udp"]).await;
    let addr = line
        .strip_prefix("listening udp=127.0.0.1:")
        .map(|port| format!("127.0.0.1:{port}"))
        .unwrap_or_else(|| panic!("unexpected line `{line}`"));
    for extra in [
        &[
            "--call",
            "echo",
            "--calls",
            "2000",
            "--concurrency",
            "4",
            "--batch",
            "0",
        ][..],
        &[
            "--call",
            "put",
            "--calls",
            "50",
            "--payload",
            "1000000",
            "--batch",
            "5",
        ],
        &[
            "--call",
            "get",
            "--calls",
            "50",
            "--payload",
            "3000000",
            "--concurrency",
            "2",
        ],
        &[
            "--call",
            "send",
            "--calls",
            "300",
            "--payload",
            "5000",
            "--batch",
            "10",
        ],
    ] {
        let mut args = vec!["--connect", addr.as_str(), "--transport", "udp"];
        args.extend_from_slice(extra);
        let (ok, last, stderr) = bench(&args).await;
        assert!(ok, "{args:?}: {stderr}");
        let fields = fields(&last);
        assert_eq!(fields[2], ("failed".to_owned(), 0.0), "{last}");
        assert_eq!(fields[0].1, fields[1].1, "every call verified: {last}");
    }
}

#[tokio::test]
async fn bad_input_is_refused_with_a_reason() {
    let (_server, line) = spawn(&["rpc", "serve"]).await;
    assert!(
        line.starts_with("listening tcp=127.0.0.1:"),
        "loopback by default: {line}"
    );
    let addr = line.strip_prefix("listening tcp=").unwrap();
    for (args, says) in [
        (
            vec!["--connect", addr, "--concurrency", "0"],
            "0 is not in 1..=4096",
        ),
        (vec!["--connect", addr, "--calls", "-5"], "-5"),
        (
            vec!["--connect", addr, "--calls", "0"],
            "0 is not in 1..=100000000",
        ),
        (
            vec!["--connect", addr, "--payload", "99999999999"],
            "--payload",
        ),
        (vec!["--connect", addr, "--batch", "1.5"], "--batch"),
        (vec!["--connect", "127.0.0.1"], "names no port: HOST:PORT"),
        (vec!["--connect", "127.0.0.1:http"], "is not a port"),
    ] {
        let (ok, _, stderr) = bench(&args).await;
        assert!(!ok, "{args:?} should fail");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
    // A name as well as an address (the one address rule).
    let port = addr.rsplit_once(':').unwrap().1;
    let by_name = format!("localhost:{port}");
    let (ok, last, stderr) = bench(&["--connect", &by_name, "--calls", "20"]).await;
    assert!(ok && last.contains("ok=20"), "{last}: {stderr}");
    // Nobody serving UDP there (the port is TCP's): refused at once, naming the address.
    let started = std::time::Instant::now();
    let (ok, _, stderr) = bench(&["--connect", addr, "--transport", "udp"]).await;
    assert!(!ok && stderr.contains(addr), "{stderr}");
    assert!(
        stderr.contains("connection refused: nothing listens on UDP"),
        "{stderr}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "not the 10 s timeout"
    );
    // Nobody listening: a clear error, not a hang.
    let closed = {
        let socket = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        socket.local_addr().unwrap().to_string()
    };
    let (ok, _, stderr) = bench(&["--connect", &closed]).await;
    assert!(!ok && stderr.contains("cannot connect"), "{stderr}");
}

#[tokio::test]
async fn rpc_over_tcp_through_the_tcp_relay() {
    let (_server, line) = spawn(&["rpc", "serve"]).await;
    let upstream = line.strip_prefix("listening tcp=").unwrap().to_owned();
    let (_relay, line) = spawn(&[
        "netsim",
        "--tcp",
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        &upstream,
        "--delay-ms",
        "0.5",
    ])
    .await;
    let relay = line
        .strip_prefix("listening tcp=")
        .unwrap_or_else(|| panic!("unexpected line `{line}`"))
        .to_owned();
    let (ok, last, stderr) = bench(&["--connect", &relay, "--calls", "200", "--batch", "10"]).await;
    assert!(ok, "{stderr}");
    let fields = fields(&last);
    assert_eq!(fields[1].1, 200.0, "{last}");
    // 20 round trips of at least 1 ms.
    assert!(fields[3].1 >= 0.02, "{last}");
    let (ok, stderr) = run(&[
        "netsim",
        "--tcp",
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        &upstream,
        "--loss",
        "0.1",
    ])
    .await;
    assert!(
        !ok && stderr.contains("does not apply with --tcp"),
        "{stderr}"
    );
}

#[tokio::test]
async fn timer_flags_are_range_checked_before_anything_is_bound() {
    for (args, says) in [
        (
            vec!["--keepalive-s", "20", "--idle-timeout-s", "10"],
            "--keepalive-s 20 must be shorter than --idle-timeout-s 10",
        ),
        (
            vec!["--keepalive-s", "0.05"],
            "0.05 s is out of range: 0.1 to 3600",
        ),
        (vec!["--idle-timeout-s", "4000"], "4000 s is out of range"),
        (vec!["--handshake-timeout-s", "0"], "0 s is out of range"),
        (
            vec!["--handshake-timeout-s", "soon"],
            "is not a number of seconds",
        ),
    ] {
        let mut full = vec!["rpc", "serve", "--listen", "127.0.0.1:1"];
        full.extend(&args);
        let (ok, stderr) = run(&full).await;
        assert!(!ok, "{args:?} should fail");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(
            !stderr.contains("cannot listen"),
            "checked before binding: {stderr}"
        );
    }
    let (ok, stderr) = run(&["rpc", "serve", "--help"]).await;
    assert!(ok, "{stderr}");
    // Pings off is allowed, with any idle timeout.
    let (_server, line) = spawn(&[
        "rpc",
        "serve",
        "--keepalive-s",
        "0",
        "--idle-timeout-s",
        "5",
    ])
    .await;
    let addr = line.strip_prefix("listening tcp=").unwrap();
    let (ok, last, stderr) =
        bench(&["--connect", addr, "--keepalive-s", "0", "--calls", "10"]).await;
    assert!(ok, "{stderr}");
    assert!(last.starts_with("calls=10 ok=10 failed=0"), "{last}");
}

#[tokio::test]
async fn a_full_server_says_so_and_a_silent_connection_loses_its_slot() {
    let (_server, line) = spawn(&[
        "rpc",
        "serve",
        "--max-connections",
        "1",
        "--handshake-timeout-s",
        "2",
    ])
    .await;
    let addr = line.strip_prefix("listening tcp=").unwrap().to_owned();
    // A connection that never says hello holds the one slot...
    let silent = std::net::TcpStream::connect(&addr).unwrap();
    // ... so the next client hears why it is turned away, at once.
    let started = std::time::Instant::now();
    let (ok, _, stderr) = bench(&["--connect", &addr, "--calls", "10"]).await;
    assert!(!ok);
    assert!(
        stderr.contains("the server refused: no free connection slot"),
        "{stderr}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    // Past the handshake timeout the silent one is closed both ways and its slot freed,
    // though it never closes its end.
    let freed = timeout(Duration::from_secs(20), async {
        loop {
            let (ok, last, _) = bench(&["--connect", &addr, "--calls", "10"]).await;
            if ok {
                return last;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await
    .expect("the slot came back");
    assert!(freed.starts_with("calls=10 ok=10 failed=0"), "{freed}");
    drop(silent);
}

#[tokio::test]
async fn a_token_file_on_both_ends_admits_and_its_absence_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch("rpc-token");
    let secret = |name: &str, text: &str, mode: u32| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        path
    };
    let good = secret("token", "s3cret\r\nsecond line ignored\n", 0o600);
    let wrong = secret("wrong", "s3cre7\n", 0o600);
    let empty = secret("empty", "\n", 0o400);
    let loose = secret("loose", "s3cret\n", 0o644);
    let good = good.to_str().unwrap();
    let (_server, line) = spawn(&[
        "rpc",
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--auth-token-file",
        good,
    ])
    .await;
    let addr = line
        .strip_prefix("listening tcp=")
        .unwrap_or_else(|| panic!("unexpected line `{line}`"))
        .to_owned();
    let (ok, last, err) = bench(&[
        "--connect",
        &addr,
        "--calls",
        "100",
        "--auth-token-file",
        good,
    ])
    .await;
    assert!(ok, "{err}");
    assert!(last.starts_with("calls=100 ok=100 failed=0 "), "{last}");
    for args in [
        vec!["--connect", addr.as_str()],
        vec![
            "--connect",
            addr.as_str(),
            "--auth-token-file",
            wrong.to_str().unwrap(),
        ],
    ] {
        let (ok, _, err) = bench(&args).await;
        assert!(!ok);
        assert!(err.contains("unauthenticated"), "{args:?}: {err}");
    }
    // An empty token is refused before anything connects, on either command.
    let (ok, _, err) = bench(&[
        "--connect",
        &addr,
        "--auth-token-file",
        empty.to_str().unwrap(),
    ])
    .await;
    assert!(!ok);
    assert!(err.contains("empty first line"), "{err}");
    // A token file others may read is refused, as ssh refuses such a key.
    let (ok, _, err) = bench(&[
        "--connect",
        &addr,
        "--auth-token-file",
        loose.to_str().unwrap(),
    ])
    .await;
    assert!(!ok);
    assert!(err.contains("may be read by others (mode 644)"), "{err}");
    let serve = timeout(
        Duration::from_secs(60),
        Command::new(VOLLEY)
            .args(["rpc", "serve", "--auth-token-file", empty.to_str().unwrap()])
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("volley rpc serve ends at once")
    .unwrap();
    assert!(!serve.status.success());
    assert!(String::from_utf8_lossy(&serve.stderr).contains("empty first line"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Both ends on tokio's multi-thread runtime, closed- and open-loop: every call verified,
/// the CPU per call and the latency percentiles filled in and ordered.
#[tokio::test]
async fn a_multi_thread_runtime_on_both_ends_with_cpu_and_latency() {
    let (_server, line) = spawn(&[
        "rpc",
        "serve",
        "--runtime",
        "multi",
        "--listen",
        "127.0.0.1:0",
    ])
    .await;
    let addr = line
        .strip_prefix("listening tcp=")
        .unwrap_or_else(|| panic!("unexpected line `{line}`"))
        .to_owned();
    let runs: &[(&[&str], f64)] = &[
        (&["--calls", "3000", "--concurrency", "8"], 3000.0),
        // Open loop: 400 calls a second for half a second.
        (&["--rate", "400", "--duration", "0.5"], 200.0),
    ];
    for (extra, calls) in runs {
        let mut args = vec!["--runtime", "multi", "--connect", addr.as_str()];
        args.extend_from_slice(extra);
        let (ok, last, stderr) = bench(&args).await;
        assert!(ok, "{args:?}: {stderr}");
        let get = |key: &str| {
            fields(&last)
                .into_iter()
                .find(|(k, _)| k == key)
                .unwrap_or_else(|| panic!("no {key} in `{last}`"))
                .1
        };
        assert_eq!(get("calls"), *calls, "{last}");
        assert_eq!(get("ok"), *calls, "{last}");
        assert!(get("cpu_us_per_call") > 0.0, "{last}");
        let (p50, p99, p999) = (get("p50_us"), get("p99_us"), get("p999_us"));
        assert!(0.0 < p50 && p50 <= p99 && p99 <= p999, "{last}");
    }
    let (ok, _, stderr) = bench(&["--runtime", "many", "--connect", addr.as_str()]).await;
    assert!(!ok);
    assert!(
        stderr.contains("invalid value 'many' for '--runtime"),
        "{stderr}"
    );
}
