//! The client against OpenSSH's own sftp-server: every transfer checked byte for byte,
//! file and directory operations, errors, and a server that dies mid-transfer.
//! `cargo xtask test` installs the server (Debian's openssh-sftp-server) when missing.

use core::sync::atomic::{AtomicU64, Ordering};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;

use tokio::process::Command;
use volley_sftp::{FileAttrs, OpenFlags, SftpClient, SftpError, StatusCode, TransferOptions};

mod common;

use common::{mkfifo, pattern};
use volley_testkit::{TempDir, within};

fn server_path() -> PathBuf {
    volley_testkit::sftp_server()
}

fn server() -> Command {
    let mut command = Command::new(server_path());
    command.args(["-e", "-l", "ERROR"]).stderr(Stdio::null());
    command
}

fn same_file(a: &Path, b: &Path) -> bool {
    std::fs::read(a).unwrap() == std::fs::read(b).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_and_get_sizes_around_the_chunk_byte_for_byte() {
    within(120, async {
        let sftp = SftpClient::spawn(&mut server()).await.unwrap();
        let limits = sftp.limits().expect("OpenSSH states its limits");
        assert_eq!(limits.max_read_len, 261_120);
        assert_eq!(limits.max_write_len, 261_120);
        let chunk = limits.max_write_len as usize;
        let dir = TempDir::new("sftp-sizes");
        let sizes = [0, 1, chunk - 1, chunk, chunk + 1, 3 * chunk + 17, 5 << 20];
        // Every size both ways a put can take its data: read into memory, and sent by
        // the kernel from the file.
        let cases = sizes
            .iter()
            .flat_map(|&size| [(size, false), (size, true)])
            .enumerate();
        for (i, (size, send_from_file)) in cases {
            let local = dir.path(&format!("in-{i}"));
            let back = dir.path(&format!("back-{i}"));
            std::fs::write(&local, pattern(size, i as u64)).unwrap();
            let remote = dir.bytes(&format!("remote-{i}"));
            let last = Arc::new(AtomicU64::new(0));
            let told = last.clone();
            let opts = TransferOptions {
                send_from_file,
                ..TransferOptions::default()
            }
            .with_progress(move |p| told.store(p.done, Ordering::Relaxed));
            let put = sftp.put(&local, &remote, &opts).await.unwrap();
            assert_eq!(put, size as u64);
            assert_eq!(last.load(Ordering::Relaxed), size as u64);
            assert_eq!(sftp.stat(&remote).await.unwrap().size, Some(size as u64));
            let got = sftp
                .get(&remote, &back, &TransferOptions::default())
                .await
                .unwrap();
            assert_eq!(got, size as u64, "size {size}");
            assert!(
                same_file(&local, &back),
                "size {size}, send_from_file {send_from_file}: read back differs"
            );
            assert!(
                same_file(&local, &dir.path(&format!("remote-{i}"))),
                "size {size}, send_from_file {send_from_file}: server's copy differs"
            );
        }
        // Small chunks and odd request counts exercise the pipeline differently.
        let opts = TransferOptions {
            requests: 7,
            chunk: Some(1000),
            ..TransferOptions::default()
        };
        let local = dir.path("odd");
        std::fs::write(&local, pattern(123_457, 99)).unwrap();
        sftp.put(&local, &dir.bytes("odd-remote"), &opts)
            .await
            .unwrap();
        sftp.get(&dir.bytes("odd-remote"), &dir.path("odd-back"), &opts)
            .await
            .unwrap();
        assert!(same_file(&local, &dir.path("odd-back")));
        sftp.shutdown().await.unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_and_directory_operations() {
    within(60, async {
        let sftp = SftpClient::spawn(&mut server()).await.unwrap();
        assert!(sftp.has_extension(b"posix-rename@openssh.com"));
        let dir = TempDir::new("sftp-ops");
        let sub = dir.bytes("sub");
        sftp.mkdir(&sub, FileAttrs::with_permissions(0o755))
            .await
            .unwrap();
        assert!(sftp.stat(&sub).await.unwrap().is_dir());
        // More than OpenSSH's 100 names per READDIR reply.
        for i in 0..150 {
            std::fs::write(dir.path(&format!("sub/f{i:03}")), b"x").unwrap();
        }
        let entries = sftp.read_dir(&sub).await.unwrap();
        let names: Vec<_> = entries
            .iter()
            .filter(|e| e.name.starts_with(b"f"))
            .collect();
        assert_eq!(names.len(), 150);
        assert!(entries.iter().all(|e| !e.longname.is_empty()));

        // Write and read through handles; a read past the end is EOF, a short read is not.
        let file = dir.bytes("sub/data");
        let handle = sftp
            .open(
                &file,
                OpenFlags::WRITE | OpenFlags::CREAT | OpenFlags::TRUNC,
                FileAttrs::with_permissions(0o600),
            )
            .await
            .unwrap();
        sftp.write(&handle, 0, bytes::Bytes::from_static(b"hello world"))
            .await
            .unwrap();
        assert_eq!(sftp.fstat(&handle).await.unwrap().size, Some(11));
        sftp.close(&handle).await.unwrap();
        let handle = sftp
            .open(&file, OpenFlags::READ, FileAttrs::default())
            .await
            .unwrap();
        assert_eq!(
            sftp.read(&handle, 6, 100).await.unwrap().as_deref(),
            Some(&b"world"[..])
        );
        assert_eq!(sftp.read(&handle, 11, 100).await.unwrap(), None);
        sftp.close(&handle).await.unwrap();

        sftp.setstat(&file, FileAttrs::with_permissions(0o640))
            .await
            .unwrap();
        assert_eq!(
            sftp.stat(&file)
                .await
                .unwrap()
                .permissions
                .map(|p| p & 0o777),
            Some(0o640)
        );

        // rename refuses an existing target; posix-rename replaces it.
        let other = dir.bytes("sub/other");
        std::fs::write(dir.path("sub/other"), b"old").unwrap();
        assert!(matches!(
            sftp.rename(&file, &other).await,
            Err(SftpError::Status { .. })
        ));
        sftp.posix_rename(&file, &other).await.unwrap();
        assert_eq!(
            std::fs::read(dir.path("sub/other")).unwrap(),
            b"hello world"
        );

        let link = dir.bytes("sub/link");
        sftp.symlink(&other, &link).await.unwrap();
        assert_eq!(sftp.readlink(&link).await.unwrap(), other);
        assert!(sftp.lstat(&link).await.unwrap().is_symlink());
        assert_eq!(sftp.stat(&link).await.unwrap().size, Some(11));
        let real = sftp.realpath(&dir.bytes("sub/../sub/other")).await.unwrap();
        assert_eq!(
            real,
            std::fs::canonicalize(dir.path("sub/other"))
                .unwrap()
                .into_os_string()
                .into_encoded_bytes()
        );

        sftp.remove(&link).await.unwrap();
        sftp.remove(&other).await.unwrap();
        for i in 0..150 {
            sftp.remove(&dir.bytes(&format!("sub/f{i:03}")))
                .await
                .unwrap();
        }
        sftp.rmdir(&sub).await.unwrap();
        assert!(!dir.path("sub").exists());
        sftp.shutdown().await.unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_carry_the_status_and_path() {
    within(30, async {
        let sftp = SftpClient::spawn(&mut server()).await.unwrap();
        let missing = b"/nonexistent/volley/file";
        let err = sftp.stat(missing).await.unwrap_err();
        assert!(
            matches!(
                err,
                SftpError::Status {
                    code: StatusCode::NO_SUCH_FILE,
                    ..
                }
            ),
            "{err}"
        );
        assert!(
            err.to_string().contains("/nonexistent/volley/file"),
            "{err}"
        );
        let err = sftp
            .get(missing, Path::new("/dev/null"), &TransferOptions::default())
            .await
            .unwrap_err();
        assert!(matches!(err, SftpError::Status { op: "open", .. }), "{err}");
        let err = sftp
            .put(
                Path::new("/nonexistent/local"),
                b"/tmp/x",
                &TransferOptions::default(),
            )
            .await
            .unwrap_err();
        assert!(matches!(err, SftpError::Io { .. }), "{err}");
        sftp.shutdown().await.unwrap();
    })
    .await;
}

#[tokio::test]
async fn a_spawned_server_that_exits_says_how_at_once() {
    within(30, async {
        // The commands live on after the spawn, as they do in callers: the client must
        // still see the stream end, not wait out its 30 s timeout.
        let mut command = Command::new("sh");
        command.args(["-c", "exit 3"]);
        let err = SftpClient::spawn(&mut command).await.unwrap_err();
        match &err {
            SftpError::ServerExited { op, status } => {
                assert_eq!(*op, "init");
                assert_eq!(status.code(), Some(3));
            }
            other => panic!("expected the server's exit, got: {other}"),
        }
        assert!(err.to_string().contains("exit status: 3"), "{err}");

        // A server that may write files of at most 1 MiB: 16 WRITEs of 64 KiB fill it
        // exactly, and the kernel kills it (SIGXFSZ) at the 17th, mid-put.
        let dir = TempDir::new("sftp-exits");
        std::fs::write(dir.path("big"), pattern(8 << 20, 6)).unwrap();
        let mut command = Command::new("prlimit");
        command
            .arg("--fsize=1048576")
            .arg(server_path())
            .args(["-e", "-l", "ERROR"])
            .stderr(Stdio::null());
        let sftp = SftpClient::spawn(&mut command).await.unwrap();
        let opts = TransferOptions {
            chunk: Some(64 << 10),
            ..TransferOptions::default()
        };
        let err = sftp
            .put(&dir.path("big"), &dir.bytes("copy"), &opts)
            .await
            .unwrap_err();
        match &err {
            SftpError::ServerExited {
                op: "write",
                status,
            } => {
                assert_eq!(status.signal(), Some(25), "{err}"); // SIGXFSZ
            }
            other => panic!("expected the server's exit under a write, got: {other}"),
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_file_that_shrinks_mid_put_is_a_clear_error() {
    within(60, async {
        let dir = TempDir::new("sftp-shrinks");
        for send_from_file in [false, true] {
            std::fs::write(dir.path("big"), pattern(32 << 20, 7)).unwrap();
            let sftp = SftpClient::spawn(&mut server()).await.unwrap();
            // At the first reply, at most a few MiB of the 32 have been read.
            let cut = Arc::new(core::sync::atomic::AtomicBool::new(false));
            let (done, big) = (cut.clone(), dir.path("big"));
            let opts = TransferOptions {
                send_from_file,
                ..TransferOptions::default()
            }
            .with_progress(move |p| {
                if p.done > 0 && !done.swap(true, Ordering::Relaxed) {
                    std::fs::File::options()
                        .write(true)
                        .open(&big)
                        .and_then(|f| f.set_len(0))
                        .unwrap();
                }
            });
            let err = sftp
                .put(dir.path("big"), dir.bytes("copy"), &opts)
                .await
                .unwrap_err();
            assert!(cut.load(Ordering::Relaxed));
            assert!(
                err.to_string().contains("did the file shrink?"),
                "send_from_file {send_from_file}: {err}"
            );
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_dies_mid_transfer_is_an_error_not_a_hang() {
    within(60, async {
        let dir = TempDir::new("sftp-dies");
        std::fs::write(dir.path("big"), pattern(64 << 20, 5)).unwrap();
        // Run the server ourselves so the test can kill it.
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        let out = theirs.try_clone().unwrap();
        let mut child = server()
            .stdin(Stdio::from(std::os::fd::OwnedFd::from(theirs)))
            .stdout(Stdio::from(std::os::fd::OwnedFd::from(out)))
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        ours.set_nonblocking(true).unwrap();
        let (read, write) = tokio::net::UnixStream::from_std(ours).unwrap().into_split();
        let sftp = SftpClient::connect(read, write).await.unwrap();
        // Killed once the first bytes have arrived.
        let (arrived, first_bytes) = tokio::sync::oneshot::channel();
        let arrived = std::sync::Mutex::new(Some(arrived));
        let opts = TransferOptions::default().with_progress(move |p| {
            if p.done > 0 {
                if let Some(tx) = arrived.lock().unwrap().take() {
                    let _ = tx.send(());
                }
            }
        });
        let get = sftp.get(dir.bytes("big"), dir.path("copy"), &opts);
        tokio::pin!(get);
        tokio::select! {
            done = &mut get => panic!("the get ended before the server was killed: {done:?}"),
            _ = first_bytes => child.start_kill().unwrap(),
        }
        let err = get.await.unwrap_err();
        // Bytes had arrived: they are kept in the part, and the error says why it ended.
        let SftpError::Kept { part, kept, source } = &err else {
            panic!("the error names the kept part: {err}");
        };
        assert!(matches!(**source, SftpError::Connection { .. }), "{err}");
        assert!(err.to_string().contains("closed"), "{err}");
        assert_eq!(std::fs::metadata(part).unwrap().len(), *kept);
    })
    .await;
}

/// A pipe, a FIFO and a `/proc` file have no size up front (stat says 0): put reads
/// them to their end (it used to send 0 bytes and succeed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sources_without_a_size_are_read_to_their_end() {
    within(60, async {
        let dir = TempDir::new("sftp-sizeless");
        let sftp = SftpClient::spawn(&mut server()).await.unwrap();
        let opts = TransferOptions {
            requests: 8,
            chunk: Some(100_000),
            ..TransferOptions::default()
        };
        let fifo = dir.path("fifo");
        mkfifo(&fifo);
        let data = pattern(3_000_017, 5);
        let feeder = {
            let (fifo, data) = (fifo.clone(), data.clone());
            // Written in uneven pieces, as a producer would.
            std::thread::spawn(move || {
                use std::io::Write;
                let mut out = std::fs::OpenOptions::new().write(true).open(fifo)?;
                for piece in data.chunks(77_777) {
                    out.write_all(piece)?;
                }
                Ok::<_, std::io::Error>(())
            })
        };
        let last = Arc::new(std::sync::Mutex::new(None));
        let told = last.clone();
        let with_progress = opts
            .clone()
            .with_progress(move |p| *told.lock().unwrap() = Some(p));
        let sent = sftp
            .put(&fifo, dir.bytes("from-fifo"), &with_progress)
            .await
            .unwrap();
        feeder.join().unwrap().unwrap();
        assert_eq!(sent, data.len() as u64);
        let last = *last.lock().unwrap();
        assert_eq!(last.map(|p| (p.done, p.total)), Some((sent, None)));
        assert!(
            std::fs::read(dir.path("from-fifo")).unwrap() == data,
            "FIFO put differs"
        );

        let proc_file = Path::new("/proc/self/mountinfo");
        assert_eq!(std::fs::metadata(proc_file).unwrap().len(), 0);
        let sent = sftp
            .put(proc_file, &dir.bytes("from-proc"), &opts)
            .await
            .unwrap();
        let copy = std::fs::read(dir.path("from-proc")).unwrap();
        assert!(sent > 0 && sent == copy.len() as u64, "{sent} bytes");

        // An empty regular file is still an empty copy.
        std::fs::write(dir.path("empty"), b"").unwrap();
        let sent = sftp
            .put(&dir.path("empty"), &dir.bytes("from-empty"), &opts)
            .await
            .unwrap();
        assert_eq!(sent, 0);
        assert_eq!(std::fs::read(dir.path("from-empty")).unwrap(), b"");

        // A directory is named as one, not an I/O error on the connection.
        let err = sftp
            .put(dir.root(), &dir.bytes("from-dir"), &opts)
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("{} is a directory", dir.root().display())
        );
        sftp.shutdown().await.unwrap();
    })
    .await;
}

/// A put to an existing directory lands inside it under the source's name, as `sftp`'s
/// put does, fresh and resumed; a tree's file whose target is a directory is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_to_a_directory_lands_inside_it() {
    within(60, async {
        let dir = TempDir::new("sftp-put-into");
        let sftp = SftpClient::spawn(&mut server()).await.unwrap();
        let data = pattern(300_000, 3);
        std::fs::write(dir.path("src.bin"), &data).unwrap();
        std::fs::create_dir(dir.path("into")).unwrap();
        for resume in [false, true] {
            let opts = TransferOptions {
                resume,
                ..TransferOptions::default()
            };
            let _ = std::fs::remove_file(dir.path("into/src.bin"));
            let sent = sftp
                .put(&dir.path("src.bin"), &dir.bytes("into"), &opts)
                .await
                .unwrap();
            assert_eq!(sent, data.len() as u64, "resume: {resume}");
            assert_eq!(std::fs::read(dir.path("into/src.bin")).unwrap(), data);
            assert!(dir.path("into").is_dir());
        }
        // Only one level: a directory where the copy would land inside is refused.
        std::fs::remove_file(dir.path("into/src.bin")).unwrap();
        std::fs::create_dir(dir.path("into/src.bin")).unwrap();
        let err = sftp
            .put(
                &dir.path("src.bin"),
                &dir.bytes("into"),
                &TransferOptions::default(),
            )
            .await
            .unwrap_err();
        assert!(
            err.to_string().contains("is a directory on the server"),
            "{err}"
        );
        assert!(
            std::fs::read_dir(dir.path("into/src.bin"))
                .unwrap()
                .next()
                .is_none()
        );

        // In a tree, a directory where a file belongs fails that file.
        std::fs::create_dir_all(dir.path("tree/a")).unwrap();
        std::fs::write(dir.path("tree/a/f"), b"tree file").unwrap();
        std::fs::create_dir_all(dir.path("dst/a/f")).unwrap();
        let report = sftp
            .put_tree(
                dir.path("tree"),
                dir.bytes("dst"),
                &TransferOptions::default(),
                |_| {},
            )
            .await
            .unwrap();
        assert_eq!((report.files, report.failed), (0, 1), "{report:?}");
        assert!(dir.path("dst/a/f").is_dir());
        assert!(
            std::fs::read_dir(dir.path("dst/a/f"))
                .unwrap()
                .next()
                .is_none()
        );
        sftp.shutdown().await.unwrap();
    })
    .await;
}

/// A path of more than 1100 bytes (OPEN's head used to be encoded into a fixed 1024-byte
/// buffer: "output buffer too small").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_path_over_a_kilobyte_puts_and_gets() {
    within(60, async {
        let dir = TempDir::new("sftp-long-path");
        // Components of 200 bytes (NAME_MAX is 255), six deep.
        let mut deep = dir.root().to_path_buf();
        for i in 0..6 {
            deep.push(format!("{i}{}", "d".repeat(199)));
        }
        std::fs::create_dir_all(&deep).unwrap();
        let remote = deep.join("remote.bin");
        let remote = remote.as_os_str().as_encoded_bytes();
        assert!(remote.len() > 1100, "{} bytes", remote.len());
        let data = pattern(300_001, 11);
        std::fs::write(dir.path("local"), &data).unwrap();
        let sftp = SftpClient::spawn(&mut server()).await.unwrap();
        let opts = TransferOptions::default();
        sftp.put(&dir.path("local"), remote, &opts).await.unwrap();
        let got = sftp.get(remote, &dir.path("back"), &opts).await.unwrap();
        assert_eq!(got, data.len() as u64);
        assert!(same_file(&dir.path("local"), &dir.path("back")));
        assert_eq!(
            sftp.stat(remote).await.unwrap().size,
            Some(data.len() as u64)
        );
        sftp.shutdown().await.unwrap();
    })
    .await;
}

/// A `RemoteFile` through tokio's traits: a file larger than a READ copied out through
/// a small buffer, seeks from each end, a write after a read lands where the reader is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_file_reads_writes_and_seeks_as_tokio_expects() {
    use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};
    within(60, async {
        let dir = TempDir::new("sftp-remote-file");
        let data = pattern(1 << 20, 9);
        std::fs::write(dir.path("f"), &data).unwrap();
        let sftp = SftpClient::spawn(&mut server()).await.unwrap();
        let mut file = sftp
            .open_file(dir.bytes("f"), OpenFlags::READ | OpenFlags::WRITE)
            .await
            .unwrap();
        let mut copy = Vec::new();
        let mut small = [0u8; 1000];
        loop {
            let n = file.read(&mut small).await.unwrap();
            if n == 0 {
                break;
            }
            copy.extend_from_slice(&small[..n]);
        }
        assert!(copy == data, "read through AsyncRead differs");
        assert_eq!(
            file.seek(std::io::SeekFrom::End(-10)).await.unwrap(),
            (1 << 20) - 10
        );
        let mut tail = Vec::new();
        file.read_to_end(&mut tail).await.unwrap();
        assert_eq!(tail, data[data.len() - 10..]);
        file.seek(std::io::SeekFrom::Start(100)).await.unwrap();
        let mut five = [0u8; 5];
        file.read_exact(&mut five).await.unwrap();
        assert_eq!(five, data[100..105]);
        // The read fetched ahead; the write still lands at 105.
        file.write_all(b"HERE").await.unwrap();
        assert_eq!(file.stream_position().await.unwrap(), 109);
        assert_eq!(
            file.read_at(103, 6).await.unwrap().unwrap(),
            [data[103], data[104], b'H', b'E', b'R', b'E'].as_slice()
        );
        file.close().await.unwrap();
        // Dropped open, its CLOSE is queued: the session goes on.
        drop(
            sftp.open_file(dir.bytes("f"), OpenFlags::READ)
                .await
                .unwrap(),
        );
        assert_eq!(
            sftp.stat(&dir.bytes("f")).await.unwrap().size,
            Some(1 << 20)
        );
        sftp.shutdown().await.unwrap();
    })
    .await;
}
