//! The Lanai X engines through a raw vfio-user client and BAR0 only (issue 12): the packet
//! interface between two NIs' ports (§9, §10, §14), CRCs and invalidation (§9.6, §13.2),
//! flow control and drops (§9.3, §9.4), event dispatch (§15, App. C), the COPY and CRC-32
//! engines (§8), AISR events (§14) and the config-space Read Mask (§11). The host plays the
//! Lanai program, as a driver author with only the Lanai X document would.

mod common;

use common::lanai_driver::*;
use common::*;
use ni_abi::lanai::{
    self, aisr as ab, config40, crc_config as cc, dispatch as dc, isr, port_reg, rpd as rd,
    rpl_config as rc, spd as sd,
};

fn zeroes(word: u32) -> u32 {
    (word >> rd::DESC_ZEROES_SHIFT) & 7
}

fn payload(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(7) ^ seed).collect()
}

/// §9, §10, §14: one Myrinet packet from NI 0's port 0 to NI 1's, every register on both
/// sides checked before and after, and both consumed again.
#[test]
fn a_packet_crosses_with_every_counter_and_status_bit() {
    let d = Daemon::start(2);
    let (mut a, mut b) = (d.client(0), d.client(1));
    for c in [&mut a, &mut b] {
        enable(c);
        port_up(c, port_reg::MODE_M, MYRI_CRCS, RPL_64K);
    }
    // Receiver: no buffer yet (§14 NO_BUFFER, NO_BACKUP), then current and backup.
    assert_ne!(aisr(&mut b) & ab::NO_BUFFER, 0);
    assert_ne!(isr(&mut b) & isr::P0_NO_BACKUP, 0);
    issue(&mut b, false, RX_AREA);
    assert_eq!(aisr(&mut b) & ab::NO_BUFFER, 0);
    assert_ne!(
        isr(&mut b) & isr::P0_NO_BACKUP,
        0,
        "one buffer: no backup yet"
    );
    issue(&mut b, false, RX_AREA + BUF_64K_FOOTPRINT);
    assert_eq!(isr(&mut b) & isr::P0_NO_BACKUP, 0);

    // Sender: empty FIFO (§10.4): 16 free words, SEND_READY with FREE_LIMIT 2.
    special_write(&mut a, lanai::P0_SEND_FREE_LIMIT, 1, 2);
    assert_eq!(special_read(&mut a, lanai::P0_SEND_FREE_COUNT, 1), 16);
    assert_ne!(isr(&mut a) & isr::P0_SEND_READY, 0);
    assert_eq!(isr(&mut a) & isr::P0_PACKET_SENT, 0);
    let data = payload(64, 0x5A);
    // Nothing leaves before the DESC_LAST SPD (§10): a route SPD alone stays queued.
    sram_write(&mut a, TX_AREA - 8, &[lanai::route::ROUTE_BYTE | 1]);
    sram_write(&mut a, TX_AREA, &data);
    spd(&mut a, TX_AREA - 8, sd::DESC_ROUTE | 1);
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert_eq!(special_read(&mut a, lanai::P0_SEND_FREE_COUNT, 1), 14);
    assert_eq!(special_read(&mut b, lanai::P0_RECV_COUNT, 2), 0);
    spd(&mut a, TX_AREA, sd::DESC_LAST | 64);
    wait_sent(&mut a, 1);
    assert_eq!(special_read(&mut a, lanai::P0_SEND_FREE_COUNT, 1), 16);
    assert_ne!(isr(&mut a) & isr::P0_PACKET_SENT, 0);

    wait_received(&mut b, 1);
    let i = isr(&mut b);
    assert_ne!(i & isr::P0_PACKET_RCVD, 0);
    assert_eq!(i & isr::P0_PACKET_HEAD, 0, "packets arrive whole");
    assert_eq!(i & isr::P0_A_PACKET_RCVD, 0);
    // RPL_SNAPSHOT = {RPL_INDEX, RECV_COUNT} (§9.7).
    assert_eq!(special_read(&mut b, lanai::P0_RPL_SNAPSHOT, 4), 0x0001_0001);
    let (ptr, word) = rpd(&mut b, RX_AREA, 0);
    assert_eq!(ptr, RX_AREA, "the first packet starts the buffer");
    assert_eq!(word & rd::DESC_LENGTH_MASK, 64 + 5, "data, CRC-32, CRC-8");
    assert_eq!(zeroes(word), 5, "both CRCs checked: XOR-ed to zeros (§9.6)");
    assert_eq!(
        word & (rd::DESC_INVALID | rd::DESC_LINK | rd::DESC_MARKED_BAD | rd::DESC_LAST),
        0
    );
    let got = sram_read(&mut b, ptr, 69);
    assert_eq!(
        &got[..64],
        &data[..],
        "the route byte was consumed by the crossbar"
    );
    assert_eq!(&got[64..], &[0; 5]);
    // RB read-back (§9.7): DESC_COMPLETE mirrors PACKET_RCVD; the pointer is where the next
    // packet starts, the next block boundary (69 bytes take two 64-byte blocks).
    assert_eq!(
        special_read(&mut b, lanai::P0_RB, 4) as u32,
        rd::DESC_COMPLETE | (RX_AREA + 128)
    );

    // Consume (D* registers: any write decrements by one).
    special_write(&mut b, lanai::P0_RECV_COUNT, 2, 0x1234);
    assert_eq!(special_read(&mut b, lanai::P0_RECV_COUNT, 2), 0);
    assert_eq!(isr(&mut b) & isr::P0_PACKET_RCVD, 0);
    assert_eq!(
        special_read(&mut b, lanai::P0_RPL_INDEX, 2),
        1,
        "RPL_INDEX stays"
    );
    special_write(&mut a, lanai::P0_SEND_COUNT, 1, 0);
    assert_eq!(isr(&mut a) & isr::P0_PACKET_SENT, 0);
    assert_eq!(d.counter(0, "lanai_packets_sent"), 1);
    assert_eq!(d.counter(1, "lanai_packets_received"), 1);
    assert_eq!(d.counter(0, "lanai_route_dropped"), 0);

    // A second packet starts on the next block boundary, its RPD next in the RPL.
    send_myrinet(&mut a, 1, TX_AREA + 0x1000, &payload(16, 1));
    wait_received(&mut b, 1);
    assert_eq!(rpd(&mut b, RX_AREA, 1), (RX_AREA + 128, (5 << 25) | 21));
}

