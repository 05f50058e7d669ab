//! `volley sftp` tried as a hostile user would, against OpenSSH's sftp-server and against
//! a scripted server that lies about sizes, dies mid-transfer or sends escape sequences.
//! Each test failed before its fix.

use core::time::Duration;
use std::process::Stdio;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::time::timeout;
use volley_proto::sftp::StatusCode;
use volley_sftp::testing::{Script, serve};

mod common;

use common::{VOLLEY, listing, pattern, run, scratch};

/// A scripted server on a TCP port for one connection; returns `--connect ADDR`.
async fn scripted(script: Script) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        if let Ok((stream, _)) = listener.accept().await {
            serve(stream, script).await;
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_reads_a_pipe_to_its_end_and_names_a_directory() {
    let dir = scratch("sftp-pipe");
    let remote = dir.join("remote");
    let data = pattern(2_500_000);
    let mut child = tokio::process::Command::new(VOLLEY)
        .args(["sftp", "put", "/dev/stdin", remote.to_str().unwrap()])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let feed = data.clone();
    let feeder = tokio::spawn(async move {
        stdin.write_all(&feed).await?;
        stdin.shutdown().await
    });
    let output = timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("put from a pipe finishes within 60 s")
        .unwrap();
    feeder.await.unwrap().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.starts_with("2500000 bytes in "), "{stderr}");
    assert!(
        std::fs::read(&remote).unwrap() == data,
        "put from a pipe differs"
    );

    let (ok, stderr) = run(&["sftp", "put", dir.to_str().unwrap(), "/tmp/x"]).await;
    assert!(!ok, "{stderr}");
    assert!(
        stderr.contains(&format!("{} is a directory", dir.display())),
        "{stderr}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_get_leaves_the_destination_and_keeps_what_arrived() {
    let dir = scratch("sftp-get");
    let dst = dir.join("dst");
    let dst_arg = dst.to_str().unwrap();
    std::fs::write(&dst, b"the old copy").unwrap();
    let old = || std::fs::read(&dst).unwrap() == b"the old copy";

    // The server dies after 5 READs.
    let addr = scripted(Script {
        content: pattern(4 << 20),
        die_after_reads: Some(5),
        ..Script::default()
    })
    .await;
    let (ok, stderr) = run(&[
        "sftp",
        "get",
        "--connect",
        &addr,
        "--chunk",
        "32768",
        "/f",
        dst_arg,
    ])
    .await;
    assert!(!ok, "{stderr}");
    assert!(old(), "a failed get truncated or wrote the destination");
    // What arrived is kept in the part, named in the error, for get -a.
    assert_eq!(listing(&dir), ["dst", "dst.volley-part"]);
    let part = dir.join("dst.volley-part");
    let kept = std::fs::read(&part).unwrap();
    assert!(!kept.is_empty() && kept == pattern(4 << 20)[..kept.len()]);
    assert!(
        stderr.contains(&format!("{} bytes kept in {}", kept.len(), part.display()))
            && stderr.contains("`get -a` resumes"),
        "{stderr}"
    );
    let addr = scripted(Script {
        content: pattern(4 << 20),
        ..Script::default()
    })
    .await;
    let (ok, stderr) = run(&["sftp", "get", "-a", "--connect", &addr, "/f", dst_arg]).await;
    assert!(ok, "{stderr}");
    let rest = (4 << 20) - kept.len();
    assert!(stderr.starts_with(&format!("{rest} bytes in ")), "{stderr}");
    assert!(std::fs::read(&dst).unwrap() == pattern(4 << 20));
    assert_eq!(listing(&dir), ["dst"]);
    std::fs::write(&dst, b"the old copy").unwrap();

    // FSTAT says 100000, EOF comes at 32768.
    let short = Script {
        content: pattern(32_768),
        stated_size: Some(100_000),
        ..Script::default()
    };
    let addr = scripted(short.clone()).await;
    let (ok, stderr) = run(&["sftp", "get", "--connect", &addr, "/f", dst_arg]).await;
    assert!(
        !ok && stderr.contains("100000") && stderr.contains("32768"),
        "{stderr}"
    );
    assert!(old());
    assert_eq!(listing(&dir), ["dst"]);
    let addr = scripted(short).await;
    let (ok, stderr) = run(&[
        "sftp",
        "get",
        "--allow-shrink",
        "--connect",
        &addr,
        "/f",
        dst_arg,
    ])
    .await;
    assert!(ok, "{stderr}");
    assert!(
        stderr.contains("warning") && stderr.contains("100000") && stderr.contains("32768"),
        "{stderr}"
    );
    assert!(std::fs::read(&dst).unwrap() == pattern(32_768));

    // A failed CLOSE names the path, and the copy is not put in place.
    std::fs::write(&dst, b"the old copy").unwrap();
    let addr = scripted(Script {
        content: pattern(1000),
        fail_close: true,
        ..Script::default()
    })
    .await;
    let (ok, stderr) = run(&["sftp", "get", "--connect", &addr, "/remote/file", dst_arg]).await;
    assert!(
        !ok && stderr.contains("close /remote/file: SSH_FX_FAILURE"),
        "{stderr}"
    );
    assert!(old());
    // Every byte had arrived: they are kept for -a.
    assert_eq!(listing(&dir), ["dst", "dst.volley-part"]);
    assert!(std::fs::read(dir.join("dst.volley-part")).unwrap() == pattern(1000));
    std::fs::remove_file(dir.join("dst.volley-part")).unwrap();

    // A device is written in place; a directory receives the file, as sftp and scp do.
    let addr = scripted(Script {
        content: pattern(1000),
        ..Script::default()
    })
    .await;
    let (ok, stderr) = run(&["sftp", "get", "--connect", &addr, "/f", "/dev/null"]).await;
    assert!(ok && stderr.starts_with("1000 bytes in "), "{stderr}");
    let addr = scripted(Script {
        content: pattern(777),
        ..Script::default()
    })
    .await;
    let (ok, stderr) = run(&[
        "sftp",
        "get",
        "--connect",
        &addr,
        "/remote/f",
        dir.to_str().unwrap(),
    ])
    .await;
    assert!(ok && stderr.starts_with("777 bytes in "), "{stderr}");
    assert!(std::fs::read(dir.join("f")).unwrap() == pattern(777));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_message_reaches_the_terminal_escaped() {
    let addr = scripted(Script {
        open_error: Some((
            StatusCode::NO_SUCH_FILE,
            b"gone\0\x1b[31m red\x1b[0m".to_vec(),
        )),
        ..Script::default()
    })
    .await;
    let (ok, stderr) = run(&["sftp", "get", "--connect", &addr, "/f", "/tmp/volley-never"]).await;
    assert!(!ok);
    let line = stderr.trim_end();
    assert!(!line.chars().any(char::is_control), "{line:?}");
    assert!(line.contains(r"gone\u{0}\u{1b}[31m red\u{1b}[0m"), "{line}");
}

/// The server dies mid-tree (its replies cut after 200 kB): the command fails at once
/// saying so, every file that arrived is whole, and none is left half-written under its
/// own name (what arrived of one is in its `.volley-part`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_dies_mid_tree_fails_cleanly() {
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch("sftp-dies-mid-tree");
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("d")).unwrap();
    for i in 0..40 {
        std::fs::write(src.join(format!("d/f{i}")), pattern(20_000 + i)).unwrap();
    }
    let server = dir.join("dying-server");
    std::fs::write(
        &server,
        "#!/bin/sh\n/usr/lib/openssh/sftp-server -e -l ERROR | stdbuf -o0 head -c 200000\n",
    )
    .unwrap();
    std::fs::set_permissions(&server, std::fs::Permissions::from_mode(0o755)).unwrap();
    let copy = dir.join("copy");
    let (ok, stderr) = run(&[
        "sftp",
        "get",
        "-r",
        "--server-cmd",
        server.to_str().unwrap(),
        src.to_str().unwrap(),
        copy.to_str().unwrap(),
    ])
    .await;
    assert!(!ok, "{stderr}");
    assert!(stderr.contains("files failed"), "{stderr}");
    let mut whole = 0;
    for entry in std::fs::read_dir(copy.join("d")).unwrap().flatten() {
        let name = entry.file_name().into_string().unwrap();
        let Some(i) = name.strip_prefix('f').and_then(|n| n.parse::<usize>().ok()) else {
            assert!(
                name.ends_with(".volley-part"),
                "only parts besides whole files: {name}"
            );
            continue;
        };
        assert_eq!(
            std::fs::read(entry.path()).unwrap(),
            pattern(20_000 + i),
            "{name}"
        );
        whole += 1;
    }
    assert!(whole < 40, "the server died before the end");
    std::fs::remove_dir_all(&dir).unwrap();
}
