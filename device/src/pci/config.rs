//! PCI configuration space of the NI (design.md §3.1).
//!
//! Each byte has a write mask and a write-1-to-clear mask, so read-only, read-write and RW1C
//! bits of the header and every capability behave as the PCI and PCIe specifications say,
//! whatever width or alignment the guest kernel uses. Writes with side effects (command
//! register, MSI-X control, FLR, the Lanai register at 0x40) are reported as [`ConfigEvent`]s.

use ni_abi::lanai::config40;
use ni_abi::pci::*;
use ni_abi::{cm5, lanai};

pub const COMMAND: usize = 0x04;
pub const STATUS: usize = 0x06;
pub const BAR_BASE: usize = 0x10;
pub const CAP_PTR: usize = 0x34;
pub const INTERRUPT_LINE: usize = 0x3C;
pub const INTERRUPT_PIN: usize = 0x3D;

pub const CMD_MEMORY: u16 = 1 << 1;
pub const CMD_BUS_MASTER: u16 = 1 << 2;
pub const CMD_INTX_DISABLE: u16 = 1 << 10;
pub const STATUS_INTERRUPT: u16 = 1 << 3;
pub const STATUS_CAP_LIST: u16 = 1 << 4;

pub const PM_PMCSR: usize = CAP_PM as usize + 4;
pub const MSIX_CONTROL: usize = CAP_MSIX as usize + 2;
pub const MSIX_ENABLE: u16 = 1 << 15;
pub const MSIX_FUNCTION_MASK: u16 = 1 << 14;
pub const EXP_DEVCAP: usize = CAP_EXP as usize + 4;
pub const EXP_DEVCTL: usize = CAP_EXP as usize + 8;
pub const EXP_DEVSTA: usize = CAP_EXP as usize + 0xA;
pub const DEVCTL_BCR_FLR: u16 = 1 << 15;
pub const DEVCAP_FLR: u32 = 1 << 28;

/// The memory BARs: index, size, 64-bit. BAR2 is 32-bit so that BAR3 (the member's own zone
/// of a shared partition window, `ni_abi::pci::BAR3_SIZE`) has a slot of its own.
pub const BARS: [(usize, u64, bool); 4] = [
    (0, lanai::BAR0_SIZE, true),
    (2, cm5::BAR2_SIZE, false),
    (3, BAR3_SIZE, false),
    (4, BAR4_SIZE, true),
];

/// What a configuration write changed that the rest of the device must act on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConfigEvent {
    pub command_changed: bool,
    pub msix_changed: bool,
    pub flr: bool,
    pub lanai_changed: bool,
}

#[derive(Clone, serde::Serialize, serde::Deserialize)]
pub struct ConfigSpace {
    bytes: Vec<u8>,
    wmask: Vec<u8>,
    w1c: Vec<u8>,
    /// The Lanai signals of config register 0x40 (at their ON bit positions) and JTAG bits.
    lanai: u32,
}

impl Default for ConfigSpace {
    fn default() -> Self {
        Self::new()
    }
}

impl ConfigSpace {
    pub fn new() -> Self {
        let size = CONFIG_SIZE as usize;
        let mut c = ConfigSpace {
            bytes: vec![0; size],
            wmask: vec![0; size],
            w1c: vec![0; size],
            lanai: 0,
        };
        c.build();
        c
    }

    /// Power-on state; also what a function-level reset and a conventional reset restore.
    pub fn reset(&mut self) {
        *self = ConfigSpace::new();
    }

    fn put16(&mut self, off: usize, v: u16, wmask: u16, w1c: u16) {
        self.bytes[off..off + 2].copy_from_slice(&v.to_le_bytes());
        self.wmask[off..off + 2].copy_from_slice(&wmask.to_le_bytes());
        self.w1c[off..off + 2].copy_from_slice(&w1c.to_le_bytes());
    }

    fn put32(&mut self, off: usize, v: u32, wmask: u32, w1c: u32) {
        self.bytes[off..off + 4].copy_from_slice(&v.to_le_bytes());
        self.wmask[off..off + 4].copy_from_slice(&wmask.to_le_bytes());
        self.w1c[off..off + 4].copy_from_slice(&w1c.to_le_bytes());
    }

