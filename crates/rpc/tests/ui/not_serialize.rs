// An argument serde cannot carry is reported at the method that takes it.
pub struct Opaque;

volley_rpc::service! {
    /// A store.
    pub service Kv {
        /// Reads.
        1 => fn get(key: String) -> bool;
        /// Stores.
        2 => fn put(key: String, value: Opaque) -> u64;
    }
}

fn main() {}
