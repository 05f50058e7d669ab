//! A scripted SFTP server for testing clients against servers that misbehave: one file
//! served from memory, with a stated size that may lie, short reads, a STATUS message of
//! the script's choosing, and a server that dies mid-transfer.

pub mod sshd;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use volley_proto::wire::frame::{Decoder, Frame};
use volley_proto::wire::sftp::{Attrs, Pairs, Request, Response, StatusCode};

/// How the scripted server behaves.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Script {
    /// The one file's content, whatever path is opened.
    pub content: Vec<u8>,
    /// The size FSTAT states; `None`: the content's length.
    pub stated_size: Option<u64>,
    /// Answer each READ with at most this many bytes (a short read).
    pub max_read: Option<usize>,
    /// Refuse every OPEN with this status code and message.
    pub open_error: Option<(StatusCode, Vec<u8>)>,
    /// Close the stream instead of answering the READ after this many.
    pub die_after_reads: Option<usize>,
    /// Answer CLOSE with a failure.
    pub fail_close: bool,
    /// Never answer the READ at this offset (the stream stays open): a gap in the file
    /// that the later READs' answers land beyond.
    pub withhold_read_at: Option<u64>,
}

/// Serves `script` on `stream` until the client closes it (or the script dies); returns
/// how many READs it answered with DATA.
pub async fn serve(mut stream: impl AsyncRead + AsyncWrite + Unpin, script: Script) -> usize {
    let decoder = Decoder::default();
    let mut buf = BytesMut::new();
    let mut reads = 0;
    let content = &script.content;
    let size = content.len() as u64;
    loop {
        match stream.read_buf(&mut buf).await {
            Ok(0) | Err(_) => return reads,
            Ok(_) => {}
        }
        while let Ok(Some((frame, used))) = decoder.decode(&buf) {
            let Ok(request) = Request::parse(Frame {
                ty: frame.ty,
                id: frame.id,
                body: frame.body,
            }) else {
                return reads;
            };
            let id = request.id();
            if let Request::Read { offset, .. } = request {
                if script.withhold_read_at == Some(offset) {
                    let _ = buf.split_to(used);
                    continue;
                }
            }
            let status = |code, message| Response::Status {
                id,
                code,
                message,
                language: b"",
            };
            let response = match request {
                Request::Init { .. } => Response::Version {
                    version: 3,
                    extensions: Pairs::EMPTY,
                },
                Request::Open { .. } => match &script.open_error {
                    Some((code, message)) => status(*code, message),
                    None => Response::Handle { id, handle: b"h" },
                },
                Request::Fstat { .. } => Response::Attrs {
                    id,
                    attrs: Attrs {
                        size: Some(script.stated_size.unwrap_or(size)),
                        ..Attrs::EMPTY
                    },
                },
                Request::Read { .. } if script.die_after_reads == Some(reads) => return reads,
                Request::Read { offset, len, .. } if offset < size => {
                    reads += 1;
                    let give = (len as usize)
                        .min(script.max_read.unwrap_or(usize::MAX))
                        .min((size - offset) as usize);
                    Response::Data {
                        id,
                        data: &content[offset as usize..offset as usize + give],
                    }
                }
                Request::Read { .. } => status(StatusCode::EOF, b"End of file"),
                Request::Close { .. } if script.fail_close => {
                    status(StatusCode::FAILURE, b"close failed")
                }
                Request::Close { .. } => status(StatusCode::OK, b""),
                _ => status(StatusCode::OP_UNSUPPORTED, b"unsupported"),
            };
            let Ok(bytes) = response.to_vec() else {
                return reads;
            };
            let _ = buf.split_to(used);
            if stream.write_all(&bytes).await.is_err() {
                return reads;
            }
        }
    }
}
