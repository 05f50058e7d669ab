//! What a part file keeps when a copy on several sessions stops: the byte ranges that
//! arrived, which need not start at 0 nor follow one another (each session had a range
//! of its own). They are recorded beside the part, in `PART.ranges` (on this side for a
//! get, on the server for a put), so that a resume fetches only what is missing instead
//! of cutting the part back to its first gap. A part that holds one run of bytes from
//! its start needs no record; a put on several sessions writes one before its first
//! WRITE, so a put dropped mid-way leaves a part whose holes are never taken for data.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The record's first line; the ranges follow, `FROM TO` a line.
const HEAD: &str = "volley-part ranges";

/// A record longer than this is not one of ours.
const MAX_RECORD: u64 = 1 << 20;

/// Appended to a part's name for its record.
const SUFFIX: &[u8] = b".ranges";

/// The record of `part`.
pub(crate) fn record_of(part: &Path) -> PathBuf {
    let mut name = part.as_os_str().to_owned();
    name.push(std::ffi::OsStr::from_bytes(SUFFIX));
    PathBuf::from(name)
}

/// The record of the remote part `part`.
pub(crate) fn remote_record_of(part: &[u8]) -> Vec<u8> {
    [part, SUFFIX].concat()
}

/// The ranges a record's `text` names, for a part of `len` bytes; `None` when it cannot
/// be trusted (malformed, overlapping, or past the part's end).
pub(crate) fn parse(text: &[u8], len: u64) -> Option<Vec<(u64, u64)>> {
    let text = core::str::from_utf8(text).ok()?;
    let mut lines = text.lines();
    if lines.next() != Some(HEAD) {
        return None;
    }
    let mut ranges = Vec::new();
    let mut end = 0;
    for line in lines {
        let mut words = line.split(' ').map(str::parse::<u64>);
        let (Some(Ok(from)), Some(Ok(to)), None) = (words.next(), words.next(), words.next())
        else {
            return None;
        };
        if from < end || to <= from || to > len {
            return None;
        }
        ranges.push((from, to));
        end = to;
    }
    Some(ranges)
}

/// The record naming `ranges` (sorted, apart).
pub(crate) fn render(ranges: &[(u64, u64)]) -> String {
    let mut text = format!("{HEAD}\n");
    for (from, to) in ranges {
        text.push_str(&format!("{from} {to}\n"));
    }
    text
}

/// Whether `ranges` need a record: anything but one run from 0, or nothing.
pub(crate) fn needs_record(ranges: &[(u64, u64)]) -> bool {
    !matches!(ranges, [] | [(0, _)])
}

/// The ranges the record of `part` names, if it has a record: `Some(None)` for a record
/// that cannot be trusted (unreadable, malformed, overlapping, or past the part's `len`
/// bytes), whose part must then be started over.
pub(crate) fn read(part: &Path, len: u64) -> Option<Option<Vec<(u64, u64)>>> {
    let record = record_of(part);
    let meta = std::fs::metadata(&record).ok()?;
    if meta.len() > MAX_RECORD {
        return Some(None);
    }
    let Ok(text) = std::fs::read(&record) else {
        return Some(None);
    };
    Some(parse(&text, len))
}

/// Records `ranges` (sorted, apart) for `part`; or, when they are one run from 0 (or
/// nothing), removes any record, as the part's length then says it all.
pub(crate) fn write(part: &Path, ranges: &[(u64, u64)]) -> std::io::Result<()> {
    if !needs_record(ranges) {
        return remove(part);
    }
    std::fs::write(record_of(part), render(ranges))
}

/// Removes the record of `part`, if there is one.
pub(crate) fn remove(part: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(record_of(part)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// `ranges` sorted and merged where they touch or overlap.
pub(crate) fn merge(mut ranges: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    ranges.retain(|&(a, b)| b > a);
    ranges.sort_unstable();
    let mut merged: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
    for (from, to) in ranges {
        match merged.last_mut() {
            Some(last) if from <= last.1 => last.1 = last.1.max(to),
            _ => merged.push((from, to)),
        }
    }
    merged
}

/// What of `[0, size)` the sorted, apart `present` ranges leave out.
pub(crate) fn gaps(present: &[(u64, u64)], size: u64) -> Vec<(u64, u64)> {
    let mut gaps = Vec::new();
    let mut at = 0;
    for &(from, to) in present {
        if from > at {
            gaps.push((at, from.min(size)));
        }
        at = at.max(to);
    }
    if at < size {
        gaps.push((at, size));
    }
    gaps.retain(|&(a, b)| b > a);
    gaps
}

/// The bytes `ranges` hold.
pub(crate) fn total(ranges: &[(u64, u64)]) -> u64 {
    ranges.iter().map(|&(a, b)| b - a).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_and_gaps() {
        let present = merge(vec![(50, 60), (0, 10), (10, 20), (55, 70), (90, 90)]);
        assert_eq!(present, [(0, 20), (50, 70)]);
        assert_eq!(gaps(&present, 100), [(20, 50), (70, 100)]);
        assert_eq!(gaps(&[], 5), [(0, 5)]);
        assert_eq!(gaps(&[(0, 5)], 5), []);
        assert_eq!(total(&present), 40);
    }

    #[test]
    fn a_record_round_trips_and_a_bad_one_is_not_trusted() {
        let dir = std::env::temp_dir().join(format!("volley-kept-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let part = dir.join("f.volley-part");
        assert_eq!(read(&part, 100), None, "no record");
        write(&part, &[(10, 20), (40, 80)]).unwrap();
        assert_eq!(read(&part, 100), Some(Some(vec![(10, 20), (40, 80)])));
        assert_eq!(read(&part, 50), Some(None), "past the part's end");
        for bad in [
            "nope\n1 2\n",
            "volley-part ranges\n5 3\n",
            "volley-part ranges\n1 9\n2 4\n",
        ] {
            std::fs::write(record_of(&part), bad).unwrap();
            assert_eq!(read(&part, 100), Some(None), "{bad:?}");
        }
        // One run from the start needs no record.
        write(&part, &[(0, 30)]).unwrap();
        assert!(!record_of(&part).exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
