//! libni: drive an NI from user space — send/receive, one-sided put/get, T3E message queues,
//! active messages — with no system call and no trapped register access in steady state.
//!
//! A process attaches to one NI of an `ni-device` daemon (host mode: the vfio-user socket
//! named by `NI_SOCKET`, as `nirun` sets it). Memory the NI may touch is allocated with
//! [`Ni::alloc`]: a memfd mapped into the process and into the NI (DMA_MAP, IOVA = its
//! address here), registered under a key peers can name. Requests go into a ring in the NI's
//! SRAM; completions come back into a ring in the process's memory; the NI copies payloads
//! straight from the sender's region into the receiver's. See `device/abi/fastpath.md`.
//!
//! ```no_run
//! use ni::Ni; // the libni package's library is `ni` (libni.so, libni.a)
//! # fn main() -> Result<(), ni::Error> {
//! let ni = Ni::attach()?; // NI_SOCKET=/run/dir/ni0.sock
//! let buf = ni.alloc(4096)?;
//! if ni.rank() == 0 {
//!     buf.write_at(0, b"hello");
//!     ni.send(1, &buf, 0..5, 7)?;
//! } else if ni.rank() == 1 {
//!     let st = ni.recv(Some(0), &buf, 0..4096, 7, u64::MAX)?;
//!     let mut msg = vec![0; st.len as usize];
//!     buf.read_at(0, &mut msg);
//!     assert_eq!(msg, b"hello");
//! }
//! # Ok(()) }
//! ```
//!
//! Keys are handed out in allocation order from 1, so processes of one program that allocate
//! the same regions in the same order know each other's keys (a symmetric heap, as in SHMEM).

pub mod capi;
mod direct;
pub mod idmap;
mod large;
mod lock;
mod mem;
mod membarrier;
mod tick;
mod transport;
mod vfio;
mod vfio_user;
mod window;

use std::collections::{BTreeMap, VecDeque};

pub use idmap::{IdMap, IdSet};
/// The lock an `Ni` takes, biased toward the one thread that uses it (no atomic
/// read-modify-write, so no fence, while only that thread locks); the libfabric provider
/// guards its endpoints and queues with it too.
pub use lock::{NiGuard, NiLock};
use std::fs::File;
use std::io::Read;
use std::ops::Range;
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::path::Path;
use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use ni_abi::fastpath::{
    access, ctrl, mqcw, op, regs as fp, Completion, AM_HEADER, AM_MAX_PAYLOAD, AM_SLOT, ANY_RANK,
    COMPLETION_SEQ, ENTRY_SIZE, MQ_MESSAGE, SQ_ENTRIES, SQ_OFFSET,
};
use ni_abi::pci;

use mem::Mem;
pub use ni_abi::fastpath::op as opcode;
pub use ni_abi::fastpath::{Request, Status};
use tick::{time_stamp, Tick};
use transport::Transport;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("NI_SOCKET is not set: run under nirun, or set it to an NI's socket (e.g. /tmp/ni/ni0.sock)")]
    NoSocket,
    #[error("cannot attach to the NI at {path}: {reason}")]
    Attach { path: String, reason: String },
    #[error("the NI at {0} is busy: another process is attached to it (one process per NI; the daemon did not answer within 5 s)")]
    Busy(String),
    #[error("NI device: {0}")]
    Device(String),
    #[error("{op} to/from rank {rank}: {}{}", .status.describe(), truncation(*.status, *.len, *.tag))]
    Failed {
        op: &'static str,
        status: Status,
        rank: u32,
        /// What the NI's completion reported: for a truncated receive
        /// (`Status::Truncated`), the sender's full message length.
        len: u64,
        /// For a truncated receive, the message's tag.
        tag: u64,
    },
    #[error("would block: the submission ring is full; call progress() and retry")]
    WouldBlock,
    #[error("bad argument: {0}")]
    BadArgument(String),
    #[error("allocating registered memory: {0}")]
    Memory(String),
    #[error("the NI was reset (by the administrator or a device reset): attach again")]
    Reset,
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    #[error("the NI's daemon is gone ({0}): restart ni-device, then attach again")]
    DaemonGone(String),
    #[error("the NI {0} was unplugged: its VMM asked for the PCI function back (hot-unplug) and this process let go of it; attach again once it is plugged back in")]
    Unplugged(String),
}

pub type Result<T> = std::result::Result<T, Error>;

/// The detail `Error::Failed` adds for a truncated receive.
fn truncation(status: Status, len: u64, tag: u64) -> String {
    if status == Status::Truncated {
        format!(" (the message has {len} bytes, tag {tag})")
    } else {
        String::new()
    }
}

fn op_name(opcode: u8) -> &'static str {
    match opcode {
        op::SEND => "send",
        op::RECV => "recv",
        op::PUT => "put",
        op::GET => "get",
        op::ROP => "active message",
        op::NOOP => "ping",
        op::RESET => "reset",
        op::MQ_SEND => "message-queue send",
        op::REG_MR => "register",
        op::CQ_SETUP => "completion ring setup",
        op::AM_SETUP => "active-message ring setup",
        op::COMBINE => "combine",
        op::COLLECTIVE => "collective",
        op::SYNC_GLOBAL => "sync global",
        op::COM_FLUSH => "combine flush",
        op::COM_CONTROL => "participation change",
        _ => "request",
    }
}

/// How a finished operation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Done {
    pub status: Status,
    /// The peer's rank (the source, for a receive).
    pub rank: u32,
    /// Message length (for a receive: the sender's length, even if truncated).
    pub len: u64,
    pub tag: u64,
    /// Message-queue send: Tail after the store. Ping: 1 if the peer is up.
    pub aux: u64,
}

/// Messages [`Ni::drain_taking`] copied out of the window's rings: each its sender, its tag
/// and its payload, in the order taken. Kept and [`Taken::clear`]ed by its owner, so the
/// bytes' buffer is allocated once.
#[derive(Debug, Default)]
pub struct Taken {
    bytes: Vec<u8>,
    /// (sender, tag, end of its payload in `bytes`), the start being the previous one's end.
    msgs: Vec<(u32, u64, usize)>,
}

impl Taken {
    pub fn len(&self) -> usize {
        self.msgs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.msgs.is_empty()
    }

    /// Message `i`: its sender, tag and payload.
    pub fn get(&self, i: usize) -> (u32, u64, &[u8]) {
        let start = if i == 0 { 0 } else { self.msgs[i - 1].2 };
        let (src, tag, end) = self.msgs[i];
        (src, tag, &self.bytes[start..end])
    }

    pub fn clear(&mut self) {
        self.bytes.clear();
        self.msgs.clear();
    }

    /// Room for one more message of `len` bytes from `src` tagged `tag`.
    fn push(&mut self, src: u32, tag: u64, len: usize) -> &mut [u8] {
        let start = self.bytes.len();
        self.bytes.resize(start + len, 0);
        self.msgs.push((src, tag, start + len));
        &mut self.bytes[start..]
    }
}

/// A [`Ni::drain_taking`] in progress: which tags it takes, and where to.
#[derive(Debug)]
pub(crate) struct Taking {
    tag: u64,
    mask: u64,
    pub taken: Taken,
}

impl Taking {
    /// Whether a message tagged `tag` is taken.
    #[inline]
    pub fn wants(&self, tag: u64) -> bool {
        direct::tag_matches(tag, self.tag, self.mask)
    }

    pub fn push(&mut self, src: u32, tag: u64, len: usize) -> &mut [u8] {
        self.taken.push(src, tag, len)
    }
}

/// A pending non-blocking operation; finish it with [`Ni::wait`] or [`Ni::test`].
#[derive(Debug)]
#[must_use = "an operation must be waited for or tested"]
pub struct Op {
    user: u64,
    opcode: u8,
    rank: u32,
    /// How it ended, when it ended inside the call that started it (an eager send into the
    /// window, a receive of a message that was already there): `wait` and `test` then
    /// answer without taking the NI's lock, and [`Ni::drain`] never reports it. A `Done`
    /// (32 bytes), not the completion (64): an `Op` moves by value several times a message.
    early: std::cell::Cell<Option<Done>>,
}

impl Op {
    fn new(user: u64, opcode: u8, rank: u32) -> Op {
        Op {
            user,
            opcode,
            rank,
            early: std::cell::Cell::new(None),
        }
    }

    /// An operation started under `i`'s lock: if it already ended, it takes its completion
    /// out of the finished ones, so that nothing needs the lock again to finish it.
    fn started(i: &mut Inner, user: u64, opcode: u8, rank: u32) -> Op {
        let op = Op::new(user, opcode, rank);
        op.early.set(i.done.remove(user).map(|c| done_of(&c)));
        op
    }

    /// An operation that ended in the call that started it, `done`.
    fn ended(user: u64, opcode: u8, rank: u32, done: Done) -> Op {
        let op = Op::new(user, opcode, rank);
        op.early.set(Some(done));
        op
    }

    /// An operation started on the direct path (`Started`): done already, or as
    /// [`Op::started`].
    fn from_direct(i: &mut Inner, s: direct::Started, opcode: u8, rank: u32) -> Op {
        match s.now {
            Some(d) => Op::ended(s.user, opcode, rank, d),
            None => Op::started(i, s.user, opcode, rank),
        }
    }

    /// The operation's id, as [`Ni::drain`] reports it: unique among this `Ni`'s pending
    /// operations.
    pub fn id(&self) -> u64 {
        self.user
    }

    /// Whether it ended inside the call that started it: [`Ni::wait`] and [`Ni::test`]
    /// return its result at once, and [`Ni::drain`] does not report it (a caller that
    /// tracks operations by `drain` takes its result with `wait`).
    pub fn ready(&self) -> bool {
        self.early.get().is_some()
    }
}

/// How a request began ([`Ni::begin`]).
enum Begun {
    /// It ended in the call (its id, and how): nothing to wait for.
    Now(u64, Done),
    /// An operation to wait for (which may have ended too, [`Op::early`]).
    Later(Op),
}

/// A region of this process's memory the NI may read and write, registered under `key`.
pub struct Region {
    mem: Mem,
    key: u32,
    ni: Weak<lock::NiLock<Inner>>,
    /// For memory of the application's ([`Ni::register`]): the pins (their starts) it holds.
    /// `None`: memory libni allocated, mapped for this region alone.
    pins: Option<Vec<u64>>,
    /// Whether this region's entry in `Inner::regions` is its own (an earlier region may have
    /// the same start).
    listed: bool,
}

/// Whole pages of the application's that the NI can reach (`Ni::register`), shared by the
/// regions that lie in them.
struct Pin {
    end: u64,
    refs: u32,
    mem: Mem,
}

/// Where a peer's message queue is: its region key and the MQCW's offset in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MqAddr {
    pub key: u32,
    pub offset: u64,
}

/// What a T3E SEND got back: stored (with the queue's new Tail) or rejected (FULL_SR).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MqOutcome {
    Accepted { tail: u64 },
    Rejected,
}

type Handler = Box<dyn FnMut(u32, &[u8]) + Send>;

struct Inner {
    dev: Box<dyn Transport>,
    sram: Mem,
    epoch: u32,
    sq_tail: u32,
    cq: Mem,
    cq_head: u32,
    am: Mem,
    am_slots: u32,
    am_head: u32,
    bounce: Mem,
    next_user: u64,
    next_key: u32,
    done: idmap::Finished<Completion>,
    ignored: IdSet,
    /// Active-message handlers by id; `None` while the dispatcher runs that one (taken out
    /// and put back in place: no removal and insertion a message).
    handlers: idmap::IdTable<Option<Handler>>,
    /// Active messages taken from the ring whose handlers have not run yet (they run with
    /// this lock released: see `Ni::run_handlers`).
    am_arrived: VecDeque<(u64, u32, Vec<u8>)>,
    /// A thread is running handlers (`Ni::run_queued_handlers`): one at a time, in arrival
    /// order. Under this lock, beside the queue, so that the dispatcher's last look at an
    /// empty queue and its end are one step (a message queued after it finds no dispatcher
    /// and its queuer runs it) — and no atomic read-modify-write a message.
    dispatching: bool,
    /// `!am_arrived.is_empty()` as of the last time this lock was held, readable without it:
    /// the waits skip the dispatcher when nothing is queued.
    am_queued: Arc<AtomicBool>,
    /// Active messages that arrived before a handler was registered.
    am_pending: Vec<(u64, u32, Vec<u8>)>,
    /// Payload buffers of active messages whose handlers ran, for the next ones (an
    /// allocation and a free per message cost more than the rest of its path).
    am_spare: Vec<Vec<u8>>,
    /// Times the asynchronous global OR rose (with `GLOBAL_REC_IE`).
    global_rises: u64,
    /// The partition window, when the NI's partition has one (`direct.rs`).
    win: Option<window::Window>,
    d: direct::DirectState,
    /// Fabric completions that finish a direct-path operation: fabric id → (operation id,
    /// the message's own tag).
    alias: IdMap<(u64, u64)>,
    /// Regions this process registered (address → length, and the key of an `Ni::alloc`
    /// region: exported, so a receiver may read a large message's payload out of one itself,
    /// `kind::GET`), so the direct path never touches memory the NI may not.
    regions: BTreeMap<u64, (u64, Option<u32>)>,
    /// The two regions `registered` found last (start, length), the latest first: most
    /// operations use the ones before (a send and a receive buffer). Emptied when a region
    /// goes.
    region_hit: std::cell::Cell<[(u64, u64); 2]>,
    /// The application's pages made NI memory for `Ni::register` (start → pin): DMA-mapped
    /// once however many regions lie in them, never overlapping.
    pins: BTreeMap<u64, Pin>,
    /// The daemon's liveness as last seen (`check_alive`).
    alive: Liveness,
    /// Whether this process's yields come back late (a CPU-bound thread on the core): then
    /// waiters block instead. Every waiter of this `Ni` notes its yields here.
    contention: ni_abi::fastpath::Contention,
}

/// What a waiter knows of the daemon's heartbeat (fastpath.md, "A daemon that dies").
struct Liveness {
    /// Calls of `check_alive` since the last real look.
    calls: u32,
    last_look: Instant,
    beat: u32,
    beat_seen: Instant,
    /// Once known dead (or unplugged), for good: every later call fails at once.
    gone: Option<Gone>,
}

/// Why an NI can no longer be used.
#[derive(Clone)]
enum Gone {
    Daemon(String),
    Unplugged(String),
}

