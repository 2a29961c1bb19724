//! The fast path (design.md §3.2): how clients hand work to the NI with no trapped access.
//!
//! The full description, with who owns each field when, is `device/abi/fastpath.md`. In short:
//! the client writes 64-byte requests into a submission ring in the NI's SRAM (mmapped, so
//! the writes never trap) and publishes them by advancing `SQ_TAIL`; the device polls the
//! ring, executes each request (copying payloads straight between the two clients'
//! registered memory), and writes 64-byte completions into a ring in the client's own
//! memory. Only when the device's poller has gone to sleep (`DEV_SLEEPING`) does the client
//! write the trapped `DOORBELL`; only when the client has armed `CQ_ARM` does the device
//! send an MSI-X.
//!
//! Everything here is little-endian (it is ours, not the Lanai's big-endian LBUS layout).

/// SRAM control page (offsets from SRAM start). Fields on separate cache lines by writer.
pub mod ctrl {
    /// Device writes `MAGIC` once the fast path serves this NI; `VERSION` beside it.
    pub const MAGIC: u64 = 0x000;
    pub const MAGIC_VALUE: u32 = 0x5046_494E; // "NIFP"
    pub const VERSION: u64 = 0x004;
    pub const VERSION_VALUE: u32 = 1;
    /// Device writes: physical node number, rank and size in the partition, partition id.
    pub const NODE: u64 = 0x008;
    pub const RANK: u64 = 0x00C;
    pub const SIZE: u64 = 0x010;
    pub const PARTITION: u64 = 0x014;
    /// Device writes: changes whenever the NI is reset under the client (its pending
    /// requests are then gone and it must attach again).
    pub const EPOCH: u64 = 0x018;
    /// Device writes: how many NIs of the partition have been ready (a client that set up
    /// its completion ring) since this one's client attached (itself included; sticky, so a
    /// peer that already left still counts). `Ni::attach` waits for it to reach SIZE, as
    /// MPI_Init waits for every rank.
    pub const PEERS_UP: u64 = 0x01C;
    /// Device writes: the serial of the partition window (`crate::window`) this client
    /// must find mapped in BAR4 to take the direct path; 0: the fabric path only.
    pub const WINDOW: u64 = 0x020;
    /// Client writes: requests published (free-running count).
    pub const SQ_TAIL: u64 = 0x040;
    /// Device writes: requests consumed (free-running count).
    pub const SQ_HEAD: u64 = 0x080;
    /// Device writes 1 before its poller sleeps, 0 when it wakes.
    pub const DEV_SLEEPING: u64 = 0x0C0;
    /// Client writes: completions consumed (free-running count).
    pub const CQ_HEAD: u64 = 0x100;
    /// Client writes 1 to ask for an MSI-X (vector `CQ`) with the next completion; the device
    /// writes 0 when it sends it.
    pub const CQ_ARM: u64 = 0x140;
    /// Client writes: active-message slots consumed (free-running count).
    pub const AM_HEAD: u64 = 0x180;
    /// Device writes: the asynchronous global OR of the partition (`global_rec`).
    pub const GLOBAL_REC: u64 = 0x1C0;
    /// Device writes: a count it bumps every [`HEARTBEAT_PERIOD_MS`] while it runs, whether
    /// or not it has work. A waiter that sees it stand still for [`HEARTBEAT_DEAD_MS`] knows
    /// the daemon is gone — the only sign a guest gets, since the SRAM it maps outlives the
    /// daemon (a host process also sees its vfio-user socket close).
    pub const HEARTBEAT: u64 = 0x200;
    pub const HEARTBEAT_PERIOD_MS: u64 = 100;
    pub const HEARTBEAT_DEAD_MS: u64 = 800;
}

/// The submission ring in SRAM.
pub const SQ_OFFSET: u64 = 0x1000;
pub const SQ_ENTRIES: u32 = 1024;
pub const ENTRY_SIZE: u64 = 64;

