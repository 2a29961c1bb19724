//! The CM-5 Data Network driven through BAR2 alone, as a driver written from the NI
//! Programmer's Handbook would (issue 11): raw vfio-user clients, register accesses only.
//! Each test names the handbook section it follows.

mod common;

use std::time::{Duration, Instant};

use common::cm5_driver::*;
use common::*;
use ni_abi::cm5::{self, bad_address, cause, green, hodgepodge, iface, level, private, status};
use ni_abi::pci;
use vfio_user::Client;

/// §2.3, §2.4, §3.2, App. A.3: a relative send from NI 0 to relative address 1 arrives whole,
/// words in order, with its tag; rec_length stays while rec_length_left counts down (§2.5.3);
/// a read of an empty FIFO is a Bus Error with ni_bad_address latched (§2.4, §6.6).
#[test]
fn a_message_goes_from_one_ni_to_another_through_the_registers() {
    let d = Daemon::start(2);
    let mut a = d.client(0);
    let mut b = d.client(1);
    ready(&mut a, 2);
    ready(&mut b, 2);
    assert_eq!(cm5_read(&mut b, true, cm5::NI_PHYSICAL_SELF), 1);
    assert!(
        send(&mut a, 1, 3, &[0xA, 0xB, 0xC]),
        "send_ok after the whole message"
    );
    let st = {
        let t = Instant::now();
        loop {
            let st = cm5_read(&mut b, false, LDR_STATUS);
            if st & status::REC_OK != 0 {
                break st;
            }
            assert!(t.elapsed() < Duration::from_secs(5), "nothing arrived");
        }
    };
    assert_eq!((st >> 11) & 0xF, 3, "rec_length");
    assert_eq!((st >> 15) & 0xF, 3, "dr_rec_tag");
    for (i, want) in [0xA, 0xB, 0xC].into_iter().enumerate() {
        let st = cm5_read(&mut b, false, LDR_STATUS);
        assert_eq!((st >> 7) & 0xF, 3 - i as u32, "rec_length_left");
        assert_eq!((st >> 11) & 0xF, 3, "rec_length stays");
        assert_eq!(cm5_read(&mut b, false, LDR_RECV), want);
    }
    assert_eq!(cm5_read(&mut b, false, LDR_STATUS) & status::REC_OK, 0);
    assert_eq!(bus_errors(&mut b), 0);
    assert_eq!(cm5_read(&mut b, false, LDR_RECV), u32::MAX);
    assert_ne!(bus_errors(&mut b), 0, "recv with rec_ok 0 is a Bus Error");
    let bad = cm5_read(&mut b, true, cm5::NI_BAD_ADDRESS);
    assert_eq!(bad & bad_address::LOW_MASK, LDR_RECV);
    assert_eq!(
        (bad >> bad_address::TYPE_SHIFT) & 0xF,
        bad_address::TYPE_READ
    );
    assert_eq!(d.counter(0, "cm5_dr_sends"), 1);
    assert_eq!(d.counter(1, "cm5_dr_recvs"), 1);
    // To itself too (relative address 0 from NI 0).
    assert!(send(&mut a, 0, 1, &[42]));
    assert_eq!(receive(&mut a), (1, vec![42]));
}

/// §2.3, §3.3, §3.4, §3.5.4: the sends a user program may not make are Bus Errors and lose
/// the message; a relative address past the partition raises bad_relative_address and
/// reads send_ok 0; the NI stays usable.
#[test]
fn forbidden_sends_are_bus_errors_and_the_ni_stays_usable() {
    let d = Daemon::start(2);
    let mut a = d.client(0);
    let mut b = d.client(1);
    ready(&mut a, 2);
    ready(&mut b, 2);
    let check = |a: &mut Client, what: &str, f: &dyn Fn(&mut Client)| {
        clear_causes(a);
        f(a);
        assert_ne!(bus_errors(a), 0, "{what}: no Bus Error");
    };
    check(&mut a, "send without send_first", &|a| {
        cm5_write(a, false, LDR_SEND, 1)
    });
    check(&mut a, "physical mode from the user window", &|a| {
        cm5_write(a, false, ldr_send_first(true, 0, 1), 1)
    });
    cm5_write(&mut a, true, cm5::NI_USER_TAG_MASK, 1 << 9);
    check(&mut a, "a supervisor-reserved tag", &|a| {
        cm5_write(a, false, ldr_send_first(false, 9, 1), 1)
    });
    check(&mut a, "6 words in the short form (limit 5)", &|a| {
        cm5_write(a, false, ldr_send_first(false, 0, 6), 1)
    });
    check(&mut a, "a long message past longest_dr_message (5)", &|a| {
        let aux = 6 << 4;
        cm5_write(a, false, cm5::LDR_SEND_FIRST_LONG + (aux << 3), 1)
    });
    // The supervisor may use the reserved tag.
    clear_causes(&mut a);
    cm5_write(&mut a, true, ldr_send_first(false, 9, 1), 1);
    cm5_write(&mut a, true, LDR_SEND, 99);
    assert_eq!(bus_errors(&mut a), 0);
    // Past the partition: bad relative address, no Bus Error, send_ok 0.
    clear_causes(&mut a);
    assert!(!send(&mut a, 2, 0, &[1]));
    let c = cm5_read(&mut a, true, cm5::NI_INTERRUPT_CAUSE);
    assert_ne!(c & cause::BAD_RELATIVE_ADDRESS, 0);
    assert_eq!(c & cause::BAD_MEMORY_ACCESS, 0);
    // Still usable: the next good message goes through, and only the good ones arrived.
    assert!(send(&mut a, 1, 2, &[7, 8]));
    // The supervisor's tag-9 message came first (the user window sees it: no interrupt mask).
    assert_eq!(receive(&mut b), (9, vec![99]));
    assert_eq!(receive(&mut b), (2, vec![7, 8]));
    assert_eq!(cm5_read(&mut b, false, LDR_STATUS) & status::REC_OK, 0);
    assert!(d.counter(0, "bus_errors") >= 5);
}

