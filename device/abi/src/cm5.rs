//! CM-5 NI register file (NI Programmer's Handbook v2.2, App. A), served in BAR2.
//!
//! The whole register file appears twice, as in the handbook (§1.3): a user window at
//! BAR2 + 0 and a supervisor window at BAR2 + `SUPERVISOR` (bit 19 selects). Registers are
//! 32 bits wide in 8-byte slots; FIFO windows (`recv`, `send`) are 16 bytes. A
//! supervisor-only access through the user window is a Bus Error: PCI writes are posted, so
//! it is reported the way `disable_bus_error` reports it, as the Yellow `bad_memory_access`
//! cause with `ni_bad_address` latched, and a read returns all-ones.

use crate::regs::{Kind, Perm, RegDef};

pub const BAR2_SIZE: u64 = 1 << 20;
/// Start of the supervisor window (the user window is at 0).
pub const SUPERVISOR: u64 = 0x8_0000;
pub const WINDOW_SIZE: u64 = 0x8_0000;

// Global and system registers (App. A.1.1).
pub const NI_INTERRUPT_CAUSE: u32 = 0x000;
pub const NI_INTERRUPT_CAUSE_GREEN: u32 = 0x008;
pub const NI_INTERRUPT_LEVEL: u32 = 0x010;
pub const NI_PHYSICAL_SELF: u32 = 0x018;
pub const NI_PARTITION_BASE: u32 = 0x020;
pub const NI_PARTITION_SIZE: u32 = 0x028;
pub const NI_CHUNK_TABLE_ADDRESS: u32 = 0x030;
pub const NI_CHUNK_TABLE_DATA: u32 = 0x038;
pub const NI_CHUNK_SIZE: u32 = 0x040;
pub const NI_DR_MESSAGE_COUNT: u32 = 0x048;
pub const NI_COUNT_MASK: u32 = 0x050;
pub const NI_REC_INTERRUPT_MASK: u32 = 0x058;
pub const NI_USER_TAG_MASK: u32 = 0x060;
pub const NI_TIME: u32 = 0x070;
pub const NI_CONFIGURATION: u32 = 0x078;
pub const NI_INTERRUPT_SEND: u32 = 0x080;
pub const NI_SERIAL_NUMBER: u32 = 0x088;
pub const NI_SYNC_GLOBAL: u32 = 0x090;
pub const NI_SYNC_GLOBAL_ABSTAIN: u32 = 0x098;
pub const NI_COM_FLUSH_SEND: u32 = 0x0A0;
pub const NI_ASYNC_GLOBAL: u32 = 0x0A8;
pub const NI_ASYNC_SUP_GLOBAL: u32 = 0x0B0;
pub const NI_HODGEPODGE: u32 = 0x0B8;
pub const NI_SYNC_GLOBAL_SEND: u32 = 0x0C0;
pub const NI_INTERRUPT_CLEAR: u32 = 0x0C8;
pub const NI_INTERRUPT_CLEAR_GREEN: u32 = 0x0D0;
pub const NI_INTERRUPT_NOW: u32 = 0x0D8;
pub const NI_SCAN_START: u32 = 0x0E0;
pub const NI_BAD_ADDRESS: u32 = 0x0E8;
pub const NI_LONGEST_DR_MESSAGE: u32 = 0x160;
pub const NI_USER_REC_INTERRUPT_MASK: u32 = 0x168;
pub const NI_INTERRUPT_SET: u32 = 0x190;
pub const NI_INTERRUPT_SET_GREEN: u32 = 0x198;

/// Per-interface register blocks (App. A.1.2): offsets inside each block.
pub mod iface {
    pub const STATUS: u32 = 0x00;
    pub const PRIVATE: u32 = 0x08;
    pub const CONTROL: u32 = 0x10;
    pub const RECV: u32 = 0x20;
    pub const SEND: u32 = 0x30;
    pub const STATUS_POP: u32 = 0x40;
    pub const STATUS_ALL: u32 = 0x50;
    pub const STATUS_LONG: u32 = 0x60;
}
pub const DR_BASE: u32 = 0x200;
pub const BC_BASE: u32 = 0x600;
pub const SBC_BASE: u32 = 0x800;
pub const COM_BASE: u32 = 0xA00;
pub const LDR_BASE: u32 = 0xC00;
pub const RDR_BASE: u32 = 0xE00;

