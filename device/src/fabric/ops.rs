//! Executing fast-path requests: ring setup, registration, send/receive matching, MLINK
//! WRITE/READ/ROP/NOOP/RESET, T3E message-queue SEND.
//!
//! Matching (device/abi/fastpath.md "Ordering"): a message matches the earliest posted receive
//! whose source (or any) and tag under the receive's mask agree; a receive matches the
//! earliest such waiting message. Messages from one sender to one receiver are therefore
//! non-overtaking, as in MPI; messages from different senders are ordered by when the
//! fabric took them from their rings.

use ni_abi::fastpath::{
    access, am_header, op, Completion, Request, Status, AM_HEADER, AM_MAX_PAYLOAD, AM_SLOT,
    ANY_RANK, MAX_CQ_ENTRIES, MAX_TRANSFER, MQ_MESSAGE,
};

use super::collective::Kind;
use super::mq::{self, Arrival};
use super::node::{Mr, PendingAm, PendingSend, PostedRecv, Ring};
use super::{transfer, State};
use crate::dma::DmaSpace;
use crate::ni::read_dma;
use ni_abi::window::mq_lock;

/// Which side of a two-party copy faulted.
pub(super) enum CopyFault {
    Source,
    Destination,
}

/// Whether the fabric took a request, or leaves it where it is for now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Taken {
    Now,
    Later,
}

/// How long a T3E SEND waits for a queue's arrival lock before it fails with `timeout`
/// (an E-register SEND with `QueueLocked`): far beyond any honest holder's preemption.
pub(super) const MQ_LOCK_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(500);

impl State {
    /// Carry out NI `a`'s request `r` (or fail it): [`Taken::Later`] if it must wait at the
    /// head of the ring instead (a T3E SEND into a queue whose arrival lock is held).
    pub(super) fn execute(&mut self, a: usize, r: Request) -> Taken {
        let result = match r.opcode {
            op::CQ_SETUP => self.cq_setup(a, &r),
            op::REG_MR => self.reg_mr(a, &r),
            op::DEREG_MR => match self.nodes[a].mrs.remove(&r.key) {
                Some(mr) => {
                    if mr.access & access::EXPORT != 0 {
                        // Peers may hold a mapping of it: they drop it before their next
                        // operation on this NI's regions.
                        if let Some((w, rank)) = self.window_of(a) {
                            w.regions_moved(rank);
                        }
                    }
                    Ok(done(&r))
                }
                None => Err(Status::BadKey),
            },
            op::AM_SETUP => self.am_setup(a, &r),
            op::SEND => self.send(a, &r),
            op::RECV => self.recv(a, &r),
            op::PUT => self.put_get(a, &r, true),
            op::GET => self.put_get(a, &r, false),
            op::ROP => self.rop(a, &r),
            op::NOOP => self.noop(a, &r),
            // MLINK RESET of a remote NI is the administrator's (the control socket's
            // reset_node); a client never gets it.
            op::RESET => Err(Status::Permission),
            op::WAKE => self.wake(a, &r),
            op::MQ_SEND => match self.mq_send(a, &r) {
                Some(result) => result,
                None => return Taken::Later,
            },
            op::MQ_SIGNAL => self.mq_signal(a, &r),
            op::COMBINE => self.join(a, Kind::Combine, &r),
            op::COLLECTIVE => self.join(a, Kind::Vector, &r),
            op::SYNC_GLOBAL => self.join(a, Kind::Sync, &r),
            op::COM_FLUSH => self.join(a, Kind::Flush, &r),
            op::ASYNC_GLOBAL => self.async_global(a, &r),
            op::COM_CONTROL => self.com_control(a, &r),
            _ => Err(Status::BadOpcode),
        };
        match result {
            Ok(Some(c)) => self.complete(a, c),
            Ok(None) => {}
            Err(status) => self.fail(a, &r, status),
        }
        Taken::Now
    }

    /// Complete `r` at NI `a` with an error, counted by cause.
    pub(super) fn fail(&mut self, a: usize, r: &Request, status: Status) {
        count_error(&mut self.nodes[a].counters, status);
        tracing::debug!(ni = a, opcode = r.opcode, ?status, "request failed");
        self.complete(
            a,
            Completion {
                opcode: r.opcode,
                status: status as u16,
                rank: r.rank,
                user: r.user,
                len: r.len,
                tag: r.tag,
                ..Default::default()
            },
        );
    }

    pub(super) fn rank_of(&self, node: usize) -> u32 {
        self.partitions.rank_size(node as u32).0
    }

    /// The live NI that `rank` names for `a`.
    fn peer(&self, a: usize, rank: u32) -> Result<usize, Status> {
        let b = self
            .partitions
            .resolve(a as u32, rank)
            .ok_or(Status::OutOfPartition)? as usize;
        if self.nodes[b].ready {
            Ok(b)
        } else {
            Err(Status::PeerDown)
        }
    }

