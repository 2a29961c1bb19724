//! The CM-5 Data Network between NIs (NI Programmer's Handbook ch. 3): what an NI's
//! registers sent (`cm5/data.rs`) goes to the receive FIFO its physical address names.
//!
//! The daemon plays the CM-5 operating system that sets up partitions (§6.3): it lays every
//! partition out in the CM-5 physical address space one after the other (partition `P`'s
//! member `r` is physical address `base(P) + r`, `base(P)` the sizes of the partitions
//! before it, in name order) and programs each member's `ni_physical_self`,
//! `ni_partition_base`, `ni_partition_size`, `ni_chunk_size` and an identity chunk table,
//! so relative address `r` is rank `r`. A message reaches only a member of its sender's own
//! partition, whatever a supervisor wrote into those registers, and only over a link that
//! is up; anything else is dropped and counted (`cm5_dr_dropped`).

use std::sync::atomic::Ordering;

use ni_abi::cm5;
use ni_abi::fastpath::{combine as cflag, op, Completion, Request, Status};

use super::collective::{Door, Entry, Kind};
use super::State;
use crate::cm5::bc::Which;
use crate::cm5::com::Event;
use crate::cm5::Cm5;
use crate::server::lock;

/// Messages moved from one NI per pass, so one busy sender cannot starve the others.
const BATCH: usize = 64;

impl State {
    /// The first CM-5 physical address of `node`'s partition, and its size.
    pub(super) fn cm5_layout(&self, node: u32) -> Option<(u32, u32)> {
        let (mine, _) = self.partitions.of(node)?;
        let mut base = 0u32;
        for p in self.partitions.list() {
            if p.name == mine.name {
                return Some((base, p.nodes.len() as u32));
            }
            base += p.nodes.len() as u32;
        }
        None
    }

    /// The NI at CM-5 physical address `phys`, if it is in `from`'s partition.
    fn cm5_node(&self, from: u32, phys: u32) -> Option<usize> {
        let (base, size) = self.cm5_layout(from)?;
        let rank = phys.checked_sub(base).filter(|&r| r < size)?;
        self.partitions.resolve(from, rank).map(|n| n as usize)
    }

    /// Program NI `i`'s partition registers as the OS would (§6.3).
    pub(super) fn write_cm5_partition(&mut self, i: usize) {
        let (rank, _) = self.partitions.rank_size(i as u32);
        let Some((base, size)) = self.cm5_layout(i as u32) else {
            return;
        };
        // The smallest chunk size whose 64 chunks cover the partition (§6.3.2).
        let cs = (1..=6u32)
            .find(|s| 64u64 << (2 * s) >= size as u64)
            .unwrap_or(6);
        let mut ni = lock(&self.slots[i].ni);
        let regs = &mut ni.cm5.regs;
        regs.set(cm5::NI_PHYSICAL_SELF, (base + rank) as u64);
        regs.set(cm5::NI_PARTITION_BASE, base as u64);
        regs.set(cm5::NI_PARTITION_SIZE, size as u64);
        regs.set(cm5::NI_CHUNK_SIZE, cs as u64);
        ni.cm5.chunk_table = std::array::from_fn(|n| n as u8);
        // CMOST leaves the supervisor broadcast interface's send_enable on, the user one's
        // off (§4.1.8).
        let sbc = cm5::SBC_BASE + cm5::iface::PRIVATE;
        let v = ni.cm5.regs.get(sbc) | cm5::private::SEND_ENABLE as u64;
        ni.cm5.regs.set(sbc, v);
    }

