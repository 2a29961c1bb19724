//! Lanai X (Myricom spec rev 1.1): the BAR0 window, the special registers of App. A, the
//! ISR bits of §14 and the PCI-DMA descriptor (DRD) of §12.1.
//!
//! The Lanai is big-endian: a special register of width `w` at byte offset `o` occupies
//! bytes `o .. o + w` with its most significant byte first. Wider accesses see the byte lanes
//! of every register they cover (a 32-bit read at `P0_RPL_INDEX` is `P0_RPL_SNAPSHOT`).
//! `Z*` counters cannot be read over PCI (App. A note): such reads return 0 and change nothing.

use crate::regs::{Kind, Perm, RegDef};

/// BAR0 size: the 16 MB Lanai window (§11.1).
pub const BAR0_SIZE: u64 = 16 << 20;
/// LBUS SRAM at BAR0 offset 0 (at most 8 MB, §5).
pub const SRAM_SIZE: u64 = 8 << 20;
/// 256-byte view of PCI configuration space at BAR0 + 8 MB (§11.1, MX `mx_pci.h`).
pub const CONFIG_WINDOW: u64 = 0x80_0000;
pub const CONFIG_WINDOW_SIZE: u64 = 0x100;
/// The special registers: BAR0 + 0xFFFC00 + offset (CPU address 0xFFFFFC00 + offset).
pub const SPECIALS: u64 = 0xFF_FC00;
pub const SPECIALS_SIZE: u64 = 0x400;

// Port 0 (port 1 = the same offset + `PORT1`).
pub const P0_RPL_CONFIG: u32 = 0x000;
pub const P0_RB: u32 = 0x008;
pub const P0_RPL_INDEX: u32 = 0x010;
/// `P0_RPL_SNAPSHOT` is the 32-bit view of `{RPL_INDEX, RECV_COUNT}` at the same offset.
pub const P0_RPL_SNAPSHOT: u32 = 0x010;
pub const P0_RECV_COUNT: u32 = 0x012;
pub const P0_A_RPL_CONFIG: u32 = 0x018;
pub const P0_A_RB: u32 = 0x020;
pub const P0_A_RPL_INDEX: u32 = 0x028;
pub const P0_A_RECV_COUNT: u32 = 0x02A;
pub const P0_BUFFER_DROP: u32 = 0x032;
pub const P0_A_BUFFER_DROP: u32 = 0x03A;
pub const P0_MEMORY_DROP: u32 = 0x040;
pub const P0_SEND: u32 = 0x048;
pub const P0_SEND_FREE_COUNT: u32 = 0x04B;
pub const P0_SEND_FREE_LIMIT: u32 = 0x053;
pub const P0_SEND_COUNT: u32 = 0x05B;
pub const P0_PAUSE_COUNT: u32 = 0x063;
pub const P0_SEND_CONTROL: u32 = 0x06B;
pub const PORT_ADDR: u32 = 0x070;
pub const PORT_DATA: u32 = 0x078;
/// Port 1's registers sit at port 0's offset plus this.
pub const PORT1: u32 = 0x080;
pub const COPY: u32 = 0x0F0;
pub const COPY_ABORT: u32 = 0x0FA;
pub const CRC32_CONFIG: u32 = 0x102;
pub const CRC32: u32 = 0x108;
pub const CRC32_BYTE: u32 = 0x112;
pub const CRC32_HALF: u32 = 0x118;
pub const CRC32_WORD: u32 = 0x120;
pub const CPUC: u32 = 0x128;
pub const RTC: u32 = 0x130;
pub const IT0: u32 = 0x138;
pub const IT1: u32 = 0x140;
pub const IT2: u32 = 0x148;
pub const LED: u32 = 0x150;
pub const MDI: u32 = 0x158;
pub const SYNC: u32 = 0x160;
pub const PLL: u32 = 0x168;
/// Write: DISPATCH_STATE; read: DISPATCH_INDEX.
pub const DISPATCH_STATE: u32 = 0x170;
pub const DISPATCH_INDEX: u32 = 0x170;
pub const DISPATCH_ISR_ON: u32 = 0x178;
pub const DISPATCH_ISR_OFF: u32 = 0x180;
pub const DISPATCH_STATE_ON: u32 = 0x188;
pub const DISPATCH_STATE_OFF: u32 = 0x190;
pub const DISPATCH_CONFIG: u32 = 0x198;
pub const ARBITER_SLOT: u32 = 0x1A0;
pub const ARBITER_CODE: u32 = 0x1A8;
pub const MP_LOWER: u32 = 0x1B0;
pub const MP_UPPER: u32 = 0x1B8;
pub const JTAG_MASTER: u32 = 0x1C0;
pub const AISR_OFF: u32 = 0x1E0;
pub const AISR_ON: u32 = 0x1E8;
pub const AISR: u32 = 0x1F0;
pub const ISR: u32 = 0x1F8;
pub const DMA_CONFIG: u32 = 0x280;
pub const PCI_CLOCK: u32 = 0x28A;
/// DMAi_COUNT at the odd byte addresses the spec gives (they are correct).
pub const DMA_COUNT: [u32; 4] = [0x290, 0x299, 0x2A2, 0x2AB];
pub const DMA_POINTER: [u32; 4] = [0x2B0, 0x2B8, 0x2C0, 0x2C8];

