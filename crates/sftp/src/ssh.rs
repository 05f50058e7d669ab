//! SFTP over the system's `ssh`, as OpenSSH's `sftp` runs it: where a remote argument
//! points ([`Remote::parse`]: `[user@]host:path`, `[v6addr]:path`, `sftp://` URIs), the
//! ssh command line ([`SshOptions::command`]), and [`SftpClient::ssh`], which spawns it
//! and turns ssh's own failures (host key, authentication, an unreachable host) into one
//! error carrying ssh's message.

use std::ffi::OsString;
use std::path::PathBuf;

/// Where an SFTP server reached over ssh is: a host, and the user and port if given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Destination {
    /// The login name (`user@`), if given.
    pub user: Option<String>,
    /// The host name or address, without IPv6 brackets.
    pub host: String,
    /// The port, if the destination named one (`sftp://host:port/`).
    pub port: Option<u16>,
}

/// A remote argument: a destination and a path on it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Remote {
    /// Where.
    pub destination: Destination,
    /// The path on the server as the user wrote it (relative paths are relative to the
    /// login directory; empty means that directory).
    pub path: String,
}

/// Why a remote argument could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RemoteError {
    /// No host before the `:` (or in the URI).
    #[error("`{0}`: no host name")]
    NoHost(String),
    /// An `sftp://` URI with a port that is not 1 to 65535.
    #[error("`{0}`: the port is not a number from 1 to 65535")]
    BadPort(String),
    /// An `sftp://` URI with a `%` not followed by two hex digits, or that decodes to
    /// bytes that are not UTF-8.
    #[error("`{0}`: bad percent-encoding")]
    BadEncoding(String),
}

impl Remote {
    /// Reads `arg` as OpenSSH's `sftp` and `scp` do: an `sftp://[user@]host[:port][/path]`
    /// URI, or a `:` before any `/` (`[user@]host:path`; an IPv6 address in brackets,
    /// `[::1]:path`). `Ok(None)` means the argument is a local path (`./a:b`, `/a:b`,
    /// `a`, or a leading `:`).
    pub fn parse(arg: &str) -> Result<Option<Self>, RemoteError> {
        if let Some(rest) = arg.strip_prefix("sftp://") {
            return Self::uri(arg, rest).map(Some);
        }
        let Some(colon) = colon(arg) else {
            return Ok(None);
        };
        let (user_host, path) = (&arg[..colon], &arg[colon + 1..]);
        let (user, host) = match user_host.rfind('@') {
            Some(at) => (Some(&user_host[..at]), &user_host[at + 1..]),
            None => (None, user_host),
        };
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        if host.is_empty() {
            return Err(RemoteError::NoHost(arg.into()));
        }
        Ok(Some(Self {
            destination: Destination {
                user: user.filter(|u| !u.is_empty()).map(str::to_owned),
                host: host.to_owned(),
                port: None,
            },
            path: path.to_owned(),
        }))
    }

    /// `sftp://[user@]host[:port][/path]`; the path is absolute, `/~/` starts it at the
    /// login directory (draft-ietf-secsh-scp-sftp-ssh-uri).
    fn uri(arg: &str, rest: &str) -> Result<Self, RemoteError> {
        let (authority, path) = match rest.find('/') {
            Some(slash) => (&rest[..slash], &rest[slash..]),
            None => (rest, ""),
        };
        let (user, host_port) = match authority.rfind('@') {
            Some(at) => (Some(decode(arg, &authority[..at])?), &authority[at + 1..]),
            None => (None, authority),
        };
        let (host, port) = if let Some(v6) = host_port.strip_prefix('[') {
            let end = v6
                .find(']')
                .ok_or_else(|| RemoteError::NoHost(arg.into()))?;
            (&v6[..end], v6[end + 1..].strip_prefix(':'))
        } else {
            match host_port.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (host_port, None),
            }
        };
        if host.is_empty() {
            return Err(RemoteError::NoHost(arg.into()));
        }
        let port = match port {
            None | Some("") => None,
            Some(p) => Some(
                p.parse::<u16>()
                    .ok()
                    .filter(|&p| p > 0)
                    .ok_or_else(|| RemoteError::BadPort(arg.into()))?,
            ),
        };
        let path = decode(arg, path)?;
        let path = match path.strip_prefix("/~/") {
            Some(home) => home.to_owned(),
            None if path == "/~" => String::new(),
            None => path,
        };
        Ok(Self {
            destination: Destination {
                user: user.filter(|u| !u.is_empty()),
                host: host.to_owned(),
                port,
            },
            path,
        })
    }
}

