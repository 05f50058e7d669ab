//! [`BufferPool`]: reusable encode buffers. A buffer is a `BytesMut`: what is written into
//! it is frozen into `Bytes` that share its memory (no copy, no allocation), the buffer
//! goes straight back to the pool, and the next message is written after the last in the
//! same memory, which is reclaimed from the start once every message frozen from it has
//! been sent and dropped. Only when a buffer is full while its messages are still in
//! flight does it take fresh memory. Taking a buffer first tries a number of times
//! without yielding (one is usually about to come back), then awaits one. A value whose
//! encoding fits a message's inline room ([`INLINE`](crate::link::INLINE) bytes) takes no
//! buffer at all: it travels in the message itself.

use core::fmt;
use core::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use bytes::{Bytes, BytesMut};
use tokio::sync::Notify;

use crate::config::PoolConfig;

/// How a pool's requests were met.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Buffers taken at the first look.
    pub at_once: u64,
    /// Buffers found while spinning, after the first look failed.
    pub by_spinning: u64,
    /// Buffers that had to be awaited.
    pub awaited: u64,
}

/// A pool of byte buffers; cheap to clone (all clones share the buffers).
#[derive(Clone)]
pub(crate) struct BufferPool {
    inner: Arc<Inner>,
}

struct Inner {
    free: Mutex<Vec<BytesMut>>,
    returned: Notify,
    config: PoolConfig,
    at_once: AtomicU64,
    by_spinning: AtomicU64,
    awaited: AtomicU64,
}

/// A buffer taken from a [`BufferPool`]: write into it (it derefs to `BytesMut`), then
/// [`freeze`](PoolBuf::freeze) what was written into `Bytes`; the buffer goes back to
/// the pool then (or when dropped), its memory shared with the frozen bytes.
pub(crate) struct PoolBuf {
    buf: BytesMut,
    pool: Arc<Inner>,
}

impl BufferPool {
    /// A pool of `config.buffers` buffers of `config.initial` bytes each, each allocated
    /// the first time it is taken (a connection that never sends holds none). Panics on
    /// settings out of range (`buffers` 0 or over 65536); check user input with
    /// [`PoolConfig::check`] first.
    pub(crate) fn new(config: PoolConfig) -> Self {
        config.check().expect("pool settings");
        let free = (0..config.buffers).map(|_| BytesMut::new()).collect();
        Self {
            inner: Arc::new(Inner {
                free: Mutex::new(free),
                returned: Notify::new(),
                config,
                at_once: AtomicU64::new(0),
                by_spinning: AtomicU64::new(0),
                awaited: AtomicU64::new(0),
            }),
        }
    }

    /// A free buffer, without waiting.
    pub(crate) fn try_get(&self) -> Option<PoolBuf> {
        let mut buf = self
            .inner
            .free
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop()?;
        // A buffer is allocated when first taken. After that, a message that does not
        // fit in the rest of it reclaims its memory from the start if every message
        // frozen from it is gone, or else takes fresh memory (BytesMut::reserve).
        if buf.capacity() == 0 {
            buf.reserve(self.inner.config.initial);
        }
        Some(PoolBuf {
            buf,
            pool: self.inner.clone(),
        })
    }

    /// A free buffer if one is free now, counted as taken at once (the look
    /// [`get`](Self::get) starts with).
    pub(crate) fn get_now(&self) -> Option<PoolBuf> {
        let buf = self.try_get()?;
        self.inner.at_once.fetch_add(1, Ordering::Relaxed);
        Some(buf)
    }

    /// A free buffer: looks once, then up to `spin` more times without yielding, then
    /// waits for one to come back.
    pub(crate) async fn get(&self) -> PoolBuf {
        if let Some(buf) = self.get_now() {
            return buf;
        }
        for _ in 0..self.inner.config.spin {
            core::hint::spin_loop();
            if let Some(buf) = self.try_get() {
                self.inner.by_spinning.fetch_add(1, Ordering::Relaxed);
                return buf;
            }
        }
        self.inner.awaited.fetch_add(1, Ordering::Relaxed);
        loop {
            let returned = self.inner.returned.notified();
            tokio::pin!(returned);
            returned.as_mut().enable();
            if let Some(buf) = self.try_get() {
                return buf;
            }
            returned.await;
        }
    }

