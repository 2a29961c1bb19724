//! Allreduce, reduce, scan, allgather and broadcast of vectors too large for the window's
//! collective slots, member to member: reduce-scatter and allgather through scratch regions
//! the members export to each other, and a broadcast every member reads from the root's
//! exported memory itself (`device/abi/fastpath.md`, "Large allreduce in the window", "Large
//! broadcast in the window").
//!
//! Each member copies its vector into its own exported scratch region, then — after a window
//! round that also tells everyone where everyone's scratch is — reduces one `1/P` chunk of
//! the vector, reading that chunk of every member's scratch in rank order (the fabric's order,
//! so the bits are the same on every member and on both paths), and publishes its result in
//! its scratch; after a second round every member copies the `P` results out. Every core
//! works on its own chunk at once, where the fabric's path reduces the whole vector in the
//! device's one poller thread.
//!
//! Two halves of the scratch alternate between consecutive operations, so the next one's
//! copy-in never overwrites what a slower member is still copying out: a member starts
//! operation `k + 2` only after every member finished the first round of `k + 1`, which each
//! enters only after copying out `k`.
//!
//! In an allreduce or a scan whose members' receive buffers are all exported (`alloc` regions
//! apart from their send buffers), and a reduce whose root's is, nobody copies a result out:
//! each member writes its part of the result straight into every buffer that needs it as it
//! folds it, and one `BARRIER` ends the operation. (An allgather's members still copy every
//! vector out: each one's is needed whole by all.)
//!
//! The rest are the first round ([`Ni::places`]) and one step of their own after it:
//! - an allreduce whose members all export their receive buffers: each member's chunk into
//!   every one of them ([`Ni::allreduce_push`]);
//! - a reduce is the allreduce but for the last copies: the members other than the root keep
//!   their chunks in scratch, and only the root copies them out; where the root exported its
//!   buffer, each member folds its part of every vector straight into it instead, and of 2
//!   members where it did not, the root folds both vectors where they are into it;
//! - an allgather: every member copies every other's vector where it is;
//! - a broadcast: the root's vector where it is (or copied into its scratch half), every other
//!   member copying all of it straight into its buffer — each on its own core, where the
//!   fabric's path copies to every member in the one poller thread (8 KiB at P = 2: 10 us
//!   there);
//! - a scan whose members all export their receive buffers: each member computes every
//!   member's prefix of its part into that member's buffer ([`Ni::scan_push`]); else, of up to
//!   3 members, every member reduces the vectors of the members before it (and its own,
//!   unless exclusive) into its buffer itself, in rank order; of more, the allreduce split by
//!   chunks, each member computing every member's prefix of its chunk.

use ni_abi::fastpath::{coll, dtype, redop, Request};
use ni_abi::reduce::{apply, combine, identity};
// What a member publishes in the first round of a piece, and the digest of agreed keys.
use ni_abi::window::large::{digest, MAGIC, RECORD, RECORDS};

use std::sync::Arc;

use crate::direct::dtype_op;
use crate::mem::Mem;
use crate::{coll_request, Done, Error, Ni, ReduceOp, Region, Result};

/// Scratch halves grow to hold a whole vector up to this; larger ones go in pieces.
pub(crate) const HALF_MAX: usize = 8 << 20;
/// A broadcast's root copies a vector up to this into its scratch rather than have it read
/// where it is, which needs one more round (a barrier, so that it returns only once every
/// member copied). 8 KiB at P = 4 on 2 cpus: 16.2 -> 9.7 us; 32 KiB between two cores
/// lost (2.5 -> 5.1 us: the copy stores into lines the other core just read).
const BCAST_COPY_MAX: usize = 16 << 10;
/// Members' vectors are folded this much at a time ([`fold_in_place`]), so that the result
/// stays in the cache while every member's piece of it is applied (the chunks of allreduces
/// and of reduces of more than two went through each member's whole chunk in turn until stop
/// 61: an allreduce at P = 4 on one cpu, 256 Ki / 1 Mi f64 1.70 / 8.31 -> 1.25 / 6.78 ms;
/// between two cpus no change the machine shows).
const FOLD_BLOCK: usize = 32 << 10;
/// Scans of more members than this whose receive buffers are not all exported are split by
/// chunks ([`Ni::scan_scatter`]): each member reads and writes about three vectors' worth,
/// where reducing the earlier members' vectors where they are ([`Ni::scan_in_place`]) makes
/// the last member read `P`, and all of them together `P (P + 1) / 2` (2 members: 3 vectors
/// against 6). Where they are all exported, each member writes its prefixes of its chunk
/// into every buffer ([`Ni::scan_push`]), any number of members: two vectors' worth each.
const SCAN_IN_PLACE_MAX: usize = 3;
/// Reduces fold every member's vector where it is straight into the root's receive buffer
/// ([`Ni::reduce_in_place`]) rather than split by chunks, which made the root copy the others'
/// chunks of the result back: transfers between the cores where none is needed. Where the
/// root's buffer is exported each member folds its part of it, any number of members; else,
/// up to this many members, the root all, and more go by chunks. P = 2 between two cpus, 16 /
/// 64 Ki / 1 Mi f64: chunks 21.4 / 52.7 / 1 617-1 753 us, the root alone 7.8 / 29.5 / 1 711,
/// by halves 4.9 / 14.0 / 652, Open MPI 12.4 / 48 / 2 509; on one cpu by halves as fast, and
/// faster from 1 Mi f64: 2.53 -> 1.94 ms. P = 4 between two cpus, 64 Ki / 1 Mi f64: chunks
/// 91.6 / 3 435 us, by parts 42.8 / 2 005.
const REDUCE_IN_PLACE_MAX: usize = 2;
/// The control region: its own record, and every member's (at most 64).
const CTL_BYTES: usize = 8192;
/// A member's three places, in its record and in the keys agreed on: its scratch half, its
/// data, its result.
const SCRATCH: usize = 0;
const DATA: usize = 1;
const RESULT: usize = 2;

/// One member's scratch and what it knows of the others'.
#[derive(Default)]
pub(crate) struct Scratch {
    /// Two halves of `half` bytes.
    region: Option<Region>,
    half: usize,
    /// The first round's record (`RECORD` u64) at 0, every member's from `RECORDS`.
    ctl: Option<Region>,
    /// Operations done, for the halves' parity.
    round: u64,
    /// Every member's three keys (scratch, data, result; 0: none) in the last piece whose
    /// mappings all members agreed on.
    agreed: Vec<u32>,
    /// Where a reduce's member other than the root reduces its chunk (its receive buffer is
    /// not its to write, and its data may lie where its result goes in scratch).
    chunk: Vec<u8>,
}

