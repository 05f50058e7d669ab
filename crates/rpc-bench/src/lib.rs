//! The bench service that `volley rpc serve` runs and `volley rpc bench` drives, and the
//! driver itself, so that the CLI and the benchmark suites measure the same thing.
//!
//! Every call's content is checked: `echo` returns its 8 bytes; `put` returns the
//! length and xxh3 hash of the segment sent; `get` returns a slice of one fixed
//! pseudo-random pattern at an offset derived from the call's index (so a reply handed
//! to the wrong call fails the check, and the server sends a slice of the pattern without
//! copying it); `send` delivers payloads one way, each checked by the server, then asks
//! how many arrived intact.
//!
//! ```
//! use std::sync::Arc;
//! use volley_rpc::{Bincode, Config, Endpoint, link::local};
//! use volley_rpc_bench::{Bench, BenchClient, BenchState};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let router = volley_rpc_bench::router::<Bincode>(Arc::new(BenchState::default()));
//! let server = Endpoint::<Bench>::new(Config::default())?.serve(router);
//! let client = Endpoint::<Bench>::new(Config::default())?;
//! let (a, b) = local::pair(64);
//! let (_server, peer) = tokio::try_join!(server.connect(a), client.connect(b))?;
//! assert_eq!(BenchClient::new(peer).echo(42).await?, 42);
//! # Ok(())
//! # }
//! ```

use core::sync::atomic::{AtomicU64, Ordering};
use core::time::Duration;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

use volley_rpc::{Codec, Context, HandlerError, Router};

mod drive;
pub use drive::{BenchRun, FAILURES_KEPT, Spec, Workload, run};

volley_rpc::service! {
    /// The bench service.
    pub service Bench {
        /// 8 bytes there, the same 8 back.
        1 => fn echo(n: u64) -> u64;
        /// A payload up as a bulk segment; back its length and 64-bit xxh3 hash.
        2 => fn put() -> PutReply;
        /// The call's index and a length up; that many bytes of the pattern back as a
        /// segment, from the offset `bench::offset` gives the index.
        3 => fn get(args: GetArgs);
        /// One way: a payload as a segment, the pattern's bytes at its index's offset; the
        /// server checks it and counts it for its run.
        4 => oneway fn push(args: PushArgs);
        /// Waits until `expect` payloads of the run have arrived intact, or `wait_ms`
        /// has passed; returns how many have.
        5 => fn arrived(args: ArrivedArgs) -> u64;
    }
}

/// [`Put`](bench::Put)'s result.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PutReply {
    /// Bytes received.
    pub len: u64,
    /// Their xxh3-64 hash.
    pub hash: u64,
}

/// [`Get`](bench::Get)'s arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GetArgs {
    /// The call's index.
    pub index: u64,
    /// Bytes wanted.
    pub len: u64,
}

/// [`Push`](bench::Push)'s arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PushArgs {
    /// The run it belongs to (a random number per bench run).
    pub run: u64,
    /// The call's index.
    pub index: u64,
}

/// [`Arrived`](bench::Arrived)'s arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArrivedArgs {
    /// The run.
    pub run: u64,
    /// Payloads expected.
    pub expect: u64,
    /// Longest to wait, in milliseconds.
    pub wait_ms: u64,
}

/// Where in the pattern call `index`'s bytes start: 0..4096, different for neighbours.
pub fn offset(index: u64) -> usize {
    (index.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 52) as usize
}

/// Bytes of pattern beyond the largest payload, room for every offset.
const SLACK: usize = 4096;

/// The pattern: xorshift64 from a fixed seed, `len` bytes. Shared by server and client.
pub fn pattern(len: usize) -> Bytes {
    let mut x: u64 = 0x2545_F491_4F6C_DD1D;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out.into()
}

/// Most calls of one caller's batch in existence at once.
const MAX_WINDOW: usize = 4096;

/// Most runs whose one-way counts a server remembers.
const RUNS_KEPT: usize = 64;

/// The largest payload of `get`, `put` and `send`: the largest message the CLI's ends
/// take (16 MiB), less room for the head and arguments.
pub const MAX_PAYLOAD: usize = (16 << 20) - 4096;

/// The bench service's state on a server: the pattern, and one-way arrivals per run.
#[derive(Debug, Default)]
pub struct BenchState {
    /// Made once, at its largest, off the connection's reader: a call can neither make
    /// the server build more than [`MAX_PAYLOAD`] of it nor pin older, smaller copies.
    pattern: tokio::sync::OnceCell<Bytes>,
    runs: Mutex<(HashMap<u64, Run>, VecDeque<u64>)>,
    bad: AtomicU64,
}

/// One run's one-way arrivals, and who waits for them.
#[derive(Debug, Default)]
struct Run {
    count: u64,
    arrived: Arc<Notify>,
}

