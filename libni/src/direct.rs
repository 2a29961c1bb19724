//! The direct path: tagged messages and small collectives through the partition window
//! (`window.rs`), with no device thread between the ranks.
//!
//! When the NI's partition has a window, libni matches every tagged message itself: each
//! send puts a header in the (sender → receiver) ring — with the payload when it is at most
//! `EAGER_MAX` bytes; past that, from an exported region, as a *ready to be read* (`GET`)
//! whose payload the receiver copies itself out of the sender's region once it matched it,
//! answering with a `FIN`; from other memory with the payload when it is at most `big_max`
//! of the partition's size and the ring is empty (`Window::drained`), else as a *ready to
//! send* whose payload the fabric moves (one copy) once the receiver matched it and posted
//! a fabric receive for it (so does a `GET` the receiver cannot map). One ring per pair keeps
//! MPI's non-overtaking order; receives match the earliest waiting message, messages the
//! earliest posted receive, as the fabric does (`fastpath.md`, "Matching and ordering").
//! Every operation still ends as a completion in `Inner::done`, so `wait`/`test`/`forget`
//! treat both paths alike.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ni_abi::fastpath::{
    coll, dtype, mqcw, op, redop, Completion, Request, Status, ANY_RANK, MQ_MESSAGE,
};
use ni_abi::reduce::{apply, combine, identity};
use ni_abi::window::{self as w, fin, kind, GetFrom, Header};

/// A mapping of a peer's exported region, and the region's own length.
pub(crate) type PeerMem = (std::sync::Arc<crate::mem::Mem>, u64);

use crate::window::Window;
use crate::{Done, Error, Inner, Result};

/// An operation started on the direct path: its id, and how it ended if it ended inside the
/// call (a send in the ring at once, a receive that took its message from the ring) — then
/// its `Op` holds that, and nothing goes through `done`.
pub(crate) struct Started {
    pub user: u64,
    pub now: Option<Done>,
}

impl Started {
    /// One that ends later, or ended already with its completion in `done` (a failure).
    fn later(user: u64) -> Started {
        Started { user, now: None }
    }
}

/// A receive posted on the direct path, waiting for a message.
pub(crate) struct Posted {
    user: u64,
    src: u32,
    tag: u64,
    mask: u64,
    addr: u64,
    cap: u64,
}

impl Posted {
    /// The fabric's matching rule: the named source (or any) and the tag on the mask's bits.
    fn matches(&self, src: u32, tag: u64) -> bool {
        (self.src == ANY_RANK || self.src == src) && tag_matches(tag, self.tag, self.mask)
    }
}

/// The receives posted on the direct path, in the order they were posted, and per source
/// how many name it: whether an earlier receive could claim a source's next message is a
/// load, where it was a walk of all of them (with a window of 64 receives posted before
/// their messages came, a sixth of each receive's instructions).
#[derive(Default)]
pub(crate) struct PostedQueue {
    q: VecDeque<Posted>,
    /// Receives naming each source, by rank (ranks are below the partition's size).
    named: Vec<u32>,
    /// Receives from any source.
    any: u32,
}

impl PostedQueue {
    #[inline]
    fn push_back(&mut self, p: Posted) {
        match self.named.get_mut(p.src as usize) {
            Some(n) => *n += 1,
            None if p.src == ANY_RANK => self.any += 1,
            None => self.first_from(p.src),
        }
        self.q.push_back(p);
    }

    /// The first receive naming a rank above all named so far.
    #[cold]
    #[inline(never)]
    fn first_from(&mut self, src: u32) {
        self.named.resize(src as usize + 1, 0);
        self.named[src as usize] = 1;
    }

    /// A receive left the queue.
    #[inline(always)]
    fn gone(&mut self, src: u32) {
        match self.named.get_mut(src as usize) {
            Some(n) => *n -= 1,
            None => self.any -= 1,
        }
    }

    // Always: out of line, its `Option<Posted>` came back through memory (8 B ping-pong:
    // 26 instructions a round trip).
    #[inline(always)]
    fn pop_front(&mut self) -> Option<Posted> {
        let p = self.q.pop_front()?;
        self.gone(p.src);
        Some(p)
    }

    fn remove(&mut self, i: usize) -> Option<Posted> {
        let p = self.q.remove(i)?;
        self.gone(p.src);
        Some(p)
    }

    #[inline]
    fn front(&self) -> Option<&Posted> {
        self.q.front()
    }

    #[inline]
    fn len(&self) -> usize {
        self.q.len()
    }

    fn position(&self, f: impl FnMut(&Posted) -> bool) -> Option<usize> {
        self.q.iter().position(f)
    }

    /// Whether a posted receive could take `src`'s next message: one names it, or any.
    #[inline]
    fn claims(&self, src: u32) -> bool {
        self.any > 0 || self.named.get(src as usize).is_some_and(|&n| n > 0)
    }

    /// Take out the receives naming `src`, in order.
    fn take_named(&mut self, src: u32) -> Vec<Posted> {
        let (dead, keep): (Vec<Posted>, Vec<Posted>) = std::mem::take(&mut self.q)
            .into_iter()
            .partition(|p| p.src == src);
        self.q = keep.into();
        if let Some(n) = self.named.get_mut(src as usize) {
            *n = 0;
        }
        dead
    }
}

/// The fabric's rule for a tag: equal to `want` on the bits of `mask`.
#[inline]
pub(crate) fn tag_matches(tag: u64, want: u64, mask: u64) -> bool {
    (tag ^ want) & mask == 0
}

/// A message taken from a ring before a receive wanted it.
pub(crate) struct Unexpected {
    src: u32,
    tag: u64,
    what: Arrived,
}

pub(crate) enum Arrived {
    Eager(Vec<u8>),
    /// Ready to send: the payload waits for a fabric receive of tag `id`.
    Rts {
        id: u64,
    },
    /// Ready to be read: `full` bytes in the sender's exported region, where `from` says; a
    /// `FIN` of `id` answers it.
    Get {
        id: u64,
        from: GetFrom,
        full: u64,
    },
    /// A `GET` or `RTS` whose sender left before a receive matched it: its region (or
    /// fabric SEND) went with it, and what named it may name the next client's.
    Gone,
}

/// Where a `GET`'s payload lies here ([`Inner::get_payload`]).
enum GetPayload {
    /// In the sender's region, mapped by the `PeerMem`, from the pointer on.
    At(PeerMem, *const u8),
    /// The sender's region cannot be mapped here.
    Unmapped,
    /// The bytes named run past the region's end.
    PastEnd,
}

/// Where a collective's result goes, which its completion names: a broadcast's buffer, else
/// the receive buffer.
fn coll_recv(r: &Request) -> u64 {
    if r.flags == coll::BCAST {
        r.addr
    } else {
        r.tag
    }
}

/// The largest broadcast sent as one message in the rings (bytes): up to 3 members a ring's
/// piece (`ring_coll_max`), its root running ahead, where reading it where the root keeps it
/// ([`Rndv`]) waits for every member (8 KiB at P = 2 on one cpu: 3.1 us read, Open MPI 3.6);
/// with more, a slot's (their root sends slot-sized pieces up to three slots, `lib.rs`).
pub(crate) fn bcast_ring_max(size: u32) -> u64 {
    if size <= 3 {
        w::ring_coll_max(size)
    } else {
        w::COLL_MAX
    }
}

/// The longest vector of `kind` one collective in the window carries (bytes), given the
/// partition's `ring_coll_max` and [`bcast_ring_max`]: members split longer ones into pieces
/// of this, and must all split alike (`Ni::collective_pieces`, `w_collective`).
#[inline]
pub(crate) fn piece_max_of(kind: u8, coll_max: u64, bcast_max: u64) -> u64 {
    match kind {
        coll::BCAST => bcast_max,
        coll::REDUCE | coll::SCAN | coll::EXSCAN => coll_max,
        _ => w::COLL_MAX,
    }
}

/// [`piece_max_of`] in a partition of `size` members, as its window works it out
/// (`Window::coll_max`, `bcast_max`).
pub(crate) fn piece_max(kind: u8, size: u32) -> u64 {
    let size = size.clamp(1, w::MAX_RANKS);
    piece_max_of(kind, w::ring_coll_max(size), bcast_ring_max(size))
}

/// Whether a collective of this kind goes as messages in the rings (`w_ring`): broadcasts,
/// reduces and scans; the rest are rounds of the collective slots.
pub(crate) fn in_rings(kind: u8) -> bool {
    matches!(kind, coll::BCAST | coll::REDUCE | coll::SCAN | coll::EXSCAN)
}

/// What a collective in the rings that ended at once reports: as its completion would.
fn ring_done(r: &Request) -> Done {
    Done {
        status: Status::Ok,
        rank: r.rank,
        len: r.len,
        tag: coll_recv(r),
        aux: 0,
    }
}

/// What a `COLL` a collective in the rings took says: `ok` (its `meta` and length those
/// expected), a failure passed on ([`w::COLL_FAILED`]), or else members in different
/// collectives.
fn coll_status(ok: bool, meta: u64, id: u64) -> Status {
    match (ok, meta) {
        (true, _) => Status::Ok,
        (false, w::COLL_FAILED) => u16::try_from(id)
            .ok()
            .and_then(Status::from_u16)
            .filter(|&s| s != Status::Ok)
            .unwrap_or(Status::Collision),
        _ => Status::Collision,
    }
}

/// A `COLL`'s `tag` and id as its sender meant them: with [`w::coll_id::CTL`] the id is the
/// payload's first 8 bytes (taken off `data`; missing, no honest sender's: an id no role
/// has) and the tag is the `meta` below ([`w::COLL_FAILED`] stays itself); else the id is 0.
fn coll_words(tag: u64, data: &mut Vec<u8>) -> (u64, u64) {
    if tag & w::coll_id::CTL == 0 {
        return (tag, 0);
    }
    let Some(id) = data
        .get(..8)
        .map(|b| u64::from_le_bytes(b.try_into().unwrap()))
    else {
        return (tag, u64::MAX);
    };
    data.drain(..8);
    let tag = if tag == w::COLL_FAILED {
        tag
    } else {
        tag & !w::coll_id::CTL
    };
    (tag, id)
}

/// Fold a member's vector, in up to two parts (where it wraps in a ring), into the
/// collective in the rings waiting for it: a broadcast's into its buffer, a reduce's into the
/// result so far (the first as it is, the second combined with a root's own first), a scan's
/// previous prefix into its receive buffer (`into_out`, [`scan_fold`]) or else into `acc`.
fn absorb(b: &mut WRing, [x, y]: [&[u8]; 2]) {
    let (d, o) = dtype_op(&b.r);
    let n = x.len();
    match (b.kind(), b.held) {
        (coll::BCAST, _) => {
            let to = bcast_place(b);
            to[..n].copy_from_slice(x);
            to[n..n + y.len()].copy_from_slice(y);
        }
        (coll::REDUCE, held) if held != Held::Nothing || b.into_out => {
            // SAFETY: the send buffer was checked as registered when the reduce started; the
            // caller keeps it until the collective completes.
            let mine = unsafe { std::slice::from_raw_parts(b.r.addr as *const u8, b.bytes) };
            fold_reduce(d, o, held, b.result(), mine, [x, y]);
        }
        (coll::SCAN | coll::EXSCAN, _) if b.into_out => {
            // SAFETY: as above, the scan's send buffer.
            let mine = unsafe { std::slice::from_raw_parts(b.r.addr as *const u8, b.bytes) };
            let kind = b.kind();
            scan_fold(d, o, kind, b.result(), mine, [x, y]);
        }
        _ => {
            // Not zeroed first: the memset was as long as the copy (4 KiB pieces of a reduce).
            b.acc.clear();
            b.acc.extend_from_slice(x);
            b.acc.extend_from_slice(y);
        }
    }
    b.held = Held::Result;
}

/// A member's vector, in up to two parts where it wraps in a ring (a whole number of slots,
/// so of elements, in), folded into a reduce's result so far `out` as `held` says: taken as
/// the first, combined in one pass with the root's own `mine`, or applied to the result.
fn fold_reduce(d: u32, o: u32, held: Held, out: &mut [u8], mine: &[u8], [x, y]: [&[u8]; 2]) {
    let (o0, o1) = out.split_at_mut(x.len());
    match held {
        Held::Nothing => {
            o0.copy_from_slice(x);
            o1.copy_from_slice(y);
        }
        Held::Mine => {
            let (m0, m1) = mine.split_at(x.len());
            combine(d, o, o0, m0, x);
            combine(d, o, o1, m1, y);
        }
        Held::Result => {
            apply(d, o, o0, x);
            apply(d, o, o1, y);
        }
    }
}

/// The prefix of the members before this one (`parts`, as [`fold_reduce`]'s) taken into its
/// receive buffer `out`, apart from its send buffer `mine`: with its own vector applied in
/// one pass (an inclusive scan's result, and the prefix it sends on), or as it is (an
/// exclusive one's).
fn scan_fold(d: u32, o: u32, kind: u8, out: &mut [u8], mine: &[u8], [x, y]: [&[u8]; 2]) {
    let (o0, o1) = out.split_at_mut(x.len());
    if kind == coll::SCAN {
        let (m0, m1) = mine.split_at(x.len());
        combine(d, o, o0, x, m0);
        combine(d, o, o1, y, m1);
    } else {
        o0.copy_from_slice(x);
        o1.copy_from_slice(y);
    }
}

/// `src`'s vector `h` where it lies in its ring, in up to two parts (a payload inline in its
/// header slot copied into `x` instead).
fn vector_parts<'a>(win: &'a Window, src: u32, h: &Header, x: &'a mut Vec<u8>) -> [&'a [u8]; 2] {
    match win.payload_in_place(src, h) {
        Some(parts) => parts,
        None => {
            x.resize(h.len as usize, 0);
            win.payload(src, h, x);
            [&x[..], &[]]
        }
    }
}

/// A broadcast's buffer, where the root's vector goes as it is taken.
fn bcast_place(b: &mut WRing) -> &mut [u8] {
    // SAFETY: the broadcast's buffer was checked as registered when it started; the caller
    // keeps it until the collective completes.
    unsafe { std::slice::from_raw_parts_mut(b.r.addr as *mut u8, b.bytes) }
}

/// A send whose receiver reads the payload itself (`kind::GET`), until its `FIN`.
pub(crate) struct Getting {
    user: u64,
    tag: u64,
    addr: u64,
    len: u64,
}

/// The collective this rank has in flight in the window (at most one: round `n + 2` reuses
/// round `n`'s slots, which is safe only once this rank finished round `n + 1`).
pub(crate) struct WColl {
    user: u64,
    round: u64,
    meta: u64,
    kind: u8,
    dtype: u32,
    op: u32,
    root: u32,
    /// Where the result goes (BCAST: the data buffer).
    recv: u64,
    count: u64,
    /// Bytes per member.
    bytes: usize,
    /// Its timeout (two clock reads were a tenth of an allreduce's instructions with both
    /// members on one cpu).
    clock: TimeoutClock,
}

