//! Serving one NI over vfio-user: the session loop (the wire format is `ni_abi::vfio_user`).
//!
//! Each NI has its own thread and listening socket. A session lasts one client connection;
//! when it ends (client detached, died, or broke the protocol) the NI is reset and the next
//! client may attach. Every header is checked against its command's limit before a byte of
//! its body is read, so a client claiming a 4 GiB message costs nothing; a body that does
//! not decode gets an error reply and the session goes on; a header that cannot be trusted
//! ends the session. Nothing a client sends can panic this thread (`device/tests/fuzz.rs`).

use std::fs::File;
use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex, MutexGuard};

use ni_abi::pci;
use ni_abi::vfio_user::{self as vu, flags, Header, ProtocolError, Request, HEADER};
use nix::sys::socket::{recvmsg, sendmsg, ControlMessage, ControlMessageOwned, MsgFlags};
use vfio_bindings::bindings::vfio::{
    VFIO_DEVICE_FLAGS_PCI, VFIO_DEVICE_FLAGS_RESET, VFIO_IRQ_INFO_AUTOMASKED,
    VFIO_IRQ_INFO_EVENTFD, VFIO_IRQ_INFO_MASKABLE, VFIO_IRQ_INFO_NORESIZE,
    VFIO_REGION_INFO_CAP_SPARSE_MMAP, VFIO_REGION_INFO_FLAG_CAPS, VFIO_REGION_INFO_FLAG_MMAP,
    VFIO_REGION_INFO_FLAG_READ, VFIO_REGION_INFO_FLAG_WRITE,
};

use crate::fabric::window::Window;
use crate::fabric::Fabric;
use crate::ni::{region_size, Ni};

/// Lock an NI, recovering it if a panicking session poisoned the lock: the NI's state is
/// plain data that every session starts by resetting.
pub fn lock(ni: &Mutex<Ni>) -> MutexGuard<'_, Ni> {
    ni.lock().unwrap_or_else(|e| e.into_inner())
}

/// What the daemon shows about a slot's client.
#[derive(Clone, Debug, Default)]
pub struct Attachment {
    pub attached: bool,
    pub client_pid: Option<i32>,
    /// The session's socket while it is open: a planned restart that cannot bring this
    /// session to rest shuts it down (`crate::handover`). Cleared, under this lock, before
    /// the socket is closed, so the number never names another socket.
    pub stream_fd: Option<RawFd>,
}

pub struct Slot {
    pub ni: Mutex<Ni>,
    pub attachment: Mutex<Attachment>,
    /// The window of the NI's partition, as the fabric last set it; a session binds the
    /// one current when its client connects.
    pub window: Mutex<Option<Arc<Window>>>,
}

/// One region as `DEVICE_GET_REGION_INFO` describes it.
pub struct RegionDesc {
    pub size: u64,
    pub flags: u32,
    /// Sparse mmap areas (offset, size) within the region, backed by `mmap_fd`.
    pub sparse: Vec<(u64, u64)>,
    pub mmap_fd: Option<RawFd>,
    /// Where the region starts in `mmap_fd` (the mmap offset of region offset 0).
    pub fd_offset: u64,
}

pub struct IrqDesc {
    pub flags: u32,
    pub count: u32,
}

/// How a session ended.
#[derive(Debug, thiserror::Error)]
pub enum SessionEnd {
    #[error("the client closed the connection")]
    Closed,
    #[error("socket: {0}")]
    Io(#[from] io::Error),
    #[error("protocol: {0}")]
    Protocol(ProtocolError),
}

/// One client session of one NI: the translation of vfio-user commands into calls on the
/// NI model, and of their results into replies.
pub struct Session<'a> {
    slot: &'a Slot,
    index: u32,
    regions: Vec<RegionDesc>,
    irqs: Vec<IrqDesc>,
    /// Where peers' exported regions come from (`ni_abi::window::PEER_REGIONS`).
    fabric: Option<Arc<Fabric>>,
}

fn invalid(e: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, e.to_string())
}