/// §9 "Receive channel": when less than MAX_PACKET is left the packet's RPD has DESC_LAST
/// and the receiver moves to the backup buffer, RPL_INDEX back to 0; with no backup left the
/// channel has no buffer.
#[test]
fn a_full_buffer_hands_over_to_the_backup() {
    let d = Daemon::start(2);
    let (mut a, mut b) = (d.client(0), d.client(1));
    // 4 KiB buffers (code 3) of 512 B blocks (code 6), 2 KiB packets (code 2): after one
    // 2 KiB packet (4 blocks) 2 KiB are left, not less; after a second, none.
    let cfg = rc::PORT_ENABLE | rc::ENABLE_BUFFER_DROP | (2 << 8) | (6 << 4) | 3;
    for c in [&mut a, &mut b] {
        enable(c);
        port_up(c, port_reg::MODE_M, MYRI_CRCS, cfg);
    }
    let (buf0, buf1) = (RX_AREA, RX_AREA + 0x2000);
    issue(&mut b, false, buf0);
    issue(&mut b, false, buf1);
    let rpl = |buf: u32, k: u32| buf + 4096 + 8 * k;
    for n in 0..3u32 {
        send_myrinet(&mut a, 1, TX_AREA + n * 0x1000, &payload(2000, n as u8));
    }
    wait_received(&mut b, 3);
    let w0 = sram_read32(&mut b, rpl(buf0, 0) + 4);
    let w1 = sram_read32(&mut b, rpl(buf0, 1) + 4);
    assert_eq!(w0 & rd::DESC_LAST, 0);
    assert_eq!(
        w1 & rd::DESC_LAST,
        rd::DESC_LAST,
        "the buffer's last packet"
    );
    assert_eq!(sram_read32(&mut b, rpl(buf0, 1)), buf0 + 2048);
    assert_eq!(
        sram_read32(&mut b, rpl(buf1, 0)),
        buf1,
        "third packet: the backup"
    );
    assert_eq!(special_read(&mut b, lanai::P0_RPL_INDEX, 2), 1);
    assert_eq!(
        special_read(&mut b, lanai::P0_RECV_COUNT, 2),
        3,
        "counts across RPLs"
    );
    assert_ne!(isr(&mut b) & isr::P0_NO_BACKUP, 0);
    // §9.7 STOP_SIZE (512 B): 2 KiB left, no backup: no STOP yet.
    assert_eq!(aisr(&mut b) & ab::MYRI_STOP, 0);
}

