//! Interrupt delivery: MSI-X vectors and INTx, as eventfds the client registered through
//! `SET_IRQS`.
//!
//! The client's eventfds are the only interrupt path: no MSI-X message and no INTx while Bus
//! Master Enable is clear (QEMU would drop the MSI-X write anyway), INTx only while MSI-X is
//! off and `INTx Disable` is clear, and the PCI status Interrupt bit follows the INTx level.
//!
//! Firing an interrupt never touches the client's eventfd: it sets the vector's bit in the
//! NI's [`Outbox`] and wakes the NI's own session thread, which signals the eventfds with no
//! lock held. A client can make its eventfd block a write (clear `O_NONBLOCK` on the shared
//! file description, fill the counter); then only its own session waits, and the daemon's
//! watchdog interrupts that write after [`STUCK_WRITE`] (`Outbox::kick_if_stuck`).

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

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

/// How long a session may sit in one eventfd write before the watchdog interrupts it.
pub const STUCK_WRITE: std::time::Duration = std::time::Duration::from_secs(1);
/// Outbox bit of INTx (MSI-X vectors use bits 0..16).
const INTX_BIT: u32 = 31;

/// Interrupts fired and not yet signalled, and the wake-up of the thread that signals them.
pub struct Outbox {
    pending: AtomicU32,
    /// Our own eventfd (non-blocking, never shared): readable while `pending` may be set.
    wake: File,
    /// Milliseconds since `epoch` at which the session entered an eventfd write (0: none).
    writing_since: AtomicU64,
    epoch: std::time::Instant,
    /// The session thread, for the watchdog's signal.
    thread: std::sync::Mutex<Option<libc::pthread_t>>,
}

impl Outbox {
    pub fn new() -> std::io::Result<Outbox> {
        // SAFETY: eventfd returns a new descriptor or -1, checked below.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Outbox {
            pending: AtomicU32::new(0),
            // SAFETY: fd is a fresh descriptor owned from here on.
            wake: unsafe { File::from_raw_fd(fd) },
            writing_since: AtomicU64::new(0),
            epoch: std::time::Instant::now(),
            thread: std::sync::Mutex::new(None),
        })
    }

    fn post(&self, bit: u32) {
        self.pending.fetch_or(1 << bit, Ordering::AcqRel);
        // Our own non-blocking eventfd: a full counter already means "look".
        let _ = (&self.wake).write(&1u64.to_ne_bytes());
    }

    /// What was fired and not yet signalled (for a handover; nothing is taken).
    pub fn pending(&self) -> u32 {
        self.pending.load(Ordering::Acquire)
    }

    /// Fire again what an earlier process of this daemon had not signalled yet.
    pub fn post_bits(&self, bits: u32) {
        for b in 0..32 {
            if bits & (1 << b) != 0 {
                self.post(b);
            }
        }
    }

    /// The descriptor the session thread polls beside its socket.
    pub fn wake_fd(&self) -> RawFd {
        self.wake.as_raw_fd()
    }

    /// Take what was fired since the last call (the session thread, when woken).
    pub fn take(&self) -> u32 {
        let mut b = [0u8; 8];
        let _ = (&self.wake).read(&mut b);
        self.pending.swap(0, Ordering::AcqRel)
    }

    /// The calling thread signals this outbox's eventfds from now on.
    pub fn bind_thread(&self) {
        // SAFETY: pthread_self has no preconditions.
        *self.thread.lock().unwrap_or_else(|e| e.into_inner()) =
            Some(unsafe { libc::pthread_self() });
    }

    /// Signal `targets` (from [`Irqs::targets`]) with no lock held. Called by the session
    /// thread only.
    pub fn signal_all(&self, targets: &[Arc<File>]) {
        for f in targets {
            let now = self.epoch.elapsed().as_millis() as u64 + 1;
            self.writing_since.store(now, Ordering::Release);
            signal(f);
            self.writing_since.store(0, Ordering::Release);
        }
    }

    /// The watchdog: a session stuck in an eventfd write longer than [`STUCK_WRITE`] gets a
    /// signal, so its write fails with EINTR and the session goes on (to notice its client
    /// left, say). Returns whether it kicked.
    pub fn kick_if_stuck(&self) -> bool {
        let since = self.writing_since.load(Ordering::Acquire);
        if since == 0 {
            return false;
        }
        let now = self.epoch.elapsed().as_millis() as u64 + 1;
        if now.saturating_sub(since) < STUCK_WRITE.as_millis() as u64 {
            return false;
        }
        if let Some(t) = *self.thread.lock().unwrap_or_else(|e| e.into_inner()) {
            // SAFETY: t is a live thread of this process (session threads never exit); the
            // signal's handler does nothing and is installed without SA_RESTART.
            unsafe { libc::pthread_kill(t, KICK_SIGNAL) };
        }
        true
    }
}

