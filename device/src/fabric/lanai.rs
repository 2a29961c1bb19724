//! The network between the Lanai ports: one crossbar per partition whose port r is the
//! partition's rank r (our choice; the Lanai X document describes the NI, not a switch).
//!
//! How a packet finds its way depends on the sending port's mode (the framing §13 gives
//! each protocol):
//! - **Myrinet** (source routing): the crossbar consumes the packet's leading byte as its
//!   output port. The byte must be `0x80 | r` (`ni_abi::lanai::route`), r < 128; the route is
//!   the ROUTE SPD's segment, excluded from the CRC-32 (§10.2). The packet arrives at rank r
//!   with the rest. One crossbar is one hop: a longer route arrives with its remaining bytes
//!   in front of the data, and so fails its CRC-32, as a misrouted packet would.
//! - **Ethernet**: by destination address, rank r being `02:4E:49:00:r_hi:r_lo`; a group
//!   address (first byte odd, PAUSE frames included) goes to every other member.
//! - **InfiniBand**: by the LRH's DLID (bytes 2-3), rank r being LID r + 1.
//!
//! A packet that names no rank of the partition, or a port without carrier or not enabled,
//! is dropped and counted at the sender (`lanai_route_dropped`). A packet the receiver's
//! flow control holds (Myrinet STOP, or no buffer with ENABLE_BUFFER_DROP clear) waits at
//! the head of its sender's FIFO, as on a blocked Myrinet path, for at most [`HOLD_TIMEOUT`];
//! then it is dropped and counted (`lanai_blocked_dropped`), so a receiver that never issues
//! a buffer cannot stall a sender for ever. Every packet that leaves counts in the sender's
//! `lanai_packets_sent` and the `ni-ctl port` packet counters.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use ni_abi::lanai::route;

use super::State;
use crate::fabric::port::Mode;
use crate::lanai::packet::{Arrival, Outgoing, Wire};
use crate::lanai::Bus;
use crate::ni::read_dma;
use crate::server::lock;

/// Packets, and bytes, moved from one port per pass, so one busy sender cannot starve the
/// others (a single packet, at most 16 MiB, always moves whole).
const BATCH: usize = 64;
const BATCH_BYTES: usize = 1 << 20;
/// How long flow control may hold a packet at the head of its sender's FIFO.
pub const HOLD_TIMEOUT: Duration = Duration::from_secs(1);

/// What became of a packet that left.
pub(super) enum Fate {
    Arrived(usize),
    /// The crossbar dropped it (counted at the sender).
    Dropped,
    /// The receiving port dropped it (counted there).
    DroppedThere,
    /// Flow control held it past [`HOLD_TIMEOUT`].
    TimedOut,
    Flooded,
}

/// Where a packet goes.
enum Route {
    One(usize),
    Flood(Vec<usize>),
    Nowhere,
}

impl State {
    /// Move NI `i`'s whole packets through the crossbar. Returns whether anything moved.
    pub(super) fn pump_lanai(&mut self, i: usize) -> bool {
        if !self.lanai_pending[i].swap(false, Ordering::AcqRel) {
            return false;
        }
        let mut work = false;
        let mut again = false;
        for p in 0..2 {
            if self.lanai_away(i, p) {
                // Its head packet is on another host, which answers (`doors.rs`).
                continue;
            }
            let mut bytes = 0;
            for n in 0..=BATCH {
                let out = {
                    let mut g = lock(&self.slots[i].ni);
                    let ni = &mut *g;
                    ni.lanai.outgoing(p, &ni.sram)
                };
                let Some(mut out) = out else {
                    self.lanai_held[i][p] = None;
                    break;
                };
                if n == BATCH || bytes >= BATCH_BYTES {
                    again = true;
                    break;
                }
                bytes += out.wire.bytes.len();
                if out.fault {
                    let mut ni = lock(&self.slots[i].ni);
                    if ni.lanai.sent(p, out.seq) {
                        ni.counters.lanai_send_faults += 1;
                    }
                    work = true;
                    continue;
                }
                let held = match self.lanai_route(i, &mut out) {
                    Route::Nowhere => {
                        self.retire(i, p, &out, Fate::Dropped);
                        false
                    }
                    Route::One(j) if self.other_host(j).is_some() => {
                        // It stays at the head of the FIFO until its host answers.
                        self.door_lanai(i, Some(p), j, &out);
                        work = true;
                        break;
                    }
                    Route::One(j) => match self.lanai_deliver(j, &out.wire) {
                        Arrival::Held => true,
                        Arrival::Disabled => {
                            self.retire(i, p, &out, Fate::Dropped);
                            false
                        }
                        Arrival::Delivered => {
                            self.retire(i, p, &out, Fate::Arrived(j));
                            false
                        }
                        Arrival::Dropped => {
                            self.retire(i, p, &out, Fate::DroppedThere);
                            false
                        }
                    },
                    Route::Flood(members) => {
                        let mut missed = 0;
                        for &j in &members {
                            if self.other_host(j).is_some() {
                                // Its host delivers the copy as it can, unanswered.
                                self.door_lanai(i, None, j, &out);
                                continue;
                            }
                            // A flood does not wait for anyone: a member that would hold it,
                            // or is not listening, misses it (counted at the sender).
                            match self.lanai_deliver(j, &out.wire) {
                                Arrival::Delivered => {
                                    self.wire(i, j, out.wire.bytes.len() as u64, 1)
                                }
                                Arrival::Dropped => {}
                                Arrival::Held | Arrival::Disabled => missed += 1,
                            }
                        }
                        self.retire(i, p, &out, Fate::Flooded);
                        lock(&self.slots[i].ni).counters.lanai_route_dropped += missed;
                        false
                    }
                };
                if held {
                    // The hold is this packet's (packets are numbered per retire and reset).
                    let (seq, since) = match self.lanai_held[i][p] {
                        Some((seq, since)) if seq == out.seq => (seq, since),
                        _ => (out.seq, Instant::now()),
                    };
                    self.lanai_held[i][p] = Some((seq, since));
                    if since.elapsed() < HOLD_TIMEOUT {
                        // Look again on the next wake-up (a buffer issued rings the bell).
                        again = true;
                        break;
                    }
                    self.retire(i, p, &out, Fate::TimedOut);
                }
                self.lanai_held[i][p] = None;
                work = true;
            }
        }
        if again || lock(&self.slots[i].ni).lanai.packets_queued() && work {
            self.lanai_pending[i].store(true, Ordering::Release);
        }
        work
    }

