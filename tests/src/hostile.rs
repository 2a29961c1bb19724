//! Tools for the adversarial tests (issue 18, `tests/tests/hostile.rs`): a raw vfio-user client
//! that sends whatever it is told to (and reads error replies, which the `vfio_user` crate's
//! client cannot), a raw fast-path client that never consumes its completions, sealed and
//! unsealed memfds, and the daemon's resources as `/proc` shows them.

use std::fs::File;
use std::io::{IoSlice, IoSliceMut, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::{fence, AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::sys::socket::{recvmsg, sendmsg, ControlMessage, ControlMessageOwned, MsgFlags};

use ni_abi::fastpath::{ctrl, op, regs as fp, Request, ENTRY_SIZE, SQ_ENTRIES, SQ_OFFSET};
use ni_abi::{lanai, pci};

/// vfio-user command numbers.
pub mod cmd {
    pub const VERSION: u16 = 1;
    pub const DMA_MAP: u16 = 2;
    pub const DMA_UNMAP: u16 = 3;
    pub const DEVICE_GET_INFO: u16 = 4;
    pub const DEVICE_GET_REGION_INFO: u16 = 5;
    pub const GET_IRQ_INFO: u16 = 7;
    pub const SET_IRQS: u16 = 8;
    pub const REGION_READ: u16 = 9;
    pub const REGION_WRITE: u16 = 10;
    pub const DEVICE_RESET: u16 = 13;
}

/// vfio-user header flag: the reply reports an error.
pub const FLAG_ERROR: u32 = 1 << 5;
pub const HEADER: usize = 16;

/// `VFIO_IRQ_SET_*` flags.
pub mod irq {
    pub const DATA_NONE: u32 = 1 << 0;
    pub const DATA_EVENTFD: u32 = 1 << 2;
    pub const ACTION_TRIGGER: u32 = 1 << 5;
}

/// A 16-byte vfio-user header.
pub fn header(id: u16, command: u16, size: u32, flags: u32) -> [u8; HEADER] {
    let mut h = [0u8; HEADER];
    h[0..2].copy_from_slice(&id.to_le_bytes());
    h[2..4].copy_from_slice(&command.to_le_bytes());
    h[4..8].copy_from_slice(&size.to_le_bytes());
    h[8..12].copy_from_slice(&flags.to_le_bytes());
    h
}

pub struct Reply {
    pub flags: u32,
    pub errno: u32,
    pub body: Vec<u8>,
    pub fds: Vec<File>,
}

impl Reply {
    pub fn is_error(&self) -> bool {
        self.flags & FLAG_ERROR != 0
    }

    fn ok(self, what: &str) -> std::io::Result<Reply> {
        if self.is_error() {
            Err(std::io::Error::other(format!(
                "the device refused {what} (errno {})",
                self.errno
            )))
        } else {
            Ok(self)
        }
    }
}

/// A vfio-user client speaking the protocol byte by byte, with a read timeout so a frozen
/// daemon shows up as an error rather than a hung test.
pub struct Raw {
    pub s: UnixStream,
    id: u16,
}

impl Raw {
    /// Connect without negotiating anything.
    pub fn connect_bare(path: &Path) -> std::io::Result<Raw> {
        let s = UnixStream::connect(path)?;
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
        s.set_write_timeout(Some(Duration::from_secs(5)))?;
        Ok(Raw { s, id: 0 })
    }

    /// Connect and negotiate the version, as every client must first.
    pub fn connect(path: &Path) -> std::io::Result<Raw> {
        let mut r = Raw::connect_bare(path)?;
        let caps = br#"{"capabilities":{"max_msg_fds":16,"max_data_xfer_size":1048576}}"#;
        let mut p = Vec::new();
        p.extend_from_slice(&0u16.to_le_bytes());
        p.extend_from_slice(&1u16.to_le_bytes());
        p.extend_from_slice(caps);
        p.push(0);
        r.call(cmd::VERSION, &p, &[])?.ok("VERSION")?;
        Ok(r)
    }

    /// Send one command (header + payload, `fds` riding on it) and read its reply.
    pub fn call(&mut self, command: u16, payload: &[u8], fds: &[RawFd]) -> std::io::Result<Reply> {
        self.id = self.id.wrapping_add(1);
        let h = header(self.id, command, (HEADER + payload.len()) as u32, 0);
        let iov = [IoSlice::new(&h), IoSlice::new(payload)];
        let cmsg = [ControlMessage::ScmRights(fds)];
        let total = HEADER + payload.len();
        let sent = sendmsg::<()>(
            self.s.as_raw_fd(),
            &iov,
            if fds.is_empty() { &[] } else { &cmsg },
            MsgFlags::MSG_NOSIGNAL,
            None,
        )
        .map_err(std::io::Error::from)?;
        if sent < total {
            let mut all = h.to_vec();
            all.extend_from_slice(payload);
            self.s.write_all(&all[sent..])?;
        }
        self.read_reply()
    }

    /// Read one reply: header (with any descriptors riding on it), then its body.
    pub fn read_reply(&mut self) -> std::io::Result<Reply> {
        let mut rh = [0u8; HEADER];
        let mut fds = Vec::new();
        let mut got = 0;
        while got < HEADER {
            let mut cbuf = nix::cmsg_space!([RawFd; 4]);
            let mut iov = [IoSliceMut::new(&mut rh[got..])];
            let msg = recvmsg::<()>(
                self.s.as_raw_fd(),
                &mut iov,
                Some(&mut cbuf),
                MsgFlags::empty(),
            )
            .map_err(std::io::Error::from)?;
            if msg.bytes == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            got += msg.bytes;
            for c in msg.cmsgs().map_err(std::io::Error::from)? {
                if let ControlMessageOwned::ScmRights(v) = c {
                    // SAFETY: the kernel just installed these descriptors in this process.
                    fds.extend(v.into_iter().map(|fd| unsafe { File::from_raw_fd(fd) }));
                }
            }
        }
        let size = u32::from_le_bytes(rh[4..8].try_into().unwrap()) as usize;
        if !(HEADER..=HEADER + (16 << 20)).contains(&size) {
            return Err(std::io::Error::other(format!("reply of {size} bytes")));
        }
        let mut body = vec![0u8; size - HEADER];
        self.s.read_exact(&mut body)?;
        Ok(Reply {
            flags: u32::from_le_bytes(rh[8..12].try_into().unwrap()),
            errno: u32::from_le_bytes(rh[12..16].try_into().unwrap()),
            body,
            fds,
        })
    }

    pub fn region_read(
        &mut self,
        region: u32,
        offset: u64,
        len: usize,
    ) -> std::io::Result<Vec<u8>> {
        let mut p = Vec::new();
        p.extend_from_slice(&offset.to_le_bytes());
        p.extend_from_slice(&region.to_le_bytes());
        p.extend_from_slice(&(len as u32).to_le_bytes());
        let r = self.call(cmd::REGION_READ, &p, &[])?.ok("REGION_READ")?;
        if r.body.len() != 16 + len {
            return Err(std::io::Error::other("short region read"));
        }
        Ok(r.body[16..].to_vec())
    }

    pub fn region_write(&mut self, region: u32, offset: u64, data: &[u8]) -> std::io::Result<()> {
        let mut p = Vec::new();
        p.extend_from_slice(&offset.to_le_bytes());
        p.extend_from_slice(&region.to_le_bytes());
        p.extend_from_slice(&(data.len() as u32).to_le_bytes());
        p.extend_from_slice(data);
        self.call(cmd::REGION_WRITE, &p, &[])?
            .ok("REGION_WRITE")
            .map(|_| ())
    }

    /// `DEVICE_GET_REGION_INFO`: (size, mmap offset, the region's descriptor if it has one).
    pub fn region_info(&mut self, index: u32) -> std::io::Result<(u64, u64, Option<File>)> {
        let mut p = Vec::new();
        p.extend_from_slice(&(32u32 + 256).to_le_bytes()); // argsz: room for capabilities
        p.extend_from_slice(&0u32.to_le_bytes());
        p.extend_from_slice(&index.to_le_bytes());
        p.extend_from_slice(&[0; 20]);
        let mut r = self
            .call(cmd::DEVICE_GET_REGION_INFO, &p, &[])?
            .ok("REGION_INFO")?;
        if r.body.len() < 32 {
            return Err(std::io::Error::other("short region info"));
        }
        let u64_at = |o: usize| u64::from_le_bytes(r.body[o..o + 8].try_into().unwrap());
        Ok((u64_at(16), u64_at(24), r.fds.pop()))
    }

    /// `DMA_MAP` of `size` bytes of `fd` at `offset` to `iova`, read and write. The reply is
    /// returned as it came (error or not).
    pub fn dma_map(
        &mut self,
        fd: Option<RawFd>,
        offset: u64,
        iova: u64,
        size: u64,
    ) -> std::io::Result<Reply> {
        let mut p = Vec::new();
        p.extend_from_slice(&32u32.to_le_bytes());
        p.extend_from_slice(&3u32.to_le_bytes());
        p.extend_from_slice(&offset.to_le_bytes());
        p.extend_from_slice(&iova.to_le_bytes());
        p.extend_from_slice(&size.to_le_bytes());
        match fd {
            Some(fd) => self.call(cmd::DMA_MAP, &p, &[fd]),
            None => self.call(cmd::DMA_MAP, &p, &[]),
        }
    }

    pub fn dma_unmap(&mut self, iova: u64, size: u64) -> std::io::Result<Reply> {
        let mut p = Vec::new();
        p.extend_from_slice(&24u32.to_le_bytes());
        p.extend_from_slice(&0u32.to_le_bytes());
        p.extend_from_slice(&iova.to_le_bytes());
        p.extend_from_slice(&size.to_le_bytes());
        self.call(cmd::DMA_UNMAP, &p, &[])
    }

    pub fn set_irqs(
        &mut self,
        index: u32,
        flags: u32,
        start: u32,
        count: u32,
        fds: &[RawFd],
    ) -> std::io::Result<Reply> {
        let mut p = Vec::new();
        p.extend_from_slice(&20u32.to_le_bytes());
        p.extend_from_slice(&flags.to_le_bytes());
        p.extend_from_slice(&index.to_le_bytes());
        p.extend_from_slice(&start.to_le_bytes());
        p.extend_from_slice(&count.to_le_bytes());
        self.call(cmd::SET_IRQS, &p, fds)
    }

    pub fn cfg_read16(&mut self, off: u64) -> std::io::Result<u16> {
        let b = self.region_read(pci::CONFIG_REGION, off, 2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    pub fn cfg_write16(&mut self, off: u64, v: u16) -> std::io::Result<()> {
        self.region_write(pci::CONFIG_REGION, off, &v.to_le_bytes())
    }

    pub fn cfg_write32(&mut self, off: u64, v: u32) -> std::io::Result<()> {
        self.region_write(pci::CONFIG_REGION, off, &v.to_le_bytes())
    }

    /// Memory Space and Bus Master Enable, as a driver does first.
    pub fn enable(&mut self) -> std::io::Result<()> {
        let c = self.cfg_read16(4)?;
        self.cfg_write16(4, c | 0x6)
    }

    /// MSI-X on, every vector unmasked in the table.
    pub fn enable_msix(&mut self) -> std::io::Result<()> {
        let off = pci::CAP_MSIX as u64 + 2;
        let c = self.cfg_read16(off)?;
        self.cfg_write16(off, c | 0x8000)?;
        for v in 0..pci::vector::COUNT as u64 {
            self.region_write(
                pci::BAR4_REGION,
                pci::MSIX_TABLE_OFFSET + v * pci::MSIX_ENTRY_SIZE + 12,
                &0u32.to_le_bytes(),
            )?;
        }
        Ok(())
    }

    /// A Lanai special register (big-endian) over BAR0.
    pub fn special_read(&mut self, off: u32, width: usize) -> std::io::Result<u64> {
        let b = self.region_read(pci::BAR0_REGION, lanai::SPECIALS + off as u64, width)?;
        Ok(b.iter().fold(0u64, |a, &x| (a << 8) | x as u64))
    }

    pub fn special_write(&mut self, off: u32, width: usize, v: u64) -> std::io::Result<()> {
        let b: Vec<u8> = (0..width).rev().map(|i| (v >> (8 * i)) as u8).collect();
        self.region_write(pci::BAR0_REGION, lanai::SPECIALS + off as u64, &b)
    }

    /// A CM-5 register (32-bit little-endian) over BAR2; `sup`: the supervisor window.
    pub fn cm5_write(&mut self, sup: bool, off: u32, v: u32) -> std::io::Result<()> {
        let base = if sup { ni_abi::cm5::SUPERVISOR } else { 0 };
        self.region_write(pci::BAR2_REGION, base + off as u64, &v.to_le_bytes())
    }
}

/// A Lanai DRD (24 bytes, big-endian) as it sits in SRAM.
pub fn drd(flags_len: u32, host: u64, lanai_addr: u32, next: u32) -> [u8; 24] {
    let mut d = [0u8; 24];
    d[0..4].copy_from_slice(&flags_len.to_be_bytes());
    d[4..8].copy_from_slice(&(host as u32).to_be_bytes());
    d[8..12].copy_from_slice(&lanai_addr.to_be_bytes());
    d[12..16].copy_from_slice(&((host >> 32) as u32).to_be_bytes());
    d[16..20].copy_from_slice(&next.to_be_bytes());
    d
}

/// A memfd of `size` bytes that allows sealing, with `seals` added (0: none).
pub fn memfd(size: u64, seals: libc::c_int) -> File {
    // SAFETY: memfd_create with a NUL-terminated name; the result is checked.
    let fd = unsafe {
        libc::memfd_create(
            c"ni-hostile".as_ptr(),
            libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
        )
    };
    assert!(fd >= 0, "memfd_create: {}", std::io::Error::last_os_error());
    // SAFETY: fd is a fresh descriptor owned from here on.
    let f = unsafe { File::from_raw_fd(fd) };
    f.set_len(size).unwrap();
    if seals != 0 {
        // SAFETY: F_ADD_SEALS on a memfd we own; no memory is passed.
        let r = unsafe { libc::fcntl(fd, libc::F_ADD_SEALS, seals) };
        assert_eq!(r, 0, "F_ADD_SEALS: {}", std::io::Error::last_os_error());
    }
    f
}

/// Client memory the device will map: sealed against shrinking and growing.
pub fn sealed_memfd(size: u64) -> File {
    memfd(size, libc::F_SEAL_SHRINK | libc::F_SEAL_GROW)
}

/// A shared mapping of a file, unmapped on drop.
pub struct Map {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain shared memory owned by this value; every access goes through
// bounds-checked raw copies or atomics, never through references that alias mutably.
unsafe impl Send for Map {}
// SAFETY: as above.
unsafe impl Sync for Map {}

impl Map {
    pub fn new(f: &File, offset: u64, len: usize) -> std::io::Result<Map> {
        // SAFETY: a fresh shared mapping of a descriptor we hold; the result is checked.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                offset as libc::off_t,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Map {
            ptr: ptr as *mut u8,
            len,
        })
    }

    pub fn u32_at(&self, off: u64) -> &AtomicU32 {
        assert!(off.is_multiple_of(4) && off as usize + 4 <= self.len);
        // SAFETY: inside the mapping (checked), 4-aligned; the mapping lives as long as
        // `self`, and the other side only accesses these words atomically too.
        unsafe { &*(self.ptr.add(off as usize) as *const AtomicU32) }
    }

    pub fn write(&self, off: usize, data: &[u8]) {
        assert!(off.checked_add(data.len()).is_some_and(|e| e <= self.len));
        // SAFETY: bounds checked above; the mapping lives as long as `self`.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.add(off), data.len()) }
    }

    pub fn read(&self, off: usize, out: &mut [u8]) {
        assert!(off.checked_add(out.len()).is_some_and(|e| e <= self.len));
        // SAFETY: bounds checked above; the mapping lives as long as `self`.
        unsafe { std::ptr::copy_nonoverlapping(self.ptr.add(off), out.as_mut_ptr(), out.len()) }
    }
}

impl Drop for Map {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the mapping this value created.
        unsafe {
            libc::munmap(self.ptr as *mut libc::c_void, self.len);
        }
    }
}

/// A fast-path client with no manners: it maps SRAM, publishes requests itself, and
/// consumes completions only when told to.
pub struct FastPath {
    pub raw: Raw,
    pub sram: Map,
    pub sq_tail: u32,
    /// The completion ring: its file, the local mapping, IOVA and entries.
    pub cq: Option<(File, Map, u64, u32)>,
}

impl FastPath {
    /// Connect, enable the function, map SRAM and wait for the control page.
    pub fn attach(path: &Path) -> std::io::Result<FastPath> {
        let mut raw = Raw::connect(path)?;
        raw.enable()?;
        let (_, offset, fd) = raw.region_info(pci::BAR0_REGION)?;
        let fd = fd.ok_or_else(|| std::io::Error::other("BAR0 has no SRAM descriptor"))?;
        let sram = Map::new(&fd, offset, lanai::SRAM_SIZE as usize)?;
        let t = Instant::now();
        while sram.u32_at(ctrl::MAGIC).load(Ordering::Acquire) != ctrl::MAGIC_VALUE {
            if t.elapsed() > Duration::from_secs(10) {
                return Err(std::io::Error::other("no control page"));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(FastPath {
            raw,
            sram,
            sq_tail: 0,
            cq: None,
        })
    }

    pub fn ctl(&self, off: u64) -> &AtomicU32 {
        self.sram.u32_at(off)
    }

    /// Free submission slots as the device last reported.
    pub fn sq_free(&self) -> u32 {
        let head = self.ctl(ctrl::SQ_HEAD).load(Ordering::Acquire);
        SQ_ENTRIES - self.sq_tail.wrapping_sub(head).min(SQ_ENTRIES)
    }

    /// Write a request into the next slot without publishing it.
    pub fn put(&mut self, r: &Request) {
        let at = SQ_OFFSET + (self.sq_tail % SQ_ENTRIES) as u64 * ENTRY_SIZE;
        self.sram.write(at as usize, &r.encode());
        self.sq_tail = self.sq_tail.wrapping_add(1);
    }

    /// Publish everything written so far (SQ_TAIL), ringing the doorbell if the poller sleeps.
    pub fn publish(&mut self) -> std::io::Result<()> {
        self.ctl(ctrl::SQ_TAIL)
            .store(self.sq_tail, Ordering::Release);
        fence(Ordering::SeqCst);
        if self.ctl(ctrl::DEV_SLEEPING).load(Ordering::Acquire) != 0 {
            self.raw.region_write(
                pci::BAR0_REGION,
                fp::PAGE + fp::DOORBELL,
                &1u32.to_le_bytes(),
            )?;
        }
        Ok(())
    }

    /// Map a completion ring of `entries` and set it up (CQ_SETUP is the first request).
    pub fn setup_cq(&mut self, iova: u64, entries: u32) -> std::io::Result<()> {
        let size = (entries as u64 * ENTRY_SIZE).div_ceil(4096) * 4096;
        let f = sealed_memfd(size);
        self.raw
            .dma_map(Some(f.as_raw_fd()), 0, iova, size)?
            .ok("DMA_MAP of the completion ring")?;
        let m = Map::new(&f, 0, size as usize)?;
        self.put(&Request {
            opcode: op::CQ_SETUP,
            addr: iova,
            len: entries as u64,
            ..Default::default()
        });
        self.publish()?;
        self.cq = Some((f, m, iova, entries));
        Ok(())
    }

    /// Completions the device has written past `consumed` (by the `seq` words).
    pub fn cq_written(&self, consumed: u32) -> u32 {
        let Some((_, m, _, entries)) = &self.cq else {
            return 0;
        };
        let mut n = consumed;
        loop {
            let at = (n % entries) as u64 * ENTRY_SIZE + ni_abi::fastpath::COMPLETION_SEQ;
            if m.u32_at(at).load(Ordering::Acquire) != n.wrapping_add(1) {
                return n.wrapping_sub(consumed);
            }
            n = n.wrapping_add(1);
            if n.wrapping_sub(consumed) >= *entries {
                return *entries;
            }
        }
    }
}

/// What the kernel says a process holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub rss_kib: u64,
    pub fds: u64,
    pub threads: u64,
}

impl Usage {
    pub fn max(self, o: Usage) -> Usage {
        Usage {
            rss_kib: self.rss_kib.max(o.rss_kib),
            fds: self.fds.max(o.fds),
            threads: self.threads.max(o.threads),
        }
    }
}

impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "RSS {} KiB, {} fds, {} threads",
            self.rss_kib, self.fds, self.threads
        )
    }
}

/// Anonymous resident memory (`RssAnon`: the daemon's own heap and stacks, not the clients'
/// shared pages it maps for DMA, which count in `VmRSS` as `RssShmem`), open descriptors and
/// threads of process `pid`; `None` once it is gone.
pub fn usage(pid: u32) -> Option<Usage> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss_kib = status
        .lines()
        .find_map(|l| l.strip_prefix("RssAnon:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())?;
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64;
    let threads = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?.count() as u64;
    Some(Usage {
        rss_kib,
        fds,
        threads,
    })
}

/// Samples a process's usage every few milliseconds in the background, keeping the peak.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Usage>,
}

impl Sampler {
    pub fn start(pid: u32) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut peak = Usage::default();
            while !s.load(Ordering::Relaxed) {
                if let Some(u) = usage(pid) {
                    peak = peak.max(u);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            peak
        });
        Sampler { stop, thread }
    }

    /// Stop sampling; the peak seen.
    pub fn stop(self) -> Usage {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}