/// The collectives done here.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Allreduce,
    Reduce,
    Bcast,
    Allgather,
    Scan,
    Exscan,
}

impl Kind {
    fn of(flags: u8) -> Option<Kind> {
        Some(match flags {
            coll::ALLREDUCE => Kind::Allreduce,
            coll::REDUCE => Kind::Reduce,
            coll::BCAST => Kind::Bcast,
            coll::ALLGATHER => Kind::Allgather,
            coll::SCAN => Kind::Scan,
            coll::EXSCAN => Kind::Exscan,
            _ => return None,
        })
    }
}

/// A piece after its first round: every member's places, mapped here.
struct Places {
    r: Request,
    kind: Kind,
    esize: usize,
    bytes: usize,
    me: usize,
    size: usize,
    root: usize,
    /// This member's data and result when others reach them where they are (an exported
    /// region's key and the offset in it; a result is read there, or, where every member's
    /// is there — a reduce's root's alone — written by the others); `None`: in its scratch
    /// half (or, a result, nowhere others reach).
    data_at: Option<(u32, u64)>,
    result_at: Option<(u32, u64)>,
    /// Every member's three keys, as published.
    keys: Vec<u32>,
    /// Every other member's three places, mapped (`None` for key 0 or this member's).
    peers: Vec<Option<(Arc<Mem>, usize)>>,
    /// Whether a member named data, a result, or a scratch half it needs ([`needs_half`])
    /// that does not lie in the region it named, or said it holds the mappings all agreed on
    /// without the scratch half it needs.
    outside: bool,
    /// This member's scratch half, if it has one.
    mine: Option<*mut u8>,
    /// What round 1 returned.
    first: Done,
    /// An allgather's bytes from one member's block in the receive buffer to the next's.
    stride: usize,
}

impl Places {
    /// Member m's place (`what`: DATA or RESULT), mapped here; key 0 means its scratch half.
    fn place(&self, m: usize, what: usize) -> Option<&(Arc<Mem>, usize)> {
        self.peers[self.slot(m, what)].as_ref()
    }

    /// Where in `keys` and `peers` member m's place (`what`) is: its own, or, key 0, its
    /// scratch half's.
    fn slot(&self, m: usize, what: usize) -> usize {
        if self.keys[3 * m + what] == 0 {
            3 * m + SCRATCH
        } else {
            3 * m + what
        }
    }

    /// Where member m's data (`what` = DATA) or result (RESULT) is, `off` bytes in.
    fn at(&self, m: usize, what: usize, off: usize) -> *mut u8 {
        let in_place = match what {
            DATA => self.data_at.map(|_| self.r.addr),
            _ => self.result_at.map(|_| self.r.tag),
        };
        // SAFETY (of each `add`): every member's places lie in their mappings (checked when
        // mapped), this member's in its own half or its registered buffers; `off` < `bytes`.
        unsafe {
            match (m == self.me, in_place) {
                (true, Some(addr)) => (addr as *mut u8).add(off),
                // Checked in `places`: a member that needs its half has one.
                (true, None) => self.mine.expect("a scratch half").add(off),
                _ => {
                    let (mem, b) = self.place(m, what).expect("mapped in `places`");
                    mem.ptr().add(b + off)
                }
            }
        }
    }

    /// Whether member m's result, as mapped here, lies apart from its data (a member may say
    /// one region and overlapping offsets for both).
    fn result_apart(&self, m: usize) -> bool {
        let (d, r) = (self.slot(m, DATA), self.slot(m, RESULT));
        match (&self.peers[d], &self.peers[r]) {
            (Some((_, a)), Some((_, b))) => {
                self.keys[d] != self.keys[r] || a + self.bytes <= *b || b + self.bytes <= *a
            }
            _ => false,
        }
    }

    /// Whether some other member's record names a place no honest member names: one outside
    /// the region named (`outside`), or a result the others are to write over data it says
    /// they read. Every member checks every other's places, so all but the one that lied see
    /// the same and decide alike.
    fn refused(&self) -> bool {
        self.outside
            || (0..self.size).any(|m| {
                let mapped = |what| self.peers[self.slot(m, what)].is_some();
                m != self.me
                    && self.written(m)
                    && mapped(DATA)
                    && mapped(RESULT)
                    && !self.result_apart(m)
            })
    }

    /// Whether the other members write member `m`'s result where it is: every member's, in an
    /// allreduce or scan that [pushes](Self::pushes); the root's, in a reduce whose root
    /// exported its buffer ([`Ni::reduce_in_place`]).
    fn written(&self, m: usize) -> bool {
        self.pushes() || (self.kind == Kind::Reduce && m == self.root && self.in_place(m, RESULT))
    }

    /// Whether any member's `what` (DATA, RESULT) is read where its owner keeps it, which the
    /// owner may rewrite once it returns (scratch halves alternate instead).
    fn any_in_place(&self, what: usize) -> bool {
        (0..self.size).any(|m| self.in_place(m, what))
    }

    /// Whether every member's `what` (DATA, RESULT) is where its owner keeps it.
    fn all_in_place(&self, what: usize) -> bool {
        (0..self.size).all(|m| self.in_place(m, what))
    }

    /// Whether each member writes its part of the result into every member's receive buffer
    /// ([`Ni::allreduce_push`], [`Ni::scan_push`]): an allreduce's or a scan's whose
    /// members all said theirs is where the others can reach it. Every member decides alike.
    fn pushes(&self) -> bool {
        matches!(self.kind, Kind::Allreduce | Kind::Scan | Kind::Exscan)
            && self.all_in_place(RESULT)
    }

    /// Whether member `m`'s `what` (DATA, RESULT) is read where its owner keeps it.
    fn in_place(&self, m: usize, what: usize) -> bool {
        self.keys[3 * m + what] != 0
    }