impl<'a> Session<'a> {
    pub fn new(
        slot: &'a Slot,
        sram_fd: RawFd,
        window: Option<&Window>,
        fabric: Option<Arc<Fabric>>,
    ) -> Session<'a> {
        let index = lock(&slot.ni).index;
        Session {
            slot,
            index,
            regions: regions(sram_fd, window, index),
            irqs: irqs(),
            fabric,
        }
    }

    /// Peer `rank`'s exported region `key` as a region this client may map whole, with the
    /// file its descriptor is (`Fabric::export`), or why not.
    fn peer_region(&self, rank: u32, key: u32) -> io::Result<(RegionDesc, std::fs::File)> {
        let fabric = self
            .fabric
            .as_ref()
            .ok_or_else(|| invalid("no peer regions here"))?;
        let x = fabric.export(self.index, rank, key).map_err(|status| {
            invalid(format!(
                "rank {rank}'s region {key} is not exported to this NI: {}",
                status.describe()
            ))
        })?;
        let r = RegionDesc {
            size: x.len,
            flags: VFIO_REGION_INFO_FLAG_READ
                | VFIO_REGION_INFO_FLAG_WRITE
                | VFIO_REGION_INFO_FLAG_MMAP,
            sparse: vec![(0, x.len.div_ceil(4096) * 4096)],
            mmap_fd: Some(x.file.as_raw_fd()),
            fd_offset: x.offset,
        };
        Ok((r, x.file))
    }

    /// Serve `stream` until the client leaves or breaks the protocol.
    pub fn run(&mut self, stream: &mut UnixStream) -> Result<(), SessionEnd> {
        let outbox = lock(&self.slot.ni).irqs.outbox().clone();
        outbox.bind_thread();
        loop {
            // Between messages: signal what was fired, then wait for the next message or the
            // next interrupt (irq.rs: this thread, holding no lock, is the only one that
            // writes the client's eventfds).
            loop {
                let mut pfd = [
                    libc::pollfd {
                        fd: stream.as_raw_fd(),
                        events: libc::POLLIN,
                        revents: 0,
                    },
                    libc::pollfd {
                        fd: outbox.wake_fd(),
                        events: libc::POLLIN,
                        revents: 0,
                    },
                    crate::handover::freeze().pollfd(),
                ];
                // SAFETY: three valid pollfds.
                let r = unsafe { libc::poll(pfd.as_mut_ptr(), 3, -1) };
                if r < 0 {
                    let e = io::Error::last_os_error();
                    if e.kind() == io::ErrorKind::Interrupted {
                        continue;
                    }
                    return Err(e.into());
                }
                // Interrupts fired while this thread handled a message wake it here too.
                if pfd[1].revents != 0 {
                    let bits = outbox.take();
                    if bits != 0 {
                        let targets = lock(&self.slot.ni).irqs.targets(bits);
                        outbox.signal_all(&targets);
                    }
                }
                // A planned restart: rest here, between messages, until it is over (this
                // process carries on) or the exec ends it (the next one resumes here).
                if pfd[2].revents != 0 {
                    crate::handover::freeze().park(crate::handover::Who::Session(
                        self.index,
                        stream.as_raw_fd(),
                    ));
                    continue;
                }
                if pfd[0].revents != 0 {
                    break;
                }
            }
            let (h, fds) = match read_header(stream) {
                Ok(x) => x,
                Err(SessionEnd::Closed) => return Ok(()),
                Err(e) => return Err(e),
            };
            if let Err(e) = h.check() {
                // The body's size cannot be trusted: nothing can be read in step any more.
                let _ = reply_error(stream, &h, libc::EINVAL);
                return Err(SessionEnd::Protocol(e));
            }
            let mut body = vec![0u8; h.body_len()];
            stream.read_exact(&mut body)?;
            match vu::decode(h.command, &body) {
                Ok(req) => self.handle(stream, &h, req, fds)?,
                Err(e) => {
                    tracing::debug!(ni = self.index, "refused message: {e}");
                    let errno = match e {
                        ProtocolError::Unsupported(_) => libc::ENOTSUP,
                        _ => {
                            lock(&self.slot.ni).counters.malformed_messages += 1;
                            libc::EINVAL
                        }
                    };
                    if !h.no_reply() {
                        reply_error(stream, &h, errno)?;
                    }
                }
            }
        }
    }

    fn handle(
        &mut self,
        stream: &mut UnixStream,
        h: &Header,
        req: Request,
        mut fds: Vec<File>,
    ) -> Result<(), SessionEnd> {
        let mut out: Vec<u8> = Vec::new();
        let mut out_fd: Option<RawFd> = None;
        // A peer's exported region's file, held until the reply carried its descriptor.
        let mut exported: Option<std::fs::File> = None;
        let result: io::Result<()> = match req {
            Request::Version {
                major,
                minor,
                capabilities,
            } => {
                tracing::debug!(ni = self.index, major, minor, %capabilities, "client version");
                // What QEMU has been served since the first release: one descriptor per
                // message (it splits SET_IRQS), 1 MiB transfers.
                let caps = format!(
                    r#"{{"capabilities":{{"max_msg_fds":1,"max_data_xfer_size":{},"migration":{{"pgsize":4096}}}}}}"#,
                    vu::MAX_DATA_XFER
                );
                out.extend_from_slice(&0u16.to_le_bytes());
                out.extend_from_slice(&0u16.to_le_bytes());
                out.extend_from_slice(caps.as_bytes());
                out.push(0);
                Ok(())
            }
            Request::DmaMap {
                flags,
                offset,
                address,
                size,
            } => {
                if fds.len() > 1 {
                    Err(invalid("DMA_MAP with more than one file descriptor"))
                } else {
                    self.dma_map(flags, offset, address, size, fds.pop())
                }
            }
            Request::DmaUnmap {
                flags,
                address,
                size,
            } => {
                out.extend_from_slice(&vu::DMA_UNMAP_BODY.to_le_bytes());
                out.extend_from_slice(&flags.to_le_bytes());
                out.extend_from_slice(&address.to_le_bytes());
                out.extend_from_slice(&size.to_le_bytes());
                self.dma_unmap(flags, address, size)
            }
            Request::GetInfo => {
                out.extend_from_slice(&vu::DEVICE_GET_INFO_BODY.to_le_bytes());
                out.extend_from_slice(
                    &(VFIO_DEVICE_FLAGS_PCI | VFIO_DEVICE_FLAGS_RESET).to_le_bytes(),
                );
                out.extend_from_slice(&(self.regions.len() as u32).to_le_bytes());
                out.extend_from_slice(&(self.irqs.len() as u32).to_le_bytes());
                Ok(())
            }
            Request::GetRegionInfo { argsz, index } => {
                match ni_abi::window::peer_region_of(index) {
                    Some((rank, key)) => self.peer_region(rank, key).map(|(r, file)| {
                        out_fd = region_info(&mut out, index, argsz, &r);
                        exported = Some(file);
                    }),
                    None => match self.regions.get(index as usize) {
                        None => Err(invalid(format!("no region {index}"))),
                        Some(r) => {
                            out_fd = region_info(&mut out, index, argsz, r);
                            Ok(())
                        }
                    },
                }
            }
            Request::GetIrqInfo { index } => match self.irqs.get(index as usize) {
                None => Err(invalid(format!("no IRQ index {index}"))),
                Some(i) => {
                    out.extend_from_slice(&vu::IRQ_INFO_BODY.to_le_bytes());
                    out.extend_from_slice(&i.flags.to_le_bytes());
                    out.extend_from_slice(&index.to_le_bytes());
                    out.extend_from_slice(&i.count.to_le_bytes());
                    Ok(())
                }
            },
            Request::SetIrqs {
                flags,
                index,
                start,
                count,
            } => {
                let mut ni = lock(&self.slot.ni);
                ni.set_irqs(index, flags, start, count, fds)
                    .inspect_err(|e| tracing::debug!(ni = ni.index, "{e}"))
            }
            Request::RegionRead {
                region,
                offset,
                count,
            } => {
                out.extend_from_slice(&offset.to_le_bytes());
                out.extend_from_slice(&region.to_le_bytes());
                out.extend_from_slice(&count.to_le_bytes());
                let at = out.len();
                out.resize(at + count as usize, 0);
                let mut ni = lock(&self.slot.ni);
                ni.region_read(region, offset, &mut out[at..]).map_err(|e| {
                    tracing::debug!(ni = ni.index, "refused read: {e}");
                    e.into()
                })
            }
            Request::RegionWrite {
                region,
                offset,
                data,
            } => {
                out.extend_from_slice(&offset.to_le_bytes());
                out.extend_from_slice(&region.to_le_bytes());
                out.extend_from_slice(&(data.len() as u32).to_le_bytes());
                let mut ni = lock(&self.slot.ni);
                ni.region_write(region, offset, &data).map_err(|e| {
                    tracing::debug!(ni = ni.index, "refused write: {e}");
                    e.into()
                })
            }
            Request::Reset => {
                let mut ni = lock(&self.slot.ni);
                tracing::info!(ni = ni.index, "device reset requested by the client");
                ni.function_reset();
                Ok(())
            }
        };
        if h.no_reply() {
            return Ok(());
        }
        match result {
            Ok(()) => reply(stream, h, &out, out_fd)?,
            Err(e) => reply_error(stream, h, e.raw_os_error().unwrap_or(libc::EINVAL))?,
        }
        Ok(())
    }

    fn dma_map(
        &mut self,
        flags: u32,
        offset: u64,
        address: u64,
        size: u64,
        fd: Option<File>,
    ) -> io::Result<()> {
        let mut ni = lock(&self.slot.ni);
        let r = crate::ni::write_dma(&ni.dma).map(
            flags & vu::DMA_MAP_READ != 0,
            flags & vu::DMA_MAP_WRITE != 0,
            offset,
            address,
            size,
            fd,
        );
        match r {
            Ok(()) => {
                ni.counters.dma_maps += 1;
                Ok(())
            }
            Err(e) => {
                ni.counters.dma_map_errors += 1;
                // QEMU maps ROM and BAR ranges without a descriptor by design; what a
                // client gets wrong is its own business and is counted, not logged loud.
                tracing::debug!(ni = ni.index, "{e}");
                Err(invalid(e))
            }
        }
    }

    fn dma_unmap(&mut self, flags: u32, address: u64, size: u64) -> io::Result<()> {
        let mut ni = lock(&self.slot.ni);
        ni.counters.dma_unmaps += 1;
        if flags & vu::DMA_UNMAP_ALL != 0 {
            crate::ni::write_dma(&ni.dma).clear();
            return Ok(());
        }
        let unmapped = crate::ni::write_dma(&ni.dma).unmap(address, size);
        if let Err(e) = unmapped {
            // Kernel VFIO answers success here and QEMU relies on it (it unmaps the
            // whole IOVA space in chunks when the guest turns its IOMMU on), so this
            // is counted, not refused.
            ni.counters.dma_unmap_empty += 1;
            tracing::debug!(ni = ni.index, "{e}");
        }
        Ok(())
    }
}