    fn build(&mut self) {
        self.put16(0x00, VENDOR_ID, 0, 0);
        self.put16(0x02, DEVICE_ID, 0, 0);
        // Memory space, bus master, parity error response, SERR#, INTx disable.
        self.put16(COMMAND, 0, 0x0546, 0);
        // Status: capability list (RO), interrupt status (device-driven);
        // master data parity error, signalled/received aborts, SERR, parity: RW1C.
        self.put16(STATUS, STATUS_CAP_LIST, 0, 0xF900);
        self.put32(0x08, (CLASS_CODE << 8) | REVISION as u32, 0, 0);
        self.bytes[0x0C] = 0; // cache line size
        self.wmask[0x0C] = 0xFF;
        for (bar, size, wide) in BARS {
            let off = BAR_BASE + bar * 4;
            // Memory BARs, not prefetchable (the specials have read side effects).
            self.put32(
                off,
                if wide { 0x4 } else { 0 },
                !(size as u32 - 1) & 0xFFFF_FFF0,
                0,
            );
            if wide {
                self.put32(off + 4, 0, 0xFFFF_FFFF, 0);
            }
        }
        self.put16(0x2C, SUBSYSTEM_VENDOR_ID, 0, 0);
        self.put16(0x2E, SUBSYSTEM_ID, 0, 0);
        self.bytes[CAP_PTR] = CAP_PM;
        self.wmask[INTERRUPT_LINE] = 0xFF;
        self.bytes[INTERRUPT_PIN] = 1; // INTA#

        // Power management, version 3, D0 and D3hot only; No_Soft_Reset so D3hot -> D0
        // keeps the device's state.
        self.bytes[CAP_PM as usize] = 0x01;
        self.bytes[CAP_PM as usize + 1] = CAP_MSIX;
        self.put16(CAP_PM as usize + 2, 0x0003, 0, 0);
        self.put16(PM_PMCSR, 1 << 3, 0x0003, 0);

        // MSI-X: table and PBA in BAR4.
        self.bytes[CAP_MSIX as usize] = 0x11;
        self.bytes[CAP_MSIX as usize + 1] = CAP_EXP;
        self.put16(
            MSIX_CONTROL,
            vector::COUNT - 1,
            MSIX_ENABLE | MSIX_FUNCTION_MASK,
            0,
        );
        self.put32(
            CAP_MSIX as usize + 4,
            MSIX_TABLE_OFFSET as u32 | BAR4_REGION,
            0,
            0,
        );
        self.put32(
            CAP_MSIX as usize + 8,
            MSIX_PBA_OFFSET as u32 | BAR4_REGION,
            0,
            0,
        );

        // PCI Express capability, version 2, endpoint.
        let e = CAP_EXP as usize;
        self.bytes[e] = 0x10;
        self.bytes[e + 1] = 0;
        self.put16(e + 2, 0x0002, 0, 0);
        // 128-byte max payload, unlimited L0s/L1 latency, role-based error reporting, FLR.
        self.put32(
            EXP_DEVCAP,
            (7 << 6) | (7 << 9) | (1 << 15) | DEVCAP_FLR,
            0,
            0,
        );
        // Relaxed ordering and no-snoop enabled, 512-byte max read request.
        self.put16(EXP_DEVCTL, 0x2810, 0x7FFF, 0);
        self.put16(EXP_DEVSTA, 0, 0, 0x000F);
        // Link: 2.5 GT/s, x1.
        self.put32(e + 0x0C, 0x0000_0011, 0, 0);
        self.put16(e + 0x10, 0, 0x00C3, 0);
        self.put16(e + 0x12, 0x0011, 0, 0);
        self.put32(e + 0x24, 0, 0, 0); // device capabilities 2
        self.put16(e + 0x28, 0, 0, 0); // device control 2
        self.put32(e + 0x2C, 0x2, 0, 0); // link capabilities 2: 2.5 GT/s
        self.put16(e + 0x30, 0x1, 0, 0); // link control 2: target 2.5 GT/s
    }

    /// Read `data.len()` bytes at `offset`. The caller checked the range.
    pub fn read(&self, offset: usize, data: &mut [u8]) {
        for (i, b) in data.iter_mut().enumerate() {
            let o = offset + i;
            *b = if (config40::OFFSET as usize..config40::OFFSET as usize + 4).contains(&o) {
                self.lanai.to_le_bytes()[o - config40::OFFSET as usize]
            } else {
                self.bytes[o]
            };
        }
    }