/// §9.3, §9.7 STOP_SIZE and AISR MYRI_STOP: a Myrinet port without a buffer sends STOP, so
/// the packet waits in the sender (nothing dropped) until a buffer is issued (GO).
#[test]
fn myrinet_stop_holds_packets_until_a_buffer_is_issued() {
    let d = Daemon::start(2);
    let (mut a, mut b) = (d.client(0), d.client(1));
    for c in [&mut a, &mut b] {
        enable(c);
        port_up(c, port_reg::MODE_M, MYRI_CRCS, RPL_64K);
    }
    assert_ne!(aisr(&mut b) & ab::MYRI_STOP, 0, "no buffer: STOP");
    send_myrinet(&mut a, 1, TX_AREA, &payload(40, 3));
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert_eq!(
        special_read(&mut a, lanai::P0_SEND_COUNT, 1),
        0,
        "held by STOP"
    );
    assert_eq!(d.counter(1, "lanai_rx_dropped"), 0);
    issue(&mut b, false, RX_AREA);
    assert_eq!(aisr(&mut b) & ab::MYRI_STOP, 0, "GO");
    wait_received(&mut b, 1);
    wait_sent(&mut a, 1);
    assert_eq!(zeroes(rpd(&mut b, RX_AREA, 0).1), 5);
    assert_eq!(d.counter(0, "lanai_blocked_dropped"), 0);
}

/// §9.4 "Dropping incoming packets" and §9.7 ENABLE_BUFFER_DROP / MATCH_VL15: an X port with
/// no buffer drops and counts (in Ethernet mode there is no STOP); a packet steered to an
/// alternate channel without a buffer is dropped and counted too; a packet shorter than 5
/// bytes is dropped and counted in SHORT_DROP (§13.3). The Z* registers cannot be read
/// over PCI (App. A), so the daemon's counters say it.
#[test]
fn drops_are_counted_never_silent() {
    let d = Daemon::start(2);
    let (mut a, mut b) = (d.client(0), d.client(1));
    for c in [&mut a, &mut b] {
        enable(c);
        port_up(c, port_reg::MODE_GEX, GE_CRCS, RPL_64K | rc::MATCH_VL15);
    }
    send_plain(&mut a, TX_AREA, &ether_frame(1, [0x08, 0x00], 64), 0);
    wait_sent(&mut a, 1);
    poll_until("the drop counted", || d.counter(1, "lanai_rx_dropped") == 1);
    assert_eq!(
        special_read(&mut b, lanai::P0_BUFFER_DROP, 2),
        0,
        "Z*: not over PCI"
    );
    assert_eq!(special_read(&mut b, lanai::P0_RECV_COUNT, 2), 0);

    // With a buffer the next frame arrives, its FCS checked (4 zero bytes).
    issue(&mut b, false, RX_AREA);
    send_plain(
        &mut a,
        TX_AREA + 0x1000,
        &ether_frame(1, [0x08, 0x00], 64),
        0,
    );
    wait_received(&mut b, 1);
    assert_eq!(
        zeroes(rpd(&mut b, RX_AREA, 0).1),
        4,
        "FCS checked: 4 zero bytes"
    );
    // An InfiniBand packet with VL 15 in its first byte goes to the alternate.
    for c in [&mut a, &mut b] {
        port_up(c, port_reg::MODE_IB, IB_CRCS, RPL_64K | rc::MATCH_VL15);
    }
    let mut lrh = vec![0xF0, 0x02, 0x00, 0x02];
    lrh.extend_from_slice(&payload(28, 9));
    send_plain(&mut a, TX_AREA + 0x2000, &lrh, 0);
    poll_until("the alternate-channel drop counted", || {
        d.counter(1, "lanai_rx_dropped") == 2
    });
    assert_eq!(
        special_read(&mut b, lanai::P0_RECV_COUNT, 2),
        1,
        "not in the regular channel"
    );
    // With an alternate buffer it arrives there (§14 A_PACKET_RCVD).
    issue(&mut b, true, RX_AREA + 0x20000);
    special_write(
        &mut b,
        lanai::P0_A_RPL_CONFIG,
        4,
        (RPL_64K & rc::ALTERNATE_MASK) as u64,
    );
    send_plain(&mut a, TX_AREA + 0x3000, &lrh, 0);
    poll_until("A_RECV_COUNT", || {
        special_read(&mut b, lanai::P0_A_RECV_COUNT, 2) == 1
    });
    assert_ne!(isr(&mut b) & isr::P0_A_PACKET_RCVD, 0);
    let (ptr, word) = rpd(&mut b, RX_AREA + 0x20000, 0);
    assert_eq!(ptr, RX_AREA + 0x20000);
    assert_eq!(word & rd::DESC_LENGTH_MASK, 32 + 6, "ICRC and VCRC");
    assert_eq!(zeroes(word), 6);

    // Shorter than 5 bytes: SHORT_DROP, a port register that clears when read.
    for c in [&mut a, &mut b] {
        port_up(c, port_reg::MODE_M, 0, RPL_64K);
    }
    send_myrinet(&mut a, 1, TX_AREA + 0x4008, &[1, 2, 3]);
    poll_until("SHORT_DROP", || d.counter(1, "lanai_rx_dropped") == 3);
    assert_eq!(port_read(&mut b, port_reg::SHORT_DROP), 1);
    assert_eq!(
        port_read(&mut b, port_reg::SHORT_DROP),
        0,
        "Z*: read clears"
    );
}