/// Active messages: one slot per message in the receiver's AM ring.
pub const AM_SLOT: u64 = 4096;
/// Header at the start of an AM slot; payload follows.
pub const AM_HEADER: u64 = 64;
pub const AM_MAX_PAYLOAD: u64 = AM_SLOT - AM_HEADER;

/// The largest single transfer (send, put, get).
pub const MAX_TRANSFER: u64 = 1 << 32;
/// Largest completion ring.
pub const MAX_CQ_ENTRIES: u64 = 1 << 20;

/// The T3E message-queue message (HMM-148-0): 64 bytes, slot 0 holds the MQCW.
pub const MQ_MESSAGE: u64 = 64;

/// Request opcodes.
pub mod op {
    pub const CQ_SETUP: u8 = 0x01;
    pub const REG_MR: u8 = 0x02;
    pub const DEREG_MR: u8 = 0x03;
    pub const AM_SETUP: u8 = 0x04;
    pub const SEND: u8 = 0x10;
    pub const RECV: u8 = 0x11;
    /// MLINK WRITE.
    pub const PUT: u8 = 0x20;
    /// MLINK READ.
    pub const GET: u8 = 0x21;
    /// MLINK ROP: remote function invocation (an active message).
    pub const ROP: u8 = 0x22;
    /// MLINK NOOP: connection status.
    pub const NOOP: u8 = 0x23;
    /// MLINK RESET: administrator only; always refused from a client.
    pub const RESET: u8 = 0x24;
    /// Send the target's completion interrupt (vector `CQ`) now: a writer of the partition
    /// window found the target blocked (`window::SLEEPING`). Completes at once.
    pub const WAKE: u8 = 0x25;
    /// T3E SEND of one 64-byte message into a remote message queue.
    pub const MQ_SEND: u8 = 0x30;
    /// A member of the partition window stored a SEND into `rank`'s queue (`key`, offset
    /// `tag`) itself and its Tail reached Threshold: latch IR_STATUS and MSG_ADDR there and
    /// interrupt as the arrival would have (`fastpath.md`, "Message queues in the window").
    pub const MQ_SIGNAL: u8 = 0x31;
    /// CM-5 combine (scan, reduce, network-done) of 1-5 words at `addr`; the result is
    /// written back over them. `flags`: `combine::*`; `access`: the combiner; `len`: words.
    pub const COMBINE: u8 = 0x40;
    /// Vector collective. `flags`: `coll::*` kind; `access`: dtype | op << 8; `rank`: root;
    /// `addr`: send (or, for BCAST, the data) buffer; `tag`: receive buffer; `len`: elements.
    pub const COLLECTIVE: u8 = 0x41;
    /// CM-5 synchronous global: a barrier returning the OR of the members' bits (`tag` bit 0).
    pub const SYNC_GLOBAL: u8 = 0x42;
    /// CM-5 asynchronous global: set this NI's `global_send` bit (`tag` bit 0).
    pub const ASYNC_GLOBAL: u8 = 0x43;
    /// Set the control-network participation flags (`access`: `participation::*`).
    pub const COM_CONTROL: u8 = 0x44;
    /// Combine flush: every member sends it; clears a collision.
    pub const COM_FLUSH: u8 = 0x45;
    /// Completion-only: an active message arrived (`tag` = handler, `aux` = slot).
    pub const AM_ARRIVED: u8 = 0x80;
    /// Completion-only: the asynchronous global OR rose from 0 to 1 (`GLOBAL_REC_IE`).
    pub const GLOBAL_REC: u8 = 0x81;
}

/// `flags` of a COMBINE request.
pub mod combine {
    /// Bits 1:0: 0 network-done, 1 scan backward, 2 scan forward, 3 reduce (CM-5 encoding).
    pub const PATTERN_MASK: u8 = 0x3;
    /// `ni_scan_start`, latched with the request: this member starts a segment.
    pub const SCAN_START: u8 = 1 << 2;
    /// An abstainer with `REDUCE_REC_ABSTAIN` clear takes the next reduction result.
    pub const RECEIVE_ONLY: u8 = 1 << 3;
    /// Completion `aux` bits.
    pub const OVERFLOW: u64 = 1 << 0;
    pub const HAS_RESULT: u64 = 1 << 1;
    pub const MAX_WORDS: u64 = 5;
}

