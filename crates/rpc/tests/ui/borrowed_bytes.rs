// Borrowed bytes, even inside another type, cannot travel either.
volley_rpc::service! {
    /// A store.
    pub service Kv {
        /// Stores.
        1 => fn put(key: String, values: Option<&[u8]>) -> u64;
    }
}

fn main() {}