/// §2.3.1, §2.5.1, §3.9, §8.1.3: a receiver that does not read fills its FIFO, then the
/// sender's; the next message is discarded (send_ok 0) and nothing is lost: retried until
/// accepted, every message arrives once, in order.
#[test]
fn a_full_network_discards_and_the_retry_loop_loses_nothing() {
    let d = Daemon::start(2);
    let mut a = d.client(0);
    let mut b = d.client(1);
    ready(&mut a, 2);
    ready(&mut b, 2);
    let mut refused = 0;
    let total = 40u32;
    let mut next_rx = 0u32;
    for seq in 0..total {
        let t = Instant::now();
        while !send(&mut a, 1, 5, &[seq, seq ^ 0xFFFF, 3, 4, 5]) {
            refused += 1;
            // Only after the sender has been refused does the receiver drain a little.
            if refused % 4 == 0 {
                let (tag, words) = receive(&mut b);
                assert_eq!((tag, words[0], words[1]), (5, next_rx, next_rx ^ 0xFFFF));
                next_rx += 1;
            }
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "message {seq} never accepted"
            );
        }
    }
    while next_rx < total {
        let (_, words) = receive(&mut b);
        assert_eq!(words[0], next_rx, "in order, none lost, none twice");
        next_rx += 1;
    }
    assert!(refused > 0, "the FIFOs never filled");
    assert_eq!(d.counter(1, "cm5_dr_recvs"), total as u64);
    assert_eq!(cm5_read(&mut b, false, LDR_STATUS) & status::REC_OK, 0);
}

/// §2.7.2, §6.10: after NI Reset every interface is locked: what is written is discarded,
/// send_ok and send_space read 0, and no Bus Error.
#[test]
fn a_locked_interface_discards() {
    let d = Daemon::start(2);
    let mut a = d.client(0);
    enable(&mut a);
    poll_until("partition registers never set", || {
        cm5_read(&mut a, true, cm5::NI_PARTITION_SIZE) == 2
    });
    assert_ne!(
        cm5_read(&mut a, true, LDR_PRIVATE) & private::LOCK,
        0,
        "locked after reset"
    );
    assert!(!send(&mut a, 1, 0, &[1, 2]));
    let st = cm5_read(&mut a, false, LDR_STATUS);
    assert_eq!(st & (status::SEND_OK | status::SEND_SPACE_MASK), 0);
    assert_eq!(bus_errors(&mut a), 0);
    assert_eq!(d.counter(0, "cm5_discarded_sends"), 1);
    assert_eq!(d.counter(0, "cm5_dr_sends"), 0);
}

/// §2.7.1, §3.5.4: rec_ok_ie raises the Green ldr_rec_ok cause when a message becomes the
/// head; a tag in ni_rec_interrupt_mask raises dr_rec_tag and hides the message from the
/// user window (the supervisor reads it).
#[test]
fn receive_interrupt_causes_and_supervisor_tags() {
    let d = Daemon::start(2);
    let mut a = d.client(0);
    let mut b = d.client(1);
    ready(&mut a, 2);
    ready(&mut b, 2);
    cm5_write(&mut b, true, LDR_PRIVATE, private::REC_OK_IE);
    cm5_write(&mut b, true, cm5::NI_REC_INTERRUPT_MASK, 1 << 12);
    cm5_write(&mut a, true, ldr_send_first(false, 12, 1), 1);
    cm5_write(&mut a, true, LDR_SEND, 0x5EC);
    poll_until("nothing arrived", || {
        cm5_read(&mut b, true, LDR_STATUS) & status::REC_OK != 0
    });
    let g = cm5_read(&mut b, true, cm5::NI_INTERRUPT_CAUSE_GREEN);
    assert_ne!(g & green::LDR_REC_OK, 0);
    assert_ne!(g & green::DR_REC_TAG, 0);
    assert_eq!(
        cm5_read(&mut b, false, LDR_STATUS) & status::REC_OK,
        0,
        "hidden from the user"
    );
    assert_eq!(cm5_read(&mut b, false, LDR_RECV), u32::MAX);
    assert_ne!(bus_errors(&mut b), 0);
    assert_eq!(
        cm5_read(&mut b, true, LDR_RECV),
        0x5EC,
        "the supervisor reads it"
    );
}