/// A window collective's timeout, read lazily: the clock is read at the first poll that
/// finds the collective unfinished and looked at every 64th after (the timeout is seconds,
/// a clock read 25 ns of a broadcast's 100).
#[derive(Default)]
struct TimeoutClock {
    started: Option<Instant>,
    polls: u32,
}

impl TimeoutClock {
    /// One more poll that found the collective unfinished: whether `timeout` has passed.
    fn passed(&mut self, timeout: Duration) -> bool {
        self.polls = self.polls.wrapping_add(1);
        self.polls % 64 == 1 && self.started.get_or_insert_with(Instant::now).elapsed() > timeout
    }

    /// The waiter blocked (up to 20 ms): the next poll looks at the clock, else the timeout
    /// would pass 64 blocks late.
    fn slept(&mut self) {
        self.polls = 0;
    }
}

/// A collective in the rings (`fastpath.md`, "Collectives in the rings") that this rank
/// waits for vectors in (at most one: each takes its members' next vectors in order): a
/// broadcast at a member other than the root, a reduce at its root, a scan at a member
/// after the first.
pub(crate) struct WRing {
    /// The request that started it, with the completion's `user`: kind, root, buffers,
    /// count, datatype and operation.
    r: Request,
    meta: u64,
    /// The member whose vector it takes next: the root (a broadcast), each member in rank
    /// order (a reduce's root, its own data at its turn), the one before (a scan).
    next: u32,
    bytes: usize,
    /// A reduce's result so far in rank order where it is not built in the receive buffer
    /// (`into_out`), a scan's prefix where not taken into it.
    acc: Vec<u8>,
    /// What a reduce's root (or a scan) holds so far.
    held: Held,
    /// A reduce's root or a scan's member builds its result in its receive buffer, which
    /// lies apart from its send buffer (else in `acc`, copied there at the end).
    into_out: bool,
    /// A reduce's vector that did not fit (`collision`): the rest are still taken, so that
    /// the next collective takes its own, but not applied.
    failed: Option<Status>,
    clock: TimeoutClock,
    /// A broadcast of more than a slot, read where its root keeps it.
    rndv: Option<Rndv>,
}

/// What a collective in the rings holds of its result so far.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Held {
    /// No vector yet.
    Nothing,
    /// A reduce's root: its own vector only, where it lies in its send buffer (the next one
    /// is combined with it into the result: one pass, not a copy and an apply).
    Mine,
    /// The result so far.
    Result,
}

/// A broadcast of more than a slot in the rings (`fastpath.md`, "Broadcasts read where the
/// root keeps them"): its root sends every member a `COLL` `RNDV` saying where, each member
/// reads the vector there itself and answers `ACK`, and the root returns once every member
/// did. A member that cannot map the root's region (a guest) answers `NOMAP`, and the root
/// sends it the vector in slot-sized pieces; a root whose memory nobody maps (a guest)
/// sends every member pieces at once, and returns as a smaller broadcast's root does.
#[derive(Clone, Copy)]
pub(crate) struct Rndv {
    /// The root's number for it, in every `COLL` of it (a member learns it from the `RNDV`).
    seq: u64,
    /// At a member: bytes of the vector taken as pieces; `None` before the first.
    got: Option<usize>,
    /// At the root: the pieces sent to the member that said `NOMAP` (`next`) still wait for
    /// room in its ring; it counts as answered once they are all in.
    flushing: bool,
}

impl WRing {
    fn kind(&self) -> u8 {
        self.r.flags
    }

    /// Where a reduce's root or a scan's member builds its result (`into_out`), sized once it
    /// holds one.
    fn result(&mut self) -> &mut [u8] {
        if self.into_out {
            // SAFETY: the receive buffer was checked as registered when the collective started,
            // apart from the send buffer; the caller keeps it until the collective completes.
            unsafe { std::slice::from_raw_parts_mut(self.r.tag as *mut u8, self.bytes) }
        } else {
            &mut self.acc[..]
        }
    }

    /// Its completion, ending with `status` (`peer down` names the member it waited for).
    fn completion(&self, status: Status) -> Completion {
        let rank = if status == Status::PeerDown {
            self.next
        } else {
            self.r.rank
        };
        completion(
            op::COLLECTIVE,
            self.r.user,
            status,
            rank,
            self.r.len,
            coll_recv(&self.r),
        )
    }
}

/// A reduction's datatype and operation, as a collective's request carries them.
pub(crate) fn dtype_op(r: &Request) -> (u32, u32) {
    (r.access & 0xFF, (r.access >> 8) & 0xFF)
}

/// Bytes of collectives' vectors taken from one member's ring ahead of the collectives that
/// take them, a vector counting 64 more: past it the next waits in the ring (with what the
/// member sent after it), so the member waits for room. Far more than a program that runs
/// ahead honestly sends (100 broadcasts of 8 B: 7200), and a bound on what a member that
/// floods takes here.
const RING_COLLS_QUEUED: usize = 1 << 20;
/// At most this many emptied vectors kept for `ring_colls`.
const COLL_SPARES: usize = 64;

/// One member's collective vectors taken from its ring ahead of the collectives that take
/// them: `tag` and payload each, and the bytes they count against [`RING_COLLS_QUEUED`].
#[derive(Clone, Default)]
pub(crate) struct RingColls {
    queue: VecDeque<(u64, Vec<u8>)>,
    bytes: usize,
}

impl RingColls {
    /// What a vector of `len` bytes counts against [`RING_COLLS_QUEUED`].
    fn cost(len: usize) -> usize {
        len + 64
    }

    /// Whether a vector of `len` bytes more stays within [`RING_COLLS_QUEUED`].
    fn has_room(&self, len: usize) -> bool {
        self.bytes + Self::cost(len) <= RING_COLLS_QUEUED
    }

    /// A `COLL`'s `tag` and payload.
    fn push(&mut self, tag: u64, payload: Vec<u8>) {
        self.bytes += Self::cost(payload.len());
        self.queue.push_back((tag, payload));
    }

    fn pop(&mut self) -> Option<(u64, Vec<u8>)> {
        let next = self.queue.pop_front()?;
        self.bytes -= Self::cost(next.1.len());
        Some(next)
    }
}

/// What an attempt to start a window collective came to.
pub(crate) enum CollStart {
    Started(u64),
    /// Done already, successfully: nothing goes through `done`.
    Done(u64, crate::Done),
    /// Not for the window: the fabric does it.
    Fabric,
    /// Retry after progress: an earlier window collective is still in flight, or a member
    /// has not come up for the first time yet.
    NotYet,
}

#[derive(Default)]
pub(crate) struct DirectState {
    pub posted: PostedQueue,
    pub unexpected: VecDeque<Unexpected>,
    /// Fabric requests to post once the submission ring has room, with the alias their
    /// completion takes (`Inner::alias`).
    pub deferred: VecDeque<(Request, Option<(u64, u64)>)>,
    pub wcoll: Option<WColl>,
    pub coll_round: u64,
    /// The collective in the rings this rank waits for (`kind::COLL`), and per member the
    /// vectors taken from its ring that no collective here took yet: `tag`, payload.
    pub wring: Option<WRing>,
    pub ring_colls: Vec<RingColls>,
    /// Next rendezvous id per destination (the fabric tag of a large message's payload).
    pub next_rndv: Vec<u64>,
    /// Sends whose receivers read their payload themselves, by (destination, id).
    pub gets: std::collections::HashMap<(u32, u64), Getting>,
    /// Members that answered a `GET` with "use the fabric" (they cannot map a peer's
    /// region: a guest): sent `RTS`s until they come back anew.
    pub no_get: Vec<bool>,
    /// Peers' exported regions this process mapped, by `rank << 32 | key` (keys the device
    /// hands out); `None`: refused (asked again once the peer's `REGIONS` word moves, as
    /// the mappings are then dropped). With each mapping, the region's length.
    pub peer_maps: crate::IdMap<Option<PeerMem>>,
    /// Each peer's `REGIONS` word when its entries in `peer_maps` were made (one per member,
    /// made with the state).
    pub peer_gen: Vec<Option<u32>>,
    /// `Window::flush`'s outputs, kept between calls with their capacity.
    pub wake: Vec<u32>,
    pub done: Vec<Completion>,
    /// A collective in the rings' vector taken to be applied, and its `acc` between
    /// collectives, kept with their capacity.
    pub coll_x: Vec<u8>,
    pub ring_acc: Vec<u8>,
    /// Vectors `ring_colls` held, emptied, for the next ones a pass takes out of the rings
    /// (members that run ahead send many; an allocation each was a tenth of a scan).
    pub coll_spare: Vec<Vec<u8>>,
    /// The number of the last broadcast this rank rooted that members read where it keeps
    /// it (`Rndv::seq`); 0 before the first.
    pub rndv_seq: u64,
    /// [`crate::Ni::act_as_guest`]: map no peer's memory, offer none of this process's.
    pub as_guest: bool,
    /// During [`crate::Ni::drain_taking`]: the tags whose window messages are copied out of
    /// their rings into the caller's [`crate::Taken`] instead of into posted receives.
    pub taking: Option<crate::Taking>,
}

fn completion(opcode: u8, user: u64, status: Status, rank: u32, len: u64, tag: u64) -> Completion {
    Completion {
        opcode,
        status: status as u16,
        rank,
        user,
        len,
        tag,
        ..Default::default()
    }
}

impl Inner {
    pub(crate) fn direct(&self) -> bool {
        self.win.is_some()
    }

    fn lib_user(&mut self) -> u64 {
        self.next_user += 1;
        self.next_user
    }

    fn finish_lib(&mut self, c: Completion) {
        self.count_if_failed(&c);
        if self.ignored.is_empty() || !self.ignored.remove(&c.user) {
            self.done.insert(c.user, c);
        }
    }

    /// Count `c` in the window's counter of its failure, if it failed.
    #[inline]
    fn count_if_failed(&self, c: &Completion) {
        if c.status != Status::Ok as u16 {
            self.count_failure(c.status);
        }
    }

    /// The window's counter of a direct-path operation that failed with `status`.
    #[cold]
    fn count_failure(&self, status: u16) {
        let counter = match Status::from_u16(status) {
            Some(Status::PeerDown) => Some(w::stats::PEER_DOWN),
            Some(Status::Timeout) => Some(w::stats::TIMEOUT),
            Some(Status::LinkDown) => Some(w::stats::LINK_DOWN),
            Some(Status::Collision) => Some(w::stats::COLLISION),
            // Only eager receives end here truncated (the fabric counts rendezvous ones).
            Some(Status::Truncated) => Some(w::stats::TRUNCATED),
            _ => None,
        };
        if let (Some(which), Some(win)) = (counter, self.win.as_ref()) {
            win.count(which);
        }
    }

    /// An operation that ended before it began (bad rank, peer down...).
    fn fail_now(&mut self, opcode: u8, status: Status, rank: u32, len: u64, tag: u64) -> u64 {
        let user = self.lib_user();
        self.finish_lib(completion(opcode, user, status, rank, len, tag));
        user
    }

    /// Whether `[addr, addr + len)` lies in one region this process registered.
    pub(crate) fn registered(&self, addr: u64, len: u64) -> bool {
        if len == 0 {
            return true;
        }
        let Some(end) = addr.checked_add(len) else {
            return false;
        };
        let hits = self.region_hit.get();
        if hits
            .iter()
            .any(|&(start, rlen)| start <= addr && end <= start + rlen)
        {
            return true;
        }
        match self.regions.range(..=addr).next_back() {
            Some((&start, &(rlen, _))) if end <= start + rlen => {
                self.region_hit.set([(start, rlen), hits[0]]);
                true
            }
            _ => false,
        }
    }

    /// The exported (`alloc`) region that holds `[addr, addr + len)`: its key, and where
    /// in it the range starts.
    pub(crate) fn exported_at(&self, addr: u64, len: u64) -> Option<(u32, u64)> {
        let end = addr.checked_add(len)?;
        match self.regions.range(..=addr).next_back() {
            Some((&start, &(rlen, Some(key)))) if end <= start + rlen => Some((key, addr - start)),
            _ => None,
        }
    }

    /// Post a fabric request whose completion finishes a direct-path operation (`alias`)
    /// or nothing anyone waits for. `Err(WouldBlock)` when the submission ring is full.
    fn post_aliased(&mut self, r: Request, alias: Option<(u64, u64)>) -> Result<()> {
        let user = self.post(r)?;
        if let Some(a) = alias {
            self.alias.insert(user, a);
        } else {
            self.ignored.insert(user);
        }
        Ok(())
    }

    /// Post a fabric request now, or when the ring has room.
    fn post_or_defer(&mut self, r: Request, alias: Option<(u64, u64)>) -> Result<()> {
        if self.d.deferred.is_empty() {
            match self.post_aliased(r, alias) {
                Err(Error::WouldBlock) => {}
                other => return other,
            }
        }
        self.d.deferred.push_back((r, alias));
        Ok(())
    }

    fn wake(&mut self, peers: &[u32]) -> Result<()> {
        for &rank in peers {
            self.post_or_defer(
                Request {
                    opcode: op::WAKE,
                    rank,
                    ..Default::default()
                },
                None,
            )?;
        }
        Ok(())
    }

