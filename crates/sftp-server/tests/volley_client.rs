//! volley's own client against the server, spawned as sshd would spawn it: files of every
//! size both ways (verified byte for byte), trees, the path requests, and the options
//! that refuse requests.

use std::path::Path;
use std::process::Stdio;

use tokio::process::Command;
use volley_sftp::{FileAttrs, SftpClient, SftpError, StatusCode, TransferOptions};
use volley_testkit::{TempDir, pattern, within};

fn server(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_volley-sftp-server"));
    command
        .args(["-e", "-l", "ERROR"])
        .args(args)
        .stderr(Stdio::inherit());
    command
}

fn same(a: &Path, b: &Path) -> bool {
    std::fs::read(a).unwrap() == std::fs::read(b).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_of_every_size_both_ways_byte_for_byte() {
    within(120, async {
        let sftp = SftpClient::spawn(&mut server(&[])).await.unwrap();
        let limits = sftp.limits().expect("the server states its limits");
        assert_eq!(limits.max_read_len, 1 << 20);
        assert_eq!(limits.max_write_len, 1 << 20);
        assert!(sftp.has_extension(b"posix-rename@openssh.com"));
        let dir = TempDir::new("sftp-server-sizes");
        let chunk = 1usize << 20;
        for (i, size) in [0, 1, chunk - 1, chunk, chunk + 1, 9 * chunk + 17]
            .into_iter()
            .enumerate()
        {
            let (local, back) = (dir.path(&format!("in-{i}")), dir.path(&format!("back-{i}")));
            std::fs::write(&local, pattern(size, i as u64)).unwrap();
            let remote = dir.bytes(&format!("remote-{i}"));
            let opts = TransferOptions::default();
            assert_eq!(sftp.put(&local, &remote, &opts).await.unwrap(), size as u64);
            assert_eq!(sftp.stat(&remote).await.unwrap().size, Some(size as u64));
            assert_eq!(sftp.get(&remote, &back, &opts).await.unwrap(), size as u64);
            assert!(same(&local, &back), "size {size}: read back differs");
            assert!(
                same(&local, &dir.path(&format!("remote-{i}"))),
                "size {size}: the server's copy differs"
            );
        }
        sftp.shutdown().await.unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trees_both_ways_with_awkward_names() {
    within(120, async {
        let sftp = SftpClient::spawn(&mut server(&[])).await.unwrap();
        let dir = TempDir::new("sftp-server-trees");
        let src = dir.path("src");
        let names = [
            "plain",
            "with space",
            "new\nline",
            "tab\there",
            "ünïcödé",
            "-dash",
            "star*",
        ];
        for (i, name) in names.iter().enumerate() {
            let sub = src.join(format!("d{i}"));
            std::fs::create_dir_all(&sub).unwrap();
            std::fs::write(sub.join(name), pattern(1000 * i + 3, i as u64)).unwrap();
        }
        std::fs::write(src.join("empty"), b"").unwrap();
        let remote = dir.bytes("there");
        let report = sftp
            .put_tree(&src, &remote, &TransferOptions::default(), |_| {})
            .await
            .unwrap();
        assert_eq!((report.files, report.failed), (names.len() as u64 + 1, 0));
        let back = dir.path("back");
        let report = sftp
            .get_tree(&remote, &back, &TransferOptions::default(), |_| {})
            .await
            .unwrap();
        assert_eq!((report.files, report.failed), (names.len() as u64 + 1, 0));
        for (i, name) in names.iter().enumerate() {
            let rel = Path::new(&format!("d{i}")).join(name);
            assert!(same(&src.join(&rel), &back.join(&rel)), "{name:?} differs");
        }
        assert_eq!(std::fs::read(back.join("empty")).unwrap(), b"");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn path_requests_do_what_openssh_s_do() {
    within(60, async {
        let sftp = SftpClient::spawn(&mut server(&[])).await.unwrap();
        let dir = TempDir::new("sftp-server-paths");
        let (a, b) = (dir.bytes("a"), dir.bytes("b"));
        std::fs::write(dir.path("a"), b"alpha").unwrap();
        std::fs::write(dir.path("b"), b"beta").unwrap();
        // RENAME does not overwrite; posix-rename does.
        assert!(sftp.rename(&a, &b).await.is_err());
        sftp.posix_rename(&a, &b).await.unwrap();
        assert_eq!(std::fs::read(dir.path("b")).unwrap(), b"alpha");
        assert!(!dir.path("a").exists());
        // Directories, links, modes and times.
        let sub = dir.bytes("sub");
        sftp.mkdir(&sub, FileAttrs::with_permissions(0o750))
            .await
            .unwrap();
        assert!(sftp.stat(&sub).await.unwrap().is_dir());
        let link = dir.bytes("link");
        sftp.symlink(b"b", &link).await.unwrap();
        assert_eq!(sftp.readlink(&link).await.unwrap(), b"b");
        assert!(sftp.lstat(&link).await.unwrap().is_symlink());
        let attrs = FileAttrs {
            permissions: Some(0o600),
            atime_mtime: Some((1_000_000_000, 1_200_000_000)),
            ..FileAttrs::default()
        };
        sftp.setstat(&b, attrs).await.unwrap();
        let got = sftp.stat(&b).await.unwrap();
        assert_eq!(got.permissions.map(|p| p & 0o7777), Some(0o600));
        assert_eq!(got.atime_mtime, Some((1_000_000_000, 1_200_000_000)));
        let names: Vec<Vec<u8>> = sftp
            .read_dir(&dir.bytes(""))
            .await
            .unwrap()
            .into_iter()
            .map(|e| e.name)
            .collect();
        for name in [&b"b"[..], b"sub", b"link"] {
            assert!(
                names.iter().any(|n| n == name),
                "{name:?} not listed in {names:?}"
            );
        }
        assert_eq!(
            sftp.realpath(&dir.bytes("sub/../b")).await.unwrap(),
            dir.bytes("b")
        );
        sftp.remove(&link).await.unwrap();
        sftp.rmdir(&sub).await.unwrap();
        let missing = sftp.stat(&dir.bytes("nothing")).await.unwrap_err();
        assert!(
            matches!(
                missing,
                SftpError::Status {
                    code: StatusCode::NO_SUCH_FILE,
                    ..
                }
            ),
            "{missing:?}"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_and_denied_requests_are_refused() {
    within(60, async {
        let dir = TempDir::new("sftp-server-refused");
        std::fs::write(dir.path("kept"), b"kept").unwrap();
        let local = dir.path("local");
        std::fs::write(&local, b"new").unwrap();
        let read_only = SftpClient::spawn(&mut server(&["-R"])).await.unwrap();
        let refused = read_only
            .put(&local, &dir.bytes("new"), &TransferOptions::default())
            .await
            .unwrap_err();
        assert!(format!("{refused}").contains("read-only"), "{refused}");
        assert!(!dir.path("new").exists());
        let back = dir.path("back");
        read_only
            .get(&dir.bytes("kept"), &back, &TransferOptions::default())
            .await
            .unwrap();
        assert_eq!(std::fs::read(&back).unwrap(), b"kept");
        let no_remove = SftpClient::spawn(&mut server(&["-P", "remove,rmdir"]))
            .await
            .unwrap();
        let refused = no_remove.remove(&dir.bytes("kept")).await.unwrap_err();
        assert!(
            matches!(
                refused,
                SftpError::Status {
                    code: StatusCode::PERMISSION_DENIED,
                    ..
                }
            ),
            "{refused:?}"
        );
        assert!(dir.path("kept").exists());
    })
    .await;
}

#[test]
fn bad_options_are_refused_and_requests_listed() {
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_volley-sftp-server"))
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let listed = run(&["-Q", "requests"]);
    assert!(listed.status.success());
    let text = String::from_utf8(listed.stdout).unwrap();
    assert!(text.lines().any(|l| l == "posix-rename"), "{text}");
    for bad in [
        &["-P", "nosuch"][..],
        &["--threads", "0"],
        &["-u", "999"],
        &["--max-io", "12"],
        &["-l", "LOUD"],
    ] {
        let out = run(bad);
        assert!(!out.status.success(), "{bad:?} was taken");
        assert!(!out.stderr.is_empty(), "{bad:?} gave no reason");
    }
}