/// §10.2 DESC_INVALIDATE with §13.2 INVALIDATE_CRC32: the CRC-32 goes out complemented, so
/// the receiver's XOR leaves it non-zero (only the CRC-8 byte checks); INVALIDATE_MARK_BAD
/// marks the packet bad in GigE and InfiniBand (EXTEND_ERROR, EBP: §9.6 DESC_MARKED_BAD,
/// InfiniBand's IB_REC), and does nothing in Myrinet.
#[test]
fn invalidated_packets_fail_their_crc_or_arrive_marked_bad() {
    let d = Daemon::start(2);
    let (mut a, mut b) = (d.client(0), d.client(1));
    for c in [&mut a, &mut b] {
        enable(c);
        port_up(c, port_reg::MODE_M, MYRI_CRCS, RPL_64K);
    }
    issue(&mut b, false, RX_AREA);
    port_write(
        &mut a,
        port_reg::SEND_CONFIG,
        MYRI_CRCS | cc::INVALIDATE_CRC32 | cc::INVALIDATE_MARK_BAD,
    );
    let data = payload(32, 4);
    sram_write(&mut a, TX_AREA - 8, &[lanai::route::ROUTE_BYTE | 1]);
    sram_write(&mut a, TX_AREA, &data);
    spd(&mut a, TX_AREA - 8, sd::DESC_ROUTE | 1);
    spd(&mut a, TX_AREA, sd::DESC_LAST | sd::DESC_INVALIDATE | 32);
    wait_received(&mut b, 1);
    let (_, w) = rpd(&mut b, RX_AREA, 0);
    assert_eq!(
        zeroes(w),
        1,
        "the CRC-8 checks, the complemented CRC-32 does not"
    );
    assert_eq!(w & rd::DESC_MARKED_BAD, 0, "never in Myrinet mode");
    // Without DESC_INVALIDATE the same configuration sends a good packet.
    send_myrinet(&mut a, 1, TX_AREA + 0x100, &data);
    wait_received(&mut b, 2);
    assert_eq!(zeroes(rpd(&mut b, RX_AREA, 1).1), 5);

    // InfiniBand: marked bad (EBP), IB_REC counts it.
    for c in [&mut a, &mut b] {
        port_up(c, port_reg::MODE_IB, IB_CRCS, RPL_64K);
    }
    port_write(
        &mut a,
        port_reg::SEND_CONFIG,
        IB_CRCS | cc::INVALIDATE_MARK_BAD,
    );
    let mut lrh = vec![0x00, 0x02, 0x00, 0x02];
    lrh.extend_from_slice(&payload(28, 5));
    send_plain(&mut a, TX_AREA + 0x200, &lrh, sd::DESC_INVALIDATE);
    wait_received(&mut b, 3);
    let (_, w) = rpd(&mut b, RX_AREA, 2);
    assert_ne!(w & rd::DESC_MARKED_BAD, 0);
    assert_eq!(zeroes(w), 6, "only marked: the CRCs are good");
    assert_eq!(port_read(&mut b, port_reg::IB_REC), 1);
}

