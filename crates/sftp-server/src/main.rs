//! `volley-sftp-server`: the server on standard input and output, for sshd's
//! `Subsystem sftp` line.

fn main() -> std::process::ExitCode {
    volley_sftp_server::main_with(std::env::args().skip(1))
}