/// Interface numbers in send_first addresses (App. A.3).
pub mod fifo {
    pub const DATA_ROUTER: u32 = 1;
    pub const USER_BC: u32 = 3;
    pub const SUPERVISOR_BC: u32 = 4;
    pub const COMBINE: u32 = 5;
    pub const LEFT_DR: u32 = 6;
    pub const RIGHT_DR: u32 = 7;
}
/// `send_first` address: `(interface << SF_FIFO_OFFSET) + (aux << AUXILIARY_START_P)`.
pub const SF_FIFO_OFFSET: u32 = 12;
pub const AUXILIARY_START_P: u32 = 3;
/// `send_first_long` blocks of DR, LDR, RDR (8 KB each, App. A.4).
pub const DR_SEND_FIRST_LONG: u32 = 0x8000;
pub const LDR_SEND_FIRST_LONG: u32 = 0x1_0000;
pub const RDR_SEND_FIRST_LONG: u32 = 0x1_8000;
pub const SEND_FIRST_LONG_SIZE: u32 = 0x8000;

/// `ni_interrupt_cause` bits (App. A.5.8), with their colour.
pub mod cause {
    pub const INTERNAL_FAULT: u32 = 1 << 0;
    pub const MC_ERROR: u32 = 1 << 1;
    pub const CMU_ERROR: u32 = 1 << 2;
    pub const BC_INTERRUPT_RED: u32 = 1 << 3;
    pub const CN_CHECKSUM_ERROR: u32 = 1 << 4;
    pub const CN_HARD_ERROR: u32 = 1 << 5;
    pub const DR_CHECKSUM_ERROR: u32 = 1 << 6;
    pub const TIMER_INTERRUPT: u32 = 1 << 7;
    pub const BC_INTERRUPT_ORANGE: u32 = 1 << 8;
    pub const BC_INTERRUPT_YELLOW: u32 = 1 << 9;
    pub const BC_OR_COM_COLLISION: u32 = 1 << 10;
    pub const COM_ABSTAIN_CHANGED: u32 = 1 << 11;
    pub const DR_COUNT_NEGATIVE: u32 = 1 << 12;
    pub const BAD_RELATIVE_ADDRESS: u32 = 1 << 13;
    pub const BAD_MEMORY_ACCESS: u32 = 1 << 14;
    pub const MESSAGE_TOO_LONG: u32 = 1 << 15;
    pub const RDONE_COMPLETE: u32 = 1 << 16;
    pub const ALL: u32 = 0x1_FFFF;
    pub const RED: u32 = 0x7F;
    pub const ORANGE: u32 = TIMER_INTERRUPT | BC_INTERRUPT_ORANGE | RDONE_COMPLETE;
    pub const YELLOW: u32 = 0x7E00 | MESSAGE_TOO_LONG;
}

/// `ni_interrupt_cause_green` bits (App. A.5.8): all Green.
pub mod green {
    pub const BC_INTERRUPT_GREEN: u32 = 1 << 0;
    pub const SCAN_OVERFLOW: u32 = 1 << 1;
    pub const BC_REC_OK: u32 = 1 << 2;
    pub const SBC_REC_OK: u32 = 1 << 3;
    pub const COM_REC_OK: u32 = 1 << 4;
    pub const COM_REC_EMPTY: u32 = 1 << 5;
    pub const SYNC_GLOBAL_REC: u32 = 1 << 6;
    pub const GLOBAL_REC: u32 = 1 << 7;
    pub const SUPERVISOR_GLOBAL_REC: u32 = 1 << 8;
    pub const DR_REC_OK: u32 = 1 << 9;
    pub const LDR_REC_OK: u32 = 1 << 10;
    pub const RDR_REC_OK: u32 = 1 << 11;
    pub const DR_REC_TAG: u32 = 1 << 12;
    pub const DR_REC_ALL_FALL_DOWN: u32 = 1 << 13;
    pub const LDR_REC_TAG: u32 = 1 << 14;
    pub const RDR_REC_TAG: u32 = 1 << 15;
    pub const LDR_USER_REC_TAG: u32 = 1 << 16;
    pub const RDR_USER_REC_TAG: u32 = 1 << 17;
    pub const SFIFO_EMPTY: u32 = 1 << 18;
    pub const DPERR: u32 = 1 << 19;
    pub const ALL: u32 = 0xF_FFFF;
}