    /// Buffers free now.
    pub(crate) fn free(&self) -> usize {
        self.inner
            .free
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// How requests were met so far.
    pub(crate) fn stats(&self) -> PoolStats {
        PoolStats {
            at_once: self.inner.at_once.load(Ordering::Relaxed),
            by_spinning: self.inner.by_spinning.load(Ordering::Relaxed),
            awaited: self.inner.awaited.load(Ordering::Relaxed),
        }
    }
}

impl fmt::Debug for BufferPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BufferPool")
            .field("config", &self.inner.config)
            .field("free", &self.free())
            .finish()
    }
}

impl PoolBuf {
    /// What was written, as `Bytes` sharing the buffer's memory (no copy, no
    /// allocation); the buffer goes back to the pool.
    pub(crate) fn freeze(mut self) -> Bytes {
        self.buf.split().freeze()
    }
}

impl core::ops::Deref for PoolBuf {
    type Target = BytesMut;
    fn deref(&self) -> &BytesMut {
        &self.buf
    }
}

impl core::ops::DerefMut for PoolBuf {
    fn deref_mut(&mut self) -> &mut BytesMut {
        &mut self.buf
    }
}

impl AsRef<[u8]> for PoolBuf {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl fmt::Debug for PoolBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PoolBuf")
            .field("len", &self.buf.len())
            .finish()
    }
}

impl Drop for PoolBuf {
    fn drop(&mut self) {
        let mut buf = core::mem::take(&mut self.buf);
        if buf.capacity() > self.pool.config.max_keep {
            buf = BytesMut::new();
        }
        buf.clear();
        self.pool
            .free
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(buf);
        self.pool.returned.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::time::Duration;

    #[tokio::test]
    async fn a_frozen_message_shares_the_buffer_which_comes_back_at_once() {
        let pool = BufferPool::new(PoolConfig {
            buffers: 1,
            initial: 64,
            spin: 0,
            ..PoolConfig::default()
        });
        let mut buf = pool.get().await;
        buf.extend_from_slice(b"hello");
        let start = buf.as_ptr();
        let hello = buf.freeze();
        assert_eq!(&hello[..], b"hello");
        assert_eq!(hello.as_ptr(), start, "frozen in place, not copied");
        assert_eq!(pool.free(), 1, "the buffer is back");
        // The next message goes after it in the same memory while it is still held...
        let mut buf = pool.try_get().unwrap();
        buf.extend_from_slice(b"world");
        let world = buf.freeze();
        assert_eq!(world.as_ptr(), start.wrapping_add(5));
        assert_eq!(&hello[..], b"hello", "the first is untouched");
        // ...and once both are gone, a message that does not fit in the rest reuses the
        // memory from the start.
        drop((hello, world));
        let mut buf = pool.try_get().unwrap();
        buf.extend_from_slice(&[7; 60]);
        assert_eq!(buf.as_ptr(), start, "reclaimed");
        // A waiter is woken when a held buffer comes back.
        let waiter = tokio::spawn({
            let pool = pool.clone();
            async move { pool.get().await.len() }
        });
        tokio::task::yield_now().await;
        drop(buf);
        let len = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("the waiter got the buffer back")
            .unwrap();
        assert_eq!(len, 0, "returned buffers are cleared");
        assert_eq!(pool.stats().awaited, 1);
    }

    #[test]
    fn buffers_are_allocated_when_first_taken() {
        let pool = BufferPool::new(PoolConfig::default());
        let held: usize = pool
            .inner
            .free
            .lock()
            .unwrap()
            .iter()
            .map(BytesMut::capacity)
            .sum();
        assert_eq!(held, 0, "an unused pool holds no buffer memory");
        assert!(pool.try_get().unwrap().capacity() >= PoolConfig::default().initial);
    }

    #[test]
    fn grown_buffers_are_replaced() {
        let pool = BufferPool::new(PoolConfig {
            buffers: 1,
            initial: 16,
            max_keep: 1024,
            spin: 0,
        });
        let mut buf = pool.try_get().unwrap();
        buf.resize(1 << 20, 0);
        drop(buf);
        let again = pool.try_get().unwrap();
        assert!(again.capacity() >= 16 && again.capacity() <= 1024);
        assert!(
            PoolConfig {
                buffers: 0,
                ..PoolConfig::default()
            }
            .check()
            .is_err()
        );
    }
}
