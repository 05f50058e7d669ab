//! A `MessageLink` written outside volley-rpc, with only its public API: messages over
//! `tokio::io::duplex`, each framed as a big-endian u32 length and then the message as
//! `Message::encode_prefix` lays it out (head, arguments, segments), read back with
//! `Message::from_wire`. The `kv` example's service runs over it exactly as over the
//! built-in links, served by `serve` from a stream of such links (`Links`). It does not
//! implement `LinkSender::try_send`, so each message waits in `send`: correct, if slower
//! than a link that can queue without waiting.
//!
//! `cargo run -p volley-rpc --example custom_link` prints `ok` last.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream, ReadHalf};
use tokio::sync::{mpsc, watch};
use volley_rpc::link::{
    LinkError, LinkReceiver, LinkSender, MAX_HEAD, MAX_PREFIX, Message, MessageLink,
};
use volley_rpc::{Config, Endpoint};

use volley_rpc_example_kv::{Kv, KvClient, KvServer, Store};

/// The largest message this link carries.
const MAX_MESSAGE: usize = 16 << 20;

/// One end of a duplex stream, as a link.
struct DuplexLink(DuplexStream);

/// Queues messages for the writer task; closing stops it and shuts the stream.
#[derive(Clone)]
struct DuplexSender {
    queue: mpsc::Sender<Message>,
    closing: Arc<watch::Sender<bool>>,
}

struct DuplexReceiver(ReadHalf<DuplexStream>);

impl MessageLink for DuplexLink {
    type Sender = DuplexSender;
    type Receiver = DuplexReceiver;

    fn split(self) -> (DuplexSender, DuplexReceiver) {
        let (read, mut write) = tokio::io::split(self.0);
        let (queue, mut queued) = mpsc::channel::<Message>(64);
        let (closing, mut closed) = watch::channel(false);
        tokio::spawn(async move {
            loop {
                let message = tokio::select! {
                    message = queued.recv() => message,
                    _ = closed.changed() => None,
                };
                let Some(message) = message else { break };
                // The head, and the arguments too when they are small, in `prefix`;
                // larger arguments and the segments follow uncopied.
                let mut prefix = [0u8; MAX_PREFIX];
                let Ok(laid) = message.encode_prefix(&mut prefix) else {
                    break;
                };
                let n = laid.len;
                let pieces = core::iter::once(&laid.args).chain(&laid.segments);
                let len = n + pieces.clone().map(Bytes::len).sum::<usize>();
                let mut written = write.write_all(&(len as u32).to_be_bytes()).await;
                if written.is_ok() {
                    written = write.write_all(&prefix[..n]).await;
                }
                for piece in pieces {
                    if written.is_ok() {
                        written = write.write_all(piece).await;
                    }
                }
                if written.is_err() {
                    break;
                }
            }
            let _ = write.shutdown().await;
        });
        let sender = DuplexSender {
            queue,
            closing: Arc::new(closing),
        };
        (sender, DuplexReceiver(read))
    }
}

impl LinkSender for DuplexSender {
    async fn send(&self, message: Message) -> Result<(), LinkError> {
        self.queue
            .send(message)
            .await
            .map_err(|_| LinkError::Closed)
    }

    fn max_message(&self) -> usize {
        MAX_MESSAGE
    }

    fn close(&self) {
        let _ = self.closing.send(true);
    }
}

impl LinkReceiver for DuplexReceiver {
    async fn recv(&mut self) -> Result<Message, LinkError> {
        let mut len = [0u8; 4];
        if let Err(e) = self.0.read_exact(&mut len).await {
            return Err(match e.kind() {
                std::io::ErrorKind::UnexpectedEof => LinkError::Closed,
                _ => LinkError::transport(e),
            });
        }
        let len = u32::from_be_bytes(len) as usize;
        // The length is checked before anything is allocated for it.
        if len > MAX_MESSAGE + MAX_HEAD {
            let why = format!("a message of {len} bytes, over this link's {MAX_MESSAGE}");
            return Err(LinkError::transport(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                why,
            )));
        }
        let mut body = BytesMut::zeroed(len);
        self.0
            .read_exact(&mut body)
            .await
            .map_err(LinkError::transport)?;
        Message::from_wire(&body.freeze())
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn core::error::Error>> {
    let server = Endpoint::<Kv>::new(Config::default())?.serve(Store::default().into_router());
    let client = Endpoint::<Kv>::new(Config::default())?;
    let (a, b) = tokio::io::duplex(1 << 20);
    // The server takes its links from any stream of them, as it would from a listener.
    let incoming = futures::stream::iter([Ok(DuplexLink(a))]);
    let server = volley_rpc::serve(server, volley_rpc::Links::new(incoming));
    let kv = KvClient::new(client.connect(DuplexLink(b)).await?);
    for size in [0usize, 1, 1 << 20, 5 << 20] {
        let value = Bytes::from((0..size).map(|i| (i % 251) as u8).collect::<Vec<u8>>());
        kv.put(format!("{size}")).segment(value.clone()).await?;
        let got = kv.get(format!("{size}")).reply().await?;
        assert!(got.value, "the value of {size} bytes is there");
        assert_eq!(
            got.segments,
            vec![value],
            "{size} bytes back over the custom link"
        );
    }
    kv.remove("0".into()).await?;
    let left = kv
        .wait_for("0".into(), false)
        .deadline(core::time::Duration::from_secs(5))
        .await?;
    assert_eq!(left, 3);
    kv.caller().shutdown().await;
    server.shutdown().await?;
    println!("ok");
    Ok(())
}
