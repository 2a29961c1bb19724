//! How libni reaches its NI: the device's regions, DMA mappings and interrupts.
//!
//! Host processes reach the daemon over vfio-user ([`crate::vfio_user::Device`]); a guest's
//! processes reach the same device model through the kernel's VFIO. Everything above this
//! trait — the fast path, the API — is the same for both.

use std::os::fd::RawFd;

use crate::mem::Mem;
use crate::Result;

pub(crate) trait Transport: Send {
    /// Map the NI's SRAM (BAR0's first 8 MiB) into this process.
    fn map_sram(&mut self) -> Result<Mem>;
    /// Map the partition window if the device offers it mappable, writable only in `rank`'s
    /// zone (`ni_abi::window::Kind`); `None`: this NI has no window (the fabric path carries
    /// everything).
    fn map_window(&mut self, rank: u32) -> Result<Option<Mem>>;
    /// Map partition peer `rank`'s region `key` if its client exported it
    /// (`ni_abi::window::PEER_REGIONS`), with the region's length; `None` when it is not
    /// offered (not exported, not
    /// up, no window, or a path that cannot map another client's memory, as a guest's).
    fn map_peer_region(&mut self, _rank: u32, _key: u32) -> Option<(Mem, u64)> {
        None
    }
    /// A trapped read of a region (VFIO region index: BAR0 = 0, config = 7, ...).
    fn region_read(&mut self, region: u32, offset: u64, data: &mut [u8]) -> Result<()>;
    fn region_write(&mut self, region: u32, offset: u64, data: &[u8]) -> Result<()>;
    /// Write the fast path's `DOORBELL` (the poller sleeps; fastpath.md).
    fn ring_doorbell(&mut self) -> Result<()> {
        self.region_write(
            ni_abi::pci::BAR0_REGION,
            ni_abi::fastpath::regs::PAGE + ni_abi::fastpath::regs::DOORBELL,
            &1u32.to_le_bytes(),
        )
    }
    /// Let the NI reach `mem` at IOVA = its address in this process.
    fn dma_map(&mut self, mem: &Mem) -> Result<()>;
    fn dma_unmap(&mut self, iova: u64, len: u64) -> Result<()>;
    /// Whether the NI reaches memory through its file (vfio-user: `DMA_MAP` with a
    /// descriptor) rather than by address (VFIO's IOMMU): then only file-backed memory can be
    /// DMA-mapped ([`Mem::adopt`]).
    fn maps_by_fd(&self) -> bool {
        false
    }
    /// Enable MSI-X and deliver each `(vector, eventfd)`.
    fn enable_msix(&mut self, vectors: &[(u32, RawFd)]) -> Result<()>;
    /// Whether the daemon behind this transport is known to be gone (`Some(true)`) or known
    /// to be there (`Some(false)`); `None`: this path cannot tell, go by the heartbeat.
    fn daemon_gone(&mut self) -> Option<bool> {
        None
    }
    /// Close everything while the NI is being unplugged.
    fn release(self: Box<Self>) {}
    /// The daemon is known dead: nothing behind this transport will answer again.
    fn declare_dead(&mut self) {}
    /// Whether the NI's owner wants it back (a VMM unplugging the PCI function): `Some(why)`.
    /// The process must then let go of everything the device backs: its mappings and this
    /// transport.
    fn unplug_requested(&mut self) -> Option<String> {
        None
    }
    /// How waiting should give the CPU away on this path (see [`crate::Backoff`]).
    fn backoff(&self) -> crate::Backoff {
        crate::Backoff::Yield
    }
    /// Whether this process runs on the daemon's kernel (so a membarrier of its reaches
    /// every other member that runs there: `ni_abi::window::SLEEPING_MEMBARRIER`).
    fn on_daemon_kernel(&self) -> bool {
        false
    }
}
