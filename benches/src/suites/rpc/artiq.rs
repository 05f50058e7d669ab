//! ARTIQ's `test_performance` shapes as a volley service (bytes, i32 lists and arrays,
//! byte lists, each way, and one-way arrivals), its router, and the table the suite
//! fills in with them over volley TCP.

#[allow(clippy::wildcard_imports)]
use super::*;

// ---------------------------------------------------------------------------------------
// ARTIQ's test_performance shapes, as a volley service.

volley_rpc::service! {
    /// ARTIQ's payload shapes, each way.
    pub(crate) service Artiq {
        /// D2H bytes: the payload comes as a segment.
        1 => fn take_bytes();
        /// H2D bytes: this many bytes back as a segment.
        2 => fn give_bytes(args: u64);
        /// D2H i32 list, through serde.
        3 => fn take_i32_list(args: Vec<i32>);
        /// H2D i32 list, through serde.
        4 => fn give_i32_list(args: u64) -> Vec<i32>;
        /// D2H i32 array: a raw little-endian segment, summed in place.
        5 => fn take_i32_array() -> i64;
        /// H2D i32 array: this many elements back as a segment.
        6 => fn give_i32_array(args: u64);
        /// D2H bytes list: 64 segments.
        7 => fn take_bytes_list();
        /// H2D bytes list: 64 segments totalling this many bytes.
        8 => fn give_bytes_list(args: u64);
        /// One way: a payload; the server notes when it arrived.
        9 => oneway fn async_bytes();
        /// Waits for this many AsyncBytes arrivals; returns first and last arrival (ns
        /// since the server started) and the count.
        10 => fn async_span(args: u64) -> (u64, u64, u64);
    }
}

#[derive(Default)]
pub(super) struct Arrivals {
    first: AtomicU64,
    last: AtomicU64,
    count: AtomicU64,
    notify: tokio::sync::Notify,
}

pub(super) fn artiq_router(
    zeros: Bytes,
    array: Bytes,
    arrivals: Arc<Arrivals>,
    epoch: Instant,
) -> Router<Artiq> {
    let z1 = zeros.clone();
    let z2 = zeros;
    let a2 = arrivals.clone();
    Router::new()
        .route(artiq::TakeBytes, |_call| async move { Ok(Reply::new(())) })
        .route(artiq::GiveBytes, move |call| {
            let zeros = z1.clone();
            async move {
                Ok(Reply::with_segments(
                    (),
                    vec![zeros.slice(..call.args as usize)],
                ))
            }
        })
        .route(artiq::TakeI32List, |call| async move {
            core::hint::black_box(&call.args);
            Ok(Reply::new(()))
        })
        .route(artiq::GiveI32List, |call| async move {
            Ok(Reply::new(vec![123i32; call.args as usize]))
        })
        .route(artiq::TakeI32Array, |mut call| async move {
            let first = call.take_segments().into_iter().next();
            let array = LeArray::<i32>::new(first.unwrap_or_default())?;
            Ok(Reply::new(array.iter().map(i64::from).sum()))
        })
        .route(artiq::GiveI32Array, move |call| {
            let array = array.clone();
            async move {
                Ok(Reply::with_segments(
                    (),
                    vec![array.slice(..4 * call.args as usize)],
                ))
            }
        })
        .route(
            artiq::TakeBytesList,
            |_call| async move { Ok(Reply::new(())) },
        )
        .route(artiq::GiveBytesList, move |call| {
            let zeros = z2.clone();
            async move {
                let each = call.args as usize / 64;
                Ok(Reply::with_segments(
                    (),
                    (0..64)
                        .map(|i| zeros.slice(i * each..(i + 1) * each))
                        .collect(),
                ))
            }
        })
        .route(artiq::AsyncBytes, move |_call| {
            let arrivals = a2.clone();
            async move {
                let now = epoch.elapsed().as_nanos() as u64;
                if arrivals.count.fetch_add(1, Ordering::SeqCst) == 0 {
                    arrivals.first.store(now, Ordering::SeqCst);
                }
                arrivals.last.store(now, Ordering::SeqCst);
                arrivals.notify.notify_waiters();
                Ok(Reply::new(()))
            }
        })
        .route(artiq::AsyncSpan, move |call| {
            let arrivals = arrivals.clone();
            async move {
                loop {
                    let notified = arrivals.notify.notified();
                    tokio::pin!(notified);
                    notified.as_mut().enable();
                    let count = arrivals.count.load(Ordering::SeqCst);
                    if count >= call.args {
                        let span = (
                            arrivals.first.load(Ordering::SeqCst),
                            arrivals.last.load(Ordering::SeqCst),
                            count,
                        );
                        arrivals.count.store(0, Ordering::SeqCst);
                        return Ok(Reply::new(span));
                    }
                    notified.await;
                }
            }
        })
}