/// ISR bits (§14).
pub mod isr {
    pub const P0_LINK_READY: u32 = 1 << 0;
    pub const P0_SEND_READY: u32 = 1 << 1;
    pub const P0_PACKET_SENT: u32 = 1 << 2;
    pub const P0_PACKET_HEAD: u32 = 1 << 3;
    pub const P0_PACKET_RCVD: u32 = 1 << 4;
    pub const P0_NO_BACKUP: u32 = 1 << 5;
    pub const P0_A_PACKET_RCVD: u32 = 1 << 6;
    pub const P0_EVENT: u32 = 1 << 7;
    /// Port 1's bits are port 0's shifted by this.
    pub const P1_SHIFT: u32 = 8;
    pub const COPY_BUSY: u32 = 1 << 16;
    /// TIME_INT[i] = bit 17 + i.
    pub const TIME_INT0: u32 = 1 << 17;
    pub const PARITY_INT: u32 = 1 << 20;
    pub const MEMORY_INT: u32 = 1 << 21;
    pub const WAKE_INT: u32 = 1 << 22;
    /// The one DMA error the spec defines; the model also raises it for a DMA that falls
    /// outside what the host mapped (a PCI master abort on real hardware).
    pub const DMA_ERROR_INT: u32 = 1 << 23;
    /// DMA_DONE[i] = bit 24 + i: DMAi_COUNT != 0.
    pub const DMA_DONE0: u32 = 1 << 24;
    pub const REQ_ACK0: u32 = 1 << 28;
    pub const REQ_ACK1: u32 = 1 << 29;
    /// Bits cleared by writing 1.
    pub const W1C: u32 = (0x7 << 17) | PARITY_INT | MEMORY_INT | WAKE_INT | DMA_ERROR_INT;
    /// Bits inverted by writing 1.
    pub const TOGGLE: u32 = REQ_ACK0 | REQ_ACK1;
}

/// AISR bits (§14). Port 1's are port 0's shifted by [`aisr::P1_SHIFT`] (XP/2XP layout).
pub mod aisr {
    pub const PAUSE_RCVD: u32 = 1 << 0;
    pub const SEND_STOPPED: u32 = 1 << 1;
    pub const NO_BUFFER: u32 = 1 << 2;
    pub const A_NO_BUFFER: u32 = 1 << 3;
    pub const A_NO_BACKUP: u32 = 1 << 4;
    pub const MYRI_NO_BEAT_INT: u32 = 1 << 5;
    pub const MYRI_BEAT_INT: u32 = 1 << 6;
    pub const MYRI_ILGL_INT: u32 = 1 << 7;
    pub const MYRI_STOP: u32 = 1 << 8;
    pub const GEX_RESOLVE_INT: u32 = 1 << 9;
    pub const GEX_NO_COLL_INT: u32 = 1 << 10;
    pub const GEX_REG_COLL_INT: u32 = 1 << 11;
    pub const GEX_LATE_COLL_INT: u32 = 1 << 12;
    /// The 13 bits one port owns.
    pub const PORT_MASK: u32 = 0x1FFF;
    pub const P1_SHIFT: u32 = 13;
    /// The `_INT` bits of one port (cleared by writing 1).
    pub const W1C: u32 = MYRI_NO_BEAT_INT
        | MYRI_BEAT_INT
        | MYRI_ILGL_INT
        | GEX_RESOLVE_INT
        | GEX_NO_COLL_INT
        | GEX_REG_COLL_INT
        | GEX_LATE_COLL_INT;
}

