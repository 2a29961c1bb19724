//! The CM-5 NI register file (App. A) behind BAR2: user window and supervisor window.

pub mod combine;

use std::time::Instant;

use ni_abi::cm5::{self, bad_address, cause, green, level};
use ni_abi::regs::{Kind, RegDef};

use crate::counters::Counters;
use crate::regfile::RegFile;

/// The model's CM-5 node clock for `ni_time` ("+1 per CPU clock", §6.5): a 40 MHz SPARC.
const CPU_HZ: u128 = 40_000_000;

pub struct Cm5 {
    pub regs: RegFile,
    chunk_table: [u8; 64],
    epoch: Instant,
    time: (u32, u64),
}

impl Default for Cm5 {
    fn default() -> Self {
        Self::new()
    }
}

/// The interrupt colours, in MSI-X vector order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Colour {
    Red,
    Orange,
    Yellow,
    Green,
}

impl Cm5 {
    pub fn new() -> Self {
        Cm5 {
            regs: RegFile::new(&cm5::REGS),
            chunk_table: [0; 64],
            epoch: Instant::now(),
            time: (0, 0),
        }
    }

    /// NI Reset (§6.10): the table's reset values are the handbook's (locks and abstains 1,
    /// levels 0, flush_complete and sync_global_complete 1, longest_dr_message 5,
    /// disable_bus_error 0), FIFOs empty.
    pub fn reset(&mut self) {
        *self = Cm5::new();
    }

    fn cycles(&self) -> u64 {
        (self.epoch.elapsed().as_nanos() * CPU_HZ / 1_000_000_000) as u64
    }

    /// Which colours are asking for an interrupt: some cause of that colour is set and its
    /// level is non-zero.
    pub fn pending(&self) -> [bool; 4] {
        let c = self.regs.get(cm5::NI_INTERRUPT_CAUSE) as u32;
        let g = self.regs.get(cm5::NI_INTERRUPT_CAUSE_GREEN) as u32;
        let l = self.regs.get(cm5::NI_INTERRUPT_LEVEL) as u32;
        [
            c & cause::RED != 0 && l & level::RED != 0,
            c & cause::ORANGE != 0 && l & level::ORANGE != 0,
            c & cause::YELLOW != 0 && l & level::YELLOW != 0,
            g & green::ALL != 0 && l & level::GREEN != 0,
        ]
    }

    /// Raise a cause bit as an event (the caller checked its `_ie`).
    pub fn raise(&mut self, bits: u32) {
        let v = self.regs.get(cm5::NI_INTERRUPT_CAUSE) | bits as u64;
        self.regs.set(cm5::NI_INTERRUPT_CAUSE, v);
    }

    /// A Bus Error: the transaction is lost, `ni_bad_address` records it and, since posted PCI
    /// writes cannot trap, the Yellow `bad_memory_access` cause reports it.
    fn bus_error(&mut self, addr: u64, size: usize, write: bool, counters: &mut Counters) {
        counters.bus_errors += 1;
        let size_code = if size == 8 {
            bad_address::SIZE_DOUBLEWORD
        } else {
            bad_address::SIZE_WORD
        };
        let ty = if write {
            bad_address::TYPE_WRITE
        } else {
            bad_address::TYPE_READ
        };
        let v = (addr as u32 & bad_address::LOW_MASK)
            | (size_code << bad_address::SIZE_SHIFT)
            | (ty << bad_address::TYPE_SHIFT);
        self.regs.set(cm5::NI_BAD_ADDRESS, v as u64);
        self.raise(cause::BAD_MEMORY_ACCESS);
        tracing::debug!(addr = format_args!("{addr:#x}"), write, "CM-5 Bus Error");
    }

    fn decode(offset: u64) -> (bool, u32) {
        (
            offset >= cm5::SUPERVISOR,
            (offset % cm5::WINDOW_SIZE) as u32,
        )
    }

    /// A bus read of 4 or 8 bytes at `offset` in BAR2. A doubleword is two word accesses.
    /// Returns whether any cause changed.
    pub fn read(&mut self, offset: u64, data: &mut [u8], counters: &mut Counters) -> bool {
        let before = self.pending();
        for (i, chunk) in data.chunks_mut(4).enumerate() {
            let addr = offset + 4 * i as u64;
            let v = self.read_word(addr, data_len(chunk.len()), counters);
            chunk.copy_from_slice(&v.to_le_bytes()[..chunk.len()]);
        }
        before != self.pending()
    }

