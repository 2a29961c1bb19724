//! The Lanai X packet interface against hostile and careless drivers (issue 12, "Bad
//! input"): descriptors pointing outside SRAM, lengths that wrap, route bytes to nowhere, a
//! send FIFO overfilled, receive buffers that do not fit, a port taken down mid-stream, a
//! receiver that never issues a buffer, COPYs outside SRAM, and garbage through the whole
//! specials page. What must hold: errors and counters, never a crash nor a touch outside
//! SRAM, the other NIs' traffic unharmed, and a working NI again afterwards.
//!
//! Every test ends by moving a good Myrinet packet and checking it whole (RPD and payload),
//! and by checking that the daemon is still running.

mod common;

use std::time::{Duration, Instant};

use common::lanai_driver::*;
use common::*;
use ni_abi::lanai::{self, aisr, isr, port_reg, rpd, send_control, spd};
use vfio_user::Client;

/// Where the end-of-test packet is staged (its route byte 8 bytes below).
const GOOD_AT: u32 = TX_AREA + 0x8000;
/// Myrinet's trailer as the receiver leaves it: CRC-32 and CRC-8, XOR-checked to zero.
const CRC_BYTES: u32 = 5;
/// The RPL of a 64 KiB / 64 B buffer starts right after its 64 KiB of data.
const RPL_OFFSET: u32 = 64 << 10;

/// `len` bytes of a pattern that depends on `tag`, none of them zero (so a received packet
/// ends in exactly the 5 zero bytes of its checked CRCs).
fn payload(tag: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| tag.wrapping_add((i as u8).wrapping_mul(13)) | 1)
        .collect()
}

/// NI `i` as App. C sets one up: port 0 in Myrinet mode, CRC-8 and CRC-32 appended and
/// checked, the 64 KiB / 64 B regular channel enabled; with `buffer`, one receive buffer
/// issued at `RX_AREA`.
fn myrinet(d: &Daemon, i: u32, buffer: bool) -> Client {
    let mut c = d.client(i);
    enable(&mut c);
    port_up(&mut c, port_reg::MODE_M, MYRI_CRCS, RPL_64K);
    if buffer {
        issue(&mut c, false, RX_AREA);
    }
    c
}

/// A Myrinet packet whose one-byte route segment is `route`, whatever that is: the route at
/// `at - 8`, `data` at `at`.
fn send_routed(c: &mut Client, route: u8, at: u32, data: &[u8]) {
    sram_write(c, at - 8, &[route]);
    sram_write(c, at, data);
    spd(c, at - 8, spd::DESC_ROUTE | 1);
    spd(c, at, spd::DESC_LAST | data.len() as u32);
}

fn send_count(c: &mut Client) -> u64 {
    special_read(c, lanai::P0_SEND_COUNT, 1)
}

fn recv_count(c: &mut Client) -> u64 {
    special_read(c, lanai::P0_RECV_COUNT, 2)
}

fn free_count(c: &mut Client) -> u64 {
    special_read(c, lanai::P0_SEND_FREE_COUNT, 1)
}

/// Wait until NI `node`'s counter `name` reaches `want`, then check it is exactly that.
fn wait_counter(d: &Daemon, node: u32, name: &str, want: u64) {
    poll_until(&format!("NI {node}: {name} never reached {want}"), || {
        d.counter(node, name) >= want
    });
    assert_eq!(d.counter(node, name), want, "NI {node}: {name}");
}

/// The administrator sets NI `node`'s port 0 link `up` or `down`.
fn port_state(d: &Daemon, node: u32, state: &str) {
    let v = d.control(&format!(
        r#"{{"version":1,"request":"port_set","node":{node},"state":"{state}"}}"#
    ));
    assert_eq!(v["result"], "port", "{v}");
}

