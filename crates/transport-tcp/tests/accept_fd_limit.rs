//! The listener when the process runs out of file descriptors: it pauses between
//! attempts instead of spinning on `EMFILE`, and accepts the waiting peers once
//! descriptors are free again. (Its own test binary: it lowers the process's limit.)

use core::time::Duration;
use std::sync::Arc;

use nix::sys::resource::{Resource, getrlimit, setrlimit};
use volley_transport_tcp::{Listener, ServerConfig};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_descriptors_the_listener_backs_off_then_recovers() {
    let run = async {
        let config = ServerConfig {
            max_backoff: Duration::from_millis(200),
            ..ServerConfig::default()
        };
        let listener = Arc::new(
            Listener::bind_tcp("127.0.0.1:0".parse().unwrap(), config)
                .await
                .unwrap(),
        );
        let addr = listener.local_addr().unwrap();
        // 40 peers connect first; the kernel completes their handshakes in the backlog.
        let mut peers: Vec<std::net::TcpStream> = (0..40)
            .map(|_| std::net::TcpStream::connect(addr).unwrap())
            .collect();
        // Room for 10 more descriptors in this process.
        let open = std::fs::read_dir("/proc/self/fd").unwrap().count() as u64;
        let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        setrlimit(Resource::RLIMIT_NOFILE, open + 10, hard).unwrap();

        // The server: each connection served until its peer goes, then closed.
        let server = listener.clone();
        tokio::spawn(async move {
            loop {
                let accepted = server.accept().await.expect("accept");
                tokio::spawn(async move {
                    let mut incoming = accepted.incoming;
                    while incoming.recv().await.is_ok() {}
                    drop(accepted.framed);
                });
            }
        });
        while listener.stats().out_of_files == 0 {
            tokio::task::yield_now().await;
        }
        let accepted = listener.stats().accepted;
        assert!(
            accepted < 40,
            "all 40 accepted under a limit of {} descriptors",
            open + 10
        );
        // A second out of descriptors: a loop that spun would try thousands of times.
        let before = listener.stats().out_of_files;
        let _ = tokio::time::timeout(Duration::from_secs(1), core::future::pending::<()>()).await;
        let tries = listener.stats().out_of_files - before;
        assert!(
            tries <= 15,
            "{tries} accept attempts in one second out of descriptors"
        );

        // Peers go, their connections close, and the rest are accepted.
        peers.drain(..30);
        while listener.stats().accepted < 40 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        setrlimit(Resource::RLIMIT_NOFILE, soft, hard).unwrap();
        drop(peers);
    };
    tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("finished within 60 s");
}
