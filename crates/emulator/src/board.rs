//! [`Board`]: a SpiNNaker-like board on a UDP socket (and, if asked, a TCP listener for
//! the same SCP packets in SFTP-style frames); its settings and counters live in
//! `config`, the logic in `logic`, the sockets in `serve`.

use core::future::Future;
use core::net::SocketAddr;
use std::io;
use std::sync::Arc;

use tokio::net::{TcpListener, UdpSocket};
use tokio::task::JoinHandle;

use crate::config::{BoardConfig, BoardStats};
use crate::logic::Fabric;
use crate::pacer::Pacer;
use crate::serve::{serve_tcp, serve_udp};

/// A running emulated board.
#[derive(Debug)]
pub struct Board {
    udp_addr: SocketAddr,
    tcp_addr: Option<SocketAddr>,
    fabric: Arc<Fabric>,
    tasks: Vec<JoinHandle<io::Result<()>>>,
}

impl Board {
    /// Binds the UDP socket (and the TCP listener, if asked) and starts serving.
    /// Port 0 picks a free port; see [`Board::udp_addr`].
    pub async fn bind(
        udp: SocketAddr,
        tcp: Option<SocketAddr>,
        config: BoardConfig,
    ) -> io::Result<Self> {
        config.check()?;
        let socket = std::net::UdpSocket::bind(udp)?;
        socket.set_nonblocking(true)?;
        let for_pacer = socket.try_clone()?;
        let socket = UdpSocket::from_std(socket)?;
        let udp_addr = socket.local_addr()?;
        let mut fabric = Fabric::single(config);
        // Its chips report the address it listens on, as a real board's Ethernet chip
        // reports its own, so a host that discovers it as a machine comes back here.
        if let core::net::IpAddr::V4(ip) = udp_addr.ip() {
            if !ip.is_unspecified() {
                fabric.ips[0] = ip.octets();
            }
        }
        let fabric = Arc::new(fabric);
        let pacer = Arc::new(Pacer::start(fabric.clone(), vec![for_pacer]));
        let mut tasks = vec![tokio::spawn(serve_udp(socket, fabric.clone(), pacer, 0))];
        let mut tcp_addr = None;
        if let Some(addr) = tcp {
            let listener = TcpListener::bind(addr).await?;
            tcp_addr = Some(listener.local_addr()?);
            tasks.push(tokio::spawn(serve_tcp(listener, fabric.clone())));
        }
        Ok(Self {
            udp_addr,
            tcp_addr,
            fabric,
            tasks,
        })
    }

    /// Where the board listens for SCP over UDP.
    pub fn udp_addr(&self) -> SocketAddr {
        self.udp_addr
    }

    /// Where the board listens for framed SCP over TCP, if it does.
    pub fn tcp_addr(&self) -> Option<SocketAddr> {
        self.tcp_addr
    }

    /// The counters so far.
    pub fn stats(&self) -> BoardStats {
        self.fabric.boards[0].stats()
    }

    /// Copies `len` bytes of chip (`x`, `y`)'s SDRAM from `address`, or `None` outside it.
    pub fn read_memory(&self, x: u8, y: u8, address: u32, len: usize) -> Option<Vec<u8>> {
        self.fabric.boards[0].read_memory(x, y, address, len)
    }

    /// Writes into chip (`x`, `y`)'s SDRAM; `false` outside it or past the memory budget.
    pub fn write_memory(&self, x: u8, y: u8, address: u32, data: &[u8]) -> bool {
        self.fabric.boards[0]
            .lock()
            .memory
            .write(x, y, address, data)
            .is_ok()
    }

    /// The transient-tag timeout code in force.
    pub fn tto(&self) -> u8 {
        self.fabric.boards[0].lock().tto
    }

    /// Waits until a serving task stops, which it does only when it fails, and says why
    /// (a socket error, or a panic): a process that runs a board should end with this
    /// error rather than go on answering nothing.
    pub async fn stopped(&mut self) -> io::Error {
        first_to_stop(&mut self.tasks).await
    }

    /// Stops serving and waits for the tasks to end.
    pub async fn shutdown(mut self) {
        shut_down(&mut self.tasks).await;
    }
}

/// Waits for the first of `tasks` to end and says why; a finished task is removed, as
/// it must not be polled again.
pub(crate) async fn first_to_stop(tasks: &mut Vec<JoinHandle<io::Result<()>>>) -> io::Error {
    if tasks.is_empty() {
        return io::Error::other("the board was shut down");
    }
    let (result, i) = core::future::poll_fn(|cx| {
        for (i, task) in tasks.iter_mut().enumerate() {
            if let core::task::Poll::Ready(result) = core::pin::Pin::new(task).poll(cx) {
                return core::task::Poll::Ready((result, i));
            }
        }
        core::task::Poll::Pending
    })
    .await;
    tasks.remove(i);
    match result {
        Ok(Err(e)) => e,
        Ok(Ok(())) => io::Error::other("a serving task ended"),
        Err(e) if e.is_panic() => io::Error::other(format!(
            "a serving task panicked: {}",
            panic_message(&e.into_panic())
        )),
        Err(e) => io::Error::other(format!("a serving task was cancelled: {e}")),
    }
}

/// Aborts `tasks` and waits for them to end.
pub(crate) async fn shut_down(tasks: &mut Vec<JoinHandle<io::Result<()>>>) {
    for task in tasks.drain(..) {
        task.abort();
        let _ = task.await;
    }
}

impl Drop for Board {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// The text of a panic's payload, for a serving task that died.
fn panic_message(payload: &(dyn core::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".to_owned())
}
