//! The NI's view of client memory: what the client mapped with `DMA_MAP`.
//!
//! Every device access to client memory goes through [`DmaSpace::read`] and
//! [`DmaSpace::write`]: the whole range must be mapped, with the right permission, or
//! nothing is touched and the caller gets a [`DmaFault`] to report. Mappings are
//! vm-memory regions over the client's file descriptors (memfd guest RAM, libni's memfd
//! buffers), so the device copies straight into and out of the client's pages.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::sync::Arc;

use vm_memory::{
    Bytes, FileOffset, GuestAddress, GuestMemoryRegion, GuestRegionMmap, MemoryRegionAddress,
    MmapRegion, VolatileMemory,
};

/// The largest single `DMA_MAP` accepted (a guest's whole RAM is one map).
pub const MAX_MAP: u64 = 1 << 40;
/// Mappings one client may hold at once. Each is a VMA of the daemon, whose whole budget
/// (`vm.max_map_count`, 65530 by default) all clients share; QEMU without a vIOMMU maps a
/// guest's RAM in a handful of pieces, libni one piece per buffer.
pub const MAX_MAPPINGS: usize = 4096;
/// Distinct files one client's mappings may keep open: each is a descriptor of the daemon,
/// whose limit all clients share. Mappings of one file share one descriptor.
pub const MAX_FILES: usize = 64;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MapError {
    #[error("DMA_MAP without a file descriptor: the client's memory must be shareable (QEMU: memory-backend-memfd with share=on)")]
    NoFd,
    #[error("DMA_MAP of {size:#x} bytes at {iova:#x}: size is zero, unaligned or too large")]
    BadSize { iova: u64, size: u64 },
    #[error("DMA_MAP at {iova:#x}+{size:#x} overlaps the existing mapping at {existing:#x}+{existing_size:#x}")]
    Overlap {
        iova: u64,
        size: u64,
        existing: u64,
        existing_size: u64,
    },
    #[error("DMA_MAP at {iova:#x}: file offset {offset:#x}+{size:#x} is beyond the file's {file_size:#x} bytes")]
    BeyondFile {
        iova: u64,
        offset: u64,
        size: u64,
        file_size: u64,
    },
    #[error("DMA_MAP at {iova:#x}: neither read nor write permission")]
    NoAccess { iova: u64 },
    #[error("DMA_MAP: too many mappings ({0}; a client may hold {MAX_MAPPINGS})")]
    TooMany(usize),
    #[error("DMA_MAP: mappings of too many distinct files ({0}; a client may use {MAX_FILES})")]
    TooManyFiles(usize),
    #[error("DMA_MAP at {iova:#x}: the file can shrink ({reason}); the device would fault on a page the client cut off. Map a memfd sealed with F_SEAL_SHRINK (QEMU: memory-backend-memfd, which seals by default; libni seals its buffers)")]
    NotSealed { iova: u64, reason: String },
    #[error("DMA_MAP at {iova:#x}: mmap failed: {reason}")]
    Mmap { iova: u64, reason: String },
    #[error("DMA_UNMAP of {iova:#x}+{size:#x}: nothing is mapped there")]
    NotMapped { iova: u64, size: u64 },
}

/// A device access outside what the client mapped, or against a mapping's permission.
#[derive(Debug, Clone, Copy, thiserror::Error, PartialEq, Eq)]
#[error("DMA {} of {len} bytes at {iova:#x} falls outside the client's mappings", if *.write { "write" } else { "read" })]
pub struct DmaFault {
    pub iova: u64,
    pub len: u64,
    pub write: bool,
}

/// One DMA mapping as a handover carries it (`DmaSpace::image`).
#[derive(Clone, Copy, Debug, serde::Serialize, serde::Deserialize)]
pub struct MapImage {
    pub iova: u64,
    pub size: u64,
    pub offset: u64,
    pub read: bool,
    pub write: bool,
    pub fd: std::os::fd::RawFd,
}

struct Mapping {
    region: Arc<GuestRegionMmap>,
    readable: bool,
    writable: bool,
}

#[derive(Default)]
pub struct DmaSpace {
    /// Sorted by IOVA, never overlapping.
    maps: Vec<Mapping>,
}