    /// Write `data` at `offset`, honouring the per-bit access kinds.
    pub fn write(&mut self, offset: usize, data: &[u8]) -> ConfigEvent {
        let old_command = self.command();
        let old_msix = self.u16_at(MSIX_CONTROL);
        let old_pmcsr = self.u16_at(PM_PMCSR);
        let mut ev = ConfigEvent::default();
        let mut lanai_bytes = [0u8; 4];
        let mut lanai_touched = false;
        for (i, &v) in data.iter().enumerate() {
            let o = offset + i;
            if (config40::OFFSET as usize..config40::OFFSET as usize + 4).contains(&o) {
                lanai_bytes[o - config40::OFFSET as usize] = v;
                lanai_touched = true;
                continue;
            }
            let m = self.wmask[o];
            let mut b = (self.bytes[o] & !m) | (v & m);
            b &= !(v & self.w1c[o]);
            self.bytes[o] = b;
        }
        // Initiate Function Level Reset is not stored (it reads as 0); writing 1 starts it.
        let flr_byte = EXP_DEVCTL + 1;
        if flr_byte >= offset
            && flr_byte < offset + data.len()
            && data[flr_byte - offset] & 0x80 != 0
        {
            ev.flr = true;
        }
        // D1 and D2 are not supported: such writes leave the power state alone.
        let pmcsr = self.u16_at(PM_PMCSR);
        if matches!(pmcsr & 3, 1 | 2) {
            self.put16(PM_PMCSR, (pmcsr & !3) | (old_pmcsr & 3), 0x0003, 0);
        }
        if lanai_touched {
            self.write_lanai(u32::from_le_bytes(lanai_bytes), offset, data.len());
            ev.lanai_changed = true;
        }
        ev.command_changed = self.command() != old_command;
        ev.msix_changed = self.u16_at(MSIX_CONTROL) != old_msix;
        ev
    }

    /// The ON/OFF pairs of config register 0x40: 1 sets or clears, OFF wins, 0 does nothing.
    fn write_lanai(&mut self, value: u32, offset: usize, len: usize) {
        // Only the bytes the access covered count as written.
        let mut covered = 0u32;
        for i in 0..4 {
            let o = config40::OFFSET as usize + i;
            if o >= offset && o < offset + len {
                covered |= 0xFF << (8 * i);
            }
        }
        let value = value & covered;
        for on in [
            config40::PCI_CPU_RESET_ON,
            config40::PCI_IO_RESET_ON,
            config40::PCI_INT_ENABLE_ON,
            config40::PCI_MASK_DISABLE_ON,
        ] {
            let off = on >> 1;
            if value & off != 0 {
                self.lanai &= !on;
            } else if value & on != 0 {
                self.lanai |= on;
            }
        }
        let jtag = config40::PCI_JTAG_MASTER_MASK & covered;
        self.lanai = (self.lanai & !jtag) | (value & jtag);
    }

    pub fn lanai_signals(&self) -> u32 {
        self.lanai
    }

    fn u16_at(&self, off: usize) -> u16 {
        u16::from_le_bytes([self.bytes[off], self.bytes[off + 1]])
    }

    pub fn command(&self) -> u16 {
        self.u16_at(COMMAND)
    }

    pub fn memory_enabled(&self) -> bool {
        self.command() & CMD_MEMORY != 0
    }

    pub fn bus_master(&self) -> bool {
        self.command() & CMD_BUS_MASTER != 0
    }

    pub fn intx_disabled(&self) -> bool {
        self.command() & CMD_INTX_DISABLE != 0
    }

    pub fn msix_enabled(&self) -> bool {
        self.u16_at(MSIX_CONTROL) & MSIX_ENABLE != 0
    }

    pub fn msix_function_masked(&self) -> bool {
        self.u16_at(MSIX_CONTROL) & MSIX_FUNCTION_MASK != 0
    }

    /// The device drives the Interrupt Status bit from its INTx level.
    pub fn set_interrupt_status(&mut self, asserted: bool) {
        let mut s = self.u16_at(STATUS);
        if asserted {
            s |= STATUS_INTERRUPT;
        } else {
            s &= !STATUS_INTERRUPT;
        }
        self.bytes[STATUS..STATUS + 2].copy_from_slice(&s.to_le_bytes());
    }

    pub fn interrupt_status(&self) -> bool {
        self.u16_at(STATUS) & STATUS_INTERRUPT != 0
    }

    /// Record that the device signalled a target abort (an access it refused).
    pub fn signal_target_abort(&mut self) {
        self.bytes[STATUS + 1] |= 0x08;
    }

