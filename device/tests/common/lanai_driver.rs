//! A Lanai X program's small steps, played by the host over BAR0 (the specials page and
//! SRAM), shared by `lanai.rs` and `lanai_hostile.rs`. Everything big-endian, as the Lanai.

use vfio_user::Client;

use super::{poll_until, special_read, special_write};
use ni_abi::lanai::{self, crc_config as cc, port_reg, rpl_config as rc, spd};
use ni_abi::pci;

/// App. C's channel: 64 KiB buffers of 64 B blocks, 8 KiB packets at most, 512 B STOP size,
/// buffers dropped when missing (an X port), port enabled.
pub const RPL_64K: u32 = rc::PORT_ENABLE
    | rc::ENABLE_BUFFER_DROP
    | (4 << rc::MAX_PACKET_SHIFT)
    | (3 << rc::BLOCK_SIZE_SHIFT)
    | 7;
/// Bytes a 64 KiB / 64 B buffer takes with its RPL (1024 RPDs).
pub const BUF_64K_FOOTPRINT: u32 = (64 << 10) + (64 << 10) / 64 * 8;
/// Where tests put their receive buffers and send data, clear of the fast path's pages.
pub const RX_AREA: u32 = 0x10_0000;
pub const TX_AREA: u32 = 0x40_0000;
/// Myrinet's channel CRCs: CRC-8 and CRC-32 in order 00 (§13.2, App. C's 0x28).
pub const MYRI_CRCS: u16 = cc::ENABLE_CRC8 | cc::ENABLE_CRC32;
/// GigE: CRC-32, order 11.
pub const GE_CRCS: u16 = cc::ENABLE_CRC32 | (3 << cc::CRC32_BIT_ORDER_SHIFT);
/// InfiniBand: ICRC (CRC-32 with the IB rule, order 11) and VCRC.
pub const IB_CRCS: u16 =
    cc::ENABLE_CRC16 | cc::ENABLE_CRC32 | (3 << cc::CRC32_BIT_ORDER_SHIFT) | cc::CRC32_INFINIBAND;

pub fn port_read(c: &mut Client, reg: u8) -> u16 {
    special_write(
        c,
        lanai::PORT_ADDR,
        2,
        (port_reg::PORT_READ | reg as u16) as u64,
    );
    special_read(c, lanai::PORT_DATA, 2) as u16
}

pub fn port_write(c: &mut Client, reg: u8, v: u16) {
    special_write(c, lanai::PORT_ADDR, 2, reg as u64);
    special_write(c, lanai::PORT_DATA, 2, v as u64);
}

/// Trapped SRAM accesses go in pieces a vfio-user message carries.
const PIECE: usize = 32 << 10;

pub fn sram_write(c: &mut Client, addr: u32, data: &[u8]) {
    for (k, piece) in data.chunks(PIECE).enumerate() {
        c.region_write(pci::BAR0_REGION, (addr as usize + k * PIECE) as u64, piece)
            .unwrap();
    }
}

pub fn sram_read(c: &mut Client, addr: u32, len: usize) -> Vec<u8> {
    let mut b = vec![0u8; len];
    for (k, piece) in b.chunks_mut(PIECE).enumerate() {
        c.region_read(pci::BAR0_REGION, (addr as usize + k * PIECE) as u64, piece)
            .unwrap();
    }
    b
}

pub fn sram_read32(c: &mut Client, addr: u32) -> u32 {
    u32::from_be_bytes(sram_read(c, addr, 4).try_into().unwrap())
}

pub fn isr(c: &mut Client) -> u32 {
    special_read(c, lanai::ISR, 4) as u32
}

pub fn aisr(c: &mut Client) -> u32 {
    special_read(c, lanai::AISR, 4) as u32
}

/// Port 0 in `mode` (a MODE register value) with these CRCs on both sides, and its regular
/// channel configured (App. C `initialize_channels`).
pub fn port_up(c: &mut Client, mode: u16, crcs: u16, rpl: u32) {
    port_write(c, port_reg::MODE, mode);
    port_write(c, port_reg::SEND_CONFIG, crcs);
    port_write(c, port_reg::RECV_CONFIG, crcs);
    special_write(c, lanai::P0_RPL_CONFIG, 4, rpl as u64);
}

/// Issue a receive buffer to port 0's regular (or alternate) channel.
pub fn issue(c: &mut Client, alt: bool, addr: u32) {
    let r = if alt { lanai::P0_A_RB } else { lanai::P0_RB };
    special_write(c, r, 4, addr as u64);
}

/// Write one SPD (pointer word, then length/flags word) to port 0's send FIFO.
pub fn spd(c: &mut Client, ptr: u32, flags_len: u32) {
    special_write(c, lanai::P0_SEND, 4, ptr as u64);
    special_write(c, lanai::P0_SEND, 4, flags_len as u64);
}

/// Send a Myrinet packet to `rank`: a one-byte route SPD then `payload` (staged in SRAM at
/// `at`, route byte at `at - 8`).
pub fn send_myrinet(c: &mut Client, rank: u8, at: u32, payload: &[u8]) {
    sram_write(c, at - 8, &[lanai::route::ROUTE_BYTE | rank]);
    sram_write(c, at, payload);
    spd(c, at - 8, spd::DESC_ROUTE | 1);
    spd(c, at, spd::DESC_LAST | payload.len() as u32);
}

/// Send a packet of one segment (Ethernet, InfiniBand: the address is in the data).
pub fn send_plain(c: &mut Client, at: u32, data: &[u8], flags: u32) {
    sram_write(c, at, data);
    spd(c, at, spd::DESC_LAST | flags | data.len() as u32);
}

/// An Ethernet frame to `rank` (our MAC scheme, `ni_abi::lanai::route`) of `len` bytes.
pub fn ether_frame(rank: u16, ethertype: [u8; 2], len: usize) -> Vec<u8> {
    let mut f = lanai::route::MAC_PREFIX.to_vec();
    f.extend_from_slice(&rank.to_be_bytes());
    f.extend_from_slice(&[0x02, 0x4E, 0x49, 0x00, 0xFF, 0xFF]);
    f.extend_from_slice(&ethertype);
    while f.len() < len {
        f.push(f.len() as u8);
    }
    f
}

/// Wait for `count` packets counted in port 0's regular RECV_COUNT.
pub fn wait_received(c: &mut Client, count: u64) {
    poll_until(&format!("{count} packet(s) in P0_RECV_COUNT"), || {
        special_read(c, lanai::P0_RECV_COUNT, 2) >= count
    });
}

pub fn wait_sent(c: &mut Client, count: u64) {
    poll_until(&format!("{count} packet(s) in P0_SEND_COUNT"), || {
        special_read(c, lanai::P0_SEND_COUNT, 1) >= count
    });
}

/// RPD `k` of a 64 KiB / 64 B buffer at `buf`: (DESC_POINTER, length word).
pub fn rpd(c: &mut Client, buf: u32, k: u32) -> (u32, u32) {
    let at = buf + (64 << 10) + 8 * k;
    (sram_read32(c, at), sram_read32(c, at + 4))
}
