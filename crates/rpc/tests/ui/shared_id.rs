// Two methods with one id do not compile.
volley_rpc::service! {
    /// A store.
    pub service Kv {
        /// Stores.
        1 => fn put(key: String) -> u64;
        /// Reads.
        1 => fn get(key: String) -> bool;
    }
}

fn main() {}
