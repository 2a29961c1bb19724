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
use crate::cm5::com::Event;
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
            if let Some((j, hops)) = dest {
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
        let ni = lock(&self.slots[i].ni);
        if ni.cm5.data.out_len() == 0 && ni.cm5.com.events.is_empty() {
            // Senders set it under this lock after queueing: nothing is missed.
            self.cm5_pending[i].store(false, Ordering::Release);
        }
        work
    }

    /// Take NI `i`'s control-network events (`cm5/com.rs`) into the partition's rounds,
    /// in order. An event that finds a member not yet started stays first, for the next
    /// pass: the control network waits for the whole partition.
    fn pump_control(&mut self, i: usize) -> bool {
        let mut work = false;
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
                Event::Participation(f) => {
                    let f = (self.nodes[i].participation & !0xF) | (f & 0xF);
                    (self.set_participation(i, f).map(|_| None), None)
                }
                Event::AsyncGlobal(bit) => (self.set_global(i, bit).map(|_| None), None),
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
