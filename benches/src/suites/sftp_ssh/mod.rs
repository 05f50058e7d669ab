//! `sftp-ssh`: SFTP to a host over ssh. A real OpenSSH sshd on 127.0.0.1 (the tests'
//! `volley_sftp::testing::sshd::Sshd`), reached through volley's TCP link simulator at
//! each round-trip time, by volley and by OpenSSH's `sftp` and `scp`, rclone's `copy`
//! and lftp's `mirror`, each as a user would run it (login included), in interleaved
//! rounds, every copy compared byte for byte. Beside them: ssh's own ceiling (`ssh HOST
//! cat`), a plain TCP stream through the same relay, and one ssh session's window bound
//! (OpenSSH opens each session channel with a 2 MiB window: at most 2 MiB per RTT).
//! Files live in /dev/shm.

mod commands;

use core::net::SocketAddr;
use core::time::Duration;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Instant;

use serde_json::json;
use volley_netsim::tcp::{TcpLinkConfig, TcpLinkSim};
use volley_sftp::testing::sshd::Sshd;

use self::commands::{Input, Load, Target};
use super::sftp::{same, write_random};
use crate::harness::{Mode, Report, Table, median};

const MIB: u64 = 1 << 20;
/// OpenSSH's session channel window (`CHAN_SES_WINDOW_DEFAULT`, channels.h).
const SESSION_WINDOW: f64 = 2.0 * MIB as f64;

/// One thing measured: a load at a round-trip time.
#[derive(Clone, Copy, Debug)]
struct Case {
    load: Load,
    files: usize,
    rtt_ms: u64,
}

impl Case {
    fn name(self) -> String {
        match self.load {
            Load::Tree => format!("{} files, RTT {} ms", self.files, self.rtt_ms),
            Load::File => format!("256 MiB, RTT {} ms", self.rtt_ms),
        }
    }
}

