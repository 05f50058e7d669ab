//! One session: a reader takes requests off the input in order and hands them to a pool
//! of threads; a writer sends each reply as it completes. What orders them is
//! [`Gate`]; what bounds their memory is [`Budget`].

use std::io::{self, BufWriter, IoSlice, Read, Write};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use bytes::BytesMut;
use volley_proto::sftp::{Pairs, Request, Response, VERSION};
use volley_proto::wire::frame::{Decoder, Frame};

use crate::config::Config;
use crate::exec::Session;
use crate::handles::Handles;
use crate::op::{Op, Order};
use crate::reply::Reply;

/// How much of the input is read at once.
const READ_CHUNK: usize = 256 << 10;

/// What a session did, for its log line at the end.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Requests answered.
    pub requests: u64,
    /// Bytes of READ data sent.
    pub bytes_read: u64,
    /// Bytes of WRITE data taken.
    pub bytes_written: u64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Orders requests: a shared one runs beside other shared ones; one that runs alone
/// waits for every request before it and holds up every one after it. The reader takes
/// the gate in the order requests arrive, so that order is kept where it matters.
#[derive(Default)]
struct Gate {
    state: Mutex<(usize, bool)>,
    changed: Condvar,
}

impl Gate {
    fn enter(&self, order: Order) {
        let mut state = lock(&self.state);
        loop {
            let (shared, alone) = *state;
            let free = match order {
                Order::Shared => !alone,
                Order::Alone => !alone && shared == 0,
            };
            if free {
                break;
            }
            state = self
                .changed
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
        match order {
            Order::Shared => state.0 += 1,
            Order::Alone => state.1 = true,
        }
    }

    fn leave(&self, order: Order) {
        let mut state = lock(&self.state);
        match order {
            Order::Shared => state.0 -= 1,
            Order::Alone => state.1 = false,
        }
        self.changed.notify_all();
    }
}

/// Bytes the requests in hand and the replies not yet written may hold: the reader waits
/// for room before it takes a request on, so a client that stops reading replies stops
/// the server reading its requests, and memory stays bounded.
struct Budget {
    used: Mutex<usize>,
    freed: Condvar,
    limit: usize,
}

impl Budget {
    fn take(&self, cost: usize) {
        let mut used = lock(&self.used);
        // One request larger than the whole budget still runs, alone.
        while *used > 0 && *used + cost > self.limit {
            used = self
                .freed
                .wait(used)
                .unwrap_or_else(PoisonError::into_inner);
        }
        *used += cost;
    }

    fn give(&self, cost: usize) {
        *lock(&self.used) -= cost;
        self.freed.notify_all();
    }
}

/// A request on its way to a pool thread.
struct Job {
    /// Its place among the session's replies.
    seq: u64,
    id: u32,
    op: Op,
    order: Order,
    cost: usize,
}

/// Serves one SFTP session: requests from `input`, replies to `output`, until `input`
/// ends. An error when the input breaks SFTP's framing (a length past the limit) or
/// the output cannot be written.
pub fn serve<R: Read, W: Write + Send>(
    mut input: R,
    output: W,
    config: &Config,
) -> io::Result<Report> {
    config
        .check()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
    let session = Session {
        handles: Handles::new(config.max_handles),
        max_io: config.max_io,
        // As many as the budget lets be in flight, and one a thread.
        buffers: crate::exec::Buffers::new(
            config.max_io as usize,
            config.budget / config.max_io as usize + config.threads,
        ),
    };
    let gate = Gate::default();
    let budget = Budget {
        used: Mutex::new(0),
        freed: Condvar::new(),
        limit: config.budget,
    };
    let decoder = Decoder::new(config.max_packet() as usize + 4);
    let (to_writer, replies) = mpsc::channel::<Answer>();
    let (to_pool, jobs) = mpsc::channel::<Job>();
    let jobs = Arc::new(Mutex::new(jobs));
    let mut report = Report::default();
    std::thread::scope(|scope| -> io::Result<()> {
        let (in_order, budget_ref) = (config.in_order, &budget);
        let buffers = &session.buffers;
        let writer =
            scope.spawn(move || write_replies(output, replies, budget_ref, buffers, in_order));
        for _ in 0..config.threads {
            let (jobs, to_writer) = (jobs.clone(), to_writer.clone());
            let (session, gate) = (&session, &gate);
            scope.spawn(move || {
                loop {
                    let Ok(job) = lock(&jobs).recv() else { return };
                    let reply = session.run(job.id, job.op);
                    gate.leave(job.order);
                    if to_writer.send((job.seq, reply, job.cost)).is_err() {
                        return;
                    }
                }
            });
        }
        let read = read_requests(
            &mut input,
            &decoder,
            config,
            &gate,
            &budget,
            &to_pool,
            &to_writer,
            &mut report,
        );
        drop((to_pool, to_writer));
        let written = writer
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p));
        report.bytes_read = written?;
        read
    })?;
    Ok(report)
}