/// `ni_interrupt_level` (§5.4): one byte per colour, only its low bit used.
pub mod level {
    pub const GREEN: u32 = 1 << 0;
    pub const YELLOW: u32 = 1 << 8;
    pub const ORANGE: u32 = 1 << 16;
    pub const RED: u32 = 1 << 24;
    pub const MASK: u32 = GREEN | YELLOW | ORANGE | RED;
}

/// `ni_hodgepodge` bits (App. A.5.9).
pub mod hodgepodge {
    pub const GLOBAL_REC_IE: u32 = 1 << 0;
    pub const SUPERVISOR_GLOBAL_REC_IE: u32 = 1 << 1;
    pub const FLUSH_COMPLETE: u32 = 1 << 2;
    pub const INTERRUPT_SEND_OK: u32 = 1 << 3;
    pub const CONFIGURATION_COMPLETE: u32 = 1 << 4;
    pub const INTERRUPT_REC_ENABLE: u32 = 1 << 5;
    pub const SYNC_GLOBAL_REC_IE: u32 = 1 << 6;
    pub const TIMER_IE: u32 = 1 << 7;
    pub const CN_STOP_SEND: u32 = 1 << 8;
    pub const DISABLE_BUS_ERROR: u32 = 1 << 9;
    /// Per receive FIFO (LDR, RDR): the supervisor tag interrupts, and the user's
    /// permission for its own (§3.5.4).
    pub const LDR_REC_TAG_IE: u32 = 1 << 10;
    pub const RDR_REC_TAG_IE: u32 = 1 << 11;
    pub const LDR_USER_REC_TAG_IE: u32 = 1 << 12;
    pub const RDR_USER_REC_TAG_IE: u32 = 1 << 13;
    pub const MSG_TOO_LONG_IE: u32 = 1 << 14;
    /// Status bits software cannot write.
    pub const READ_ONLY: u32 = FLUSH_COMPLETE | INTERRUPT_SEND_OK | CONFIGURATION_COMPLETE;
    pub const RESET: u32 = READ_ONLY;
}

/// `ni_bad_address` fields (§6.6).
pub mod bad_address {
    pub const LOW_MASK: u32 = 0xF_FFFF;
    pub const SIZE_SHIFT: u32 = 24;
    pub const SIZE_WORD: u32 = 2;
    pub const SIZE_DOUBLEWORD: u32 = 3;
    pub const TYPE_SHIFT: u32 = 20;
    pub const TYPE_WRITE: u32 = 0;
    pub const TYPE_READ: u32 = 1;
}

/// Private-register flags common to the interfaces (§2.7).
pub mod private {
    pub const REC_OK_IE: u32 = 1 << 0;
    pub const LOCK: u32 = 1 << 1;
    pub const REC_STOP: u32 = 1 << 2;
    pub const SEND_STOP: u32 = 1 << 2;
    pub const REC_FULL: u32 = 1 << 3;
    /// BC and SBC only (§4.1.8): 0 makes every write to the send FIFO a Bus Error.
    pub const SEND_ENABLE: u32 = 1 << 4;
    /// COM only (App. A.5.7).
    pub const COM_SCAN_OVERFLOW_IE: u32 = 1 << 4;
    pub const COM_REC_EMPTY_IE: u32 = 1 << 5;
    /// DR only (App. A.5.4, v2.2).
    pub const SFIFO_GOES_EMPTY_IE: u32 = 1 << 8;
    pub const RDONE_COMPLETE_IE: u32 = 1 << 9;
}

/// Control-register flags (BC, SBC, COM).
pub mod control {
    pub const REC_ABSTAIN: u32 = 1 << 0;
    pub const REDUCE_REC_ABSTAIN: u32 = 1 << 1;
}

/// Status fields shared by the generic interfaces (App. A.5).
pub mod status {
    pub const SEND_SPACE_MASK: u32 = 0xF;
    pub const REC_OK: u32 = 1 << 4;
    pub const SEND_OK: u32 = 1 << 5;
    pub const SEND_EMPTY: u32 = 1 << 6;
    pub const ROUTER_DONE_COMPLETE: u32 = 1 << 6;
}

const S: Perm = Perm::RW;
const SR: Perm = Perm::R;
const SW: Perm = Perm::W;
const U0: Perm = Perm::NONE;

