//! The partition window (`ni_abi::window`): memory shared by the members of a partition, so
//! they exchange small messages and combine small collectives without the poller between
//! them. The daemon only writes the device page (header, `STATE`, `REACH`), resets a member's
//! rings when its NI comes up, and reads the members' counters.
//!
//! Its files follow its writers (`Kind`): an isolated window is a device-page memfd and one
//! memfd per rank's zone, so each client is handed its own zone read-write and every other
//! file read-only; a shared one is a single memfd every member maps whole (guests). The
//! daemon maps either kind at the window's offsets in one reserved range, so the rest of the
//! code addresses words by their window offset alone.

use std::fs::File;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use ni_abi::window::{self as w, hdr, state, Kind};
use vm_memory::{Bytes, MmapRegion, VolatileMemory};

use crate::sram::{sealed_memfd, SharedMemError};

static NEXT_SERIAL: AtomicU32 = AtomicU32::new(1);
static ZEROS: [u8; 4096] = [0; 4096];

/// The serial the next window gets (a handover carries it: serials never repeat).
pub fn next_serial() -> u32 {
    NEXT_SERIAL.load(Ordering::Relaxed)
}

pub fn keep_serials_above(serial: u32) {
    NEXT_SERIAL.fetch_max(serial, Ordering::Relaxed);
}

pub type WindowError = SharedMemError;

/// One file of a window: the descriptor the device writes through, and a read-only one
/// (a fresh open of the same memfd) for the clients that may only read it. A read-only open
/// file description can never be mapped writable shared, nor `mprotect`ed to it.
struct Part {
    rw: File,
    ro: File,
}

impl Part {
    fn new(what: &'static str, name: &std::ffi::CStr, len: u64) -> Result<Part, WindowError> {
        Self::reopen(what, sealed_memfd(what, name, len)?)
    }

    fn reopen(what: &'static str, rw: File) -> Result<Part, WindowError> {
        let ro = File::open(format!("/proc/self/fd/{}", rw.as_raw_fd()))
            .map_err(|e| SharedMemError::Size(what, e))?;
        Ok(Part { rw, ro })
    }
}

enum Files {
    /// The memfd spans BAR4, so that a BAR offset is a file offset; only the window part is
    /// ever mapped (the rest stays a hole). BAR4 shows it read-only, BAR3 a zone of it.
    Shared(Part),
    Isolated {
        device: Part,
        zones: Vec<Part>,
    },
}

/// What a session offers of its window, region by region (`server.rs`).
pub struct WindowRegion {
    pub index: u32,
    pub size: u64,
    pub writable: bool,
    pub fd: Option<RawFd>,
}

pub struct Window {
    files: Files,
    /// The daemon's view of `res`: the files mapped at their window offsets. Declared
    /// before `res`, so it goes first.
    map: MmapRegion,
    _res: Reservation,
    pub serial: u32,
    /// The partition's NIs, in rank order.
    pub members: Vec<u32>,
}

/// The daemon's `WINDOW_SIZE` bytes of address space for one window, unmapped on drop.
struct Reservation(*mut u8);

// SAFETY: the pointer is the start of a mapping this value owns; every access through it
// goes through the window's bounds-checked volatile and atomic accessors.
unsafe impl Send for Reservation {}
// SAFETY: as above.
unsafe impl Sync for Reservation {}

impl Reservation {
    fn new() -> Result<Reservation, WindowError> {
        // Gaps (zones of ranks the partition does not have) read as zeros and are never
        // written: every write names a member's word.
        // SAFETY: a fresh private anonymous reservation; the result is checked.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                w::WINDOW_SIZE as usize,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(SharedMemError::Map(
                "partition window",
                std::io::Error::last_os_error().to_string(),
            ));
        }
        Ok(Reservation(base as *mut u8))
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the range `new` mapped.
        unsafe {
            libc::munmap(self.0 as *mut libc::c_void, w::WINDOW_SIZE as usize);
        }
    }
}

