//! Several sessions to one server, used as one: a tree's files spread over them, and a
//! large file read or written in ranges, one range a session. Over ssh each session is
//! a login of its own, so each has its own channel window: a link whose round trip is
//! long is not held to one window per round trip.

use std::path::Path;

use futures::StreamExt;

use crate::TransferOptions;
use crate::client::{SftpClient, SftpError};
use crate::get::get_on;
use crate::put::{OnDirectory, put_on};
use crate::ssh::{Destination, SshOptions};
use crate::tree::{TreeEvent, TreeReport, get_tree_on, put_tree_on};

/// At most this many ssh logins are started at once (OpenSSH's `MaxStartups` begins
/// refusing unauthenticated connections past 10 by default).
pub const LOGINS_AT_ONCE: usize = 8;

/// Several sessions to one server.
///
/// ```no_run
/// # async fn demo() -> Result<(), volley_sftp::SftpError> {
/// use volley_sftp::{Remote, Sessions, SshOptions, TransferOptions};
/// let remote = Remote::parse("me@host:big.bin").unwrap().unwrap();
/// let sessions = Sessions::ssh(&remote.destination, &SshOptions::default(), 4).await?;
/// sessions.get(&remote.path, "big.bin", &TransferOptions::default()).await?;
/// sessions.shutdown().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
pub struct Sessions {
    clients: Vec<SftpClient>,
}

impl Sessions {
    /// One session; add more with [`Sessions::push`].
    pub fn new(first: SftpClient) -> Self {
        Self {
            clients: vec![first],
        }
    }

    /// Adds a session to the same server.
    pub fn push(&mut self, more: SftpClient) {
        self.clients.push(more);
    }

    /// `n` (at least 1) ssh logins to `destination`, [`LOGINS_AT_ONCE`] at a time, each
    /// as [`SftpClient::ssh`] makes it. The first failure is the error.
    pub async fn ssh(
        destination: &Destination,
        options: &SshOptions,
        n: usize,
    ) -> Result<Self, SftpError> {
        Self::open(n, |_| SftpClient::ssh(destination, options)).await
    }

    /// `n` (at least 1) sessions made by `open(i)` for i from 0, [`LOGINS_AT_ONCE`]
    /// starting at a time (each login takes round trips; a server limits how many it
    /// takes at once). The first failure is the error.
    pub async fn open<E, F, Fut>(n: usize, open: F) -> Result<Self, E>
    where
        F: FnMut(usize) -> Fut,
        Fut: Future<Output = Result<SftpClient, E>>,
    {
        let clients: Vec<_> = futures::stream::iter(0..n.max(1))
            .map(open)
            .buffered(LOGINS_AT_ONCE)
            .collect()
            .await;
        let clients = clients.into_iter().collect::<Result<Vec<_>, _>>()?;
        Ok(Self { clients })
    }

    /// The first session (for single requests: stat, listings).
    pub fn first(&self) -> &SftpClient {
        &self.clients[0]
    }

    /// How many sessions there are.
    pub fn len(&self) -> usize {
        self.clients.len()
    }

    /// Never: there is always one session at least.
    pub fn is_empty(&self) -> bool {
        self.clients.is_empty()
    }

    /// [`SftpClient::get`], a file of at least two [`PIECE`](crate::PIECE)s read in
    /// pieces, each session taking the next piece until none is left, `opts.requests`
    /// READs deep. A file that shrinks while it is read in pieces fails
    /// ([`SftpError::Shrank`]).
    pub async fn get(
        &self,
        remote: impl AsRef<[u8]>,
        local: impl AsRef<Path>,
        opts: &TransferOptions,
    ) -> Result<u64, SftpError> {
        get_on(&self.clients, remote.as_ref(), local.as_ref(), opts, None).await
    }

    /// [`SftpClient::put`], a regular file of at least two [`PIECE`](crate::PIECE)s
    /// written in pieces, each session taking the next until none is left.
    pub async fn put(
        &self,
        local: impl AsRef<Path>,
        remote: impl AsRef<[u8]>,
        opts: &TransferOptions,
    ) -> Result<u64, SftpError> {
        put_on(
            &self.clients,
            local.as_ref(),
            remote.as_ref(),
            opts,
            OnDirectory::PutInside,
        )
        .await
    }

    /// [`SftpClient::get_tree`], the files spread over the sessions.
    pub async fn get_tree(
        &self,
        remote: impl AsRef<[u8]>,
        local: impl AsRef<Path>,
        opts: &TransferOptions,
        event: impl FnMut(TreeEvent<'_>),
    ) -> Result<TreeReport, SftpError> {
        get_tree_on(&self.clients, remote.as_ref(), local.as_ref(), opts, event).await
    }

    /// [`SftpClient::put_tree`], the files spread over the sessions.
    pub async fn put_tree(
        &self,
        local: impl AsRef<Path>,
        remote: impl AsRef<[u8]>,
        opts: &TransferOptions,
        event: impl FnMut(TreeEvent<'_>),
    ) -> Result<TreeReport, SftpError> {
        put_tree_on(&self.clients, local.as_ref(), remote.as_ref(), opts, event).await
    }

    /// Ends every session; the first failure is the error.
    pub async fn shutdown(self) -> Result<(), SftpError> {
        let ended = futures::future::join_all(self.clients.into_iter().map(SftpClient::shutdown));
        ended.await.into_iter().collect()
    }
}
