//! Collectives done in the network (the CM-5 control network, §4, and vector collectives
//! beyond it): each member sends one request and gets one result, whatever the partition size.
//!
//! Every kind of collective has its own sequence of rounds per partition: a member's k-th
//! request of a kind joins round k. A round completes when every member it needs has joined
//! (CM-5 combines: the non-abstainers; vector collectives: everyone; network-done also waits
//! for the partition's message count to reach zero), and rounds complete in start order.
//! Requests that disagree within a round are a collision. A member whose client goes away
//! fails every pending round of its partition for everyone (`peer down`) and the partition
//! starts its sequences again, so it can run collectives once the member is back; a round
//! that waits longer than the collective timeout fails the same way (`timeout`).
//!
//! Vector collectives read each member's buffer once and write each member's result once,
//! in 1 MiB chunks. Reductions combine strictly in rank order — ((m0 op m1) op m2) ... — and
//! one result is written to every member, so floating-point results are bit-identical.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use ni_abi::fastpath::{
    coll, combine as cflag, dtype, op, participation, redop, Completion, Request, Status,
};

use super::State;
use crate::cm5::combine::{self as cm5c, Combiner, Member, Pattern, MAX_WORDS};
use crate::ni::read_dma;
use crate::server::lock;
use ni_abi::reduce::{apply, identity};

/// The default for how long a collective round may wait for its last member.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
const CHUNK: usize = 1 << 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Kind {
    Combine,
    Vector,
    Sync,
    Flush,
}

/// Which door of its NI a member came through: the fast path's rings (libni), or the CM-5
/// registers in BAR2 (`cm5/com.rs`). Rounds are the same; only where results go differs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Door {
    FastPath,
    Registers,
}

/// One member's request in a round.
#[derive(Clone, Copy, Debug, serde::Serialize, serde::Deserialize)]
pub struct Entry {
    pub node: usize,
    pub req: Request,
    /// CM-5 combine: the words read at request time (scan_start latched then too).
    pub words: [u32; MAX_WORDS],
    pub door: Door,
}

#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(super) struct Round {
    pub(super) entries: Vec<Option<Entry>>,
    #[serde(with = "crate::handover::serde_with::instant")]
    pub(super) started: Instant,
    /// Contributions of members on other hosts, by rank (their bytes from `req.addr` on).
    pub(super) data: HashMap<usize, Vec<u8>>,
}

#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub(super) struct Rounds {
    /// Sequence number of `rounds[0]`.
    pub(super) base: u64,
    pub(super) rounds: VecDeque<Round>,
    /// Per rank: the sequence number of its next request.
    pub(super) next: Vec<u64>,
}

/// A partition's control-network state.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct PartitionColl {
    pub(super) rounds: HashMap<Kind, Rounds>,
    /// A combine collision happened: combines fail until a flush completes.
    collided: bool,
    /// Completed reductions waiting for abstaining receivers (per rank).
    reduce_results: Vec<VecDeque<(cm5c::Outcome, u64)>>,
    /// Receive-only requests waiting for a reduction result (per rank).
    receive_only: Vec<VecDeque<Entry>>,
    /// The async globals (§4.3.3), indexed by `sup`: the user one (both doors), and the
    /// supervisor's (`ni_async_sup_global`, registers only).
    globals: [AsyncGlobal; 2],
}

/// One async global of a partition: each member's `global_send`, and their OR as last seen.
#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
struct AsyncGlobal {
    send: Vec<bool>,
    rec: bool,
}

impl AsyncGlobal {
    /// Member `rank` of `size` sets its bit: the OR over the partition, and whether it rose.
    fn set(&mut self, size: usize, rank: usize, bit: bool) -> (bool, bool) {
        if self.send.len() != size {
            self.send = vec![false; size];
        }
        self.send[rank] = bit;
        let or = self.send.iter().any(|&b| b);
        let rose = or && !self.rec;
        self.rec = or;
        (or, rose)
    }
}

impl PartitionColl {
    pub(super) fn rounds(&mut self, k: Kind, size: usize) -> &mut Rounds {
        let r = self.rounds.entry(k).or_default();
        if r.next.len() != size {
            r.next = vec![r.base; size];
        }
        r
    }

    pub(super) fn sized(&mut self, size: usize) {
        if self.reduce_results.len() != size {
            self.reduce_results = (0..size).map(|_| VecDeque::new()).collect();
            self.receive_only = (0..size).map(|_| VecDeque::new()).collect();
        }
    }
}

/// The combine words of a request: `len` 32-bit words at `addr` in the client's memory.
fn read_words(state: &State, node: usize, r: &Request) -> Result<[u32; MAX_WORDS], Status> {
    let mut b = [0u8; MAX_WORDS * 4];
    let n = r.len as usize * 4;
    read_dma(&state.nodes[node].dma)
        .read(r.addr, &mut b[..n])
        .map_err(|_| Status::NotRegistered)?;
    let mut w = [0u32; MAX_WORDS];
    for (i, c) in b.chunks_exact(4).enumerate() {
        w[i] = u32::from_le_bytes(c.try_into().unwrap());
    }
    Ok(w)
}

