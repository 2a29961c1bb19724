//! The Lanai X special registers (App. A) behind BAR0 + 0xFFFC00, and the engines behind
//! them: one module per block of the chip (`packet` the ports' send and receive DMA of
//! §9/§10, `copy` and `crc` the copy/CRC-32 engine of §8, `dispatch` the event dispatch of
//! §15, `dma` the PCI-DMA engine of §12). There is no Lanai CPU: the host plays the Lanai
//! program through this page and SRAM.

pub mod copy;
pub mod crc;
pub mod dispatch;
pub mod dma;
pub mod packet;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use ni_abi::lanai::{self, aisr, isr, port_reg, rpl_config};
use ni_abi::regs::{Kind, RegDef};

use crate::counters::Counters;
use crate::dma::DmaSpace;
use crate::fabric::port::{Mode, Port};
use crate::regfile::{read_lanes, write_lanes, Endian, RegFile};
use crate::sram::Sram;

/// The model's nominal clocks: the RTC and interval timers tick every 0.5 µs (§6); the
/// CPU clock is not given by the spec, so the model reports a 250 MHz core and a 66 MHz PCI.
const CPU_HZ: u64 = 250_000_000;
const PCI_HZ: u64 = 66_000_000;

#[derive(serde::Serialize, serde::Deserialize)]
pub struct Lanai {
    #[serde(serialize_with = "crate::regfile::serialize_values")]
    #[serde(deserialize_with = "regs_serde::deserialize")]
    pub regs: RegFile,
    pub dma: dma::DmaEngine,
    #[serde(with = "crate::handover::serde_with::instant")]
    epoch: Instant,
    rtc: (u32, u64),
    cpuc: (u32, u64),
    /// Value written and tick at which it was written; `None` once it has underflowed.
    timers: [(u32, u64, bool); 3],
    dispatch: dispatch::Dispatch,
    copy: copy::Copy,
    crc: crc::Crc32,
    /// Port 0 and port 1's packet engines.
    pub ports: [packet::PortEngine; 2],
    arbiter: [u8; 32],
    /// Port 0's link (mode and CLSM state), owned by the fabric: a reset does not unplug it.
    #[serde(skip)]
    pub link: Arc<Port>,
    /// Set when a port's send FIFO holds a whole packet, or a receiver issued a buffer a held
    /// packet may be waiting for: the fabric's crossbar (`fabric/lanai.rs`) then looks. Shared
    /// with the fabric, so it survives a reset.
    #[serde(skip)]
    pub packets: Arc<AtomicBool>,
    /// Port registers behind PORT_ADDR/PORT_DATA that are plain storage (TEST, RECV_CONFIG,
    /// SEND_CONFIG, ...), indexed by PORT_REG bits 6:0.
    #[serde(with = "crate::handover::serde_with::array")]
    port_regs: [u16; 128],
    /// `link.downs()` at the last IB_LDC read (IB_LDC is reset-on-read).
    ldc_seen: u64,
}

impl Default for Lanai {
    fn default() -> Self {
        Self::new()
    }
}

/// What the rest of the NI must hear about after a special-register access.
#[derive(Default, Debug)]
pub struct Effects {
    pub interrupt_changed: bool,
    /// An engine has work: the NI hands it to the background (`Ni::step_engines`).
    pub engines_started: bool,
    /// The crossbar has something to look at (`Lanai::packets` is set): ring the poller.
    pub packets: bool,
}

/// Everything outside the Lanai that its registers reach.
pub struct Bus<'a> {
    pub sram: &'a Sram,
    pub dma: &'a DmaSpace,
    pub bus_master: bool,
    pub counters: &'a mut Counters,
}

impl Lanai {
    pub fn new() -> Self {
        let mut l = Lanai {
            regs: RegFile::new(&lanai::SPECIAL_REGS),
            dma: dma::DmaEngine::default(),
            epoch: Instant::now(),
            rtc: (0, 0),
            cpuc: (0, 0),
            timers: [(0, 0, true); 3],
            dispatch: dispatch::Dispatch::default(),
            copy: copy::Copy::default(),
            crc: crc::Crc32::default(),
            ports: Default::default(),
            arbiter: [0; 32],
            link: Arc::new(Port::default()),
            packets: Arc::new(AtomicBool::new(false)),
            port_regs: [0; 128],
            ldc_seen: 0,
        };
        // The start-up code (§11.2) points the config-space Read Mask at the top of SRAM,
        // away from the fast path's control page at 0 (fastpath.md).
        l.regs
            .set(lanai::DMA_CONFIG, lanai::READ_MASK_DEFAULT as u64);
        l
    }