    /// The members whose data this member reads, and the mappings it needs.
    fn everything_mapped(&self) -> bool {
        let (me, size) = (self.me, self.size);
        let data = |m: usize| m == me || self.place(m, DATA).is_some();
        if (0..size).any(|m| self.written(m)) {
            // Each member folds its part of every vector, and writes it into every result
            // the others write, which must lie apart from all its owner says they read.
            return (0..size)
                .all(|m| data(m) && (m == me || !self.written(m) || self.result_apart(m)));
        }
        match self.kind {
            Kind::Bcast => data(self.root),
            Kind::Allgather => (0..size).all(data),
            // Of two members whose root did not export its buffer, the root alone reads
            // every member's vector.
            Kind::Reduce if size <= REDUCE_IN_PLACE_MAX => me != self.root || (0..size).all(data),
            Kind::Reduce if me != self.root => (0..size).all(data),
            // A scan's member reads the earlier members' data where they are; split by
            // chunks, its chunk of every member's data, and its prefixes from every member's
            // scratch.
            Kind::Scan | Kind::Exscan if size <= SCAN_IN_PLACE_MAX => (0..me).all(data),
            Kind::Scan | Kind::Exscan => {
                (0..size).all(|m| data(m) && (m == me || self.peers[3 * m + SCRATCH].is_some()))
            }
            Kind::Allreduce | Kind::Reduce => {
                (0..size).all(|m| data(m) && (m == me || self.place(m, RESULT).is_some()))
            }
        }
    }
}

impl Ni {
    /// A blocking collective ([`applies`]) of `r.len` elements of `esize` bytes through the
    /// members' exported memory; `Ok(None)` when some member cannot map another's (every
    /// member then learns so in the same round and takes the fabric's path).
    pub(crate) fn collective_shared(&self, r: Request, esize: usize) -> Result<Option<Done>> {
        let mut s = self.scratch.lock().unwrap_or_else(|e| e.into_inner());
        let per = (HALF_MAX / esize).max(1);
        let mut last = None;
        // An allgather's pieces keep the whole vector's blocks in the receive buffer.
        let stride = r.len as usize * esize;
        for (at, piece) in crate::pieces(r, esize, per) {
            match self.shared_piece(&mut s, piece, esize, stride)? {
                Some(d) => last = Some(d),
                None if at == 0 => return Ok(None),
                // Mappings refused midway (a peer went away): the rest by the fabric — an
                // allgather's all of it again (the fabric's blocks are whole vectors').
                None if r.flags == coll::ALLGATHER => return self.request(r).map(Some),
                None => last = Some(self.request(piece)?),
            }
        }
        Ok(last.map(|d| Done {
            len: r.len,
            tag: r.tag,
            ..d
        }))
    }

    fn shared_piece(
        &self,
        s: &mut Scratch,
        r: Request,
        esize: usize,
        stride: usize,
    ) -> Result<Option<Done>> {
        let Some(kind) = Kind::of(r.flags) else {
            return Ok(None);
        };
        let Some(p) = self.places(s, r, esize, kind, stride)? else {
            return Ok(None);
        };
        let pushed = p.pushes();
        let done = match kind {
            Kind::Bcast | Kind::Allgather => self.copy_vectors(&p)?,
            Kind::Scan | Kind::Exscan if pushed => self.scan_push(&p)?,
            Kind::Scan | Kind::Exscan if p.size <= SCAN_IN_PLACE_MAX => self.scan_in_place(&p)?,
            Kind::Reduce if p.size <= REDUCE_IN_PLACE_MAX || p.in_place(p.root, RESULT) => {
                self.reduce_in_place(&p)?
            }
            Kind::Allreduce if pushed => self.allreduce_push(&p)?,
            Kind::Scan | Kind::Exscan => self.scan_scatter(&p)?,
            Kind::Allreduce | Kind::Reduce => self.reduce_scatter(&p, &mut s.chunk)?,
        };
        s.round += 1;
        if let Some(w) = self.lock().win.as_ref() {
            use ni_abi::window::stats;
            let (ops, of_bytes) = match kind {
                Kind::Allreduce => (stats::LARGE_ALLREDUCES, stats::LARGE_ALLREDUCE_BYTES),
                Kind::Reduce => (stats::LARGE_REDUCES, stats::LARGE_REDUCE_BYTES),
                Kind::Bcast => (stats::LARGE_BCASTS, stats::LARGE_BCAST_BYTES),
                Kind::Allgather => (stats::LARGE_ALLGATHERS, stats::LARGE_ALLGATHER_BYTES),
                Kind::Scan | Kind::Exscan => (stats::LARGE_SCANS, stats::LARGE_SCAN_BYTES),
            };
            w.count(ops);
            w.add(of_bytes, p.bytes as u64);
            if kind == Kind::Allreduce && p.data_at.is_some() {
                w.count(stats::LARGE_ALLREDUCES_IN_PLACE);
            }
            if pushed {
                w.count(stats::LARGE_PUSHED);
            }
        }
        Ok(Some(done))
    }