/// §3.5.3: the doubleword read of status_pop is status_all and one popped word.
#[test]
fn status_pop_reads_status_all_and_one_word() {
    let d = Daemon::start(2);
    let mut a = d.client(0);
    let mut b = d.client(1);
    ready(&mut a, 2);
    ready(&mut b, 2);
    assert!(send(&mut a, 1, 6, &[11, 22]));
    let pop = |b: &mut Client| {
        let mut w = [0u8; 8];
        b.region_read(
            pci::BAR2_REGION,
            (cm5::LDR_BASE + iface::STATUS_POP) as u64,
            &mut w,
        )
        .unwrap();
        (
            u32::from_le_bytes(w[..4].try_into().unwrap()),
            u32::from_le_bytes(w[4..].try_into().unwrap()),
        )
    };
    poll_until("nothing arrived", || {
        cm5_read(&mut b, false, LDR_STATUS) & status::REC_OK != 0
    });
    let (all, w) = pop(&mut b);
    assert_eq!(all & 1, 1, "first_rec_ok");
    assert_eq!((all >> 3) & 0xF, 6, "first_rec_tag");
    assert_eq!((all >> 11) & 0x1F, 2, "first_rec_length_long");
    assert_eq!(w, 11);
    assert_eq!(pop(&mut b).1, 22);
    assert_eq!(
        pop(&mut b),
        (
            cm5_read(&mut b, false, cm5::LDR_BASE + iface::STATUS_ALL),
            0
        )
    );
    assert_eq!(
        bus_errors(&mut b),
        0,
        "an empty status_pop pops nothing, no Bus Error"
    );
}

/// §6.3.1: partitions hold for register traffic too. NI 2, alone in its partition, sends in
/// physical mode (the supervisor may) to NI 0's physical address in another partition: the
/// fabric drops it and counts it; NI 0 sees nothing.
#[test]
fn physical_sends_stay_inside_the_partition() {
    let d = Daemon::start_config(
        3,
        "[[partition]]\nname = \"a\"\nnodes = [0, 1]\n[[partition]]\nname = \"b\"\nnodes = [2]\n",
    );
    let mut a = d.client(0);
    let mut z = d.client(2);
    ready(&mut a, 2);
    ready(&mut z, 1);
    // "a" is laid out first: NI 0 is physical 0, NI 2 physical 2.
    assert_eq!(cm5_read(&mut z, true, cm5::NI_PHYSICAL_SELF), 2);
    cm5_write(&mut z, true, ldr_send_first(true, 0, 1), 0);
    cm5_write(&mut z, true, LDR_SEND, 0xBAD);
    poll_until("never dropped", || d.counter(2, "cm5_dr_dropped") != 0);
    assert_eq!(cm5_read(&mut a, true, LDR_STATUS) & status::REC_OK, 0);
    assert_eq!(d.counter(0, "cm5_dr_recvs"), 0);
}

/// §6.5: with timer_ie set, ni_time reaching ni_interrupt_now raises the Orange timer
/// interrupt — not before (ni_time counts at the model's 40 MHz) — and, with level_orange
/// set, the Orange MSI-X vector fires (§5.4).
#[test]
fn the_timer_interrupt_fires_when_ni_time_reaches_interrupt_now() {
    let d = Daemon::start(1);
    let mut c = d.client(0);
    enable(&mut c);
    let orange = msix_vector(&mut c, pci::vector::ORANGE);
    cm5_write(&mut c, true, cm5::NI_INTERRUPT_LEVEL, level::ORANGE);
    // Without timer_ie nothing happens.
    cm5_write(&mut c, true, cm5::NI_TIME, 0);
    cm5_write(&mut c, true, cm5::NI_INTERRUPT_NOW, 4_000);
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(
        cm5_read(&mut c, true, cm5::NI_INTERRUPT_CAUSE) & cause::TIMER_INTERRUPT,
        0
    );
    // 20 ms ahead at 40 MHz.
    let hp = cm5_read(&mut c, true, cm5::NI_HODGEPODGE);
    let t = Instant::now();
    cm5_write(&mut c, true, cm5::NI_TIME, 0);
    cm5_write(&mut c, true, cm5::NI_INTERRUPT_NOW, 800_000);
    cm5_write(&mut c, true, cm5::NI_HODGEPODGE, hp | hodgepodge::TIMER_IE);
    assert_eq!(wait_event(&orange, 3000), 1, "the Orange vector fired");
    let dt = t.elapsed();
    assert!(
        dt >= Duration::from_millis(20),
        "fired after {dt:?}, before ni_time got there"
    );
    assert_ne!(
        cm5_read(&mut c, true, cm5::NI_INTERRUPT_CAUSE) & cause::TIMER_INTERRUPT,
        0
    );
    assert!(cm5_read(&mut c, false, cm5::NI_TIME) >= 800_000);
}

/// §2.7.1, §5.4: a message becoming the head with rec_ok_ie set raises Green ldr_rec_ok,
/// and with level_green set the Green MSI-X vector fires on the receiver.
#[test]
fn an_arrival_fires_the_green_vector() {
    let d = Daemon::start(2);
    let mut a = d.client(0);
    let mut b = d.client(1);
    ready(&mut a, 2);
    ready(&mut b, 2);
    let ev = green_on_arrival(&mut b);
    assert_eq!(wait_event(&ev, 100), 0, "nothing yet");
    assert!(send(&mut a, 1, 0, &[1]));
    assert_eq!(wait_event(&ev, 3000), 1, "the Green vector fired");
    assert_ne!(
        cm5_read(&mut b, true, cm5::NI_INTERRUPT_CAUSE_GREEN) & green::LDR_REC_OK,
        0
    );
}

// ---- the Control Network through the registers (§4) ----

fn nis(n: u32) -> (Daemon, Vec<Client>) {
    let d = Daemon::start(n);
    let mut cs: Vec<Client> = (0..n).map(|i| d.client(i)).collect();
    for c in &mut cs {
        ready(c, n);
        join_control(c);
    }
    (d, cs)
}

