//! A scripted server that answers every READ with fewer bytes than asked: the client must
//! ask again for each tail and never take a short read for end of file.

use core::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use volley_proto::wire::frame::{Decoder, Frame};
use volley_proto::wire::sftp::{Attrs, Pairs, Request, Response, StatusCode};
use volley_sftp::{SftpClient, TransferOptions};

/// Serves one file, `content`, answering READs with at most half (plus one) of what
/// they ask for. Returns how many READs it answered with DATA.
async fn stingy_server(mut stream: DuplexStream, content: Vec<u8>) -> usize {
    let decoder = Decoder::default();
    let mut buf = BytesMut::new();
    let mut reads = 0;
    loop {
        match stream.read_buf(&mut buf).await {
            Ok(0) | Err(_) => return reads,
            Ok(_) => {}
        }
        while let Ok(Some((frame, used))) = decoder.decode(&buf) {
            let request = Request::parse(Frame {
                ty: frame.ty,
                id: frame.id,
                body: frame.body,
            })
            .unwrap();
            let id = request.id();
            let status = |code| Response::Status {
                id,
                code,
                message: b"",
                language: b"",
            };
            let size = content.len() as u64;
            let response = match request {
                Request::Init { .. } => Response::Version {
                    version: 3,
                    extensions: Pairs::EMPTY,
                },
                Request::Open { .. } => Response::Handle { id, handle: b"h" },
                Request::Fstat { .. } => Response::Attrs {
                    id,
                    attrs: Attrs {
                        size: Some(size),
                        ..Attrs::EMPTY
                    },
                },
                Request::Read { offset, len, .. } if offset < size => {
                    reads += 1;
                    let give = (len as u64 / 2 + 1).min(size - offset) as usize;
                    Response::Data {
                        id,
                        data: &content[offset as usize..offset as usize + give],
                    }
                }
                Request::Read { .. } => status(StatusCode::EOF),
                Request::Close { .. } => status(StatusCode::OK),
                _ => status(StatusCode::OP_UNSUPPORTED),
            };
            let bytes = response.to_vec().unwrap();
            let _ = buf.split_to(used);
            if stream.write_all(&bytes).await.is_err() {
                return reads;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_reads_are_asked_again_not_taken_for_eof() {
    tokio::time::timeout(Duration::from_secs(60), async {
        let content: Vec<u8> = (0..300_001u32).map(|i| (i * 7 + i / 251) as u8).collect();
        let (ours, theirs) = tokio::io::duplex(1 << 20);
        let server = tokio::spawn(stingy_server(theirs, content.clone()));
        let (read, write) = tokio::io::split(ours);
        let sftp = SftpClient::connect(read, write).await.unwrap();
        assert_eq!(sftp.limits(), None);
        let local = std::env::temp_dir().join(format!("volley-short-{}", std::process::id()));
        let got = sftp
            .get(
                b"/file",
                &local,
                &TransferOptions {
                    requests: 8,
                    chunk: Some(10_000),
                    send_from_file: false,
                },
                |_| {},
            )
            .await
            .unwrap();
        assert_eq!(got, content.len() as u64);
        assert!(
            std::fs::read(&local).unwrap() == content,
            "bytes differ after short reads"
        );
        std::fs::remove_file(&local).unwrap();
        drop(sftp);
        // Every 10 000-byte READ came back short, so there were about twice as many.
        let reads = server.await.unwrap();
        assert!(reads >= 2 * 30, "{reads} reads");
    })
    .await
    .expect("finished within 60 s");
}