/// `channel_RPL_CONFIG` fields (§9.7). Bits 31:12 exist in the regular channel only.
pub mod rpl_config {
    pub const PORT_ENABLE: u32 = 1 << 31;
    pub const ENABLE_PAUSE_TIMER: u32 = 1 << 28;
    pub const ENABLE_BUFFER_DROP: u32 = 1 << 27;
    pub const MATCH_LINK: u32 = 1 << 26;
    pub const MATCH_OR: u32 = 1 << 25;
    pub const MATCH_VL15: u32 = 1 << 24;
    pub const HEADER_LENGTH_SHIFT: u32 = 16;
    pub const STOP_SIZE_SHIFT: u32 = 12;
    pub const MAX_PACKET_SHIFT: u32 = 8;
    pub const BLOCK_SIZE_SHIFT: u32 = 4;
    pub const BUFFER_SIZE_SHIFT: u32 = 0;
    /// The fields an alternate channel has.
    pub const ALTERNATE_MASK: u32 = 0xFFF;

    /// STOP_SIZE, MAX_PACKET and BUFFER_SIZE codes: 512 B << code.
    pub const fn size(code: u32) -> u64 {
        512 << (code & 0xF)
    }
    /// BLOCK_SIZE codes: 8 B << code.
    pub const fn block(code: u32) -> u64 {
        8 << (code & 0xF)
    }
}

/// The received-packet descriptor (RPD, §9.6): 8 bytes, big-endian, written by the receiver
/// into the RPL at the end of the buffer (RPD k at `buffer + N*B + 8k`).
pub mod rpd {
    pub const SIZE: u64 = 8;
    /// Word +0 is DESC_POINTER; word +4 (the "length word") holds these.
    pub const DESC_INVALID: u32 = 1 << 31;
    pub const DESC_LINK: u32 = 1 << 30;
    pub const DESC_MARKED_BAD: u32 = 1 << 29;
    pub const DESC_LAST: u32 = 1 << 28;
    pub const DESC_ZEROES_SHIFT: u32 = 25;
    pub const DESC_LENGTH_MASK: u32 = 0x01FF_FFFF;
    /// `channel_RB` read-back bit 31: the packet that raised PACKET_HEAD is complete.
    pub const DESC_COMPLETE: u32 = 1 << 31;
}

/// The send-packet-segment descriptor (SPD, §10.2): pointer word, then length/flags word,
/// both written to `port_SEND`.
pub mod spd {
    pub const DESC_CUT_THROUGH: u32 = 1 << 31;
    /// Myrinet: a route segment (stripped by switches, outside the CRC-32). InfiniBand, first
    /// SPD: a link packet.
    pub const DESC_ROUTE: u32 = 1 << 30;
    pub const DESC_LINK: u32 = 1 << 30;
    pub const DESC_INVALIDATE: u32 = 1 << 29;
    pub const DESC_LAST: u32 = 1 << 28;
    pub const DESC_LENGTH_MASK: u32 = 0x01FF_FFFF;
    /// Cut-through SPD (§10.3) checks: the matching RPD's bit must be 0.
    pub const CT_INVALID: u32 = 1 << 31;
    pub const CT_LINK: u32 = 1 << 30;
    pub const CT_MARKED_BAD: u32 = 1 << 29;
    pub const CT_ZEROES_SHIFT: u32 = 25;
    /// Send FIFO depth in words (8 SPDs).
    pub const FIFO_WORDS: u32 = 16;
}

/// `port_SEND_CONTROL` values (§10.4).
pub mod send_control {
    pub const SEND_ON: u32 = 0;
    pub const SEND_PAUSE: u32 = 1;
    pub const SEND_OFF: u32 = 2;
    pub const SEND_FLUSH: u32 = 3;
}

/// Port registers behind PORT_ADDR/PORT_DATA (§13, App. B); port 1's are port 0's + 0x40.
pub mod port_reg {
    pub const GEX_CONTROL: u8 = 0x00;
    pub const GE_FALSE_CARRIER: u8 = 0x08;
    pub const RECV_CONFIG: u8 = 0x09;
    pub const SHORT_DROP: u8 = 0x0A;
    pub const MODE: u8 = 0x10;
    pub const STATE: u8 = 0x11;
    pub const ERROR_8B10B: u8 = 0x12;
    pub const IB_LERC: u8 = 0x13;
    pub const IB_LDC: u8 = 0x14;
    pub const IB_LEC: u8 = 0x15;
    pub const IB_REC: u8 = 0x16;
    pub const IB_CONFIG: u8 = 0x17;
    pub const TEST: u8 = 0x20;
    pub const GE_CONFIG: u8 = 0x21;
    pub const MYRI_SEND: u8 = 0x22;
    pub const SEND_CONFIG: u8 = 0x23;
    pub const PORT1: u8 = 0x40;
    /// PORT_ADDR bit 15: read the register named by bits 6:0 into PORT_DATA.
    pub const PORT_READ: u16 = 1 << 15;

