//! `volley sftp get|put -a` and `--sessions N` against a real OpenSSH `sshd`: a
//! transfer interrupted halfway keeps its `.volley-part`, and the resume sends only the
//! rest, byte for byte; several logins carry one file in ranges, and a tree.

mod common;

use core::time::Duration;
use std::path::Path;
use std::process::Stdio;

use common::*;
use tokio::io::AsyncReadExt;
use tokio::process::{Child, Command};
use tokio::time::timeout;
use volley_sftp::testing::sshd::Sshd;

/// Starts `volley ARGS`, its stderr piped.
fn start(args: &[&str]) -> Child {
    Command::new(VOLLEY)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("volley starts")
}

/// Waits (30 s at most) until `part` holds at least `bytes`, then interrupts `child` as
/// a Ctrl-C would, and returns its stderr once it exits (it must fail).
async fn interrupt_at(child: Child, part: &Path, bytes: u64) -> String {
    let grown = async {
        while std::fs::metadata(part).map_or(0, |m| m.len()) < bytes {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    };
    timeout(Duration::from_secs(30), grown)
        .await
        .unwrap_or_else(|_| panic!("{} reached {bytes} bytes within 30 s", part.display()));
    let (status, stderr) = ctrl_c(child).await;
    assert!(!status.success(), "an interrupted transfer fails: {stderr}");
    assert!(stderr.contains("interrupted"), "{stderr}");
    stderr
}

/// Interrupts `child` as a Ctrl-C would; its exit status and stderr once it exits (20 s
/// at most).
async fn ctrl_c(mut child: Child) -> (std::process::ExitStatus, String) {
    let pid = child.id().expect("still running").to_string();
    let sent = Command::new("kill").args(["-INT", &pid]).status().await;
    assert!(sent.expect("kill runs").success());
    let mut stderr = String::new();
    let mut pipe = child.stderr.take().expect("piped");
    let status = timeout(Duration::from_secs(20), async {
        pipe.read_to_string(&mut stderr).await.expect("stderr");
        child.wait().await.expect("waits")
    })
    .await
    .expect("volley exited within 20 s of Ctrl-C");
    (status, stderr)
}

/// The bytes a `N bytes in T ms` line (or a tree's summary) says moved.
fn moved(stderr: &str) -> u64 {
    let line = stderr.lines().last().unwrap_or_default();
    let words: Vec<&str> = line.split_whitespace().collect();
    let at = words.iter().position(|w| *w == "bytes").expect(line);
    words[at - 1].parse().expect(line)
}

fn part_of(path: &Path) -> std::path::PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".volley-part");
    name.into()
}