/// Reads requests until the input ends, answering INIT and what cannot run itself, and
/// handing the rest to the pool in order.
#[allow(clippy::too_many_arguments)]
fn read_requests(
    input: &mut impl Read,
    decoder: &Decoder,
    config: &Config,
    gate: &Gate,
    budget: &Budget,
    to_pool: &mpsc::Sender<Job>,
    to_writer: &mpsc::Sender<Answer>,
    report: &mut Report,
) -> io::Result<()> {
    let mut buf = BytesMut::with_capacity(READ_CHUNK);
    let mut started = false;
    // Each request's place among the replies, in the order the requests came.
    let mut seq = 0u64;
    loop {
        let framed = decoder.frame_len(&buf).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("the client's framing is lost: {e}"),
            )
        })?;
        let Some(len) = framed.filter(|&len| buf.len() >= len) else {
            if fill(input, &mut buf, framed)? == 0 {
                return Ok(());
            }
            continue;
        };
        let bytes = buf.split_to(len).freeze();
        let (frame, _) = decoder
            .decode(&bytes)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "a frame cut short"))?;
        report.requests += 1;
        let this = seq;
        seq += 1;
        let send = |reply: Reply| to_writer.send((this, reply, 0)).map_err(|_| broken());
        let request = match parse_lenient(frame) {
            Ok(request) => request,
            Err(e) => {
                let why = format!(
                    "cannot parse the request (type {}, {} bytes): {e}",
                    frame.ty, len
                );
                send(Reply::bad_message(frame.id, &why))?;
                continue;
            }
        };
        if let Request::Init { .. } = request {
            started = true;
            send(version())?;
            continue;
        }
        if !started {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "the client sent a request before INIT",
            ));
        }
        let id = request.id();
        let Some(op) = Op::new(&request, &bytes) else {
            continue;
        };
        match op.name() {
            None => send(Reply::status(
                id,
                volley_proto::sftp::StatusCode::OP_UNSUPPORTED,
                "no such extension",
            ))?,
            Some(name) if !config.permits(name) => send(Reply::status(
                id,
                volley_proto::sftp::StatusCode::PERMISSION_DENIED,
                &format!("the server does not allow {name}"),
            ))?,
            Some(_) if config.read_only && op.writes() => send(Reply::status(
                id,
                volley_proto::sftp::StatusCode::PERMISSION_DENIED,
                "the server is read-only",
            ))?,
            Some(_) => {
                if let Op::Write { data, .. } = &op {
                    report.bytes_written += data.len() as u64;
                }
                let (order, cost) = (op.order(), op.cost(config.max_io));
                budget.take(cost);
                gate.enter(order);
                to_pool
                    .send(Job {
                        seq: this,
                        id,
                        op,
                        order,
                        cost,
                    })
                    .map_err(|_| broken())?;
            }
        }
    }
}