/// §4.2.7, §4.2.8: reductions give every member the total; scans are exclusive, forward in
/// ascending and backward in descending relative address; multi-word adds carry.
#[test]
fn combines_through_the_registers_reduce_and_scan() {
    let (_d, mut cs) = nis(3);
    // ADD reduce of 1, 2, 3.
    for (r, c) in cs.iter_mut().enumerate() {
        assert!(combine_send(c, 3, 1, &[r as u32 + 1]));
    }
    for c in &mut cs {
        assert_eq!(combine_result(c), vec![6]);
    }
    // Forward and backward ADD scans.
    for (r, c) in cs.iter_mut().enumerate() {
        combine_send(c, 2, 1, &[10 << r]);
    }
    let fwd: Vec<Vec<u32>> = cs.iter_mut().map(combine_result).collect();
    assert_eq!(fwd, vec![vec![0], vec![10], vec![30]]);
    for (r, c) in cs.iter_mut().enumerate() {
        combine_send(c, 1, 1, &[10 << r]);
    }
    let bwd: Vec<Vec<u32>> = cs.iter_mut().map(combine_result).collect();
    assert_eq!(bwd, vec![vec![60], vec![40], vec![0]]);
    // Two-word UADD, least significant first: 0xFFFF_FFFF + 1 carries.
    for (r, c) in cs.iter_mut().enumerate() {
        let w = if r == 0 { [0xFFFF_FFFF, 0] } else { [1, 0] };
        combine_send(c, 3, 3, &w);
    }
    for c in &mut cs {
        assert_eq!(combine_result(c), vec![1, 1]);
    }
    // MAX, most significant word first, signed.
    for (r, c) in cs.iter_mut().enumerate() {
        combine_send(c, 3, 4, &[(r as i32 - 2) as u32]);
    }
    for c in &mut cs {
        assert_eq!(combine_result(c), vec![0]);
    }
}

/// §4.2.4, §4.2.10: illegal combiner/pattern pairs and an abstainer's send are Bus Errors; an
/// abstainer with reduce_rec_abstain clear receives reductions without contributing.
#[test]
fn abstainers_and_illegal_combines() {
    let (_d, mut cs) = nis(3);
    clear_causes(&mut cs[0]);
    cm5_write(&mut cs[0], false, com_send_first(0, 1, 1), 5);
    assert_ne!(bus_errors(&mut cs[0]), 0, "ADD with pattern 0");
    clear_causes(&mut cs[0]);
    cm5_write(&mut cs[0], false, com_send_first(3, 6, 1), 5);
    assert_ne!(bus_errors(&mut cs[0]), 0, "combiner 6");
    // NI 2 abstains but takes reductions.
    cm5_write(&mut cs[2], false, COM_CONTROL, 1); // rec_abstain, not reduce_rec_abstain
    clear_causes(&mut cs[2]);
    cm5_write(&mut cs[2], false, com_send_first(3, 1, 1), 5);
    assert_ne!(bus_errors(&mut cs[2]), 0, "an abstainer's send");
    for (r, c) in cs.iter_mut().enumerate().take(2) {
        combine_send(c, 3, 1, &[r as u32 + 7]);
    }
    for c in &mut cs {
        assert_eq!(
            combine_result(c),
            vec![15],
            "7 + 8, NI 2 contributing nothing"
        );
    }
    // A scan skips it (it gets no result) and gives it no part.
    for (r, c) in cs.iter_mut().enumerate().take(2) {
        combine_send(c, 2, 1, &[r as u32 + 7]);
    }
    assert_eq!(combine_result(&mut cs[0]), vec![0]);
    assert_eq!(combine_result(&mut cs[1]), vec![7]);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(cm5_read(&mut cs[2], false, COM_STATUS) & status::REC_OK, 0);
}

/// §4.3.1: a sync global clears sync_global_complete until every non-abstainer wrote; then
/// every member reads the OR. §4.3.3: the async global OR reaches every member, with the
/// Green global_rec cause where global_rec_ie is set.
#[test]
fn sync_and_async_global_through_the_registers() {
    let (_d, mut cs) = nis(3);
    cm5_write(&mut cs[0], false, cm5::NI_SYNC_GLOBAL_SEND, 0);
    assert_eq!(
        cm5_read(&mut cs[0], false, cm5::NI_SYNC_GLOBAL) & 2,
        0,
        "pending"
    );
    clear_causes(&mut cs[0]);
    cm5_write(&mut cs[0], false, cm5::NI_SYNC_GLOBAL_SEND, 1);
    assert_ne!(bus_errors(&mut cs[0]), 0, "a second send while pending");
    cm5_write(&mut cs[1], false, cm5::NI_SYNC_GLOBAL_SEND, 1);
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(
        cm5_read(&mut cs[0], false, cm5::NI_SYNC_GLOBAL) & 2,
        0,
        "NI 2 not yet"
    );
    cm5_write(&mut cs[2], false, cm5::NI_SYNC_GLOBAL_SEND, 0);
    for c in &mut cs {
        poll_until("sync global never completed", || {
            cm5_read(c, false, cm5::NI_SYNC_GLOBAL) == 0b11
        });
    }
    // Async global.
    let hp = cm5_read(&mut cs[2], true, cm5::NI_HODGEPODGE);
    cm5_write(
        &mut cs[2],
        true,
        cm5::NI_HODGEPODGE,
        hp | hodgepodge::GLOBAL_REC_IE,
    );
    cm5_write(&mut cs[1], false, cm5::NI_ASYNC_GLOBAL, 1);
    for c in &mut cs {
        poll_until("global_rec never rose", || {
            cm5_read(c, false, cm5::NI_ASYNC_GLOBAL) & 2 != 0
        });
    }
    assert_ne!(
        cm5_read(&mut cs[2], true, cm5::NI_INTERRUPT_CAUSE_GREEN) & green::GLOBAL_REC,
        0
    );
    cm5_write(&mut cs[1], false, cm5::NI_ASYNC_GLOBAL, 0);
    poll_until("global_rec never fell", || {
        cm5_read(&mut cs[0], false, cm5::NI_ASYNC_GLOBAL) & 2 == 0
    });
}