    /// The data-network link from NI `a` to NI `b`: both ports up and a route through the
    /// torus. Returns the route's hops. A down port counts the refusal.
    pub(super) fn link(&mut self, a: usize, b: usize) -> Result<u32, Status> {
        let (up_a, up_b) = (self.nodes[a].port.up(), self.nodes[b].port.up());
        if !up_a || !up_b {
            if !up_a {
                self.nodes[a].counters.p0_link_refused += 1;
            }
            if !up_b && b != a {
                self.nodes[b].counters.p0_link_refused += 1;
            }
            return Err(Status::LinkDown);
        }
        self.route_between(a, b).map_err(|site| {
            // The packet left and was lost on the way: the router that saw it logs it.
            if let Some((node, bit)) = site {
                self.router_error(node, bit);
            }
            Status::LinkDown
        })
    }

    /// A packet of `bytes` went from `src`'s port to `dst`'s over `hops` torus hops.
    pub(super) fn wire(&mut self, src: usize, dst: usize, bytes: u64, hops: u32) {
        let s = &mut self.nodes[src].counters;
        s.p0_packets_sent += 1;
        s.p0_bytes_sent += bytes;
        s.route_hops += hops as u64;
        let d = &mut self.nodes[dst].counters;
        d.p0_packets_rcvd += 1;
        d.p0_bytes_rcvd += bytes;
    }

    /// A message `s` sent will never arrive (`status`): it no longer counts as in the
    /// network. One of another host's: that host hears, its sender's SEND fails there.
    pub(super) fn forget_send(&mut self, s: &PendingSend, status: Status) {
        if let Some(k) = s.remote {
            self.unqueue(k);
            self.remote_answer(k, status, 0);
            return;
        }
        let n = &mut self.nodes[s.src];
        n.outstanding -= 1;
        n.dr_message_count -= 1;
    }

    fn check_local(&self, a: usize, addr: u64, len: u64, write: bool) -> Result<(), Status> {
        if len > MAX_TRANSFER || addr.checked_add(len).is_none() {
            return Err(Status::BadLength);
        }
        if len == 0 {
            return Ok(());
        }
        read_dma(&self.nodes[a].dma)
            .check(addr, len, write)
            .map_err(|_| Status::NotRegistered)
    }

    /// Copy between two NIs' client memory: the fabric's one copy.
    pub(super) fn copy(
        &self,
        src: usize,
        src_addr: u64,
        dst: usize,
        dst_addr: u64,
        len: u64,
    ) -> Result<(), CopyFault> {
        if len == 0 {
            return Ok(());
        }
        let s = read_dma(&self.nodes[src].dma);
        let run = |d: &DmaSpace| -> Result<(), CopyFault> {
            s.check(src_addr, len, false)
                .map_err(|_| CopyFault::Source)?;
            d.check(dst_addr, len, true)
                .map_err(|_| CopyFault::Destination)?;
            s.copy_to(src_addr, d, dst_addr, len as usize)
                .map_err(|_| CopyFault::Destination)
        };
        if src == dst {
            run(&s)
        } else {
            run(&read_dma(&self.nodes[dst].dma))
        }
    }

    fn cq_setup(&mut self, a: usize, r: &Request) -> Result<Option<Completion>, Status> {
        let entries = r.len;
        if entries == 0
            || entries > MAX_CQ_ENTRIES
            || !entries.is_power_of_two()
            || !r.addr.is_multiple_of(64)
        {
            return Err(Status::BadDescriptor);
        }
        self.check_local(a, r.addr, entries * 64, true)?;
        let n = &mut self.nodes[a];
        n.cq = Some(Ring {
            iova: r.addr,
            entries: entries as u32,
        });
        n.cq_produced = 0;
        n.ready = true;
        // A driver that sets up the fast path takes part in the control network from then on
        // (as CMNA_participate_in does on the CM-5); COM_CONTROL changes it. Together with
        // collectives needing every member ready, no round completes without a member that
        // is still starting.
        n.participation = 0;
        self.mirror_participation(a);
        let n = &mut self.nodes[a];
        if let Some(sram) = n.live_sram() {
            sram.store_u32(ni_abi::fastpath::ctrl::CQ_HEAD, 0);
        }
        // Up in the window before PEERS_UP counts it: a client that sees every peer counted
        // must find them up there too.
        self.window_member(a, true);
        self.publish_peers_up();
        Ok(done(r))
    }

