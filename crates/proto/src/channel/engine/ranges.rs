//! A set of half-open ranges of `u64`, kept sorted and merged: which bytes of a message
//! arrived or were acknowledged, which packet numbers came in.

use alloc::vec::Vec;

/// Disjoint, sorted, merged `[start, end)` ranges.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct RangeSet {
    ranges: Vec<(u64, u64)>,
}

impl RangeSet {
    /// Adds `[start, end)`; returns how many of its values were new.
    pub(crate) fn insert(&mut self, start: u64, end: u64) -> u64 {
        if start >= end {
            return 0;
        }
        // The first range that could touch [start, end): its end >= start.
        let i = self.ranges.partition_point(|&(_, e)| e < start);
        let mut new = end - start;
        let (mut lo, mut hi) = (start, end);
        let mut j = i;
        while j < self.ranges.len() && self.ranges[j].0 <= hi {
            let (s, e) = self.ranges[j];
            // Overlap of [s, e) with [start, end) was not new.
            let overlap = e.min(end).saturating_sub(s.max(start));
            new -= overlap;
            lo = lo.min(s);
            hi = hi.max(e);
            j += 1;
        }
        self.ranges.splice(i..j, [(lo, hi)]);
        new
    }

    /// Whether every value of `[start, end)` is in the set.
    pub(crate) fn contains_all(&self, start: u64, end: u64) -> bool {
        if start >= end {
            return true;
        }
        let i = self.ranges.partition_point(|&(_, e)| e <= start);
        self.ranges
            .get(i)
            .is_some_and(|&(s, e)| s <= start && end <= e)
    }

    /// Whether `value` is in the set.
    pub(crate) fn contains(&self, value: u64) -> bool {
        self.contains_all(value, value + 1)
    }

    /// The ranges, lowest first.
    pub(crate) fn iter(&self) -> impl DoubleEndedIterator<Item = (u64, u64)> + '_ {
        self.ranges.iter().copied()
    }

    /// Ranges held.
    pub(crate) fn len(&self) -> usize {
        self.ranges.len()
    }

    /// Drops the lowest ranges until at most `keep` remain.
    pub(crate) fn keep_highest(&mut self, keep: usize) {
        if self.ranges.len() > keep {
            let drop = self.ranges.len() - keep;
            self.ranges.drain(..drop);
        }
    }

    /// The largest value, if any.
    pub(crate) fn max(&self) -> Option<u64> {
        self.ranges.last().map(|&(_, e)| e - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_and_counts_what_is_new() {
        let mut s = RangeSet::default();
        assert_eq!(s.insert(10, 20), 10);
        assert_eq!(s.insert(30, 40), 10);
        assert_eq!(s.insert(15, 35), 10, "only 20..30 is new");
        assert_eq!(s.iter().collect::<Vec<_>>(), [(10, 40)]);
        assert_eq!(s.insert(40, 41), 1, "adjacent ranges merge");
        assert_eq!(s.len(), 1);
        assert!(s.contains_all(10, 41));
        assert!(!s.contains_all(9, 12));
        assert_eq!(s.insert(0, 5), 5);
        assert_eq!(s.insert(0, 100), 100 - 31 - 5);
        assert_eq!(s.iter().collect::<Vec<_>>(), [(0, 100)]);
        assert_eq!(s.max(), Some(99));
        s.insert(200, 201);
        s.insert(300, 301);
        s.keep_highest(2);
        assert_eq!(s.iter().collect::<Vec<_>>(), [(200, 201), (300, 301)]);
        assert!(s.contains(300) && !s.contains(0));
    }
}