    /// Record a master abort on a DMA the device issued (outside the host's mappings).
    pub fn received_master_abort(&mut self) {
        self.bytes[STATUS + 1] |= 0x20;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r16(c: &ConfigSpace, off: usize) -> u16 {
        let mut b = [0u8; 2];
        c.read(off, &mut b);
        u16::from_le_bytes(b)
    }
    fn r32(c: &ConfigSpace, off: usize) -> u32 {
        let mut b = [0u8; 4];
        c.read(off, &mut b);
        u32::from_le_bytes(b)
    }

    #[test]
    fn ids_and_class_are_read_only() {
        let mut c = ConfigSpace::new();
        c.write(0, &[0xFF; 4]);
        c.write(8, &[0xFF; 4]);
        assert_eq!(r16(&c, 0), VENDOR_ID);
        assert_eq!(r16(&c, 2), DEVICE_ID);
        assert_eq!(r32(&c, 8) >> 8, CLASS_CODE);
    }

    #[test]
    fn bar_sizing_reports_size_and_type() {
        let mut c = ConfigSpace::new();
        for (bar, size, wide) in BARS {
            let off = BAR_BASE + bar * 4;
            c.write(off, &[0xFF; 4]);
            if wide {
                c.write(off + 4, &[0xFF; 4]);
            }
            let lo = r32(&c, off);
            let kind = if wide { 0x4 } else { 0 };
            assert_eq!(
                lo & 0xF,
                kind,
                "BAR{bar}: non-prefetchable memory, 64-bit={wide}"
            );
            assert_eq!(!(lo & !0xF) as u64 + 1, size);
            if wide {
                assert_eq!(r32(&c, off + 4), 0xFFFF_FFFF);
            }
        }
        // BAR1 and BAR5 are the high halves of BAR0 and BAR4; the ROM BAR is absent.
        c.write(0x30, &[0xFF; 4]);
        assert_eq!(r32(&c, 0x30), 0);
    }

    #[test]
    fn status_rw1c_and_cap_list() {
        let mut c = ConfigSpace::new();
        c.signal_target_abort();
        assert_ne!(r16(&c, STATUS) & 0x0800, 0);
        c.write(STATUS, &0x0010u16.to_le_bytes()); // writing 1 to a RO bit: no effect
        assert_ne!(r16(&c, STATUS) & 0x0800, 0);
        c.write(STATUS, &0x0800u16.to_le_bytes());
        assert_eq!(r16(&c, STATUS) & 0x0800, 0);
        assert_ne!(r16(&c, STATUS) & STATUS_CAP_LIST, 0);
    }

    #[test]
    fn capability_chain_walks_pm_msix_express() {
        let c = ConfigSpace::new();
        let mut ids = vec![];
        let mut p = c.bytes[CAP_PTR] as usize;
        while p != 0 {
            ids.push(c.bytes[p]);
            p = c.bytes[p + 1] as usize;
        }
        assert_eq!(ids, vec![0x01, 0x11, 0x10]);
    }

    #[test]
    fn flr_bit_reads_zero_and_raises_event() {
        let mut c = ConfigSpace::new();
        let ev = c.write(EXP_DEVCTL, &0xA810u16.to_le_bytes());
        assert!(ev.flr);
        assert_eq!(r16(&c, EXP_DEVCTL) & DEVCTL_BCR_FLR, 0);
    }

    #[test]
    fn lanai_register_off_wins_and_zero_does_nothing() {
        let mut c = ConfigSpace::new();
        c.write(0x40, &config40::PCI_INT_ENABLE_ON.to_le_bytes());
        assert_ne!(c.lanai_signals() & config40::PCI_INT_ENABLE_ON, 0);
        c.write(0x40, &0u32.to_le_bytes());
        assert_ne!(c.lanai_signals() & config40::PCI_INT_ENABLE_ON, 0);
        let both = config40::PCI_INT_ENABLE_ON | config40::PCI_INT_ENABLE_OFF;
        c.write(0x40, &both.to_le_bytes());
        assert_eq!(c.lanai_signals() & config40::PCI_INT_ENABLE_ON, 0);
    }

    #[test]
    fn pm_state_rejects_d1_d2() {
        let mut c = ConfigSpace::new();
        c.write(PM_PMCSR, &3u16.to_le_bytes());
        assert_eq!(r16(&c, PM_PMCSR) & 3, 3);
        c.write(PM_PMCSR, &1u16.to_le_bytes());
        assert_eq!(r16(&c, PM_PMCSR) & 3, 3);
        c.write(PM_PMCSR, &0u16.to_le_bytes());
        assert_eq!(r16(&c, PM_PMCSR) & 3, 0);
    }
}
