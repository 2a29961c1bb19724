//! Memory the NI can reach: memfd-backed mappings (shared with the device through DMA_MAP)
//! and the SRAM mapping the device hands over.

use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};

use crate::{Error, Result};

pub struct Mem {
    ptr: *mut u8,
    len: usize,
    /// The file behind a plain mapping; `None` for one composed of several ([`Mem::compose`]).
    fd: Option<File>,
    /// Whether dropping this value unmaps the memory: not for the application's own pages
    /// ([`Mem::adopt`], [`Mem::view`]).
    owned: bool,
}

/// One file of a composed mapping: `len` bytes of `fd` from `file_offset`, placed at `at`.
pub struct Part {
    pub fd: File,
    pub file_offset: u64,
    pub at: u64,
    pub len: u64,
    /// Read-only parts are mapped without `PROT_WRITE`: a stray store faults here instead of
    /// reaching memory another writer owns (and a read-only descriptor could not do more).
    pub writable: bool,
}

// SAFETY: the mapping is plain shared memory; every access goes through raw-pointer copies
// or atomics, never through references that could alias mutably across threads.
unsafe impl Send for Mem {}
// SAFETY: as above.
unsafe impl Sync for Mem {}

const PAGE: usize = 4096;

impl Mem {
    /// A fresh zeroed region of at least `len` bytes, whole pages, sealed against shrinking
    /// (so the device's mapping of it can never fault).
    pub fn alloc(len: usize) -> Result<Mem> {
        let len = len.div_ceil(PAGE) * PAGE;
        // SAFETY: memfd_create with a NUL-terminated name.
        let fd = unsafe {
            libc::memfd_create(
                c"libni".as_ptr(),
                libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
            )
        };
        if fd < 0 {
            return Err(Error::Memory(format!(
                "memfd_create: {}",
                std::io::Error::last_os_error()
            )));
        }
        // SAFETY: fd is a fresh descriptor we own.
        let file = unsafe { File::from_raw_fd(fd) };
        file.set_len(len as u64)
            .map_err(|e| Error::Memory(format!("sizing {len} bytes: {e}")))?;
        // SAFETY: F_ADD_SEALS on our own memfd.
        unsafe {
            libc::fcntl(
                fd,
                libc::F_ADD_SEALS,
                libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL,
            );
        }
        Self::map_fd(file, 0, len)
    }

