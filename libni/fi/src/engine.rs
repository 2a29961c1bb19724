//! The endpoint's protocol: libfabric's tagged and untagged messages over libni's.
//!
//! libfabric's matching (a 64-bit tag under an ignore mask, a directed or any source, peek,
//! claim, discard, cancel, multi-receive buffers) and its remote CQ data need more than
//! libni's own tagged receive can say, so the provider matches in software, as PSM, rxm and
//! every provider over a plain message layer do — and every byte still crosses the NI:
//!
//! - **eager** (payload ≤ [`EAGER_MAX`]): one libni send whose tag is the [`Header`]'s word
//!   (bit 63 set: [`EAGER_TAG`]) and whose bytes are the header's few (the tag, wide CQ data)
//!   and the payload, into one of the receiver's [`RX_SLOTS`] pre-posted libni receives (any
//!   source, any tag with bit 63 set). With a partition window that is libni's own eager
//!   path (≤ 4 KiB, no device thread; an 8-byte MPI message is 16 bytes, one ring slot),
//!   gathered and put straight into the ring when it can go there at once
//!   (`Ni::send_now`: no transmit slot, no libni operation to wait for); otherwise from one
//!   of [`TX_SLOTS`] registered transmit slots, and without a window the fabric copies it.
//! - **rendezvous** (larger): the sender stages the payload in registered memory — the next
//!   piece of its send ring ([`crate::ring`]), or a pooled region — and posts a libni send
//!   with tag `RNDV_TAG | id`, plus an eager `RTS` header naming `id`. A receiver that
//!   matched the `RTS` takes the payload straight from the sender's memory into the
//!   application's buffer when libni has it there to be read (`Ni::recv_in_place`: the
//!   partition window); else it posts a libni receive from that source with that tag into a
//!   staging buffer no larger than its own receive buffer, so the NI copies the payload once
//!   and a lying length cannot make it allocate more than it posted.
//! - **rendezvous on request** (larger, when [`SEND_EAGER_MAX`] staged sends already wait
//!   for their receivers): the `RTS` carries `F_CTS` and the sender stages nothing yet. The
//!   receiver that matched it posts its libni receive and answers a `CTS` header; only then
//!   does the sender stage and send. Staging is registered memory, a file the daemon maps,
//!   and it holds at most 64 of one client's (`device/src/dma.rs`, `MAX_FILES`): were a send
//!   to wait for staging while every region waited for receivers the application has not yet
//!   posted, `MPI_Isend` would wait on its receiver. On request, a region is held only by a
//!   transfer both sides have agreed to, which the NIs finish without the applications.
//!
//! Ordering: every header carries a per-(sender → receiver) sequence number. libni keeps one
//! sender's messages in order and the receiver takes them in sequence order, so MPI's
//! non-overtaking holds (`FI_ORDER_SAS`).
//!
//! Everything a peer sends is checked (`Header::decode`: the word, and the bytes the NI
//! says arrived); a lie is dropped and counted, never trusted for a copy.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use ni::{Done, Error as NiError, Ni, Region, Status};
use smallvec::{smallvec, SmallVec};

use crate::cq::{Cq, Entry};
use crate::ffi::errno::*;
use crate::ffi::*;
use crate::ring::{self, Ring};
use crate::{warn, Av};

/// Bit 63 of a libni tag: a provider header message, its [`Header`]'s word (rendezvous
/// payloads, `RNDV_TAG | id`, have it clear). The receive slots take every tag with it set.
pub const EAGER_TAG: u64 = 1 << 63;
/// libni tag of a rendezvous payload: `RNDV_TAG | id` (id < 2^32).
pub const RNDV_TAG: u64 = 0x4E49_4652_0000_0000;
/// One slot: a message with its header's bytes. 4 KiB: libni's eager limit on the window.
pub const SLOT: usize = 4096;
/// A header's bytes in front of an eager payload, at most: the tag and a CQ data word too
/// wide for the header's word.
pub const PREFIX_MAX: usize = 16;
/// ... and in an `RTS`: those, then the length and the id.
const HEADER_MAX: usize = PREFIX_MAX + 16;
pub const EAGER_MAX: usize = SLOT - PREFIX_MAX;
/// Pre-posted eager receives.
pub const RX_SLOTS: usize = 128;
/// Eager send buffers (the transmit context's size).
pub const TX_SLOTS: usize = 256;
/// The largest message (`max_msg_size`): libni's largest single transfer.
pub const MAX_MSG: usize = 1 << 30;
/// Staging regions kept for reuse (bytes), so repeated large messages skip the memfd, the DMA
/// map and the page faults: at 64 MiB a 64 MiB allreduce (a send and a receive region) freed
/// one region per message: 260-313 ms where 32 MiB took 19.5 ms (with 256 MiB: 40 ms).
const POOL_BYTES: usize = 256 << 20;
/// Staging regions are allocated in powers of two from here.
const POOL_MIN: usize = 64 << 10;
/// Staging regions alive at once (in use and pooled). Each is a file the daemon maps, and it
/// takes at most 64 files of one client (`device/src/dma.rs`, `MAX_FILES`); the rest are the
/// slots, the send ring ([`ring`](crate::ring)) and libni's own rings.
const STAGING_MAX: usize = 35;
/// Of those (and of the send ring's pieces), in use at once by staged sends waiting for their
/// receivers (past it a send goes on request), ...
pub const SEND_EAGER_MAX: usize = 12;
/// ... by sends answering a `CTS` (past it a `CTS` waits for one of them to finish), ...
const SEND_CTS_MAX: usize = 10;
/// ... by RMA reads and writes from or into memory not registered with `fi_mr_reg` (past it
/// they answer `-FI_EAGAIN`), ...
const RMA_MAX: usize = 4;
/// ... and by matched receives (past it a receive waits for one of them to finish). The
/// classes sum to [`STAGING_MAX`], so a class under its limit always finds a file.
const RECV_MAX: usize = STAGING_MAX - SEND_EAGER_MAX - SEND_CTS_MAX - RMA_MAX;

const KIND_EAGER: u8 = 1;
const KIND_RTS: u8 = 2;
/// "Send rendezvous `id` now": the receiver of an `F_CTS` RTS posted its receive.
const KIND_CTS: u8 = 3;
const F_TAGGED: u8 = 1;
const F_DATA: u8 = 2;
/// RTS: the payload is not staged yet; the sender waits for a `CTS`.
const F_CTS: u8 = 4;

// The header's word (the message's libni tag), below bit 63 (`EAGER_TAG`).
const W_KIND_SHIFT: u32 = 61;
const W_TAGGED: u64 = 1 << 60;
const W_DATA: u64 = 1 << 59;
/// The CQ data is a u64 among the header's bytes, not the word's low 32 bits.
const W_DATA_WIDE: u64 = 1 << 58;
const W_CTS: u64 = 1 << 57;
const W_SEQ_SHIFT: u32 = 32;
/// Sequence numbers are 25 bits wide, wrapping: far more than one sender's messages a
/// progress pass can find (a ring's 1024 slots and the 128 receive slots).
pub const SEQ_MASK: u32 = (1 << 25) - 1;

/// What a staging region is held for (each class has its own limit).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    /// A send staged before its receiver matched.
    Eager = 0,
    /// A send staged after its receiver's `CTS`.
    Cts = 1,
    /// A matched receive.
    Recv = 2,
    /// An RMA read or write whose local buffer is not registered memory.
    Rma = 3,
}
const CLASS_MAX: [usize; 4] = [SEND_EAGER_MAX, SEND_CTS_MAX, RECV_MAX, RMA_MAX];

/// What every provider message says about itself. Most of it travels in the message's libni
/// tag (its *word*), so that an 8-byte MPI message — the MPI tag among the header's bytes, the
/// sender's rank as 32-bit CQ data in the word — is 16 bytes, which the window carries in the
/// ring's header slot itself (one cache line per message):
///
/// | word bits | what |
/// |---|---|
/// | 63 | 1 ([`EAGER_TAG`]) |
/// | 62..61 | kind: 1 eager, 2 `RTS`, 3 `CTS` |
/// | 60, 59, 58, 57 | tagged; CQ data; the data is wide (a u64 among the bytes); `F_CTS` (`RTS` only) |
/// | 56..32 | sequence number (per sender → receiver, 25 bits, wrapping) |
/// | 31..0 | CQ data of at most 32 bits (else 0) |
///
/// Then the message's bytes: the tag (u64, if tagged), the wide data (u64), then — eager —
/// the payload, its length the rest of the message; `RTS`: the message's length (u64) and
/// the rendezvous id (u64); `CTS`: the id (u64).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub kind: u8,
    pub flags: u8,
    pub seq: u32,
    pub tag: u64,
    pub data: u64,
    /// Eager: the payload's length. RTS: the message's length.
    pub len: u64,
    /// RTS, CTS: the rendezvous id.
    pub id: u64,
}

impl Header {
    /// The message's libni tag, and its bytes before the payload (into `out`, at least
    /// [`HEADER_MAX`] long): how many.
    pub fn encode(&self, out: &mut [u8]) -> (u64, usize) {
        let mut w = EAGER_TAG
            | (self.kind as u64) << W_KIND_SHIFT
            | ((self.seq & SEQ_MASK) as u64) << W_SEQ_SHIFT;
        let wide = self.flags & F_DATA != 0 && self.data > u32::MAX as u64;
        if self.flags & F_TAGGED != 0 {
            w |= W_TAGGED;
        }
        if self.flags & F_DATA != 0 {
            w |= W_DATA | if wide { W_DATA_WIDE } else { self.data };
        }
        if self.flags & F_CTS != 0 {
            w |= W_CTS;
        }
        let mut n = 0;
        let mut put = |x: u64| {
            out[n..n + 8].copy_from_slice(&x.to_le_bytes());
            n += 8;
        };
        if self.flags & F_TAGGED != 0 {
            put(self.tag);
        }
        if wide {
            put(self.data);
        }
        match self.kind {
            KIND_RTS => {
                put(self.len);
                put(self.id);
            }
            KIND_CTS => put(self.id),
            _ => {}
        }
        (w, n)
    }