/// The watchdog's signal (see [`Outbox::kick_if_stuck`]).
pub const KICK_SIGNAL: libc::c_int = libc::SIGUSR1;

extern "C" fn ignore(_: libc::c_int) {}

/// Install the no-op handler of [`KICK_SIGNAL`], without SA_RESTART so that a blocked write
/// returns EINTR. Once per process.
pub fn install_kick_handler() {
    // SAFETY: a zeroed sigaction with a handler that does nothing (async-signal-safe).
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = ignore as *const () as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        sa.sa_flags = 0;
        libc::sigaction(KICK_SIGNAL, &sa, std::ptr::null_mut());
    }
}

/// [`Irqs`] as a handover carries it: descriptor numbers, kept open across the exec.
#[derive(Clone, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct IrqsImage {
    pub msix: Vec<Option<RawFd>>,
    pub intx: Option<RawFd>,
    pub intx_masked: bool,
    pub err: Option<RawFd>,
    pub req: Option<RawFd>,
}

/// Eventfds registered by the client, and INTx state.
pub struct Irqs {
    msix: Vec<Option<Arc<File>>>,
    intx: Option<Arc<File>>,
    intx_masked: bool,
    err: Option<Arc<File>>,
    req: Option<Arc<File>>,
    outbox: Arc<Outbox>,
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
/// comes, holding up the session thread that signals. Kernel VFIO's `eventfd_signal` never
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

fn signal(f: &File) {
    // A full counter means the client has not read what is already pending: the interrupt
    // is delivered as far as it can be. The descriptor is normally non-blocking (see
    // `nonblocking`); for one the client made blocking again, the poll keeps the write from
    // blocking but in a race the client must win against it, and the watchdog ends that.
    let mut pfd = libc::pollfd {
        fd: f.as_raw_fd(),
        events: libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: one valid pollfd, no waiting.
    let writable = unsafe { libc::poll(&mut pfd, 1, 0) } == 1 && pfd.revents & libc::POLLOUT != 0;
    if writable {
        let _ = (&*f).write(&1u64.to_ne_bytes());
    }
}

impl Irqs {
    pub fn new(outbox: Arc<Outbox>) -> Self {
        Irqs {
            msix: (0..vector::COUNT).map(|_| None).collect(),
            intx: None,
            intx_masked: false,
            err: None,
            req: None,
            outbox,
        }
    }

    /// Drop every eventfd (client gone, or reset).
    pub fn clear(&mut self) {
        // What was fired for the old eventfds is not the next client's.
        self.outbox.pending.store(0, Ordering::Release);
        *self = Irqs::new(self.outbox.clone());
    }

    /// The client's eventfds across a daemon handover (`crate::handover`).
    pub fn image(&self) -> IrqsImage {
        let fd = |f: &Option<Arc<File>>| f.as_ref().map(|f| f.as_raw_fd());
        IrqsImage {
            msix: self.msix.iter().map(fd).collect(),
            intx: fd(&self.intx),
            intx_masked: self.intx_masked,
            err: fd(&self.err),
            req: fd(&self.req),
        }
    }

    /// Take the eventfds an earlier daemon registered; `file` opens a handed-over descriptor.
    pub fn restore(
        &mut self,
        img: &IrqsImage,
        mut file: impl FnMut(RawFd) -> std::io::Result<File>,
    ) -> std::io::Result<()> {
        let mut get = |fd: Option<RawFd>| fd.map(&mut file).transpose().map(|f| f.map(Arc::new));
        for (v, fd) in img.msix.iter().enumerate().take(self.msix.len()) {
            self.msix[v] = get(*fd)?;
        }
        self.intx = get(img.intx)?;
        self.intx_masked = img.intx_masked;
        self.err = get(img.err)?;
        self.req = get(img.req)?;
        Ok(())
    }

    pub fn outbox(&self) -> &Arc<Outbox> {
        &self.outbox
    }

    /// The eventfds of the outbox bits in `bits`, for [`Outbox::signal_all`].
    pub fn targets(&self, bits: u32) -> Vec<Arc<File>> {
        let mut out = Vec::new();
        for (v, f) in self.msix.iter().enumerate() {
            if bits & (1 << v) != 0 {
                out.extend(f.clone());
            }
        }
        if bits & (1 << INTX_BIT) != 0 {
            out.extend(self.intx.clone());
        }
        out
    }

    pub fn msix_registered(&self, v: u16) -> bool {
        self.msix.get(v as usize).is_some_and(|f| f.is_some())
    }

    /// Fire MSI-X vector `v` if an eventfd is registered. Returns whether it was delivered.
    pub fn fire_msix(&mut self, v: u16) -> bool {
        match self.msix.get(v as usize).and_then(|f| f.as_ref()) {
            Some(_) => {
                self.outbox.post(v as u32);
                true
            }
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
            Some(_) => {
                self.outbox.post(INTX_BIT);
                self.intx_masked = true;
                true
            }
            None => false,
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
                        self.msix[v] = Some(Arc::new(f));
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
                        self.intx = Some(Arc::new(f));
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
                *slot = fds.into_iter().next().map(Arc::new);
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

    /// Irqs with a blocking eventfd on MSI-X vector 0; the client's copy of it.
    fn vector0() -> (Arc<Outbox>, Irqs, File) {
        let f = blocking_eventfd();
        let client = f.try_clone().unwrap();
        let outbox = Arc::new(Outbox::new().unwrap());
        let mut irqs = Irqs::new(outbox.clone());
        irqs.set_irqs(
            MSIX_IRQ_INDEX,
            VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER,
            0,
            1,
            vec![f],
        )
        .unwrap();
        (outbox, irqs, client)
    }

    #[test]
    fn a_full_eventfd_never_blocks_delivery() {
        let (outbox, mut irqs, client) = vector0();
        // The client fills its counter to the maximum: a blocking write would now wait.
        (&client).write_all(&(u64::MAX - 1).to_ne_bytes()).unwrap();
        let t = std::time::Instant::now();
        assert!(irqs.fire_msix(0));
        let bits = outbox.take();
        assert_eq!(bits, 1);
        outbox.signal_all(&irqs.targets(bits));
        assert!(
            t.elapsed() < std::time::Duration::from_secs(1),
            "a full counter means already pending"
        );
    }

    #[test]
    fn a_write_the_client_made_blocking_is_interrupted_by_the_watchdog() {
        install_kick_handler();
        let (outbox, mut irqs, client) = vector0();
        // The client clears O_NONBLOCK on the shared description again and fills the counter.
        // SAFETY: F_SETFL on a descriptor we own.
        unsafe { libc::fcntl(client.as_raw_fd(), libc::F_SETFL, 0) };
        (&client).write_all(&(u64::MAX - 1).to_ne_bytes()).unwrap();
        assert!(irqs.fire_msix(0), "firing only posts: it cannot block");
        let targets = irqs.targets(outbox.take());
        let session = {
            let outbox = outbox.clone();
            std::thread::spawn(move || {
                outbox.bind_thread();
                outbox.signal_all(&targets);
            })
        };
        let t = std::time::Instant::now();
        while !session.is_finished() {
            outbox.kick_if_stuck();
            assert!(
                t.elapsed() < STUCK_WRITE * 5,
                "the stuck write was never interrupted"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        session.join().unwrap();
    }
}