    /// Map `len` bytes of `fd` at `offset`, shared.
    pub fn map_fd(fd: File, offset: u64, len: usize) -> Result<Mem> {
        // SAFETY: a fresh shared mapping of a descriptor we own; the result is checked.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                offset as libc::off_t,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(Error::Memory(format!(
                "mmap of {len} bytes: {}",
                std::io::Error::last_os_error()
            )));
        }
        Ok(Mem {
            ptr: ptr as *mut u8,
            len,
            fd: Some(fd),
            owned: true,
        })
    }

    /// The application's own whole pages `[ptr, ptr + len)` as memory the NI can reach.
    ///
    /// `by_fd` (a transport that shares memory by file: vfio-user): a private anonymous page
    /// has no file the daemon could map, so the pages move onto a sealed memfd mapped shared
    /// at the same address, their contents copied first. The application keeps its pointers
    /// and its data; what changes is that the pages are now shared with the device (and
    /// with a child after `fork`, as a registered region is with verbs). A store another
    /// thread makes into these pages while this runs can be lost: register before such
    /// threads touch the pages. Only private anonymous read-write pages move (the heap, an
    /// anonymous `mmap`); a file mapping, shared memory or the stack is refused.
    ///
    /// Otherwise (VFIO: the IOMMU maps pages by address) the pages stay as they are.
    ///
    /// Never unmapped on drop: the pages are the application's.
    pub fn adopt(ptr: *mut u8, len: usize, by_fd: bool) -> Result<Mem> {
        let at = ptr as usize;
        if !at.is_multiple_of(PAGE) || !len.is_multiple_of(PAGE) || len == 0 {
            return Err(Error::BadArgument(format!(
                "adopting {len:#x} bytes at {at:#x}: whole pages only"
            )));
        }
        if !by_fd {
            return Ok(Mem::view(ptr, len));
        }
        private_anonymous(at, len)?;
        let fresh = Mem::alloc(len)?;
        // SAFETY: `[ptr, ptr + len)` is readable (checked: private anonymous read-write
        // pages) and `fresh` is a new mapping of `len` bytes; they do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(ptr, fresh.ptr, len) };
        // SAFETY: MAP_FIXED over the application's own pages, which it asked to register;
        // their contents are in the memfd, mapped back at the same address.
        let got = unsafe {
            libc::mmap(
                ptr as *mut libc::c_void,
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_FIXED,
                fresh.fd(),
                0,
            )
        };
        if got == libc::MAP_FAILED {
            return Err(Error::Memory(format!(
                "moving {len:#x} bytes at {at:#x} onto shared memory: {}",
                std::io::Error::last_os_error()
            )));
        }
        let mut fresh = fresh;
        Ok(Mem {
            ptr,
            len,
            fd: fresh.fd.take(),
            owned: false,
        })
    }

    /// A view of `len` bytes at `ptr` that another owner maps (never unmapped here).
    pub fn view(ptr: *mut u8, len: usize) -> Mem {
        Mem {
            ptr,
            len,
            fd: None,
            owned: false,
        }
    }

    /// `len` bytes of address space with `parts` mapped shared at their offsets; the rest is
    /// inaccessible.
    pub fn compose(len: usize, parts: Vec<Part>) -> Result<Mem> {
        let mmap_err =
            |what: &str| Error::Memory(format!("{what}: {}", std::io::Error::last_os_error()));
        // SAFETY: a fresh inaccessible anonymous reservation; the result is checked.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(mmap_err(&format!("reserving {len} bytes")));
        }
        // From here the reservation is ours to drop.
        let mem = Mem {
            ptr: ptr as *mut u8,
            len,
            fd: None,
            owned: true,
        };
        for p in &parts {
            let end = p.at.checked_add(p.len).filter(|&e| e <= len as u64);
            if end.is_none() || !(p.at as usize).is_multiple_of(PAGE) {
                return Err(Error::Memory(format!(
                    "part of {:#x} bytes at {:#x} does not fit {len:#x}",
                    p.len, p.at
                )));
            }
            let prot = libc::PROT_READ | if p.writable { libc::PROT_WRITE } else { 0 };
            // SAFETY: MAP_FIXED over pages of our own reservation only (checked above).
            let got = unsafe {
                libc::mmap(
                    mem.ptr.add(p.at as usize) as *mut libc::c_void,
                    p.len as usize,
                    prot,
                    libc::MAP_SHARED | libc::MAP_FIXED,
                    p.fd.as_raw_fd(),
                    p.file_offset as libc::off_t,
                )
            };
            if got == libc::MAP_FAILED {
                return Err(mmap_err(&format!(
                    "mapping {:#x} bytes at {:#x}",
                    p.len, p.at
                )));
            }
        }
        Ok(mem)
    }

    /// Put private zeroed memory where the mapping was and drop its file: pointers into it
    /// stay valid, and the file no longer holds what it maps (a device's BAR, which the
    /// kernel will not give back to its VMM while anything maps it).
    pub fn forsake(&mut self) -> Result<()> {
        // SAFETY: replaces exactly this value's own mapping, at its own address and length;
        // nothing is read from the old pages.
        let p = unsafe {
            libc::mmap(
                self.ptr as *mut libc::c_void,
                self.len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(Error::Memory(format!(
                "replacing a {}-byte mapping: {}",
                self.len,
                std::io::Error::last_os_error()
            )));
        }
        self.fd = None;
        Ok(())
    }

    pub fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// The NI addresses this memory by its address in this process (IOVA = VA).
    pub fn iova(&self) -> u64 {
        self.ptr as u64
    }

    /// The file behind a plain mapping (-1 for a composed one, which is never DMA-mapped).
    pub fn fd(&self) -> RawFd {
        self.fd.as_ref().map_or(-1, |f| f.as_raw_fd())
    }

    pub fn write_at(&self, offset: usize, data: &[u8]) {
        assert!(
            offset
                .checked_add(data.len())
                .is_some_and(|e| e <= self.len),
            "write past the region"
        );
        // SAFETY: bounds checked above; the mapping is live for `self`'s lifetime.
        unsafe { copy(data.as_ptr(), self.ptr.add(offset), data.len()) }
    }

    pub fn read_at(&self, offset: usize, out: &mut [u8]) {
        assert!(
            offset.checked_add(out.len()).is_some_and(|e| e <= self.len),
            "read past the region"
        );
        // SAFETY: bounds checked above; the mapping is live for `self`'s lifetime.
        unsafe { copy(self.ptr.add(offset), out.as_mut_ptr(), out.len()) }
    }

    /// `len` bytes at `offset`, read where they lie (a reduce applies a vector straight out of
    /// a ring rather than copying it out first). Peers map this memory too and may rewrite
    /// these bytes meanwhile: that changes only the values read, as it would a copy's.
    pub fn slice_at(&self, offset: usize, len: usize) -> &[u8] {
        assert!(
            offset.checked_add(len).is_some_and(|e| e <= self.len),
            "read past the region"
        );
        // SAFETY: bounds checked above; the mapping is live for `self`'s lifetime, and the
        // bytes are plain data whatever a peer stores in them.
        unsafe { std::slice::from_raw_parts(self.ptr.add(offset), len) }
    }
}

