//! `cargo xtask bench`: builds the suites in release mode, runs each (they print their own
//! tables), then gathers their JSON into `target/bench/results.json` and their Markdown
//! into `target/bench/report.md`.

use std::fs;
use std::path::PathBuf;
use std::process::Command;

use crate::peers::{self, Peer};
use crate::{cargo, exec, root};

/// Every suite, in the order `cargo xtask bench` runs them.
pub(crate) const SUITES: &[&str] = &[
    "codec", "scp", "machine", "python", "sftp", "sftp-ssh", "wake", "rpc", "matrix", "channel",
];

pub(crate) fn run(args: &[String]) -> Result<(), String> {
    let command_line = format!("cargo xtask bench {}", args.join(" "));
    let command_line = command_line.trim_end();
    let mut suites = Vec::new();
    let mut mode = "--quick";
    let mut baseline: Option<PathBuf> = None;
    let mut save_charts = false;
    let mut transport: Option<String> = None;
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--suite" => {
                let name = args.next().ok_or("--suite needs a name")?;
                if !SUITES.contains(&name.as_str()) {
                    return Err(format!(
                        "unknown suite `{name}`; suites are: {}",
                        SUITES.join(", ")
                    ));
                }
                suites.push(name.clone());
            }
            "--quick" | "--full" => mode = if arg == "--full" { "--full" } else { "--quick" },
            "--save-charts" => save_charts = true,
            "--transport" => {
                let t = args.next().ok_or("--transport needs udp, tcp or both")?;
                if !["udp", "tcp", "both"].contains(&t.as_str()) {
                    return Err(format!("--transport {t}: udp, tcp or both"));
                }
                transport = Some(t.clone());
            }
            "--baseline" => {
                let path = PathBuf::from(args.next().ok_or("--baseline needs a results.json")?);
                if !path.is_file() {
                    return Err(format!("--baseline {}: no such file", path.display()));
                }
                baseline = Some(path);
            }
            other => {
                return Err(format!(
                    "unknown bench option `{other}`\n\n{}",
                    crate::usage()
                ));
            }
        }
    }
    if suites.is_empty() {
        suites = SUITES.iter().map(|s| s.to_string()).collect();
    }

    if suites.iter().any(|s| s == "scp") {
        peers::ensure(&[Peer::Rig])?;
    }
    if suites.iter().any(|s| s == "machine") {
        peers::ensure(&[Peer::SpiNNMan])?;
    }
    if suites.iter().any(|s| s == "python") {
        peers::ensure(&[Peer::Rig, Peer::SpiNNMan])?;
        peers::install_package()?;
    }
    if suites.iter().any(|s| s == "sftp") {
        peers::ensure(&[Peer::OpenSsh])?;
    }
    if suites.iter().any(|s| s == "sftp-ssh") {
        peers::ensure(&[Peer::OpenSsh, Peer::Rclone, Peer::Lftp])?;
    }
    if suites.iter().any(|s| s == "matrix") && !peers::ensure(&[Peer::Nftables])?.is_empty() {
        eprintln!(
            "xtask: WARNING: nftables could not be installed; the matrix's lossy TCP rows \
             will be absent (install it with `apt-get install nftables`)"
        );
    }
    build_release()?;
    let tls_peers = if suites.iter().any(|s| s == "rpc") {
        Some(build_tls_peers()?)
    } else {
        None
    };
    let out_dir = root().join("target").join("bench");
    fs::create_dir_all(&out_dir)
        .map_err(|e| format!("cannot create {}: {e}", out_dir.display()))?;
    let binary = root().join("target").join("release").join("volley-bench");
    let plain = root()
        .join("target")
        .join("release")
        .join("volley-bench-plain");

    let mut json_parts = Vec::new();
    let mut report = String::from("# volley benchmark report\n\n");
    let durations = out_dir.join("durations.txt");
    let mut took = Durations::read(&durations);
    let mode_name = &mode[2..];
    eprintln!(
        "\nxtask bench: {} suite(s) in {mode_name} mode: {}",
        suites.len(),
        suites
            .iter()
            .map(|s| match took.get(s, mode_name) {
                Some(secs) => format!("{s} (last run here {secs:.0} s)"),
                None => format!("{s} (no earlier run here)"),
            })
            .collect::<Vec<_>>()
            .join(", ")
    );
    if let Some(total) = suites
        .iter()
        .map(|s| took.get(s, mode_name))
        .sum::<Option<f64>>()
    {
        eprintln!(
            "xtask bench: about {:.0} minutes, going by the last runs",
            total / 60.0
        );
    }
    for (n, suite) in suites.iter().enumerate() {
        eprintln!("\nxtask bench: [{}/{}] {suite}", n + 1, suites.len());
        let started = std::time::Instant::now();
        let json = out_dir.join(format!("{suite}.json"));
        let md = out_dir.join(format!("{suite}.md"));
        // Speed is measured without the counting allocator, whose shared counters tax
        // the system that allocates more (and every allocation two threads make); the rpc
        // suite gets its allocations table from the counting binary beside it.
        let runner = if ["matrix", "channel", "rpc"].contains(&suite.as_str()) {
            &plain
        } else {
            &binary
        };
        let mut command = Command::new(runner);
        if let Some(tls_peers) = &tls_peers {
            command.env("VOLLEY_BENCH_TLS", tls_peers);
        }
        exec(
            command
                .current_dir(root())
                .env("VOLLEY_PYTHON", peers::venv_python())
                .args([suite.as_str(), mode, "--json"])
                .arg(&json)
                .arg("--markdown")
                .arg(&md)
                .arg("--svg")
                .arg(&out_dir)
                .args(transport.iter().flat_map(|t| ["--transport", t.as_str()])),
        )?;
        let secs = started.elapsed().as_secs_f64();
        eprintln!(
            "xtask bench: [{}/{}] {suite} took {secs:.0} s",
            n + 1,
            suites.len()
        );
        took.set(suite, mode_name, secs);
        took.write(&durations)?;
        json_parts.push(format!("\"{suite}\": {}", read(&json)?.trim()));
        report.push_str(&read(&md)?);
        report.push('\n');
    }
    let results = out_dir.join("results.json");
    write(
        &results,
        &format!(
            "{{\n\"mode\": \"{}\",\n{}\n}}\n",
            &mode[2..],
            json_parts.join(",\n")
        ),
    )?;
    let report_path = out_dir.join("report.md");
    write(&report_path, &report)?;
    eprintln!(
        "\nxtask bench: wrote {} and {} (and an SVG chart per suite that has one)",
        results.display(),
        report_path.display()
    );
    if save_charts {
        save(&out_dir, &suites, command_line)?;
    }
    if let Some(baseline) = baseline {
        eprintln!("\nxtask bench: every figure beside {}", baseline.display());
        exec(
            Command::new(&binary)
                .arg("compare")
                .arg(&baseline)
                .arg(&results),
        )?;
    }
    Ok(())
}