/// Read one header and the descriptors riding on it.
fn read_header(stream: &mut UnixStream) -> Result<(Header, Vec<File>), SessionEnd> {
    let mut b = [0u8; HEADER];
    let mut got = 0;
    let mut files = Vec::new();
    while got < HEADER {
        let mut cbuf = nix::cmsg_space!([RawFd; vu::MAX_MSG_FDS]);
        let mut iov = [IoSliceMut::new(&mut b[got..])];
        let msg = match recvmsg::<()>(
            stream.as_raw_fd(),
            &mut iov,
            Some(&mut cbuf),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Ok(m) => m,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(SessionEnd::Io(e.into())),
        };
        if msg.bytes == 0 {
            return if got == 0 {
                Err(SessionEnd::Closed)
            } else {
                Err(SessionEnd::Protocol(ProtocolError::ShortSize(got as u32)))
            };
        }
        got += msg.bytes;
        if let Ok(cmsgs) = msg.cmsgs() {
            for c in cmsgs {
                if let ControlMessageOwned::ScmRights(fds) = c {
                    // SAFETY: the kernel just installed these descriptors for us; each is
                    // owned by exactly one File from here on.
                    files.extend(fds.into_iter().map(|fd| unsafe { File::from_raw_fd(fd) }));
                }
            }
        }
    }
    Ok((Header::decode(&b), files))
}

