//! `volley emulate --boards`, `volley machine info|bench` and `volley scp --machine` as
//! separate processes, the way a user runs them. Emulated boards take SpiNNaker's port,
//! so each test has its own range of loopback addresses.

mod common;

use common::{pattern, run, run_out, scratch, spawn};

/// The value of `key=` on `line`.
fn field<'a>(line: &'a str, key: &str) -> &'a str {
    line.split_whitespace()
        .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("no {key}= in `{line}`"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_is_discovered_loaded_and_read_back() {
    let (_machine, line) = spawn(&["emulate", "--boards", "6", "--base-ip", "127.0.12.0"]).await;
    assert_eq!(line, "listening root=127.0.12.0:17893 boards=6 chips=288");

    let (ok, stdout, stderr) =
        run_out(&["machine", "info", "127.0.12.0", "--window", "auto"]).await;
    assert!(ok, "{stderr}");
    let last = stdout.lines().last().unwrap();
    assert!(last.starts_with("boards=6 chips=288 secs="), "{stdout}");
    assert!(
        stdout.contains("board    5  ethernet chip (20, 4)  at 127.0.12.5:17893"),
        "{stdout}"
    );

    let args = [
        "machine",
        "bench",
        "127.0.12.0:17893",
        "--bytes-per-chip",
        "3000",
    ];
    let (ok, stdout, stderr) = run_out(&args).await;
    assert!(ok, "{stderr}");
    let last = stdout.lines().last().unwrap();
    assert_eq!(field(last, "chips"), "288", "{last}");
    assert_eq!(field(last, "bytes"), (288 * 3000).to_string(), "{last}");
    for key in ["write_secs", "read_secs", "write_mbit", "read_mbit"] {
        assert!(field(last, key).parse::<f64>().unwrap() > 0.0, "{last}");
    }

    // One chip of the far board, by the machine's root, streamed in and read back.
    let dir = scratch("machine-scp");
    let (input, output) = (dir.join("in.bin"), dir.join("out.bin"));
    let data = pattern(70_001);
    std::fs::write(&input, &data).unwrap();
    let chip = [
        "--machine",
        "127.0.12.0",
        "--chip",
        "21,5",
        "--addr",
        "0x60001000",
    ];
    let (ok, stderr) =
        run(&[&["scp", "write"], &chip[..], &[input.to_str().unwrap()]].concat()).await;
    assert!(ok, "{stderr}");
    let read = [
        &["scp", "read"],
        &chip[..],
        &["--len", "70001", "-o", output.to_str().unwrap()],
    ]
    .concat();
    let (ok, stderr) = run(&read).await;
    assert!(ok, "{stderr}");
    assert!(std::fs::read(&output).unwrap() == data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn machine_options_are_checked_before_anything_starts() {
    let (ok, stderr) = run(&["emulate", "--boards", "4", "--base-ip", "127.0.13.0"]).await;
    assert!(!ok);
    assert!(
        stderr.contains("4 boards is not a machine") && stderr.contains("1, 3, 6, 9"),
        "{stderr}"
    );
    let (ok, stderr) = run(&["emulate", "--boards", "3", "--udp", "127.0.0.1:0"]).await;
    assert!(!ok && stderr.contains("cannot be used with"), "{stderr}");
    let both = [
        "scp",
        "read",
        "--machine",
        "127.0.13.0",
        "--target",
        "127.0.0.1:1",
    ];
    let (ok, stderr) = run(&[
        &both[..],
        &["--addr", "0x60000000", "--len", "4", "-o", "/dev/null"],
    ]
    .concat())
    .await;
    assert!(!ok && stderr.contains("cannot be used with"), "{stderr}");
    let tcp = [
        "scp",
        "read",
        "--machine",
        "127.0.13.0",
        "--transport",
        "tcp",
    ];
    let (ok, stderr) = run(&[
        &tcp[..],
        &["--addr", "0x60000000", "--len", "4", "-o", "/dev/null"],
    ]
    .concat())
    .await;
    assert!(
        !ok && stderr.contains("--transport tcp conflicts with --machine"),
        "{stderr}"
    );
    let (ok, stderr) = run(&["machine", "bench", "127.0.13.0", "--bytes-per-chip", "0"]).await;
    assert!(!ok && stderr.contains("bytes-per-chip"), "{stderr}");
    // Nothing listens there: refused, named.
    let (ok, stderr) = run(&["machine", "info", "127.0.13.0"]).await;
    assert!(
        !ok && stderr.contains("cannot discover the machine at 127.0.13.0"),
        "{stderr}"
    );
    assert!(stderr.contains("refused"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_machine_through_a_lossy_relay_per_board() {
    let emulate = [
        "emulate",
        "--boards",
        "3",
        "--base-ip",
        "127.0.14.0",
        "--report-base",
        "127.0.15.0",
    ];
    let (_machine, line) = spawn(&emulate).await;
    assert_eq!(line, "listening root=127.0.14.0:17893 boards=3 chips=144");
    let netsim = [
        "netsim",
        "--boards",
        "3",
        "--listen-base",
        "127.0.15.0",
        "--upstream-base",
        "127.0.14.0",
        "--loss",
        "0.05",
        "--seed",
        "4",
    ];
    let (_relays, line) = spawn(&netsim).await;
    assert_eq!(line, "listening boards=3 first=127.0.15.0:17893");
    let args = [
        "machine",
        "bench",
        "127.0.15.0",
        "--bytes-per-chip",
        "2000",
        "--window",
        "auto",
    ];
    let (ok, stdout, stderr) = run_out(&args).await;
    assert!(ok, "{stderr}");
    let last = stdout.lines().last().unwrap();
    assert_eq!(field(last, "bytes"), (144 * 2000).to_string(), "{last}");
    let (ok, stderr) = run(&["netsim", "--boards", "3", "--listen-base", "127.0.15.0"]).await;
    assert!(!ok && stderr.contains("--upstream-base"), "{stderr}");
}
