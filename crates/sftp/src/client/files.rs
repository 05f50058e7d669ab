//! SftpClient's open files: [`RemoteFile`](crate::RemoteFile) handles, and CLOSEs sent
//! without waiting.

use bytes::Bytes;
use volley_proto::sftp::{OpenFlags, Request};

use super::{FileAttrs, Handle, SftpClient, SftpError};
use crate::RemoteFile;

impl SftpClient {
    /// Opens `path` with `flags` as a [`RemoteFile`].
    pub async fn open_file(
        &self,
        path: impl AsRef<[u8]>,
        flags: OpenFlags,
    ) -> Result<RemoteFile<'_>, SftpError> {
        let path = path.as_ref();
        let handle = self.open(path, flags, FileAttrs::default()).await?;
        Ok(RemoteFile::new(self, handle, path.to_vec()))
    }

    /// Creates `path` (or empties it) for reading and writing.
    pub async fn create_file(&self, path: impl AsRef<[u8]>) -> Result<RemoteFile<'_>, SftpError> {
        let flags = OpenFlags::READ | OpenFlags::WRITE | OpenFlags::CREAT | OpenFlags::TRUNC;
        self.open_file(path, flags).await
    }

    /// Queues a CLOSE for `handle` and returns at once; a task sends it and takes the
    /// answer (outside a tokio runtime, nothing is sent: the session's end closes it).
    pub(crate) fn close_in_background(&self, handle: Handle) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let request = Request::Close {
            id: 0,
            handle: &handle.0,
        };
        let mut head = vec![0; request.body_head_len()];
        let Ok(n) = request.emit_body_head(&mut head) else {
            return;
        };
        head.truncate(n);
        let ty = request.packet_type().0;
        let (conn, timeout) = (self.conn.clone(), self.timeout);
        runtime.spawn(async move {
            let mut pipeline = conn.pipeline();
            if pipeline.send(ty, &head, Bytes::new()).await.is_ok() {
                let _ = pipeline.recv_timeout(timeout).await;
            }
        });
    }
}
