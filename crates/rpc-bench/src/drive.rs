//! The bench driver: callers making checked calls, by count or for a time, closed-loop
//! (each caller's next call after its last reply) or open-loop (each call sent at its
//! time, whatever is still in flight).

use core::time::Duration;
use std::time::Instant;

use bytes::Bytes;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use hdrhistogram::Histogram;

use super::{
    ArrivedArgs, Bench, BenchClient, GetArgs, MAX_WINDOW, PushArgs, PutReply, SLACK, offset,
    pattern,
};
use volley_rpc::{CallError, Caller, Codec};

/// The most failure messages an [`BenchRun`] keeps (the count goes on past it).
pub const FAILURES_KEPT: usize = 1000;

/// Which bench call to make.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    /// [`Echo`](super::bench::Echo).
    Echo,
    /// [`Put`](super::bench::Put).
    Put,
    /// [`Get`](super::bench::Get).
    Get,
    /// [`Push`](super::bench::Push) one way, then [`Arrived`](super::bench::Arrived).
    Send,
}

/// One bench run's shape.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spec {
    /// The call.
    pub workload: Workload,
    /// Calls in all, at most.
    pub calls: u64,
    /// Callers sharing the connection; they split the calls. Ignored with `rate`.
    pub concurrency: usize,
    /// Payload bytes (put, get, send; echo always moves 8).
    pub payload: usize,
    /// Calls each caller issues before awaiting their replies; 0 issues all at once.
    pub batch: u64,
    /// Each call's deadline.
    pub deadline: Duration,
    /// Make no call after this long from the start (the calls made by then finish).
    pub duration: Option<Duration>,
    /// Open loop: call `i` is sent at `i / rate` seconds from the start, however many
    /// are in flight, from one caller.
    pub rate: Option<f64>,
}

/// What a bench run measured.
#[derive(Clone, Debug, PartialEq)]
pub struct BenchRun {
    /// Calls made.
    pub calls: u64,
    /// Calls whose content was verified.
    pub ok: u64,
    /// Calls that failed or whose content was wrong.
    pub failed: u64,
    /// Seconds from the first call to the last reply.
    pub secs: f64,
    /// Payload bytes moved.
    pub bytes: u64,
    /// The first error seen, if any.
    pub first_error: Option<String>,
    /// Why each failed call failed, with its index, up to [`FAILURES_KEPT`].
    pub failures: Vec<(u64, String)>,
    /// Connections made again after the first (by a reconnecting client).
    pub reconnects: u64,
    /// CPU seconds (user and system) this process spent during the run: the client's
    /// own, and a server's too if it runs in the same process.
    pub cpu_secs: f64,
    /// Latency percentiles of the calls that succeeded, in microseconds: p50, p99, p99.9,
    /// each call timed from its sending to its reply (open-loop calls are sent at their
    /// time whatever is in flight; tokio's timer may send one up to a millisecond late).
    pub latency_us: [u64; 3],
}

impl BenchRun {
    /// The CLI's last line: `calls=N ok=K failed=F secs=S calls/s=R MiB/s=M reconnects=C
    /// cpu_us_per_call=U p50_us=A p99_us=B p999_us=C` (CPU per call made).
    pub fn line(&self) -> String {
        let secs = self.secs.max(1e-9);
        let [p50, p99, p999] = self.latency_us;
        format!(
            "calls={} ok={} failed={} secs={:.3} calls/s={:.0} MiB/s={:.1} reconnects={} \
             cpu_us_per_call={:.2} p50_us={p50} p99_us={p99} p999_us={p999}",
            self.calls,
            self.ok,
            self.failed,
            self.secs,
            self.ok as f64 / secs,
            self.bytes as f64 / secs / f64::from(1 << 20),
            self.reconnects,
            self.cpu_secs * 1e6 / self.calls.max(1) as f64,
        )
    }
}

/// Tallies of one caller.
struct Tally {
    made: u64,
    ok: u64,
    failed: u64,
    failures: Vec<(u64, String)>,
    /// Microseconds each call that succeeded took.
    latency: Histogram<u64>,
}

impl Default for Tally {
    fn default() -> Self {
        Self {
            made: 0,
            ok: 0,
            failed: 0,
            failures: Vec::new(),
            // 3 significant figures, resized as larger values come.
            latency: Histogram::new(3).expect("3 significant figures is in range"),
        }
    }
}

