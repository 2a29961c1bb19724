//! The CM-5 register file against hostile and careless drivers (issue 11, "Bad input"):
//! garbage through every register at every width, FIFOs overfilled and read empty, and
//! members that vanish in the middle of a message, a broadcast or a combine. What must hold:
//! errors and counters, the daemon alive, the other members' traffic unharmed, and no
//! partition left wedged once the member is back.

mod common;

use std::time::{Duration, Instant};

use common::cm5_driver::*;
use common::*;
use ni_abi::cm5::{self, cause, iface, private, status};
use ni_abi::pci;
use vfio_user::Client;

/// Read LDR and RDR messages until one with `tag` comes: others (a hostile peer's) are
/// drained and returned in the count.
fn receive_tag(c: &mut Client, tag: u32) -> (Vec<u32>, usize) {
    let t = Instant::now();
    let mut others = 0;
    loop {
        for base in [cm5::LDR_BASE, cm5::RDR_BASE] {
            let st = cm5_read(c, false, base + iface::STATUS);
            if st & status::REC_OK == 0 {
                continue;
            }
            let len = (st >> 11) & 0xF;
            let words: Vec<u32> = (0..len)
                .map(|_| cm5_read(c, false, base + iface::RECV))
                .collect();
            if (st >> 15) & 0xF == tag {
                return (words, others);
            }
            others += 1;
        }
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "no message with tag {tag}"
        );
    }
}

/// The driver of NI `i` goes away (its NI resets, §6.10) and a new one connects.
fn reconnect(d: &Daemon, cs: &mut Vec<Client>, i: usize) {
    drop(cs.remove(i));
    cs.insert(i, d.client(i as u32));
}

/// Every register of both windows, at widths 1, 2, 4 and 8, written with garbage and read
/// back; then thousands of accesses at random offsets of BAR2 (send_first areas included).
/// Widths other than 4 and 8 are refused with an error reply; everything else lands as the
/// handbook says or is a Bus Error. The daemon lives, the other NIs' messages pass, and once
/// the hostile driver is gone its NI joins a combine again with a fresh driver.
#[test]
fn garbage_through_every_register_and_width_harms_nobody() {
    let mut d = Daemon::start(3);
    let mut b = d.client(1);
    let mut c = d.client(2);
    ready(&mut b, 3);
    ready(&mut c, 3);
    let mut raw = Raw::connect(&d.sock(0));
    assert!(!raw.region_write(pci::CONFIG_REGION, 4, &[6, 0]).is_error());
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut refused = 0;
    for window in [0, cm5::SUPERVISOR] {
        for r in cm5::REGS.iter() {
            for at in (0..r.width.max(4) as u64).step_by(4) {
                for width in [1usize, 2, 4, 8] {
                    for v in [0u64, u64::MAX, 0xDEAD_BEEF_0BAD_F00D, rng.next()] {
                        let off = window + r.offset as u64 + at;
                        let w = raw.region_write(pci::BAR2_REGION, off, &v.to_le_bytes()[..width]);
                        let rd = raw.region_read(pci::BAR2_REGION, off, width as u32);
                        assert_eq!(w.is_error(), !matches!(width, 4 | 8), "{} w{width}", r.name);
                        assert_eq!(
                            rd.is_error(),
                            !matches!(width, 4 | 8),
                            "{} r{width}",
                            r.name
                        );
                        refused += w.is_error() as u32 + rd.is_error() as u32;
                    }
                }
            }
        }
    }
    assert!(refused > 0);
    for _ in 0..6000 {
        let v = rng.next();
        let width = if v & 1 == 0 { 4 } else { 8 };
        let off = ((v >> 8) % (cm5::BAR2_SIZE - 8)) & !3;
        if v & 2 == 0 {
            let r = raw.region_write(pci::BAR2_REGION, off, &rng.next().to_le_bytes()[..width]);
            assert!(!r.is_error(), "a write at {off:#x}");
        } else {
            let r = raw.region_read(pci::BAR2_REGION, off, width as u32);
            assert!(!r.is_error(), "a read at {off:#x}");
            assert_eq!(r.body.len() - 16, width, "the data of a read at {off:#x}");
        }
    }
    assert!(d.alive(), "the daemon survived the garbage");
    assert!(d.counter(0, "bus_errors") > 0, "Bus Errors counted");
    // The other NIs' traffic is unharmed (whatever the garbage sent them is drained).
    send_until_taken(&mut b, 2, 9, &[1, 2, 3]);
    let (words, _) = receive_tag(&mut c, 9);
    assert_eq!(words, vec![1, 2, 3]);
    send_until_taken(&mut c, 1, 9, &[4]);
    assert_eq!(receive_tag(&mut b, 9).0, vec![4]);
    // The hostile driver leaves; a fresh one on its NI takes part in a combine with B and C.
    drop(raw);
    let mut a = d.client(0);
    ready(&mut a, 3);
    // Everyone takes part before anyone combines (a member's first control event makes
    // it one the partition waits for).
    for x in [&mut a, &mut b, &mut c] {
        join_control(x);
    }
    for (x, v) in [(&mut a, 1), (&mut b, 2), (&mut c, 3)] {
        combine_send(x, 3, 1, &[v]);
    }
    for x in [&mut a, &mut b, &mut c] {
        assert_eq!(
            combine_result(x),
            vec![6],
            "a combine over the whole partition"
        );
    }
    assert!(d.alive());
}