    /// The packet left the port: `SEND_COUNT` + 1 at the sender.
    fn retire(&mut self, i: usize, p: usize, out: &Outgoing, fate: Fate) {
        self.lanai_retire(i, p, out.seq, out.wire.bytes.len(), fate);
    }

    /// Packet `seq` of NI `i`'s port `p`, `len` bytes on the wire, left the port.
    pub(super) fn lanai_retire(&mut self, i: usize, p: usize, seq: u64, len: usize, fate: Fate) {
        let retired = {
            let mut ni = lock(&self.slots[i].ni);
            let r = ni.lanai.sent(p, seq);
            if r {
                ni.counters.lanai_packets_sent += 1;
                match fate {
                    Fate::Dropped => ni.counters.lanai_route_dropped += 1,
                    Fate::TimedOut => ni.counters.lanai_blocked_dropped += 1,
                    _ => {}
                }
            }
            r
        };
        if let (true, Fate::Arrived(j)) = (retired, fate) {
            self.wire(i, j, len as u64, 1);
        }
    }

    /// Offer a packet to NI `j`'s port 0.
    pub(super) fn lanai_deliver(&mut self, j: usize, wire: &Wire) -> Arrival {
        let slot = self.slots[j].clone();
        let mut g = lock(&slot.ni);
        let ni = &mut *g;
        let dma = read_dma(&ni.dma);
        let mut bus = Bus {
            sram: &ni.sram,
            dma: &dma,
            bus_master: ni.config.bus_master(),
            counters: &mut ni.counters,
        };
        ni.lanai.arrive(0, wire, &mut bus)
    }

    /// Where the crossbar sends NI `i`'s packet (consuming a Myrinet route byte).
    fn lanai_route(&self, i: usize, out: &mut Outgoing) -> Route {
        let Some((_, members, _)) = self.partition_of(i) else {
            return Route::Nowhere;
        };
        let b = &out.wire.bytes;
        let rank = match out.mode {
            Mode::Myrinet => {
                let Some(&first) = b.first() else {
                    return Route::Nowhere;
                };
                out.wire.bytes.remove(0);
                if first & route::ROUTE_BYTE == 0 {
                    return Route::Nowhere;
                }
                (first & route::PORT_MASK) as u32
            }
            Mode::Ethernet => {
                if b.len() < 6 {
                    return Route::Nowhere;
                }
                if b[0] & 1 != 0 {
                    return Route::Flood(
                        members
                            .iter()
                            .map(|&m| m as usize)
                            .filter(|&m| m != i)
                            .collect(),
                    );
                }
                if b[..4] != route::MAC_PREFIX {
                    return Route::Nowhere;
                }
                u16::from_be_bytes([b[4], b[5]]) as u32
            }
            Mode::Infiniband => {
                if b.len() < 4 {
                    return Route::Nowhere;
                }
                match u16::from_be_bytes([b[2], b[3]]).checked_sub(1) {
                    Some(r) => r as u32,
                    None => return Route::Nowhere,
                }
            }
        };
        match members.get(rank as usize) {
            Some(&j) => Route::One(j as usize),
            None => Route::Nowhere,
        }
    }
}