impl Tally {
    fn count(&mut self, index: u64, result: Result<bool, CallError>, took: Duration) {
        self.made += 1;
        match result {
            Ok(true) => {
                self.ok += 1;
                let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX).max(1);
                // An auto-resizing histogram takes any value.
                let _ = self.latency.record(us);
            }
            Ok(false) => self.fail(index, "a reply's content did not match".into()),
            Err(e) => self.fail(index, e.to_string()),
        }
    }

    fn fail(&mut self, index: u64, e: String) {
        self.failed += 1;
        if self.failures.len() < FAILURES_KEPT {
            self.failures.push((index, e));
        }
    }

    fn add(&mut self, other: Self) {
        self.made += other.made;
        self.ok += other.ok;
        self.failed += other.failed;
        let room = FAILURES_KEPT - self.failures.len();
        self.failures.extend(other.failures.into_iter().take(room));
        let _ = self.latency.add(&other.latency);
    }

    /// p50, p99 and p99.9 in microseconds (0 with no call counted).
    fn percentiles(&self) -> [u64; 3] {
        [0.5, 0.99, 0.999].map(|q| self.latency.value_at_quantile(q))
    }
}

/// CPU seconds (user and system) this process has used so far.
fn cpu_now() -> f64 {
    use nix::sys::resource::{UsageWho, getrusage};
    getrusage(UsageWho::RUSAGE_SELF).map_or(0.0, |u| {
        let secs = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 * 1e-6;
        secs(u.user_time()) + secs(u.system_time())
    })
}

/// What every call of a run shares.
struct Shared<C: Codec> {
    bench: BenchClient<C>,
    spec: Spec,
    pattern: Bytes,
    run_id: u64,
    payload: usize,
    start: Instant,
}

impl<C: Codec> Shared<C> {
    /// Whether a call may still be made.
    fn open(&self) -> bool {
        self.spec.duration.is_none_or(|d| self.start.elapsed() < d)
    }
}

/// Runs `spec` through `caller` and checks every reply.
pub async fn run<C: Codec>(caller: impl Into<Caller<Bench, C>>, spec: Spec) -> BenchRun {
    let caller = caller.into();
    let payload = match spec.workload {
        Workload::Echo => 8,
        _ => spec.payload,
    };
    let run_id = {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        (t.as_nanos() as u64) ^ (u64::from(std::process::id()) << 32)
    };
    // However many calls a batch holds, at most this many exist at once: past the peer's
    // credit they would only wait for it, and a batch of millions must not allocate
    // millions of futures.
    let credit = caller.current().map_or(256, |p| p.peer_hello().credit);
    let window = (credit as usize).clamp(1, MAX_WINDOW);
    let shared = std::sync::Arc::new(Shared {
        bench: BenchClient::new(caller.clone()),
        spec,
        pattern: pattern(payload + SLACK),
        run_id,
        payload,
        start: Instant::now(),
    });
    let cpu_start = cpu_now();
    let mut total = match spec.rate {
        Some(rate) => open_loop(&shared, rate).await,
        None => closed_loop(&shared, window).await,
    };
    if spec.workload == Workload::Send {
        // One-way calls "succeed" once sent; the server says how many arrived intact.
        let made = total.made;
        let args = ArrivedArgs {
            run: run_id,
            expect: made,
            wait_ms: spec.deadline.as_millis() as u64,
        };
        let deadline = spec.deadline + Duration::from_secs(5);
        match shared.bench.arrived(args).deadline(deadline).await {
            Ok(arrived) => {
                total.ok = arrived.min(made);
                total.failed = made - total.ok;
                if total.failed > 0 && total.failures.is_empty() {
                    let why = format!(
                        "the server confirmed {} of {made} one-way payloads",
                        total.ok
                    );
                    total.failures.push((made, why));
                }
            }
            Err(e) => {
                total.ok = 0;
                total.failed = made;
                total.failures.push((made, e.to_string()));
            }
        }
    }
    let secs = shared.start.elapsed().as_secs_f64();
    let cpu_secs = cpu_now() - cpu_start;
    let reconnects = match &caller {
        Caller::Reconnecting(client) => client.reconnects(),
        Caller::Peer(_) => 0,
    };
    BenchRun {
        calls: total.made,
        ok: total.ok,
        failed: total.failed,
        secs,
        bytes: total.ok * payload as u64,
        first_error: total.failures.first().map(|(_, e)| e.clone()),
        latency_us: total.percentiles(),
        failures: total.failures,
        reconnects,
        cpu_secs,
    }
}