    /// Everything up to and with round 1: where this member's data and result are, its
    /// copy-in, every member's record, the mappings, and — unless every member holds the ones
    /// last agreed on — the round that agrees on them. `Ok(None)`: the fabric's path, for
    /// every member alike. An allgather's piece goes to member m's block of the whole
    /// vector's (`stride` bytes each) in the receive buffer, as far into it as it is into
    /// the vector.
    fn places(
        &self,
        s: &mut Scratch,
        r: Request,
        esize: usize,
        kind: Kind,
        stride: usize,
    ) -> Result<Option<Places>> {
        let (me, size) = (self.rank() as usize, self.size() as usize);
        let bytes = r.len as usize * esize;
        let (d, o) = dtype_op(&r);
        // An allgather's receive buffer holds every member's vector in rank order.
        let recv_bytes = if kind == Kind::Allgather {
            stride * (size - 1) + bytes
        } else {
            bytes
        };
        // A broadcast's or reduce's root (the others' is 0); one outside the partition is
        // the fabric's to refuse.
        let root = r.rank as usize;
        if root >= size {
            return Ok(None);
        }
        // Data and result read where they are when the application's buffers are exported
        // regions (`alloc`) apart from each other: no copy in, no result copied to scratch.
        // A broadcast's root only reads its buffer, so the others read it there as it is —
        // past `BCAST_COPY_MAX`: that costs the barrier round after, so less is copied.
        let (data_at, result_at) = {
            let i = self.lock();
            // A reduce's receive buffer is the root's alone.
            let receives = kind != Kind::Reduce || me == root;
            if !i.registered(r.addr, bytes as u64)
                || (receives && !i.registered(r.tag, recv_bytes as u64))
            {
                // The fabric's path says what is wrong with them.
                return Ok(None);
            }
            let apart = r.addr + bytes as u64 <= r.tag || r.tag + recv_bytes as u64 <= r.addr;
            let at = |addr| apart.then(|| i.exported_at(addr, bytes as u64)).flatten();
            match kind {
                Kind::Bcast if me == root && bytes > BCAST_COPY_MAX => {
                    (i.exported_at(r.addr, bytes as u64), None)
                }
                Kind::Bcast => (None, None),
                // Nobody reads a reduce's result where it is: the root builds it in its
                // buffer, the others in scratch, apart from their data.
                Kind::Reduce if me != root => (i.exported_at(r.addr, bytes as u64), None),
                // The others fold their parts straight into the root's buffer where it is
                // exported ([`Ni::reduce_in_place`]).
                Kind::Reduce if size > 1 => (at(r.addr), at(r.tag)),
                Kind::Allreduce => (at(r.addr), at(r.tag)),
                // Each member writes its prefixes of its part into every member's buffer
                // where they all are exported ([`Ni::scan_push`]).
                Kind::Scan | Kind::Exscan if size > 1 => (at(r.addr), at(r.tag)),
                // Nobody reads anyone's result in the rest.
                _ => (at(r.addr), None),
            }
        };
        let needs_scratch = needs_half(kind, size, me, root, data_at.is_none());
        // A scan split by chunks holds in its scratch half its data (if copied in), then
        // every member's prefix of this member's chunk.
        let span = match kind {
            Kind::Scan | Kind::Exscan if size > SCAN_IN_PLACE_MAX => {
                bytes + size * max_chunk(r.len as usize, size, esize)
            }
            _ => bytes,
        };
        if s.ctl.is_none() {
            s.ctl = Some(self.alloc(CTL_BYTES)?);
        }
        if needs_scratch && (s.half < span || s.region.is_none()) {
            let half = span.next_power_of_two().max(64 << 10);
            s.region = None;
            s.agreed.clear();
            // Without scratch this member still joins the rounds, says key 0 and "not
            // mapped", and every member takes the fabric's path.
            if let Ok(region) = self.alloc(2 * half) {
                s.region = Some(region);
                s.half = half;
            }
        }
        let ctl = s.ctl.as_ref().unwrap();
        let base = (s.round & 1) as usize * s.half;
        // SAFETY: `base` is 0 or the second half's start, inside the region.
        let mine = s.region.as_ref().map(|g| unsafe { g.as_ptr().add(base) });
        if let (Some(mine), None, true) = (mine, data_at, needs_scratch) {
            // SAFETY: `[r.addr, + bytes)` is registered memory this process holds (checked
            // above); the scratch half holds `bytes` (sized above) and is this process's own.
            unsafe { std::ptr::copy_nonoverlapping(r.addr as *const u8, mine, bytes) };
        }
        // The mappings every member last agreed on, held for this piece: if one is gone
        // here, say "never agreed", and every member agrees again.
        let mut held: Vec<Option<Arc<Mem>>> = vec![None; 3 * size];
        // A member that needs no scratch (its data and result where they are) has none to hold.
        let mut still = s.agreed.len() == 3 * size && (s.region.is_some() || !needs_scratch);
        if still {
            let mut i = self.lock();
            for (p, h) in held.iter_mut().enumerate() {
                if p / 3 != me && s.agreed[p] != 0 {
                    *h = i.peer_mem((p / 3) as u32, s.agreed[p]).map(|(mem, _)| mem);
                    still &= h.is_some();
                }
            }
        }
        let meta = ni_abi::window::coll_meta(r.flags, d, o, r.rank, r.len);
        let record = [
            MAGIC,
            s.region.as_ref().map_or(0, |g| g.key() as u64),
            meta,
            base as u64,
            if still { digest(&s.agreed) } else { 0 },
            data_at.map_or(0, |a| a.0 as u64),
            data_at.map_or(0, |a| a.1),
            result_at.map_or(0, |a| a.0 as u64),
            result_at.map_or(0, |a| a.1),
        ];
        for (k, v) in record.iter().enumerate() {
            ctl.write_at(8 * k, &v.to_le_bytes());
        }
        // Round 1: my copy-in is done, and where everyone's data is.
        let first = self.request(coll_request(
            coll::ALLGATHER,
            dtype::U64,
            ReduceOp::Sum,
            0,
            ctl.iova(),
            ctl.iova() + RECORDS as u64,
            RECORD,
        ))?;
        // Each member's keys (scratch, data, result) and offsets in those regions.
        let mut keys = vec![0u32; 3 * size];
        let mut offs = vec![0usize; 3 * size];
        let mut agreed = vec![0u64; size];
        for m in 0..size {
            let mut rec = [0u64; RECORD];
            for (k, v) in rec.iter_mut().enumerate() {
                let mut b = [0u8; 8];
                ctl.read_at(RECORDS + 8 * (m * RECORD + k), &mut b);
                *v = u64::from_le_bytes(b);
            }
            if rec[0] != MAGIC || rec[2] != meta {
                // Members in different collectives: every member reads the same records,
                // so all fail alike, as the fabric's round would.
                if let Some(w) = self.lock().win.as_ref() {
                    w.count(ni_abi::window::stats::COLLISION);
                }
                return Err(Error::Failed {
                    op: "collective",
                    status: ni_abi::fastpath::Status::Collision,
                    rank: 0,
                    len: r.len,
                    tag: r.tag,
                });
            }
            // A key that does not fit 32 bits is no region's: refused when mapped.
            let key = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
            let off = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
            keys[3 * m + SCRATCH] = key(rec[1]);
            offs[3 * m + SCRATCH] = off(rec[3]);
            agreed[m] = rec[4];
            keys[3 * m + DATA] = key(rec[5]);
            offs[3 * m + DATA] = off(rec[6]);
            keys[3 * m + RESULT] = key(rec[7]);
            offs[3 * m + RESULT] = off(rec[8]);
        }
        // Each member's data and result, mapped here (where the member says they are,
        // checked against the region's length: a member may say anything); a place with
        // key 0 is in the member's scratch half.
        let mut peers: Vec<Option<(Arc<Mem>, usize)>> = vec![None; 3 * size];
        let mut outside = false;
        {
            let mut i = self.lock();
            for m in (0..size).filter(|&m| m != me) {
                let half = needs_half(kind, size, m, root, keys[3 * m + DATA] == 0);
                for p in 3 * m..3 * m + 3 {
                    let mapped = match &held[p] {
                        Some(mem) if keys[p] == s.agreed[p] => {
                            Some((mem.clone(), mem.len() as u64))
                        }
                        _ if keys[p] == 0 => None,
                        _ => i.peer_mem(m as u32, keys[p]),
                    };
                    peers[p] = mapped.and_then(|(mem, len)| {
                        let end = offs[p]
                            .checked_add(if p % 3 == SCRATCH { span } else { bytes })
                            .filter(|&end| end as u64 <= len);
                        // (A scratch half may be smaller where its owner needs none: a
                        // broadcast's member whose scratch was sized for a smaller vector.)
                        outside |= end.is_none() && (p % 3 != SCRATCH || half);
                        end.map(|_| (mem, offs[p]))
                    });
                }
                // A member that needs its half and has none says "agree again" (it cannot
                // hold what all agreed on); one that says otherwise lies.
                outside |= half && keys[3 * m + SCRATCH] == 0 && agreed[m] != 0;
            }
        }
        let p = Places {
            r,
            kind,
            esize,
            bytes,
            me,
            size,
            root,
            data_at,
            result_at,
            keys,
            peers,
            outside,
            mine: if needs_scratch { mine } else { None },
            first,
            stride,
        };
        // A lying member's places are refused by every other, which all take the fabric's
        // path (the liar's own choice then decides whether the fabric's round completes).
        let refused = p.refused();
        if refused {
            if let Some(w) = self.lock().win.as_ref() {
                w.count(ni_abi::window::stats::RING_ERRORS);
            }
        }
        let ready = !refused && (mine.is_some() || !needs_scratch) && p.everything_mapped();
        // Every member decides from the same records: agree again unless every member last
        // agreed on exactly these keys and still holds their mappings. (Every member that
        // says so holds the same agreed keys, so the comparison decides alike too; it keeps
        // a member that forged a digest for other keys from skipping the round.)
        let agree = agreed.iter().any(|&h| h == 0 || h != digest(&p.keys)) || p.keys != s.agreed;
        let mut go = ready;
        if agree {
            ctl.write_at(0, &(ready as u64).to_le_bytes());
            self.request(coll_request(
                coll::ALLREDUCE,
                dtype::U64,
                ReduceOp::Min,
                0,
                ctl.iova(),
                ctl.iova() + 8,
                1,
            ))?;
            let mut b = [0u8; 8];
            ctl.read_at(8, &mut b);
            go = u64::from_le_bytes(b) != 0;
        }
        // Without the round, not ready here means the keys agreed on before, all still held
        // (so mapped), and a member that moved a place within its region to where no honest
        // member's lies (the digest covers keys, not offsets) or dropped a scratch half it
        // needs: every other member refused it alike.
        if !go {
            // The fabric's path, and agree again next time.
            s.agreed.clear();
            s.round += 1;
            return Ok(None);
        }
        if agree {
            s.agreed = p.keys.clone();
        }
        Ok(Some(p))
    }

