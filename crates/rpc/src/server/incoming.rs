//! [`Incoming`]: where a server's connections come from, and [`Links`], any stream of
//! links as one.

use core::net::SocketAddr;
use core::pin::Pin;
use std::io;

use crate::link::MessageLink;

/// Where a server's connections come from: each is a link and a name for the log.
pub trait Incoming: Send + 'static {
    /// The links it yields.
    type Link: MessageLink;

    /// The next connection and who it is from (for rate-limited warnings: a host, not a
    /// port), `None` once no more will come; an error ends the server with it.
    fn next(&mut self) -> impl Future<Output = Option<io::Result<(Self::Link, String)>>> + Send;

    /// The address it takes connections on, if it has one.
    fn local_addr(&self) -> Option<SocketAddr> {
        None
    }
}

/// Any stream of links as an [`Incoming`]: `serve(endpoint, Links::new(stream))`.
pub struct Links<St> {
    stream: Pin<Box<St>>,
    n: u64,
}

impl<St> Links<St> {
    /// Serves the links `stream` yields.
    pub fn new(stream: St) -> Self {
        Self {
            stream: Box::pin(stream),
            n: 0,
        }
    }
}

impl<St, L> Incoming for Links<St>
where
    St: futures::Stream<Item = io::Result<L>> + Send + 'static,
    L: MessageLink,
{
    type Link = L;

    async fn next(&mut self) -> Option<io::Result<(L, String)>> {
        let link = futures::StreamExt::next(&mut self.stream).await?;
        self.n += 1;
        Some(link.map(|link| (link, format!("link {}", self.n))))
    }
}

/// The UDP channel's endpoint: each peer that connects is a link.
#[cfg(feature = "udp")]
impl Incoming for volley_transport_udp::channel::ChannelEndpoint {
    type Link = crate::link::udp::UdpLink;

    async fn next(&mut self) -> Option<io::Result<(Self::Link, String)>> {
        Some(match self.accept().await {
            Ok(connection) => {
                let link = crate::link::udp::UdpLink::new(connection);
                let who = MessageLink::connection(&link)
                    .peer_addr
                    .map_or_else(|| "a udp peer".to_owned(), |a| a.ip().to_string());
                Ok((link, who))
            }
            Err(e) => Err(io::Error::other(e)),
        })
    }

    fn local_addr(&self) -> Option<SocketAddr> {
        Some(Self::local_addr(self))
    }
}