/// Map `len` bytes of `fd` from `file_off` at `at` inside the reservation, read-write shared.
///
/// # Safety
/// `base` must be a live reservation of `WINDOW_SIZE` bytes and `at + len` inside it.
unsafe fn map_at(
    base: *mut u8,
    at: u64,
    len: u64,
    fd: RawFd,
    file_off: u64,
) -> Result<(), WindowError> {
    // SAFETY: MAP_FIXED replaces pages of our own reservation only (caller's contract).
    let p = unsafe {
        libc::mmap(
            base.add(at as usize) as *mut libc::c_void,
            len as usize,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_FIXED,
            fd,
            file_off as libc::off_t,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(SharedMemError::Map(
            "partition window",
            std::io::Error::last_os_error().to_string(),
        ));
    }
    Ok(())
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
    pub ams: u64,
    pub ams_taken: u64,
    pub puts: u64,
    pub put_bytes: u64,
    pub gets: u64,
    pub get_bytes: u64,
    /// T3E SENDs the rank did itself in peers' queues; and, of the SENDs members did into
    /// this rank's queues, those stored and those rejected.
    pub mq_sends: u64,
    pub mq_stored_here: u64,
    pub mq_rejected_here: u64,
    /// Of the rank's own SENDs into peers' queues, those rejected.
    pub mq_rejected_mine: u64,
    pub large_allreduces: u64,
    pub large_allreduce_bytes: u64,
    pub large_allreduces_in_place: u64,
    pub large_bcasts: u64,
    pub large_bcast_bytes: u64,
    pub large_reduces: u64,
    pub large_reduce_bytes: u64,
    pub large_allgathers: u64,
    pub large_allgather_bytes: u64,
    pub large_scans: u64,
    pub large_scan_bytes: u64,
    pub large_pushed: u64,
    pub reads: u64,
    pub read_bytes: u64,
}

/// A window across a daemon handover (`crate::handover`): its memfds (device-writable
/// descriptors; the read-only ones are opened again from them) and who its members are.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct WindowImage {
    pub shared: bool,
    pub members: Vec<u32>,
    pub serial: u32,
    /// Shared: the one file. Isolated: the device page, then each zone.
    pub fds: Vec<RawFd>,
}