    /// A broadcast's or an allgather's step after round 1: the vectors this member copies
    /// (the root's; every other member's, each to its place in the receive buffer).
    fn copy_vectors(&self, p: &Places) -> Result<Done> {
        let (r, bytes) = (&p.r, p.bytes);
        let allgather = p.kind == Kind::Allgather;
        for m in (0..p.size).filter(|&m| m != p.me && (allgather || m == p.root)) {
            let to = if allgather {
                r.tag + (m * p.stride) as u64
            } else {
                r.addr
            };
            // SAFETY: member m's vector lies in its mapping (offset plus `bytes` checked
            // against the region when mapped); `[to, + bytes)` lies in this process's
            // registered buffer (checked in `places`), which no mapping of another member's
            // region overlaps.
            unsafe { std::ptr::copy_nonoverlapping(p.at(m, DATA, 0), to as *mut u8, bytes) };
        }
        if allgather {
            // SAFETY: both inside this process's registered buffers (checked in `places`);
            // they may overlap (an application that passes its own place in the receive
            // buffer as its send buffer), so a move.
            unsafe {
                std::ptr::copy(
                    r.addr as *const u8,
                    (r.tag as *mut u8).add(p.me * p.stride),
                    bytes,
                )
            };
        }
        // A broadcast's members read the root's vector, an allgather's everyone's.
        self.release(p, |m| allgather || m == p.root)
    }

    /// A scan's step after round 1: this member's prefix, reduced in rank order from every
    /// earlier member's data (and its own, unless exclusive) into its receive buffer — which
    /// no member's data overlaps (its own, were they not apart, was copied to scratch).
    fn scan_in_place(&self, p: &Places) -> Result<Done> {
        let upto = if p.kind == Kind::Scan { p.me + 1 } else { p.me };
        if upto == 0 {
            // Rank 0 of an exclusive scan: the identity, as the fabric writes it.
            // SAFETY: the registered receive buffer (checked in `places`).
            let out = unsafe { std::slice::from_raw_parts_mut(p.r.tag as *mut u8, p.bytes) };
            let (d, o) = dtype_op(&p.r);
            identity(d, o, out);
        } else {
            // SAFETY: the registered receive buffer (checked in `places`), apart from every
            // member's data (its own in its scratch half unless apart).
            unsafe { fold_in_place(p, upto, p.r.tag as *mut u8, 0, p.bytes) };
        }
        // Each member's data is read by the members after it.
        self.release(p, |m| m + 1 < p.size)
    }

    /// A reduce after round 1, every member's vector folded in rank order where each lies into
    /// the root's receive buffer. Where the root exported that buffer (any number of
    /// members), every member folds its own part of it, then a `BARRIER`: the root returns
    /// only once every part is in, every member once nobody reads its data. Else (up to
    /// [`REDUCE_IN_PLACE_MAX`] members) the root folds all of it and the others only wait, in
    /// [`Self::release`], for it to have read theirs where they keep them.
    fn reduce_in_place(&self, p: &Places) -> Result<Done> {
        if p.in_place(p.root, RESULT) {
            let (lo, hi) = cuts(p, p.me);
            // SAFETY: the root's receive buffer (its own registered one, or its exported
            // region mapped here, `bytes` checked against its length), apart from every
            // member's data; each member writes only its own part.
            unsafe { fold_in_place(p, p.size, p.at(p.root, RESULT, lo), lo, hi) };
            return self.barrier_round();
        }
        if p.me == p.root {
            // SAFETY: as a scan's, above.
            unsafe { fold_in_place(p, p.size, p.r.tag as *mut u8, 0, p.bytes) };
        }
        // Only the root reads, and its own needs no round.
        self.release(p, |m| m != p.root)
    }