    /// MODE (one-hot; only the least significant 1 written is kept).
    pub const MODE_M: u16 = 1 << 0;
    pub const MODE_IB: u16 = 1 << 1;
    pub const MODE_GEX: u16 = 1 << 2;
    pub const MODE_GMII: u16 = 1 << 3;
    /// GE_CONFIG bit 0.
    pub const GE_HALF_DUPLEX_MODE: u16 = 1 << 0;
}

/// `port_RECV_CONFIG` / `port_SEND_CONFIG` bits (§13.2).
pub mod crc_config {
    pub const INVALIDATE_MARK_BAD: u16 = 1 << 9;
    pub const INVALIDATE_CRC8: u16 = 1 << 8;
    pub const INVALIDATE_CRC16: u16 = 1 << 7;
    pub const INVALIDATE_CRC32: u16 = 1 << 6;
    pub const ENABLE_CRC8: u16 = 1 << 5;
    pub const ENABLE_CRC16: u16 = 1 << 4;
    pub const ENABLE_CRC32: u16 = 1 << 3;
    /// Bits 2:1, as in CRC32_CONFIG: bit 1 feeds each byte least significant bit first,
    /// bit 2 keeps the state bit-reversed (00 Myrinet, 11 GigE/IB).
    pub const CRC32_BIT_ORDER_SHIFT: u16 = 1;
    pub const CRC32_INFINIBAND: u16 = 1 << 0;
}

/// COPY's second word (§8).
pub mod copy {
    pub const COPY_TO_CRC32: u32 = 1 << 31;
    pub const COPY_LENGTH_MASK: u32 = 0x7FFF_FFFF;
}

/// DISPATCH_CONFIG fields (§15).
pub mod dispatch {
    pub const AND: u32 = 1 << 8;
    pub const OR: u32 = 1 << 7;
    pub const INVERT: u32 = 1 << 6;
    pub const SELECT_MASK: u32 = 0x3F;
    pub const BLOCKS: usize = 64;
    /// DISPATCH_INDEX when no block's OUT is 1: 4 x 64.
    pub const NONE: u32 = 256;
}

/// The emulated Myrinet network between port 0s (our choice; the seed gives no switch):
/// one crossbar per partition whose port r is the partition's rank r. A Myrinet-mode packet
/// starts with its route (the ROUTE SPD); the crossbar consumes the leading byte, which
/// must be `ROUTE_BYTE | r` (`r` < 128), and the packet arrives at rank r with the rest.
pub mod route {
    pub const ROUTE_BYTE: u8 = 0x80;
    pub const PORT_MASK: u8 = 0x7F;
    /// The Ethernet address of rank r's port 0: `02:4E:49:00:r_hi:r_lo` (locally
    /// administered, "NI").
    pub const MAC_PREFIX: [u8; 4] = [0x02, 0x4E, 0x49, 0x00];
}

/// The top 1 KiB of SRAM: where the daemon (as the Lanai's start-up code, §11.2) points
/// `DMA_CONFIG.PCI_OFFSET` at reset, so the config-space Read Mask never overlays the fast
/// path's control page at 0.
pub const READ_MASK_DEFAULT: u32 = (SRAM_SIZE - 1024) as u32;

/// DMA_CONFIG fields (§12).
pub mod dma_config {
    /// Read-only mirror of the PCI command register's Bus Master Enable.
    pub const DMA_ENABLE: u32 = 1 << 31;
    pub const DMA_PRIORITY_SHIFT: u32 = 28;
    pub const PCI_OFFSET_MASK: u32 = 0x0FFF_FC00;
    pub const DMA_PIPELINE_SHIFT: u32 = 8;
}

