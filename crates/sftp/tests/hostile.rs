//! The client against servers its other tests do not use: servers that state limits of
//! every size (or none), and servers that lie or attack. Each case ends in a correct
//! copy or a clear error, never a hang or a panic.

use std::path::Path;
use std::sync::Arc;

use volley_proto::sftp::{Attrs, Limits, NameEntry, Names, Request, Response, StatusCode};
use volley_sftp::testing::{Hook, Listing, Script, Written, serve};
use volley_sftp::{
    FileAttrs, MAX_CHUNK, SftpClient, SftpError, Skip, TransferOptions, TreeEvent, TreeReport,
};

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

/// A directory's attributes, as a listing states them.
fn dir() -> FileAttrs {
    FileAttrs::with_permissions(0o040_755)
}

/// A regular file's, of `size` bytes.
fn file(size: u64) -> FileAttrs {
    FileAttrs {
        size: Some(size),
        permissions: Some(0o100_644),
        ..FileAttrs::default()
    }
}

/// A client for a server whose directories are under `/t`, listed by `list`, and whose
/// files hold `content`.
async fn tree_server(
    content: &[u8],
    list: impl Fn(&[u8]) -> Vec<(Vec<u8>, FileAttrs)> + Send + Sync + 'static,
    hook: Option<Hook>,
) -> SftpClient {
    let dirs: Listing = Arc::new(move |path: &[u8]| path.starts_with(b"/t").then(|| list(path)));
    client(Script {
        content: content.to_vec(),
        dirs: Some(dirs),
        hook,
        ..Script::default()
    })
    .await
}

/// The tree `/t` copied to `dst`, and each failure it reported, as `PATH: ERROR`.
async fn get_tree_failures(
    sftp: &SftpClient,
    dst: impl AsRef<Path>,
    opts: &TransferOptions,
) -> (TreeReport, Vec<String>) {
    let mut failed = Vec::new();
    let report = sftp
        .get_tree(b"/t", dst, opts, |e| {
            if let TreeEvent::Failed(path, e) = e {
                failed.push(format!("{path}: {e}"));
            }
        })
        .await
        .unwrap();
    (report, failed)
}