    /// A message a peer sent with libni tag `word`: its header, checked, and where its
    /// payload starts.
    pub fn decode(word: u64, msg: &[u8]) -> Result<(Header, usize), String> {
        if word & EAGER_TAG == 0 {
            return Err(format!("libni tag {word:#x} names no header"));
        }
        let kind = (word >> W_KIND_SHIFT) as u8 & 3;
        let mut flags = 0;
        if word & W_TAGGED != 0 {
            flags |= F_TAGGED;
        }
        if word & W_DATA != 0 {
            flags |= F_DATA;
        }
        if word & W_CTS != 0 {
            flags |= F_CTS;
        }
        let wide = word & W_DATA_WIDE != 0;
        if wide && flags & F_DATA == 0 {
            return Err("wide data without data".into());
        }
        if (flags & F_DATA == 0 || wide) && word as u32 != 0 {
            return Err(format!("data bits {:#x} with no 32-bit data", word as u32));
        }
        if flags & F_CTS != 0 && kind != KIND_RTS {
            return Err(format!("F_CTS on kind {kind}"));
        }
        let mut n = 0;
        let mut take = || {
            let b = msg.get(n..n + 8)?;
            n += 8;
            Some(u64::from_le_bytes(b.try_into().unwrap()))
        };
        let short = || format!("{} bytes: shorter than its header", msg.len());
        let tag = match flags & F_TAGGED {
            0 => 0,
            _ => take().ok_or_else(short)?,
        };
        let data = match (flags & F_DATA, wide) {
            (0, _) => 0,
            (_, true) => take().ok_or_else(short)?,
            (_, false) => word & u32::MAX as u64,
        };
        let mut h = Header {
            kind,
            flags,
            seq: seq_of(word),
            tag,
            data,
            len: 0,
            id: 0,
        };
        match kind {
            KIND_EAGER => {
                h.len = (msg.len() - n) as u64;
                if h.len > EAGER_MAX as u64 {
                    return Err(format!("eager payload of {} bytes", h.len));
                }
            }
            KIND_RTS => {
                h.len = take().ok_or_else(short)?;
                h.id = take().ok_or_else(short)?;
                if msg.len() != n
                    || h.len as usize <= EAGER_MAX
                    || h.len > MAX_MSG as u64
                    || h.id > u32::MAX as u64
                {
                    return Err(format!(
                        "rendezvous of {} bytes, id {}, in {} bytes",
                        h.len,
                        h.id,
                        msg.len()
                    ));
                }
            }
            KIND_CTS => {
                h.id = take().ok_or_else(short)?;
                if msg.len() != n || flags != 0 || h.id > u32::MAX as u64 {
                    return Err(format!(
                        "CTS of id {}, flags {flags:#x}, in {} bytes",
                        h.id,
                        msg.len()
                    ));
                }
            }
            k => return Err(format!("unknown kind {k}")),
        }
        Ok((h, n))
    }

    fn tagged(&self) -> bool {
        self.flags & F_TAGGED != 0
    }
}

/// The id under which an operation's result reaches `Engine::progress`: `drain` reports it,
/// or, when libni finished it inside the call that started it, `early` holds it.
fn note(ni: &Ni, early: &mut Vec<(u64, ni::Result<Done>)>, op: ni::Op) -> u64 {
    let id = op.id();
    if op.ready() {
        early.push((id, ni.wait(op)));
    }
    id
}

/// A user buffer: (address, length) pieces. Addresses are the application's; kept as
/// integers so the engine is `Send` (the application owns the memory until the completion).
/// One piece is held inline: a heap allocation and its free per message were a tenth of an
/// MPI send's instructions (tests/bench/instr.sh, NIB_INSTR_PATTERN=send).
#[derive(Clone, Debug, Default)]
pub struct Iov(pub SmallVec<[(usize, usize); 1]>);

impl Iov {
    pub fn one(ptr: *mut u8, len: usize) -> Iov {
        if ptr.is_null() || len == 0 {
            Iov(SmallVec::new())
        } else {
            Iov(smallvec![(ptr as usize, len)])
        }
    }

