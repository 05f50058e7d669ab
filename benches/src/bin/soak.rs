//! `volley-soak`, the binary behind `cargo xtask soak`: minutes of mixed traffic against
//! one emulator and one link simulator (separate `volley` processes), every transfer
//! verified, while a garbage sender and FILL storms try to knock them over. It prints a
//! progress line every 10 s and ends with
//!
//! ```text
//! soak: minutes=M requests=N errors=E emulator_rss_kib=START..END netsim_rss_kib=START..END client_rss_kib=START..END
//! ```
//!
//! where START is each process's resident memory at the first progress line (after the
//! warm-up) and END at the end. It exits non-zero on any error, on a process that died,
//! or when any of the three grew by more than [`RSS_GROWTH_KIB`] plus a quarter of START.

use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use core::time::Duration;
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::sync::Arc;
use std::time::Instant;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::time::timeout;
use volley_emulator::{SDRAM_BASE, SDRAM_SIZE};
use volley_proto::scp::sdp::Address;
use volley_sftp::{SftpClient, TransferOptions};
use volley_testkit::pattern;
use volley_transport_udp::{Op, ScpClient, ScpConfig};

/// Growth in resident memory, beyond a quarter of where it started, that fails the soak.
const RSS_GROWTH_KIB: u64 = 32 * 1024;
/// Bytes per SCP transfer.
const SCP_BYTES: usize = 256 * 1024;
/// Bytes per SFTP transfer.
const SFTP_BYTES: usize = 4 << 20;
/// Garbage datagrams per second, all told.
const GARBAGE_PER_SEC: u64 = 200;
/// Errors printed in full; later ones are only counted.
const ERRORS_SHOWN: u64 = 20;

/// What every task adds to.
#[derive(Debug, Default)]
struct Tally {
    requests: AtomicU64,
    errors: AtomicU64,
    stop: AtomicBool,
}

impl Tally {
    fn error(&self, what: &str, e: impl core::fmt::Display) {
        if self.errors.fetch_add(1, Ordering::Relaxed) < ERRORS_SHOWN {
            eprintln!("soak: error: {what}: {e}");
        }
    }

    fn running(&self) -> bool {
        !self.stop.load(Ordering::Relaxed)
    }
}

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("volley-soak: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<bool, String> {
    let mut minutes = 2.0;
    let mut volley = std::env::current_exe()
        .map_err(|e| format!("cannot find this program: {e}"))?
        .with_file_name("volley");
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--minutes" => {
                let text = args.next().ok_or("--minutes needs a number")?;
                minutes = text
                    .parse::<f64>()
                    .ok()
                    .filter(|m| (0.1..=1440.0).contains(m))
                    .ok_or(format!("--minutes takes 0.1 to 1440, not `{text}`"))?;
            }
            "--volley" => volley = PathBuf::from(args.next().ok_or("--volley needs a path")?),
            other => {
                return Err(format!(
                    "unknown option `{other}`; usage: volley-soak [--minutes N] [--volley PATH]"
                ));
            }
        }
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start a runtime: {e}"))?;
    runtime.block_on(soak(minutes, &volley))
}

