//! Carrying out the commands PEs issue through their E registers (HMM-148-0 Table 1; SSD-T90
//! Table 2 and "Special Routing"): SEND into the same message queues and with the same
//! arrival algorithm as the fast path's MQ_SEND (`mq.rs`), the one-sided GET/PUT families and
//! atomics against the destination's segments, SPUT/SGET to router registers.
//!
//! The issuing NI's lock is taken to collect commands and again to post each answer; the
//! destination's only to read one segment-table entry. Client memory is reached through the
//! DMA spaces, as every other fabric copy is.

use std::sync::atomic::Ordering;

use ni_abi::fastpath::{Status, MQ_MESSAGE};
use ni_abi::t3e::{gva, op, seg, Error};

use super::State;
use crate::ni::read_dma;
use crate::server::lock;
use crate::t3e::ereg::{is_put, Command, Outcome};

/// Commands taken from one NI per poller pass.
const BATCH: usize = 64;

impl State {
    /// Carry out what NI `a` issued. Returns whether there was anything.
    pub(super) fn pump_t3e(&mut self, a: usize) -> bool {
        if !self.t3e_pending[a].swap(false, Ordering::AcqRel) {
            return false;
        }
        let cmds = lock(&self.slots[a].ni).t3e.take(BATCH);
        for (k, c) in cmds.iter().enumerate() {
            match self.t3e_execute(a, c) {
                // Carried to another host, answered when it says (`doors.rs`).
                None => {}
                // A SEND whose queue's arrival lock is held: it and the commands after it
                // go back, in order, and the poller keeps looking.
                Some(Outcome::Held) => {
                    lock(&self.slots[a].ni).t3e.put_back(cmds[k..].to_vec());
                    self.t3e_pending[a].store(true, Ordering::Release);
                    return true;
                }
                Some(outcome) => {
                    // The command that waited (always the first) is done, however it ended.
                    self.nodes[a].t3e_held_since = None;
                    self.t3e_finish(a, c, outcome)
                }
            }
        }
        !cmds.is_empty()
    }

    /// Post the network's answer to NI `a`'s command.
    pub(super) fn t3e_finish(&mut self, a: usize, c: &Command, outcome: Outcome) {
        if let Outcome::Failed(e) = outcome {
            self.nodes[a].counters.t3e_failed += 1;
            tracing::debug!(ni = a, op = c.op, e = c.e, ?e, "E-register command failed");
        }
        lock(&self.slots[a].ni).t3e.finish(c, outcome);
    }

    fn t3e_execute(&mut self, a: usize, c: &Command) -> Option<Outcome> {
        let r = match c.op {
            op::SPUT | op::SGET => self.special(a, c).map(Some),
            _ => self.e_issue(a, c),
        };
        r.unwrap_or_else(|e| Some(Outcome::Failed(e)))
    }

    /// A network command to a PE: here, or carried to its host.
    fn e_issue(&mut self, a: usize, c: &Command) -> Result<Option<Outcome>, Error> {
        let (pe, g) = c.target();
        let rank = u32::try_from(pe).map_err(|_| Error::NoSuchPe)?;
        let b = self
            .partitions
            .resolve(a as u32, rank)
            .ok_or(Error::NoSuchPe)? as usize;
        if let Some(h) = self.other_host(b) {
            self.door_t3e(a, b, h, c, g);
            return Ok(None);
        }
        let hops = self.e_route(a, b)?;
        self.e_at(a, b, hops, g, c).map(Some)
    }

    /// Whether NI `b` takes commands from `a`, and the route's hops.
    pub(super) fn e_route(&mut self, a: usize, b: usize) -> Result<u32, Error> {
        if !self.nodes[b].live {
            return Err(Error::PeerDown);
        }
        self.link(a, b).map_err(|_| Error::NoRoute)
    }