    pub fn len(&self) -> usize {
        self.0.iter().map(|p| p.1).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn first(&self) -> usize {
        self.0.first().map_or(0, |p| p.0)
    }

    /// Scatter `data` into the pieces from their start; returns the bytes written.
    ///
    /// # Safety
    /// The pieces must be writable memory of the application, as posted.
    unsafe fn scatter(&self, data: &[u8]) -> usize {
        // SAFETY: the caller's guarantee for the pieces; `data` is readable for its length.
        unsafe { self.scatter_from(data.as_ptr(), data.len()) }
    }

    /// Copy `n` bytes from `from` into the pieces from their start (at most `self.len()`);
    /// returns the bytes written.
    ///
    /// # Safety
    /// As `scatter`'s, and `from` is readable for `n` bytes (not a reference: a peer's memory
    /// that may change meanwhile).
    unsafe fn scatter_from(&self, from: *const u8, n: usize) -> usize {
        let mut done = 0;
        for &(p, l) in &self.0 {
            if done == n {
                break;
            }
            let k = l.min(n - done);
            // SAFETY: the caller guarantees both sides for these bytes.
            unsafe { std::ptr::copy_nonoverlapping(from.add(done), p as *mut u8, k) };
            done += k;
        }
        done
    }

    /// Gather the pieces into `out` (which must hold `self.len()` bytes).
    ///
    /// # Safety
    /// The pieces must be readable memory of the application.
    unsafe fn gather(&self, out: &mut [u8]) {
        let mut at = 0;
        for &(p, l) in &self.0 {
            // SAFETY: the caller guarantees the piece is readable for `l` bytes.
            let src = unsafe { std::slice::from_raw_parts(p as *const u8, l) };
            out[at..at + l].copy_from_slice(src);
            at += l;
        }
    }
}

/// A posted receive.
#[derive(Debug)]
struct Posted {
    src: Option<u32>,
    tag: u64,
    ignore: u64,
    iov: Iov,
    context: usize,
    /// Whether it reports its completion.
    report: bool,
    /// `FI_MULTI_RECV`: bytes of the buffer used so far.
    multi: Option<usize>,
}

impl Posted {
    fn matches(&self, src: u32, tagged: bool, tag: u64) -> bool {
        self.src.is_none_or(|s| s == src)
            && (!tagged || (tag & !self.ignore) == (self.tag & !self.ignore))
    }
}

impl Delivery {
    /// A whole message into `iov` (not a piece of a multi-receive buffer).
    fn whole(iov: Iov, context: usize, report: bool, src: u32, hdr: Header) -> Delivery {
        Delivery {
            iov,
            context,
            report,
            src,
            hdr,
            multi_done: false,
        }
    }
}

/// Take posted receive `p` for a message of `len` bytes from `src`: the whole receive, or
/// (multi-receive) the next piece of its buffer. Returns where the message goes and whether
/// the receive is used up.
fn piece(
    p: &mut Posted,
    src: u32,
    hdr: Header,
    len: usize,
    min_multi_recv: usize,
) -> (Delivery, bool) {
    let mut d = Delivery::whole(Iov::default(), p.context, p.report, src, hdr);
    match p.multi {
        Some(used) => {
            let room = p.iov.len() - used;
            let take = len.min(room);
            d.iov = Iov(smallvec![(p.iov.first() + used, take)]);
            d.multi_done = room - take < min_multi_recv;
            p.multi = Some(used + take);
            let done = d.multi_done;
            (d, done)
        }
        None => {
            d.iov = std::mem::take(&mut p.iov);
            (d, true)
        }
    }
}

/// A message that arrived before its receive.
#[derive(Debug)]
struct Unexpected {
    src: u32,
    hdr: Header,
    /// Eager: the payload, copied out of its slot (so the slot is posted again at once);
    /// a small one inline: most messages a stream sends arrive before their receive is
    /// posted, and an allocation each was a tenth of their instructions.
    payload: Option<SmallVec<[u8; 64]>>,
}

impl Unexpected {
    fn len(&self) -> usize {
        self.payload
            .as_ref()
            .map_or(self.hdr.len as usize, |p| p.len())
    }
}

/// A libni operation the engine waits for.
enum Pending {
    /// An eager send (or RTS) from transmit slot `slot`; `user` is what to report.
    Eager { slot: usize, user: Option<SendDone> },
    /// A rendezvous payload being sent from `staging`.
    RndvSend {
        staging: Staged,
        class: Class,
        user: Option<SendDone>,
    },
    /// A rendezvous payload being received into `staging` for `to`.
    RndvRecv {
        staging: Option<Region>,
        to: Delivery,
    },
    /// An RMA read or write (MLINK READ/WRITE).
    Rma(RmaPending),
}

/// Where a rendezvous send's payload was staged.
enum Staged {
    /// A pooled region of its own (past [`ring::PIECE_MAX`], or the ring full).
    Pool(Region),
    /// The piece of the send ring at this offset.
    Ring(usize),
}

/// An RMA operation in flight: its local side and what it reports.
struct RmaPending {
    /// The registered region the NI reads or writes in place (kept alive until the end).
    _region: Option<Arc<Region>>,
    /// Or the staging region it goes through.
    staging: Option<Region>,
    /// A staged read's destination in the application's memory.
    copy_out: Option<(usize, usize)>,
    write: bool,
    done: SendDone,
}

/// The local side of an RMA operation.
pub enum RmaLocal {
    /// Within a region registered with `fi_mr_reg` (its `desc`): the NI works in place.
    Registered { region: Arc<Region>, offset: usize },
    /// Any other memory of the application's: staged.
    Buffer,
}

/// A send on request: its RTS went out; the payload is still the application's.
struct AwaitCts {
    iov: Iov,
    user: Option<SendDone>,
}

/// What a finished send reports.
struct SendDone {
    /// Whether success is reported (failures are, whenever there is a context to name).
    report: bool,
    context: usize,
    flags: u64,
    len: usize,
    dest: u32,
}

/// Where a received message goes once its bytes are here.
struct Delivery {
    iov: Iov,
    context: usize,
    report: bool,
    src: u32,
    hdr: Header,
    /// `FI_MULTI_RECV` and this was the buffer's last message.
    multi_done: bool,
}

/// Counters of what peers did wrong, and of the engine's work (for `FI_LOG_LEVEL=info`).
#[derive(Default, Debug, Clone, Copy)]
pub struct Counters {
    pub bad_headers: u64,
    pub out_of_order: u64,
    pub eager_sent: u64,
    /// Of `eager_sent`, those put straight into the window's ring (`Ni::send_now`); the
    /// rest went from a transmit slot.
    pub sent_now: u64,
    pub rndv_sent: u64,
    /// Of `rndv_sent`, those sent on request (RTS with `F_CTS`).
    pub rndv_on_request: u64,
    /// Of `rndv_sent`, those staged in a piece of the send ring (the rest in a pooled region).
    pub rndv_ring: u64,
    /// Rendezvous payloads received straight from the sender's memory into the
    /// application's (`Ni::recv_in_place`); the rest through a staging region.
    pub rndv_in_place: u64,
    /// `CTS` answers naming no send of ours.
    pub stray_cts: u64,
    pub received: u64,
    /// Eager messages (and `RTS`/`CTS` headers) libni copied for us straight from the
    /// window's rings (`Ni::drain_taking`); the rest came into receive slots.
    pub taken: u64,
    pub unexpected: u64,
}

pub struct Engine {
    pub ni: Arc<Ni>,
    pub rank: u32,
    pub size: u32,
    pub av: Option<Arc<Av>>,
    pub tx_cq: Option<Arc<Cq>>,
    pub rx_cq: Option<Arc<Cq>>,
    /// Bound with `FI_SELECTIVE_COMPLETION`: only requests flagged `FI_COMPLETION` report.
    pub tx_selective: bool,
    pub rx_selective: bool,
    /// Counters bound to the endpoint (`fi_ep_bind` of a counter).
    pub cntrs: crate::cntr::Bindings,
    /// The endpoint's default flags (`fi_info` tx/rx `op_flags`).
    pub tx_op_flags: u64,
    pub rx_op_flags: u64,
    pub min_multi_recv: usize,
    pub enabled: bool,
    rx: Option<Region>,
    /// libni receive id → rx slot.
    rx_ops: ni::IdMap<usize>,
    tx: Option<Region>,
    tx_free: Vec<usize>,
    ops: ni::IdMap<Pending>,
    tx_seq: Vec<u32>,
    rx_next: Vec<u32>,
    /// [tagged, untagged]
    posted: [VecDeque<Posted>; 2],
    unexpected: [VecDeque<Unexpected>; 2],
    claimed: HashMap<usize, Unexpected>,
    next_id: u32,
    /// Pooled staging regions by size, plus 1 for those that held receives: a region a
    /// receive wrote is never a send's, whose lines the receiver's core would still hold.
    pool: BTreeMap<usize, Vec<Region>>,
    pool_bytes: usize,
    /// The send ring's region and its pieces (`enable`).
    ring: Option<(Region, Ring)>,
    /// Staging regions alive (in use or pooled).
    staging_live: usize,
    /// Staging regions in use, by [`Class`].
    in_use: [usize; 4],
    /// Matched rendezvous receives waiting for a staging region.
    rndv_waiting: VecDeque<Delivery>,
    /// Sends on request waiting for their `CTS`, by (destination, id).
    await_cts: HashMap<(u32, u32), AwaitCts>,
    /// Sends whose `CTS` came, waiting for a staging region.
    cts_ready: VecDeque<(u32, u32, AwaitCts)>,
    /// `CTS` answers (to rank, id) waiting for a transmit slot.
    cts_out: VecDeque<(u32, u32)>,
    batch: Vec<(u64, ni::Result<Done>)>,
    /// Operations libni finished inside the call that started them (`Op::ready`): the next
    /// progress takes their results with what `drain` reports.
    early: Vec<(u64, ni::Result<Done>)>,
    /// `progress`'s arrivals, kept with their capacity.
    arrivals: Vec<Arrival>,
    /// Eager messages libni took from the window for `progress` (`Ni::drain_taking`).
    taken: ni::Taken,
    /// Where `send_now` gathers a header and payload: [`HEADER_MAX`] + [`EAGER_MAX`] bytes.
    now_buf: Vec<u8>,
    pub counters: Counters,
}

/// An arrival in `progress`: (source, sequence, where, (libni tag, length)).
type Arrival = (u32, u32, At, ni::Result<(u64, u64)>);

/// Where an arrived eager message is.
#[derive(Clone, Copy)]
enum At {
    /// In this receive slot.
    Slot(usize),
    /// The `Taken`'s message of this index.
    Taken(usize),
}

/// The sequence number after `seq`.
fn next_seq(seq: u32) -> u32 {
    seq.wrapping_add(1) & SEQ_MASK
}

/// The sequence number in a message's header word (its libni tag).
fn seq_of(word: u64) -> u32 {
    (word >> W_SEQ_SHIFT) as u32 & SEQ_MASK
}

/// libni's failure as libfabric's error number.
pub fn fi_err(e: &NiError) -> i32 {
    match e {
        NiError::Failed { status, .. } => match status {
            Status::PeerDown => FI_EHOSTDOWN,
            Status::OutOfPartition => FI_EADDRNOTAVAIL,
            Status::Truncated => FI_ETRUNC,
            Status::Cancelled => FI_ECANCELED,
            Status::Timeout => FI_ETIMEDOUT,
            Status::LinkDown => FI_ENETDOWN,
            Status::OtherHost => FI_EOPNOTSUPP,
            // RMA: the target's key, access or bounds (fi_rma(3) names no class; these are
            // what the kernel's verbs report for a rejected rkey and a bad address).
            Status::BadKey => FI_EACCES,
            Status::OutOfBounds => FI_EFAULT,
            _ => FI_EIO,
        },
        NiError::WouldBlock => FI_EAGAIN,
        NiError::BadArgument(_) => FI_EINVAL,
        NiError::Memory(_) => FI_ENOMEM,
        NiError::Timeout(_) => FI_ETIMEDOUT,
        NiError::Reset | NiError::DaemonGone(_) | NiError::Unplugged(_) => FI_ENETDOWN,
        _ => FI_EIO,
    }
}

impl Engine {
    pub fn new(ni: Arc<Ni>) -> Engine {
        let (rank, size) = (ni.rank(), ni.size());
        Engine {
            ni,
            rank,
            size,
            av: None,
            tx_cq: None,
            rx_cq: None,
            tx_selective: false,
            rx_selective: false,
            cntrs: Default::default(),
            tx_op_flags: FI_COMPLETION,
            rx_op_flags: FI_COMPLETION,
            min_multi_recv: 64,
            enabled: false,
            rx: None,
            rx_ops: ni::IdMap::default(),
            tx: None,
            tx_free: Vec::new(),
            ops: ni::IdMap::default(),
            tx_seq: vec![0; size as usize],
            rx_next: vec![0; size as usize],
            posted: [VecDeque::new(), VecDeque::new()],
            unexpected: [VecDeque::new(), VecDeque::new()],
            claimed: HashMap::new(),
            next_id: 0,
            pool: BTreeMap::new(),
            pool_bytes: 0,
            ring: None,
            staging_live: 0,
            in_use: [0; 4],
            rndv_waiting: VecDeque::new(),
            await_cts: HashMap::new(),
            cts_ready: VecDeque::new(),
            cts_out: VecDeque::new(),
            batch: Vec::new(),
            early: Vec::new(),
            arrivals: Vec::new(),
            taken: ni::Taken::default(),
            now_buf: vec![0; HEADER_MAX + EAGER_MAX],
            counters: Counters::default(),
        }
    }

    /// `fi_enable`: register the slots and post every eager receive.
    pub fn enable(&mut self) -> Result<(), (i32, String)> {
        if self.enabled {
            return Ok(());
        }
        let alloc = |n: usize| {
            self.ni.alloc(n * SLOT).map_err(|e| {
                (
                    fi_err(&e),
                    format!("registering {} KiB of slots: {e}", (n * SLOT) >> 10),
                )
            })
        };
        let rx = alloc(RX_SLOTS)?;
        let tx = alloc(TX_SLOTS)?;
        self.rx = Some(rx);
        self.tx = Some(tx);
        // Without its ring (no memory, or the daemon's files all taken) the endpoint still
        // works: every rendezvous is staged in a pooled region, as it was before the ring.
        self.ring = match self.ni.alloc(ring::RING_BYTES) {
            Ok(r) => Some((r, Ring::new(ring::RING_BYTES))),
            Err(e) => {
                warn(
                    FI_LOG_EP_CTRL,
                    &format!("ni: no send ring ({e}): rendezvous payloads staged one by one"),
                );
                None
            }
        };
        self.tx_free = (0..TX_SLOTS).rev().collect();
        for s in 0..RX_SLOTS {
            self.post_slot(s)
                .map_err(|e| (fi_err(&e), format!("posting receive slots: {e}")))?;
        }
        self.enabled = true;
        Ok(())
    }

