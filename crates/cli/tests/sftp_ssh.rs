//! `volley sftp get|put` to `host:path` over the system's ssh, against a real OpenSSH
//! `sshd` on 127.0.0.1 that each test starts: byte for byte both ways, `sftp://` URIs,
//! and clear errors for what cannot work.

mod common;

use common::*;
use volley_sftp::testing::sshd::Sshd;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_and_get_to_host_path_byte_for_byte() {
    let sshd = sshd().await;
    let cfg = sshd.config();
    let cfg = cfg.to_str().unwrap();
    let dir = sshd.dir().to_owned();
    let data = pattern(5 << 20);
    let local = dir.join("with space");
    std::fs::write(&local, &data).unwrap();
    let remote = dir.join("remote file");
    let target = Sshd::remote(&remote);
    let (ok, stderr) = run(&["sftp", "put", "-F", cfg, local.to_str().unwrap(), &target]).await;
    assert!(ok, "{stderr}");
    assert!(stderr.trim_end().ends_with("MB/s"), "{stderr}");
    assert_eq!(std::fs::read(&remote).unwrap(), data);
    let back = dir.join("back");
    let (ok, stderr) = run(&["sftp", "get", "-F", cfg, &target, back.to_str().unwrap()]).await;
    assert!(ok, "{stderr}");
    assert_eq!(std::fs::read(&back).unwrap(), data);
    // The same through an sftp:// URI, its port given in it (and percent-encoded space).
    let uri = format!(
        "sftp://127.0.0.1:{}{}",
        sshd.port(),
        remote.display().to_string().replace(' ', "%20")
    );
    let again = dir.join("again");
    let known = format!("UserKnownHostsFile={}", sshd.known_hosts().display());
    let (ok, stderr) = run(&[
        "sftp",
        "get",
        "-i",
        sshd.identity().to_str().unwrap(),
        "-o",
        &known,
        "-o",
        "BatchMode=yes",
        &uri,
        again.to_str().unwrap(),
    ])
    .await;
    assert!(ok, "{stderr}");
    assert_eq!(std::fs::read(&again).unwrap(), data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_cannot_work_says_why() {
    let sshd = sshd().await;
    let cfg = sshd.config();
    let cfg = cfg.to_str().unwrap();
    let dir = sshd.dir().to_owned();
    let local = dir.join("f");
    std::fs::write(&local, b"x").unwrap();
    let local = local.to_str().unwrap();
    // ssh refuses: its own words, not an SFTP timeout.
    let nobody = format!("nosuchuser@{}:/tmp/x", Sshd::HOST);
    let (ok, stderr) = run(&["sftp", "get", "-F", cfg, &nobody, local]).await;
    assert!(!ok);
    assert!(stderr.contains("ssh to volley-test failed"), "{stderr}");
    assert!(stderr.contains("Permission denied"), "{stderr}");
    // ssh options with no host to use them on.
    let (ok, stderr) = run(&["sftp", "get", "-F", cfg, "/tmp/x", local]).await;
    assert!(!ok && stderr.contains("need a remote"), "{stderr}");
    // The wrong side named as remote.
    let (ok, stderr) = run(&["sftp", "get", "-F", cfg, "/tmp/x", "host:y"]).await;
    assert!(
        !ok && stderr.contains("only the source side can be remote"),
        "{stderr}"
    );
    // A bad URI port.
    let (ok, stderr) = run(&["sftp", "get", "sftp://h:0/x", local]).await;
    assert!(!ok && stderr.contains("port"), "{stderr}");
    // With --server-cmd nothing is a host: `a:b` is a path on that server.
    let (ok, stderr) = run(&[
        "sftp",
        "get",
        "--server-cmd",
        "/usr/lib/openssh/sftp-server",
        "nohost:/nonexistent",
        local,
    ])
    .await;
    assert!(!ok && stderr.contains("nohost:/nonexistent"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ls_mkdir_rm_mv_on_the_host() {
    let sshd = sshd().await;
    let cfg = sshd.config();
    let cfg = cfg.to_str().unwrap();
    let base = sshd.dir().join("tree");
    let at = |p: &str| format!("{}:{}/{p}", Sshd::HOST, base.display());
    let ok = |(ok, _, stderr): (bool, String, String)| assert!(ok, "{stderr}");
    ok(run_out(&["sftp", "mkdir", "-F", cfg, "-p", &at("a/b/c")]).await);
    ok(run_out(&["sftp", "mkdir", "-F", cfg, "-p", &at("a/b")]).await);
    assert!(base.join("a/b/c").is_dir());
    std::fs::write(base.join("a/b/c/f"), b"x").unwrap();
    std::fs::write(base.join("a/line\nbreak"), b"y").unwrap();
    let (ok_ls, stdout, stderr) = run_out(&["sftp", "ls", "-F", cfg, &at("a")]).await;
    assert!(ok_ls, "{stderr}");
    assert_eq!(
        stdout, "b\nline\\nbreak\n",
        "one name a line, control bytes escaped"
    );
    let (_, long, _) = run_out(&["sftp", "ls", "-F", cfg, "-l", &at("a/b")]).await;
    assert!(
        long.starts_with('d') && long.trim_end().ends_with(" c"),
        "{long}"
    );
    ok(run_out(&["sftp", "mv", "-F", cfg, &at("a/b/c/f"), &at("a/g")]).await);
    assert_eq!(std::fs::read(base.join("a/g")).unwrap(), b"x");
    // A directory needs -r; with it, the whole tree goes.
    let (gone, _, stderr) = run_out(&["sftp", "rm", "-F", cfg, &at("a")]).await;
    assert!(
        !gone && stderr.contains("is a directory (use -r)"),
        "{stderr}"
    );
    ok(run_out(&["sftp", "rm", "-F", cfg, "-r", &at("a")]).await);
    assert!(!base.join("a").exists());
    // Failures exit 1 with the server's reason.
    let (found, _, stderr) = run_out(&["sftp", "ls", "-F", cfg, &at("nothing")]).await;
    assert!(!found && stderr.contains("No such file"), "{stderr}");
    let (moved, _, stderr) = run_out(&["sftp", "mv", "-F", cfg, &at("x"), "other:/y"]).await;
    assert!(!moved && stderr.contains("another host"), "{stderr}");
}

/// A tree with the names that break naive tools: spaces, a newline, a leading `-`, bytes
/// that are not UTF-8, an empty directory, an empty file, a symbolic link.
fn awkward_tree(root: &std::path::Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    use std::os::unix::ffi::OsStrExt;
    let odd = std::ffi::OsStr::from_bytes(b"not-utf8-\xff\xfe");
    let files = [
        (root.join("a file"), pattern(70_000)),
        (root.join("-leading"), b"dash".to_vec()),
        (root.join("new\nline"), b"nl".to_vec()),
        (root.join(odd), b"bytes".to_vec()),
        (root.join("empty"), Vec::new()),
        (root.join("sub/deeper/x.bin"), pattern(300_000)),
        (root.join("sub/y"), b"y".to_vec()),
    ];
    std::fs::create_dir_all(root.join("sub/deeper")).unwrap();
    std::fs::create_dir_all(root.join("empty dir")).unwrap();
    for (path, data) in &files {
        std::fs::write(path, data).unwrap();
    }
    std::os::unix::fs::symlink("a file", root.join("link")).unwrap();
    files.to_vec()
}

/// Checks that `copy` holds `files` (relative to `root`) byte for byte, the empty
/// directory, and no link.
fn same_tree(
    root: &std::path::Path,
    copy: &std::path::Path,
    files: &[(std::path::PathBuf, Vec<u8>)],
) {
    for (path, data) in files {
        let there = copy.join(path.strip_prefix(root).unwrap());
        assert_eq!(&std::fs::read(&there).unwrap(), data, "{}", there.display());
    }
    assert!(copy.join("empty dir").is_dir());
    assert!(!copy.join("link").exists(), "links are skipped");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trees_both_ways_with_awkward_names() {
    let sshd = sshd().await;
    let cfg = sshd.config();
    let cfg = cfg.to_str().unwrap();
    let dir = sshd.dir().to_owned();
    let src = dir.join("src");
    let files = awkward_tree(&src);
    // put -r into an existing remote directory: it lands in DST/src.
    std::fs::create_dir_all(dir.join("remote")).unwrap();
    let remote = Sshd::remote(&dir.join("remote"));
    let (ok, _, stderr) = run_out(&[
        "sftp",
        "put",
        "-F",
        cfg,
        "-r",
        src.to_str().unwrap(),
        &remote,
    ])
    .await;
    assert!(ok, "{stderr}");
    assert!(stderr.contains("skipped symbolic link"), "{stderr}");
    assert!(
        stderr.trim_end().ends_with("(1 skipped, 0 failed)"),
        "the summary is the last line: {stderr}"
    );
    assert!(
        stderr.contains(&format!("{} files, ", files.len())),
        "{stderr}"
    );
    same_tree(&src, &dir.join("remote/src"), &files);
    // get -r to a new local name: it becomes the copy.
    let back = dir.join("back");
    let from = Sshd::remote(&dir.join("remote/src"));
    let (ok, _, stderr) = run_out(&[
        "sftp",
        "get",
        "-F",
        cfg,
        "-r",
        &from,
        back.to_str().unwrap(),
    ])
    .await;
    assert!(ok, "{stderr}");
    same_tree(&src, &back, &files);
    // One file that cannot land (a directory is in its way) is reported by path, the
    // rest still come, and the command exits 1 saying how many failed.
    let again = dir.join("again");
    // (`again` exists, so the copy goes to `again/src`.)
    std::fs::create_dir_all(again.join("src/a file")).unwrap();
    let (ok, _, stderr) = run_out(&[
        "sftp",
        "get",
        "-F",
        cfg,
        "-r",
        &from,
        again.to_str().unwrap(),
    ])
    .await;
    assert!(!ok, "{stderr}");
    assert!(
        stderr.contains("a file"),
        "the failed path is named: {stderr}"
    );
    assert!(
        stderr
            .trim_end()
            .ends_with(&format!("volley: 1 of {} files failed", files.len())),
        "{stderr}"
    );
    assert_eq!(std::fs::read(again.join("src/sub/y")).unwrap(), b"y");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dash_p_keeps_times_and_modes_both_ways() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let sshd = sshd().await;
    let cfg = sshd.config();
    let cfg = cfg.to_str().unwrap();
    let dir = sshd.dir().to_owned();
    let local = dir.join("old");
    std::fs::write(&local, pattern(10_000)).unwrap();
    // 2001-09-09 01:46:40 UTC, mode 0640.
    let when = std::time::UNIX_EPOCH + core::time::Duration::from_secs(1_000_000_000);
    std::fs::File::open(&local)
        .unwrap()
        .set_times(
            std::fs::FileTimes::new()
                .set_accessed(when)
                .set_modified(when),
        )
        .unwrap();
    std::fs::set_permissions(&local, std::fs::Permissions::from_mode(0o640)).unwrap();
    let remote = dir.join("remote-old");
    let target = Sshd::remote(&remote);
    let (ok, _, stderr) = run_out(&[
        "sftp",
        "put",
        "-F",
        cfg,
        "-p",
        local.to_str().unwrap(),
        &target,
    ])
    .await;
    assert!(ok, "{stderr}");
    let meta = std::fs::metadata(&remote).unwrap();
    assert_eq!((meta.mtime(), meta.atime()), (1_000_000_000, 1_000_000_000));
    assert_eq!(meta.mode() & 0o7777, 0o640);
    // Back with -p; without it, the copy is new.
    std::fs::set_permissions(&remote, std::fs::Permissions::from_mode(0o604)).unwrap();
    let back = dir.join("back-old");
    let (ok, _, stderr) = run_out(&[
        "sftp",
        "get",
        "-F",
        cfg,
        "-p",
        &target,
        back.to_str().unwrap(),
    ])
    .await;
    assert!(ok, "{stderr}");
    let meta = std::fs::metadata(&back).unwrap();
    assert_eq!(meta.mtime(), 1_000_000_000);
    assert_eq!(meta.mode() & 0o7777, 0o604);
    let plain = dir.join("plain");
    let (ok, _, stderr) =
        run_out(&["sftp", "get", "-F", cfg, &target, plain.to_str().unwrap()]).await;
    assert!(ok, "{stderr}");
    assert!(std::fs::metadata(&plain).unwrap().mtime() > 1_000_000_000);
    // --fsync: the server's fsync@openssh.com on put (a malformed request would come
    // back as an error status), fsync(2) on get.
    let synced = Sshd::remote(&dir.join("synced"));
    let (ok, _, stderr) = run_out(&[
        "sftp",
        "put",
        "-F",
        cfg,
        "--fsync",
        local.to_str().unwrap(),
        &synced,
    ])
    .await;
    assert!(ok, "{stderr}");
    assert_eq!(std::fs::read(dir.join("synced")).unwrap(), pattern(10_000));
    let synced_back = dir.join("synced-back");
    let (ok, _, stderr) = run_out(&[
        "sftp",
        "get",
        "-F",
        cfg,
        "--fsync",
        &synced,
        synced_back.to_str().unwrap(),
    ])
    .await;
    assert!(ok, "{stderr}");
    assert_eq!(std::fs::read(&synced_back).unwrap(), pattern(10_000));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trees_with_dash_p_keep_directory_times_too() {
    use std::os::unix::fs::MetadataExt;
    let sshd = sshd().await;
    let cfg = sshd.config();
    let cfg = cfg.to_str().unwrap();
    let dir = sshd.dir().to_owned();
    let src = dir.join("dated");
    std::fs::create_dir_all(src.join("inner")).unwrap();
    std::fs::write(src.join("inner/f"), b"f").unwrap();
    let when = std::time::UNIX_EPOCH + core::time::Duration::from_secs(1_000_000_000);
    for path in [src.join("inner/f"), src.join("inner"), src.clone()] {
        std::fs::File::open(&path)
            .unwrap()
            .set_times(
                std::fs::FileTimes::new()
                    .set_accessed(when)
                    .set_modified(when),
            )
            .unwrap();
    }
    let remote = Sshd::remote(&dir.join("up"));
    let (ok, _, stderr) = run_out(&[
        "sftp",
        "put",
        "-F",
        cfg,
        "-r",
        "-p",
        src.to_str().unwrap(),
        &remote,
    ])
    .await;
    assert!(ok, "{stderr}");
    for path in ["up", "up/inner", "up/inner/f"] {
        assert_eq!(
            std::fs::metadata(dir.join(path)).unwrap().mtime(),
            1_000_000_000,
            "{path}"
        );
    }
    let back = dir.join("down");
    let (ok, _, stderr) = run_out(&[
        "sftp",
        "get",
        "-F",
        cfg,
        "-r",
        "-p",
        &remote,
        back.to_str().unwrap(),
    ])
    .await;
    assert!(ok, "{stderr}");
    for path in ["down", "down/inner", "down/inner/f"] {
        assert_eq!(
            std::fs::metadata(dir.join(path)).unwrap().mtime(),
            1_000_000_000,
            "{path}"
        );
    }
}