/// RPD `k` of the 64 KiB buffer at `RX_AREA` describes `data` received whole: length
/// payload + 5, ZEROES 5, no error bits, the payload where DESC_POINTER says, then the
/// 5 checked CRC bytes as zeros.
fn check_rpd(rx: &mut Client, k: u32, data: &[u8]) {
    let (ptr, word) = rpd(rx, RX_AREA, k);
    assert_eq!(
        word & rpd::DESC_LENGTH_MASK,
        data.len() as u32 + CRC_BYTES,
        "RPD {k}: the payload and its 5 CRC bytes (length word {word:#x})"
    );
    assert_eq!(
        (word >> rpd::DESC_ZEROES_SHIFT) & 7,
        CRC_BYTES,
        "RPD {k}: ZEROES, CRC-32 and CRC-8 checked (length word {word:#x})"
    );
    assert_eq!(
        word & (rpd::DESC_INVALID | rpd::DESC_LINK | rpd::DESC_MARKED_BAD),
        0,
        "RPD {k}: no error bits (length word {word:#x})"
    );
    assert!(
        (RX_AREA..RX_AREA + RPL_OFFSET).contains(&ptr),
        "RPD {k}: DESC_POINTER {ptr:#x} inside the buffer"
    );
    assert_eq!(
        sram_read(rx, ptr, data.len()),
        data,
        "RPD {k}: the payload at {ptr:#x}"
    );
    assert_eq!(
        sram_read(rx, ptr + data.len() as u32, CRC_BYTES as usize),
        vec![0u8; CRC_BYTES as usize],
        "RPD {k}: the CRCs XOR to zero"
    );
}

/// The daemon still serves: a good Myrinet packet from `tx` to rank `to` arrives whole at
/// `rx`, whose current buffer is at `RX_AREA`, as the next RPD of its RPL.
fn packet_moves(tx: &mut Client, rx: &mut Client, to: u8, tag: u8) {
    let data = payload(tag, 40);
    let before = recv_count(rx);
    let k = special_read(rx, lanai::P0_RPL_INDEX, 2) as u32;
    send_myrinet(tx, to, GOOD_AT, &data);
    wait_received(rx, before + 1);
    check_rpd(rx, k, &data);
}

/// §10 sender (§10.2 SPDs): an SPD whose segment runs past the end of SRAM (pointer
/// 0x7F_FFF0 with 64 bytes; pointer 0xFFFF_FFF0) retires its packet unsent: SEND_COUNT
/// goes to 1 so software can reclaim the SPDs' memory, `lanai_send_faults` counts it, the
/// FIFO is empty again, nothing reaches the crossbar or the receiver, whose SRAM is
/// untouched.
#[test]
fn spd_outside_sram_retires_the_packet_unsent() {
    let mut d = Daemon::start(2);
    let mut c0 = myrinet(&d, 0, true);
    let mut c1 = myrinet(&d, 1, false);
    // Mark the receiver's buffer and its first RPDs before issuing it: any write shows.
    let marks = vec![0xA5u8; 256];
    sram_write(&mut c1, RX_AREA, &marks);
    sram_write(&mut c1, RX_AREA + RPL_OFFSET, &marks[..32]);
    issue(&mut c1, false, RX_AREA);
    let route_at = TX_AREA;
    sram_write(&mut c0, route_at, &[lanai::route::ROUTE_BYTE | 1]);
    for (n, (ptr, len)) in [(0x7F_FFF0u32, 64u32), (0xFFFF_FFF0, 16)]
        .into_iter()
        .enumerate()
    {
        spd(&mut c0, route_at, spd::DESC_ROUTE | 1);
        spd(&mut c0, ptr, spd::DESC_LAST | len);
        wait_counter(&d, 0, "lanai_send_faults", n as u64 + 1);
        assert_eq!(
            send_count(&mut c0),
            1,
            "the faulted packet ({ptr:#x}, {len}) is retired: SEND_COUNT lets software reclaim it"
        );
        assert_eq!(free_count(&mut c0), 16, "its SPDs left the FIFO");
        // Reclaim (SEND_COUNT decrements on a write).
        special_write(&mut c0, lanai::P0_SEND_COUNT, 1, 1);
        assert_eq!(send_count(&mut c0), 0);
    }
    assert_eq!(
        d.counter(0, "lanai_route_dropped"),
        0,
        "nothing reached the crossbar"
    );
    assert_eq!(d.counter(1, "lanai_packets_received"), 0);
    assert_eq!(recv_count(&mut c1), 0);
    assert_eq!(
        sram_read(&mut c1, RX_AREA, 256),
        marks,
        "the buffer untouched"
    );
    assert_eq!(
        sram_read(&mut c1, RX_AREA + RPL_OFFSET, 32),
        marks[..32].to_vec(),
        "the RPL untouched"
    );
    packet_moves(&mut c0, &mut c1, 1, 0x11);
    assert!(d.alive());
}