/// Whether `round` is a CM-5 network-done (its members' combines say so).
fn network_done(round: &Round) -> bool {
    round
        .entries
        .iter()
        .flatten()
        .next()
        .is_some_and(|e| e.req.flags & cflag::PATTERN_MASK == Pattern::RouterDone as u8)
}

impl State {
    pub(super) fn partition_of(&self, node: usize) -> Option<(String, Vec<u32>, usize)> {
        let (p, rank) = self.partitions.of(node as u32)?;
        Some((p.name.clone(), p.nodes.clone(), rank as usize))
    }

    pub(super) fn coll_timeout(&self) -> Duration {
        self.collective_timeout
    }

    /// NI `node`'s participation flags. The abstain bits are the ones its CM-5 registers
    /// hold: a driver's write to an abstain flag takes effect at once (its event for the
    /// poller may still be queued behind another NI's), and the fast path's changes are
    /// mirrored there (`mirror_participation`).
    pub(super) fn flags(&self, node: usize) -> u32 {
        if self.other_host(node).is_some() {
            // As its host last announced them (`READY`).
            return self.nodes[node].participation;
        }
        let regs = lock(&self.slots[node].ni).cm5.participation();
        (self.nodes[node].participation & !participation::ABSTAIN_BITS) | regs
    }

    /// COM_CONTROL: set the participation flags, unless a combine of this member is pending.
    pub(super) fn com_control(
        &mut self,
        a: usize,
        r: &Request,
    ) -> Result<Option<Completion>, Status> {
        if r.access & !participation::ALL != 0 {
            return Err(Status::BadDescriptor);
        }
        self.set_participation(a, r.access)?;
        Ok(super::ops::done(r))
    }

    /// Set NI `a`'s participation flags, from either door; mirrored into its CM-5 registers
    /// so both doors see the same. Refused while a combine of this member is pending.
    pub(super) fn set_participation(&mut self, a: usize, flags: u32) -> Result<(), Status> {
        let (name, _, rank) = self.partition_of(a).ok_or(Status::OutOfPartition)?;
        let pending = self.colls.get(&name).is_some_and(|pc| {
            pc.rounds.get(&Kind::Combine).is_some_and(|rs| {
                rs.rounds
                    .iter()
                    .any(|round| round.entries.get(rank).is_some_and(|e| e.is_some()))
            }) || pc.receive_only.get(rank).is_some_and(|q| !q.is_empty())
        });
        let abstain_bits = participation::COM_REC_ABSTAIN | participation::REDUCE_REC_ABSTAIN;
        if pending && (flags ^ self.flags(a)) & abstain_bits != 0 {
            // The CM-5 raises the Yellow com_abstain_changed and leaves the flag alone.
            let mut ni = lock(&self.slots[a].ni);
            ni.cm5.raise(ni_abi::cm5::cause::COM_ABSTAIN_CHANGED);
            ni.update_interrupts();
            return Err(Status::AbstainChanged);
        }
        self.nodes[a].participation = flags;
        self.mirror_participation(a);
        Ok(())
    }

    /// NI `a`'s driver changed an abstain flag through its registers, which hold it already
    /// ([`State::flags`]): rounds that waited for it may be complete now.
    pub(super) fn participation_changed(&mut self, a: usize) {
        if let Some((name, _, _)) = self.partition_of(a) {
            self.advance(&name);
        }
    }

    /// Show NI `a`'s participation flags in its CM-5 registers, where [`State::flags`]
    /// reads the abstain bits back.
    pub(super) fn mirror_participation(&mut self, a: usize) {
        let p = self.nodes[a].participation;
        let mut ni = lock(&self.slots[a].ni);
        let com = (p & 3) as u64;
        let bc = ((p >> 2) & 1) as u64;
        let sg = ((p >> 3) & 1) as u64;
        let cm5 = &mut ni.cm5.regs;
        cm5.set(ni_abi::cm5::COM_BASE + ni_abi::cm5::iface::CONTROL, com);
        cm5.set(ni_abi::cm5::BC_BASE + ni_abi::cm5::iface::CONTROL, bc);
        cm5.set(ni_abi::cm5::NI_SYNC_GLOBAL_ABSTAIN, sg);
    }

    /// Join the round of kind `k` that `a`'s request belongs to.
    pub(super) fn join(
        &mut self,
        a: usize,
        k: Kind,
        r: &Request,
    ) -> Result<Option<Completion>, Status> {
        self.join_door(a, k, r, Door::FastPath, [0; MAX_WORDS])
    }