impl DmaSpace {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.maps.len()
    }

    pub fn is_empty(&self) -> bool {
        self.maps.is_empty()
    }

    pub fn mapped_bytes(&self) -> u64 {
        self.maps.iter().map(|m| m.region.len()).sum()
    }

    pub fn clear(&mut self) {
        self.maps.clear();
    }

    pub fn map(
        &mut self,
        read: bool,
        write: bool,
        offset: u64,
        iova: u64,
        size: u64,
        fd: Option<File>,
    ) -> Result<(), MapError> {
        let fd = fd.ok_or(MapError::NoFd)?;
        let page = 4096;
        if size == 0
            || size > MAX_MAP
            || !size.is_multiple_of(page)
            || !iova.is_multiple_of(page)
            || !offset.is_multiple_of(page)
        {
            return Err(MapError::BadSize { iova, size });
        }
        iova.checked_add(size)
            .ok_or(MapError::BadSize { iova, size })?;
        if !read && !write {
            return Err(MapError::NoAccess { iova });
        }
        if self.maps.len() >= MAX_MAPPINGS {
            return Err(MapError::TooMany(self.maps.len()));
        }
        require_shrink_seal(&fd, iova)?;
        if let Some(m) = self.maps.iter().find(|m| {
            let b = m.region.start_addr().0;
            iova < b + m.region.len() && b < iova + size
        }) {
            return Err(MapError::Overlap {
                iova,
                size,
                existing: m.region.start_addr().0,
                existing_size: m.region.len(),
            });
        }
        // A mapping past the end of the file would SIGBUS the daemon on first touch.
        let file_size = fd
            .metadata()
            .map_err(|e| MapError::Mmap {
                iova,
                reason: e.to_string(),
            })?
            .len();
        if offset.checked_add(size).is_none_or(|end| end > file_size) {
            return Err(MapError::BeyondFile {
                iova,
                offset,
                size,
                file_size,
            });
        }
        let file = self.share_file(fd)?;
        let mut prot = 0;
        if read {
            prot |= libc::PROT_READ;
        }
        if write {
            // The device's own reads (e.g. checksums) may touch a write-only mapping;
            // the permission check below is what enforces the client's intent.
            prot |= libc::PROT_WRITE | libc::PROT_READ;
        }
        // Huge pages are taken from a pool: without a reservation a page the pool cannot
        // give is a SIGBUS on first touch, so hugetlbfs files are mapped with one (the mmap
        // fails, and the map is refused, when the pool cannot cover it).
        let flags = if on_hugetlbfs(&file) {
            libc::MAP_SHARED
        } else {
            libc::MAP_SHARED | libc::MAP_NORESERVE
        };
        let mmap = MmapRegion::build(
            Some(FileOffset::from_arc(file, offset)),
            size as usize,
            prot,
            flags,
        )
        .map_err(|e| MapError::Mmap {
            iova,
            reason: e.to_string(),
        })?;
        let region = GuestRegionMmap::new(mmap, GuestAddress(iova))
            .ok_or(MapError::BadSize { iova, size })?;
        let at = self
            .maps
            .partition_point(|m| m.region.start_addr().0 < iova);
        self.maps.insert(
            at,
            Mapping {
                region: Arc::new(region),
                readable: read,
                writable: write,
            },
        );
        Ok(())
    }

    /// The descriptor to keep for a new mapping of `fd`'s file: one already held for the same
    /// file when there is one (the new descriptor is closed), so a client's descriptors cost
    /// the daemon one per file, not one per mapping.
    fn share_file(&self, fd: File) -> Result<Arc<File>, MapError> {
        let held = self.held_files();
        if let Some(id) = file_id(&fd) {
            if let Some(f) = held.iter().find(|f| file_id(f) == Some(id)) {
                return Ok(Arc::clone(f));
            }
        }
        if held.len() >= MAX_FILES {
            return Err(MapError::TooManyFiles(held.len()));
        }
        Ok(Arc::new(fd))
    }

    /// The distinct descriptors this space's mappings keep open.
    fn held_files(&self) -> Vec<&Arc<File>> {
        let mut files: Vec<&Arc<File>> = Vec::new();
        for m in &self.maps {
            if let Some(held) = m.region.file_offset().map(|f| f.arc()) {
                if !files.iter().any(|f| Arc::ptr_eq(f, held)) {
                    files.push(held);
                }
            }
        }
        files
    }

    /// The mappings across a daemon handover (`crate::handover`); each names the
    /// descriptor this space holds for its file.
    pub fn image(&self) -> Vec<MapImage> {
        self.maps
            .iter()
            .filter_map(|m| {
                let f = m.region.file_offset()?;
                Some(MapImage {
                    iova: m.region.start_addr().0,
                    size: m.region.len(),
                    offset: f.start(),
                    read: m.readable,
                    write: m.writable,
                    fd: f.file().as_raw_fd(),
                })
            })
            .collect()
    }

    /// Descriptors this space holds open.
    pub fn files(&self) -> usize {
        self.held_files().len()
    }

    /// Drop every mapping that intersects `[iova, iova + size)`. Returns the bytes unmapped,
    /// or `NotMapped` when nothing was there (which callers may treat as success: kernel
    /// VFIO does, and QEMU sweeps whole address spaces when a guest enables its IOMMU).
    pub fn unmap(&mut self, iova: u64, size: u64) -> Result<u64, MapError> {
        let end = iova.saturating_add(size);
        let before = self.mapped_bytes();
        self.maps.retain(|m| {
            let b = m.region.start_addr().0;
            !(iova < b + m.region.len() && b < end)
        });
        let dropped = before - self.mapped_bytes();
        if dropped == 0 {
            return Err(MapError::NotMapped { iova, size });
        }
        Ok(dropped)
    }

    /// The memory file behind `[iova, iova + len)` and the region's offset in it, if one
    /// read-write mapping of a file holds exactly that range's pages, from the file's start
    /// to its end: what a peer may map then is that region and nothing else.
    pub fn export(&self, iova: u64, len: u64) -> Option<(File, u64)> {
        let i = self
            .maps
            .partition_point(|m| m.region.start_addr().0 <= iova);
        let m = &self.maps[i.checked_sub(1)?];
        let f = m.region.file_offset()?;
        let whole = m.region.len();
        let file_len = f.file().metadata().ok()?.len();
        let exact = m.region.start_addr().0 == iova
            && len.div_ceil(4096) * 4096 == whole
            && f.start() == 0
            && file_len == whole;
        if !(exact && m.readable && m.writable) {
            return None;
        }
        // Sealed for good against resizing, so no holder of the descriptor (the peer it goes
        // to) can cut it under the owner and the device, nor seal it against their writes.
        let need = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
        // SAFETY: F_GET_SEALS on a descriptor this space holds open.
        let seals = unsafe { libc::fcntl(f.file().as_raw_fd(), libc::F_GET_SEALS) };
        if seals < 0 || seals & need != need {
            return None;
        }
        Some((f.file().try_clone().ok()?, 0))
    }

    /// Walk `[iova, iova + len)` mapping by mapping; every byte must be mapped with the
    /// permission asked for before `f` sees any piece.
    fn chunks(
        &self,
        iova: u64,
        len: usize,
        write: bool,
    ) -> Result<Vec<(&GuestRegionMmap, u64, usize, usize)>, DmaFault> {
        let fault = DmaFault {
            iova,
            len: len as u64,
            write,
        };
        let mut out = Vec::new();
        let mut done = 0usize;
        while done < len {
            let addr = iova.checked_add(done as u64).ok_or(fault)?;
            let i = self
                .maps
                .partition_point(|m| m.region.start_addr().0 <= addr);
            let m = i.checked_sub(1).map(|i| &self.maps[i]).ok_or(fault)?;
            let base = m.region.start_addr().0;
            let rel = addr - base;
            if rel >= m.region.len() || (write && !m.writable) || (!write && !m.readable) {
                return Err(fault);
            }
            let n = ((m.region.len() - rel) as usize).min(len - done);
            out.push((&*m.region, rel, done, n));
            done += n;
        }
        Ok(out)
    }

    pub fn read(&self, iova: u64, buf: &mut [u8]) -> Result<(), DmaFault> {
        let fault = DmaFault {
            iova,
            len: buf.len() as u64,
            write: false,
        };
        for (region, rel, at, n) in self.chunks(iova, buf.len(), false)? {
            region
                .read_slice(&mut buf[at..at + n], MemoryRegionAddress(rel))
                .map_err(|_| fault)?;
        }
        Ok(())
    }

    pub fn write(&self, iova: u64, buf: &[u8]) -> Result<(), DmaFault> {
        let fault = DmaFault {
            iova,
            len: buf.len() as u64,
            write: true,
        };
        for (region, rel, at, n) in self.chunks(iova, buf.len(), true)? {
            region
                .write_slice(&buf[at..at + n], MemoryRegionAddress(rel))
                .map_err(|_| fault)?;
        }
        Ok(())
    }

    /// The atomic word at `iova` in client memory (8-byte aligned, mapped writable), for
    /// read-modify-writes the client does concurrently with atomics of its own (the MQCW).
    pub fn atomic_u64(&self, iova: u64) -> Result<&std::sync::atomic::AtomicU64, DmaFault> {
        let fault = DmaFault {
            iova,
            len: 8,
            write: true,
        };
        let (region, rel, _, n) = *self.chunks(iova, 8, true)?.first().ok_or(fault)?;
        if n != 8 || !iova.is_multiple_of(8) {
            return Err(fault);
        }
        region
            .get_atomic_ref::<std::sync::atomic::AtomicU64>(rel as usize)
            .map_err(|_| fault)
    }

    /// Store a 32-bit word with release ordering: what was written before it is visible to a
    /// client that sees it (a completion's `seq`).
    pub fn store_u32_release(&self, iova: u64, v: u32) -> Result<(), DmaFault> {
        let fault = DmaFault {
            iova,
            len: 4,
            write: true,
        };
        let (region, rel, _, n) = *self.chunks(iova, 4, true)?.first().ok_or(fault)?;
        if n != 4 || !iova.is_multiple_of(4) {
            return Err(fault);
        }
        region
            .get_atomic_ref::<std::sync::atomic::AtomicU32>(rel as usize)
            .map_err(|_| fault)?
            .store(v, std::sync::atomic::Ordering::Release);
        Ok(())
    }

    /// Whether `[iova, iova + len)` is mapped with the access asked for.
    pub fn check(&self, iova: u64, len: u64, write: bool) -> Result<(), DmaFault> {
        let len = usize::try_from(len).map_err(|_| DmaFault { iova, len, write })?;
        self.chunks(iova, len, write).map(|_| ())
    }

    /// Copy `len` bytes from this space to `dst`'s, straight between the two clients'
    /// pages (the fabric's one copy).
    pub fn copy_to(
        &self,
        src: u64,
        dst: &DmaSpace,
        dst_iova: u64,
        len: usize,
    ) -> Result<(), DmaFault> {
        let from = self.chunks(src, len, false)?;
        let to = dst.chunks(dst_iova, len, true)?;
        let mut fi = from.into_iter().peekable();
        let mut done = 0;
        for (dregion, drel, _, dn) in to {
            let dslice = dregion
                .get_slice(MemoryRegionAddress(drel), dn)
                .map_err(|_| DmaFault {
                    iova: dst_iova,
                    len: len as u64,
                    write: true,
                })?;
            let mut filled = 0;
            while filled < dn {
                let (sregion, srel, sat, sn) = *fi.peek().expect("ranges have equal length");
                let skip = done + filled - sat;
                let n = (sn - skip).min(dn - filled);
                let sslice = sregion
                    .get_slice(MemoryRegionAddress(srel + skip as u64), n)
                    .map_err(|_| DmaFault {
                        iova: src,
                        len: len as u64,
                        write: false,
                    })?;
                sslice.copy_to_volatile_slice(dslice.offset(filled).map_err(|_| DmaFault {
                    iova: dst_iova,
                    len: len as u64,
                    write: true,
                })?);
                filled += n;
                if skip + n == sn {
                    fi.next();
                }
            }
            done += dn;
        }
        Ok(())
    }
}

