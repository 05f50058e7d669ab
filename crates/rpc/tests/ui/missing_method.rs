// A server that leaves a method out does not compile.
use volley_rpc::{Context, HandlerError};

volley_rpc::service! {
    /// A store.
    pub service Kv {
        /// Stores.
        1 => fn put(key: String) -> u64;
        /// Reads.
        2 => fn get(key: String) -> bool;
    }
}

struct Store;

impl KvServer for Store {
    async fn put(&self, _cx: Context<Kv>, _key: String) -> Result<u64, HandlerError> {
        Ok(0)
    }
}

fn main() {}