/// Every path under `root`, relative, sorted.
fn everything(root: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut walk = vec![root.to_path_buf()];
    while let Some(dir) = walk.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            found.push(path.strip_prefix(root).unwrap().display().to_string());
            if path.is_dir() {
                walk.push(path);
            }
        }
    }
    found.sort();
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_name_is_refused_not_listed_for_ever() {
    within(30, async {
        let sftp = tree_server(
            b"abc",
            |_| vec![(Vec::new(), dir()), (b"f".to_vec(), file(3))],
            None,
        )
        .await;
        let out = scratch("empty-name");
        let (report, failed) =
            get_tree_failures(&sftp, out.join("t"), &TransferOptions::default()).await;
        assert_eq!((report.files, report.failed), (1, 1), "{failed:?}");
        assert!(failed[0].contains("empty name"), "{failed:?}");
        assert_eq!(everything(&out), ["t", "t/f"]);
        std::fs::remove_dir_all(&out).unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tree_without_end_stops_at_the_depth_limit() {
    within(60, async {
        // Every directory holds one more, under a fresh name.
        let sftp = tree_server(b"", |_| vec![(b"d".to_vec(), dir())], None).await;
        let out = scratch("depth");
        for (limit, opts) in [
            (64, TransferOptions::default()),
            (
                3,
                TransferOptions {
                    max_depth: 3,
                    ..TransferOptions::default()
                },
            ),
        ] {
            let root = out.join(format!("t{limit}"));
            let (report, failed) = get_tree_failures(&sftp, &root, &opts).await;
            assert_eq!(report.failed, 1, "{failed:?}");
            let deepest = format!("/t{}", "/d".repeat(limit + 1));
            assert!(failed[0].starts_with(&deepest), "{failed:?}");
            assert!(failed[0].contains(&format!("more than {limit} directories deep")));
            assert_eq!(everything(&root).len(), limit);
        }
        std::fs::remove_dir_all(&out).unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifos_and_devices_are_skipped_never_opened() {
    within(30, async {
        // Opening the FIFO is never answered, as sftp-server blocks in open(2).
        let hook: Hook = Arc::new(|request: &Request<'_>| match *request {
            Request::Open { filename, .. } if filename.ends_with(b"fifo") => Some(Vec::new()),
            _ => None,
        });
        let list = |_: &[u8]| {
            vec![
                (b"fifo".to_vec(), FileAttrs::with_permissions(0o010_644)),
                (b"tty".to_vec(), FileAttrs::with_permissions(0o020_620)),
                (b"sock".to_vec(), FileAttrs::with_permissions(0o140_755)),
                (b"f".to_vec(), file(4)),
            ]
        };
        let sftp = tree_server(b"data", list, Some(hook)).await;
        let out = scratch("special");
        let mut skipped = Vec::new();
        let report = sftp
            .get_tree(b"/t", out.join("t"), &TransferOptions::default(), |e| {
                if let TreeEvent::Skipped(path, why) = e {
                    skipped.push((path.to_owned(), why));
                }
            })
            .await
            .unwrap();
        assert_eq!((report.files, report.skipped, report.failed), (1, 3, 0));
        assert!(
            skipped.iter().all(|(_, why)| *why == Skip::Special),
            "{skipped:?}"
        );
        assert_eq!(everything(&out), ["t", "t/f"]);
        std::fs::remove_dir_all(&out).unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_that_lead_elsewhere_are_refused() {
    within(30, async {
        let list = |_: &[u8]| {
            vec![
                (b".".to_vec(), dir()),
                (b"..".to_vec(), dir()),
                (b"..".to_vec(), file(4)),
                (b"../escape".to_vec(), file(4)),
                (b"nul\0byte".to_vec(), file(4)),
                (b"ok".to_vec(), file(4)),
            ]
        };
        let sftp = tree_server(b"data", list, None).await;
        let out = scratch("names");
        let (report, failed) =
            get_tree_failures(&sftp, out.join("t"), &TransferOptions::default()).await;
        assert_eq!((report.files, report.failed), (1, 3), "{failed:?}");
        assert!(failed.iter().all(|f| f.contains("refused")), "{failed:?}");
        // Nothing landed outside the destination, nor under an odd name inside it.
        assert_eq!(everything(&out), ["t", "t/ok"]);
        std::fs::remove_dir_all(&out).unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_without_end_is_cut_at_its_limit() {
    within(30, async {
        // Every READDIR brings a thousand more names; none ever says end of directory.
        let hook: Hook = Arc::new(|request: &Request<'_>| {
            let Request::Readdir { id, .. } = *request else {
                return None;
            };
            let names: Vec<Vec<u8>> = (0..1000).map(|i| format!("f{i}").into_bytes()).collect();
            let entries: Vec<_> = names
                .iter()
                .map(|n| NameEntry {
                    filename: n,
                    longname: n,
                    attrs: Attrs::EMPTY,
                })
                .collect();
            let mut buf = vec![0; 1 << 16];
            let names = Names::write(&entries, &mut buf).unwrap();
            Some(Response::Name { id, names }.to_vec().unwrap())
        });
        let sftp = tree_server(b"", |_| Vec::new(), Some(hook)).await;
        let opts = TransferOptions {
            max_entries: 5_000,
            ..TransferOptions::default()
        };
        let out = scratch("endless");
        let (report, failed) = get_tree_failures(&sftp, out.join("t"), &opts).await;
        assert_eq!((report.files, report.failed), (0, 1), "{failed:?}");
        assert!(failed[0].contains("more than 5000 entries"), "{failed:?}");
        std::fs::remove_dir_all(&out).unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_fifo_in_a_tree_is_skipped() {
    within(30, async {
        let mut command = tokio::process::Command::new(volley_testkit::sftp_server());
        command.args(["-e", "-l", "ERROR"]);
        let sftp = SftpClient::spawn(&mut command).await.unwrap();
        let dir = scratch("local-fifo");
        let tree = dir.join("tree");
        std::fs::create_dir(&tree).unwrap();
        std::fs::write(tree.join("f"), b"data").unwrap();
        common::mkfifo(&tree.join("fifo"));
        let dst = dir.join("dst");
        let mut skipped = Vec::new();
        let report = sftp
            .put_tree(
                &tree,
                dst.as_os_str().as_encoded_bytes(),
                &TransferOptions::default(),
                |e| {
                    if let TreeEvent::Skipped(path, why) = e {
                        skipped.push((path.to_owned(), why));
                    }
                },
            )
            .await
            .unwrap();
        assert_eq!((report.files, report.skipped), (1, 1), "{skipped:?}");
        assert_eq!(skipped[0].1, Skip::Special);
        assert_eq!(everything(&dst), ["f"]);
        sftp.shutdown().await.unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    })
    .await;
}

/// A hook answering the first request of kind `pick` with `raw` bytes as they are.
fn answer_with(
    pick: fn(&Request<'_>) -> bool,
    raw: impl Fn(u32) -> Vec<u8> + Send + Sync + 'static,
) -> Hook {
    Arc::new(move |request: &Request<'_>| pick(request).then(|| raw(request.id())))
}

/// `ty` and `id` framed with `body`, the length field counting what follows it.
fn frame(ty: u8, id: u32, body: &[u8]) -> Vec<u8> {
    let mut out = ((body.len() + 5) as u32).to_be_bytes().to_vec();
    out.push(ty);
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(body);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_and_lengths_that_lie_are_clear_errors() {
    within(30, async {
        let is_readdir = |r: &Request<'_>| matches!(r, Request::Readdir { .. });
        let is_stat = |r: &Request<'_>| matches!(r, Request::Stat { .. });
        // A NAME of 2^32-1 entries in a packet of a few bytes.
        let names = answer_with(is_readdir, |id| {
            frame(104, id, &[0xff, 0xff, 0xff, 0xff, 0, 0])
        });
        let sftp = tree_server(b"", |_| Vec::new(), Some(names)).await;
        let err = sftp.read_dir(b"/t").await.unwrap_err();
        assert!(
            matches!(err, SftpError::Wire { op: "readdir", .. }),
            "{err}"
        );
        // ATTRS whose extended pairs number 2^32-1.
        let attrs = answer_with(is_stat, |id| {
            frame(
                105,
                id,
                &[0x80, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 1, b'x'],
            )
        });
        let sftp = tree_server(b"", |_| Vec::new(), Some(attrs)).await;
        let err = sftp.stat(b"/x").await.unwrap_err();
        assert!(matches!(err, SftpError::Wire { op: "stat", .. }), "{err}");
        // A STATUS whose length field claims 1 GiB: refused before anything is held.
        let huge = answer_with(is_stat, |id| {
            let mut out = (1u32 << 30).to_be_bytes().to_vec();
            out.push(101);
            out.extend_from_slice(&id.to_be_bytes());
            out
        });
        let sftp = tree_server(b"", |_| Vec::new(), Some(huge)).await;
        let err = sftp.stat(b"/x").await.unwrap_err();
        let text = err.to_string();
        assert!(text.contains("frame too large"), "{text}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_answered_with_more_than_asked_fails_the_copy() {
    within(30, async {
        let data = pattern(100_000, 7);
        let more = answer_with(
            |r| matches!(r, Request::Read { offset: 0, .. }),
            |id| {
                let mut body = 20_000u32.to_be_bytes().to_vec();
                body.extend(core::iter::repeat_n(b'x', 20_000));
                frame(103, id, &body)
            },
        );
        let sftp = client(Script {
            content: data,
            hook: Some(more),
            ..Script::default()
        })
        .await;
        let out = scratch("more");
        let opts = TransferOptions {
            chunk: Some(10_000),
            ..TransferOptions::default()
        };
        let err = sftp.get(b"/f", out.join("f"), &opts).await.unwrap_err();
        assert!(matches!(err, SftpError::SizeMismatch { .. }), "{err}");
        assert!(!out.join("f").exists(), "a wrong copy was put in place");
        std::fs::remove_dir_all(&out).unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_to_nothing_and_twice_are_dropped_the_copy_stays_right() {
    within(30, async {
        let data = pattern(300_000, 9);
        let expected = data.clone();
        // Every READ is answered twice, after a STATUS for an id never sent.
        let hook: Hook = Arc::new(move |request: &Request<'_>| {
            let Request::Read {
                id, offset, len, ..
            } = *request
            else {
                return None;
            };
            let from = (offset as usize).min(data.len());
            let to = (from + len as usize).min(data.len());
            let answer = match to > from {
                true => Response::Data {
                    id,
                    data: &data[from..to],
                },
                false => Response::Status {
                    id,
                    code: StatusCode::EOF,
                    message: b"",
                    language: b"",
                },
            };
            let stray = Response::Status {
                id: id.wrapping_add(1_000_000),
                code: StatusCode::OK,
                message: b"",
                language: b"",
            };
            let once = answer.to_vec().unwrap();
            Some([stray.to_vec().unwrap(), once.clone(), once].concat())
        });
        let sftp = client(Script {
            content: expected.clone(),
            hook: Some(hook),
            ..Script::default()
        })
        .await;
        let out = scratch("twice");
        let opts = TransferOptions {
            chunk: Some(8_192),
            requests: 4,
            ..TransferOptions::default()
        };
        let got = sftp.get(b"/f", out.join("f"), &opts).await.unwrap();
        assert_eq!(got, expected.len() as u64);
        assert!(std::fs::read(out.join("f")).unwrap() == expected);
        std::fs::remove_dir_all(&out).unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_stops_answering_times_out_naming_the_request() {
    within(30, async {
        let silent = answer_with(|r| matches!(r, Request::Read { .. }), |_| Vec::new());
        let mut sftp = client(Script {
            content: pattern(10_000, 3),
            hook: Some(silent),
            ..Script::default()
        })
        .await;
        sftp.set_timeout(core::time::Duration::from_millis(300));
        let out = scratch("silent");
        let started = std::time::Instant::now();
        let err = sftp
            .get(
                b"/data/slow.bin",
                out.join("f"),
                &TransferOptions::default(),
            )
            .await
            .unwrap_err();
        assert!(started.elapsed() < core::time::Duration::from_secs(10));
        assert!(
            matches!(err, SftpError::TimedOut { op: "read", .. }),
            "{err}"
        );
        let text = err.to_string();
        assert!(
            text.contains("/data/slow.bin") && text.contains("0.3 s"),
            "{text}"
        );
        std::fs::remove_dir_all(&out).unwrap();
    })
    .await;
}

/// Found by the sftp_client fuzz target: sizes that add up past 2^64 overflowed the
/// tree's running total (a panic in a debug build).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sizes_that_add_up_past_u64_do_not_overflow() {
    within(30, async {
        let list = |_: &[u8]| {
            vec![
                (b"a".to_vec(), file(u64::MAX)),
                (b"b".to_vec(), file(u64::MAX)),
            ]
        };
        let sftp = tree_server(b"tiny", list, None).await;
        let out = scratch("huge-sizes");
        let mut found = 0u64;
        let report = sftp
            .get_tree(b"/t", out.join("t"), &TransferOptions::default(), |e| {
                if let TreeEvent::Found(n) = e {
                    found = found.saturating_add(n);
                }
            })
            .await
            .unwrap();
        assert_eq!(found, u64::MAX);
        // Each file ends long before the size stated: refused, as a file that shrank.
        assert_eq!((report.files, report.failed), (0, 2));
        std::fs::remove_dir_all(&out).unwrap();
    })
    .await;
}
