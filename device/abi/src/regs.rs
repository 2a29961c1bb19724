//! Table-driven register definitions.
//!
//! Every trapped register of the NI is one row of a `static` table: its offset, its width,
//! its reset value and how each bit reacts to reads and writes. The device model interprets
//! the tables, so the access behaviour a guest sees and the documentation of it cannot drift
//! apart.

/// How a register reacts to an access, beyond plain storage of its writable bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Stored bits: `write_mask` bits take the written value, `w1c_mask` bits clear on a
    /// written 1, `toggle_mask` bits invert on a written 1, other bits ignore writes.
    Plain,
    /// Lanai `Z*`: read returns the value and clears it; the device increments it and it
    /// saturates at all-ones. Writes are ignored.
    ResetOnRead,
    /// Lanai `D*`: any write decrements by exactly one (staying at 0).
    DecrementOnWrite,
    /// A write pushes to a FIFO or starts an operation; the device model gives the meaning.
    /// Reads return the stored value (0 for write-only FIFOs).
    Action,
    /// Reads pop or compute a value; the device model gives the meaning.
    Computed,
}

/// Who may access a register through which window (CM-5 user/supervisor split).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Perm {
    pub read: bool,
    pub write: bool,
}

impl Perm {
    pub const NONE: Perm = Perm {
        read: false,
        write: false,
    };
    pub const R: Perm = Perm {
        read: true,
        write: false,
    };
    pub const W: Perm = Perm {
        read: false,
        write: true,
    };
    pub const RW: Perm = Perm {
        read: true,
        write: true,
    };
}

/// One register of a trapped register file.
#[derive(Clone, Copy, Debug)]
pub struct RegDef {
    /// The seed's name for it.
    pub name: &'static str,
    /// Byte offset inside its window.
    pub offset: u32,
    /// Width in bytes: 1, 2, 4 or 8.
    pub width: u8,
    pub kind: Kind,
    /// Value after power-on, function-level reset and the seed's NI reset.
    pub reset: u64,
    /// Bits a write stores (for `Kind::Plain` and `Kind::Action`).
    pub write_mask: u64,
    /// Bits cleared by writing 1 (interrupt causes).
    pub w1c_mask: u64,
    /// Bits inverted by writing 1 (Lanai `REQ_ACK`).
    pub toggle_mask: u64,
    /// Access through the supervisor window (or, for the Lanai specials, over PCI).
    pub sup: Perm,
    /// Access through the user window (CM-5 only; equal to `sup` for the Lanai).
    pub user: Perm,
}

impl RegDef {
    /// A fully software-writable register.
    pub const fn rw(name: &'static str, offset: u32, width: u8, reset: u64) -> RegDef {
        RegDef {
            name,
            offset,
            width,
            kind: Kind::Plain,
            reset,
            write_mask: mask(width as u32 * 8),
            w1c_mask: 0,
            toggle_mask: 0,
            sup: Perm::RW,
            user: Perm::RW,
        }
    }

    /// A read-only status register.
    pub const fn ro(name: &'static str, offset: u32, width: u8, reset: u64) -> RegDef {
        RegDef {
            write_mask: 0,
            sup: Perm::R,
            user: Perm::R,
            ..RegDef::rw(name, offset, width, reset)
        }
    }

    pub const fn kind(self, kind: Kind) -> RegDef {
        RegDef { kind, ..self }
    }

    /// Restrict the writable bits to `bits` (a field narrower than its slot).
    pub const fn bits(self, bits: u32) -> RegDef {
        RegDef {
            write_mask: self.write_mask & mask(bits),
            ..self
        }
    }

    pub const fn write_mask(self, write_mask: u64) -> RegDef {
        RegDef { write_mask, ..self }
    }

    pub const fn w1c(self, w1c_mask: u64) -> RegDef {
        RegDef { w1c_mask, ..self }
    }

    pub const fn toggle(self, toggle_mask: u64) -> RegDef {
        RegDef {
            toggle_mask,
            ..self
        }
    }

    pub const fn perms(self, sup: Perm, user: Perm) -> RegDef {
        RegDef { sup, user, ..self }
    }

    /// The bit mask covering the register's width.
    pub const fn width_mask(&self) -> u64 {
        mask(self.width as u32 * 8)
    }

    /// Whether `[offset, offset + len)` overlaps this register.
    pub const fn overlaps(&self, offset: u32, len: u32) -> bool {
        offset < self.offset + self.width as u32 && self.offset < offset + len
    }
}

/// The low `bits` bits set.
pub const fn mask(bits: u32) -> u64 {
    if bits >= 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    }
}

/// Find the register that starts exactly at `offset`.
pub fn lookup(table: &'static [RegDef], offset: u32) -> Option<&'static RegDef> {
    table.iter().find(|r| r.offset == offset)
}
