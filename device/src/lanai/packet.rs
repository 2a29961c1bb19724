//! The packet interface of one port (§9 receiver, §10 sender): the send FIFO of SPDs, the
//! regular and alternate receive channels with their current and backup buffers, and the
//! CRCs the port appends and checks (§13.2).
//!
//! Packets move whole. The fabric (`fabric/lanai.rs`) takes a packet from the sender when
//! its last SPD is in the FIFO ([`PortEngine::outgoing`]), offers it to the receiving port
//! ([`PortEngine::arrive`]), and retires it from the sender's FIFO ([`PortEngine::sent`])
//! once it was delivered or dropped. So a receiver never sees half a packet: `PACKET_HEAD`
//! would rise and fall inside one delivery and reads 0.
//!
//! Flow control is the seed's: a Myrinet port with no backup buffer and less than
//! `STOP_SIZE` left sends STOP (AISR `MYRI_STOP`) and the crossbar holds packets for it
//! until a buffer is issued (GO); a regular channel without a buffer drops and counts
//! (`ENABLE_BUFFER_DROP`, an X port's setting) or, with the bit clear, holds them too. The
//! alternate channel never holds anything back (§9: it does not take part in flow control).

use std::collections::VecDeque;

use ni_abi::lanai::{
    self, aisr, crc_config as cc, port_reg, rpd, rpl_config as rc, send_control, spd, SRAM_SIZE,
};

use super::crc::{self, Order};
use crate::counters::Counters;
use crate::fabric::port::Mode;
use crate::regfile::RegFile;
use crate::sram::Sram;

/// The longest packet a port emits, CRCs included: 1 MiB. The seed allows longer ones (a
/// MAX_PACKET of up to 16 MB); the model cuts there because one poller moves every NI's
/// packets and a packet moves in one step: a bigger one would hold up the other NIs.
pub const MAX_WIRE: usize = 1 << 20;

/// A receive buffer being filled (§9).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct Current {
    addr: u32,
    /// Blocks used so far.
    next_block: u64,
    /// RPL_INDEX: RPDs written into this buffer's RPL.
    index: u32,
}

#[derive(Clone, Copy, Debug, Default, serde::Serialize, serde::Deserialize)]
struct Channel {
    current: Option<Current>,
    backup: Option<u32>,
}

/// The buffer geometry a channel's RPL_CONFIG gives: block B, blocks N, max packet.
#[derive(Clone, Copy, Debug, serde::Serialize, serde::Deserialize)]
struct Geometry {
    block: u64,
    blocks: u64,
    max_packet: u64,
}

impl Geometry {
    fn of(config: u32) -> Geometry {
        let block = rc::block(config >> rc::BLOCK_SIZE_SHIFT);
        let size = rc::size(config >> rc::BUFFER_SIZE_SHIFT);
        // B > N x B is undefined (§9.7): one block of B then.
        let blocks = (size / block).max(1);
        Geometry {
            block,
            blocks,
            max_packet: rc::size(config >> rc::MAX_PACKET_SHIFT),
        }
    }

    /// Data area plus RPL.
    fn footprint(&self) -> u64 {
        self.blocks * (self.block + rpd::SIZE)
    }
}

/// A packet as it travels between ports: what follows the consumed route, and the two
/// out-of-band marks a link carries (an InfiniBand link packet; EBP or EXTEND_ERROR).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Wire {
    pub bytes: Vec<u8>,
    pub link: bool,
    pub marked_bad: bool,
}

/// A packet the sender's FIFO holds whole, ready for the crossbar.
#[derive(Debug)]
pub struct Outgoing {
    /// The head packet's number (one per packet retired, and per port reset):
    /// [`PortEngine::sent`] retires nothing if the port was reset meanwhile.
    pub seq: u64,
    pub mode: Mode,
    pub wire: Wire,
    /// An SPD pointed outside SRAM: nothing leaves, the packet is retired and counted.
    pub fault: bool,
}

