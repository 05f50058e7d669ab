//! The client against servers its other tests do not use: servers that state limits of
//! every size (or none), and servers that lie or attack. Each case ends in a correct
//! copy or a clear error, never a hang or a panic.

use std::sync::Arc;

use volley_proto::wire::sftp::{Limits, Request, Response, StatusCode};
use volley_sftp::testing::{Hook, Script, Written, serve};
use volley_sftp::{MAX_CHUNK, SftpClient, SftpError, TransferOptions};

mod common;

use common::pattern;
use volley_testkit::{scratch, within};

/// A client talking to `script` over an in-memory stream.
async fn client(script: Script) -> SftpClient {
    let (ours, theirs) = tokio::io::duplex(1 << 20);
    tokio::spawn(serve(theirs, script));
    let (read, write) = tokio::io::split(ours);
    SftpClient::connect(read, write).await.unwrap()
}

/// A server's limits, the packet limit 1 KiB above the read and write limits.
fn limits(len: u64) -> Limits {
    Limits {
        max_packet_len: len + 1024,
        max_read_len: len,
        max_write_len: len,
        max_open_handles: 64,
    }
}

/// A hook that fails every READ or WRITE over `limits`, so a client that goes past
/// them fails the test with the size it used.
fn enforce(limits: Limits) -> Hook {
    Arc::new(move |request: &Request<'_>| {
        let (len, max) = match *request {
            Request::Read { len, .. } => (u64::from(len), limits.max_read_len),
            Request::Write { data, .. } => (data.len() as u64, limits.max_write_len),
            _ => return None,
        };
        (max > 0 && len > max).then(|| {
            let message = format!("{len} bytes is over the stated {max}");
            let status = Response::Status {
                id: request.id(),
                code: StatusCode::FAILURE,
                message: message.as_bytes(),
                language: b"",
            };
            status.to_vec().unwrap()
        })
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_stated_limit_moves_files_both_ways() {
    within(120, async {
        let dir = scratch("limits");
        let data = pattern(3 * MAX_CHUNK + 7, 40);
        std::fs::write(dir.join("src"), &data).unwrap();
        // None, 32 KiB, OpenSSH's 255 KiB, asyncssh's 4 MiB, and past volley's maximum.
        let stated = [
            None,
            Some(32 << 10),
            Some(255 << 10),
            Some(4 << 20),
            Some(1 << 40),
        ];
        for (i, len) in stated.into_iter().enumerate() {
            let written: Written = Arc::default();
            let limits = len.map(limits);
            let sftp = client(Script {
                limits,
                written: Some(written.clone()),
                hook: limits.map(enforce),
                ..Script::default()
            })
            .await;
            assert_eq!(sftp.limits(), limits);
            let expected = len.map_or(32 << 10, |l: u64| l.min(MAX_CHUNK as u64)) as usize;
            assert_eq!(sftp.read_len(None), expected, "{len:?}");
            assert_eq!(sftp.write_len(None), expected, "{len:?}");
            // What a user asks for is held to the same bounds.
            assert_eq!(sftp.write_len(Some(1 << 30)), expected, "{len:?}");
            let opts = TransferOptions::default();
            let sent = sftp.put(dir.join("src"), b"/f", &opts).await;
            assert_eq!(sent.unwrap(), data.len() as u64, "put with {len:?}");
            let stored = written.lock().unwrap().get(&b"/f"[..]).cloned();
            assert!(
                stored.as_ref() == Some(&data),
                "put's bytes differ ({len:?})"
            );
            let back = dir.join(format!("back{i}"));
            let got = sftp.get(b"/f", &back, &opts).await;
            assert_eq!(got.unwrap(), data.len() as u64, "get with {len:?}");
            assert!(std::fs::read(&back).unwrap() == data, "get's bytes differ");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shell_that_prints_at_login_is_named() {
    within(30, async {
        let (ours, mut theirs) = tokio::io::duplex(1 << 16);
        let banner = tokio::spawn(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            theirs.write_all(b"Welcome to the host!\n").await.unwrap();
            let mut sink = Vec::new();
            let _ = theirs.read_to_end(&mut sink).await;
        });
        let (read, write) = tokio::io::split(ours);
        let err = SftpClient::connect(read, write).await.unwrap_err();
        assert!(matches!(err, SftpError::NotSftp { .. }), "{err:?}");
        let text = err.to_string();
        assert!(text.contains("\"Welc\""), "{text}");
        assert!(
            text.contains("no output for non-interactive sessions"),
            "{text}"
        );
        banner.abort();
    })
    .await;
}