    pub fn reset(&mut self) {
        let link = self.link.clone();
        let packets = self.packets.clone();
        let seqs = [self.ports[0].seq(), self.ports[1].seq()];
        *self = Lanai::new();
        self.ldc_seen = link.downs();
        link.reset_driver();
        self.link = link;
        self.packets = packets;
        for (p, s) in self.ports.iter_mut().zip(seqs) {
            p.set_seq(s + 1);
        }
    }

    /// Port `p`'s mode and whether it has carrier (port 1 has no cable).
    pub fn port_mode(&self, p: usize) -> (Mode, bool) {
        if p == 0 {
            (self.link.mode(), self.link.link_ready())
        } else {
            (Mode::Myrinet, false)
        }
    }

    /// A port register read through PORT_ADDR (PORT_READ = 1): MODE and STATE come from the
    /// link, the Z* counters clear, the rest is what software last wrote.
    fn port_read(&mut self, r: u8) -> u16 {
        let r = r & 0x7F;
        if let Some(v) = self.link.register(r) {
            return v;
        }
        let p = (r >= port_reg::PORT1) as usize;
        let r0 = r & !port_reg::PORT1;
        if r0 == port_reg::IB_LDC {
            if p == 1 {
                return 0;
            }
            let downs = self.link.downs();
            let n = downs.saturating_sub(self.ldc_seen).min(0xFF);
            self.ldc_seen = downs;
            return n as u16;
        }
        if packet::is_port_counter(r) {
            let engine = &mut self.ports[p];
            return match r0 {
                port_reg::SHORT_DROP => std::mem::take(&mut engine.short_drop),
                port_reg::IB_REC => std::mem::take(&mut engine.ib_rec),
                _ => std::mem::take(&mut self.port_regs[r as usize]),
            };
        }
        self.port_regs[r as usize]
    }

    /// A port register write (PORT_ADDR with PORT_READ = 0, then PORT_DATA). Port 0's MODE
    /// keeps the least significant 1 written and drives the link; its STATE is the CLSM's
    /// (writes ignored: the model has no test mode).
    fn port_write(&mut self, r: u8, v: u16) {
        let r = r & 0x7F;
        if r == port_reg::MODE {
            self.link.driver_write_mode(v);
        } else if self.link.register(r).is_none() && !packet::is_port_counter(r) {
            self.port_regs[r as usize] = v;
        }
    }

    /// SEND_CONFIG / RECV_CONFIG of port `p` (§13.2).
    pub fn crc_config(&self, p: usize, send: bool) -> u16 {
        let r = if send {
            port_reg::SEND_CONFIG
        } else {
            port_reg::RECV_CONFIG
        };
        self.port_regs[(r + p as u8 * port_reg::PORT1) as usize]
    }

    fn ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    fn ticks(&self) -> u64 {
        self.ns() / 500
    }

    /// Latch TIME_INT for every interval timer that has passed 0 -> 0xFFFFFFFF.
    fn update_timers(&mut self) {
        let now = self.ticks();
        for i in 0..3 {
            let (value, at, armed) = self.timers[i];
            if armed && now - at > value as u64 {
                self.timers[i].2 = false;
                let v = self.regs.get(lanai::ISR) | (isr::TIME_INT0 << i) as u64;
                self.regs.set(lanai::ISR, v);
            }
        }
    }