    /// WAKE: a window peer found `r.rank` blocked; interrupt it.
    fn wake(&mut self, a: usize, r: &Request) -> Result<Option<Completion>, Status> {
        let b = self.peer(a, r.rank)?;
        self.nodes[a].counters.wakes += 1;
        if self.nodes[b].live {
            crate::server::lock(&self.slots[b].ni).deliver(ni_abi::pci::vector::CQ);
        }
        Ok(done(r))
    }

    fn reg_mr(&mut self, a: usize, r: &Request) -> Result<Option<Completion>, Status> {
        if r.len == 0 || r.access & !(access::ALL | access::EXPORT) != 0 {
            return Err(Status::BadDescriptor);
        }
        let writable = r.access & (access::REMOTE_WRITE | access::MESSAGE_QUEUE) != 0;
        self.check_local(a, r.addr, r.len, writable)?;
        let n = &mut self.nodes[a];
        if n.mrs.contains_key(&r.key) {
            return Err(Status::BadDescriptor);
        }
        n.mrs.insert(
            r.key,
            Mr {
                iova: r.addr,
                len: r.len,
                access: r.access,
            },
        );
        if r.access & access::EXPORT != 0 {
            // A peer refused this key before may map it now.
            if let Some((w, rank)) = self.window_of(a) {
                w.regions_moved(rank);
            }
        }
        Ok(done(r))
    }

    fn am_setup(&mut self, a: usize, r: &Request) -> Result<Option<Completion>, Status> {
        let slots = r.len;
        if slots == 0 || slots > 65536 || !r.addr.is_multiple_of(64) {
            return Err(Status::BadDescriptor);
        }
        self.check_local(a, r.addr, slots * AM_SLOT, true)?;
        let n = &mut self.nodes[a];
        n.am = Some(Ring {
            iova: r.addr,
            entries: slots as u32,
        });
        n.am_produced = 0;
        if let Some(sram) = n.live_sram() {
            sram.store_u32(ni_abi::fastpath::ctrl::AM_HEAD, 0);
        }
        Ok(done(r))
    }

    fn send(&mut self, a: usize, r: &Request) -> Result<Option<Completion>, Status> {
        let b = self.peer(a, r.rank)?;
        self.link(a, b)?;
        self.check_local(a, r.addr, r.len, false)?;
        if self.other_host(b).is_some() {
            return self.remote_send(a, b, r);
        }
        let src_rank = self.rank_of(a);
        self.nodes[a].counters.sends += 1;
        self.nodes[a].outstanding += 1;
        self.nodes[a].dr_message_count += 1;
        self.nodes[b].unexpected.push_back(PendingSend {
            src: a,
            src_rank,
            user: r.user,
            addr: r.addr,
            len: r.len,
            tag: r.tag,
            remote: None,
        });
        self.match_at(b);
        Ok(None)
    }

    fn recv(&mut self, a: usize, r: &Request) -> Result<Option<Completion>, Status> {
        let from = if r.rank == ANY_RANK {
            if !self.nodes[a].port.up() {
                self.nodes[a].counters.p0_link_refused += 1;
                return Err(Status::LinkDown);
            }
            None
        } else {
            let b = self.peer(a, r.rank)?;
            self.link(b, a)?;
            Some(b)
        };
        self.check_local(a, r.addr, r.len, true)?;
        self.nodes[a].outstanding += 1;
        self.nodes[a].recvs.push_back(PostedRecv {
            user: r.user,
            addr: r.addr,
            len: r.len,
            tag: r.tag,
            mask: r.mask,
            from,
            from_rank: r.rank,
        });
        self.match_at(a);
        Ok(None)
    }

    /// Pair waiting messages at NI `b` with its posted receives, oldest message first.
    pub(super) fn match_at(&mut self, b: usize) {
        let mut i = 0;
        while i < self.nodes[b].unexpected.len() {
            let s = self.nodes[b].unexpected[i];
            let Some(j) = self.nodes[b].recvs.iter().position(|r| r.matches(&s)) else {
                i += 1;
                continue;
            };
            if s.remote.is_some() {
                self.remote_match(b, i, j);
                continue;
            }
            let rv = self.nodes[b].recvs[j];
            let n = s.len.min(rv.len);
            if n > transfer::INLINE_MAX {
                // Matched now, moved in pieces (transfer.rs).
                self.nodes[b].unexpected.remove(i);
                self.nodes[b].recvs.remove(j);
                self.transfers.push_back(transfer::Transfer {
                    src: s.src,
                    src_addr: s.addr,
                    dst: b,
                    dst_addr: rv.addr,
                    len: n,
                    done: 0,
                    purpose: transfer::Purpose::Message { s, rv, b },
                });
                continue;
            }
            match self.copy(s.src, s.addr, b, rv.addr, n) {
                Ok(()) => {
                    self.nodes[b].unexpected.remove(i);
                    self.nodes[b].recvs.remove(j);
                    self.message_done(b, &s, &rv);
                }
                Err(CopyFault::Source) => {
                    // The sender unmapped its buffer before the message could be taken.
                    self.nodes[b].unexpected.remove(i);
                    self.forget_send(&s, Status::NotRegistered);
                    let r = Request {
                        opcode: op::SEND,
                        rank: self.rank_of(b),
                        user: s.user,
                        len: s.len,
                        tag: s.tag,
                        ..Default::default()
                    };
                    self.fail(s.src, &r, Status::NotRegistered);
                }
                Err(CopyFault::Destination) => {
                    // The receiver unmapped its buffer: that receive fails, the message waits.
                    self.nodes[b].recvs.remove(j);
                    self.nodes[b].outstanding -= 1;
                    let r = Request {
                        opcode: op::RECV,
                        rank: rv.from_rank,
                        user: rv.user,
                        len: rv.len,
                        tag: rv.tag,
                        ..Default::default()
                    };
                    self.fail(b, &r, Status::NotRegistered);
                }
            }
        }
    }