const SIZE: usize = 48 << 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_interrupted_halfway_resumes_with_only_the_rest() {
    let sshd = sshd().await;
    let cfg = sshd.config();
    let cfg = cfg.to_str().unwrap();
    let dir = sshd.dir().to_owned();
    let data = pattern(SIZE);
    let remote = dir.join("source");
    std::fs::write(&remote, &data).unwrap();
    let from = Sshd::remote(&remote);
    let local = dir.join("copy");
    let part = part_of(&local);
    // One small READ at a time, so the interrupt comes mid-file.
    let slow = [
        "sftp",
        "get",
        "-F",
        cfg,
        "--requests",
        "1",
        "--chunk",
        "1024",
        &from,
    ];
    let mut args = slow.to_vec();
    args.push(local.to_str().unwrap());
    let stderr = interrupt_at(start(&args), &part, 1 << 20).await;
    assert!(!local.exists(), "nothing lands under the name itself");
    let kept = std::fs::read(&part).unwrap_or_else(|e| panic!("part kept: {e}; {stderr}"));
    assert!(kept.len() < SIZE && !kept.is_empty(), "{}", kept.len());
    // Ctrl-C names the part and what it holds.
    let named = format!("{} bytes kept in {}", kept.len(), part.display());
    assert!(stderr.contains(&named), "{stderr}");
    assert!(
        kept == data[..kept.len()],
        "the part is the source's prefix"
    );
    // get -a: only the rest travels, and the copy is whole.
    let (ok, stderr) = run(&[
        "sftp",
        "get",
        "-F",
        cfg,
        "-a",
        &from,
        local.to_str().unwrap(),
    ])
    .await;
    assert!(ok, "{stderr}");
    assert_eq!(moved(&stderr), (SIZE - kept.len()) as u64, "{stderr}");
    assert!(
        std::fs::read(&local).unwrap() == data,
        "the resumed copy differs"
    );
    assert!(!part.exists());
    // Again: the copy is complete, nothing travels.
    let (ok, stderr) = run(&[
        "sftp",
        "get",
        "-F",
        cfg,
        "-a",
        &from,
        local.to_str().unwrap(),
    ])
    .await;
    assert!(ok && moved(&stderr) == 0, "{stderr}");
    // A part longer than the source is refused and left alone.
    std::fs::write(&part, pattern(SIZE + 1)).unwrap();
    let (ok, stderr) = run(&[
        "sftp",
        "get",
        "-F",
        cfg,
        "-a",
        &from,
        local.to_str().unwrap(),
    ])
    .await;
    assert!(
        !ok && stderr.contains("is longer than the source"),
        "{stderr}"
    );
    assert_eq!(std::fs::metadata(&part).unwrap().len(), SIZE as u64 + 1);
    // Without -a the part is started over.
    let (ok, stderr) = run(&["sftp", "get", "-F", cfg, &from, local.to_str().unwrap()]).await;
    assert!(ok && moved(&stderr) == SIZE as u64, "{stderr}");
    assert!(std::fs::read(&local).unwrap() == data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_interrupted_halfway_resumes_with_only_the_rest() {
    let sshd = sshd().await;
    let cfg = sshd.config();
    let cfg = cfg.to_str().unwrap();
    let dir = sshd.dir().to_owned();
    let data = pattern(SIZE);
    let local = dir.join("source");
    std::fs::write(&local, &data).unwrap();
    let remote = dir.join("remote copy");
    let to = Sshd::remote(&remote);
    let part = part_of(&remote);
    let args = [
        "sftp",
        "put",
        "-F",
        cfg,
        "--requests",
        "1",
        "--chunk",
        "1024",
        local.to_str().unwrap(),
        &to,
    ];
    let stderr = interrupt_at(start(&args), &part, 1 << 20).await;
    assert!(!remote.exists());
    // Ctrl-C names the remote part it kept, with its bytes.
    assert!(
        stderr.contains(&format!(" bytes kept in {}", part.display())),
        "{stderr}"
    );
    let kept = std::fs::read(&part).unwrap();
    assert!(kept.len() < SIZE && !kept.is_empty(), "{}", kept.len());
    assert!(
        kept == data[..kept.len()],
        "the part is the source's prefix"
    );
    let resume = ["sftp", "put", "-F", cfg, "-a", local.to_str().unwrap(), &to];
    let (ok, stderr) = run(&resume).await;
    assert!(ok, "{stderr}");
    // The one WRITE in flight at the interrupt (of 1024 bytes) may land after the part
    // was read here: the resume then sends that much less.
    let rest = (SIZE - kept.len()) as u64;
    let sent = moved(&stderr);
    assert!(
        sent <= rest && sent + 1024 >= rest,
        "sent {sent} of the {rest} missing: {stderr}"
    );
    assert!(
        std::fs::read(&remote).unwrap() == data,
        "the resumed copy differs"
    );
    assert!(!part.exists());
    // With no part, -a continues the remote file itself (reput), and a complete one
    // moves nothing.
    let (ok, stderr) = run(&resume).await;
    assert!(ok && moved(&stderr) == 0, "{stderr}");
    std::fs::write(&remote, &data[..1000]).unwrap();
    let (ok, stderr) = run(&resume).await;
    assert!(ok && moved(&stderr) == SIZE as u64 - 1000, "{stderr}");
    assert!(std::fs::read(&remote).unwrap() == data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tree_resumes_with_only_what_is_missing() {
    let sshd = sshd().await;
    let cfg = sshd.config();
    let cfg = cfg.to_str().unwrap();
    let dir = sshd.dir().to_owned();
    let src = dir.join("tree");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    let files: Vec<_> = (0..20)
        .map(|i| {
            let path = src
                .join(if i % 2 == 0 { "sub" } else { "" })
                .join(format!("f{i}"));
            let data = pattern(10_000 + i * 1000);
            std::fs::write(&path, &data).unwrap();
            (path, data)
        })
        .collect();
    let from = Sshd::remote(&src);
    // Into an existing directory, so both runs land in back/tree.
    let back = dir.join("back");
    std::fs::create_dir(&back).unwrap();
    let get = [
        "sftp",
        "get",
        "-F",
        cfg,
        "-r",
        "-a",
        &from,
        back.to_str().unwrap(),
    ];
    let (ok, stderr) = run(&get).await;
    assert!(ok, "{stderr}");
    let all: usize = files.iter().map(|(_, d)| d.len()).sum();
    assert_eq!(moved(&stderr), all as u64, "{stderr}");
    // Lose one file, cut another back to a part: only those bytes come again.
    let copy = |p: &Path| back.join("tree").join(p.strip_prefix(&src).unwrap());
    std::fs::remove_file(copy(&files[3].0)).unwrap();
    let cut = copy(&files[4].0);
    std::fs::rename(&cut, part_of(&cut)).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(part_of(&cut))
        .unwrap()
        .set_len(5000)
        .unwrap();
    let (ok, stderr) = run(&get).await;
    assert!(ok, "{stderr}");
    let missing = files[3].1.len() + files[4].1.len() - 5000;
    assert_eq!(moved(&stderr), missing as u64, "{stderr}");
    for (path, data) in &files {
        assert!(
            &std::fs::read(copy(path)).unwrap() == data,
            "{}",
            path.display()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_sessions_carry_one_file_in_ranges_and_a_tree() {
    let sshd = sshd().await;
    let cfg = sshd.config();
    let cfg = cfg.to_str().unwrap();
    let dir = sshd.dir().to_owned();
    // 40 MiB: five ranges of 8 MiB would do, so four sessions each take one.
    let data = pattern(40 << 20);
    let local = dir.join("big");
    std::fs::write(&local, &data).unwrap();
    let remote = dir.join("remote big");
    let to = Sshd::remote(&remote);
    let before = sshd.logins();
    let put = [
        "sftp",
        "put",
        "-F",
        cfg,
        "--sessions",
        "4",
        local.to_str().unwrap(),
        &to,
    ];
    let (ok, stderr) = run(&put).await;
    assert!(ok, "{stderr}");
    assert!(
        std::fs::read(&remote).unwrap() == data,
        "put in ranges differs"
    );
    let logins = sshd
        .wait_for_logins(before + 4, Duration::from_secs(5))
        .await;
    assert_eq!(logins - before, 4, "one login a session");
    let back = dir.join("back");
    let get = [
        "sftp",
        "get",
        "-F",
        cfg,
        "--sessions",
        "4",
        &to,
        back.to_str().unwrap(),
    ];
    let (ok, stderr) = run(&get).await;
    assert!(ok && moved(&stderr) == data.len() as u64, "{stderr}");
    assert!(
        std::fs::read(&back).unwrap() == data,
        "get in ranges differs"
    );
    // A tree over three sessions.
    let tree = dir.join("tree");
    std::fs::create_dir_all(tree.join("d")).unwrap();
    for i in 0..30 {
        std::fs::write(tree.join(format!("d/{i}")), pattern(i * 100)).unwrap();
    }
    let from = Sshd::remote(&tree);
    let copy = dir.join("tree copy");
    let args = [
        "sftp",
        "get",
        "-F",
        cfg,
        "-r",
        "--sessions",
        "3",
        &from,
        copy.to_str().unwrap(),
    ];
    let (ok, stderr) = run(&args).await;
    assert!(ok && stderr.contains("30 files, "), "{stderr}");
    for i in 0..30 {
        assert_eq!(
            std::fs::read(copy.join(format!("d/{i}"))).unwrap(),
            pattern(i * 100)
        );
    }
    // Out of range is refused before anything starts.
    let (ok, stderr) = run(&["sftp", "get", "--sessions", "0", &from, "x"]).await;
    assert!(!ok && stderr.contains("--sessions"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dash_l_follows_links_both_ways_and_stops_at_a_loop() {
    let sshd = sshd().await;
    let cfg = sshd.config();
    let cfg = cfg.to_str().unwrap();
    let dir = sshd.dir().to_owned();
    let outside = dir.join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("o"), b"from outside").unwrap();
    let src = dir.join("linked");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    std::fs::write(src.join("file"), b"the file").unwrap();
    std::os::unix::fs::symlink("file", src.join("to-file")).unwrap();
    std::os::unix::fs::symlink(&outside, src.join("to-dir")).unwrap();
    std::os::unix::fs::symlink("..", src.join("sub/up")).unwrap();
    let check = |copy: &Path, stderr: &str| {
        assert_eq!(std::fs::read(copy.join("to-file")).unwrap(), b"the file");
        assert!(
            !copy.join("to-file").is_symlink(),
            "a link becomes its file"
        );
        assert_eq!(
            std::fs::read(copy.join("to-dir/o")).unwrap(),
            b"from outside"
        );
        assert!(
            stderr.contains("up") && stderr.contains("a loop"),
            "{stderr}"
        );
        assert!(
            stderr.trim_end().ends_with("volley: 1 of 4 files failed"),
            "{stderr}"
        );
    };
    let from = Sshd::remote(&src);
    let back = dir.join("back");
    let get = [
        "sftp",
        "get",
        "-F",
        cfg,
        "-r",
        "-L",
        &from,
        back.to_str().unwrap(),
    ];
    let (ok, stderr) = run(&get).await;
    assert!(!ok, "the loop is a failure: {stderr}");
    check(&back, &stderr);
    let there = dir.join("there");
    let to = Sshd::remote(&there);
    let put = [
        "sftp",
        "put",
        "-F",
        cfg,
        "-r",
        "-L",
        src.to_str().unwrap(),
        &to,
    ];
    let (ok, stderr) = run(&put).await;
    assert!(!ok, "the loop is a failure: {stderr}");
    check(&there, &stderr);
}

/// Waits (30 s at most) until the directory `dir` holds a file with bytes in it, then
/// interrupts `child` as a Ctrl-C would; returns its stderr once it exits (it must exit
/// 130).
async fn interrupt_once_begun(child: Child, dir: &Path) -> String {
    let has_bytes = || {
        std::fs::read_dir(dir).is_ok_and(|entries| {
            entries
                .flatten()
                .any(|e| e.metadata().is_ok_and(|m| m.is_file() && m.len() > 0))
        })
    };
    let begun = async {
        while !has_bytes() {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    };
    timeout(Duration::from_secs(30), begun)
        .await
        .unwrap_or_else(|_| panic!("{} received a file within 30 s", dir.display()));
    let (status, stderr) = ctrl_c(child).await;
    assert_eq!(status.code(), Some(130), "{stderr}");
    stderr
}

/// A tree copied into a destination that did not exist, interrupted, and run again
/// unchanged with -a: the rerun continues the same copy (not into DST/basename, where
/// the existing DST would otherwise put it), and the mark that said so is gone after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_tree_into_a_new_destination_resumes_in_place() {
    let dir = scratch("tree-rerun");
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    let files: Vec<_> = (0..60)
        .map(|i| {
            let path = src
                .join(if i % 2 == 0 { "sub" } else { "" })
                .join(format!("f{i}"));
            let data = pattern(200_000 + i);
            std::fs::write(&path, &data).unwrap();
            (path, data)
        })
        .collect();
    let slow = ["--chunk", "2048", "--requests", "1"];
    for what in ["get", "put"] {
        let dst = dir.join(format!("new-{what}"));
        // The local sftp-server: remote and local paths are alike.
        let (from, to) = (src.to_str().unwrap(), dst.to_str().unwrap());
        let mut args = vec!["sftp", what, "-r"];
        args.extend(slow);
        args.extend([from, to]);
        let watched = if what == "get" {
            dst.clone()
        } else {
            dst.join("sub")
        };
        let stderr = interrupt_once_begun(start(&args), &watched).await;
        assert!(stderr.contains("interrupted"), "{stderr}");
        let mark = part_of(&dst);
        assert!(mark.exists(), "{what}: no mark beside the new destination");
        let rerun = ["sftp", what, "-r", "-a", from, to];
        let (ok, stderr) = run(&rerun).await;
        assert!(ok, "{what}: {stderr}");
        let all: usize = files.iter().map(|(_, d)| d.len()).sum();
        assert!(
            moved(&stderr) < all as u64,
            "{what} moved every byte again: {stderr}"
        );
        for (path, data) in &files {
            let copy = dst.join(path.strip_prefix(&src).unwrap());
            assert!(&std::fs::read(&copy).unwrap() == data, "{}", copy.display());
        }
        assert!(
            !dst.join("src").exists(),
            "{what} landed in DST/src on the rerun"
        );
        assert!(!mark.exists(), "{what}: the mark outlived the copy");
        let mut names = listing(&dst);
        names.extend(listing(&dst.join("sub")));
        let parts = names.iter().filter(|p| p.ends_with(".volley-part")).count();
        assert_eq!(parts, 0, "{what}: parts left behind");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
