//! `volley sftp get|put` to `host:path` over the system's ssh, against a real OpenSSH
//! `sshd` on 127.0.0.1 that each test starts: byte for byte both ways, `sftp://` URIs,
//! and clear errors for what cannot work.

mod common;

use common::*;
use volley_sftp::testing::sshd::Sshd;

async fn sshd() -> Sshd {
    tokio::time::timeout(core::time::Duration::from_secs(20), Sshd::start())
        .await
        .expect("sshd started within 20 s")
        .expect("sshd starts")
}

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
    let target = format!("{}:{}", Sshd::HOST, remote.display());
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

/// Runs `volley ARGS` and returns (success, stdout, stderr).
async fn run_out(args: &[&str]) -> (bool, String, String) {
    let output = tokio::time::timeout(
        core::time::Duration::from_secs(60),
        tokio::process::Command::new(VOLLEY)
            .args(args)
            .kill_on_drop(true)
            .output(),
    )
    .await
    .unwrap_or_else(|_| panic!("volley {args:?} did not finish within 60 s"))
    .expect("volley runs");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
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
