//! The METRO MLINK register block (MIT METRO/MBTA Ch. 11, §11.2, §11.3, Fig. 11.1; digest
//! cray-metro.md §C).
//!
//! §11.2 gives the processor 32-bit memory-mapped MLINK registers "to configure each MLINK,
//! to launch or abort network operations, and to check the status of ongoing or recently
//! completed operations", but no map: the map here is ours (device/abi/mlink.md). Every
//! register is 32 bits, little-endian, at `PAGE + offset`; only 32-bit accesses are taken.
//!
//! Memory. An MLINK reads and writes its node's fast memory: here, the NI's SRAM (BAR0 from
//! offset 0). Remote addresses are the 24-bit byte addresses of Fig. 11.1's three address
//! bytes, 8-byte aligned; lengths count 8-byte words as `len` does.

/// BAR0 offset of the MLINK block.
pub const PAGE: u64 = 0xA1_0000;
pub const PAGE_SIZE: u64 = 0x1000;

/// MLINKs per node (§11.2 "one or more"): link `l`'s launch registers at `LINK + l·LINK_STRIDE`.
pub const LINKS: u32 = 2;
pub const LINK: u64 = 0x000;
pub const LINK_STRIDE: u64 = 0x40;

/// Launch registers of one link (offsets inside its block).
pub mod link {
    /// [`super::config`] bits.
    pub const CONFIG: u64 = 0x00;
    /// The target: a virtual PE (rank in the partition).
    pub const TARGET: u64 = 0x04;
    /// The remote address: a byte address in the target's SRAM, `<23:0>`, 8-byte aligned.
    pub const REMOTE: u64 = 0x08;
    /// The local address: a byte address in this NI's SRAM, 8-byte aligned (READ's
    /// destination, WRITE's and ROP's source).
    pub const LOCAL: u64 = 0x0C;
    /// `len`: 8-byte words, 1 to `MAX_LEN` (READ, WRITE, ROP).
    pub const LEN: u64 = 0x10;
    /// ROP: the distinguished address (the handler the target software dispatches on).
    pub const HANDLER: u64 = 0x14;
    /// Write to launch or abort ([`super::command`]).
    pub const COMMAND: u64 = 0x18;
    /// Read-only [`super::status`].
    pub const STATUS: u64 = 0x1C;
    /// Read-only: the header checksum the last launch sent, and (`<31:16>`) the data
    /// checksum of its data (WRITE, ROP) or of the READ reply's data.
    pub const CHECKSUMS: u64 = 0x20;
    /// Read-only: operations this link completed (any outcome), wrapping.
    pub const COMPLETED: u64 = 0x24;
}

/// Link CONFIG bits.
pub mod config {
    /// Raise MSI-X vector `MLINK` when an operation of this link completes.
    pub const INTERRUPT: u32 = 1 << 0;
    /// Target side (link 0's CONFIG only): do not accept connections now. Operations
    /// addressed to this node wait (METRO's blocked path) until it clears, for at most
    /// `BLOCK_TIMEOUT_MS`, then get NACK with reason `TIMEOUT`.
    pub const RX_PAUSE: u32 = 1 << 1;
    pub const ALL: u32 = 0x3;
}

/// COMMAND values: opcode `<3:0>`; `ABORT` alone aborts what the link has in flight.
pub mod command {
    pub const READ: u32 = 1;
    pub const WRITE: u32 = 2;
    pub const RESET: u32 = 3;
    pub const NOOP: u32 = 4;
    pub const ROP: u32 = 5;
    pub const OP_MASK: u32 = 0xF;
    pub const ABORT: u32 = 1 << 8;
}

