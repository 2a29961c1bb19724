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
        })
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
        // SAFETY: unmapping exactly the mapping this value created.
        unsafe {
            libc::munmap(self.ptr as *mut libc::c_void, self.len);
        }
    }
}