const fn sup(name: &'static str, offset: u32, bits: u32, reset: u64) -> RegDef {
    RegDef::rw(name, offset, 4, reset).bits(bits).perms(S, U0)
}
const fn both(name: &'static str, offset: u32, bits: u32, reset: u64) -> RegDef {
    RegDef::rw(name, offset, 4, reset).bits(bits)
}
const fn action(name: &'static str, offset: u32, bits: u32, sup: Perm, user: Perm) -> RegDef {
    RegDef::rw(name, offset, 4, 0)
        .bits(bits)
        .kind(Kind::Action)
        .perms(sup, user)
}
const fn fifo(name: &'static str, offset: u32, kind: Kind, sup: Perm, user: Perm) -> RegDef {
    RegDef::rw(name, offset, 16, 0).kind(kind).perms(sup, user)
}

/// Every register of one window (user and supervisor windows share it).
pub static REGS: [RegDef; 67] = [
    sup("ni_interrupt_cause", NI_INTERRUPT_CAUSE, 17, 0),
    sup("ni_interrupt_cause_green", NI_INTERRUPT_CAUSE_GREEN, 20, 0),
    sup("ni_interrupt_level", NI_INTERRUPT_LEVEL, 32, 0).write_mask(level::MASK as u64),
    sup("ni_physical_self", NI_PHYSICAL_SELF, 20, 0),
    sup("ni_partition_base", NI_PARTITION_BASE, 20, 0),
    sup("ni_partition_size", NI_PARTITION_SIZE, 20, 0),
    sup("ni_chunk_table_address", NI_CHUNK_TABLE_ADDRESS, 6, 0),
    sup("ni_chunk_table_data", NI_CHUNK_TABLE_DATA, 8, 0).kind(Kind::Computed),
    sup("ni_chunk_size", NI_CHUNK_SIZE, 3, 0),
    sup("ni_dr_message_count", NI_DR_MESSAGE_COUNT, 32, 0),
    sup("ni_count_mask", NI_COUNT_MASK, 16, 0),
    sup("ni_rec_interrupt_mask", NI_REC_INTERRUPT_MASK, 16, 0),
    sup("ni_user_tag_mask", NI_USER_TAG_MASK, 16, 0),
    both("ni_time", NI_TIME, 32, 0)
        .kind(Kind::Computed)
        .perms(S, SR),
    sup("ni_configuration", NI_CONFIGURATION, 5, 0),
    action("ni_interrupt_send", NI_INTERRUPT_SEND, 5, S, U0),
    RegDef::ro("ni_serial_number", NI_SERIAL_NUMBER, 4, 0).perms(SR, U0),
    // sync_global_complete (bit 1) is 1 after reset.
    RegDef::ro("ni_sync_global", NI_SYNC_GLOBAL, 4, 0b10),
    both("ni_sync_global_abstain", NI_SYNC_GLOBAL_ABSTAIN, 1, 1),
    action("ni_com_flush_send", NI_COM_FLUSH_SEND, 1, SW, U0),
    // global_send (bit 0) is writable, global_rec (bit 1) is status.
    both("ni_async_global", NI_ASYNC_GLOBAL, 1, 0),
    sup("ni_async_sup_global", NI_ASYNC_SUP_GLOBAL, 1, 0),
    sup("ni_hodgepodge", NI_HODGEPODGE, 15, hodgepodge::RESET as u64)
        .write_mask(0x7FFF & !(hodgepodge::READ_ONLY as u64)),
    action("ni_sync_global_send", NI_SYNC_GLOBAL_SEND, 1, S, Perm::RW),
    action("ni_interrupt_clear", NI_INTERRUPT_CLEAR, 17, SW, U0),
    action(
        "ni_interrupt_clear_green",
        NI_INTERRUPT_CLEAR_GREEN,
        20,
        SW,
        U0,
    ),
    sup("ni_interrupt_now", NI_INTERRUPT_NOW, 32, 0),
    both("ni_scan_start", NI_SCAN_START, 1, 0),
    sup("ni_bad_address", NI_BAD_ADDRESS, 32, 0),
    both("ni_longest_dr_message", NI_LONGEST_DR_MESSAGE, 5, 5).perms(S, SR),
    both(
        "ni_user_rec_interrupt_mask",
        NI_USER_REC_INTERRUPT_MASK,
        16,
        0,
    ),
    action("ni_interrupt_set", NI_INTERRUPT_SET, 17, SW, U0),
    action("ni_interrupt_set_green", NI_INTERRUPT_SET_GREEN, 20, SW, U0),
    // Data Router (combined): no recv in v2.2 (§8.2.3).
    RegDef::rw("ni_dr_status", DR_BASE + iface::STATUS, 4, 0)
        .kind(Kind::Computed)
        .perms(S, SR),
    sup(
        "ni_dr_private",
        DR_BASE + iface::PRIVATE,
        10,
        private::LOCK as u64,
    ),
    fifo(
        "ni_dr_send",
        DR_BASE + iface::SEND,
        Kind::Action,
        SW,
        Perm::W,
    ),
    RegDef::ro("ni_dr_status_all", DR_BASE + iface::STATUS_ALL, 4, 0).kind(Kind::Computed),
    RegDef::rw("ni_dr_status_long", DR_BASE + iface::STATUS_LONG, 4, 0)
        .kind(Kind::Computed)
        .perms(S, SR),
    // Left and right Data Router.
    RegDef::rw("ni_ldr_status", LDR_BASE + iface::STATUS, 4, 0)
        .kind(Kind::Computed)
        .perms(S, SR),
    sup(
        "ni_ldr_private",
        LDR_BASE + iface::PRIVATE,
        6,
        private::LOCK as u64,
    ),
    fifo("ni_ldr_recv", LDR_BASE + iface::RECV, Kind::Computed, S, SR),
    fifo(
        "ni_ldr_send",
        LDR_BASE + iface::SEND,
        Kind::Action,
        SW,
        Perm::W,
    ),
    RegDef::ro("ni_ldr_status_pop", LDR_BASE + iface::STATUS_POP, 8, 0).kind(Kind::Computed),
    RegDef::ro("ni_ldr_status_all", LDR_BASE + iface::STATUS_ALL, 4, 0).kind(Kind::Computed),
    RegDef::rw("ni_ldr_status_long", LDR_BASE + iface::STATUS_LONG, 4, 0)
        .kind(Kind::Computed)
        .perms(S, SR),
    RegDef::rw("ni_rdr_status", RDR_BASE + iface::STATUS, 4, 0)
        .kind(Kind::Computed)
        .perms(S, SR),
    sup(
        "ni_rdr_private",
        RDR_BASE + iface::PRIVATE,
        6,
        private::LOCK as u64,
    ),
    fifo("ni_rdr_recv", RDR_BASE + iface::RECV, Kind::Computed, S, SR),
    fifo(
        "ni_rdr_send",
        RDR_BASE + iface::SEND,
        Kind::Action,
        SW,
        Perm::W,
    ),
    RegDef::ro("ni_rdr_status_pop", RDR_BASE + iface::STATUS_POP, 8, 0).kind(Kind::Computed),
    RegDef::ro("ni_rdr_status_all", RDR_BASE + iface::STATUS_ALL, 4, 0).kind(Kind::Computed),
    RegDef::rw("ni_rdr_status_long", RDR_BASE + iface::STATUS_LONG, 4, 0)
        .kind(Kind::Computed)
        .perms(S, SR),
    // User broadcast.
    RegDef::ro(
        "ni_bc_status",
        BC_BASE + iface::STATUS,
        4,
        status::SEND_EMPTY as u64,
    )
    .kind(Kind::Computed),
    sup(
        "ni_bc_private",
        BC_BASE + iface::PRIVATE,
        5,
        private::LOCK as u64,
    ),
    both(
        "ni_bc_control",
        BC_BASE + iface::CONTROL,
        1,
        control::REC_ABSTAIN as u64,
    ),
    fifo("ni_bc_recv", BC_BASE + iface::RECV, Kind::Computed, S, SR),
    fifo(
        "ni_bc_send",
        BC_BASE + iface::SEND,
        Kind::Action,
        SW,
        Perm::W,
    ),
    // Supervisor broadcast: supervisor only, all of it.
    RegDef::ro(
        "ni_sbc_status",
        SBC_BASE + iface::STATUS,
        4,
        status::SEND_EMPTY as u64,
    )
    .kind(Kind::Computed)
    .perms(SR, U0),
    sup(
        "ni_sbc_private",
        SBC_BASE + iface::PRIVATE,
        5,
        private::LOCK as u64,
    ),
    sup(
        "ni_sbc_control",
        SBC_BASE + iface::CONTROL,
        1,
        control::REC_ABSTAIN as u64,
    ),
    fifo("ni_sbc_recv", SBC_BASE + iface::RECV, Kind::Computed, S, U0),
    fifo("ni_sbc_send", SBC_BASE + iface::SEND, Kind::Action, SW, U0),
    // Combine.
    RegDef::ro(
        "ni_com_status",
        COM_BASE + iface::STATUS,
        4,
        status::SEND_EMPTY as u64,
    )
    .kind(Kind::Computed),
    sup(
        "ni_com_private",
        COM_BASE + iface::PRIVATE,
        18,
        private::LOCK as u64,
    )
    .write_mask(0x3F),
    both(
        "ni_com_control",
        COM_BASE + iface::CONTROL,
        2,
        (control::REC_ABSTAIN | control::REDUCE_REC_ABSTAIN) as u64,
    ),
    fifo("ni_com_recv", COM_BASE + iface::RECV, Kind::Computed, S, SR),
    // The supervisor may read the COM send FIFO back (newest first, §4.2.11).
    fifo(
        "ni_com_send",
        COM_BASE + iface::SEND,
        Kind::Action,
        S,
        Perm::W,
    ),
];