    /// Join through `door`; a combine through the registers brings its `words`.
    pub(super) fn join_door(
        &mut self,
        a: usize,
        k: Kind,
        r: &Request,
        door: Door,
        words: [u32; MAX_WORDS],
    ) -> Result<Option<Completion>, Status> {
        let (name, members, rank) = self.partition_of(a).ok_or(Status::OutOfPartition)?;
        let spans = self.spans_hosts(&members);
        if spans {
            self.span_check(&members, k, r)?;
        }
        let size = members.len();
        let flags = self.flags(a);
        // Whoever the round needs must be there to join it at all.
        if members.iter().any(|&m| !self.nodes[m as usize].ready) {
            return Err(Status::PeerDown);
        }
        // The control network reaches every member through its port.
        if members.iter().any(|&m| !self.nodes[m as usize].port.up()) {
            return Err(Status::LinkDown);
        }
        let mut entry = Entry {
            node: a,
            req: *r,
            words,
            door,
        };
        match k {
            Kind::Combine => {
                let pattern = Pattern::from_bits((r.flags & cflag::PATTERN_MASK) as u32);
                let combiner = Combiner::from_bits(r.access).ok_or(Status::BadDescriptor)?;
                if !cm5c::legal(pattern, combiner, r.len as usize) {
                    return Err(Status::BadDescriptor);
                }
                if self.colls.get(&name).is_some_and(|pc| pc.collided) {
                    return Err(Status::Collision);
                }
                if flags & participation::COM_REC_ABSTAIN != 0 {
                    if r.flags & cflag::RECEIVE_ONLY != 0
                        && pattern == Pattern::Reduce
                        && flags & participation::REDUCE_REC_ABSTAIN == 0
                    {
                        return self.receive_only(a, &name, size, rank, entry);
                    }
                    return Err(Status::Abstaining);
                }
                if door == Door::FastPath {
                    entry.words = read_words(self, a, r)?;
                    // The result goes back over the words: they must be writable too.
                    read_dma(&self.nodes[a].dma)
                        .check(r.addr, r.len * 4, true)
                        .map_err(|_| Status::NotRegistered)?;
                }
            }
            Kind::Sync => {
                if flags & participation::SYNC_GLOBAL_ABSTAIN != 0 {
                    return Err(Status::Abstaining);
                }
            }
            // The registers checked abstaining when the flush was written; the flag may
            // have changed since, which is the driver's right.
            Kind::Flush => {
                if door == Door::FastPath && flags & participation::COM_REC_ABSTAIN != 0 {
                    return Err(Status::Abstaining);
                }
            }
            Kind::Vector => self.check_vector(a, r, size)?,
        }
        let pc = self.colls.entry(name.clone()).or_default();
        pc.sized(size);
        let rs = pc.rounds(k, size);
        // A member that was abstaining while rounds completed without it joins the oldest
        // round still open, never one that is over.
        let seq = rs.next[rank].max(rs.base);
        rs.next[rank] = seq + 1;
        let idx = (seq - rs.base) as usize;
        while rs.rounds.len() <= idx {
            rs.rounds.push_back(Round {
                entries: vec![None; size],
                started: Instant::now(),
                data: HashMap::new(),
            });
        }
        rs.rounds[idx].entries[rank] = Some(entry);
        if spans {
            // The other hosts' fabrics keep the same rounds and complete them alike.
            self.span_join(&name, &members, k, seq, rank, &entry);
        }
        let nodes = &mut self.nodes[a].counters;
        match k {
            Kind::Combine => nodes.combines += 1,
            Kind::Vector => nodes.collectives += 1,
            Kind::Sync => nodes.sync_globals += 1,
            Kind::Flush => {}
        }
        self.nodes[a].outstanding += 1;
        self.advance(&name);
        Ok(None)
    }

    fn receive_only(
        &mut self,
        a: usize,
        name: &str,
        size: usize,
        rank: usize,
        entry: Entry,
    ) -> Result<Option<Completion>, Status> {
        read_dma(&self.nodes[a].dma)
            .check(entry.req.addr, entry.req.len * 4, true)
            .map_err(|_| Status::NotRegistered)?;
        let pc = self.colls.entry(name.to_string()).or_default();
        pc.sized(size);
        pc.receive_only[rank].push_back(entry);
        self.nodes[a].outstanding += 1;
        self.deliver_receive_only(name);
        Ok(None)
    }

    fn check_vector(&self, a: usize, r: &Request, size: usize) -> Result<(), Status> {
        let d = r.access & 0xFF;
        let o = (r.access >> 8) & 0xFF;
        let esize = dtype::size(d).ok_or(Status::BadDescriptor)?;
        if o > redop::XOR || (o >= redop::AND && matches!(d, dtype::F32 | dtype::F64)) {
            return Err(Status::BadDescriptor);
        }
        if r.flags > coll::ALLGATHER {
            return Err(Status::BadDescriptor);
        }
        if matches!(r.flags, coll::BCAST | coll::REDUCE) && r.rank as usize >= size {
            return Err(Status::OutOfPartition);
        }
        let bytes = r.len.checked_mul(esize).ok_or(Status::BadLength)?;
        let total = bytes.checked_mul(size as u64).ok_or(Status::BadLength)?;
        if total > ni_abi::fastpath::MAX_TRANSFER {
            return Err(Status::BadLength);
        }
        let dma = read_dma(&self.nodes[a].dma);
        let check = |addr: u64, len: u64, write: bool| {
            if len == 0 {
                Ok(())
            } else {
                dma.check(addr, len, write)
                    .map_err(|_| Status::NotRegistered)
            }
        };
        let (_, rank) = self.partitions.of(a as u32).ok_or(Status::OutOfPartition)?;
        match r.flags {
            coll::BARRIER => Ok(()),
            coll::BCAST => check(r.addr, bytes, rank != r.rank),
            coll::REDUCE => {
                check(r.addr, bytes, false)?;
                if rank == r.rank {
                    check(r.tag, bytes, true)
                } else {
                    Ok(())
                }
            }
            coll::ALLGATHER => {
                check(r.addr, bytes, false)?;
                check(r.tag, total, true)
            }
            _ => {
                check(r.addr, bytes, false)?;
                check(r.tag, bytes, true)
            }
        }
    }

