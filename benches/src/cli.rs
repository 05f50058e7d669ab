//! What `volley-bench` and `volley-bench-plain` share: argument handling, running one
//! suite, writing its results.

use std::env;
use std::fs;
use std::path::PathBuf;
use std::process::ExitCode;

use crate::harness::Mode;
use crate::{charts, compare, harness, suites};

/// Runs `volley-bench` (or `volley-bench-plain`) with the process's arguments.
pub fn main() -> ExitCode {
    let mut args = env::args().skip(1).peekable();
    let result = match args.peek().map(String::as_str) {
        Some("compare") => {
            args.next();
            match (args.next(), args.next()) {
                (Some(base), Some(new)) => compare::run(&PathBuf::from(base), &PathBuf::from(new)),
                _ => Err("usage: volley-bench compare BASELINE.json RESULTS.json".into()),
            }
        }
        Some("chart") => {
            args.next();
            match (args.next(), args.next()) {
                (Some(results), Some(dir)) => redraw(&PathBuf::from(results), &PathBuf::from(dir)),
                _ => Err("usage: volley-bench chart SUITE.json DIR".into()),
            }
        }
        Some(suites::rpc::ALLOCATIONS_CHILD) => suites::rpc::allocations_child(),
        Some(suites::matrix::LOSSY_CHILD) => {
            let rest: Vec<String> = args.skip(1).collect();
            suites::matrix::lossy_link_child(&rest)
        }
        Some("wrap-server") => {
            args.next();
            return match harness::wrap_server(args) {
                Ok(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
                Err(e) => fail(&e),
            };
        }
        _ => run(),
    };
    result.map_or_else(|e| fail(&e), |()| ExitCode::SUCCESS)
}

/// Says what went wrong, and fails.
fn fail(e: &str) -> ExitCode {
    eprintln!("volley-bench: {e}");
    ExitCode::FAILURE
}

/// Draws a suite's charts again from the JSON one of its runs wrote (`--json`), so a
/// chart's look can change without measuring again.
fn redraw(results: &std::path::Path, dir: &std::path::Path) -> Result<(), String> {
    let text = fs::read_to_string(results)
        .map_err(|e| format!("cannot read {}: {e}", results.display()))?;
    let json: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| format!("{} is not JSON: {e}", results.display()))?;
    let suite = json["suite"]
        .as_str()
        .ok_or_else(|| format!("{} names no suite", results.display()))?;
    let data = json["results"]
        .as_array()
        .ok_or_else(|| format!("{} has no results", results.display()))?;
    for chart in charts::write(suite, data, dir)? {
        eprintln!("volley-bench: wrote {}", chart.display());
    }
    Ok(())
}

fn run() -> Result<(), String> {
    let mut args = env::args().skip(1);
    let suite = args.next().ok_or(USAGE)?;
    let mut mode = Mode::Quick;
    let mut json = None;
    let mut markdown = None;
    let mut svg_dir = None;
    let mut python = env::var("VOLLEY_PYTHON").ok();
    let mut transports = suites::matrix::Transports::Both;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--quick" => mode = Mode::Quick,
            "--full" => mode = Mode::Full,
            "--json" => json = Some(PathBuf::from(args.next().ok_or("--json needs a path")?)),
            "--markdown" => {
                markdown = Some(PathBuf::from(args.next().ok_or("--markdown needs a path")?));
            }
            "--python" => python = Some(args.next().ok_or("--python needs a path")?),
            "--transport" => {
                transports = suites::matrix::Transports::parse(
                    &args.next().ok_or("--transport needs udp, tcp or both")?,
                )?;
            }
            "--svg" => svg_dir = Some(PathBuf::from(args.next().ok_or("--svg needs a directory")?)),
            other => return Err(format!("unknown option `{other}`\n{USAGE}")),
        }
    }
    if cfg!(debug_assertions) {
        eprintln!("volley-bench: WARNING: a debug build; figures are meaningless");
    }
    let report = match suite.as_str() {
        "codec" => suites::codec::run(mode),
        "scp" => suites::scp::run(mode, python.as_deref()),
        "machine" => suites::machine::run(mode, python.as_deref()),
        "python" => suites::python::run(mode, python.as_deref()),
        "sftp" => suites::sftp::run(mode),
        "sftp-ssh" => suites::sftp_ssh::run(mode),
        "rpc" => suites::rpc::run(mode),
        "matrix" => suites::matrix::run(mode, transports),
        "channel" => suites::channel::run(mode),
        "wake" => suites::wake::run(mode),
        other => return Err(format!("unknown suite `{other}`\n{USAGE}")),
    };
    print!("{}", report.text());
    if let Some(path) = json {
        let text = serde_json::to_string_pretty(&report.json())
            .map_err(|e| format!("cannot encode results: {e}"))?;
        fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    let mut markdown_text = report.markdown();
    if let Some(dir) = svg_dir {
        for chart in charts::write(report.suite, &report.data, &dir)? {
            let name = chart.file_name().map(|n| n.to_string_lossy().into_owned());
            let name = name.unwrap_or_default();
            markdown_text.push_str(&format!("\n![{} chart]({name})\n", report.suite));
            eprintln!("volley-bench: wrote {}", chart.display());
        }
    }
    if let Some(path) = markdown {
        fs::write(&path, markdown_text)
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    if report.failures > 0 {
        return Err(format!(
            "{}: {} checks failed (see the table)",
            report.suite, report.failures
        ));
    }
    Ok(())
}

const USAGE: &str =
    "usage: volley-bench SUITE [--quick|--full] [--json PATH] [--markdown PATH] [--svg DIR] [--python PATH] [--transport udp|tcp|both]
       volley-bench compare BASELINE.json RESULTS.json
       volley-bench chart SUITE.json DIR   (draws a saved run's charts again)
suites: codec, scp, machine, python, sftp, sftp-ssh, wake, rpc, matrix, channel (--transport picks the matrix's transports) (--python, or VOLLEY_PYTHON, names a Python with rig 2.4.1, SpiNNMan 7.4.1 and the volley package)";
