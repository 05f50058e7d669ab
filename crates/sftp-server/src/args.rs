//! The command line, as OpenSSH's `sftp-server` takes it, shared by the
//! `volley-sftp-server` binary and `volley sftp-server`.

use std::fs::File;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::process::ExitCode;

use crate::config::{Config, REQUESTS};

/// The usage text.
pub const USAGE: &str =
    "usage: volley-sftp-server [-ehR] [-d start_directory] [-f log_facility] [-l log_level]
        [-P denied_requests] [-p allowed_requests] [-u umask] [-Q protocol_feature]
        [--max-io BYTES] [--threads N] [--budget BYTES] [--reply-order requests|completion]

  -d DIR     start in DIR (%d is the user's home; %u their name), as OpenSSH's -d
  -e         log to standard error (the only place this server logs; sshd passes it on)
  -f FAC     accepted for OpenSSH's command lines; ignored
  -l LEVEL   QUIET, FATAL, ERROR (default), INFO, VERBOSE, DEBUG, DEBUG1..3
  -P LIST    refuse these requests (comma-separated names from -Q requests)
  -p LIST    allow only these requests
  -Q requests  list the request names, one a line, and exit
  -R         read-only: refuse every request that would change the file system
  -u UMASK   create files and directories under this octal umask
  --max-io BYTES  largest READ and WRITE, stated in limits@openssh.com (default 1048576)
  --threads N     requests run at once (default 8)
  --budget BYTES  memory the session's requests and replies may hold (default 67108864)
  --reply-order requests|completion
                  reply in the order requests came (default, as OpenSSH's server; its
                  scp needs it) or as each completes (for clients that match by id)

In sshd_config: Subsystem sftp /path/to/volley-sftp-server
It adds no chroot of its own: use sshd's ChrootDirectory.";

/// How much the server logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Level {
    Quiet,
    Error,
    Info,
    Debug,
}

/// The command line, parsed.
#[derive(Debug)]
pub struct Options {
    /// The session's settings.
    pub config: Config,
    /// `-Q`'s feature, if given: list it and exit (`help` for `-h`: the usage).
    pub query: Option<String>,
    level: Level,
}

impl Options {
    /// Parses `args` (without the program's name).
    pub fn parse(mut args: impl Iterator<Item = String>) -> Result<Self, String> {
        let mut config = Config::default();
        let (mut query, mut level) = (None, Level::Error);
        while let Some(arg) = args.next() {
            let mut value = |what: &str| args.next().ok_or_else(|| format!("{arg} needs {what}"));
            match arg.as_str() {
                "-d" => config.start_dir = Some(PathBuf::from(expand_dir(&value("a directory")?))),
                "-h" | "--help" => query = Some("help".to_owned()),
                "-e" => {}
                "-f" => drop(value("a facility")?),
                "-l" => level = parse_level(&value("a level")?)?,
                "-P" => config.denied = list(&value("a list of requests")?),
                "-p" => config.allowed = Some(list(&value("a list of requests")?)),
                "-Q" => query = Some(value("a feature")?),
                "-R" => config.read_only = true,
                "-u" => {
                    let text = value("an octal umask")?;
                    let umask = u32::from_str_radix(&text, 8)
                        .map_err(|_| format!("-u {text}: not an octal umask"))?;
                    config.umask = Some(umask);
                }
                "--max-io" => config.max_io = number(&arg, &value("a size")?)?,
                "--threads" => config.threads = number(&arg, &value("a count")?)?,
                "--budget" => config.budget = number(&arg, &value("a size")?)?,
                "--reply-order" => {
                    config.in_order = match value("`requests` or `completion`")?.as_str() {
                        "requests" => true,
                        "completion" => false,
                        other => {
                            return Err(format!(
                                "--reply-order {other}: `requests` or `completion`"
                            ));
                        }
                    }
                }
                other => return Err(format!("unknown option {other}\n{USAGE}")),
            }
        }
        config.check().map_err(|e| e.to_string())?;
        Ok(Self {
            config,
            query,
            level,
        })
    }
}

/// Runs the server on this process's standard input and output with `args` (without
/// the program's name): what `main` returns.
pub fn main_with(args: impl Iterator<Item = String>) -> ExitCode {
    let options = match Options::parse(args) {
        Ok(options) => options,
        Err(e) => {
            eprintln!("volley-sftp-server: {e}");
            return ExitCode::from(1);
        }
    };
    match options.query.as_deref() {
        Some("requests") => {
            REQUESTS.iter().for_each(|r| println!("{r}"));
            return ExitCode::SUCCESS;
        }
        Some("help") => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Some(other) => {
            eprintln!("volley-sftp-server: -Q {other}: the only feature is `requests`");
            return ExitCode::from(1);
        }
        None => {}
    }
    match run(&options) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if options.level >= Level::Error {
                eprintln!("volley-sftp-server: {e}");
            }
            ExitCode::from(1)
        }
    }
}

fn run(options: &Options) -> Result<(), String> {
    let config = &options.config;
    if let Some(umask) = config.umask {
        nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(umask));
    }
    if let Some(dir) = &config.start_dir {
        std::env::set_current_dir(dir)
            .map_err(|e| format!("cannot start in {}: {e}", dir.display()))?;
    }
    // Our own handles on fds 0 and 1: unbuffered, so DATA goes out as it was read.
    let dup = |fd: std::os::fd::BorrowedFd<'_>| fd.try_clone_to_owned().map(File::from);
    let input = dup(std::io::stdin().as_fd()).map_err(|e| format!("standard input: {e}"))?;
    let output = dup(std::io::stdout().as_fd()).map_err(|e| format!("standard output: {e}"))?;
    let report = crate::serve(&input, &output, config).map_err(|e| e.to_string())?;
    if options.level >= Level::Info {
        eprintln!(
            "volley-sftp-server: session closed: {} requests, {} bytes read, {} bytes written",
            report.requests, report.bytes_read, report.bytes_written
        );
    }
    Ok(())
}

/// `-d`'s `%d` (the home directory) and `%u` (the user), as OpenSSH expands them.
fn expand_dir(dir: &str) -> String {
    let home = std::env::var("HOME").unwrap_or_default();
    let user = std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .unwrap_or_default();
    dir.replace("%d", &home)
        .replace("%u", &user)
        .replace("%%", "%")
}

fn parse_level(text: &str) -> Result<Level, String> {
    Ok(match text.to_ascii_uppercase().as_str() {
        "QUIET" => Level::Quiet,
        "FATAL" | "ERROR" => Level::Error,
        "INFO" | "VERBOSE" => Level::Info,
        "DEBUG" | "DEBUG1" | "DEBUG2" | "DEBUG3" => Level::Debug,
        _ => {
            return Err(format!(
                "-l {text}: not a log level (QUIET, FATAL, ERROR, INFO, VERBOSE, DEBUG)"
            ));
        }
    })
}

fn list(text: &str) -> Vec<String> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

fn number<T: core::str::FromStr>(option: &str, text: &str) -> Result<T, String> {
    text.parse()
        .map_err(|_| format!("{option} {text}: not a number"))
}
