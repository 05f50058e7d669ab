//! Address-validation tokens for the server's stateless RETRY (QUIC's Retry, RFC 9000
//! §8.1.2, in miniature). A token is the time it was issued and a keyed MAC over that time
//! and the client's address, so the server keeps no state per token: it checks the MAC
//! with its current or previous key and the age against [`TOKEN_LIFETIME`]. The MAC is
//! SipHash-2-4 (Aumasson and Bernstein, 2012), written here so proto needs no dependency.

use core::hash::{Hash, Hasher};

use crate::time::{Duration, Instant};

/// Bytes of a token: the issue time (`u64` µs, little-endian), then the MAC (`u64`).
pub const TOKEN_LEN: usize = 16;
/// How long a token is accepted after it was issued.
pub const TOKEN_LIFETIME: Duration = Duration::from_secs(10);

/// A 128-bit key for the retry tokens ([`ChannelEndpoint::rotate_token_key`](super::ChannelEndpoint::rotate_token_key)), as two words.
pub type TokenKey = [u64; 2];

/// SipHash-2-4 as a [`Hasher`], so any `Hash` address can be fed to it.
#[derive(Clone, Debug)]
struct SipHasher {
    v: [u64; 4],
    tail: u64,
    ntail: usize,
    len: u64,
}

impl SipHasher {
    fn new(key: TokenKey) -> Self {
        let [k0, k1] = key;
        Self {
            v: [
                k0 ^ 0x736f_6d65_7073_6575,
                k1 ^ 0x646f_7261_6e64_6f6d,
                k0 ^ 0x6c79_6765_6e65_7261,
                k1 ^ 0x7465_6462_7974_6573,
            ],
            tail: 0,
            ntail: 0,
            len: 0,
        }
    }

    fn round(&mut self) {
        let v = &mut self.v;
        v[0] = v[0].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(13) ^ v[0];
        v[0] = v[0].rotate_left(32);
        v[2] = v[2].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(16) ^ v[2];
        v[0] = v[0].wrapping_add(v[3]);
        v[3] = v[3].rotate_left(21) ^ v[0];
        v[2] = v[2].wrapping_add(v[1]);
        v[1] = v[1].rotate_left(17) ^ v[2];
        v[2] = v[2].rotate_left(32);
    }

    fn compress(&mut self, m: u64) {
        self.v[3] ^= m;
        self.round();
        self.round();
        self.v[0] ^= m;
    }
}

impl Hasher for SipHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.tail |= u64::from(b) << (8 * self.ntail);
            self.ntail += 1;
            if self.ntail == 8 {
                let m = self.tail;
                self.compress(m);
                self.tail = 0;
                self.ntail = 0;
            }
        }
        self.len += bytes.len() as u64;
    }

    fn finish(&self) -> u64 {
        let mut s = self.clone();
        let m = s.tail | (s.len << 56);
        s.compress(m);
        s.v[2] ^= 0xff;
        for _ in 0..4 {
            s.round();
        }
        s.v[0] ^ s.v[1] ^ s.v[2] ^ s.v[3]
    }
}

/// The server's token keys: the current one mints, it and the previous one check, so a
/// token minted just before a rotation still passes for its lifetime.
#[derive(Clone, Default)]
pub(super) struct Tokens {
    current: Option<TokenKey>,
    previous: Option<TokenKey>,
}

impl core::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        // Never the keys themselves.
        f.debug_struct("Tokens")
            .field("keyed", &self.current.is_some())
            .finish()
    }
}

fn mac(key: TokenKey, issued: u64, addr: &impl Hash) -> u64 {
    let mut h = SipHasher::new(key);
    h.write(b"volley retry token");
    h.write(&issued.to_le_bytes());
    addr.hash(&mut h);
    h.finish()
}

impl Tokens {
    /// Makes `key` the one that mints; the one before it still checks.
    pub(super) fn rotate(&mut self, key: TokenKey) {
        self.previous = self.current.replace(key);
    }