    /// Carry out command `c` of NI `a` at NI `b` (here), GVA `g`.
    pub(super) fn e_at(
        &mut self,
        a: usize,
        b: usize,
        hops: u32,
        g: u64,
        c: &Command,
    ) -> Result<Outcome, Error> {
        if c.op == op::SEND {
            self.e_send(a, b, hops, g, c)
        } else {
            self.e_one_sided(a, b, hops, g, c)
        }
    }

    /// What NI `a`'s counters say of a command another host carried out (it counted it
    /// at the destination's stand-in there, as `e_send`/`e_one_sided` do here).
    pub(super) fn e_count_across(&mut self, a: usize, c: &Command, outcome: &Outcome) {
        let n = &mut self.nodes[a].counters;
        let bytes = 8 * c.block() as u64;
        match (c.op, outcome) {
            (_, Outcome::Failed(_)) => {}
            (op::SEND, _) => {
                n.mq_sends += 1;
                n.t3e_sends += 1;
            }
            (o, _) if is_put(o) => {
                n.puts += 1;
                n.put_bytes += bytes;
                n.p0_packets_sent += 1;
                n.p0_bytes_sent += bytes;
            }
            _ => {
                n.gets += 1;
                n.get_bytes += bytes;
                n.p0_packets_rcvd += 1;
                n.p0_bytes_rcvd += bytes;
            }
        }
    }

    /// The IOVA at NI `b` that `gva` names for `len` bytes with access `need`, and the end
    /// of its segment.
    fn e_segment(
        &self,
        b: usize,
        g: u64,
        len: u64,
        need: u64,
        align: u64,
    ) -> Result<(u64, u64), Error> {
        if g & gva::MBZ != 0 || !g.is_multiple_of(align) {
            return Err(Error::BadAddress);
        }
        let s = lock(&self.slots[b].ni)
            .t3e
            .segment((g >> gva::SEGMENT_SHIFT) & gva::SEGMENT_MASK);
        if !s.grants(need) {
            return Err(Error::BadSegment);
        }
        let off = g & gva::OFFSET_MASK;
        match off.checked_add(len) {
            Some(end) if end <= s.len() => Ok((s.iova + off, s.iova + s.len())),
            _ => Err(Error::OutOfBounds),
        }
    }

    /// SEND (HMM-148-0 pp. 7-15): the fast path's arrival algorithm, answered with ERS codes.
    fn e_send(
        &mut self,
        a: usize,
        b: usize,
        hops: u32,
        g: u64,
        c: &Command,
    ) -> Result<Outcome, Error> {
        let (mqcw, end) = self.e_segment(b, g, 8, seg::MESSAGE_QUEUE, MQ_MESSAGE)?;
        let mut msg = [0u8; 64];
        for (i, w) in c.words.iter().enumerate() {
            msg[8 * i..8 * i + 8].copy_from_slice(&w.to_le_bytes());
        }
        // MSG_ADDR latches the MQCW's address as the sender named it: the GVA.
        let arrival = match self.mq_arrive_at(b, mqcw, end, &msg, g) {
            Some(arrival) => arrival,
            None => match self.mq_wait(a, c.id(), true) {
                None => return Ok(Outcome::Held),
                Some(timeout) => Err(timeout),
            },
        };
        self.nodes[a].counters.mq_sends += 1;
        self.nodes[a].counters.t3e_sends += 1;
        let stored = arrival.map_err(|s| match s {
            Status::BadDescriptor => Error::BadMqcw,
            Status::Timeout => Error::QueueLocked,
            _ => Error::OutOfBounds,
        })?;
        self.wire(a, b, MQ_MESSAGE, hops);
        Ok(if stored.is_some() {
            Outcome::Done
        } else {
            Outcome::Rejected
        })
    }

