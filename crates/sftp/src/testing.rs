//! A scripted SFTP server for testing clients against servers that misbehave: files
//! served from memory (one content for every path unless written), a stated size that
//! may lie, short reads, stated limits, directory listings of the script's choosing
//! (empty names, FIFOs, trees without end), a STATUS message of the script's choosing,
//! raw bytes in place of any answer (a hook), and a server that dies mid-transfer.

pub mod sshd;

use core::fmt;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use volley_proto::sftp::{
    Attrs, LIMITS_EXTENSION, Limits, NameEntry, Names, OpenFlags, Pairs, Request, Response,
    StatusCode,
};
use volley_proto::wire::frame::{Decoder, Frame};

use crate::FileAttrs;

/// What a directory holds, by path: `None` for a path that is not a directory.
pub type Listing = Arc<dyn Fn(&[u8]) -> Option<Vec<(Vec<u8>, FileAttrs)>> + Send + Sync>;

/// Raw bytes to send instead of the usual answer to a request (an empty vector sends
/// nothing: the request is never answered), or `None` for the usual answer.
pub type Hook = Arc<dyn Fn(&Request<'_>) -> Option<Vec<u8>> + Send + Sync>;

/// Files written through the server, by path (shared with the test that reads them).
pub type Written = Arc<Mutex<HashMap<Vec<u8>, Vec<u8>>>>;

/// How the scripted server behaves.
#[derive(Clone, Default)]
pub struct Script {
    /// The content of every file that was not written, whatever path is opened.
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
    /// Announce `limits@openssh.com` and answer it with these (and accept packets up
    /// to twice their packet length, to see what a client sends past it).
    pub limits: Option<Limits>,
    /// Directories and what they list (each listed whole in one NAME, then EOF).
    pub dirs: Option<Listing>,
    /// Keep what is written: OPEN with CREAT makes a file here, WRITE fills it, STAT,
    /// READ, RENAME and REMOVE see it. `None`: WRITE is refused.
    pub written: Option<Written>,
    /// Raw answers in place of the usual ones.
    pub hook: Option<Hook>,
}

impl fmt::Debug for Script {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Script")
            .field("content", &self.content.len())
            .field("stated_size", &self.stated_size)
            .field("max_read", &self.max_read)
            .field("open_error", &self.open_error)
            .field("die_after_reads", &self.die_after_reads)
            .field("fail_close", &self.fail_close)
            .field("withhold_read_at", &self.withhold_read_at)
            .field("limits", &self.limits)
            .field("dirs", &self.dirs.is_some())
            .field("written", &self.written.is_some())
            .field("hook", &self.hook.is_some())
            .finish()
    }
}

/// What a handle the server gave out is open on.
enum Open {
    File(Vec<u8>),
    Dir(Vec<u8>, bool),
}

/// A file's mode bits as [`Script`] states them.
const FILE_MODE: u32 = 0o100_644;
/// A directory's.
const DIR_MODE: u32 = 0o040_755;

impl Script {
    fn written(&self) -> Option<std::sync::MutexGuard<'_, HashMap<Vec<u8>, Vec<u8>>>> {
        let written = self.written.as_ref()?;
        Some(written.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// The bytes of the file at `path`: written, or the script's content.
    fn file(&self, path: &[u8]) -> Vec<u8> {
        self.written()
            .and_then(|w| w.get(path).cloned())
            .unwrap_or_else(|| self.content.clone())
    }

    fn is_dir(&self, path: &[u8]) -> bool {
        self.dirs.as_ref().is_some_and(|dirs| dirs(path).is_some())
    }

    /// STAT's answer for `path`.
    fn stat(&self, path: &[u8]) -> Option<Attrs<'static>> {
        if self.is_dir(path) {
            return Some(Attrs {
                permissions: Some(DIR_MODE),
                ..Attrs::EMPTY
            });
        }
        let size = match self.written() {
            Some(w) => w.get(path).map(|f| f.len() as u64)?,
            None => self.content.len() as u64,
        };
        Some(Attrs {
            size: Some(size),
            permissions: Some(FILE_MODE),
            ..Attrs::EMPTY
        })
    }
}

