//! `volley scp`, `emulate` and `netsim` tried as a hostile user would: every number out
//! of range, sources that never end, outputs that cannot be written, dead and odd boards.
//! Each test failed before its fix.

use core::time::Duration;
use std::time::Instant;

use tokio::time::timeout;

mod common;

use common::{VOLLEY, emulator, mkfifo, pattern, run, run_on_terminal, scratch};

/// `volley scp read` of `len` bytes at `addr` from `target`, plus `extra`.
async fn read(target: &str, addr: &str, len: &str, output: &str, extra: &[&str]) -> (bool, String) {
    let mut args = vec![
        "scp", "read", "--target", target, "--addr", addr, "--len", len, "-o", output,
    ];
    args.extend_from_slice(extra);
    run(&args).await
}

/// `volley scp write` of `file` to `addr` on `target`, plus `extra`.
async fn write(target: &str, addr: &str, file: &str, extra: &[&str]) -> (bool, String) {
    let mut args = vec!["scp", "write", "--target", target, "--addr", addr];
    args.extend_from_slice(extra);
    args.push(file);
    run(&args).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_range_numbers_are_refused_with_a_clear_message() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["--window", "65537"],
            "--window takes a number from 1 to 1024",
        ),
        (&["--window", "0"], "--window takes a number from 1 to 1024"),
        (&["--tries", "0"], "0 is not in 1.."),
        (&["--timeout-ms", "0"], "--timeout-ms takes 1 to 3600000"),
        (
            &["--timeout-ms", "3600001"],
            "--timeout-ms takes 1 to 3600000",
        ),
    ];
    for (extra, message) in cases {
        let (ok, stderr) = read("127.0.0.1:9", "0x60000000", "8", "/dev/null", extra).await;
        assert!(!ok && stderr.contains(message), "{extra:?}: {stderr}");
    }
    // from_str_radix would take the '+'.
    let (ok, stderr) = read("127.0.0.1:9", "+60000000", "8", "/dev/null", &[]).await;
    assert!(
        !ok && stderr.contains("`+60000000` is not a 32-bit hex address"),
        "{stderr}"
    );
    // These lengths used to overflow a capacity or abort on allocation.
    for len in ["18446744073709551615", "30000000000"] {
        let (ok, stderr) = read("127.0.0.1:9", "0x60000000", len, "/dev/null", &[]).await;
        assert!(
            !ok && stderr.contains("run past the end of the 32-bit address space"),
            "{len}: {stderr}"
        );
    }
    let (ok, help) = run(&["scp", "read", "--help"]).await;
    assert!(!ok || help.is_empty(), "help goes to stdout");
    let help = std::process::Command::new(VOLLEY)
        .args(["scp", "read", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.contains("= 9.1 s"),
        "--help does not give the give-up budget:\n{help}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transfer_past_the_top_of_memory_is_refused_on_a_terminal_too() {
    let (_board, udp) = emulator(&[]).await;
    let dir = scratch("wrap");
    let input = dir.join("in.bin");
    std::fs::write(&input, pattern(512 * 1024)).unwrap();
    // On a terminal the CLI used to cut the transfer into 256 KiB steps, each in range
    // on its own, and wrap the second to address 0.
    let (ok, out) = run_on_terminal(&[
        "scp",
        "write",
        "--target",
        &udp,
        "--addr",
        "0xFFFC0000",
        input.to_str().unwrap(),
    ])
    .await;
    assert!(
        !ok && out.contains("run past the end of the 32-bit address space"),
        "{out}"
    );
    let (ok, out) = run_on_terminal(&[
        "scp",
        "read",
        "--target",
        &udp,
        "--addr",
        "0xFFFC0000",
        "--len",
        "524288",
        "-o",
        "/dev/null",
    ])
    .await;
    assert!(
        !ok && out.contains("run past the end of the 32-bit address space"),
        "{out}"
    );

    // With a progress bar, a transfer is still one operation, and the bytes come back.
    let data = pattern(3 << 20);
    std::fs::write(&input, &data).unwrap();
    let back = dir.join("back.bin");
    let common = [
        "--target",
        udp.as_str(),
        "--addr",
        "0x60000000",
        "--window",
        "16",
    ];
    let mut write = vec!["scp", "write"];
    write.extend(common);
    write.push(input.to_str().unwrap());
    let (ok, out) = run_on_terminal(&write).await;
    assert!(ok && out.contains("Finished write after "), "{out}");
    let mut read = vec!["scp", "read"];
    read.extend(common);
    read.extend(["--len", "3145728", "-o", back.to_str().unwrap()]);
    let (ok, out) = run_on_terminal(&read).await;
    assert!(ok && out.contains("Finished read after "), "{out}");
    assert!(
        std::fs::read(&back).unwrap() == data,
        "read back on a terminal differs"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_delays_are_refused_in_one_line_not_a_mute_process() {
    let cases: &[(&[&str], &str)] = &[
        (
            &[
                "netsim",
                "--listen",
                "127.0.0.1:0",
                "--upstream",
                "127.0.0.1:9",
                "--delay-ms",
                "1e300",
            ],
            "milliseconds is too long",
        ),
        (
            &[
                "netsim",
                "--listen",
                "127.0.0.1:0",
                "--upstream",
                "127.0.0.1:9",
                "--delay-ms",
                "1e22",
            ],
            "a delay of ",
        ),
        (
            &[
                "netsim",
                "--listen",
                "127.0.0.1:0",
                "--upstream",
                "127.0.0.1:9",
                "--jitter-ms",
                "1e22",
            ],
            "a jitter of ",
        ),
        (
            &["emulate", "--udp", "127.0.0.1:0", "--delay-ms", "1e22"],
            "a processing delay of ",
        ),
        (
            &["emulate", "--udp", "127.0.0.1:0", "--hop-ms", "3600001"],
            "a hop latency of ",
        ),
        (
            &["emulate", "--udp", "127.0.0.1:0", "--delay-ms", "1e300"],
            "milliseconds is too long",
        ),
    ];
    for (args, message) in cases {
        let (ok, stderr) = run(args).await;
        assert!(!ok, "{args:?} started");
        assert!(stderr.contains(message), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
    // An hour is still taken.
    let (_link, line) = common::spawn(&[
        "netsim",
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        "127.0.0.1:9",
        "--delay-ms",
        "3600000",
    ])
    .await;
    assert!(line.starts_with("listening "), "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_stream_their_source_with_bounded_memory() {
    let (_board, udp) = emulator(&[]).await;
    let dir = scratch("stream");
    // Endless or sizeless sources need --len; a sparse file past 4 GiB is refused at
    // once (it used to be read whole: 5.2 GB and 40 s).
    let (ok, stderr) = write(&udp, "0x60000000", "/dev/zero", &[]).await;
    assert!(
        !ok && stderr.contains("is not a regular file") && stderr.contains("--len"),
        "{stderr}"
    );
    let sparse = dir.join("sparse.bin");
    std::fs::File::create(&sparse)
        .unwrap()
        .set_len(5 << 30)
        .unwrap();
    let start = Instant::now();
    let (ok, stderr) = write(&udp, "0x0", sparse.to_str().unwrap(), &[]).await;
    assert!(
        !ok && stderr.contains("more than the 4 GiB address space"),
        "{stderr}"
    );
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );

    // /dev/zero with a length: exactly that many zeros.
    let (ok, stderr) = write(&udp, "0x60000000", "/dev/zero", &["--len", "100000"]).await;
    assert!(ok, "{stderr}");
    let back = dir.join("back.bin");
    let (ok, stderr) = read(&udp, "0x60000000", "100000", back.to_str().unwrap(), &[]).await;
    assert!(ok, "{stderr}");
    assert!(std::fs::read(&back).unwrap() == vec![0u8; 100_000]);

    // A FIFO, fed as the write goes.
    let fifo = dir.join("fifo");
    mkfifo(&fifo);
    let data = pattern(1 << 20);
    let feeder = {
        let (fifo, data) = (fifo.clone(), data.clone());
        std::thread::spawn(move || std::fs::write(fifo, data))
    };
    let (ok, stderr) = write(
        &udp,
        "0x60100000",
        fifo.to_str().unwrap(),
        &["--len", "1048576"],
    )
    .await;
    assert!(ok, "{stderr}");
    feeder.join().unwrap().unwrap();
    let (ok, stderr) = read(&udp, "0x60100000", "1048576", back.to_str().unwrap(), &[]).await;
    assert!(ok, "{stderr}");
    assert!(
        std::fs::read(&back).unwrap() == data,
        "FIFO write read back differs"
    );

    // 32 MiB of file through a process whose peak RSS stays far below it.
    let big = dir.join("big.bin");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(32 << 20)
        .unwrap();
    let mut child = tokio::process::Command::new(VOLLEY)
        .args([
            "scp",
            "write",
            "--target",
            &udp,
            "--addr",
            "0x61000000",
            "--window",
            "16",
        ])
        .arg(&big)
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let pid = child.id().unwrap();
    let mut peak_kib = 0u64;
    let status = timeout(Duration::from_secs(120), async {
        loop {
            if let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
                let hwm = status
                    .lines()
                    .find_map(|l| l.strip_prefix("VmHWM:"))
                    .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok());
                peak_kib = peak_kib.max(hwm.unwrap_or(0));
            }
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("a 32 MiB write finishes within 120 s");
    assert!(status.success());
    assert!(
        peak_kib > 0 && peak_kib < 24 * 1024,
        "peak RSS {peak_kib} KiB for a 32 MiB write"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_say_what_happened() {
    // Nothing listening: refused at once, not 9 s of tries.
    let closed = std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let start = Instant::now();
    let (ok, stderr) = read(&closed.to_string(), "0x60000000", "4096", "/dev/null", &[]).await;
    assert!(
        !ok && stderr.contains(&format!(
            "connection refused: nothing is listening at {closed}"
        )),
        "{stderr}"
    );
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );

    // A board that answers busy every time.
    let busy = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let target = busy.local_addr().unwrap().to_string();
    let answering = std::thread::spawn(move || {
        busy.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut buf = [0u8; 600];
        for _ in 0..3 {
            let Ok((n, from)) = busy.recv_from(&mut buf) else {
                return;
            };
            let mut reply = buf[..n.min(14)].to_vec();
            reply[10..12].copy_from_slice(&0x8du16.to_le_bytes()); // RC_P2P_BUSY
            let _ = busy.send_to(&reply, from);
        }
    });
    let (ok, stderr) = read(
        &target,
        "0x60000000",
        "16",
        "/dev/null",
        &["--tries", "3", "--timeout-ms", "50"],
    )
    .await;
    answering.join().unwrap();
    assert!(
        !ok && stderr.contains("board busy (RC_P2P_BUSY) for all 3 tries"),
        "{stderr}"
    );

    // An output that cannot be opened fails before anything is read.
    let (_board, udp) = emulator(&[]).await;
    let (ok, stderr) = read(&udp, "0x60000000", "4096", "/nonexistent/x", &[]).await;
    assert!(
        !ok && stderr.contains("cannot open /nonexistent/x"),
        "{stderr}"
    );
    assert!(!stderr.contains("Finished"), "{stderr}");

    // Host names are resolved.
    let port = udp.rsplit(':').next().unwrap();
    let (ok, stderr) = read(
        &format!("localhost:{port}"),
        "0x60000000",
        "4096",
        "/dev/null",
        &[],
    )
    .await;
    assert!(ok && stderr.starts_with("Finished read after "), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dash_v_shows_what_the_libraries_log() {
    let (_board, udp) = emulator(&[]).await;
    let (ok, quiet) = read(&udp, "0x60000000", "1024", "/dev/null", &[]).await;
    assert!(ok && !quiet.contains("SCP client ready"), "{quiet}");
    let (ok, verbose) = run(&[
        "-v",
        "scp",
        "read",
        "--target",
        &udp,
        "--addr",
        "0x60000000",
        "--len",
        "1024",
        "-o",
        "/dev/null",
    ])
    .await;
    assert!(ok, "{verbose}");
    assert!(
        verbose.contains("SCP client ready") && verbose.contains("window=8"),
        "{verbose}"
    );
}