/// Builds every binary the benches and the soak run (`volley-bench`, `volley-soak`,
/// `sftp-peer`, `volley`, `volley-sftp-server`) in release mode.
pub(crate) fn build_release() -> Result<(), String> {
    exec(cargo().args([
        "build",
        "--release",
        "-p",
        "volley-benches",
        "-p",
        "volley-cli",
        "-p",
        "volley-sftp-server",
        "--bins",
    ]))
}

/// Builds the rpc suite's TLS and QUIC peers (`benches/tls`, outside the workspace so
/// that the tests never build tonic) in release mode; returns the binary's path.
fn build_tls_peers() -> Result<PathBuf, String> {
    let manifest = root().join("benches").join("tls").join("Cargo.toml");
    let target = root().join("target");
    exec(
        cargo()
            .args(["build", "--release", "--locked", "--manifest-path"])
            .arg(&manifest)
            .arg("--target-dir")
            .arg(&target),
    )?;
    Ok(target.join("release").join("volley-bench-tls"))
}

fn read(path: &PathBuf) -> Result<String, String> {
    fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

fn write(path: &std::path::Path, text: &str) -> Result<(), String> {
    fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// Saves the run's tables and charts under `docs/bench/` (where the README links them
/// from): `SUITE.md` opens with when, at which commit, on which host and by which command
/// it was measured, then the suite's tables as the run wrote them; `SUITE.svg` beside it
/// where the suite draws a chart. `docs/bench/README.md` lists what each file holds.
fn save(out_dir: &std::path::Path, suites: &[String], command: &str) -> Result<(), String> {
    let docs = root().join("docs").join("bench");
    fs::create_dir_all(&docs).map_err(|e| format!("cannot create {}: {e}", docs.display()))?;
    let output = |program: &str, args: &[&str]| {
        Command::new(program)
            .args(args)
            .current_dir(root())
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .unwrap_or_default()
    };
    let cpu = fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find_map(|l| l.strip_prefix("model name"))
                .map(|v| v.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_default();
    let commit = output("git", &["rev-parse", "--short=12", "HEAD"]);
    let dirty = !output("git", &["status", "--porcelain", "--untracked-files=no"]).is_empty();
    let stamp = format!(
        "Measured {} at commit `{commit}`{} on {}, {} cores ({cpu}), by `{command}`.",
        output("date", &["-u", "+%Y-%m-%d %H:%M UTC"]),
        if dirty {
            " (with uncommitted changes)"
        } else {
            ""
        },
        output("uname", &["-srm"]),
        output("nproc", &[]),
    );
    for suite in suites {
        let chart = out_dir.join(format!("{suite}.svg"));
        if chart.exists() {
            let to = docs.join(format!("{suite}.svg"));
            fs::copy(&chart, &to).map_err(|e| format!("cannot copy {}: {e}", chart.display()))?;
        }
        let tables = read(&out_dir.join(format!("{suite}.md")))?;
        // The suite's Markdown opens with its title as a second-level heading; here it
        // is the page's own.
        let tables = tables.strip_prefix('#').unwrap_or(&tables);
        write(
            &docs.join(format!("{suite}.md")),
            &format!(
                "{}\n\n{stamp}\n{}",
                first_line(tables),
                after_first_line(tables)
            ),
        )?;
    }
    let index = SUITES
        .iter()
        .filter(|s| docs.join(format!("{s}.md")).exists())
        .map(|s| {
            let text = fs::read_to_string(docs.join(format!("{s}.md"))).unwrap_or_default();
            let measured = text
                .lines()
                .find(|l| l.starts_with("Measured "))
                .unwrap_or("");
            format!("- [{s}]({s}.md): {}. {measured}", describe(s))
        })
        .collect::<Vec<_>>()
        .join("\n");
    write(
        &docs.join("README.md"),
        &format!(
            "# Benchmark tables\n\nWritten by `cargo xtask bench --save-charts`, one file a suite, \
             each with the commit, host and command it was measured with; nothing here is \
             typed by hand. Running the same command again replaces the suites it runs.\n\n\
             {index}\n"
        ),
    )?;
    eprintln!(
        "xtask bench: tables and charts saved under {}",
        docs.display()
    );
    Ok(())
}

/// A Markdown text's first line.
fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or("")
}

/// A Markdown text after its first line.
fn after_first_line(text: &str) -> &str {
    text.split_once('\n').map_or("", |(_, rest)| rest)
}

/// What a suite measures, in a line (for `docs/bench/README.md`).
fn describe(suite: &str) -> &'static str {
    match suite {
        "codec" => "the wire formats' parse and emit rates and CPU per operation, in process",
        "scp" => {
            "one board's SCP reads and writes against window size, volley beside rig, at RTT 0, 1 ms and 1 ms with 1% loss, with the client's CPU"
        }
        "machine" => {
            "discovering, loading and reading an emulated machine of many boards, volley beside SpiNNMan's Transceiver and a modelled JavaSpiNNaker, under two P2P models, with the client's CPU"
        }
        "python" => {
            "the same from Python: the volley package beside SpiNNMan on 1, 3 and 24 boards, under both P2P models, with the client's CPU"
        }
        "sftp" => {
            "SFTP get and put against OpenSSH's sftp-server without ssh, volley beside OpenSSH's client and other Rust clients"
        }
        "sftp-ssh" => {
            "SFTP over a real sshd and a link with latency: files and trees, volley beside sftp, scp, rclone and lftp, with the client's CPU"
        }
        "wake" => {
            "wake-ups per frame, latency and CPU of small frames over loopback TCP, a wake-up per frame against one per batch"
        }
        "rpc" => {
            "RPC calls a second and CPU a call, volley beside tarpc and raw anchors, on every transport (TLS and QUIC beside tonic and tokio-rustls), and a light-load table"
        }
        "matrix" => {
            "the UDP channel against TCP over a grid of request counts, batch sizes and links"
        }
        "channel" => {
            "the reliable UDP channel against quinn and volley's own TCP, bulk and round trips"
        }
        _ => "",
    }
}

/// How long each suite took when it last ran here, by mode (`target/bench/durations.txt`,
/// a line `SUITE MODE SECONDS` each), so a run can say how long it will take.
struct Durations(Vec<(String, String, f64)>);

impl Durations {
    /// What the file holds; nothing if there is no file or a line does not parse.
    fn read(path: &std::path::Path) -> Self {
        let text = fs::read_to_string(path).unwrap_or_default();
        Self(
            text.lines()
                .filter_map(|line| {
                    let mut fields = line.split_whitespace();
                    let (suite, mode) = (fields.next()?, fields.next()?);
                    let secs = fields.next()?.parse().ok()?;
                    Some((suite.to_owned(), mode.to_owned(), secs))
                })
                .collect(),
        )
    }

    fn get(&self, suite: &str, mode: &str) -> Option<f64> {
        self.0
            .iter()
            .find(|(s, m, _)| s == suite && m == mode)
            .map(|d| d.2)
    }

    fn set(&mut self, suite: &str, mode: &str, secs: f64) {
        self.0.retain(|(s, m, _)| !(s == suite && m == mode));
        self.0.push((suite.to_owned(), mode.to_owned(), secs));
    }

    fn write(&self, path: &std::path::Path) -> Result<(), String> {
        let text: String = self
            .0
            .iter()
            .map(|(s, m, secs)| format!("{s} {m} {secs:.0}\n"))
            .collect();
        write(path, &text)
    }
}