/// The register whose slot contains `offset` (within one window).
pub fn decode(offset: u32) -> Option<&'static RegDef> {
    REGS.iter()
        .find(|r| offset >= r.offset && offset < r.offset + r.width.max(4) as u32)
}

/// Whether `offset` (within one window) is a `send_first` or `send_first_long` address, and for
/// which interface.
pub fn send_first_interface(offset: u32) -> Option<u32> {
    match offset {
        0x1000..=0x7FFF => {
            let i = offset >> SF_FIFO_OFFSET;
            matches!(i, fifo::DATA_ROUTER | 3..=7).then_some(i)
        }
        o if (DR_SEND_FIRST_LONG..DR_SEND_FIRST_LONG + SEND_FIRST_LONG_SIZE).contains(&o) => {
            Some(fifo::DATA_ROUTER)
        }
        o if (LDR_SEND_FIRST_LONG..LDR_SEND_FIRST_LONG + SEND_FIRST_LONG_SIZE).contains(&o) => {
            Some(fifo::LEFT_DR)
        }
        o if (RDR_SEND_FIRST_LONG..RDR_SEND_FIRST_LONG + SEND_FIRST_LONG_SIZE).contains(&o) => {
            Some(fifo::RIGHT_DR)
        }
        _ => None,
    }
}