/// §10 sender (§10.2 DESC_LENGTH): lengths that wrap or are huge — the largest DESC_LENGTH
/// (0x1FF_FFFF, 32 MiB) from 0x100, a pointer + length that wraps in 32 bits
/// (0xFFFF_FF00 + 0x200 = 0x100), a route segment running past the end of SRAM — are
/// faults as above: retired unsent, counted, nothing delivered.
#[test]
fn lengths_that_wrap_or_exceed_sram_are_faults() {
    let mut d = Daemon::start(2);
    let mut c0 = myrinet(&d, 0, true);
    let mut c1 = myrinet(&d, 1, true);
    sram_write(&mut c0, TX_AREA, &[lanai::route::ROUTE_BYTE | 1]);
    sram_write(&mut c0, TX_AREA + 8, &payload(0x22, 32));
    let cases: [[(u32, u32); 2]; 3] = [
        [
            (TX_AREA, spd::DESC_ROUTE | 1),
            (0x100, spd::DESC_LAST | spd::DESC_LENGTH_MASK),
        ],
        [
            (TX_AREA, spd::DESC_ROUTE | 1),
            (0xFFFF_FF00, spd::DESC_LAST | 0x200),
        ],
        [
            (0x7F_FFFF, spd::DESC_ROUTE | 2),
            (TX_AREA + 8, spd::DESC_LAST | 32),
        ],
    ];
    for (n, case) in cases.iter().enumerate() {
        for &(ptr, flags) in case {
            spd(&mut c0, ptr, flags);
        }
        wait_counter(&d, 0, "lanai_send_faults", n as u64 + 1);
        assert_eq!(
            send_count(&mut c0),
            n as u64 + 1,
            "case {n} ({case:x?}) retired: SEND_COUNT"
        );
        assert_eq!(free_count(&mut c0), 16, "case {n}: the FIFO is empty again");
    }
    assert_eq!(d.counter(1, "lanai_packets_received"), 0);
    assert_eq!(recv_count(&mut c1), 0);
    assert_eq!(d.counter(0, "lanai_route_dropped"), 0);
    packet_moves(&mut c0, &mut c1, 1, 0x12);
    assert!(d.alive());
}

/// §10 sender and the crossbar (`ni_abi::lanai::route`): route bytes to nowhere — 0x80|99
/// and 0x80|2 in a partition of 2, and a leading byte without bit 7 (0x05) — are dropped
/// and counted (`lanai_route_dropped`) at the sender; the packet still left the port
/// (SEND_COUNT, `lanai_packets_sent`), and nothing arrives anywhere.
#[test]
fn route_bytes_to_nowhere_are_dropped_and_counted() {
    let mut d = Daemon::start(2);
    let mut c0 = myrinet(&d, 0, true);
    let mut c1 = myrinet(&d, 1, true);
    let data = payload(0x33, 32);
    let routes = [
        lanai::route::ROUTE_BYTE | 99,
        0x05,
        lanai::route::ROUTE_BYTE | 2,
    ];
    for (n, &route) in routes.iter().enumerate() {
        let at = TX_AREA + 0x100 * (n as u32 + 1);
        send_routed(&mut c0, route, at, &data);
        wait_counter(&d, 0, "lanai_route_dropped", n as u64 + 1);
        assert_eq!(
            send_count(&mut c0),
            n as u64 + 1,
            "route {route:#04x}: the sender is not stuck (SEND_COUNT)"
        );
    }
    assert_eq!(d.counter(0, "lanai_packets_sent"), routes.len() as u64);
    assert_eq!(free_count(&mut c0), 16);
    assert_eq!(d.counter(1, "lanai_packets_received"), 0);
    assert_eq!(d.counter(0, "lanai_packets_received"), 0);
    assert_eq!(recv_count(&mut c1), 0);
    assert_eq!(recv_count(&mut c0), 0);
    packet_moves(&mut c0, &mut c1, 1, 0x13);
    assert!(d.alive());
}

