//! The board's SDRAM: 128 MiB per chip from [`SDRAM_BASE`] (and again, unbuffered, from
//! [`SDRAM_UNBUFFERED`]), held sparsely in 64 KiB
//! pages, each absent (the chip's background word: zeros until a FILL of all of SDRAM
//! sets it), one repeated word (what a FILL over the whole page leaves) or bytes, under a
//! budget on the bytes held. A FILL of all of a chip's SDRAM costs one entry and gives
//! back what the chip held; no request can grow the board past its budget.

use std::collections::HashMap;

use volley_proto::scp::ReturnCode;

use crate::{SDRAM_BASE, SDRAM_SIZE, SDRAM_UNBUFFERED};

/// Bytes per page.
pub(crate) const PAGE: usize = 64 * 1024;

/// Every chip's SDRAM.
#[derive(Debug)]
pub(crate) struct Memory {
    pages: HashMap<(u8, u8, u32), Page>,
    /// Each chip's background word, for its absent pages (none: zeros).
    background: HashMap<(u8, u8), u32>,
    /// Pages held as bytes.
    held: usize,
    /// The most pages that may be held as bytes.
    budget: usize,
}

#[derive(Debug)]
enum Page {
    /// Every word is this one (little-endian, word-aligned as SDRAM is).
    Word(u32),
    /// Written bytes.
    Bytes(Box<[u8]>),
}

/// Why an access was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// Some of it is outside SDRAM.
    Outside,
    /// It would hold more bytes than the budget allows.
    Budget,
}

impl Refused {
    /// The return code SC&MP would give: `RC_ARG` for an address outside SDRAM, `RC_BUF`
    /// for memory the board has no room for.
    pub(crate) fn code(self) -> ReturnCode {
        match self {
            Self::Outside => ReturnCode::ARG,
            Self::Budget => ReturnCode::BUF,
        }
    }
}

/// One page-sized piece of an access: the page, the offset in it, and the range of the
/// access's bytes it covers.
type Piece = (u32, usize, core::ops::Range<usize>);

impl Memory {
    /// Empty memory (all zeros) that will hold at most `budget` bytes.
    pub(crate) fn new(budget: usize) -> Self {
        Self {
            pages: HashMap::new(),
            background: HashMap::new(),
            held: 0,
            budget: budget / PAGE,
        }
    }

    /// Bytes held for written pages.
    pub(crate) fn held_bytes(&self) -> usize {
        self.held * PAGE
    }

    pub(crate) fn read(&self, x: u8, y: u8, address: u32, out: &mut [u8]) -> Result<(), Refused> {
        for (page, in_page, range) in pieces(address, out.len())? {
            let out = &mut out[range];
            match self.pages.get(&(x, y, page)) {
                Some(Page::Bytes(bytes)) => {
                    out.copy_from_slice(&bytes[in_page..in_page + out.len()])
                }
                Some(Page::Word(word)) => pattern(*word, in_page, out),
                None => pattern(self.background(x, y), in_page, out),
            }
        }
        Ok(())
    }

    pub(crate) fn write(&mut self, x: u8, y: u8, address: u32, data: &[u8]) -> Result<(), Refused> {
        let pieces = pieces(address, data.len())?;
        let new = pieces
            .clone()
            .filter(|(page, ..)| !self.is_bytes(x, y, *page))
            .count();
        self.reserve(new)?;
        for (page, in_page, range) in pieces {
            let n = range.len();
            self.bytes(x, y, page)[in_page..in_page + n].copy_from_slice(&data[range]);
        }
        Ok(())
    }

    /// Fills `len` bytes from the word-aligned `address` with `value`: whole pages become
    /// that word (giving back any bytes they held), partial ones are written.
    pub(crate) fn fill(
        &mut self,
        x: u8,
        y: u8,
        address: u32,
        value: u32,
        len: u32,
    ) -> Result<(), Refused> {
        let pieces = pieces(address, len as usize)?;
        if address == SDRAM_BASE && len == SDRAM_SIZE {
            // All of the chip: forget its pages, give back their bytes, set its word.
            let held = &mut self.held;
            self.pages.retain(|&(px, py, _), page| {
                let other = (px, py) != (x, y);
                if !other && matches!(page, Page::Bytes(_)) {
                    *held -= 1;
                }
                other
            });
            if value == 0 {
                self.background.remove(&(x, y));
            } else {
                self.background.insert((x, y), value);
            }
            return Ok(());
        }
        let partial = |(_, _, range): &Piece| range.len() < PAGE;
        let new = pieces
            .clone()
            .filter(|p| partial(p) && !self.is_bytes(x, y, p.0) && !self.is_word(x, y, p.0, value))
            .count();
        self.reserve(new)?;
        for piece in pieces {
            let (page, in_page, range) = piece.clone();
            if !partial(&piece) {
                let old = if value == self.background(x, y) {
                    self.pages.remove(&(x, y, page))
                } else {
                    self.pages.insert((x, y, page), Page::Word(value))
                };
                if matches!(old, Some(Page::Bytes(_))) {
                    self.held -= 1;
                }
            } else if !self.is_word(x, y, page, value) {
                pattern(
                    value,
                    in_page,
                    &mut self.bytes(x, y, page)[in_page..in_page + range.len()],
                );
            }
        }
        Ok(())
    }

