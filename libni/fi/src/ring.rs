//! Where the endpoint stages a rendezvous send: successive pieces of one region, taken in
//! turn and given back in any order, so the bytes a receiver just read are written again
//! only once the ring has come round.
//!
//! Why a ring and not the pool's one region per size: a receiver's core keeps the lines it
//! read, and a store into a line another core holds waits for that core to let it go. A
//! ping-pong through one staging region paid that on every line of every message — 64 KiB
//! half round trip through the provider 15 µs, of which the staging copy or the receiver's
//! read took 7-10 µs where the same copy into lines no other core holds takes 1.3-2 µs
//! (`tests/bench/README.md`, "The provider's staging copies", stop 43). Round a ring of
//! [`RING_BYTES`] the receiver has read other bytes in between, and its copies of a piece's
//! lines are gone before the piece is written again.

use std::collections::VecDeque;

/// The ring's size: 32 pieces of 64 KiB, 8 of 256 KiB.
pub const RING_BYTES: usize = 2 << 20;
/// Larger sends take a region of their own: a ring with room for fewer than four would come
/// round at once.
pub const PIECE_MAX: usize = RING_BYTES / 4;
/// Pieces start on a page, as the pool's regions do.
const ALIGN: usize = 4096;

/// Space of `cap` bytes handed out in pieces at a moving head. A plain allocator over
/// offsets: the caller owns the memory.
#[derive(Debug)]
pub struct Ring {
    cap: usize,
    /// Where the next piece goes (never reset: an empty ring goes on from here).
    head: usize,
    /// Pieces in the order taken: (offset, given back).
    pieces: VecDeque<(usize, bool)>,
}

impl Ring {
    pub fn new(cap: usize) -> Ring {
        Ring {
            cap,
            head: 0,
            pieces: VecDeque::new(),
        }
    }

    /// The offset of a free piece of `n` bytes, or `None` while the pieces still out leave
    /// no room for it (or it could never fit).
    pub fn take(&mut self, n: usize) -> Option<usize> {
        let n = n.max(1).div_ceil(ALIGN) * ALIGN;
        if n > self.cap {
            return None;
        }
        let at = match self.pieces.front() {
            // Live bytes are [tail, head): room after head, or from 0 up to tail.
            Some(&(tail, _)) if tail < self.head => {
                if self.head + n <= self.cap {
                    self.head
                } else if n <= tail {
                    0
                } else {
                    return None;
                }
            }
            // Wrapped (head <= tail; equal: full): room between them only.
            Some(&(tail, _)) => {
                if self.head + n <= tail {
                    self.head
                } else {
                    return None;
                }
            }
            None if self.head + n <= self.cap => self.head,
            None => 0,
        };
        self.pieces.push_back((at, false));
        self.head = at + n;
        Some(at)
    }

    /// Give back the piece at `offset`; the space frees once every older piece is back too.
    /// Returns false for an offset no piece out has.
    pub fn give(&mut self, offset: usize) -> bool {
        let Some(p) = self
            .pieces
            .iter_mut()
            .find(|(at, back)| *at == offset && !*back)
        else {
            return false;
        };
        p.1 = true;
        while self.pieces.front().is_some_and(|p| p.1) {
            self.pieces.pop_front();
        }
        true
    }

    /// Pieces out (taken, not given back).
    #[cfg(test)]
    fn out(&self) -> usize {
        self.pieces.iter().filter(|p| !p.1).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const K: usize = 4096;

    #[test]
    fn pieces_move_on_round_the_ring_even_when_it_empties() {
        let mut r = Ring::new(16 * K);
        let mut seen = Vec::new();
        for _ in 0..8 {
            let at = r.take(4 * K).unwrap();
            seen.push(at);
            assert!(r.give(at));
        }
        // An empty ring does not start again at 0: a piece is reused only every fourth time.
        assert_eq!(seen, [0, 4 * K, 8 * K, 12 * K, 0, 4 * K, 8 * K, 12 * K]);
        assert_eq!(r.out(), 0);
    }

    #[test]
    fn space_frees_in_order_and_never_overlaps_a_piece_still_out() {
        let mut r = Ring::new(16 * K);
        let a = r.take(6 * K).unwrap();
        let b = r.take(6 * K).unwrap();
        assert_eq!((a, b), (0, 6 * K));
        // 4 KiB left at the end, nothing free at the start: no room for 6.
        assert_eq!(r.take(6 * K), None);
        // b back first: a still holds the start, so still no room.
        assert!(r.give(b));
        assert_eq!(r.take(6 * K), None);
        // a back: the ring wraps to 0 (the 4 KiB at the end stay unused this round).
        assert!(r.give(a));
        let c = r.take(6 * K).unwrap();
        assert_eq!(c, 0);
        let d = r.take(1).unwrap();
        assert_eq!(d, 6 * K, "a byte takes a page");
        // Nothing out past d: a piece fits after it, up to the end.
        let e = r.take(8 * K).unwrap();
        assert_eq!(e, 7 * K);
        assert_eq!(r.take(2 * K), None, "1 page left");
        assert_eq!(r.out(), 3);
    }

    #[test]
    fn a_wrapped_ring_fills_up_to_its_oldest_piece_exactly() {
        let mut r = Ring::new(8 * K);
        let a = r.take(4 * K).unwrap();
        let b = r.take(4 * K).unwrap();
        assert!(r.give(a));
        // Wrapped: [0, 4K) free, b holds [4K, 8K).
        assert_eq!(r.take(4 * K), Some(0));
        // Full now (head == tail): nothing, not even a page.
        assert_eq!(r.take(1), None);
        assert!(r.give(b));
        assert_eq!(r.take(4 * K), Some(4 * K));
    }

    #[test]
    fn giving_back_twice_or_an_unknown_offset_is_refused() {
        let mut r = Ring::new(8 * K);
        let a = r.take(K).unwrap();
        let b = r.take(K).unwrap();
        assert!(r.give(b));
        assert!(!r.give(b), "b is back already (a holds it in the ring)");
        assert!(!r.give(123));
        assert!(r.give(a));
        assert!(!r.give(a));
        assert_eq!(r.out(), 0);
    }

    #[test]
    fn too_large_is_refused_outright() {
        let mut r = Ring::new(8 * K);
        assert_eq!(r.take(8 * K + 1), None);
        assert_eq!(r.take(8 * K), Some(0));
    }
}