    /// Move NI `i`'s whole messages into their destinations' receive FIFOs, oldest first,
    /// while they fit. Returns whether anything moved.
    pub(super) fn pump_cm5(&mut self, i: usize) -> bool {
        if !self.cm5_pending[i].load(Ordering::Acquire) {
            return false;
        }
        let mut work = false;
        for _ in 0..BATCH {
            // Only this thread takes from `out`: what it sees first stays first.
            let Some(p) = lock(&self.slots[i].ni).cm5.data.front_out().cloned() else {
                break;
            };
            let dest = self
                .cm5_node(i as u32, p.phys)
                .and_then(|j| self.link(i, j).ok().map(|hops| (j, hops)));
            if let Some((j, hops)) = dest.filter(|&(j, _)| self.other_host(j).is_some()) {
                // Another host's NI: onto the link while this sender has credit there, else
                // it waits in the FIFO for an answer to free one (`doors.rs`).
                if !self.door_cm5(i, j, &p) {
                    break;
                }
                self.wire(i, j, 4 * (1 + p.words.len() as u64), hops);
            } else if let Some((j, hops)) = dest {
                let slot = self.slots[j].clone();
                let delivered = {
                    let mut g = lock(&slot.ni);
                    let nj = &mut *g;
                    let ok = nj.cm5.deliver(p.iface, p.tag, &p.words, &mut nj.counters);
                    if ok {
                        nj.update_interrupts();
                    }
                    ok
                };
                if !delivered {
                    // The receiver's FIFO is full: the message waits in the sender's FIFO
                    // until the receiver reads (which rings the doorbell).
                    break;
                }
                self.wire(i, j, 4 * (1 + p.words.len() as u64), hops);
            }
            let mut ni = lock(&self.slots[i].ni);
            if dest.is_none() {
                ni.counters.cm5_dr_dropped += 1;
            }
            ni.cm5.sent_out();
            ni.update_interrupts();
            work = true;
        }
        work |= self.pump_control(i);
        work |= self.pump_broadcast(i);
        let ni = lock(&self.slots[i].ni);
        let bc_idle = ni.cm5.bc.iter().all(|b| b.queued() == 0) && ni.cm5.interrupt_send == 0;
        if ni.cm5.data.out_len() == 0 && ni.cm5.com.idle() && bc_idle {
            // Senders set it under this lock after queueing: nothing is missed.
            self.cm5_pending[i].store(false, Ordering::Release);
        }
        work
    }

    /// Broadcast NI `i`'s oldest whole BC and SBC messages and its broadcast interrupt to
    /// its partition (§4.1, §5.5). A message goes to every member that receives on that
    /// interface, the sender included, and leaves the sender's FIFO only once all have it;
    /// it waits while some receiver lacks room. A second member with a broadcast waiting on
    /// the same interface is a collision (B.3.5): `bc_or_com_collision` on every member, and
    /// no broadcast moves while any member still has it set.
    fn pump_broadcast(&mut self, i: usize) -> bool {
        let Some((_, members, _)) = self.partition_of(i) else {
            return false;
        };
        let members: Vec<usize> = members.into_iter().map(|m| m as usize).collect();
        let mut work = false;
        for w in Which::BOTH {
            match self.broadcast_message(i, w, &members) {
                Ok(moved) => work |= moved,
                Err(raised) => return work | raised,
            }
        }
        work | self
            .broadcast_interrupt(i, &members)
            .unwrap_or_else(|raised| raised)
    }