    /// Message `s` has been copied into receive `rv` of NI `b`: count it, complete both.
    pub(super) fn message_done(&mut self, b: usize, s: &PendingSend, rv: &PostedRecv) {
        let n = s.len.min(rv.len);
        self.nodes[b].outstanding -= 1;
        self.nodes[s.src].outstanding -= 1;
        let hops = self.hops(s.src, b).unwrap_or(0);
        self.wire(s.src, b, n, hops);
        self.nodes[s.src].counters.send_bytes += n;
        let dst_rank = self.rank_of(b);
        self.recv_done(b, s, rv);
        self.complete(
            s.src,
            Completion {
                opcode: op::SEND,
                status: Status::Ok as u16,
                rank: dst_rank,
                user: s.user,
                len: s.len,
                tag: s.tag,
                ..Default::default()
            },
        );
    }

    /// Message `s` (of this host or another) reached receive `rv` of NI `b`: count it there
    /// and complete the receive (`Truncated` when it was longer).
    pub(super) fn recv_done(&mut self, b: usize, s: &PendingSend, rv: &PostedRecv) {
        let n = s.len.min(rv.len);
        let truncated = s.len > rv.len;
        let nb = &mut self.nodes[b];
        nb.dr_message_count -= 1;
        nb.counters.recvs += 1;
        nb.counters.recv_bytes += n;
        if truncated {
            nb.counters.err_truncated += 1;
        }
        self.complete(
            b,
            Completion {
                opcode: op::RECV,
                status: if truncated {
                    Status::Truncated
                } else {
                    Status::Ok
                } as u16,
                rank: s.src_rank,
                user: rv.user,
                len: s.len,
                tag: s.tag,
                ..Default::default()
            },
        );
    }

    /// The target region `key` at NI `b` for `[offset, offset + len)` with `need` access.
    fn remote(&self, b: usize, key: u32, offset: u64, len: u64, need: u32) -> Result<u64, Status> {
        let mr = self.nodes[b].mrs.get(&key).ok_or(Status::BadKey)?;
        if mr.access & need != need {
            return Err(Status::BadKey);
        }
        match offset.checked_add(len) {
            Some(end) if end <= mr.len => Ok(mr.iova + offset),
            _ => Err(Status::OutOfBounds),
        }
    }

    fn put_get(&mut self, a: usize, r: &Request, put: bool) -> Result<Option<Completion>, Status> {
        let b = self.peer(a, r.rank)?;
        let hops = if put {
            self.link(a, b)?
        } else {
            self.link(b, a)?
        };
        self.check_local(a, r.addr, r.len, !put)?;
        if self.other_host(b).is_some() {
            return self.remote_one_sided(a, b, r, put);
        }
        let need = if put {
            access::REMOTE_WRITE
        } else {
            access::REMOTE_READ
        };
        let target = self.remote(b, r.key, r.tag, r.len, need)?;
        let (src, src_addr, dst, dst_addr) = if put {
            (a, r.addr, b, target)
        } else {
            (b, target, a, r.addr)
        };
        if r.len > transfer::INLINE_MAX {
            // Moved in pieces (transfer.rs); completes when the last one has.
            self.nodes[a].outstanding += 1;
            self.transfers.push_back(transfer::Transfer {
                src,
                src_addr,
                dst,
                dst_addr,
                len: r.len,
                done: 0,
                purpose: transfer::Purpose::OneSided {
                    a,
                    b,
                    r: *r,
                    put,
                    hops,
                },
            });
            return Ok(None);
        }
        match self.copy(src, src_addr, dst, dst_addr, r.len) {
            Ok(()) => {}
            // Local side faulted (checked above, so unmapped meanwhile), or the target's
            // registered region is no longer mapped by its client.
            Err(CopyFault::Source) if put => return Err(Status::NotRegistered),
            Err(CopyFault::Destination) if !put => return Err(Status::NotRegistered),
            Err(_) => return Err(Status::OutOfBounds),
        }
        self.one_sided_done(a, b, r, put, hops);
        Ok(None)
    }

