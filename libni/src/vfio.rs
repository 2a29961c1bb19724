//! The guest path: drive an NI that is a PCI function of this (virtual) machine through the
//! kernel's VFIO — kernel bypass, as the host path is through vfio-user.
//!
//! The NI is found by its PCI IDs in `/sys/bus/pci/devices` (or named by `NI_PCI`, e.g.
//! `NI_PCI=0000:01:00.0`), bound to `vfio-pci` if it is not already (`driver_override` +
//! `drivers_probe`), and opened through the container/group API (`vfio-ioctls`; Debian
//! kernels have neither no-IOMMU mode nor iommufd, so a vIOMMU is required: QEMU
//! `-device intel-iommu,intremap=on,caching-mode=on`, guest `intel_iommu=on`).
//!
//! - SRAM: BAR0's first 8 MiB, mmapped through the device file descriptor at the region's
//!   offset (QEMU maps the same pages from the daemon's memfd, so stores never trap),
//!   cleared and the function reset at attach, so each process starts from a fresh SRAM
//!   as a host process does (see [`Device::fresh_sram`]).
//! - Trapped registers and config space: `pread`/`pwrite` on the device file descriptor.
//! - DMA: `VFIO_IOMMU_MAP_DMA` with IOVA = the buffer's address in this process, so a
//!   request names its buffers exactly as on the host path.
//! - MSI-X: one eventfd per vector through `VFIO_DEVICE_SET_IRQS`; the kernel programs the
//!   capability and the table itself.
//! - Hot-unplug: vfio-pci's device request (`VFIO_PCI_REQ_IRQ_INDEX`) is an eventfd too. When
//!   the VMM unplugs the function the kernel signals it and waits for every descriptor and
//!   mapping of the device to go; libni's waits look at it with the daemon's heartbeat, then
//!   let go of everything and fail with `Error::Unplugged`.

use std::fs::{self, File};
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use vfio_ioctls::{VfioContainer, VfioDevice, VfioError, VfioOps};
use vmm_sys_util::eventfd::EventFd;

use crate::mem::Mem;
use crate::transport::Transport;
use crate::{Error, Result};

const SYSFS_DEVICES: &str = "/sys/bus/pci/devices";
const VFIO_PCI_DRIVER: &str = "/sys/bus/pci/drivers/vfio-pci";
/// `VFIO_REGION_INFO_FLAG_MMAP`.
const REGION_MMAP: u32 = 1 << 2;
/// `VFIO_PCI_REQ_IRQ_INDEX`: the device request (the kernel wants the device back).
const VFIO_PCI_REQ_IRQ_INDEX: u32 = 4;

/// An NI opened through VFIO. Fields drop in order: the eventfds and the doorbell's page, then the device (which
/// releases its group), then the container (which drops every DMA mapping).
pub struct Device {
    irq_fds: Vec<EventFd>,
    /// vfio-pci's device request: signalled when the kernel wants the function back (PCI
    /// hot-unplug) and waits for every descriptor and mapping of it to be released.
    req: Option<EventFd>,
    /// BAR0's trapped fast-path page, mapped: a store to `DOORBELL` traps from user space
    /// straight to the VMM (a posted vfio-user write) instead of a `pwrite` system call
    /// into vfio-pci first, which costs a guest under TCG ~170 µs more. Mapped on first use;
    /// `None` after a failed try (then `pwrite`).
    doorbell: Option<Option<Mem>>,
    device: VfioDevice,
    container: Arc<VfioContainer>,
    addr: String,
}

fn read_trim(p: &Path) -> Option<String> {
    fs::read_to_string(p).ok().map(|s| s.trim().to_string())
}

fn is_ni(dev: &Path) -> bool {
    let id = |f: &str| {
        read_trim(&dev.join(f))
            .and_then(|s| u16::from_str_radix(s.trim_start_matches("0x"), 16).ok())
    };
    id("vendor") == Some(ni_abi::pci::VENDOR_ID) && id("device") == Some(ni_abi::pci::DEVICE_ID)
}