/// §10.4 SEND_FREE_COUNT and SEND_CONTROL: 20 words written to P0_SEND without DESC_LAST
/// (a driver ignoring SEND_FREE_COUNT): 16 fit, FREE_COUNT reads 0, SEND_READY drops, the
/// other 4 are dropped and counted (`lanai_send_overflows`). SEND_FLUSH empties the FIFO
/// (FREE_COUNT 16), stops the sender (AISR SEND_STOPPED) and counts the whole packets it
/// discarded (`lanai_send_flushed`: none the first time, the one queued while stopped the
/// second); SEND_ON resumes and a good packet goes through — the flushed one never does.
#[test]
fn send_fifo_overfilled_then_flushed() {
    let mut d = Daemon::start(2);
    let mut c0 = myrinet(&d, 0, true);
    let mut c1 = myrinet(&d, 1, true);
    for w in 0..spd::FIFO_WORDS {
        // (pointer, length) pairs, never DESC_LAST: no packet is ever whole.
        let v = if w % 2 == 0 { TX_AREA } else { 8 };
        special_write(&mut c0, lanai::P0_SEND, 4, v as u64);
        assert_eq!(free_count(&mut c0), (spd::FIFO_WORDS - w - 1) as u64);
    }
    assert_eq!(free_count(&mut c0), 0, "16 words: the FIFO is full");
    assert_eq!(
        isr(&mut c0) & isr::P0_SEND_READY,
        0,
        "no SEND_READY when full"
    );
    for _ in 0..4 {
        special_write(&mut c0, lanai::P0_SEND, 4, 8);
    }
    assert_eq!(d.counter(0, "lanai_send_overflows"), 4);
    assert_eq!(free_count(&mut c0), 0);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(send_count(&mut c0), 0, "nothing whole, nothing sent");
    assert_eq!(d.counter(0, "lanai_packets_sent"), 0);

    let control = |c: &mut Client, v: u32| special_write(c, lanai::P0_SEND_CONTROL, 1, v as u64);
    control(&mut c0, send_control::SEND_FLUSH);
    assert_eq!(free_count(&mut c0), 16, "SEND_FLUSH empties the FIFO");
    assert_ne!(isr(&mut c0) & isr::P0_SEND_READY, 0);
    assert_ne!(
        aisr(&mut c0) & aisr::SEND_STOPPED,
        0,
        "SEND_FLUSH leaves the sender stopped"
    );
    assert_eq!(d.counter(0, "lanai_send_flushed"), 0, "no packet was whole");

    // Stopped: a whole packet waits in the FIFO, then a second flush discards it.
    let doomed = payload(0xDD, 32);
    send_myrinet(&mut c0, 1, TX_AREA + 0x108, &doomed);
    assert_eq!(free_count(&mut c0), 12);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(send_count(&mut c0), 0, "a stopped sender sends nothing");
    assert_eq!(d.counter(1, "lanai_packets_received"), 0);
    control(&mut c0, send_control::SEND_FLUSH);
    assert_eq!(free_count(&mut c0), 16);
    assert_eq!(
        d.counter(0, "lanai_send_flushed"),
        1,
        "one whole packet flushed"
    );

    control(&mut c0, send_control::SEND_ON);
    assert_eq!(
        aisr(&mut c0) & aisr::SEND_STOPPED,
        0,
        "SEND_ON resumes the sender"
    );
    packet_moves(&mut c0, &mut c1, 1, 0x14);
    assert_eq!(send_count(&mut c0), 1);
    assert_eq!(
        d.counter(1, "lanai_packets_received"),
        1,
        "only the good packet arrived, never the flushed one"
    );
    assert!(d.alive());
}

