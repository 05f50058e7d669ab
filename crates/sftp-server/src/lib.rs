//! An SFTP v3 server for sshd's `Subsystem` line, in place of OpenSSH's `sftp-server`:
//!
//! ```text
//! Subsystem sftp /usr/local/bin/volley-sftp-server
//! ```
//!
//! It speaks SFTP on its standard input and output, as the user sshd logged in, with
//! OpenSSH's options (`-d`, `-R`, `-u`, `-l`, `-e`, `-P`, `-p`, `-Q`). Where OpenSSH's
//! server answers one request at a time and copies each READ into its reply, this one
//! runs requests on a pool of threads (READs and WRITEs of one file at their own offsets
//! at once; a request that changes what others see, such as CLOSE or RENAME, waits for
//! those before it), sends each reply as it completes with its data written from the
//! buffer it was read into, and states a 1 MiB limit on READ and WRITE in
//! `limits@openssh.com` (OpenSSH's is 255 KiB). Memory is bounded per session: when
//! replies back up because the client does not read them, it stops reading requests.
//! It adds no chroot of its own: sshd's `ChrootDirectory` is the tool for that.
//!
//! ```
//! use std::io::{Read, Write};
//! use std::os::unix::net::UnixStream;
//!
//! let (mut client, server) = UnixStream::pair()?;
//! let config = volley_sftp_server::Config::default();
//! let running = std::thread::spawn(move || {
//!     volley_sftp_server::serve(&server, &server, &config)
//! });
//! // INIT, version 3: length 5, type 1, version 3.
//! client.write_all(&[0, 0, 0, 5, 1, 0, 0, 0, 3])?;
//! let mut head = [0u8; 9];
//! client.read_exact(&mut head)?;
//! assert_eq!(head[4], 2, "VERSION");
//! assert_eq!(u32::from_be_bytes(head[5..9].try_into().unwrap()), 3);
//! client.shutdown(std::net::Shutdown::Write)?;
//! let mut rest = Vec::new();
//! client.read_to_end(&mut rest)?; // the extensions it offers
//! assert_eq!(running.join().unwrap()?.requests, 1);
//! # Ok::<(), std::io::Error>(())
//! ```

mod args;
mod attrs;
mod check;
mod config;
mod copy;
mod exec;
mod extended;
mod handles;
mod op;
mod paths;
mod reply;
mod session;

pub use args::{Options, USAGE, main_with};
pub use config::{
    Config, ConfigError, DEFAULT_BUDGET, DEFAULT_MAX_HANDLES, DEFAULT_MAX_IO, DEFAULT_THREADS,
    REQUESTS,
};
pub use session::{Report, serve};