impl Gone {
    fn error(&self) -> Error {
        match self {
            Gone::Daemon(why) => Error::DaemonGone(why.clone()),
            Gone::Unplugged(what) => Error::Unplugged(what.clone()),
        }
    }
}

/// What is left of a transport whose device was taken away: nothing to reach.
struct Released(String);

impl Released {
    fn gone<T>(&self) -> Result<T> {
        Err(Error::Unplugged(self.0.clone()))
    }
}

impl Transport for Released {
    fn map_sram(&mut self) -> Result<Mem> {
        self.gone()
    }
    fn map_window(&mut self, _rank: u32) -> Result<Option<Mem>> {
        self.gone()
    }
    fn region_read(&mut self, _region: u32, _offset: u64, _data: &mut [u8]) -> Result<()> {
        self.gone()
    }
    fn region_write(&mut self, _region: u32, _offset: u64, _data: &[u8]) -> Result<()> {
        self.gone()
    }
    fn dma_map(&mut self, _mem: &Mem) -> Result<()> {
        self.gone()
    }
    /// The container that held the mappings is closed: nothing is mapped any more.
    fn dma_unmap(&mut self, _iova: u64, _len: u64) -> Result<()> {
        Ok(())
    }
    fn enable_msix(&mut self, _vectors: &[(u32, RawFd)]) -> Result<()> {
        self.gone()
    }
}

impl Liveness {
    fn new() -> Liveness {
        let now = Instant::now();
        Liveness {
            calls: 0,
            last_look: now,
            beat: 0,
            beat_seen: now,
            gone: None,
        }
    }
}

/// One attached NI.
pub struct Ni {
    inner: Arc<lock::NiLock<Inner>>,
    /// Held while the shared bounce buffer carries a request's payload.
    bounce: Mutex<()>,
    cq_event: File,
    mq_event: File,
    rank: u32,
    size: u32,
    node: u32,
    backoff: Backoff,
    /// `Inner::am_queued`.
    am_queued: Arc<AtomicBool>,
    /// Pauses [`Ni::relax`] may still take as a spin without reading the clock, the lock
    /// and the cpu's other waiters again: set by a look that said spin, early in a wait.
    relax_spins: AtomicU32,
    /// Scratch of collectives too large for the window's slots (`large.rs`).
    scratch: Mutex<large::Scratch>,
    /// Where a broadcast's root whose buffer is not exported copies a vector its members
    /// read where it keeps it (`Ni::bcast_read`): made at the first.
    rndv_bounce: Mutex<Option<Region>>,
}

/// How a waiting libni gives the CPU away after its short spin, before it blocks on the
/// completion interrupt. `NI_WAIT=yield|sleep` overrides the transport's choice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backoff {
    /// `sched_yield`: cheapest when another runnable thread shares the core (host processes).
    Yield,
    /// 1 µs sleeps: lets a guest's vCPU halt so the host core runs the device's poller.
    Sleep,
}

impl Backoff {
    fn from_env(default: Backoff) -> Backoff {
        match std::env::var("NI_WAIT").as_deref() {
            Ok("yield") => Backoff::Yield,
            Ok("sleep") => Backoff::Sleep,
            _ => default,
        }
    }
}

/// A power of two: an index into the completion ring is a mask, not a division.
const CQ_ENTRIES: u32 = 4096;
const _: () = assert!(CQ_ENTRIES.is_power_of_two());
/// Blocking element-wise collectives up to this many bytes go through the window in
/// slot-sized pieces (`Ni::collective_pieces`). Larger allreduces and reduces go through the
/// members' exported scratch, and larger broadcasts read the root's vector there
/// (`large.rs`). The scratch path beat a third piece when slots held 960 B (2 KiB at P = 8
/// 20.9 -> 14.0 us, tests/bench/README.md); with 4032-byte slots two pieces and the scratch
/// path tie at 1 Ki f64 (P = 8: 21.6-21.9 against 20.8-22.2 us).
const PIECES_MAX: usize = 2 * ni_abi::window::COLL_MAX as usize;
/// Reduces (of any number of members) and scans of 4 members and more go in pieces
/// (`ring_coll_max` bytes) up to this: each piece messages in the rings (`direct.rs`), the
/// members that send running ahead, where the path through exported memory takes a round (or
/// two) in which every member must run (a scan of 1 Ki f64 at P = 8 on one cpu: 14 against
/// 73 us; Open MPI 41-44; a reduce of 1 Ki f64 at P = 2 between two cpus 1.87 against 3.58
/// us, on one 2.06 against 6.0, Open MPI 2.85 and 5.35; 4 Ki f64 7.1 against 7.8, in 16 KiB
/// pieces 3.7). A scan of 2 or 3 members reads the earlier ones' vectors in place (32 KiB
/// between two cores: 1.34 against 4.6 us in pieces). Blocking broadcasts up to this are
/// read by every member where the root keeps them (`Ni::bcast_read`) past one message in
/// the rings (`direct::bcast_ring_max`) — with 4 members or more, past [`BCAST_PIECES_MAX`].
const RING_PIECES_MAX: usize = 16 * ni_abi::window::COLL_MAX as usize;
/// With 4 members or more, blocking broadcasts up to this go as pieces in the rings still
/// (`RING_PIECES_MAX`), larger ones read where the root keeps them: a root that runs ahead
/// beats one that waits for every member's read up to 8 KiB (at P = 4 / 8 between two cpus
/// 3.6-4.0 / 17-23 us against 9.2-10.6 / 20-25, on one cpu 6.3 / 25-27 against 13-20 /
/// 44-60), not from 16 KiB (between two cpus 14-16 / 36-40 against 7-11 / 22-27, on one
/// cpu the same).
const BCAST_PIECES_MAX: usize = 3 * ni_abi::window::COLL_MAX as usize;
const AM_SLOTS: u32 = 64;
const BOUNCE: usize = 64 << 10;
/// Spin this long, then yield this long, before blocking on the completion interrupt.
const SPIN: Duration = Duration::ZERO;
const YIELD: Duration = Duration::from_millis(1);

fn eventfd() -> Result<File> {
    // SAFETY: eventfd returns a new descriptor or -1.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if fd < 0 {
        return Err(Error::Device(format!(
            "eventfd: {}",
            std::io::Error::last_os_error()
        )));
    }
    // SAFETY: fd is a fresh descriptor we own.
    Ok(unsafe { File::from_raw_fd(fd) })
}

impl Inner {
    fn sram_u32(&self, off: u64) -> &AtomicU32 {
        // SAFETY: the control page is inside the 8 MiB SRAM mapping and 4-aligned; the
        // device accesses these words only atomically too.
        unsafe { &*(self.sram.ptr().add(off as usize) as *const AtomicU32) }
    }

    /// Fail with `DaemonGone` once the daemon is known dead. Cheap enough for every round of
    /// a wait loop: it looks for real at most every 50 ms (`force`: now, before a sleep).
    #[inline]
    fn check_alive(&mut self, force: bool) -> Result<()> {
        let a = &mut self.alive;
        if a.gone.is_none() && !force {
            a.calls += 1;
            if a.calls < 256 {
                return Ok(());
            }
        }
        self.check_alive_now(force)
    }

    /// `check_alive` past its count of calls.
    #[inline(never)]
    fn check_alive_now(&mut self, force: bool) -> Result<()> {
        if let Some(g) = self.alive.gone.clone() {
            // A dead daemon's NI is still a device its VMM may want back (re-plugged onto
            // a restarted daemon): let go of it when asked, and stay `DaemonGone`.
            if matches!(g, Gone::Daemon(_)) {
                if let Some(what) = self.dev.unplug_requested() {
                    self.let_go(what);
                }
            }
            return Err(g.error());
        }
        let a = &mut self.alive;
        a.calls = 0;
        let now = Instant::now();
        if !force && now.duration_since(a.last_look) < Duration::from_millis(50) {
            return Ok(());
        }
        a.last_look = now;
        if let Some(what) = self.dev.unplug_requested() {
            let what = self.let_go(what);
            self.alive.gone = Some(Gone::Unplugged(what.clone()));
            return Err(Error::Unplugged(what));
        }
        let beat = self.sram_u32(ctrl::HEARTBEAT).load(Ordering::Acquire);
        let a = &mut self.alive;
        if beat != a.beat {
            a.beat = beat;
            a.beat_seen = now;
        }
        let stale = now.duration_since(a.beat_seen);
        let why = match self.dev.daemon_gone() {
            Some(true) => "its socket closed".to_string(),
            Some(false) => return Ok(()),
            None if stale > Duration::from_millis(ctrl::HEARTBEAT_DEAD_MS) => {
                format!("no heartbeat for {} ms", stale.as_millis())
            }
            None => return Ok(()),
        };
        self.dev.declare_dead();
        self.alive.gone = Some(Gone::Daemon(why.clone()));
        Err(Error::DaemonGone(why))
    }

    /// The device is being unplugged: drop everything it backs (the SRAM and window
    /// mappings become private memory, so no pointer dangles; the transport's descriptors
    /// close), which lets the kernel hand the function back to its VMM. Returns `what`, with
    /// what could not be let go of.
    fn let_go(&mut self, what: String) -> String {
        let mut mems: Vec<&mut Mem> = vec![&mut self.sram];
        if let Some(w) = self.win.as_mut() {
            mems.push(w.mem_mut());
        }
        // A mapping that cannot be replaced keeps the function from its VMM; say so.
        let mut what = what;
        for m in mems {
            if let Err(e) = m.forsake() {
                what.push_str(&format!(
                    " (still mapped, the unplug waits for this process to exit: {e})"
                ));
            }
        }
        std::mem::replace(&mut self.dev, Box::new(Released(what.clone()))).release();
        what
    }

    fn check_epoch(&self) -> Result<()> {
        if let Some(g) = &self.alive.gone {
            return Err(g.error());
        }
        if self.sram_u32(ctrl::EPOCH).load(Ordering::Acquire) != self.epoch {
            return Err(Error::Reset);
        }
        Ok(())
    }

    /// Publish a request. `Err(WouldBlock)` when the ring is full.
    fn post(&mut self, mut r: Request) -> Result<u64> {
        self.check_epoch()?;
        let head = self.sram_u32(ctrl::SQ_HEAD).load(Ordering::Acquire);
        if self.sq_tail.wrapping_sub(head) >= SQ_ENTRIES {
            return Err(Error::WouldBlock);
        }
        self.next_user += 1;
        r.user = self.next_user;
        let at = SQ_OFFSET + (self.sq_tail % SQ_ENTRIES) as u64 * ENTRY_SIZE;
        self.sram.write_at(at as usize, &r.encode());
        self.sq_tail = self.sq_tail.wrapping_add(1);
        self.sram_u32(ctrl::SQ_TAIL)
            .store(self.sq_tail, Ordering::Release);
        // Pairs with the poller's store of DEV_SLEEPING, fence, last look at SQ_TAIL.
        fence(Ordering::SeqCst);
        if self.sram_u32(ctrl::DEV_SLEEPING).load(Ordering::Acquire) != 0 {
            self.dev.ring_doorbell()?;
        }
        Ok(r.user)
    }

    /// Where completion `index` lies in the completion ring.
    #[inline]
    fn cq_entry(index: u32) -> usize {
        (index % CQ_ENTRIES) as usize * ENTRY_SIZE as usize
    }

    fn cq_seq(&self, index: u32) -> &AtomicU32 {
        let at = Self::cq_entry(index) + COMPLETION_SEQ as usize;
        // SAFETY: inside the completion ring, 4-aligned; the device stores it with release.
        unsafe { &*(self.cq.ptr().add(at) as *const AtomicU32) }
    }

    fn cq_ready(&self) -> bool {
        self.cq_seq(self.cq_head).load(Ordering::Acquire) == self.cq_head.wrapping_add(1)
    }

    /// Whether a progress pass would find nothing to do — no completion, no message, nothing
    /// waiting to be sent, published or handed over — so that a poll may skip it (most polls
    /// of a loop that waits find nothing: an empty `fi_cq_read` over the provider cost 976
    /// instructions with the pass, Open MPI's own empty `MPI_Test` 153; `NIB_INSTR_PATTERN=poll
    /// tests/bench/instr.sh`). The same looks a pass takes first, counted as one for its
    /// liveness checks: the pass that would look at the daemon runs. Out of line: inlined
    /// into `test` and `drain` it moved the compiler's choices elsewhere (libni's 64-byte
    /// active message 0.158 → 0.164 µs).
    #[inline(never)]
    fn quiet_pass(&mut self) -> bool {
        self.quiet_pass_but(false)
    }

    /// [`Inner::quiet_pass`], but a `HEAD` to publish counts as nothing to do when
    /// `heads_wait` (they wait for the next pass).
    #[inline(never)]
    fn quiet_pass_but_heads(&mut self) -> bool {
        self.quiet_pass_but(true)
    }

    #[inline(always)]
    fn quiet_pass_but(&mut self, heads_wait: bool) -> bool {
        if self.check_epoch().is_err() || self.alive.calls >= 255 || self.cq_ready() {
            return false;
        }
        if !self.done.is_empty()
            || !self.d.unexpected.is_empty()
            || !self.d.deferred.is_empty()
            || self.d.wcoll.is_some()
            || self.d.wring.is_some()
        {
            return false;
        }
        let quiet = match self.win.as_mut() {
            Some(w) if heads_wait => !w.live() || w.quiet_but_heads(),
            Some(w) => !w.live() || w.quiet(),
            None => true,
        };
        if quiet {
            self.alive.calls += 1;
        }
        quiet
    }

    /// Take every completion the NI has written. Returns how many.
    fn progress(&mut self) -> Result<usize> {
        self.check_epoch()?;
        self.check_alive(false)?;
        let mut n = 0;
        while self.cq_ready() {
            let mut b = [0u8; 64];
            self.cq.read_at(Self::cq_entry(self.cq_head), &mut b);
            let c = Completion::decode(&b);
            self.cq_head = self.cq_head.wrapping_add(1);
            self.sram_u32(ctrl::CQ_HEAD)
                .store(self.cq_head, Ordering::Release);
            n += 1;
            let mut c = c;
            if let Some((user, tag)) = self.alias.remove(&c.user) {
                c.user = user;
                c.tag = tag;
            }
            if c.opcode == op::AM_ARRIVED {
                self.take_am(&c);
            } else if c.opcode == op::GLOBAL_REC {
                self.global_rises += 1;
            } else if self.ignored.is_empty() || !self.ignored.remove(&c.user) {
                self.done.insert(c.user, c);
            }
        }
        self.w_progress()?;
        Ok(n)
    }

