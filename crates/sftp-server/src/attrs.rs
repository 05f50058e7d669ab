//! What the server says of a file: its ATTRS, and the `ls -l` line OpenSSH's `sftp`
//! prints for `ls -l`.

use std::fs::Metadata;
use std::os::unix::fs::MetadataExt;

use volley_proto::sftp::Attrs;

/// ATTRS of `meta`: size, owner, mode (file type bits included) and times.
pub(crate) fn of(meta: &Metadata) -> Attrs<'static> {
    Attrs {
        size: Some(meta.size()),
        uid_gid: Some((meta.uid(), meta.gid())),
        permissions: Some(meta.mode()),
        // SFTP v3 carries 32-bit times: past 2106 they wrap, as OpenSSH's do.
        atime_mtime: Some((meta.atime() as u32, meta.mtime() as u32)),
        extended: None,
    }
}

/// `ls -l`'s line for `name`, as OpenSSH's server writes it: mode, links, owner, group
/// (numbers: names are the client's to look up), size, time (UTC) and name.
pub(crate) fn long_name(name: &[u8], meta: &Metadata) -> Vec<u8> {
    let mode = mode_string(meta.mode());
    let when = date(meta.mtime());
    let mut line = format!(
        "{mode} {:>3} {:<8} {:<8} {:>8} {when} ",
        meta.nlink(),
        meta.uid(),
        meta.gid(),
        meta.size()
    )
    .into_bytes();
    line.extend_from_slice(name);
    line
}

/// `drwxr-xr-x`, with the setuid, setgid and sticky letters.
fn mode_string(mode: u32) -> String {
    let kind = match mode & 0o170_000 {
        0o040_000 => 'd',
        0o120_000 => 'l',
        0o020_000 => 'c',
        0o060_000 => 'b',
        0o010_000 => 'p',
        0o140_000 => 's',
        _ => '-',
    };
    let mut s = String::with_capacity(10);
    s.push(kind);
    for (shift, special, set, unset) in [
        (6, 0o4000, 's', 'S'),
        (3, 0o2000, 's', 'S'),
        (0, 0o1000, 't', 'T'),
    ] {
        let bits = (mode >> shift) & 7;
        s.push(if bits & 4 != 0 { 'r' } else { '-' });
        s.push(if bits & 2 != 0 { 'w' } else { '-' });
        s.push(match (bits & 1 != 0, mode & special != 0) {
            (true, true) => set,
            (false, true) => unset,
            (true, false) => 'x',
            (false, false) => '-',
        });
    }
    s
}

/// `Jan  2 15:04`, as `ls` shows a time (UTC).
fn date(secs: i64) -> String {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let days = secs.div_euclid(86_400);
    let of_day = secs.rem_euclid(86_400);
    let (_, month, day) = civil(days);
    format!(
        "{} {:>2} {:02}:{:02}",
        MONTHS[(month - 1) as usize],
        day,
        of_day / 3600,
        of_day % 3600 / 60
    )
}

/// The calendar date of `days` since 1970-01-01 (Howard Hinnant's civil_from_days).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::{civil, date, mode_string};

    #[test]
    fn modes_and_dates_read_as_ls_writes_them() {
        assert_eq!(mode_string(0o100_644), "-rw-r--r--");
        assert_eq!(mode_string(0o040_755), "drwxr-xr-x");
        assert_eq!(mode_string(0o104_755), "-rwsr-xr-x");
        assert_eq!(mode_string(0o041_777), "drwxrwxrwt");
        assert_eq!(mode_string(0o120_777), "lrwxrwxrwx");
        assert_eq!(civil(0), (1970, 1, 1));
        assert_eq!(civil(19_723), (2024, 1, 1));
        assert_eq!(date(86_400 * 59 + 3600 * 13 + 60 * 5), "Mar  1 13:05");
    }
}