/// STATUS: state `<3:0>`, reason `<11:8>`, and `<31:16>` the reply's two mlink-status bytes
/// (`STATUS_BYTE0` in `<23:16>`, `STATUS_BYTE1` in `<31:24>`).
pub mod status {
    pub const IDLE: u32 = 0;
    /// Launched, not finished: the launch registers may not be rewritten meaningfully.
    pub const BUSY: u32 = 1;
    /// The target answered ACK (READ: its data arrived with a good checksum).
    pub const ACK: u32 = 2;
    /// The target answered NACK; the reason says why.
    pub const NACK: u32 = 3;
    pub const ABORTED: u32 = 4;
    /// Refused before it left (bad launch registers, no such target): nothing was sent.
    pub const REFUSED: u32 = 5;
    pub const STATE_MASK: u32 = 0xF;
    pub const REASON_SHIFT: u32 = 8;
    pub const BYTES_SHIFT: u32 = 16;
}

/// Reasons (STATUS `<11:8>`).
pub mod reason {
    pub const NONE: u32 = 0;
    /// The header checksum did not match: nothing done at the target.
    pub const HEADER_CHECKSUM: u32 = 1;
    /// The data checksum did not match (WRITE: the data was written as it arrived, §4.7.4;
    /// READ: the reply's data, already in local SRAM, is not to be trusted).
    pub const DATA_CHECKSUM: u32 = 2;
    /// Address or length outside the SRAM, unaligned, or outside what the target exposes.
    pub const ADDRESS: u32 = 3;
    pub const LENGTH: u32 = 4;
    /// ROP: the target's incoming queue is full.
    pub const QUEUE_FULL: u32 = 5;
    /// RESET: remote boot is not enabled for the partition, or the target is not held.
    pub const NOT_PERMITTED: u32 = 6;
    /// No such target in the partition, its NI has no client, a port is down or no route.
    pub const UNREACHABLE: u32 = 7;
    /// The target paused its receiver (RX_PAUSE) for longer than `BLOCK_TIMEOUT_MS`.
    pub const TIMEOUT: u32 = 8;
    /// Not an opcode, or a launch while BUSY.
    pub const BAD_COMMAND: u32 = 9;
    /// ABORT with nothing in flight: the state is unchanged.
    pub const NOTHING_TO_ABORT: u32 = 10;
}

/// The reply's first mlink-status byte: the target's state when it answered.
pub mod status_byte0 {
    /// The target has a client (its NI is attached).
    pub const PRESENT: u32 = 1 << 0;
    /// The target is held in reset (awaiting a remote boot).
    pub const HELD: u32 = 1 << 1;
    /// The target's incoming ROP queue is full.
    pub const QUEUE_FULL: u32 = 1 << 2;
    /// Remote boot is enabled for the partition.
    pub const BOOT_ENABLED: u32 = 1 << 3;
    /// The target exposes a READ/WRITE window.
    pub const EXPOSED: u32 = 1 << 4;
}
// The second status byte is the target's reason (`reason::*`, 0 for ACK).

/// The receive side, shared by the node's links.
pub mod rx {
    /// The SRAM range peers may READ and WRITE: base (8-byte aligned) and size in bytes.
    /// Size 0 (reset): none.
    pub const EXPOSE_BASE: u64 = 0x200;
    pub const EXPOSE_SIZE: u64 = 0x204;
    /// [`super::boot`] bits; a write of `HOLD` holds this node in reset.
    pub const BOOT: u64 = 0x208;
    /// ROPs waiting in the incoming queue (read-only).
    pub const QUEUE_COUNT: u64 = 0x210;
    /// The head entry: its handler, source virtual PE, length in words (read-only).
    pub const QUEUE_HANDLER: u64 = 0x214;
    pub const QUEUE_SOURCE: u64 = 0x218;
    pub const QUEUE_LEN: u64 = 0x21C;
    /// Write anything: drop the head entry.
    pub const QUEUE_POP: u64 = 0x220;
    /// ROPs refused because the queue was full (read-only, wrapping).
    pub const QUEUE_DROPS: u64 = 0x224;
    /// The head entry's data, `QUEUE_DATA_MAX` bytes at most.
    pub const QUEUE_DATA: u64 = 0x400;
}

