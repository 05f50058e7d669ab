// A one-way method cannot declare a result: nothing comes back.
volley_rpc::service! {
    /// A store.
    pub service Kv {
        /// Forgets.
        1 => oneway fn forget(key: String) -> u64;
    }
}

fn main() {}