/// §9.7 RB / RPL_CONFIG: receive buffers that do not fit in SRAM are refused and counted
/// (`lanai_bad_buffers`): P0_RB = 0x7F_F000 with the 64 KiB config (its data and RPL run
/// past 8 MiB), P0_RB = 0xFFFF_FFFF, P0_A_RB = 0x7F_FF00 with the alternate channel's
/// 512 B / 8 B config; AISR NO_BUFFER and A_NO_BUFFER stay set and RB reads back no
/// buffer. A third RB while current and backup are held is counted too and replaces
/// nothing; packets then land in the good current buffer and nowhere near the refused one.
#[test]
fn receive_buffers_outside_sram_are_refused() {
    let mut d = Daemon::start(2);
    let mut c0 = myrinet(&d, 0, true);
    let mut c1 = myrinet(&d, 1, false);
    assert_ne!(aisr(&mut c1) & aisr::NO_BUFFER, 0);
    let rb = |c: &mut Client| special_read(c, lanai::P0_RB, 4) as u32 & !rpd::DESC_COMPLETE;

    issue(&mut c1, false, 0x7F_F000);
    assert_eq!(d.counter(1, "lanai_bad_buffers"), 1);
    assert_ne!(
        aisr(&mut c1) & aisr::NO_BUFFER,
        0,
        "the refused buffer did not become current"
    );
    assert_eq!(rb(&mut c1), 0, "RB reads back no buffer");
    issue(&mut c1, false, 0xFFFF_FFFF);
    assert_eq!(d.counter(1, "lanai_bad_buffers"), 2);
    assert_ne!(aisr(&mut c1) & aisr::NO_BUFFER, 0);
    issue(&mut c1, true, 0x7F_FF00);
    assert_eq!(d.counter(1, "lanai_bad_buffers"), 3);
    assert_ne!(aisr(&mut c1) & aisr::A_NO_BUFFER, 0);

    // Current and backup, then a third.
    issue(&mut c1, false, RX_AREA);
    assert_eq!(aisr(&mut c1) & aisr::NO_BUFFER, 0);
    assert_ne!(isr(&mut c1) & isr::P0_NO_BACKUP, 0);
    issue(&mut c1, false, RX_AREA + BUF_64K_FOOTPRINT);
    assert_eq!(isr(&mut c1) & isr::P0_NO_BACKUP, 0);
    issue(&mut c1, false, RX_AREA + 2 * BUF_64K_FOOTPRINT);
    assert_eq!(
        d.counter(1, "lanai_bad_buffers"),
        4,
        "a third RB is counted"
    );
    assert_eq!(rb(&mut c1), RX_AREA, "the current buffer is unchanged");

    packet_moves(&mut c0, &mut c1, 1, 0x15);
    assert_eq!(
        sram_read(&mut c1, 0x7F_F000, 64),
        vec![0u8; 64],
        "nothing written at the refused buffer"
    );
    assert_eq!(d.counter(1, "lanai_rx_dropped"), 0);
    assert!(d.alive());
}

