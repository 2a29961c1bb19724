//! Carrying MLINK operations to their targets (MIT METRO §11.3, Fig. 11.1).
//!
//! READ, WRITE, NOOP and RESET are handled by the receiving MLINK alone: the target's SRAM
//! and boot state change with no help from its processor. ROP is queued for the target's
//! software: into its libni active-message ring when it has one (the fast path's), else into
//! the MLINK block's register-read queue. A target whose receiver is paused holds the
//! operation, as a blocked METRO path would, for at most `BLOCK_TIMEOUT_MS`.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use ni_abi::fastpath::{AM_HEADER, AM_MAX_PAYLOAD};
use ni_abi::mlink::{
    command, reason, status, status_byte0 as s0, BLOCK_TIMEOUT_MS, QUEUE_DATA_MAX,
};
use ni_abi::pci::vector;

use super::State;
use crate::link::HostId;
use crate::mlink::{Launch, QueuedRop, Reply};
use crate::ni::read_dma;
use crate::server::lock;

/// An operation between its launch and its answer.
#[derive(serde::Serialize, serde::Deserialize)]
pub(super) struct Flight {
    pub(super) a: usize,
    pub(super) x: Launch,
    #[serde(with = "crate::handover::serde_with::instant")]
    pub(super) since: Instant,
}

#[derive(serde::Serialize, serde::Deserialize)]
enum Step {
    Answered(Reply),
    /// The target's receiver is paused: try again next pass.
    Blocked,
    /// Aborted or reset at the source meanwhile: nobody waits for an answer.
    Dropped,
    /// For NI `.0` of host `.1`: carried there (`doors.rs`), which answers.
    Away(usize, HostId),
}

/// What the target made of an operation.
#[derive(serde::Serialize, serde::Deserialize)]
pub(super) enum At {
    /// The answer, and for READ the target's bytes (still to land in the source's SRAM).
    Answered(Reply, Option<Vec<u8>>),
    Blocked,
}

pub(super) fn reply(state: u32, why: u32, byte0: u32) -> Reply {
    Reply {
        state,
        reason: why,
        bytes: [byte0 as u8, why as u8],
        data_checksum: None,
    }
}

impl State {
    /// Take what NI `a` launched. Returns whether there was anything.
    pub(super) fn pump_mlink(&mut self, a: usize) -> bool {
        if !self.mlink_pending[a].swap(false, Ordering::AcqRel) {
            return false;
        }
        let launches = lock(&self.slots[a].ni).mlink.take();
        let now = Instant::now();
        for x in launches {
            self.nodes[a].counters.mlink_ops += 1;
            self.mlink_flights.push_back(Flight { a, x, since: now });
        }
        true
    }

    /// One attempt at every operation in flight. Returns whether any was answered.
    pub(super) fn advance_mlink(&mut self) -> bool {
        let mut work = false;
        for _ in 0..self.mlink_flights.len() {
            let Some(f) = self.mlink_flights.pop_front() else {
                break;
            };
            match self.mlink_step(&f) {
                Step::Blocked => self.mlink_flights.push_back(f),
                Step::Dropped => work = true,
                Step::Away(b, h) => {
                    work = true;
                    self.door_mlink(f, b, h);
                }
                Step::Answered(r) => {
                    work = true;
                    self.mlink_answered(&f, r);
                }
            }
        }
        work
    }

    /// Post the target's answer to the source's link.
    pub(super) fn mlink_answered(&mut self, f: &Flight, r: Reply) {
        let c = &mut self.nodes[f.a].counters;
        match r.state {
            status::ACK => c.mlink_acks += 1,
            status::NACK => c.mlink_nacks += 1,
            _ => c.mlink_unreachable += 1,
        }
        let mut ni = lock(&self.slots[f.a].ni);
        if ni.mlink.finish(&f.x, r) {
            ni.deliver(vector::MLINK);
        }
    }