/// The PCI-DMA descriptor (DRD, §12.1): 24 bytes, 8-byte aligned, big-endian, in LBUS SRAM.
pub mod drd {
    pub const SIZE: u64 = 24;
    /// Word at +0: flags and length.
    pub const DMA_READ: u32 = 1 << 31;
    pub const DMA_END: u32 = 1 << 30;
    pub const DMA_FLUSH: u32 = 1 << 29;
    pub const DMA_NO_SNOOP: u32 = 1 << 28;
    pub const DMA_NO_CACHE: u32 = 1 << 27;
    pub const DMA_LENGTH_MASK: u32 = 0x00FF_FFFF;
    pub const OFF_FLAGS_LENGTH: u64 = 0;
    pub const OFF_PCI_ADDR: u64 = 4;
    pub const OFF_LANAI_ADDR: u64 = 8;
    pub const DMA_LANAI_ADDR_MASK: u32 = 0x0FFF_FFFF;
    pub const OFF_PCI64_ADDR: u64 = 12;
    /// Word at +16: APPEND, VALID and NEXT.
    pub const OFF_NEXT: u64 = 16;
    pub const DMA_APPEND: u32 = 1 << 29;
    pub const DMA_VALID: u32 = 1 << 28;
    pub const DMA_NEXT_MASK: u32 = 0x0FFF_FFF8;
    pub const OFF_OFFSET: u64 = 20;
    pub const OFF_CHECKSUM: u64 = 22;
}

/// The Lanai configuration register at PCI config offset 0x40 (§11.1): ON/OFF pairs where
/// writing 1 sets or clears the signal, OFF wins, and 0 does nothing.
pub mod config40 {
    pub const OFFSET: u16 = 0x40;
    pub const PCI_CPU_RESET_ON: u32 = 1 << 31;
    pub const PCI_CPU_RESET_OFF: u32 = 1 << 30;
    pub const PCI_IO_RESET_ON: u32 = 1 << 29;
    pub const PCI_IO_RESET_OFF: u32 = 1 << 28;
    pub const PCI_INT_ENABLE_ON: u32 = 1 << 27;
    pub const PCI_INT_ENABLE_OFF: u32 = 1 << 26;
    pub const PCI_MASK_DISABLE_ON: u32 = 1 << 25;
    pub const PCI_MASK_DISABLE_OFF: u32 = 1 << 24;
    pub const PCI_JTAG_MASTER_MASK: u32 = 0x00FF_FFFF;
    /// The signal bits as the device keeps them (one per pair, at the ON position).
    pub const SIGNALS: u32 =
        PCI_CPU_RESET_ON | PCI_IO_RESET_ON | PCI_INT_ENABLE_ON | PCI_MASK_DISABLE_ON;
}

const fn z(name: &'static str, offset: u32) -> RegDef {
    RegDef::ro(name, offset, 2, 0)
        .kind(Kind::ResetOnRead)
        .perms(Perm::NONE, Perm::NONE)
}
const fn d(name: &'static str, offset: u32, width: u8) -> RegDef {
    RegDef::rw(name, offset, width, 0).kind(Kind::DecrementOnWrite)
}
const fn wo(name: &'static str, offset: u32, width: u8) -> RegDef {
    RegDef::rw(name, offset, width, 0)
        .kind(Kind::Action)
        .perms(Perm::W, Perm::W)
}

macro_rules! port_regs {
    ($p:literal, $b:expr) => {
        [
            RegDef::rw(concat!($p, "_RPL_CONFIG"), P0_RPL_CONFIG + $b, 4, 0),
            RegDef::rw(concat!($p, "_RB"), P0_RB + $b, 4, 0).kind(Kind::Action),
            RegDef::ro(concat!($p, "_RPL_INDEX"), P0_RPL_INDEX + $b, 2, 0),
            d(concat!($p, "_RECV_COUNT"), P0_RECV_COUNT + $b, 2),
            RegDef::rw(concat!($p, "_A_RPL_CONFIG"), P0_A_RPL_CONFIG + $b, 4, 0),
            RegDef::rw(concat!($p, "_A_RB"), P0_A_RB + $b, 4, 0).kind(Kind::Action),
            RegDef::ro(concat!($p, "_A_RPL_INDEX"), P0_A_RPL_INDEX + $b, 2, 0),
            d(concat!($p, "_A_RECV_COUNT"), P0_A_RECV_COUNT + $b, 2),
            z(concat!($p, "_BUFFER_DROP"), P0_BUFFER_DROP + $b),
            z(concat!($p, "_A_BUFFER_DROP"), P0_A_BUFFER_DROP + $b),
            z(concat!($p, "_MEMORY_DROP"), P0_MEMORY_DROP + $b),
            wo(concat!($p, "_SEND"), P0_SEND + $b, 4),
            // Empty send FIFO: 16 free words.
            RegDef::ro(
                concat!($p, "_SEND_FREE_COUNT"),
                P0_SEND_FREE_COUNT + $b,
                1,
                16,
            ),
            // Bit 0 is wired to 0.
            RegDef::rw(
                concat!($p, "_SEND_FREE_LIMIT"),
                P0_SEND_FREE_LIMIT + $b,
                1,
                0,
            )
            .write_mask(0xE),
            d(concat!($p, "_SEND_COUNT"), P0_SEND_COUNT + $b, 1),
            d(concat!($p, "_PAUSE_COUNT"), P0_PAUSE_COUNT + $b, 1),
            RegDef::rw(concat!($p, "_SEND_CONTROL"), P0_SEND_CONTROL + $b, 1, 0).bits(2),
        ]
    };
}