    fn post_slot(&mut self, s: usize) -> ni::Result<()> {
        let rx = self.rx.as_ref().expect("enabled");
        let op = self
            .ni
            .irecv(None, rx, s * SLOT..(s + 1) * SLOT, EAGER_TAG, EAGER_TAG)?;
        self.rx_ops.insert(note(&self.ni, &mut self.early, op), s);
        Ok(())
    }

    pub fn tx_left(&self) -> usize {
        self.tx_free.len()
    }

    /// Before the endpoint goes: move along what the application already counts as sent —
    /// eager sends (an inject, or one whose completion was reported, is the application's to
    /// forget) and RMA — until the NI has them, at most `limit`. Closing the endpoint would
    /// otherwise drop them while still queued: a process that sends its last message and
    /// finalizes at once lost it (MPICH's p2p, through the fabric path, under load).
    /// Returns how many were still not done.
    pub fn flush(&mut self, limit: std::time::Duration) -> usize {
        let t = std::time::Instant::now();
        loop {
            self.progress();
            let left = self.in_flight(|p| matches!(p, Pending::Eager { .. } | Pending::Rma(_)));
            if left == 0 || t.elapsed() >= limit {
                return left;
            }
            self.ni.idle();
        }
    }

    /// Operations started and not finished that `kind` picks.
    fn in_flight(&self, kind: impl Fn(&Pending) -> bool) -> usize {
        self.ops.values().filter(|p| kind(p)).count()
    }

    /// Take what the NI finished and move every message and send along.
    #[inline]
    pub fn progress(&mut self) {
        if !self.enabled {
            return;
        }
        if let Err(e) = self
            .ni
            .drain_taking(&mut self.batch, EAGER_TAG, EAGER_TAG, &mut self.taken)
        {
            self.progress_failed(e);
        }
        // Most polls find nothing new, and nothing waits for what the last one freed: this
        // much stays small enough to inline into a read, the rest is out of line.
        if self.batch.is_empty()
            && self.taken.is_empty()
            && self.early.is_empty()
            && self.nothing_waits()
        {
            return;
        }
        self.progress_found();
    }

    #[cold]
    fn progress_failed(&self, e: ni::Error) {
        warn(FI_LOG_EP_DATA, &format!("ni: progress: {e}"));
    }

    /// [`Engine::progress`] once the NI gave it something, or something waits.
    #[inline(never)]
    fn progress_found(&mut self) {
        if !self.early.is_empty() {
            self.batch.append(&mut self.early);
        }
        let mut batch = std::mem::take(&mut self.batch);
        let mut taken = std::mem::take(&mut self.taken);
        // Most of the rest find only eager messages libni took from the rings, in ring
        // order, each sender's in sequence: nothing to sort them against.
        if batch.is_empty() && self.nothing_waits() {
            self.batch = batch;
            self.counters.taken += taken.len() as u64;
            for i in 0..taken.len() {
                let (src, word, msg) = taken.get(i);
                self.arrived(src, word, msg);
            }
            taken.clear();
            self.taken = taken;
            return;
        }
        // Arrivals in (source, sequence) order: a batch holds every completion the NI wrote
        // so far, and libni completes one sender's messages in order; those it took for us
        // from the window (`taken`) came after any of theirs it put in slots.
        let mut arrivals = std::mem::take(&mut self.arrivals);
        for (id, r) in batch.drain(..) {
            if let Some(slot) = self.rx_ops.remove(&id) {
                let (src, seq) = match &r {
                    Ok(d) => (d.rank, seq_of(d.tag)),
                    Err(_) => (u32::MAX, 0),
                };
                arrivals.push((src, seq, At::Slot(slot), r.map(|d| (d.tag, d.len))));
            } else if let Some(p) = self.ops.remove(&id) {
                self.finish_op(p, r);
            }
        }
        self.counters.taken += taken.len() as u64;
        for i in 0..taken.len() {
            let (src, word, msg) = taken.get(i);
            arrivals.push((
                src,
                seq_of(word),
                At::Taken(i),
                Ok((word, msg.len() as u64)),
            ));
        }
        self.batch = batch;
        // What waited for a staging region or a transmit slot, now that finished ones
        // returned theirs.
        while let Some(to) = self.rndv_waiting.pop_front() {
            if let Some(to) = self.try_rndv_recv(to) {
                self.rndv_waiting.push_front(to);
                break;
            }
        }
        self.answer_cts();
        self.flush_cts();
        let next = &self.rx_next;
        arrivals.sort_by_key(|a| arrival_order(next, a.0, a.1));
        for (src, _, at, r) in arrivals.drain(..) {
            match (at, r) {
                (At::Slot(slot), Ok((word, len))) => {
                    let msg = self.slot_msg(slot, len);
                    self.arrived(src, word, msg);
                }
                (At::Taken(i), Ok((word, _))) => self.arrived(src, word, taken.get(i).2),
                (_, Err(e)) => warn(FI_LOG_EP_DATA, &format!("ni: an eager receive failed: {e}")),
            }
            if let At::Slot(slot) = at {
                if let Err(e) = self.post_slot(slot) {
                    warn(
                        FI_LOG_EP_DATA,
                        &format!("ni: re-posting an eager receive: {e}"),
                    );
                }
            }
        }
        self.arrivals = arrivals;
        taken.clear();
        self.taken = taken;
    }

    /// No matched rendezvous waits for a staging region, no send for its `CTS`'s staging, no
    /// `CTS` for a transmit slot: a pass has only arrivals to handle.
    fn nothing_waits(&self) -> bool {
        self.rndv_waiting.is_empty() && self.cts_ready.is_empty() && self.cts_out.is_empty()
    }

    /// The `len` bytes (at most a slot's) a receive put into `slot`.
    fn slot_msg<'a>(&self, slot: usize, len: u64) -> &'a [u8] {
        let rx = self.rx.as_ref().expect("enabled");
        let n = (len as usize).min(SLOT);
        // SAFETY: the slot's receive completed and it is not posted again until its
        // message was handled (`progress`); the NI writes no other slot's range here, and
        // the region lives as long as the endpoint (the engine never drops `rx`).
        unsafe { std::slice::from_raw_parts(rx.as_ptr().add(slot * SLOT), n) }
    }

    /// A message from `src` with libni tag `word` (a slot's, or one libni took from the
    /// window for us): its header checked, then delivered, queued as unexpected, or answered.
    fn arrived(&mut self, src: u32, word: u64, msg: &[u8]) {
        let (h, at) = match Header::decode(word, msg) {
            Ok(h) if (src as usize) < self.rx_next.len() => h,
            r => {
                let why = r
                    .err()
                    .unwrap_or_else(|| "source outside the partition".into());
                self.counters.bad_headers += 1;
                warn(
                    FI_LOG_EP_DATA,
                    &format!("ni: dropped a message from rank {src}: {why}"),
                );
                return;
            }
        };
        let want = self.rx_next[src as usize];
        if h.seq != want {
            // Only a peer that does not follow the protocol skips: take its stream from here.
            self.counters.out_of_order += 1;
            warn(
                FI_LOG_EP_DATA,
                &format!(
                    "ni: rank {src} sent sequence {} where {want} was due",
                    h.seq
                ),
            );
        }
        self.rx_next[src as usize] = next_seq(h.seq);
        if h.kind == KIND_CTS {
            match self.await_cts.remove(&(src, h.id as u32)) {
                Some(a) => {
                    self.cts_ready.push_back((src, h.id as u32, a));
                    self.answer_cts();
                }
                None => {
                    self.counters.stray_cts += 1;
                    warn(
                        FI_LOG_EP_DATA,
                        &format!("ni: rank {src} sent a CTS for id {}: no such send", h.id),
                    );
                }
            }
            return;
        }
        self.counters.received += 1;
        let q = if h.tagged() { 0 } else { 1 };
        if h.kind == KIND_EAGER {
            if let Some(i) = self.posted[q]
                .iter()
                .position(|p| p.matches(src, h.tagged(), h.tag))
            {
                // Straight into the receive: no copy in between.
                let payload = &msg[at..];
                let (to, used_up) = piece(
                    &mut self.posted[q][i],
                    src,
                    h,
                    payload.len(),
                    self.min_multi_recv,
                );
                if used_up {
                    if i == 0 {
                        self.posted[q].pop_front();
                    } else {
                        self.posted[q].remove(i);
                    }
                }
                self.deliver(to, payload, payload.len());
                return;
            }
        }
        let payload = (h.kind == KIND_EAGER).then(|| SmallVec::from_slice(&msg[at..]));
        let u = Unexpected {
            src,
            hdr: h,
            payload,
        };
        if let Some(i) = self.posted[q]
            .iter()
            .position(|p| p.matches(src, h.tagged(), h.tag))
        {
            let (to, used_up) = piece(&mut self.posted[q][i], src, h, u.len(), self.min_multi_recv);
            if used_up {
                self.posted[q].remove(i);
            }
            self.deliver_unexpected(to, u);
        } else {
            self.counters.unexpected += 1;
            self.unexpected[q].push_back(u);
        }
    }

    /// Copy `payload` (a message of `full` bytes) into `to` and report it.
    fn deliver(&mut self, to: Delivery, payload: &[u8], full: usize) {
        // SAFETY: the application owns the posted buffer until this completion.
        let n = unsafe { to.iov.scatter(payload) };
        self.complete_recv(&to, n, full);
    }