async fn soak(minutes: f64, volley: &Path) -> Result<bool, String> {
    let (mut emulator, line) =
        start(Command::new(volley).args(["emulate", "--udp", "127.0.0.1:0"])).await?;
    let board = line
        .strip_prefix("listening udp=")
        .and_then(|rest| rest.split(' ').next())
        .ok_or(format!("the emulator said `{line}`"))?
        .to_owned();
    let (mut netsim, line) = start(Command::new(volley).args([
        "netsim",
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        &board,
        "--loss",
        "0.01",
        "--dup",
        "0.01",
        "--reorder",
        "0.05",
        "--seed",
        "1",
    ]))
    .await?;
    let link = line
        .strip_prefix("listening ")
        .ok_or(format!("the link simulator said `{line}`"))?
        .to_owned();
    let board = board.parse().map_err(|e| format!("{board}: {e}"))?;
    let link = link.parse().map_err(|e| format!("{link}: {e}"))?;

    let tally = Arc::new(Tally::default());
    let scratch = std::env::temp_dir().join(format!("volley-soak-{}", std::process::id()));
    std::fs::create_dir_all(&scratch).map_err(|e| format!("{}: {e}", scratch.display()))?;
    let tasks = [
        tokio::spawn(scp_loop(link, tally.clone())),
        tokio::spawn(sftp_loop(scratch.clone(), tally.clone())),
        tokio::spawn(garbage_loop(board, link, tally.clone())),
        tokio::spawn(fill_storms(board, tally.clone())),
    ];

    let pids = [pid(&emulator)?, pid(&netsim)?, std::process::id()];
    let began = Instant::now();
    let end = began + Duration::from_secs_f64(minutes * 60.0);
    let mut first: Option<[u64; 3]> = None;
    let mut ticks = tokio::time::interval_at(
        tokio::time::Instant::now() + Duration::from_secs(10),
        Duration::from_secs(10),
    );
    while Instant::now() + Duration::from_secs(10) <= end {
        ticks.tick().await;
        let rss = pids.map(rss_kib);
        first.get_or_insert(rss);
        println!(
            "soak: t={}s requests={} errors={} emulator_rss_kib={} netsim_rss_kib={} client_rss_kib={}",
            began.elapsed().as_secs(),
            tally.requests.load(Ordering::Relaxed),
            tally.errors.load(Ordering::Relaxed),
            rss[0],
            rss[1],
            rss[2]
        );
    }
    tokio::time::sleep_until(end.into()).await;
    tally.stop.store(true, Ordering::Relaxed);
    for task in tasks {
        match timeout(Duration::from_secs(120), task).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tally.error("a traffic task died", e),
            Err(_) => tally.error("a traffic task", "did not stop within 120 s"),
        }
    }
    let last = pids.map(rss_kib);
    let first = first.unwrap_or(last);
    for (child, name) in [
        (&mut emulator, "the emulator"),
        (&mut netsim, "the link simulator"),
    ] {
        if let Ok(Some(status)) = child.try_wait() {
            tally.error(name, format!("exited during the soak ({status})"));
        }
    }
    let names = ["emulator", "netsim", "client"];
    for i in 0..3 {
        let bound = first[i] + first[i] / 4 + RSS_GROWTH_KIB;
        if last[i] > bound {
            tally.error(
                &format!("{} memory", names[i]),
                format!(
                    "grew from {} to {} KiB, past the bound of {bound} KiB",
                    first[i], last[i]
                ),
            );
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
    let errors = tally.errors.load(Ordering::Relaxed);
    println!(
        "soak: minutes={minutes} requests={} errors={errors} emulator_rss_kib={}..{} netsim_rss_kib={}..{} client_rss_kib={}..{}",
        tally.requests.load(Ordering::Relaxed),
        first[0],
        last[0],
        first[1],
        last[1],
        first[2],
        last[2]
    );
    Ok(errors == 0)
}

/// Starts a `volley` server and returns it with the line it prints once listening.
async fn start(command: &mut Command) -> Result<(Child, String), String> {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| {
            format!("cannot start volley (build it: cargo build --release -p volley-cli): {e}")
        })?;
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let mut line = String::new();
    timeout(
        Duration::from_secs(10),
        BufReader::new(stdout).read_line(&mut line),
    )
    .await
    .map_err(|_| "a volley server printed nothing within 10 s".to_owned())?
    .map_err(|e| format!("cannot read a volley server's output: {e}"))?;
    Ok((child, line.trim().to_owned()))
}

fn pid(child: &Child) -> Result<u32, String> {
    child
        .id()
        .ok_or_else(|| "a volley server exited at once".to_owned())
}

/// Resident memory of process `pid`, in KiB (0 if it is gone).
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// SCP writes and read-backs through the link simulator at windows 1 to 16 in turn, each
/// window in its own 256 KiB of chip (0, 0), every byte compared.
async fn scp_loop(link: core::net::SocketAddr, tally: Arc<Tally>) {
    let chip = Address::core(0, 0, 0);
    let mut round = 0u64;
    while tally.running() {
        round += 1;
        let window = (round % 16 + 1) as usize;
        let address = SDRAM_BASE + (window as u32 - 1) * SCP_BYTES as u32;
        let data = pattern(SCP_BYTES, round);
        let config = ScpConfig {
            max_tries: 16,
            ..ScpConfig::default().with_window(window)
        };
        let attempt = async {
            let mut client = ScpClient::connect(link, config).await?;
            client.write(chip, address, &data).await?;
            let back = client.read_bytes(chip, address, data.len()).await?;
            let sent = client.stats().sent;
            Ok::<_, volley_transport_udp::ScpError>((back == data, sent))
        };
        match timeout(Duration::from_secs(120), attempt).await {
            Ok(Ok((same, sent))) => {
                tally.requests.fetch_add(sent, Ordering::Relaxed);
                if !same {
                    tally.error(&format!("scp window {window}"), "read back differs");
                }
            }
            Ok(Err(e)) => tally.error(&format!("scp window {window}"), e),
            Err(_) => tally.error(&format!("scp window {window}"), "no result within 120 s"),
        }
    }
}