    pub fn write(&mut self, offset: u64, data: &[u8], counters: &mut Counters) -> bool {
        let before = self.pending();
        let size = data.len();
        for (i, chunk) in data.chunks(4).enumerate() {
            let addr = offset + 4 * i as u64;
            let mut w = [0u8; 4];
            w[..chunk.len()].copy_from_slice(chunk);
            self.write_word(addr, u32::from_le_bytes(w), size, counters);
        }
        before != self.pending()
    }

    fn read_word(&mut self, addr: u64, size: usize, counters: &mut Counters) -> u32 {
        let (sup, off) = Self::decode(addr);
        let Some(reg) = cm5::decode(off) else {
            self.bus_error(addr, size, false, counters);
            return u32::MAX;
        };
        let perm = if sup { reg.sup } else { reg.user };
        if !perm.read || (reg.width == 8 && size != 8) {
            self.bus_error(addr, size, false, counters);
            return u32::MAX;
        }
        match (reg.offset, reg.kind) {
            (cm5::NI_TIME, _) => self
                .time
                .0
                .wrapping_add((self.cycles() - self.time.1) as u32),
            (cm5::NI_CHUNK_TABLE_DATA, _) => {
                let a = self.regs.get(cm5::NI_CHUNK_TABLE_ADDRESS) as usize & 63;
                self.chunk_table[a] as u32
            }
            // An empty receive FIFO: reading recv is a Bus Error (§2.4).
            (_, Kind::Computed) if reg.width == 16 => {
                self.bus_error(addr, size, false, counters);
                u32::MAX
            }
            (_, Kind::Action) if reg.width == 16 => 0,
            _ => reg_word(reg, self.regs.get(reg.offset), off),
        }
    }

    fn write_word(&mut self, addr: u64, value: u32, size: usize, counters: &mut Counters) {
        let (sup, off) = Self::decode(addr);
        if let Some(iface) = cm5::send_first_interface(off) {
            // After NI Reset every interface is locked (§6.10): a locked interface discards
            // the message and leaves send_ok 0, which is what the status registers show.
            let _ = iface;
            counters.cm5_discarded_sends += 1;
            return;
        }
        let Some(reg) = cm5::decode(off) else {
            self.bus_error(addr, size, true, counters);
            return;
        };
        let perm = if sup { reg.sup } else { reg.user };
        if !perm.write {
            self.bus_error(addr, size, true, counters);
            return;
        }
        let v = value as u64;
        match reg.offset {
            cm5::NI_INTERRUPT_CLEAR => {
                let c = self.regs.get(cm5::NI_INTERRUPT_CAUSE) & !(v & cause::ALL as u64);
                self.regs.set(cm5::NI_INTERRUPT_CAUSE, c);
            }
            cm5::NI_INTERRUPT_CLEAR_GREEN => {
                let c = self.regs.get(cm5::NI_INTERRUPT_CAUSE_GREEN) & !(v & green::ALL as u64);
                self.regs.set(cm5::NI_INTERRUPT_CAUSE_GREEN, c);
            }
            // interrupt_set forces a cause even when its enable is off (§5.3).
            cm5::NI_INTERRUPT_SET => self.raise(value & cause::ALL),
            cm5::NI_INTERRUPT_SET_GREEN => {
                let c = self.regs.get(cm5::NI_INTERRUPT_CAUSE_GREEN) | (v & green::ALL as u64);
                self.regs.set(cm5::NI_INTERRUPT_CAUSE_GREEN, c);
            }
            cm5::NI_TIME => self.time = (value, self.cycles()),
            cm5::NI_CHUNK_TABLE_DATA => {
                let a = self.regs.get(cm5::NI_CHUNK_TABLE_ADDRESS) as usize & 63;
                self.chunk_table[a] = value as u8;
            }
            _ if reg.width == 16 => {
                // A send word with no open message (every interface is locked after reset,
                // and no send_first opened one) is a Bus Error (§2.3).
                self.bus_error(addr, size, true, counters);
            }
            _ => {
                self.regs.store_write(reg, v);
            }
        }
    }
}

fn data_len(n: usize) -> usize {
    if n == 4 {
        4
    } else {
        n
    }
}

/// The 32-bit word at `off` of a register (8-byte registers are two words).
fn reg_word(reg: &RegDef, value: u64, off: u32) -> u32 {
    if off >= reg.offset + 4 {
        (value >> 32) as u32
    } else {
        value as u32
    }
}