pub(crate) fn run(mode: Mode) -> Report {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let sshd = runtime
        .block_on(Sshd::start())
        .unwrap_or_else(|e| panic!("cannot start sshd: {e}"));
    let bench = std::env::current_exe().expect("the bench's own path");
    let volley = bench.with_file_name("volley");
    assert!(
        volley.exists(),
        "{} is missing: build it with `cargo build --release -p volley-cli` (cargo xtask bench does)",
        volley.display()
    );
    let dir = PathBuf::from("/dev/shm").join(format!("volley-sftp-ssh-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a directory in /dev/shm");
    // Quick mode's trees are smaller: at 20 ms the clients that wait on each file take
    // about a tenth of a second a file.
    let tree = if mode == Mode::Quick { 100 } else { 300 };
    let mut cases = vec![
        Case {
            load: Load::Tree,
            files: tree,
            rtt_ms: 0,
        },
        Case {
            load: Load::Tree,
            files: tree,
            rtt_ms: 20,
        },
        Case {
            load: Load::File,
            files: 1,
            rtt_ms: 0,
        },
        Case {
            load: Load::File,
            files: 1,
            rtt_ms: 50,
        },
    ];
    if mode == Mode::Full {
        cases.extend([
            Case {
                load: Load::Tree,
                files: 300,
                rtt_ms: 50,
            },
            Case {
                load: Load::Tree,
                files: 1000,
                rtt_ms: 0,
            },
            Case {
                load: Load::Tree,
                files: 1000,
                rtt_ms: 20,
            },
        ]);
    }
    let rounds = match mode {
        Mode::Quick => 1,
        Mode::Full => 5,
    };
    let sshd_addr = SocketAddr::from(([127, 0, 0, 1], sshd.port()));
    let mut report = Report::new(
        "sftp-ssh",
        "SFTP over ssh: a real sshd through volley's TCP relay, login included",
        mode,
    );
    report.rounds = rounds;
    report.columns = vec![
        "load",
        "system",
        "get s",
        "put s",
        "get rate",
        "put rate",
        "get vs sftp",
        "put vs sftp",
        "client CPU s get/put",
        "runs",
    ];
    let mut ceilings = Table {
        title: "Ceilings at each RTT: plain TCP through the relay, one session's window".into(),
        columns: vec!["RTT", "TCP via relay MB/s", "2 MiB per RTT MB/s"],
        rows: Vec::new(),
    };
    let mut commands: Vec<String> = Vec::new();
    let mut seen_rtts = Vec::new();
    for case in cases {
        let source = match case.load {
            Load::Tree => make_tree(&dir.join(format!("tree-{}", case.files)), case.files),
            Load::File => {
                let big = dir.join("big");
                if !big.exists() {
                    write_random(&big, 256 * MIB);
                }
                big
            }
        };
        let relay = TcpLinkSim::start(
            SocketAddr::from(([127, 0, 0, 1], 0)),
            sshd_addr,
            TcpLinkConfig {
                delay: Duration::from_micros(case.rtt_ms * 500),
                ..TcpLinkConfig::default()
            },
        )
        .expect("the relay starts");
        let config = dir.join(format!("ssh_config-{}", case.rtt_ms));
        write_config(&config, relay.local_addr().port(), &sshd.identity());
        let at = Target {
            config: &config,
            port: relay.local_addr().port(),
            key: &sshd.identity(),
            volley: &volley,
        };
        let results = measure(case, &source, &dir, &at, mode, rounds, &mut commands);
        let rate = |secs: Option<f64>| match (secs, case.load) {
            (Some(s), Load::Tree) => format!("{:.0} files/s", case.files as f64 / s),
            (Some(s), Load::File) => format!("{:.1} MB/s", 256.0 * MIB as f64 / 1e6 / s),
            (None, _) => "-".into(),
        };
        let secs = |m: Option<f64>| m.map_or("-".into(), |s| format!("{s:.2}"));
        let sftp = |dir: &str| {
            results
                .iter()
                .find(|r| r.system == "OpenSSH sftp" && r.direction == dir)
                .map(|r| r.median)
        };
        for system in commands::names(case.load, mode == Mode::Quick) {
            let of = |dir: &str| {
                results
                    .iter()
                    .find(|r| r.system == *system && r.direction == dir)
            };
            let (get, put) = (of("get"), of("put"));
            let vs = |r: Option<&Measured>, base: Option<f64>| match (r, base) {
                (Some(r), Some(b)) => format!("{:.2}x", b / r.median),
                _ => "-".into(),
            };
            report.rows.push(vec![
                case.name(),
                (*system).to_owned(),
                secs(get.map(|r| r.median)),
                secs(put.map(|r| r.median)),
                rate(get.map(|r| r.median)),
                rate(put.map(|r| r.median)),
                vs(get, sftp("get")),
                vs(put, sftp("put")),
                format!(
                    "{}/{}",
                    secs(get.map(|r| median(&r.cpu))),
                    secs(put.map(|r| median(&r.cpu)))
                ),
                [get, put]
                    .iter()
                    .flatten()
                    .map(|r| r.secs.len().to_string())
                    .collect::<Vec<_>>()
                    .join("/"),
            ]);
        }
        for r in &results {
            report.data.push(json!({
                "load": case.name(), "kind": format!("{:?}", case.load), "files": case.files,
                "rtt_ms": case.rtt_ms, "system": r.system, "direction": r.direction,
                "secs": r.median, "secs_rounds": r.secs,
                "client_cpu_s": median(&r.cpu), "client_cpu_rounds_s": r.cpu,
                "files_per_sec": (case.load == Load::Tree).then(|| case.files as f64 / r.median),
                "mb_per_sec": (case.load == Load::File).then(|| 256.0 * MIB as f64 / 1e6 / r.median),
            }));
        }
        ratios(case, &results, &mut report);
        if !seen_rtts.contains(&case.rtt_ms) {
            seen_rtts.push(case.rtt_ms);
            let tcp = relay_ceiling(case.rtt_ms);
            let window = match case.rtt_ms {
                0 => "-".into(),
                ms => format!("{:.1}", SESSION_WINDOW / 1e6 / (ms as f64 / 1e3)),
            };
            ceilings.rows.push(vec![
                format!("{} ms", case.rtt_ms),
                format!("{tcp:.0}"),
                window,
            ]);
            report
                .data
                .push(json!({ "rtt_ms": case.rtt_ms, "relay_tcp_mb_per_sec": tcp }));
        }
        relay.stop();
    }
    report.tables.push(ceilings);
    report.notes.push(format!(
        "Each system as typed (host `bench` in an ssh_config naming the relay's port, the \
         key, no host-key check; OpenSSH 9.2's default cipher), timed from start to exit, \
         login included, every copy compared byte for byte; client CPU: the command's and \
         every process it waited for (its ssh, whose cipher is most of it), from \
         getrusage(RUSAGE_CHILDREN), sshd's and sftp-server's not in it: {}",
        commands.join("; ")
    ));
    if mode == Mode::Quick {
        report.notes.push(
            "Quick mode (the default) runs each system once each way, one round, trees of 100 \
             files, and leaves out rclone's and lftp's default settings for trees; `--full` has \
             them, trees of 300 and 1000 files, and five interleaved rounds with medians."
                .into(),
        );
    }
    drop(sshd);
    let _ = std::fs::remove_dir_all(&dir);
    report
}

/// One run's wall and CPU seconds.
type Run = (f64, f64);

/// One system's runs in one direction.
struct Measured {
    system: &'static str,
    direction: &'static str,
    secs: Vec<f64>,
    median: f64,
    /// The client's CPU seconds, per round (the command's and its ssh's).
    cpu: Vec<f64>,
}

/// Runs every system both ways, `rounds` interleaved rounds (alternate rounds in reverse
/// order), and checks each copy.
fn measure(
    case: Case,
    source: &Path,
    dir: &Path,
    at: &Target<'_>,
    mode: Mode,
    rounds: usize,
    commands: &mut Vec<String>,
) -> Vec<Measured> {
    let mut runs: Vec<(&'static str, &'static str, Vec<Run>)> = Vec::new();
    for round in 0..rounds {
        let mut jobs: Vec<(&'static str, &'static str)> = Vec::new();
        for direction in ["get", "put"] {
            for system in commands::names(case.load, mode == Mode::Quick) {
                jobs.push((system, direction));
            }
        }
        if round % 2 == 1 {
            jobs.reverse();
        }
        for (system, direction) in jobs {
            let name: String = system
                .chars()
                .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
                .collect();
            let target = dir.join(format!("out-{direction}-{name}"));
            remove(&target);
            let Some((mut command, input)) =
                commands::command(system, direction, case.load, source, &target, at)
            else {
                continue;
            };
            if round == 0 && case.rtt_ms == 0 {
                commands.push(format!(
                    "{} {direction}: `{}`",
                    system,
                    shown(&command, &input)
                ));
            }
            let run = timed(&mut command, &input);
            let checked = system.ends_with("(ceiling)")
                || match case.load {
                    Load::Tree => same_tree(source, &target),
                    Load::File => same(source, &target),
                };
            assert!(
                checked,
                "{system} {direction} ({}) did not copy byte for byte",
                case.name()
            );
            remove(&target);
            match runs
                .iter_mut()
                .find(|(s, d, _)| *s == system && *d == direction)
            {
                Some((_, _, runs)) => runs.push(run),
                None => runs.push((system, direction, vec![run])),
            }
        }
        eprintln!(
            "sftp-ssh: {}: round {}/{rounds} done",
            case.name(),
            round + 1
        );
    }
    runs.into_iter()
        .map(|(system, direction, runs)| {
            let secs: Vec<f64> = runs.iter().map(|r| r.0).collect();
            Measured {
                system,
                direction,
                median: median(&secs),
                secs,
                cpu: runs.iter().map(|r| r.1).collect(),
            }
        })
        .collect()
}

/// The ratios that say most about this case, as notes (what a goal asks of them is the
/// reader's to judge, not the suite's).
fn ratios(case: Case, results: &[Measured], report: &mut Report) {
    let mut extra = Vec::new();
    let secs = |system: &str, dir: &str| {
        results
            .iter()
            .find(|r| r.system == system && r.direction == dir)
            .map(|r| r.median)
    };
    let cpu = |system: &str, dir: &str| {
        results
            .iter()
            .find(|r| r.system == system && r.direction == dir)
            .map(|r| median(&r.cpu))
    };
    let mut say = |what: String, ratio: Option<f64>| {
        if let Some(ratio) = ratio {
            report
                .notes
                .push(format!("{}: {what} = {ratio:.2}x", case.name()));
        }
    };
    for dir in ["get", "put"] {
        let volley = secs("volley", dir);
        let ratio = |base: Option<f64>, over: Option<f64>| Some(base? / over?);
        match (case.load, case.rtt_ms) {
            (Load::Tree, 20) => {
                say(
                    format!("{dir}: volley vs OpenSSH sftp"),
                    ratio(secs("OpenSSH sftp", dir), volley),
                );
                say(
                    format!("{dir}: volley vs OpenSSH sftp per client CPU-second"),
                    ratio(cpu("OpenSSH sftp", dir), cpu("volley", dir)),
                );
                say(
                    format!("{dir}: volley vs lftp mirror --parallel=16"),
                    ratio(secs("lftp mirror --parallel=16", dir), volley),
                );
            }
            (Load::File, 0) => {
                say(
                    format!("{dir}: volley vs OpenSSH sftp"),
                    ratio(secs("OpenSSH sftp", dir), volley),
                );
                say(
                    format!("{dir}: volley vs OpenSSH sftp per client CPU-second"),
                    ratio(cpu("OpenSSH sftp", dir), cpu("volley", dir)),
                );
                say(
                    format!("{dir}: volley vs ssh cat (its own ceiling)"),
                    ratio(secs("ssh cat (ceiling)", dir), volley),
                );
            }
            (Load::File, 50) => {
                let four = secs("volley --sessions 4", dir);
                say(
                    format!("{dir}: volley --sessions 4 vs OpenSSH sftp"),
                    ratio(secs("OpenSSH sftp", dir), four),
                );
                // What four logins could carry at best here: no client on four sessions
                // can pass it.
                let ceiling = secs("4 ssh cat at once (ceiling)", dir);
                if let (Some(c), Some(f), Some(base)) = (ceiling, four, secs("OpenSSH sftp", dir)) {
                    extra.push(format!(
                        "{}: {dir}: four ssh cat at once, a quarter each, = {:.2}x OpenSSH sftp: \
                         the most four sessions carry here; volley --sessions 4 reaches {:.0}% of it",
                        case.name(),
                        base / c,
                        100.0 * c / f
                    ));
                }
            }
            _ => {}
        }
    }
    report.notes.extend(extra);
}

/// Runs `command` to completion, fed `input`, and returns its wall time and its CPU time
/// (user and system, its own and that of every process it waited for, such as its ssh)
/// in seconds; a failure stops the suite with the command's own words.
fn timed(command: &mut std::process::Command, input: &Input) -> Run {
    command.stdout(Stdio::null()).stderr(Stdio::piped());
    command.stdin(match input {
        Input::Nothing => Stdio::null(),
        Input::Text(_) => Stdio::piped(),
        Input::File(path) => Stdio::from(std::fs::File::open(path).expect("the source opens")),
    });
    let (start, cpu) = (Instant::now(), crate::harness::children_cpu());
    let mut child = command
        .spawn()
        .unwrap_or_else(|e| panic!("{command:?} cannot start: {e}"));
    if let (Input::Text(text), Some(mut stdin)) = (input, child.stdin.take()) {
        stdin
            .write_all(text.as_bytes())
            .expect("the batch is written");
    }
    let output = child.wait_with_output().expect("the command is waited for");
    let secs = start.elapsed().as_secs_f64();
    let cpu = crate::harness::children_cpu() - cpu;
    assert!(
        output.status.success(),
        "{command:?} failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    (secs, cpu)
}

fn shown(command: &std::process::Command, input: &Input) -> String {
    let mut line = command.get_program().to_string_lossy().into_owned();
    for arg in command.get_args() {
        let arg = arg.to_string_lossy();
        if arg.contains(' ') {
            line.push_str(&format!(" \"{arg}\""));
        } else {
            line.push_str(&format!(" {arg}"));
        }
    }
    match input {
        Input::Text(text) => format!("echo '{}' | {line}", text.trim()),
        Input::File(path) => format!("{line} < {}", path.display()),
        Input::Nothing => line,
    }
}

/// An ssh_config naming host `bench`: the relay's port, the key, no host-key check.
fn write_config(path: &Path, port: u16, key: &Path) {
    let text = format!(
        "Host bench\n  HostName 127.0.0.1\n  Port {port}\n  User root\n  IdentityFile {}\n  \
         IdentitiesOnly yes\n  UserKnownHostsFile /dev/null\n  StrictHostKeyChecking no\n  \
         BatchMode yes\n  LogLevel ERROR\n",
        key.display()
    );
    std::fs::write(path, text).expect("the ssh_config is written");
}

/// A tree of `files` files of 0-8 KiB, 30 to a directory.
fn make_tree(root: &Path, files: usize) -> PathBuf {
    if root.exists() {
        return root.to_owned();
    }
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for i in 0..files {
        let sub = root.join(format!("d{}", i / 30));
        std::fs::create_dir_all(&sub).expect("a directory of the tree");
        let len = (next() % 8193) as usize;
        let data: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        std::fs::write(sub.join(format!("f{i}")), data).expect("a file of the tree");
    }
    root.to_owned()
}

/// Whether every file under `a` is in `b` with the same bytes, and `b` has no more.
fn same_tree(a: &Path, b: &Path) -> bool {
    let list = |root: &Path| {
        let mut out = Vec::new();
        let mut dirs = vec![root.to_owned()];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    dirs.push(path);
                } else {
                    out.push(path.strip_prefix(root).map(Path::to_owned).unwrap_or(path));
                }
            }
        }
        out.sort();
        out
    };
    let files = list(a);
    files == list(b) && files.iter().all(|f| same(&a.join(f), &b.join(f)))
}

