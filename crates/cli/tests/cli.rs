//! The `volley` binary end to end: emulator, link simulator and transfers as separate
//! processes, the way a user runs them.

use core::time::Duration;
use std::time::Instant;

use tokio::process::Command;
use tokio::time::timeout;

mod common;

use common::{pattern, run, spawn};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_mib_through_a_lossy_link_come_back_identical() {
    let (_board, line) = spawn(&["emulate", "--udp", "127.0.0.1:0", "--tcp", "127.0.0.1:0"]).await;
    let udp = line
        .strip_prefix("listening udp=")
        .and_then(|rest| rest.split(' ').next())
        .unwrap_or_else(|| panic!("unexpected line `{line}`"))
        .to_owned();
    assert!(line.contains(" tcp=127.0.0.1:"), "{line}");
    let (_link, line) = spawn(&[
        "netsim",
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        &udp,
        "--delay-ms",
        "0.1",
        "--loss",
        "0.05",
        "--dup",
        "0.01",
        "--reorder",
        "0.01",
        "--seed",
        "7",
    ])
    .await;
    let relay = line
        .strip_prefix("listening ")
        .expect("listening ADDR")
        .to_owned();

    let dir = std::env::temp_dir().join(format!("volley-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("in.bin");
    let output = dir.join("out.bin");
    let data = pattern(10 << 20);
    std::fs::write(&input, &data).unwrap();

    let common = [
        "--target",
        relay.as_str(),
        "--chip",
        "0,0",
        "--addr",
        "0x60000000",
        "--window",
        "16",
    ];
    let mut args = vec!["scp", "write"];
    args.extend(common);
    args.push(input.to_str().unwrap());
    let (ok, stderr) = run(&args).await;
    assert!(ok, "write failed: {stderr}");
    assert!(stderr.starts_with("Finished write after "), "{stderr}");
    assert!(
        stderr.contains(" ms. Throughput = ") && stderr.trim_end().ends_with(" Mbit/s"),
        "{stderr}"
    );

    let len = data.len().to_string();
    let mut args = vec!["scp", "read"];
    args.extend(common);
    args.extend(["--len", &len, "-o", output.to_str().unwrap()]);
    let (ok, stderr) = run(&args).await;
    assert!(ok, "read failed: {stderr}");
    assert!(stderr.starts_with("Finished read after "), "{stderr}");
    let back = std::fs::read(&output).unwrap();
    assert!(
        back == data,
        "10 MiB read back through the lossy link differ"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_board_fails_with_a_timeout_in_tries_times_timeout() {
    // Bound and kept, never answering.
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let target = silent.local_addr().unwrap().to_string();
    let start = Instant::now();
    let (ok, stderr) = run(&[
        "scp",
        "read",
        "--target",
        &target,
        "--addr",
        "60000000",
        "--len",
        "4096",
        "-o",
        "/dev/null",
        "--timeout-ms",
        "200",
        "--tries",
        "3",
    ])
    .await;
    let elapsed = start.elapsed();
    assert!(!ok, "a read from nothing succeeded");
    assert!(stderr.contains("timed out after 3 tries"), "{stderr}");
    assert!(stderr.trim_end().ends_with("ms): no reply"), "{stderr}");
    assert!(stderr.contains("chip (0, 0, 0) at 0x60000000"), "{stderr}");
    assert!(elapsed >= Duration::from_millis(600), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_name_the_return_code_and_sigterm_stops_the_emulator() {
    let (mut board, line) = spawn(&["emulate", "--udp", "127.0.0.1:0"]).await;
    assert!(line.ends_with(" tcp=-"), "{line}");
    let udp = line["listening udp=".len()..]
        .split(' ')
        .next()
        .unwrap()
        .to_owned();
    // 0x1000 is outside SDRAM: RC_ARG.
    let (ok, stderr) = run(&[
        "scp",
        "read",
        "--target",
        &udp,
        "--chip",
        "1,2,3",
        "--addr",
        "0x1000",
        "--len",
        "8",
        "-o",
        "/dev/null",
    ])
    .await;
    assert!(!ok);
    assert!(
        stderr.contains("read to chip (1, 2, 3) at 0x00001000 failed: RC_ARG"),
        "{stderr}"
    );
    let (ok, stderr) = run(&[
        "scp",
        "read",
        "--target",
        &udp,
        "--addr",
        "zz",
        "--len",
        "8",
        "-o",
        "/dev/null",
    ])
    .await;
    assert!(
        !ok && stderr.contains("not a 32-bit hex address"),
        "{stderr}"
    );

    let pid = board.id().expect("running").to_string();
    let status = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .await
        .unwrap();
    assert!(status.success());
    let exit = timeout(Duration::from_secs(10), board.wait())
        .await
        .expect("the emulator exits within 10 s of SIGTERM")
        .unwrap();
    assert!(exit.success(), "{exit:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sftp_put_then_get_through_openssh() {
    let server = "/usr/lib/openssh/sftp-server";
    assert!(
        std::path::Path::new(server).exists(),
        "{server} is missing: run `cargo xtask test`, which installs it"
    );
    let dir = std::env::temp_dir().join(format!("volley-cli-sftp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let data = pattern(3 << 20);
    let (input, remote, back) = (dir.join("in"), dir.join("remote"), dir.join("back"));
    std::fs::write(&input, &data).unwrap();
    let (ok, stderr) = run(&[
        "sftp",
        "put",
        "--requests",
        "16",
        input.to_str().unwrap(),
        remote.to_str().unwrap(),
    ])
    .await;
    assert!(ok, "{stderr}");
    assert!(
        stderr.starts_with(&format!("{} bytes in ", data.len()))
            && stderr.trim_end().ends_with(" MB/s"),
        "{stderr}"
    );
    // `volley sftp get [extra..] remote back`.
    let get = async |extra: &[&str]| {
        let mut args = vec!["sftp", "get"];
        args.extend_from_slice(extra);
        args.extend([remote.to_str().unwrap(), back.to_str().unwrap()]);
        run(&args).await
    };
    let (ok, stderr) = get(&[]).await;
    assert!(ok, "{stderr}");
    assert!(
        std::fs::read(&back).unwrap() == data,
        "sftp get returned different bytes"
    );
    let (ok, stderr) = run(&["sftp", "get", "/nonexistent/file", back.to_str().unwrap()]).await;
    assert!(!ok && stderr.contains("No such file"), "{stderr}");

    // Counts of 0 are refused; a chunk over the server's limit is capped, and said so.
    for flag in ["--requests", "--chunk"] {
        let (ok, stderr) = run(&["sftp", "get", flag, "0", remote.to_str().unwrap(), "x"]).await;
        assert!(!ok && stderr.contains("must be at least 1"), "{stderr}");
    }
    let (ok, stderr) = get(&["--chunk", "1000000"]).await;
    assert!(
        ok && stderr.contains("over the server's limit; using "),
        "{stderr}"
    );
    assert!(
        std::fs::read(&back).unwrap() == data,
        "capped get returned different bytes"
    );

    // The kernel's default socket buffers (208 KiB) instead of volley's 1 MiB ask.
    std::fs::remove_file(&back).unwrap();
    let (ok, stderr) = get(&["--socket-buffer", "0"]).await;
    assert!(ok, "{stderr}");
    assert!(
        std::fs::read(&back).unwrap() == data,
        "get on default buffers returned different bytes"
    );

    // A server that exits at once: how it exited, not a 30 s wait.
    let (ok, stderr) = get(&["--server-cmd", "false"]).await;
    assert!(
        !ok && stderr.contains("the server exited (exit status: 1)"),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_without_a_port_is_the_board_at_17893() {
    // The one address rule: HOST alone means SC&MP's port.
    let (_board, line) = spawn(&["emulate", "--udp", "127.0.16.1:17893"]).await;
    assert!(line.starts_with("listening udp=127.0.16.1:17893"), "{line}");
    let dir = std::env::temp_dir().join(format!("volley-cli-target-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("in.bin");
    let output = dir.join("out.bin");
    let data = pattern(4096);
    std::fs::write(&input, &data).unwrap();
    let at = ["--target", "127.0.16.1", "--addr", "0x60000000"];
    let (ok, stderr) =
        run(&[&["scp", "write"][..], &at, &[input.to_str().unwrap()]].concat()).await;
    assert!(ok, "write: {stderr}");
    let read = ["--len", "4096", "-o", output.to_str().unwrap()];
    let (ok, stderr) = run(&[&["scp", "read"][..], &at, &read].concat()).await;
    assert!(ok, "read: {stderr}");
    assert!(std::fs::read(&output).unwrap() == data);
    let (ok, stderr) = run(&[
        &[
            "scp",
            "read",
            "--target",
            "127.0.16.1:x",
            "--addr",
            "0x60000000",
        ][..],
        &read[..],
    ]
    .concat())
    .await;
    assert!(!ok && stderr.contains("is not a port"), "{stderr}");
    std::fs::remove_dir_all(&dir).unwrap();
}
