//! `volley sftp` against a third server: asyncssh's (Python), which states 4 MiB READ
//! and WRITE limits in `limits@openssh.com`, far past OpenSSH's 255 KiB, and above
//! volley's own 1 MiB cap on a request. Files of 0 B to 64 MiB both ways, byte for
//! byte; a tree; resume; modes with and without `-p`; several sessions.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use common::*;
use volley_sftp::testing::sshd::Sshd;

fn part(p: &Path) -> PathBuf {
    let mut name = p.as_os_str().to_owned();
    name.push(".volley-part");
    PathBuf::from(name)
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_of_every_size_both_ways_against_asyncssh() {
    let server = asyncssh().await;
    let cfg = server.config();
    let cfg = cfg.to_str().unwrap();
    let dir = server.dir().to_owned();
    for (i, len) in [0, 1, 262_144, 262_145, 4 << 20, (4 << 20) + 1, 64 << 20]
        .into_iter()
        .enumerate()
    {
        let data = volley_testkit::pattern(len, i as u64);
        let local = dir.join(format!("src{i}"));
        std::fs::write(&local, &data).unwrap();
        let remote = dir.join(format!("remote{i}"));
        let (ok, stderr) = sftp_via(
            cfg,
            "put",
            &[],
            local.to_str().unwrap(),
            &Sshd::remote(&remote),
        )
        .await;
        assert!(
            ok && stderr.starts_with(&format!("{len} bytes in ")),
            "{len}: {stderr}"
        );
        assert!(
            std::fs::read(&remote).unwrap() == data,
            "put of {len} differs"
        );
        let back = dir.join(format!("back{i}"));
        let (ok, stderr) = sftp_via(
            cfg,
            "get",
            &[],
            &Sshd::remote(&remote),
            back.to_str().unwrap(),
        )
        .await;
        assert!(ok, "{len}: {stderr}");
        assert!(
            std::fs::read(&back).unwrap() == data,
            "get of {len} differs"
        );
        for p in [local, remote, back] {
            std::fs::remove_file(p).unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trees_resume_modes_and_sessions_against_asyncssh() {
    let server = asyncssh().await;
    let cfg = server.config();
    let cfg = cfg.to_str().unwrap();
    let dir = server.dir().to_owned();
    // A tree with files past a request's size, a private file and a script.
    let tree = dir.join("tree");
    let files = tree_of(&tree, 20, |i| i * 150_001);
    std::fs::set_permissions(&files[0], std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::set_permissions(&files[1], std::fs::Permissions::from_mode(0o755)).unwrap();
    let up = dir.join("up");
    let (ok, stderr) = sftp_via(
        cfg,
        "put",
        &["-r"],
        tree.to_str().unwrap(),
        &Sshd::remote(&up),
    )
    .await;
    assert!(ok && stderr.contains("20 files, "), "{stderr}");
    let down = dir.join("down");
    let (ok, stderr) = sftp_via(
        cfg,
        "get",
        &["-r", "--sessions", "3"],
        &Sshd::remote(&up),
        down.to_str().unwrap(),
    )
    .await;
    assert!(ok && stderr.contains("20 files, "), "{stderr}");
    for (i, path) in files.iter().enumerate() {
        let rel = path.strip_prefix(&tree).unwrap();
        assert!(std::fs::read(down.join(rel)).unwrap() == pattern(i * 150_001));
    }
    // Without -p the bits travel under the umask (the test runs under 022 or tighter).
    let rel0 = files[0].strip_prefix(&tree).unwrap();
    let rel1 = files[1].strip_prefix(&tree).unwrap();
    assert_eq!(
        mode(&up.join(rel0)) & 0o077,
        0,
        "a 0600 file went up readable"
    );
    assert_eq!(
        mode(&down.join(rel0)) & 0o077,
        0,
        "a 0600 file came down readable"
    );
    assert_eq!(
        mode(&down.join(rel1)) & 0o100,
        0o100,
        "a script lost its execute bit"
    );
    // -p with a setuid file on the server: never applied here.
    let suid = dir.join("suid");
    std::fs::write(&suid, b"#!/bin/sh\n").unwrap();
    std::fs::set_permissions(&suid, std::fs::Permissions::from_mode(0o4755)).unwrap();
    let got = dir.join("suid-got");
    let (ok, stderr) = sftp_via(
        cfg,
        "get",
        &["-p"],
        &Sshd::remote(&suid),
        got.to_str().unwrap(),
    )
    .await;
    assert!(ok, "{stderr}");
    assert_eq!(mode(&got), 0o755);
    // Resume both ways from a part, across asyncssh's 4 MiB requests, on 2 sessions.
    let data = pattern(20 << 20);
    let local = dir.join("big");
    std::fs::write(&local, &data).unwrap();
    let back = dir.join("big-back");
    std::fs::write(part(&back), &data[..5_000_000]).unwrap();
    let (ok, stderr) = sftp_via(
        cfg,
        "get",
        &["-a", "--sessions", "2"],
        &Sshd::remote(&local),
        back.to_str().unwrap(),
    )
    .await;
    let rest = data.len() - 5_000_000;
    assert!(
        ok && stderr.starts_with(&format!("{rest} bytes in ")),
        "{stderr}"
    );
    assert!(std::fs::read(&back).unwrap() == data, "resumed get differs");
    let remote = dir.join("big-up");
    std::fs::write(part(&remote), &data[..7_000_000]).unwrap();
    let (ok, stderr) = sftp_via(
        cfg,
        "put",
        &["-a"],
        local.to_str().unwrap(),
        &Sshd::remote(&remote),
    )
    .await;
    let rest = data.len() - 7_000_000;
    assert!(
        ok && stderr.starts_with(&format!("{rest} bytes in ")),
        "{stderr}"
    );
    assert!(
        std::fs::read(&remote).unwrap() == data,
        "resumed put differs"
    );
    assert!(!part(&remote).exists());
}