/// §4.2.9, §3.5.6: network-done clears router_done_complete until every member sent it and
/// every message sent has arrived.
#[test]
fn network_done_waits_for_every_member_and_every_message() {
    let (_d, mut cs) = nis(2);
    let dr_status = cm5::DR_BASE + iface::STATUS;
    assert_ne!(cm5_read(&mut cs[0], false, dr_status) & (1 << 6), 0);
    // Five 5-word messages: four fill NI 1's receive FIFO, the fifth waits in NI 0's. The
    // send FIFO holds four, so a send may find it full until the poller moved some: retry
    // as §8.1.3's loop does.
    for seq in 0..5 {
        send_until_taken(&mut cs[0], 1, 0, &[seq, 0, 0, 0, 0]);
    }
    cm5_write(&mut cs[0], false, com_send_first(0, 5, 1), 0);
    assert_eq!(
        cm5_read(&mut cs[0], false, dr_status) & (1 << 6),
        0,
        "pending"
    );
    clear_causes(&mut cs[0]);
    cm5_write(&mut cs[0], false, com_send_first(0, 5, 1), 0);
    assert_ne!(
        bus_errors(&mut cs[0]),
        0,
        "network-done while one is pending"
    );
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(
        cm5_read(&mut cs[0], false, dr_status) & (1 << 6),
        0,
        "NI 1 not yet"
    );
    cm5_write(&mut cs[1], false, com_send_first(0, 5, 1), 0);
    std::thread::sleep(Duration::from_millis(50));
    for c in &mut cs {
        assert_eq!(
            cm5_read(c, false, dr_status) & (1 << 6),
            0,
            "a message is still on its way"
        );
    }
    // NI 1 reads one: the last one arrives, and network-done completes everywhere.
    assert_eq!(receive(&mut cs[1]).1[0], 0);
    for c in &mut cs {
        poll_until("network-done never completed", || {
            cm5_read(c, false, dr_status) & (1 << 6) != 0
        });
    }
    // Nothing entered the COM receive FIFO; the messages are there to read, in order.
    assert_eq!(cm5_read(&mut cs[0], false, COM_STATUS) & status::REC_OK, 0);
    for seq in 1..5 {
        assert_eq!(receive(&mut cs[1]).1[0], seq);
    }
}

const BC_STATUS: u32 = cm5::BC_BASE + iface::STATUS;
const BC_PRIVATE: u32 = cm5::BC_BASE + iface::PRIVATE;
const BC_CONTROL: u32 = cm5::BC_BASE + iface::CONTROL;
const BC_SEND: u32 = cm5::BC_BASE + iface::SEND;
const BC_RECV: u32 = cm5::BC_BASE + iface::RECV;

/// BC (`fifo` 3) or SBC (4) `send_first` (App. A.3, §4.1.4): aux = length[3:0].
fn bc_send_first(fifo: u32, len: u32) -> u32 {
    (fifo << cm5::SF_FIFO_OFFSET) + (len << cm5::AUXILIARY_START_P)
}

/// §4.1.3: write the whole message, check send_ok.
fn broadcast(c: &mut Client, words: &[u32]) -> bool {
    cm5_write(
        c,
        false,
        bc_send_first(cm5::fifo::USER_BC, words.len() as u32),
        words[0],
    );
    for &w in &words[1..] {
        cm5_write(c, false, BC_SEND, w);
    }
    cm5_read(c, false, BC_STATUS) & status::SEND_OK != 0
}

/// Until the sender's BC send FIFO is empty: every receiver has the message (§4.1.2).
fn wait_sent(c: &mut Client) {
    poll_until("the broadcast never left", || {
        cm5_read(c, false, BC_STATUS) & status::SEND_EMPTY != 0
    });
}

/// §4.1.9's BC_receive: per word, wait for rec_ok, then read.
fn bc_receive(c: &mut Client, n: usize) -> Vec<u32> {
    (0..n)
        .map(|_| {
            poll_until("no broadcast word", || {
                cm5_read(c, false, BC_STATUS) & status::REC_OK != 0
            });
            cm5_read(c, false, BC_RECV)
        })
        .collect()
}

/// What the OS does before user broadcasts (§4.1.8, `CMNA_participate_in(NI_BC_SEND_ENABLE)`):
/// unlock and enable sending; and reception unless `abstain`.
fn join_broadcast(c: &mut Client, abstain: bool) {
    cm5_write(c, true, BC_PRIVATE, private::SEND_ENABLE);
    cm5_write(c, false, BC_CONTROL, abstain as u32);
}