    fn is_bytes(&self, x: u8, y: u8, page: u32) -> bool {
        matches!(self.pages.get(&(x, y, page)), Some(Page::Bytes(_)))
    }

    /// Whether the page already holds `value` everywhere.
    fn is_word(&self, x: u8, y: u8, page: u32, value: u32) -> bool {
        match self.pages.get(&(x, y, page)) {
            Some(Page::Word(word)) => *word == value,
            None => value == self.background(x, y),
            Some(Page::Bytes(_)) => false,
        }
    }

    /// What the chip's absent pages hold.
    fn background(&self, x: u8, y: u8) -> u32 {
        self.background.get(&(x, y)).copied().unwrap_or(0)
    }

    fn reserve(&self, pages: usize) -> Result<(), Refused> {
        if self.held + pages > self.budget {
            Err(Refused::Budget)
        } else {
            Ok(())
        }
    }

    /// The page as bytes, made so from what it held (counted against the budget, which
    /// the caller has checked).
    fn bytes(&mut self, x: u8, y: u8, page: u32) -> &mut [u8] {
        let background = self.background(x, y);
        let slot = self
            .pages
            .entry((x, y, page))
            .or_insert(Page::Word(background));
        if let Page::Word(word) = *slot {
            let mut bytes = vec![0; PAGE].into_boxed_slice();
            if word != 0 {
                pattern(word, 0, &mut bytes);
            }
            *slot = Page::Bytes(bytes);
            self.held += 1;
        }
        match slot {
            Page::Bytes(bytes) => bytes,
            Page::Word(_) => unreachable!("made bytes just above"),
        }
    }
}

/// `out` as the bytes at `offset..` of a page repeating `word`.
fn pattern(word: u32, offset: usize, out: &mut [u8]) {
    let word = word.to_le_bytes();
    for (i, b) in out.iter_mut().enumerate() {
        *b = word[(offset + i) % 4];
    }
}

/// The page-sized pieces of `address..address + len`, or `Outside` if any of it is
/// outside SDRAM.
fn pieces(address: u32, len: usize) -> Result<Pieces, Refused> {
    let mut start = u64::from(address);
    let base = u64::from(SDRAM_BASE);
    // The unbuffered alias: the same SDRAM, reached without the write buffer.
    if start >= u64::from(SDRAM_UNBUFFERED) {
        start -= u64::from(SDRAM_UNBUFFERED - SDRAM_BASE);
    }
    let end = start + len as u64;
    if start < base || end > base + u64::from(SDRAM_SIZE) {
        return Err(Refused::Outside);
    }
    Ok(Pieces {
        at: start,
        start,
        end,
        base,
    })
}

/// Walks an in-range access page by page.
#[derive(Clone, Debug)]
struct Pieces {
    at: u64,
    start: u64,
    end: u64,
    base: u64,
}

impl Iterator for Pieces {
    type Item = Piece;