/// Kinds of vector collective (`flags` of a COLLECTIVE request).
pub mod coll {
    pub const BARRIER: u8 = 0;
    pub const BCAST: u8 = 1;
    pub const REDUCE: u8 = 2;
    pub const ALLREDUCE: u8 = 3;
    /// Inclusive prefix.
    pub const SCAN: u8 = 4;
    /// Exclusive prefix; rank 0 gets the identity.
    pub const EXSCAN: u8 = 5;
    pub const ALLGATHER: u8 = 6;
}

/// Element types of vector collectives (`access` bits 7:0).
pub mod dtype {
    pub const I32: u32 = 0;
    pub const U32: u32 = 1;
    pub const I64: u32 = 2;
    pub const U64: u32 = 3;
    pub const F32: u32 = 4;
    pub const F64: u32 = 5;

    pub const fn size(d: u32) -> Option<u64> {
        match d {
            I32 | U32 | F32 => Some(4),
            I64 | U64 | F64 => Some(8),
            _ => None,
        }
    }
}

/// Reduction operators of vector collectives (`access` bits 15:8).
pub mod redop {
    pub const SUM: u32 = 0;
    pub const PROD: u32 = 1;
    pub const MIN: u32 = 2;
    pub const MAX: u32 = 3;
    /// Bitwise: integer types only.
    pub const AND: u32 = 4;
    pub const OR: u32 = 5;
    pub const XOR: u32 = 6;
}

/// Control-network participation (COM_CONTROL `access`), as the CM-5's abstain flags.
/// After an NI reset every abstain flag is set (§6.10); libni clears them when it attaches.
pub mod participation {
    /// COM `rec_abstain`: contribute the identity, get no scan result, may not send.
    pub const COM_REC_ABSTAIN: u32 = 1 << 0;
    /// COM `reduce_rec_abstain`: an abstainer also gets no reduction result.
    pub const REDUCE_REC_ABSTAIN: u32 = 1 << 1;
    /// BC `rec_abstain`: receive no broadcasts.
    pub const BC_REC_ABSTAIN: u32 = 1 << 2;
    /// `ni_sync_global_abstain`.
    pub const SYNC_GLOBAL_ABSTAIN: u32 = 1 << 3;
    /// The abstain flags (bits 0-3), which the CM-5 registers mirror.
    pub const ABSTAIN_BITS: u32 = 0xF;
    /// `global_rec_ie`: a GLOBAL_REC completion when the async global OR rises.
    pub const GLOBAL_REC_IE: u32 = 1 << 4;
    pub const RESET: u32 =
        COM_REC_ABSTAIN | REDUCE_REC_ABSTAIN | BC_REC_ABSTAIN | SYNC_GLOBAL_ABSTAIN;
    pub const ALL: u32 = 0x1F;
}

/// Remote access granted by `REG_MR`.
pub mod access {
    pub const REMOTE_READ: u32 = 1 << 0;
    pub const REMOTE_WRITE: u32 = 1 << 1;
    /// The region holds message queues other NIs may SEND into.
    pub const MESSAGE_QUEUE: u32 = 1 << 2;
    pub const ALL: u32 = 0x7;
    /// Not a permission: the region is a memory file of its own, nothing else on its pages,
    /// so with `ALL` the members of a partition with a window may map it and put, get and
    /// SEND into it themselves (`fastpath.md`, "One-sided operations in the window").
    pub const EXPORT: u32 = 1 << 3;
}

/// `rank` value meaning "any source" in a RECV.
pub const ANY_RANK: u32 = u32::MAX;