    /// A scan's steps after round 1, the allreduce's split by chunks: this member computes
    /// every member's prefix of its own chunk, in rank order from the members' data, into its
    /// scratch after its data (`bytes` on, a chunk's worth per member); round 2; then it
    /// copies its own prefix of every chunk from the member that computed it. Each member
    /// reads and writes about three vectors' worth, where each reducing the vectors before
    /// its own made the last read `P` (a scan of 128 KiB at P = 8 on one cpu: 196 us that
    /// way, 141-146 this one; Open MPI 168-174).
    fn scan_scatter(&self, p: &Places) -> Result<Done> {
        debug_assert!(p.size > SCAN_IN_PLACE_MAX);
        let (r, me, size, esize) = (&p.r, p.me, p.size, p.esize);
        let (d, o) = dtype_op(r);
        let n = r.len as usize;
        let chunk = |m: usize| (n * m / size * esize, n * (m + 1) / size * esize);
        let most = max_chunk(n, size, esize);
        let mine = p.mine.expect("a scan's member has its half");
        let (lo, hi) = chunk(me);
        if hi > lo {
            for m in 0..size {
                // SAFETY: slot m of my half's prefixes (`bytes + m·most`, `hi − lo` ≤ `most`
                // bytes: the half holds `bytes + size·most`, sized in `places`).
                let slot = unsafe {
                    std::slice::from_raw_parts_mut(mine.add(p.bytes + m * most), hi - lo)
                };
                // SAFETY: inside member m's data.
                let x = unsafe { std::slice::from_raw_parts(p.at(m, DATA, lo), hi - lo) };
                if m == 0 {
                    slot.copy_from_slice(x);
                } else {
                    // SAFETY: the previous slot, apart from this one.
                    let prev = unsafe {
                        std::slice::from_raw_parts(mine.add(p.bytes + (m - 1) * most), hi - lo)
                    };
                    combine(d, o, slot, prev, x);
                }
            }
        }
        // Round 2: every member's prefixes of every chunk are computed (and nobody reads
        // anyone's data any more).
        let done = self.barrier_round()?;
        // SAFETY: the registered receive buffer (checked in `places`).
        let out = unsafe { std::slice::from_raw_parts_mut(r.tag as *mut u8, p.bytes) };
        // An exclusive scan's member takes the prefix of the member before it; the first,
        // the identity.
        let Some(of) = (if p.kind == Kind::Scan {
            Some(me)
        } else {
            me.checked_sub(1)
        }) else {
            identity(d, o, out);
            return Ok(done);
        };
        for m in 0..size {
            let (lo, hi) = chunk(m);
            let at = p.bytes + of * most;
            let from = if m == me {
                // SAFETY: my own half, as above.
                unsafe { mine.add(at) as *const u8 }
            } else {
                let (mem, b) = p.peers[3 * m + SCRATCH]
                    .as_ref()
                    .expect("mapped in `places`");
                // SAFETY: member m's half holds `bytes + size·most` (checked when mapped).
                unsafe { mem.ptr().add(b + at) as *const u8 }
            };
            // SAFETY: `hi − lo` bytes of member m's slot, into the receive buffer.
            unsafe { std::ptr::copy_nonoverlapping(from, out[lo..hi].as_mut_ptr(), hi - lo) };
        }
        // Prefixes in scratch need no round after: the halves alternate.
        Ok(done)
    }

    /// An allreduce's steps after round 1 where every member's result is its receive buffer,
    /// exported: this member folds its chunk in rank order into its own buffer and writes it
    /// into every other member's, [`FOLD_BLOCK`] at a time while it is in the cache; then a
    /// `BARRIER`, after which every buffer holds every chunk and nobody reads anyone's data.
    /// Two rounds where pulling the others' chunks took three (the last so that nobody
    /// rewrote a buffer another still read).
    fn allreduce_push(&self, p: &Places) -> Result<Done> {
        let (lo, hi) = cuts(p, p.me);
        let mut at = lo;
        while at < hi {
            let end = hi.min(at + FOLD_BLOCK);
            let out = (p.r.tag as *mut u8).wrapping_add(at);
            // SAFETY: my registered receive buffer (checked in `places`), apart from every
            // member's data (mine checked there, the others' in `everything_mapped`); only
            // I write this part of anyone's.
            unsafe { fold_in_place(p, p.size, out, at, end) };
            for m in (0..p.size).filter(|&m| m != p.me) {
                // SAFETY: member m's receive buffer in its mapping (`bytes` checked against
                // the region), apart from its data (`everything_mapped`) and from mine.
                unsafe { std::ptr::copy_nonoverlapping(out, p.at(m, RESULT, at), end - at) };
            }
            at = end;
        }
        self.barrier_round()
    }

    /// A scan's steps after round 1 where every member's result is its receive buffer,
    /// exported: this member computes every member's prefix of its own chunk in rank order,
    /// each straight into that member's buffer from the one before it, [`FOLD_BLOCK`] at a
    /// time; then a `BARRIER`, after which every buffer holds its prefix of every chunk and
    /// nobody reads anyone's data. [`Ni::scan_scatter`] wrote the prefixes into its scratch
    /// and every member then copied its own out of every other's: twice the bytes moved.
    fn scan_push(&self, p: &Places) -> Result<Done> {
        let (d, o) = dtype_op(&p.r);
        // An exclusive scan's member m takes the prefix of the members before it; the first,
        // the identity.
        let shift = usize::from(p.kind == Kind::Exscan);
        let (lo, hi) = cuts(p, p.me);
        let mut at = lo;
        while at < hi {
            let n = hi.min(at + FOLD_BLOCK) - at;
            // SAFETY (of each): member k's receive buffer, `n` bytes `at` into it — its own
            // registered one, or in its mapping (`bytes` checked against the region) — apart
            // from every member's data (`everything_mapped`) and from every other member's
            // buffer; only this member writes this part of anyone's.
            let out = |k: usize| unsafe { std::slice::from_raw_parts_mut(p.at(k, RESULT, at), n) };
            if shift == 1 {
                identity(d, o, out(0));
            }
            for m in 0..p.size - shift {
                // SAFETY: inside member m's data (`at + n` ≤ `hi` ≤ `bytes`).
                let x = unsafe { std::slice::from_raw_parts(p.at(m, DATA, at), n) };
                if m == 0 {
                    out(shift).copy_from_slice(x);
                } else {
                    combine(d, o, out(m + shift), out(m + shift - 1), x);
                }
            }
            at += n;
        }
        self.barrier_round()
    }

