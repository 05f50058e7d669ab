//! A get on several sessions that stops keeps what every session brought, not only the
//! run of bytes before the first gap, and a resume fetches just what is missing.

use core::time::Duration;

use volley_sftp::testing::{Script, serve};
use volley_sftp::{PIECE, Sessions, SftpClient, SftpError, TransferOptions};

mod common;

use common::pattern;
use volley_testkit::{scratch, within};

async fn client(script: Script) -> SftpClient {
    let (ours, theirs) = tokio::io::duplex(1 << 20);
    tokio::spawn(serve(theirs, script));
    let (read, write) = tokio::io::split(ours);
    let mut sftp = SftpClient::connect(read, write).await.unwrap();
    sftp.set_timeout(Duration::from_secs(3));
    sftp
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_session_costs_only_its_own_range() {
    within(60, async {
        let size = 3 * PIECE as usize + 12_345;
        let data = pattern(size, 5);
        // The first session never answers the READ at offset 0, so the first piece
        // never arrives from its start; the other pieces arrive whole.
        let stalled = Script {
            content: data.clone(),
            withhold_read_at: Some(0),
            ..Script::default()
        };
        let healthy = Script {
            content: data.clone(),
            ..Script::default()
        };
        let mut sessions = Sessions::new(client(stalled).await);
        sessions.push(client(healthy.clone()).await);
        let dir = scratch("sessions-kept");
        let local = dir.join("copy");
        let err = sessions
            .get(b"/f", &local, &TransferOptions::default())
            .await
            .unwrap_err();
        let SftpError::Kept { kept, source, .. } = &err else {
            panic!("{err}");
        };
        assert!(matches!(**source, SftpError::TimedOut { .. }), "{err}");
        assert_eq!(*kept, (size - PIECE as usize) as u64, "{err}");
        // A resume on one healthy session moves only the first piece.
        let sftp = client(healthy).await;
        let opts = TransferOptions {
            resume: true,
            ..TransferOptions::default()
        };
        let moved = sftp.get(b"/f", &local, &opts).await.unwrap();
        assert_eq!(moved, PIECE);
        assert!(
            std::fs::read(&local).unwrap() == data,
            "resumed copy differs"
        );
        assert_eq!(
            volley_testkit::listing(&dir),
            ["copy"],
            "part or record left"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    })
    .await;
}

/// Options that stop the copy (gracefully) once `at` bytes have moved.
fn stopped_at(at: u64) -> TransferOptions {
    let stop = volley_sftp::Stop::new();
    let told = stop.clone();
    TransferOptions {
        chunk: Some(8192),
        stop,
        ..TransferOptions::default()
    }
    .with_progress(move |p| {
        if p.done >= at {
            told.stop();
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_copy_keeps_what_arrived_both_ways_and_resumes() {
    within(60, async {
        let size = 2 * PIECE as usize + 777;
        let data = pattern(size, 8);
        let written: volley_sftp::testing::Written = std::sync::Arc::default();
        written.lock().unwrap().insert(b"/f".to_vec(), data.clone());
        let script = Script {
            content: data.clone(),
            written: Some(written.clone()),
            ..Script::default()
        };
        let dir = scratch("stopped");
        let local = dir.join("copy");
        // Two sessions, stopped once a quarter has arrived.
        let quarter = (size / 4) as u64;
        let opts = stopped_at(quarter);
        let mut sessions = Sessions::new(client(script.clone()).await);
        sessions.push(client(script.clone()).await);
        let err = sessions.get(b"/f", &local, &opts).await.unwrap_err();
        let SftpError::Kept { kept, source, .. } = &err else {
            panic!("{err}");
        };
        assert!(matches!(**source, SftpError::Stopped), "{err}");
        assert!(*kept >= quarter && *kept < size as u64, "{err}");
        let resume = TransferOptions {
            resume: true,
            ..TransferOptions::default()
        };
        let sftp = client(script.clone()).await;
        let moved = sftp.get(b"/f", &local, &resume).await.unwrap();
        assert_eq!(moved, size as u64 - kept);
        assert!(std::fs::read(&local).unwrap() == data);
        // A put stopped the same way: the part on the server holds exactly what was
        // acknowledged, and the resume sends the rest.
        std::fs::write(dir.join("src"), &data).unwrap();
        let opts = stopped_at(quarter);
        let err = sftp.put(dir.join("src"), b"/up", &opts).await.unwrap_err();
        let SftpError::Kept { kept, source, .. } = &err else {
            panic!("{err}");
        };
        assert!(matches!(**source, SftpError::Stopped), "{err}");
        let part = written
            .lock()
            .unwrap()
            .get(&b"/up.volley-part"[..])
            .cloned();
        let part = part.expect("the part is kept");
        assert_eq!(part.len() as u64, *kept);
        assert!(
            part == data[..part.len()],
            "the part is the source's prefix"
        );
        let moved = sftp.put(dir.join("src"), b"/up", &resume).await.unwrap();
        assert_eq!(moved, size as u64 - kept);
        assert!(written.lock().unwrap().get(&b"/up"[..]) == Some(&data));
        std::fs::remove_dir_all(&dir).unwrap();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_on_sessions_keeps_every_range_acknowledged() {
    within(60, async {
        let size = 3 * PIECE as usize + 4321;
        let data = pattern(size, 11);
        let dir = scratch("put-ranges");
        std::fs::write(dir.join("src"), &data).unwrap();
        let written: volley_sftp::testing::Written = std::sync::Arc::default();
        let healthy = Script {
            written: Some(written.clone()),
            ..Script::default()
        };
        // The first session never answers the part's WRITE at offset 0: a hole at its start.
        let hole: volley_sftp::testing::Hook = std::sync::Arc::new(|request| match *request {
            // The part's data, not the small ranges record.
            volley_proto::sftp::Request::Write {
                offset: 0, data, ..
            } if data.len() > 4096 => Some(Vec::new()),
            _ => None,
        });
        let stalled = Script {
            hook: Some(hole),
            ..healthy.clone()
        };
        let mut sessions = Sessions::new(client(stalled).await);
        sessions.push(client(healthy.clone()).await);
        let err = sessions
            .put(dir.join("src"), b"/up", &TransferOptions::default())
            .await
            .unwrap_err();
        let SftpError::Kept { kept, .. } = &err else {
            panic!("{err}");
        };
        assert_eq!(*kept, (size - PIECE as usize) as u64, "{err}");
        let record = written
            .lock()
            .unwrap()
            .get(&b"/up.volley-part.ranges"[..])
            .cloned();
        let record = String::from_utf8(record.expect("a ranges record")).unwrap();
        assert_eq!(record, format!("volley-part ranges\n{PIECE} {size}\n"));
        // A resume on a healthy session writes the first piece only.
        let sftp = client(healthy).await;
        let resume = TransferOptions {
            resume: true,
            ..TransferOptions::default()
        };
        let moved = sftp.put(dir.join("src"), b"/up", &resume).await.unwrap();
        assert_eq!(moved, PIECE);
        let files = written.lock().unwrap();
        assert!(files.get(&b"/up"[..]) == Some(&data), "resumed put differs");
        assert_eq!(files.len(), 1, "part or record left: {:?}", files.keys());
        drop(files);
        std::fs::remove_dir_all(&dir).unwrap();
    })
    .await;
}
