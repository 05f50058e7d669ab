//! [`BufferPool`]: reusable buffers shared by `Arc` between the task that fills one and
//! the task that sends it, returned to the pool when the last reference drops. Taking a
//! buffer first tries a number of times without yielding (a buffer is usually about to
//! come back: the writer is finishing with it), then awaits one.

use core::fmt;
use core::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use tokio::sync::Notify;

/// How a pool is sized and how hard it tries before waiting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolConfig {
    /// Buffers in the pool (1..=65536).
    pub buffers: usize,
    /// Bytes each buffer starts with; a buffer that grew is kept up to `max_keep`.
    pub initial: usize,
    /// A buffer that grew beyond this is replaced with a fresh one when it comes back, so
    /// one large message does not pin its memory in the pool.
    pub max_keep: usize,
    /// Times to look for a free buffer without yielding before awaiting one (ARTIQ's
    /// figure: 100); 0 awaits at once.
    pub spin: u32,
}

impl Default for PoolConfig {
    fn default() -> Self {
        Self {
            buffers: 256,
            initial: 4096,
            max_keep: 64 * 1024,
            spin: 100,
        }
    }
}

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
pub struct BufferPool {
    inner: Arc<Inner>,
}

struct Inner {
    free: Mutex<Vec<Vec<u8>>>,
    returned: Notify,
    config: PoolConfig,
    at_once: AtomicU64,
    by_spinning: AtomicU64,
    awaited: AtomicU64,
}

/// A buffer taken from a [`BufferPool`]: write into it (it derefs to `Vec<u8>`), then
/// [`freeze`](PoolBuf::freeze) it into `Bytes` to share; it goes back to the pool when
/// the last reference drops.
pub struct PoolBuf {
    buf: Vec<u8>,
    pool: Arc<Inner>,
}

impl BufferPool {
    /// A pool of `config.buffers` buffers of `config.initial` bytes each, each allocated
    /// the first time it is taken (a connection that never sends holds none). Panics on
    /// settings out of range (`buffers` 0 or over 65536); check user input with
    /// [`PoolConfig::check`] first.
    pub fn new(config: PoolConfig) -> Self {
        config.check().expect("pool settings");
        let free = (0..config.buffers).map(|_| Vec::new()).collect();
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
    pub fn try_get(&self) -> Option<PoolBuf> {
        let mut buf = self
            .inner
            .free
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop()?;
        if buf.capacity() == 0 {
            buf.reserve_exact(self.inner.config.initial);
        }
        Some(PoolBuf {
            buf,
            pool: self.inner.clone(),
        })
    }

    /// A free buffer: looks once, then up to `spin` more times without yielding, then
    /// waits for one to come back.
    pub async fn get(&self) -> PoolBuf {
        if let Some(buf) = self.try_get() {
            self.inner.at_once.fetch_add(1, Ordering::Relaxed);
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
    pub fn free(&self) -> usize {
        self.inner
            .free
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// The settings.
    pub fn config(&self) -> PoolConfig {
        self.inner.config
    }

    /// How requests were met so far.
    pub fn stats(&self) -> PoolStats {
        PoolStats {
            at_once: self.inner.at_once.load(Ordering::Relaxed),
            by_spinning: self.inner.by_spinning.load(Ordering::Relaxed),
            awaited: self.inner.awaited.load(Ordering::Relaxed),
        }
    }
}

impl PoolConfig {
    /// Checks the settings' ranges.
    pub fn check(&self) -> Result<(), String> {
        if !(1..=65536).contains(&self.buffers) {
            return Err(format!(
                "pool buffers must be 1..=65536, not {}",
                self.buffers
            ));
        }
        if self.initial > self.max_keep {
            return Err(format!(
                "pool initial size {} is over max_keep {}",
                self.initial, self.max_keep
            ));
        }
        Ok(())
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
    /// Shares the buffer as `Bytes` (no copy); it returns to the pool when the last clone
    /// drops.
    pub fn freeze(self) -> Bytes {
        Bytes::from_owner(self)
    }
}

impl core::ops::Deref for PoolBuf {
    type Target = Vec<u8>;
    fn deref(&self) -> &Vec<u8> {
        &self.buf
    }
}

impl core::ops::DerefMut for PoolBuf {
    fn deref_mut(&mut self) -> &mut Vec<u8> {
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
            buf = Vec::new();
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
    async fn buffers_come_back_when_the_last_share_drops() {
        let pool = BufferPool::new(PoolConfig {
            buffers: 1,
            spin: 0,
            ..PoolConfig::default()
        });
        let mut buf = pool.get().await;
        buf.extend_from_slice(b"hello");
        let bytes = buf.freeze();
        let clone = bytes.slice(1..);
        assert_eq!(pool.free(), 0);
        assert!(pool.try_get().is_none());
        drop(bytes);
        assert_eq!(pool.free(), 0, "a slice still shares it");
        // A waiter is woken by the return.
        let waiter = tokio::spawn({
            let pool = pool.clone();
            async move { pool.get().await.len() }
        });
        tokio::task::yield_now().await;
        drop(clone);
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
            .map(Vec::capacity)
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