const P0: [RegDef; 17] = port_regs!("P0", 0);
const P1: [RegDef; 17] = port_regs!("P1", PORT1);

const OTHERS: [RegDef; 43] = [
    RegDef::rw("PORT_ADDR", PORT_ADDR, 2, 0),
    RegDef::rw("PORT_DATA", PORT_DATA, 2, 0),
    wo("COPY", COPY, 4),
    wo("COPY_ABORT", COPY_ABORT, 1).bits(1),
    // Bits 2:1 only.
    RegDef::rw("CRC32_CONFIG", CRC32_CONFIG, 1, 0).write_mask(0x6),
    RegDef::rw("CRC32", CRC32, 4, 0),
    wo("CRC32_BYTE", CRC32_BYTE, 1),
    wo("CRC32_HALF", CRC32_HALF, 2),
    wo("CRC32_WORD", CRC32_WORD, 4),
    RegDef::rw("CPUC", CPUC, 4, 0).kind(Kind::Computed),
    RegDef::rw("RTC", RTC, 4, 0).kind(Kind::Computed),
    RegDef::rw("IT0", IT0, 4, 0).kind(Kind::Computed),
    RegDef::rw("IT1", IT1, 4, 0).kind(Kind::Computed),
    RegDef::rw("IT2", IT2, 4, 0).kind(Kind::Computed),
    RegDef::rw("LED", LED, 1, 0).bits(4),
    RegDef::rw("MDI", MDI, 1, 0).bits(3),
    RegDef::rw("SYNC", SYNC, 4, 0),
    RegDef::rw("PLL", PLL, 4, 0),
    // One offset, two registers: DISPATCH_STATE is written, DISPATCH_INDEX read (0..256).
    RegDef::rw("DISPATCH_STATE/DISPATCH_INDEX", DISPATCH_STATE, 4, 256).kind(Kind::Computed),
    wo("DISPATCH_ISR_ON", DISPATCH_ISR_ON, 4),
    wo("DISPATCH_ISR_OFF", DISPATCH_ISR_OFF, 4),
    wo("DISPATCH_STATE_ON", DISPATCH_STATE_ON, 4),
    wo("DISPATCH_STATE_OFF", DISPATCH_STATE_OFF, 4),
    wo("DISPATCH_CONFIG", DISPATCH_CONFIG, 4).write_mask(0x1FF),
    RegDef::rw("ARBITER_SLOT", ARBITER_SLOT, 1, 0).bits(5),
    RegDef::rw("ARBITER_CODE", ARBITER_CODE, 1, 0).bits(4),
    RegDef::rw("MP_LOWER", MP_LOWER, 4, 0).write_mask(0x7FFF_FFF8),
    RegDef::rw("MP_UPPER", MP_UPPER, 4, 0x8000_0000).write_mask(0xFFFF_FFF8),
    RegDef::rw("JTAG_MASTER", JTAG_MASTER, 4, 0),
    RegDef::rw("AISR_OFF", AISR_OFF, 4, 0),
    RegDef::rw("AISR_ON", AISR_ON, 4, 0),
    // AISR status is computed from the ports; its _INT bits (PAUSE_RCVD aside) clear by W1C.
    RegDef::rw("AISR", AISR, 4, 0)
        .write_mask(0)
        .w1c(0x0000_1EE0 | (0x0000_1EE0 << 13)),
    RegDef::rw("ISR", ISR, 4, 0)
        .write_mask(0)
        .w1c(isr::W1C as u64)
        .toggle(isr::TOGGLE as u64),
    // DMA_ENABLE (bit 31) mirrors Bus Master Enable and is read-only.
    RegDef::rw("DMA_CONFIG", DMA_CONFIG, 4, 0).write_mask(0x7FFF_FFFF),
    RegDef::rw("PCI_CLOCK", PCI_CLOCK, 2, 0).kind(Kind::Computed),
    d("DMA0_COUNT", DMA_COUNT[0], 1),
    d("DMA1_COUNT", DMA_COUNT[1], 1),
    d("DMA2_COUNT", DMA_COUNT[2], 1),
    d("DMA3_COUNT", DMA_COUNT[3], 1),
    wo("DMA0_POINTER", DMA_POINTER[0], 4),
    wo("DMA1_POINTER", DMA_POINTER[1], 4),
    wo("DMA2_POINTER", DMA_POINTER[2], 4),
    wo("DMA3_POINTER", DMA_POINTER[3], 4),
];