/// `concurrency` callers, each making its next batch after the last one's replies.
async fn closed_loop<C: Codec>(shared: &std::sync::Arc<Shared<C>>, window: usize) -> Tally {
    let spec = shared.spec;
    let concurrency = spec.concurrency.max(1) as u64;
    let mut callers = Vec::new();
    for k in 0..concurrency {
        // Caller k makes calls k, k + C, k + 2C, ...
        let shared = shared.clone();
        callers.push(tokio::spawn(async move {
            let mut tally = Tally::default();
            let mut indexes = (k..spec.calls).step_by(concurrency as usize).peekable();
            let batch = match spec.batch {
                0 => usize::MAX,
                n => usize::try_from(n).unwrap_or(usize::MAX),
            };
            let shared = &*shared;
            while indexes.peek().is_some() && shared.open() {
                // Issue the batch (never more than `window` at a time), await all of it.
                let calls = futures::stream::iter(indexes.by_ref().take(batch))
                    .take_while(|_| core::future::ready(shared.open()))
                    .map(|i| async move {
                        let issued = Instant::now();
                        (i, one(shared, i).await, issued.elapsed())
                    })
                    .buffer_unordered(window);
                futures::pin_mut!(calls);
                while let Some((i, result, took)) = calls.next().await {
                    tally.count(i, result, took);
                }
            }
            tally
        }));
    }
    let mut total = Tally::default();
    for caller in callers {
        match caller.await {
            Ok(tally) => total.add(tally),
            Err(e) => total.fail(u64::MAX, format!("a caller task died: {e}")),
        }
    }
    total
}

/// One caller sending call `i` at `i / rate` seconds from the start.
async fn open_loop<C: Codec>(shared: &Shared<C>, rate: f64) -> Tally {
    let mut tally = Tally::default();
    let mut in_flight = FuturesUnordered::new();
    let mut i = 0u64;
    loop {
        let due = shared.start + Duration::from_secs_f64(i as f64 / rate);
        let ended = i >= shared.spec.calls
            || shared
                .spec
                .duration
                .is_some_and(|d| due - shared.start >= d);
        if ended {
            break;
        }
        tokio::select! {
            Some((index, result, took)) = in_flight.next() => tally.count(index, result, took),
            () = tokio::time::sleep_until(due.into()) => {
                let index = i;
                // Timed from its sending: tokio's timer wakes this task up to a millisecond
                // after `due`, which would otherwise be every call's latency.
                in_flight.push(async move {
                    let sent = Instant::now();
                    (index, one(shared, index).await, sent.elapsed())
                });
                i += 1;
            }
        }
    }
    while let Some((index, result, took)) = in_flight.next().await {
        tally.count(index, result, took);
    }
    tally
}

/// One call, checked: Ok(true) when its content is right.
async fn one<C: Codec>(shared: &Shared<C>, index: u64) -> Result<bool, CallError> {
    let Shared {
        bench,
        spec,
        pattern,
        run_id,
        payload,
        ..
    } = shared;
    let (spec, payload) = (*spec, *payload);
    let start = offset(index);
    match spec.workload {
        Workload::Echo => {
            let value = index ^ 0x5a5a_5a5a_5a5a_5a5a;
            Ok(bench.echo(value).deadline(spec.deadline).await? == value)
        }
        Workload::Put => {
            let body = pattern.slice(start..start + payload);
            let want = PutReply {
                len: payload as u64,
                hash: xxhash_rust::xxh3::xxh3_64(&body),
            };
            let reply = bench.put().segment(body).deadline(spec.deadline).await?;
            Ok(reply == want)
        }
        Workload::Get => {
            let args = GetArgs {
                index,
                len: payload as u64,
            };
            let reply = bench.get(args).deadline(spec.deadline).reply().await?;
            let want = &pattern[start..start + payload];
            Ok(reply.segments.len() == 1 && reply.segments[0] == want)
        }
        Workload::Send => {
            let body = pattern.slice(start..start + payload);
            let args = PushArgs {
                run: *run_id,
                index,
            };
            bench.push(args).segment(body).await?;
            Ok(true)
        }
    }
}
