// A borrowed argument cannot travel: the error says what to write instead.
volley_rpc::service! {
    /// A store.
    pub service Kv {
        /// Stores.
        1 => fn put(key: &str, value: Vec<u8>) -> u64;
    }
}

fn main() {}