/// §10 sender and §9 receiver with the administrator's link (`port_set`): packets queued
/// at a sender whose port is down wait (SEND_COUNT 0, nothing received, ISR
/// P0_LINK_READY clear); once it is up they all arrive, in order, intact. Packets to a
/// receiver whose port is down are dropped and counted at the sender
/// (`lanai_route_dropped`), whose SEND_COUNT still advances; once up it receives again.
#[test]
fn a_port_taken_down_mid_stream() {
    let mut d = Daemon::start(2);
    let mut c0 = myrinet(&d, 0, true);
    let mut c1 = myrinet(&d, 1, true);

    // The sender's port down before the SPDs: they queue.
    port_state(&d, 0, "down");
    assert_eq!(isr(&mut c0) & isr::P0_LINK_READY, 0);
    let packets: Vec<Vec<u8>> = (0..3u8)
        .map(|k| payload(0x60 + k, 24 + 8 * k as usize))
        .collect();
    for (k, data) in packets.iter().enumerate() {
        send_myrinet(&mut c0, 1, TX_AREA + 0x100 * (k as u32 + 1), data);
    }
    assert_eq!(free_count(&mut c0), 16 - 4 * packets.len() as u64);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        send_count(&mut c0),
        0,
        "nothing leaves a port without carrier"
    );
    assert_eq!(recv_count(&mut c1), 0);
    assert_eq!(d.counter(1, "lanai_packets_received"), 0);
    assert_eq!(
        d.counter(0, "lanai_route_dropped"),
        0,
        "waiting, not dropped"
    );

    port_state(&d, 0, "up");
    assert_ne!(isr(&mut c0) & isr::P0_LINK_READY, 0);
    wait_received(&mut c1, packets.len() as u64);
    wait_sent(&mut c0, packets.len() as u64);
    for (k, data) in packets.iter().enumerate() {
        check_rpd(&mut c1, k as u32, data);
    }
    assert_eq!(free_count(&mut c0), 16);
    assert_eq!(d.counter(1, "lanai_packets_received"), packets.len() as u64);

    // The receiver's port down: dropped at the sender, which is not stuck.
    port_state(&d, 1, "down");
    let sent = send_count(&mut c0);
    let received = recv_count(&mut c1);
    for k in 0..2u32 {
        send_myrinet(&mut c0, 1, TX_AREA + 0x1000 + 0x100 * k, &payload(0x70, 32));
    }
    wait_counter(&d, 0, "lanai_route_dropped", 2);
    assert_eq!(send_count(&mut c0), sent + 2, "SEND_COUNT advances");
    assert_eq!(free_count(&mut c0), 16);
    assert_eq!(
        recv_count(&mut c1),
        received,
        "nothing arrived at a port that is down"
    );
    assert_eq!(d.counter(1, "lanai_packets_received"), packets.len() as u64);

    port_state(&d, 1, "up");
    packet_moves(&mut c0, &mut c1, 1, 0x16);
    assert!(d.alive());
}

