//! `volley rpc serve` and `volley rpc bench` over TLS as a user runs them: mutual TLS with
//! files made here, the server's name checked, and plain and TLS ends told apart with the
//! messages the commands promise.

mod common;

use core::time::Duration;
use std::path::{Path, PathBuf};

use common::*;
use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Child;
use tokio::time::timeout;

/// A CA, a server certificate for `localhost` and 127.0.0.1, and a client certificate,
/// each as `NAME.pem` and `NAME.key` (the CA as `ca.pem`) in `dir`.
fn certificates(dir: &Path) {
    let ca_key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = params.self_signed(&ca_key).unwrap();
    std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
    for (name, sans) in [
        (
            "server",
            vec!["localhost".to_owned(), "127.0.0.1".to_owned()],
        ),
        ("client", vec!["client.test".to_owned()]),
    ] {
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(sans)
            .unwrap()
            .signed_by(&key, &ca, &ca_key)
            .unwrap();
        std::fs::write(dir.join(format!("{name}.pem")), cert.pem()).unwrap();
        std::fs::write(dir.join(format!("{name}.key")), key.serialize_pem()).unwrap();
    }
}

fn path(dir: &Path, name: &str) -> String {
    dir.join(name).to_str().unwrap().to_owned()
}

/// `volley rpc serve` with `extra`, and the address it prints.
async fn server(extra: &[&str]) -> (Child, String) {
    let mut args = vec!["rpc", "serve", "--listen", "127.0.0.1:0"];
    args.extend_from_slice(extra);
    let (child, line) = spawn(&args).await;
    let addr = line
        .strip_prefix("listening tcp=")
        .unwrap_or_else(|| panic!("unexpected line `{line}`"))
        .to_owned();
    (child, addr)
}

async fn bench(args: &[&str]) -> (bool, String, String) {
    let mut all = vec!["rpc", "bench"];
    all.extend_from_slice(args);
    let (ok, stdout, stderr) = run_out(&all).await;
    (ok, stdout.lines().last().unwrap_or("").to_owned(), stderr)
}

/// Waits (up to 10 s) for a server to write a line holding `text` to stderr; the lines
/// read meanwhile if none does.
async fn logged(child: &mut Child, text: &str) -> Result<(), String> {
    let mut lines = BufReader::new(child.stderr.as_mut().unwrap()).lines();
    let mut seen = String::new();
    let found = timeout(Duration::from_secs(10), async {
        while let Ok(Some(line)) = lines.next_line().await {
            if line.contains(text) {
                return true;
            }
            seen.push_str(&line);
            seen.push('\n');
        }
        false
    })
    .await;
    match found {
        Ok(true) => Ok(()),
        _ => Err(seen),
    }
}

fn scratch_with_certificates(name: &str) -> PathBuf {
    let dir = scratch(name);
    certificates(&dir);
    dir
}