/// Completion status. Names say what went wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum Status {
    Ok = 0,
    /// The peer's NI has no client (its process or guest went away), or it went mid-operation.
    PeerDown = 1,
    /// The rank is not in this NI's partition.
    OutOfPartition = 2,
    /// The local buffer is not in memory the client mapped for DMA.
    NotRegistered = 3,
    /// The remote key is not registered at the target, or lacks the access asked for.
    BadKey = 4,
    /// The remote offset and length fall outside the registered region.
    OutOfBounds = 5,
    /// T3E SEND rejected: the queue's Tail equals its Limit (ERS FULL_SR).
    QueueFull = 6,
    /// A length that is zero where not allowed, too large, or overflows.
    BadLength = 7,
    /// The message was longer than the receive buffer; the buffer holds its first bytes.
    Truncated = 8,
    /// The operation is reserved for the administrator (MLINK RESET).
    Permission = 9,
    BadOpcode = 10,
    /// A malformed request: unaligned MQCW, bad ring geometry, duplicate key.
    BadDescriptor = 11,
    /// The target has not set up an active-message ring.
    NoHandlerRing = 12,
    /// Cancelled: this NI was reset or its partition changed.
    Cancelled = 13,
    /// Two different collective operations met in one round (`bc_or_com_collision`); CM-5
    /// combines then fail until every member has sent a combine flush.
    Collision = 14,
    /// This NI abstains from the operation (or, for a flush, may not abstain).
    Abstaining = 15,
    /// Abstain flags changed while a combine was pending (`com_abstain_changed`): not applied.
    AbstainChanged = 16,
    /// A collective round did not complete within the daemon's collective timeout.
    Timeout = 17,
    /// This NI's port or the peer's is down (Lanai X link state machine not in sync:
    /// `ni-ctl port set NI --state up`), or the torus has no route left between them after
    /// map-outs, or the link to the daemon hosting the peer is down (links.md). What was
    /// pending with the peer may have been partly transferred; retry once the link is back.
    LinkDown = 18,
    /// The target NI is hosted by another daemon and this operation does not cross hosts
    /// (device/abi/links.md lists what does).
    OtherHost = 19,
}

impl Status {
    pub fn from_u16(v: u16) -> Option<Status> {
        use Status::*;
        [
            Ok,
            PeerDown,
            OutOfPartition,
            NotRegistered,
            BadKey,
            OutOfBounds,
            QueueFull,
            BadLength,
            Truncated,
            Permission,
            BadOpcode,
            BadDescriptor,
            NoHandlerRing,
            Cancelled,
            Collision,
            Abstaining,
            AbstainChanged,
            Timeout,
            LinkDown,
            OtherHost,
        ]
        .into_iter()
        .find(|s| *s as u16 == v)
    }

    pub fn describe(self) -> &'static str {
        match self {
            Status::Ok => "success",
            Status::PeerDown => "peer down: the target NI has no client or it went away",
            Status::OutOfPartition => "rank out of partition",
            Status::NotRegistered => "local buffer not registered (not mapped for DMA)",
            Status::BadKey => "remote key not registered or lacks the access asked for",
            Status::OutOfBounds => "remote offset and length outside the registered region",
            Status::QueueFull => "message queue full (Tail = Limit): message rejected",
            Status::BadLength => "bad length",
            Status::Truncated => "message truncated: receive buffer too small",
            Status::Permission => "permission denied: reserved for the administrator",
            Status::BadOpcode => "unknown opcode",
            Status::BadDescriptor => "malformed request",
            Status::NoHandlerRing => "target has no active-message ring",
            Status::Cancelled => "cancelled by a reset or partition change",
            Status::Collision => "collision: members started different collective operations",
            Status::Abstaining => {
                "this NI abstains from that operation (or may not abstain from it)"
            }
            Status::AbstainChanged => {
                "abstain flags changed while a combine was pending: not applied"
            }
            Status::Timeout => "collective timed out: a member never joined",
            Status::LinkDown => {
                "link down: this NI's port or the peer's is down, no route is left, or the link to the peer's host is down (see ni-ctl port list, ni-ctl hosts)"
            }
            Status::OtherHost => {
                "the target NI is on another host and this operation does not cross hosts"
            }
        }
    }
}