/// §8 CRC32 engine: seeded with all ones, fed "123456789" through CRC32_BYTE, _HALF and
/// _WORD (most significant byte first) and complemented, it gives the standard check values
/// in orders 00 (Myrinet) and 11 (GigE/IB), and the mixed orders agree with a bitwise
/// reference; COPY_TO_CRC32 feeds the same stream from SRAM.
#[test]
fn crc32_check_values_in_every_order_and_width() {
    let d = Daemon::start(1);
    let mut c = d.client(0);
    enable(&mut c);
    let feed = |c: &mut vfio_user::Client, order: u64, how: u8| {
        special_write(c, lanai::CRC32_CONFIG, 1, order << 1);
        special_write(c, lanai::CRC32, 4, 0xFFFF_FFFF);
        let s = b"123456789";
        match how {
            0 => {
                for &x in s {
                    special_write(c, lanai::CRC32_BYTE, 1, x as u64);
                }
            }
            1 => {
                special_write(c, lanai::CRC32_WORD, 4, u32::from_be_bytes(*b"1234") as u64);
                special_write(c, lanai::CRC32_HALF, 2, u16::from_be_bytes(*b"56") as u64);
                special_write(c, lanai::CRC32_HALF, 2, u16::from_be_bytes(*b"78") as u64);
                special_write(c, lanai::CRC32_BYTE, 1, b'9' as u64);
            }
            _ => {
                sram_write(c, 0x10_0003, s);
                special_write(c, lanai::COPY, 4, 0x10_0003);
                special_write(c, lanai::COPY, 4, (lanai::copy::COPY_TO_CRC32 | 9) as u64);
                assert_eq!(isr(c) & isr::COPY_BUSY, 0, "no third write: done");
            }
        }
        !(special_read(c, lanai::CRC32, 4) as u32)
    };
    for how in 0..3 {
        assert_eq!(feed(&mut c, 0, how), 0xFC89_1918, "order 00, way {how}");
        assert_eq!(feed(&mut c, 3, how), 0xCBF4_3926, "order 11, way {how}");
        // Bit 1 reflects the input, bit 2 the state (our reading, device/abi/lanai.md).
        assert_eq!(feed(&mut c, 1, how), reference(b"123456789", true, false));
        assert_eq!(feed(&mut c, 2, how), reference(b"123456789", false, true));
    }
    assert_eq!(d.counter(0, "lanai_copies"), 4);
}

/// A bitwise CRC-32 (poly 0x04C11DB7, init and xorout all ones) with optional reflection of
/// the input bytes and of the result.
fn reference(data: &[u8], refin: bool, refout: bool) -> u32 {
    let mut crc = u32::MAX;
    for &b in data {
        let b = if refin { b.reverse_bits() } else { b };
        crc ^= (b as u32) << 24;
        for _ in 0..8 {
            crc = if crc & 0x8000_0000 != 0 {
                (crc << 1) ^ 0x04C1_1DB7
            } else {
                crc << 1
            };
        }
    }
    let crc = if refout { crc.reverse_bits() } else { crc };
    !crc
}

/// §8 COPY: source, length, destination at every byte alignment 0..7 of each, lengths
/// 0..64 (0 is undefined: nothing moves) and one large copy; COPY_BUSY from the first write
/// to completion; COPY_ABORT cancels a copy half written.
#[test]
fn copy_at_every_alignment() {
    let d = Daemon::start(1);
    let mut c = d.client(0);
    enable(&mut c);
    let src = 0x10_0000u32;
    let dst = 0x20_0000u32;
    let pattern = payload(128, 0x33);
    sram_write(&mut c, src, &pattern);
    for s in 0..8u32 {
        for t in 0..8u32 {
            for len in 0..=64u32 {
                sram_write(&mut c, dst, &[0; 80]);
                special_write(&mut c, lanai::COPY, 4, (src + s) as u64);
                assert_ne!(isr(&mut c) & isr::COPY_BUSY, 0);
                special_write(&mut c, lanai::COPY, 4, len as u64);
                special_write(&mut c, lanai::COPY, 4, (dst + t) as u64);
                let got = sram_read(&mut c, dst, 80);
                let mut want = vec![0u8; 80];
                want[t as usize..(t + len) as usize]
                    .copy_from_slice(&pattern[s as usize..(s + len) as usize]);
                assert_eq!(got, want, "src +{s}, dst +{t}, {len} bytes");
            }
        }
    }
    assert_eq!(isr(&mut c) & isr::COPY_BUSY, 0);
    // Large: 1 MiB + 3 at odd alignment.
    let big = payload((1 << 20) + 3, 0x77);
    sram_write(&mut c, 0x30_0001, &big);
    special_write(&mut c, lanai::COPY, 4, 0x30_0001);
    special_write(&mut c, lanai::COPY, 4, big.len() as u64);
    special_write(&mut c, lanai::COPY, 4, 0x50_0006);
    assert_eq!(sram_read(&mut c, 0x50_0006, big.len()), big);
    // COPY_ABORT after two words: the next write starts a new copy.
    special_write(&mut c, lanai::COPY, 4, src as u64);
    special_write(&mut c, lanai::COPY, 4, 8);
    special_write(&mut c, lanai::COPY_ABORT, 1, 1);
    assert_eq!(isr(&mut c) & isr::COPY_BUSY, 0);
    assert_eq!(d.counter(0, "lanai_copy_faults"), 0);
}