/// Serves `script` on `stream` until the client closes it (or the script dies); returns
/// how many READs it answered with DATA.
pub async fn serve(mut stream: impl AsyncRead + AsyncWrite + Unpin, script: Script) -> usize {
    let decoder = match script.limits {
        Some(l) => {
            Decoder::new(usize::try_from(l.max_packet_len.saturating_mul(2)).unwrap_or(1 << 30))
        }
        None => Decoder::default(),
    };
    let mut buf = BytesMut::new();
    let mut reads = 0;
    let mut handles: HashMap<u32, Open> = HashMap::new();
    let mut next_handle = 0u32;
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
            if let Request::Read { offset, .. } = request {
                if script.withhold_read_at == Some(offset) {
                    let _ = buf.split_to(used);
                    continue;
                }
            }
            if let Request::Read { .. } = request {
                if script.die_after_reads == Some(reads) {
                    return reads;
                }
            }
            let bytes = match script.hook.as_ref().and_then(|hook| hook(&request)) {
                Some(raw) => raw,
                None => {
                    let mut state = State {
                        script: &script,
                        handles: &mut handles,
                        next_handle: &mut next_handle,
                        reads: &mut reads,
                    };
                    match state.answer(request) {
                        Some(bytes) => bytes,
                        None => return reads,
                    }
                }
            };
            let _ = buf.split_to(used);
            if !bytes.is_empty() && stream.write_all(&bytes).await.is_err() {
                return reads;
            }
        }
    }
}

/// The server between requests.
struct State<'a> {
    script: &'a Script,
    handles: &'a mut HashMap<u32, Open>,
    next_handle: &'a mut u32,
    reads: &'a mut usize,
}

