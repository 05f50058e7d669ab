//! Which mode bits a copy takes, against OpenSSH's sftp-server, as OpenSSH's `sftp` and
//! `scp` take them: the source's permission bits under the umask for a new copy, an
//! existing file's own bits kept, `-p` masked to `0o777` on a get and `0o1777` on a put,
//! and never a setuid or setgid bit from either side.

use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::Path;
use std::process::Stdio;

use tokio::process::Command;
use volley_sftp::{SftpClient, TransferOptions};

mod common;

use volley_testkit::{scratch, within};

async fn sftp() -> SftpClient {
    let mut command = Command::new(volley_testkit::sftp_server());
    command.args(["-e", "-l", "ERROR"]).stderr(Stdio::null());
    SftpClient::spawn(&mut command).await.unwrap()
}

/// This process's umask, which the spawned server inherits.
fn umask() -> u32 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("Umask:")).unwrap();
    u32::from_str_radix(line["Umask:".len()..].trim(), 8).unwrap()
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

fn make(path: &Path, mode: u32) {
    std::fs::write(path, b"#!/bin/sh\necho hi\n").unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn bytes(path: &Path) -> Vec<u8> {
    path.as_os_str().as_encoded_bytes().to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_copy_takes_its_sources_bits_under_the_umask_both_ways() {
    within(60, async {
        let sftp = sftp().await;
        let dir = scratch("modes-new");
        let opts = TransferOptions::default();
        for bits in [0o600, 0o755, 0o640, 0o700] {
            let src = dir.join(format!("src{bits:o}"));
            make(&src, bits);
            let put = dir.join(format!("put{bits:o}"));
            sftp.put(&src, bytes(&put), &opts).await.unwrap();
            assert_eq!(mode(&put), bits & !umask(), "put of {bits:o}");
            let got = dir.join(format!("got{bits:o}"));
            sftp.get(bytes(&src), &got, &opts).await.unwrap();
            assert_eq!(mode(&got), bits & !umask(), "get of {bits:o}");
        }
        sftp.shutdown().await.unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_over_an_existing_file_keeps_its_bits() {
    within(60, async {
        let sftp = sftp().await;
        let dir = scratch("modes-existing");
        let opts = TransferOptions::default();
        let (src, over) = (dir.join("src"), dir.join("over"));
        make(&src, 0o644);
        make(&over, 0o750);
        sftp.put(&src, bytes(&over), &opts).await.unwrap();
        assert_eq!(mode(&over), 0o750, "put over a 750 file");
        let local = dir.join("local");
        make(&local, 0o700);
        sftp.get(bytes(&src), &local, &opts).await.unwrap();
        assert_eq!(mode(&local), 0o700, "get over a 700 file");
        sftp.shutdown().await.unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preserve_never_raises_a_setuid_setgid_or_server_sticky_bit() {
    within(60, async {
        let sftp = sftp().await;
        let dir = scratch("modes-preserve");
        let opts = TransferOptions {
            preserve: true,
            ..TransferOptions::default()
        };
        for (bits, on_get, on_put) in [
            (0o4755, 0o755, 0o755),
            (0o2777, 0o777, 0o777),
            (0o7777, 0o777, 0o1777),
            (0o1755, 0o755, 0o1755),
        ] {
            let src = dir.join(format!("src{bits:o}"));
            make(&src, bits);
            let got = dir.join(format!("got{bits:o}"));
            sftp.get(bytes(&src), &got, &opts).await.unwrap();
            assert_eq!(mode(&got), on_get, "get -p of {bits:o}");
            let put = dir.join(format!("put{bits:o}"));
            sftp.put(&src, bytes(&put), &opts).await.unwrap();
            assert_eq!(mode(&put), on_put, "put -p of {bits:o}");
        }
        // A tree's directories too.
        let tree = dir.join("tree");
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&tree)
            .unwrap();
        std::fs::set_permissions(&tree, std::fs::Permissions::from_mode(0o2755)).unwrap();
        make(&tree.join("f"), 0o4711);
        let copy = dir.join("copy");
        let report = sftp
            .get_tree(bytes(&tree), &copy, &opts, |_| {})
            .await
            .unwrap();
        assert_eq!((report.files, report.failed), (1, 0));
        assert_eq!(mode(&copy.join("f")), 0o711);
        assert_eq!(mode(&copy), 0o755);
        sftp.shutdown().await.unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tree_without_preserve_keeps_its_directories_bits_under_the_umask() {
    within(60, async {
        let sftp = sftp().await;
        let dir = scratch("modes-tree");
        let tree = dir.join("tree");
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&tree)
            .unwrap();
        std::fs::DirBuilder::new()
            .mode(0o750)
            .create(tree.join("sub"))
            .unwrap();
        make(&tree.join("sub/x"), 0o600);
        let opts = TransferOptions::default();
        let got = dir.join("got");
        sftp.get_tree(bytes(&tree), &got, &opts, |_| {})
            .await
            .unwrap();
        assert_eq!(mode(&got.join("sub")), 0o750 & !umask());
        assert_eq!(mode(&got.join("sub/x")), 0o600);
        let put = dir.join("put");
        sftp.put_tree(&tree, bytes(&put), &opts, |_| {})
            .await
            .unwrap();
        assert_eq!(mode(&put.join("sub")), 0o750 & !umask());
        assert_eq!(mode(&put.join("sub/x")), 0o600);
        sftp.shutdown().await.unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_place_keeps_the_inode_links_and_mode_both_ways() {
    use std::os::unix::fs::MetadataExt;
    within(60, async {
        let sftp = sftp().await;
        let dir = scratch("modes-inplace");
        let opts = TransferOptions {
            inplace: true,
            ..TransferOptions::default()
        };
        let src = dir.join("src");
        std::fs::write(&src, b"new and short").unwrap();
        for (what, target) in [("put", dir.join("put")), ("get", dir.join("get"))] {
            std::fs::write(&target, b"an old copy that is longer than the new one").unwrap();
            std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o751)).unwrap();
            let link = dir.join(format!("{what}-link"));
            std::fs::hard_link(&target, &link).unwrap();
            let inode = std::fs::metadata(&target).unwrap().ino();
            match what {
                "put" => sftp.put(&src, bytes(&target), &opts).await.unwrap(),
                _ => sftp.get(bytes(&src), &target, &opts).await.unwrap(),
            };
            let meta = std::fs::metadata(&target).unwrap();
            assert_eq!(meta.ino(), inode, "{what} made a new file");
            assert_eq!(std::fs::read(&link).unwrap(), b"new and short", "{what}");
            assert_eq!(mode(&target), 0o751, "{what}");
            assert!(!dir.join(format!("{what}.volley-part")).exists());
        }
        // A new file in place is made with its source's bits, under the umask.
        std::fs::set_permissions(&src, std::fs::Permissions::from_mode(0o700)).unwrap();
        let fresh = dir.join("fresh");
        sftp.get(bytes(&src), &fresh, &opts).await.unwrap();
        assert_eq!(mode(&fresh), 0o700 & !umask());
        sftp.shutdown().await.unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    })
    .await;
}
