//! What a declaration may name: two services with a method of one name in one module,
//! methods named like the generated helpers (`new`, `caller`, `into_router`) or like a
//! keyword (`r#type`), and argument types derived through `volley_rpc::serde`.

use volley_rpc::serde::{Deserialize, Serialize};
use volley_rpc::{Config, Context, Endpoint, HandlerError, Method, Service, link::local};

mod common;
use common::within;

/// Derived through volley-rpc's re-export, as a crate without serde of its own does.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(crate = "volley_rpc::serde")]
pub struct Entry {
    key: String,
    value: Vec<u8>,
}

volley_rpc::service! {
    /// A store.
    pub service Kv {
        /// The entry under a key.
        1 => fn get(key: String) -> Option<Entry>;
        /// Makes an entry; a method named like the client's constructor.
        2 => fn new(key: String, value: Vec<u8>) -> Entry;
        /// Named like the client's accessor.
        3 => fn caller() -> String;
        /// Named like the server trait's helper.
        4 => fn into_router() -> u32;
        /// A keyword, written raw.
        5 => fn r#type() -> String;
    }
}

volley_rpc::service! {
    /// Another service in the same module, with a `get` of its own.
    pub(crate) service Cache {
        /// A number.
        1 => fn get(key: u32) -> u32;
    }
}

struct Store;

impl KvServer for Store {
    async fn get(&self, _cx: Context<Kv>, key: String) -> Result<Option<Entry>, HandlerError> {
        Ok(Some(Entry {
            key,
            value: vec![1],
        }))
    }

    async fn new(
        &self,
        _cx: Context<Kv>,
        key: String,
        value: Vec<u8>,
    ) -> Result<Entry, HandlerError> {
        Ok(Entry { key, value })
    }

    async fn caller(&self, _cx: Context<Kv>) -> Result<String, HandlerError> {
        Ok("caller".to_owned())
    }

    async fn into_router(&self, _cx: Context<Kv>) -> Result<u32, HandlerError> {
        Ok(4)
    }

    async fn r#type(&self, _cx: Context<Kv>) -> Result<String, HandlerError> {
        Ok("type".to_owned())
    }
}

struct Twice;

impl CacheServer for Twice {
    async fn get(&self, _cx: Context<Cache>, key: u32) -> Result<u32, HandlerError> {
        Ok(key * 2)
    }
}

#[test]
fn markers_live_in_a_module_per_service() {
    assert_eq!(<kv::Get as Method>::ID, 1);
    assert_eq!(<cache::Get as Method>::ID, 1);
    assert_ne!(Kv::FINGERPRINT, Cache::FINGERPRINT);
    assert_eq!(<kv::Type as Method>::NAME, "type");
    assert_eq!(Kv::method_name(5), Some("type"));
    assert_eq!(Kv::method_name(2), Some("new"));
}

#[tokio::test]
async fn methods_named_like_helpers_and_keywords_are_called() {
    within(30, async {
        let server = Endpoint::<Kv>::new(Config::default())
            .unwrap()
            .serve(Kv::router(Store));
        let client = Endpoint::<Kv>::new(Config::default()).unwrap();
        let (a, b) = local::pair(64);
        let (_server, peer) = tokio::try_join!(server.connect(a), client.connect(b)).unwrap();
        // `new` is the service's method, so the client is made with `From`.
        let kv = KvClient::from(peer);

        let made = kv.new("k".into(), vec![7, 8]).await.unwrap();
        assert_eq!(
            made,
            Entry {
                key: "k".into(),
                value: vec![7, 8]
            }
        );
        assert_eq!(kv.caller().await.unwrap(), "caller");
        assert_eq!(kv.into_router().await.unwrap(), 4);
        assert_eq!(kv.r#type().await.unwrap(), "type");
        assert_eq!(kv.get("g".into()).await.unwrap().unwrap().key, "g");

        let server = Endpoint::<Cache>::new(Config::default())
            .unwrap()
            .serve(Twice.into_router());
        let client = Endpoint::<Cache>::new(Config::default()).unwrap();
        let (a, b) = local::pair(64);
        let (_server, peer) = tokio::try_join!(server.connect(a), client.connect(b)).unwrap();
        let cache = CacheClient::new(peer);
        assert_eq!(cache.get(21).await.unwrap(), 42);
        assert!(cache.caller().current().is_some());
    })
    .await;
}