    /// A tagged send on the direct path. Returns the operation's id.
    pub(crate) fn w_send(&mut self, dest: u32, addr: u64, len: u64, tag: u64) -> Result<Started> {
        self.w_sync()?;
        if let Some(failed) = self.w_unreachable(op::SEND, dest, len, tag) {
            return Ok(Started::later(failed));
        }
        if !self.registered(addr, len) {
            return Ok(Started::later(self.fail_now(
                op::SEND,
                Status::NotRegistered,
                dest,
                len,
                tag,
            )));
        }
        // Past the eager size a payload the receiver can read itself is not copied into the
        // ring: one copy instead of two (8 KiB half round trip 1.8-6.0 -> 0.5-1.1 us, 32 KiB
        // 6.3-20 -> 1.1-1.6, between two cores).
        let readable = if len > w::EAGER_MAX {
            self.readable_at(dest, addr, len)
        } else {
            None
        };
        let win = self.win.as_mut().unwrap();
        if len <= w::EAGER_MAX
            || (readable.is_none() && len <= w::big_max(win.size) && win.drained(dest))
        {
            // SAFETY: [addr, addr + len) is inside a region this process registered and
            // still holds (checked above, under the lock that dropping a region takes).
            let payload = unsafe { std::slice::from_raw_parts(addr as *const u8, len as usize) };
            let kind = if len <= w::EAGER_MAX {
                kind::EAGER
            } else {
                kind::BIG
            };
            return self.w_put_buffered(op::SEND, kind, dest, payload, tag);
        }
        // Rendezvous: the payload stays here until the receiver takes it — itself, from
        // this process's exported region, or through the fabric.
        let id = self.d.next_rndv[dest as usize];
        self.d.next_rndv[dest as usize] += 1;
        if let Some(from) = readable {
            let user = self.lib_user();
            let g = Getting {
                user,
                tag,
                addr,
                len,
            };
            self.d.gets.insert((dest, id), g);
            let h = Header {
                kind: kind::GET,
                len: w::GET_LEN as u32,
                tag,
                id,
                full: len,
            };
            if let Ok(true) = self
                .win
                .as_mut()
                .unwrap()
                .put(dest, h, &from.encode(), || None)
            {
                self.wake(&[dest])?;
            }
            return Ok(Started::later(user));
        }
        let user = self.post(Request {
            opcode: op::SEND,
            rank: dest,
            addr,
            len,
            tag: id,
            ..Default::default()
        })?;
        self.alias.insert(user, (user, tag));
        let h = Header {
            kind: kind::RTS,
            len: 0,
            tag,
            id,
            full: len,
        };
        if let Ok(true) = self.win.as_mut().unwrap().put(dest, h, &[], || None) {
            self.wake(&[dest])?;
        }
        Ok(Started::later(user))
    }

    /// Whether peers may read this process's exported regions where they are: a host
    /// process's (a guest's regions are guest memory, which no peer maps).
    pub(crate) fn exports(&self) -> bool {
        self.dev.maps_by_fd() && !self.d.as_guest
    }

    /// Where `dest` may read `[addr, addr + len)` itself (`kind::GET`): in one of this
    /// process's exported regions (`Ni::alloc`'s, each a memory file a peer can be handed),
    /// from a host process (a guest's regions are guest memory, which no peer maps), toward a
    /// member that has not asked for the fabric's path.
    fn readable_at(&self, dest: u32, addr: u64, len: u64) -> Option<GetFrom> {
        if self.d.no_get[dest as usize] || !self.exports() {
            return None;
        }
        let (key, offset) = self.exported_at(addr, len)?;
        Some(GetFrom { key, offset })
    }

    /// A `FIN` from `src` for the send that wrote `GET` `id`: done (`fin::READ`), or its
    /// payload goes through the fabric (`fin::FABRIC`), as a `RTS`'s would. A `FIN` that
    /// answers nothing is no honest receiver's: counted, dropped.
    fn w_fin(&mut self, src: u32, id: u64, status: u64) -> Result<()> {
        let Some(g) = self.d.gets.remove(&(src, id)) else {
            self.win.as_ref().unwrap().count(w::stats::RING_ERRORS);
            return Ok(());
        };
        if status == fin::READ {
            // Counted once read: sent back to the fabric, the fabric's SEND counts it.
            let win = self.win.as_ref().unwrap();
            win.count(w::stats::SENDS);
            win.add(w::stats::BYTES, g.len);
            self.finish_lib(completion(op::SEND, g.user, Status::Ok, src, g.len, g.tag));
            return Ok(());
        }
        self.d.no_get[src as usize] = true;
        let r = Request {
            opcode: op::SEND,
            rank: src,
            addr: g.addr,
            len: g.len,
            tag: id,
            ..Default::default()
        };
        self.post_or_defer(r, Some((g.user, g.tag)))
    }

    /// Receive `p` of a `GET` from `src`: the payload copied out of `src`'s exported region
    /// here, if the daemon lets this process map it and `from` lies in it; the receive's
    /// completion. `Err(p)`: for the fabric's path, then.
    fn w_read_get(
        &mut self,
        p: Posted,
        src: u32,
        tag: u64,
        from: GetFrom,
        full: u64,
    ) -> std::result::Result<Completion, Posted> {
        let (_mem, at) = match self.get_payload(src, from, full) {
            GetPayload::At(mem, at) => (mem, at),
            GetPayload::PastEnd => {
                // No honest sender names bytes past its region's end.
                self.win.as_ref().unwrap().count(w::stats::RING_ERRORS);
                return Err(p);
            }
            GetPayload::Unmapped => return Err(p),
        };
        let cap = p.cap;
        let c = self.deliver_eager(p, src, tag, full, |_, buf| {
            // SAFETY: `at` starts `full` bytes inside the mapping `_mem` holds
            // (`get_payload`); `buf` is at most `full` bytes of a receive buffer in a region
            // this process holds (`deliver_eager` checked it).
            unsafe { std::ptr::copy_nonoverlapping(at, buf.as_mut_ptr(), buf.len()) }
        });
        if c.status == Status::Ok as u16 || c.status == Status::Truncated as u16 {
            self.count_read(full.min(cap));
        }
        Ok(c)
    }

    /// Where the `full` bytes `src`'s `GET` names lie in this process: the sender's region
    /// mapped (kept while the caller holds it) and the first of them.
    fn get_payload(&mut self, src: u32, from: GetFrom, full: u64) -> GetPayload {
        let Some(mem) = self.peer_mem(src, from.key) else {
            return GetPayload::Unmapped;
        };
        if from.offset.checked_add(full).is_none_or(|end| end > mem.1) {
            return GetPayload::PastEnd;
        }
        // SAFETY: `offset + full` ≤ the region's length, which the mapping covers.
        let at = unsafe { mem.0.ptr().add(from.offset as usize) };
        GetPayload::At(mem, at)
    }

    /// A `GET`'s `n` bytes read here.
    fn count_read(&self, n: u64) {
        let win = self.win.as_ref().unwrap();
        win.count(w::stats::READS);
        win.add(w::stats::READ_BYTES, n);
    }

    /// An MLINK WRITE (`op::PUT`) or READ of `len` bytes between `addr` and `dest`'s region
    /// `key` at `offset`, done here with a copy when `dest`'s client exported that region
    /// (`access::EXPORT`) and the daemon let this process map it: the same permission the
    /// target's NI would check, enforced by what the mapping covers. `None`: anything else
    /// (not exported, out of bounds, a peer down...) — the fabric's path does it, or fails
    /// it with its cause and counts it.
    pub(crate) fn w_one_sided(
        &mut self,
        opcode: u8,
        dest: u32,
        addr: u64,
        len: u64,
        key: u32,
        offset: u64,
    ) -> Result<Option<u64>> {
        self.w_sync()?;
        if self.w_unreachable_why(dest).is_some() || len == 0 || !self.registered(addr, len) {
            return Ok(None);
        }
        let Some((base, region_len)) = self.peer_map(dest, key) else {
            return Ok(None);
        };
        // The region's own length, as the target's NI checks it (the mapping is whole pages).
        if offset.checked_add(len).is_none_or(|end| end > region_len) {
            return Ok(None);
        }
        // SAFETY: `[offset, offset + len)` lies in the peer's region, inside its mapping
        // (checked just above), and `[addr, addr + len)` in a region this process registered
        // and holds (checked under the lock a region's drop takes). Source and target may be
        // the same pages under two addresses (a rank putting within its own region): then
        // overlapping bytes come out undefined, as on the fabric's path.
        unsafe {
            let remote = base.add(offset as usize);
            if opcode == op::PUT {
                std::ptr::copy(addr as *const u8, remote, len as usize);
            } else {
                std::ptr::copy(remote as *const u8, addr as *mut u8, len as usize);
            }
        }
        // The data is in place before the completion says so.
        std::sync::atomic::fence(std::sync::atomic::Ordering::Release);
        self.win
            .as_ref()
            .unwrap()
            .count_one_sided(opcode == op::PUT, len);
        let user = self.lib_user();
        self.finish_lib(completion(opcode, user, Status::Ok, dest, len, offset));
        Ok(Some(user))
    }

    /// Where this process mapped `dest`'s exported region `key`, and the region's length;
    /// `None` if the daemon refused it (asked once per `REGIONS` value of `dest`).
    pub(crate) fn peer_map(&mut self, dest: u32, key: u32) -> Option<(*mut u8, u64)> {
        self.peer_entry(dest, key)
            .as_ref()
            .map(|(m, len)| (m.ptr(), *len))
    }

    /// [`peer_map`](Self::peer_map)'s mapping itself: a holder keeps it mapped after
    /// `peer_maps` lets go of it (another thread's operation on `dest` after its `REGIONS`
    /// moved).
    pub(crate) fn peer_mem(&mut self, dest: u32, key: u32) -> Option<PeerMem> {
        self.peer_entry(dest, key).clone()
    }

    /// What `peer_maps` holds for `dest`'s region `key`, asked for now if nothing is.
    fn peer_entry(&mut self, dest: u32, key: u32) -> &Option<PeerMem> {
        const NONE: &Option<PeerMem> = &None;
        let Some(win) = self.win.as_ref().filter(|_| !self.d.as_guest) else {
            return NONE;
        };
        let g = win.regions(dest);
        let d = dest as usize;
        if self.d.peer_gen[d] != Some(g) {
            // What it exports changed (or its client is new): map again when used.
            self.d.peer_maps.retain(|&k, _| (k >> 32) as u32 != dest);
            self.d.peer_gen[d] = Some(g);
        }
        let dev = &mut self.dev;
        self.d
            .peer_maps
            .entry((dest as u64) << 32 | key as u64)
            .or_insert_with(|| {
                dev.map_peer_region(dest, key)
                    .map(|(m, len)| (std::sync::Arc::new(m), len))
            })
    }

    /// A T3E SEND done here, into `dest`'s queue at `offset` of its exported region `key`,
    /// under the queue's arrival lock (`fastpath.md`, "Message queues in the window"): the
    /// seed's arrival algorithm (HMM-148-0 pp. 9-15) as the device runs it — store the 64
    /// bytes in slot Tail, then move Tail with a compare-and-swap, so a receiver polling Tail
    /// never sees a slot before its data. `Some(Ok(tail))` stored, `Some(Err(()))` rejected
    /// (Tail = Limit); `None` for the fabric's path: not exported, a peer down, a lock that
    /// stays held, or anything the device fails with a status of its own (bounds, Tail 0).
    pub(crate) fn w_mq_send(
        &mut self,
        dest: u32,
        key: u32,
        offset: u64,
        msg: &[u8; 64],
    ) -> Result<Option<std::result::Result<(u64, bool), ()>>> {
        self.w_sync()?;
        // Not before we are up as ourselves: the lock would name an incarnation gone.
        if !self.win.as_mut().unwrap().live() || self.w_unreachable_why(dest).is_some() {
            return Ok(None);
        }
        let Some((base, region_len)) = self.peer_map(dest, key) else {
            return Ok(None);
        };
        let lock_end = offset.checked_add(w::mq_lock::OFFSET + 8);
        if !offset.is_multiple_of(MQ_MESSAGE) || lock_end.is_none_or(|e| e > region_len) {
            return Ok(None);
        }
        // SAFETY: the MQCW and the lock word lie in the peer's region (checked above), 8-byte
        // aligned (the region starts on a page, `offset` is a multiple of 64); the mapping
        // lives as long as `peer_maps` holds it, which this call does not change.
        let (mqcw, lock) = unsafe {
            let q = base.add(offset as usize);
            (
                &*(q as *const AtomicU64),
                &*(q.add(w::mq_lock::OFFSET as usize) as *const AtomicU64),
            )
        };
        let me = self.win.as_ref().unwrap().lock_holder();
        if w::mq_lock::take(lock, me).is_err() {
            // Held by a writer that stays (preempted, or gone): the device waits for it, or
            // frees a gone holder's lock, without holding up this process.
            return Ok(None);
        }
        let mut tries = 0;
        let result = loop {
            tries += 1;
            if tries > mqcw::TRIES {
                // The MQCW keeps changing under us: the fabric waits for it, not this process.
                break None;
            }
            let w0 = mqcw.load(Ordering::Acquire);
            let (tail, next, hit) = match mqcw::step(w0) {
                mqcw::Step::Full => break Some(Err(())),
                // The fabric fails it with its status.
                mqcw::Step::TailZero => break None,
                mqcw::Step::Store { tail, next, hit } => (tail, next, hit),
            };
            let slot = offset + tail * MQ_MESSAGE;
            if slot + MQ_MESSAGE > region_len {
                break None;
            }
            // SAFETY: `[slot, slot + 64)` lies in the peer's region (checked just above).
            unsafe {
                std::ptr::copy_nonoverlapping(msg.as_ptr(), base.add(slot as usize), msg.len())
            };
            if mqcw
                .compare_exchange(w0, next, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                // The next SEND stores into the next slot: ask for its line for writing now,
                // while nobody waits (the receiver polls the MQCW, not the slots), so that
                // store does not wait for it then.
                let after = slot + MQ_MESSAGE;
                if after + MQ_MESSAGE <= region_len {
                    prefetch_for_write(base.wrapping_add(after as usize));
                }
                break Some(Ok((tail + 1, hit)));
            }
            // The receiver swapped in a new MQCW meanwhile (its software reset): again.
        };
        // Free it only if it is still ours: the device frees the lock of a client it
        // considers gone (fastpath.md), and someone else may hold it by now.
        let _ = lock.compare_exchange(me, w::mq_lock::FREE, Ordering::Release, Ordering::Relaxed);
        let win = self.win.as_ref().unwrap();
        Ok(match result {
            None => None,
            Some(Err(())) => {
                win.count_mq(dest, false);
                Some(Err(()))
            }
            Some(Ok((tail, hit))) => {
                win.count_mq(dest, true);
                // On a hit Sig is set; IR_STATUS, MSG_ADDR and the interrupt are the
                // device's: the caller posts MQ_SIGNAL.
                Some(Ok((tail, hit)))
            }
        })
    }

    /// Why `dest` cannot be reached through the window now; `None` if it can.
    fn w_unreachable_why(&self, dest: u32) -> Option<Status> {
        let win = self.win.as_ref().expect("direct path");
        if dest >= win.size {
            Some(Status::OutOfPartition)
        } else if !win.up(dest) {
            Some(Status::PeerDown)
        } else if !win.reaches(dest) {
            Some(Status::LinkDown)
        } else {
            None
        }
    }

    /// Why `dest` cannot be sent to now, as a failed operation's id; `None` if it can.
    fn w_unreachable(&mut self, opcode: u8, dest: u32, len: u64, tag: u64) -> Option<u64> {
        let status = self.w_unreachable_why(dest)?;
        Some(self.fail_now(opcode, status, dest, len, tag))
    }