/// §15 with App. C's `initialize_dispatch` table: fair dispatch over both ports' NO_BACKUP,
/// PACKET_RCVD, PACKET_SENT and SEND_READY with the software STATE bits, OUT of the lowest
/// matching block, 256 when none matches, and an all-zero block matching everything.
#[test]
fn app_c_dispatch_tables() {
    let d = Daemon::start(2);
    let mut c = d.client(0);
    enable(&mut c);
    assert_eq!(
        special_read(&mut c, lanai::DISPATCH_INDEX, 4),
        0,
        "all-zero block 0 matches"
    );
    let block = |c: &mut vfio_user::Client, i: u32, on: u32, state_off: u32, flags: u32| {
        special_write(c, lanai::DISPATCH_ISR_ON, 4, on as u64);
        special_write(c, lanai::DISPATCH_ISR_OFF, 4, 0);
        special_write(c, lanai::DISPATCH_STATE_ON, 4, 0);
        special_write(c, lanai::DISPATCH_STATE_OFF, 4, state_off as u64);
        special_write(c, lanai::DISPATCH_CONFIG, 4, (i | flags) as u64);
    };
    let p1 = |b: u32| b << isr::P1_SHIFT;
    // App. C: pairs of (both ports & !state bit) / port 1 / port 0, state bits 1, 2, 4, 8.
    let events = [
        isr::P0_NO_BACKUP,
        isr::P0_PACKET_RCVD,
        isr::P0_PACKET_SENT,
        isr::P0_SEND_READY,
    ];
    for (k, e) in events.into_iter().enumerate() {
        let k = k as u32;
        block(&mut c, 3 * k, e | p1(e), 1 << k, 0);
        block(&mut c, 3 * k + 1, p1(e), 0, 0);
        block(&mut c, 3 * k + 2, e, 0, 0);
    }
    // Block 12 catches what is left (App. C's dispatch_null): something always matches.
    block(&mut c, 12, 0, 0, 0);
    let index = |c: &mut vfio_user::Client, state: u32| {
        special_write(c, lanai::DISPATCH_STATE, 4, state as u64);
        special_read(c, lanai::DISPATCH_INDEX, 4) as u32
    };
    // Fresh: both ports lack a backup.
    assert_eq!(
        index(&mut c, 0),
        0,
        "both NO_BACKUP, state bit 0 clear: the pair"
    );
    assert_eq!(index(&mut c, 1), 4, "state bit 0 set: port 1 first");
    // Give both ports a backup: the SEND_READY pair (blocks 9..11) is next.
    for p in [0, lanai::PORT1] {
        special_write(&mut c, lanai::P0_RB + p, 4, RX_AREA as u64);
        special_write(
            &mut c,
            lanai::P0_RB + p,
            4,
            (RX_AREA + BUF_64K_FOOTPRINT) as u64,
        );
    }
    assert_eq!(isr(&mut c) & (isr::P0_NO_BACKUP | p1(isr::P0_NO_BACKUP)), 0);
    assert_eq!(index(&mut c, 0), 36, "SEND_READY on both ports");
    assert_eq!(index(&mut c, 8), 40, "state bit 3: port 1's");
    // Fill port 0's FIFO below FREE_LIMIT + 2: only port 1 is ready.
    special_write(&mut c, lanai::P0_SEND_FREE_LIMIT, 1, 14);
    spd(&mut c, TX_AREA, 8);
    assert_eq!(index(&mut c, 0), 40);
    special_write(&mut c, lanai::P0_SEND_FREE_LIMIT + lanai::PORT1, 1, 14);
    special_write(&mut c, lanai::P0_SEND + lanai::PORT1, 4, TX_AREA as u64);
    special_write(&mut c, lanai::P0_SEND + lanai::PORT1, 4, 8);
    assert_eq!(index(&mut c, 0), 48, "nothing matches but the catch-all");
    // Replace the catch-all by a block that never matches (reserved ISR bit 30), and
    // every block after it: 256.
    for i in 12..64 {
        block(&mut c, i, 1 << 30, 0, 0);
    }
    assert_eq!(index(&mut c, 0), 256);
    // INVERT turns the never into always; OR on the next block consumes it.
    block(&mut c, 12, 1 << 30, 0, dc::INVERT);
    assert_eq!(index(&mut c, 0), 48);
    block(&mut c, 13, 1 << 30, 0, dc::OR);
    assert_eq!(index(&mut c, 0), 52, "block 12 feeds 13, which fires");
}

