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
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.add(offset), data.len()) }
    }

    pub fn read_at(&self, offset: usize, out: &mut [u8]) {
        assert!(
            offset.checked_add(out.len()).is_some_and(|e| e <= self.len),
            "read past the region"
        );
        // SAFETY: bounds checked above; the mapping is live for `self`'s lifetime.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.add(offset), out.as_mut_ptr(), out.len()) }
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

/// Whether every page of `[at, at + len)` is private anonymous read-write memory
/// (`/proc/self/maps`: `rw-p`, no file, or `[heap]`), or pages an earlier [`Mem::adopt`]
/// moved: what [`Mem::adopt`] may move.
fn private_anonymous(at: usize, len: usize) -> Result<()> {
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