/// §2.4, §2.5: a receive FIFO overfilled by a sender that ignores send_ok, and recv read
/// past its end: messages refused (send_ok 0, counted), Bus Errors, nothing lost of what
/// was taken.
#[test]
fn overfilled_and_overread_fifos() {
    let d = Daemon::start(2);
    let mut a = d.client(0);
    let mut b = d.client(1);
    ready(&mut a, 2);
    ready(&mut b, 2);
    // 40 five-word messages without looking at send_ok: the FIFOs hold a few.
    let mut taken = Vec::new();
    for k in 0..40u32 {
        cm5_write(&mut a, false, ldr_send_first(false, 1, 5), 1);
        for w in 0..5 {
            cm5_write(&mut a, false, cm5::LDR_BASE + iface::SEND, k * 10 + w);
        }
        if cm5_read(&mut a, false, cm5::LDR_BASE + iface::STATUS) & status::SEND_OK != 0 {
            taken.push(k);
        }
    }
    assert!(taken.len() < 40, "some were refused");
    assert!(d.counter(0, "cm5_discarded_sends") >= (40 - taken.len()) as u64);
    // Every taken message arrives, in order, whole.
    for &k in &taken {
        let (words, others) = receive_tag(&mut b, 1);
        assert_eq!(others, 0);
        assert_eq!(words, (0..5).map(|w| k * 10 + w).collect::<Vec<u32>>());
    }
    // Reading on past the end: Bus Errors, all-ones, the NI still usable.
    let before = d.counter(1, "bus_errors");
    for _ in 0..100 {
        assert_eq!(
            cm5_read(&mut b, false, cm5::LDR_BASE + iface::RECV),
            u32::MAX
        );
    }
    assert_eq!(d.counter(1, "bus_errors"), before + 100);
    send_until_taken(&mut a, 1, 2, &[77]);
    assert_eq!(receive_tag(&mut b, 2).0, vec![77]);
}

/// Members that vanish: halfway through composing a message (the rest never comes), while a
/// broadcast waits for room in their receive FIFO (§4.1.2), and in the middle of a combine
/// round. Each time the others go on: the broadcast goes to those still there, the combine
/// fails with `cn hard error` (B.1.3) instead of never answering, and once the member is
/// back the partition combines again.
#[test]
fn members_vanishing_mid_message_mid_broadcast_and_mid_combine() {
    let d = Daemon::start(3);
    let mut cs: Vec<Client> = (0..3).map(|i| d.client(i)).collect();
    for c in &mut cs {
        ready(c, 3);
    }
    // Half a message, then gone.
    cm5_write(&mut cs[0], false, ldr_send_first(false, 3, 5), 1);
    cm5_write(&mut cs[0], false, cm5::LDR_BASE + iface::SEND, 0xBAD);
    reconnect(&d, &mut cs, 0);
    ready(&mut cs[0], 3);
    send_until_taken(&mut cs[0], 1, 3, &[5, 6]);
    assert_eq!(
        receive_tag(&mut cs[1], 3),
        (vec![5, 6], 0),
        "no trace of the half message"
    );
    // A broadcast held for NI 2's full receive FIFO; NI 2 vanishes; it goes on.
    let bc_private = cm5::BC_BASE + iface::PRIVATE;
    let bc_status = cm5::BC_BASE + iface::STATUS;
    for (i, c) in cs.iter_mut().enumerate() {
        cm5_write(c, true, bc_private, private::SEND_ENABLE);
        cm5_write(c, false, cm5::BC_BASE + iface::CONTROL, (i != 2) as u32);
    }
    let bc_first =
        |len: u32| (cm5::fifo::USER_BC << cm5::SF_FIFO_OFFSET) + (len << cm5::AUXILIARY_START_P);
    for k in 0..5u32 {
        cm5_write(&mut cs[0], false, bc_first(4), k);
        for w in 1..4 {
            cm5_write(&mut cs[0], false, cm5::BC_BASE + iface::SEND, w);
        }
        if k < 4 {
            poll_until(&format!("broadcast {k}"), || {
                cm5_read(&mut cs[0], false, bc_status) & status::SEND_EMPTY != 0
            });
        }
    }
    std::thread::sleep(Duration::from_millis(30));
    assert_eq!(
        cm5_read(&mut cs[0], false, bc_status) & status::SEND_EMPTY,
        0,
        "the fifth waits for NI 2"
    );
    reconnect(&d, &mut cs, 2);
    poll_until(
        "the broadcast stayed wedged after its receiver left",
        || cm5_read(&mut cs[0], false, bc_status) & status::SEND_EMPTY != 0,
    );
    // A combine round that loses a member fails for the others with cn hard error.
    ready(&mut cs[2], 3);
    for c in cs.iter_mut() {
        join_control(c);
        cm5_write(
            c,
            true,
            cm5::NI_INTERRUPT_CLEAR,
            cause::ALL & !cause::BC_OR_COM_COLLISION,
        );
    }
    combine_send(&mut cs[0], 3, 1, &[1]);
    combine_send(&mut cs[1], 3, 1, &[2]);
    std::thread::sleep(Duration::from_millis(30));
    reconnect(&d, &mut cs, 2);
    for c in cs.iter_mut().take(2) {
        poll_until("the failed combine was never reported", || {
            cm5_read(c, true, cm5::NI_INTERRUPT_CAUSE) & cause::CN_HARD_ERROR != 0
        });
        assert_eq!(
            cm5_read(c, false, cm5::COM_BASE + iface::STATUS) & status::REC_OK,
            0,
            "no result"
        );
    }
    assert!(d.counter(0, "coll_failed_registers") >= 1);
    // Back: the partition combines again.
    ready(&mut cs[2], 3);
    for c in cs.iter_mut() {
        join_control(c);
    }
    for (i, c) in cs.iter_mut().enumerate() {
        combine_send(c, 3, 1, &[10 + i as u32]);
    }
    for c in cs.iter_mut() {
        assert_eq!(combine_result(c), vec![33]);
    }
}