    /// The partition's message count: sends taken from rings and not yet received.
    fn message_count(&self, members: &[u32]) -> usize {
        let here: usize = members
            .iter()
            .filter(|&&m| self.other_host(m as usize).is_none())
            .map(|&m| {
                let m = m as usize;
                // Register-level Data Network messages still in their sender's FIFO count
                // too (§3.5.6): one network, whichever door.
                self.nodes[m].unexpected.len() + lock(&self.slots[m].ni).cm5.data.out_len()
            })
            .sum();
        // And what our members sent to other hosts that is not received there yet, and
        // what other hosts sent ours that waits here for room (`remote.rs`, `doors.rs`).
        here + self.in_flight_across(members)
    }

    /// Complete every round of `name` that can complete, in start order.
    pub(super) fn advance(&mut self, name: &str) {
        let Some(members) = self
            .partitions
            .list()
            .find(|p| p.name == name)
            .map(|p| p.nodes.clone())
        else {
            return;
        };
        for k in [Kind::Flush, Kind::Combine, Kind::Vector, Kind::Sync] {
            loop {
                let (ready, seq, done) = {
                    let Some(pc) = self.colls.get(name) else {
                        return;
                    };
                    let Some(rs) = pc.rounds.get(&k) else { break };
                    let Some(round) = rs.rounds.front() else {
                        break;
                    };
                    let done = k == Kind::Combine && network_done(round);
                    (self.round_ready(k, round, &members), rs.base, done)
                };
                // Network-done across hosts also waits for every other host to be quiet. Once
                // this host said it is quiet, that stands: a member of a host that has
                // completed the round may send again, and what it sends is not this round's.
                let across = done && self.spans_hosts(&members);
                let ready = ready || across && self.quiet_declared(name, seq);
                if !ready || across && !self.span_quiet(name, seq) {
                    break;
                }
                let pc = self.colls.get_mut(name).unwrap();
                let rs = pc.rounds.get_mut(&k).unwrap();
                let round = rs.rounds.pop_front().unwrap();
                rs.base += 1;
                self.complete_round(name, k, round, &members);
            }
        }
    }

    /// Whether a round of kind `k` waits for NI `node` (CM-5 abstainers are not waited for).
    pub(super) fn round_needs(&self, k: Kind, node: usize) -> bool {
        let f = self.flags(node);
        match k {
            Kind::Combine => f & participation::COM_REC_ABSTAIN == 0,
            Kind::Sync => f & participation::SYNC_GLOBAL_ABSTAIN == 0,
            Kind::Vector | Kind::Flush => true,
        }
    }

    fn round_ready(&self, k: Kind, round: &Round, members: &[u32]) -> bool {
        let needed = |rank: usize| self.round_needs(k, members[rank] as usize);
        let all = (0..members.len()).all(|r| !needed(r) || round.entries[r].is_some());
        if !all {
            return false;
        }
        // Network-done also waits for every counted message to have arrived.
        if k == Kind::Combine && network_done(round) {
            return self.message_count(members) == 0;
        }
        true
    }

    fn finish_entry(&mut self, e: &Entry, c: Completion) {
        self.nodes[e.node].outstanding = self.nodes[e.node].outstanding.saturating_sub(1);
        if e.door == Door::Registers {
            self.finish_registers(e, &c);
            return;
        }
        if c.status != Status::Ok as u16 {
            let status = Status::from_u16(c.status).unwrap_or(Status::BadDescriptor);
            self.fail(e.node, &e.req, status);
        } else {
            self.complete(e.node, c);
        }
    }

    fn result(e: &Entry, status: Status) -> Completion {
        Completion {
            opcode: e.req.opcode,
            status: status as u16,
            rank: e.req.rank,
            user: e.req.user,
            len: e.req.len,
            tag: e.req.tag,
            ..Default::default()
        }
    }