    /// An active message on the direct path: into the (me → dest) ring, for `dest`'s libni
    /// to hand to `handler` when it takes it. Completes once it is in the ring, as the
    /// fabric's completes once it is in the target's active-message ring.
    pub(crate) fn w_am_send(&mut self, dest: u32, handler: u64, payload: &[u8]) -> Result<Started> {
        self.w_sync()?;
        let len = payload.len() as u64;
        if let Some(failed) = self.w_unreachable(op::ROP, dest, len, handler) {
            return Ok(Started::later(failed));
        }
        self.w_put_buffered(op::ROP, kind::AM, dest, payload, handler)
    }

    /// An eager message straight from `payload` into the ring toward `dest` if it can go
    /// there now (`Ni::send_now`): false, and nothing done, if not.
    pub(crate) fn w_send_now(&mut self, dest: u32, payload: &[u8], tag: u64) -> Result<bool> {
        if payload.len() as u64 > w::EAGER_MAX {
            return Ok(false);
        }
        self.w_put_now(kind::EAGER, dest, payload, tag)
    }

    /// [`Self::w_send`] of an eager message if it goes into the ring now, which is when it
    /// is done (`Ni::send`): false, and nothing done, if not (the payload past the eager
    /// size or not registered, the ring full or messages waiting for room in it, `dest`
    /// down or out of reach) — `w_send` then says why. An 8-byte ping-pong's round trip, one
    /// cpu: 1613 -> 1535 instructions.
    pub(crate) fn w_send_region_now(
        &mut self,
        dest: u32,
        addr: u64,
        len: u64,
        tag: u64,
    ) -> Result<bool> {
        if len > w::EAGER_MAX || !self.registered(addr, len) {
            return Ok(false);
        }
        // SAFETY: [addr, addr + len) is inside a region this process registered and still
        // holds (checked above, under the lock that dropping a region takes).
        let payload = unsafe { std::slice::from_raw_parts(addr as *const u8, len as usize) };
        self.w_put_now(kind::EAGER, dest, payload, tag)
    }

    /// [`Self::w_am_send`] if the message goes into the ring now, which is when it is done:
    /// false, and nothing done, if not (the ring full, messages waiting for room in it,
    /// `dest` down or out of reach). It spares the common case the operation's id, its
    /// [`Started`] and the wait on it: a 64-byte active message's round trip, one cpu,
    /// 1831 -> 1758 instructions (`tests/bench/instr.sh`, pattern `am`).
    pub(crate) fn w_am_send_now(
        &mut self,
        dest: u32,
        handler: u64,
        payload: &[u8],
    ) -> Result<bool> {
        self.w_put_now(kind::AM, dest, payload, handler)
    }