    fn complete_recv(&mut self, to: &Delivery, n: usize, full: usize) {
        let h = &to.hdr;
        let mut flags = recv_flags(h.tagged());
        if h.flags & F_DATA != 0 {
            flags |= FI_REMOTE_CQ_DATA;
        }
        if to.multi_done {
            flags |= FI_MULTI_RECV;
        }
        let e = Entry {
            context: to.context,
            flags,
            len: n,
            buf: to.iov.first(),
            data: h.data,
            tag: h.tag,
            src: to.src,
        };
        crate::cntr::count(&self.cntrs.recv, full <= n);
        let Some(cq) = self.rx_cq.as_ref() else {
            return;
        };
        if full > n {
            // Truncated: always reported (the application must learn it lost bytes).
            cq.push_err(e, full - n, FI_ETRUNC, 0);
        } else if to.report {
            cq.push(e);
        }
    }

    /// Take a matched rendezvous's payload into `to` (in turn, after those that wait for a
    /// staging region).
    fn start_rndv_recv(&mut self, to: Delivery) {
        if !self.rndv_waiting.is_empty() {
            self.rndv_waiting.push_back(to);
        } else if let Some(to) = self.try_rndv_recv(to) {
            self.rndv_waiting.push_back(to);
        }
    }

    /// Post the libni receive of a rendezvous payload (and answer its `CTS` if the sender
    /// waits for one); gives `to` back when no staging region is free.
    fn try_rndv_recv(&mut self, to: Delivery) -> Option<Delivery> {
        let want = to.iov.len().min(to.hdr.len as usize);
        let tag = RNDV_TAG | to.hdr.id;
        if to.hdr.flags & F_CTS == 0 && want > 0 {
            // Its payload went before its RTS: when libni has it to be read in the sender's
            // memory (the direct path), straight into the application's buffer — no
            // staging region, no second copy.
            let iov = &to.iov;
            // SAFETY: the application owns the posted buffer until this receive completes,
            // which it does here; libni gives `n` readable bytes.
            let got = self.ni.recv_in_place(to.src, tag, want, |from, n| unsafe {
                iov.scatter_from(from, n)
            });
            if let Some((_, n)) = got {
                self.counters.rndv_in_place += 1;
                self.complete_recv(&to, n, to.hdr.len as usize);
                return None;
            }
        }
        let staging = match want {
            0 => None,
            n => match self.staging(n, Class::Recv) {
                Ok(Some(r)) => Some(r),
                Ok(None) => return Some(to),
                Err(e) => {
                    self.fail_recv(&to, fi_err(&e), &format!("staging {n} bytes: {e}"));
                    return None;
                }
            },
        };
        let posted = match &staging {
            Some(r) => self.ni.irecv(Some(to.src), r, 0..want, tag, u64::MAX),
            None => {
                // Nothing to keep: take the payload into the zero-length tail of the rx slots.
                let rx = self.rx.as_ref().expect("enabled");
                self.ni.irecv(Some(to.src), rx, 0..0, tag, u64::MAX)
            }
        };
        match posted {
            Ok(op) => {
                if to.hdr.flags & F_CTS != 0 {
                    self.cts_out.push_back((to.src, to.hdr.id as u32));
                    self.flush_cts();
                }
                self.ops.insert(
                    note(&self.ni, &mut self.early, op),
                    Pending::RndvRecv { staging, to },
                );
            }
            Err(e) => {
                if let Some(s) = staging {
                    self.recycle(s, Class::Recv);
                }
                self.fail_recv(&to, fi_err(&e), &format!("rendezvous receive: {e}"));
            }
        }
        None
    }

    /// Send a header without payload (`RTS`, `CTS`) to `dest` from transmit slot `slot`.
    fn send_header(&self, dest: u32, slot: usize, h: &Header) -> ni::Result<ni::Op> {
        let tx = self.tx.as_ref().expect("enabled");
        let at = slot * SLOT;
        let mut b = [0u8; HEADER_MAX];
        let (word, n) = h.encode(&mut b);
        tx.write_at(at, &b[..n]);
        self.ni.isend(dest, tx, at..at + n, word)
    }

    /// Send the `CTS` answers that wait, while transmit slots last.
    fn flush_cts(&mut self) {
        while let (Some(&(to, id)), Some(&slot)) = (self.cts_out.front(), self.tx_free.last()) {
            let h = Header {
                kind: KIND_CTS,
                flags: 0,
                seq: self.tx_seq[to as usize],
                tag: 0,
                data: 0,
                len: 0,
                id: id as u64,
            };
            match self.send_header(to, slot, &h) {
                Ok(op) => {
                    self.tx_free.pop();
                    self.tx_seq[to as usize] = next_seq(h.seq);
                    self.ops.insert(
                        note(&self.ni, &mut self.early, op),
                        Pending::Eager { slot, user: None },
                    );
                    self.cts_out.pop_front();
                }
                // libni's send ring is full: try again on the next progress.
                Err(NiError::WouldBlock) => break,
                Err(e) => {
                    // The sender never learns to send: its receive here is left posted, as
                    // when its RTS had been lost with the link.
                    warn(
                        FI_LOG_EP_DATA,
                        &format!("ni: CTS to rank {to} for id {id}: {e}"),
                    );
                    self.cts_out.pop_front();
                }
            }
        }
    }

    /// Stage and send the payloads whose `CTS` came, while staging regions last.
    fn answer_cts(&mut self) {
        while let Some((dest, id, a)) = self.cts_ready.pop_front() {
            // The application keeps the send's buffer until its completion, which has not
            // been reported.
            match self.stage_and_send(dest, &a.iov, id, Class::Cts) {
                Ok(Some((staging, op))) => {
                    self.ops.insert(
                        note(&self.ni, &mut self.early, op),
                        Pending::RndvSend {
                            staging,
                            class: Class::Cts,
                            user: a.user,
                        },
                    );
                }
                Ok(None) => {
                    self.cts_ready.push_front((dest, id, a));
                    return;
                }
                Err(e) => {
                    if let Some(u) = a.user {
                        self.complete_send(u, Err(e));
                    }
                }
            }
        }
    }

    fn fail_recv(&mut self, to: &Delivery, err: i32, why: &str) {
        warn(
            FI_LOG_EP_DATA,
            &format!("ni: receive from rank {}: {why}", to.src),
        );
        crate::cntr::count(&self.cntrs.recv, false);
        if to.context == 0 {
            return;
        }
        if let Some(cq) = self.rx_cq.clone() {
            cq.push_err(
                empty_recv(to.context, to.hdr.tagged(), to.hdr.tag, to.hdr.data, to.src),
                0,
                err,
                0,
            );
        }
    }

    fn finish_op(&mut self, p: Pending, r: ni::Result<Done>) {
        match p {
            Pending::Eager { slot, user } => {
                self.tx_free.push(slot);
                if let Some(u) = user {
                    self.complete_send(u, r.map(|_| ()));
                }
            }
            Pending::RndvSend {
                staging,
                class,
                user,
            } => {
                self.give_back(staging, class);
                if let Some(u) = user {
                    self.complete_send(u, r.map(|_| ()));
                }
            }
            Pending::Rma(p) => self.finish_rma(p, r.map(|_| ())),
            Pending::RndvRecv { staging, to } => {
                let full = to.hdr.len as usize;
                let got = match &r {
                    Ok(d) => Some(d.len as usize),
                    // Our staging holds the receive buffer's worth: the rest is truncated.
                    Err(NiError::Failed {
                        status: Status::Truncated,
                        ..
                    }) => Some(to.iov.len()),
                    Err(_) => None,
                };
                match got {
                    Some(got) => {
                        let n = match &staging {
                            Some(s) => {
                                // SAFETY: the receive into `s` completed.
                                let bytes = unsafe { &s.as_slice()[..got.min(s.len())] };
                                // SAFETY: the application owns the posted buffer until now.
                                unsafe { to.iov.scatter(bytes) }
                            }
                            None => 0,
                        };
                        self.complete_recv(&to, n, full);
                    }
                    None => {
                        let e = r.err().unwrap();
                        self.fail_recv(&to, fi_err(&e), &e.to_string());
                    }
                }
                if let Some(s) = staging {
                    self.recycle(s, Class::Recv);
                }
            }
        }
    }

