//! Peers for tests, examples and benchmarks.

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use volley_proto::wire::frame::{Decoder, HEADER_LEN, Header};

/// Answers every frame with a frame of the same type and id and the same body, writing
/// all replies to one read together, until the stream ends or breaks.
pub async fn echo<S: AsyncRead + AsyncWrite + Unpin>(mut stream: S) {
    let decoder = Decoder::new(16 << 20);
    let mut buf = BytesMut::with_capacity(256 * 1024);
    let mut out = Vec::with_capacity(256 * 1024);
    loop {
        if buf.capacity() - buf.len() < 64 * 1024 {
            buf.reserve(256 * 1024);
        }
        match stream.read_buf(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        while let Ok(Some((frame, used))) = decoder.decode(&buf) {
            let Ok(header) = Header::new(frame.ty, frame.id, frame.body.len()) else {
                return;
            };
            out.extend_from_slice(&header.encode());
            out.extend_from_slice(&buf[HEADER_LEN..used]);
            let _ = buf.split_to(used);
        }
        if !out.is_empty() {
            if stream.write_all(&out).await.is_err() {
                return;
            }
            out.clear();
        }
    }
}