    /// The ISR as software reads it: latched `_INT` and `REQ_ACK` bits plus live status.
    pub fn isr(&mut self) -> u32 {
        self.update_timers();
        let mut v = self.regs.get(lanai::ISR) as u32;
        for (i, off) in lanai::DMA_COUNT.iter().enumerate() {
            if self.regs.get(*off) != 0 {
                v |= isr::DMA_DONE0 << i;
            }
        }
        if self.copy.busy() {
            v |= isr::COPY_BUSY;
        }
        let aisr = self.aisr();
        let on = self.regs.get(lanai::AISR_ON) as u32;
        let off = self.regs.get(lanai::AISR_OFF) as u32;
        let events = (aisr & on) | (!aisr & off);
        for (p, base) in [(0usize, 0u32), (1, lanai::PORT1)] {
            let shift = p as u32 * isr::P1_SHIFT;
            let free = self.ports[p].free_words() as u64;
            let limit = self.regs.get(lanai::P0_SEND_FREE_LIMIT + base);
            if free >= limit + 2 {
                v |= isr::P0_SEND_READY << shift;
            }
            if self.regs.get(lanai::P0_SEND_COUNT + base) != 0 {
                v |= isr::P0_PACKET_SENT << shift;
            }
            if self.regs.get(lanai::P0_RECV_COUNT + base) != 0 {
                v |= isr::P0_PACKET_RCVD << shift;
            }
            if self.regs.get(lanai::P0_A_RECV_COUNT + base) != 0 {
                v |= isr::P0_A_PACKET_RCVD << shift;
            }
            if self.ports[p].no_backup() {
                v |= isr::P0_NO_BACKUP << shift;
            }
            if (events >> (p as u32 * aisr::P1_SHIFT)) & aisr::PORT_MASK != 0 {
                v |= isr::P0_EVENT << shift;
            }
            if self.port_mode(p).1 {
                v |= isr::P0_LINK_READY << shift;
            }
        }
        v
    }

    /// The AISR (§14): latched `_INT` bits plus each port's status.
    pub fn aisr(&self) -> u32 {
        let mut v = self.regs.get(lanai::AISR) as u32;
        for p in 0..2 {
            let mode = self.port_mode(p).0;
            v |= self.ports[p].aisr_status(&self.regs, p, mode) << (p as u32 * aisr::P1_SHIFT);
        }
        v
    }

    /// `REQ_ACK[0]`, which with `PCI_INT_ENABLE` is the host interrupt (§11.1).
    pub fn req_ack0(&self) -> bool {
        self.regs.get(lanai::ISR) as u32 & isr::REQ_ACK0 != 0
    }

    fn read_reg(&mut self, reg: &'static RegDef, bus: &Bus) -> Option<u64> {
        if !reg.sup.read {
            // Z* counters cannot be read over PCI: 0, and no side effect (App. A note).
            return None;
        }
        let ticks = self.ticks();
        Some(match reg.offset {
            lanai::ISR => self.isr() as u64,
            lanai::RTC => self.rtc.0.wrapping_add((ticks - self.rtc.1) as u32) as u64,
            lanai::CPUC => {
                let cycles = self.ns() as u128 * CPU_HZ as u128 / 1_000_000_000;
                self.cpuc
                    .0
                    .wrapping_add((cycles as u64 - self.cpuc.1) as u32) as u64
            }
            lanai::IT0 | lanai::IT1 | lanai::IT2 => {
                let i = ((reg.offset - lanai::IT0) / 8) as usize;
                let (value, at, _) = self.timers[i];
                value.wrapping_sub((ticks - at) as u32) as u64
            }
            lanai::PCI_CLOCK => (8192 * PCI_HZ / CPU_HZ) & 0x7FFF,
            lanai::DISPATCH_INDEX => {
                let isr = self.isr();
                self.dispatch.index(isr) as u64
            }
            lanai::AISR => self.aisr() as u64,
            lanai::CRC32 => self.crc.read(self.crc_order()) as u64,
            lanai::ARBITER_CODE => {
                self.arbiter[self.regs.get(lanai::ARBITER_SLOT) as usize & 31] as u64
            }
            o if port_of(o, lanai::P0_SEND_FREE_COUNT).is_some() => {
                self.ports[port_of(o, lanai::P0_SEND_FREE_COUNT).unwrap_or(0)].free_words() as u64
            }
            o if rx_channel(o, lanai::P0_RPL_INDEX, lanai::P0_A_RPL_INDEX).is_some() => {
                let (p, alt) =
                    rx_channel(o, lanai::P0_RPL_INDEX, lanai::P0_A_RPL_INDEX).unwrap_or((0, false));
                self.ports[p].rpl_index(alt) as u64
            }
            o if rx_channel(o, lanai::P0_RB, lanai::P0_A_RB).is_some() => {
                let (p, alt) = rx_channel(o, lanai::P0_RB, lanai::P0_A_RB).unwrap_or((0, false));
                let count = if alt {
                    lanai::P0_A_RECV_COUNT
                } else {
                    lanai::P0_RECV_COUNT
                };
                let rcvd = self.regs.get(count + p as u32 * lanai::PORT1) != 0;
                self.ports[p].rb_read(&self.regs, p, alt, rcvd) as u64
            }
            lanai::DMA_CONFIG => {
                let v = self.regs.get(lanai::DMA_CONFIG) & !(lanai::dma_config::DMA_ENABLE as u64);
                if bus.bus_master {
                    v | lanai::dma_config::DMA_ENABLE as u64
                } else {
                    v
                }
            }
            _ if reg.kind == Kind::Action => 0,
            _ => self.regs.store_read(reg),
        })
    }