/// §4.1.2, §4.1.3, §4.1.7, §4.1.8: a broadcast reaches every non-abstaining member, the
/// sender included, words in order; sending needs send_enable; lengths are 1..=4; the
/// supervisor interface is the supervisor's alone and independent of the user one.
#[test]
fn broadcasts_reach_every_receiver_including_the_sender() {
    let (d, mut cs) = nis(3);
    clear_causes(&mut cs[0]);
    cm5_write(&mut cs[0], true, BC_PRIVATE, 0); // unlocked, send_enable 0 (CMOST's default)
    broadcast(&mut cs[0], &[1]);
    assert_ne!(bus_errors(&mut cs[0]), 0, "send_enable 0");
    join_broadcast(&mut cs[0], false);
    join_broadcast(&mut cs[1], false);
    join_broadcast(&mut cs[2], true);
    clear_causes(&mut cs[0]);
    cm5_write(&mut cs[0], false, bc_send_first(cm5::fifo::USER_BC, 5), 1);
    assert_ne!(bus_errors(&mut cs[0]), 0, "5 words");
    clear_causes(&mut cs[0]);
    cm5_write(
        &mut cs[0],
        false,
        bc_send_first(cm5::fifo::USER_BC, 0x11),
        1,
    );
    assert_ne!(bus_errors(&mut cs[0]), 0, "aux bits above length");
    clear_causes(&mut cs[0]);
    assert!(broadcast(&mut cs[0], &[0xA, 0xB, 0xC]), "send_ok");
    wait_sent(&mut cs[0]);
    assert_eq!(bc_receive(&mut cs[0], 3), vec![0xA, 0xB, 0xC], "the sender");
    assert_eq!(bc_receive(&mut cs[1], 3), vec![0xA, 0xB, 0xC]);
    assert_eq!(
        cm5_read(&mut cs[2], false, BC_STATUS) & status::REC_OK,
        0,
        "an abstainer receives nothing"
    );
    assert_eq!(bus_errors(&mut cs[0]) | bus_errors(&mut cs[1]), 0);
    assert_eq!(d.counter(0, "cm5_bc_sends"), 1);
    assert_eq!(d.counter(1, "cm5_bc_recvs"), 1);
    assert_eq!(d.counter(2, "cm5_bc_recvs"), 0);
    // SBC: a user-window send_first is a Bus Error; the supervisor's reaches SBC receivers.
    cm5_write(
        &mut cs[1],
        false,
        bc_send_first(cm5::fifo::SUPERVISOR_BC, 1),
        9,
    );
    assert_ne!(bus_errors(&mut cs[1]), 0, "SBC from the user window");
    let sbc = cm5::SBC_BASE;
    for c in &mut cs {
        cm5_write(c, true, sbc + iface::PRIVATE, private::SEND_ENABLE);
    }
    cm5_write(&mut cs[2], true, sbc + iface::CONTROL, 0);
    cm5_write(
        &mut cs[1],
        true,
        bc_send_first(cm5::fifo::SUPERVISOR_BC, 2),
        7,
    );
    cm5_write(&mut cs[1], true, sbc + iface::SEND, 8);
    poll_until("no SBC arrival", || {
        cm5_read(&mut cs[2], true, sbc + iface::STATUS) & status::REC_OK != 0
    });
    assert_eq!(cm5_read(&mut cs[2], true, sbc + iface::RECV), 7);
    assert_eq!(cm5_read(&mut cs[2], true, sbc + iface::RECV), 8);
    assert_eq!(
        cm5_read(&mut cs[1], false, BC_STATUS) & status::REC_OK,
        0,
        "SBC words never show on BC"
    );
}

/// §4.1.2, §4.1.6: arrivals are concatenated into one receive "message" whose length
/// freezes once the receiver looks at it; later words form the next one, order kept.
#[test]
fn broadcast_arrivals_concatenate_until_the_receiver_looks() {
    let (_d, mut cs) = nis(2);
    join_broadcast(&mut cs[0], true);
    join_broadcast(&mut cs[1], false);
    broadcast(&mut cs[0], &[1, 2]);
    broadcast(&mut cs[0], &[3]);
    wait_sent(&mut cs[0]);
    let left = |c: &mut Client| (cm5_read(c, false, BC_STATUS) >> 7) & 0x7F;
    assert_eq!(left(&mut cs[1]), 3, "two arrivals, one message");
    broadcast(&mut cs[0], &[4, 5]);
    wait_sent(&mut cs[0]);
    assert_eq!(left(&mut cs[1]), 3, "frozen once looked at");
    assert_eq!(bc_receive(&mut cs[1], 3), vec![1, 2, 3]);
    assert_eq!(left(&mut cs[1]), 2, "the next message");
    assert_eq!(bc_receive(&mut cs[1], 2), vec![4, 5]);
    assert_eq!(cm5_read(&mut cs[1], false, BC_STATUS) & status::REC_OK, 0);
    clear_causes(&mut cs[1]);
    cm5_read(&mut cs[1], false, BC_RECV);
    assert_ne!(bus_errors(&mut cs[1]), 0, "recv with rec_ok 0");
}