fn send(stream: &mut UnixStream, bytes: &[u8], fd: Option<RawFd>) -> io::Result<()> {
    let fds = fd.map(|f| [f]);
    let cmsg = fds.as_ref().map(|f| [ControlMessage::ScmRights(f)]);
    let sent = sendmsg::<()>(
        stream.as_raw_fd(),
        &[IoSlice::new(bytes)],
        cmsg.as_ref().map(|c| &c[..]).unwrap_or(&[]),
        MsgFlags::MSG_NOSIGNAL,
        None,
    )
    .map_err(io::Error::from)?;
    stream.write_all(&bytes[sent..])
}

fn reply(stream: &mut UnixStream, h: &Header, body: &[u8], fd: Option<RawFd>) -> io::Result<()> {
    let r = Header {
        id: h.id,
        command: h.command,
        size: (HEADER + body.len()) as u32,
        flags: flags::TYPE_REPLY,
        error: 0,
    };
    let mut bytes = r.encode().to_vec();
    bytes.extend_from_slice(body);
    send(stream, &bytes, fd)
}

fn reply_error(stream: &mut UnixStream, h: &Header, errno: i32) -> io::Result<()> {
    let r = Header {
        id: h.id,
        command: h.command,
        size: HEADER as u32,
        flags: flags::TYPE_REPLY | flags::ERROR,
        error: errno as u32,
    };
    send(stream, &r.encode(), None)
}