/// A request as the client writes it into the submission ring.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Request {
    pub opcode: u8,
    pub flags: u8,
    /// Destination (or RECV source, or `ANY_RANK`), partition-relative.
    pub rank: u32,
    /// Echoed in the completion.
    pub user: u64,
    /// Local buffer (an IOVA the client mapped).
    pub addr: u64,
    pub len: u64,
    /// SEND/RECV: tag. PUT/GET/MQ_SEND: offset in the remote region.
    pub tag: u64,
    /// RECV: tag bits that must match. ROP: handler index.
    pub mask: u64,
    /// PUT/GET/MQ_SEND: remote key. REG_MR/DEREG_MR: the key.
    pub key: u32,
    /// REG_MR: `access` bits.
    pub access: u32,
}

impl Request {
    pub fn encode(&self) -> [u8; 64] {
        let mut b = [0u8; 64];
        b[0] = self.opcode;
        b[1] = self.flags;
        b[4..8].copy_from_slice(&self.rank.to_le_bytes());
        b[8..16].copy_from_slice(&self.user.to_le_bytes());
        b[16..24].copy_from_slice(&self.addr.to_le_bytes());
        b[24..32].copy_from_slice(&self.len.to_le_bytes());
        b[32..40].copy_from_slice(&self.tag.to_le_bytes());
        b[40..48].copy_from_slice(&self.mask.to_le_bytes());
        b[48..52].copy_from_slice(&self.key.to_le_bytes());
        b[52..56].copy_from_slice(&self.access.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8; 64]) -> Request {
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
        Request {
            opcode: b[0],
            flags: b[1],
            rank: u32_at(4),
            user: u64_at(8),
            addr: u64_at(16),
            len: u64_at(24),
            tag: u64_at(32),
            mask: u64_at(40),
            key: u32_at(48),
            access: u32_at(52),
        }
    }
}

/// A completion as the device writes it into the client's completion ring. `seq` is
/// written last: entry `n` (from 0) is valid once its `seq` reads `n + 1`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Completion {
    pub opcode: u8,
    pub status: u16,
    /// The peer: destination of a send/put/get, source of a received message or AM.
    pub rank: u32,
    pub user: u64,
    /// Bytes moved, or the full message length (RECV, also when truncated).
    pub len: u64,
    /// RECV: the message's tag. AM_ARRIVED: handler index. MQ_SEND: Tail after the store.
    pub tag: u64,
    /// AM_ARRIVED: slot index. NOOP: 1 if the peer is up.
    pub aux: u64,
    pub seq: u32,
}

/// Offset of `seq` in a completion entry.
pub const COMPLETION_SEQ: u64 = 60;

impl Completion {
    /// The first 60 bytes; `seq` is stored separately, last, with release ordering.
    pub fn encode_body(&self) -> [u8; 60] {
        let mut b = [0u8; 60];
        b[0] = self.opcode;
        b[2..4].copy_from_slice(&self.status.to_le_bytes());
        b[4..8].copy_from_slice(&self.rank.to_le_bytes());
        b[8..16].copy_from_slice(&self.user.to_le_bytes());
        b[16..24].copy_from_slice(&self.len.to_le_bytes());
        b[24..32].copy_from_slice(&self.tag.to_le_bytes());
        b[32..40].copy_from_slice(&self.aux.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8; 64]) -> Completion {
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().unwrap());
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
        Completion {
            opcode: b[0],
            status: u16::from_le_bytes([b[2], b[3]]),
            rank: u32_at(4),
            user: u64_at(8),
            len: u64_at(16),
            tag: u64_at(24),
            aux: u64_at(32),
            seq: u32_at(60),
        }
    }
}

/// The AM slot header the device writes before the payload.
pub mod am_header {
    pub const SRC_RANK: u64 = 0;
    pub const HANDLER: u64 = 8;
    pub const LEN: u64 = 16;
}