/// §14: P0_EVENT and P1_EVENT are ORs over each port's AISR bits masked by AISR_ON (the
/// bit is set) and AISR_OFF (the bit is clear); SEND_STOPPED follows SEND_CONTROL; in
/// half-duplex GigE a sent packet raises GEX_NO_COLL_INT, which writing 1 clears.
#[test]
fn aisr_masks_make_the_port_events() {
    let d = Daemon::start(2);
    let (mut a, mut b) = (d.client(0), d.client(1));
    enable(&mut a);
    enable(&mut b);
    let ev0 = |c: &mut vfio_user::Client| isr(c) & isr::P0_EVENT != 0;
    let ev1 = |c: &mut vfio_user::Client| isr(c) & (isr::P0_EVENT << isr::P1_SHIFT) != 0;
    assert!(!ev0(&mut a) && !ev1(&mut a), "masks 0: no event");
    special_write(&mut a, lanai::AISR_ON, 4, ab::NO_BUFFER as u64);
    assert!(ev0(&mut a), "NO_BUFFER is 1");
    assert!(!ev1(&mut a));
    issue(&mut a, false, RX_AREA);
    assert!(!ev0(&mut a));
    special_write(&mut a, lanai::AISR_ON, 4, 0);
    special_write(&mut a, lanai::AISR_OFF, 4, ab::NO_BUFFER as u64);
    assert!(ev0(&mut a), "NO_BUFFER is 0");
    special_write(&mut a, lanai::AISR_OFF, 4, 0);
    special_write(
        &mut a,
        lanai::AISR_ON,
        4,
        (ab::NO_BUFFER << ab::P1_SHIFT) as u64,
    );
    assert!(ev1(&mut a), "port 1 has no buffer");
    assert!(!ev0(&mut a));

    // SEND_STOPPED.
    special_write(&mut a, lanai::AISR_ON, 4, ab::SEND_STOPPED as u64);
    assert!(!ev0(&mut a));
    special_write(
        &mut a,
        lanai::P0_SEND_CONTROL,
        1,
        lanai::send_control::SEND_OFF as u64,
    );
    assert_ne!(aisr(&mut a) & ab::SEND_STOPPED, 0);
    assert!(ev0(&mut a));
    special_write(&mut a, lanai::P0_SEND_CONTROL, 1, 0);
    assert!(!ev0(&mut a));

    // Half-duplex GigE: after each packet one of the collision bits (§14).
    for c in [&mut a, &mut b] {
        port_up(c, port_reg::MODE_GEX, GE_CRCS, RPL_64K);
    }
    issue(&mut b, false, RX_AREA);
    port_write(&mut a, port_reg::GE_CONFIG, port_reg::GE_HALF_DUPLEX_MODE);
    special_write(&mut a, lanai::AISR_ON, 4, ab::GEX_NO_COLL_INT as u64);
    send_plain(&mut a, TX_AREA, &ether_frame(1, [0x08, 0x00], 60), 0);
    wait_sent(&mut a, 1);
    assert_ne!(aisr(&mut a) & ab::GEX_NO_COLL_INT, 0);
    assert!(ev0(&mut a));
    special_write(&mut a, lanai::AISR, 4, ab::GEX_NO_COLL_INT as u64);
    assert_eq!(aisr(&mut a) & ab::GEX_NO_COLL_INT, 0, "W1C");
    assert!(!ev0(&mut a));
}

/// §10.4 PAUSE_COUNT and §9.7 ENABLE_PAUSE_TIMER: a valid PAUSE frame counts (and is still
/// delivered), zeroes IT0 (so TIME_INT0 rises), and under SEND_PAUSE stops the sender until
/// software decrements the count.
#[test]
fn pause_frames_count_stop_the_sender_and_zero_the_timer() {
    let d = Daemon::start(2);
    let (mut a, mut b) = (d.client(0), d.client(1));
    for c in [&mut a, &mut b] {
        enable(c);
        port_up(
            c,
            port_reg::MODE_GEX,
            GE_CRCS,
            RPL_64K | rc::ENABLE_PAUSE_TIMER,
        );
        issue(c, false, RX_AREA);
    }
    special_write(&mut b, lanai::IT0, 4, 0x7FFF_FFFF);
    assert_eq!(isr(&mut b) & isr::TIME_INT0, 0);
    let mut pause = ether_frame(1, [0x88, 0x08], 60);
    pause[14] = 0x00;
    pause[15] = 0x01;
    send_plain(&mut a, TX_AREA, &pause, 0);
    wait_received(&mut b, 1);
    assert_eq!(special_read(&mut b, lanai::P0_PAUSE_COUNT, 1), 1);
    assert_ne!(aisr(&mut b) & ab::PAUSE_RCVD, 0);
    poll_until("IT0 zeroed by the PAUSE", || {
        isr(&mut b) & isr::TIME_INT0 != 0
    });
    // SEND_PAUSE with PAUSE_COUNT != 0: B's packets wait.
    special_write(
        &mut b,
        lanai::P0_SEND_CONTROL,
        1,
        lanai::send_control::SEND_PAUSE as u64,
    );
    assert_ne!(aisr(&mut b) & ab::SEND_STOPPED, 0);
    send_plain(&mut b, TX_AREA, &ether_frame(0, [0x08, 0x00], 60), 0);
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert_eq!(special_read(&mut b, lanai::P0_SEND_COUNT, 1), 0);
    special_write(&mut b, lanai::P0_PAUSE_COUNT, 1, 0);
    wait_sent(&mut b, 1);
    wait_received(&mut a, 1);
    assert_eq!(aisr(&mut b) & (ab::SEND_STOPPED | ab::PAUSE_RCVD), 0);
}

