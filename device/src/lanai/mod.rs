//! The Lanai X special registers (App. A) behind BAR0 + 0xFFFC00.

pub mod dma;

use std::sync::Arc;
use std::time::Instant;

use ni_abi::lanai::{self, isr};
use ni_abi::regs::{Kind, RegDef};

use crate::counters::Counters;
use crate::dma::DmaSpace;
use crate::fabric::port::Port;
use crate::regfile::{read_lanes, write_lanes, Endian, RegFile};
use crate::sram::Sram;

/// The model's nominal clocks: the RTC and interval timers tick every 0.5 µs (§6); the
/// CPU clock is not given by the spec, so the model reports a 250 MHz core and a 66 MHz PCI.
const CPU_HZ: u64 = 250_000_000;
const PCI_HZ: u64 = 66_000_000;

pub struct Lanai {
    pub regs: RegFile,
    pub dma: dma::DmaEngine,
    epoch: Instant,
    rtc: (u32, u64),
    cpuc: (u32, u64),
    /// Value written and tick at which it was written; `None` once it has underflowed.
    timers: [(u32, u64, bool); 3],
    dispatch_staging: [u32; 4],
    /// Port 0's link (mode and CLSM state), owned by the fabric: a reset does not unplug it.
    pub link: Arc<Port>,
    /// Port registers behind PORT_ADDR/PORT_DATA that are plain storage (TEST, RECV_CONFIG,
    /// SEND_CONFIG, ...), indexed by PORT_REG bits 6:0.
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
        Lanai {
            regs: RegFile::new(&lanai::SPECIAL_REGS),
            dma: dma::DmaEngine::default(),
            epoch: Instant::now(),
            rtc: (0, 0),
            cpuc: (0, 0),
            timers: [(0, 0, true); 3],
            dispatch_staging: [0; 4],
            link: Arc::new(Port::default()),
            port_regs: [0; 128],
            ldc_seen: 0,
        }
    }

    pub fn reset(&mut self) {
        let link = self.link.clone();
        *self = Lanai::new();
        self.ldc_seen = link.downs();
        self.link = link;
    }

    /// A port register read through PORT_ADDR (PORT_READ = 1): MODE and STATE come from the
    /// link, IB_LDC counts its downs, the rest is what software last wrote.
    fn port_read(&mut self, r: u8) -> u16 {
        if let Some(v) = self.link.register(r) {
            return v;
        }
        if r == crate::fabric::port::reg::IB_LDC {
            let downs = self.link.downs();
            let n = downs.saturating_sub(self.ldc_seen).min(0xFF);
            self.ldc_seen = downs;
            return n as u16;
        }
        self.port_regs[r as usize & 0x7F]
    }

    /// A port register write (PORT_ADDR with PORT_READ = 0, then PORT_DATA). MODE and STATE
    /// are the administrator's (`ni-ctl port set`): writes to them are ignored.
    fn port_write(&mut self, r: u8, v: u16) {
        if self.link.register(r).is_none() {
            self.port_regs[r as usize & 0x7F] = v;
        }
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
        for (p, base) in [(0u32, 0u32), (isr::P1_SHIFT, lanai::PORT1)] {
            let free = self.regs.get(lanai::P0_SEND_FREE_COUNT + base);
            let limit = self.regs.get(lanai::P0_SEND_FREE_LIMIT + base);
            if free >= limit + 2 {
                v |= isr::P0_SEND_READY << p;
            }
            if self.regs.get(lanai::P0_SEND_COUNT + base) != 0 {
                v |= isr::P0_PACKET_SENT << p;
            }
            if self.regs.get(lanai::P0_RECV_COUNT + base) != 0 {
                v |= isr::P0_PACKET_RCVD << p;
            }
            if self.regs.get(lanai::P0_A_RECV_COUNT + base) != 0 {
                v |= isr::P0_A_PACKET_RCVD << p;
            }
            // No receive buffer has been issued: no backup either.
            v |= isr::P0_NO_BACKUP << p;
        }
        // Port 0 is the NI's link to the fabric; port 1 has no cable.
        if self.link.link_ready() {
            v |= isr::P0_LINK_READY;
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
            lanai::DISPATCH_INDEX => self.dispatch_index(),
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

    /// Event dispatch is not programmed until software writes DISPATCH_CONFIG blocks; with
    /// none configured no block matches and the index is 4 x 64.
    fn dispatch_index(&self) -> u64 {
        256
    }

    fn write_reg(&mut self, reg: &'static RegDef, value: u64, fx: &mut Effects) {
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
                }
            }
            lanai::DISPATCH_ISR_ON
            | lanai::DISPATCH_ISR_OFF
            | lanai::DISPATCH_STATE_ON
            | lanai::DISPATCH_STATE_OFF => {
                let i = ((reg.offset - lanai::DISPATCH_ISR_ON) / 8) as usize;
                self.dispatch_staging[i] = value as u32;
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
            self.write_reg(r, v, &mut fx);
        }
        if hits == 0 {
            bus.counters.unmapped_register += 1;
        }
        fx
    }
}

/// PORT_ADDR bit 15: read the port register named by bits 6:0 into PORT_DATA.
const PORT_READ: u64 = 1 << 15;

/// 2-, 4- and 8-byte accesses are aligned by ignoring the low address bits (§5).
fn align(offset: u32, len: usize) -> u32 {
    match len {
        2 | 4 | 8 => offset & !(len as u32 - 1),
        _ => offset,
    }
}