impl Window {
    pub fn new(kind: Kind, members: Vec<u32>, coll_timeout_ms: u32) -> Result<Window, WindowError> {
        let win = Self::build(kind, members, None)?;
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

    /// What a handover carries of this window; its descriptors stay this window's.
    pub fn image(&self) -> WindowImage {
        let fds = match &self.files {
            Files::Shared(p) => vec![p.rw.as_raw_fd()],
            Files::Isolated { device, zones } => std::iter::once(device)
                .chain(zones)
                .map(|p| p.rw.as_raw_fd())
                .collect(),
        };
        WindowImage {
            shared: matches!(self.files, Files::Shared(_)),
            members: self.members.clone(),
            serial: self.serial,
            fds,
        }
    }

    /// The window an earlier daemon described in `img`, over its files (`files`, in the
    /// image's order): the contents, members' rings and states included, are as they were.
    pub fn adopt(img: &WindowImage, files: Vec<File>) -> Result<Window, WindowError> {
        let kind = if img.shared {
            Kind::Shared
        } else {
            Kind::Isolated
        };
        NEXT_SERIAL.fetch_max(img.serial.saturating_add(1), Ordering::Relaxed);
        let mut win = Self::build(kind, img.members.clone(), Some(files))?;
        // Files of the same size can hold another layout (an earlier daemon's version).
        let (magic, version) = (win.u32(hdr::MAGIC), win.u32(hdr::VERSION));
        if magic.load(Ordering::Acquire) != hdr::MAGIC_VALUE
            || version.load(Ordering::Relaxed) != hdr::VERSION_VALUE
        {
            return Err(SharedMemError::Map(
                "partition window",
                format!(
                    "the handed-over window is version {}, this daemon's is {}",
                    version.load(Ordering::Relaxed),
                    hdr::VERSION_VALUE
                ),
            ));
        }
        win.serial = img.serial;
        Ok(win)
    }

    /// The files (fresh, or `adopt`'s) mapped into a fresh reservation.
    fn build(
        kind: Kind,
        members: Vec<u32>,
        adopt: Option<Vec<File>>,
    ) -> Result<Window, WindowError> {
        let zones_needed = members.len().min(w::MAX_RANKS as usize);
        let mut adopt = adopt.map(|v| v.into_iter());
        let mut part = |what, name, len| -> Result<Part, WindowError> {
            match adopt.as_mut() {
                None => Part::new(what, name, len),
                Some(files) => {
                    let rw = files.next().ok_or(SharedMemError::Map(
                        what,
                        "the handover carried too few files".into(),
                    ))?;
                    if rw.metadata().map(|m| m.len()).ok() != Some(len) {
                        return Err(SharedMemError::Map(
                            what,
                            "a handed-over file has the wrong size".into(),
                        ));
                    }
                    Part::reopen(what, rw)
                }
            }
        };
        let res = Reservation::new()?;
        let base = res.0;
        let files = match kind {
            Kind::Shared => {
                let f = part(
                    "partition window",
                    c"ni-partition-window",
                    w::WINDOW_OFFSET + w::WINDOW_SIZE,
                )?;
                // SAFETY: the whole reservation, from the window's offset in the file.
                unsafe { map_at(base, 0, w::WINDOW_SIZE, f.rw.as_raw_fd(), w::WINDOW_OFFSET)? };
                Files::Shared(f)
            }
            Kind::Isolated => {
                let device = part(
                    "partition window's device page",
                    c"ni-window-device",
                    w::DEVICE_PAGE_SIZE,
                )?;
                // SAFETY: the device page, inside the reservation.
                unsafe {
                    map_at(
                        base,
                        w::DEVICE_PAGE,
                        w::DEVICE_PAGE_SIZE,
                        device.rw.as_raw_fd(),
                        0,
                    )?
                };
                let mut zones = Vec::new();
                for r in 0..zones_needed as u32 {
                    let z = part("partition window zone", c"ni-window-zone", w::ZONE_SIZE)?;
                    // SAFETY: zone r < MAX_RANKS, inside the reservation.
                    unsafe { map_at(base, w::zone(r), w::ZONE_SIZE, z.rw.as_raw_fd(), 0)? };
                    zones.push(z);
                }
                Files::Isolated { device, zones }
            }
        };
        // SAFETY: `base` is `res`'s reservation, WINDOW_SIZE bytes, which outlives `map`
        // (field order) and is unmapped by `res`; build_raw does not take ownership of it.
        let map = unsafe {
            MmapRegion::build_raw(
                base,
                w::WINDOW_SIZE as usize,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
            )
        }
        .map_err(|e| SharedMemError::Map("partition window", e.to_string()))?;
        let serial = match adopt {
            // `adopt` sets the image's.
            Some(_) => 0,
            None => NEXT_SERIAL.fetch_add(1, Ordering::Relaxed),
        };
        let win = Window {
            files,
            map,
            _res: res,
            serial,
            members,
        };
        Ok(win)
    }

    pub fn kind(&self) -> Kind {
        match self.files {
            Files::Shared(_) => Kind::Shared,
            Files::Isolated { .. } => Kind::Isolated,
        }
    }

    /// A shared window's file as BAR4 shows it from `WINDOW_OFFSET`: read-only.
    pub fn bar4_fd(&self) -> Option<RawFd> {
        match &self.files {
            Files::Shared(f) => Some(f.ro.as_raw_fd()),
            Files::Isolated { .. } => None,
        }
    }

    /// What BAR3 shows `rank`'s client of a shared window: its zone, read-write — the
    /// descriptor and the zone's offset in it. `None` for an isolated window or a non-member.
    pub fn bar3_zone(&self, rank: Option<u32>) -> Option<(RawFd, u64)> {
        match (&self.files, rank) {
            (Files::Shared(f), Some(r)) if (r as usize) < self.members.len() => {
                Some((f.rw.as_raw_fd(), w::WINDOW_OFFSET + w::zone(r)))
            }
            _ => None,
        }
    }

    /// The regions an isolated window adds to the session of `rank`'s client: the device
    /// page and every zone read-only, its own zone read-write. Empty for a shared window (or
    /// a session whose NI is not a member).
    pub fn regions(&self, rank: Option<u32>) -> Vec<WindowRegion> {
        let Files::Isolated { device, zones } = &self.files else {
            return vec![];
        };
        let mut out = vec![WindowRegion {
            index: w::DEVICE_REGION,
            size: w::DEVICE_PAGE_SIZE,
            writable: false,
            fd: Some(device.ro.as_raw_fd()),
        }];
        for r in 0..w::MAX_RANKS {
            let mine = rank == Some(r);
            out.push(match zones.get(r as usize) {
                Some(z) => WindowRegion {
                    index: w::zone_region(r),
                    size: w::ZONE_SIZE,
                    writable: mine,
                    fd: Some(if mine {
                        z.rw.as_raw_fd()
                    } else {
                        z.ro.as_raw_fd()
                    }),
                },
                None => WindowRegion {
                    index: w::zone_region(r),
                    size: 0,
                    writable: false,
                    fd: None,
                },
            });
        }
        out
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
        let mut at = 0;
        while at < len {
            let n = (len - at).min(ZEROS.len() as u64);
            let _ = self
                .map
                .as_volatile_slice()
                .write_slice(&ZEROS[..n as usize], (off + at) as usize);
            at += n;
        }
    }

    pub fn rank_of(&self, node: u32) -> Option<u32> {
        self.members
            .iter()
            .position(|&n| n == node)
            .map(|r| r as u32)
    }

    /// `rank`'s NI has a client ready: give it empty rings to and from every member (`HEAD`
    /// 0 and every slot's `SEQ` 0, so nothing of an earlier client reads as published),
    /// empty collective slots (the survivors start counting rounds again when they see
    /// `GEN` move), then publish it up under a new incarnation.
    pub fn member_up(&self, rank: u32) {
        let p = self.members.len() as u32;
        for peer in 0..p {
            for (s, d) in [(rank, peer), (peer, rank)] {
                self.u32(w::ring_head(s, d)).store(0, Ordering::Relaxed);
                self.zero(w::ring_data(s, d, p), w::ring_bytes(p));
            }
            self.zero(w::coll_slot(0, peer), 2 * w::COLL_SLOT);
        }
        self.u32(w::sleeping(rank)).store(0, Ordering::Relaxed);
        self.u32(w::cpu_word(rank)).store(0, Ordering::Relaxed);
        self.zero(w::stats_line(rank), w::stats::LEN);
        self.zero(w::mq_stats(rank, 0), w::MAX_RANKS as u64 * w::MQ_STATS_LEN);
        // A new client's keys start again: whatever a peer mapped of the last one's goes.
        self.regions_moved(rank);
        let s = self.u32(w::state_word(rank));
        let inc = state::incarnation(s.load(Ordering::Relaxed)) + 1;
        s.store(state::make(true, inc), Ordering::Release);
        self.u32(hdr::GEN).fetch_add(1, Ordering::AcqRel);
    }

    /// `rank`'s client went away: waiters on it fail instead of waiting forever.
    pub fn member_down(&self, rank: u32) {
        let s = self.u32(w::state_word(rank));
        let v = s.load(Ordering::Relaxed);
        if state::up(v) {
            s.store(state::make(false, state::incarnation(v)), Ordering::Release);
            self.u32(hdr::GEN).fetch_add(1, Ordering::AcqRel);
        }
    }

    /// A region `rank`'s client exports came or went: its peers drop what they mapped (or
    /// were refused) of its regions.
    pub fn regions_moved(&self, rank: u32) {
        self.u32(w::regions_word(rank))
            .fetch_add(1, Ordering::AcqRel);
    }

    /// The node of member `rank`.
    pub fn member(&self, rank: u32) -> Option<u32> {
        self.members.get(rank as usize).copied()
    }

    /// Publish which members `rank` reaches; a change moves `GEN`.
    pub fn set_reach(&self, rank: u32, mask: u64) {
        let r = self.u64(w::reach_word(rank));
        if r.swap(mask, Ordering::AcqRel) != mask {
            self.u32(hdr::GEN).fetch_add(1, Ordering::AcqRel);
        }
    }

    pub fn stats(&self, rank: u32) -> WindowStats {
        let b = w::stats_line(rank);
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
            ams: r(w::stats::AMS),
            ams_taken: r(w::stats::AMS_TAKEN),
            puts: r(w::stats::PUTS),
            put_bytes: r(w::stats::PUT_BYTES),
            gets: r(w::stats::GETS),
            get_bytes: r(w::stats::GET_BYTES),
            mq_sends: r(w::stats::MQ_SENDS),
            large_allreduces: r(w::stats::LARGE_ALLREDUCES),
            large_allreduce_bytes: r(w::stats::LARGE_ALLREDUCE_BYTES),
            large_allreduces_in_place: r(w::stats::LARGE_ALLREDUCES_IN_PLACE),
            large_bcasts: r(w::stats::LARGE_BCASTS),
            large_bcast_bytes: r(w::stats::LARGE_BCAST_BYTES),
            large_reduces: r(w::stats::LARGE_REDUCES),
            large_reduce_bytes: r(w::stats::LARGE_REDUCE_BYTES),
            large_allgathers: r(w::stats::LARGE_ALLGATHERS),
            large_allgather_bytes: r(w::stats::LARGE_ALLGATHER_BYTES),
            large_scans: r(w::stats::LARGE_SCANS),
            large_scan_bytes: r(w::stats::LARGE_SCAN_BYTES),
            large_pushed: r(w::stats::LARGE_PUSHED),
            reads: r(w::stats::READS),
            read_bytes: r(w::stats::READ_BYTES),
            mq_stored_here: self.mq_sum(|s| w::mq_stats(s, rank) + w::MQ_STORED),
            mq_rejected_here: self.mq_sum(|s| w::mq_stats(s, rank) + w::MQ_REJECTED),
            mq_rejected_mine: self.mq_sum(|d| w::mq_stats(rank, d) + w::MQ_REJECTED),
        }
    }