    /// Start an RMA write (`write`) of `len` bytes at `buf` into `dest`'s region `key` at
    /// offset `addr`, or a read of them into `buf` (MLINK WRITE/READ: the target's NI
    /// checks the key, its access and the bounds). `-FI_EAGAIN` while no transmit staging
    /// is free for an unregistered buffer.
    #[allow(clippy::too_many_arguments)]
    pub fn rma(
        &mut self,
        write: bool,
        dest: u32,
        buf: usize,
        len: usize,
        local: RmaLocal,
        addr: u64,
        key: u64,
        context: usize,
        flags: u64,
        inject: bool,
    ) -> Result<(), (i32, String)> {
        if !self.enabled {
            return Err((FI_EOPBADSTATE, "the endpoint is not enabled".into()));
        }
        if len > MAX_MSG {
            return Err((
                FI_EMSGSIZE,
                format!("{len} bytes: more than max_msg_size {MAX_MSG}"),
            ));
        }
        let key = u32::try_from(key).map_err(|_| {
            (
                FI_EINVAL,
                format!("key {key:#x} is no key this provider gives"),
            )
        })?;
        let rma = |p: &Pending| matches!(p, Pending::Rma(_));
        if flags & FI_FENCE != 0 && self.in_flight(rma) > 0 {
            // Started only once everything before it finished (fi_rma(3) FI_FENCE).
            self.progress();
            if self.in_flight(rma) > 0 {
                return Err((FI_EAGAIN, String::new()));
            }
        }
        let report = !inject && (!self.tx_selective || flags & FI_COMPLETION != 0);
        let done = SendDone {
            report,
            context: if inject { 0 } else { context },
            flags: FI_RMA | if write { FI_WRITE } else { FI_READ },
            len,
            dest,
        };
        let (region, staging, offset) = match local {
            RmaLocal::Registered { region, offset } => (Some(region), None, offset),
            RmaLocal::Buffer => {
                self.progress();
                let Some(st) = self
                    .staging(len.max(1), Class::Rma)
                    .map_err(|e| (fi_err(&e), format!("staging {len} bytes: {e}")))?
                else {
                    return Err((FI_EAGAIN, String::new()));
                };
                if write && len > 0 {
                    // SAFETY: the application's buffer of `len` bytes (fi_rma(3): the provider's
                    // until the completion; inject: until this call returns).
                    let src = unsafe { std::slice::from_raw_parts(buf as *const u8, len) };
                    st.write_at(0, src);
                }
                (None, Some(st), 0)
            }
        };
        let target = match (&region, &staging) {
            (Some(r), _) => &**r,
            (None, Some(s)) => s,
            (None, None) => unreachable!("one of the two is set above"),
        };
        let range = offset..offset + len;
        let started = if write {
            self.ni.iput(dest, target, range, key, addr)
        } else {
            self.ni.iget(dest, target, range, key, addr)
        };
        match started {
            Ok(op) => {
                let copy_out = (!write && staging.is_some()).then_some((buf, len));
                self.ops.insert(
                    note(&self.ni, &mut self.early, op),
                    Pending::Rma(RmaPending {
                        _region: region,
                        staging,
                        copy_out,
                        write,
                        done,
                    }),
                );
                Ok(())
            }
            Err(e) => {
                if let Some(s) = staging {
                    self.recycle(s, Class::Rma);
                }
                Err((fi_err(&e), format!("to rank {dest}: {e}")))
            }
        }
    }

    fn finish_rma(&mut self, p: RmaPending, r: Result<(), NiError>) {
        if let (Ok(()), Some((buf, len)), Some(s)) = (&r, p.copy_out, &p.staging) {
            // SAFETY: the read into `s` completed; the application's buffer is ours until
            // this completion.
            unsafe {
                std::ptr::copy_nonoverlapping(s.as_ptr(), buf as *mut u8, len);
            }
        }
        if let Some(s) = p.staging {
            self.recycle(s, Class::Rma);
        }
        let u = p.done;
        crate::cntr::count(
            if p.write {
                &self.cntrs.write
            } else {
                &self.cntrs.read
            },
            r.is_ok(),
        );
        let (op, len, dest) = (if p.write { "fi_write" } else { "fi_read" }, u.len, u.dest);
        let what = move || format!("{op} of {len} bytes with rank {dest}");
        // fi_cq(3): an RMA completion's len is 0 (nothing was received)
        self.report_tx(u, 0, r, what);
    }

    /// The eager message `h` of `iov` straight into the window's ring toward `dest`, header
    /// and payload gathered into `now_buf` (no transmit slot, no libni operation), if libni
    /// can put it there now (`Ni::send_now`); false, and nothing sent, if not.
    fn send_now(&mut self, dest: u32, iov: &Iov, h: &Header) -> Result<bool, (i32, String)> {
        let len = iov.len();
        let b = &mut self.now_buf;
        let (word, n) = h.encode(b);
        // SAFETY: the caller's buffer is readable for `len` bytes (fi_tsend's contract).
        unsafe { iov.gather(&mut b[n..n + len]) };
        let sent = self
            .ni
            .send_now(dest, &b[..n + len], word)
            .map_err(|e| (fi_err(&e), format!("send to rank {dest}: {e}")))?;
        if sent {
            self.tx_seq[dest as usize] = next_seq(h.seq);
            self.counters.eager_sent += 1;
            self.counters.sent_now += 1;
        }
        Ok(sent)
    }

    fn complete_send(&mut self, u: SendDone, r: Result<(), NiError>) {
        crate::cntr::count(&self.cntrs.send, r.is_ok());
        let (len, dest) = (u.len, u.dest);
        self.report_tx(u, len, r, || format!("send to rank {dest}"));
    }

    /// A transmit-side completion on the transmit CQ: a success if asked for, a failure
    /// (with a warning naming `what`, said only then: sends complete by the million) whenever
    /// there is a context to report it under.
    fn report_tx(
        &mut self,
        u: SendDone,
        len: usize,
        r: Result<(), NiError>,
        what: impl FnOnce() -> String,
    ) {
        if r.is_ok() && !u.report {
            return;
        }
        let Some(cq) = self.tx_cq.as_ref() else {
            return;
        };
        let e = Entry {
            context: u.context,
            flags: u.flags,
            len,
            buf: 0,
            data: 0,
            tag: 0,
            src: u.dest,
        };
        match r {
            Ok(()) => cq.push(e),
            Err(err) => {
                warn(FI_LOG_EP_DATA, &format!("ni: {}: {err}", what()));
                if u.context != 0 {
                    cq.push_err(e, 0, fi_err(&err), 0);
                }
            }
        }
    }

    /// A registered buffer of at least `n` bytes for `class`, from the pool when one is free;
    /// `None` when the class has its limit in use.
    fn staging(&mut self, n: usize, class: Class) -> ni::Result<Option<Region>> {
        let c = class as usize;
        if self.in_use[c] >= CLASS_MAX[c] {
            return Ok(None);
        }
        let size = n.max(POOL_MIN).next_power_of_two();
        if let Some(r) = self.pool.get_mut(&pool_key(size, class)).and_then(Vec::pop) {
            self.pool_bytes -= size;
            self.in_use[c] += 1;
            return Ok(Some(r));
        }
        if self.staging_live >= STAGING_MAX {
            // Make room by dropping a pooled region of another size (there is one: the
            // classes' limits sum to STAGING_MAX and this one is under its own).
            let Some((&other, _)) = self.pool.iter().find(|(_, v)| !v.is_empty()) else {
                return Ok(None);
            };
            let r = self.pool.get_mut(&other).and_then(Vec::pop).unwrap();
            self.pool_bytes -= r.len();
            self.staging_live -= 1;
            drop(r);
        }
        let r = self.ni.alloc(size)?;
        self.staging_live += 1;
        self.in_use[c] += 1;
        Ok(Some(r))
    }

    fn recycle(&mut self, r: Region, class: Class) {
        self.in_use[class as usize] -= 1;
        let size = r.len();
        if size.is_power_of_two() && self.pool_bytes + size <= POOL_BYTES {
            self.pool_bytes += size;
            self.pool.entry(pool_key(size, class)).or_default().push(r);
        } else {
            self.staging_live -= 1;
        }
    }

    /// Stage `iov` for a rendezvous send to `dest` under `id` and post its libni send: in a
    /// piece of the send ring when one is free and large enough, else in a pooled region.
    /// `None`: `class` has its limit in use (nothing staged, nothing sent). The caller's
    /// buffer must stay readable for the call.
    fn stage_and_send(
        &mut self,
        dest: u32,
        iov: &Iov,
        id: u32,
        class: Class,
    ) -> ni::Result<Option<(Staged, ni::Op)>> {
        let len = iov.len();
        let c = class as usize;
        if self.in_use[c] >= CLASS_MAX[c] {
            return Ok(None);
        }
        let piece = match &mut self.ring {
            Some((_, ring)) if len <= ring::PIECE_MAX => ring.take(len),
            _ => None,
        };
        let staged = match piece {
            Some(at) => {
                self.in_use[c] += 1;
                self.counters.rndv_ring += 1;
                Staged::Ring(at)
            }
            None => match self.staging(len, class)? {
                Some(r) => Staged::Pool(r),
                None => return Ok(None),
            },
        };
        let (region, at) = match &staged {
            Staged::Pool(r) => (r, 0),
            Staged::Ring(at) => (&self.ring.as_ref().expect("a piece of it").0, *at),
        };
        // SAFETY: the piece (or region) is ours until its send completes and holds `len`
        // bytes from `at`; the caller's buffer is readable for `len` bytes.
        unsafe {
            iov.gather(std::slice::from_raw_parts_mut(region.as_ptr().add(at), len));
        }
        match self
            .ni
            .isend(dest, region, at..at + len, RNDV_TAG | id as u64)
        {
            Ok(op) => Ok(Some((staged, op))),
            Err(e) => {
                self.give_back(staged, class);
                Err(e)
            }
        }
    }

    fn give_back(&mut self, staged: Staged, class: Class) {
        match staged {
            Staged::Pool(r) => self.recycle(r, class),
            Staged::Ring(at) => {
                self.in_use[class as usize] -= 1;
                let (_, ring) = self.ring.as_mut().expect("a piece of it");
                let known = ring.give(at);
                debug_assert!(known, "a piece given back twice");
            }
        }
    }

