//! `volley sftp` against a second server: `rclone serve sftp` (Go's pkg/sftp behind
//! rclone's own SSH server). It states no `limits@openssh.com` (so 32 KiB chunks and
//! volley's own cap on open files), has no `posix-rename@openssh.com` (so a put lands by
//! remove and RENAME), stores names that are not UTF-8 re-encoded, and (without its
//! write cache) empties a file opened to write, so a put resumes from nothing.

mod common;

use common::*;
use volley_sftp::testing::sshd::Sshd;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_trees_and_resume_against_rclone() {
    let server = rclone().await;
    let cfg = server.config();
    let cfg = cfg.to_str().unwrap();
    let dir = server.dir().to_owned();
    // One file both ways, over an existing target (no posix-rename: remove, RENAME).
    let data = pattern(3_000_001);
    let local = dir.join("one");
    std::fs::write(&local, &data).unwrap();
    let remote = dir.join("remote one");
    std::fs::write(&remote, b"an old copy").unwrap();
    let (ok, stderr) = sftp_via(
        cfg,
        "put",
        &[],
        local.to_str().unwrap(),
        &Sshd::remote(&remote),
    )
    .await;
    assert!(ok && stderr.starts_with("3000001 bytes in "), "{stderr}");
    assert!(std::fs::read(&remote).unwrap() == data, "put differs");
    let back = dir.join("back");
    let (ok, stderr) = sftp_via(
        cfg,
        "get",
        &[],
        &Sshd::remote(&remote),
        back.to_str().unwrap(),
    )
    .await;
    assert!(ok, "{stderr}");
    assert!(std::fs::read(&back).unwrap() == data, "get differs");
    // Resume both ways from a part.
    let part = |p: &std::path::Path| {
        let mut name = p.as_os_str().to_owned();
        name.push(".volley-part");
        std::path::PathBuf::from(name)
    };
    std::fs::remove_file(&back).unwrap();
    std::fs::write(part(&back), &data[..1_000_000]).unwrap();
    let get_a = [
        "sftp",
        "get",
        "-F",
        cfg,
        "-a",
        &Sshd::remote(&remote),
        back.to_str().unwrap(),
    ];
    let (ok, stderr) = run(&get_a).await;
    assert!(ok && stderr.starts_with("2000001 bytes in "), "{stderr}");
    assert!(std::fs::read(&back).unwrap() == data);
    let again = dir.join("again");
    std::fs::write(part(&again), &data[..2_500_000]).unwrap();
    let put_a = [
        "sftp",
        "put",
        "-F",
        cfg,
        "-a",
        local.to_str().unwrap(),
        &Sshd::remote(&again),
    ];
    let (ok, stderr) = run(&put_a).await;
    // rclone's file system (without its write cache) empties a file opened to write:
    // nothing is left to resume from, so the whole file goes again.
    assert!(ok && stderr.starts_with("3000001 bytes in "), "{stderr}");
    assert!(std::fs::read(&again).unwrap() == data);
    assert!(!part(&again).exists());
    // A tree of 100 files both ways: more files than the open-file cap at once.
    let tree = dir.join("tree");
    std::fs::create_dir_all(tree.join("empty")).unwrap();
    let files = tree_of(&tree, 100, |i| i * 97);
    let up = dir.join("up");
    let (ok, stderr) = sftp_via(
        cfg,
        "put",
        &["-r"],
        tree.to_str().unwrap(),
        &Sshd::remote(&up),
    )
    .await;
    assert!(ok && stderr.contains("100 files, "), "{stderr}");
    let down = dir.join("down");
    let (ok, stderr) = sftp_via(
        cfg,
        "get",
        &["-r"],
        &Sshd::remote(&up),
        down.to_str().unwrap(),
    )
    .await;
    assert!(ok && stderr.contains("100 files, "), "{stderr}");
    for (i, path) in files.iter().enumerate() {
        let rel = path.strip_prefix(&tree).unwrap();
        assert_eq!(
            std::fs::read(down.join(rel)).unwrap(),
            pattern(i * 97),
            "{}",
            rel.display()
        );
    }
    assert!(down.join("empty").is_dir());
}

/// A name that is not UTF-8 goes up; rclone stores it re-encoded, and it comes back
/// under the name rclone gives, with its bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_rclone_re_encodes_still_arrives() {
    use std::os::unix::ffi::OsStrExt;
    let server = rclone().await;
    let cfg = server.config();
    let cfg = cfg.to_str().unwrap();
    let dir = server.dir().to_owned();
    let tree = dir.join("odd");
    std::fs::create_dir_all(&tree).unwrap();
    std::fs::write(tree.join(std::ffi::OsStr::from_bytes(b"x-\xff")), b"bytes").unwrap();
    let up = Sshd::remote(&dir.join("up"));
    let (ok, stderr) = run(&["sftp", "put", "-F", cfg, "-r", tree.to_str().unwrap(), &up]).await;
    assert!(ok, "{stderr}");
    let down = dir.join("down");
    let (ok, stderr) = run(&["sftp", "get", "-F", cfg, "-r", &up, down.to_str().unwrap()]).await;
    assert!(ok && stderr.contains("1 files, 5 bytes"), "{stderr}");
    let names: Vec<_> = std::fs::read_dir(&down).unwrap().flatten().collect();
    assert_eq!(names.len(), 1);
    assert_eq!(std::fs::read(names[0].path()).unwrap(), b"bytes");
}