    /// The sum over the members `m` of the SEND count at `at(m)` (`w::mq_stats`: what each
    /// stored into one rank's queues, or what one rank stored into each's).
    fn mq_sum(&self, at: impl Fn(u32) -> u64) -> u64 {
        (0..self.members.len() as u32)
            .map(|m| self.u64(at(m)).load(Ordering::Relaxed))
            .fold(0u64, u64::wrapping_add)
    }

    /// Whether member `rank`'s client is up as incarnation `incarnation` (so a lock it
    /// holds may still be in use).
    pub fn holds(&self, rank: u32, incarnation: u32) -> bool {
        if rank as usize >= self.members.len() {
            return false;
        }
        let s = self.u32(w::state_word(rank)).load(Ordering::Acquire);
        state::up(s) && state::incarnation(s) == incarnation
    }

    /// A trapped access inside the window (a client that did not map it): anything a member
    /// could map it may read.
    pub fn read(&self, off: u64, buf: &mut [u8]) -> bool {
        self.map
            .as_volatile_slice()
            .read_slice(buf, off as usize)
            .is_ok()
    }

    /// A trapped write by `rank`'s client (`None`: its NI is not a member): only inside its
    /// own zone, as through its mappings.
    pub fn write(&self, rank: Option<u32>, off: u64, buf: &[u8]) -> bool {
        let Some(rank) = rank.filter(|&r| (r as usize) < self.members.len()) else {
            return false;
        };
        let end = off.checked_add(buf.len().max(1) as u64 - 1);
        if w::owner(off) != Some(rank) || end.and_then(w::owner) != Some(rank) {
            return false;
        }
        self.map
            .as_volatile_slice()
            .write_slice(buf, off as usize)
            .is_ok()
    }