#[tokio::test]
async fn mutual_tls_from_pem_files_end_to_end() {
    let dir = scratch_with_certificates("rpc-mtls");
    let (cert, key, ca) = (
        path(&dir, "server.pem"),
        path(&dir, "server.key"),
        path(&dir, "ca.pem"),
    );
    let (client_cert, client_key) = (path(&dir, "client.pem"), path(&dir, "client.key"));
    let (server, addr) =
        server(&["--tls-cert", &cert, "--tls-key", &key, "--client-ca", &ca]).await;
    let mutual = [
        "--connect",
        &addr,
        "--tls-ca",
        &ca,
        "--tls-cert",
        &client_cert,
        "--tls-key",
        &client_key,
    ];
    // The IP of --connect is checked against the certificate's IP name; bulk calls
    // are verified by the bench itself (put's hash, get's pattern).
    for extra in [
        &["--calls", "200", "--concurrency", "8"][..],
        &["--calls", "20", "--call", "put", "--payload", "1048576"],
        &["--calls", "20", "--call", "get", "--payload", "1048576"],
        &["--calls", "20", "--server-name", "localhost"],
    ] {
        let mut args = mutual.to_vec();
        args.extend_from_slice(extra);
        let (ok, last, err) = bench(&args).await;
        assert!(ok, "{args:?}: {err}");
        assert!(last.contains(" failed=0 "), "{last}");
    }
    // Without a client certificate: refused, with the server's alert.
    let (ok, _, err) = bench(&["--connect", &addr, "--tls-ca", &ca]).await;
    assert!(!ok);
    assert!(
        err.contains("received fatal alert: CertificateRequired"),
        "{err}"
    );
    // A name the certificate does not hold.
    let mut args = mutual.to_vec();
    args.extend_from_slice(&["--server-name", "elsewhere.test"]);
    let (ok, _, err) = bench(&args).await;
    assert!(!ok);
    assert!(err.contains("not valid for name"), "{err}");
    // A plain client is told what the server speaks.
    let (ok, _, err) = bench(&["--connect", &addr]).await;
    assert!(!ok);
    assert!(
        err.contains("the server speaks TLS (use --tls-ca)"),
        "{err}"
    );
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_tls_client_on_a_plain_port_is_logged_and_closed() {
    let dir = scratch_with_certificates("rpc-tls-plain");
    let (mut server, addr) = server(&[]).await;
    let (ok, _, err) = bench(&["--connect", &addr, "--tls-ca", &path(&dir, "ca.pem")]).await;
    assert!(!ok, "a TLS client got through to a plain server");
    assert!(err.contains("cannot connect"), "{err}");
    if let Err(seen) = logged(&mut server, "a TLS client on a plain port").await {
        panic!("the server did not log the TLS client; its stderr:\n{seen}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn tls_options_are_refused_where_they_cannot_apply() {
    let dir = scratch_with_certificates("rpc-tls-refused");
    let (cert, key, ca) = (
        path(&dir, "server.pem"),
        path(&dir, "server.key"),
        path(&dir, "ca.pem"),
    );
    let (ok, err) = run(&[
        "rpc",
        "serve",
        "--transport",
        "udp",
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
    ])
    .await;
    assert!(!ok);
    assert!(err.contains("--transport udp has no TLS"), "{err}");
    let (ok, _, err) = bench(&[
        "--connect",
        "127.0.0.1:9",
        "--transport",
        "udp",
        "--tls-ca",
        &ca,
    ])
    .await;
    assert!(!ok);
    assert!(err.contains("--transport udp has no TLS"), "{err}");
    let (ok, _, err) = bench(&["--connect", "127.0.0.1:9", "--server-name", "x.test"]).await;
    assert!(!ok);
    assert!(err.contains("need TLS"), "{err}");
    // A key file that is not one names the file.
    let (ok, err) = run(&["rpc", "serve", "--tls-cert", &cert, "--tls-key", &cert]).await;
    assert!(!ok);
    assert!(
        err.contains("private key") && err.contains("server.pem"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn quic_serve_and_bench_end_to_end() {
    let dir = scratch_with_certificates("rpc-quic");
    let (cert, key, ca) = (
        path(&dir, "server.pem"),
        path(&dir, "server.key"),
        path(&dir, "ca.pem"),
    );
    let (_server, line) = spawn(&[
        "rpc",
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--transport",
        "quic",
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
    ])
    .await;
    let addr = line
        .strip_prefix("listening quic=")
        .unwrap_or_else(|| panic!("unexpected line `{line}`"))
        .to_owned();
    for extra in [
        &["--calls", "300", "--concurrency", "16"][..],
        &["--calls", "10", "--call", "put", "--payload", "1048576"],
        &["--calls", "10", "--call", "get", "--payload", "1048576"],
        &["--calls", "50", "--call", "send", "--payload", "65536"],
    ] {
        let mut args = vec!["--connect", &addr, "--transport", "quic", "--tls-ca", &ca];
        args.extend_from_slice(extra);
        let (ok, last, err) = bench(&args).await;
        assert!(ok, "{args:?}: {err}");
        assert!(last.contains(" failed=0 "), "{last}");
    }
    // QUIC is always encrypted: both ends say what is missing.
    let (ok, err) = run(&["rpc", "serve", "--transport", "quic"]).await;
    assert!(!ok);
    assert!(
        err.contains("give --tls-cert FILE and --tls-key FILE"),
        "{err}"
    );
    let (ok, _, err) = bench(&["--connect", &addr, "--transport", "quic"]).await;
    assert!(!ok);
    assert!(err.contains("add --tls-ca FILE or --tls"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