/// BOOT bits.
pub mod boot {
    /// Held in reset: the node waits for a remote boot. Set by writing it; cleared by a
    /// peer's RESET (or by writing 0).
    pub const HOLD: u32 = 1 << 0;
    /// Read-only: a RESET released this node since it last set HOLD.
    pub const RELEASED: u32 = 1 << 1;
    /// Read-only `<31:16>`: the virtual PE whose RESET released it.
    pub const RELEASER_SHIFT: u32 = 16;
}

/// The longest READ, WRITE or ROP, in 8-byte words.
pub const MAX_LEN: u32 = 4096;
/// Entries of the register-read ROP queue, and the longest ROP it takes (words).
pub const QUEUE_ENTRIES: u32 = 16;
pub const QUEUE_DATA_MAX: u32 = 128;
pub const BLOCK_TIMEOUT_MS: u32 = 1000;

/// The checksum of Fig. 11.1's `(DATA cksum)^2` fields: Fletcher-16 over the bytes (the
/// seed gives no algorithm; this one is byte-oriented like the link and catches reordering).
pub fn checksum(bytes: &[u8]) -> u16 {
    let (mut a, mut b) = (0u32, 0u32);
    for chunk in bytes.chunks(4096) {
        for &x in chunk {
            a += x as u32;
            b += a;
        }
        a %= 255;
        b %= 255;
    }
    ((b << 8) | a) as u16
}

/// The header bytes the header checksum covers: the opcode-and-length token (opcode `<3:0>`
/// of the first byte, `len` in the next two, little-endian) and the three address bytes.
pub fn header(op: u32, len: u32, remote: u32) -> [u8; 6] {
    let l = len.to_le_bytes();
    let r = remote.to_le_bytes();
    [op as u8, l[0], l[1], r[0], r[1], r[2]]
}