/// Combine patterns (§4.2, aux bits 8:7 of a COM send_first).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Pattern {
    /// `SCAN_ROUTER_DONE`: network-done (with `Combiner::RouterDone` only).
    RouterDone = 0,
    ScanBackward = 1,
    ScanForward = 2,
    Reduce = 3,
}

/// Combiners (§4.2, aux bits 6:4). The CM-5 has no AND, MIN or unsigned max.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Combiner {
    Or = 0,
    /// Signed add.
    Add = 1,
    Xor = 2,
    /// Unsigned add.
    Uadd = 3,
    /// Signed max.
    Max = 4,
    /// `ASSERT_ROUTER_DONE`, only with `Pattern::RouterDone`.
    RouterDone = 5,
}

/// The most words a combine carries (`MAX_COMBINE_MSG_WORDS`).
pub const MAX_COMBINE_WORDS: usize = 5;

impl Pattern {
    pub fn from_bits(v: u32) -> Pattern {
        match v & 3 {
            0 => Pattern::RouterDone,
            1 => Pattern::ScanBackward,
            2 => Pattern::ScanForward,
            _ => Pattern::Reduce,
        }
    }
}

impl Combiner {
    pub fn from_bits(v: u32) -> Option<Combiner> {
        Some(match v {
            0 => Combiner::Or,
            1 => Combiner::Add,
            2 => Combiner::Xor,
            3 => Combiner::Uadd,
            4 => Combiner::Max,
            5 => Combiner::RouterDone,
            _ => return None,
        })
    }
}