    /// Copy an arrived active message out of its ring slot and queue it for its handler.
    fn take_am(&mut self, c: &Completion) {
        let slot = (c.aux as usize % self.am_slots as usize) * AM_SLOT as usize;
        let len = (c.len as usize).min(AM_MAX_PAYLOAD as usize);
        let mut payload = self.am_buffer(len);
        self.am.read_at(slot + AM_HEADER as usize, &mut payload);
        // The slot is free again once its payload is copied out.
        self.am_head = self.am_head.wrapping_add(1);
        self.sram_u32(ctrl::AM_HEAD)
            .store(self.am_head, Ordering::Release);
        self.queue_am(c.tag, c.rank, payload);
    }

    /// A buffer of `len` bytes for an arriving active message's payload, which the caller
    /// copies over all of them: a spare keeps what it held (no `memset` a message), and only
    /// bytes past its old length are zeroed.
    fn am_buffer(&mut self, len: usize) -> Vec<u8> {
        let mut v = self.am_spare.pop().unwrap_or_default();
        v.truncate(len);
        v.resize(len, 0);
        v
    }

    /// An active message for `handler` from `src`, to run at the next dispatch.
    fn queue_am(&mut self, handler: u64, src: u32, payload: Vec<u8>) {
        self.am_arrived.push_back((handler, src, payload));
        self.am_queued.store(true, Ordering::Release);
    }

    /// The next queued active message whose handler is registered, with the handler taken
    /// out of the table (the caller runs it unlocked and puts it back). Messages for
    /// unregistered handlers move to `am_pending`. Inline always: out of line, its 56-byte
    /// answer went back through memory.
    #[inline(always)]
    fn next_am(&mut self) -> Option<(u64, u32, Vec<u8>, Handler)> {
        let next = loop {
            let Some((h, src, payload)) = self.am_arrived.pop_front() else {
                break None;
            };
            match self.handlers.get_mut(h).and_then(Option::take) {
                Some(f) => break Some((h, src, payload, f)),
                None => self.am_pending.push((h, src, payload)),
            }
        };
        self.am_queued_now();
        next
    }

    /// Publish whether active messages wait for the dispatcher (`am_queued`).
    fn am_queued_now(&self) {
        self.am_queued
            .store(!self.am_arrived.is_empty(), Ordering::Release);
    }
}

impl Ni {
    /// Attach to the NI named by `NI_SOCKET` (unset: this machine's NI PCI function through
    /// VFIO, see [`Ni::attach_pci`]) and wait until every NI of the partition is ready (its
    /// process attached and joined the control network), for up to `NI_ATTACH_TIMEOUT`
    /// seconds (default 60), as `MPI_Init` does. This is what a program started by `nirun`
    /// calls.
    pub fn attach() -> Result<Ni> {
        let ni = match std::env::var_os("NI_SOCKET") {
            Some(path) => Ni::attach_path(Path::new(&path))?,
            // No socket: in a guest the NI is a PCI function, driven through VFIO.
            None => Ni::attach_pci(&vfio::find().ok_or(Error::NoSocket)?)?,
        };
        let secs = std::env::var("NI_ATTACH_TIMEOUT")
            .ok()
            .and_then(|s| s.parse::<f64>().ok())
            .unwrap_or(60.0);
        ni.wait_for_partition(Duration::from_secs_f64(secs))?;
        Ok(ni)
    }

    /// How many NIs of the partition have had a process attached since this one attached
    /// (itself included).
    pub fn peers_up(&self) -> u32 {
        self.lock().sram_u32(ctrl::PEERS_UP).load(Ordering::Acquire)
    }

    /// Wait until every NI of the partition has a process attached.
    pub fn wait_for_partition(&self, timeout: Duration) -> Result<()> {
        let t = Instant::now();
        while self.peers_up() < self.size {
            if t.elapsed() > timeout {
                return Err(Error::Timeout(timeout));
            }
            self.lock().check_alive(false)?;
            std::thread::sleep(Duration::from_micros(500));
        }
        Ok(())
    }

    /// This machine's NI PCI function (`NI_PCI`, else the first found), if it has one: what
    /// [`Ni::attach`] uses in a guest.
    pub fn find_pci() -> Option<String> {
        vfio::find()
    }

    /// Attach to the NI whose vfio-user socket is `path`, without waiting for its peers.
    pub fn attach_path(path: &Path) -> Result<Ni> {
        Ni::attach_transport(
            Box::new(vfio_user::Device::connect(path)?),
            &path.display().to_string(),
        )
    }

    /// Attach to the NI that is PCI function `addr` of this machine (e.g. `0000:01:00.0`)
    /// through VFIO, binding it to `vfio-pci` if needed, without waiting for its peers.
    /// [`Ni::attach`] uses this when `NI_SOCKET` is unset (`NI_PCI` names the function,
    /// default: the first NI found).
    pub fn attach_pci(addr: &str) -> Result<Ni> {
        Ni::attach_transport(Box::new(vfio::Device::open(addr)?), &format!("PCI {addr}"))
    }