    /// A READ's bytes from the target land in the source's SRAM (§11.3: the reply's data).
    pub(super) fn mlink_read_back(&mut self, f: &Flight, mut r: Reply, data: &[u8]) -> Reply {
        let (a, x) = (f.a, &f.x);
        let sram_a = lock(&self.slots[a].ni).sram.clone();
        if sram_a.write(x.local as u64, data).is_err() {
            return reply(status::NACK, reason::ADDRESS, r.bytes[0] as u32);
        }
        r.data_checksum = Some(ni_abi::mlink::checksum(data));
        if x.bad_data {
            self.nodes[a].counters.mlink_data_errors += 1;
            r.state = status::NACK;
            r.reason = reason::DATA_CHECKSUM;
            r.bytes[1] = reason::DATA_CHECKSUM as u8;
            // What arrived does not match what the target summed.
            r.data_checksum = r.data_checksum.map(|c| !c);
        }
        r
    }

    fn mlink_step(&mut self, f: &Flight) -> Step {
        let (a, x) = (f.a, &f.x);
        if !lock(&self.slots[a].ni).mlink.current(x) {
            return Step::Dropped;
        }
        let unreachable = Step::Answered(reply(status::REFUSED, reason::UNREACHABLE, 0));
        let Some(b) = self
            .partitions
            .resolve(a as u32, x.target)
            .map(|b| b as usize)
        else {
            return unreachable;
        };
        if let Some(h) = self.other_host(b) {
            return Step::Away(b, h);
        }
        let src_rank = self.partitions.rank_size(a as u32).0;
        match self.mlink_at(a, b, src_rank, x, f.since) {
            At::Blocked => Step::Blocked,
            At::Answered(r, None) => Step::Answered(r),
            At::Answered(r, Some(data)) => Step::Answered(self.mlink_read_back(f, r, &data)),
        }
    }

