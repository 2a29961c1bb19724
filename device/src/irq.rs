//! Interrupt delivery: MSI-X vectors and INTx, as eventfds the client registered through
//! `SET_IRQS`.
//!
//! The client's eventfds are the only interrupt path: no MSI-X message and no INTx while Bus
//! Master Enable is clear (QEMU would drop the MSI-X write anyway), INTx only while MSI-X is
//! off and `INTx Disable` is clear, and the PCI status Interrupt bit follows the INTx level.

use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;

use ni_abi::pci::{
    vector, ERR_IRQ_INDEX, INTX_IRQ_INDEX, MSIX_IRQ_INDEX, MSI_IRQ_INDEX, REQ_IRQ_INDEX,
};
use vfio_bindings::bindings::vfio::{
    VFIO_IRQ_SET_ACTION_MASK, VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_ACTION_UNMASK,
    VFIO_IRQ_SET_DATA_BOOL, VFIO_IRQ_SET_DATA_EVENTFD, VFIO_IRQ_SET_DATA_NONE,
};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum IrqError {
    #[error("SET_IRQS: unknown IRQ index {0}")]
    UnknownIndex(u32),
    #[error("SET_IRQS: vectors {start}..{end} exceed the {count} the index has")]
    OutOfRange { start: u32, end: u64, count: u32 },
    #[error("SET_IRQS: flags {0:#x} are not one data type and one action")]
    BadFlags(u32),
    #[error("SET_IRQS: {fds} file descriptors for {count} vectors")]
    FdCount { fds: usize, count: u32 },
    #[error("SET_IRQS: file descriptor is not an eventfd ({0})")]
    NotEventfd(String),
}

/// Eventfds registered by the client, and INTx state.
#[derive(Default)]
pub struct Irqs {
    msix: Vec<Option<File>>,
    intx: Option<File>,
    intx_masked: bool,
    err: Option<File>,
    req: Option<File>,
}

fn is_eventfd(f: &File) -> Result<(), IrqError> {
    let link = std::fs::read_link(format!("/proc/self/fd/{}", f.as_raw_fd()))
        .map(|p| p.display().to_string())
        .unwrap_or_else(|e| e.to_string());
    if link == "anon_inode:[eventfd]" {
        Ok(())
    } else {
        Err(IrqError::NotEventfd(link))
    }
}

/// Make a client's eventfd non-blocking before the device ever signals it. A client can
/// fill its own counter (2^64-2) so that a blocking write would wait for a read that never
/// comes, with the NI's and the fabric's locks held. Kernel VFIO's `eventfd_signal` never
/// blocks either; QEMU and libni create their eventfds non-blocking already, so for them
/// this changes nothing.
fn nonblocking(f: &File) -> Result<(), IrqError> {
    let fd = f.as_raw_fd();
    // SAFETY: F_GETFL/F_SETFL on a descriptor we own; no memory is passed.
    let ok = unsafe {
        let fl = libc::fcntl(fd, libc::F_GETFL);
        fl >= 0
            && (fl & libc::O_NONBLOCK != 0
                || libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK) == 0)
    };
    if ok {
        Ok(())
    } else {
        Err(IrqError::NotEventfd(format!(
            "cannot make it non-blocking: {}",
            std::io::Error::last_os_error()
        )))
    }
}

fn signal(f: &File) -> bool {
    // Non-blocking (see `nonblocking`): a full counter (EAGAIN) means the client has not
    // read what is already pending, so the interrupt is delivered as far as it can be.
    match (&*f).write(&1u64.to_ne_bytes()) {
        Ok(n) => n == 8,
        Err(e) => e.kind() == std::io::ErrorKind::WouldBlock,
    }
}

impl Irqs {
    pub fn new() -> Self {
        Irqs {
            msix: (0..vector::COUNT).map(|_| None).collect(),
            ..Default::default()
        }
    }

    /// Drop every eventfd (client gone, or reset).
    pub fn clear(&mut self) {
        *self = Irqs::new();
    }

    pub fn msix_registered(&self, v: u16) -> bool {
        self.msix.get(v as usize).is_some_and(|f| f.is_some())
    }

    /// Fire MSI-X vector `v` if an eventfd is registered. Returns whether it was delivered.
    pub fn fire_msix(&mut self, v: u16) -> bool {
        match self.msix.get(v as usize).and_then(|f| f.as_ref()) {
            Some(f) => signal(f),
            None => false,
        }
    }

    /// Signal an INTx assertion edge (VFIO INTx is level-triggered with automask: after a
    /// signal the line stays masked until the client unmasks it).
    pub fn fire_intx(&mut self) -> bool {
        if self.intx_masked {
            return false;
        }
        match &self.intx {
            Some(f) if signal(f) => {
                self.intx_masked = true;
                true
            }
            _ => false,
        }
    }

