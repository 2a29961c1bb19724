//! The METRO MLINK block as a node's processor drives it (MIT METRO §11.2: 32-bit values at
//! memory-mapped MLINK addresses): its registers, the STATUS word's fields and names, and the
//! checksums the contract defines. Shared by `mlink.rs` and `cross_host.rs`.
#![allow(dead_code)]

use ni_abi::mlink::{self, rx, status};
use ni_abi::pci;
use vfio_user::Client;

// ---- MLINK registers: 32-bit little-endian at BAR0 + PAGE ----

/// BAR0 offset of link `link`'s launch register `off` (`ml::*`).
pub fn link_reg(link: u32, off: u64) -> u64 {
    mlink::PAGE + mlink::LINK + link as u64 * mlink::LINK_STRIDE + off
}

pub fn read32(c: &mut Client, at: u64) -> u32 {
    let mut b = [0u8; 4];
    c.region_read(pci::BAR0_REGION, at, &mut b)
        .unwrap_or_else(|e| panic!("32-bit BAR0 read at {at:#x}: {e:?}"));
    u32::from_le_bytes(b)
}

pub fn write32(c: &mut Client, at: u64, v: u32) {
    c.region_write(pci::BAR0_REGION, at, &v.to_le_bytes())
        .unwrap_or_else(|e| panic!("32-bit BAR0 write at {at:#x}: {e:?}"));
}

pub fn mlink_read_reg(c: &mut Client, link: u32, off: u64) -> u32 {
    read32(c, link_reg(link, off))
}

pub fn mlink_write_reg(c: &mut Client, link: u32, off: u64, v: u32) {
    write32(c, link_reg(link, off), v)
}

/// The receive side's registers (`rx::*`), shared by the node's links.
pub fn rx_read(c: &mut Client, off: u64) -> u32 {
    read32(c, mlink::PAGE + off)
}

pub fn rx_write(c: &mut Client, off: u64, v: u32) {
    write32(c, mlink::PAGE + off, v)
}

// ---- STATUS ----

pub fn state(s: u32) -> u32 {
    s & status::STATE_MASK
}

pub fn why(s: u32) -> u32 {
    (s >> status::REASON_SHIFT) & 0xF
}

pub fn byte0(s: u32) -> u32 {
    (s >> status::BYTES_SHIFT) & 0xFF
}

pub fn byte1(s: u32) -> u32 {
    s >> 24
}

pub const STATES: [&str; 6] = ["IDLE", "BUSY", "ACK", "NACK", "ABORTED", "REFUSED"];
pub const REASONS: [&str; 11] = [
    "NONE",
    "HEADER_CHECKSUM",
    "DATA_CHECKSUM",
    "ADDRESS",
    "LENGTH",
    "QUEUE_FULL",
    "NOT_PERMITTED",
    "UNREACHABLE",
    "TIMEOUT",
    "BAD_COMMAND",
    "NOTHING_TO_ABORT",
];

pub fn name(list: &[&str], v: u32) -> String {
    list.get(v as usize)
        .map_or_else(|| format!("#{v}"), |n| n.to_string())
}

pub fn show(s: u32) -> String {
    format!(
        "{}/{} (byte0 {:#04x}, byte1 {}; STATUS {s:#010x})",
        name(&STATES, state(s)),
        name(&REASONS, why(s)),
        byte0(s),
        name(&REASONS, byte1(s)),
    )
}

#[track_caller]
pub fn expect(s: u32, want_state: u32, want_reason: u32, what: &str) {
    assert!(
        state(s) == want_state && why(s) == want_reason,
        "{what}: expected {}/{}, got {}",
        name(&STATES, want_state),
        name(&REASONS, want_reason),
        show(s)
    );
}

/// CHECKSUMS as the contract defines it: the header checksum, and the data's in `<31:16>`.
pub fn sums(command: u32, len: u32, remote: u32, data: &[u8]) -> u32 {
    mlink::checksum(&mlink::header(command, len, remote)) as u32
        | (mlink::checksum(data) as u32) << 16
}

/// The target offers `[base, base + size)` to its peers' READs and WRITEs.
pub fn expose(c: &mut Client, base: u32, size: u32) {
    rx_write(c, rx::EXPOSE_BASE, base);
    rx_write(c, rx::EXPOSE_SIZE, size);
}