    /// Send `iov` (or, for inject, bytes the caller copies now) to `dest`.
    /// Returns `-FI_EAGAIN` when no transmit slot is free.
    #[allow(clippy::too_many_arguments)]
    pub fn send(
        &mut self,
        dest: u32,
        iov: &Iov,
        tagged: bool,
        tag: u64,
        data: Option<u64>,
        context: usize,
        flags: u64,
        inject: bool,
    ) -> Result<(), (i32, String)> {
        if !self.enabled {
            return Err((FI_EOPBADSTATE, "the endpoint is not enabled".into()));
        }
        if dest >= self.size {
            return Err((
                FI_EADDRNOTAVAIL,
                format!("rank {dest} is not in the partition (size {})", self.size),
            ));
        }
        let len = iov.len();
        if len > MAX_MSG {
            return Err((
                FI_EMSGSIZE,
                format!("{len} bytes: more than max_msg_size {MAX_MSG}"),
            ));
        }
        let report = !inject && (!self.tx_selective || flags & FI_COMPLETION != 0);
        let done = SendDone {
            report,
            context: if inject { 0 } else { context },
            flags: FI_SEND | if tagged { FI_TAGGED } else { FI_MSG },
            len,
            dest,
        };
        let seq = self.tx_seq[dest as usize];
        let mut h = Header {
            kind: KIND_EAGER,
            flags: if tagged { F_TAGGED } else { 0 } | if data.is_some() { F_DATA } else { 0 },
            seq,
            tag,
            data: data.unwrap_or(0),
            len: len as u64,
            id: 0,
        };
        if len <= EAGER_MAX && self.send_now(dest, iov, &h)? {
            self.complete_send(done, Ok(()));
            return Ok(());
        }
        if self.tx_free.is_empty() {
            self.progress();
            if self.tx_free.is_empty() {
                return Err((FI_EAGAIN, String::new()));
            }
        }
        let user = Some(done);
        let slot = *self.tx_free.last().unwrap();
        let tx = self.tx.as_ref().expect("enabled");
        let at = slot * SLOT;
        if len <= EAGER_MAX {
            // SAFETY: free transmit slots belong to us alone, and the caller's buffer is
            // readable for `len` bytes.
            let (word, n) = unsafe {
                let s = std::slice::from_raw_parts_mut(tx.as_ptr().add(at), SLOT);
                let (word, n) = h.encode(s);
                iov.gather(&mut s[n..n + len]);
                (word, n)
            };
            let op = self
                .ni
                .isend(dest, tx, at..at + n + len, word)
                .map_err(|e| (fi_err(&e), format!("send to rank {dest}: {e}")))?;
            self.tx_seq[dest as usize] = next_seq(seq);
            self.counters.eager_sent += 1;
            if op.ready() {
                // In the window's ring already (or refused): the slot is free again, and
                // the send completes now, not at the next progress.
                let r = self.ni.wait(op).map(|_| ());
                if let Some(u) = user {
                    self.complete_send(u, r);
                }
                return Ok(());
            }
            self.tx_free.pop();
            self.ops.insert(op.id(), Pending::Eager { slot, user });
            return Ok(());
        }
        // Rendezvous: the payload staged and its send posted now (both or neither), or
        // (past SEND_EAGER_MAX staged sends waiting for their receivers) on request.
        let id = self.next_id;
        h.kind = KIND_RTS;
        h.id = id as u64;
        let staged = self
            .stage_and_send(dest, iov, id, Class::Eager)
            .map_err(|e| {
                (
                    fi_err(&e),
                    format!("send of {len} bytes to rank {dest}: {e}"),
                )
            })?;
        if staged.is_none() {
            h.flags |= F_CTS;
        }
        self.next_id = self.next_id.wrapping_add(1);
        let rts = self.send_header(dest, slot, &h);
        match staged {
            Some((staging, op)) => {
                self.ops.insert(
                    note(&self.ni, &mut self.early, op),
                    Pending::RndvSend {
                        staging,
                        class: Class::Eager,
                        user,
                    },
                );
            }
            None if rts.is_ok() => {
                self.counters.rndv_on_request += 1;
                self.await_cts.insert(
                    (dest, id),
                    AwaitCts {
                        iov: iov.clone(),
                        user,
                    },
                );
            }
            None => {}
        }
        match rts {
            Ok(op) => {
                self.tx_free.pop();
                self.tx_seq[dest as usize] = next_seq(seq);
                self.ops.insert(
                    note(&self.ni, &mut self.early, op),
                    Pending::Eager { slot, user: None },
                );
                self.counters.rndv_sent += 1;
                Ok(())
            }
            // A staged payload's send stays posted with no RTS: nobody will match it, and it
            // is reported as this failure instead.
            Err(e) => Err((fi_err(&e), format!("send to rank {dest}: {e}"))),
        }
    }

    /// Post a receive, or match it at once against what already arrived.
    #[allow(clippy::too_many_arguments)]
    pub fn recv(
        &mut self,
        src: Option<u32>,
        iov: Iov,
        tagged: bool,
        tag: u64,
        ignore: u64,
        context: usize,
        flags: u64,
    ) -> Result<(), (i32, String)> {
        if !self.enabled {
            return Err((FI_EOPBADSTATE, "the endpoint is not enabled".into()));
        }
        let report = !self.rx_selective || flags & FI_COMPLETION != 0;
        let q = if tagged { 0 } else { 1 };
        let multi = (!tagged && flags & FI_MULTI_RECV != 0).then_some(0);
        if flags & (FI_PEEK | FI_CLAIM) != 0 {
            return self.peek_or_claim(src, iov, tagged, tag, ignore, context, flags, report);
        }
        // No progress first: a message libni holds that the engine has not taken yet comes
        // after every one in `unexpected` from its sender, so the next progress matches it
        // against this receive just as it would have matched here (and copies it once,
        // from its slot). A progress here was a third of an MPI ping-pong's instructions.
        let mut p = Posted {
            src,
            tag,
            ignore,
            iov,
            context,
            report,
            multi,
        };
        // What already waits, oldest first (a multi-receive buffer may take several).
        while let Some(i) = self.unexpected[q]
            .iter()
            .position(|u| p.matches(u.src, tagged, u.hdr.tag))
        {
            let u = self.unexpected[q].remove(i).unwrap();
            let (to, used_up) = piece(&mut p, u.src, u.hdr, u.len(), self.min_multi_recv);
            self.deliver_unexpected(to, u);
            if used_up {
                return Ok(());
            }
        }
        self.posted[q].push_back(p);
        Ok(())
    }

