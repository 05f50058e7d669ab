//! The client against a scripted server that misbehaves: short reads, a stated size that
//! lies, a hostile STATUS message, a server that dies mid-transfer. Downloads land whole
//! or not at all.

use core::time::Duration;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;
use std::sync::Arc;

use volley_proto::sftp::StatusCode;
use volley_sftp::testing::{Script, serve};
use volley_sftp::{SftpClient, SftpError, TransferOptions};

mod common;

use common::{listing, mkfifo};
use volley_testkit::{scratch, within};

fn content(len: usize) -> Vec<u8> {
    (0..len as u32).map(|i| (i * 7 + i / 251) as u8).collect()
}

/// A client talking to `script` over an in-memory stream, and the server's task.
async fn client(script: Script) -> (SftpClient, tokio::task::JoinHandle<usize>) {
    let (ours, theirs) = tokio::io::duplex(1 << 20);
    let server = tokio::spawn(serve(theirs, script));
    let (read, write) = tokio::io::split(ours);
    (SftpClient::connect(read, write).await.unwrap(), server)
}

fn small(requests: usize, chunk: usize) -> TransferOptions {
    TransferOptions {
        requests,
        chunk: Some(chunk),
        ..TransferOptions::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_reads_are_asked_again_not_taken_for_eof() {
    within(60, async {
        let data = content(300_001);
        let (sftp, server) = client(Script {
            content: data.clone(),
            max_read: Some(5_001),
            ..Script::default()
        })
        .await;
        assert_eq!(sftp.limits(), None);
        let dir = scratch("short");
        let local = dir.join("copy");
        let got = sftp.get(b"/file", &local, &small(8, 10_000)).await.unwrap();
        assert_eq!(got, data.len() as u64);
        assert!(
            std::fs::read(&local).unwrap() == data,
            "bytes differ after short reads"
        );
        drop(sftp);
        // Every 10 000-byte READ came back short, so there were about twice as many.
        let reads = server.await.unwrap();
        assert!(reads >= 2 * 30, "{reads} reads");
        std::fs::remove_dir_all(&dir).unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_message_cannot_drive_the_terminal() {
    within(60, async {
        let (sftp, _server) = client(Script {
            open_error: Some((
                StatusCode::PERMISSION_DENIED,
                b"no\0pe \x1b[31mred\x1b[0m\n".to_vec(),
            )),
            ..Script::default()
        })
        .await;
        let dir = scratch("escape");
        let err = sftp
            .get(b"/f\x1bx", &dir.join("x"), &small(4, 4096))
            .await
            .unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, SftpError::Status { .. }), "{err:?}");
        assert!(!text.chars().any(char::is_control), "{text:?}");
        assert!(
            text.contains(r"no\u{0}pe \u{1b}[31mred\u{1b}[0m\n"),
            "{text}"
        );
        assert!(text.contains(r"/f\u{1b}x"), "{text}");
        assert!(listing(&dir).is_empty(), "{:?}", listing(&dir));
        std::fs::remove_dir_all(&dir).unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_shorter_than_stated_is_refused_unless_allowed() {
    within(60, async {
        let data = content(32_768);
        let script = Script {
            content: data.clone(),
            stated_size: Some(100_000),
            ..Script::default()
        };
        let dir = scratch("shrink");
        let local = dir.join("dst");
        std::fs::write(&local, b"the old copy").unwrap();
        let (sftp, _server) = client(script.clone()).await;
        let err = sftp.get(b"/f", &local, &small(4, 8192)).await.unwrap_err();
        assert!(
            matches!(
                err,
                SftpError::Shrank {
                    stated: 100_000,
                    got: 32_768,
                    ..
                }
            ),
            "{err:?}"
        );
        let text = err.to_string();
        assert!(text.contains("100000") && text.contains("32768"), "{text}");
        assert_eq!(std::fs::read(&local).unwrap(), b"the old copy");
        assert_eq!(listing(&dir), ["dst"]);

        let (sftp, _server) = client(script).await;
        let opts = TransferOptions {
            allow_shrink: true,
            ..small(4, 8192)
        };
        let stated = Arc::new(std::sync::Mutex::new(None));
        let told = stated.clone();
        let opts = opts.with_progress(move |p| *told.lock().unwrap() = p.total);
        let got = sftp.get(b"/f", &local, &opts).await.unwrap();
        assert_eq!((got, *stated.lock().unwrap()), (32_768, Some(100_000)));
        assert!(std::fs::read(&local).unwrap() == data);
        assert_eq!(listing(&dir), ["dst"]);
        std::fs::remove_dir_all(&dir).unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_get_leaves_the_old_file_and_keeps_what_arrived() {
    within(60, async {
        let dir = scratch("dies");
        let local = dir.join("dst");
        let part = dir.join("dst.volley-part");
        std::fs::write(&local, b"the old copy").unwrap();
        let data = content(1 << 20);
        let (sftp, _server) = client(Script {
            content: data.clone(),
            die_after_reads: Some(10),
            ..Script::default()
        })
        .await;
        let err = sftp.get(b"/f", &local, &small(4, 8192)).await.unwrap_err();
        let SftpError::Kept { kept, source, .. } = &err else {
            panic!("the part is kept: {err:?}");
        };
        assert!(matches!(**source, SftpError::Connection { .. }), "{err:?}");
        // At most the ten READs answered (replies still queued when a send fails on
        // the closed stream are not waited for).
        let kept = *kept as usize;
        assert!(kept > 0 && kept <= 10 * 8192 && kept % 8192 == 0, "{kept}");
        assert_eq!(std::fs::read(&local).unwrap(), b"the old copy");
        assert_eq!(listing(&dir), ["dst", "dst.volley-part"]);
        assert!(std::fs::read(&part).unwrap() == data[..kept]);
        // Resumed: only the rest is asked for.
        let (sftp, server) = client(Script {
            content: data.clone(),
            ..Script::default()
        })
        .await;
        let opts = TransferOptions {
            resume: true,
            ..small(4, 8192)
        };
        let got = sftp.get(b"/f", &local, &opts).await.unwrap();
        assert_eq!(got as usize, (1 << 20) - kept);
        sftp.shutdown().await.unwrap();
        let reads = server.await.unwrap();
        assert_eq!(reads, ((1 << 20) - kept) / 8192, "no byte asked twice");
        assert!(std::fs::read(&local).unwrap() == data);
        assert_eq!(listing(&dir), ["dst"]);
        std::fs::remove_dir_all(&dir).unwrap();
    })
    .await;
}

/// A get dropped with a READ unanswered keeps only the bytes before it, though later
/// ones were written: a resume must never take a hole for data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_get_keeps_its_gapless_prefix() {
    within(60, async {
        let dir = scratch("dropped");
        let local = dir.join("dst");
        let data = content(64 * 8192);
        let hole = 20 * 8192;
        let (sftp, _server) = client(Script {
            content: data.clone(),
            withhold_read_at: Some(hole),
            ..Script::default()
        })
        .await;
        // Everything but the withheld READ has arrived when the progress says so.
        let (all_but_one, arrived) = tokio::sync::oneshot::channel();
        let all_but_one = std::sync::Mutex::new(Some(all_but_one));
        let last = data.len() as u64 - 8192;
        let opts = small(8, 8192).with_progress(move |p| {
            if p.done == last {
                if let Some(tx) = all_but_one.lock().unwrap().take() {
                    let _ = tx.send(());
                }
            }
        });
        let get = sftp.get(b"/f", &local, &opts);
        tokio::select! {
            result = get => panic!("the get cannot finish with a READ unanswered: {result:?}"),
            _ = arrived => {}
        }
        let part = std::fs::read(dir.join("dst.volley-part")).unwrap();
        assert_eq!(part.len() as u64, hole, "cut at the gap");
        assert!(part == data[..hole as usize]);
        assert_eq!(listing(&dir), ["dst.volley-part"]);
        std::fs::remove_dir_all(&dir).unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn special_destinations_are_written_in_place_or_refused() {
    within(60, async {
        let data = content(50_000);
        let script = Script {
            content: data.clone(),
            ..Script::default()
        };
        let dir = scratch("special");
        // A device is written in place, never replaced.
        let (sftp, _server) = client(script.clone()).await;
        let got = sftp
            .get(b"/f", Path::new("/dev/null"), &small(4, 8192))
            .await
            .unwrap();
        assert_eq!(got, 50_000);
        assert!(
            std::fs::metadata("/dev/null")
                .unwrap()
                .file_type()
                .is_char_device()
        );
        // A directory and a FIFO are refused, and stay what they were.
        let fifo = dir.join("fifo");
        mkfifo(&fifo);
        for (path, what) in [(&dir, "is a directory"), (&fifo, "is a FIFO")] {
            let (sftp, _server) = client(script.clone()).await;
            let err = sftp.get(b"/f", path, &small(4, 8192)).await.unwrap_err();
            assert!(err.to_string().contains(what), "{err}");
        }
        assert!(dir.is_dir());
        assert!(
            std::fs::symlink_metadata(&fifo)
                .unwrap()
                .file_type()
                .is_fifo()
        );
        // A symbolic link stays a link, to the new copy, which keeps the old mode.
        let target = dir.join("target");
        std::fs::write(&target, b"old").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o600)).unwrap();
        let link = dir.join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let (sftp, _server) = client(script).await;
        sftp.get(b"/f", &link, &small(4, 8192)).await.unwrap();
        assert!(
            std::fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert!(std::fs::read(&target).unwrap() == data);
        assert_eq!(
            std::fs::metadata(&target).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(listing(&dir), ["fifo", "link", "target"]);
        std::fs::remove_dir_all(&dir).unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_of_another_version_is_refused_at_once() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (ours, mut theirs) = tokio::io::duplex(1 << 16);
    let server = tokio::spawn(async move {
        let mut init = [0u8; 9];
        theirs.read_exact(&mut init).await.unwrap();
        // INIT: length 5, type 1, version 3 where an id would be.
        assert_eq!(init, [0, 0, 0, 5, 1, 0, 0, 0, 3]);
        // VERSION 4: its version is no id of any request.
        theirs
            .write_all(&[0, 0, 0, 5, 2, 0, 0, 0, 4])
            .await
            .unwrap();
        theirs
    });
    let (read, write) = tokio::io::split(ours);
    // Well inside the client's 30 s reply timeout, which is what it used to wait.
    let refused = tokio::time::timeout(Duration::from_secs(5), SftpClient::connect(read, write))
        .await
        .expect("VERSION 4 refused at once, not left to time out");
    let e = refused.expect_err("a version 4 server refused");
    assert!(matches!(e, SftpError::Version(4)), "{e:?}");
    assert_eq!(
        e.to_string(),
        "the server speaks SFTP version 4; volley speaks 3"
    );
    drop(server.await.unwrap());
}