    /// Where one of an isolated window's regions lies in the window: (offset, size); `None`
    /// for a region this window does not offer (a shared window, a rank beyond its members).
    pub fn region_span(&self, region: u32) -> Option<(u64, u64)> {
        let Files::Isolated { zones, .. } = &self.files else {
            return None;
        };
        if region == w::DEVICE_REGION {
            return Some((w::DEVICE_PAGE, w::DEVICE_PAGE_SIZE));
        }
        let rank = region.checked_sub(w::zone_region(0))?;
        ((rank as usize) < zones.len()).then(|| (w::zone(rank), w::ZONE_SIZE))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_up_resets_rings_and_moves_generation() {
        for kind in [Kind::Isolated, Kind::Shared] {
            let win = Window::new(kind, vec![3, 5], 1000).unwrap();
            assert_eq!(win.kind(), kind);
            assert_eq!(win.rank_of(5), Some(1));
            let slot = w::ring_data(1, 0, 2) + 5 * w::SLOT;
            win.u32(slot).store(w::seq_for(5), Ordering::Relaxed);
            win.u32(w::ring_head(0, 1)).store(5, Ordering::Relaxed);
            win.u64(w::coll_slot(1, 0)).store(9, Ordering::Relaxed);
            let g = win.u32(hdr::GEN).load(Ordering::Relaxed);
            win.member_up(1);
            assert_eq!(win.u32(slot).load(Ordering::Relaxed), 0);
            assert_eq!(win.u32(w::ring_head(0, 1)).load(Ordering::Relaxed), 0);
            assert_eq!(win.u64(w::coll_slot(1, 0)).load(Ordering::Relaxed), 0);
            let s = win.u32(w::state_word(1)).load(Ordering::Relaxed);
            assert!(state::up(s));
            assert_eq!(state::incarnation(s), 1);
            win.member_down(1);
            win.member_down(1);
            assert_eq!(win.u32(hdr::GEN).load(Ordering::Relaxed), g + 2);
            win.member_up(1);
            let s = win.u32(w::state_word(1)).load(Ordering::Relaxed);
            assert_eq!(state::incarnation(s), 2);
            let mut b = [0u8; 4];
            assert!(win.read(hdr::MAGIC, &mut b));
            assert_eq!(u32::from_le_bytes(b), hdr::MAGIC_VALUE);
            assert!(!win.read(w::WINDOW_SIZE - 2, &mut b));
        }
    }

    /// Beyond 16 members the rings shrink (`ring_bytes`) and every one is still emptied,
    /// up to the last slot of the last ring of the last zone.
    #[test]
    fn a_sixty_four_member_window_empties_the_rings_of_a_member_that_comes_up() {
        let members: Vec<u32> = (0..w::MAX_RANKS).collect();
        let win = Window::new(Kind::Isolated, members, 1000).unwrap();
        let n = w::MAX_RANKS;
        let last = |s, d| w::ring_data(s, d, n) + w::ring_bytes(n) - w::SLOT;
        for (s, d) in [(n - 1, 1), (1, n - 1), (1, 0)] {
            win.u32(last(s, d)).store(9, Ordering::Relaxed);
        }
        win.u32(last(n - 1, 2)).store(9, Ordering::Relaxed);
        win.set_reach(1, u64::MAX);
        assert_eq!(win.u64(w::reach_word(1)).load(Ordering::Relaxed), u64::MAX);
        win.member_up(1);
        for (s, d) in [(n - 1, 1), (1, n - 1), (1, 0)] {
            assert_eq!(win.u32(last(s, d)).load(Ordering::Relaxed), 0, "{s} → {d}");
        }
        // A ring that does not touch rank 1 keeps what it holds.
        assert_eq!(win.u32(last(n - 1, 2)).load(Ordering::Relaxed), 9);
    }

    /// A handover adopts the window's files only if they hold this daemon's layout: files of
    /// the same size from another version would have their rings zeroed in the wrong places.
    #[test]
    fn a_handed_over_window_of_another_version_is_refused() {
        for kind in [Kind::Isolated, Kind::Shared] {
            let win = Window::new(kind, vec![0, 1], 1000).unwrap();
            let img = win.image();
            let files = || -> Vec<File> {
                img.fds
                    .iter()
                    .map(|&fd| {
                        // SAFETY: `fd` is one of `win`'s descriptors, alive while it is;
                        // the duplicate is owned by the returned `File`.
                        let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
                        File::from(fd.try_clone_to_owned().unwrap())
                    })
                    .collect()
            };
            assert!(Window::adopt(&img, files()).is_ok());
            win.u32(hdr::VERSION)
                .store(hdr::VERSION_VALUE - 1, Ordering::Relaxed);
            let e = Window::adopt(&img, files()).err().expect("refused");
            assert!(e.to_string().contains("version"), "{e}");
        }
    }

    /// Trapped writes obey the same rule as the mappings: a member's own zone only.
    #[test]
    fn trapped_writes_reach_only_the_writers_own_zone() {
        let win = Window::new(Kind::Isolated, vec![0, 1, 2], 1000).unwrap();
        let one = 7u32.to_le_bytes();
        assert!(win.write(Some(1), w::ring_data(1, 0, 3), &one));
        assert_eq!(win.u32(w::ring_data(1, 0, 3)).load(Ordering::Relaxed), 7);
        assert!(win.write(Some(0), w::ring_head(1, 0), &one));
        // Someone else's cursor, ring or slot; the device page; a zone nobody has; a write
        // straddling the end of its own zone; a non-member.
        assert!(!win.write(Some(0), w::ring_data(1, 0, 3), &[0; 4]));
        assert!(!win.write(Some(2), w::ring_data(1, 0, 3), &[0; 64]));
        assert!(!win.write(Some(2), w::coll_slot(0, 0), &[0; 8]));
        assert!(!win.write(Some(0), hdr::GEN, &[0; 4]));
        assert!(!win.write(Some(0), w::state_word(0), &[0; 4]));
        assert!(!win.write(Some(5), w::sleeping(5), &[0; 4]));
        assert!(!win.write(Some(0), w::zone(1) - 2, &[0; 4]));
        assert!(!win.write(None, w::sleeping(0), &[0; 4]));
        assert_eq!(win.u32(w::ring_data(1, 0, 3)).load(Ordering::Relaxed), 7);
        assert!(!win.write(Some(1), w::ring_head(1, 0), &[0; 4]));
        assert_eq!(
            win.u32(hdr::MAGIC).load(Ordering::Relaxed),
            hdr::MAGIC_VALUE
        );
    }

    /// The descriptors a client gets for what it may only read cannot be mapped writable,
    /// nor made writable afterwards; its own zone's can, and the daemon sees the stores.
    #[test]
    fn read_only_descriptors_refuse_writable_mappings() {
        let win = Window::new(Kind::Isolated, vec![4, 6], 1000).unwrap();
        let regions = win.regions(Some(1));
        assert_eq!(regions.len() as u32, w::ISOLATED_REGIONS - w::DEVICE_REGION);
        let map = |fd: RawFd, len: u64, prot: i32| {
            // SAFETY: a fresh mapping of a descriptor the window holds, checked below.
            unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len as usize,
                    prot,
                    libc::MAP_SHARED,
                    fd,
                    0,
                )
            }
        };
        for r in &regions {
            let Some(fd) = r.fd else {
                assert_eq!(r.size, 0);
                continue;
            };
            let rw = map(fd, r.size, libc::PROT_READ | libc::PROT_WRITE);
            assert_eq!(rw != libc::MAP_FAILED, r.writable, "region {}", r.index);
            if rw != libc::MAP_FAILED {
                // SAFETY: our zone's SLEEPING word, inside the mapping just made.
                unsafe { (rw as *mut u32).write_volatile(1) };
                assert_eq!(win.u32(w::sleeping(1)).load(Ordering::Relaxed), 1);
                // SAFETY: unmapping the mapping just made.
                unsafe { libc::munmap(rw, r.size as usize) };
                continue;
            }
            let ro = map(fd, r.size, libc::PROT_READ);
            assert_ne!(ro, libc::MAP_FAILED);
            // SAFETY: mprotect of the mapping just made; it must fail.
            let up = unsafe { libc::mprotect(ro, r.size as usize, libc::PROT_WRITE) };
            assert_ne!(up, 0, "region {} became writable", r.index);
            // SAFETY: unmapping the mapping just made.
            unsafe { libc::munmap(ro, r.size as usize) };
        }
        assert_eq!(regions.iter().filter(|r| r.writable).count(), 1);
        assert_eq!(
            win.region_span(w::zone_region(1)),
            Some((w::zone(1), w::ZONE_SIZE))
        );
        assert_eq!(
            win.region_span(w::DEVICE_REGION),
            Some((w::DEVICE_PAGE, w::DEVICE_PAGE_SIZE))
        );
        assert_eq!(win.region_span(w::zone_region(2)), None);
        assert_eq!(win.region_span(ni_abi::pci::BAR4_REGION), None);
        assert!(Window::new(Kind::Shared, vec![1], 1000)
            .unwrap()
            .regions(Some(0))
            .is_empty());
    }
}
