//! `volley sftp`: runs a parsed command. `get` and `put` copy each source (a file, or
//! with `-r` a tree) to the destination, into it when it is a directory; remote
//! wildcards are expanded on the server. A single file's line is `N bytes in T ms, X
//! MB/s` (MB = 10^6 bytes); a tree's is its summary.

use std::ffi::OsString;
use std::io::IsTerminal;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use tokio::signal::unix::{Signal, SignalKind, signal};
use volley_sftp::{Progress, Remote, Sessions, TransferOptions, printable, printable_bytes};

use crate::sftp::{Copy, Direction, Server, SftpCommand, open_sessions};
use crate::sftp_remote::{self as remote, Op};
use crate::sftp_tree::basename;

/// One copy a command makes.
/// A get or a put as the command line gave it.
struct Transfer<'a> {
    server: &'a Server,
    what: Direction,
    /// `put --sendfile`.
    send_from_file: bool,
    /// `get --allow-shrink`.
    allow_shrink: bool,
    copy: &'a Copy,
    /// The arguments that name paths on the server.
    remote_args: Vec<&'a str>,
    /// The arguments that name local paths.
    local_args: Vec<&'a Path>,
}

impl<'a> Transfer<'a> {
    /// The transfer `command` asks for, or `None` for a remote operation.
    fn of(command: &'a SftpCommand) -> Option<Self> {
        match command {
            SftpCommand::Get {
                server,
                allow_shrink,
                copy,
                src,
                dst,
            } => Some(Self {
                server,
                what: Direction::Get,
                send_from_file: false,
                allow_shrink: *allow_shrink,
                copy,
                remote_args: src.iter().map(String::as_str).collect(),
                local_args: vec![dst.as_path()],
            }),
            SftpCommand::Put {
                server,
                sendfile,
                copy,
                src,
                dst,
            } => Some(Self {
                server,
                what: Direction::Put,
                send_from_file: *sendfile,
                allow_shrink: false,
                copy,
                remote_args: vec![dst.as_str()],
                local_args: src.iter().map(PathBuf::as_path).collect(),
            }),
            _ => None,
        }
    }
}

struct Job {
    /// The path on the server.
    remote: Vec<u8>,
    /// The local path.
    local: PathBuf,
    /// A tree (`-r` on a directory).
    tree: bool,
}

pub(crate) async fn run(command: SftpCommand) -> anyhow::Result<()> {
    let command = match command {
        SftpCommand::Ls { server, long, path } => {
            return remote::run(&server, Op::Ls { path, long }).await;
        }
        SftpCommand::Mkdir {
            server,
            parents,
            path,
        } => return remote::run(&server, Op::Mkdir { path, parents }).await,
        SftpCommand::Rm {
            server,
            recursive,
            path,
        } => return remote::run(&server, Op::Rm { path, recursive }).await,
        SftpCommand::Mv { server, from, to } => {
            return remote::run(&server, Op::Mv { from, to }).await;
        }
        transfer => transfer,
    };
    let Some(Transfer {
        server,
        what,
        send_from_file,
        allow_shrink,
        copy,
        remote_args,
        local_args,
    }) = Transfer::of(&command)
    else {
        unreachable!("remote operations returned above")
    };
    check_sides(server, what, &remote_args, &local_args)?;
    let (sftp, first_path) = open_sessions(
        server,
        what.name(),
        remote_args[0],
        usize::from(copy.sessions),
    )
    .await?;
    warn_of_chunk(&sftp, server, what);
    let opts = options(server, copy, send_from_file, allow_shrink);
    // Taken for the whole command, so a Ctrl-C between two files is not missed.
    let mut sigint = signal(SignalKind::interrupt())?;
    let done = async {
        let jobs = until_interrupted(&mut sigint, async {
            Ok(match what {
                Direction::Get => {
                    let mut paths = vec![first_path.clone()];
                    for arg in &remote_args[1..] {
                        paths.push(crate::sftp::remote_path(server, arg)?);
                    }
                    get_jobs(&sftp, &paths, local_args[0], copy).await?
                }
                Direction::Put => put_jobs(&sftp, &local_args, &first_path, copy).await?,
            })
        })
        .await
        .map_err(|Interrupted| {
            interrupted(format!("{what} interrupted before any copy began"))
        })??;
        copy_all(&sftp, what, &jobs, &opts, &mut sigint).await
    }
    .await;
    sftp.shutdown().await?;
    done
}