    /// One `BARRIER` round of the window's (every member has done what came before it).
    fn barrier_round(&self) -> Result<Done> {
        self.request(coll_request(coll::BARRIER, 0, ReduceOp::Sum, 0, 0, 0, 0))
    }

    /// After a step that only read others' data: a `BARRIER` round if the data of a member
    /// that others read (`read_by_others`) was read where its owner keeps it, so that no
    /// member returns (and rewrites it) while another still reads; data in scratch needs
    /// none, the halves alternating. Every member decides alike, from the same records.
    fn release(&self, p: &Places, read_by_others: impl Fn(usize) -> bool) -> Result<Done> {
        if (0..p.size).any(|m| read_by_others(m) && p.in_place(m, DATA)) {
            self.barrier_round()
        } else {
            Ok(p.first)
        }
    }

    /// An allreduce's or a reduce's steps after round 1: this member's chunk reduced in rank
    /// order and published, round 2, the others' chunks copied out (the root's alone in a
    /// reduce), and round 3 if any result was read where its owner keeps it.
    fn reduce_scatter(&self, p: &Places, spare: &mut Vec<u8>) -> Result<Done> {
        let (r, me, size) = (&p.r, p.me, p.size);
        let reduce = p.kind == Kind::Reduce;
        let chunk = |m: usize| {
            let n = r.len as usize;
            (n * m / size * p.esize, n * (m + 1) / size * p.esize)
        };
        // My chunk, folded in rank order into my receive buffer (a reduce's other members
        // have none to write: `spare`), then published in my scratch unless others read it
        // there (only I read my chunk of anyone's data or scratch, so it is free to
        // overwrite).
        let (lo, hi) = chunk(me);
        if hi > lo {
            // A reduce's other member whose data is read where it is builds its chunk in its
            // scratch half straight away, where the others read it.
            let in_scratch = reduce && me != p.root && p.data_at.is_some();
            let acc = if in_scratch {
                let mine = p.mine.expect("a reduce-scatter's member has its half");
                // SAFETY: my own half, my chunk; my data is not in it (read in place).
                unsafe { mine.add(lo) }
            } else if reduce && me != p.root {
                spare.resize(hi - lo, 0);
                spare.as_mut_ptr()
            } else {
                // SAFETY: `[r.tag + lo, r.tag + hi)` lies in the registered receive buffer,
                // which overlaps neither the scratch nor, read in place, the send buffer.
                unsafe { (r.tag as *mut u8).add(lo) }
            };
            // SAFETY: `hi − lo` bytes of my own (above), apart from every member's data.
            unsafe { fold_in_place(p, size, acc, lo, hi) };
            // A reduce's root builds its result for itself alone.
            if p.result_at.is_none() && !(reduce && me == p.root) && !in_scratch {
                let mine = p.mine.expect("a reduce-scatter's member has its half");
                // SAFETY: my own half, my chunk.
                unsafe { std::ptr::copy_nonoverlapping(acc, mine.add(lo), hi - lo) };
            }
        }
        // Round 2: every chunk is reduced (and no member reads anyone's data any more).
        let done = self.barrier_round()?;
        for m in (0..size).filter(|&m| m != me && (!reduce || me == p.root)) {
            let (lo, hi) = chunk(m);
            // SAFETY: member m's chunk of its result, into the registered receive buffer.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    p.at(m, RESULT, lo),
                    (r.tag as *mut u8).add(lo),
                    hi - lo,
                )
            };
        }
        if p.any_in_place(RESULT) {
            // Round 3: results read in a receive buffer are read before its owner returns
            // (scratch halves alternate instead, so a result there waits for nobody).
            self.barrier_round()?;
        }
        Ok(done)
    }
}

/// Bytes `lo..hi` of members `0..upto`'s data (`upto` ≥ 1) folded in rank order into `out`
/// (where byte `lo` of the result goes), read where each lies, [`FOLD_BLOCK`] at a time so
/// that the result stays in the cache while every member's piece of it is applied.
///
/// # Safety
/// `out` is valid for `hi - lo` bytes' writes that nothing else reads or writes meanwhile,
/// apart from every member's data; `lo ≤ hi ≤ bytes`, `lo` a whole number of elements;
/// members `0..upto` (`upto` ≤ `size`) have their data mapped here.
unsafe fn fold_in_place(p: &Places, upto: usize, out: *mut u8, lo: usize, hi: usize) {
    debug_assert!(
        lo <= hi && hi <= p.bytes && lo.is_multiple_of(p.esize) && (1..=p.size).contains(&upto)
    );
    let (d, o) = dtype_op(&p.r);
    // SAFETY: the caller's word.
    let out = unsafe { std::slice::from_raw_parts_mut(out, hi - lo) };
    let block = FOLD_BLOCK / p.esize * p.esize;
    for (k, acc) in out.chunks_mut(block).enumerate() {
        let at = lo + k * block;
        // SAFETY (of each): inside member m's data (`at + acc.len()` ≤ `hi` ≤ `bytes`).
        let n = acc.len();
        let x = |m: usize| unsafe { std::slice::from_raw_parts(p.at(m, DATA, at), n) };
        match upto {
            1 => acc.copy_from_slice(x(0)),
            _ => combine(d, o, acc, x(0), x(1)),
        }
        for m in 2..upto {
            apply(d, o, acc, x(m));
        }
    }
}

/// Member m's part of the vector where each member writes its own part into every member's
/// buffer: cut at 64 bytes into the vector, a whole number of elements of every type, so that
/// no cache line is written from two cores where the buffers start on one.
fn cuts(p: &Places, m: usize) -> (usize, usize) {
    let cut = |m: usize| match m == p.size {
        true => p.bytes,
        false => (p.bytes * m / p.size) & !63,
    };
    (cut(m), cut(m + 1))
}

/// The largest of a vector's `size` chunks, in bytes.
fn max_chunk(n: usize, size: usize, esize: usize) -> usize {
    n.div_ceil(size) * esize
}

