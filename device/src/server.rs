//! Serving one NI over vfio-user (crate `vfio_user`, server side).
//!
//! Each NI has its own thread and listening socket. A session lasts one client connection;
//! when it ends (client detached, died, or sent something the protocol layer could not
//! survive) the NI is reset and the next client may attach. A session that panics inside
//! the protocol crate (it trusts some length fields) is caught and ends like a disconnect,
//! so one bad client never takes down the daemon or another NI.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixListener;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex, MutexGuard};

use ni_abi::pci;
use vfio_bindings::bindings::vfio::{
    vfio_region_info, vfio_region_sparse_mmap_area, VFIO_IRQ_INFO_AUTOMASKED,
    VFIO_IRQ_INFO_EVENTFD, VFIO_IRQ_INFO_MASKABLE, VFIO_IRQ_INFO_NORESIZE,
    VFIO_REGION_INFO_FLAG_MMAP, VFIO_REGION_INFO_FLAG_READ, VFIO_REGION_INFO_FLAG_WRITE,
};
use vfio_user::{
    DmaMapFlags, DmaUnmapFlags, IrqInfo, Server, ServerBackend, ServerRegion, SparseArea,
};

use crate::fabric::window::Window;
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
}

pub struct Slot {
    pub ni: Mutex<Ni>,
    pub attachment: Mutex<Attachment>,
    /// The window of the NI's partition, as the fabric last set it; a session binds the
    /// one current when its client connects.
    pub window: Mutex<Option<Arc<Window>>>,
}

struct Backend<'a> {
    slot: &'a Slot,
}

fn invalid(e: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, e.to_string())
}

impl ServerBackend for Backend<'_> {
    fn region_read(&mut self, region: u32, offset: u64, data: &mut [u8]) -> io::Result<()> {
        let mut ni = lock(&self.slot.ni);
        ni.region_read(region, offset, data).map_err(|e| {
            tracing::debug!(ni = ni.index, "refused read: {e}");
            e.into()
        })
    }

    fn region_write(&mut self, region: u32, offset: u64, data: &[u8]) -> io::Result<()> {
        let mut ni = lock(&self.slot.ni);
        ni.region_write(region, offset, data).map_err(|e| {
            tracing::debug!(ni = ni.index, "refused write: {e}");
            e.into()
        })
    }

    fn dma_map(
        &mut self,
        flags: DmaMapFlags,
        offset: u64,
        address: u64,
        size: u64,
        fd: Option<File>,
    ) -> io::Result<()> {
        let mut ni = lock(&self.slot.ni);
        let r = crate::ni::write_dma(&ni.dma).map(
            flags.contains(DmaMapFlags::READ),
            flags.contains(DmaMapFlags::WRITE),
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
                tracing::warn!(ni = ni.index, "{e}");
                Err(invalid(e))
            }
        }
    }

    fn dma_unmap(&mut self, flags: DmaUnmapFlags, address: u64, size: u64) -> io::Result<()> {
        let mut ni = lock(&self.slot.ni);
        ni.counters.dma_unmaps += 1;
        if flags.contains(DmaUnmapFlags::UNMAP_ALL) {
            crate::ni::write_dma(&ni.dma).clear();
            return Ok(());
        }
        let unmapped = crate::ni::write_dma(&ni.dma).unmap(address, size);
        match unmapped {
            Ok(_) => Ok(()),
            Err(e) => {
                // Kernel VFIO answers success here and QEMU relies on it (it unmaps the
                // whole IOVA space in chunks when the guest turns its IOMMU on), so this
                // is counted, not refused.
                ni.counters.dma_unmap_empty += 1;
                tracing::debug!(ni = ni.index, "{e}");
                Ok(())
            }
        }
    }

    fn reset(&mut self) -> io::Result<()> {
        let mut ni = lock(&self.slot.ni);
        tracing::info!(ni = ni.index, "device reset requested by the client");
        ni.function_reset();
        Ok(())
    }

    fn set_irqs(
        &mut self,
        index: u32,
        flags: u32,
        start: u32,
        count: u32,
        fds: Vec<File>,
    ) -> io::Result<()> {
        let mut ni = lock(&self.slot.ni);
        ni.set_irqs(index, flags, start, count, fds)
            .inspect_err(|e| {
                tracing::warn!(ni = ni.index, "{e}");
            })
    }
}

