//! `volley rpc bench` through a server killed (SIGKILL) and started again on the same
//! port: the run goes on, `reconnects=` counts the new connection, only calls in flight
//! at the kill may fail, and `-v` says why each one did.

mod common;

use core::time::Duration;
use std::process::Stdio;

use common::*;
use tokio::io::AsyncReadExt;
use tokio::process::Command;
use tokio::time::timeout;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_goes_on_through_a_killed_and_restarted_server() {
    let (mut server, line) = spawn(&["rpc", "serve", "--listen", "127.0.0.1:0"]).await;
    let addr = line
        .strip_prefix("listening tcp=")
        .unwrap_or_else(|| panic!("unexpected line `{line}`"))
        .to_owned();
    // 200 calls a second for 3 s, open loop, each waiting up to 10 s.
    let mut bench = Command::new(VOLLEY)
        .args(["-v", "rpc", "bench", "--connect", &addr])
        .args(["--duration", "3", "--rate", "200", "--deadline-secs", "10"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("volley starts");
    // Let it run, then kill the server outright and start another on the same port.
    tokio::time::sleep(Duration::from_millis(800)).await;
    server.start_kill().unwrap();
    timeout(Duration::from_secs(10), server.wait())
        .await
        .expect("the killed server is reaped")
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (_again, line) = spawn(&["rpc", "serve", "--listen", &addr]).await;
    assert_eq!(line, format!("listening tcp={addr}"));

    let mut stdout = String::new();
    let mut stderr = String::new();
    let (mut out, mut err) = (bench.stdout.take().unwrap(), bench.stderr.take().unwrap());
    let status = timeout(Duration::from_secs(60), async {
        let (a, b) = tokio::join!(
            out.read_to_string(&mut stdout),
            err.read_to_string(&mut stderr)
        );
        a.unwrap();
        b.unwrap();
        bench.wait().await.unwrap()
    })
    .await
    .expect("the bench ends within 60 s");
    let last = stdout.lines().last().unwrap_or("");
    let field = |key: &str| -> f64 {
        last.split(' ')
            .find_map(|f| f.strip_prefix(key)?.strip_prefix('='))
            .unwrap_or_else(|| panic!("no {key}= in `{last}`"))
            .parse()
            .unwrap()
    };
    assert_eq!(field("reconnects"), 1.0, "{last}\n{stderr}");
    // 3 s at 200 a second, less the calls not yet due when the clock ran out.
    let (calls, ok, failed) = (field("calls"), field("ok"), field("failed"));
    assert!((550.0..=601.0).contains(&calls), "{last}");
    assert_eq!(ok + failed, calls, "{last}");
    // Only calls in flight at the kill may fail (at 200 a second on loopback, a few).
    assert!(failed <= 10.0, "{last}\n{stderr}");
    let reasons: Vec<&str> = stderr.lines().filter(|l| l.starts_with("call ")).collect();
    assert_eq!(reasons.len() as f64, failed, "{stderr}");
    for reason in reasons {
        assert!(
            reason.contains("with the call in flight (it may have run)"),
            "{reason}"
        );
    }
    assert_eq!(status.success(), failed == 0.0, "{stderr}");
}
