// A call with an argument of the wrong type does not compile.
volley_rpc::service! {
    /// A store.
    pub service Kv {
        /// Stores.
        1 => fn put(key: String) -> u64;
    }
}

async fn call(kv: KvClient) -> Result<u64, volley_rpc::CallError> {
    kv.put(42).await
}

fn main() {
    let _ = call;
}