    fn deliver_unexpected(&mut self, to: Delivery, u: Unexpected) {
        match u.payload {
            Some(payload) => {
                let full = payload.len();
                self.deliver(to, &payload, full);
            }
            None => self.start_rndv_recv(to),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn peek_or_claim(
        &mut self,
        src: Option<u32>,
        iov: Iov,
        tagged: bool,
        tag: u64,
        ignore: u64,
        context: usize,
        flags: u64,
        report: bool,
    ) -> Result<(), (i32, String)> {
        let q = if tagged { 0 } else { 1 };
        let blank = Posted {
            src,
            tag,
            ignore,
            iov: Iov::default(),
            context,
            report,
            multi: None,
        };
        let mk = |u: &Unexpected, iov: Iov| Delivery::whole(iov, context, report, u.src, u.hdr);
        if flags & FI_PEEK == 0 {
            // FI_CLAIM alone: receive (or discard) what an earlier peek claimed.
            let u = self.claimed.remove(&context).ok_or_else(|| {
                (
                    FI_EINVAL,
                    "FI_CLAIM names a context no FI_PEEK|FI_CLAIM claimed".into(),
                )
            })?;
            if flags & FI_DISCARD != 0 {
                self.discard(u, context, report);
            } else {
                let to = mk(&u, iov);
                self.deliver_unexpected(to, u);
            }
            return Ok(());
        }
        self.progress();
        let Some(i) = self.unexpected[q]
            .iter()
            .position(|u| blank.matches(u.src, tagged, u.hdr.tag))
        else {
            let cq = self
                .rx_cq
                .clone()
                .ok_or((FI_ENOCQ, "no receive CQ bound".into()))?;
            cq.push_err(empty_recv(context, tagged, tag, 0, 0), 0, FI_ENOMSG, 0);
            return Ok(());
        };
        let u = &self.unexpected[q][i];
        let e = Entry {
            context,
            flags: recv_flags(tagged)
                | if u.hdr.flags & F_DATA != 0 {
                    FI_REMOTE_CQ_DATA
                } else {
                    0
                },
            len: u.len(),
            buf: 0,
            data: u.hdr.data,
            tag: u.hdr.tag,
            src: u.src,
        };
        if flags & FI_DISCARD != 0 {
            let u = self.unexpected[q].remove(i).unwrap();
            self.discard(u, 0, false);
        } else if flags & FI_CLAIM != 0 {
            let u = self.unexpected[q].remove(i).unwrap();
            self.claimed.insert(context, u);
        }
        if let Some(cq) = self.rx_cq.clone() {
            cq.push(e);
        }
        Ok(())
    }

    /// Drop a message: a rendezvous payload is still taken from its sender (into nothing),
    /// so the sender's send completes.
    fn discard(&mut self, u: Unexpected, context: usize, report: bool) {
        let to = Delivery::whole(Iov::default(), context, report, u.src, u.hdr);
        if u.payload.is_some() {
            if report {
                if let Some(cq) = self.rx_cq.clone() {
                    cq.push(empty_recv(
                        context,
                        u.hdr.tagged(),
                        u.hdr.tag,
                        u.hdr.data,
                        u.src,
                    ));
                }
            }
        } else {
            let mut to = to;
            // Discarding is not truncation: report the message as fully taken (the payload
            // still crosses, into nothing, so that the sender's send completes).
            to.hdr.len = 0;
            self.start_rndv_recv(to);
        }
    }

    /// `fi_cancel`: a posted receive with `context` is removed and completes with
    /// `FI_ECANCELED`. Sends cannot be cancelled (they are already in the NI).
    pub fn cancel(&mut self, context: usize) -> bool {
        for q in 0..2 {
            if let Some(i) = self.posted[q].iter().position(|p| p.context == context) {
                let p = self.posted[q].remove(i).unwrap();
                if let Some(cq) = self.rx_cq.clone() {
                    cq.push_err(
                        Entry {
                            buf: p.iov.first(),
                            ..empty_recv(context, q == 0, p.tag, 0, 0)
                        },
                        0,
                        FI_ECANCELED,
                        0,
                    );
                }
                return true;
            }
        }
        if let Some(u) = self.claimed.remove(&context) {
            // A claimed message stays the application's to take: put it back first in line.
            let q = if u.hdr.tagged() { 0 } else { 1 };
            self.unexpected[q].push_front(u);
        }
        false
    }

    pub fn rx_left(&self) -> usize {
        RX_SLOTS.saturating_sub(self.posted[0].len() + self.posted[1].len())
    }
}

/// Where an arrival from `src` with sequence `seq` goes in a batch: by source, then by its
/// distance from the sequence due next from that source, so a batch that holds both sides
/// of the 25-bit sequence's wrap still goes in sending order (sorted by the sequence itself,
/// message 0 of the next lap would go before message 2^25 - 1).
fn arrival_order(next: &[u32], src: u32, seq: u32) -> (u32, u32) {
    let due = next.get(src as usize).copied().unwrap_or(0);
    (src, seq.wrapping_sub(due) & SEQ_MASK)
}

/// The pool's key for a region of `size` (a power of two) that held `class`.
fn pool_key(size: usize, class: Class) -> usize {
    size | (class == Class::Recv) as usize
}

/// The flags of a receive's completion: `FI_RECV` and which kind of message.
fn recv_flags(tagged: bool) -> u64 {
    FI_RECV | if tagged { FI_TAGGED } else { FI_MSG }
}

/// A receive's completion that carries no bytes (failed, cancelled, peeked for nothing,
/// discarded).
fn empty_recv(context: usize, tagged: bool, tag: u64, data: u64, src: u32) -> Entry {
    Entry {
        context,
        flags: recv_flags(tagged),
        len: 0,
        buf: 0,
        data,
        tag,
        src,
    }
}

/// Engines are reached from every libfabric call on their endpoint or CQ.
pub type Shared = Arc<ni::NiLock<Engine>>;

#[cfg(test)]
mod tests {
    use super::*;

    fn hdr(kind: u8, len: u64, id: u64) -> Header {
        Header {
            kind,
            flags: F_TAGGED | F_DATA,
            seq: 7,
            tag: 0xdead_beef_0000_0001,
            data: 42,
            len,
            id,
        }
    }

    #[test]
    fn a_batch_across_the_sequence_wrap_keeps_sending_order() {
        // Source 1 is due SEQ_MASK - 1; source 0 is due 5. A source outside the partition
        // (a failed receive's) sorts by its sequence alone, after the others.
        let next = [5, SEQ_MASK - 1];
        let mut batch = vec![
            (1, 1),
            (0, 6),
            (1, SEQ_MASK),
            (1, 0),
            (0, 5),
            (1, SEQ_MASK - 1),
        ];
        batch.sort_by_key(|&(src, seq)| arrival_order(&next, src, seq));
        assert_eq!(
            batch,
            [
                (0, 5),
                (0, 6),
                (1, SEQ_MASK - 1),
                (1, SEQ_MASK),
                (1, 0),
                (1, 1)
            ]
        );
        assert_eq!(arrival_order(&next, u32::MAX, 3), (u32::MAX, 3));
    }

    /// The message a header and `payload` bytes make: (libni tag, bytes).
    fn message(h: &Header, payload: usize) -> (u64, Vec<u8>) {
        let mut b = vec![0x5a; HEADER_MAX + payload];
        let (w, n) = h.encode(&mut b);
        b.truncate(n + payload);
        (w, b)
    }

    fn decode(m: &(u64, Vec<u8>)) -> Result<(Header, usize), String> {
        Header::decode(m.0, &m.1)
    }

    #[test]
    fn a_header_reads_back_as_written() {
        let h = hdr(KIND_EAGER, 100, 0);
        assert_eq!(decode(&message(&h, 100)), Ok((h, 8)));
        let r = hdr(KIND_RTS, 1 << 20, 9);
        assert_eq!(decode(&message(&r, 0)), Ok((r, 24)));
        let c = Header {
            flags: 0,
            tag: 0,
            data: 0,
            len: 0,
            ..hdr(KIND_CTS, 0, 7)
        };
        assert_eq!(decode(&message(&c, 0)), Ok((c, 8)));
        // CQ data past 32 bits rides among the bytes; an untagged message has no tag there.
        let wide = Header {
            data: 1 << 40,
            ..hdr(KIND_EAGER, 3, 0)
        };
        assert_eq!(decode(&message(&wide, 3)), Ok((wide, 16)));
        let plain = Header {
            flags: 0,
            tag: 0,
            data: 0,
            ..hdr(KIND_EAGER, 5, 0)
        };
        assert_eq!(decode(&message(&plain, 5)), Ok((plain, 0)));
        // The sequence wraps at 25 bits.
        let last = Header { seq: SEQ_MASK, ..h };
        assert_eq!(decode(&message(&last, 100)), Ok((last, 8)));
    }

    /// An MPI message of 8 bytes (tagged, the sender's rank as CQ data) is 16 bytes: what
    /// libni's window carries in a ring's header slot (`ni_abi::window::INLINE`).
    #[test]
    fn an_mpi_message_of_8_bytes_fits_a_window_header_slot() {
        let (_, b) = message(&hdr(KIND_EAGER, 8, 0), 8);
        assert_eq!(b.len(), 16);
        assert!(b.len() <= ni_abi::window::INLINE as usize);
    }

    #[test]
    fn a_header_that_lies_is_refused() {
        let h = hdr(KIND_EAGER, 100, 0);
        let (w, b) = message(&h, 100);
        // Not a header's word; a kind no sender writes; data bits with no data, or beside
        // wide data; F_CTS on anything but an RTS.
        assert!(Header::decode(w & !EAGER_TAG, &b).is_err());
        assert!(Header::decode(w & !(3 << W_KIND_SHIFT), &b).is_err());
        let (pw, pb) = message(
            &Header {
                flags: F_TAGGED,
                ..h
            },
            100,
        );
        assert!(Header::decode(pw, &pb).is_ok());
        assert!(Header::decode(pw | 1, &pb).is_err());
        assert!(Header::decode(pw | W_DATA_WIDE, &pb).is_err());
        let (ww, wb) = message(&Header { data: 1 << 40, ..h }, 100);
        assert!(Header::decode(ww | 1, &wb).is_err());
        assert!(Header::decode(w | W_CTS, &b).is_err());
        // Shorter than the tag it says it carries.
        assert!(Header::decode(w, &b[..7]).is_err());
        // Eager: more than an eager payload.
        assert!(decode(&message(&h, EAGER_MAX + 1)).is_err());
        assert!(decode(&message(&h, EAGER_MAX)).is_ok());
        // RTS: small enough to have been eager, larger than max_msg_size, id out of range,
        // bytes missing or after it.
        assert!(decode(&message(&hdr(KIND_RTS, 10, 0), 0)).is_err());
        assert!(decode(&message(&hdr(KIND_RTS, MAX_MSG as u64 + 1, 0), 0)).is_err());
        assert!(decode(&message(&hdr(KIND_RTS, 1 << 20, 1 << 40), 0)).is_err());
        assert!(decode(&message(&hdr(KIND_RTS, 1 << 20, 1), 8)).is_err());
        let (rw, rb) = message(&hdr(KIND_RTS, 1 << 20, 1), 0);
        assert!(Header::decode(rw, &rb[..rb.len() - 1]).is_err());
        let mut c = hdr(KIND_RTS, 1 << 20, 1);
        c.flags |= F_CTS;
        assert!(decode(&message(&c, 0)).is_ok());
        // CTS: tagged or with data, an id out of range, bytes after it.
        assert!(decode(&message(&hdr(KIND_CTS, 0, 7), 0)).is_err());
        let cts = Header {
            flags: 0,
            ..hdr(KIND_CTS, 0, 7)
        };
        assert!(decode(&message(&cts, 0)).is_ok());
        assert!(decode(&message(&cts, 8)).is_err());
        assert!(decode(&message(&Header { id: 1 << 40, ..cts }, 0)).is_err());
    }

    #[test]
    fn matching_follows_the_ignore_mask_and_the_source() {
        let p = Posted {
            src: Some(3),
            tag: 0x1234_0000_0000_00ff,
            ignore: 0xff,
            iov: Iov::default(),
            context: 0,
            report: true,
            multi: None,
        };
        assert!(p.matches(3, true, 0x1234_0000_0000_0000));
        assert!(p.matches(3, true, 0x1234_0000_0000_0011));
        assert!(!p.matches(3, true, 0x1234_0000_0000_0100));
        assert!(!p.matches(2, true, 0x1234_0000_0000_00ff));
        // Untagged receives ignore tags; any source takes every rank.
        assert!(p.matches(3, false, 0));
        let any = Posted { src: None, ..p };
        assert!(any.matches(9, true, 0x1234_0000_0000_0000));
    }

    #[test]
    fn an_iov_scatters_and_gathers_across_pieces() {
        let mut a = [0u8; 3];
        let mut b = [0u8; 4];
        let iov = Iov(smallvec![
            (a.as_mut_ptr() as usize, 3),
            (b.as_mut_ptr() as usize, 4),
        ]);
        assert_eq!(iov.len(), 7);
        // SAFETY: both arrays live and are writable.
        let n = unsafe { iov.scatter(&[1, 2, 3, 4, 5]) };
        assert_eq!(n, 5);
        assert_eq!((a, b), ([1, 2, 3], [4, 5, 0, 0]));
        let mut out = [0u8; 7];
        // SAFETY: both arrays live.
        unsafe { iov.gather(&mut out) };
        assert_eq!(out, [1, 2, 3, 4, 5, 0, 0]);
    }
}