/// The PCI addresses of every NI function in this machine, sorted.
pub fn list() -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(SYSFS_DEVICES)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter(|e| is_ni(&e.path()))
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// The NI to use: `NI_PCI` if set, else the first NI function found. `None` when this
/// machine has no NI (a host without `NI_SOCKET`, or a guest booted without one).
pub fn find() -> Option<String> {
    if let Some(a) = std::env::var_os("NI_PCI") {
        return Some(a.to_string_lossy().into_owned());
    }
    list().into_iter().next()
}

fn driver_of(dev: &Path) -> Option<String> {
    fs::read_link(dev.join("driver"))
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
}

fn sysfs_write(path: &Path, value: &str) -> std::io::Result<()> {
    fs::write(path, value)
}

impl Device {
    /// Open the NI at PCI address `addr` (`0000:01:00.0`), binding it to `vfio-pci` first
    /// if needed.
    pub fn open(addr: &str) -> Result<Device> {
        let fail = |reason: String| Error::Attach {
            path: format!("PCI {addr}"),
            reason,
        };
        let dev = PathBuf::from(SYSFS_DEVICES).join(addr);
        if !dev.exists() {
            let found = list();
            return Err(fail(format!(
                "no such PCI device in {SYSFS_DEVICES}; NI functions here: {}",
                if found.is_empty() {
                    "none".to_string()
                } else {
                    found.join(", ")
                }
            )));
        }
        if !is_ni(&dev) {
            return Err(fail(format!(
                "not an NI (vendor:device is not {:04x}:{:04x})",
                ni_abi::pci::VENDOR_ID,
                ni_abi::pci::DEVICE_ID
            )));
        }
        // `declare_dead` turned this function's resets off: its daemon died, and opening it
        // would only fail slowly (and hold up the unplug that replaces it).
        if read_trim(&dev.join("reset_method")).is_some_and(|m| m.is_empty()) {
            return Err(fail(
                "its daemon died (libni turned the function's resets off then): the VMM must \
                 re-plug it (QMP device_del, then device_add of the same socket once ni-device \
                 runs again; qemu-patches/README.md)"
                    .into(),
            ));
        }
        let group = fs::read_link(dev.join("iommu_group"))
            .ok()
            .and_then(|g| g.file_name().map(|n| n.to_string_lossy().into_owned()))
            .ok_or_else(|| {
                fail(
                    "it has no IOMMU group: VFIO needs an IOMMU. Boot the guest with a vIOMMU \
                     (QEMU: -M q35,kernel-irqchip=split -device intel-iommu,intremap=on,\
                     caching-mode=on before the NI) and intel_iommu=on on its kernel command line"
                        .into(),
                )
            })?;
        if !Path::new("/dev/vfio/vfio").exists() {
            return Err(fail(
                "/dev/vfio/vfio does not exist: load the VFIO modules (modprobe vfio-pci, or \
                 insmod irqbypass vfio vfio_iommu_type1 vfio-pci-core vfio-pci)"
                    .into(),
            ));
        }
        match driver_of(&dev) {
            Some(d) if d == "vfio-pci" => {}
            current => {
                if !Path::new(VFIO_PCI_DRIVER).exists() {
                    return Err(fail(
                        "the vfio-pci driver is not loaded (modprobe vfio-pci)".into(),
                    ));
                }
                sysfs_write(&dev.join("driver_override"), "vfio-pci").map_err(|e| {
                    fail(format!(
                        "binding to vfio-pci: writing {}/driver_override: {e} (needs root)",
                        dev.display()
                    ))
                })?;
                if let Some(other) = &current {
                    sysfs_write(&dev.join("driver/unbind"), addr)
                        .map_err(|e| fail(format!("unbinding it from driver {other}: {e}")))?;
                }
                // drivers_probe reports an error when no driver takes the device; what counts
                // is the driver afterwards.
                let probe = sysfs_write(Path::new("/sys/bus/pci/drivers_probe"), addr);
                match driver_of(&dev) {
                    Some(d) if d == "vfio-pci" => {}
                    now => {
                        return Err(fail(format!(
                            "it is not bound to vfio-pci after driver_override + drivers_probe \
                             (driver: {}; drivers_probe: {}); see dmesg",
                            now.as_deref().unwrap_or("none"),
                            match probe {
                                Ok(()) => "ok".to_string(),
                                Err(e) => e.to_string(),
                            }
                        )))
                    }
                }
            }
        }
        let group_dev = Path::new("/dev/vfio").join(&group);
        if !group_dev.exists() {
            return Err(fail(format!(
                "{} does not exist although the NI is bound to vfio-pci (IOMMU group {group})",
                group_dev.display()
            )));
        }
        let explain = |what: &str, e: VfioError| {
            let hint = match &e {
                VfioError::GroupViable => format!(
                    " (every device in IOMMU group {group} must be bound to vfio-pci or to no driver)"
                ),
                VfioError::OpenGroup(..) | VfioError::GroupSetContainer | VfioError::GroupGetDeviceFD(_) => {
                    " (is another process of this machine using the NI?)".to_string()
                }
                _ => String::new(),
            };
            let mut s = format!("{what}: {e}{hint}");
            let mut src = std::error::Error::source(&e);
            while let Some(c) = src {
                s.push_str(&format!(": {c}"));
                src = c.source();
            }
            fail(s)
        };
        let container = Arc::new(
            VfioContainer::new(None).map_err(|e| explain("opening the VFIO container", e))?,
        );
        let ops: Arc<dyn VfioOps> = container.clone();
        let device = VfioDevice::new(&dev, ops, false)
            .map_err(|e| explain(&format!("opening the VFIO device (group {group})"), e))?;
        // Without a request channel the kernel blocks the unplug ("No device request channel
        // registered") until the process exits.
        let req = match device.get_irq_info(VFIO_PCI_REQ_IRQ_INDEX) {
            Some(i) if i.count >= 1 => {
                let ev = EventFd::new(libc::EFD_CLOEXEC | libc::EFD_NONBLOCK)
                    .map_err(|e| fail(format!("eventfd: {e}")))?;
                device
                    .enable_irq(VFIO_PCI_REQ_IRQ_INDEX, vec![&ev])
                    .map_err(|e| explain("SET_IRQS for the device request", e))?;
                Some(ev)
            }
            _ => None,
        };
        Ok(Device {
            irq_fds: Vec::new(),
            req,
            device,
            container,
            addr: addr.to_string(),
            doorbell: None,
        })
    }

