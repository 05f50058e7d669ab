//! The transfer loops: one byte range of one open file, `requests` READs or WRITEs in
//! flight on one session. A whole-file transfer is one range; with several sessions
//! ([`Sessions`](crate::Sessions)) a large file is cut into one range per session.
//! [`Ranges`] tracks how far each range has arrived without a gap, so a part file can be
//! cut to the bytes that are surely there.

use core::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

mod reading;
mod writing;

pub(crate) use reading::{ReadSpan, read_span};
pub(crate) use writing::{Source, WriteSpan, write_span};

/// Asks transfers to stop, as OpenSSH's `sftp` stops on Ctrl-C: no new READ or WRITE
/// goes out, those already out are answered, and the transfer ends with
/// [`SftpError::Stopped`] (inside [`SftpError::Kept`] when bytes were kept), its part cut
/// or recorded to hold exactly what arrived, for a resume. Clones stop together; a tree
/// starts no new file or listing.
///
/// [`SftpError::Stopped`]: crate::SftpError::Stopped
/// [`SftpError::Kept`]: crate::SftpError::Kept
#[derive(Clone, Debug, Default)]
pub struct Stop(Arc<AtomicBool>);

impl Stop {
    /// A handle not yet stopped.
    pub fn new() -> Self {
        Self::default()
    }

    /// Asks every transfer holding a clone to stop.
    pub fn stop(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    /// Whether [`stop`](Self::stop) was called.
    pub fn is_stopped(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// Consecutive ranges `[from, to)` of one file, each with how far it has arrived with no
/// gap; the last may run to end of file.
#[derive(Debug)]
pub(crate) struct Ranges {
    bounds: Vec<(u64, Option<u64>)>,
    marks: Mutex<Vec<u64>>,
}

impl Ranges {
    /// One range, `[from, to)`, or from `from` to end of file.
    pub(crate) fn whole(from: u64, to: Option<u64>) -> Self {
        Self::of(vec![(from, to)])
    }

    /// `gaps` (sorted, apart) cut into pieces of `piece` bytes when they add up to two
    /// pieces or more, else one range a gap.
    pub(crate) fn cut(gaps: &[(u64, u64)], piece: u64) -> Self {
        Self::of(cut_bounds(gaps, piece))
    }

    /// What a get still needs of a file of `size` bytes: `gaps` (sorted, apart, within
    /// the file), cut into pieces of `piece` bytes when they add up to two pieces or
    /// more, the last range running on to end of file (a get sees growth and end of
    /// file as on one session): when the last gap ends before `size`, a range of its
    /// own from `size` looks for the end.
    pub(crate) fn missing(gaps: &[(u64, u64)], piece: u64, size: u64) -> Self {
        let mut bounds = cut_bounds(gaps, piece);
        match bounds.last_mut() {
            Some(last) if last.1 == Some(size) => last.1 = None,
            _ => bounds.push((size, None)),
        }
        Self::of(bounds)
    }

    /// What has arrived: each range from its start to how far it arrived without a gap
    /// (those with nothing left out).
    pub(crate) fn arrived(&self) -> Vec<(u64, u64)> {
        let marks = self.marks.lock().unwrap_or_else(PoisonError::into_inner);
        let starts = self.bounds.iter().map(|&(from, _)| from);
        starts
            .zip(marks.iter().copied())
            .filter(|&(a, b)| b > a)
            .collect()
    }

    fn of(bounds: Vec<(u64, Option<u64>)>) -> Self {
        let marks = Mutex::new(bounds.iter().map(|&(a, _)| a).collect());
        Self { bounds, marks }
    }

    /// The ranges, in order.
    pub(crate) fn bounds(&self) -> &[(u64, Option<u64>)] {
        &self.bounds
    }

    /// Records that range `i` has arrived without a gap up to `mark`; returns how far
    /// the whole file has (up to the first range not complete).
    pub(crate) fn mark(&self, i: usize, mark: u64) -> u64 {
        let mut marks = self.marks.lock().unwrap_or_else(PoisonError::into_inner);
        marks[i] = mark;
        for (&(_, to), &mark) in self.bounds.iter().zip(marks.iter()) {
            if to != Some(mark) {
                return mark;
            }
        }
        marks.last().copied().unwrap_or(0)
    }
}

/// `gaps` cut as [`Ranges::cut`] cuts them.
fn cut_bounds(gaps: &[(u64, u64)], piece: u64) -> Vec<(u64, Option<u64>)> {
    let piece = piece.max(1);
    let total: u64 = gaps.iter().map(|&(a, b)| b - a).sum();
    let piece = if total < piece.saturating_mul(2) {
        u64::MAX
    } else {
        piece
    };
    let mut bounds = Vec::new();
    for &(from, to) in gaps {
        let mut at = from;
        while at < to {
            let next = at.saturating_add(piece).min(to);
            bounds.push((at, Some(next)));
            at = next;
        }
    }
    bounds
}

#[cfg(test)]
mod tests {
    use super::Ranges;

    #[test]
    fn pieces_report_the_gapless_prefix() {
        let r = Ranges::cut(&[(100, 1100)], 250);
        assert_eq!(
            r.bounds(),
            [
                (100, Some(350)),
                (350, Some(600)),
                (600, Some(850)),
                (850, Some(1100))
            ]
        );
        // Later pieces arriving do not move the prefix past an incomplete earlier one.
        assert_eq!(r.mark(2, 850), 100);
        assert_eq!(r.mark(0, 300), 300);
        assert_eq!(r.mark(0, 350), 350);
        assert_eq!(r.mark(1, 600), 850, "pieces 0-2 complete, 3 not begun");
        // Shorter than two pieces: one; the last piece shorter.
        assert_eq!(Ranges::cut(&[(0, 300)], 200).bounds(), [(0, Some(300))]);
        assert_eq!(Ranges::cut(&[(5, 5)], 200).bounds(), []);
        assert_eq!(
            Ranges::cut(&[(0, 500)], 200).bounds().last(),
            Some(&(400, Some(500)))
        );
    }

    #[test]
    fn missing_cuts_the_gaps_and_runs_on_to_the_end() {
        let open = Ranges::missing(&[(0, 1000)], 500, 1000);
        assert_eq!(open.bounds(), [(0, Some(500)), (500, None)]);
        assert_eq!(open.mark(0, 500), 500);
        assert_eq!(open.mark(1, 777), 777);
        // Short of two pieces: one range a gap.
        let few = Ranges::missing(&[(10, 20), (50, 100)], 500, 100);
        assert_eq!(few.bounds(), [(10, Some(20)), (50, None)]);
        // The tail is there already: a range of its own looks for the end.
        let tail = Ranges::missing(&[(0, 400), (600, 1100)], 300, 2000);
        assert_eq!(
            tail.bounds(),
            [
                (0, Some(300)),
                (300, Some(400)),
                (600, Some(900)),
                (900, Some(1100)),
                (2000, None)
            ]
        );
        tail.mark(1, 350);
        tail.mark(2, 900);
        assert_eq!(tail.arrived(), [(300, 350), (600, 900)]);
        // Nothing missing: only the look for the end.
        assert_eq!(Ranges::missing(&[], 300, 70).bounds(), [(70, None)]);
    }
}
