//! Each NI's port onto the fabric, modelled on a Lanai X port (digest §2.3): a MODE (the
//! one-hot `MODE` port register: Myrinet, InfiniBand 1X or Ethernet 1000BASE-X through the
//! on-chip GEX) and a link whose state the port's link state machine (CLSM) reports.
//!
//! The administrator sets both with `ni-ctl port set`; the fabric and the Lanai model read
//! them. A port that is down moves nothing and drops nothing silently: every operation to or
//! from its NI fails with `LinkDown`, and what was waiting on it fails the same way when it
//! goes down. The state lives outside the NI's resettable registers (a function reset does
//! not unplug the cable), shared between the fabric's poller and the Lanai's register model
//! (ISR `P0_LINK_READY`, `MODE` and `STATE` through `PORT_ADDR`/`PORT_DATA`).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};

/// The protocol the port speaks (Lanai X `MODE[3:0]`; GMII, which needs an external PHY, is
/// not offered).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Mode {
    Myrinet = 0,
    Infiniband = 1,
    Ethernet = 2,
}

/// Port register numbers (PORT_ADDR `PORT_REG`) the model gives meaning to.
pub mod reg {
    pub const MODE: u8 = 0x10;
    pub const STATE: u8 = 0x11;
    /// IB_LDC, the InfiniBand "link downed" counter (Z*: cleared by the read).
    pub const IB_LDC: u8 = 0x14;
    /// Port 1's registers are port 0's plus this.
    pub const PORT1: u8 = 0x40;
}

impl Mode {
    pub const ALL: [Mode; 3] = [Mode::Myrinet, Mode::Ethernet, Mode::Infiniband];

    /// The `MODE` register value: one-hot, bit 0 Myrinet, 1 InfiniBand, 2 GEX.
    pub fn register(self) -> u16 {
        match self {
            Mode::Myrinet => 1 << 0,
            Mode::Infiniband => 1 << 1,
            Mode::Ethernet => 1 << 2,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Mode::Myrinet => "myrinet",
            Mode::Ethernet => "ethernet",
            Mode::Infiniband => "infiniband",
        }
    }

    /// `myrinet`/`myri`, `ethernet`/`gex`/`gige`, `infiniband`/`ib`, any case.
    pub fn parse(s: &str) -> Option<Mode> {
        match s.to_ascii_lowercase().as_str() {
            "myrinet" | "myri" | "m" => Some(Mode::Myrinet),
            "ethernet" | "gex" | "ge" | "gige" => Some(Mode::Ethernet),
            "infiniband" | "ib" => Some(Mode::Infiniband),
            _ => None,
        }
    }

    fn from_u8(v: u8) -> Mode {
        match v {
            1 => Mode::Infiniband,
            2 => Mode::Ethernet,
            _ => Mode::Myrinet,
        }
    }

    /// The CLSM state (code, name) a port in this mode reports with its link up or down:
    /// Myrinet IN_SYNC_GO / WE_LOST_SYNC, InfiniBand LinkUp / Disabled (the administrator
    /// disabled it), GEX LINK_OK / AN_ENABLE (auto-negotiation restarting, no partner).
    pub fn clsm(self, up: bool) -> (u8, &'static str) {
        match (self, up) {
            (Mode::Myrinet, true) => (10, "IN_SYNC_GO"),
            (Mode::Myrinet, false) => (0, "WE_LOST_SYNC"),
            (Mode::Infiniband, true) => (5, "LinkUp"),
            (Mode::Infiniband, false) => (3, "Disabled"),
            (Mode::Ethernet, true) => (7, "LINK_OK"),
            (Mode::Ethernet, false) => (0, "AN_ENABLE"),
        }
    }
}

/// One NI's port 0. Shared by the fabric and the NI's Lanai register model; changed only by
/// the fabric, under its lock, when the administrator asks.
#[derive(Debug)]
pub struct Port {
    mode: AtomicU8,
    up: AtomicBool,
    /// Times the link went down (IB_LDC counts these; kept for every mode).
    downs: AtomicU64,
    /// The driver wrote MODE 0 (disabled) or GMII (which needs an external PHY the emulated
    /// board lacks): the port has no carrier until a mode it can run is written or the NI
    /// is reset. The register-level packet interface honours it; the fast path, a door the
    /// administrator's link state governs, does not.
    driver_off: AtomicBool,
    /// What the driver last wrote to MODE when that left the port without carrier.
    driver_mode: AtomicU8,
}

impl Default for Port {
    fn default() -> Self {
        Port {
            mode: AtomicU8::new(Mode::Myrinet as u8),
            up: AtomicBool::new(true),
            downs: AtomicU64::new(0),
            driver_off: AtomicBool::new(false),
            driver_mode: AtomicU8::new(0),
        }
    }
}

/// A port across a daemon handover (`crate::handover`).
#[derive(Clone, Copy, Debug, serde::Serialize, serde::Deserialize)]
pub struct PortImage {
    mode: u8,
    up: bool,
    downs: u64,
    driver_off: bool,
    driver_mode: u8,
}