/// A memfd of `size` bytes sealed against shrinking and growing: memory the device may map.
pub fn sealed_memfd(name: &std::ffi::CStr, size: u64) -> std::io::Result<File> {
    use nix::sys::memfd::{memfd_create, MemFdCreateFlag};
    let fd = memfd_create(
        name,
        MemFdCreateFlag::MFD_CLOEXEC | MemFdCreateFlag::MFD_ALLOW_SEALING,
    )?;
    let f = File::from(fd);
    f.set_len(size)?;
    // SAFETY: F_ADD_SEALS on a memfd we own; no memory is passed.
    if unsafe {
        libc::fcntl(
            f.as_raw_fd(),
            libc::F_ADD_SEALS,
            libc::F_SEAL_SHRINK | libc::F_SEAL_GROW,
        )
    } != 0
    {
        return Err(std::io::Error::last_os_error());
    }
    Ok(f)
}

/// A mapping of a file its owner can shrink is a SIGBUS waiting in the daemon (every NI
/// would die with it), so only files sealed against shrinking are mapped.
fn require_shrink_seal(fd: &File, iova: u64) -> Result<(), MapError> {
    // SAFETY: F_GET_SEALS only reads the seals of a file descriptor we own.
    let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
    if seals < 0 {
        let reason = format!(
            "not a memfd: F_GET_SEALS says {}",
            std::io::Error::last_os_error()
        );
        return Err(MapError::NotSealed { iova, reason });
    }
    if seals & libc::F_SEAL_SHRINK == 0 {
        let reason = format!("seals {seals:#x} lack F_SEAL_SHRINK");
        return Err(MapError::NotSealed { iova, reason });
    }
    Ok(())
}