    /// A message whose payload travels in the ring (`kind` EAGER or AM) straight into the
    /// ring toward `dest` if it can go there now: false, and nothing done, if not.
    #[inline]
    fn w_put_now(&mut self, kind: u8, dest: u32, payload: &[u8], tag: u64) -> Result<bool> {
        self.w_sync()?;
        if self.w_unreachable_why(dest).is_some() {
            return Ok(false);
        }
        let len = payload.len() as u64;
        let h = Header {
            kind,
            len: len as u32,
            tag,
            id: 0,
            full: len,
        };
        match self.win.as_mut().unwrap().put_now(dest, &h, payload) {
            Some(wake) => {
                if wake {
                    self.wake(&[dest])?;
                }
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// A message whose payload travels in the ring (`kind` EAGER or AM), buffered: the
    /// operation is done once the message is in the ring (now, or when the receiver made
    /// room), so a sender that waits for it never leaves it behind.
    fn w_put_buffered(
        &mut self,
        opcode: u8,
        kind: u8,
        dest: u32,
        payload: &[u8],
        tag: u64,
    ) -> Result<Started> {
        let len = payload.len() as u64;
        let h = Header {
            kind,
            len: len as u32,
            tag,
            id: 0,
            full: len,
        };
        let user = self.lib_user();
        let done = || Some(completion(opcode, user, Status::Ok, dest, len, tag));
        match self.win.as_mut().unwrap().put(dest, h, payload, done) {
            Ok(wake) => {
                if wake {
                    self.wake(&[dest])?;
                }
                // Done now: its `Op` holds the result, nothing goes through `done`.
                Ok(Started {
                    user,
                    now: Some(Done {
                        status: Status::Ok,
                        rank: dest,
                        len,
                        tag,
                        aux: 0,
                    }),
                })
            }
            Err(()) => Ok(Started::later(user)),
        }
    }

    /// A tagged receive on the direct path: its id, and its end if it took its message now.
    pub(crate) fn w_recv(
        &mut self,
        src: u32,
        addr: u64,
        cap: u64,
        tag: u64,
        mask: u64,
    ) -> Result<Started> {
        self.w_sync()?;
        let size = self.win.as_ref().unwrap().size;
        if src != ANY_RANK && src >= size {
            return Ok(Started::later(self.fail_now(
                op::RECV,
                Status::OutOfPartition,
                src,
                0,
                tag,
            )));
        }
        let user = self.lib_user();
        let mut now = None;
        let p = Posted {
            user,
            src,
            tag,
            mask,
            addr,
            cap,
        };
        let unexpected = &self.d.unexpected;
        let hit = if unexpected.is_empty() {
            None
        } else {
            unexpected.iter().position(|m| p.matches(m.src, m.tag))
        };
        match hit {
            Some(i) => {
                let m = self.d.unexpected.remove(i).unwrap();
                self.deliver(p, m.src, m.tag, m.what)?;
            }
            None if src != ANY_RANK && !self.win.as_ref().unwrap().up(src) => {
                self.finish_lib(completion(op::RECV, user, Status::PeerDown, src, 0, tag));
            }
            // No earlier receive could claim `src`'s next messages: the one this receive
            // matches may already be in the ring, taken now (it then ends in this call).
            None if src != ANY_RANK
                && self.win.as_mut().unwrap().live()
                && !self.d.posted.claims(src) =>
            {
                match self.w_take_wanted(src, p)? {
                    Wanted::Waiting(p) => self.d.posted.push_back(p),
                    Wanted::Now(c) => now = Some(c),
                    Wanted::Finished => {}
                }
                if self.win.as_mut().unwrap().publish_head_if_far(src) {
                    self.wake(&[src])?;
                }
            }
            None => self.d.posted.push_back(p),
        }
        Ok(match now {
            // Its `Op` holds how it ended: nothing goes through `done` (a tenth of a
            // receive's instructions, taking its message from the ring included).
            Some(c) => {
                self.count_if_failed(&c);
                Started {
                    user,
                    now: Some(crate::done_of(&c)),
                }
            }
            None => Started::later(user),
        })
    }

    /// Finish a matched eager receive of a `len`-byte message: `copy` fills the receive
    /// buffer with the message's first bytes (as many as the slice it is given holds).
    /// Returns the receive's completion, for the caller to record (`finish_lib`) or to hand
    /// straight to the wait on it.
    #[inline(always)]
    fn deliver_eager(
        &mut self,
        p: Posted,
        src: u32,
        tag: u64,
        len: u64,
        copy: impl FnOnce(&mut Self, &mut [u8]),
    ) -> Completion {
        let n = len.min(p.cap);
        let status = if !self.registered(p.addr, n) {
            Status::NotRegistered
        } else {
            // SAFETY: the buffer lies in a region this process still holds (checked just
            // above, under the lock a region's drop takes), n ≤ its length.
            let buf = unsafe { std::slice::from_raw_parts_mut(p.addr as *mut u8, n as usize) };
            copy(self, buf);
            if let Some(win) = self.win.as_ref() {
                win.count_recvs(1, n);
            }
            if len > p.cap {
                Status::Truncated
            } else {
                Status::Ok
            }
        };
        completion(op::RECV, p.user, status, src, len, tag)
    }

    /// A wait on receive `user` from `src`: its message straight from `src`'s ring when it
    /// is the next one there and this receive the only one posted (the receive a progress
    /// pass would give it to), its completion returned, not recorded. `None`: anything
    /// else, for the progress pass. Other rings, the device's completions and the
    /// collective wait for the next pass, as they do behind a receive that finds its
    /// message when it is posted (`w_recv`).
    #[inline]
    pub(crate) fn w_wait_recv(&mut self, user: u64, src: u32) -> Result<Option<Completion>> {
        // The only posted receive (a window of receives takes its messages in one progress
        // pass, each for the receive it matches, as it always did), for one source.
        if self.d.posted.len() != 1
            || self.d.posted.front().is_some_and(|p| p.user != user)
            || src == ANY_RANK
            || !self.direct()
        {
            return Ok(None);
        }
        self.w_sync()?;
        let win = self.win.as_mut().unwrap();
        if !win.live() {
            return Ok(None);
        }
        let Some(e) = win.next_eager(src) else {
            return Ok(None);
        };
        // Looked at again: a pass `w_sync` ran may have given this receive its message.
        let first = self.d.posted.front();
        if e.am || !first.is_some_and(|p| p.user == user && p.matches(src, e.tag)) {
            return Ok(None);
        }
        let p = self.d.posted.pop_front().unwrap();
        let c = self.take_eager(p, src, &e);
        if self.win.as_mut().unwrap().publish_head_if_far(src) {
            self.wake(&[src])?;
        }
        self.count_if_failed(&c);
        Ok(Some(c))
    }

    /// Hand a message to a matched receive.
    fn deliver(&mut self, p: Posted, src: u32, tag: u64, what: Arrived) -> Result<()> {
        match what {
            Arrived::Eager(data) => {
                let c = self.deliver_eager(p, src, tag, data.len() as u64, |_, buf| {
                    buf.copy_from_slice(&data[..buf.len()])
                });
                self.finish_lib(c);
            }
            Arrived::Rts { id } => {
                // The fabric moves the payload: sender's region straight into this buffer.
                let r = Request {
                    opcode: op::RECV,
                    rank: src,
                    addr: p.addr,
                    len: p.cap,
                    tag: id,
                    mask: u64::MAX,
                    ..Default::default()
                };
                self.post_or_defer(r, Some((p.user, tag)))?;
            }
            Arrived::Gone => {
                self.finish_lib(completion(op::RECV, p.user, Status::PeerDown, src, 0, tag));
            }
            Arrived::Get { id, from, full } => {
                let status = match self.w_read_get(p, src, tag, from, full) {
                    Ok(c) => {
                        self.finish_lib(c);
                        fin::READ
                    }
                    Err(p) => {
                        // As for a `RTS`: the sender posts the fabric SEND once it reads the
                        // `FIN`.
                        self.deliver(p, src, tag, Arrived::Rts { id })?;
                        fin::FABRIC
                    }
                };
                self.w_answer_get(src, id, status)?;
            }
        }
        Ok(())
    }

    /// Answer `src`'s `GET` `id`: read (`fin::READ`), or "send it through the fabric".
    fn w_answer_get(&mut self, src: u32, id: u64, status: u64) -> Result<()> {
        let h = Header {
            kind: kind::FIN,
            len: 0,
            tag: id,
            id: status,
            full: 0,
        };
        if let Ok(true) = self.win.as_mut().unwrap().put(src, h, &[], || None) {
            self.wake(&[src])?;
        }
        Ok(())
    }

    /// [`Ni::recv_in_place`](crate::Ni::recv_in_place): the first message here from `src`
    /// with tag `tag`, if it is a `GET` whose bytes this process maps, read by `read` where
    /// the sender keeps them — at most `cap` of its bytes — and answered `FIN` read. `None`
    /// (nothing taken): anything else, for a receive to take as it always does (a region
    /// that cannot be mapped, or bytes past its end, are that receive's to refuse and count).
    /// Returns the message's whole length and what `read` returned.
    pub(crate) fn w_recv_in_place<R>(
        &mut self,
        src: u32,
        tag: u64,
        cap: u64,
        read: impl FnOnce(*const u8, usize) -> R,
    ) -> Result<Option<(u64, R)>> {
        self.w_sync()?;
        let Some(i) = self
            .d
            .unexpected
            .iter()
            .position(|m| m.src == src && m.tag == tag)
        else {
            return Ok(None);
        };
        let Arrived::Get { id, from, full } = self.d.unexpected[i].what else {
            return Ok(None);
        };
        let GetPayload::At(_mem, at) = self.get_payload(src, from, full) else {
            return Ok(None);
        };
        self.d.unexpected.remove(i);
        let n = full.min(cap);
        // `at` stays valid while `_mem` holds the mapping, to the end of this call.
        let r = read(at, n as usize);
        self.win.as_ref().unwrap().count_recvs(1, n);
        self.count_read(n);
        self.w_answer_get(src, id, fin::READ)?;
        Ok(Some((full, r)))
    }

    /// What `rank` left to be read, before it left, is gone with it: a `GET`'s region, a
    /// `RTS`'s fabric SEND (whose `id` the next client on that NI starts again from 0).
    fn forget_gone(&mut self, rank: u32) {
        for m in self.d.unexpected.iter_mut() {
            if m.src == rank && !matches!(m.what, Arrived::Eager(_)) {
                m.what = Arrived::Gone;
            }
        }
    }

    /// Act on what changed in the members' states (`Window::refresh`, which already reset
    /// the rings of members that came back), once what they sent before has been taken.
    fn w_states(&mut self, changes: Vec<crate::window::Change>) -> Result<()> {
        if changes.is_empty() {
            return Ok(());
        }
        for ch in &changes {
            if ch.new_incarnation {
                self.d.next_rndv[ch.rank as usize] = 0;
                self.d.no_get[ch.rank as usize] = false;
            }
            if !ch.up || ch.new_incarnation {
                // Sends whose receiver left before it read them (its `FIN`s, sent before it
                // left, were taken already).
                let gone: Vec<(u32, u64)> = (self.d.gets.keys())
                    .filter(|k| k.0 == ch.rank)
                    .copied()
                    .collect();
                for k in gone {
                    let g = self.d.gets.remove(&k).expect("just seen");
                    let c = completion(op::SEND, g.user, Status::PeerDown, ch.rank, g.len, g.tag);
                    self.finish_lib(c);
                }
                // Messages still waiting for room toward a client that left are not sent.
                let dropped = self.win.as_mut().unwrap().drop_backlog(ch.rank);
                for (_, _, c) in dropped {
                    if let Some(mut c) = c {
                        c.status = Status::PeerDown as u16;
                        self.finish_lib(c);
                    }
                }
                // Still gone: what this pass took from it was sent before it left.
                if !ch.up {
                    self.forget_gone(ch.rank);
                }
                // Receives named for the client that left fail; messages it sent before
                // leaving were taken from its ring already and still match.
                let dead = self.d.posted.take_named(ch.rank);
                for p in dead {
                    self.finish_lib(completion(
                        op::RECV,
                        p.user,
                        Status::PeerDown,
                        ch.rank,
                        0,
                        p.tag,
                    ));
                }
            }
        }
        // Collectives need every member: what was in flight fails, and rounds count anew
        // (the device emptied the slots when the member came up).
        let had_been_up = changes.iter().any(|c| !c.up || c.new_incarnation);
        if had_been_up {
            // A round every member published is complete, whoever left after publishing; a
            // collective in the rings whose members left completes if their vectors came
            // first.
            self.w_coll_poll();
            self.w_ring_poll();
            if let Some(c) = self.d.wcoll.take() {
                let done = completion(
                    op::COLLECTIVE,
                    c.user,
                    Status::PeerDown,
                    c.root,
                    c.count,
                    c.recv,
                );
                self.finish_lib(done);
            }
            self.d.coll_round = 0;
        }
        Ok(())
    }

    /// Everything the direct path does when libni polls: take what arrived, retry what
    /// waited for room, finish the collective in flight.
    pub(crate) fn w_progress(&mut self) -> Result<()> {
        if !self.win.as_mut().is_some_and(|w| w.live()) {
            return Ok(());
        }
        // Most looks of a waiter find nothing, or only the `HEAD`s of messages receives took
        // straight from their rings to publish: a few loads say so.
        if self.d.deferred.is_empty() && self.d.wcoll.is_none() && self.d.wring.is_none() {
            let win = self.win.as_mut().unwrap();
            if win.quiet_but_heads() {
                win.publish_heads(&mut self.d.wake);
                if !self.d.wake.is_empty() {
                    self.w_flush_and_wake()?;
                }
                return Ok(());
            }
        }
        while let Some((r, alias)) = self.d.deferred.pop_front() {
            match self.post_aliased(r, alias) {
                Ok(()) => {}
                Err(Error::WouldBlock) => {
                    self.d.deferred.push_front((r, alias));
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        // States first: a member that came back has fresh rings, whose cursors restart
        // before anything is read from them.
        let changes = {
            let win = self.win.as_mut().unwrap();
            if win.gen_moved() {
                win.refresh()
            } else {
                vec![]
            }
        };
        // Before taking what a member that came back sent anew (from its fresh ring).
        for ch in &changes {
            if !ch.up || ch.new_incarnation {
                self.forget_gone(ch.rank);
            }
        }
        let size = self.win.as_ref().unwrap().size;
        let mut failed = Ok(());
        for src in 0..size {
            let mut handler_first = false;
            loop {
                match self.w_take_inline(src) {
                    Took::Nothing => break,
                    // The handler (which may answer) runs before this pass looks at the
                    // next slot when that starts a line: the sender may hold that line,
                    // asked for to write there (`Window::try_put`), and the look would
                    // wait for it to cross back (64 B active message between two cores,
                    // half round trip 0.205 -> 0.195 µs, by turns in one launch).
                    Took::Am if self.win.as_ref().unwrap().next_starts_line(src) => {
                        handler_first = true;
                        break;
                    }
                    Took::Am | Took::Eager => {}
                }
            }
            if !handler_first && self.win.as_ref().unwrap().arrived(src) {
                failed = self.w_take(src, None).map(|_| ());
            }
            if self.win.as_mut().unwrap().publish_head(src) {
                self.d.wake.push(src);
            }
            if failed.is_err() {
                break;
            }
        }
        failed?;
        self.win.as_mut().unwrap().heads_published();
        self.w_states(changes)?;
        // Most passes took a message or two and have nothing queued to send or to wake.
        if self.win.as_ref().unwrap().backlogged() || !self.d.wake.is_empty() {
            self.w_flush_and_wake()?;
        }
        if self.d.wcoll.is_some() {
            self.w_coll_poll();
        }
        if self.d.wring.is_some() {
            self.w_ring_poll();
            if !self.d.wake.is_empty() {
                self.w_flush_and_wake()?;
            }
        }
        Ok(())
    }

    /// Move what waits for room into rings that have it now, and wake the members that
    /// must be (`d.wake`).
    #[inline(never)]
    fn w_flush_and_wake(&mut self) -> Result<()> {
        let (mut wake, mut done) = (
            std::mem::take(&mut self.d.wake),
            std::mem::take(&mut self.d.done),
        );
        self.win.as_mut().unwrap().flush(&mut wake, &mut done);
        for c in done.drain(..) {
            self.finish_lib(c);
        }
        self.d.done = done;
        wake.sort_unstable();
        wake.dedup();
        let woken = self.wake(&wake);
        wake.clear();
        self.d.wake = wake;
        woken
    }

    /// Take the messages `src` published toward this rank, oldest first: an eager one a
    /// posted receive wants goes straight from the ring into its buffer (one copy), others
    /// wait in `unexpected`. With `want` (a receive not yet posted, which no posted one
    /// precedes for `src`): only up to the message it matches, and `want` back if none
    /// did; without, every message. The caller publishes `HEAD`.
    fn w_take(&mut self, src: u32, mut want: Option<Posted>) -> Result<Option<Posted>> {
        while let Some(h) = self.win.as_mut().unwrap().next(src) {
            if h.kind == kind::COLL {
                let queued = &mut self.d.ring_colls[src as usize];
                if queued.queue.is_empty() && self.d.wring.as_ref().is_some_and(|b| b.next == src) {
                    // The collective waiting for it takes it from the ring itself.
                    self.w_ring_poll();
                    continue;
                }
                if !queued.has_room(h.len as usize) {
                    // Left in the ring, with what follows it, until a collective takes one.
                    break;
                }
                let win = self.win.as_mut().unwrap();
                let mut data = self.d.coll_spare.pop().unwrap_or_default();
                data.resize(h.len as usize, 0);
                win.payload(src, &h, &mut data);
                win.consume(src, &h);
                queued.push(h.tag, data);
                continue;
            }
            if h.kind == kind::AM {
                let mut payload = self.am_buffer(h.len as usize);
                let win = self.win.as_mut().unwrap();
                win.payload(src, &h, &mut payload);
                win.consume(src, &h);
                win.count(w::stats::AMS_TAKEN);
                self.queue_am(h.tag, src, payload);
                continue;
            }
            if h.kind == kind::FIN {
                self.win.as_mut().unwrap().consume(src, &h);
                self.w_fin(src, h.tag, h.id)?;
                continue;
            }
            // Where a `GET`'s payload lies, judged before it may match a receive.
            let get_from = if h.kind == kind::GET {
                let win = self.win.as_mut().unwrap();
                let mut b = [0u8; w::GET_LEN as usize];
                win.payload(src, &h, &mut b);
                let from = GetFrom::decode(&b);
                if from.is_none() {
                    // No honest sender's: skipped.
                    win.consume(src, &h);
                    win.count(w::stats::RING_ERRORS);
                    continue;
                }
                from
            } else {
                None
            };
            if matches!(h.kind, kind::EAGER | kind::BIG)
                && self.d.taking.as_ref().is_some_and(|t| t.wants(h.tag))
            {
                self.take_into_taken(src, h.tag, h.len as u64, |win, buf| {
                    win.payload(src, &h, buf)
                });
                self.win.as_mut().unwrap().consume(src, &h);
                continue;
            }
            // With `want`, no posted receive is for `src` (the caller checked).
            let (p, wanted) = match want.take() {
                Some(w) if w.matches(src, h.tag) => (Some(w), true),
                Some(w) => {
                    want = Some(w);
                    (None, false)
                }
                None => (self.take_posted(src, h.tag), false),
            };
            match (h.kind, p) {
                (kind::EAGER | kind::BIG, Some(p)) => {
                    let c = self.deliver_eager(p, src, h.tag, h.len as u64, |me, buf| {
                        me.win.as_ref().unwrap().payload(src, &h, buf)
                    });
                    self.finish_lib(c);
                    self.win.as_mut().unwrap().consume(src, &h);
                }
                (kind::EAGER | kind::BIG, None) => {
                    let win = self.win.as_mut().unwrap();
                    let mut data = vec![0u8; h.len as usize];
                    win.payload(src, &h, &mut data);
                    win.consume(src, &h);
                    self.d.unexpected.push_back(Unexpected {
                        src,
                        tag: h.tag,
                        what: Arrived::Eager(data),
                    });
                }
                (_, p) => {
                    let win = self.win.as_mut().unwrap();
                    win.consume(src, &h);
                    let what = match get_from {
                        Some(from) => Arrived::Get {
                            id: h.id,
                            from,
                            full: h.full,
                        },
                        None => Arrived::Rts { id: h.id },
                    };
                    match p {
                        Some(p) => self.deliver(p, src, h.tag, what)?,
                        None => self.d.unexpected.push_back(Unexpected {
                            src,
                            tag: h.tag,
                            what,
                        }),
                    }
                }
            }
            if wanted {
                return Ok(None);
            }
        }
        Ok(want)
    }

    /// `w_take`'s common cases in a few loads: the next message from `src` is an active
    /// message, or an eager one the earliest posted receive wants (as `take_posted` would
    /// pick it). Returns what it took.
    #[inline]
    fn w_take_inline(&mut self, src: u32) -> Took {
        let Some(e) = self.win.as_ref().unwrap().next_eager(src) else {
            return Took::Nothing;
        };
        if e.am {
            self.w_take_am(src, e);
            return Took::Am;
        }
        if self.d.taking.as_ref().is_some_and(|t| t.wants(e.tag)) {
            self.take_into_taken(src, e.tag, e.len as u64, |win, buf| {
                win.eager_payload(src, &e, buf)
            });
            self.win.as_mut().unwrap().consume_eager(src, &e);
            return Took::Eager;
        }
        if !self.d.posted.front().is_some_and(|p| p.matches(src, e.tag)) {
            return Took::Nothing;
        }
        let p = self.d.posted.pop_front().unwrap();
        let c = self.take_eager(p, src, &e);
        self.finish_lib(c);
        Took::Eager
    }

    /// `w_take(src, Some(want))`, the common case first: the next message is an eager one
    /// `want` matches.
    #[inline]
    fn w_take_wanted(&mut self, src: u32, want: Posted) -> Result<Wanted> {
        match self.win.as_ref().unwrap().next_eager(src) {
            Some(e) if !e.am && want.matches(src, e.tag) => {
                Ok(Wanted::Now(self.take_eager(want, src, &e)))
            }
            // Most receives are posted before their message comes.
            None if !self.win.as_ref().unwrap().arrived(src) => Ok(Wanted::Waiting(want)),
            _ => Ok(match self.w_take(src, Some(want))? {
                Some(want) => Wanted::Waiting(want),
                None => Wanted::Finished,
            }),
        }
    }

    /// Take the eager message [`Window::next_eager`] found at the head of `src`'s ring for
    /// receive `p`: its payload into `p`'s buffer, the ring's cursor past it. Returns the
    /// receive's completion.
    #[inline(always)]
    fn take_eager(&mut self, p: Posted, src: u32, e: &crate::window::Eager) -> Completion {
        let c = self.deliver_eager(p, src, e.tag, e.len as u64, |me, buf| {
            me.win.as_ref().unwrap().eager_payload(src, e, buf)
        });
        self.win.as_mut().unwrap().consume_eager(src, e);
        c
    }

    /// Copy the payload (`len` bytes) of the message at the head of `src`'s ring into the
    /// caller's [`crate::Taken`] (`Ni::drain_taking`), counted as a receive; the caller
    /// moves the ring's cursor past it.
    fn take_into_taken(
        &mut self,
        src: u32,
        tag: u64,
        len: u64,
        copy: impl FnOnce(&crate::window::Window, &mut [u8]),
    ) {
        let taking = self.d.taking.as_mut().unwrap();
        let win = self.win.as_ref().unwrap();
        copy(win, taking.push(src, tag, len as usize));
        win.count_recvs(1, len);
    }

    /// Before `Ni::drain_taking` takes from the rings: the messages of its tags that a
    /// pass without it left in `unexpected` go first, in the order they came, so that none
    /// taken from a ring overtakes an older one of its sender's.
    pub(crate) fn w_unexpected_to_taken(&mut self) {
        let Some(taking) = self.d.taking.as_mut() else {
            return;
        };
        let mut counted = (0, 0);
        self.d.unexpected.retain(|m| match &m.what {
            Arrived::Eager(data) if taking.wants(m.tag) => {
                taking.push(m.src, m.tag, data.len()).copy_from_slice(data);
                counted = (counted.0 + 1, counted.1 + data.len() as u64);
                false
            }
            _ => true,
        });
        if let Some(win) = self.win.as_ref() {
            win.count_recvs(counted.0, counted.1);
        }
    }

    /// Queue the active message [`Window::next_eager`] found for its handler.
    #[inline(never)]
    fn w_take_am(&mut self, src: u32, e: crate::window::Eager) {
        let mut payload = self.am_buffer(e.len);
        let win = self.win.as_mut().unwrap();
        win.eager_payload(src, &e, &mut payload);
        win.consume_eager(src, &e);
        win.count(w::stats::AMS_TAKEN);
        self.queue_am(e.tag, src, payload);
    }

    /// The earliest posted receive that matches a message from `src` tagged `tag`.
    fn take_posted(&mut self, src: u32, tag: u64) -> Option<Posted> {
        let posted = &mut self.d.posted;
        match posted.front() {
            // The common case, receives posted in the order their messages come.
            Some(p) if p.matches(src, tag) => posted.pop_front(),
            _ => {
                let i = posted.position(|p| p.matches(src, tag))?;
                posted.remove(i)
            }
        }
    }

    /// Before a send or a receive: the members' states as they are now (`w_progress` when
    /// they moved, after taking what arrived, so nothing a departed peer sent before
    /// leaving is lost). Arrivals otherwise wait for the next progress, or the receive that
    /// wants them (`w_recv`): a receive posted before they are taken matches them just as
    /// it would have matched them taken.
    fn w_sync(&mut self) -> Result<()> {
        // A partition change voids the window this process mapped (the device keeps it for
        // nobody): no operation starts in it, as none would start on the fabric's path.
        self.check_epoch()?;
        let moved = match self.win.as_mut() {
            Some(w) => !w.live() || w.gen_moved() || !self.d.deferred.is_empty(),
            None => false,
        };
        if moved {
            self.w_progress()?;
        }
        Ok(())
    }

    /// Whether something on the direct path wants attention (checked before blocking).
    pub(crate) fn w_pending(&self) -> bool {
        let Some(win) = self.win.as_ref() else {
            return false;
        };
        win.has_arrivals()
            || win.gen_moved()
            || win.room_moved()
            || self
                .d
                .wcoll
                .as_ref()
                .is_some_and(|c| win.coll_ready(c.round))
    }

    /// Start a vector collective (a COLLECTIVE request) in the window if it fits there: up
    /// to a slot, or up to `bcast_max` bytes for a broadcast (read where the root keeps it,
    /// [`Rndv`]; only blocking ones, whose root's buffer stays put until every member read
    /// it).
    pub(crate) fn w_collective(&mut self, r: &Request, bcast_max: u64) -> Result<CollStart> {
        if self.win.is_none() || r.opcode != op::COLLECTIVE {
            return Ok(CollStart::Fabric);
        }
        let (kind, (d, o)) = (r.flags, dtype_op(r));
        let Some(esize) = dtype::size(d) else {
            return Ok(CollStart::Fabric);
        };
        let win = self.win.as_ref().unwrap();
        let (me, size) = (win.rank, win.size);
        let mut most = piece_max_of(kind, win.coll_max, win.bcast_max);
        if kind == coll::BCAST {
            most = most.max(bcast_max);
        }
        let Some(bytes) = r.len.checked_mul(esize).filter(|&b| b <= most) else {
            return Ok(CollStart::Fabric);
        };
        let ring = in_rings(kind);
        // Members that take a vector first look for it without a pass (which would copy it
        // out of the ring to reach what follows).
        let takes_first = match kind {
            coll::BCAST => me != r.rank,
            coll::REDUCE => me == r.rank && size > 1,
            coll::SCAN | coll::EXSCAN => me > 0,
            _ => false,
        };
        // Members that only send in the rings (a broadcast's root, a reduce's other
        // members, a scan's first) need only the members' states as they are now, as a
        // send does: their wait for room, if any, runs the pass (107 of a 1-f64 broadcast
        // root's 924 instructions went to it).
        let sends_only = match kind {
            coll::BCAST => me == r.rank,
            coll::REDUCE => me != r.rank,
            coll::SCAN | coll::EXSCAN => me == 0,
            _ => false,
        };
        if sends_only {
            self.w_sync()?;
        } else if !takes_first {
            self.w_progress()?;
        }
        if (!ring && self.d.wcoll.is_some()) || (ring && self.d.wring.is_some()) {
            return Ok(CollStart::NotYet);
        }
        let fail = |me: &mut Inner, s: Status| {
            Ok(CollStart::Started(me.fail_now(
                op::COLLECTIVE,
                s,
                r.rank,
                r.len,
                r.tag,
            )))
        };
        if o > redop::XOR
            || (o >= redop::AND && matches!(d, dtype::F32 | dtype::F64))
            || kind > coll::ALLGATHER
        {
            return fail(self, Status::BadDescriptor);
        }
        if matches!(kind, coll::BCAST | coll::REDUCE) && r.rank >= size {
            return fail(self, Status::OutOfPartition);
        }
        let win = self.win.as_ref().unwrap();
        // Members that only take vectors wait for those alone (which may have come before
        // their senders left): a broadcast's other members, a reduce's root, a scan's last.
        let takes_only = match kind {
            coll::BCAST => me != r.rank,
            coll::REDUCE => me == r.rank,
            coll::SCAN | coll::EXSCAN => me + 1 == size,
            _ => false,
        };
        if !win.all_up() && !takes_only {
            // Members that have not come up yet are waited for (as the fabric's rounds
            // wait); one that came and went fails the round.
            if (0..size).any(|m| {
                !win.up(m) && ni_abi::window::state::incarnation(win.states[m as usize]) > 0
            }) {
                return fail(self, Status::PeerDown);
            }
            return Ok(CollStart::NotYet);
        }
        let root_here = me == r.rank;
        let ok = match kind {
            coll::BARRIER => true,
            coll::BCAST => self.registered(r.addr, bytes),
            coll::REDUCE => {
                self.registered(r.addr, bytes) && (!root_here || self.registered(r.tag, bytes))
            }
            coll::ALLGATHER => {
                self.registered(r.addr, bytes) && self.registered(r.tag, bytes * size as u64)
            }
            _ => self.registered(r.addr, bytes) && self.registered(r.tag, bytes),
        };
        if !ok {
            return fail(self, Status::NotRegistered);
        }
        // What this member contributes (nothing for a barrier or a broadcast it does not
        // root: its slot's data is never read).
        let data: &[u8] = if kind != coll::BARRIER && (kind != coll::BCAST || root_here) {
            // SAFETY: inside a registered region this process holds (checked above, under
            // the lock a region's drop takes); only read.
            unsafe { std::slice::from_raw_parts(r.addr as *const u8, bytes as usize) }
        } else {
            &[]
        };
        let round = self.d.coll_round;
        let meta = w::coll_meta(kind, d, o, r.rank, r.len);
        if kind == coll::BCAST && bytes > self.win.as_ref().unwrap().bcast_max {
            return self.w_bcast_read(r, meta, data, bytes);
        }
        if ring {
            return self.w_ring(r, meta, data, bytes as usize);
        }
        let win = self.win.as_ref().unwrap();
        win.coll_write(round, meta, data);
        let mut sleepers = [0u32; w::MAX_RANKS as usize];
        let n_sleepers = win.sleepers_after_store(&mut sleepers);
        let user = self.lib_user();
        self.d.wcoll = Some(WColl {
            user,
            round,
            meta,
            kind,
            dtype: d,
            op: o,
            root: r.rank,
            recv: if kind == coll::BCAST { r.addr } else { r.tag },
            count: r.len,
            bytes: bytes as usize,
            clock: TimeoutClock::default(),
        });
        self.wake(&sleepers[..n_sleepers])?;
        self.w_coll_poll();
        Ok(CollStart::Started(user))
    }

    /// A collective in the rings (`fastpath.md`, "Collectives in the rings"): vectors go as
    /// `kind::COLL` messages, each member sending its part and done, as a buffered send is,
    /// so members run ahead of slower ones by what the rings hold (where a collective slot's
    /// round waits for every member: 8 B at P = 2 on one cpu 2.5 us). A broadcast's root
    /// sends its vector to every other member, a reduce's other members theirs to the root,
    /// a scan's members their prefix to the next; who takes vectors takes its senders' next
    /// ones, in the order they sent them.
    fn w_ring(&mut self, r: &Request, meta: u64, data: &[u8], bytes: usize) -> Result<CollStart> {
        let user = self.lib_user();
        let win = self.win.as_ref().unwrap();
        let (me, size) = (win.rank, win.size);
        let (kind, root) = (r.flags, r.rank);
        let done = completion(op::COLLECTIVE, user, Status::Ok, root, r.len, coll_recv(r));
        let sent = match kind {
            coll::BCAST if me == root => Some(self.ring_send(0..size, meta, data, done)),
            coll::REDUCE if me != root => Some(self.ring_send(root..root + 1, meta, data, done)),
            coll::SCAN | coll::EXSCAN if me == 0 => {
                // The first member's prefix is its data: what it sends on, and an inclusive
                // scan's result.
                let result = (kind == coll::SCAN).then_some(data);
                Some(self.scan_result(r, meta, result, data, done))
            }
            _ => None,
        };
        if let Some(sent) = sent {
            return self.w_ring_sent(r, user, sent);
        }
        let into_out = matches!(kind, coll::REDUCE | coll::SCAN | coll::EXSCAN)
            && (r.addr + bytes as u64 <= r.tag || r.tag + bytes as u64 <= r.addr);
        // What came already, next in its ring, is taken without the state of a collective
        // that waits (1-f64 at P = 2: a broadcast's member 1 138 -> 812 instructions).
        // Where a reduce's root whose vectors came in part goes on waiting.
        let (mut next, mut held) = (0, Held::Nothing);
        let now = match kind {
            coll::BCAST => self.w_bcast_now(root, meta, r.addr, bytes),
            coll::REDUCE if into_out => {
                (next, held) = self.w_reduce_now(r, meta, bytes);
                next == size
            }
            coll::SCAN | coll::EXSCAN => {
                if let Some(sent) = self.w_scan_now(r, meta, bytes, into_out, done) {
                    return self.w_ring_sent(r, user, sent);
                }
                false
            }
            _ => false,
        };
        if now {
            self.win.as_ref().unwrap().count_collective();
            if !self.d.wake.is_empty() {
                self.w_flush_and_wake()?;
            }
            return Ok(CollStart::Done(user, ring_done(r)));
        }
        let acc = std::mem::take(&mut self.d.ring_acc);
        self.w_ring_begin(WRing {
            r: Request { user, ..*r },
            meta,
            next: match kind {
                coll::BCAST => root,
                coll::REDUCE => next,
                _ => me - 1,
            },
            bytes,
            acc,
            held,
            into_out,
            failed: None,
            clock: TimeoutClock::default(),
            rndv: None,
        })
    }

    /// The header of `src`'s vector for the collective `meta` (`bytes` long) if it is the
    /// next message in `src`'s ring and no pass took one first. Anything else (nothing yet, a
    /// vector of another collective, a failure passed on, a root's control word: `meta`
    /// never has `coll_id::CTL`) is left to [`Self::w_ring_take`].
    fn ring_vector_now(&mut self, src: u32, meta: u64, bytes: usize) -> Option<Header> {
        if !self.d.ring_colls[src as usize].queue.is_empty() {
            return None;
        }
        let win = self.win.as_mut().unwrap();
        let h = win.live().then(|| win.next(src)).flatten()?;
        (h.kind == kind::COLL && h.tag == meta && h.len as usize == bytes).then_some(h)
    }

    /// `src`'s vector (`h`, [`Self::ring_vector_now`]) used: consumed, the head published if
    /// far behind.
    fn ring_vector_done(&mut self, src: u32, h: &Header) {
        let win = self.win.as_mut().unwrap();
        win.consume(src, h);
        if win.publish_head_if_far(src) {
            self.d.wake.push(src);
        }
    }

    /// A broadcast's member: the root's vector taken into `addr` if it came already.
    fn w_bcast_now(&mut self, root: u32, meta: u64, addr: u64, bytes: usize) -> bool {
        let Some(h) = self.ring_vector_now(root, meta, bytes) else {
            return false;
        };
        // SAFETY: the broadcast's buffer was checked as registered when it started
        // (`w_collective`); the caller keeps it until the collective completes, which is now.
        let out = unsafe { std::slice::from_raw_parts_mut(addr as *mut u8, bytes) };
        self.win.as_ref().unwrap().payload(root, &h, out);
        self.ring_vector_done(root, &h);
        true
    }

    /// A reduce's root whose receive buffer lies apart from its send buffer: the members'
    /// vectors that came already, taken in rank order where each lies in the ring and built
    /// into the receive buffer with its own at its turn, as `w_ring_take` builds them (its
    /// bits). Returns the member whose vector it takes next — `size` once all came, else
    /// where the waiting path goes on — and what it holds so far.
    fn w_reduce_now(&mut self, r: &Request, meta: u64, bytes: usize) -> (u32, Held) {
        let (me, size) = {
            let win = self.win.as_ref().unwrap();
            (win.rank, win.size)
        };
        let (d, o) = dtype_op(r);
        // SAFETY: both buffers were checked as registered when the reduce started
        // (`w_collective`), apart (`into_out`); the caller keeps them until the collective
        // completes.
        let (mine, out) = unsafe {
            (
                std::slice::from_raw_parts(r.addr as *const u8, bytes),
                std::slice::from_raw_parts_mut(r.tag as *mut u8, bytes),
            )
        };
        let (mut next, mut held) = (0, Held::Nothing);
        let mut x = std::mem::take(&mut self.d.coll_x);
        while next < size {
            let src = next;
            if src == me {
                // Its own vector: the first combined with the next one taken.
                if held == Held::Nothing {
                    held = Held::Mine;
                } else {
                    apply(d, o, out, mine);
                }
                next += 1;
                continue;
            }
            let Some(h) = self.ring_vector_now(src, meta, bytes) else {
                break;
            };
            let parts = vector_parts(self.win.as_ref().unwrap(), src, &h, &mut x);
            if held == Held::Nothing && src + 1 == me {
                // The first vector, its own next: both in one pass, in rank order (a NaN's
                // payload or a zero's sign depends on the order).
                let n = parts[0].len();
                let ((o0, o1), (m0, m1)) = (out.split_at_mut(n), mine.split_at(n));
                combine(d, o, o0, parts[0], m0);
                combine(d, o, o1, parts[1], m1);
                next += 1;
            } else {
                fold_reduce(d, o, held, out, mine, parts);
            }
            held = Held::Result;
            self.ring_vector_done(src, &h);
            next += 1;
        }
        if next == size && held == Held::Mine {
            // A partition of one.
            out.copy_from_slice(mine);
        }
        self.d.coll_x = x;
        (next, held)
    }

    /// A scan's member after the first: the prefix of the one before, if it came already,
    /// applied to its own vector, sent on and its result written, as `w_ring_take` would —
    /// into its receive buffer where it lies in the ring when that is apart from the send
    /// buffer (`into_out`: [`scan_fold`], [`Self::scan_on`]), else as [`Self::scan_end`].
    /// `None`: not there yet; else `done` back, or `None` riding with the prefix sent on.
    fn w_scan_now(
        &mut self,
        r: &Request,
        meta: u64,
        bytes: usize,
        into_out: bool,
        done: Completion,
    ) -> Option<Option<Completion>> {
        let src = self.win.as_ref().unwrap().rank.checked_sub(1)?;
        let h = self.ring_vector_now(src, meta, bytes)?;
        if into_out {
            let (d, o) = dtype_op(r);
            // SAFETY: both buffers were checked as registered when the scan started
            // (`w_collective`), apart (`into_out`); the caller keeps them until the
            // collective completes.
            let (mine, out) = unsafe {
                (
                    std::slice::from_raw_parts(r.addr as *const u8, bytes),
                    std::slice::from_raw_parts_mut(r.tag as *mut u8, bytes),
                )
            };
            let parts = vector_parts(self.win.as_ref().unwrap(), src, &h, &mut self.d.coll_x);
            scan_fold(d, o, r.flags, out, mine, parts);
            self.ring_vector_done(src, &h);
            return Some(self.scan_on(r, meta, bytes, done));
        }
        let mut prefix = std::mem::take(&mut self.d.ring_acc);
        prefix.resize(bytes, 0);
        self.win.as_ref().unwrap().payload(src, &h, &mut prefix);
        self.ring_vector_done(src, &h);
        let sent = self.scan_end(r, meta, &prefix, done);
        self.d.ring_acc = prefix;
        Some(sent)
    }

    /// A scan member's end once its result is in its receive buffer, apart from its send
    /// buffer ([`scan_fold`]): the prefix sent on to the next member, if any — an inclusive
    /// scan's result, an exclusive one's with its own vector applied.
    fn scan_on(
        &mut self,
        r: &Request,
        meta: u64,
        bytes: usize,
        done: Completion,
    ) -> Option<Completion> {
        let win = self.win.as_ref().unwrap();
        if win.rank + 1 == win.size {
            return Some(done);
        }
        // SAFETY: the receive buffer was checked as registered when the scan started
        // (`w_collective`); the caller keeps it until the collective completes.
        let out = unsafe { std::slice::from_raw_parts(r.tag as *const u8, bytes) };
        if r.flags == coll::SCAN {
            return self.scan_send_on(meta, out, done);
        }
        let (d, o) = dtype_op(r);
        // SAFETY: as above, the send buffer.
        let mine = unsafe { std::slice::from_raw_parts(r.addr as *const u8, bytes) };
        let mut x = std::mem::take(&mut self.d.coll_x);
        x.resize(bytes, 0);
        combine(d, o, &mut x, out, mine);
        let sent = self.scan_send_on(meta, &x, done);
        self.d.coll_x = x;
        sent
    }

    /// A scan's `prefix` on to the next member, if any ([`Self::ring_send`]).
    fn scan_send_on(&mut self, meta: u64, prefix: &[u8], done: Completion) -> Option<Completion> {
        let win = self.win.as_ref().unwrap();
        let (me, size) = (win.rank, win.size);
        if me + 1 < size {
            self.ring_send(me + 1..me + 2, meta, prefix, done)
        } else {
            Some(done)
        }
    }

    /// A scan member's end once the members' before it came (`prefix`, in rank order: an
    /// exclusive scan's result): its own vector applied (an inclusive scan's result), sent
    /// on, and its result written (`scan_result`).
    fn scan_end(
        &mut self,
        r: &Request,
        meta: u64,
        prefix: &[u8],
        done: Completion,
    ) -> Option<Completion> {
        let (d, o) = dtype_op(r);
        // SAFETY: the send buffer was checked as registered for `prefix.len()` bytes when the
        // scan started (`w_collective`); the caller keeps it until the collective completes.
        let mine = unsafe { std::slice::from_raw_parts(r.addr as *const u8, prefix.len()) };
        let mut x = std::mem::take(&mut self.d.coll_x);
        x.resize(prefix.len(), 0);
        combine(d, o, &mut x, prefix, mine);
        let result = if r.flags == coll::SCAN {
            &x[..]
        } else {
            prefix
        };
        let sent = self.scan_result(r, meta, Some(result), &x, done);
        self.d.coll_x = x;
        sent
    }

    /// A collective in the rings this member is done with once it sent: done now (`sent`
    /// the completion back), or once its last vector enters a ring that lacks room now (its
    /// completion rides with it).
    fn w_ring_sent(
        &mut self,
        r: &Request,
        user: u64,
        sent: Option<Completion>,
    ) -> Result<CollStart> {
        self.win.as_ref().unwrap().count_collective();
        if !self.d.wake.is_empty() {
            self.w_flush_and_wake()?;
        }
        Ok(match sent {
            Some(_) => CollStart::Done(user, ring_done(r)),
            None => CollStart::Started(user),
        })
    }

    /// Wait in the rings for what `b` takes, taking what came already.
    fn w_ring_begin(&mut self, b: WRing) -> Result<CollStart> {
        let (user, early) = (b.r.user, ring_done(&b.r));
        self.d.wring = Some(b);
        let took = self.w_ring_take();
        if !self.d.wake.is_empty() {
            self.w_flush_and_wake()?;
        }
        Ok(match took {
            Some(c) if c.status == Status::Ok as u16 => CollStart::Done(user, early),
            Some(c) => {
                self.finish_lib(c);
                CollStart::Started(user)
            }
            None => CollStart::Started(user),
        })
    }

    /// A blocking broadcast of more than a slot ([`Rndv`]): the root says where its vector
    /// is (its buffer, or the bounce `Ni::broadcast` copied it to, in an exported region)
    /// and waits for every member's answer; a member waits for the root's word.
    fn w_bcast_read(
        &mut self,
        r: &Request,
        meta: u64,
        data: &[u8],
        bytes: u64,
    ) -> Result<CollStart> {
        let user = self.lib_user();
        let win = self.win.as_ref().unwrap();
        let (me, size, root) = (win.rank, win.size, r.rank);
        let mut seq = 0;
        if me == root {
            let at = if self.exports() {
                self.exported_at(r.addr, bytes)
            } else {
                None
            };
            let Some((key, offset)) = at else {
                // Nobody maps this process's memory (a guest's): every member gets the
                // vector in pieces, and the root is done as a smaller broadcast's is.
                let done = completion(op::COLLECTIVE, user, Status::Ok, root, r.len, r.addr);
                let sent = self.ring_send(0..size, meta, data, done);
                return self.w_ring_sent(r, user, sent);
            };
            // Past the last that ended here (a client of this rank before this one may
            // have rooted some).
            seq = self.d.rndv_seq.max(win.rndv_ended(me)) + 1;
            self.d.rndv_seq = seq;
            let from = GetFrom { key, offset }.encode();
            for m in (0..size).filter(|&m| m != me) {
                self.coll_ctl(m, meta, w::coll_id::RNDV, seq, &from);
            }
        }
        self.w_ring_begin(WRing {
            r: Request { user, ..*r },
            meta,
            // The root takes every other member's answer in rank order.
            next: if me == root { 0 } else { root },
            bytes: bytes as usize,
            acc: Vec::new(),
            held: Held::Nothing,
            into_out: false,
            failed: None,
            clock: TimeoutClock::default(),
            rndv: Some(Rndv {
                seq,
                got: None,
                flushing: false,
            }),
        })
    }

    /// Put a collective's vector into the rings of the members in `to` but this one. The
    /// collective is done at once — `Some(done)` — unless a ring lacks room: then when its
    /// vector goes into the ring of the member furthest behind, as a blocking send that waits
    /// for room (`done` rides with it), so members run ahead by what the rings hold, no
    /// further.
    fn ring_send(
        &mut self,
        to: std::ops::Range<u32>,
        meta: u64,
        data: &[u8],
        done: Completion,
    ) -> Option<Completion> {
        match self.ring_put_all(to, meta, data) {
            Some(m) => {
                self.win.as_mut().unwrap().complete_last_with(m, done);
                None
            }
            None => Some(done),
        }
    }

    /// Put a vector into the rings of the members in `to` but this one; a broadcast's in
    /// slot-sized pieces past [`bcast_ring_max`] (one read where the root keeps it, [`Rndv`],
    /// toward who cannot). What finds no room waits for it; the member with the most
    /// waiting, if any.
    fn ring_put_all(&mut self, to: std::ops::Range<u32>, meta: u64, data: &[u8]) -> Option<u32> {
        let win = self.win.as_ref().unwrap();
        let me = win.rank;
        let piece = if meta as u8 == coll::BCAST && data.len() as u64 > win.bcast_max {
            w::COLL_MAX as usize
        } else {
            data.len().max(1)
        };
        let mut behind: Option<(usize, u32)> = None;
        for m in to.filter(|&m| m != me) {
            if data.len() <= piece {
                self.coll_put(m, meta, data);
            } else {
                for p in data.chunks(piece) {
                    self.coll_put(m, meta, p);
                }
            }
            let win = self.win.as_ref().unwrap();
            let n = if win.backlogged() {
                win.backlog_len(m)
            } else {
                0
            };
            if n > 0 && behind.is_none_or(|(most, _)| n > most) {
                behind = Some((n, m));
            }
        }
        behind.map(|(_, m)| m)
    }

    /// A `COLL` of a broadcast read where its root keeps it ([`Rndv`]) to `m`: `role` and
    /// the root's `seq` as its id, before `payload` ([`w::coll_id::CTL`]).
    fn coll_ctl(&mut self, m: u32, meta: u64, role: u64, seq: u64, payload: &[u8]) {
        let mut b = [0u8; 8 + w::GET_LEN as usize];
        b[..8].copy_from_slice(&w::coll_id::make(role, seq).to_le_bytes());
        b[8..8 + payload.len()].copy_from_slice(payload);
        self.coll_put(m, meta | w::coll_id::CTL, &b[..8 + payload.len()]);
    }

    /// One `COLL` of `tag` and `payload` to `m`, or into its backlog.
    fn coll_put(&mut self, m: u32, tag: u64, payload: &[u8]) {
        let h = Header {
            kind: kind::COLL,
            len: payload.len() as u32,
            tag,
            id: 0,
            full: payload.len() as u64,
        };
        if let Ok(true) = self.win.as_mut().unwrap().put(m, h, payload, || None) {
            self.d.wake.push(m);
        }
    }

    /// The next `COLL` from `src` — `tag`, id, payload ([`coll_words`]) — one a pass took out
    /// of the ring already, else the ring's next message if it is one.
    fn coll_next(&mut self, src: u32) -> Option<(u64, u64, Vec<u8>)> {
        if let Some((tag, mut data)) = self.d.ring_colls[src as usize].pop() {
            let (tag, id) = coll_words(tag, &mut data);
            return Some((tag, id, data));
        }
        let win = self.win.as_mut().unwrap();
        let h = win
            .live()
            .then(|| win.next(src))
            .flatten()
            .filter(|h| h.kind == kind::COLL)?;
        let mut data = self.d.coll_spare.pop().unwrap_or_default();
        data.resize(h.len as usize, 0);
        win.payload(src, &h, &mut data);
        win.consume(src, &h);
        if win.publish_head_if_far(src) {
            self.d.wake.push(src);
        }
        let (tag, id) = coll_words(h.tag, &mut data);
        Some((tag, id, data))
    }

    /// Keep an emptied vector for the next `COLL` taken out of a ring.
    fn coll_recycle(&mut self, mut data: Vec<u8>) {
        if self.d.coll_spare.len() < COLL_SPARES && data.capacity() <= w::RING_COLL_MAX as usize {
            data.clear();
            self.d.coll_spare.push(data);
        }
    }

    /// A scan member's end: `prefix` on to the next member (as [`Self::ring_send`]), then
    /// `result` into its receive buffer (`None`: an exclusive scan's first member's, the
    /// identity) — in that order, as the receive buffer may be the send buffer `prefix` was
    /// read from.
    fn scan_result(
        &mut self,
        r: &Request,
        meta: u64,
        result: Option<&[u8]>,
        prefix: &[u8],
        done: Completion,
    ) -> Option<Completion> {
        let sent = self.scan_send_on(meta, prefix, done);
        // SAFETY: the receive buffer was checked as registered for `prefix.len()` bytes when
        // the scan started; the region cannot be dropped while this lock is held.
        let out = unsafe { std::slice::from_raw_parts_mut(r.tag as *mut u8, prefix.len()) };
        match result {
            None => {
                let (d, o) = dtype_op(r);
                identity(d, o, out)
            }
            // SAFETY: as above; `result` may be the send buffer, which may be this very
            // buffer: a move.
            Some(x) => unsafe { std::ptr::copy(x.as_ptr(), out.as_mut_ptr(), out.len()) },
        }
        sent
    }

    /// Finish the collective in the rings this rank waits for if its vectors came.
    fn w_ring_poll(&mut self) {
        if let Some(c) = self.w_ring_take() {
            self.finish_lib(c);
        }
    }

    /// Take the vectors the collective in the rings waits for, as many as came: its
    /// completion once all did (or it failed). `None` too when it ended with its completion
    /// riding with a vector it sent on (a scan's prefix waiting for room).
    fn w_ring_take(&mut self) -> Option<Completion> {
        if self.d.wring.as_ref()?.rndv.is_some() {
            return self.w_rndv_take();
        }
        let (me, size) = {
            let win = self.win.as_ref()?;
            (win.rank, win.size)
        };
        let status = loop {
            let b = self.d.wring.as_mut()?;
            let (src, meta, bytes) = (b.next, b.meta, b.bytes);
            if b.kind() == coll::REDUCE && src == size {
                if let Some(s) = b.failed {
                    break s;
                }
            }
            if b.kind() == coll::REDUCE && src == me {
                if b.held == Held::Nothing && b.into_out {
                    b.held = Held::Mine;
                } else {
                    // SAFETY: the send buffer was checked as registered when the reduce
                    // started; the caller keeps it until the collective completes.
                    let mine = unsafe { std::slice::from_raw_parts(b.r.addr as *const u8, bytes) };
                    absorb(b, [mine, &[]]);
                }
                b.next += 1;
                continue;
            }
            if b.kind() == coll::REDUCE && src == size {
                // SAFETY: as above, the receive buffer (which may be the send buffer, read
                // already).
                let out = unsafe { std::slice::from_raw_parts_mut(b.r.tag as *mut u8, bytes) };
                if b.held == Held::Mine {
                    // SAFETY: as above; apart from the receive buffer (`into_out`).
                    let mine = unsafe { std::slice::from_raw_parts(b.r.addr as *const u8, bytes) };
                    out.copy_from_slice(mine);
                } else if !b.into_out {
                    out.copy_from_slice(&b.acc);
                }
                break Status::Ok;
            }
            // A vector whose length lies about its `meta` is no honest member's: as
            // different `meta`s, members in different collectives.
            let took = if let Some((m, mut data)) = self.d.ring_colls[src as usize].pop() {
                let (m, id) = coll_words(m, &mut data);
                let ok = m == meta && data.len() == bytes && b.failed.is_none();
                if ok {
                    absorb(b, [&data, &[]]);
                }
                self.coll_recycle(data);
                Some((ok, m, id))
            } else {
                // Straight from the ring when the vector is the next message there (no pass
                // took it first): one copy, no vector in between.
                let win = self.win.as_mut().unwrap();
                match win.live().then(|| win.next(src)).flatten() {
                    Some(h) if h.kind == kind::COLL => {
                        let ok = h.tag == meta && h.len as usize == bytes && b.failed.is_none();
                        if ok && b.kind() == coll::BCAST {
                            win.payload(src, &h, bcast_place(b));
                        } else if ok {
                            // Applied (or, the first, taken) where it lies, not copied out
                            // first. Where it wraps is a whole number of slots in, so of
                            // elements.
                            absorb(b, vector_parts(win, src, &h, &mut self.d.coll_x));
                        }
                        // A failure passed on, or a broadcast's word: the id first.
                        let mut first = Vec::new();
                        if h.tag & w::coll_id::CTL != 0 {
                            first.resize(8.min(h.len as usize), 0);
                            win.payload(src, &h, &mut first);
                        }
                        win.consume(src, &h);
                        if win.publish_head_if_far(src) {
                            self.d.wake.push(src);
                        }
                        let (m, id) = coll_words(h.tag, &mut first);
                        Some((ok, m, id))
                    }
                    _ => None,
                }
            };
            let took = match took {
                Some((false, m, id)) if m != w::COLL_FAILED => match w::coll_id::role(id) {
                    // Answers to a broadcast this member rooted and gave up on.
                    w::coll_id::ACK | w::coll_id::NOMAP => continue,
                    w::coll_id::RNDV => {
                        // Its root waits for this member's answer: it will not read.
                        self.coll_ctl(src, m, w::coll_id::ACK, w::coll_id::seq(id), &[]);
                        Some(Status::Collision)
                    }
                    _ => Some(coll_status(false, m, id)),
                },
                Some((ok, m, id)) => Some(coll_status(ok, m, id)),
                None => None,
            };
            let b = self.d.wring.as_mut().unwrap();
            match took {
                Some(Status::Ok) if b.kind() == coll::REDUCE => b.next += 1,
                // A reduce's root takes what the others sent for this reduce all the same.
                Some(Status::Collision) if b.kind() == coll::REDUCE => {
                    b.failed.get_or_insert(Status::Collision);
                    b.next += 1;
                }
                Some(s) => break s,
                None => match self.w_ring_idle(src) {
                    Some(s) => break s,
                    None => return None,
                },
            }
        };
        let mut b = self.d.wring.take().unwrap();
        let c = b.completion(status);
        let scan = matches!(b.kind(), coll::SCAN | coll::EXSCAN);
        if status != Status::Ok && scan && me + 1 < size {
            // The next member waits for this one's prefix, which will not come: it fails
            // too, with this status, rather than at its timeout.
            self.coll_put(me + 1, w::COLL_FAILED, &(status as u64).to_le_bytes());
        }
        let out = if status == Status::Ok && scan && b.into_out {
            self.scan_on(&b.r, b.meta, b.bytes, c)
        } else if status == Status::Ok && scan {
            // `acc` holds the members' before this one in rank order.
            self.scan_end(&b.r, b.meta, &b.acc, c)
        } else {
            Some(c)
        };
        if status == Status::Ok {
            self.win.as_ref().unwrap().count_collective();
        }
        b.acc.clear();
        self.d.ring_acc = b.acc;
        out
    }

    /// The waiter blocked: the window collective's next look at nothing reads the clock
    /// ([`TimeoutClock::slept`]).
    pub(crate) fn w_ring_slept(&mut self) {
        if let Some(b) = self.d.wring.as_mut() {
            b.clock.slept();
        }
        if let Some(c) = self.d.wcoll.as_mut() {
            c.clock.slept();
        }
    }

    /// Nothing from `src` for the collective in the rings: its end if `src` left (everything
    /// a member sent before it left was taken before its state was acted on, `w_progress`:
    /// what this collective waits for never came) or the timeout passed; `None`: wait on.
    fn w_ring_idle(&mut self, src: u32) -> Option<Status> {
        let win = self.win.as_ref().unwrap();
        if !win.up(src) && ni_abi::window::state::incarnation(win.states[src as usize]) > 0 {
            return Some(Status::PeerDown);
        }
        let timeout = Duration::from_millis(win.coll_timeout_ms as u64);
        let b = self.d.wring.as_mut().unwrap();
        b.clock.passed(timeout).then_some(Status::Timeout)
    }

    /// [`Self::w_ring_take`] for a broadcast read where its root keeps it ([`Rndv`]): at
    /// the root every other member's answer, in rank order; at a member the root's word and
    /// the read, or the pieces.
    fn w_rndv_take(&mut self) -> Option<Completion> {
        let (me, size) = {
            let win = self.win.as_ref()?;
            (win.rank, win.size)
        };
        let status = loop {
            let b = self.d.wring.as_mut()?;
            let (src, root) = (b.next, b.r.rank);
            if me == root && src == me {
                b.next += 1;
                continue;
            }
            if me == root && src >= size {
                break Status::Ok;
            }
            let rn = b.rndv.as_mut().unwrap();
            if rn.flushing {
                if self.win.as_ref().unwrap().backlog_len(src) == 0 {
                    rn.flushing = false;
                    b.next += 1;
                    continue;
                }
                // A pass moves them as the member makes room.
                match self.w_ring_idle(src) {
                    Some(s) => break s,
                    None => return None,
                }
            }
            let Some((tag, id, data)) = self.coll_next(src) else {
                match self.w_ring_idle(src) {
                    Some(s) => break s,
                    None => return None,
                }
            };
            let step = if tag == w::COLL_FAILED {
                // A scan's failure passed on: `src` is in another collective.
                Some(coll_status(false, tag, id))
            } else if me == root {
                self.rndv_root_step(src, tag, id)
            } else {
                self.rndv_member_step(tag, id, &data)
            };
            self.coll_recycle(data);
            if let Some(s) = step {
                break s;
            }
        };
        let b = self.d.wring.take().unwrap();
        let win = self.win.as_ref().unwrap();
        if me == b.r.rank {
            // A member that reads it from now on drops what it read.
            win.set_rndv_ended(b.rndv.unwrap().seq);
        }
        if status == Status::Ok {
            win.count_collective();
        }
        let c = b.completion(status);
        if me == b.r.rank {
            return Some(c);
        }
        // Its answer waits for room: the member is done when the root can see it (as a
        // blocking send), not before — it might never make another call that moves it.
        self.win
            .as_mut()
            .unwrap()
            .complete_last_if_free(b.r.rank, c)
            .err()
    }

    /// The root of a broadcast read where it keeps it takes `COLL` `tag`, `id` from member
    /// `src`: its end, or `None` to take on.
    fn rndv_root_step(&mut self, src: u32, tag: u64, id: u64) -> Option<Status> {
        use w::coll_id::{ACK, NOMAP, RNDV};
        let b = self.d.wring.as_mut().unwrap();
        let (role, seq) = (w::coll_id::role(id), w::coll_id::seq(id));
        let mine = tag == b.meta && seq == b.rndv.unwrap().seq;
        match role {
            ACK if mine => b.next += 1,
            NOMAP if mine => {
                let meta = b.meta;
                // SAFETY: the root's buffer (or its bounce) was checked as registered when
                // the broadcast started; the region cannot be dropped while the lock is held.
                let v = unsafe { std::slice::from_raw_parts(b.r.addr as *const u8, b.bytes) };
                let waits = self.ring_put_all(src..src + 1, meta, v).is_some();
                let b = self.d.wring.as_mut().unwrap();
                if waits {
                    b.rndv.as_mut().unwrap().flushing = true;
                } else {
                    b.next += 1;
                }
            }
            // Answers to an earlier broadcast of this root, which it gave up on.
            ACK | NOMAP => {}
            RNDV => {
                // `src` roots another broadcast: it learns that this member will not read
                // it, and both fail.
                self.coll_ctl(src, tag, ACK, seq, &[]);
                return Some(Status::Collision);
            }
            _ => return Some(Status::Collision),
        }
        None
    }

    /// A member of a broadcast read where its root keeps it takes `COLL` `tag`, `id`,
    /// `data` from the root: its end, or `None` to take on.
    fn rndv_member_step(&mut self, tag: u64, id: u64, data: &[u8]) -> Option<Status> {
        use w::coll_id::{ACK, NOMAP, RNDV, VECTOR};
        let b = self.d.wring.as_mut().unwrap();
        let (role, seq) = (w::coll_id::role(id), w::coll_id::seq(id));
        let (root, meta, bytes, to) = (b.r.rank, b.meta, b.bytes, b.r.addr);
        let rn = b.rndv.as_mut().unwrap();
        match role {
            // Answers to an earlier broadcast this member rooted.
            ACK | NOMAP => None,
            RNDV => {
                let from = (tag == meta && rn.got.is_none())
                    .then(|| <&[u8; w::GET_LEN as usize]>::try_from(data).ok())
                    .flatten()
                    .and_then(GetFrom::decode);
                let Some(from) = from else {
                    // Another broadcast (or no honest root's word): the root need not wait
                    // for this member.
                    self.coll_ctl(root, tag, ACK, seq, &[]);
                    return Some(Status::Collision);
                };
                rn.seq = seq;
                if self.win.as_ref().unwrap().rndv_ended(root) >= seq {
                    // The root gave up on it (a member was too late, or left).
                    return Some(Status::Timeout);
                }
                let at = match self.peer_map(root, from.key) {
                    Some((base, len)) => from
                        .offset
                        .checked_add(bytes as u64)
                        .filter(|&end| end <= len)
                        .map(|_| base.wrapping_add(from.offset as usize)),
                    None => {
                        self.coll_ctl(root, meta, NOMAP, seq, &[]);
                        self.d.wring.as_mut().unwrap().rndv.as_mut().unwrap().got = Some(0);
                        return None;
                    }
                };
                let Some(at) = at else {
                    self.coll_ctl(root, meta, ACK, seq, &[]);
                    return Some(Status::BadDescriptor);
                };
                // SAFETY: `[at, + bytes)` lies in the root's region as mapped (checked just
                // above), which `peer_maps` keeps mapped while this lock is held; the
                // broadcast's buffer was checked as registered when it started, and no
                // mapping of a peer's region overlaps this process's own memory.
                unsafe { std::ptr::copy_nonoverlapping(at, to as *mut u8, bytes) };
                // What the copy read, before the look that says the root still waited.
                std::sync::atomic::fence(Ordering::Acquire);
                if self.win.as_ref().unwrap().rndv_ended(root) >= seq {
                    return Some(Status::Timeout);
                }
                self.coll_ctl(root, meta, ACK, seq, &[]);
                Some(Status::Ok)
            }
            // Pieces: after this member's `NOMAP`, or from a root whose memory nobody maps
            // (no `RNDV` then).
            VECTOR if tag == meta && (rn.got.is_some() || rn.seq == 0) => {
                let got = rn.got.unwrap_or(0);
                if data.len() != (bytes - got).min(w::COLL_MAX as usize) {
                    return Some(Status::Collision);
                }
                // SAFETY: the buffer was checked as registered for `bytes` when the
                // broadcast started, and `got + data.len() <= bytes`.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        data.as_ptr(),
                        (to as *mut u8).add(got),
                        data.len(),
                    )
                };
                rn.got = Some(got + data.len());
                (got + data.len() == bytes).then_some(Status::Ok)
            }
            _ => Some(Status::Collision),
        }
    }

    /// Finish the window collective in flight if every member has published its part.
    fn w_coll_poll(&mut self) {
        let Some(c) = self.d.wcoll.as_mut() else {
            return;
        };
        let win = self.win.as_ref().unwrap();
        let status = if win.coll_ready(c.round) {
            if (0..win.size).any(|m| win.coll_meta(c.round, m) != c.meta) {
                Status::Collision
            } else {
                Self::coll_result(win, c);
                win.count_collective();
                Status::Ok
            }
        } else if c
            .clock
            .passed(Duration::from_millis(win.coll_timeout_ms as u64))
        {
            Status::Timeout
        } else {
            return;
        };
        let c = self.d.wcoll.take().unwrap();
        self.d.coll_round = c.round + 1;
        self.finish_lib(completion(
            op::COLLECTIVE,
            c.user,
            status,
            c.root,
            c.count,
            c.recv,
        ));
    }

    /// Combine the members' slots into this rank's result, in rank order (the fabric's
    /// order, so every member and both paths get the same bits). Broadcasts, reduces and
    /// scans go in the rings (`w_ring`).
    fn coll_result(win: &crate::window::Window, c: &WColl) {
        if c.kind == coll::BARRIER {
            return;
        }
        let n = c.bytes;
        let size = if c.kind == coll::ALLGATHER {
            win.size as usize
        } else {
            1
        };
        // SAFETY: the receive buffer was checked as registered (`n` bytes per member for an
        // allgather) when the collective started; it is not dropped while this lock is held.
        let recv = unsafe { std::slice::from_raw_parts_mut(c.recv as *mut u8, n * size) };
        match c.kind {
            coll::ALLGATHER => {
                for (m, to) in recv.chunks_exact_mut(n.max(1)).enumerate() {
                    win.coll_read(c.round, m as u32, to);
                }
            }
            _ => {
                // Straight from the members' slots into the receive buffer (it may be the
                // send buffer: this member's data is in its slot already): no copy of a
                // slot in between (256 f64 at P = 2: three copies of 2 KiB fewer).
                win.coll_read(c.round, 0, recv);
                for m in 1..win.size {
                    apply(c.dtype, c.op, recv, win.coll_data(c.round, m, n));
                }
            }
        }
    }
}

/// Ask for the cache line at `p` in a state this core may write (`prefetchw`): no effect on
/// what the program sees, only on when the line moves.
#[inline]
pub(crate) fn prefetch_for_write(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch reads and writes nothing architecturally, whatever the address,
    // and never faults; x86-64 processors without PREFETCHW execute it as a NOP (0F 0D).
    // (`_mm_prefetch` with `_MM_HINT_ET0` emits nothing without the `prfchw` feature.)
    unsafe {
        std::arch::asm!("prefetchw [{0}]", in(reg) p, options(nostack, preserves_flags, readonly));
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Ask for the cache line at `p` ahead of reading it: no effect on what the program sees,
/// whatever the address (a prefetch never faults).
#[inline]
pub(crate) fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch reads nothing architecturally.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch(p as *const i8, _MM_HINT_T0);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// What [`Inner::w_take_wanted`] did with a receive.
enum Wanted {
    /// Its message has not come: it waits, posted.
    Waiting(Posted),
    /// It took its message: its completion, for the caller.
    Now(Completion),
    /// It ended (took its message, or failed) with its completion in `done`.
    Finished,
}

/// What [`Inner::w_take_inline`] took from a ring.
enum Took {
    Nothing,
    Eager,
    Am,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn posted(user: u64, src: u32) -> Posted {
        Posted {
            user,
            src,
            tag: 0,
            mask: u64::MAX,
            addr: 0,
            cap: 0,
        }
    }

    /// The per-source counts follow every way a receive enters or leaves the queue: a
    /// wrong count would let a receive overtake an earlier one for its source, or keep one
    /// from its message.
    #[test]
    fn claims_follow_the_queue() {
        let mut q = PostedQueue::default();
        assert!(!q.claims(0) && !q.claims(3));
        q.push_back(posted(1, 3));
        q.push_back(posted(2, 3));
        q.push_back(posted(3, 1));
        assert!(q.claims(3) && q.claims(1) && !q.claims(0) && !q.claims(7));
        assert_eq!(q.pop_front().map(|p| p.user), Some(1));
        assert!(q.claims(3), "one receive for 3 is still posted");
        let i = q.position(|p| p.src == 3).unwrap();
        assert_eq!(q.remove(i).map(|p| p.user), Some(2));
        assert!(!q.claims(3) && q.claims(1));
        q.push_back(posted(4, ANY_RANK));
        assert!(
            q.claims(0) && q.claims(3),
            "a receive from any source claims all"
        );
        q.push_back(posted(5, 1));
        let dead = q.take_named(1);
        assert_eq!(dead.iter().map(|p| p.user).collect::<Vec<_>>(), [3, 5]);
        assert!(q.claims(1), "the receive from any source is still posted");
        assert_eq!(q.pop_front().map(|p| p.user), Some(4));
        assert!(!q.claims(1) && q.len() == 0 && q.front().is_none());
    }
}