/// T3E message-queue control word (HMM-148-0 Fig. 1): Sig 63, Tail 62:42, Limit 41:21,
/// Threshold 20:0; the fields are slot offsets from the MQCW.
pub mod mqcw {
    pub const SIG: u64 = 1 << 63;
    pub const TAIL_SHIFT: u32 = 42;
    pub const LIMIT_SHIFT: u32 = 21;
    pub const FIELD: u64 = (1 << 21) - 1;
    pub const MAX_LIMIT: u64 = FIELD;

    pub const fn make(sig: bool, tail: u64, limit: u64, threshold: u64) -> u64 {
        (if sig { SIG } else { 0 })
            | ((tail & FIELD) << TAIL_SHIFT)
            | ((limit & FIELD) << LIMIT_SHIFT)
            | (threshold & FIELD)
    }
    pub const fn sig(w: u64) -> bool {
        w & SIG != 0
    }
    pub const fn tail(w: u64) -> u64 {
        (w >> TAIL_SHIFT) & FIELD
    }
    pub const fn limit(w: u64) -> u64 {
        (w >> LIMIT_SHIFT) & FIELD
    }
    pub const fn threshold(w: u64) -> u64 {
        w & FIELD
    }

    /// What the arrival algorithm (HMM-148-0 pp. 9-15) does with MQCW `w`, for every writer
    /// of a queue (the device, and members storing into peers' exported queues).
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Step {
        /// Store the message in slot `tail` (MQCW + 64·tail), then compare-and-swap the
        /// MQCW from `w` to `next` (Tail + 1; Sig set when Tail reaches Threshold: `hit`).
        Store { tail: u64, next: u64, hit: bool },
        /// Tail ≥ Limit: rejected, nothing stored, the MQCW unchanged (Tail > Limit is not
        /// specified: taken as full).
        Full,
        /// Tail 0 would store the message over the MQCW itself (a software error the seed
        /// warns of): refused rather than corrupting the control word.
        TailZero,
    }

    /// Compare-and-swaps of the MQCW a writer tries before it leaves the SEND for later:
    /// a receiver's reset races one or two, a client rewriting its MQCW in a loop races
    /// them all.
    pub const TRIES: u32 = 64;

    pub const fn step(w: u64) -> Step {
        let (tail, limit, threshold) = (tail(w), limit(w), threshold(w));
        if tail >= limit {
            return Step::Full;
        }
        if tail == 0 {
            return Step::TailZero;
        }
        let hit = tail + 1 == threshold;
        Step::Store {
            tail,
            next: make(sig(w) || hit, tail + 1, limit, threshold),
            hit,
        }
    }
}

/// Trapped fast-path registers: a page of BAR0 after the config window (BAR0 + `PAGE`).
pub mod regs {
    pub const PAGE: u64 = 0x90_0000;
    pub const PAGE_SIZE: u64 = 0x1000;
    /// Write anything: wake the device's poller (needed only while `DEV_SLEEPING` is 1).
    pub const DOORBELL: u64 = 0x000;
    /// T3E IR_STATUS (64-bit): bit 32 MSG_ADDR_VALID, bit 33 MSG_MULTIPLE; write 1 to clear.
    pub const IR_STATUS: u64 = 0x008;
    /// The high word of IR_STATUS, for 32-bit writes that clear VALID/MULTIPLE (bits 0 and 1).
    pub const IR_STATUS_HI: u64 = 0x00C;
    pub const MSG_ADDR_VALID: u64 = 1 << 32;
    pub const MSG_MULTIPLE: u64 = 1 << 33;
    /// Enables the message-queue interrupt (the seed leaves its bit position open).
    pub const IR_ENABLE: u64 = 1 << 0;
    /// T3E MSG_ADDR (64-bit, read-only): the MQCW address that set MSG_ADDR_VALID, locked
    /// until VALID is cleared. Our "GVA" is the IOVA of the MQCW in the client's memory.
    pub const MSG_ADDR: u64 = 0x010;
    /// Read-only copies of the control page's identity, for drivers that have not mapped SRAM.
    pub const RANK: u64 = 0x018;
    pub const SIZE: u64 = 0x01C;
}