    /// A put or get of NI `a` with NI `b` has moved all its bytes: count it, complete it.
    pub(super) fn one_sided_done(&mut self, a: usize, b: usize, r: &Request, put: bool, hops: u32) {
        if put {
            self.wire(a, b, r.len, hops);
        } else {
            self.wire(b, a, r.len, hops);
        }
        let c = &mut self.nodes[a].counters;
        if put {
            c.puts += 1;
            c.put_bytes += r.len;
        } else {
            c.gets += 1;
            c.get_bytes += r.len;
        }
        if let Some(c) = done(r) {
            self.complete(a, c);
        }
    }

    fn rop(&mut self, a: usize, r: &Request) -> Result<Option<Completion>, Status> {
        let b = self.peer(a, r.rank)?;
        self.link(a, b)?;
        if r.len > AM_MAX_PAYLOAD {
            return Err(Status::BadLength);
        }
        self.check_local(a, r.addr, r.len, false)?;
        if self.other_host(b).is_some() {
            return self.remote_small(a, b, r);
        }
        if self.nodes[b].am.is_none() {
            return Err(Status::NoHandlerRing);
        }
        let src_rank = self.rank_of(a);
        self.nodes[a].counters.rops += 1;
        self.nodes[a].outstanding += 1;
        self.nodes[b].am_waiting.push_back(PendingAm {
            src: a,
            src_rank,
            user: r.user,
            addr: r.addr,
            len: r.len,
            handler: r.mask,
            remote: None,
        });
        self.flush_active_messages(b);
        Ok(None)
    }

    /// Deliver waiting active messages into NI `b`'s AM ring while it has free slots.
    pub(super) fn flush_active_messages(&mut self, b: usize) -> bool {
        let mut work = false;
        loop {
            let Some(am) = self.nodes[b].am_waiting.front().copied() else {
                return work;
            };
            let Some((slot_index, slot)) = self.am_free_slot(b) else {
                return work;
            };
            self.nodes[b].am_waiting.pop_front();
            self.nodes[am.src].outstanding -= 1;
            work = true;
            let copied = self.am_write_header(b, slot, am.src_rank, am.handler, am.len)
                && match am.remote {
                    None => self
                        .copy(am.src, am.addr, b, slot + AM_HEADER, am.len)
                        .is_ok(),
                    Some(k) => self.remote_am_payload(k, b, slot + AM_HEADER),
                };
            let dst_rank = self.rank_of(b);
            let req = Request {
                opcode: op::ROP,
                rank: dst_rank,
                user: am.user,
                len: am.len,
                mask: am.handler,
                ..Default::default()
            };
            if !copied {
                self.fail(am.src, &req, Status::NotRegistered);
                if let Some(k) = am.remote {
                    self.remote_answer(k, Status::NotRegistered, 0);
                }
                continue;
            }
            if let Some(k) = am.remote {
                self.remote_answer(k, Status::Ok, 0);
            }
            let hops = self.hops(am.src, b).unwrap_or(0);
            self.wire(am.src, b, am.len, hops);
            self.am_arrived(b, slot_index, am.src_rank, am.handler, am.len);
            self.complete(
                am.src,
                Completion {
                    opcode: op::ROP,
                    status: Status::Ok as u16,
                    rank: dst_rank,
                    user: am.user,
                    len: am.len,
                    tag: am.handler,
                    ..Default::default()
                },
            );
        }
    }

    /// The next free slot of NI `b`'s active-message ring, as (index, IOVA): none without a
    /// ring, or while the client has not consumed the slot the ring would reuse.
    pub(super) fn am_free_slot(&self, b: usize) -> Option<(u32, u64)> {
        let n = &self.nodes[b];
        let (ring, sram) = (n.am?, n.live_sram()?);
        let consumed = sram.load_u32(ni_abi::fastpath::ctrl::AM_HEAD);
        if n.am_produced.wrapping_sub(consumed) >= ring.entries {
            return None;
        }
        let index = n.am_produced % ring.entries;
        Some((index, ring.iova + index as u64 * AM_SLOT))
    }