    /// Something a queued or held packet waits for may have changed: the crossbar looks.
    fn wake_crossbar(&self, fx: &mut Effects) {
        self.packets.store(true, Ordering::Release);
        fx.packets = true;
    }

    fn crc_order(&self) -> crc::Order {
        crc::Order(((self.regs.get(lanai::CRC32_CONFIG) >> 1) & 3) as u8)
    }

    /// Interval timer `i` set to 0 by a PAUSE (§9.7 ENABLE_PAUSE_TIMER): it underflows on the
    /// next tick.
    fn zero_timer(&mut self, i: usize) {
        self.timers[i] = (0, self.ticks(), true);
    }

    fn write_reg(&mut self, reg: &'static RegDef, value: u64, fx: &mut Effects, bus: &mut Bus) {
        if !reg.sup.write {
            return;
        }
        let ticks = self.ticks();
        match reg.offset {
            lanai::RTC => self.rtc = (value as u32, ticks),
            lanai::CPUC => {
                let cycles = self.ns() as u128 * CPU_HZ as u128 / 1_000_000_000;
                self.cpuc = (value as u32, cycles as u64);
            }
            lanai::IT0 | lanai::IT1 | lanai::IT2 => {
                let i = ((reg.offset - lanai::IT0) / 8) as usize;
                self.timers[i] = (value as u32, ticks, true);
                // Writing ITi clears TIME_INT[i].
                let v = self.regs.get(lanai::ISR) & !((isr::TIME_INT0 << i) as u64);
                self.regs.set(lanai::ISR, v);
            }
            lanai::ISR => {
                self.regs.store_write(reg, value);
                fx.interrupt_changed = true;
            }
            lanai::PORT_ADDR => {
                let v = self.regs.store_write(reg, value);
                if v & PORT_READ != 0 {
                    let data = self.port_read((v & 0x7F) as u8);
                    self.regs.set(lanai::PORT_DATA, data as u64);
                }
            }
            lanai::PORT_DATA => {
                let v = self.regs.store_write(reg, value);
                let addr = self.regs.get(lanai::PORT_ADDR);
                if addr & PORT_READ == 0 {
                    self.port_write((addr & 0x7F) as u8, v as u16);
                    // A new MODE may give the port carrier: queued packets may move.
                    self.wake_crossbar(fx);
                }
            }
            lanai::DISPATCH_ISR_ON
            | lanai::DISPATCH_ISR_OFF
            | lanai::DISPATCH_STATE_ON
            | lanai::DISPATCH_STATE_OFF => {
                let i = ((reg.offset - lanai::DISPATCH_ISR_ON) / 8) as usize;
                self.dispatch.stage(i, value as u32);
            }
            lanai::DISPATCH_CONFIG => self.dispatch.configure(value as u32),
            lanai::DISPATCH_STATE => self.dispatch.set_state(value as u32),
            lanai::ARBITER_CODE => {
                self.arbiter[self.regs.get(lanai::ARBITER_SLOT) as usize & 31] = value as u8 & 0xF;
            }
            lanai::AISR => {
                // Only the latched _INT bits are stored; W1C clears them.
                self.regs.store_write(reg, value);
            }
            lanai::CRC32 => {
                let o = self.crc_order();
                self.crc.write(o, value as u32);
            }
            lanai::CRC32_BYTE | lanai::CRC32_HALF | lanai::CRC32_WORD => {
                let o = self.crc_order();
                let w = reg.width as usize;
                self.crc.feed(o, &(value as u32).to_be_bytes()[4 - w..]);
            }
            lanai::COPY_ABORT => self.copy.abort(),
            lanai::COPY => {
                let o = self.crc_order();
                match self.copy.write(value as u32, bus.sram, &mut self.crc, o) {
                    copy::Outcome::Pending => {}
                    copy::Outcome::Done(n) => {
                        bus.counters.lanai_copies += 1;
                        bus.counters.lanai_copy_bytes += n;
                    }
                    copy::Outcome::Fault => bus.counters.lanai_copy_faults += 1,
                }
            }
            o if port_of(o, lanai::P0_SEND).is_some() => {
                let p = port_of(o, lanai::P0_SEND).unwrap_or(0);
                if self.ports[p].send_word(value as u32, bus.counters) {
                    self.wake_crossbar(fx);
                }
            }
            o if port_of(o, lanai::P0_SEND_CONTROL).is_some() => {
                let p = port_of(o, lanai::P0_SEND_CONTROL).unwrap_or(0);
                let v = self.regs.store_write(reg, value);
                self.ports[p].control(v as u32, bus.counters);
                // Resuming may let held packets go.
                self.wake_crossbar(fx);
            }
            o if port_of(o, lanai::P0_PAUSE_COUNT).is_some() => {
                self.regs.store_write(reg, value);
                self.wake_crossbar(fx);
            }
            o if rx_channel(o, lanai::P0_RB, lanai::P0_A_RB).is_some() => {
                let (p, alt) = rx_channel(o, lanai::P0_RB, lanai::P0_A_RB).unwrap_or((0, false));
                self.ports[p].issue(&self.regs, p, alt, value as u32, bus.counters);
                // A packet held for want of a buffer (STOP, §9.7) may move now (GO).
                self.wake_crossbar(fx);
            }
            o if port_of(o, lanai::P0_RPL_CONFIG).is_some() => {
                let p = port_of(o, lanai::P0_RPL_CONFIG).unwrap_or(0);
                let was = self.regs.get(o) as u32 & rpl_config::PORT_ENABLE;
                let v = self.regs.store_write(reg, value) as u32;
                if was != 0 && v & rpl_config::PORT_ENABLE == 0 {
                    // PORT_ENABLE cleared resets the port (§9.7): its buffers, its queue
                    // and its counts.
                    self.ports[p].reset();
                    let base = p as u32 * lanai::PORT1;
                    for r in [
                        lanai::P0_RECV_COUNT,
                        lanai::P0_A_RECV_COUNT,
                        lanai::P0_SEND_COUNT,
                        lanai::P0_PAUSE_COUNT,
                    ] {
                        self.regs.set(r + base, 0);
                    }
                }
                self.wake_crossbar(fx);
            }
            o if lanai::DMA_POINTER.contains(&o) => {
                let ch = lanai::DMA_POINTER.iter().position(|&p| p == o).unwrap_or(0);
                self.dma.pointer_write(ch, value as u32);
                fx.engines_started = true;
                fx.interrupt_changed = true;
            }
            o if lanai::DMA_COUNT.contains(&o) => {
                self.regs.store_write(reg, value);
                // A channel stalled at 128 may run again.
                fx.engines_started = true;
                fx.interrupt_changed = true;
            }
            _ => {
                self.regs.store_write(reg, value);
            }
        }
    }

