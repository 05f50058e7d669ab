//! Warnings a peer can trigger, rate-limited: at most one line per reason per peer per
//! second, and the next line says how many were left out meanwhile. A hostile peer can
//! make a server warn as fast as it can send; without this, the log (and a stalled
//! stderr behind it) would become the attack.

use core::fmt::Display;
use core::time::Duration;
use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

/// Reasons and peers remembered at once; past it the oldest half is forgotten (their
/// next warning is then logged at once, which only costs a line).
const REMEMBERED: usize = 4096;

/// When each (reason, peer) last logged, and how many lines it has left out since.
type Seen = HashMap<(&'static str, String), (Instant, u64)>;

static SEEN: Mutex<Option<Seen>> = Mutex::new(None);

/// Logs `reason` for `peer` at warning level, unless it was logged for that peer less
/// than a second ago; then it is only counted, and the count goes with the next line.
pub(crate) fn warn_limited(reason: &'static str, peer: &dyn Display) {
    let admitted = {
        let mut guard = SEEN.lock().unwrap_or_else(PoisonError::into_inner);
        admit(
            guard.get_or_insert_with(HashMap::new),
            reason,
            peer.to_string(),
            Instant::now(),
        )
    };
    if let Some(left_out) = admitted {
        if left_out > 0 {
            tracing::warn!(peer = %peer, "{reason} ({left_out} more like it left out)");
        } else {
            tracing::warn!(peer = %peer, "{reason}");
        }
    }
}

/// `Some(left out since the last line)` if a line may be written now, by what `seen`
/// remembers.
fn admit(seen: &mut Seen, reason: &'static str, peer: String, now: Instant) -> Option<u64> {
    if seen.len() >= REMEMBERED {
        let mut times: Vec<Instant> = seen.values().map(|(t, _)| *t).collect();
        times.sort_unstable();
        let cut = times[times.len() / 2];
        seen.retain(|_, (t, _)| *t > cut);
    }
    match seen.get_mut(&(reason, peer.clone())) {
        Some((last, left_out)) if now.duration_since(*last) < Duration::from_secs(1) => {
            *left_out += 1;
            None
        }
        Some((last, left_out)) => {
            *last = now;
            Some(core::mem::take(left_out))
        }
        None => {
            seen.insert((reason, peer), (now, 0));
            Some(0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_reason_per_peer_per_second_then_a_count() {
        // A table of its own: tests run in parallel, and another's entries would count.
        let mut seen = Seen::new();
        let t0 = Instant::now();
        let peer = || "test-peer-a".to_string();
        assert_eq!(admit(&mut seen, "test reason", peer(), t0), Some(0));
        for i in 1..=5 {
            assert_eq!(
                admit(
                    &mut seen,
                    "test reason",
                    peer(),
                    t0 + Duration::from_millis(i)
                ),
                None
            );
        }
        // Another reason, another peer: their own lines.
        assert_eq!(admit(&mut seen, "other reason", peer(), t0), Some(0));
        assert_eq!(
            admit(&mut seen, "test reason", "test-peer-b".into(), t0),
            Some(0)
        );
        // A second later, a line with what was left out.
        assert_eq!(
            admit(
                &mut seen,
                "test reason",
                peer(),
                t0 + Duration::from_secs(1)
            ),
            Some(5)
        );
        assert_eq!(
            admit(
                &mut seen,
                "test reason",
                peer(),
                t0 + Duration::from_secs(1)
            ),
            None
        );
    }

    #[test]
    fn what_it_remembers_is_bounded() {
        let mut seen = Seen::new();
        let t0 = Instant::now();
        for i in 0..(3 * REMEMBERED as u64) {
            admit(
                &mut seen,
                "bounded reason",
                i.to_string(),
                t0 + Duration::from_micros(i),
            );
        }
        assert!(seen.len() <= REMEMBERED);
    }
}