/// `dst.copy_from_slice(src)` by [`copy`]: no `memcpy` call for a small one.
#[inline(always)]
pub(crate) fn copy_slice(dst: &mut [u8], src: &[u8]) {
    assert_eq!(
        dst.len(),
        src.len(),
        "copy between slices of different lengths"
    );
    // SAFETY: two slices of the same length; `dst` is borrowed mutably, so apart.
    unsafe { copy(src.as_ptr(), dst.as_mut_ptr(), src.len()) }
}

/// `copy_nonoverlapping` of `n` bytes, up to 16 of them by two loads and two stores that may
/// overlap instead of a `memcpy` call (the call was 12 of the ≈ 580 instructions an 8-byte
/// message costs its receiver; most payloads through a ring are that small).
///
/// # Safety
/// As `copy_nonoverlapping`: `src` readable and `dst` writable for `n` bytes, apart.
#[inline(always)]
unsafe fn copy(src: *const u8, dst: *mut u8, n: usize) {
    // SAFETY (each arm): as the caller promised; `ends` reads and writes within `n` bytes.
    unsafe {
        match n {
            8..=16 => ends::<u64>(src, dst, n),
            4..=7 => ends::<u32>(src, dst, n),
            0..=3 => {
                for k in 0..n {
                    dst.add(k).write(src.add(k).read());
                }
            }
            _ => std::ptr::copy_nonoverlapping(src, dst, n),
        }
    }
}

/// The first and the last `size_of::<T>()` of `n` bytes (`T`'s size ≤ `n` ≤ twice it), as
/// one unaligned `T` each: together every byte, those in the middle twice.
///
/// # Safety
/// As [`copy`], and `size_of::<T>() <= n`.
#[inline(always)]
unsafe fn ends<T: Copy>(src: *const u8, dst: *mut u8, n: usize) {
    let w = std::mem::size_of::<T>();
    debug_assert!(w <= n && n <= 2 * w);
    // SAFETY: both accesses lie within the first `n` bytes of `src` and of `dst` (`w <= n`),
    // which the caller promised readable and writable; unaligned by the unaligned methods.
    unsafe {
        let (a, b) = (
            (src as *const T).read_unaligned(),
            (src.add(n - w) as *const T).read_unaligned(),
        );
        (dst as *mut T).write_unaligned(a);
        (dst.add(n - w) as *mut T).write_unaligned(b);
    }
}

impl Drop for Mem {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        // SAFETY: unmapping exactly the mapping this value created.
        unsafe {
            libc::munmap(self.ptr as *mut libc::c_void, self.len);
        }
    }
}