    /// Write an active message's slot header at `slot` in NI `b`'s memory.
    pub(super) fn am_write_header(
        &self,
        b: usize,
        slot: u64,
        src_rank: u32,
        handler: u64,
        len: u64,
    ) -> bool {
        let mut header = [0u8; AM_HEADER as usize];
        header[am_header::SRC_RANK as usize..][..4].copy_from_slice(&src_rank.to_le_bytes());
        header[am_header::HANDLER as usize..][..8].copy_from_slice(&handler.to_le_bytes());
        header[am_header::LEN as usize..][..8].copy_from_slice(&len.to_le_bytes());
        read_dma(&self.nodes[b].dma).write(slot, &header).is_ok()
    }

    /// Slot `slot_index` of NI `b`'s ring is filled: hand it to the client (AM_ARRIVED).
    pub(super) fn am_arrived(
        &mut self,
        b: usize,
        slot_index: u32,
        src_rank: u32,
        handler: u64,
        len: u64,
    ) {
        self.nodes[b].am_produced = self.nodes[b].am_produced.wrapping_add(1);
        self.nodes[b].counters.rops_delivered += 1;
        self.complete(
            b,
            Completion {
                opcode: op::AM_ARRIVED,
                status: Status::Ok as u16,
                rank: src_rank,
                len,
                tag: handler,
                aux: slot_index as u64,
                ..Default::default()
            },
        );
    }

    fn noop(&mut self, a: usize, r: &Request) -> Result<Option<Completion>, Status> {
        self.nodes[a].counters.noops += 1;
        let b = self.peer(a, r.rank)?;
        self.link(a, b)?;
        let mut c = done(r).expect("a completion");
        c.aux = 1;
        Ok(Some(c))
    }

    /// `None`: the queue's arrival lock is held; the request waits at the head of the ring.
    fn mq_send(&mut self, a: usize, r: &Request) -> Option<Result<Option<Completion>, Status>> {
        let b = match self.peer(a, r.rank) {
            Ok(b) => b,
            Err(e) => return Some(Err(e)),
        };
        let hops = match self.link(a, b) {
            Ok(h) => h,
            Err(e) => return Some(Err(e)),
        };
        if r.len != MQ_MESSAGE {
            return Some(Err(Status::BadLength));
        }
        if let Err(e) = self.check_local(a, r.addr, MQ_MESSAGE, false) {
            return Some(Err(e));
        }
        if self.other_host(b).is_some() {
            return Some(self.remote_small(a, b, r));
        }
        let mut msg = [0u8; 64];
        if read_dma(&self.nodes[a].dma).read(r.addr, &mut msg).is_err() {
            return Some(Err(Status::NotRegistered));
        }
        let arrival = match self.mq_arrive(b, r.key, r.tag, &msg) {
            Some(arrival) => arrival,
            None => {
                // This request, at this place of the ring, in this epoch.
                let n = &self.nodes[a];
                let id = (n.epoch as u64) << 32 | n.sq_head as u64;
                match self.mq_wait(a, id, false) {
                    Some(e) => Err(e),
                    None => return None,
                }
            }
        };
        self.nodes[a].counters.mq_sends += 1;
        if matches!(arrival, Ok(_) | Err(Status::QueueFull)) {
            self.wire(a, b, MQ_MESSAGE, hops);
        }
        let mut c = done(r).expect("a completion");
        Some(arrival.map(|tail| {
            c.aux = tail;
            Some(c)
        }))
    }

    /// NI `a`'s SEND `id` (a request when `!ereg`, else an E-register command) found its
    /// queue's arrival lock held: `None` to try again later, or the timeout once it waited
    /// too long. A different `id` than the one waiting before (that one was dropped by a
    /// reset or a partition change) starts its own wait.
    pub(super) fn mq_wait(&mut self, a: usize, id: u64, ereg: bool) -> Option<Status> {
        let n = &mut self.nodes[a];
        let since = if ereg {
            &mut n.t3e_held_since
        } else {
            &mut n.mq_held_since
        };
        let t = match *since {
            Some((waiting, t)) if waiting == id => t,
            _ => {
                n.counters.mq_lock_waits += 1;
                let now = std::time::Instant::now();
                *since = Some((id, now));
                now
            }
        };
        if t.elapsed() < MQ_LOCK_TIMEOUT {
            return None;
        }
        *since = None;
        n.counters.mq_lock_timeouts += 1;
        tracing::warn!(
            ni = a,
            "a message queue's arrival lock stayed held: SEND timed out"
        );
        Some(Status::Timeout)
    }

    /// Whether arrivals at MQCW `mqcw` of NI `b` take the queue's arrival lock: `b`'s
    /// partition has a window and some exported region of `b` holds the MQCW and the lock
    /// (whatever key the SEND named), so members may store into it themselves.
    fn mq_locked(&self, b: usize, mqcw: u64) -> bool {
        let Some(end) = mqcw.checked_add(mq_lock::OFFSET + 8) else {
            return false;
        };
        self.window_of(b).is_some()
            && self.nodes[b]
                .mrs
                .values()
                .any(|m| m.access & access::EXPORT != 0 && mqcw >= m.iova && end <= m.iova + m.len)
    }