/// The `vfio_region_info` reply, with the sparse-mmap capability when the client left room
/// for it (`argsz`); returns the descriptor to send with it.
fn region_info(out: &mut Vec<u8>, index: u32, argsz: u32, r: &RegionDesc) -> Option<RawFd> {
    const INFO: u32 = vu::REGION_INFO_BODY;
    let mut cap = Vec::new();
    if !r.sparse.is_empty() {
        cap.extend_from_slice(&(VFIO_REGION_INFO_CAP_SPARSE_MMAP as u16).to_le_bytes());
        cap.extend_from_slice(&1u16.to_le_bytes()); // version
        cap.extend_from_slice(&0u32.to_le_bytes()); // next
        cap.extend_from_slice(&(r.sparse.len() as u32).to_le_bytes());
        cap.extend_from_slice(&0u32.to_le_bytes());
        for (offset, size) in &r.sparse {
            cap.extend_from_slice(&offset.to_le_bytes());
            cap.extend_from_slice(&size.to_le_bytes());
        }
    }
    let full = INFO + cap.len() as u32;
    let send_caps = !cap.is_empty() && argsz >= full;
    let mut flags = r.flags;
    if !cap.is_empty() {
        flags |= VFIO_REGION_INFO_FLAG_CAPS;
    }
    out.extend_from_slice(&(if cap.is_empty() { INFO } else { full }).to_le_bytes());
    out.extend_from_slice(&flags.to_le_bytes());
    out.extend_from_slice(&index.to_le_bytes());
    out.extend_from_slice(&(if cap.is_empty() { 0 } else { INFO }).to_le_bytes());
    out.extend_from_slice(&r.size.to_le_bytes());
    out.extend_from_slice(&r.fd_offset.to_le_bytes());
    if send_caps {
        out.extend_from_slice(&cap);
        r.mmap_fd
    } else {
        None
    }
}