    /// The packet port `p` would emit now, if any: a whole one in its FIFO, the port enabled,
    /// not stopped (§10.4), with carrier (a port without sync sends nothing; it waits).
    pub fn outgoing(&mut self, p: usize, sram: &Sram) -> Option<packet::Outgoing> {
        let (mode, carrier) = self.port_mode(p);
        let config = self
            .regs
            .get(lanai::P0_RPL_CONFIG + p as u32 * lanai::PORT1) as u32;
        if !carrier
            || config & rpl_config::PORT_ENABLE == 0
            || packet::PortEngine::stopped(&self.regs, p)
        {
            return None;
        }
        let config = self.crc_config(p, true);
        self.ports[p].outgoing(mode, config, sram)
    }

    /// Retire the packet `outgoing` gave (unless flushed since): `SEND_COUNT` + 1 (§10.4),
    /// and in half-duplex GigE the collision outcome (no collision on a switched port).
    pub fn sent(&mut self, p: usize, seq: u64) -> bool {
        if !self.ports[p].sent(seq) {
            return false;
        }
        let base = p as u32 * lanai::PORT1;
        self.regs.bump_saturating(lanai::P0_SEND_COUNT + base);
        let half = self.port_regs[(port_reg::GE_CONFIG + p as u8 * port_reg::PORT1) as usize]
            & port_reg::GE_HALF_DUPLEX_MODE
            != 0;
        if half && self.port_mode(p).0 == Mode::Ethernet {
            let v = self.regs.get(lanai::AISR)
                | (aisr::GEX_NO_COLL_INT << (p as u32 * aisr::P1_SHIFT)) as u64;
            self.regs.set(lanai::AISR, v);
        }
        true
    }