    /// The arrival algorithm at `mqcw` of NI `b` (the region holding the queue ends at
    /// `end`), under the queue's arrival lock if it has one ([`mq_locked`](Self::mq_locked)):
    /// the new Tail, or `None` for a rejection (Tail = Limit), counted at `b`, a threshold hit
    /// latching `msg_addr` in its MSG_ADDR; `None` (outer) while another writer holds the
    /// lock. A holder whose client is gone (down, or back as a new incarnation) stores
    /// nothing more: its lock is broken and counted.
    pub(super) fn mq_arrive_at(
        &mut self,
        b: usize,
        mqcw: u64,
        end: u64,
        msg: &[u8; 64],
        msg_addr: u64,
    ) -> Option<Result<Option<u64>, Status>> {
        let locked = self.mq_locked(b, mqcw);
        let dma = self.nodes[b].dma.clone();
        let dma = read_dma(&dma);
        let mut broke = false;
        let arrival = loop {
            match mq::arrive_locked(&dma, mqcw, end, msg, locked) {
                Ok(Arrival::Locked { holder }) => {
                    // The device holds a lock only inside one arrival, under the fabric's
                    // lock: one it finds held by itself is left from a crash, or forged.
                    let gone = holder == mq_lock::DEVICE
                        || match (mq_lock::holder(holder), self.window_of(b)) {
                            (Some((rank, inc)), Some((w, _))) => !w.holds(rank, inc),
                            _ => false,
                        };
                    if broke || !gone || !mq::break_lock(&dma, mqcw + mq_lock::OFFSET, holder) {
                        return None;
                    }
                    broke = true;
                    self.nodes[b].counters.mq_lock_breaks += 1;
                }
                Ok(a) => break a,
                Err(e) => return Some(Err(e)),
            }
        };
        drop(dma);
        let c = &mut self.nodes[b].counters;
        Some(Ok(match arrival {
            Arrival::Stored { tail, threshold } => {
                c.mq_stored += 1;
                if threshold {
                    c.mq_threshold += 1;
                    self.mq_interrupt(b, msg_addr);
                }
                Some(tail)
            }
            Arrival::Rejected => {
                c.mq_rejected += 1;
                None
            }
            Arrival::Locked { .. } => unreachable!("a held lock returned above"),
        }))
    }

    /// A T3E SEND's 64 bytes into the queue at `offset` of NI `b`'s region `key`: the new
    /// Tail, or why not (device/abi/t3e.md); `None` while its arrival lock is held.
    pub(super) fn mq_arrive(
        &mut self,
        b: usize,
        key: u32,
        offset: u64,
        msg: &[u8; 64],
    ) -> Option<Result<u64, Status>> {
        let Some(mr) = self.nodes[b].mrs.get(&key).copied() else {
            return Some(Err(Status::BadKey));
        };
        if mr.access & access::MESSAGE_QUEUE == 0 {
            return Some(Err(Status::BadKey));
        }
        if offset.checked_add(8).is_none_or(|e| e > mr.len) {
            return Some(Err(Status::OutOfBounds));
        }
        // MSG_ADDR latches the MQCW's address as the sender named it: the IOVA.
        let mqcw = mr.iova + offset;
        let arrival = self.mq_arrive_at(b, mqcw, mr.iova + mr.len, msg, mqcw)?;
        Some(arrival.and_then(|stored| stored.ok_or(Status::QueueFull)))
    }

    /// `MQ_SIGNAL`: NI `a`'s client stored a SEND into a peer's queue itself and Tail reached
    /// Threshold there. Only for a queue it could have stored into that way (a member of
    /// its window, an exported region with message-queue access, the MQCW inside it); the
    /// interrupt is all it asks for, and nothing it could not have caused with a SEND.
    fn mq_signal(&mut self, a: usize, r: &Request) -> Result<Option<Completion>, Status> {
        let (w, _) = self.bound_window(a).ok_or(Status::Permission)?;
        let b = w.member(r.rank).ok_or(Status::OutOfPartition)? as usize;
        if !self.nodes[b].ready {
            return Err(Status::PeerDown);
        }
        let mr = *self.nodes[b].mrs.get(&r.key).ok_or(Status::BadKey)?;
        let need = access::EXPORT | access::MESSAGE_QUEUE;
        if mr.access & need != need {
            return Err(Status::BadKey);
        }
        if !r.tag.is_multiple_of(MQ_MESSAGE) || r.tag.checked_add(8).is_none_or(|e| e > mr.len) {
            return Err(Status::OutOfBounds);
        }
        self.nodes[b].counters.mq_threshold += 1;
        self.mq_interrupt(b, mr.iova + r.tag);
        Ok(done(r))
    }

