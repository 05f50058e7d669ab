//! What every TCP socket volley opens or accepts is set to: Nagle's algorithm off (the
//! writer batches by itself), TCP keep-alive on, and on a loopback connection the `reno`
//! congestion control in place of the system's default.
//!
//! Why reno on loopback: congestion control has nothing to control there, but the
//! algorithm still runs, and BBR (the default on many hosts, this project's test host
//! among them) paces every send with the kernel's internal pacing timers when no `fq`
//! queueing discipline is installed, which loopback never has. Measured with
//! `cargo xtask bench --suite rpc`, a 1 MiB call over loopback ran markedly slower under
//! BBR than under reno (the commit that added this gives the figures). Reno is built into
//! every Linux kernel and is on the list unprivileged processes may choose from
//! (`net.ipv4.tcp_allowed_congestion_control` always holds it), so setting it needs no
//! privilege; where it cannot be set (another OS, a kernel without it), the socket keeps
//! the system's choice. Connections to any other address keep the system's choice too.

use core::time::Duration;
use std::io;

use tokio::net::TcpStream;

/// The congestion control used on loopback connections.
pub const LOOPBACK_CONGESTION: &str = "reno";

/// Sets a TCP stream up as volley's own connections are: Nagle's algorithm off, TCP
/// keep-alive on, and on a loopback connection the [`LOOPBACK_CONGESTION`] algorithm (best
/// effort: the system's choice stays where it cannot be set). Fails only if the socket is
/// already dead. [`Framed::from_tcp`](crate::Framed::from_tcp) and [`Listener`](crate::Listener)
/// call it; call it on a stream made elsewhere (a TLS client's, say) before use.
///
/// ```no_run
/// # async fn f() -> std::io::Result<()> {
/// let stream = tokio::net::TcpStream::connect("127.0.0.1:7000").await?;
/// volley_transport_tcp::tune(&stream)?;
/// # Ok(())
/// # }
/// ```
pub fn tune(stream: &TcpStream) -> io::Result<()> {
    stream.set_nodelay(true)?;
    let socket = socket2::SockRef::from(stream);
    socket.set_tcp_keepalive(&keepalive())?;
    if stream.peer_addr()?.ip().is_loopback() {
        set_loopback_congestion(&socket);
    }
    Ok(())
}

#[cfg(any(target_os = "linux", target_os = "freebsd"))]
fn set_loopback_congestion(socket: &socket2::SockRef<'_>) {
    // Best effort, as the module's docs say.
    let _ = socket.set_tcp_congestion(LOOPBACK_CONGESTION.as_bytes());
}

#[cfg(not(any(target_os = "linux", target_os = "freebsd")))]
fn set_loopback_congestion(_socket: &socket2::SockRef<'_>) {}

/// TCP keep-alive for accepted and connected sockets: a peer whose host vanished is found
/// out by the kernel after about a minute and a half of silence, even with nothing to
/// send (the protocols' own pings, where they have them, find it sooner).
pub(crate) fn keepalive() -> socket2::TcpKeepalive {
    socket2::TcpKeepalive::new()
        .with_time(Duration::from_secs(60))
        .with_interval(Duration::from_secs(10))
        .with_retries(3)
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_loopback_connection_runs_reno_with_nagle_off() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (client, accepted) = tokio::join!(TcpStream::connect(addr), listener.accept());
        let (client, (server, _)) = (client.unwrap(), accepted.unwrap());
        for stream in [&client, &server] {
            tune(stream).unwrap();
            assert!(stream.nodelay().unwrap());
            let socket = socket2::SockRef::from(stream);
            assert!(socket.keepalive().unwrap());
            let name = socket.tcp_congestion().unwrap();
            let name = String::from_utf8_lossy(&name);
            assert_eq!(name.trim_end_matches('\0'), LOOPBACK_CONGESTION);
        }
    }
}