/// Whether member `m` needs its scratch half (`data_in_scratch`: its data is not read where
/// it is), as every member tells from its record: an honest member's then holds the piece.
/// Only a broadcast's root needs its scratch in a broadcast (the others copy into their
/// buffers straight from the root's), and where the data is read in place nobody's result is
/// in scratch but the reduce-scatter's and the chunked scan's — which a member cannot rule
/// out before round 1 tells it whether every member's result is where the others can write
/// it.
fn needs_half(kind: Kind, size: usize, m: usize, root: usize, data_in_scratch: bool) -> bool {
    match kind {
        Kind::Bcast => m == root && data_in_scratch,
        Kind::Scan | Kind::Exscan if size <= SCAN_IN_PLACE_MAX => data_in_scratch,
        Kind::Reduce if size <= REDUCE_IN_PLACE_MAX => data_in_scratch,
        Kind::Allgather => data_in_scratch,
        Kind::Allreduce | Kind::Reduce | Kind::Scan | Kind::Exscan => true,
    }
}

/// Whether a collective request is one [`Ni::collective_shared`] does: a broadcast or an
/// allgather of a known type, or an allreduce, reduce or scan of a known type and operator (a
/// bitwise one on floats the fabric fails with its status).
pub(crate) fn applies(r: &Request) -> bool {
    let (d, o) = dtype_op(r);
    r.opcode == ni_abi::fastpath::op::COLLECTIVE
        && dtype::size(d).is_some()
        && match r.flags {
            coll::BCAST | coll::ALLGATHER => true,
            coll::ALLREDUCE | coll::REDUCE | coll::SCAN | coll::EXSCAN => {
                o <= redop::XOR && !(o >= redop::AND && matches!(d, dtype::F32 | dtype::F64))
            }
            _ => false,
        }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Member 1's view of a reduce of two to root 0, whose records said `keys` (scratch, data,
    /// result per member) and these offsets of the root's three places in their regions.
    fn places(keys: [u32; 6], offs: [usize; 3], bytes: usize) -> Places {
        places_of(Kind::Reduce, keys, offs, bytes)
    }

    /// The same of a collective of `kind`.
    fn places_of(kind: Kind, keys: [u32; 6], offs: [usize; 3], bytes: usize) -> Places {
        let regions: Vec<(u32, Arc<Mem>)> = (1..=3)
            .map(|k| {
                (
                    k,
                    Arc::new(Mem::alloc(1 << 16).expect("an anonymous mapping")),
                )
            })
            .collect();
        let mem = |key: u32| regions.iter().find(|r| r.0 == key).map(|r| r.1.clone());
        let mut peers = vec![None; 6];
        for what in [SCRATCH, DATA, RESULT] {
            peers[what] = mem(keys[what]).map(|m| (m, offs[what]));
        }
        Places {
            r: Request {
                flags: coll::REDUCE,
                len: (bytes / 8) as u64,
                ..Request::default()
            },
            kind,
            esize: 8,
            bytes,
            me: 1,
            size: 2,
            root: 0,
            data_at: Some((5, 0)),
            result_at: (keys[5] != 0).then_some((keys[5], 0)),
            keys: keys.to_vec(),
            peers,
            outside: false,
            mine: None,
            first: Done {
                status: ni_abi::fastpath::Status::Ok,
                rank: 0,
                len: 0,
                tag: 0,
                aux: 0,
            },
            stride: bytes,
        }
    }

    /// The member that writes its half into the root's buffer does so only where that buffer
    /// lies apart from all the root says it reads: a root may publish one region for both, or
    /// its scratch half, at overlapping offsets (fastpath.md, the reduce of 2 members).
    #[test]
    fn a_root_s_buffer_overlapping_its_data_is_refused() {
        let bytes = 4096;
        // Data and result in one region: apart, overlapping by one element, or the same.
        let apart = places([1, 2, 2, 0, 5, 0], [0, 0, 4096], bytes);
        assert!(apart.result_apart(0) && apart.everything_mapped() && !apart.refused());
        for off in [4088, 0, 8] {
            let p = places([1, 2, 2, 0, 5, 0], [0, 0, off], bytes);
            assert!(
                !p.result_apart(0) && p.refused(),
                "result at {off}: overlaps the data at 0"
            );
            assert!(
                !p.everything_mapped(),
                "result at {off}: must not be written"
            );
        }
        // Data in the root's scratch half (key 0) and its result in the same region.
        let p = places([1, 0, 1, 0, 5, 0], [8192, 0, 9000], bytes);
        assert!(!p.result_apart(0) && !p.everything_mapped());
        let p = places([1, 0, 1, 0, 5, 0], [8192, 0, 8192 + bytes], bytes);
        assert!(p.result_apart(0) && p.everything_mapped());
        // Result in another region than the data: apart at any offsets.
        let p = places([1, 2, 3, 0, 5, 0], [0, 0, 0], bytes);
        assert!(p.result_apart(0) && p.everything_mapped());
    }

    /// Where every member's result is in its receive buffer, each member writes its chunk into
    /// every other's — only where that buffer lies apart from all its owner says the others
    /// read (fastpath.md, the large allreduce); with a result in scratch, nobody writes it.
    #[test]
    fn an_allreduce_pushes_only_into_buffers_apart_from_their_data() {
        let bytes = 4096;
        let p = places_of(Kind::Allreduce, [1, 2, 3, 0, 5, 6], [0, 0, 0], bytes);
        assert!(p.all_in_place(RESULT) && p.everything_mapped() && !p.refused());
        for off in [4088, 0, 8] {
            let p = places_of(Kind::Allreduce, [1, 2, 2, 0, 5, 6], [0, 0, off], bytes);
            assert!(p.all_in_place(RESULT) && p.refused());
            assert!(
                !p.everything_mapped(),
                "result at {off}: overlaps the data at 0, must not be written"
            );
        }
        let p = places_of(Kind::Allreduce, [1, 2, 2, 0, 5, 6], [0, 0, bytes], bytes);
        assert!(p.everything_mapped());
        // Member 0's result in its scratch half: pulled after round 3 as before, from
        // wherever it is (overlapping its data there is its own affair: nobody writes it).
        let p = places_of(Kind::Allreduce, [1, 2, 0, 0, 5, 6], [0, 0, 0], bytes);
        assert!(!p.all_in_place(RESULT) && p.everything_mapped() && !p.refused());
    }
}