/// §9.7 STOP_SIZE (Myrinet flow control) and the crossbar's hold timeout: a receiver whose
/// regular channel is enabled with no buffer sends STOP (AISR MYRI_STOP) and holds the
/// sender's head packet; a third NI's traffic to the sender meanwhile arrives at once.
/// After `HOLD_TIMEOUT` (1 s) the held packet is dropped and counted at the sender
/// (`lanai_blocked_dropped`), and the sender's next packet, to a healthy receiver, flows.
/// Once the receiver issues a buffer (GO) it receives again.
#[test]
fn a_receiver_without_buffers_cannot_stall_the_fabric() {
    let hold = ni_device::fabric::lanai::HOLD_TIMEOUT;
    let mut d = Daemon::start(3);
    let mut c0 = myrinet(&d, 0, true);
    let mut c1 = myrinet(&d, 1, false);
    let mut c2 = myrinet(&d, 2, true);
    assert_ne!(aisr(&mut c1) & aisr::MYRI_STOP, 0, "no buffer: STOP");

    let t0 = Instant::now();
    let blocked = payload(0x71, 32);
    let next = payload(0x72, 32);
    send_myrinet(&mut c0, 1, TX_AREA + 0x108, &blocked);
    send_myrinet(&mut c0, 2, TX_AREA + 0x208, &next);

    // NI 2 -> NI 0 is not delayed by NI 0's blocked head packet.
    let q = payload(0x73, 48);
    let tq = Instant::now();
    send_myrinet(&mut c2, 0, TX_AREA + 0x108, &q);
    wait_received(&mut c0, 1);
    let took = tq.elapsed();
    // Read in this order: the drop (last) comes before the second packet's delivery and
    // with the SEND_COUNT bump, so if it has not happened the others are consistent.
    let c2_received = recv_count(&mut c2);
    let c0_sent = send_count(&mut c0);
    assert_eq!(
        d.counter(0, "lanai_blocked_dropped"),
        0,
        "NI 2's packet arrived while NI 0's head packet was held"
    );
    assert_eq!(c0_sent, 0, "NI 0's head packet is held");
    assert_eq!(c2_received, 0, "NI 0's second packet waits behind its head");
    assert!(
        took < hold,
        "NI 2's packet took {took:?}: delayed by another NI's blocked packet"
    );
    check_rpd(&mut c0, 0, &q);

    // The hold times out: dropped, counted, and the next packet flows.
    wait_counter(&d, 0, "lanai_blocked_dropped", 1);
    assert!(
        t0.elapsed() >= hold,
        "dropped after {:?}, before the hold timeout",
        t0.elapsed()
    );
    wait_received(&mut c2, 1);
    check_rpd(&mut c2, 0, &next);
    wait_sent(&mut c0, 2);
    assert_eq!(recv_count(&mut c1), 0);
    assert_eq!(d.counter(1, "lanai_packets_received"), 0);
    assert_ne!(aisr(&mut c1) & aisr::MYRI_STOP, 0);

    // GO: NI 1 issues a buffer and receives again.
    issue(&mut c1, false, RX_AREA);
    assert_eq!(aisr(&mut c1) & aisr::MYRI_STOP, 0, "a buffer issued: GO");
    packet_moves(&mut c0, &mut c1, 1, 0x17);
    assert!(d.alive());
}

/// §8 COPY: copies whose source or destination runs past SRAM — source 0x7F_FFF0 for 64
/// bytes, destination 0x7F_FFF0 and 0xFFFF_FFF0, a length of 0x7FFF_FFFF, a source
/// outside SRAM fed to the CRC-32 — are refused and counted (`lanai_copy_faults`): the
/// destination and the end of SRAM untouched, CRC32 unchanged, COPY_BUSY clear afterwards
/// (set between the words). A good copy then works.
#[test]
fn copies_outside_sram_are_refused() {
    let mut d = Daemon::start(2);
    let mut c0 = myrinet(&d, 0, true);
    let mut c1 = myrinet(&d, 1, true);
    let src = TX_AREA;
    let dst = TX_AREA + 0x1000;
    let pattern = payload(0x81, 64);
    let marks = vec![0x5Au8; 64];
    sram_write(&mut c0, src, &pattern);
    sram_write(&mut c0, dst, &marks);
    let top = sram_read(&mut c0, 0x7F_FFF0, 16);
    let copy = |c: &mut Client, words: &[u32]| {
        for &w in words {
            special_write(c, lanai::COPY, 4, w as u64);
        }
    };
    let busy = |c: &mut Client| isr(c) & isr::COPY_BUSY != 0;

    // Source past the end, one word at a time.
    assert!(!busy(&mut c0));
    copy(&mut c0, &[0x7F_FFF0]);
    assert!(busy(&mut c0), "COPY_BUSY from the first word");
    copy(&mut c0, &[64]);
    assert!(busy(&mut c0));
    copy(&mut c0, &[dst]);
    assert!(!busy(&mut c0), "COPY_BUSY clear after a refused copy");
    assert_eq!(d.counter(0, "lanai_copy_faults"), 1);
    assert_eq!(sram_read(&mut c0, dst, 64), marks, "destination untouched");

    // Destinations past the end, and a length past it.
    let bad: [[u32; 3]; 3] = [
        [src, 64, 0x7F_FFF0],
        [src, 64, 0xFFFF_FFF0],
        [src, lanai::copy::COPY_LENGTH_MASK, dst],
    ];
    for (n, words) in bad.iter().enumerate() {
        copy(&mut c0, words);
        assert_eq!(
            d.counter(0, "lanai_copy_faults"),
            n as u64 + 2,
            "COPY {words:x?}"
        );
        assert!(!busy(&mut c0));
    }
    assert_eq!(sram_read(&mut c0, dst, 64), marks, "destination untouched");
    assert_eq!(
        sram_read(&mut c0, 0x7F_FFF0, 16),
        top,
        "the end of SRAM untouched"
    );

    // A source outside SRAM into the CRC-32 engine.
    let crc = special_read(&mut c0, lanai::CRC32, 4);
    copy(&mut c0, &[0x7F_FFF0, lanai::copy::COPY_TO_CRC32 | 64]);
    assert_eq!(d.counter(0, "lanai_copy_faults"), 5);
    assert_eq!(
        special_read(&mut c0, lanai::CRC32, 4),
        crc,
        "CRC32 unchanged"
    );
    assert!(!busy(&mut c0));
    assert_eq!(d.counter(0, "lanai_copies"), 0);

    // A good copy.
    copy(&mut c0, &[src, 64, dst]);
    assert!(!busy(&mut c0));
    assert_eq!(d.counter(0, "lanai_copies"), 1);
    assert_eq!(d.counter(0, "lanai_copy_bytes"), 64);
    assert_eq!(sram_read(&mut c0, dst, 64), pattern);

    packet_moves(&mut c0, &mut c1, 1, 0x18);
    assert!(d.alive());
}