fn regions(sram_fd: i32, window_fd: Option<i32>) -> Vec<ServerRegion> {
    (0..pci::NUM_REGIONS)
        .map(|index| {
            let size = region_size(index);
            let mut flags = 0;
            if size > 0 {
                flags |= VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE;
            }
            let mut sparse_areas = vec![];
            let mut mmap_fd = None;
            if index == pci::BAR0_REGION {
                flags |= VFIO_REGION_INFO_FLAG_MMAP;
                sparse_areas.push(SparseArea {
                    area: vfio_region_sparse_mmap_area {
                        offset: 0,
                        size: ni_abi::lanai::SRAM_SIZE,
                    },
                });
                mmap_fd = Some(sram_fd);
            }
            if let (pci::BAR4_REGION, Some(fd)) = (index, window_fd) {
                flags |= VFIO_REGION_INFO_FLAG_MMAP;
                sparse_areas.push(SparseArea {
                    area: vfio_region_sparse_mmap_area {
                        offset: ni_abi::window::WINDOW_OFFSET,
                        size: ni_abi::window::WINDOW_SIZE,
                    },
                });
                mmap_fd = Some(fd);
            }
            ServerRegion {
                region_info: vfio_region_info {
                    argsz: std::mem::size_of::<vfio_region_info>() as u32,
                    flags,
                    index,
                    cap_offset: 0,
                    size,
                    // mmap offset of the region within its fd.
                    offset: 0,
                },
                sparse_areas,
                mmap_fd,
            }
        })
        .collect()
}

fn irqs() -> Vec<IrqInfo> {
    vec![
        IrqInfo {
            index: pci::INTX_IRQ_INDEX,
            flags: VFIO_IRQ_INFO_EVENTFD | VFIO_IRQ_INFO_MASKABLE | VFIO_IRQ_INFO_AUTOMASKED,
            count: 1,
        },
        IrqInfo {
            index: pci::MSI_IRQ_INDEX,
            flags: VFIO_IRQ_INFO_EVENTFD,
            count: 0,
        },
        IrqInfo {
            index: pci::MSIX_IRQ_INDEX,
            flags: VFIO_IRQ_INFO_EVENTFD | VFIO_IRQ_INFO_NORESIZE,
            count: pci::vector::COUNT as u32,
        },
        // Error and request notification: one vector each, so QEMU can enable error
        // recovery; the device signals ERR on a fatal internal error.
        IrqInfo {
            index: pci::ERR_IRQ_INDEX,
            flags: VFIO_IRQ_INFO_EVENTFD,
            count: 1,
        },
        IrqInfo {
            index: pci::REQ_IRQ_INDEX,
            flags: VFIO_IRQ_INFO_EVENTFD,
            count: 1,
        },
    ]
}

/// Serve `slot` on `listener` forever: one client session after another.
pub fn serve(slot: Arc<Slot>, listener: UnixListener) {
    let index = lock(&slot.ni).index;
    loop {
        // The crate accepts inside run(): wait for a pending connection first so the
        // attachment is visible from the moment the client connects.
        if let Err(e) = wait_readable(&listener) {
            tracing::error!(ni = index, "waiting for a client: {e}");
            std::thread::sleep(std::time::Duration::from_secs(1));
            continue;
        }
        // The SRAM the next client will get is made first; without it this client's detach
        // could not give the next one fresh memory, so the client is turned away.
        if let Err(e) = lock(&slot.ni).reserve_next_sram() {
            refuse(&listener, index, &slot, &e.to_string());
            continue;
        }
        let fd: OwnedFd = match listener.try_clone() {
            Ok(l) => l.into(),
            Err(e) => {
                tracing::error!(ni = index, "cannot clone the listening socket: {e}");
                std::thread::sleep(std::time::Duration::from_secs(1));
                continue;
            }
        };
        // Attached first, then the window read: a partition created from now on sees this
        // NI attached and gets no window (`State::sync_windows`), so the window this session
        // binds is the one its partition keeps.
        *slot.attachment.lock().unwrap_or_else(|e| e.into_inner()) = Attachment {
            attached: true,
            client_pid: None,
        };
        let window = slot
            .window
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        // A fresh Server per session so each client is handed the current SRAM memfd and
        // its partition's window.
        let sram_fd = lock(&slot.ni).sram.fd();
        let server = Server::from_owned_fd(
            fd,
            true,
            irqs(),
            regions(sram_fd, window.as_ref().map(|w| w.fd())),
        );
        {
            let mut ni = lock(&slot.ni);
            ni.window = window;
            ni.counters.attaches += 1;
            // The fabric publishes the fast path's control page for the new client.
            ni.attached();
        }
        tracing::info!(ni = index, "client attaching");
        let result = catch_unwind(AssertUnwindSafe(|| {
            let mut backend = Backend { slot: &slot };
            server.run(&mut backend)
        }));
        match result {
            Ok(Ok(())) => tracing::info!(ni = index, "client detached"),
            Ok(Err(e)) => tracing::warn!(ni = index, "client session ended: {e}"),
            Err(_) => {
                lock(&slot.ni).counters.malformed_sessions += 1;
                tracing::error!(ni = index, "client session aborted on malformed input")
            }
        }
        *slot.attachment.lock().unwrap_or_else(|e| e.into_inner()) = Attachment::default();
        let mut ni = lock(&slot.ni);
        ni.window = None;
        ni.detach();
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

fn wait_readable(listener: &UnixListener) -> io::Result<()> {
    let mut pfd = libc::pollfd {
        fd: listener.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    loop {
        // SAFETY: one valid pollfd, count 1.
        let r = unsafe { libc::poll(&mut pfd, 1, -1) };
        if r >= 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}
