//! A small vfio-user client: the messages libni needs to drive an NI from a host process.
//!
//! The `vfio_user` crate's client cannot read the server's error replies (it waits for a
//! reply body the server never sends), and libni must report those, so it speaks the
//! protocol itself: version negotiation, region info (with the SRAM file descriptor), region
//! reads and writes, DMA map/unmap with file descriptors, SET_IRQS with eventfds.

use std::fs::File;
use std::io::{IoSlice, IoSliceMut, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::Path;

use nix::sys::socket::{recvmsg, sendmsg, ControlMessage, ControlMessageOwned, MsgFlags};

use crate::mem::Mem;

/// `VFIO_REGION_INFO_FLAG_WRITE`.
const REGION_FLAG_WRITE: u32 = 1 << 1;
use crate::transport::Transport;
use crate::Error;

use ni_abi::vfio_user::command::{
    DEVICE_GET_INFO, DEVICE_GET_REGION_INFO, DEVICE_SET_IRQS as SET_IRQS, DMA_MAP, DMA_UNMAP,
    REGION_READ, REGION_WRITE, VERSION,
};
use ni_abi::vfio_user::flags::ERROR as FLAG_ERROR;
use ni_abi::vfio_user::HEADER;

/// How long a new client waits for the daemon's first answer before calling the NI busy.
const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

pub struct Device {
    stream: UnixStream,
    id: u16,
    /// Regions the device offers (`DEVICE_GET_INFO`): more than the PCI ones when its
    /// partition has an isolated window.
    num_regions: u32,
}

/// What `DEVICE_GET_REGION_INFO` says about a region.
pub struct RegionInfo {
    pub size: u64,
    /// Offset to mmap the region's file descriptor at.
    pub offset: u64,
    pub fd: Option<File>,
    pub flags: u32,
}

impl Device {
    pub fn connect(path: &Path) -> Result<Device, Error> {
        let stream = UnixStream::connect(path).map_err(|e| Error::Attach {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        let mut d = Device {
            stream,
            id: 0,
            num_regions: 0,
        };
        let caps = br#"{"capabilities":{"max_msg_fds":16,"max_data_xfer_size":1048576}}"#;
        let mut p = Vec::new();
        p.extend_from_slice(&0u16.to_le_bytes());
        p.extend_from_slice(&1u16.to_le_bytes());
        p.extend_from_slice(caps);
        p.push(0);
        // The daemon serves one client per NI at a time and queues the next connection: a
        // handshake with no answer means another process holds this NI.
        let _ = d.stream.set_read_timeout(Some(HANDSHAKE_TIMEOUT));
        let t = std::time::Instant::now();
        if let Err(e) = d.call(VERSION, &p, &[]) {
            return Err(if t.elapsed() >= HANDSHAKE_TIMEOUT {
                Error::Busy(path.display().to_string())
            } else {
                e
            });
        }
        let _ = d.stream.set_read_timeout(None);
        let (_, flags, num_regions, _) = {
            let mut q = Vec::new();
            q.extend_from_slice(&16u32.to_le_bytes());
            q.extend_from_slice(&[0; 12]);
            let (body, _) = d.call(DEVICE_GET_INFO, &q, &[])?;
            let u = |o: usize| u32::from_le_bytes(body[o..o + 4].try_into().unwrap());
            (u(0), u(4), u(8), u(12))
        };
        const VFIO_DEVICE_FLAGS_PCI: u32 = 1 << 1;
        if flags & VFIO_DEVICE_FLAGS_PCI == 0 {
            return Err(Error::Attach {
                path: path.display().to_string(),
                reason: "the server is not a PCI device".into(),
            });
        }
        d.num_regions = num_regions;
        Ok(d)
    }

    fn io_err(&self, command: u16, e: impl std::fmt::Display) -> Error {
        Error::Device(format!("vfio-user command {command}: {e}"))
    }

    /// Send one command and read its reply body (after the header) and any fds.
    fn call(
        &mut self,
        command: u16,
        payload: &[u8],
        fds: &[RawFd],
    ) -> Result<(Vec<u8>, Vec<File>), Error> {
        self.id = self.id.wrapping_add(1);
        let mut h = [0u8; HEADER];
        h[0..2].copy_from_slice(&self.id.to_le_bytes());
        h[2..4].copy_from_slice(&command.to_le_bytes());
        h[4..8].copy_from_slice(&((HEADER + payload.len()) as u32).to_le_bytes());
        let iov = [IoSlice::new(&h), IoSlice::new(payload)];
        let cmsg = [ControlMessage::ScmRights(fds)];
        let total = HEADER + payload.len();
        let sent = sendmsg::<()>(
            self.stream.as_raw_fd(),
            &iov,
            if fds.is_empty() { &[] } else { &cmsg },
            MsgFlags::MSG_NOSIGNAL,
            None,
        )
        .map_err(|e| self.io_err(command, e))?;
        if sent < total {
            let mut all = h.to_vec();
            all.extend_from_slice(payload);
            self.stream
                .write_all(&all[sent..])
                .map_err(|e| self.io_err(command, e))?;
        }
        // Reply header, with any file descriptors riding on it.
        let mut rh = [0u8; HEADER];
        let mut files = Vec::new();
        let mut got = 0;
        while got < HEADER {
            let mut cbuf = nix::cmsg_space!([RawFd; 4]);
            let mut iov = [IoSliceMut::new(&mut rh[got..])];
            let msg = recvmsg::<()>(
                self.stream.as_raw_fd(),
                &mut iov,
                Some(&mut cbuf),
                MsgFlags::empty(),
            )
            .map_err(|e| self.io_err(command, e))?;
            if msg.bytes == 0 {
                return Err(Error::Device("the device closed the connection".into()));
            }
            got += msg.bytes;
            for c in msg.cmsgs().map_err(|e| self.io_err(command, e))? {
                if let ControlMessageOwned::ScmRights(fds) = c {
                    // SAFETY: the kernel just installed these descriptors for us.
                    files.extend(fds.into_iter().map(|fd| unsafe { File::from_raw_fd(fd) }));
                }
            }
        }
        let size = u32::from_le_bytes(rh[4..8].try_into().unwrap()) as usize;
        let flags = u32::from_le_bytes(rh[8..12].try_into().unwrap());
        let errno = u32::from_le_bytes(rh[12..16].try_into().unwrap());
        if !(HEADER..=HEADER + (64 << 20)).contains(&size) {
            return Err(self.io_err(command, format!("reply of {size} bytes")));
        }
        let mut body = vec![0u8; size - HEADER];
        self.stream
            .read_exact(&mut body)
            .map_err(|e| self.io_err(command, e))?;
        if flags & FLAG_ERROR != 0 {
            return Err(Error::Device(format!(
                "the device refused vfio-user command {command} (errno {errno}); its log says why"
            )));
        }
        Ok((body, files))
    }

    /// An isolated window (`ni_abi::window::Kind::Isolated`): the device page and every
    /// member's zone, each from its own region, at their window offsets — writable where the
    /// device says so (this NI's own zone), read-only elsewhere.
    fn map_isolated_window(&mut self) -> Result<Mem, Error> {
        use ni_abi::window as w;
        let part = |d: &mut Device, index: u32, at: u64, len: u64| {
            let info = d.region_info(index)?;
            if info.size == 0 {
                return Ok(None);
            }
            match info.fd {
                Some(fd) if info.size == len => Ok(Some(crate::mem::Part {
                    fd,
                    file_offset: info.offset,
                    at,
                    len,
                    writable: info.flags & REGION_FLAG_WRITE != 0,
                })),
                _ => Err(Error::Device(format!(
                    "window region {index}: {:#x} bytes{}, expected {len:#x} mappable",
                    info.size,
                    if info.fd.is_none() {
                        ", no descriptor"
                    } else {
                        ""
                    }
                ))),
            }
        };
        let mut parts = Vec::new();
        parts.extend(part(
            self,
            w::DEVICE_REGION,
            w::DEVICE_PAGE,
            w::DEVICE_PAGE_SIZE,
        )?);
        for r in 0..w::MAX_RANKS {
            parts.extend(part(self, w::zone_region(r), w::zone(r), w::ZONE_SIZE)?);
        }
        Mem::compose(w::WINDOW_SIZE as usize, parts)
    }

    fn region_info(&mut self, index: u32) -> Result<RegionInfo, Error> {
        let mut p = Vec::new();
        p.extend_from_slice(&(32u32 + 256).to_le_bytes()); // argsz: room for capabilities
        p.extend_from_slice(&0u32.to_le_bytes());
        p.extend_from_slice(&index.to_le_bytes());
        p.extend_from_slice(&[0; 20]);
        let (body, mut fds) = self.call(DEVICE_GET_REGION_INFO, &p, &[])?;
        if body.len() < 32 {
            return Err(Error::Device("short region info".into()));
        }
        let u64_at = |o: usize| u64::from_le_bytes(body[o..o + 8].try_into().unwrap());
        Ok(RegionInfo {
            size: u64_at(16),
            offset: u64_at(24),
            fd: fds.pop(),
            flags: u32::from_le_bytes(body[4..8].try_into().unwrap()),
        })
    }

    fn read(&mut self, region: u32, offset: u64, data: &mut [u8]) -> Result<(), Error> {
        let mut p = Vec::new();
        p.extend_from_slice(&offset.to_le_bytes());
        p.extend_from_slice(&region.to_le_bytes());
        p.extend_from_slice(&(data.len() as u32).to_le_bytes());
        let (body, _) = self.call(REGION_READ, &p, &[])?;
        if body.len() != 16 + data.len() {
            return Err(Error::Device("short region read".into()));
        }
        data.copy_from_slice(&body[16..]);
        Ok(())
    }

    fn write(&mut self, region: u32, offset: u64, data: &[u8]) -> Result<(), Error> {
        let mut p = Vec::new();
        p.extend_from_slice(&offset.to_le_bytes());
        p.extend_from_slice(&region.to_le_bytes());
        p.extend_from_slice(&(data.len() as u32).to_le_bytes());
        p.extend_from_slice(data);
        self.call(REGION_WRITE, &p, &[]).map(|_| ())
    }

    fn map(&mut self, fd: RawFd, offset: u64, iova: u64, size: u64) -> Result<(), Error> {
        let mut p = Vec::new();
        p.extend_from_slice(&32u32.to_le_bytes());
        p.extend_from_slice(&3u32.to_le_bytes()); // read | write
        p.extend_from_slice(&offset.to_le_bytes());
        p.extend_from_slice(&iova.to_le_bytes());
        p.extend_from_slice(&size.to_le_bytes());
        self.call(DMA_MAP, &p, &[fd]).map(|_| ())
    }

    fn unmap(&mut self, iova: u64, size: u64) -> Result<(), Error> {
        let mut p = Vec::new();
        p.extend_from_slice(&24u32.to_le_bytes());
        p.extend_from_slice(&0u32.to_le_bytes());
        p.extend_from_slice(&iova.to_le_bytes());
        p.extend_from_slice(&size.to_le_bytes());
        self.call(DMA_UNMAP, &p, &[]).map(|_| ())
    }

    pub fn set_irqs(
        &mut self,
        index: u32,
        flags: u32,
        start: u32,
        count: u32,
        fds: &[RawFd],
    ) -> Result<(), Error> {
        let mut p = Vec::new();
        p.extend_from_slice(&20u32.to_le_bytes());
        p.extend_from_slice(&flags.to_le_bytes());
        p.extend_from_slice(&index.to_le_bytes());
        p.extend_from_slice(&start.to_le_bytes());
        p.extend_from_slice(&count.to_le_bytes());
        self.call(SET_IRQS, &p, fds).map(|_| ())
    }
}

impl Transport for Device {
    /// A Unix socket: the daemon runs on this kernel.
    fn on_daemon_kernel(&self) -> bool {
        true
    }

    /// The daemon's end of the socket closes when it dies: exact, and immune to a loaded
    /// machine delaying the heartbeat.
    fn daemon_gone(&mut self) -> Option<bool> {
        let mut pfd = libc::pollfd {
            fd: self.stream.as_raw_fd(),
            events: libc::POLLRDHUP,
            revents: 0,
        };
        // SAFETY: one valid pollfd, count 1, no waiting.
        let r = unsafe { libc::poll(&mut pfd, 1, 0) };
        if r < 0 {
            return None;
        }
        Some(pfd.revents & (libc::POLLHUP | libc::POLLRDHUP | libc::POLLERR) != 0)
    }

    fn map_sram(&mut self) -> Result<Mem, Error> {
        let info = self.region_info(ni_abi::pci::BAR0_REGION)?;
        if info.size != ni_abi::lanai::BAR0_SIZE {
            return Err(Error::Device(format!(
                "BAR0 is {:#x} bytes: not an NI",
                info.size
            )));
        }
        let fd = info
            .fd
            .ok_or_else(|| Error::Device("BAR0 offers no SRAM file descriptor".into()))?;
        Mem::map_fd(fd, info.offset, ni_abi::lanai::SRAM_SIZE as usize)
    }

    fn map_peer_region(&mut self, rank: u32, key: u32) -> Option<(Mem, u64)> {
        let index = ni_abi::window::peer_region(rank, key)?;
        // Refused (not exported, or not now): the caller takes the fabric's path, which
        // says why if it fails.
        let info = self.region_info(index).ok()?;
        let len = info.size.div_ceil(4096) * 4096;
        let m = Mem::map_fd(info.fd?, info.offset, len as usize).ok()?;
        Some((m, info.size))
    }

    fn map_window(&mut self, rank: u32) -> Result<Option<Mem>, Error> {
        use ni_abi::window::{self as w, WINDOW_OFFSET, WINDOW_SIZE};
        if self.num_regions >= w::ISOLATED_REGIONS {
            return self.map_isolated_window().map(Some);
        }
        // A shared window: all of it read-only from BAR4, this member's zone over its place
        // from BAR3.
        let bar4 = self.region_info(ni_abi::pci::BAR4_REGION)?;
        let fd4 = match bar4.fd {
            Some(fd) if bar4.size >= WINDOW_OFFSET + WINDOW_SIZE => fd,
            _ => return Ok(None),
        };
        let bar3 = self.region_info(ni_abi::pci::BAR3_REGION)?;
        let fd3 = match bar3.fd {
            Some(fd) if bar3.size >= w::ZONE_SIZE && bar3.flags & REGION_FLAG_WRITE != 0 => fd,
            _ => {
                return Err(Error::Device(format!(
                    "BAR4 shows a partition window but BAR3 ({:#x} bytes) offers no writable \
                     zone for rank {rank}",
                    bar3.size
                )))
            }
        };
        let parts = vec![
            crate::mem::Part {
                fd: fd4,
                file_offset: bar4.offset + WINDOW_OFFSET,
                at: 0,
                len: WINDOW_SIZE,
                writable: bar4.flags & REGION_FLAG_WRITE != 0,
            },
            crate::mem::Part {
                fd: fd3,
                file_offset: bar3.offset,
                at: w::zone(rank),
                len: w::ZONE_SIZE,
                writable: true,
            },
        ];
        Mem::compose(WINDOW_SIZE as usize, parts).map(Some)
    }

    fn region_read(&mut self, region: u32, offset: u64, data: &mut [u8]) -> Result<(), Error> {
        self.read(region, offset, data)
    }

    fn region_write(&mut self, region: u32, offset: u64, data: &[u8]) -> Result<(), Error> {
        self.write(region, offset, data)
    }

    fn dma_map(&mut self, mem: &Mem) -> Result<(), Error> {
        self.map(mem.fd(), 0, mem.iova(), mem.len() as u64)
    }

    fn dma_unmap(&mut self, iova: u64, len: u64) -> Result<(), Error> {
        self.unmap(iova, len)
    }

    fn maps_by_fd(&self) -> bool {
        true
    }

    /// Over vfio-user the client programs MSI-X itself: the enable bit in config space, the
    /// vectors' mask bits in the table, and one eventfd per vector.
    fn enable_msix(&mut self, vectors: &[(u32, RawFd)]) -> Result<(), Error> {
        use ni_abi::pci;
        let mut ctl = [0u8; 2];
        let msix_ctl = pci::CAP_MSIX as u64 + 2;
        self.read(pci::CONFIG_REGION, msix_ctl, &mut ctl)?;
        let ctl = u16::from_le_bytes(ctl) | 0x8000;
        self.write(pci::CONFIG_REGION, msix_ctl, &ctl.to_le_bytes())?;
        const TRIGGER_EVENTFD: u32 = (1 << 2) | (1 << 5);
        for &(v, fd) in vectors {
            self.write(
                pci::BAR4_REGION,
                pci::MSIX_TABLE_OFFSET + v as u64 * pci::MSIX_ENTRY_SIZE + 12,
                &0u32.to_le_bytes(),
            )?;
            self.set_irqs(pci::MSIX_IRQ_INDEX, TRIGGER_EVENTFD, v, 1, &[fd])?;
        }
        Ok(())
    }
}
