// Two names that make one marker type are refused, naming both.
volley_rpc::service! {
    /// A store.
    pub service Kv {
        /// Stores.
        1 => fn put_file(key: String);
        /// Also stores.
        2 => fn put__file(key: String);
    }
}

fn main() {}