/// The PCI regions, then an isolated window's (`ni_abi::window::Kind`): the device page and
/// each zone, mappable whole through their own descriptors — read-only ones except for this
/// NI's own zone.
fn regions(sram_fd: RawFd, window: Option<&Window>, index: u32) -> Vec<RegionDesc> {
    let rank = window.and_then(|w| w.rank_of(index));
    let mut out: Vec<RegionDesc> = (0..pci::NUM_REGIONS)
        .map(|index| {
            let size = region_size(index);
            let mut flags = 0;
            if size > 0 {
                flags |= VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE;
            }
            let mut sparse = vec![];
            let mut mmap_fd = None;
            let mut fd_offset = 0;
            if index == pci::BAR0_REGION {
                flags |= VFIO_REGION_INFO_FLAG_MMAP;
                sparse.push((0, ni_abi::lanai::SRAM_SIZE));
                mmap_fd = Some(sram_fd);
            }
            // A shared window: BAR4 shows all of it read-only — no FLAG_WRITE, so a VMM maps
            // it PROT_READ, and a descriptor that could not be mapped otherwise — and BAR3
            // this member's zone read-write (`ni_abi::window::Kind::Shared`).
            if let (pci::BAR4_REGION, Some(fd)) = (index, window.and_then(|w| w.bar4_fd())) {
                flags = VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_MMAP;
                sparse.push((ni_abi::window::WINDOW_OFFSET, ni_abi::window::WINDOW_SIZE));
                mmap_fd = Some(fd);
            }
            if let (pci::BAR3_REGION, Some((fd, at))) =
                (index, window.and_then(|w| w.bar3_zone(rank)))
            {
                flags |= VFIO_REGION_INFO_FLAG_MMAP;
                sparse.push((0, ni_abi::window::ZONE_SIZE));
                mmap_fd = Some(fd);
                fd_offset = at;
            }
            RegionDesc {
                size,
                flags,
                sparse,
                mmap_fd,
                fd_offset,
            }
        })
        .collect();
    if let Some(w) = window {
        for r in w.regions(rank) {
            debug_assert_eq!(r.index as usize, out.len());
            let mut flags = 0;
            if r.size > 0 {
                flags = VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_MMAP;
            }
            if r.writable {
                flags |= VFIO_REGION_INFO_FLAG_WRITE;
            }
            out.push(RegionDesc {
                size: r.size,
                flags,
                sparse: if r.size > 0 {
                    vec![(0, r.size)]
                } else {
                    vec![]
                },
                mmap_fd: r.fd,
                fd_offset: 0,
            });
        }
    }
    out
}

/// By IRQ index (INTx, MSI, MSI-X, ERR, REQ).
fn irqs() -> Vec<IrqDesc> {
    let d = |flags, count| IrqDesc { flags, count };
    vec![
        d(
            VFIO_IRQ_INFO_EVENTFD | VFIO_IRQ_INFO_MASKABLE | VFIO_IRQ_INFO_AUTOMASKED,
            1,
        ),
        d(VFIO_IRQ_INFO_EVENTFD, 0),
        d(
            VFIO_IRQ_INFO_EVENTFD | VFIO_IRQ_INFO_NORESIZE,
            pci::vector::COUNT as u32,
        ),
        // Error and request notification: one vector each, so QEMU can enable error
        // recovery.
        d(VFIO_IRQ_INFO_EVENTFD, 1),
        d(VFIO_IRQ_INFO_EVENTFD, 1),
    ]
}