/// What became of a packet offered to a port.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Arrival {
    Delivered,
    /// Flow control holds it: try again when the receiver issues a buffer.
    Held,
    /// Dropped and counted at the receiver (no buffer, too short, buffer outside SRAM).
    Dropped,
    /// The port is not receiving (PORT_ENABLE clear): the crossbar's output is dead.
    Disabled,
}

/// One port's engines. Registers (counts, configs) stay in the Lanai's register file; this
/// is the state the registers do not show.
#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct PortEngine {
    /// Words written to `port_SEND`, oldest first (at most 16; an SPD is two).
    fifo: VecDeque<u32>,
    /// The head packet's number: bumped when a packet is retired or the port reset.
    seq: u64,
    /// [regular, alternate].
    channels: [Channel; 2],
    /// Port-register counters (§13.3 `SHORT_DROP`; InfiniBand `IB_LEC`, `IB_REC`).
    pub short_drop: u16,
    pub ib_rec: u16,
    /// A valid PAUSE arrived with ENABLE_PAUSE_TIMER: the Lanai zeroes this port's timer.
    pub pause_timer: bool,
    /// The crossbar has taken the FIFO's first packet ([`Self::outgoing`]): it is the
    /// "current packet" a flush lets complete (§10.4).
    inflight: bool,
}

/// Register offsets of port `p` (0 or 1).
fn off(p: usize, r: u32) -> u32 {
    r + p as u32 * lanai::PORT1
}

impl PortEngine {
    pub fn reset(&mut self) {
        let seq = self.seq + 1;
        *self = PortEngine::default();
        self.seq = seq;
    }

    pub fn seq(&self) -> u64 {
        self.seq
    }

    pub fn set_seq(&mut self, seq: u64) {
        self.seq = seq;
    }

    pub fn free_words(&self) -> u32 {
        spd::FIFO_WORDS - self.fifo.len() as u32
    }

    /// A word written to `port_SEND`. Returns whether a packet is now whole in the FIFO.
    /// Writing while full is undefined (§10.4): the word is dropped and counted.
    pub fn send_word(&mut self, v: u32, counters: &mut Counters) -> bool {
        if self.fifo.len() as u32 >= spd::FIFO_WORDS {
            counters.lanai_send_overflows += 1;
            return false;
        }
        self.fifo.push_back(v);
        self.whole().is_some()
    }

    /// Words of the first packet if the FIFO holds it whole: its SPDs up to `DESC_LAST`,
    /// plus the cut-through SPD after a `DESC_CUT_THROUGH` last one.
    fn whole(&self) -> Option<usize> {
        let mut i = 0;
        while i + 1 < self.fifo.len() {
            let flags = self.fifo[i + 1];
            i += 2;
            if flags & spd::DESC_LAST != 0 {
                if flags & spd::DESC_CUT_THROUGH != 0 {
                    return (i + 2 <= self.fifo.len()).then_some(i + 2);
                }
                return Some(i);
            }
        }
        None
    }

    pub fn has_packet(&self) -> bool {
        self.whole().is_some()
    }

    /// `port_SEND_CONTROL` written: FLUSH discards the queue (§10.4).
    /// The packet the crossbar has taken completes; everything behind it goes.
    pub fn control(&mut self, v: u32, counters: &mut Counters) {
        if v == send_control::SEND_FLUSH && !self.fifo.is_empty() {
            let current: Vec<u32> = match (self.inflight, self.whole()) {
                (true, Some(n)) => self.fifo.drain(..n).collect(),
                _ => Vec::new(),
            };
            let mut packets = 0;
            while let Some(n) = self.whole() {
                self.fifo.drain(..n);
                packets += 1;
            }
            self.fifo.clear();
            self.fifo.extend(current);
            counters.lanai_send_flushed += packets;
        }
    }

    /// Whether the sender is stopped (AISR `SEND_STOPPED`, §10.4). Packets move whole, so
    /// "after the current packet" is at once.
    pub fn stopped(regs: &RegFile, p: usize) -> bool {
        let control = regs.get(off(p, lanai::P0_SEND_CONTROL)) as u32;
        let paused = regs.get(off(p, lanai::P0_PAUSE_COUNT)) != 0;
        match control {
            send_control::SEND_ON => false,
            send_control::SEND_PAUSE => paused,
            _ => true,
        }
    }