    /// Deliver NI `i`'s oldest message on interface `w`: whether it moved; `Err` when a
    /// collision stops every broadcast (see [`State::contend`]).
    fn broadcast_message(&mut self, i: usize, w: Which, members: &[usize]) -> Result<bool, bool> {
        let Some(msg) = lock(&self.slots[i].ni).cm5.bc_ready(w).map(<[u32]>::to_vec) else {
            return Ok(false);
        };
        self.contend(i, members, |c| c.bc_ready(w).is_some())?;
        let mut to = Vec::with_capacity(members.len());
        // Other hosts' members get it from their host (`doors.rs`), once per host.
        let (hosts, unreached) = self.hosts_of(members);
        if !self.cm5_credits(i, hosts.len() as u32) {
            return Ok(false);
        }
        for &m in members {
            if self.other_host(m).is_some() {
                continue;
            }
            if !lock(&self.slots[m].ni).cm5.bc_receives(w) {
                continue;
            }
            let Some(hops) = self.reach(i, m) else {
                continue;
            };
            if !lock(&self.slots[m].ni).cm5.bc[w as usize].room(msg.len()) {
                // Wait until the receiver reads, which rings the doorbell.
                return Ok(false);
            }
            to.push((m, hops));
        }
        // The sender's lock is held while the message goes out, so a clear of its
        // collision (which empties its FIFO) is either before (nothing goes) or after.
        let si = self.slots[i].clone();
        let mut gi = lock(&si.ni);
        if gi.cm5.collided() || gi.cm5.bc_ready(w) != Some(&msg[..]) {
            return Ok(false);
        }
        for &(m, hops) in &to {
            if m == i {
                gi.cm5.bc_arrive(w, &msg);
                gi.counters.cm5_bc_recvs += 1;
                continue;
            }
            let mut g = lock(&self.slots[m].ni);
            let nm = &mut *g;
            nm.cm5.bc_arrive(w, &msg);
            nm.counters.cm5_bc_recvs += 1;
            nm.update_interrupts();
            drop(g);
            self.wire(i, m, 4 * msg.len() as u64, hops);
        }
        gi.cm5.bc[w as usize].delivered();
        gi.counters.cm5_bc_sends += 1;
        gi.counters.cm5_bc_unreached += unreached;
        gi.update_interrupts();
        drop(gi);
        for (h, m) in hosts {
            self.door_cm5_bc(i, h, m, w, &msg, 0);
        }
        Ok(true)
    }

    /// Deliver NI `i`'s broadcast interrupt "to all other NIs in the current partition"
    /// (§5.5): whether it went; `Err` when a collision stops it.
    fn broadcast_interrupt(&mut self, i: usize, members: &[usize]) -> Result<bool, bool> {
        let colours = lock(&self.slots[i].ni).cm5.interrupt_send;
        if colours == 0 {
            return Ok(false);
        }
        self.contend(i, members, |c| c.interrupt_send != 0)?;
        let (hosts, unreached) = self.hosts_of(members);
        if !self.cm5_credits(i, hosts.len() as u32) {
            return Ok(false);
        }
        let here: Vec<usize> = members
            .iter()
            .filter(|&&m| m != i && self.other_host(m).is_none())
            .copied()
            .collect();
        let to: Vec<usize> = here
            .iter()
            .filter(|&&m| self.reach(i, m).is_some())
            .copied()
            .collect();
        let si = self.slots[i].clone();
        let mut gi = lock(&si.ni);
        if gi.cm5.collided() || gi.cm5.interrupt_send != colours {
            return Ok(false);
        }
        for m in to {
            let mut ni = lock(&self.slots[m].ni);
            ni.cm5.broadcast_interrupt(colours);
            ni.update_interrupts();
        }
        gi.cm5.interrupt_sent();
        gi.counters.cm5_bc_interrupts += 1;
        gi.counters.cm5_bc_unreached += unreached;
        gi.update_interrupts();
        drop(gi);
        for (h, m) in hosts {
            self.door_cm5_bc(i, h, m, Which::User, &[], colours);
        }
        Ok(true)
    }

    /// NI `i` wants to broadcast (a message, or an interrupt: `wants` says which of the
    /// members' registers want the same). It becomes a member whose collision flag counts.
    /// `Err(false)`: a member still holds a collision; `Err(true)`: another member wants the
    /// same now, which is a collision, raised here (B.3.5).
    fn contend(
        &mut self,
        i: usize,
        members: &[usize],
        wants: impl Fn(&Cm5) -> bool,
    ) -> Result<(), bool> {
        self.nodes[i].cm5_registers = true;
        if self.collided(members) {
            return Err(false);
        }
        if members
            .iter()
            .any(|&m| m != i && wants(&lock(&self.slots[m].ni).cm5))
        {
            self.raise_collision(members);
            return Err(true);
        }
        Ok(())
    }

    /// The hops from NI `i` to `m`; `None` when a port between them is down: `m` does not
    /// hear `i`'s broadcast (counted).
    fn reach(&mut self, i: usize, m: usize) -> Option<u32> {
        let hops = self.link(i, m).ok();
        if hops.is_none() {
            lock(&self.slots[i].ni).counters.cm5_bc_unreached += 1;
        }
        hops
    }