/// Every special register, in one table.
pub static SPECIAL_REGS: [RegDef; 77] = concat_tables();

const fn concat_tables() -> [RegDef; 77] {
    let mut out = [RegDef::ro("", 0x3FF, 0, 0); 77];
    let mut i = 0;
    while i < 17 {
        out[i] = P0[i];
        out[17 + i] = P1[i];
        i += 1;
    }
    let mut j = 0;
    while j < 43 {
        out[34 + j] = OTHERS[j];
        j += 1;
    }
    out
}

/// `ni_lanai.h`: the BAR0 window, every special register and the bit fields above, for
/// drivers written in C, generated from these definitions (a test keeps the checked-in
/// copy equal; `NI_BLESS=1 cargo test -p ni-abi` rewrites it).
pub fn c_header() -> String {
    use std::fmt::Write;
    let mut h = String::from(
        "/*\n * ni_lanai.h — the Lanai X window in BAR0 (Myricom Lanai X rev 1.1, App. A), for\n \
         * drivers written in C. GENERATED from device/abi/src/lanai.rs by\n \
         * `NI_BLESS=1 cargo test -p ni-abi`: do not edit. Behaviour: device/abi/lanai.md.\n \
         *\n * Special registers are big-endian at NI_LANAI_SPECIALS + offset; SRAM is big-endian\n \
         * from the Lanai's side (RPDs, SPDs, DRDs).\n */\n#ifndef NI_LANAI_H\n#define NI_LANAI_H\n\n",
    );
    let mut def = |name: &str, v: u64| {
        writeln!(h, "#define NI_LANAI_{name} 0x{v:X}u").expect("String");
    };
    def("PCI_VENDOR_ID", crate::pci::VENDOR_ID as u64);
    def("PCI_DEVICE_ID", crate::pci::DEVICE_ID as u64);
    def("BAR", 0);
    def("BAR_SIZE", BAR0_SIZE);
    def("SRAM_SIZE", SRAM_SIZE);
    def("CONFIG_WINDOW", CONFIG_WINDOW);
    def("SPECIALS", SPECIALS);
    def("READ_MASK_DEFAULT", READ_MASK_DEFAULT as u64);
    // The daemon's identity registers (little-endian, trapped): which crossbar port
    // (partition rank) this NI is and how many there are.
    def("ID_PAGE", crate::fastpath::regs::PAGE);
    def("ID_RANK", crate::fastpath::regs::RANK);
    def("ID_SIZE", crate::fastpath::regs::SIZE);
    for r in SPECIAL_REGS.iter() {
        for name in r.name.split('/') {
            def(name, r.offset as u64);
        }
    }
    def("P0_RPL_SNAPSHOT", P0_RPL_SNAPSHOT as u64);
    def("P0_A_RPL_SNAPSHOT", P0_A_RPL_INDEX as u64);
    def("P1_RPL_SNAPSHOT", (P0_RPL_SNAPSHOT + PORT1) as u64);
    def("P1_A_RPL_SNAPSHOT", (P0_A_RPL_INDEX + PORT1) as u64);
    def("PORT1", PORT1 as u64);
    macro_rules! group {
        ($prefix:literal, $m:ident, [$($c:ident),* $(,)?]) => {
            $( def(concat!($prefix, stringify!($c)), $m::$c as u64); )*
        };
    }
    group!(
        "ISR_",
        isr,
        [
            P0_LINK_READY,
            P0_SEND_READY,
            P0_PACKET_SENT,
            P0_PACKET_HEAD,
            P0_PACKET_RCVD,
            P0_NO_BACKUP,
            P0_A_PACKET_RCVD,
            P0_EVENT,
            P1_SHIFT,
            COPY_BUSY,
            TIME_INT0,
            PARITY_INT,
            MEMORY_INT,
            WAKE_INT,
            DMA_ERROR_INT,
            DMA_DONE0,
            REQ_ACK0,
            REQ_ACK1,
        ]
    );
    group!(
        "AISR_",
        aisr,
        [
            PAUSE_RCVD,
            SEND_STOPPED,
            NO_BUFFER,
            A_NO_BUFFER,
            A_NO_BACKUP,
            MYRI_NO_BEAT_INT,
            MYRI_BEAT_INT,
            MYRI_ILGL_INT,
            MYRI_STOP,
            GEX_RESOLVE_INT,
            GEX_NO_COLL_INT,
            GEX_REG_COLL_INT,
            GEX_LATE_COLL_INT,
            P1_SHIFT,
        ]
    );
    group!(
        "RPL_",
        rpl_config,
        [
            PORT_ENABLE,
            ENABLE_PAUSE_TIMER,
            ENABLE_BUFFER_DROP,
            MATCH_LINK,
            MATCH_OR,
            MATCH_VL15,
            HEADER_LENGTH_SHIFT,
            STOP_SIZE_SHIFT,
            MAX_PACKET_SHIFT,
            BLOCK_SIZE_SHIFT,
            BUFFER_SIZE_SHIFT,
        ]
    );
    group!(
        "RPD_",
        rpd,
        [
            SIZE,
            DESC_INVALID,
            DESC_LINK,
            DESC_MARKED_BAD,
            DESC_LAST,
            DESC_ZEROES_SHIFT,
            DESC_LENGTH_MASK,
            DESC_COMPLETE,
        ]
    );
    group!(
        "SPD_",
        spd,
        [
            DESC_CUT_THROUGH,
            DESC_ROUTE,
            DESC_LINK,
            DESC_INVALIDATE,
            DESC_LAST,
            DESC_LENGTH_MASK,
            CT_INVALID,
            CT_LINK,
            CT_MARKED_BAD,
            CT_ZEROES_SHIFT,
            FIFO_WORDS,
        ]
    );
    group!(
        "",
        send_control,
        [SEND_ON, SEND_PAUSE, SEND_OFF, SEND_FLUSH]
    );
    group!(
        "PORT_",
        port_reg,
        [
            GEX_CONTROL,
            GE_FALSE_CARRIER,
            RECV_CONFIG,
            SHORT_DROP,
            MODE,
            STATE,
            ERROR_8B10B,
            IB_LERC,
            IB_LDC,
            IB_LEC,
            IB_REC,
            IB_CONFIG,
            TEST,
            GE_CONFIG,
            MYRI_SEND,
            SEND_CONFIG,
            PORT1,
            PORT_READ,
            MODE_M,
            MODE_IB,
            MODE_GEX,
            MODE_GMII,
            GE_HALF_DUPLEX_MODE,
        ]
    );
    group!(
        "",
        crc_config,
        [
            INVALIDATE_MARK_BAD,
            INVALIDATE_CRC8,
            INVALIDATE_CRC16,
            INVALIDATE_CRC32,
            ENABLE_CRC8,
            ENABLE_CRC16,
            ENABLE_CRC32,
            CRC32_BIT_ORDER_SHIFT,
            CRC32_INFINIBAND,
        ]
    );
    group!("", copy, [COPY_TO_CRC32, COPY_LENGTH_MASK]);
    group!("DISPATCH_", dispatch, [AND, OR, INVERT, SELECT_MASK, NONE]);
    group!("", route, [ROUTE_BYTE, PORT_MASK]);
    group!(
        "DRD_",
        drd,
        [
            SIZE,
            DMA_READ,
            DMA_END,
            DMA_FLUSH,
            DMA_LENGTH_MASK,
            OFF_FLAGS_LENGTH,
            OFF_PCI_ADDR,
            OFF_LANAI_ADDR,
            OFF_PCI64_ADDR,
            OFF_NEXT,
            DMA_APPEND,
            DMA_VALID,
            DMA_NEXT_MASK,
            OFF_OFFSET,
            OFF_CHECKSUM,
        ]
    );
    group!(
        "CONFIG40_",
        config40,
        [
            OFFSET,
            PCI_CPU_RESET_ON,
            PCI_CPU_RESET_OFF,
            PCI_IO_RESET_ON,
            PCI_IO_RESET_OFF,
            PCI_INT_ENABLE_ON,
            PCI_INT_ENABLE_OFF,
            PCI_MASK_DISABLE_ON,
            PCI_MASK_DISABLE_OFF,
        ]
    );
    h.push_str("\n#endif /* NI_LANAI_H */\n");
    h
}

#[cfg(test)]
mod tests {
    /// The checked-in C header is what [`super::c_header`] generates.
    #[test]
    fn the_c_header_is_generated_from_these_definitions() {
        crate::check_c_header("ni_lanai.h", &super::c_header());
    }
}