/// Where the `:` that makes an argument remote is (OpenSSH's `colon()`): the first one
/// before any `/`, outside an IPv6 address's brackets; none if the argument starts with
/// `:`.
fn colon(arg: &str) -> Option<usize> {
    let bytes = arg.as_bytes();
    if bytes.first() == Some(&b':') {
        return None;
    }
    let mut bracket = bytes.first() == Some(&b'[');
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'@' if bytes.get(i + 1) == Some(&b'[') => bracket = true,
            b']' if bracket && bytes.get(i + 1) == Some(&b':') => return Some(i + 1),
            b':' if !bracket => return Some(i),
            b'/' => return None,
            _ => {}
        }
    }
    None
}

/// `%XX` decoding of a URI part.
fn decode(arg: &str, part: &str) -> Result<String, RemoteError> {
    let bad = || RemoteError::BadEncoding(arg.into());
    let mut out = Vec::with_capacity(part.len());
    let mut bytes = part.bytes();
    while let Some(b) = bytes.next() {
        if b != b'%' {
            out.push(b);
            continue;
        }
        let hex = [bytes.next().ok_or_else(bad)?, bytes.next().ok_or_else(bad)?];
        let hex = core::str::from_utf8(&hex).map_err(|_| bad())?;
        out.push(u8::from_str_radix(hex, 16).map_err(|_| bad())?);
    }
    String::from_utf8(out).map_err(|_| bad())
}

/// How to run ssh: OpenSSH `sftp`'s pass-through options.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SshOptions {
    /// The ssh program (`-S`); `ssh` on the `PATH` when `None`.
    pub program: Option<PathBuf>,
    /// An ssh_config file (`-F`).
    pub config: Option<PathBuf>,
    /// The port (`-P`); a port in the destination (a URI's) wins.
    pub port: Option<u16>,
    /// Identity files (`-i`), in order.
    pub identities: Vec<PathBuf>,
    /// A jump host (`-J`).
    pub jump: Option<String>,
    /// Options for ssh (`-o`), in order, each as ssh takes it (`Key=value` or
    /// `Key value`).
    pub options: Vec<String>,
}

/// What OpenSSH's `sftp` always passes ssh, first, so the user's options cannot
/// override them (ssh takes the first value it is given for each option).
pub const SSH_DEFAULTS: [&str; 5] = [
    "-oForwardX11 no",
    "-oPermitLocalCommand no",
    "-oClearAllForwardings yes",
    "-oControlMaster no",
    "-oForwardAgent no",
];

impl SshOptions {
    /// The program and its arguments, as OpenSSH's `sftp` builds them: the defaults
    /// ([`SSH_DEFAULTS`]), the user's options, the port and login name, then
    /// `-s -- HOST sftp` (the SFTP subsystem).
    pub fn args(&self, destination: &Destination) -> (OsString, Vec<OsString>) {
        let program = self
            .program
            .clone()
            .map_or_else(|| OsString::from("ssh"), PathBuf::into_os_string);
        let mut args: Vec<OsString> = SSH_DEFAULTS.iter().map(OsString::from).collect();
        if let Some(config) = &self.config {
            args.push("-F".into());
            args.push(config.into());
        }
        if let Some(jump) = &self.jump {
            args.push("-J".into());
            args.push(jump.into());
        }
        for identity in &self.identities {
            args.push("-i".into());
            args.push(identity.into());
        }
        for option in &self.options {
            args.push("-o".into());
            args.push(option.into());
        }
        if let Some(port) = destination.port.or(self.port) {
            args.push(format!("-oPort {port}").into());
        }
        if let Some(user) = &destination.user {
            args.push("-l".into());
            args.push(user.into());
        }
        for arg in ["-s", "--", &destination.host, "sftp"] {
            args.push(arg.into());
        }
        (program, args)
    }
}

/// How long an exited ssh's stderr is read for before its error is reported.
pub(crate) const STDERR_GRACE: core::time::Duration = core::time::Duration::from_secs(1);

/// ssh's last non-empty lines (up to three), joined, control characters escaped.
pub(crate) fn last_lines(said: &[u8]) -> String {
    let text = String::from_utf8_lossy(said);
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let tail = &lines[lines.len().saturating_sub(3)..];
    if tail.is_empty() {
        return "ssh printed nothing".into();
    }
    crate::printable(&tail.join("; "))
}

#[cfg(test)]
mod tests;