    /// The first whole packet, built as the port emits it: route and data segments from
    /// SRAM, then the CRCs `SEND_CONFIG` enables, invalidated when the last SPD asks or a
    /// cut-through check fails (§10.1-§10.3, §13.2).
    pub fn outgoing(&mut self, mode: Mode, send_config: u16, sram: &Sram) -> Option<Outgoing> {
        let n = self.whole()?;
        self.inflight = true;
        let words: Vec<u32> = self.fifo.iter().take(n).copied().collect();
        let mut wire = Wire::default();
        let mut route = Vec::new();
        let mut fault = false;
        let mut invalidate = false;
        let mut first = true;
        let mut i = 0;
        while i + 1 < words.len() {
            let (ptr, flags) = (words[i], words[i + 1]);
            i += 2;
            let len = (flags & spd::DESC_LENGTH_MASK) as usize;
            let room = MAX_WIRE.saturating_sub(route.len() + wire.bytes.len());
            let take = len.min(room);
            // Checked before anything is allocated: a length the FIFO accepts can be 32 MiB.
            let mut seg = Vec::new();
            if fault || ptr as u64 + len as u64 > SRAM_SIZE {
                fault = true;
            } else {
                seg.resize(take, 0);
                fault |= sram.read(ptr as u64, &mut seg).is_err();
            }
            let route_bit = flags & spd::DESC_ROUTE != 0;
            match mode {
                Mode::Myrinet if route_bit => route.extend_from_slice(&seg),
                Mode::Infiniband if route_bit && first => {
                    wire.link = true;
                    wire.bytes.extend_from_slice(&seg);
                }
                _ => wire.bytes.extend_from_slice(&seg),
            }
            first = false;
            if fault {
                return Some(Outgoing {
                    seq: self.seq,
                    mode,
                    wire: Wire::default(),
                    fault,
                });
            }
            if flags & spd::DESC_LAST != 0 {
                invalidate |= flags & spd::DESC_INVALIDATE != 0;
                if flags & spd::DESC_CUT_THROUGH != 0 && i + 1 < words.len() {
                    invalidate |= !cut_through_ok(sram, words[i], words[i + 1]);
                }
                break;
            }
        }
        append_crcs(&mut wire, send_config, invalidate);
        let mut bytes = route;
        bytes.append(&mut wire.bytes);
        wire.bytes = bytes;
        Some(Outgoing {
            seq: self.seq,
            mode,
            wire,
            fault,
        })
    }

    /// Retire the packet [`Self::outgoing`] returned (unless the port was reset since).
    /// Returns whether it was retired.
    pub fn sent(&mut self, seq: u64) -> bool {
        if seq != self.seq {
            return false;
        }
        match self.whole() {
            Some(n) => {
                self.fifo.drain(..n);
                self.inflight = false;
                self.seq += 1;
                true
            }
            None => false,
        }
    }

    /// `channel_RB` written (§9.7): the buffer becomes current, or the backup. Writing it
    /// with a backup already there is undefined: the model replaces nothing, counts it.
    /// A buffer whose data and RPL would not fit in SRAM is refused and counted.
    pub fn issue(&mut self, regs: &RegFile, p: usize, alt: bool, v: u32, counters: &mut Counters) {
        let addr = v & !7;
        let g = Geometry::of(self.config(regs, p, alt));
        if addr as u64 + g.footprint() > SRAM_SIZE {
            counters.lanai_bad_buffers += 1;
            return;
        }
        let ch = &mut self.channels[alt as usize];
        if ch.current.is_none() {
            ch.current = Some(Current {
                addr,
                next_block: 0,
                index: 0,
            });
        } else if ch.backup.is_none() {
            ch.backup = Some(addr);
        } else {
            counters.lanai_bad_buffers += 1;
        }
    }

    fn config(&self, regs: &RegFile, p: usize, alt: bool) -> u32 {
        if alt {
            regs.get(off(p, lanai::P0_A_RPL_CONFIG)) as u32 & rc::ALTERNATE_MASK
        } else {
            regs.get(off(p, lanai::P0_RPL_CONFIG)) as u32
        }
    }

