//! `volley sftp-server`: volley's own client copies a file and a tree through it, as
//! `--server-cmd` spawns it, and it answers `-Q requests` and refuses a bad option.

mod common;

use common::*;

fn arg(p: &std::path::Path) -> &str {
    p.to_str().expect("a UTF-8 test path")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volley_s_client_copies_through_volley_s_server() {
    let dir = scratch("sftp-server-cli");
    let server = format!("{VOLLEY} sftp-server -e -l ERROR");
    let (src, there, back) = (
        dir.join("f.bin"),
        dir.join("there.bin"),
        dir.join("back.bin"),
    );
    std::fs::write(&src, pattern(3 << 20)).unwrap();
    let (ok, stderr) = run(&[
        "sftp",
        "put",
        "--server-cmd",
        &server,
        arg(&src),
        arg(&there),
    ])
    .await;
    assert!(ok, "{stderr}");
    let (ok, stderr) = run(&[
        "sftp",
        "get",
        "--server-cmd",
        &server,
        arg(&there),
        arg(&back),
    ])
    .await;
    assert!(ok, "{stderr}");
    assert!(
        std::fs::read(&back).unwrap() == pattern(3 << 20),
        "read back differs"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn it_lists_its_requests_and_refuses_a_bad_option() {
    let (ok, stdout, _) = run_out(&["sftp-server", "-Q", "requests"]).await;
    assert!(
        ok && stdout.lines().any(|l| l == "users-groups-by-id"),
        "{stdout}"
    );
    let (ok, _, stderr) = run_out(&["sftp-server", "-u", "1777"]).await;
    assert!(!ok && stderr.contains("umask"), "{stderr}");
}