/// SFTP put then get of 4 MiB against OpenSSH's sftp-server, both copies compared.
async fn sftp_loop(dir: PathBuf, tally: Arc<Tally>) {
    let (local, remote, back) = (dir.join("local"), dir.join("remote"), dir.join("back"));
    let mut round = 0u64;
    while tally.running() {
        round += 1;
        let data = pattern(SFTP_BYTES, round + (1 << 32));
        if let Err(e) = std::fs::write(&local, &data) {
            tally.error("sftp", format!("cannot write {}: {e}", local.display()));
            return;
        }
        let attempt = async {
            let mut server = Command::new("/usr/lib/openssh/sftp-server");
            server.args(["-e", "-l", "ERROR"]);
            let sftp = SftpClient::spawn(&mut server).await?;
            let path = remote.as_os_str().as_encoded_bytes();
            let opts = TransferOptions::default();
            sftp.put(&local, path, &opts).await?;
            sftp.get(path, &back, &opts).await?;
            let requests = sftp.connection().stats().frames_sent;
            sftp.shutdown().await?;
            Ok::<_, volley_sftp::SftpError>(requests)
        };
        match timeout(Duration::from_secs(120), attempt).await {
            Ok(Ok(requests)) => {
                tally.requests.fetch_add(requests, Ordering::Relaxed);
                let same = |p: &Path| std::fs::read(p).is_ok_and(|b| b == data);
                if !same(&remote) || !same(&back) {
                    tally.error("sftp", "a copy differs");
                }
            }
            Ok(Err(e)) => tally.error("sftp", e),
            Err(_) => tally.error("sftp", "no result within 120 s"),
        }
    }
}

/// Random datagrams of random lengths (0 to 600 bytes) at the emulator and the link
/// simulator, `GARBAGE_PER_SEC` in all.
async fn garbage_loop(
    board: core::net::SocketAddr,
    link: core::net::SocketAddr,
    tally: Arc<Tally>,
) {
    let socket = match tokio::net::UdpSocket::bind("127.0.0.1:0").await {
        Ok(s) => s,
        Err(e) => return tally.error("garbage sender", e),
    };
    let mut ticks = tokio::time::interval(Duration::from_micros(1_000_000 / GARBAGE_PER_SEC));
    let mut n = 0u64;
    while tally.running() {
        ticks.tick().await;
        n += 1;
        let mut bytes = pattern(600, n);
        bytes.truncate(usize::from(bytes[0]) + usize::from(bytes[1]) + usize::from(bytes[2] % 89));
        let to = if n % 2 == 0 { board } else { link };
        // Sending can fail only locally; what the far end makes of it is its business.
        if let Err(e) = socket.send_to(&bytes, to).await {
            tally.error("garbage sender", e);
        }
    }
}

/// Every 10 s, a FILL of all of SDRAM on 63 chips (every chip but the one the SCP loop
/// uses), straight to the emulator, then one word read back from each filled chip.
async fn fill_storms(board: core::net::SocketAddr, tally: Arc<Tally>) {
    let mut storm = 0u32;
    let mut ticks = tokio::time::interval(Duration::from_secs(10));
    while tally.running() {
        ticks.tick().await;
        storm += 1;
        let chips: Vec<Address> = (0..64u8)
            .skip(1)
            .map(|c| Address::core(c / 8, c % 8, 0))
            .collect();
        let attempt = async {
            let mut client = ScpClient::connect(board, ScpConfig::default()).await?;
            let mut ops: Vec<Op<'_>> = chips
                .iter()
                .map(|&chip| Op::Fill {
                    chip,
                    address: SDRAM_BASE,
                    value: storm,
                    len: SDRAM_SIZE,
                })
                .collect();
            client.execute(&mut ops).await?;
            let mut words = vec![[0u8; 4]; chips.len()];
            let mut reads: Vec<Op<'_>> = chips
                .iter()
                .zip(words.iter_mut())
                .map(|(&chip, buf)| Op::Read {
                    chip,
                    address: SDRAM_BASE + SDRAM_SIZE - 4,
                    buf,
                })
                .collect();
            client.execute(&mut reads).await?;
            drop(reads);
            let sent = client.stats().sent;
            Ok::<_, volley_transport_udp::ScpError>((
                words.iter().all(|w| *w == storm.to_le_bytes()),
                sent,
            ))
        };
        match timeout(Duration::from_secs(60), attempt).await {
            Ok(Ok((filled, sent))) => {
                tally.requests.fetch_add(sent, Ordering::Relaxed);
                if !filled {
                    tally.error("fill storm", "a chip does not hold the filled word");
                }
            }
            Ok(Err(e)) => tally.error("fill storm", e),
            Err(_) => tally.error("fill storm", "no result within 60 s"),
        }
    }
}