/// §4.1.2 usage note: a broadcast stays in its sender's FIFO until every receiver has it;
/// B.3.5: a second broadcaster meanwhile is a collision on every member; while it is set
/// nothing is broadcast, and clearing it empties the broadcast send FIFOs.
#[test]
fn a_full_receiver_holds_broadcasts_and_a_second_broadcaster_collides() {
    let (d, mut cs) = nis(3);
    join_broadcast(&mut cs[0], true);
    join_broadcast(&mut cs[1], false);
    join_broadcast(&mut cs[2], true);
    // Fill NI 1's receive FIFO (16 words) without reading.
    for k in 0..4u32 {
        assert!(broadcast(
            &mut cs[0],
            &[4 * k, 4 * k + 1, 4 * k + 2, 4 * k + 3]
        ));
        wait_sent(&mut cs[0]);
    }
    assert!(broadcast(&mut cs[0], &[100]));
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(
        cm5_read(&mut cs[0], false, BC_STATUS) & status::SEND_EMPTY,
        0,
        "held until NI 1 has room"
    );
    for c in &mut cs {
        clear_causes(c);
    }
    assert!(broadcast(&mut cs[2], &[200]));
    for c in &mut cs {
        poll_until("no collision", || {
            cm5_read(c, true, cm5::NI_INTERRUPT_CAUSE) & cause::BC_OR_COM_COLLISION != 0
        });
    }
    // Room at NI 1, but the collision stops everything.
    assert_eq!(
        bc_receive(&mut cs[1], 16),
        (0..16).collect::<Vec<u32>>(),
        "every word, in order"
    );
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(cm5_read(&mut cs[1], false, BC_STATUS) & status::REC_OK, 0);
    for c in &mut cs {
        cm5_write(c, true, cm5::NI_INTERRUPT_CLEAR, cause::BC_OR_COM_COLLISION);
    }
    for c in [0, 2] {
        assert_ne!(
            cm5_read(&mut cs[c], false, BC_STATUS) & status::SEND_EMPTY,
            0,
            "clearing emptied NI {c}'s send FIFO"
        );
    }
    assert!(broadcast(&mut cs[2], &[300]));
    assert_eq!(bc_receive(&mut cs[1], 1), vec![300], "broadcasts go on");
    assert_eq!(d.counter(1, "cm5_bc_recvs"), 5);
}

/// §5.5, B.3.5: a broadcast interrupt reaches every other member with interrupt_rec_enable
/// as the causes of its colours; interrupt_send_ok is 0 until it is delivered, and a write
/// meanwhile is a Bus Error; two senders collide, and clearing the collision ends both.
/// §4.3.3: the supervisor async global ORs over the partition with its own Green cause.
#[test]
fn broadcast_interrupts_and_the_supervisor_global() {
    let (d, mut cs) = nis(3);
    let hp = |c: &mut Client| cm5_read(c, true, cm5::NI_HODGEPODGE);
    for c in [1, 2] {
        let v = hp(&mut cs[c]) | hodgepodge::INTERRUPT_REC_ENABLE;
        cm5_write(&mut cs[c], true, cm5::NI_HODGEPODGE, v);
    }
    let v = hp(&mut cs[2]) & !hodgepodge::INTERRUPT_REC_ENABLE;
    cm5_write(&mut cs[2], true, cm5::NI_HODGEPODGE, v);
    for c in &mut cs {
        clear_causes(c);
        cm5_write(c, true, cm5::NI_INTERRUPT_CLEAR_GREEN, green::ALL);
    }
    assert_ne!(hp(&mut cs[0]) & hodgepodge::INTERRUPT_SEND_OK, 0);
    cm5_write(&mut cs[0], true, cm5::NI_INTERRUPT_SEND, 8 | 1);
    poll_until("never delivered", || {
        hp(&mut cs[0]) & hodgepodge::INTERRUPT_SEND_OK != 0
    });
    let c1 = cm5_read(&mut cs[1], true, cm5::NI_INTERRUPT_CAUSE);
    assert_ne!(c1 & cause::BC_INTERRUPT_RED, 0);
    assert_eq!(
        c1 & (cause::BC_INTERRUPT_ORANGE | cause::BC_INTERRUPT_YELLOW),
        0
    );
    assert_ne!(
        cm5_read(&mut cs[1], true, cm5::NI_INTERRUPT_CAUSE_GREEN) & green::BC_INTERRUPT_GREEN,
        0
    );
    for c in [0, 2] {
        assert_eq!(
            cm5_read(&mut cs[c], true, cm5::NI_INTERRUPT_CAUSE) & cause::BC_INTERRUPT_RED,
            0,
            "NI {c}: the sender, or interrupt_rec_enable 0"
        );
    }
    assert_eq!(d.counter(0, "cm5_bc_interrupts"), 1);
    // Hold broadcasts with a collision forced on NI 2 (interrupt_set, §5.3).
    cm5_write(
        &mut cs[2],
        true,
        cm5::NI_INTERRUPT_SET,
        cause::BC_OR_COM_COLLISION,
    );
    cm5_write(&mut cs[0], true, cm5::NI_INTERRUPT_SEND, 4);
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(hp(&mut cs[0]) & hodgepodge::INTERRUPT_SEND_OK, 0, "held");
    clear_causes(&mut cs[0]);
    cm5_write(&mut cs[0], true, cm5::NI_INTERRUPT_SEND, 4);
    assert_ne!(
        bus_errors(&mut cs[0]),
        0,
        "a second one while the first is pending"
    );
    cm5_write(&mut cs[1], true, cm5::NI_INTERRUPT_SEND, 2);
    cm5_write(
        &mut cs[2],
        true,
        cm5::NI_INTERRUPT_CLEAR,
        cause::BC_OR_COM_COLLISION,
    );
    for c in &mut cs {
        poll_until("two senders never collided", || {
            cm5_read(c, true, cm5::NI_INTERRUPT_CAUSE) & cause::BC_OR_COM_COLLISION != 0
        });
    }
    for c in &mut cs {
        cm5_write(c, true, cm5::NI_INTERRUPT_CLEAR, cause::BC_OR_COM_COLLISION);
    }
    for c in &mut cs {
        assert_ne!(
            hp(c) & hodgepodge::INTERRUPT_SEND_OK,
            0,
            "cleared: send_ok again"
        );
        assert_eq!(
            cm5_read(c, true, cm5::NI_INTERRUPT_CAUSE)
                & (cause::BC_INTERRUPT_ORANGE | cause::BC_INTERRUPT_YELLOW),
            0,
            "colliding interrupts are not delivered"
        );
    }
    // Supervisor async global.
    let v = hp(&mut cs[2]) | hodgepodge::SUPERVISOR_GLOBAL_REC_IE;
    cm5_write(&mut cs[2], true, cm5::NI_HODGEPODGE, v);
    cm5_write(&mut cs[1], true, cm5::NI_ASYNC_SUP_GLOBAL, 1);
    for c in &mut cs {
        poll_until("supervisor global_rec", || {
            cm5_read(c, true, cm5::NI_ASYNC_SUP_GLOBAL) & 2 != 0
        });
        assert_eq!(
            cm5_read(c, false, cm5::NI_ASYNC_GLOBAL) & 2,
            0,
            "the user global is separate"
        );
    }
    assert_ne!(
        cm5_read(&mut cs[2], true, cm5::NI_INTERRUPT_CAUSE_GREEN) & green::SUPERVISOR_GLOBAL_REC,
        0
    );
    clear_causes(&mut cs[0]);
    cm5_read(&mut cs[0], false, cm5::NI_ASYNC_SUP_GLOBAL);
    assert_ne!(bus_errors(&mut cs[0]), 0, "supervisor only");
}