    fn attach_transport(mut dev: Box<dyn Transport>, name: &str) -> Result<Ni> {
        let attach_err = |reason: String| Error::Attach {
            path: name.to_string(),
            reason,
        };
        let sram = dev.map_sram()?;
        let backoff = dev.backoff();
        // Memory space and bus mastering, then the fast path's two MSI-X vectors.
        let mut cmd = [0u8; 2];
        dev.region_read(pci::CONFIG_REGION, 4, &mut cmd)?;
        let cmd = u16::from_le_bytes(cmd) | 0x6;
        dev.region_write(pci::CONFIG_REGION, 4, &cmd.to_le_bytes())?;
        let cq_event = eventfd()?;
        let mq_event = eventfd()?;
        dev.enable_msix(&[
            (pci::vector::CQ as u32, cq_event.as_raw_fd()),
            (pci::vector::MQ as u32, mq_event.as_raw_fd()),
        ])?;

        // The fabric publishes the control page once it has seen this attach.
        let ctl_word = |off: u64| {
            // SAFETY: inside the SRAM mapping, 4-aligned.
            unsafe { &*(sram.ptr().add(off as usize) as *const AtomicU32) }
        };
        let t = Instant::now();
        while ctl_word(ctrl::MAGIC).load(Ordering::Acquire) != ctrl::MAGIC_VALUE {
            if t.elapsed() > Duration::from_secs(10) {
                return Err(attach_err(
                    "the device never published its fast path".into(),
                ));
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        let version = ctl_word(ctrl::VERSION).load(Ordering::Acquire);
        if version != ctrl::VERSION_VALUE {
            return Err(attach_err(format!(
                "fast-path version {version}, libni speaks {}",
                ctrl::VERSION_VALUE
            )));
        }
        let rank = ctl_word(ctrl::RANK).load(Ordering::Acquire);
        let size = ctl_word(ctrl::SIZE).load(Ordering::Acquire);
        let node = ctl_word(ctrl::NODE).load(Ordering::Acquire);
        let epoch = ctl_word(ctrl::EPOCH).load(Ordering::Acquire);
        let serial = ctl_word(ctrl::WINDOW).load(Ordering::Acquire);
        if size == 0 {
            return Err(attach_err(format!("NI {node} is in no partition")));
        }
        // Every member of a partition with a window matches messages in it, so a member
        // that cannot map it must not attach (its peers would never see its messages).
        let win = match serial {
            0 => None,
            _ => {
                let mem = dev.map_window(rank)?.ok_or_else(|| {
                    attach_err(
                        "the partition uses the direct path but its window cannot be mapped \
                         here (a guest can map only a shared window, in BAR3 and BAR4): start \
                         ni-device with --direct shared for partitions with guests, or \
                         --direct off"
                            .into(),
                    )
                })?;
                let mut win = window::Window::open(mem, serial, rank, size).map_err(attach_err)?;
                if dev.on_daemon_kernel() && membarrier::register_global() {
                    win.use_membarrier();
                }
                Some(win)
            }
        };

        let cq = Mem::alloc(CQ_ENTRIES as usize * ENTRY_SIZE as usize)?;
        let am = Mem::alloc(AM_SLOTS as usize * AM_SLOT as usize)?;
        let bounce = Mem::alloc(BOUNCE)?;
        for m in [&cq, &am, &bounce] {
            dev.dma_map(m)?;
        }
        let am_queued = Arc::new(AtomicBool::new(false));
        let inner = Inner {
            dev,
            sram,
            epoch,
            sq_tail: 0,
            cq,
            cq_head: 0,
            am,
            am_slots: AM_SLOTS,
            am_head: 0,
            bounce,
            next_user: 0,
            next_key: 1,
            done: Default::default(),
            ignored: IdSet::default(),
            handlers: idmap::IdTable::default(),
            am_arrived: VecDeque::new(),
            dispatching: false,
            am_queued: am_queued.clone(),
            am_pending: Vec::new(),
            am_spare: Vec::new(),
            global_rises: 0,
            win,
            d: direct::DirectState {
                next_rndv: vec![0; size as usize],
                no_get: vec![false; size as usize],
                ring_colls: vec![Default::default(); size as usize],
                peer_gen: vec![None; size as usize],
                ..Default::default()
            },
            alias: IdMap::default(),
            regions: BTreeMap::new(),
            region_hit: Default::default(),
            pins: BTreeMap::new(),
            alive: Liveness::new(),
            contention: Default::default(),
        };
        let ni = Ni {
            inner: Arc::new(lock::NiLock::new(inner)),
            bounce: Mutex::new(()),
            cq_event,
            mq_event,
            rank,
            size,
            node,
            backoff: Backoff::from_env(backoff),
            am_queued,
            relax_spins: AtomicU32::new(0),
            scratch: Mutex::new(Default::default()),
            rndv_bounce: Mutex::new(None),
        };
        // The first request sets up the completion ring; its completion lands in it.
        let (cq_iova, am_iova) = {
            let i = ni.lock();
            (i.cq.iova(), i.am.iova())
        };
        let r = Request {
            opcode: op::CQ_SETUP,
            addr: cq_iova,
            len: CQ_ENTRIES as u64,
            ..Default::default()
        };
        let o = ni.start(r)?;
        ni.wait(o)?;
        let r = Request {
            opcode: op::AM_SETUP,
            addr: am_iova,
            len: AM_SLOTS as u64,
            ..Default::default()
        };
        let o = ni.start(r)?;
        ni.wait(o)?;
        // Take part in the control network (the NI comes out of reset abstaining from
        // everything, as the CM-5's does; CMNA_participate_in does the same). Not in the
        // reception of CM-5 register broadcasts (§4.1): libni has no call that reads them,
        // and a receiver that never reads holds up every broadcast of the partition.
        ni.set_participation(participation::BC_REC_ABSTAIN)?;
        Ok(ni)
    }

    fn lock(&self) -> lock::NiGuard<'_, Inner> {
        self.inner.lock()
    }

    /// This process's rank in its partition.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// The number of NIs in the partition.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// The NI's physical number in the daemon.
    pub fn node(&self) -> u32 {
        self.node
    }

    /// The id of the NI's partition (what tells two partitions' ranks apart).
    pub fn partition(&self) -> u32 {
        self.lock()
            .sram_u32(ctrl::PARTITION)
            .load(Ordering::Acquire)
    }

    /// Memory of at least `len` bytes the NI can reach, registered for remote read, write
    /// and message-queue access under the next key.
    pub fn alloc(&self, len: usize) -> Result<Region> {
        if len == 0 {
            return Err(Error::BadArgument("cannot register 0 bytes".into()));
        }
        let mem = Mem::alloc(len)?;
        let key = {
            let mut i = self.lock();
            i.dev.dma_map(&mem)?;
            let key = i.next_key;
            i.next_key += 1;
            i.regions.insert(mem.iova(), (mem.len() as u64, Some(key)));
            key
        };
        let r = Request {
            opcode: op::REG_MR,
            addr: mem.iova(),
            len: mem.len() as u64,
            key,
            // A memory file of its own: partition peers may map it (`access::EXPORT`).
            access: access::ALL | access::EXPORT,
            ..Default::default()
        };
        let region = Region {
            mem,
            key,
            ni: Arc::downgrade(&self.inner),
            pins: None,
            listed: true,
        };
        self.request(r)?;
        Ok(region)
    }

    /// Register `len` bytes of the application's own memory at `ptr` under the next key, for
    /// peers to `get` from (`remote_read`) and `put` into (`remote_write`), as `alloc`'s
    /// regions are; it also serves as the local side of this process's own operations.
    ///
    /// In a guest the IOMMU maps the pages where they are. On a host the daemon can only
    /// map memory it is given a file for, so the whole pages around the range move onto
    /// shared memory at the same addresses, contents and pointers kept ([`Mem::adopt`] says
    /// what that means and what cannot be registered). Pages are shared by the regions in
    /// them and let go when the last one is dropped.
    ///
    /// # Safety
    /// `[ptr, ptr + len)` is memory of this process that stays mapped while the region lives
    /// (the NI reads and writes it whenever a peer or an operation asks).
    pub unsafe fn register(
        &self,
        ptr: *mut u8,
        len: usize,
        remote_read: bool,
        remote_write: bool,
    ) -> Result<Region> {
        const PAGE: u64 = 4096;
        let start = ptr as u64;
        let end = start
            .checked_add(len as u64)
            .filter(|_| len > 0)
            .ok_or_else(|| {
                Error::BadArgument(format!("cannot register {len} bytes at {start:#x}"))
            })?;
        let (s, e) = (start & !(PAGE - 1), end.div_ceil(PAGE) * PAGE);
        // One lock hold from finding the gaps to holding the pins: a region dropped on
        // another thread meanwhile could otherwise let go of a pin this one is about to hold.
        let (key, held, listed) = {
            let mut i = self.lock();
            // What no pin covers yet.
            let mut gaps = Vec::new();
            let mut at = s;
            for (&ps, p) in i.pins.range(..e) {
                if p.end <= at {
                    continue;
                }
                if ps > at {
                    gaps.push((at, ps));
                }
                at = at.max(p.end);
            }
            if at < e {
                gaps.push((at, e));
            }
            // Pins never overlap libni's own memory: moving it would cut it off from the
            // mapping the NI already has (its regions are the only entries a gap can meet).
            for &(gs, ge) in &gaps {
                if let Some((&rs, &(rl, _))) = i.regions.range(..ge).next_back() {
                    if rs + rl > gs {
                        return Err(Error::BadArgument(format!(
                            "{len} bytes at {start:#x}: pages at {gs:#x} are memory Ni::alloc \
                             gave (already registered)"
                        )));
                    }
                }
            }
            let by_fd = i.dev.maps_by_fd();
            let mut made = Vec::new();
            for (gs, ge) in gaps {
                let mapped = Mem::adopt(gs as *mut u8, (ge - gs) as usize, by_fd).and_then(|mem| {
                    i.dev.dma_map(&mem).map(|()| mem).map_err(|e| {
                        Error::Memory(format!(
                            "registering {len} bytes at {start:#x}: the NI would not map pages \
                             {gs:#x}..{ge:#x} ({e}); ni-device maps at most 64 files for one \
                             client, and every Ni::alloc region and every registration that adds \
                             pages is one: drop some"
                        ))
                    })
                });
                match mapped {
                    Ok(mem) => {
                        i.pins.insert(
                            gs,
                            Pin {
                                end: ge,
                                refs: 0,
                                mem,
                            },
                        );
                        made.push(gs);
                    }
                    Err(e) => {
                        // Nothing of a registration that failed stays mapped.
                        for ps in made {
                            if let Some(p) = i.pins.remove(&ps) {
                                let _ = i.dev.dma_unmap(ps, p.end - ps);
                            }
                        }
                        return Err(e);
                    }
                }
            }
            // Every pin the range lies in, new or not, is held by this region.
            let held: Vec<u64> = i
                .pins
                .range(..e)
                .filter(|(_, p)| p.end > s)
                .map(|(&ps, _)| ps)
                .collect();
            for ps in &held {
                if let Some(p) = i.pins.get_mut(ps) {
                    p.refs += 1;
                }
            }
            let listed = match i.regions.entry(start) {
                std::collections::btree_map::Entry::Vacant(v) => {
                    v.insert((len as u64, None));
                    true
                }
                std::collections::btree_map::Entry::Occupied(_) => false,
            };
            let key = i.next_key;
            i.next_key += 1;
            (key, held, listed)
        };
        let region = Region {
            mem: Mem::view(ptr, len),
            key,
            ni: Arc::downgrade(&self.inner),
            pins: Some(held),
            listed,
        };
        // From here the region's drop undoes the above.
        self.request(Request {
            opcode: op::REG_MR,
            addr: start,
            len: len as u64,
            key,
            access: if remote_read { access::REMOTE_READ } else { 0 }
                | if remote_write {
                    access::REMOTE_WRITE
                } else {
                    0
                },
            ..Default::default()
        })?;
        Ok(region)
    }

    /// Publish a request and wait for it to finish.
    fn request(&self, r: Request) -> Result<Done> {
        self.request_with(r, 0)
    }

    /// [`Self::request`], a broadcast of up to `bcast_max` bytes in the window. What ended
    /// in the call (a member that only sends in the rings) returns without an operation
    /// built to be waited for (a 1-f64 broadcast's root: ≈ 100 of its instructions).
    fn request_with(&self, r: Request, bcast_max: u64) -> Result<Done> {
        match self.begin(r, bcast_max)? {
            Begun::Now(_, d) => {
                self.run_handlers();
                finish_early(r.opcode, r.rank, d)
            }
            Begun::Later(o) => self.wait(o),
        }
    }

    /// A blocking element-wise collective (broadcast, reduce, allreduce, scan) of a vector a
    /// little larger than one window slot: as consecutive window rounds of a slot each, in
    /// element order, instead of the fabric's path (reduces and scans as consecutive
    /// collectives in the rings of up to `ring_coll_max` bytes each, up to
    /// [`RING_PIECES_MAX`] with 4 members or more, and broadcasts up to
    /// [`BCAST_PIECES_MAX`]; broadcasts longer than one message in the rings
    /// (`direct::bcast_ring_max`) up to [`RING_PIECES_MAX`] are read where the root keeps
    /// them, [`Ni::bcast_read`]). Every member splits alike
    /// (same count and type), and each piece is combined in rank order as the whole vector
    /// would be, so the bits are the same. Larger allreduces, reduces and scans go through
    /// the members' exported memory — each member writing its part of the result straight
    /// into every receive buffer that needs it where those are exported, else through
    /// scratch — and larger broadcasts read the root's vector where it exports it
    /// (`large.rs`, which does large allgathers too).
    fn collective_pieces(&self, r: Request, esize: usize) -> Result<Done> {
        // A slot's vector is one piece of every kind (its limit worked out takes a division).
        if r.len.saturating_mul(esize as u64) <= ni_abi::window::COLL_MAX {
            return self.request(r);
        }
        let piece = direct::piece_max(r.flags, self.size());
        let per = (piece as usize / esize).max(1);
        let count = r.len as usize;
        if count <= per || !self.direct() {
            return self.request(r);
        }
        let bytes = count * esize;
        let in_pieces = self.size() >= 4 && bytes <= BCAST_PIECES_MAX;
        if r.flags == ni_abi::fastpath::coll::BCAST && bytes <= RING_PIECES_MAX && !in_pieces {
            return self.bcast_read(r, bytes);
        }
        let most = if direct::in_rings(r.flags)
            && (self.size() >= 4 || r.flags == ni_abi::fastpath::coll::REDUCE)
        {
            RING_PIECES_MAX
        } else {
            PIECES_MAX.max(per * esize)
        };
        if count * esize > most {
            if large::applies(&r) {
                if let Some(d) = self.collective_shared(r, esize)? {
                    return Ok(d);
                }
            }
            return self.request(r);
        }
        let mut last = None;
        for (_, piece) in pieces(r, esize, per) {
            let d = self.request(piece)?;
            last = Some(Done {
                len: r.len,
                tag: r.tag,
                ..d
            });
        }
        last.ok_or_else(|| Error::BadArgument("an empty collective".into()))
    }

    /// A blocking broadcast of more than a slot (with 4 members or more, more than
    /// [`BCAST_PIECES_MAX`]), up to [`RING_PIECES_MAX`]: every member reads it where the root
    /// keeps it (`direct::Rndv`), the root returning once they did (32 KiB at P = 8 between
    /// two cpus: 74-75 -> 25-27 us; Open MPI 42-59). A root whose buffer is not exported
    /// copies the vector into an exported bounce first.
    fn bcast_read(&self, mut r: Request, bytes: usize) -> Result<Done> {
        let mut _bounce = None;
        if r.rank == self.rank() {
            let copy = {
                let i = self.lock();
                i.exports()
                    && i.registered(r.addr, bytes as u64)
                    && i.exported_at(r.addr, bytes as u64).is_none()
            };
            if copy {
                let mut g = self.rndv_bounce.lock().unwrap_or_else(|e| e.into_inner());
                if g.is_none() {
                    // Without one (no memory to export) the root sends pieces instead.
                    *g = self.alloc(RING_PIECES_MAX).ok();
                }
                if let Some(b) = g.as_ref() {
                    // SAFETY: `[r.addr, + bytes)` lies in a registered region (checked above)
                    // the caller holds through this call; the bounce holds `RING_PIECES_MAX`.
                    unsafe {
                        std::ptr::copy_nonoverlapping(r.addr as *const u8, b.as_ptr(), bytes)
                    };
                    r.addr = b.iova();
                    // Held until every member read it.
                    _bounce = Some(g);
                }
            }
        }
        self.request_with(r, RING_PIECES_MAX as u64)
    }

    /// Publish a request, waiting for ring space.
    fn start(&self, r: Request) -> Result<Op> {
        Ok(match self.begin(r, 0)? {
            Begun::Now(user, d) => Op::ended(user, r.opcode, r.rank, d),
            Begun::Later(o) => o,
        })
    }

    /// [`Self::start`], a broadcast of up to `bcast_max` bytes in the window
    /// (`Inner::w_collective`), saying whether it ended in the call. Inlined: a layer
    /// fewer under every blocking call (a 1-f64 broadcast's root 810 -> 772 instructions).
    #[inline(always)]
    fn begin(&self, r: Request, bcast_max: u64) -> Result<Begun> {
        // When the wait for room began: read at the first look that finds none (most
        // requests find room at once, and a clock read is as dear as the rest of a post).
        let mut since = None;
        if r.opcode == op::COLLECTIVE {
            loop {
                let s = self.lock().w_collective(&r, bcast_max)?;
                match s {
                    direct::CollStart::Started(user) => {
                        return Ok(Begun::Later(Op::new(user, r.opcode, r.rank)))
                    }
                    direct::CollStart::Done(user, d) => return Ok(Begun::Now(user, d)),
                    direct::CollStart::Fabric => break,
                    direct::CollStart::NotYet => {
                        self.lock().progress()?;
                        pause(
                            since.get_or_insert_with(Instant::now).elapsed(),
                            self.backoff,
                        );
                    }
                }
            }
        }
        loop {
            let posted = self.lock().post(r);
            match posted {
                Ok(user) => return Ok(Begun::Later(Op::new(user, r.opcode, r.rank))),
                Err(Error::WouldBlock) => {
                    // Take completions but run no handler: a caller may hold the bounce
                    // buffer, which a handler's own am_send would need.
                    self.lock().progress()?;
                    pause(
                        since.get_or_insert_with(Instant::now).elapsed(),
                        self.backoff,
                    );
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Publish a raw fast-path request (diagnostics and conformance tests: it lets a caller
    /// send what the typed API never would, to see the device refuse it).
    pub fn submit(&self, r: Request) -> Result<Op> {
        self.start(r)
    }

    /// Whether this NI's partition has a window: small tagged messages and collectives then
    /// go member to member, without the device's poller (`direct.rs`).
    pub fn direct(&self) -> bool {
        self.lock().direct()
    }

    /// Write one raw slot into the window ring toward `dest`, as if it were a message
    /// (conformance tests: what a misbehaving peer can do to a receiver). Returns false when
    /// there is no window.
    #[doc(hidden)]
    pub fn window_inject(&self, dest: u32, raw: &[u8; ni_abi::window::SLOT as usize]) -> bool {
        self.window_inject_with(dest, raw, &[])
    }

    /// From now on map no peer's memory and offer none of this process's, as a guest's libni
    /// does (its memory is the guest's): the paths members take toward and from a guest,
    /// on the host (tests).
    #[doc(hidden)]
    pub fn act_as_guest(&self) {
        let mut i = self.lock();
        i.d.as_guest = true;
        i.d.peer_maps.clear();
    }

    /// [`Ni::window_inject`] with `area` written into the ring's payload area where the
    /// slot's message keeps its payload (at most the rest of the area before the slot).
    #[doc(hidden)]
    pub fn window_inject_with(
        &self,
        dest: u32,
        raw: &[u8; ni_abi::window::SLOT as usize],
        area: &[u8],
    ) -> bool {
        let mut i = self.lock();
        // Current member states first: a peer that came up resets the rings toward it.
        if i.w_progress().is_err() {
            return false;
        }
        match i.win.as_mut() {
            Some(w) if dest < w.size => {
                w.inject(dest, raw, area);
                true
            }
            _ => false,
        }
    }

    /// Take completions and run active-message handlers. Returns how many completions.
    pub fn progress(&self) -> Result<usize> {
        let mut i = self.lock();
        let n = i.progress();
        if self.am_queued.load(Ordering::Acquire) {
            // The pass queued active messages: its lock takes the first (one lock fewer).
            self.run_queued_handlers(i);
        }
        n
    }

    /// Whether another member of the partition last waited on the cpu this thread runs on
    /// (the partition window's `CPU` words; host processes only, and never off the direct
    /// path): a caller's polling loop then gives the cpu away at once rather than spin, for
    /// the answer can only come once that member ran. Says where this thread is for the
    /// others' looks too. A lock, `sched_getcpu` and a load a member.
    pub fn cpu_shared(&self) -> bool {
        self.lock().cpu_sharers(self.backoff) > 0
    }

    /// Pause once in a loop that polls memory the network writes — a message queue's MQCW,
    /// a count a handler keeps — the way libni's own waits pause: poll on while the wait
    /// (`wait`, which its first pause starts) is young and no other member of the partition
    /// waits on this cpu, else give the cpu away (yield; sleep in a guest).
    ///
    /// A look that says spin, early in the wait, stands for the next [`RELAX_SPINS`] pauses:
    /// the look (a clock read, the lock, `sched_getcpu` and the peers' `CPU` words) took
    /// longer than the poll it paces, so a message that landed waited for it.
    pub fn relax(&self, wait: &mut Relax) {
        let left = self.relax_spins.load(Ordering::Relaxed);
        if left > 0 {
            // Shared by the `Ni`'s threads: another thread's pauses spend it too (a few
            // spins where that thread's own look might have said yield).
            self.relax_spins.store(left - 1, Ordering::Relaxed);
            std::hint::spin_loop();
            return;
        }
        let look = {
            let mut i = self.lock();
            let sharers = i.cpu_sharers(self.backoff);
            // Members wait on this cpu: yield, whatever the clock says (`direct_spinning`
            // spins there only when told to), and untimed (`Contention` blocks only waiters
            // alone): no clock read either side of it.
            (sharers == 0 || spin_env().is_some()).then(|| {
                let now = Tick::now();
                let idle = now.since(*wait.since.get_or_insert(now));
                (
                    i.direct_spinning(self.backoff, idle, sharers),
                    now,
                    idle,
                    sharers,
                )
            })
        };
        let Some((spin, now, idle, sharers)) = look else {
            std::thread::yield_now();
            return;
        };
        if spin && idle < RELAX_FRESH {
            self.relax_spins.store(RELAX_SPINS, Ordering::Relaxed);
        }
        if let Some((_, took)) = self.give_way(spin, now, idle) {
            self.lock().contention.yielded(took, sharers);
        }
    }

    /// One pause of a waiter idle for `idle` (measured at `now`, just before): poll on
    /// (`spin`), or yield, or sleep. Returns, when it yielded, the clock read after the yield
    /// and how long the yield took, for the caller's `Contention::yielded` (with the members
    /// waiting on this cpu it yielded to).
    fn give_way(&self, spin: bool, now: Tick, idle: Duration) -> Option<(Tick, Duration)> {
        if spin {
            std::hint::spin_loop();
        } else if idle >= SPIN && self.backoff == Backoff::Yield {
            std::thread::yield_now();
            let back = Tick::now();
            return Some((back, back.since(now)));
        } else {
            pause(idle, self.backoff);
        }
        None
    }

    /// Run the handlers of the active messages `progress` queued, with the NI unlocked, so
    /// a handler may call back into this `Ni` (e.g. `am_send` a reply). One thread runs
    /// handlers at a time, in arrival order; a handler does not nest: messages that arrive
    /// while it runs (even during its own calls into the `Ni`) run after it returns.
    #[inline]
    fn run_handlers(&self) {
        // Whoever queues a message runs the handlers after it (this thread, or another that
        // then finds this flag set): a stale `false` here skips nothing that waits.
        if self.am_queued.load(Ordering::Acquire) {
            self.run_queued_handlers(self.lock());
        }
    }

    /// `i`: this `Ni`'s lock, which it releases.
    #[inline(never)]
    fn run_queued_handlers(&self, mut i: lock::NiGuard<'_, Inner>) {
        // Another thread, or this one further up the stack, is running them.
        if i.dispatching {
            return;
        }
        let mut next = i.next_am();
        i.dispatching = next.is_some();
        drop(i);
        // A handler that panics ends this dispatcher, not every later one.
        let end = EndDispatch(self);
        // One lock a message: the one that puts the last handler back takes the next.
        while let Some((h, src, payload, mut f)) = next {
            f(src, &payload);
            let mut i = self.lock();
            // Put it back, unless it was replaced meanwhile (then drop it unlocked, as
            // `am_register` drops the one it replaces).
            let _replaced = match i.handlers.get_mut(h) {
                Some(slot @ None) => {
                    *slot = Some(f);
                    None
                }
                _ => Some(f),
            };
            if i.am_spare.len() < AM_SPARE {
                i.am_spare.push(payload);
            }
            next = i.next_am();
            i.dispatching = next.is_some();
            drop(i);
        }
        std::mem::forget(end);
    }

    /// Whether `op` has finished; `Some` at most once.
    pub fn test(&self, op: &Op) -> Result<Option<Done>> {
        if let Some(d) = op.early.take() {
            return finish_early(op.opcode, op.rank, d).map(Some);
        }
        let r = {
            let mut i = self.lock();
            if i.quiet_pass() {
                Ok(None)
            } else {
                i.progress()
                    .map(|_| i.done.remove(op.user).map(|c| finish(op, c)))
            }
        };
        self.run_handlers();
        r?.transpose()
    }

    /// Take every finished operation at once, as (its [`Op::id`], how it ended), in no
    /// particular order: one pass for a caller that tracks many operations (the libfabric
    /// provider) instead of a `test` per operation. What this returns is gone for `test` and
    /// `wait`. An operation that ended inside the call that started it ([`Op::ready`]) is
    /// not here: its `Op` holds its result. Returns how many it added to `out`.
    pub fn drain(&self, out: &mut Vec<(u64, Result<Done>)>) -> Result<usize> {
        self.drain_inner(out, None)
    }

    /// [`Ni::drain`], and every message whose tag equals `tag` on the bits of `mask` and
    /// whose payload the partition window's rings carry (eager ones, up to `BIG_MAX`) is
    /// copied into `taken` (appended) instead of into a posted receive — whichever receive
    /// would have matched it: the caller owns those tags. One copy from the ring into memory
    /// the caller reuses, no receive to post again, no completion: the libfabric provider
    /// takes its eager messages so. It still posts receives for those tags, which get what
    /// comes by the fabric, what is read in place, and what a pass without this call took
    /// from a ring into a receive (a `wait`'s); such a message completes in `out` or
    /// earlier. Those such a pass left waiting for a receive come first into `taken`: a
    /// sender's messages keep their order across the two ways.
    #[inline]
    pub fn drain_taking(
        &self,
        out: &mut Vec<(u64, Result<Done>)>,
        tag: u64,
        mask: u64,
        taken: &mut Taken,
    ) -> Result<usize> {
        self.drain_inner(out, Some((tag, mask, taken)))
    }

    /// The look that finds nothing (most of a polling loop's) inlined into its caller, the
    /// pass out of line.
    #[inline]
    fn drain_inner(
        &self,
        out: &mut Vec<(u64, Result<Done>)>,
        taking: Option<(u64, u64, &mut Taken)>,
    ) -> Result<usize> {
        let r = {
            let mut i = self.lock();
            if i.quiet_pass() {
                Ok(0)
            } else {
                Self::drain_pass(&mut i, out, taking)
            }
        };
        self.run_handlers();
        r
    }

    #[inline(never)]
    fn drain_pass(
        i: &mut Inner,
        out: &mut Vec<(u64, Result<Done>)>,
        taking: Option<(u64, u64, &mut Taken)>,
    ) -> Result<usize> {
        let r = match taking {
            None => i.progress(),
            Some((tag, mask, taken)) => {
                i.d.taking = Some(Taking {
                    tag,
                    mask,
                    taken: std::mem::take(taken),
                });
                if !i.d.unexpected.is_empty() {
                    i.w_unexpected_to_taken();
                }
                let r = i.progress();
                *taken = i.d.taking.take().unwrap().taken;
                r
            }
        };
        r.map(|_| {
            let n = i.done.len();
            i.done
                .drain(|user, c| out.push((user, finish_as(c.opcode, c.rank, c))));
            n
        })
    }

    /// One idle turn of a caller's own polling loop, taken as libni's waits take theirs:
    /// yield the CPU (host processes) or sleep 1 µs (guests), so the device's poller and a
    /// peer sharing the core get to run. A caller that polls `drain` without this can starve
    /// the very thread that would finish its operations.
    pub fn idle(&self) {
        match self.backoff {
            Backoff::Sleep => std::thread::sleep(Duration::from_micros(1)),
            Backoff::Yield => std::thread::yield_now(),
        }
    }

    /// Give up on `op` without waiting: its completion, now or later, is discarded (the NI
    /// still carries the operation out: a receive may still fill its buffer).
    pub fn forget(&self, op: Op) {
        if op.ready() {
            return;
        }
        let mut i = self.lock();
        if i.done.remove(op.user).is_none() {
            i.ignored.insert(op.user);
        }
    }

    /// Wait for `op`: poll, then yield, then sleep on the completion interrupt.
    pub fn wait(&self, op: Op) -> Result<Done> {
        self.wait_timeout(op, None)
    }

    /// Wait for every operation of `ops`, which it empties, pushing each one's result onto
    /// `out` in their order, as [`Ni::wait`] returns it (MPI_Waitall's shape). The
    /// operations that have finished by the time the wait reaches them finish together
    /// under one lock — a window of receives that one progress pass ended costs one lock,
    /// not one each.
    pub fn wait_all(&self, ops: &mut Vec<Op>, out: &mut Vec<Result<Done>>) {
        out.reserve(ops.len());
        // Taken at the first that did not end in the call that started it, kept while the
        // next ones are found finished.
        let mut i = None;
        // By reference: an `Op` moved out of the vector, then into the result, cost more
        // than the rest of a finished one's wait (8 B message rate on one core: 64 sends'
        // waits 1.5 µs, against 0.7 waited one by one).
        for op in ops.iter() {
            let r = if let Some(d) = op.early.take() {
                finish_early(op.opcode, op.rank, d)
            } else if let Some(c) = i.get_or_insert_with(|| self.lock()).done.remove(op.user) {
                finish(op, c)
            } else {
                // Not finished: wait for it as `wait` does (its passes may end those after
                // it too).
                i = None;
                self.wait_ref(op, None, true)
            };
            out.push(r);
        }
        drop(i);
        ops.clear();
        self.run_handlers();
    }

    pub fn wait_timeout(&self, op: Op, timeout: Option<Duration>) -> Result<Done> {
        self.wait_inner(op, timeout, true)
    }

    /// Wait without running active-message handlers (for callers holding the bounce
    /// buffer); handlers of what arrives meanwhile run at the next `progress` or wait.
    fn wait_quiet(&self, op: Op) -> Result<Done> {
        self.wait_inner(op, None, false)
    }

    fn wait_inner(&self, op: Op, timeout: Option<Duration>, handlers: bool) -> Result<Done> {
        self.wait_ref(&op, timeout, handlers)
    }

    /// [`Ni::wait_inner`] on an operation the caller keeps (it must not wait for it again).
    fn wait_ref(&self, op: &Op, timeout: Option<Duration>, handlers: bool) -> Result<Done> {
        if let Some(d) = op.early.take() {
            return self.finish_ready(op, d, handlers);
        }
        let mut t = WaitClock::default();
        loop {
            let step = self.wait_step(op, &mut t, timeout, handlers);
            if handlers {
                self.run_handlers();
            }
            match step {
                Ok(Some(r)) => return r,
                Ok(None) => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// A wait on `op`, which ended in the call that started it (`d`): as a wait that found
    /// it done at its first look, it runs the handlers queued meanwhile (with `handlers`).
    #[inline]
    fn finish_ready(&self, op: &Op, d: Done, handlers: bool) -> Result<Done> {
        if handlers {
            self.run_handlers();
        }
        finish_early(op.opcode, op.rank, d)
    }

    /// One round of `wait_inner`: `Some` once `op` finished or timed out.
    fn wait_step(
        &self,
        op: &Op,
        t: &mut WaitClock,
        timeout: Option<Duration>,
        handlers: bool,
    ) -> Result<Option<Result<Done>>> {
        {
            let mut i = self.lock();
            if let Some((took, sharers)) = t.yielded.take() {
                i.contention.yielded(took, sharers);
            }
            // An operation that finished before the wait (an eager send into the window)
            // needs no progress first.
            if !t.looked {
                if let Some(c) = i.done.remove(op.user) {
                    return Ok(Some(finish(op, c)));
                }
            }
            // The only receive posted, from one source, whose message is next in its ring:
            // no pass over the others, nor the finished table.
            if op.opcode == op::RECV {
                if let Some(c) = i.w_wait_recv(op.user, op.rank)? {
                    return Ok(Some(finish(op, c)));
                }
            }
            let queued = i.am_arrived.len();
            let sharers = i.cpu_sharers(self.backoff);
            // A wait's first look that finds nothing to take skips the pass when a member
            // waits on this cpu, or when the pass would only publish `HEAD`s (a receive
            // publishes its own once it lags a quarter ring, and the next look's pass the
            // rest): an answer from a member that shares this cpu cannot have come yet, and
            // the yield that follows is all this look is for. 8 B ping-pong on one core, by
            // turns in one launch: 15-45 ns less without the pass, 20-35 less again without
            // the look at whether it had work.
            let pass = t.looked || (sharers == 0 && !i.quiet_pass_but_heads());
            if pass {
                i.progress()?;
            }
            // Handlers to run now: do not sleep first.
            let arrived = handlers && i.am_arrived.len() > queued;
            // (Without a pass nothing finished since the look above.)
            if pass {
                if let Some(c) = i.done.remove(op.user) {
                    return Ok(Some(finish(op, c)));
                }
            }
            // A first look with members waiting on this cpu, and no limit, yields whatever
            // the clock says (`SPIN` is 0 there): its clock read waits for the next look,
            // whose wait then counts from there, a turn of the cpu short against the
            // milliseconds it is measured in (two clock reads fewer a one-cpu ping-pong).
            let first = !std::mem::replace(&mut t.looked, true);
            let now = if first && sharers > 0 && timeout.is_none() {
                None
            } else {
                Some(t.now.take().unwrap_or_else(Tick::now))
            };
            let idle = now.map_or(Duration::ZERO, |now| now.since(*t.since.get_or_insert(now)));
            if let Some(limit) = timeout {
                if idle > limit {
                    // Nobody will collect it now.
                    i.ignored.insert(op.user);
                    return Ok(Some(Err(Error::Timeout(limit))));
                }
            }
            // Members that wait on this cpu too take their turns between our looks: the
            // answer may be one of them, each turn a slice. Their slices also make our yields
            // late — a member that runs ahead (a scan's first, a broadcast's root) keeps its
            // whole slice — which is no cpu-bound stranger to block for: blocked, every wait
            // would end in a WAKE through the device (a scan of 1 f64 at P = 4 on 2 cpus:
            // 0.60-0.96 us against 0.25-0.42, 21000 blocks a second).
            let contended = sharers == 0 && i.contention.blocking();
            if idle > SPIN + YIELD * (sharers + 1) || contended {
                i.check_alive(true)?;
                // Ask for an interrupt, then look once more before sleeping.
                i.sram_u32(ctrl::CQ_ARM).store(1, Ordering::Release);
                fence(Ordering::SeqCst);
                if i.cq_ready() || arrived {
                    return Ok(None);
                }
                // Window peers write without the device: tell them to WAKE us, then look.
                if let Some(w) = i.win.as_mut() {
                    w.set_sleeping(true);
                    if i.w_pending() {
                        i.win.as_mut().unwrap().set_sleeping(false);
                        return Ok(None);
                    }
                }
            } else {
                let direct_spin = i.direct_spinning(self.backoff, idle, sharers);
                if direct_spin && i.unshared() {
                    // Spin on the words whose change gives a progress pass something to
                    // do, not on whole passes: the look that sees a message comes a few
                    // nanoseconds after it lands instead of up to a pass (clock read
                    // included) later.
                    let mut looks = 0;
                    while looks < WATCH_LOOKS && !i.w_pending() && !i.cq_ready() && i.unshared() {
                        std::hint::spin_loop();
                        looks += 1;
                    }
                    return Ok(None);
                }
                drop(i);
                match now {
                    // Members wait on this cpu: the yield hands it to them, and how long it
                    // took tells nothing `Contention` uses (it blocks only waiters alone).
                    Some(now) if sharers == 0 || direct_spin => {
                        if let Some((back, took)) = self.give_way(direct_spin, now, idle) {
                            t.now = Some(back);
                            t.yielded = Some((took, sharers));
                        }
                    }
                    _ => std::thread::yield_now(),
                }
                return Ok(None);
            }
        }
        wait_event(&self.cq_event, Duration::from_millis(20));
        let mut i = self.lock();
        if let Some(w) = i.win.as_mut() {
            w.set_sleeping(false);
        }
        i.w_ring_slept();
        Ok(None)
    }

    fn range_req(region: &Region, range: &Range<usize>) -> Result<(u64, u64)> {
        if range.start > range.end || range.end > region.len() {
            return Err(Error::BadArgument(format!(
                "range {range:?} is outside the {}-byte region",
                region.len()
            )));
        }
        Ok((
            region.iova() + range.start as u64,
            (range.end - range.start) as u64,
        ))
    }

    /// Start sending `buf[range]` to `dest` with `tag`; it completes when a matching receive
    /// took it (the NI copies it straight into the receiver's buffer).
    pub fn isend(&self, dest: u32, buf: &Region, range: Range<usize>, tag: u64) -> Result<Op> {
        let (addr, len) = Self::range_req(buf, &range)?;
        {
            let mut i = self.lock();
            if i.direct() {
                let started = i.w_send(dest, addr, len, tag)?;
                return Ok(Op::from_direct(&mut i, started, op::SEND, dest));
            }
        }
        self.start(Request {
            opcode: op::SEND,
            rank: dest,
            addr,
            len,
            tag,
            ..Default::default()
        })
    }

    /// Send `payload` to `dest` with `tag` straight into the partition window's ring toward
    /// it, if it can go there now: `Ok(true)`, and it is sent (as by an `isend` that
    /// completed at once: a receive matches it in order with this process's other sends).
    /// `Ok(false)`, and nothing done: no window, more than the window's eager size, the
    /// ring full or messages waiting for room in it, `dest` down or out of reach — send it
    /// as usual ([`Ni::isend`] from registered memory), which also reports why it failed.
    /// It spares a caller that copies small messages anyway (the libfabric provider's
    /// inject) the registered buffer and the [`Op`].
    pub fn send_now(&self, dest: u32, payload: &[u8], tag: u64) -> Result<bool> {
        let mut i = self.lock();
        if !i.direct() {
            return Ok(false);
        }
        i.w_send_now(dest, payload, tag)
    }

    pub fn send(&self, dest: u32, buf: &Region, range: Range<usize>, tag: u64) -> Result<()> {
        {
            // Most sends of a ping-pong go into the ring at once: done without an `Op`.
            let (addr, len) = Self::range_req(buf, &range)?;
            let mut i = self.lock();
            if i.direct() && i.w_send_region_now(dest, addr, len, tag)? {
                drop(i);
                self.run_handlers();
                return Ok(());
            }
        }
        let o = self.isend(dest, buf, range, tag)?;
        // In the ring already (most eager sends): done without a wait.
        if let Some(d) = o.early.take() {
            return self.finish_ready(&o, d, true).map(|_| ());
        }
        self.wait(o).map(|_| ())
    }

    /// Start a receive into `buf[range]` of a message from `src` (or any source) whose tag
    /// equals `tag` on the bits of `mask`.
    pub fn irecv(
        &self,
        src: Option<u32>,
        buf: &Region,
        range: Range<usize>,
        tag: u64,
        mask: u64,
    ) -> Result<Op> {
        let (addr, len) = Self::range_req(buf, &range)?;
        {
            let mut i = self.lock();
            if i.direct() {
                let src = src.unwrap_or(ANY_RANK);
                let started = i.w_recv(src, addr, len, tag, mask)?;
                let op = Op::from_direct(&mut i, started, op::RECV, src);
                drop(i);
                // Active messages it found in the ring before its own are queued: whoever
                // queues one runs the handlers.
                self.run_handlers();
                return Ok(op);
            }
        }
        self.start(Request {
            opcode: op::RECV,
            rank: src.unwrap_or(ANY_RANK),
            addr,
            len,
            tag,
            mask,
            ..Default::default()
        })
    }

    /// Take the message from `src` tagged exactly `tag` if it is already here to be read
    /// where its sender keeps it — a large message on the direct path, from a region the
    /// sender got from [`Ni::alloc`] (`fastpath.md`, "Tagged messages") — and it is the
    /// first such message here: `read` gets a pointer to its bytes in the sender's region
    /// and how many of them to take (at most `cap`), copies them wherever the caller wants,
    /// memory libni need not know, and the sender's send completes as for any receive.
    /// Returns what the message was (`len`: all of it, even past `cap`) and what `read`
    /// returned.
    ///
    /// `None`, with nothing taken: no such message is here yet, or it came another way (the
    /// fabric's, a guest's, memory the sender registered), or its bytes cannot be mapped
    /// here: post a receive for it ([`Ni::irecv`]) as always.
    ///
    /// `read` runs under the NI's lock and must not call this `Ni`. The bytes are the
    /// sender's memory, mapped shared: the pointer is valid for reads of the count given for
    /// the call, and a sender that lies may change them meanwhile (copy them; do not trust
    /// them twice).
    pub fn recv_in_place<R>(
        &self,
        src: u32,
        tag: u64,
        cap: usize,
        read: impl FnOnce(*const u8, usize) -> R,
    ) -> Option<(Done, R)> {
        let mut i = self.lock();
        if !i.direct() {
            return None;
        }
        let (len, r) = i.w_recv_in_place(src, tag, cap as u64, read).ok()??;
        Some((
            Done {
                status: Status::Ok,
                rank: src,
                len,
                tag,
                aux: 0,
            },
            r,
        ))
    }

    /// Receive: returns the source, tag and length. A longer message fails with
    /// `Status::Truncated` (the buffer holds its first bytes); the error's `len` and `tag`
    /// are the message's full length and its tag.
    pub fn recv(
        &self,
        src: Option<u32>,
        buf: &Region,
        range: Range<usize>,
        tag: u64,
        mask: u64,
    ) -> Result<Done> {
        let o = self.irecv(src, buf, range, tag, mask)?;
        self.wait(o)
    }

    /// MLINK WRITE: `local[range]` into `dest`'s region `key` at `offset`.
    pub fn put(
        &self,
        dest: u32,
        local: &Region,
        range: Range<usize>,
        key: u32,
        offset: u64,
    ) -> Result<()> {
        self.one_sided(op::PUT, dest, local, range, key, offset)
    }

    /// MLINK READ: `dest`'s region `key` at `offset` into `local[range]`.
    pub fn get(
        &self,
        dest: u32,
        local: &Region,
        range: Range<usize>,
        key: u32,
        offset: u64,
    ) -> Result<()> {
        self.one_sided(op::GET, dest, local, range, key, offset)
    }

    /// Start an MLINK WRITE (as `put`); it completes when the data is in the target's
    /// memory.
    pub fn iput(
        &self,
        dest: u32,
        local: &Region,
        range: Range<usize>,
        key: u32,
        offset: u64,
    ) -> Result<Op> {
        self.start_one_sided(op::PUT, dest, local, range, key, offset)
    }

    /// Start an MLINK READ (as `get`); it completes when the data is in `local`.
    pub fn iget(
        &self,
        dest: u32,
        local: &Region,
        range: Range<usize>,
        key: u32,
        offset: u64,
    ) -> Result<Op> {
        self.start_one_sided(op::GET, dest, local, range, key, offset)
    }

    fn start_one_sided(
        &self,
        opcode: u8,
        dest: u32,
        local: &Region,
        range: Range<usize>,
        key: u32,
        offset: u64,
    ) -> Result<Op> {
        let (addr, len) = Self::range_req(local, &range)?;
        {
            let mut i = self.lock();
            if i.direct() {
                if let Some(user) = i.w_one_sided(opcode, dest, addr, len, key, offset)? {
                    return Ok(Op::started(&mut i, user, opcode, dest));
                }
            }
        }
        self.start(Request {
            opcode,
            rank: dest,
            addr,
            len,
            key,
            tag: offset,
            ..Default::default()
        })
    }

    /// A blocking MLINK WRITE or READ: the target checks `key` and the bounds.
    fn one_sided(
        &self,
        opcode: u8,
        dest: u32,
        local: &Region,
        range: Range<usize>,
        key: u32,
        offset: u64,
    ) -> Result<()> {
        let o = self.start_one_sided(opcode, dest, local, range, key, offset)?;
        self.wait(o).map(|_| ())
    }

    /// MLINK NOOP: is `dest`'s NI up? `Err(Failed { status: PeerDown, .. })` if not.
    pub fn ping(&self, dest: u32) -> Result<()> {
        self.request(Request {
            opcode: op::NOOP,
            rank: dest,
            ..Default::default()
        })
        .map(|_| ())
    }

    /// MLINK RESET of a remote NI: reserved for the administrator (`ni-ctl`); always refused.
    pub fn reset_remote(&self, dest: u32) -> Result<()> {
        self.request(Request {
            opcode: op::RESET,
            rank: dest,
            ..Default::default()
        })
        .map(|_| ())
    }

    /// Run `f(source rank, payload)` for every active message sent to `handler`, from
    /// within `progress`/`wait`/`test` (and blocking calls), on the calling thread, with the
    /// NI unlocked: `f` may call back into this `Ni`, e.g. `am_send` a reply. Handlers run
    /// one at a time and do not nest: messages arriving while one runs (even during its own
    /// calls into the `Ni`) run after it returns, so a handler must not wait for another
    /// active message. Messages that arrived earlier run now (replacing a handler keeps
    /// them in order).
    pub fn am_register(&self, handler: u64, f: impl FnMut(u32, &[u8]) + Send + 'static) {
        // The handler replaced is dropped after the lock: what it owns (a `Region` of this
        // `Ni`) may lock the NI as it goes.
        let _replaced;
        {
            let mut i = self.lock();
            _replaced = i.handlers.insert(handler, Some(Box::new(f)));
            // Earlier arrivals go first, in their order.
            let pending = std::mem::take(&mut i.am_pending);
            let (mine, others): (Vec<_>, Vec<_>) =
                pending.into_iter().partition(|(h, _, _)| *h == handler);
            i.am_pending = others;
            for m in mine.into_iter().rev() {
                i.am_arrived.push_front(m);
            }
            i.am_queued_now();
        }
        self.run_handlers();
    }

    /// MLINK ROP: run `handler` at `dest` on `payload` (up to 4032 bytes). Returns once the
    /// message is in the target's active-message ring.
    pub fn am_send(&self, dest: u32, handler: u64, payload: &[u8]) -> Result<()> {
        if payload.len() as u64 > AM_MAX_PAYLOAD {
            return Err(Error::BadArgument(format!(
                "active-message payload of {} bytes exceeds {AM_MAX_PAYLOAD}",
                payload.len()
            )));
        }
        {
            // With a window the message goes member to member: into the ring toward `dest`,
            // whose libni hands it to the handler when it takes it (`direct.rs`).
            let mut i = self.lock();
            if i.direct() {
                if i.w_am_send_now(dest, handler, payload)? {
                    return Ok(());
                }
                let started = i.w_am_send(dest, handler, payload)?;
                let o = Op::from_direct(&mut i, started, op::ROP, dest);
                drop(i);
                // As below: no handler runs inside, so a handler's own reply never nests.
                return self.wait_quiet(o).map(|_| ());
            }
        }
        let _b = self.bounce.lock().unwrap_or_else(|e| e.into_inner());
        let addr = {
            let i = self.lock();
            i.bounce.write_at(0, payload);
            i.bounce.iova()
        };
        let o = self.start(Request {
            opcode: op::ROP,
            rank: dest,
            addr,
            len: payload.len() as u64,
            mask: handler,
            ..Default::default()
        })?;
        // The bounce buffer is reused: wait before returning (running no handler, which
        // might want the bounce buffer for a reply).
        self.wait_quiet(o).map(|_| ())
    }

    /// T3E SEND: one 64-byte message into `dest`'s queue at `mq`.
    pub fn mq_send(&self, dest: u32, mq: MqAddr, msg: &[u8; 64]) -> Result<MqOutcome> {
        {
            let mut i = self.lock();
            if i.direct() {
                match i.w_mq_send(dest, mq.key, mq.offset, msg)? {
                    Some(Ok((tail, false))) => return Ok(MqOutcome::Accepted { tail }),
                    Some(Ok((tail, true))) => {
                        drop(i);
                        self.mq_signal(dest, mq)?;
                        return Ok(MqOutcome::Accepted { tail });
                    }
                    Some(Err(())) => return Ok(MqOutcome::Rejected),
                    None => {}
                }
            }
        }
        let _b = self.bounce.lock().unwrap_or_else(|e| e.into_inner());
        let addr = {
            let i = self.lock();
            i.bounce.write_at(0, msg);
            i.bounce.iova()
        };
        let o = self.start(Request {
            opcode: op::MQ_SEND,
            rank: dest,
            addr,
            len: MQ_MESSAGE,
            key: mq.key,
            tag: mq.offset,
            ..Default::default()
        })?;
        match self.wait_quiet(o) {
            Ok(d) => Ok(MqOutcome::Accepted { tail: d.aux }),
            Err(Error::Failed {
                status: Status::QueueFull,
                ..
            }) => Ok(MqOutcome::Rejected),
            Err(e) => Err(e),
        }
    }

    /// A SEND stored member to member hit its queue's threshold: the device latches the
    /// receiver's IR_STATUS and MSG_ADDR and interrupts it. Waited for, so that nothing this
    /// sender does next reaches the receiver before it. Out of `mq_send`'s way: rare.
    #[cold]
    #[inline(never)]
    fn mq_signal(&self, dest: u32, mq: MqAddr) -> Result<()> {
        let o = self.start(Request {
            opcode: op::MQ_SIGNAL,
            rank: dest,
            key: mq.key,
            tag: mq.offset,
            ..Default::default()
        })?;
        match self.wait_quiet(o) {
            Ok(_) => Ok(()),
            // The message is in the queue; only its signal failed (the receiver left): the
            // SEND still happened.
            Err(Error::Failed { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// T3E IR_STATUS (bit 32 MSG_ADDR_VALID, bit 33 MSG_MULTIPLE) and MSG_ADDR.
    pub fn ir_status(&self) -> Result<(u64, u64)> {
        let mut i = self.lock();
        let mut s = [0u8; 8];
        let mut a = [0u8; 8];
        i.dev
            .region_read(pci::BAR0_REGION, fp::PAGE + fp::IR_STATUS, &mut s)?;
        i.dev
            .region_read(pci::BAR0_REGION, fp::PAGE + fp::MSG_ADDR, &mut a)?;
        Ok((u64::from_le_bytes(s), u64::from_le_bytes(a)))
    }

    /// Write IR_STATUS: `enable` the threshold interrupt and clear the bits set in `clear`.
    pub fn ir_write(&self, enable: bool, clear: u64) -> Result<()> {
        let v = (enable as u64 * fp::IR_ENABLE) | (clear & (fp::MSG_ADDR_VALID | fp::MSG_MULTIPLE));
        self.lock()
            .dev
            .region_write(pci::BAR0_REGION, fp::PAGE + fp::IR_STATUS, &v.to_le_bytes())
    }

    /// Wait up to `timeout` for the message-queue threshold interrupt. Returns whether it came.
    pub fn wait_mq_interrupt(&self, timeout: Duration) -> bool {
        wait_event(&self.mq_event, timeout)
    }

    /// A message queue of `limit` slots (slot 0 is the MQCW) in a fresh region, programmed
    /// Tail 1, Limit `limit`, Threshold `threshold`.
    pub fn mq_create(&self, limit: u64, threshold: u64) -> Result<MessageQueue> {
        if limit == 0 || limit > mqcw::MAX_LIMIT {
            return Err(Error::BadArgument(format!(
                "limit {limit} is not 1..={}",
                mqcw::MAX_LIMIT
            )));
        }
        let region = self.alloc(((limit + 1) * MQ_MESSAGE) as usize)?;
        let q = MessageQueue {
            region,
            head: 1,
            looked_empty: 0,
        };
        q.word()
            .store(mqcw::make(false, 1, limit, threshold), Ordering::SeqCst);
        Ok(q)
    }
}

/// An element-wise collective request cut into consecutive pieces of at most `per`
/// elements, each with its first element's index.
fn pieces(r: Request, esize: usize, per: usize) -> impl Iterator<Item = (usize, Request)> {
    let count = r.len as usize;
    (0..count).step_by(per.max(1)).map(move |at| {
        let off = (at * esize) as u64;
        let mut piece = r;
        piece.addr += off;
        piece.tag += off;
        piece.len = per.min(count - at) as u64;
        (at, piece)
    })
}

/// Element types of vector collectives.
pub trait Elem: Copy + Default + 'static {
    const DTYPE: u32;
    const SIZE: usize;
}

macro_rules! elem {
    ($t:ty, $d:ident) => {
        impl Elem for $t {
            const DTYPE: u32 = ni_abi::fastpath::dtype::$d;
            const SIZE: usize = std::mem::size_of::<$t>();
        }
    };
}
elem!(i32, I32);
elem!(u32, U32);
elem!(i64, I64);
elem!(u64, U64);
elem!(f32, F32);
elem!(f64, F64);

/// Reduction operators. Floats take `Sum`, `Prod`, `Min`, `Max`; the bitwise ones are for
/// integers. The CM-5 combiners map onto them (ADD and UADD are `Sum` on signed and unsigned).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReduceOp {
    Sum = 0,
    Prod = 1,
    Min = 2,
    Max = 3,
    And = 4,
    Or = 5,
    Xor = 6,
}

/// CM-5 combine patterns and combiners (§4.2), as the NI encodes them. `combine` takes the
/// scan and reduce patterns; network-done has its own call, `network_done`.
pub use ni_abi::cm5::{Combiner, Pattern};

/// What a CM-5 combine gave this member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CombineResult {
    /// `None` for an abstainer's scan (it gets no result).
    pub words: Option<Vec<u32>>,
    /// `com_scan_overflow`: the exact sum does not fit the words.
    pub overflow: bool,
}

pub use ni_abi::fastpath::participation;

/// A vector-collective request.
fn coll_request(
    kind: u8,
    dtype: u32,
    op: ReduceOp,
    root: u32,
    send: u64,
    recv: u64,
    count: usize,
) -> Request {
    Request {
        opcode: op::COLLECTIVE,
        flags: kind,
        access: dtype | (op as u32) << 8,
        rank: root,
        addr: send,
        tag: recv,
        len: count as u64,
        ..Default::default()
    }
}

impl Ni {
    fn span<T: Elem>(r: &Region, offset: usize, count: usize) -> Result<u64> {
        let bytes = count
            .checked_mul(T::SIZE)
            .and_then(|b| b.checked_add(offset))
            .ok_or_else(|| Error::BadArgument("count overflows".into()))?;
        if bytes > r.len() {
            return Err(Error::BadArgument(format!(
                "{count} elements at byte {offset} do not fit the {}-byte region",
                r.len()
            )));
        }
        Ok(r.iova() + offset as u64)
    }

    /// Barrier over the partition, done in the network.
    pub fn barrier(&self) -> Result<()> {
        let o = self.ibarrier()?;
        self.wait(o).map(|_| ())
    }

    pub fn ibarrier(&self) -> Result<Op> {
        self.start(coll_request(
            ni_abi::fastpath::coll::BARRIER,
            0,
            ReduceOp::Sum,
            0,
            0,
            0,
            0,
        ))
    }

    /// Every member's `buf[offset..]` (`count` elements) gets `root`'s.
    pub fn broadcast<T: Elem>(
        &self,
        root: u32,
        buf: &Region,
        offset: usize,
        count: usize,
    ) -> Result<()> {
        let a = Self::span::<T>(buf, offset, count)?;
        let r = coll_request(
            ni_abi::fastpath::coll::BCAST,
            T::DTYPE,
            ReduceOp::Sum,
            root,
            a,
            a,
            count,
        );
        self.collective_pieces(r, T::SIZE).map(|_| ())
    }

    /// Start the broadcast of [`Ni::broadcast`]; finish it with [`Ni::test`] or
    /// [`Ni::wait`]. Up to a window slot it runs member to member as the blocking call does;
    /// past one it is a single operation of the device's (no pieces, no exported memory), so
    /// the blocking call is the faster there. The device moves it while this process
    /// computes, which is what a non-blocking collective is for: pieces or reads of exported
    /// memory move only when the process calls into the NI, and a member that computed
    /// longer than the partition's collective timeout (`ni-device --collective-timeout`)
    /// between start and wait would make the others fail.
    pub fn ibroadcast<T: Elem>(
        &self,
        root: u32,
        buf: &Region,
        offset: usize,
        count: usize,
    ) -> Result<Op> {
        let a = Self::span::<T>(buf, offset, count)?;
        self.start(coll_request(
            ni_abi::fastpath::coll::BCAST,
            T::DTYPE,
            ReduceOp::Sum,
            root,
            a,
            a,
            count,
        ))
    }

    /// Reduce `count` elements of every member's `send` into `root`'s `recv`, in rank order.
    #[allow(clippy::too_many_arguments)]
    pub fn reduce<T: Elem>(
        &self,
        root: u32,
        op: ReduceOp,
        send: &Region,
        send_off: usize,
        recv: &Region,
        recv_off: usize,
        count: usize,
    ) -> Result<()> {
        let s = Self::span::<T>(send, send_off, count)?;
        let r = Self::span::<T>(recv, recv_off, count)?;
        self.collective_pieces(
            coll_request(
                ni_abi::fastpath::coll::REDUCE,
                T::DTYPE,
                op,
                root,
                s,
                r,
                count,
            ),
            T::SIZE,
        )
        .map(|_| ())
    }

    /// Every member gets the reduction of all members' `send` in its `recv` (may be the same
    /// place). Combined in rank order, so every member gets the same bits.
    pub fn allreduce<T: Elem>(
        &self,
        op: ReduceOp,
        send: &Region,
        send_off: usize,
        recv: &Region,
        recv_off: usize,
        count: usize,
    ) -> Result<()> {
        let s = Self::span::<T>(send, send_off, count)?;
        let r = Self::span::<T>(recv, recv_off, count)?;
        let req = coll_request(
            ni_abi::fastpath::coll::ALLREDUCE,
            T::DTYPE,
            op,
            0,
            s,
            r,
            count,
        );
        self.collective_pieces(req, T::SIZE).map(|_| ())
    }

    /// Start the allreduce of [`Ni::allreduce`]; finish it with [`Ni::test`] or [`Ni::wait`].
    /// As [`Ni::ibroadcast`]: past a window slot one operation of the device's.
    pub fn iallreduce<T: Elem>(
        &self,
        op: ReduceOp,
        send: &Region,
        send_off: usize,
        recv: &Region,
        recv_off: usize,
        count: usize,
    ) -> Result<Op> {
        let s = Self::span::<T>(send, send_off, count)?;
        let r = Self::span::<T>(recv, recv_off, count)?;
        self.start(coll_request(
            ni_abi::fastpath::coll::ALLREDUCE,
            T::DTYPE,
            op,
            0,
            s,
            r,
            count,
        ))
    }

    /// Prefix reduction: inclusive (member i gets ranks 0..=i) or exclusive (0..i; rank 0
    /// gets the identity).
    #[allow(clippy::too_many_arguments)]
    pub fn scan<T: Elem>(
        &self,
        op: ReduceOp,
        inclusive: bool,
        send: &Region,
        send_off: usize,
        recv: &Region,
        recv_off: usize,
        count: usize,
    ) -> Result<()> {
        let s = Self::span::<T>(send, send_off, count)?;
        let r = Self::span::<T>(recv, recv_off, count)?;
        let kind = if inclusive {
            ni_abi::fastpath::coll::SCAN
        } else {
            ni_abi::fastpath::coll::EXSCAN
        };
        self.collective_pieces(coll_request(kind, T::DTYPE, op, 0, s, r, count), T::SIZE)
            .map(|_| ())
    }

    /// Every member's `recv` gets all members' `count` elements, in rank order.
    pub fn allgather<T: Elem>(
        &self,
        send: &Region,
        send_off: usize,
        recv: &Region,
        recv_off: usize,
        count: usize,
    ) -> Result<()> {
        let s = Self::span::<T>(send, send_off, count)?;
        let r = Self::span::<T>(recv, recv_off, count * self.size as usize)?;
        let req = coll_request(
            ni_abi::fastpath::coll::ALLGATHER,
            T::DTYPE,
            ReduceOp::Sum,
            0,
            s,
            r,
            count,
        );
        self.allgather_request(req, T::SIZE)
    }

    /// An allgather of `esize`-byte elements, to the end. Past a slot, every member copies
    /// the others' vectors from their exported memory (`large.rs`; past 8 MiB in pieces,
    /// each into every member's block of the receive buffer), where the fabric's one thread
    /// copied them (32 MiB at P = 2 between two cpus: 19.3 ms, Open MPI 13.2).
    fn allgather_request(&self, req: Request, esize: usize) -> Result<()> {
        let bytes = req.len as usize * esize;
        if bytes > ni_abi::window::COLL_MAX as usize
            && self.direct()
            && large::applies(&req)
            && self.collective_shared(req, esize)?.is_some()
        {
            return Ok(());
        }
        self.request(req).map(|_| ())
    }

    /// Run the vector collective `r` (a [`coll_request`]) to the end, the way the typed
    /// blocking calls do (in window slots, in pieces, in exported memory: whatever its size
    /// and the partition allow), where [`Ni::icollective_raw`] starts it as one operation.
    /// The C ABI's blocking collectives use it.
    pub(crate) fn collective_blocking(&self, r: Request) -> Result<()> {
        use ni_abi::fastpath::coll;
        // A type the NI does not know: the device fails it with its status.
        let Some(esize) = ni_abi::fastpath::dtype::size(direct::dtype_op(&r).0) else {
            return self.request(r).map(|_| ());
        };
        match r.flags {
            coll::ALLGATHER => self.allgather_request(r, esize as usize),
            coll::BCAST | coll::REDUCE | coll::ALLREDUCE | coll::SCAN | coll::EXSCAN => {
                self.collective_pieces(r, esize as usize).map(|_| ())
            }
            _ => self.request(r).map(|_| ()),
        }
    }

    /// Start a collective on raw addresses, as one operation (what the C ABI's non-blocking
    /// collectives do).
    #[doc(hidden)]
    #[allow(clippy::too_many_arguments)]
    pub fn icollective_raw(
        &self,
        kind: u8,
        dtype: u32,
        op: ReduceOp,
        root: u32,
        send: u64,
        recv: u64,
        count: usize,
    ) -> Result<Op> {
        self.start(coll_request(kind, dtype, op, root, send, recv, count))
    }

    /// CM-5 combine of 1-5 words (adds: least significant word first; MAX: most first).
    pub fn combine(
        &self,
        pattern: Pattern,
        combiner: Combiner,
        words: &[u32],
        scan_start: bool,
    ) -> Result<CombineResult> {
        self.combine_raw(pattern as u8, combiner as u32, words, scan_start, false)
    }

    /// An abstainer (COM `rec_abstain`, `reduce_rec_abstain` clear) takes the next
    /// reduction result of `len` words without contributing, as the CM-5's PM does.
    pub fn combine_receive(&self, len: usize) -> Result<CombineResult> {
        self.combine_raw(
            Pattern::Reduce as u8,
            Combiner::Or as u32,
            &vec![0; len],
            false,
            true,
        )
    }

    /// Network-done: completes on every member once all non-abstainers have sent it and
    /// every message sent in the partition has been received.
    pub fn network_done(&self) -> Result<()> {
        self.combine_raw(0, 5, &[0], false, false).map(|_| ())
    }

    fn combine_raw(
        &self,
        pattern: u8,
        combiner: u32,
        words: &[u32],
        scan_start: bool,
        receive_only: bool,
    ) -> Result<CombineResult> {
        use ni_abi::fastpath::combine as c;
        if words.is_empty() || words.len() > c::MAX_WORDS as usize {
            return Err(Error::BadArgument(format!(
                "a combine takes 1 to 5 words, not {}",
                words.len()
            )));
        }
        let _b = self.bounce.lock().unwrap_or_else(|e| e.into_inner());
        let addr = {
            let i = self.lock();
            let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
            i.bounce.write_at(0, &bytes);
            i.bounce.iova()
        };
        let mut flags = pattern;
        if scan_start {
            flags |= c::SCAN_START;
        }
        if receive_only {
            flags |= c::RECEIVE_ONLY;
        }
        let o = self.start(Request {
            opcode: op::COMBINE,
            flags,
            access: combiner,
            addr,
            len: words.len() as u64,
            ..Default::default()
        })?;
        let d = self.wait_quiet(o)?;
        let has = d.aux & c::HAS_RESULT != 0;
        let result = has.then(|| {
            let i = self.lock();
            let mut b = vec![0u8; words.len() * 4];
            i.bounce.read_at(0, &mut b);
            b.chunks_exact(4)
                .map(|x| u32::from_le_bytes(x.try_into().unwrap()))
                .collect()
        });
        Ok(CombineResult {
            words: result,
            overflow: d.aux & c::OVERFLOW != 0,
        })
    }

    /// CM-5 synchronous global: a barrier that returns the OR of every member's bit.
    pub fn sync_global(&self, bit: bool) -> Result<bool> {
        self.request(Request {
            opcode: op::SYNC_GLOBAL,
            tag: bit as u64,
            ..Default::default()
        })
        .map(|d| d.tag & 1 != 0)
    }

    /// CM-5 asynchronous global: set this member's bit; `global_rec` follows the OR.
    pub fn set_async_global(&self, bit: bool) -> Result<()> {
        self.request(Request {
            opcode: op::ASYNC_GLOBAL,
            tag: bit as u64,
            ..Default::default()
        })
        .map(|_| ())
    }

    /// How often the asynchronous global OR rose from 0 to 1 while `GLOBAL_REC_IE` was set
    /// (the CM-5's Green `global rec` interrupt), as seen by `progress`.
    pub fn global_rises(&self) -> Result<u64> {
        self.progress()?;
        Ok(self.lock().global_rises)
    }

    /// The asynchronous global OR of the partition, as the NI last published it.
    pub fn global_rec(&self) -> bool {
        self.lock()
            .sram_u32(ctrl::GLOBAL_REC)
            .load(Ordering::Acquire)
            != 0
    }

    /// Set the control-network participation (abstain) flags: `participation::*`.
    pub fn set_participation(&self, flags: u32) -> Result<()> {
        self.request(Request {
            opcode: op::COM_CONTROL,
            access: flags,
            ..Default::default()
        })
        .map(|_| ())
    }

    /// Combine flush: every member calls it; clears a collision.
    pub fn combine_flush(&self) -> Result<()> {
        self.request(Request {
            opcode: op::COM_FLUSH,
            ..Default::default()
        })
        .map(|_| ())
    }
}

/// A T3E message queue in this process's memory: slot 0 is the MQCW, messages from slot 1.
pub struct MessageQueue {
    region: Region,
    head: u64,
    /// The time-stamp counter at the last look of `take_into` that found nothing new (0:
    /// the last found something, or none yet): the next look waits for [`MQ_LOOK_EVERY`].
    looked_empty: u64,
}

/// How far apart, in time-stamp counter ticks, [`MessageQueue::take_into`] keeps two looks
/// at the MQCW when the first found nothing: 150 ns at this machine's 2 GHz counter, 100 at
/// 3 GHz. A sender member to member takes the queue's lock word, stores, swaps the MQCW and
/// frees the lock: three read-modify-writes on the line that holds both, which a receiver
/// polling it in a tight loop takes away between them, each time for a line transfer.
/// Looks paced so, 64-byte SENDs between two cores went 0.199 -> 0.184 µs each (the `mq`
/// rate) and the queue's ping-pong 0.448 -> 0.402 µs a half round trip (medians of 12
/// launches each, taking turns; `tests/bench/README.md`, stop 56). The same pacing in
/// `Ni::relax`, for every polling loop, cost an active message's waiter (whose look is a
/// `progress` pass, and whose ring slot its sender writes once) 50 ns a half round trip.
const MQ_LOOK_EVERY: u64 = 300;
/// The most `spin_loop` pauses one such wait takes, whatever the counter says.
const MQ_PAUSES: u32 = 32;

impl MessageQueue {
    fn word(&self) -> &AtomicU64 {
        // SAFETY: the region starts page-aligned and holds at least one slot; the device
        // updates the MQCW only with atomic read-modify-writes.
        unsafe { &*(self.region.mem.ptr() as *const AtomicU64) }
    }

    /// Where peers send to.
    pub fn addr(&self) -> MqAddr {
        MqAddr {
            key: self.region.key,
            offset: 0,
        }
    }

    pub fn mqcw(&self) -> u64 {
        self.word().load(Ordering::Acquire)
    }

    /// The software reset: atomically swap in a new MQCW and get the old one back (its Tail
    /// is how far to drain).
    pub fn swap(&self, new: u64) -> u64 {
        self.word().swap(new, Ordering::AcqRel)
    }

    /// Messages stored and not yet taken, in order, advancing the software head pointer.
    /// A Tail beyond the queue's region (a swapped-in MQCW may say anything) counts as the
    /// region's end.
    pub fn take(&mut self) -> Vec<[u8; 64]> {
        let mut out = Vec::new();
        let mut some = [[0u8; 64]; 16];
        loop {
            let n = self.take_into(&mut some);
            out.extend_from_slice(&some[..n]);
            if n < some.len() {
                return out;
            }
        }
    }

    /// [`MessageQueue::take`] into `out`, at most `out.len()` messages; how many. Allocates
    /// nothing (a waiter polls with it). A look that comes within 300 time-stamp ticks of
    /// one that found nothing waits for them first (100-150 ns), so that a polling loop leaves
    /// the MQCW's line to its senders in between.
    pub fn take_into(&mut self, out: &mut [[u8; 64]]) -> usize {
        if self.looked_empty != 0 {
            self.pace();
        }
        let slots = self.region.len() as u64 / MQ_MESSAGE;
        let tail = mqcw::tail(self.mqcw()).min(slots);
        let n = tail.saturating_sub(self.head).min(out.len() as u64) as usize;
        self.looked_empty = if n == 0 { time_stamp() } else { 0 };
        for (i, m) in out[..n].iter_mut().enumerate() {
            let slot = self.head + i as u64;
            self.region.mem.read_at((slot * MQ_MESSAGE) as usize, m);
        }
        self.head += n as u64;
        n
    }

    /// Pause until [`MQ_LOOK_EVERY`] ticks have passed since the last look found nothing.
    fn pace(&self) {
        for _ in 0..MQ_PAUSES {
            let now = time_stamp();
            // A counter that went back (another cpu's) ends the pause too, as does none.
            if now == 0 || now.wrapping_sub(self.looked_empty) >= MQ_LOOK_EVERY {
                return;
            }
            std::hint::spin_loop();
        }
    }

    /// Reset the software head pointer (after a swap that restarts the queue at `slot`).
    pub fn set_head(&mut self, slot: u64) {
        self.head = slot;
    }

    pub fn region(&self) -> &Region {
        &self.region
    }
}

impl Region {
    pub fn len(&self) -> usize {
        self.mem.len()
    }

    pub fn is_empty(&self) -> bool {
        self.mem.len() == 0
    }

    /// The key peers name this region by.
    pub fn key(&self) -> u32 {
        self.key
    }

    /// The NI's address for it (its address in this process).
    pub fn iova(&self) -> u64 {
        self.mem.iova()
    }

    pub fn write_at(&self, offset: usize, data: &[u8]) {
        self.mem.write_at(offset, data)
    }

    pub fn read_at(&self, offset: usize, out: &mut [u8]) {
        self.mem.read_at(offset, out)
    }

    pub fn as_ptr(&self) -> *mut u8 {
        self.mem.ptr()
    }

    /// The region as a slice.
    ///
    /// # Safety
    /// No NI operation may be writing into the region (a receive, a peer's put) while the
    /// slice is alive.
    pub unsafe fn as_slice(&self) -> &[u8] {
        // SAFETY: the caller guarantees no concurrent device writes; the mapping is live.
        unsafe { std::slice::from_raw_parts(self.mem.ptr(), self.mem.len()) }
    }

    /// The region as a mutable slice.
    ///
    /// # Safety
    /// No NI operation may be reading or writing the region while the slice is alive.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn as_mut_slice(&self) -> &mut [u8] {
        // SAFETY: as above, and the caller holds no other reference into it.
        unsafe { std::slice::from_raw_parts_mut(self.mem.ptr(), self.mem.len()) }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        let Some(ni) = self.ni.upgrade() else { return };
        let mut i = ni.lock();
        if self.listed {
            i.regions.remove(&self.mem.iova());
            i.region_hit.take();
        }
        let r = Request {
            opcode: op::DEREG_MR,
            key: self.key,
            ..Default::default()
        };
        if let Ok(user) = i.post(r) {
            i.ignored.insert(user);
        }
        match self.pins.take() {
            None => {
                let _ = i.dev.dma_unmap(self.mem.iova(), self.mem.len() as u64);
            }
            Some(held) => {
                for ps in held {
                    let Some(p) = i.pins.get_mut(&ps) else {
                        continue;
                    };
                    p.refs -= 1;
                    if p.refs == 0 {
                        let p = i.pins.remove(&ps).expect("just seen");
                        let _ = i.dev.dma_unmap(ps, p.end - ps);
                        // The pages stay where they are, the application's (`p.mem` does
                        // not unmap them).
                        drop(p.mem);
                    }
                }
            }
        }
    }
}

#[inline]
fn finish(op: &Op, c: Completion) -> Result<Done> {
    finish_as(op.opcode, op.rank, c)
}

/// [`finish`] for an operation (`opcode` toward `rank`) that ended in the call that started
/// it ([`Op::early`], [`Begun::Now`]).
#[inline]
fn finish_early(opcode: u8, rank: u32, d: Done) -> Result<Done> {
    if d.status == Status::Ok {
        return Ok(d);
    }
    Err(failed_early(opcode, rank, d))
}

#[cold]
fn failed_early(opcode: u8, rank: u32, d: Done) -> Error {
    Error::Failed {
        op: op_name(opcode),
        status: d.status,
        rank: if d.rank == ANY_RANK { rank } else { d.rank },
        len: d.len,
        tag: d.tag,
    }
}

/// How an operation ended, from its completion as it stands.
#[inline]
fn done_of(c: &Completion) -> Done {
    Done {
        status: Status::from_u16(c.status).unwrap_or(Status::BadDescriptor),
        rank: c.rank,
        len: c.len,
        tag: c.tag,
        aux: c.aux,
    }
}

/// A completion as the caller sees it; `rank` names the peer when the completion does not.
#[inline]
fn finish_as(opcode: u8, rank: u32, c: Completion) -> Result<Done> {
    if c.status != Status::Ok as u16 {
        return Err(failed_as(opcode, rank, c));
    }
    Ok(Done {
        status: Status::Ok,
        rank: c.rank,
        len: c.len,
        tag: c.tag,
        aux: c.aux,
    })
}

#[cold]
fn failed_as(opcode: u8, rank: u32, c: Completion) -> Error {
    Error::Failed {
        op: op_name(opcode),
        status: Status::from_u16(c.status).unwrap_or(Status::BadDescriptor),
        rank: if c.rank == ANY_RANK { rank } else { c.rank },
        len: c.len,
        tag: c.tag,
    }
}

/// Spin first, then give the CPU away: never burn a core another runnable thread needs.
/// How long a waiter on the direct path polls before its backoff, where waiters yield (host
/// processes) and no other member of the window waits on its cpu: a peer on another cpu
/// answers a ping-pong within a microsecond or two, and a yield on a free cpu costs a
/// system call the answer then waits behind (8 B half round trip 0.36 µs yielding at once,
/// 0.25 µs with this spin, tests/bench/README.md). A peer on the same cpu gets its turn at
/// once instead: it cannot answer while we spin.
const SPIN_ALONE: Duration = Duration::from_micros(2);
/// [`Ni::relax`]: pauses one look that says spin stands for, and how early in a wait it must
/// come for that. A pause paces one poll of the caller's (a queue's MQCW: a few ns; a
/// `progress` pass: up to a few hundred), so the wait looks at the clock again about when
/// `SPIN_ALONE` ends, at worst a microsecond or so after.
const RELAX_SPINS: u32 = 8;
const RELAX_FRESH: Duration = Duration::from_micros(1);

/// A polling loop's wait, for [`Ni::relax`]: a fresh one (`Relax::default()`) each time the
/// loop starts to wait for something new. Its first pause reads when the wait began.
#[derive(Debug, Default)]
pub struct Relax {
    since: Option<Tick>,
}

/// What a wait's steps tell the next (`Ni::wait_step`).
#[derive(Default)]
struct WaitClock {
    /// A step looked already (the wait's first look is cheaper, `Ni::wait_step`).
    looked: bool,
    /// When the wait began: taken at the first look that finds the operation unfinished.
    since: Option<Tick>,
    /// The clock read when the last step's yield returned: the next step's `now`, which
    /// comes right after it (a clock read fewer a yield).
    now: Option<Tick>,
    /// That yield's length and the waiters it was among, for
    /// [`ni_abi::fastpath::Contention::yielded`] under the next step's lock (a lock fewer a
    /// yield).
    yielded: Option<(Duration, u32)>,
}

/// Ends the dispatcher of [`Ni::run_queued_handlers`] when a handler's panic unwinds through
/// it (forgotten on the way out otherwise: the last look at the queue ended it).
struct EndDispatch<'a>(&'a Ni);

impl Drop for EndDispatch<'_> {
    fn drop(&mut self) {
        self.0.lock().dispatching = false;
    }
}

/// Payload buffers kept for active messages to come.
const AM_SPARE: usize = 16;

/// Looks of a waiter that spins alone between two progress passes.
const WATCH_LOOKS: u32 = 32;

/// `NI_SPIN_NS`, if set: how long a waiter on the direct path polls before its backoff,
/// whoever shares its cpu.
fn spin_env() -> Option<Duration> {
    static SPIN_NS: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    SPIN_NS
        .get_or_init(|| {
            std::env::var("NI_SPIN_NS")
                .ok()
                .and_then(|s| s.parse().ok())
        })
        .map(Duration::from_nanos)
}

impl Inner {
    /// Whether a waiter on the direct path idle this long polls on rather than back off
    /// (`NI_SPIN_NS`: for that long). Default: [`SPIN_ALONE`] where waiters yield and no
    /// peer shares the cpu, else 0 (a spinning waiter would starve the peer sharing its
    /// core); 50 µs where they sleep
    /// (guests: a peer's answer through the window needs no device thread, and 1 µs sleeps
    /// cost a guest timer round trip each — 40 µs against 4.7 µs for an 8 B half round trip
    /// between two TCG guests).
    fn direct_spinning(&self, backoff: Backoff, idle: Duration, sharers: u32) -> bool {
        if !self.direct() {
            return false;
        }
        if let Some(d) = spin_env() {
            return idle < d;
        }
        match backoff {
            Backoff::Yield => idle < SPIN_ALONE && sharers == 0,
            Backoff::Sleep => idle < Duration::from_micros(50),
        }
    }

    /// Members of the window that last waited on this thread's cpu (0 off the direct path,
    /// and where waiters sleep: a guest's cpu numbers are its own vCPUs').
    fn cpu_sharers(&mut self, backoff: Backoff) -> u32 {
        if !self.direct() || backoff != Backoff::Yield {
            return 0;
        }
        self.win.as_mut().map_or(0, |w| w.cpu_sharers())
    }
}

fn pause(idle: Duration, backoff: Backoff) {
    if idle < SPIN {
        std::hint::spin_loop();
    } else if backoff == Backoff::Sleep {
        std::thread::sleep(Duration::from_micros(1));
    } else {
        std::thread::yield_now();
    }
}

/// Block until the eventfd fires or `timeout`. Returns whether it fired.
fn wait_event(ev: &File, timeout: Duration) -> bool {
    let mut pfd = libc::pollfd {
        fd: ev.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let r = unsafe { libc::poll(&mut pfd, 1, timeout.as_millis() as i32) };
    if r > 0 {
        let mut b = [0u8; 8];
        let _ = (&*ev).read(&mut b);
        true
    } else {
        false
    }
}
