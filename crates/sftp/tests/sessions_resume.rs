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
