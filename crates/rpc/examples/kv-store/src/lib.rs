//! The key-value service volley-rpc's `kv`, `custom_link` and `reconnecting` examples
//! serve: its declaration and a server-trait implementation over a map. A crate of its
//! own so that the examples share it without including a file by path.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use bytes::Bytes;
use tokio::sync::Notify;
use volley_rpc::{Context, HandlerError};

volley_rpc::service! {
    /// A store of byte values by name.
    pub service Kv {
        /// Stores the call's one bulk segment under `key`; returns the length of the
        /// value it replaced, if there was one.
        1 => fn put(key: String) -> Option<u64>;
        /// Sends the value under `key` back as a bulk segment; says whether there was one.
        2 => fn get(key: String) -> bool;
        /// Removes `key`. One way: nothing comes back.
        3 => oneway fn remove(key: String);
        /// Waits until `key` is there (`present`) or gone (not), and returns how many keys
        /// there are then.
        4 => fn wait_for(key: String, present: bool) -> u64;
    }
}

/// The map, and a signal for every change to it.
#[derive(Default)]
pub struct Store {
    map: Mutex<HashMap<String, Bytes>>,
    changed: Notify,
}

impl Store {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, Bytes>> {
        self.map.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl KvServer for Store {
    async fn put(&self, mut cx: Context<Kv>, key: String) -> Result<Option<u64>, HandlerError> {
        let mut segments = cx.take_segments();
        if segments.len() != 1 {
            return Err(HandlerError::msg(format!(
                "put takes one segment, the value; {} came",
                segments.len()
            )));
        }
        // The segment is a slice of the receive buffer: kept as it came, never copied.
        let value = segments.remove(0);
        let old = self.map().insert(key, value);
        self.changed.notify_waiters();
        Ok(old.map(|v| v.len() as u64))
    }

    async fn get(&self, cx: Context<Kv>, key: String) -> Result<bool, HandlerError> {
        let value = self.map().get(&key).cloned();
        let found = value.is_some();
        cx.reply_segments(value.into_iter().collect());
        Ok(found)
    }

    async fn remove(&self, _cx: Context<Kv>, key: String) -> Result<(), HandlerError> {
        self.map().remove(&key);
        self.changed.notify_waiters();
        Ok(())
    }

    async fn wait_for(
        &self,
        _cx: Context<Kv>,
        key: String,
        present: bool,
    ) -> Result<u64, HandlerError> {
        // The caller's deadline bounds this: the server stops the handler at it.
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            {
                let map = self.map();
                if map.contains_key(&key) == present {
                    return Ok(map.len() as u64);
                }
            }
            changed.await;
        }
    }
}
