//! LBUS SRAM: the first 8 MB of BAR0, a memfd the client maps (sparse mmap), so its writes
//! never trap. The device sees the same pages through its own mapping.

use std::fs::File;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};

use ni_abi::lanai::SRAM_SIZE;
use vm_memory::{Bytes, FileOffset, MmapRegion, VolatileMemory};

pub struct Sram {
    file: File,
    map: MmapRegion,
}

/// Creating a sealed, shared memfd and the device's mapping of it (SRAM, partition windows).
#[derive(Debug, thiserror::Error)]
pub enum SharedMemError {
    #[error("creating the {0} memfd: {1}")]
    Memfd(&'static str, nix::Error),
    #[error("sizing the {0} memfd: {1}")]
    Size(&'static str, std::io::Error),
    #[error("mapping the {0}: {1}")]
    Map(&'static str, String),
    #[error("creating the interrupt outbox's eventfd: {0}")]
    Outbox(std::io::Error),
}

pub type SramError = SharedMemError;

/// A memfd of `len` bytes clients may map but never resize, and the device's shared mapping
/// of `map_len` bytes of it from `map_at`.
pub fn shared_memfd(
    what: &'static str,
    name: &std::ffi::CStr,
    len: u64,
    map_at: u64,
    map_len: usize,
) -> Result<(File, MmapRegion), SharedMemError> {
    let file = sealed_memfd(what, name, len)?;
    let dup = file
        .try_clone()
        .map_err(|e| SharedMemError::Size(what, e))?;
    let map = MmapRegion::build(
        Some(FileOffset::new(dup, map_at)),
        map_len,
        libc::PROT_READ | libc::PROT_WRITE,
        libc::MAP_SHARED,
    )
    .map_err(|e| SharedMemError::Map(what, e.to_string()))?;
    Ok((file, map))
}

/// A memfd of `len` bytes sealed against resizing: no client that holds it can make a page
/// the device or a peer maps disappear (SIGBUS).
pub fn sealed_memfd(
    what: &'static str,
    name: &std::ffi::CStr,
    len: u64,
) -> Result<File, SharedMemError> {
    let fd = nix::sys::memfd::memfd_create(
        name,
        nix::sys::memfd::MemFdCreateFlag::MFD_CLOEXEC
            | nix::sys::memfd::MemFdCreateFlag::MFD_ALLOW_SEALING,
    )
    .map_err(|e| SharedMemError::Memfd(what, e))?;
    let file = File::from(fd);
    file.set_len(len)
        .map_err(|e| SharedMemError::Size(what, e))?;
    // SAFETY: F_ADD_SEALS on a memfd we own; no memory is touched.
    let r = unsafe {
        libc::fcntl(
            file.as_raw_fd(),
            libc::F_ADD_SEALS,
            libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL,
        )
    };
    if r != 0 {
        return Err(SharedMemError::Size(what, std::io::Error::last_os_error()));
    }
    Ok(file)
}

/// An SRAM access outside the 8 MB.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("LBUS access of {len} bytes at {addr:#x} is outside the {SRAM_SIZE:#x}-byte SRAM")]
pub struct SramFault {
    pub addr: u64,
    pub len: u64,
}

impl Sram {
    /// A fresh, zeroed SRAM. Each client gets its own, so nothing one client left in SRAM
    /// (or still maps) is seen by the next.
    pub fn new() -> Result<Sram, SramError> {
        let (file, map) = shared_memfd("SRAM", c"ni-lanai-sram", SRAM_SIZE, 0, SRAM_SIZE as usize)?;
        Ok(Sram { file, map })
    }

    /// The SRAM an earlier daemon handed over (`crate::handover`), contents as they are.
    pub fn adopt(file: File) -> Result<Sram, SramError> {
        let len = file
            .metadata()
            .map_err(|e| SharedMemError::Size("SRAM", e))?
            .len();
        if len != SRAM_SIZE {
            return Err(SharedMemError::Map(
                "SRAM",
                format!("the handed-over file is {len} bytes, not {SRAM_SIZE}"),
            ));
        }
        let dup = file
            .try_clone()
            .map_err(|e| SharedMemError::Size("SRAM", e))?;
        let map = MmapRegion::build(
            Some(FileOffset::new(dup, 0)),
            SRAM_SIZE as usize,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
        )
        .map_err(|e| SharedMemError::Map("SRAM", e.to_string()))?;
        Ok(Sram { file, map })
    }

    /// Every byte back to zero.
    pub fn zero(&self) {
        let _ = self
            .map
            .as_volatile_slice()
            .write_slice(&vec![0u8; SRAM_SIZE as usize], 0);
    }

    pub fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    fn check(addr: u64, len: usize) -> Result<(), SramFault> {
        match addr.checked_add(len as u64) {
            Some(end) if end <= SRAM_SIZE => Ok(()),
            _ => Err(SramFault {
                addr,
                len: len as u64,
            }),
        }
    }

    pub fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), SramFault> {
        Self::check(addr, buf.len())?;
        self.map
            .as_volatile_slice()
            .read_slice(buf, addr as usize)
            .map_err(|_| SramFault {
                addr,
                len: buf.len() as u64,
            })
    }

    pub fn write(&self, addr: u64, buf: &[u8]) -> Result<(), SramFault> {
        Self::check(addr, buf.len())?;
        self.map
            .as_volatile_slice()
            .write_slice(buf, addr as usize)
            .map_err(|_| SramFault {
                addr,
                len: buf.len() as u64,
            })
    }

    /// A 32-bit word shared with the client (the fast path's control page), accessed
    /// atomically. `offset` must be 4-aligned and inside SRAM (the layout's constants are).
    pub fn atomic_u32(&self, offset: u64) -> &AtomicU32 {
        self.map
            .get_atomic_ref::<AtomicU32>(offset as usize)
            .expect("fast-path control words are aligned and inside SRAM")
    }

    pub fn load_u32(&self, offset: u64) -> u32 {
        self.atomic_u32(offset).load(Ordering::Acquire)
    }

    pub fn store_u32(&self, offset: u64, v: u32) {
        self.atomic_u32(offset).store(v, Ordering::Release)
    }

    /// Big-endian word, as the Lanai stores it.
    pub fn read_be32(&self, addr: u64) -> Result<u32, SramFault> {
        let mut b = [0u8; 4];
        self.read(addr, &mut b)?;
        Ok(u32::from_be_bytes(b))
    }

    pub fn write_be16(&self, addr: u64, v: u16) -> Result<(), SramFault> {
        self.write(addr, &v.to_be_bytes())
    }
}