    /// GET, PUT and their block and vector forms, and the atomics (SSD Table 2).
    fn e_one_sided(
        &mut self,
        a: usize,
        b: usize,
        hops: u32,
        g: u64,
        c: &Command,
    ) -> Result<Outcome, Error> {
        let n = c.block() as usize;
        let stride = match c.op {
            op::PUTV4 | op::PUTV8 | op::GETV4 | op::GETV8 => c.operands[0],
            _ => 8,
        };
        let need = match c.op {
            op::GET | op::GETV4 | op::GETV8 => seg::REMOTE_READ,
            o if is_put(o) => seg::REMOTE_WRITE,
            _ => seg::REMOTE_READ | seg::REMOTE_WRITE,
        };
        // Every word's address is checked before any is moved: a command is all or nothing.
        let mut at = [0u64; 8];
        for (i, slot) in at.iter_mut().enumerate().take(n) {
            let gi = g.wrapping_add(stride.wrapping_mul(i as u64));
            *slot = self.e_segment(b, gi, 8, need, 8)?.0;
        }
        let dma = read_dma(&self.nodes[b].dma);
        let fault = |_| Error::OutOfBounds;
        let outcome = match c.op {
            op::GET | op::GETV4 | op::GETV8 => {
                let mut words = [0u64; 8];
                for (word, &iova) in words.iter_mut().zip(&at).take(n) {
                    let mut w = [0u8; 8];
                    dma.read(iova, &mut w).map_err(fault)?;
                    *word = u64::from_le_bytes(w);
                }
                Outcome::Values { words, n }
            }
            o if is_put(o) => {
                for (w, &iova) in c.words.iter().zip(&at).take(n) {
                    dma.write(iova, &w.to_le_bytes()).map_err(fault)?;
                }
                Outcome::Done
            }
            _ => {
                let word = dma.atomic_u64(at[0]).map_err(fault)?;
                let [x, y] = c.operands;
                let old = match c.op {
                    op::GET_INC => word.fetch_add(1, Ordering::AcqRel),
                    op::GET_ADD => word.fetch_add(x, Ordering::AcqRel),
                    op::SWAP => word.swap(x, Ordering::AcqRel),
                    op::CSWAP => {
                        match word.compare_exchange(x, y, Ordering::AcqRel, Ordering::Acquire) {
                            Ok(v) | Err(v) => v,
                        }
                    }
                    op::GET_SET => word.fetch_or(x, Ordering::AcqRel),
                    _ => word.fetch_and(!x, Ordering::AcqRel),
                };
                let mut words = [0u64; 8];
                words[0] = old;
                Outcome::Values { words, n: 1 }
            }
        };
        drop(dma);
        let bytes = 8 * n as u64;
        let counters = &mut self.nodes[a].counters;
        if is_put(c.op) {
            counters.puts += 1;
            counters.put_bytes += bytes;
            self.wire(a, b, bytes, hops);
        } else {
            counters.gets += 1;
            counters.get_bytes += bytes;
            self.wire(b, a, bytes, hops);
        }
        Ok(outcome)
    }

    /// SPUT and SGET (SSD "Special Routing", Figs. 15-16).
    fn special(&mut self, a: usize, c: &Command) -> Result<Outcome, Error> {
        let src = self.torus.physical(a as u32).map_err(|_| Error::NoRoute)?;
        let target = self.special_route(src, c.index)?;
        if c.op == op::SPUT {
            self.router_write(target, c.base, c.words[0])?;
            // One router, one state: the other hosts' copies take the write too.
            self.door_router(a, target, c.base, c.words[0]);
            self.nodes[a].counters.t3e_sputs += 1;
            return Ok(Outcome::Done);
        }
        let v = self.router_read(target, c.base)?;
        let rtrn = self.routers[self.torus.dims().index(target)].r_sget_rtrn;
        let back = self.special_route(target, rtrn)?;
        if back != src {
            // The reply reached a PE that did not ask: a misroute there; the asker's
            // register gets FULL_F instead of waiting for ever.
            self.router_error(back, ni_abi::t3e::router::ERR_MISROUTE);
            return Err(Error::ReturnPath);
        }
        self.nodes[a].counters.t3e_sgets += 1;
        let mut words = [0u64; 8];
        words[0] = v;
        Ok(Outcome::Values { words, n: 1 })
    }
}