impl Port {
    pub fn image(&self) -> PortImage {
        PortImage {
            mode: self.mode.load(Ordering::Acquire),
            up: self.up(),
            downs: self.downs(),
            driver_off: self.driver_off(),
            driver_mode: self.driver_mode.load(Ordering::Acquire),
        }
    }

    pub fn restore(&self, img: &PortImage) {
        self.mode
            .store(Mode::from_u8(img.mode) as u8, Ordering::Release);
        self.up.store(img.up, Ordering::Release);
        self.downs.store(img.downs, Ordering::Release);
        self.driver_off.store(img.driver_off, Ordering::Release);
        self.driver_mode.store(img.driver_mode, Ordering::Release);
    }

    pub fn mode(&self) -> Mode {
        Mode::from_u8(self.mode.load(Ordering::Acquire))
    }

    pub fn up(&self) -> bool {
        self.up.load(Ordering::Acquire)
    }

    pub fn downs(&self) -> u64 {
        self.downs.load(Ordering::Acquire)
    }

    /// The CLSM state the port reports now.
    pub fn clsm(&self) -> (u8, &'static str) {
        self.mode().clsm(self.up())
    }

    /// ISR `P0_LINK_READY`: the CLSM is in sync (IN_SYNC_*, LinkUp, LINK_OK).
    pub fn link_ready(&self) -> bool {
        self.up() && !self.driver_off()
    }

    pub fn driver_off(&self) -> bool {
        self.driver_off.load(Ordering::Acquire)
    }

    /// A driver's write of MODE (§13.1): only the least significant 1 is kept; Myrinet,
    /// InfiniBand and GEX switch the port's mode (and retrain the link, as `ni-ctl port set`
    /// does), 0 and GMII leave it without carrier.
    pub(crate) fn driver_write_mode(&self, v: u16) {
        let bit = v & v.wrapping_neg() & 0xF;
        let mode = Mode::ALL.into_iter().find(|m| m.register() == bit);
        match mode {
            Some(m) => {
                self.set_mode(m);
                self.driver_off.store(false, Ordering::Release);
            }
            None => {
                self.driver_mode.store(bit as u8, Ordering::Release);
                self.driver_off.store(true, Ordering::Release);
            }
        }
    }

    /// A function reset: MODE back to the administrator's.
    pub(crate) fn reset_driver(&self) {
        self.driver_off.store(false, Ordering::Release);
    }

    pub(crate) fn set_mode(&self, m: Mode) {
        self.mode.store(m as u8, Ordering::Release);
    }

    pub(crate) fn set_up(&self, up: bool) {
        if !up && self.up.swap(false, Ordering::AcqRel) {
            self.downs.fetch_add(1, Ordering::AcqRel);
        } else if up {
            self.up.store(true, Ordering::Release);
        }
    }

    /// A read of port register `r` (PORT_ADDR's `PORT_REG`, bits 6:0) that the port itself
    /// answers; `None` for registers the Lanai keeps as plain storage. Port 1 has no cable:
    /// its MODE reads 0 (disabled).
    pub fn register(&self, r: u8) -> Option<u16> {
        match r {
            reg::MODE if self.driver_off() => Some(self.driver_mode.load(Ordering::Acquire) as u16),
            reg::MODE => Some(self.mode().register()),
            // Without carrier the CLSM sits in its lost-sync / disabled state.
            reg::STATE if self.driver_off() => Some(self.mode().clsm(false).0 as u16),
            reg::STATE => Some(self.clsm().0 as u16),
            x if x == reg::MODE + reg::PORT1 || x == reg::STATE + reg::PORT1 => Some(0),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clsm_follows_mode_and_link() {
        let p = Port::default();
        assert_eq!(p.clsm(), (10, "IN_SYNC_GO"));
        assert!(p.link_ready());
        assert_eq!(p.register(reg::MODE), Some(1));
        p.set_up(false);
        p.set_up(false);
        assert_eq!(p.downs(), 1, "a port already down does not go down again");
        assert_eq!(p.clsm(), (0, "WE_LOST_SYNC"));
        assert!(!p.link_ready());
        p.set_mode(Mode::Infiniband);
        assert_eq!(p.clsm(), (3, "Disabled"));
        assert_eq!(p.register(reg::MODE), Some(2));
        p.set_up(true);
        assert_eq!(p.clsm(), (5, "LinkUp"));
        assert_eq!(p.register(reg::STATE), Some(5));
        p.set_mode(Mode::Ethernet);
        assert_eq!((p.clsm(), p.register(reg::MODE)), ((7, "LINK_OK"), Some(4)));
        assert_eq!(p.register(reg::MODE + reg::PORT1), Some(0));
        assert_eq!(p.register(0x20), None);
        for m in Mode::ALL {
            assert_eq!(Mode::parse(m.name()), Some(m));
            assert_eq!(m.register().count_ones(), 1, "MODE is one-hot");
        }
        assert_eq!(Mode::parse("IB"), Some(Mode::Infiniband));
        assert_eq!(Mode::parse("gmii"), None);
    }
}