/// ARTIQ's test_performance table over volley TCP: mean and std MiB/s per shape.
pub(super) async fn artiq_table(mode: Mode, servers: &Servers, report: &mut Report) -> Table {
    let link = FramedLink::connect_tcp(servers.artiq)
        .await
        .expect("connect");
    let peer: Peer<Artiq> = volley(Config::default(), link).await;
    let iterations = match mode {
        Mode::Quick => 20,
        Mode::Full => 50,
    };
    let mut table = Table {
        title: format!(
            "ARTIQ test_performance shapes over volley TCP ({iterations} iterations each)"
        ),
        columns: vec![
            "payload",
            "size",
            "H2D MiB/s",
            "H2D std",
            "D2H MiB/s",
            "D2H std",
            "H2D CPU µs/call",
            "D2H CPU µs/call",
        ],
        rows: Vec::new(),
    };
    let zeros = Bytes::from(vec![0u8; MIB]);
    for (shape, unit) in [
        ("bytes", 1usize),
        ("i32 list", 4),
        ("i32 array", 4),
        ("bytes list", 1),
    ] {
        for size in [MIB, 1024] {
            let n = (size / unit) as u64;
            let mut h2d = Vec::new();
            let mut d2h = Vec::new();
            // CPU seconds of client and server together, over every iteration.
            let (mut h2d_cpu, mut d2h_cpu) = (0.0, 0.0);
            let list = vec![123i32; n as usize];
            let array = LeArray::from_slice(&list).into_bytes();
            // Each direction's calls in a run of their own, their CPU read around the run
            // (reading it costs the reader a little: once a run, not once a call).
            let cpu = cpu_now();
            for _ in 0..iterations {
                let start = Instant::now();
                match shape {
                    "bytes" => {
                        let r = peer
                            .call_with::<artiq::GiveBytes>(&n, Vec::new(), None)
                            .await
                            .expect("call");
                        assert_eq!(r.segments[0].len(), size);
                    }
                    "i32 list" => assert_eq!(
                        peer.call::<artiq::GiveI32List>(&n)
                            .await
                            .expect("call")
                            .len(),
                        n as usize
                    ),
                    "i32 array" => {
                        let r = peer
                            .call_with::<artiq::GiveI32Array>(&n, Vec::new(), None)
                            .await
                            .expect("call");
                        let a = LeArray::<i32>::new(r.segments[0].clone()).expect("whole");
                        assert_eq!(a.get(a.len() - 1), Some(123));
                    }
                    _ => {
                        let r = peer
                            .call_with::<artiq::GiveBytesList>(&(size as u64), Vec::new(), None)
                            .await
                            .expect("call");
                        assert_eq!(r.segments.len(), 64);
                    }
                }
                h2d.push(size as f64 / MIB as f64 / start.elapsed().as_secs_f64());
            }
            h2d_cpu += cpu_now() - cpu;
            let cpu = cpu_now();
            for _ in 0..iterations {
                let start = Instant::now();
                match shape {
                    "bytes" => {
                        peer.call_with::<artiq::TakeBytes>(&(), vec![zeros.slice(..size)], None)
                            .await
                            .expect("call")
                            .value
                    }
                    "i32 list" => peer.call::<artiq::TakeI32List>(&list).await.expect("call"),
                    "i32 array" => {
                        let sum = peer
                            .call_with::<artiq::TakeI32Array>(&(), vec![array.clone()], None)
                            .await
                            .expect("call")
                            .value;
                        assert_eq!(sum, 123 * n as i64);
                    }
                    _ => {
                        let each = size / 64;
                        let segs = (0..64)
                            .map(|i| zeros.slice(i * each..(i + 1) * each))
                            .collect();
                        peer.call_with::<artiq::TakeBytesList>(&(), segs, None)
                            .await
                            .expect("call")
                            .value
                    }
                }
                d2h.push(size as f64 / MIB as f64 / start.elapsed().as_secs_f64());
            }
            d2h_cpu += cpu_now() - cpu;
            let per_call = |cpu: f64| cpu * 1e6 / f64::from(iterations);
            let (hm, hs) = mean_std(&h2d);
            let (dm, ds) = mean_std(&d2h);
            let size_name = if size == MIB { "1 MB" } else { "1 KB" };
            table.rows.push(vec![
                shape.into(),
                size_name.into(),
                format!("{hm:.1}"),
                format!("{hs:.1}"),
                format!("{dm:.1}"),
                format!("{ds:.1}"),
                format!("{:.1}", per_call(h2d_cpu)),
                format!("{:.1}", per_call(d2h_cpu)),
            ]);
            report.data.push(json!({
                "artiq": shape, "size": size_name, "h2d_mean": hm, "h2d_std": hs,
                "d2h_mean": dm, "d2h_std": ds, "h2d_cpu_us_per_call": per_call(h2d_cpu),
                "d2h_cpu_us_per_call": per_call(d2h_cpu),
            }));
        }
    }
    // Async throughput: 128 one-way calls of 1 MiB, first arrival to last.
    let mut rates = Vec::new();
    let batches = match mode {
        Mode::Quick => 5,
        Mode::Full => 15,
    };
    let cpu = cpu_now();
    for _ in 0..batches {
        for _ in 0..128 {
            peer.send::<artiq::AsyncBytes>(&(), vec![zeros.clone()])
                .await
                .expect("send");
        }
        let (first, last, count) = peer.call::<artiq::AsyncSpan>(&128).await.expect("span");
        assert_eq!(count, 128);
        rates.push((count - 1) as f64 / ((last - first) as f64 / 1e9));
    }
    // Each batch is 128 one-way calls and the span call that ends it.
    let async_cpu = (cpu_now() - cpu) * 1e6 / (batches * 129) as f64;
    let (am, asd) = mean_std(&rates);
    table.rows.push(vec![
        "async (128 x 1 MiB one-way)".into(),
        "1 MB".into(),
        "-".into(),
        "-".into(),
        format!("{am:.1}"),
        format!("{asd:.1}"),
        "-".into(),
        format!("{async_cpu:.1}"),
    ]);
    report.data.push(json!({
        "artiq": "async", "mib_per_sec_mean": am, "mib_per_sec_std": asd,
        "cpu_us_per_call": async_cpu,
    }));
    report.notes.push(
        "ARTIQ shapes: H2D times a call that returns the payload, D2H one that takes it; bytes and \
         i32 array travel as bulk segments (the array as raw little-endian i32, read in place), \
         i32 list through serde, bytes list as 64 segments; async = (n - 1) MiB over first to last arrival; \
         CPU µs/call: client and server threads together (the tuned setup: current-thread runtimes, whose readers spin)"
            .into(),
    );
    table
}

/// CPU seconds so far of the client's and the servers' threads together.
pub(super) fn cpu_now() -> f64 {
    let (client, server) = harness::cpu_split();
    client + server
}

pub(super) fn mean_std(values: &[f64]) -> (f64, f64) {
    let n = values.len().max(1) as f64;
    let mean = values.iter().sum::<f64>() / n;
    let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n;
    (mean, var.sqrt())
}