    /// NI `x` lost its client or was reset: fail what others were waiting on it for, drop
    /// what it had sent that nobody took yet, and forget its state.
    pub(super) fn node_down(&mut self, x: usize) {
        self.cancel_transfers(x, Status::PeerDown);
        if self.nodes[x].ready {
            self.window_member(x, false);
        }
        if self.nodes[x].live {
            // Collectives need every member: fail what the partition had pending.
            self.reset_partition_colls(x, Status::PeerDown);
        }
        let (theirs, waiting): (Vec<PendingSend>, Vec<PendingSend>) = self.nodes[x]
            .unexpected
            .drain(..)
            .partition(|s| s.remote.is_some());
        self.remote_local_gone(x, theirs);
        let ams: Vec<PendingAm> = self.nodes[x].am_waiting.drain(..).collect();
        let was_live = self.nodes[x].live;
        let x_rank = self.rank_of(x);
        self.nodes[x].clear();
        if !was_live {
            return;
        }
        // What x had sent to itself is gone with it.
        let own = waiting.iter().filter(|s| s.src == x).count() as i64;
        self.nodes[x].dr_message_count -= own;
        for s in waiting.into_iter().filter(|s| s.src != x) {
            self.forget_send(&s, Status::PeerDown);
            let r = Request {
                opcode: op::SEND,
                rank: x_rank,
                user: s.user,
                len: s.len,
                tag: s.tag,
                ..Default::default()
            };
            self.fail(s.src, &r, Status::PeerDown);
        }
        for m in ams.into_iter().filter(|m| m.src != x) {
            self.nodes[m.src].outstanding -= 1;
            if let Some(k) = m.remote {
                self.remote_answer(k, Status::PeerDown, 0);
            }
            let r = Request {
                opcode: op::ROP,
                rank: x_rank,
                user: m.user,
                len: m.len,
                mask: m.handler,
                ..Default::default()
            };
            self.fail(m.src, &r, Status::PeerDown);
        }
        for j in 0..self.nodes.len() {
            if j == x {
                continue;
            }
            let n = &mut self.nodes[j];
            // What x sent that nobody took: its sender is gone, nobody waits for it.
            let before = n.unexpected.len();
            n.unexpected.retain(|s| s.src != x);
            let dropped = (before - n.unexpected.len()) as i64;
            self.nodes[x].dr_message_count -= dropped;
            let n = &mut self.nodes[j];
            n.am_waiting.retain(|m| m.src != x);
            // Receives waiting for x in particular can never complete.
            let (dead, live): (Vec<PostedRecv>, Vec<PostedRecv>) =
                n.recvs.drain(..).partition(|r| r.from == Some(x));
            n.recvs = live.into();
            n.outstanding -= dead.len();
            for rv in dead {
                let r = Request {
                    opcode: op::RECV,
                    rank: rv.from_rank,
                    user: rv.user,
                    len: rv.len,
                    tag: rv.tag,
                    ..Default::default()
                };
                self.fail(j, &r, Status::PeerDown);
            }
        }
    }
}

/// The success completion of a request that finishes at once.
pub(super) fn done(r: &Request) -> Option<Completion> {
    Some(Completion {
        opcode: r.opcode,
        status: Status::Ok as u16,
        rank: r.rank,
        user: r.user,
        len: r.len,
        tag: r.tag,
        ..Default::default()
    })
}

fn count_error(c: &mut crate::counters::FabricCounters, s: Status) {
    let field = match s {
        Status::Ok => return,
        Status::PeerDown => &mut c.err_peer_down,
        Status::OutOfPartition => &mut c.err_out_of_partition,
        Status::NotRegistered => &mut c.err_not_registered,
        Status::BadKey => &mut c.err_bad_key,
        Status::OutOfBounds => &mut c.err_out_of_bounds,
        Status::QueueFull => &mut c.err_queue_full,
        Status::BadLength => &mut c.err_bad_length,
        Status::Truncated => &mut c.err_truncated,
        Status::Permission => &mut c.err_permission,
        Status::BadOpcode => &mut c.err_bad_opcode,
        Status::BadDescriptor => &mut c.err_bad_descriptor,
        Status::NoHandlerRing => &mut c.err_no_handler_ring,
        Status::Cancelled => &mut c.err_cancelled,
        Status::Collision => &mut c.err_collision,
        Status::Abstaining => &mut c.err_abstaining,
        Status::AbstainChanged => &mut c.err_abstain_changed,
        Status::Timeout => &mut c.err_timeout,
        Status::LinkDown => &mut c.err_link_down,
        Status::OtherHost => &mut c.err_other_host,
    };
    *field += 1;
}