/// §4.2.8: segmented scans. `ni_scan_start` is latched with a member's first word, so a
/// member may clear it right after sending; a flagged member begins a segment upward
/// (forward) or is the top of one running downward (backward).
#[test]
fn segmented_scans_latch_scan_start_with_the_first_word() {
    let (_d, mut cs) = nis(4);
    let values = [1, 2, 4, 8];
    let scan = |cs: &mut Vec<Client>, pattern: u32, flagged: usize| {
        for (r, c) in cs.iter_mut().enumerate() {
            cm5_write(c, false, cm5::NI_SCAN_START, (r == flagged) as u32);
            assert!(combine_send(c, pattern, 1, &[values[r]]));
            cm5_write(c, false, cm5::NI_SCAN_START, 0);
        }
        cs.iter_mut()
            .map(|c| combine_result(c)[0])
            .collect::<Vec<u32>>()
    };
    assert_eq!(
        scan(&mut cs, 2, 2),
        vec![0, 1, 0, 4],
        "forward, segment from NI 2"
    );
    assert_eq!(
        scan(&mut cs, 1, 1),
        vec![2, 0, 8, 0],
        "backward, NI 1 tops a segment"
    );
    // Reductions ignore segments.
    for (r, c) in cs.iter_mut().enumerate() {
        cm5_write(c, false, cm5::NI_SCAN_START, (r == 1) as u32);
        combine_send(c, 3, 1, &[values[r]]);
    }
    for c in &mut cs {
        assert_eq!(combine_result(c), vec![15]);
    }
}

/// B.3.5, §4.2.11, §6.4: two different combines in one round collide — bc_or_com_collision
/// on every member, no result; combines stay refused until a flush (`ni_com_flush_send` from
/// every member, `flush_complete` 0 until all did) resets the combine hardware.
#[test]
fn colliding_combines_need_a_flush() {
    let (d, mut cs) = nis(2);
    assert!(combine_send(&mut cs[0], 3, 1, &[1]), "ADD");
    assert!(
        combine_send(&mut cs[1], 3, 0, &[1]),
        "OR: a different combine"
    );
    for c in &mut cs {
        poll_until("no collision", || {
            cm5_read(c, true, cm5::NI_INTERRUPT_CAUSE) & cause::BC_OR_COM_COLLISION != 0
        });
        assert_eq!(
            cm5_read(c, true, cm5::NI_INTERRUPT_CAUSE) & cause::CN_HARD_ERROR,
            0,
            "a collision is its own cause"
        );
        cm5_write(c, true, cm5::NI_INTERRUPT_CLEAR, cause::BC_OR_COM_COLLISION);
    }
    assert_eq!(d.counter(0, "coll_failed_registers"), 1);
    let hp = |c: &mut Client| cm5_read(c, true, cm5::NI_HODGEPODGE) & hodgepodge::FLUSH_COMPLETE;
    cm5_write(&mut cs[0], true, cm5::NI_COM_FLUSH_SEND, 1);
    assert_eq!(hp(&mut cs[0]), 0, "flush pending");
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(hp(&mut cs[0]), 0, "until every member flushed");
    clear_causes(&mut cs[0]);
    cm5_write(&mut cs[0], true, cm5::NI_COM_FLUSH_SEND, 1);
    assert_ne!(
        bus_errors(&mut cs[0]),
        0,
        "a second flush while one is pending"
    );
    cm5_write(&mut cs[1], true, cm5::NI_COM_FLUSH_SEND, 1);
    for c in &mut cs {
        poll_until("flush never completed", || hp(c) != 0);
    }
    for (r, c) in cs.iter_mut().enumerate() {
        assert!(combine_send(c, 3, 1, &[r as u32 + 5]));
    }
    for c in &mut cs {
        assert_eq!(combine_result(c), vec![11], "combines work again");
    }
}