/// `frame` as a request, bytes after its last field ignored as OpenSSH's server ignores
/// them (rclone's sftp client sends WRITEs whose frame runs on past their data).
fn parse_lenient(frame: Frame<'_>) -> Result<Request<'_>, volley_proto::wire::Error> {
    match Request::parse(frame) {
        Err(volley_proto::wire::Error::TrailingBytes { extra, .. })
            if extra <= frame.body.len() =>
        {
            let body = &frame.body[..frame.body.len() - extra];
            Request::parse(Frame { body, ..frame })
        }
        other => other,
    }
}

/// Reads more input into `buf` (room for the frame `framed` says is coming, at least a
/// chunk): the bytes read, 0 at the end of the input.
fn fill(input: &mut impl Read, buf: &mut BytesMut, framed: Option<usize>) -> io::Result<usize> {
    let at = buf.len();
    let want = framed.map_or(READ_CHUNK, |len| (len - at).max(READ_CHUNK));
    buf.resize(at + want, 0);
    let n = loop {
        match input.read(&mut buf[at..]) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            other => break other,
        }
    };
    buf.truncate(at + *n.as_ref().unwrap_or(&0));
    n
}

fn broken() -> io::Error {
    io::Error::new(
        io::ErrorKind::BrokenPipe,
        "the server's threads have stopped",
    )
}

/// VERSION 3, naming every extension.
fn version() -> Reply {
    let names: Vec<(&[u8], &[u8])> = crate::config::advertised().collect();
    let mut buf = vec![0; 1024];
    let head = Pairs::write(&names, &mut buf).ok().and_then(|extensions| {
        Response::Version {
            version: VERSION,
            extensions,
        }
        .to_vec()
        .ok()
    });
    Reply {
        head: head.unwrap_or_default(),
        payload: Vec::new(),
        payload_len: 0,
    }
}

/// A reply on its way to the writer: its place in the session's order, the reply, and
/// what it costs the budget until written.
type Answer = (u64, Reply, usize);

/// Writes replies, buffered while more are queued and flushed when none is; a reply's
/// DATA goes out from its own buffer. `in_order`: each waits for the replies to the
/// requests before it (as OpenSSH's server answers, and as OpenSSH's clients count
/// acknowledgements); else each goes as it completes. Gives each reply's cost back
/// once it is written. The DATA bytes it sent.
fn write_replies(
    output: impl Write,
    replies: mpsc::Receiver<Answer>,
    budget: &Budget,
    buffers: &crate::exec::Buffers,
    in_order: bool,
) -> io::Result<u64> {
    let mut out = BufWriter::with_capacity(64 << 10, output);
    let mut sent = 0u64;
    // Replies done ahead of their turn, and the turn.
    let mut early = std::collections::BTreeMap::new();
    let mut turn = 0u64;
    let mut next = replies.recv().ok();
    while let Some((seq, reply, cost)) = next {
        early.insert(seq, (reply, cost));
        while let Some((reply, cost)) = match in_order {
            true => early.remove(&turn),
            false => early.pop_first().map(|(_, answer)| answer),
        } {
            let payload = &reply.payload[..reply.payload_len];
            write_all_vectored(&mut out, &reply.head, payload)?;
            sent += payload.len() as u64;
            if !reply.payload.is_empty() {
                buffers.give(reply.payload);
            }
            budget.give(cost);
            turn += 1;
        }
        next = match replies.try_recv() {
            Ok(more) => Some(more),
            Err(mpsc::TryRecvError::Empty) => {
                out.flush()?;
                replies.recv().ok()
            }
            Err(mpsc::TryRecvError::Disconnected) => None,
        };
    }
    out.flush()?;
    Ok(sent)
}

fn write_all_vectored(out: &mut impl Write, head: &[u8], payload: &[u8]) -> io::Result<()> {
    let (mut head, mut payload) = (head, payload);
    while !head.is_empty() || !payload.is_empty() {
        let n = out.write_vectored(&[IoSlice::new(head), IoSlice::new(payload)])?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                "the client stopped reading",
            ));
        }
        let from_head = n.min(head.len());
        head = &head[from_head..];
        payload = &payload[n - from_head..];
    }
    Ok(())
}