/// §11 Read Mask: config reads return the hardware bits OR the Read Mask in SRAM at
/// DMA_CONFIG.PCI_OFFSET, unless PCI_MASK_DISABLE is ON.
#[test]
fn config_reads_or_in_the_read_mask() {
    let d = Daemon::start(1);
    let mut c = d.client(0);
    enable(&mut c);
    let pci_offset =
        special_read(&mut c, lanai::DMA_CONFIG, 4) as u32 & lanai::dma_config::PCI_OFFSET_MASK;
    assert_eq!(
        pci_offset,
        lanai::READ_MASK_DEFAULT,
        "set up by the daemon's start-up code"
    );
    let subsys = cfg_read16(&mut c, 0x2E);
    sram_write(&mut c, pci_offset + 0x2E, &[0x00, 0x80]);
    assert_eq!(cfg_read16(&mut c, 0x2E), subsys | 0x8000);
    assert_eq!(cfg_read32(&mut c, 0x2C) >> 16, (subsys | 0x8000) as u32);
    // Through BAR0's config window too.
    let mut b = [0u8; 2];
    c.region_read(
        ni_abi::pci::BAR0_REGION,
        lanai::CONFIG_WINDOW + 0x2E,
        &mut b,
    )
    .unwrap();
    assert_eq!(u16::from_le_bytes(b), subsys | 0x8000);
    cfg_write32(&mut c, 0x40, config40::PCI_MASK_DISABLE_ON);
    assert_eq!(cfg_read16(&mut c, 0x2E), subsys, "mask disabled");
    cfg_write32(&mut c, 0x40, config40::PCI_MASK_DISABLE_OFF);
    // Moved elsewhere, the mask follows PCI_OFFSET.
    special_write(&mut c, lanai::DMA_CONFIG, 4, 0x10_0000);
    assert_eq!(cfg_read16(&mut c, 0x2E), subsys);
    sram_write(&mut c, 0x10_0000 + 0x2E, &[0x01, 0x00]);
    assert_eq!(cfg_read16(&mut c, 0x2E), subsys | 1);
}

/// Our crossbar's Ethernet rule (device/abi/lanai.md): a group address goes to every other
/// member that can take it; one whose port is not enabled misses it, counted at the sender.
#[test]
fn ethernet_group_frames_flood_the_partition() {
    let d = Daemon::start(3);
    let (mut a, mut b, mut c) = (d.client(0), d.client(1), d.client(2));
    for x in [&mut a, &mut b] {
        enable(x);
        port_up(x, port_reg::MODE_GEX, GE_CRCS, RPL_64K);
        issue(x, false, RX_AREA);
    }
    enable(&mut c);
    port_up(&mut c, port_reg::MODE_GEX, GE_CRCS, 0); // PORT_ENABLE clear: not listening
    let mut frame = ether_frame(0, [0x08, 0x00], 60);
    frame[..6].copy_from_slice(&[0xFF; 6]);
    send_plain(&mut a, TX_AREA, &frame, 0);
    wait_received(&mut b, 1);
    wait_sent(&mut a, 1);
    assert_eq!(
        special_read(&mut a, lanai::P0_RECV_COUNT, 2),
        0,
        "not back to the sender"
    );
    assert_eq!(zeroes(rpd(&mut b, RX_AREA, 0).1), 4);
    assert_eq!(d.counter(0, "lanai_route_dropped"), 1, "NI 2 missed it");
    assert_eq!(d.counter(2, "lanai_packets_received"), 0);
}
