//! TLS and QUIC handshakes, each in a task of its own.

use std::io;

use tokio::task::JoinSet;

/// Connections whose handshakes (TLS, QUIC) run in tasks of their own, so a slow one
/// holds up no other; a task yields its link, or `None` once it has logged why not.
pub(crate) struct Handshakes<L> {
    set: JoinSet<Option<(L, String)>>,
}

impl<L: Send + 'static> Handshakes<L> {
    pub(crate) fn new() -> Self {
        Self {
            set: JoinSet::new(),
        }
    }

    /// Handshakes running now.
    pub(crate) fn len(&self) -> usize {
        self.set.len()
    }

    pub(crate) fn spawn(
        &mut self,
        handshake: impl Future<Output = Option<(L, String)>> + Send + 'static,
    ) {
        self.set.spawn(handshake);
    }

    /// Accepts connections (`accept` gives the next, `None` once there are no more) and
    /// hands each to `start` until a handshake yields a link.
    pub(crate) async fn next<T, A>(
        &mut self,
        mut accept: impl FnMut() -> A,
        mut start: impl FnMut(&mut Self, T),
    ) -> Option<io::Result<(L, String)>>
    where
        A: Future<Output = Option<io::Result<T>>>,
    {
        loop {
            tokio::select! {
                accepted = accept() => match accepted? {
                    Ok(accepted) => start(self, accepted),
                    Err(e) => return Some(Err(e)),
                },
                Some(done) = self.set.join_next() => match done {
                    Ok(Some(link)) => return Some(Ok(link)),
                    Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                    Ok(None) | Err(_) => {}
                },
            }
        }
    }
}