fn on_hugetlbfs(f: &File) -> bool {
    const HUGETLBFS_MAGIC: i64 = 0x9584_58f6;
    // SAFETY: fstatfs fills the zeroed struct we pass; the descriptor is ours.
    unsafe {
        let mut st: libc::statfs = std::mem::zeroed();
        libc::fstatfs(f.as_raw_fd(), &mut st) == 0 && st.f_type as i64 == HUGETLBFS_MAGIC
    }
}

/// The identity of the file behind a descriptor.
fn file_id(f: &File) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    f.metadata().ok().map(|m| (m.dev(), m.ino()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn memfd(size: u64) -> File {
        sealed_memfd(c"t", size).unwrap()
    }

    fn unsealed(size: u64) -> File {
        let fd = nix::sys::memfd::memfd_create(
            c"t",
            nix::sys::memfd::MemFdCreateFlag::MFD_ALLOW_SEALING,
        )
        .unwrap();
        let f = File::from(fd);
        f.set_len(size).unwrap();
        f
    }

    #[test]
    fn shrinkable_files_are_refused() {
        let mut d = DmaSpace::new();
        let e = d
            .map(true, true, 0, 0, 0x1000, Some(unsealed(0x1000)))
            .unwrap_err();
        assert!(matches!(e, MapError::NotSealed { .. }), "{e}");
        assert!(e.to_string().contains("F_SEAL_SHRINK"));
        // A regular file cannot be sealed at all.
        let path = std::env::temp_dir().join(format!("ni-dma-test-{}", std::process::id()));
        let f = File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .unwrap();
        f.set_len(0x1000).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert!(matches!(
            d.map(true, true, 0, 0, 0x1000, Some(f)),
            Err(MapError::NotSealed { .. })
        ));
        assert!(d.is_empty());
    }

    #[test]
    fn mappings_of_one_file_share_one_descriptor_and_files_are_capped() {
        let mut d = DmaSpace::new();
        let f = memfd(0x100000);
        for i in 0..200u64 {
            d.map(
                true,
                true,
                0,
                i * 0x100000,
                0x1000,
                Some(f.try_clone().unwrap()),
            )
            .unwrap();
        }
        assert_eq!(d.files(), 1);
        for i in 1..MAX_FILES as u64 {
            d.map(
                true,
                true,
                0,
                (1000 + i) * 0x100000,
                0x1000,
                Some(memfd(0x1000)),
            )
            .unwrap();
        }
        assert_eq!(d.files(), MAX_FILES);
        assert!(matches!(
            d.map(true, true, 0, 0x7000_0000_0000, 0x1000, Some(memfd(0x1000))),
            Err(MapError::TooManyFiles(_))
        ));
        // One more mapping of a file already held is fine.
        d.map(
            true,
            true,
            0,
            0x7000_0000_0000,
            0x1000,
            Some(f.try_clone().unwrap()),
        )
        .unwrap();
        while d.len() < MAX_MAPPINGS {
            let at = 0x1_0000_0000_0000 + d.len() as u64 * 0x1000;
            d.map(true, true, 0, at, 0x1000, Some(f.try_clone().unwrap()))
                .unwrap();
        }
        assert!(matches!(
            d.map(
                true,
                true,
                0,
                0x2_0000_0000_0000,
                0x1000,
                Some(f.try_clone().unwrap())
            ),
            Err(MapError::TooMany(_))
        ));
    }

    #[test]
    fn map_read_write_and_bounds() {
        let mut d = DmaSpace::new();
        let f = memfd(0x4000);
        d.map(true, true, 0, 0x10000, 0x2000, Some(f.try_clone().unwrap()))
            .unwrap();
        d.map(
            true,
            true,
            0x2000,
            0x12000,
            0x2000,
            Some(f.try_clone().unwrap()),
        )
        .unwrap();
        // Spans both mappings.
        d.write(0x11ffe, &[1, 2, 3, 4]).unwrap();
        let mut b = [0u8; 4];
        d.read(0x11ffe, &mut b).unwrap();
        assert_eq!(b, [1, 2, 3, 4]);
        // One byte past the end: nothing written.
        let e = d.write(0x13ffe, &[9, 9, 9]).unwrap_err();
        assert_eq!(e.iova, 0x13ffe);
        assert!(d.read(0xFFFF, &mut b).is_err());
        assert!(d.read(u64::MAX - 1, &mut b).is_err());
    }

    #[test]
    fn read_only_mapping_refuses_device_writes() {
        let mut d = DmaSpace::new();
        let mut f = memfd(0x1000);
        f.write_all(b"hello").unwrap();
        d.map(true, false, 0, 0, 0x1000, Some(f)).unwrap();
        let mut b = [0u8; 5];
        d.read(0, &mut b).unwrap();
        assert_eq!(&b, b"hello");
        assert!(d.write(0, b"x").is_err());
    }

    #[test]
    fn refuses_overlap_no_fd_beyond_file_and_drops_intersecting_on_unmap() {
        let mut d = DmaSpace::new();
        assert_eq!(d.map(true, true, 0, 0, 0x1000, None), Err(MapError::NoFd));
        let f = memfd(0x1000);
        assert!(matches!(
            d.map(true, true, 0, 0, 0x2000, Some(f.try_clone().unwrap())),
            Err(MapError::BeyondFile { .. })
        ));
        for i in 0..300u64 {
            d.map(
                true,
                true,
                0,
                i * 0x1000,
                0x1000,
                Some(f.try_clone().unwrap()),
            )
            .unwrap();
        }
        assert!(matches!(
            d.map(true, true, 0, 0x5000, 0x1000, Some(f.try_clone().unwrap())),
            Err(MapError::Overlap { .. })
        ));
        // A range covering 10 whole pages and half of two more drops all 12.
        assert_eq!(d.unmap(0x10800, 0xB000).unwrap(), 12 * 0x1000);
        assert_eq!(d.len(), 288);
        assert!(matches!(
            d.unmap(0x10000, 0x1000),
            Err(MapError::NotMapped { .. })
        ));
        assert_eq!(d.unmap(0, u64::MAX).unwrap(), 288 * 0x1000);
        assert!(d.is_empty());
    }

    #[test]
    fn copy_between_spaces_across_mapping_boundaries() {
        let (mut a, mut b) = (DmaSpace::new(), DmaSpace::new());
        let fa = memfd(0x3000);
        let fb = memfd(0x3000);
        for i in 0..3u64 {
            a.map(
                true,
                true,
                i * 0x1000,
                0x100000 + i * 0x1000,
                0x1000,
                Some(fa.try_clone().unwrap()),
            )
            .unwrap();
        }
        b.map(
            true,
            true,
            0,
            0x900000,
            0x1000,
            Some(fb.try_clone().unwrap()),
        )
        .unwrap();
        b.map(
            true,
            true,
            0x1000,
            0x901000,
            0x2000,
            Some(fb.try_clone().unwrap()),
        )
        .unwrap();
        let data: Vec<u8> = (0..0x2800u32).map(|i| (i * 7) as u8).collect();
        a.write(0x100100, &data).unwrap();
        a.copy_to(0x100100, &b, 0x900400, data.len()).unwrap();
        let mut back = vec![0u8; data.len()];
        b.read(0x900400, &mut back).unwrap();
        assert_eq!(back, data);
        assert!(a.copy_to(0x100100, &b, 0x901000, 0x2800).is_err());
    }
}