/// Serve `slot` on `listener` forever: one client session after another, starting with
/// `resumed`, a session an earlier process of this daemon handed over (`crate::handover`).
pub fn serve(
    slot: Arc<Slot>,
    listener: UnixListener,
    mut resumed: Option<UnixStream>,
    fabric: Arc<Fabric>,
) {
    let index = lock(&slot.ni).index;
    loop {
        let (mut stream, window) = match resumed.take() {
            Some(stream) => {
                slot.attachment
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .stream_fd = Some(stream.as_raw_fd());
                // The NI, its window and its attachment are as the old process left them.
                let mut ni = lock(&slot.ni);
                if let Err(e) = ni.reserve_next_sram() {
                    tracing::warn!(ni = index, "no SRAM reserved for the next client: {e}");
                }
                tracing::info!(ni = index, "client session resumed after a planned restart");
                (stream, ni.window.clone())
            }
            None => {
                // Wait for a pending connection first: what its detach will need is
                // reserved before it is accepted.
                match wait_readable(&listener) {
                    Err(e) => {
                        tracing::error!(ni = index, "waiting for a client: {e}");
                        std::thread::sleep(std::time::Duration::from_secs(1));
                        continue;
                    }
                    Ok(false) => {
                        crate::handover::freeze().park(crate::handover::Who::Listener(index));
                        continue;
                    }
                    Ok(true) => {}
                }
                // The SRAM the next client will get is made first; without it this
                // client's detach could not give the next one fresh memory, so the client
                // is turned away.
                if let Err(e) = lock(&slot.ni).reserve_next_sram() {
                    refuse(&listener, index, &slot, &e.to_string());
                    continue;
                }
                let stream = match listener.accept() {
                    Ok((s, _)) => s,
                    Err(e) => {
                        tracing::warn!(ni = index, "accepting a client: {e}");
                        std::thread::sleep(std::time::Duration::from_millis(100));
                        continue;
                    }
                };
                // Attached under the NI's lock, with the generation's move (`attached`): the
                // fabric must not see this client attached at the old generation (it would
                // publish an identity, then again at the new one, and the client could read
                // the first EPOCH). Attached first, then the window read: a partition created
                // from now on sees this NI attached and gets no window
                // (`State::sync_windows`), so the window this session binds is the one its
                // partition keeps.
                let mut ni = lock(&slot.ni);
                *slot.attachment.lock().unwrap_or_else(|e| e.into_inner()) = Attachment {
                    attached: true,
                    client_pid: None,
                    stream_fd: Some(stream.as_raw_fd()),
                };
                let window = slot
                    .window
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .clone();
                ni.window = window.clone();
                ni.counters.attaches += 1;
                // The fabric publishes the fast path's control page for the new client.
                ni.attached();
                tracing::info!(ni = index, "client attaching");
                (stream, window)
            }
        };
        // Each client is handed the current SRAM memfd and its partition's window.
        let sram_fd = lock(&slot.ni).sram.fd();
        let mut session = Session::new(&slot, sram_fd, window.as_deref(), Some(fabric.clone()));
        // Defence in depth: the session is written (and fuzzed) not to panic on anything a
        // client sends; if it ever does, that client's session ends, not the daemon.
        let ended = catch_unwind(AssertUnwindSafe(|| session.run(&mut stream)));
        match ended {
            Err(_) => {
                lock(&slot.ni).counters.malformed_sessions += 1;
                tracing::error!(
                    ni = index,
                    "client session aborted by a bug (a panic): see the log above"
                )
            }
            Ok(Ok(())) => tracing::info!(ni = index, "client detached"),
            Ok(Err(SessionEnd::Protocol(e))) => {
                lock(&slot.ni).counters.malformed_sessions += 1;
                tracing::info!(
                    ni = index,
                    "client session ended: it broke the protocol: {e}"
                )
            }
            Ok(Err(e)) => tracing::info!(ni = index, "client session ended: {e}"),
        }
        // `stream_fd` names the socket only while it is open (the handover shuts it down).
        slot.attachment
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .stream_fd = None;
        drop(stream);
        let mut ni = lock(&slot.ni);
        ni.window = None;
        ni.detach();
        // Freed under the NI's lock, with the detach: the fabric reads generation and
        // attachment under it too, so it never sees the detach's generation with the old
        // client still attached (it would publish an identity into the next client's SRAM,
        // then publish again at its attach: a new EPOCH, and that client's attach fails with
        // `Reset`); and `nodes` never shows a free NI still holding the last client's DMA
        // mappings.
        *slot.attachment.lock().unwrap_or_else(|e| e.into_inner()) = Attachment::default();
        drop(ni);
    }
}

/// Accept and close a pending client the NI cannot serve now, so the accept queue does not
/// spin the poll; back off so a flood costs little.
fn refuse(listener: &UnixListener, index: u32, slot: &Slot, why: &str) {
    lock(&slot.ni).counters.attach_refused += 1;
    tracing::warn!(ni = index, "client turned away: {why}");
    if let Ok((s, _)) = listener.accept() {
        drop(s);
    }
    std::thread::sleep(std::time::Duration::from_millis(100));
}

/// Wait for a client (`true`) or a planned restart's freeze (`false`).
fn wait_readable(listener: &UnixListener) -> io::Result<bool> {
    let mut pfd = [
        libc::pollfd {
            fd: listener.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
        crate::handover::freeze().pollfd(),
    ];
    loop {
        // SAFETY: two valid pollfds.
        let r = unsafe { libc::poll(pfd.as_mut_ptr(), 2, -1) };
        if r >= 0 {
            return Ok(pfd[1].revents == 0);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}