    pub fn rpl_index(&self, alt: bool) -> u32 {
        self.channels[alt as usize].current.map_or(0, |c| c.index)
    }

    /// `channel_RB` read back: `DESC_COMPLETE` mirrors PACKET_RCVD; the pointer is where the
    /// next packet will start (packets arrive whole, so none is ever incomplete).
    pub fn rb_read(&self, regs: &RegFile, p: usize, alt: bool, rcvd: bool) -> u32 {
        let g = Geometry::of(self.config(regs, p, alt));
        let ptr = self.channels[alt as usize]
            .current
            .map_or(0, |c| (c.addr as u64 + c.next_block * g.block) as u32);
        (ptr & !rpd::DESC_COMPLETE) | if rcvd { rpd::DESC_COMPLETE } else { 0 }
    }

    /// The AISR status bits of this port (unshifted): buffers, STOP, send stopped, pause.
    pub fn aisr_status(&self, regs: &RegFile, p: usize, mode: Mode) -> u32 {
        let [reg, alt] = self.channels;
        let mut v = 0;
        if regs.get(off(p, lanai::P0_PAUSE_COUNT)) != 0 {
            v |= aisr::PAUSE_RCVD;
        }
        if Self::stopped(regs, p) {
            v |= aisr::SEND_STOPPED;
        }
        if reg.current.is_none() {
            v |= aisr::NO_BUFFER;
        }
        if alt.current.is_none() {
            v |= aisr::A_NO_BUFFER;
        }
        if alt.backup.is_none() {
            v |= aisr::A_NO_BACKUP;
        }
        if self.myri_stop(regs, p, mode) {
            v |= aisr::MYRI_STOP;
        }
        v
    }

    pub fn no_backup(&self) -> bool {
        self.channels[0].backup.is_none()
    }

    /// §9.7 STOP_SIZE: a Myrinet port whose regular channel has no backup and less than
    /// STOP_SIZE left in its current buffer (none at all without one) has sent STOP.
    fn myri_stop(&self, regs: &RegFile, p: usize, mode: Mode) -> bool {
        let config = regs.get(off(p, lanai::P0_RPL_CONFIG)) as u32;
        if mode != Mode::Myrinet || config & rc::PORT_ENABLE == 0 {
            return false;
        }
        let ch = &self.channels[0];
        if ch.backup.is_some() {
            return false;
        }
        let g = Geometry::of(config);
        let free = ch
            .current
            .map_or(0, |c| (g.blocks - c.next_block.min(g.blocks)) * g.block);
        free < rc::size(config >> rc::STOP_SIZE_SHIFT)
    }