    /// Whether a member driving the registers still has `bc_or_com_collision` set: nothing
    /// is broadcast. Members that are not (libni's, or none attached) never clear it, and
    /// must not hold up the others.
    fn collided(&self, members: &[usize]) -> bool {
        members.iter().any(|&m| {
            self.nodes[m].live
                && self.nodes[m].cm5_registers
                && lock(&self.slots[m].ni).cm5.collided()
        })
    }

    /// `bc_or_com_collision` (Yellow) on every member.
    pub(super) fn raise_collision(&mut self, members: &[usize]) {
        tracing::debug!(?members, "control network collision");
        for &m in members {
            let mut ni = lock(&self.slots[m].ni);
            ni.cm5.raise(cm5::cause::BC_OR_COM_COLLISION);
            ni.update_interrupts();
        }
    }

    /// Take NI `i`'s control-network events (`cm5/com.rs`) into the partition's rounds,
    /// in order. An event that finds a member not yet started stays first, for the next
    /// pass: the control network waits for the whole partition.
    fn pump_control(&mut self, i: usize) -> bool {
        let (changed, global, sup_global) = {
            let mut ni = lock(&self.slots[i].ni);
            let com = &mut ni.cm5.com;
            (
                std::mem::take(&mut com.participation_changed),
                com.async_global.take(),
                com.async_sup_global.take(),
            )
        };
        let mut work = changed || global.is_some() || sup_global.is_some();
        if work {
            self.nodes[i].cm5_registers = true;
            self.nodes[i].ready = true;
        }
        // Latest values: a refusal (no partition) leaves nothing to report.
        if let Some(bit) = global {
            let _ = self.set_global(i, false, bit);
        }
        if let Some(bit) = sup_global {
            let _ = self.set_global(i, true, bit);
        }
        if changed {
            self.participation_changed(i);
        }
        for _ in 0..BATCH {
            let Some(ev) = lock(&self.slots[i].ni).cm5.com.events.front().copied() else {
                break;
            };
            // A driver that uses the control network's registers has started (as one that
            // set up the fast path has, `ops.rs`).
            self.nodes[i].cm5_registers = true;
            self.nodes[i].ready = true;
            let req = |opcode: u8, flags: u8, access: u32, len: u64, tag: u64| Request {
                opcode,
                flags,
                access,
                len,
                tag,
                ..Default::default()
            };
            let (r, joined) = match ev {
                Event::Combine {
                    pattern,
                    combiner,
                    len,
                    words,
                    scan_start,
                } => {
                    let flags = pattern as u8 | if scan_start { cflag::SCAN_START } else { 0 };
                    let r = req(op::COMBINE, flags, combiner as u32, len as u64, 0);
                    (
                        self.join_door(i, Kind::Combine, &r, Door::Registers, words),
                        Some(r),
                    )
                }
                Event::SyncGlobal(bit) => {
                    let r = req(op::SYNC_GLOBAL, 0, 0, 0, bit as u64);
                    (
                        self.join_door(i, Kind::Sync, &r, Door::Registers, [0; 5]),
                        Some(r),
                    )
                }
                Event::Flush => {
                    let r = req(op::COM_FLUSH, 0, 0, 0, 0);
                    (
                        self.join_door(i, Kind::Flush, &r, Door::Registers, [0; 5]),
                        Some(r),
                    )
                }
            };
            match r {
                // A member has not started yet: wait for it.
                Err(Status::PeerDown) if joined.is_some() => break,
                Err(status) => {
                    tracing::debug!(ni = i, ?ev, ?status, "control-network event refused");
                    if let Some(r) = joined {
                        let e = Entry {
                            node: i,
                            req: r,
                            words: [0; 5],
                            door: Door::Registers,
                        };
                        let c = Completion {
                            opcode: r.opcode,
                            status: status as u16,
                            ..Default::default()
                        };
                        self.finish_registers(&e, &c);
                    }
                }
                Ok(_) => {}
            }
            lock(&self.slots[i].ni).cm5.com.taken();
            work = true;
        }
        work
    }
}