/// `ni_mlink.h`, generated from these definitions (`NI_BLESS=1 cargo test -p ni-abi`).
pub fn c_header() -> String {
    use std::fmt::Write;
    let mut h = String::from(
        "/*\n * ni_mlink.h — the METRO MLINK register block in BAR0 (MIT METRO Ch. 11).\n \
         * GENERATED from device/abi/src/mlink.rs by `NI_BLESS=1 cargo test -p ni-abi`: do not\n \
         * edit. Behaviour: device/abi/mlink.md. Registers are 32 bits, little-endian.\n \
         */\n#ifndef NI_MLINK_H\n#define NI_MLINK_H\n\n",
    );
    let mut def = |name: &str, v: u64| {
        writeln!(h, "#define NI_MLINK_{name} 0x{v:X}u").expect("String");
    };
    def("PAGE", PAGE);
    def("PAGE_SIZE", PAGE_SIZE);
    def("LINKS", LINKS as u64);
    def("LINK", LINK);
    def("LINK_STRIDE", LINK_STRIDE);
    for (n, v) in [
        ("CONFIG", link::CONFIG),
        ("TARGET", link::TARGET),
        ("REMOTE", link::REMOTE),
        ("LOCAL", link::LOCAL),
        ("LEN", link::LEN),
        ("HANDLER", link::HANDLER),
        ("COMMAND", link::COMMAND),
        ("STATUS", link::STATUS),
        ("CHECKSUMS", link::CHECKSUMS),
        ("COMPLETED", link::COMPLETED),
        ("EXPOSE_BASE", rx::EXPOSE_BASE),
        ("EXPOSE_SIZE", rx::EXPOSE_SIZE),
        ("BOOT", rx::BOOT),
        ("QUEUE_COUNT", rx::QUEUE_COUNT),
        ("QUEUE_HANDLER", rx::QUEUE_HANDLER),
        ("QUEUE_SOURCE", rx::QUEUE_SOURCE),
        ("QUEUE_LEN", rx::QUEUE_LEN),
        ("QUEUE_POP", rx::QUEUE_POP),
        ("QUEUE_DROPS", rx::QUEUE_DROPS),
        ("QUEUE_DATA", rx::QUEUE_DATA),
    ] {
        def(n, v);
    }
    for (n, v) in [
        ("CONFIG_INTERRUPT", config::INTERRUPT),
        ("CONFIG_RX_PAUSE", config::RX_PAUSE),
        ("CMD_READ", command::READ),
        ("CMD_WRITE", command::WRITE),
        ("CMD_RESET", command::RESET),
        ("CMD_NOOP", command::NOOP),
        ("CMD_ROP", command::ROP),
        ("CMD_ABORT", command::ABORT),
        ("ST_IDLE", status::IDLE),
        ("ST_BUSY", status::BUSY),
        ("ST_ACK", status::ACK),
        ("ST_NACK", status::NACK),
        ("ST_ABORTED", status::ABORTED),
        ("ST_REFUSED", status::REFUSED),
        ("ST_STATE_MASK", status::STATE_MASK),
        ("ST_REASON_SHIFT", status::REASON_SHIFT),
        ("ST_BYTES_SHIFT", status::BYTES_SHIFT),
        ("R_NONE", reason::NONE),
        ("R_HEADER_CHECKSUM", reason::HEADER_CHECKSUM),
        ("R_DATA_CHECKSUM", reason::DATA_CHECKSUM),
        ("R_ADDRESS", reason::ADDRESS),
        ("R_LENGTH", reason::LENGTH),
        ("R_QUEUE_FULL", reason::QUEUE_FULL),
        ("R_NOT_PERMITTED", reason::NOT_PERMITTED),
        ("R_UNREACHABLE", reason::UNREACHABLE),
        ("R_TIMEOUT", reason::TIMEOUT),
        ("R_BAD_COMMAND", reason::BAD_COMMAND),
        ("R_NOTHING_TO_ABORT", reason::NOTHING_TO_ABORT),
        ("S0_PRESENT", status_byte0::PRESENT),
        ("S0_HELD", status_byte0::HELD),
        ("S0_QUEUE_FULL", status_byte0::QUEUE_FULL),
        ("S0_BOOT_ENABLED", status_byte0::BOOT_ENABLED),
        ("S0_EXPOSED", status_byte0::EXPOSED),
        ("BOOT_HOLD", boot::HOLD),
        ("BOOT_RELEASED", boot::RELEASED),
        ("BOOT_RELEASER_SHIFT", boot::RELEASER_SHIFT),
        ("MAX_LEN", MAX_LEN),
        ("QUEUE_ENTRIES", QUEUE_ENTRIES),
        ("QUEUE_DATA_MAX", QUEUE_DATA_MAX),
    ] {
        def(n, v as u64);
    }
    h.push_str(
        "\n/* Fletcher-16, the checksum of CHECKSUMS. */\n\
         static inline unsigned short ni_mlink_checksum(const unsigned char *p, unsigned long n)\n{\n    \
         unsigned long a = 0, b = 0;\n    \
         while (n) {\n        \
         unsigned long k = n < 4096 ? n : 4096;\n        \
         n -= k;\n        \
         while (k--) { a += *p++; b += a; }\n        \
         a %= 255; b %= 255;\n    }\n    \
         return (unsigned short)(b << 8 | a);\n}\n\
         \n#endif /* NI_MLINK_H */\n",
    );
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_c_header_is_generated_from_these_definitions() {
        crate::check_c_header("ni_mlink.h", &c_header());
    }

    #[test]
    fn fletcher16_reference_values() {
        // The classic test vectors.
        assert_eq!(checksum(b"abcde"), 0xC8F0);
        assert_eq!(checksum(b"abcdef"), 0x2057);
        assert_eq!(checksum(b"abcdefgh"), 0x0627);
        // Long input: the blockwise reduction equals the per-byte one.
        let v: Vec<u8> = (0..20000u32).map(|i| (i * 7 + 3) as u8).collect();
        let (mut a, mut b) = (0u32, 0u32);
        for &x in &v {
            a = (a + x as u32) % 255;
            b = (b + a) % 255;
        }
        assert_eq!(checksum(&v), ((b << 8) | a) as u16);
    }
}
