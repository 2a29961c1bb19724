//! The partition window (`ni_abi::window`): one memfd per partition, mapped by every member's
//! client through BAR4, so members exchange small messages and combine small collectives
//! without the poller between them. The daemon only writes the header and each member's
//! `STATE`, resets a member's rings when its NI comes up, and reads the members' counters.

use std::fs::File;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use ni_abi::window::{self as w, hdr, state};
use vm_memory::{Bytes, MmapRegion, VolatileMemory};

static NEXT_SERIAL: AtomicU32 = AtomicU32::new(1);

pub type WindowError = crate::sram::SharedMemError;

pub struct Window {
    file: File,
    map: MmapRegion,
    pub serial: u32,
    /// The partition's NIs, in rank order.
    pub members: Vec<u32>,
}

/// What a member wrote in its `STATS` line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WindowStats {
    pub sends: u64,
    pub bytes: u64,
    pub collectives: u64,
    pub ring_errors: u64,
    pub peer_down: u64,
    pub timeout: u64,
    pub link_down: u64,
    pub collision: u64,
    pub recvs: u64,
    pub recv_bytes: u64,
    pub truncated: u64,
}

impl Window {
    pub fn new(members: Vec<u32>, coll_timeout_ms: u32) -> Result<Window, WindowError> {
        // The file spans BAR4 so that a BAR offset is a file offset; only the window part
        // is ever mapped (the rest stays a hole).
        let (file, map) = crate::sram::shared_memfd(
            "partition window",
            c"ni-partition-window",
            w::WINDOW_OFFSET + w::WINDOW_SIZE,
            w::WINDOW_OFFSET,
            w::WINDOW_SIZE as usize,
        )?;
        let win = Window {
            file,
            map,
            serial: NEXT_SERIAL.fetch_add(1, Ordering::Relaxed),
            members,
        };
        win.u32(hdr::VERSION)
            .store(hdr::VERSION_VALUE, Ordering::Relaxed);
        win.u32(hdr::SERIAL).store(win.serial, Ordering::Relaxed);
        win.u32(hdr::SIZE)
            .store(win.members.len() as u32, Ordering::Relaxed);
        win.u32(hdr::COLL_TIMEOUT_MS)
            .store(coll_timeout_ms.max(1), Ordering::Relaxed);
        win.u32(hdr::MAGIC)
            .store(hdr::MAGIC_VALUE, Ordering::Release);
        Ok(win)
    }

    pub fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    fn u32(&self, off: u64) -> &AtomicU32 {
        self.map
            .get_atomic_ref::<AtomicU32>(off as usize)
            .expect("window words are aligned and inside the window")
    }

    fn u64(&self, off: u64) -> &AtomicU64 {
        self.map
            .get_atomic_ref::<AtomicU64>(off as usize)
            .expect("window words are aligned and inside the window")
    }

    fn zero(&self, off: u64, len: u64) {
        let _ = self
            .map
            .as_volatile_slice()
            .write_slice(&vec![0u8; len as usize], off as usize);
    }

    pub fn rank_of(&self, node: u32) -> Option<u32> {
        self.members
            .iter()
            .position(|&n| n == node)
            .map(|r| r as u32)
    }

    /// `rank`'s NI has a client ready: give it empty rings to and from every member, empty
    /// collective slots (the survivors start counting rounds again when they see `GEN`
    /// move), then publish it up under a new incarnation.
    pub fn member_up(&self, rank: u32) {
        let p = self.members.len() as u32;
        for peer in 0..p {
            for (s, d) in [(rank, peer), (peer, rank)] {
                let c = w::ring_ctrl(s, d);
                self.u32(c + w::RING_TAIL).store(0, Ordering::Relaxed);
                self.u32(c + w::RING_HEAD).store(0, Ordering::Relaxed);
            }
        }
        self.zero(w::COLL, 2 * w::MAX_RANKS as u64 * w::COLL_SLOT);
        self.u32(w::SLEEPING + rank as u64 * w::LINE)
            .store(0, Ordering::Relaxed);
        self.zero(
            w::stats::BASE + rank as u64 * w::stats::STRIDE,
            w::stats::STRIDE,
        );
        let s = self.u32(w::STATE + rank as u64 * w::LINE);
        let inc = state::incarnation(s.load(Ordering::Relaxed)) + 1;
        s.store(state::make(true, inc), Ordering::Release);
        self.u32(hdr::GEN).fetch_add(1, Ordering::AcqRel);
    }