/// Everything at once (§8-§15 and App. A): thousands of writes of random values at random
/// widths (1, 2, 4, 8) to random offsets of the specials page, interleaved with reads — SPDs,
/// RBs, configs, COPY, DMA pointers, ISR and AISR included; never PCI config space. The
/// daemon lives, the other NI receives nothing, and after a function reset the NI is clean
/// (the registers' power-on values) and, configured again, exchanges good packets with
/// another NI both ways.
#[test]
fn garbage_through_the_specials_page_then_a_clean_reset() {
    let mut d = Daemon::start(2);
    let mut c0 = d.client(0);
    enable(&mut c0);
    let mut c1 = d.client(1);
    enable(&mut c1);
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    let mut writes = 0;
    while writes < 3000 {
        let v = rng.next();
        let width = 1usize << (v & 3);
        let off = ((v >> 8) % (lanai::SPECIALS_SIZE - width as u64 + 1)) as u32;
        if (v >> 4) & 3 == 0 {
            let _ = special_read(&mut c0, off, width);
        } else {
            special_write(&mut c0, off, width, rng.next());
            writes += 1;
        }
    }
    assert!(d.alive(), "the daemon survived the garbage");
    assert!(
        d.counter(0, "unmapped_register") > 0,
        "writes between the registers were counted"
    );
    assert_eq!(
        d.counter(1, "lanai_packets_received"),
        0,
        "the other NI (its port not enabled) received nothing"
    );

    c0.reset().unwrap();
    enable(&mut c0);
    assert_eq!(free_count(&mut c0), 16, "an empty send FIFO");
    assert_eq!(send_count(&mut c0), 0);
    assert_eq!(recv_count(&mut c0), 0);
    assert_eq!(special_read(&mut c0, lanai::P0_RPL_CONFIG, 4), 0);
    assert_eq!(special_read(&mut c0, lanai::P0_SEND_CONTROL, 1), 0);
    assert_eq!(aisr(&mut c0) & aisr::SEND_STOPPED, 0);
    assert_eq!(isr(&mut c0) & isr::COPY_BUSY, 0);

    port_up(&mut c0, port_reg::MODE_M, MYRI_CRCS, RPL_64K);
    issue(&mut c0, false, RX_AREA);
    port_up(&mut c1, port_reg::MODE_M, MYRI_CRCS, RPL_64K);
    issue(&mut c1, false, RX_AREA);
    packet_moves(&mut c0, &mut c1, 1, 0x19);
    packet_moves(&mut c1, &mut c0, 0, 0x1A);
    assert!(d.alive());
}