    fn complete_round(&mut self, name: &str, k: Kind, round: Round, members: &[u32]) {
        let entries: Vec<Entry> = round.entries.iter().flatten().copied().collect();
        tracing::debug!(
            partition = name,
            ?k,
            joined = ?round.entries.iter().map(|e| e.is_some()).collect::<Vec<_>>(),
            "round complete"
        );
        // Everyone in a round must have asked for the same operation.
        let same = |a: &Request, b: &Request| match k {
            Kind::Combine => {
                a.flags & cflag::PATTERN_MASK == b.flags & cflag::PATTERN_MASK
                    && a.access == b.access
                    && a.len == b.len
            }
            Kind::Vector => {
                a.flags == b.flags && a.access == b.access && a.len == b.len && a.rank == b.rank
            }
            Kind::Sync | Kind::Flush => true,
        };
        if let Some(first) = entries.first() {
            if entries.iter().any(|e| !same(&e.req, &first.req)) {
                self.collision(name, k, &entries, members);
                return;
            }
        }
        match k {
            Kind::Flush => {
                // Reset the combine hardware: pending combines are gone, collisions cleared.
                self.cancel_kind(name, Kind::Combine, Status::Cancelled);
                if let Some(pc) = self.colls.get_mut(name) {
                    pc.collided = false;
                }
                for e in &entries {
                    self.finish_entry(e, Self::result(e, Status::Ok));
                }
            }
            Kind::Sync => {
                let or = entries.iter().any(|e| e.req.tag & 1 != 0);
                for e in &entries {
                    let mut c = Self::result(e, Status::Ok);
                    c.tag = or as u64;
                    self.finish_entry(e, c);
                }
            }
            Kind::Combine => self.complete_combine(name, &round, members),
            Kind::Vector => self.complete_vector(&round, members),
        }
    }

    fn collision(&mut self, name: &str, k: Kind, entries: &[Entry], members: &[u32]) {
        tracing::warn!(partition = name, ?k, "collective collision");
        if k == Kind::Combine {
            if let Some(pc) = self.colls.get_mut(name) {
                pc.collided = true;
            }
            let members: Vec<usize> = members.iter().map(|&m| m as usize).collect();
            self.raise_collision(&members);
        }
        for e in entries {
            self.finish_entry(e, Self::result(e, Status::Collision));
        }
    }

    fn complete_combine(&mut self, name: &str, round: &Round, members: &[u32]) {
        let first = round
            .entries
            .iter()
            .flatten()
            .next()
            .copied()
            .expect("a round has an entry");
        let pattern = Pattern::from_bits((first.req.flags & cflag::PATTERN_MASK) as u32);
        let combiner = Combiner::from_bits(first.req.access).expect("checked at join");
        let len = first.req.len as usize;
        let ms: Vec<Member> = (0..members.len())
            .map(|r| {
                let f = self.flags(members[r] as usize);
                match round.entries[r] {
                    Some(e) => Member {
                        words: e.words,
                        scan_start: e.req.flags & cflag::SCAN_START != 0,
                        abstain: false,
                        reduce_rec_abstain: f & participation::REDUCE_REC_ABSTAIN != 0,
                    },
                    None => Member {
                        abstain: true,
                        reduce_rec_abstain: f & participation::REDUCE_REC_ABSTAIN != 0,
                        ..Default::default()
                    },
                }
            })
            .collect();
        let outcomes = cm5c::combine(pattern, combiner, len, &ms);
        for (r, o) in outcomes.iter().enumerate() {
            match round.entries[r] {
                Some(e) => {
                    if pattern == Pattern::RouterDone {
                        self.nodes[e.node].counters.network_done += 1;
                    }
                    let mut c = Self::result(&e, Status::Ok);
                    if let Some(words) = o.result {
                        if e.door == Door::Registers {
                            self.com_result(e.node, &words[..len], o.overflow);
                        } else {
                            let bytes: Vec<u8> =
                                words[..len].iter().flat_map(|w| w.to_le_bytes()).collect();
                            let _ = read_dma(&self.nodes[e.node].dma).write(e.req.addr, &bytes);
                            c.aux |= cflag::HAS_RESULT;
                        }
                    }
                    if o.overflow {
                        c.aux |= cflag::OVERFLOW;
                    }
                    self.finish_entry(&e, c);
                }
                // An abstainer driving the registers that takes reductions gets the result
                // in its COM receive FIFO (§4.2.10).
                None if o.result.is_some()
                    && pattern == Pattern::Reduce
                    && self.nodes[members[r] as usize].cm5_registers =>
                {
                    let words = o.result.expect("checked");
                    self.com_result(members[r] as usize, &words[..len], o.overflow);
                }
                // An abstainer that still takes reductions: queue the result for it (its
                // own host does, if that is another).
                None if o.result.is_some()
                    && pattern == Pattern::Reduce
                    && self.other_host(members[r] as usize).is_none() =>
                {
                    if let Some(pc) = self.colls.get_mut(name) {
                        pc.reduce_results[r].push_back((*o, len as u64));
                    }
                }
                None => {}
            }
        }
        self.deliver_receive_only(name);
    }

