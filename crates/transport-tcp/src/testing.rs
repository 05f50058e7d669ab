//! Peers for tests, examples and benchmarks.

use tokio::io::{AsyncRead, AsyncWrite};

use crate::config::{Config, Role};
use crate::framed::Framed;

/// Answers every frame with a frame of the same type and id and the same body (the
/// received bytes, not a copy), until the stream ends or breaks. Frames up to 16 MiB.
pub async fn echo<S: AsyncRead + AsyncWrite + Send + 'static>(stream: S) {
    let (read, write) = tokio::io::split(stream);
    let config = Config {
        role: Role::Acceptor,
        max_frame_len: 16 << 20,
        ..Config::default()
    };
    let (framed, mut incoming) = Framed::new(read, write, config);
    while let Ok(frame) = incoming.recv().await {
        if framed
            .send(frame.ty, frame.id, &[], frame.body)
            .await
            .is_err()
        {
            return;
        }
    }
}