impl State<'_> {
    fn handle(&mut self, open: Open) -> u32 {
        *self.next_handle += 1;
        self.handles.insert(*self.next_handle, open);
        *self.next_handle
    }

    fn open(&self, handle: &[u8]) -> Option<&Open> {
        let n = core::str::from_utf8(handle).ok()?.parse().ok()?;
        self.handles.get(&n)
    }

    /// The encoded answer to `request`; `None` if it cannot be encoded.
    fn answer(&mut self, request: Request<'_>) -> Option<Vec<u8>> {
        let script = self.script;
        let id = request.id();
        let status = |code, message: &'static [u8]| Response::Status {
            id,
            code,
            message,
            language: b"",
        };
        let ok = status(StatusCode::OK, b"");
        let missing = status(StatusCode::NO_SUCH_FILE, b"No such file");
        let mut name_buf = Vec::new();
        let limits;
        let handle_text;
        let data;
        let response = match request {
            Request::Init { .. } => {
                let pairs: &[(&[u8], &[u8])] = match script.limits {
                    Some(_) => &[(LIMITS_EXTENSION, b"1")],
                    None => &[],
                };
                name_buf.resize(64, 0);
                Response::Version {
                    version: 3,
                    extensions: Pairs::write(pairs, &mut name_buf).ok()?,
                }
            }
            Request::Extended { request, .. } if request == LIMITS_EXTENSION => {
                match script.limits {
                    Some(l) => {
                        limits = l.emit();
                        Response::ExtendedReply { id, data: &limits }
                    }
                    None => status(StatusCode::OP_UNSUPPORTED, b"unsupported"),
                }
            }
            Request::Open {
                filename, pflags, ..
            } => match &script.open_error {
                Some((code, message)) => Response::Status {
                    id,
                    code: *code,
                    message,
                    language: b"",
                },
                None => {
                    if let Some(mut written) = script.written() {
                        if pflags.0 & OpenFlags::CREAT.0 != 0 {
                            let file = written.entry(filename.to_vec()).or_default();
                            if pflags.0 & OpenFlags::TRUNC.0 != 0 {
                                file.clear();
                            }
                        } else if !written.contains_key(filename) {
                            return Response::Status {
                                id,
                                code: StatusCode::NO_SUCH_FILE,
                                message: b"No such file",
                                language: b"",
                            }
                            .to_vec()
                            .ok();
                        }
                    }
                    handle_text = self.handle(Open::File(filename.to_vec())).to_string();
                    Response::Handle {
                        id,
                        handle: handle_text.as_bytes(),
                    }
                }
            },
            Request::Opendir { path, .. } if script.is_dir(path) => {
                handle_text = self.handle(Open::Dir(path.to_vec(), false)).to_string();
                Response::Handle {
                    id,
                    handle: handle_text.as_bytes(),
                }
            }
            Request::Opendir { .. } => missing,
            Request::Readdir { handle, .. } => {
                let n = core::str::from_utf8(handle)
                    .ok()
                    .and_then(|h| h.parse().ok());
                match n.and_then(|n: u32| self.handles.get_mut(&n)) {
                    Some(Open::Dir(path, listed @ false)) => {
                        *listed = true;
                        let entries = script.dirs.as_ref().and_then(|d| d(path))?;
                        let wire: Vec<_> = entries
                            .iter()
                            .map(|(name, attrs)| NameEntry {
                                filename: name,
                                longname: name,
                                attrs: attrs.to_wire(),
                            })
                            .collect();
                        name_buf.resize(1 << 20, 0);
                        Response::Name {
                            id,
                            names: Names::write(&wire, &mut name_buf).ok()?,
                        }
                    }
                    _ => status(StatusCode::EOF, b"End of directory"),
                }
            }
            Request::Stat { path, .. } | Request::Lstat { path, .. } => match script.stat(path) {
                Some(attrs) => Response::Attrs { id, attrs },
                None => missing,
            },
            Request::Fstat { handle, .. } => match self.open(handle) {
                Some(Open::File(path)) => {
                    let size = match script.written().and_then(|w| w.get(path).map(Vec::len)) {
                        Some(n) => n as u64,
                        None => script.stated_size.unwrap_or(script.content.len() as u64),
                    };
                    Response::Attrs {
                        id,
                        attrs: Attrs {
                            size: Some(size),
                            ..Attrs::EMPTY
                        },
                    }
                }
                _ => status(StatusCode::FAILURE, b"bad handle"),
            },
            Request::Read {
                handle,
                offset,
                len,
                ..
            } => {
                let Some(Open::File(path)) = self.open(handle) else {
                    return status(StatusCode::FAILURE, b"bad handle").to_vec().ok();
                };
                data = script.file(path);
                let size = data.len() as u64;
                if offset < size {
                    *self.reads += 1;
                    let give = (len as usize)
                        .min(script.max_read.unwrap_or(usize::MAX))
                        .min((size - offset) as usize);
                    Response::Data {
                        id,
                        data: &data[offset as usize..offset as usize + give],
                    }
                } else {
                    status(StatusCode::EOF, b"End of file")
                }
            }
            Request::Write {
                handle,
                offset,
                data,
                ..
            } => {
                let path = match self.open(handle) {
                    Some(Open::File(path)) => path.clone(),
                    _ => return status(StatusCode::FAILURE, b"bad handle").to_vec().ok(),
                };
                match script.written() {
                    Some(mut written) => {
                        let file = written.entry(path).or_default();
                        let end = offset as usize + data.len();
                        if file.len() < end {
                            file.resize(end, 0);
                        }
                        file[offset as usize..end].copy_from_slice(data);
                        ok
                    }
                    None => status(StatusCode::OP_UNSUPPORTED, b"unsupported"),
                }
            }
            Request::Rename {
                oldpath, newpath, ..
            } => match script.written() {
                Some(mut written) => match written.remove(oldpath) {
                    Some(file) => {
                        written.insert(newpath.to_vec(), file);
                        ok
                    }
                    None => missing,
                },
                None => status(StatusCode::OP_UNSUPPORTED, b"unsupported"),
            },
            Request::Remove { filename, .. } => {
                match script.written().and_then(|mut w| w.remove(filename)) {
                    Some(_) => ok,
                    None => missing,
                }
            }
            Request::Setstat { .. } | Request::Fsetstat { .. } => ok,
            Request::Close { .. } if script.fail_close => {
                status(StatusCode::FAILURE, b"close failed")
            }
            Request::Close { handle, .. } => {
                let n = core::str::from_utf8(handle)
                    .ok()
                    .and_then(|h| h.parse().ok());
                n.and_then(|n: u32| self.handles.remove(&n));
                ok
            }
            _ => status(StatusCode::OP_UNSUPPORTED, b"unsupported"),
        };
        response.to_vec().ok()
    }
}