    /// Whether a key was given (without one, no token is minted or accepted).
    pub(super) fn keyed(&self) -> bool {
        self.current.is_some()
    }

    /// A token for `addr`, issued `now`.
    pub(super) fn mint(&self, now: Instant, addr: &impl Hash) -> Option<[u8; TOKEN_LEN]> {
        let key = self.current?;
        let issued = now.as_micros();
        let mut token = [0u8; TOKEN_LEN];
        token[..8].copy_from_slice(&issued.to_le_bytes());
        token[8..].copy_from_slice(&mac(key, issued, addr).to_le_bytes());
        Some(token)
    }

    /// Whether `token` was minted by this endpoint for `addr` within the lifetime.
    pub(super) fn check(&self, now: Instant, addr: &impl Hash, token: &[u8]) -> bool {
        let Ok(token) = <[u8; TOKEN_LEN]>::try_from(token) else {
            return false;
        };
        let mut word = [0u8; 8];
        word.copy_from_slice(&token[..8]);
        let issued = u64::from_le_bytes(word);
        word.copy_from_slice(&token[8..]);
        let got = u64::from_le_bytes(word);
        let issued_at = Instant::from_micros(issued);
        if issued_at > now || now.saturating_duration_since(issued_at) > TOKEN_LIFETIME {
            return false;
        }
        [self.current, self.previous]
            .into_iter()
            .flatten()
            // Every key is tried, so the time taken does not say which one matched.
            .fold(false, |ok, key| ok | (mac(key, issued, addr) == got))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn siphash_matches_the_reference_vectors() {
        // The paper's appendix A: key 00..0f, message 00..0e.
        let key = [
            u64::from_le_bytes([0, 1, 2, 3, 4, 5, 6, 7]),
            u64::from_le_bytes([8, 9, 10, 11, 12, 13, 14, 15]),
        ];
        let message: [u8; 15] = core::array::from_fn(|i| i as u8);
        let mut h = SipHasher::new(key);
        h.write(&message);
        assert_eq!(h.finish(), 0xa129_ca61_49be_45e5);
        // The empty message, from the reference implementation's vectors.h.
        assert_eq!(SipHasher::new(key).finish(), 0x726f_db47_dd0e_0e31);
        // Fed in pieces, the same as whole.
        let mut h = SipHasher::new(key);
        h.write(&message[..3]);
        h.write(&message[3..11]);
        h.write(&message[11..]);
        assert_eq!(h.finish(), 0xa129_ca61_49be_45e5);
    }

    #[test]
    fn tokens_bind_address_time_and_key() {
        let mut tokens = Tokens::default();
        let t0 = Instant::from_millis(5_000);
        assert!(tokens.mint(t0, &1u32).is_none(), "no key, no token");
        tokens.rotate([1, 2]);
        let token = tokens.mint(t0, &1u32).unwrap();
        assert!(tokens.check(t0, &1u32, &token));
        assert!(!tokens.check(t0, &2u32, &token), "another address");
        assert!(tokens.check(t0 + TOKEN_LIFETIME, &1u32, &token));
        let late = t0 + TOKEN_LIFETIME + Duration::from_micros(1);
        assert!(!tokens.check(late, &1u32, &token), "expired");
        assert!(!tokens.check(Instant::from_millis(4_999), &1u32, &token));
        let mut forged = token;
        forged[15] ^= 1;
        assert!(!tokens.check(t0, &1u32, &forged));
        // Later issue time, same MAC: the time is covered by the MAC.
        let mut moved = token;
        moved[0] ^= 1;
        assert!(!tokens.check(t0 + TOKEN_LIFETIME, &1u32, &moved));
        assert!(!tokens.check(t0, &1u32, &token[..15]));
        tokens.rotate([3, 4]);
        assert!(
            tokens.check(t0, &1u32, &token),
            "the previous key still checks"
        );
        tokens.rotate([5, 6]);
        assert!(
            !tokens.check(t0, &1u32, &token),
            "two rotations later it does not"
        );
    }
}