    fn deliver_receive_only(&mut self, name: &str) {
        let Some(pc) = self.colls.get_mut(name) else {
            return;
        };
        let mut ready = Vec::new();
        for r in 0..pc.receive_only.len() {
            while !pc.receive_only[r].is_empty() && !pc.reduce_results[r].is_empty() {
                let e = pc.receive_only[r].pop_front().unwrap();
                let (o, len) = pc.reduce_results[r].pop_front().unwrap();
                ready.push((e, o, len));
            }
        }
        for (e, o, len) in ready {
            let n = len.min(e.req.len) as usize;
            let mut c = Self::result(&e, Status::Ok);
            if let Some(words) = o.result {
                let bytes: Vec<u8> = words[..n].iter().flat_map(|w| w.to_le_bytes()).collect();
                let _ = read_dma(&self.nodes[e.node].dma).write(e.req.addr, &bytes);
                c.aux |= cflag::HAS_RESULT;
            }
            if o.overflow {
                c.aux |= cflag::OVERFLOW;
            }
            self.finish_entry(&e, c);
        }
    }

    fn complete_vector(&mut self, round: &Round, members: &[u32]) {
        let entries: Vec<Entry> = round
            .entries
            .iter()
            .map(|e| e.expect("every member joined"))
            .collect();
        let result = self.run_vector(&entries, &round.data);
        let bytes = entries[0].req.len * dtype::size(entries[0].req.access & 0xFF).unwrap_or(0);
        for e in &entries {
            match result {
                Ok(()) => {
                    self.nodes[e.node].counters.collective_bytes += bytes;
                    self.finish_entry(e, Self::result(e, Status::Ok));
                }
                Err((status, culprit)) => {
                    let mut c = Self::result(e, status);
                    c.rank = culprit;
                    self.finish_entry(e, c);
                }
            }
        }
        let _ = members;
    }

    /// Move the data of a completed vector round. On a fault, which rank faulted.
    fn run_vector(
        &self,
        e: &[Entry],
        remote: &HashMap<usize, Vec<u8>>,
    ) -> Result<(), (Status, u32)> {
        let r0 = e[0].req;
        let kind = r0.flags;
        let d = r0.access & 0xFF;
        let o = (r0.access >> 8) & 0xFF;
        let esize = dtype::size(d).unwrap() as usize;
        let bytes = r0.len as usize * esize;
        let p = e.len();
        let dmas: Vec<_> = e
            .iter()
            .map(|x| read_dma(&self.nodes[x.node].dma))
            .collect();
        let fault = |rank: usize| (Status::NotRegistered, rank as u32);
        let elsewhere: Vec<bool> = e
            .iter()
            .map(|x| self.other_host(x.node).is_some())
            .collect();
        let read = |rank: usize, addr: u64, buf: &mut [u8]| {
            if elsewhere[rank] {
                // Its contribution came with its JOIN; its host checked it.
                let at = addr.wrapping_sub(e[rank].req.addr) as usize;
                let src = remote
                    .get(&rank)
                    .and_then(|d| d.get(at..at + buf.len()))
                    .ok_or_else(|| fault(rank))?;
                buf.copy_from_slice(src);
                return Ok(());
            }
            dmas[rank].read(addr, buf).map_err(|_| fault(rank))
        };
        let write = |rank: usize, addr: u64, buf: &[u8]| {
            if elsewhere[rank] {
                // Its host writes its result.
                return Ok(());
            }
            dmas[rank].write(addr, buf).map_err(|_| fault(rank))
        };
        match kind {
            coll::BARRIER => Ok(()),
            coll::BCAST => {
                let root = r0.rank as usize;
                let mut buf = vec![0u8; CHUNK.min(bytes)];
                for at in (0..bytes).step_by(CHUNK) {
                    let n = CHUNK.min(bytes - at);
                    read(root, e[root].req.addr + at as u64, &mut buf[..n])?;
                    for (r, x) in e.iter().enumerate() {
                        if r != root {
                            write(r, x.req.addr + at as u64, &buf[..n])?;
                        }
                    }
                }
                Ok(())
            }
            coll::ALLGATHER => {
                let mut buf = vec![0u8; CHUNK.min(bytes)];
                for (src, x) in e.iter().enumerate() {
                    for at in (0..bytes).step_by(CHUNK) {
                        let n = CHUNK.min(bytes - at);
                        read(src, x.req.addr + at as u64, &mut buf[..n])?;
                        for (r, y) in e.iter().enumerate() {
                            write(r, y.req.tag + (src * bytes + at) as u64, &buf[..n])?;
                        }
                    }
                }
                Ok(())
            }
            _ => {
                let mut acc = vec![0u8; CHUNK.min(bytes)];
                let mut x = vec![0u8; CHUNK.min(bytes)];
                for at in (0..bytes).step_by(CHUNK) {
                    let n = CHUNK.min(bytes - at);
                    match kind {
                        coll::SCAN | coll::EXSCAN => {
                            identity(d, o, &mut acc[..n]);
                            for (r, y) in e.iter().enumerate() {
                                read(r, y.req.addr + at as u64, &mut x[..n])?;
                                if kind == coll::EXSCAN {
                                    write(r, y.req.tag + at as u64, &acc[..n])?;
                                }
                                if r == 0 {
                                    acc[..n].copy_from_slice(&x[..n]);
                                } else {
                                    apply(d, o, &mut acc[..n], &x[..n]);
                                }
                                if kind == coll::SCAN {
                                    write(r, y.req.tag + at as u64, &acc[..n])?;
                                }
                            }
                        }
                        _ => {
                            // Reduce and allreduce: rank order, one result.
                            read(0, e[0].req.addr + at as u64, &mut acc[..n])?;
                            for (r, y) in e.iter().enumerate().skip(1) {
                                read(r, y.req.addr + at as u64, &mut x[..n])?;
                                apply(d, o, &mut acc[..n], &x[..n]);
                            }
                            if kind == coll::REDUCE {
                                let root = r0.rank as usize;
                                write(root, e[root].req.tag + at as u64, &acc[..n])?;
                            } else {
                                for (r, y) in e.iter().enumerate() {
                                    write(r, y.req.tag + at as u64, &acc[..n])?;
                                }
                            }
                        }
                    }
                }
                let _ = p;
                Ok(())
            }
        }
    }