fn remove(path: &Path) {
    let _ = std::fs::remove_dir_all(path);
    let _ = std::fs::remove_file(path);
}

/// Plain bytes (64 MiB) through a relay of this RTT to a sink that answers once it has
/// them all: what any client through the same relay could do at best.
fn relay_ceiling(rtt_ms: u64) -> f64 {
    let size = 64 * MIB;
    let sink = TcpListener::bind("127.0.0.1:0").expect("a sink");
    let sink_addr = sink.local_addr().expect("its address");
    let relay = TcpLinkSim::start(
        SocketAddr::from(([127, 0, 0, 1], 0)),
        sink_addr,
        TcpLinkConfig {
            delay: Duration::from_micros(rtt_ms * 500),
            ..TcpLinkConfig::default()
        },
    )
    .expect("the relay starts");
    let mut rates = Vec::new();
    for _ in 0..3 {
        let reader = std::thread::spawn({
            let sink = sink.try_clone().expect("the sink");
            move || {
                let (mut conn, _) = sink.accept().expect("a connection");
                let mut buf = vec![0u8; 256 * 1024];
                let mut got = 0u64;
                while got < size {
                    match conn.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => got += n as u64,
                    }
                }
                let _ = conn.write_all(b"k");
                got
            }
        });
        let mut conn = TcpStream::connect(relay.local_addr()).expect("through the relay");
        let start = Instant::now();
        let block = vec![7u8; 256 * 1024];
        let mut left = size;
        while left > 0 {
            let n = left.min(block.len() as u64) as usize;
            conn.write_all(&block[..n])
                .expect("write through the relay");
            left -= n as u64;
        }
        let mut ack = [0u8; 1];
        let _ = conn.read_exact(&mut ack);
        let secs = start.elapsed().as_secs_f64();
        assert_eq!(reader.join().expect("the sink's reader"), size);
        rates.push(size as f64 / 1e6 / secs);
    }
    relay.stop();
    median(&rates)
}