    /// Operation `x` of NI `a` (rank `src_rank`) arrives at NI `b`, here; `since`: when it
    /// first tried.
    pub(super) fn mlink_at(
        &mut self,
        a: usize,
        b: usize,
        src_rank: u32,
        x: &Launch,
        since: Instant,
    ) -> At {
        let unreachable = At::Answered(reply(status::REFUSED, reason::UNREACHABLE, 0), None);
        if !self.nodes[b].live {
            return unreachable;
        }
        let Ok(hops) = self.link(a, b) else {
            return unreachable;
        };
        let boot_enabled = self
            .partitions
            .of(b as u32)
            .is_some_and(|(p, _)| p.remote_boot);
        let am_ring = self.nodes[b].am.is_some();
        let slot = self.slots[b].clone();
        let mut nb = lock(&slot.ni);
        let m = &nb.mlink;
        let byte0 = s0::PRESENT
            | if m.held() { s0::HELD } else { 0 }
            | if m.queue_full() { s0::QUEUE_FULL } else { 0 }
            | if boot_enabled { s0::BOOT_ENABLED } else { 0 }
            | if m.exposes() { s0::EXPOSED } else { 0 };
        if m.paused() {
            if since.elapsed() < Duration::from_millis(BLOCK_TIMEOUT_MS as u64) {
                return At::Blocked;
            }
            return At::Answered(reply(status::NACK, reason::TIMEOUT, byte0), None);
        }
        let nack = |why| At::Answered(reply(status::NACK, why, byte0), None);
        if x.bad_header {
            // The header cannot be trusted: nothing it names is touched (§4.7.4).
            drop(nb);
            self.nodes[b].counters.mlink_header_errors += 1;
            return nack(reason::HEADER_CHECKSUM);
        }
        let span_ok = |m: &crate::mlink::Mlink| {
            let (at, len) = (x.remote as u64, x.bytes());
            m.exposed(at, len) || (m.held() && boot_enabled && at + len <= ni_abi::lanai::SRAM_SIZE)
        };
        let ack = At::Answered(reply(status::ACK, reason::NONE, byte0), None);
        match x.op {
            command::NOOP => ack,
            command::WRITE => {
                if !span_ok(&nb.mlink) || nb.sram.write(x.remote as u64, &x.data).is_err() {
                    return nack(reason::ADDRESS);
                }
                drop(nb);
                self.wire(a, b, x.bytes(), hops);
                if x.bad_data {
                    // Cut-through: the words were stored as they arrived; only the trailing
                    // checksum tells they are bad.
                    self.nodes[b].counters.mlink_data_errors += 1;
                    return nack(reason::DATA_CHECKSUM);
                }
                ack
            }
            command::READ => {
                let mut data = vec![0u8; x.bytes() as usize];
                if !span_ok(&nb.mlink) || nb.sram.read(x.remote as u64, &mut data).is_err() {
                    return nack(reason::ADDRESS);
                }
                drop(nb);
                self.wire(b, a, x.bytes(), hops);
                At::Answered(reply(status::ACK, reason::NONE, byte0), Some(data))
            }
            command::ROP => {
                if x.bad_data {
                    drop(nb);
                    self.nodes[b].counters.mlink_data_errors += 1;
                    return nack(reason::DATA_CHECKSUM);
                }
                if am_ring {
                    drop(nb);
                    return match self.deliver_am_bytes(b, src_rank, x.handler as u64, &x.data) {
                        Ok(()) => {
                            self.wire(a, b, x.bytes(), hops);
                            ack
                        }
                        Err(why) => {
                            if why == reason::QUEUE_FULL {
                                self.nodes[b].counters.mlink_queue_full += 1;
                            }
                            nack(why)
                        }
                    };
                }
                if x.len > QUEUE_DATA_MAX {
                    return nack(reason::LENGTH);
                }
                let queued = nb.mlink.enqueue(QueuedRop {
                    handler: x.handler,
                    source: src_rank,
                    data: x.data.clone(),
                });
                drop(nb);
                if !queued {
                    self.nodes[b].counters.mlink_queue_full += 1;
                    return nack(reason::QUEUE_FULL);
                }
                self.nodes[b].counters.mlink_rops_queued += 1;
                self.wire(a, b, x.bytes(), hops);
                ack
            }
            command::RESET => {
                if !(nb.mlink.held() && boot_enabled) {
                    return nack(reason::NOT_PERMITTED);
                }
                nb.mlink.release(src_rank);
                drop(nb);
                self.nodes[b].counters.mlink_boots += 1;
                tracing::info!(
                    ni = b,
                    by = a,
                    "released from reset by MLINK RESET (remote boot)"
                );
                ack
            }
            _ => nack(reason::BAD_COMMAND),
        }
    }

    /// Put a ROP straight into NI `b`'s active-message ring, as the fast path's ROP lands:
    /// same slot layout, same AM_ARRIVED completion. No waiting: a full ring is a NACK.
    fn deliver_am_bytes(
        &mut self,
        b: usize,
        src_rank: u32,
        handler: u64,
        data: &[u8],
    ) -> Result<(), u32> {
        if data.len() as u64 > AM_MAX_PAYLOAD {
            return Err(reason::LENGTH);
        }
        // Fast-path ROPs already waiting for the ring go first.
        if !self.nodes[b].am_waiting.is_empty() {
            return Err(reason::QUEUE_FULL);
        }
        let (slot_index, slot) = self.am_free_slot(b).ok_or(reason::QUEUE_FULL)?;
        let len = data.len() as u64;
        if !self.am_write_header(b, slot, src_rank, handler, len)
            || read_dma(&self.nodes[b].dma)
                .write(slot + AM_HEADER, data)
                .is_err()
        {
            return Err(reason::ADDRESS);
        }
        self.am_arrived(b, slot_index, src_rank, handler, len);
        Ok(())
    }
}