    /// SYNC_GLOBAL and flush share `join`; ASYNC_GLOBAL updates the OR at once.
    pub(super) fn async_global(
        &mut self,
        a: usize,
        r: &Request,
    ) -> Result<Option<Completion>, Status> {
        self.set_global(a, false, r.tag & 1 != 0)?;
        Ok(super::ops::done(r))
    }

    /// NI `a`'s `global_send` is `bit` (§4.3.3): every member's `global_rec` follows the OR
    /// at once, in its control page and its registers; a rise interrupts where enabled.
    /// `sup`: the supervisor async global instead, which only the registers show.
    pub(super) fn set_global(&mut self, a: usize, sup: bool, bit: bool) -> Result<(), Status> {
        let (name, members, rank) = self.partition_of(a).ok_or(Status::OutOfPartition)?;
        if self.spans_hosts(&members) {
            self.span_global(&name, &members, rank, sup, bit);
        }
        self.apply_global(&name, &members, rank, sup, bit);
        Ok(())
    }

    /// Member `rank` of partition `name` set its async global `sup` to `bit`: update every
    /// member here.
    pub(super) fn apply_global(
        &mut self,
        name: &str,
        members: &[u32],
        rank: usize,
        sup: bool,
        bit: bool,
    ) {
        let name = name.to_string();
        let members = members.to_vec();
        let (or, rose) =
            self.colls.entry(name).or_default().globals[sup as usize].set(members.len(), rank, bit);
        for &m in &members {
            let m = m as usize;
            if !sup {
                if let Some(sram) = self.nodes[m].live_sram() {
                    sram.store_u32(ni_abi::fastpath::ctrl::GLOBAL_REC, or as u32);
                }
            }
            {
                let mut ni = lock(&self.slots[m].ni);
                if ni.cm5.global_rec(sup, or, rose) {
                    ni.update_interrupts();
                }
            }
            if !sup
                && rose
                && self.flags(m) & participation::GLOBAL_REC_IE != 0
                && self.nodes[m].live
            {
                self.complete(
                    m,
                    Completion {
                        opcode: op::GLOBAL_REC,
                        status: Status::Ok as u16,
                        tag: 1,
                        ..Default::default()
                    },
                );
            }
        }
    }

    /// A combine result for NI `m`'s COM receive FIFO.
    fn com_result(&mut self, m: usize, words: &[u32], overflow: bool) {
        let mut ni = lock(&self.slots[m].ni);
        let was_empty = !ni.cm5.com.rec_ok();
        if !ni.cm5.com.result(words, overflow) {
            ni.counters.cm5_com_overruns += 1;
            return;
        }
        let pr = ni
            .cm5
            .regs
            .get(ni_abi::cm5::COM_BASE + ni_abi::cm5::iface::PRIVATE) as u32;
        if was_empty && pr & ni_abi::cm5::private::REC_OK_IE != 0 {
            ni.cm5.raise_green(ni_abi::cm5::green::COM_REC_OK);
        }
        ni.update_interrupts();
    }