    /// A packet reaching port `p` from the crossbar.
    pub fn arrive(&mut self, p: usize, wire: &packet::Wire, bus: &mut Bus) -> packet::Arrival {
        let (mode, carrier) = self.port_mode(p);
        if !carrier {
            return packet::Arrival::Disabled;
        }
        let config = self.crc_config(p, false);
        let a = self.ports[p].arrive(
            &mut self.regs,
            p,
            mode,
            config,
            wire,
            bus.sram,
            bus.counters,
        );
        if std::mem::take(&mut self.ports[p].pause_timer) {
            self.zero_timer(p);
        }
        a
    }

    /// Whether a port's FIFO still holds a whole packet.
    pub fn packets_queued(&self) -> bool {
        self.ports.iter().any(|p| p.has_packet())
    }

    /// One bounded step of the PCI-DMA engine, moving at most `max_bytes`. Returns whether it has more to do (the
    /// fabric's poller calls again until it has not).
    pub fn run_dma(&mut self, bus: &mut Bus, max_bytes: u64) -> bool {
        if !bus.bus_master {
            return false;
        }
        let (faults, more) = self.dma.run(&mut self.regs, bus, max_bytes);
        if faults > 0 {
            let v = self.regs.get(lanai::ISR) | isr::DMA_ERROR_INT as u64;
            self.regs.set(lanai::ISR, v);
        }
        more
    }

    /// Whether the engines have work queued that a step could do.
    pub fn engines_busy(&self) -> bool {
        self.dma.busy(&self.regs)
    }

    /// A bus read of `data.len()` bytes at `offset` in the specials window.
    pub fn read(&mut self, offset: u32, data: &mut [u8], bus: &mut Bus) {
        let offset = align(offset, data.len());
        let hits = read_lanes(&lanai::SPECIAL_REGS, Endian::Big, offset, data, |r| {
            self.read_reg(r, bus)
        });
        if hits == 0 {
            bus.counters.unmapped_register += 1;
        }
    }

    pub fn write(&mut self, offset: u32, data: &[u8], bus: &mut Bus) -> Effects {
        let offset = align(offset, data.len());
        let mut fx = Effects::default();
        let mut writes = Vec::with_capacity(2);
        let hits = write_lanes(
            &lanai::SPECIAL_REGS,
            Endian::Big,
            offset,
            data,
            |r| self.regs.get(r.offset),
            |r, v| writes.push((r, v)),
        );
        for (r, v) in writes {
            self.write_reg(r, v, &mut fx, bus);
        }
        if hits == 0 {
            bus.counters.unmapped_register += 1;
        }
        fx
    }
}

/// PORT_ADDR bit 15: read the port register named by bits 6:0 into PORT_DATA.
const PORT_READ: u64 = port_reg::PORT_READ as u64;

/// Which port's copy of the port-0 register `p0` offset `o` is.
fn port_of(o: u32, p0: u32) -> Option<usize> {
    if o == p0 {
        Some(0)
    } else if o == p0 + lanai::PORT1 {
        Some(1)
    } else {
        None
    }
}

/// Which port and channel (regular, alternate) register offset `o` is, for a channel
/// register whose regular and alternate port-0 offsets are `reg` and `alt`.
fn rx_channel(o: u32, reg: u32, alt: u32) -> Option<(usize, bool)> {
    port_of(o, reg)
        .map(|p| (p, false))
        .or_else(|| port_of(o, alt).map(|p| (p, true)))
}

/// 2-, 4- and 8-byte accesses are aligned by ignoring the low address bits (§5).
fn align(offset: u32, len: usize) -> u32 {
    match len {
        2 | 4 | 8 => offset & !(len as u32 - 1),
        _ => offset,
    }
}

mod regs_serde {
    pub fn deserialize<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<crate::regfile::RegFile, D::Error> {
        crate::regfile::deserialize_values(&ni_abi::lanai::SPECIAL_REGS, d)
    }
}