/// Refuses a host named where only the other side can be remote, and sources on
/// different hosts.
fn check_sides(
    server: &Server,
    what: Direction,
    remote_args: &[&str],
    local_args: &[&Path],
) -> anyhow::Result<()> {
    if server.direct() {
        return Ok(());
    }
    for local in local_args {
        let names_host = local
            .to_str()
            .is_some_and(|l| matches!(Remote::parse(l), Ok(Some(_))));
        if names_host {
            anyhow::bail!(
                "{what}: `{}` names a host, but only the {} side can be remote",
                local.to_string_lossy(),
                if what == Direction::Get {
                    "source"
                } else {
                    "destination"
                }
            );
        }
    }
    let first = Remote::parse(remote_args[0])?.map(|r| r.destination);
    for arg in &remote_args[1..] {
        if Remote::parse(arg)?.map(|r| r.destination) != first {
            anyhow::bail!("{what}: every source must be on one server (`{arg}` is not)");
        }
    }
    Ok(())
}

/// Says when --chunk is more than the server (or volley) takes.
fn warn_of_chunk(sftp: &Sessions, server: &Server, what: Direction) {
    let Some(chunk) = server.chunk else {
        return;
    };
    let first = sftp.first();
    let used = match what {
        Direction::Get => first.read_len(Some(chunk)),
        Direction::Put => first.write_len(Some(chunk)),
    };
    if used < chunk {
        let whose = match used == volley_sftp::MAX_CHUNK {
            true => "volley's",
            false => "the server's",
        };
        eprintln!("volley: --chunk {chunk} is over {whose} limit; using {used} bytes");
    }
}

fn options(
    server: &Server,
    copy: &Copy,
    send_from_file: bool,
    allow_shrink: bool,
) -> TransferOptions {
    TransferOptions {
        requests: server.requests,
        chunk: server.chunk,
        send_from_file,
        allow_shrink,
        preserve: copy.preserve,
        fsync: copy.fsync,
        resume: copy.resume,
        inplace: copy.inplace,
        follow_links: copy.follow_links,
        // Both are range-checked by the parser, far below usize's range.
        max_depth: copy.max_depth as usize,
        max_entries: copy.max_entries as usize,
        stop: volley_sftp::Stop::new(),
        progress: None,
    }
}

/// What a get of `patterns` (expanded on the server) into `dst` copies.
async fn get_jobs(
    sftp: &Sessions,
    patterns: &[String],
    dst: &Path,
    copy: &Copy,
) -> anyhow::Result<Vec<Job>> {
    let first = sftp.first();
    let mut sources = Vec::new();
    let mut globbed = false;
    for pattern in patterns {
        let found = first
            .glob(pattern.as_bytes(), copy.max_entries as usize)
            .await?;
        globbed |= found.len() != 1 || found[0] != pattern.as_bytes();
        sources.extend(found);
    }
    let into = dst.is_dir();
    if (sources.len() > 1 || globbed) && !into {
        anyhow::bail!(
            "get: {} is not a directory (several sources are copied into one)",
            printable_bytes(dst.as_os_str().as_encoded_bytes())
        );
    }
    let mut jobs = Vec::new();
    for remote in sources {
        // A tree decides where it lands itself (DST/basename into an existing DST).
        let tree = copy.recursive && first.stat(&remote).await.is_ok_and(|a| a.is_dir());
        let local = match basename(&remote) {
            Some(name) if into && !tree => dst.join(OsString::from_vec(name.to_vec())),
            _ => dst.to_owned(),
        };
        jobs.push(Job {
            remote,
            local,
            tree,
        });
    }
    Ok(jobs)
}