    /// Where a round's outcome goes for a member that came through the registers:
    /// `router_done_complete`, `ni_sync_global`, `flush_complete` (a combine's result went
    /// to its COM receive FIFO already, `com_result`).
    pub(super) fn finish_registers(&mut self, e: &Entry, c: &Completion) {
        use ni_abi::cm5;
        let ok = c.status == Status::Ok as u16;
        match e.req.opcode {
            op::COMBINE => {
                let pattern = Pattern::from_bits((e.req.flags & cflag::PATTERN_MASK) as u32);
                if pattern == Pattern::RouterDone {
                    let mut ni = lock(&self.slots[e.node].ni);
                    ni.cm5.router_done = true;
                    let ie = ni.cm5.regs.get(cm5::DR_BASE + cm5::iface::PRIVATE) as u32
                        & cm5::private::RDONE_COMPLETE_IE;
                    if ok && ie != 0 {
                        ni.cm5.raise(cm5::cause::RDONE_COMPLETE);
                        ni.update_interrupts();
                    }
                }
            }
            op::SYNC_GLOBAL => {
                let or = ok && c.tag & 1 != 0;
                let mut ni = lock(&self.slots[e.node].ni);
                let was = ni.cm5.regs.get(cm5::NI_SYNC_GLOBAL) & 1 != 0;
                ni.cm5.regs.set(cm5::NI_SYNC_GLOBAL, 2 | or as u64);
                let ie = ni.cm5.regs.get(cm5::NI_HODGEPODGE) as u32
                    & cm5::hodgepodge::SYNC_GLOBAL_REC_IE;
                if or && !was && ie != 0 {
                    ni.cm5.raise_green(cm5::green::SYNC_GLOBAL_REC);
                }
                ni.update_interrupts();
            }
            op::COM_FLUSH => {
                let mut ni = lock(&self.slots[e.node].ni);
                let h =
                    ni.cm5.regs.get(cm5::NI_HODGEPODGE) | cm5::hodgepodge::FLUSH_COMPLETE as u64;
                ni.cm5.regs.set(cm5::NI_HODGEPODGE, h);
            }
            _ => {}
        }
        if ok {
            return;
        }
        self.nodes[e.node].counters.coll_failed_registers += 1;
        // The handbook's only word for a control network that cannot finish an operation
        // is the Red `cn hard error` (B.1.3): a driver waiting for a combine result that
        // will never come learns it this way. A collision has its own cause already
        // (bc_or_com_collision on every member).
        if c.status != Status::Collision as u16 {
            let mut ni = lock(&self.slots[e.node].ni);
            ni.cm5.raise(cm5::cause::CN_HARD_ERROR);
            ni.update_interrupts();
        }
    }

    fn cancel_kind(&mut self, name: &str, k: Kind, status: Status) {
        let Some(pc) = self.colls.get_mut(name) else {
            return;
        };
        let Some(rs) = pc.rounds.get_mut(&k) else {
            return;
        };
        let entries: Vec<Entry> = rs
            .rounds
            .drain(..)
            .flat_map(|r| r.entries.into_iter().flatten())
            .collect();
        rs.base = 0;
        rs.next.iter_mut().for_each(|n| *n = 0);
        // What other hosts were told or told us of these rounds is over with them.
        if let Some(pid) = self.partitions.get(name).map(|p| p.id) {
            self.forget_span_rounds(pid, k);
        }
        for e in entries {
            self.finish_entry(&e, Self::result(&e, status));
        }
    }

    /// Fail everything pending in the partition of NI `x` and restart its sequences.
    pub(super) fn reset_partition_colls(&mut self, x: usize, status: Status) {
        let Some((name, _, _)) = self.partition_of(x) else {
            return;
        };
        for k in [Kind::Combine, Kind::Vector, Kind::Sync, Kind::Flush] {
            self.cancel_kind(&name, k, status);
        }
        let Some(pc) = self.colls.get_mut(&name) else {
            return;
        };
        let waiting: Vec<Entry> = pc
            .receive_only
            .iter_mut()
            .flat_map(|q| q.drain(..))
            .collect();
        pc.reduce_results.iter_mut().for_each(|q| q.clear());
        for e in waiting {
            self.finish_entry(&e, Self::result(&e, status));
        }
    }

    /// Fail rounds that waited longer than the collective timeout; re-check network-done.
    pub(super) fn poll_collectives(&mut self) -> bool {
        let limit = self.coll_timeout();
        let mut expired = Vec::new();
        let mut names = Vec::new();
        for (name, pc) in &self.colls {
            names.push(name.clone());
            for rs in pc.rounds.values() {
                if let Some(r) = rs.rounds.front() {
                    if r.started.elapsed() > limit {
                        if let Some(e) = r.entries.iter().flatten().next() {
                            expired.push(e.node);
                        }
                    }
                }
            }
        }
        for n in &expired {
            tracing::warn!(ni = n, "collective round timed out after {limit:?}");
            self.reset_partition_colls(*n, Status::Timeout);
        }
        // Network-done rounds complete when the message count drains.
        for name in names {
            self.advance(&name);
        }
        !expired.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float_sums_combine_in_rank_order() {
        // (1e16 + 1) + -1e16 = 0 in f64, while 1e16 + (1 + -1e16) = 2: rank order decides.
        let vals = [1e16f64, 1.0, -1e16];
        let mut acc = vals[0].to_le_bytes().to_vec();
        for v in &vals[1..] {
            apply(dtype::F64, redop::SUM, &mut acc, &v.to_le_bytes());
        }
        assert_eq!(f64::from_le_bytes(acc.try_into().unwrap()), 0.0);
    }

    #[test]
    fn identities_leave_values_unchanged() {
        for (d, o, v) in [
            (dtype::I32, redop::MIN, (-5i32).to_le_bytes().to_vec()),
            (dtype::U64, redop::AND, 0xDEADu64.to_le_bytes().to_vec()),
            (dtype::F32, redop::PROD, 2.5f32.to_le_bytes().to_vec()),
            (dtype::I64, redop::MAX, i64::MIN.to_le_bytes().to_vec()),
        ] {
            let mut acc = vec![0u8; v.len()];
            identity(d, o, &mut acc);
            apply(d, o, &mut acc, &v);
            assert_eq!(acc, v, "dtype {d} op {o}");
        }
    }
}