    /// `rank`'s client went away: waiters on it fail instead of waiting forever.
    pub fn member_down(&self, rank: u32) {
        let s = self.u32(w::STATE + rank as u64 * w::LINE);
        let v = s.load(Ordering::Relaxed);
        if state::up(v) {
            s.store(state::make(false, state::incarnation(v)), Ordering::Release);
            self.u32(hdr::GEN).fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Publish which members `rank` reaches; a change moves `GEN`.
    pub fn set_reach(&self, rank: u32, mask: u32) {
        let r = self.u32(w::REACH + rank as u64 * w::LINE);
        if r.swap(mask, Ordering::AcqRel) != mask {
            self.u32(hdr::GEN).fetch_add(1, Ordering::AcqRel);
        }
    }

    pub fn stats(&self, rank: u32) -> WindowStats {
        let b = w::stats::BASE + rank as u64 * w::stats::STRIDE;
        let r = |o| self.u64(b + o).load(Ordering::Relaxed);
        WindowStats {
            sends: r(w::stats::SENDS),
            bytes: r(w::stats::BYTES),
            collectives: r(w::stats::COLLECTIVES),
            ring_errors: r(w::stats::RING_ERRORS),
            peer_down: r(w::stats::PEER_DOWN),
            timeout: r(w::stats::TIMEOUT),
            link_down: r(w::stats::LINK_DOWN),
            collision: r(w::stats::COLLISION),
            recvs: r(w::stats::RECVS),
            recv_bytes: r(w::stats::RECV_BYTES),
            truncated: r(w::stats::TRUNCATED),
        }
    }

    /// A trapped BAR4 access inside the window (a client that did not mmap it).
    pub fn read(&self, off: u64, buf: &mut [u8]) -> bool {
        self.map
            .as_volatile_slice()
            .read_slice(buf, off as usize)
            .is_ok()
    }

    pub fn write(&self, off: u64, buf: &[u8]) -> bool {
        self.map
            .as_volatile_slice()
            .write_slice(buf, off as usize)
            .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_up_resets_rings_and_moves_generation() {
        let win = Window::new(vec![3, 5], 1000).unwrap();
        assert_eq!(win.rank_of(5), Some(1));
        let tail = w::ring_ctrl(1, 0) + w::RING_TAIL;
        win.u32(tail).store(77, Ordering::Relaxed);
        win.u64(w::coll_slot(1, 0)).store(9, Ordering::Relaxed);
        let g = win.u32(hdr::GEN).load(Ordering::Relaxed);
        win.member_up(1);
        assert_eq!(win.u32(tail).load(Ordering::Relaxed), 0);
        assert_eq!(win.u64(w::coll_slot(1, 0)).load(Ordering::Relaxed), 0);
        let s = win.u32(w::STATE + w::LINE).load(Ordering::Relaxed);
        assert!(state::up(s));
        assert_eq!(state::incarnation(s), 1);
        win.member_down(1);
        win.member_down(1);
        assert_eq!(win.u32(hdr::GEN).load(Ordering::Relaxed), g + 2);
        win.member_up(1);
        let s = win.u32(w::STATE + w::LINE).load(Ordering::Relaxed);
        assert_eq!(state::incarnation(s), 2);
        let mut b = [0u8; 4];
        assert!(win.read(hdr::MAGIC, &mut b));
        assert_eq!(u32::from_le_bytes(b), hdr::MAGIC_VALUE);
        assert!(!win.read(w::WINDOW_SIZE - 2, &mut b));
    }
}