    /// A packet reaches this port (§9): checked as `RECV_CONFIG` says, steered, written into
    /// the channel's current buffer from a block boundary, its RPD into the RPL.
    #[allow(clippy::too_many_arguments)]
    pub fn arrive(
        &mut self,
        regs: &mut RegFile,
        p: usize,
        mode: Mode,
        recv_config: u16,
        wire: &Wire,
        sram: &Sram,
        counters: &mut Counters,
    ) -> Arrival {
        let config = regs.get(off(p, lanai::P0_RPL_CONFIG)) as u32;
        if config & rc::PORT_ENABLE == 0 {
            return Arrival::Disabled;
        }
        if self.myri_stop(regs, p, mode) {
            return Arrival::Held;
        }
        let first = wire.bytes.first().copied().unwrap_or(0);
        let link = mode == Mode::Infiniband && wire.link;
        let alt = (config & rc::MATCH_LINK != 0 && link)
            || (config & rc::MATCH_VL15 != 0 && first & 0xF0 == 0xF0)
            || (config & rc::MATCH_OR != 0 && first & 0xF0 != 0);
        let current = self.channels[alt as usize].current;
        if current.is_none() && !alt && config & rc::ENABLE_BUFFER_DROP == 0 {
            return Arrival::Held;
        }
        let mut bytes = wire.bytes.clone();
        if bytes.len() < 5 {
            // §13.3: shorter than 5 bytes, in any mode.
            self.short_drop = self.short_drop.saturating_add(1);
            counters.lanai_rx_dropped += 1;
            return Arrival::Dropped;
        }
        let crc_ok = check_crcs(&mut bytes, recv_config);
        let marked_bad = wire.marked_bad && mode != Mode::Myrinet;
        if marked_bad && mode == Mode::Infiniband {
            self.ib_rec = self.ib_rec.saturating_add(1);
        }
        if mode == Mode::Ethernet && crc_ok && !marked_bad && is_pause(&bytes) {
            self.pause(regs, p, config);
        }
        let Some(cur) = current else {
            let drops = if alt {
                lanai::P0_A_BUFFER_DROP
            } else {
                lanai::P0_BUFFER_DROP
            };
            regs.bump_saturating(off(p, drops));
            counters.lanai_rx_dropped += 1;
            return Arrival::Dropped;
        };
        let g = Geometry::of(self.config(regs, p, alt));
        let room = (g.blocks - cur.next_block.min(g.blocks)) * g.block;
        let kept = (bytes.len() as u64).min(g.max_packet).min(room) as usize;
        let start = cur.addr as u64 + cur.next_block * g.block;
        let rpd_at = cur.addr as u64 + g.blocks * g.block + rpd::SIZE * cur.index as u64;
        let next_block = cur.next_block + (kept as u64).div_ceil(g.block).max(1);
        let last = (g.blocks - next_block.min(g.blocks)) * g.block < g.max_packet;
        let zeroes = bytes[..kept]
            .iter()
            .rev()
            .take(7)
            .take_while(|&&b| b == 0)
            .count() as u32;
        let mut flags = kept as u32 & rpd::DESC_LENGTH_MASK;
        flags |= zeroes << rpd::DESC_ZEROES_SHIFT;
        if link {
            flags |= rpd::DESC_LINK;
        }
        if marked_bad {
            flags |= rpd::DESC_MARKED_BAD;
        }
        if last {
            flags |= rpd::DESC_LAST;
        }
        let mut desc = [0u8; 8];
        desc[..4].copy_from_slice(&(start as u32).to_be_bytes());
        desc[4..].copy_from_slice(&flags.to_be_bytes());
        if sram.write(start, &bytes[..kept]).is_err() || sram.write(rpd_at, &desc).is_err() {
            // The configuration changed under an issued buffer so that it now runs past SRAM.
            counters.lanai_bad_buffers += 1;
            counters.lanai_rx_dropped += 1;
            regs.bump_saturating(off(p, lanai::P0_MEMORY_DROP));
            return Arrival::Dropped;
        }
        let ch = &mut self.channels[alt as usize];
        ch.current = if last {
            ch.backup.take().map(|addr| Current {
                addr,
                next_block: 0,
                index: 0,
            })
        } else {
            Some(Current {
                next_block,
                index: cur.index + 1,
                ..cur
            })
        };
        let count = if alt {
            lanai::P0_A_RECV_COUNT
        } else {
            lanai::P0_RECV_COUNT
        };
        regs.bump_saturating(off(p, count));
        counters.lanai_packets_received += 1;
        Arrival::Delivered
    }

    /// A valid PAUSE (§10.4 `port_PAUSE_COUNT`): counted (saturating), and with
    /// ENABLE_PAUSE_TIMER the port's interval timer (IT0 for port 0, IT1 for port 1) is set
    /// to 0 by the caller, which owns the timers.
    fn pause(&mut self, regs: &mut RegFile, p: usize, config: u32) {
        regs.bump_saturating(off(p, lanai::P0_PAUSE_COUNT));
        if config & rc::ENABLE_PAUSE_TIMER != 0 {
            self.pause_timer = true;
        }
    }
}

/// A MAC Control PAUSE: Length/Type 88-08, opcode 00-01 (§9.4, IEEE 802.3 §31B).
fn is_pause(b: &[u8]) -> bool {
    b.len() >= 16 && b[12..16] == [0x88, 0x08, 0x00, 0x01]
}

fn order(config: u16) -> Order {
    Order(((config >> cc::CRC32_BIT_ORDER_SHIFT) & 3) as u8)
}