/// What a put of `sources` to `dst` on the server copies.
async fn put_jobs(
    sftp: &Sessions,
    sources: &[&Path],
    dst: &str,
    copy: &Copy,
) -> anyhow::Result<Vec<Job>> {
    // One source decides where it lands itself (a file into a directory, a tree into
    // an existing one, by the STAT it makes anyway): no round trip here for it.
    let into = sources.len() > 1
        && sftp
            .first()
            .stat(dst.as_bytes())
            .await
            .is_ok_and(|a| a.is_dir());
    if sources.len() > 1 && !into {
        anyhow::bail!(
            "put: {} is not a directory on the server (several sources are copied into one)",
            printable(dst)
        );
    }
    let mut jobs = Vec::new();
    for local in sources {
        let tree = copy.recursive && local.is_dir();
        let name = local.file_name().map(|n| n.as_encoded_bytes());
        let remote = match name {
            Some(name) if into && !tree => {
                [dst.trim_end_matches('/').as_bytes(), b"/", name].concat()
            }
            _ => dst.as_bytes().to_vec(),
        };
        jobs.push(Job {
            remote,
            local: local.to_path_buf(),
            tree,
        });
    }
    Ok(jobs)
}

/// Runs every job, one after another; one that fails is printed and the rest go on.
async fn copy_all(
    sftp: &Sessions,
    what: Direction,
    jobs: &[Job],
    opts: &TransferOptions,
    sigint: &mut Signal,
) -> anyhow::Result<()> {
    let mut failed = 0;
    for job in jobs {
        let work = async {
            match job.tree {
                true => crate::sftp_tree::run(sftp, what, &job.remote, &job.local, opts).await,
                false => one_file(sftp, what, job, opts).await,
            }
        };
        let done = match until_stopped(sigint, &opts.stop, work).await {
            Ended::Done(done) => done,
            Ended::Stopped(done) => {
                let kept = done.err().as_ref().and_then(kept_in);
                let said = match kept {
                    Some((part, n)) => format!(
                        "{what} interrupted; {n} bytes kept in {part}, and `{what} -a` with the same arguments resumes"
                    ),
                    None => left_behind(sftp, what, job, opts).await,
                };
                return Err(interrupted(said));
            }
            Ended::Abandoned => {
                return Err(interrupted(left_behind(sftp, what, job, opts).await));
            }
        };
        match done {
            Ok(()) => {}
            // One source: its error is the command's.
            Err(e) if jobs.len() == 1 => return Err(e),
            Err(e) => {
                failed += 1;
                eprintln!("volley: {}", crate::chain(&e));
            }
        }
    }
    if failed > 0 {
        anyhow::bail!("{failed} of {} sources failed", jobs.len());
    }
    Ok(())
}

/// One file, with a progress bar on a terminal and its line when done.
async fn one_file(
    sftp: &Sessions,
    what: Direction,
    job: &Job,
    opts: &TransferOptions,
) -> anyhow::Result<()> {
    let bar = if std::io::stderr().is_terminal() {
        let bar = ProgressBar::new(0);
        if let Ok(style) =
            ProgressStyle::with_template("{bar:40} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}")
        {
            bar.set_style(style);
        }
        bar
    } else {
        ProgressBar::hidden()
    };
    let last = Arc::new(Mutex::new(Progress {
        done: 0,
        total: None,
    }));
    let (told, shown) = (last.clone(), bar.clone());
    let opts = opts.clone().with_progress(move |p: Progress| {
        if let Some(total) = p.total {
            shown.set_length(total);
        }
        shown.set_position(p.done);
        *told.lock().unwrap_or_else(PoisonError::into_inner) = p;
    });
    let start = Instant::now();
    let moved = if what == Direction::Get {
        sftp.get(&job.remote, &job.local, &opts).await
    } else {
        sftp.put(&job.local, &job.remote, &opts).await
    }
    .map_err(|e| resumable(what, e))?;
    let last = *last.lock().unwrap_or_else(PoisonError::into_inner);
    if let (Direction::Get, Some(stated)) = (what, last.total) {
        let reached = last.done;
        if reached < stated {
            eprintln!(
                "volley: warning: {}: the server stated {stated} bytes but the file ended at {reached}; kept the short copy (--allow-shrink)",
                printable_bytes(&job.remote)
            );
        }
    }
    let elapsed = start.elapsed();
    bar.finish_and_clear();
    eprintln!(
        "{moved} bytes in {:.1} ms, {:.1} MB/s",
        elapsed.as_secs_f64() * 1e3,
        moved as f64 / 1e6 / elapsed.as_secs_f64().max(1e-9)
    );
    Ok(())
}