/// Telling a free core from one taken by a CPU-bound thread, for the waits on both sides of the
/// fast path. `sched_yield` to a busy core returns only after the other thread's whole time
/// slice (milliseconds); after `LATE_YIELDS` such yields in a row, a waiter blocks instead of
/// yielding, first for `BLOCK_MIN`, then tries yielding again. Each time the yields are late
/// again the block doubles, up to `BLOCK_FOR`; a yield on time starts again from `BLOCK_MIN`.
/// A core taken for a moment (a peer faulting in 16 MiB of buffers) so costs a few
/// milliseconds of blocked waits, not `BLOCK_FOR` of them (an allreduce at P = 8 right after
/// such a start: 23-75 µs a call against 5).
#[derive(Debug)]
pub struct Contention {
    late: u32,
    block_until: Option<std::time::Instant>,
    block_for: std::time::Duration,
}

impl Default for Contention {
    fn default() -> Self {
        Contention {
            late: 0,
            block_until: None,
            block_for: Self::BLOCK_MIN,
        }
    }
}

impl Contention {
    pub const LATE: std::time::Duration = std::time::Duration::from_micros(500);
    pub const LATE_YIELDS: u32 = 2;
    pub const BLOCK_MIN: std::time::Duration = std::time::Duration::from_millis(4);
    pub const BLOCK_FOR: std::time::Duration = std::time::Duration::from_millis(100);

    /// `sched_yield`, noting whether the core was taken.
    pub fn yield_now(&mut self) {
        self.yield_among(0)
    }

    /// `sched_yield` on a core `others` known waiters share (partition members whose last
    /// wait was on this cpu): each of them takes its turn before ours comes back, so the yield
    /// is late only past `LATE` for every one of them. Without that, oversubscribed members
    /// (32 ranks on 2 cores) take each other for CPU-bound threads and block, and every wake
    /// then crosses the device (an allreduce at P = 32: 6.3 ms against 50 µs).
    pub fn yield_among(&mut self, others: u32) {
        let now = std::time::Instant::now();
        std::thread::yield_now();
        self.yielded(now.elapsed(), others);
    }

    /// A yield (the caller's own) took `took` on a core `others` known waiters share.
    pub fn yielded(&mut self, took: std::time::Duration, others: u32) {
        if took > Self::LATE * (others + 1) {
            self.late += 1;
            if self.late >= Self::LATE_YIELDS {
                self.block_until = Some(std::time::Instant::now() + self.block_for);
                self.block_for = (self.block_for * 2).min(Self::BLOCK_FOR);
                self.late = 0;
            }
        } else {
            self.late = 0;
            self.block_for = Self::BLOCK_MIN;
        }
    }

    /// How long the next block lasts, if the yields are late again.
    pub fn next_block(&self) -> std::time::Duration {
        self.block_for
    }

    /// Whether a waiter should block now rather than yield.
    pub fn blocking(&mut self) -> bool {
        match self.block_until {
            Some(until) if std::time::Instant::now() < until => true,
            Some(_) => {
                self.block_until = None;
                false
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Contention;
    use std::time::Duration;

    /// Late yields block for 4 ms, then 8, 16...; one on time starts again from 4 ms, and
    /// a yield is late only past `LATE` for each waiter sharing the core.
    #[test]
    fn a_busy_core_blocks_waiters_for_longer_each_time_and_a_free_one_resets_it() {
        let mut c = Contention::default();
        let late = Contention::LATE + Duration::from_micros(1);
        c.yielded(late * 3, 3);
        c.yielded(late * 3, 3);
        assert!(!c.blocking(), "three sharers: not late for four turns");
        for want in [4, 8, 16, 32, 64, 100, 100] {
            assert_eq!(c.next_block(), Duration::from_millis(want));
            c.yielded(late, 0);
            assert!(!c.blocking(), "one late yield does not block");
            c.yielded(late, 0);
            assert!(c.blocking(), "two in a row do");
            c.block_until = None;
        }
        c.yielded(Duration::from_micros(10), 0);
        assert_eq!(c.next_block(), Contention::BLOCK_MIN);
        assert!(!c.blocking());
    }
}