    /// Give this process the fresh SRAM a host process gets with each connection. A guest's
    /// NI keeps its SRAM for as long as the guest's QEMU stays connected, so the previous
    /// process's rings and data would still be there (and its submission-ring tail, which
    /// the device resynchronises on). Wait for the device to have republished the control
    /// page after the reset vfio-pci did when the device was opened, clear all of SRAM, and
    /// reset the function once more: the device then publishes a new control page (with a new
    /// epoch) into the cleared SRAM, which `Ni::attach` waits for.
    fn fresh_sram(&mut self, sram: &Mem) -> Result<()> {
        use ni_abi::fastpath::ctrl;
        // SAFETY: inside the SRAM mapping, 4-aligned; the device writes it atomically.
        let magic = unsafe { &*(sram.ptr().add(ctrl::MAGIC as usize) as *const AtomicU32) };
        let t = Instant::now();
        while magic.load(Ordering::Acquire) != ctrl::MAGIC_VALUE {
            if let Some(what) = self.unplug_requested() {
                return Err(Error::Unplugged(what));
            }
            if t.elapsed() > Duration::from_secs(10) {
                return Err(self.err("the device never published its fast path".into()));
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        // SAFETY: the whole mapping is ours to write; nothing else in this process holds a
        // reference into it yet, and the device only polls it.
        unsafe { std::ptr::write_bytes(sram.ptr(), 0, sram.len()) };
        // VFIO_DEVICE_RESET = _IO(VFIO_TYPE ';', VFIO_BASE 100 + 11).
        const VFIO_DEVICE_RESET: libc::c_ulong = (b';' as libc::c_ulong) << 8 | (100 + 11);
        // SAFETY: an argument-less ioctl on the device descriptor we hold.
        if unsafe { libc::ioctl(self.device.as_raw_fd(), VFIO_DEVICE_RESET) } != 0 {
            return Err(self.err(format!(
                "VFIO_DEVICE_RESET: {} (the NI must support function-level reset)",
                std::io::Error::last_os_error()
            )));
        }
        Ok(())
    }

    fn err(&self, what: String) -> Error {
        Error::Device(format!("VFIO {}: {what}", self.addr))
    }

    /// The file offset of `region` + `offset`, if `len` bytes fit in the region.
    fn locate(&self, region: u32, offset: u64, len: usize) -> Result<u64> {
        let size = self.device.get_region_size(region);
        if offset.checked_add(len as u64).is_none_or(|end| end > size) {
            return Err(self.err(format!(
                "access of {len} bytes at {offset:#x} is outside region {region} ({size:#x} bytes)"
            )));
        }
        Ok(self.device.get_region_offset(region) + offset)
    }
}

impl Transport for Device {
    /// In a guest, yielding keeps the vCPU busy on the host, where the device's poller needs
    /// the core: sleeping lets the vCPU halt.
    fn backoff(&self) -> crate::Backoff {
        crate::Backoff::Sleep
    }

    /// A dead daemon leaves a function whose config space only fails, and vfio-pci resets
    /// the function when the device is closed: a reset then waits 60 s for a device that
    /// never becomes ready ("not ready 65535ms after FLR; giving up"), holding a re-plug up
    /// as long, while QEMU logs every failed config access. So turn this function's resets
    /// off (its sysfs `reset_method`); a re-plugged NI is a new function with its own.
    fn declare_dead(&mut self) {
        let path = Path::new(SYSFS_DEVICES)
            .join(&self.addr)
            .join("reset_method");
        // Best effort: without it (not root, an old kernel) the close is only slower.
        // "\n", not "": an empty write never reaches the attribute.
        let _ = sysfs_write(&path, "\n");
    }

    /// Under an unplug, the function (and its sysfs directory) goes as soon as its last
    /// descriptor closes; `VfioDevice`'s drop closes its descriptor, then reads that directory
    /// to find its group, and panics when it is gone. So a second descriptor keeps the
    /// function until the drop is over. (Its group then cannot leave the container while the
    /// device is open, so the container's own drop closes it.)
    fn release(self: Box<Self>) {
        // SAFETY: dup of the device descriptor we hold; checked, and owned by `hold`.
        let fd = unsafe { libc::dup(self.device.as_raw_fd()) };
        // SAFETY: fd is a fresh descriptor we own (when the dup worked).
        let hold = (fd >= 0).then(|| unsafe { File::from_raw_fd(fd) });
        drop(self);
        drop(hold);
    }

    fn unplug_requested(&mut self) -> Option<String> {
        // A nonblocking read: the counter is non-zero once the kernel asked.
        self.req
            .as_ref()
            .and_then(|ev| ev.read().ok())
            .map(|_| self.addr.clone())
    }

    fn map_sram(&mut self) -> Result<Mem> {
        let bar0 = ni_abi::pci::BAR0_REGION;
        let size = self.device.get_region_size(bar0);
        if size == 0 {
            // vfio-pci reports an unassigned BAR as empty: the device is an NI (its IDs
            // matched), the guest kernel found no address room for it.
            return Err(self.err(format!(
                "BAR0 is not assigned (0 bytes): the guest kernel gave the NI no address \
                 window for its {} MiB BAR0; a hot-plugged NI needs room reserved on its \
                 PCIe root port (QEMU: -device pcie-root-port,...,mem-reserve=256M)",
                ni_abi::lanai::BAR0_SIZE >> 20
            )));
        }
        if size != ni_abi::lanai::BAR0_SIZE {
            return Err(self.err(format!("BAR0 is {size:#x} bytes: not an NI")));
        }
        if self.device.get_region_flags(bar0) & REGION_MMAP == 0 {
            return Err(self.err("BAR0 cannot be mmapped through vfio-pci".into()));
        }
        // SAFETY: dup of the device descriptor we hold; the result is checked and owned.
        let fd = unsafe { libc::dup(self.device.as_raw_fd()) };
        if fd < 0 {
            return Err(self.err(format!("dup: {}", std::io::Error::last_os_error())));
        }
        // SAFETY: fd is a fresh descriptor we own.
        let file = unsafe { File::from_raw_fd(fd) };
        let sram = Mem::map_fd(
            file,
            self.device.get_region_offset(bar0),
            ni_abi::lanai::SRAM_SIZE as usize,
        )?;
        self.fresh_sram(&sram)?;
        Ok(sram)
    }

    fn map_window(&mut self, rank: u32) -> Result<Option<Mem>> {
        use ni_abi::window::{self as w, WINDOW_OFFSET, WINDOW_SIZE};
        let (bar3, bar4) = (ni_abi::pci::BAR3_REGION, ni_abi::pci::BAR4_REGION);
        if self.device.get_region_size(bar4) < WINDOW_OFFSET + WINDOW_SIZE
            || self.device.get_region_flags(bar4) & REGION_MMAP == 0
        {
            return Ok(None);
        }
        if self.device.get_region_size(bar3) < w::ZONE_SIZE
            || self.device.get_region_flags(bar3) & REGION_MMAP == 0
        {
            return Err(self.err(format!(
                "BAR4 shows a partition window but BAR3 offers no mappable zone for rank {rank}"
            )));
        }
        let dup = |this: &Self| {
            // SAFETY: dup of the device descriptor we hold; the result is checked and owned.
            let fd = unsafe { libc::dup(this.device.as_raw_fd()) };
            if fd < 0 {
                return Err(this.err(format!("dup: {}", std::io::Error::last_os_error())));
            }
            // SAFETY: fd is a fresh descriptor we own.
            Ok(unsafe { File::from_raw_fd(fd) })
        };
        // The window read-only from BAR4 (the VMM maps it so: a store there would fault in
        // the VMM, not reach a peer), this member's zone read-write from BAR3 over its place.
        let parts = vec![
            crate::mem::Part {
                fd: dup(self)?,
                file_offset: self.device.get_region_offset(bar4) + WINDOW_OFFSET,
                at: 0,
                len: WINDOW_SIZE,
                writable: false,
            },
            crate::mem::Part {
                fd: dup(self)?,
                file_offset: self.device.get_region_offset(bar3),
                at: w::zone(rank),
                len: w::ZONE_SIZE,
                writable: true,
            },
        ];
        // A kernel that will not map these parts of the BARs leaves the fabric path.
        Ok(Mem::compose(WINDOW_SIZE as usize, parts).ok())
    }

    fn region_read(&mut self, region: u32, offset: u64, data: &mut [u8]) -> Result<()> {
        let at = self.locate(region, offset, data.len())?;
        // SAFETY: pread into a buffer of exactly data.len() bytes we borrow mutably.
        let n = unsafe {
            libc::pread(
                self.device.as_raw_fd(),
                data.as_mut_ptr() as *mut libc::c_void,
                data.len(),
                at as libc::off_t,
            )
        };
        if n != data.len() as isize {
            return Err(self.err(format!(
                "read of {} bytes at {offset:#x} in region {region}: {}",
                data.len(),
                if n < 0 {
                    std::io::Error::last_os_error().to_string()
                } else {
                    format!("short read ({n})")
                }
            )));
        }
        Ok(())
    }

    fn ring_doorbell(&mut self) -> Result<()> {
        use ni_abi::fastpath::regs as fp;
        if self.doorbell.is_none() {
            let bar0 = ni_abi::pci::BAR0_REGION;
            // SAFETY: dup of the device descriptor we hold; the result is checked and owned.
            let fd = unsafe { libc::dup(self.device.as_raw_fd()) };
            let page = (fd >= 0 && self.device.get_region_flags(bar0) & REGION_MMAP != 0)
                .then(|| {
                    // SAFETY: fd is a fresh descriptor we own.
                    let file = unsafe { File::from_raw_fd(fd) };
                    Mem::map_fd(file, self.device.get_region_offset(bar0) + fp::PAGE, 4096).ok()
                })
                .flatten();
            self.doorbell = Some(page);
        }
        match self.doorbell.as_ref().and_then(|m| m.as_ref()) {
            Some(page) => {
                // SAFETY: DOORBELL is inside the mapped 4 KiB page and 4-aligned; a volatile
                // store is one MMIO write of 4 bytes.
                unsafe {
                    std::ptr::write_volatile(page.ptr().add(fp::DOORBELL as usize) as *mut u32, 1)
                };
                Ok(())
            }
            None => self.region_write(
                ni_abi::pci::BAR0_REGION,
                fp::PAGE + fp::DOORBELL,
                &1u32.to_le_bytes(),
            ),
        }
    }

    fn region_write(&mut self, region: u32, offset: u64, data: &[u8]) -> Result<()> {
        let at = self.locate(region, offset, data.len())?;
        // SAFETY: pwrite from a buffer of exactly data.len() bytes we borrow.
        let n = unsafe {
            libc::pwrite(
                self.device.as_raw_fd(),
                data.as_ptr() as *const libc::c_void,
                data.len(),
                at as libc::off_t,
            )
        };
        if n != data.len() as isize {
            return Err(self.err(format!(
                "write of {} bytes at {offset:#x} in region {region}: {}",
                data.len(),
                if n < 0 {
                    std::io::Error::last_os_error().to_string()
                } else {
                    format!("short write ({n})")
                }
            )));
        }
        Ok(())
    }

    fn dma_map(&mut self, mem: &Mem) -> Result<()> {
        // SAFETY: `mem` is a shared mapping libni owns for as long as it is DMA-mapped
        // (libni unmaps it from the IOMMU before dropping it, and dropping the container
        // drops every mapping); libni touches it only through raw-pointer copies and atomics,
        // never through Rust references the device could race with.
        unsafe {
            self.container
                .vfio_dma_map(mem.iova(), mem.len(), mem.ptr())
        }
        .map_err(|e| {
            self.err(format!(
                "MAP_DMA of {} bytes at {:#x}: {e}",
                mem.len(),
                mem.iova()
            ))
        })
    }

    fn dma_unmap(&mut self, iova: u64, len: u64) -> Result<()> {
        self.container
            .vfio_dma_unmap(iova, len as usize)
            .map_err(|e| self.err(format!("UNMAP_DMA of {len} bytes at {iova:#x}: {e}")))
    }

    /// VFIO takes one contiguous set of vectors from 0: vectors nobody asked for get an
    /// eventfd of their own that nobody reads. The kernel sets the MSI-X enable bit and
    /// programs the table itself.
    fn enable_msix(&mut self, vectors: &[(u32, RawFd)]) -> Result<()> {
        let Some(max) = vectors.iter().map(|&(v, _)| v).max() else {
            return Ok(());
        };
        let count = self
            .device
            .get_irq_info(ni_abi::pci::MSIX_IRQ_INDEX)
            .map(|i| i.count)
            .unwrap_or(0);
        if max >= count {
            return Err(self.err(format!(
                "MSI-X vector {max} requested, the device has {count}"
            )));
        }
        let mut fds = Vec::with_capacity(max as usize + 1);
        for v in 0..=max {
            let ev = match vectors.iter().find(|&&(w, _)| w == v) {
                Some(&(_, fd)) => {
                    // SAFETY: dup of a descriptor the caller keeps open for this call.
                    let d = unsafe { libc::dup(fd) };
                    if d < 0 {
                        return Err(self.err(format!("dup: {}", std::io::Error::last_os_error())));
                    }
                    // SAFETY: d is a fresh duplicate of an eventfd, owned from here on.
                    unsafe { EventFd::from_raw_fd(d) }
                }
                None => EventFd::new(libc::EFD_CLOEXEC | libc::EFD_NONBLOCK)
                    .map_err(|e| self.err(format!("eventfd: {e}")))?,
            };
            fds.push(ev);
        }
        self.device
            .enable_msix(fds.iter().collect())
            .map_err(|e| self.err(format!("SET_IRQS for MSI-X vectors 0..={max}: {e}")))?;
        self.irq_fds = fds;
        Ok(())
    }
}