/// A command's work ended by Ctrl-C (SIGINT; ssh ignores it, so the session is still
/// up). The work is dropped, which keeps what arrived in the part files.
struct Interrupted;

/// Runs `work` until it ends or the user presses Ctrl-C.
async fn until_interrupted<T>(
    sigint: &mut Signal,
    work: impl Future<Output = anyhow::Result<T>>,
) -> Result<anyhow::Result<T>, Interrupted> {
    tokio::select! {
        done = work => Ok(done),
        _ = sigint.recv() => Err(Interrupted),
    }
}

/// How a copy ended.
enum Ended<T> {
    /// By itself.
    Done(T),
    /// Stopped by a Ctrl-C, once the requests out were answered: what it gave then.
    Stopped(T),
    /// Dropped at a second Ctrl-C.
    Abandoned,
}

/// Runs `work` until it ends; a Ctrl-C stops it as OpenSSH's `sftp` stops a transfer (no
/// new requests, those out answered, the part holding exactly what arrived), a second
/// one drops it at once.
async fn until_stopped<T>(
    sigint: &mut Signal,
    stop: &volley_sftp::Stop,
    work: impl Future<Output = T>,
) -> Ended<T> {
    let mut work = core::pin::pin!(work);
    tokio::select! {
        done = &mut work => return Ended::Done(done),
        _ = sigint.recv() => {}
    }
    stop.stop();
    eprintln!("volley: stopping once the requests out are answered (Ctrl-C again to quit now)");
    tokio::select! {
        done = &mut work => Ended::Stopped(done),
        _ = sigint.recv() => Ended::Abandoned,
    }
}

/// The part an error says bytes were kept in, and how many.
fn kept_in(e: &anyhow::Error) -> Option<(String, u64)> {
    e.chain().find_map(
        |cause| match cause.downcast_ref::<volley_sftp::SftpError>() {
            Some(volley_sftp::SftpError::Kept { part, kept, .. }) => Some((part.clone(), *kept)),
            _ => None,
        },
    )
}

/// The command's error for a Ctrl-C: `message`, exit status 130.
fn interrupted(message: String) -> anyhow::Error {
    crate::Interrupted(message).into()
}

/// What an interrupted `job` left, and how to go on: the part it kept and its bytes.
async fn left_behind(
    sftp: &Sessions,
    what: Direction,
    job: &Job,
    opts: &TransferOptions,
) -> String {
    let resume = format!("`{what} -a` with the same arguments resumes");
    if job.tree {
        return format!(
            "{what} -r interrupted; each file that had bytes arrive keeps them (named above), and {resume}"
        );
    }
    let kept = match what {
        Direction::Get if opts.inplace => std::fs::metadata(&job.local).ok().map(|m| {
            (
                printable_bytes(job.local.as_os_str().as_encoded_bytes()),
                m.len(),
            )
        }),
        Direction::Get => volley_sftp::kept_part(&job.local)
            .map(|(part, n)| (printable_bytes(part.as_os_str().as_encoded_bytes()), n)),
        Direction::Put => {
            let part = match opts.inplace {
                true => job.remote.clone(),
                false => [&job.remote[..], volley_sftp::PART_SUFFIX].concat(),
            };
            let stat = sftp.first().stat(&part);
            let size = tokio::time::timeout(core::time::Duration::from_secs(5), stat).await;
            match size {
                Ok(Ok(attrs)) => attrs.size.map(|n| (printable_bytes(&part), n)),
                _ => None,
            }
        }
    };
    match kept {
        Some((part, n)) if n > 0 => {
            format!("{what} interrupted; {n} bytes kept in {part}, and {resume}")
        }
        _ => format!("{what} interrupted; no bytes had arrived, so nothing was kept"),
    }
}

/// The error of a failed transfer, with how to resume it when bytes were kept.
fn resumable(what: Direction, e: volley_sftp::SftpError) -> anyhow::Error {
    let hint = if matches!(e, volley_sftp::SftpError::Kept { .. }) {
        format!(" (`{what} -a` resumes)")
    } else {
        String::new()
    };
    anyhow::Error::new(e).context(format!("{what} failed{hint}"))
}
