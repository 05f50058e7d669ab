//! Replies as the writer sends them: a head, and for DATA the payload apart from it, so
//! READ data is written from the buffer it was read into, never copied into a message.

use std::io;

use volley_proto::sftp::{Attrs, NameEntry, Names, Response, StatusCode};

/// One reply, ready to write.
#[derive(Debug)]
pub(crate) struct Reply {
    /// The message up to its payload (all of it, but for DATA).
    pub(crate) head: Vec<u8>,
    /// DATA's payload: the first `payload_len` bytes of a buffer of the session's pool,
    /// given back once written.
    pub(crate) payload: Vec<u8>,
    pub(crate) payload_len: usize,
}

impl Reply {
    fn of(response: &Response<'_>) -> Self {
        let head = match response.to_vec() {
            Ok(head) => head,
            // Every reply the server makes fits its own limits; were one not to, the
            // client still gets an answer to its request.
            Err(e) => return Self::status(response.id(), StatusCode::FAILURE, &e.to_string()),
        };
        Self {
            head,
            payload: Vec::new(),
            payload_len: 0,
        }
    }

    /// STATUS `code` with `message`.
    pub(crate) fn status(id: u32, code: StatusCode, message: &str) -> Self {
        let response = Response::Status {
            id,
            code,
            message: message.as_bytes(),
            language: b"",
        };
        Self {
            head: response.to_vec().unwrap_or_default(),
            payload: Vec::new(),
            payload_len: 0,
        }
    }

    /// STATUS OK.
    pub(crate) fn ok(id: u32) -> Self {
        Self::status(id, StatusCode::OK, "Success")
    }

    /// The STATUS an I/O error becomes, as OpenSSH's server maps errno.
    pub(crate) fn error(id: u32, e: &io::Error) -> Self {
        let code = match e.kind() {
            io::ErrorKind::NotFound | io::ErrorKind::NotADirectory => StatusCode::NO_SUCH_FILE,
            io::ErrorKind::PermissionDenied => StatusCode::PERMISSION_DENIED,
            io::ErrorKind::InvalidInput => StatusCode::BAD_MESSAGE,
            io::ErrorKind::Unsupported => StatusCode::OP_UNSUPPORTED,
            _ => StatusCode::FAILURE,
        };
        Self::status(id, code, &e.to_string())
    }

    /// A request the server could not make sense of.
    pub(crate) fn bad_message(id: u32, why: &str) -> Self {
        Self::status(id, StatusCode::BAD_MESSAGE, why)
    }

    /// HANDLE.
    pub(crate) fn handle(id: u32, handle: &[u8]) -> Self {
        Self::of(&Response::Handle { id, handle })
    }

    /// ATTRS.
    pub(crate) fn attrs(id: u32, attrs: Attrs<'_>) -> Self {
        Self::of(&Response::Attrs { id, attrs })
    }

    /// DATA: the first `len` bytes of `buf` go out as they are.
    pub(crate) fn data(id: u32, buf: Vec<u8>, len: usize) -> Self {
        let response = Response::Data {
            id,
            data: &buf[..len],
        };
        let mut head = vec![0; response.head_len()];
        match response.emit_head(&mut head) {
            Ok(n) => head.truncate(n),
            Err(e) => return Self::status(id, StatusCode::FAILURE, &e.to_string()),
        }
        Self {
            head,
            payload: buf,
            payload_len: len,
        }
    }

    /// NAME with `entries`.
    pub(crate) fn names(id: u32, entries: &[NameEntry<'_>]) -> Self {
        let size: usize = entries
            .iter()
            .map(|e| 8 + e.filename.len() + e.longname.len() + 64)
            .sum();
        let mut buf = vec![0; size + 8];
        match Names::write(entries, &mut buf) {
            Ok(names) => Self::of(&Response::Name { id, names }),
            Err(e) => Self::status(id, StatusCode::FAILURE, &e.to_string()),
        }
    }

    /// EXTENDED_REPLY with `data`.
    pub(crate) fn extended(id: u32, data: &[u8]) -> Self {
        Self::of(&Response::ExtendedReply { id, data })
    }

    /// NAME with one entry, as REALPATH and READLINK answer.
    pub(crate) fn one_name(id: u32, name: &[u8]) -> Self {
        let entry = NameEntry {
            filename: name,
            longname: name,
            attrs: Attrs::EMPTY,
        };
        Self::names(id, &[entry])
    }
}