/// Append the CRCs `SEND_CONFIG` enables: CRC-32 over the data, then CRC-8 (Myrinet) or
/// CRC-16 (InfiniBand VCRC) over data and CRC-32. Invalidation complements the CRCs its
/// INVALIDATE_CRCx bits name and marks the packet bad with INVALIDATE_MARK_BAD.
fn append_crcs(wire: &mut Wire, config: u16, invalidate: bool) {
    let inv = |bit: u16| invalidate && config & bit != 0;
    if config & cc::ENABLE_CRC32 != 0 {
        let o = order(config);
        let mut c = crc::crc32(o, config & cc::CRC32_INFINIBAND != 0, &wire.bytes);
        if inv(cc::INVALIDATE_CRC32) {
            c = !c;
        }
        wire.bytes.extend_from_slice(&crc::crc32_bytes(o, c));
    }
    if config & cc::ENABLE_CRC8 != 0 {
        let mut c = crc::crc8(&wire.bytes);
        if inv(cc::INVALIDATE_CRC8) {
            c = !c;
        }
        wire.bytes.push(c);
    } else if config & cc::ENABLE_CRC16 != 0 {
        let mut c = crc::crc16(&wire.bytes);
        if inv(cc::INVALIDATE_CRC16) {
            c = !c;
        }
        wire.bytes.extend_from_slice(&c.to_be_bytes());
    }
    wire.marked_bad |= inv(cc::INVALIDATE_MARK_BAD);
}

/// XOR the computed CRCs into the received ones in place (§9.6): a good packet ends in as
/// many zero bytes as it has CRC bytes. Returns whether every enabled CRC checked.
fn check_crcs(bytes: &mut [u8], config: u16) -> bool {
    let n = bytes.len();
    let tail = if config & cc::ENABLE_CRC8 != 0 {
        1
    } else if config & cc::ENABLE_CRC16 != 0 {
        2
    } else {
        0
    };
    let c32 = if config & cc::ENABLE_CRC32 != 0 { 4 } else { 0 };
    if n < tail + c32 {
        return false;
    }
    // The short CRC covers the received bytes before it, CRC-32 included as received.
    match tail {
        1 => {
            let c = crc::crc8(&bytes[..n - 1]);
            bytes[n - 1] ^= c;
        }
        2 => {
            let c = crc::crc16(&bytes[..n - 2]).to_be_bytes();
            bytes[n - 2] ^= c[0];
            bytes[n - 1] ^= c[1];
        }
        _ => {}
    }
    if c32 > 0 {
        let o = order(config);
        let end = n - tail;
        let c = crc::crc32(o, config & cc::CRC32_INFINIBAND != 0, &bytes[..end - 4]);
        for (b, x) in bytes[end - 4..end].iter_mut().zip(crc::crc32_bytes(o, c)) {
            *b ^= x;
        }
    }
    bytes[n - tail - c32..].iter().all(|&b| b == 0)
}

/// §10.3: the matching RPD's length word must pass every check the cut-through SPD asks.
fn cut_through_ok(sram: &Sram, at: u32, check: u32) -> bool {
    let Ok(word) = sram.read_be32(at as u64) else {
        return false;
    };
    let must_be_clear = check & (spd::CT_INVALID | spd::CT_LINK | spd::CT_MARKED_BAD);
    let zeroes = (word >> rpd::DESC_ZEROES_SHIFT) & 7;
    word & must_be_clear == 0
        && zeroes >= (check >> spd::CT_ZEROES_SHIFT) & 7
        && word & rpd::DESC_LENGTH_MASK == check & spd::DESC_LENGTH_MASK
}

/// The port registers a port keeps as Z* counters, by PORT_REG (port 0 numbering).
pub fn is_port_counter(r: u8) -> bool {
    matches!(
        r & !port_reg::PORT1,
        port_reg::SHORT_DROP
            | port_reg::ERROR_8B10B
            | port_reg::GE_FALSE_CARRIER
            | port_reg::IB_LERC
            | port_reg::IB_LEC
            | port_reg::IB_REC
    )
}