/// The calling thread's stack, `[low, high)`.
fn own_stack() -> Option<(usize, usize)> {
    // SAFETY: pthread_getattr_np fills `attr` for the calling thread, pthread_attr_getstack
    // reads it, and it is destroyed once; all pointers are to locals.
    unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        if libc::pthread_getattr_np(libc::pthread_self(), &mut attr) != 0 {
            return None;
        }
        let mut addr: *mut libc::c_void = std::ptr::null_mut();
        let mut size = 0usize;
        let r = libc::pthread_attr_getstack(&attr, &mut addr, &mut size);
        libc::pthread_attr_destroy(&mut attr);
        (r == 0).then(|| (addr as usize, addr as usize + size))
    }
}

/// Whether every page of `[at, at + len)` is private anonymous read-write memory
/// (`/proc/self/maps`: `rw-p`, no file, or `[heap]`), or pages an earlier [`Mem::adopt`]
/// moved: what [`Mem::adopt`] may move.
fn private_anonymous(at: usize, len: usize) -> Result<()> {
    // A thread's stack is anonymous memory like any other in /proc/self/maps (only the main
    // thread's is named): the calling thread's is refused here, as its own frames would be
    // written while its pages move.
    if let Some((lo, hi)) = own_stack() {
        if at < hi && lo < at + len {
            return Err(Error::BadArgument(format!(
                "{len:#x} bytes at {at:#x} are the calling thread's stack: only private \
                 anonymous read-write memory (the heap, an anonymous mmap) can be registered"
            )));
        }
    }
    let maps = std::fs::read_to_string("/proc/self/maps")
        .map_err(|e| Error::Memory(format!("reading /proc/self/maps: {e}")))?;
    let end = at + len;
    let mut covered = at;
    for line in maps.lines() {
        let mut f = line.split_whitespace();
        let (Some(range), Some(perms)) = (f.next(), f.next()) else {
            continue;
        };
        let path = f.nth(3).unwrap_or("");
        let Some((a, b)) = range.split_once('-') else {
            continue;
        };
        let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16)) else {
            continue;
        };
        if b <= covered || a >= end {
            continue;
        }
        if a > covered {
            break;
        }
        // (pages an earlier registration moved, no longer pinned, are ours to move again)
        let ours = perms == "rw-s" && path.starts_with("/memfd:libni");
        if !ours && (perms != "rw-p" || !(path.is_empty() || path == "[heap]")) {
            return Err(Error::BadArgument(format!(
                "{:#x} is in a mapping that cannot be registered ({perms} {}): only private \
                 anonymous read-write memory (the heap, an anonymous mmap) can be",
                covered,
                if path.is_empty() { "anonymous" } else { path }
            )));
        }
        covered = b;
        if covered >= end {
            return Ok(());
        }
    }
    Err(Error::BadArgument(format!(
        "{covered:#x} (of {len:#x} bytes at {at:#x}) is not mapped"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every small length at every offset within a word: the bytes copied are exactly the
    /// ones asked for, those around them untouched (both directions).
    #[test]
    fn small_copies_move_exactly_their_bytes() {
        let m = Mem::alloc(PAGE).unwrap();
        let src: Vec<u8> = (0..64u8).map(|x| x.wrapping_mul(29) ^ 0x5A).collect();
        for n in 0..=24 {
            for at in 0..9 {
                m.write_at(0, &[0xEE; 64]);
                m.write_at(at, &src[..n]);
                let mut all = [0u8; 64];
                m.read_at(0, &mut all);
                let mut want = [0xEEu8; 64];
                want[at..at + n].copy_from_slice(&src[..n]);
                assert_eq!(all, want, "write of {n} at {at}");
                let mut out = [0x11u8; 40];
                m.read_at(at, &mut out[3..3 + n]);
                let mut want = [0x11u8; 40];
                want[3..3 + n].copy_from_slice(&src[..n]);
                assert_eq!(out, want, "read of {n} at {at}");
            }
        }
    }

    /// `n` pages of fresh private anonymous memory (never unmapped: the tests leak them).
    fn anon(n: usize) -> *mut u8 {
        // SAFETY: a fresh private anonymous mapping; the result is checked.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                n * PAGE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        p as *mut u8
    }

    fn maps_line(at: *mut u8) -> String {
        let a = at as usize;
        std::fs::read_to_string("/proc/self/maps")
            .unwrap()
            .lines()
            .find(|l| {
                let (r, _) = l.split_once(' ').unwrap();
                let (s, e) = r.split_once('-').unwrap();
                let (s, e) = (
                    usize::from_str_radix(s, 16).unwrap(),
                    usize::from_str_radix(e, 16).unwrap(),
                );
                s <= a && a < e
            })
            .unwrap()
            .to_string()
    }

    #[test]
    fn adopting_moves_pages_onto_a_memfd_and_keeps_their_bytes_and_address() {
        let p = anon(3);
        for i in 0..3 * PAGE {
            // SAFETY: within the 3 pages just mapped.
            unsafe { *p.add(i) = (i * 7 % 251) as u8 };
        }
        let m = Mem::adopt(p, 3 * PAGE, true).unwrap();
        assert_eq!(m.ptr(), p, "the pages stay at their address");
        assert!(m.fd() >= 0, "a file the daemon can map");
        assert!(
            maps_line(p).contains("rw-s") && maps_line(p).contains("/memfd:libni"),
            "{}",
            maps_line(p)
        );
        for i in 0..3 * PAGE {
            // SAFETY: as above; the pages are still mapped (now shared).
            assert_eq!(unsafe { *p.add(i) }, (i * 7 % 251) as u8, "byte {i}");
        }
        // What the application writes now is in the file the device maps.
        // SAFETY: as above.
        unsafe { *p.add(5000) = 0xA5 };
        let mut b = [0u8; 1];
        // SAFETY: pread into a 1-byte buffer from our own descriptor.
        let n = unsafe { libc::pread(m.fd(), b.as_mut_ptr() as *mut libc::c_void, 1, 5000) };
        assert_eq!((n, b[0]), (1, 0xA5));
        // Dropping the Mem leaves the application's pages mapped.
        drop(m);
        // SAFETY: still mapped.
        assert_eq!(unsafe { *p.add(5000) }, 0xA5);
        // Pages an earlier registration moved can move again (a later registration).
        let again = Mem::adopt(p, PAGE, true).unwrap();
        // SAFETY: still mapped.
        assert_eq!(unsafe { *p.add(7) }, 49);
        drop(again);
    }

    #[test]
    fn adopting_refuses_the_stack_shared_memory_and_unmapped_pages() {
        let on_stack = [0u8; 64];
        let page = (on_stack.as_ptr() as usize & !(PAGE - 1)) as *mut u8;
        let e = Mem::adopt(page, PAGE, true).err().unwrap().to_string();
        assert!(e.contains("the calling thread's stack"), "{e}");
        // The main thread's: named in /proc/self/maps (or, when this test runs on the main
        // thread, as nextest runs it, the calling thread's).
        let main_stack = std::fs::read_to_string("/proc/self/maps")
            .unwrap()
            .lines()
            .find(|l| l.ends_with("[stack]"))
            .map(|l| usize::from_str_radix(l.split('-').next().unwrap(), 16).unwrap())
            .unwrap();
        let e = Mem::adopt(main_stack as *mut u8, PAGE, true)
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("[stack]") || e.contains("the calling thread's stack"),
            "{e}"
        );
        // SAFETY: a fresh shared anonymous mapping; checked.
        let shared = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                PAGE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(shared, libc::MAP_FAILED);
        let e = Mem::adopt(shared as *mut u8, PAGE, true)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("rw-s"), "{e}");
        let p = anon(2);
        // SAFETY: unmapping the second of our own two pages.
        unsafe { libc::munmap(p.add(PAGE) as *mut libc::c_void, PAGE) };
        let e = Mem::adopt(p, 2 * PAGE, true).err().unwrap().to_string();
        assert!(e.contains("is not mapped"), "{e}");
        // Not whole pages: refused before anything moves.
        assert!(Mem::adopt(p.wrapping_add(1), PAGE, true).is_err());
        // By address (VFIO): nothing moves, nothing is checked beyond the page shape.
        let v = Mem::adopt(p, PAGE, false).unwrap();
        assert_eq!(v.fd(), -1);
        assert!(maps_line(p).contains("rw-p"), "{}", maps_line(p));
    }
}
