//! `cargo xtask fuzz [--runs N] [TARGET..]`: runs every fuzz target of
//! `fuzz` (or the named ones) for N executions each (1 000 000 by default),
//! each from and into its corpus under `fuzz/corpus/TARGET`, then minimises
//! the corpus so what is kept in the repo stays small. A finding stops it with the crash
//! file's path; cargo-fuzz prints the input and how to reproduce it.

use std::fs;

use crate::peers::{self, Peer};
use crate::{exec, root};

pub(crate) fn run(args: &[String]) -> Result<(), String> {
    let mut runs = "1000000".to_owned();
    let mut targets = Vec::new();
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--runs" => {
                let n = args.next().ok_or("--runs needs a number")?;
                if !n.parse::<u64>().is_ok_and(|n| n > 0) {
                    return Err(format!("--runs takes a positive count, not `{n}`"));
                }
                runs = n.clone();
            }
            name if !name.starts_with('-') => targets.push(name.to_owned()),
            other => {
                return Err(format!(
                    "unknown fuzz option `{other}`\n\n{}",
                    crate::usage()
                ));
            }
        }
    }
    let dir = root().join("fuzz");
    let all = list_targets(&dir)?;
    if targets.is_empty() {
        targets = all.clone();
    }
    if let Some(unknown) = targets.iter().find(|t| !all.contains(t)) {
        return Err(format!(
            "no fuzz target `{unknown}`; targets are: {}",
            all.join(", ")
        ));
    }
    peers::ensure(&[Peer::CargoFuzz])?;
    for target in &targets {
        let corpus = dir.join("corpus").join(target);
        fs::create_dir_all(&corpus).map_err(|e| format!("{}: {e}", corpus.display()))?;
        let fuzz = |args: &[&str]| {
            let mut cmd = std::process::Command::new("cargo");
            cmd.current_dir(&dir).args(["+nightly", "fuzz"]).args(args);
            cmd
        };
        // No sanitizer: the code under test holds no `unsafe`, and AddressSanitizer made
        // the slow targets three times slower. Debug assertions on: overflow is a finding.
        let max_len = format!("-max_len={}", max_len(target));
        exec(&mut fuzz(&[
            "run",
            "--sanitizer",
            "none",
            "--debug-assertions",
            target,
            corpus.to_str().unwrap_or_default(),
            "--",
            &format!("-runs={runs}"),
            &max_len,
        ]))?;
        exec(&mut fuzz(&[
            "cmin",
            "--sanitizer",
            "none",
            target,
            corpus.to_str().unwrap_or_default(),
        ]))?;
    }
    eprintln!(
        "xtask fuzz: {} targets, {runs} runs each, no findings",
        targets.len()
    );
    Ok(())
}

/// The longest input worth trying: the drivers of the window and of the emulator take one
/// step per byte or two, so longer inputs cost time without reaching further.
fn max_len(target: &str) -> usize {
    match target {
        "window_reply" => 256,
        "emulator" => 1024,
        // A reply stream: a few dozen frames reach listings, attributes and data.
        "sftp_client" => 8192,
        _ => 4096,
    }
}

/// The `[[bin]]` names of the fuzz crate's manifest.
fn list_targets(dir: &std::path::Path) -> Result<Vec<String>, String> {
    let manifest = dir.join("Cargo.toml");
    let text = fs::read_to_string(&manifest).map_err(|e| format!("{}: {e}", manifest.display()))?;
    Ok(text
        .split("[[bin]]")
        .skip(1)
        .filter_map(|bin| {
            bin.lines()
                .find_map(|l| l.trim().strip_prefix("name = "))
                .map(|name| name.trim_matches('"').to_owned())
        })
        .collect())
}