    fn next(&mut self) -> Option<Piece> {
        if self.at >= self.end {
            return None;
        }
        let offset = (self.at - self.base) as usize;
        let page = (offset / PAGE) as u32;
        let in_page = offset % PAGE;
        let n = (PAGE - in_page).min((self.end - self.at) as usize);
        let done = (self.at - self.start) as usize;
        self.at += n as u64;
        Some((page, in_page, done..done + n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOP: u32 = SDRAM_BASE + SDRAM_SIZE;

    #[test]
    fn filling_all_of_sdram_on_every_chip_holds_nothing() {
        let mut memory = Memory::new(1 << 20);
        for x in 0..8 {
            for y in 0..8 {
                memory
                    .fill(x, y, SDRAM_BASE, 0xA5A5_5A5A, SDRAM_SIZE)
                    .unwrap();
            }
        }
        assert_eq!(memory.held_bytes(), 0);
        let mut out = [0u8; 8];
        memory.read(7, 7, TOP - 8, &mut out).unwrap();
        assert_eq!(out, [0x5A, 0x5A, 0xA5, 0xA5, 0x5A, 0x5A, 0xA5, 0xA5]);
    }

    #[test]
    fn a_fill_of_a_whole_chip_gives_back_its_bytes_and_leaves_other_chips_alone() {
        let mut memory = Memory::new(8 * PAGE);
        memory
            .write(2, 3, SDRAM_BASE + 100, &[7; 3 * PAGE])
            .unwrap();
        memory.write(2, 4, SDRAM_BASE, &[9; PAGE]).unwrap();
        assert_eq!(memory.held_bytes(), 5 * PAGE);
        memory
            .fill(2, 3, SDRAM_BASE, 0x0102_0304, SDRAM_SIZE)
            .unwrap();
        assert_eq!(memory.held_bytes(), PAGE);
        let mut out = [0u8; 8];
        memory.read(2, 3, SDRAM_BASE + 100, &mut out).unwrap();
        assert_eq!(out, [4, 3, 2, 1, 4, 3, 2, 1]);
        memory.read(2, 4, SDRAM_BASE, &mut out).unwrap();
        assert_eq!(out, [9; 8]);
        // A write into the filled chip starts from its word; a page filled back to the
        // background word holds nothing.
        memory.write(2, 3, SDRAM_BASE + 2, &[0xEE]).unwrap();
        memory.read(2, 3, SDRAM_BASE, &mut out).unwrap();
        assert_eq!(out, [4, 3, 0xEE, 1, 4, 3, 2, 1]);
        memory
            .fill(2, 3, SDRAM_BASE, 0x0102_0304, PAGE as u32)
            .unwrap();
        assert_eq!(memory.held_bytes(), PAGE);
        assert!(!memory.pages.contains_key(&(2, 3, 0)));
    }

    #[test]
    fn writes_and_partial_fills_hold_pages_and_whole_fills_give_them_back() {
        let mut memory = Memory::new(4 * PAGE);
        let data: Vec<u8> = (0..3 * PAGE as u32).map(|i| (i % 251) as u8).collect();
        memory.write(0, 0, SDRAM_BASE + 8, &data).unwrap();
        assert_eq!(memory.held_bytes(), 4 * PAGE);
        // A fill inside a written page writes it; one over a whole page frees it.
        memory.fill(0, 0, SDRAM_BASE + 16, 0x0403_0201, 8).unwrap();
        memory
            .fill(0, 0, SDRAM_BASE + PAGE as u32, 7, PAGE as u32)
            .unwrap();
        assert_eq!(memory.held_bytes(), 3 * PAGE);
        let mut out = vec![0u8; 4 * PAGE];
        memory.read(0, 0, SDRAM_BASE, &mut out).unwrap();
        assert_eq!(out[..8], [0; 8]);
        assert_eq!(out[8..16], data[..8]);
        assert_eq!(out[16..24], [1, 2, 3, 4, 1, 2, 3, 4]);
        assert_eq!(out[24..PAGE], data[16..PAGE - 8]);
        assert_eq!(out[PAGE..PAGE + 4], 7u32.to_le_bytes());
        assert_eq!(out[2 * PAGE..3 * PAGE + 8], data[2 * PAGE - 8..]);
        // A partial fill with the word a filled page already holds needs no bytes.
        memory
            .fill(0, 0, SDRAM_BASE + PAGE as u32 + 4, 7, 8)
            .unwrap();
        assert_eq!(memory.held_bytes(), 3 * PAGE);
    }

    #[test]
    fn past_the_budget_nothing_changes_and_outside_sdram_is_refused() {
        let mut memory = Memory::new(2 * PAGE);
        memory.write(1, 1, SDRAM_BASE, &[9; PAGE]).unwrap();
        let three_pages = vec![1u8; 3 * PAGE];
        assert_eq!(
            memory.write(1, 1, SDRAM_BASE, &three_pages),
            Err(Refused::Budget)
        );
        assert_eq!(
            memory.fill(1, 1, SDRAM_BASE + 4 * PAGE as u32 + 4, 1, 4),
            Ok(())
        );
        assert_eq!(
            memory.fill(1, 1, SDRAM_BASE + 8 * PAGE as u32 + 4, 1, 4),
            Err(Refused::Budget)
        );
        let mut out = [0u8; 4];
        memory.read(1, 1, SDRAM_BASE, &mut out).unwrap();
        assert_eq!(out, [9; 4], "a refused write changed memory");
        assert_eq!(memory.write(1, 1, TOP - 2, &[0; 4]), Err(Refused::Outside));
        assert_eq!(
            memory.read(1, 1, SDRAM_BASE - 1, &mut out),
            Err(Refused::Outside)
        );
        assert_eq!(memory.fill(1, 1, u32::MAX - 3, 0, 4), Err(Refused::Outside));
        assert_eq!(Refused::Budget.code(), ReturnCode::BUF);
    }
}