/// Whether a combiner may go with a pattern and a length: combiners 0-4 with patterns 1-3,
/// combiner 5 only with pattern 0 and length 1; 1 to 5 words. Anything else is a Bus Error.
pub fn combine_legal(pattern: Pattern, combiner: Combiner, len: usize) -> bool {
    match (pattern, combiner) {
        (Pattern::RouterDone, Combiner::RouterDone) => len == 1,
        (Pattern::RouterDone, _) | (_, Combiner::RouterDone) => false,
        _ => (1..=MAX_COMBINE_WORDS).contains(&len),
    }
}

#[cfg(test)]
mod doc_tests {
    /// `device/abi/cm5.md` lists every register of [`super::REGS`]: the table stays true.
    #[test]
    fn the_register_table_names_every_register() {
        let doc = include_str!("../cm5.md");
        for r in super::REGS.iter() {
            assert!(
                doc.contains(&format!("`{}`", r.name)),
                "cm5.md does not list {}",
                r.name
            );
        }
    }
}

/// `include/ni_cm5.h`: the register file and its fields for C drivers, generated from the
/// definitions above (a test keeps the checked-in copy equal; `NI_BLESS=1` rewrites it).
pub fn c_header() -> String {
    use std::fmt::Write;
    let mut h = String::from(
        "/*\n * ni_cm5.h — the CM-5 NI register file in BAR2 (NI Programmer's Handbook v2.2,\n \
         * App. A), for drivers written in C. GENERATED from device/abi/src/cm5.rs by\n \
         * `NI_BLESS=1 cargo test -p ni-abi`: do not edit. Behaviour: device/abi/cm5.md.\n \
         *\n * Offsets are in the user window; add NI_CM5_SUPERVISOR for the supervisor's.\n \
         */\n#ifndef NI_CM5_H\n#define NI_CM5_H\n\n",
    );
    let mut def = |name: &str, v: u64| {
        writeln!(h, "#define NI_CM5_{name} 0x{v:X}u").expect("String");
    };
    def("PCI_VENDOR_ID", crate::pci::VENDOR_ID as u64);
    def("PCI_DEVICE_ID", crate::pci::DEVICE_ID as u64);
    def("BAR", 2);
    def("BAR_SIZE", BAR2_SIZE);
    def("SUPERVISOR", SUPERVISOR);
    def("SF_FIFO_OFFSET", SF_FIFO_OFFSET as u64);
    def("AUXILIARY_START_P", AUXILIARY_START_P as u64);
    def("DR_SEND_FIRST_LONG", DR_SEND_FIRST_LONG as u64);
    def("LDR_SEND_FIRST_LONG", LDR_SEND_FIRST_LONG as u64);
    def("RDR_SEND_FIRST_LONG", RDR_SEND_FIRST_LONG as u64);
    def("MAX_COMBINE_WORDS", MAX_COMBINE_WORDS as u64);
    for r in REGS.iter() {
        def(
            &r.name.trim_start_matches("ni_").to_uppercase(),
            r.offset as u64,
        );
    }
    macro_rules! group {
        ($prefix:literal, $m:ident, [$($c:ident),* $(,)?]) => {
            $( def(concat!($prefix, stringify!($c)), $m::$c as u64); )*
        };
    }
    group!(
        "IFACE_",
        iface,
        [
            STATUS,
            PRIVATE,
            CONTROL,
            RECV,
            SEND,
            STATUS_POP,
            STATUS_ALL,
            STATUS_LONG
        ]
    );
    group!(
        "",
        self,
        [DR_BASE, BC_BASE, SBC_BASE, COM_BASE, LDR_BASE, RDR_BASE]
    );
    group!(
        "FIFO_",
        fifo,
        [
            DATA_ROUTER,
            USER_BC,
            SUPERVISOR_BC,
            COMBINE,
            LEFT_DR,
            RIGHT_DR
        ]
    );
    group!(
        "CAUSE_",
        cause,
        [
            INTERNAL_FAULT,
            MC_ERROR,
            CMU_ERROR,
            BC_INTERRUPT_RED,
            CN_CHECKSUM_ERROR,
            CN_HARD_ERROR,
            DR_CHECKSUM_ERROR,
            TIMER_INTERRUPT,
            BC_INTERRUPT_ORANGE,
            BC_INTERRUPT_YELLOW,
            BC_OR_COM_COLLISION,
            COM_ABSTAIN_CHANGED,
            DR_COUNT_NEGATIVE,
            BAD_RELATIVE_ADDRESS,
            BAD_MEMORY_ACCESS,
            MESSAGE_TOO_LONG,
            RDONE_COMPLETE,
            ALL,
        ]
    );
    group!(
        "GREEN_",
        green,
        [
            BC_INTERRUPT_GREEN,
            SCAN_OVERFLOW,
            BC_REC_OK,
            SBC_REC_OK,
            COM_REC_OK,
            COM_REC_EMPTY,
            SYNC_GLOBAL_REC,
            GLOBAL_REC,
            SUPERVISOR_GLOBAL_REC,
            DR_REC_OK,
            LDR_REC_OK,
            RDR_REC_OK,
            DR_REC_TAG,
            DR_REC_ALL_FALL_DOWN,
            LDR_REC_TAG,
            RDR_REC_TAG,
            LDR_USER_REC_TAG,
            RDR_USER_REC_TAG,
            SFIFO_EMPTY,
            DPERR,
            ALL,
        ]
    );
    group!("LEVEL_", level, [GREEN, YELLOW, ORANGE, RED]);
    group!(
        "HP_",
        hodgepodge,
        [
            GLOBAL_REC_IE,
            SUPERVISOR_GLOBAL_REC_IE,
            FLUSH_COMPLETE,
            INTERRUPT_SEND_OK,
            CONFIGURATION_COMPLETE,
            INTERRUPT_REC_ENABLE,
            SYNC_GLOBAL_REC_IE,
            TIMER_IE,
            CN_STOP_SEND,
            DISABLE_BUS_ERROR,
            LDR_REC_TAG_IE,
            RDR_REC_TAG_IE,
            LDR_USER_REC_TAG_IE,
            RDR_USER_REC_TAG_IE,
            MSG_TOO_LONG_IE,
        ]
    );
    group!(
        "BAD_ADDRESS_",
        bad_address,
        [
            LOW_MASK,
            SIZE_SHIFT,
            SIZE_WORD,
            SIZE_DOUBLEWORD,
            TYPE_SHIFT,
            TYPE_WRITE,
            TYPE_READ,
        ]
    );
    group!(
        "PRIVATE_",
        private,
        [
            REC_OK_IE,
            LOCK,
            REC_STOP,
            SEND_STOP,
            REC_FULL,
            SEND_ENABLE,
            COM_SCAN_OVERFLOW_IE,
            COM_REC_EMPTY_IE,
            SFIFO_GOES_EMPTY_IE,
            RDONE_COMPLETE_IE,
        ]
    );
    group!("CONTROL_", control, [REC_ABSTAIN, REDUCE_REC_ABSTAIN]);
    group!(
        "STATUS_",
        status,
        [
            SEND_SPACE_MASK,
            REC_OK,
            SEND_OK,
            SEND_EMPTY,
            ROUTER_DONE_COMPLETE
        ]
    );
    for (name, p) in [
        ("ROUTER_DONE", Pattern::RouterDone),
        ("SCAN_BACKWARD", Pattern::ScanBackward),
        ("SCAN_FORWARD", Pattern::ScanForward),
        ("REDUCE", Pattern::Reduce),
    ] {
        def(&format!("PATTERN_{name}"), p as u64);
    }
    for (name, c) in [
        ("OR", Combiner::Or),
        ("ADD", Combiner::Add),
        ("XOR", Combiner::Xor),
        ("UADD", Combiner::Uadd),
        ("MAX", Combiner::Max),
        ("ROUTER_DONE", Combiner::RouterDone),
    ] {
        def(&format!("COMBINER_{name}"), c as u64);
    }
    h.push_str(
        "\n/* A send_first address: interface and auxiliary bits (App. A.3). */\n\
         #define NI_CM5_SEND_FIRST(fifo, aux) \\\n    \
         (((fifo) << NI_CM5_SF_FIFO_OFFSET) + ((aux) << NI_CM5_AUXILIARY_START_P))\n\
         \n#endif /* NI_CM5_H */\n",
    );
    h
}

#[cfg(test)]
mod header_tests {
    /// The checked-in C header is what [`super::c_header`] generates.
    #[test]
    fn the_c_header_is_generated_from_these_definitions() {
        crate::check_c_header("ni_cm5.h", &super::c_header());
    }
}