impl BenchState {
    /// The pattern, [`MAX_PAYLOAD`] bytes and room for every offset; made on a blocking
    /// thread the first time it is needed.
    async fn pattern(&self) -> Result<Bytes, HandlerError> {
        self.pattern
            .get_or_try_init(|| async {
                tokio::task::spawn_blocking(|| pattern(MAX_PAYLOAD + SLACK))
                    .await
                    .map_err(|e| HandlerError::msg(format!("making the pattern: {e}")))
            })
            .await
            .cloned()
    }

    /// A run's count so far, and what is notified when it grows.
    fn run(&self, run: u64) -> (u64, Arc<Notify>) {
        let mut runs = self.runs.lock().unwrap_or_else(PoisonError::into_inner);
        let (counts, order) = &mut *runs;
        let entry = Self::entry(counts, order, run);
        (entry.count, entry.arrived.clone())
    }

    fn add(&self, run: u64) {
        let mut runs = self.runs.lock().unwrap_or_else(PoisonError::into_inner);
        let (counts, order) = &mut *runs;
        let entry = Self::entry(counts, order, run);
        entry.count += 1;
        // Wakes only the handlers waiting on this run.
        let arrived = entry.arrived.clone();
        drop(runs);
        arrived.notify_waiters();
    }

    /// A run's entry, made (and the oldest forgotten past [`RUNS_KEPT`]) if new.
    fn entry<'a>(
        counts: &'a mut HashMap<u64, Run>,
        order: &mut VecDeque<u64>,
        run: u64,
    ) -> &'a mut Run {
        if !counts.contains_key(&run) {
            if order.len() == RUNS_KEPT {
                if let Some(old) = order.pop_front() {
                    counts.remove(&old);
                }
            }
            order.push_back(run);
        }
        counts.entry(run).or_default()
    }

    /// One-way payloads that failed their check.
    pub fn bad(&self) -> u64 {
        self.bad.load(Ordering::Relaxed)
    }
}

/// The bench service's router over `state`.
pub fn router<C: Codec>(state: Arc<BenchState>) -> Router<Bench, Bench, C> {
    Handlers(state).into_router()
}

/// The bench service's handlers.
struct Handlers(Arc<BenchState>);

impl<C: Codec> BenchServer<Bench, C> for Handlers {
    async fn echo(&self, _cx: Context<Bench, C>, n: u64) -> Result<u64, HandlerError> {
        Ok(n)
    }

    async fn put(&self, cx: Context<Bench, C>) -> Result<PutReply, HandlerError> {
        let mut hasher = xxhash_rust::xxh3::Xxh3::new();
        let mut len = 0;
        for segment in cx.segments() {
            hasher.update(segment);
            len += segment.len() as u64;
        }
        Ok(PutReply {
            len,
            hash: hasher.digest(),
        })
    }

    async fn get(&self, cx: Context<Bench, C>, args: GetArgs) -> Result<(), HandlerError> {
        let len = usize::try_from(args.len)
            .ok()
            .filter(|&len| len <= MAX_PAYLOAD)
            .ok_or_else(|| HandlerError::msg(format!("get: at most {MAX_PAYLOAD} bytes")))?;
        let start = offset(args.index);
        let pattern = self.0.pattern().await?;
        cx.reply_segments(vec![pattern.slice(start..start + len)]);
        Ok(())
    }

    async fn push(&self, cx: Context<Bench, C>, args: PushArgs) -> Result<(), HandlerError> {
        let state = &self.0;
        let segments = cx.segments();
        let got = segments.first().map(|s| &s[..]).unwrap_or(&[]);
        let start = offset(args.index);
        let want = state.pattern().await?;
        if segments.len() == 1 && got.len() <= MAX_PAYLOAD && got == &want[start..start + got.len()]
        {
            state.add(args.run);
            Ok(())
        } else {
            state.bad.fetch_add(1, Ordering::Relaxed);
            Err(HandlerError::msg(format!(
                "push {} of run {}: payload does not match the pattern",
                args.index, args.run
            )))
        }
    }

    async fn arrived(
        &self,
        _cx: Context<Bench, C>,
        args: ArrivedArgs,
    ) -> Result<u64, HandlerError> {
        let state = &self.0;
        let until = Instant::now() + Duration::from_millis(args.wait_ms.min(600_000));
        loop {
            let (_, notify) = state.run(args.run);
            let arrived = notify.notified();
            tokio::pin!(arrived);
            arrived.as_mut().enable();
            let (count, _) = state.run(args.run);
            if count >= args.expect {
                return Ok(count);
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() || tokio::time::timeout(left, arrived).await.is_err() {
                return Ok(state.run(args.run).0);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_spread_and_stay_in_the_slack() {
        let offsets: Vec<usize> = (0..64).map(offset).collect();
        assert!(offsets.iter().all(|&o| o < SLACK));
        for w in offsets.windows(2) {
            assert_ne!(w[0], w[1]);
        }
        assert_eq!(pattern(100)[..], pattern(200)[..100]);
    }
}