    /// Apply a `SET_IRQS` request. Returns the vectors that must be re-evaluated (newly
    /// registered MSI-X vectors, or `INTX_IRQ_INDEX` unmasked) so pending interrupts fire.
    pub fn set_irqs(
        &mut self,
        index: u32,
        flags: u32,
        start: u32,
        count: u32,
        fds: Vec<File>,
    ) -> Result<SetIrqsOutcome, IrqError> {
        let data =
            flags & (VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_DATA_BOOL | VFIO_IRQ_SET_DATA_EVENTFD);
        let action = flags
            & (VFIO_IRQ_SET_ACTION_MASK | VFIO_IRQ_SET_ACTION_UNMASK | VFIO_IRQ_SET_ACTION_TRIGGER);
        if data.count_ones() != 1 || action.count_ones() != 1 || flags & !(data | action) != 0 {
            return Err(IrqError::BadFlags(flags));
        }
        let max = match index {
            INTX_IRQ_INDEX => 1,
            MSIX_IRQ_INDEX => vector::COUNT as u32,
            ERR_IRQ_INDEX | REQ_IRQ_INDEX => 1,
            MSI_IRQ_INDEX => 0,
            other => return Err(IrqError::UnknownIndex(other)),
        };
        let end = start as u64 + count as u64;
        if end > max as u64 {
            // count == 0 with DATA_NONE|TRIGGER means "disable all": allowed anywhere.
            if !(count == 0 && data == VFIO_IRQ_SET_DATA_NONE) {
                return Err(IrqError::OutOfRange {
                    start,
                    end,
                    count: max,
                });
            }
        }
        if data == VFIO_IRQ_SET_DATA_EVENTFD {
            for f in &fds {
                is_eventfd(f)?;
                nonblocking(f)?;
            }
        }
        let mut out = SetIrqsOutcome::default();
        match (index, action, data) {
            (MSIX_IRQ_INDEX, VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_DATA_EVENTFD) => {
                if fds.is_empty() {
                    // De-assign: count vectors, no fds.
                    for v in start..start + count {
                        self.msix[v as usize] = None;
                    }
                } else if fds.len() as u32 == count {
                    for (i, f) in fds.into_iter().enumerate() {
                        let v = start as usize + i;
                        self.msix[v] = Some(f);
                        out.msix_assigned.push(v as u16);
                    }
                } else {
                    return Err(IrqError::FdCount {
                        fds: fds.len(),
                        count,
                    });
                }
            }
            (MSIX_IRQ_INDEX, VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_DATA_NONE) => {
                if count == 0 {
                    self.msix.iter_mut().for_each(|f| *f = None);
                } else {
                    // Loopback trigger, as VFIO defines it.
                    for v in start..start + count {
                        out.msix_triggered.push(v as u16);
                    }
                }
            }
            (INTX_IRQ_INDEX, VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_DATA_EVENTFD) => {
                match fds.into_iter().next() {
                    Some(f) => {
                        self.intx = Some(f);
                        self.intx_masked = false;
                        out.intx_reevaluate = true;
                    }
                    None => self.intx = None,
                }
            }
            (INTX_IRQ_INDEX, VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_DATA_NONE) => {
                if count == 0 {
                    self.intx = None;
                }
            }
            (INTX_IRQ_INDEX, VFIO_IRQ_SET_ACTION_MASK, _) => self.intx_masked = true,
            (INTX_IRQ_INDEX, VFIO_IRQ_SET_ACTION_UNMASK, _) => {
                // An UNMASK with an eventfd registers a resampler, which a model that
                // re-evaluates the level on unmask does not need.
                self.intx_masked = false;
                out.intx_reevaluate = true;
            }
            (
                ERR_IRQ_INDEX | REQ_IRQ_INDEX,
                VFIO_IRQ_SET_ACTION_TRIGGER,
                VFIO_IRQ_SET_DATA_EVENTFD,
            ) => {
                let slot = if index == ERR_IRQ_INDEX {
                    &mut self.err
                } else {
                    &mut self.req
                };
                *slot = fds.into_iter().next();
            }
            (
                ERR_IRQ_INDEX | REQ_IRQ_INDEX,
                VFIO_IRQ_SET_ACTION_TRIGGER,
                VFIO_IRQ_SET_DATA_NONE,
            ) if count == 0 => {
                if index == ERR_IRQ_INDEX {
                    self.err = None
                } else {
                    self.req = None
                }
            }
            (MSIX_IRQ_INDEX, _, _) => {
                // Per-vector masking is done in the MSI-X table; VFIO does not support
                // MASK/UNMASK on MSI-X either.
                return Err(IrqError::BadFlags(flags));
            }
            (_, VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_DATA_NONE) if count == 0 => {}
            _ => return Err(IrqError::BadFlags(flags)),
        }
        Ok(out)
    }
}

#[derive(Default, Debug)]
pub struct SetIrqsOutcome {
    pub msix_assigned: Vec<u16>,
    pub msix_triggered: Vec<u16>,
    pub intx_reevaluate: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::FromRawFd;

    fn blocking_eventfd() -> File {
        // SAFETY: eventfd returns a new descriptor or -1, checked below.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        assert!(fd >= 0);
        // SAFETY: fd is a fresh descriptor owned from here on.
        unsafe { File::from_raw_fd(fd) }
    }

    #[test]
    fn a_full_eventfd_never_blocks_delivery() {
        let f = blocking_eventfd();
        let client = f.try_clone().unwrap();
        let mut irqs = Irqs::new();
        irqs.set_irqs(
            MSIX_IRQ_INDEX,
            VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER,
            0,
            1,
            vec![f],
        )
        .unwrap();
        // The client fills its counter to the maximum: a blocking write would now wait.
        (&client).write_all(&(u64::MAX - 1).to_ne_bytes()).unwrap();
        let t = std::time::Instant::now();
        assert!(irqs.fire_msix(0), "a full counter means already pending");
        assert!(t.elapsed() < std::time::Duration::from_secs(1));
    }
}
