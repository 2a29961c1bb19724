//! Issue 17: the register-level doors cross hosts. Until now a T3E, MLINK, CM-5 or Lanai
//! operation aimed at an NI of another host met that NI's stand-in and went nowhere; now it
//! is carried to the host that serves the NI and answered from there, with the same
//! semantics as between two NIs of one daemon (device/abi/links.md, "What crosses, and
//! how": the register-level doors).
//!
//! Two daemons form one fabric over TCP on 127.0.0.1 (`Daemon::start_fabric`): host a
//! serves NIs 0 and 1, host b NIs 2 and 3; with no `[[partition]]` every NI is in partition
//! "default" with rank = NI number. NI 0 drives each door through BAR0/BAR2 alone, as the
//! register tests do (t3e.rs, mlink.rs, cm5.rs, lanai.rs and their drivers in common/),
//! against rank 1 (its own host: the control) and rank 2 (host b). Every scenario runs for
//! both and asserts the same values, ERS codes, status bytes and counters for both: across
//! hosts is not another semantics. The last test kills host b's daemon: what is aimed at it
//! fails, promptly, instead of hanging.

mod common;

use std::net::TcpListener;
use std::time::{Duration, Instant};

use common::mlink_driver::*;
use common::t3e_driver::*;
use common::{cm5_driver as cm5d, lanai_driver as lan, *};
use ni_abi::cm5;
use ni_abi::fastpath::{ctrl, mqcw, regs};
use ni_abi::lanai::{self, isr, port_reg, rpd as rd, rpl_config as rc};
use ni_abi::mlink::{command as cmd, link as ml, reason, rx, status, status_byte0 as s0};
use ni_abi::pci;
use ni_abi::t3e::{self, ers, gva, op, seg, Error};
use vfio_user::Client;

/// NIs per host: host a serves NIs 0 and 1, host b NIs 2 and 3.
const NIS: u32 = 2;
/// The rank each scenario runs against on NI 0's own host (the control), and on host b.
const LOCAL: u32 = 1;
const ACROSS: u32 = 2;
const TARGETS: [u32; 2] = [LOCAL, ACROSS];
/// How long the hosts may take to link, and to learn of a client on the other host.
const SETTLE: Duration = Duration::from_secs(10);
/// The E register and the MLINK link the reachability probes use (the scenarios use others).
const PROBE_E: u32 = 511;
const PROBE_LINK: u32 = 1;

// ---- the fabric: two hosts ----

/// Two distinct free ports: both held until both are chosen, so the second is never the first
/// given out again.
fn free_ports() -> (u16, u16) {
    let a = TcpListener::bind("127.0.0.1:0").expect("a free TCP port on 127.0.0.1");
    let b = TcpListener::bind("127.0.0.1:0").expect("a free TCP port on 127.0.0.1");
    let port = |l: &TcpListener| l.local_addr().expect("a bound port").port();
    (port(&a), port(&b))
}

/// Whether daemon `d` sees host `name` linked (`ni-ctl hosts`).
fn up(d: &Daemon, name: &str) -> bool {
    let h = d.control(r#"{"version":1,"request":"hosts"}"#);
    h["hosts"]
        .as_array()
        .is_some_and(|l| l.iter().any(|x| x["name"] == name && x["state"] == "up"))
}

/// The end of a daemon's log, for failure messages.
fn tail(d: &Daemon) -> String {
    let log = std::fs::read_to_string(d.dir.with_extension("log")).unwrap_or_default();
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// Rank `rank` and the host that serves it, for messages.
fn who(rank: u32) -> String {
    format!("rank {rank} (host {})", if rank < NIS { "a" } else { "b" })
}

/// Host a (NIs 0, 1) and host b (NIs 2, 3) of one fabric, linked both ways.
struct Fabric {
    a: Daemon,
    b: Daemon,
}

impl Fabric {
    fn start() -> Fabric {
        Fabric::start_with("")
    }

    /// With `top` (top-level keys of the description, e.g. a torus) before the hosts.
    fn start_with(top: &str) -> Fabric {
        let (pa, pb) = free_ports();
        let desc = format!(
            "{top}[[host]]\nname = \"a\"\nlink = \"127.0.0.1:{pa}\"\nnis = {NIS}\n\n\
             [[host]]\nname = \"b\"\nlink = \"127.0.0.1:{pb}\"\nnis = {NIS}\n"
        );
        let f = Fabric {
            a: Daemon::start_fabric(&desc, "a"),
            b: Daemon::start_fabric(&desc, "b"),
        };
        f.poll("hosts a and b never linked", || {
            up(&f.a, "b") && up(&f.b, "a")
        });
        f
    }

    /// The daemon serving NI `ni`.
    fn host(&self, ni: u32) -> &Daemon {
        if ni < NIS {
            &self.a
        } else {
            &self.b
        }
    }

    /// NI `ni`'s counter `name`, asked of the daemon that serves it.
    fn counter(&self, ni: u32, name: &str) -> u64 {
        self.host(ni).counter(ni, name)
    }

    /// A T3E PE on NI `ni`: memory mapped, segment [`SEG`] over all of it.
    fn pe(&self, ni: u32) -> Pe {
        Pe::attach(self.host(ni), ni)
    }

    /// Poll `done` every 20 ms until it holds; fail with `what` and both logs after
    /// [`SETTLE`].
    fn poll(&self, what: &str, mut done: impl FnMut() -> bool) {
        let t = Instant::now();
        while !done() {
            assert!(
                t.elapsed() < SETTLE,
                "{what} within {SETTLE:?}\n--- host a ---\n{}\n--- host b ---\n{}",
                tail(&self.a),
                tail(&self.b)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Wait until NI `ni`'s counter `name` reaches `want` (5 s), then check it is exactly that.
#[track_caller]
fn counter_is(f: &Fabric, ni: u32, name: &str, want: u64) {
    poll_until(&format!("NI {ni}: {name} never reached {want}"), || {
        f.counter(ni, name) >= want
    });
    assert_eq!(f.counter(ni, name), want, "NI {ni}: {name}");
}

/// `len` bytes of a pattern that depends on `seed`, with no period a misplaced copy could
/// hide behind.
fn bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut r = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    (0..len.div_ceil(8))
        .flat_map(|_| r.next().to_le_bytes())
        .take(len)
        .collect()
}

/// Byte-for-byte equality, reporting the first difference.
#[track_caller]
fn same(got: &[u8], want: &[u8], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    if let Some(i) = got.iter().zip(want).position(|(g, w)| g != w) {
        let end = (i + 16).min(got.len());
        panic!(
            "{what}: first difference at byte {i}: got {:02x?}, want {:02x?}",
            &got[i..end],
            &want[i..end]
        );
    }
}

// ---- T3E (device/abi/t3e.md; common/t3e_driver.rs) ----

/// Issue `opc` on E register `e` to PE `pe` at `at` and wait for the answer, from whichever
/// host: until E[e] is no longer EMPTY (a GET's register stays EMPTY until the answer comes
/// back) and nothing is outstanding (a PUT's register stays FULL; PUT_COUNT falls). The
/// register's ERS code then.
fn answered(c: &mut Client, opc: u64, e: u32, pe: u32, at: u64) -> u64 {
    target(c, pe, at);
    issue(c, opc, e, 0);
    wait_not_empty(c, e);
    wait_idle(c);
    ers(c, e)
}

/// Wait until PE `pe` answers NI 0's GETs: a PE on host b is `PeerDown` until host a has
/// heard of its client.
fn t3e_reachable(f: &Fabric, c: &mut Client, pe: u32) {
    f.poll(&format!("PE {pe} never answered a GET"), || {
        target(c, pe, gva::make(SEG, 0));
        issue(c, op::GET, PROBE_E, 0);
        wait_not_empty(c, PROBE_E) == ers::FULL
    });
}

/// An atomic on the word at `at` of PE `pe` (`t`'s memory) with `operands` in E[MO], E[MO+1]:
/// (the old value E register 1 got, the word afterwards).
fn atomic(c: &mut Client, t: &Pe, pe: u32, at: u64, opc: u64, operands: &[u64]) -> (u64, u64) {
    const MO: u32 = 40;
    set_mo(c, MO);
    for (i, &v) in operands.iter().enumerate() {
        ereg_store(c, MO + i as u32, v);
    }
    assert_eq!(
        answered(c, opc, 1, pe, gva::make(SEG, at)),
        ers::FULL,
        "opcode {opc:#x} at PE {pe}: {:?}",
        cmd_error(c)
    );
    (ereg_load(c, 1), t.read64(at))
}

/// GET, PUT, PUT8, PUTV4 at strides 16 and -8, GETV8 and the six atomics of NI 0 against
/// PE `pe`, checked against `t`'s memory with the gaps untouched.
fn one_sided(f: &Fabric, a: &mut Pe, t: &Pe, pe: u32) {
    const D: u64 = 0x3000;
    const A: u64 = 0x4000;
    const MO: u32 = 40;
    let at = |off: u64| gva::make(SEG, D + off);
    // Each target's words differ: a GET answered by the wrong PE shows.
    let mark = (pe as u64) << 56;
    let failed = f.counter(0, "t3e_failed");
    let c = &mut a.c;

    t.write64(D, 0x1122_3344_5566_7788 ^ mark);
    assert_eq!(
        answered(c, op::GET, 5, pe, at(0)),
        ers::FULL,
        "GET from PE {pe}: {:?}",
        cmd_error(c)
    );
    assert_eq!(
        ereg_load(c, 5),
        0x1122_3344_5566_7788 ^ mark,
        "GET from PE {pe}"
    );

    ereg_store(c, 6, 0xFEED_FACE ^ mark);
    assert_eq!(
        answered(c, op::PUT, 6, pe, at(8)),
        ers::FULL,
        "PUT to PE {pe}"
    );
    assert_eq!(t.read64(D + 8), 0xFEED_FACE ^ mark, "PUT to PE {pe}");
    assert_eq!(t3e_read(c, t3e::PUT_COUNT), 0, "the PUT acknowledged");

    let p8: [u64; 8] = std::array::from_fn(|i| (0x8800 + i as u64) ^ mark);
    for (i, &w) in p8.iter().enumerate() {
        ereg_store(c, 8 + i as u32, w);
    }
    assert_eq!(
        answered(c, op::PUT8, 8, pe, at(0x100)),
        ers::FULL,
        "PUT8 to PE {pe}"
    );
    assert_eq!(t.words(D + 0x100, 8), p8, "PUT8 to PE {pe}");
    assert_eq!(
        t.read64(D + 0x140),
        0,
        "PUT8 to PE {pe}: eight words, no more"
    );

    // PUTV4 at a stride of 16 (E[MO] at issue): every other word.
    set_mo(c, MO);
    ereg_store(c, MO, 16);
    let v4: [u64; 4] = std::array::from_fn(|i| (0x4400 + i as u64) ^ mark);
    for (i, &w) in v4.iter().enumerate() {
        ereg_store(c, 4 + i as u32, w);
    }
    assert_eq!(
        answered(c, op::PUTV4, 4, pe, at(0x200)),
        ers::FULL,
        "PUTV4 to PE {pe}"
    );
    for (i, &w) in v4.iter().enumerate() {
        let off = D + 0x200 + 16 * i as u64;
        assert_eq!(t.read64(off), w, "PUTV4 to PE {pe}: word {i}");
        assert_eq!(
            t.read64(off + 8),
            0,
            "PUTV4 to PE {pe}: the gap after word {i}"
        );
    }
    // PUTV4 at a stride of -8: down from the GVA.
    ereg_store(c, MO, (-8i64) as u64);
    let w4: [u64; 4] = std::array::from_fn(|i| (0x4800 + i as u64) ^ mark);
    for (i, &w) in w4.iter().enumerate() {
        ereg_store(c, 12 + i as u32, w);
    }
    assert_eq!(
        answered(c, op::PUTV4, 12, pe, at(0x400)),
        ers::FULL,
        "PUTV4 -8 to PE {pe}"
    );
    for (i, &w) in w4.iter().enumerate() {
        assert_eq!(
            t.read64(D + 0x400 - 8 * i as u64),
            w,
            "PUTV4 -8 to PE {pe}: word {i}"
        );
    }
    assert_eq!(t.read64(D + 0x408), 0);
    assert_eq!(t.read64(D + 0x3E0), 0);

    // GETV8 at a stride of 8 reads the PUT8's words back.
    ereg_store(c, MO, 8);
    assert_eq!(
        answered(c, op::GETV8, 24, pe, at(0x100)),
        ers::FULL,
        "GETV8 from PE {pe}"
    );
    let got: Vec<u64> = (24..32).map(|e| ereg_load(c, e)).collect();
    assert_eq!(got, p8, "GETV8 from PE {pe}");

    // The atomics: the old value back, the word updated at the target.
    t.write64(A, 10);
    assert_eq!(atomic(c, t, pe, A, op::GET_INC, &[]), (10, 11));
    assert_eq!(atomic(c, t, pe, A, op::GET_ADD, &[5]), (11, 16));
    assert_eq!(
        atomic(c, t, pe, A, op::GET_ADD, &[u64::MAX]),
        (16, 15),
        "-1 wraps"
    );
    assert_eq!(atomic(c, t, pe, A, op::SWAP, &[100]), (15, 100));
    assert_eq!(
        atomic(c, t, pe, A, op::CSWAP, &[100, 200]),
        (100, 200),
        "match: swapped"
    );
    assert_eq!(
        atomic(c, t, pe, A, op::CSWAP, &[999, 300]),
        (200, 200),
        "no match"
    );
    assert_eq!(atomic(c, t, pe, A, op::GET_SET, &[0xF00]), (200, 0xFC8));
    assert_eq!(
        atomic(c, t, pe, A, op::GET_CLEAR, &[0x8F0]),
        (0xFC8, 0xFC8 & !0x8F0)
    );
    assert_eq!(t.read64(A + 8), 0, "one word only");

    assert_eq!(t3e_read(c, t3e::PUT_COUNT), 0);
    assert_eq!(t3e_read(c, t3e::OUTSTANDING), 0);
    assert_eq!(
        f.counter(0, "t3e_failed"),
        failed,
        "nothing failed against PE {pe}"
    );
}

/// SSD-T90 Table 2 (GET, PUT, PUT8, PUTV4, GETV8, GET_INC, GET_ADD, SWAP, CSWAP, GET_SET,
/// GET_CLEAR) and its PUT-counter note; HMM-148-0 p. 8 Table 2 (ERS codes): NI 0's one-sided
/// commands move the same words, leave the same gaps and give the same old values against PE
/// 2 on host b as against PE 1 beside it; the E register is EMPTY until the answer is back,
/// PUT_COUNT and OUTSTANDING return to 0, nothing counts in `t3e_failed`.
#[test]
fn t3e_gets_puts_vector_forms_and_atomics_cross_hosts_as_locally() {
    let f = Fabric::start();
    let mut a = Pe::attach(&f.a, 0);
    for pe in TARGETS {
        let t = f.pe(pe);
        t3e_reachable(&f, &mut a.c, pe);
        one_sided(&f, &mut a, &t, pe);
    }
}

/// Three SENDs into a queue of limit 3 and threshold 3 at PE `pe` (Tail 1), and the third
/// again once the receiver reset the queue; the threshold's interrupt on vector MQ.
fn message_queue(f: &Fabric, a: &mut Pe, t: &mut Pe, pe: u32) {
    const Q: u64 = 0x2000;
    let q = gva::make(SEG, Q);
    let bits = regs::MSG_ADDR_VALID | regs::MSG_MULTIPLE;
    let msg = |k: u64| -> [u64; 8] {
        let word = |i: usize| ((pe as u64) << 32) | (k << 8) | i as u64;
        std::array::from_fn(word)
    };
    // The receiver's interrupt: MSI-X vector MQ on an eventfd, IR_STATUS's enable.
    let ev = msix_vector(&mut t.c, pci::vector::MQ);
    fp_write(&mut t.c, regs::IR_STATUS, regs::IR_ENABLE);
    let stored = f.counter(pe, "mq_stored");
    let rejected = f.counter(pe, "mq_rejected");
    let hits = f.counter(pe, "mq_threshold");
    let failed = f.counter(0, "t3e_failed");

    t.queue(Q, 3, 3);
    // Tail 1 -> 2: stored in slot 1, below the threshold.
    assert_eq!(
        send(&mut a.c, 0, &msg(1), pe, q),
        ers::FULL,
        "SEND 1 to PE {pe}"
    );
    assert_eq!(
        t.words(Q + 64, 8),
        msg(1),
        "PE {pe}: slot 1 = MQCW + 64·Tail"
    );
    assert_eq!(t.read64(Q), mqcw::make(false, 2, 3, 3), "PE {pe}: Tail + 1");
    assert_eq!(
        fp_read(&mut t.c, regs::IR_STATUS) & bits,
        0,
        "PE {pe}: no threshold yet"
    );
    assert_eq!(wait_event(&ev, 20), 0, "PE {pe}: no interrupt yet");
    // Tail 2 -> 3 = Threshold: Sig, MSG_ADDR_VALID, MSG_ADDR and the interrupt.
    assert_eq!(
        send(&mut a.c, 8, &msg(2), pe, q),
        ers::FULL,
        "SEND 2 to PE {pe}"
    );
    assert_eq!(t.words(Q + 128, 8), msg(2), "PE {pe}: slot 2");
    assert_eq!(
        t.read64(Q),
        mqcw::make(true, 3, 3, 3),
        "PE {pe}: Sig with the Tail"
    );
    assert_eq!(
        wait_event(&ev, 2000),
        1,
        "PE {pe}: MSI-X vector MQ at the threshold"
    );
    assert_eq!(
        fp_read(&mut t.c, regs::IR_STATUS) & bits,
        regs::MSG_ADDR_VALID
    );
    assert_eq!(
        fp_read(&mut t.c, regs::MSG_ADDR),
        q,
        "PE {pe}: MSG_ADDR = the GVA the sender named"
    );
    // Tail 3 = Limit: rejected, FULL_SR; nothing stored, the words stay in E 16..23.
    let before = t.words(Q, 4 * 8);
    assert_eq!(
        send(&mut a.c, 16, &msg(3), pe, q),
        ers::FULL_SR,
        "SEND 3 to PE {pe}: full"
    );
    assert_eq!(
        t.words(Q, 4 * 8),
        before,
        "PE {pe}: nothing stored, MQCW unchanged"
    );
    for (i, &w) in msg(3).iter().enumerate() {
        assert_eq!(
            ereg_load(&mut a.c, 16 + i as u32),
            w,
            "the words stay for a resend"
        );
    }
    // The receiver resets its queue; the same CMD_ISSUE again, no STORE in between.
    fp_write(
        &mut t.c,
        regs::IR_STATUS,
        regs::IR_ENABLE | regs::MSG_ADDR_VALID,
    );
    t.queue(Q, 3, 3);
    issue(&mut a.c, op::SEND, 16, 0);
    assert_eq!(
        wait_not_empty(&mut a.c, 16),
        ers::FULL,
        "SEND 3 again to PE {pe}"
    );
    wait_idle(&mut a.c);
    assert_eq!(
        t.words(Q + 64, 8),
        msg(3),
        "PE {pe}: the original words, no reload"
    );
    assert_eq!(t.read64(Q), mqcw::make(false, 2, 3, 3));
    assert_eq!(ers_word(&mut a.c, 0), ALL_FULL, "E 0..31 FULL again");
    assert_eq!(
        fp_read(&mut t.c, regs::IR_STATUS) & bits,
        0,
        "no second threshold hit"
    );

    counter_is(f, pe, "mq_stored", stored + 3);
    counter_is(f, pe, "mq_rejected", rejected + 1);
    counter_is(f, pe, "mq_threshold", hits + 1);
    assert_eq!(f.counter(0, "t3e_failed"), failed, "a reject is no failure");
}

/// HMM-148-0 p. 4 Fig. 2 and pp. 9-11 Figs. 6-7 (a SEND lands in slot Tail, Tail + 1), p. 8
/// "ERS Codes" and p. 16 step 6 (Tail = Limit: FULL_SR, nothing stored, issued again without
/// a reload), pp. 12-15 Figs. 9-11 and p. 5 Fig. 3 (the threshold hit sets Sig,
/// MSG_ADDR_VALID and MSG_ADDR = the GVA named) with fastpath.md's MSI-X vector MQ under
/// IR_ENABLE: the same at PE 2 on host b as at PE 1 beside the sender, counted where the
/// queue is.
#[test]
fn t3e_sends_reject_and_threshold_interrupt_cross_hosts_as_locally() {
    let f = Fabric::start();
    let mut a = Pe::attach(&f.a, 0);
    for pe in TARGETS {
        let mut t = f.pe(pe);
        t3e_reachable(&f, &mut a.c, pe);
        message_queue(&f, &mut a, &mut t, pe);
    }
}

/// Errors met at PE `pe`: each command ends FULL_F with its cause in CMD_ERROR, counted.
fn errors_at(f: &Fabric, a: &mut Pe, t: &mut Pe, pe: u32) {
    set_segment(&mut t.c, 4, IOVA, 0x1000, seg::REMOTE_READ);
    for e in 8..16 {
        ereg_store(&mut a.c, e, 0x5E00 + e as u64);
    }
    ereg_store(&mut a.c, 2, 0xBAD);
    #[rustfmt::skip]
    let cases = [
        ("a GET from an undefined segment", op::GET, 1, gva::make(5, 0), Error::BadSegment),
        ("a PUT into a read-only segment", op::PUT, 2, gva::make(4, 0x10), Error::BadSegment),
        ("a GET_INC on a read-only segment", op::GET_INC, 1, gva::make(4, 0x10), Error::BadSegment),
        ("a SEND into a segment without MESSAGE_QUEUE", op::SEND, 8, gva::make(4, 0), Error::BadSegment),
        ("a GET past the segment", op::GET, 1, gva::make(SEG, MEM_SIZE), Error::OutOfBounds),
        ("a GET with GVA bit 31", op::GET, 1, gva::make(SEG, 0) | (1 << 31), Error::BadAddress),
    ];
    let count = cmd_error_count(&mut a.c);
    let failed = f.counter(0, "t3e_failed");
    let refused = f.counter(0, "t3e_refused");
    for (n, &(what, opc, e, at, want)) in cases.iter().enumerate() {
        let n = n as u64 + 1;
        assert_eq!(
            answered(&mut a.c, opc, e, pe, at),
            ers::FULL_F,
            "{what} at PE {pe}"
        );
        assert_eq!(cmd_error(&mut a.c), (want, e, opc), "{what} at PE {pe}");
        assert_eq!(
            cmd_error_count(&mut a.c),
            (count + n) & 0xFFFF,
            "{what} at PE {pe}: counted in CMD_ERROR <63:48>"
        );
        assert_eq!(
            f.counter(0, "t3e_failed"),
            failed + n,
            "{what} at PE {pe}: counted in t3e_failed"
        );
        if opc == op::SEND {
            for i in 0..8 {
                assert_eq!(ers(&mut a.c, e + i), ers::FULL_F, "{what}: the whole block");
            }
        }
        assert_eq!(
            t3e_read(&mut a.c, t3e::PUT_COUNT),
            0,
            "{what}: PUT_COUNT back to 0"
        );
    }
    assert_eq!(f.counter(0, "t3e_refused"), refused, "all of them went out");
    assert_eq!(t.read64(0x10), 0, "nothing written at PE {pe}");
    assert_eq!(t.read64(0), 0, "no SEND stored at PE {pe}");

    // The same registers work again.
    t.write64(0x20, 42 + pe as u64);
    assert_eq!(
        answered(&mut a.c, op::GET, 1, pe, gva::make(SEG, 0x20)),
        ers::FULL
    );
    assert_eq!(ereg_load(&mut a.c, 1), 42 + pe as u64);
    assert_eq!(
        answered(&mut a.c, op::PUT, 2, pe, gva::make(SEG, 0x28)),
        ers::FULL
    );
    assert_eq!(t.read64(0x28), 0xBAD);
}

/// HMM-148-0 p. 8 Table 2 (FULL_F: "a deferred software error was detected during the
/// transfer") and SSD-T90 Table 2, with t3e.md "Addresses (Table 1)": the segment is the
/// destination's, so its checks are made where the destination is — an undefined segment,
/// one without the access asked for (REMOTE_WRITE for PUT, REMOTE_READ and REMOTE_WRITE for
/// an atomic, MESSAGE_QUEUE for SEND), an offset past it, GVA bits that must be zero. Across
/// hosts each ends FULL_F with the same cause, E register and opcode in CMD_ERROR, counted
/// there and in `t3e_failed` at the issuer, nothing written; the registers work again.
#[test]
fn t3e_errors_at_the_target_come_back_across_hosts_as_locally() {
    let f = Fabric::start();
    let mut a = Pe::attach(&f.a, 0);
    for pe in TARGETS {
        let mut t = f.pe(pe);
        t3e_reachable(&f, &mut a.c, pe);
        errors_at(&f, &mut a, &mut t, pe);
    }
}

// ---- MLINK (device/abi/mlink.md; as mlink.rs drives it) ----

/// The target's exposed window, the source's WRITE/ROP data and READ destination.
const WIN: u32 = 0x10_0000;
const WIN_SIZE: u32 = 0x1_0000;
const SRC: u32 = 0x40_0000;
const DST: u32 = 0x50_0000;
/// What a target's window holds before anyone writes it; what a READ destination holds.
const FILL: u8 = 0xEE;
const STALE: u8 = 0x11;

/// The launch registers of one operation.
#[derive(Clone, Copy, Debug)]
struct Launch {
    target: u32,
    remote: u32,
    local: u32,
    len: u32,
}

/// Program link `link`'s launch registers, launch `command`, wait until COMPLETED moved and
/// the link is not BUSY: STATUS.
fn exec(c: &mut Client, link: u32, command: u32, o: Launch) -> u32 {
    for (reg, v) in [
        (ml::TARGET, o.target),
        (ml::REMOTE, o.remote),
        (ml::LOCAL, o.local),
        (ml::LEN, o.len),
    ] {
        write32(c, link_reg(link, reg), v);
    }
    let ticket = read32(c, link_reg(link, ml::COMPLETED));
    write32(c, link_reg(link, ml::COMMAND), command);
    poll_until(
        &format!("MLINK link {link}: command {command} to {o:?} never completed"),
        || {
            read32(c, link_reg(link, ml::COMPLETED)) != ticket
                && read32(c, link_reg(link, ml::STATUS)) & status::STATE_MASK != status::BUSY
        },
    );
    read32(c, link_reg(link, ml::STATUS))
}

/// A client on NI `ni`, memory decode on, once the fabric serves it (the control page's
/// MAGIC is published: peers see a client there).
fn attach(f: &Fabric, ni: u32) -> Client {
    let mut c = f.host(ni).client(ni);
    enable(&mut c);
    poll_until(
        &format!("the fabric never served NI {ni}'s client (no MAGIC)"),
        || {
            let m = lan::sram_read(&mut c, ctrl::MAGIC as u32, 4);
            u32::from_le_bytes(m.try_into().expect("4 bytes")) == ctrl::MAGIC_VALUE
        },
    );
    c
}

/// Wait until NI 0 reaches rank `rank`: a NOOP on the probe link ACKs (it is REFUSED
/// UNREACHABLE while host a has not heard of the client there).
fn mlink_reachable(f: &Fabric, c: &mut Client, rank: u32) {
    let noop = Launch {
        target: rank,
        remote: 0,
        local: 0,
        len: 0,
    };
    f.poll(&format!("{} never answered a NOOP", who(rank)), || {
        state(exec(c, PROBE_LINK, cmd::NOOP, noop)) == status::ACK
    });
}

/// WRITE, READ, NOOP and ROP from NI 0 to `rank`, then WRITEs and a READ outside its window.
fn mlink_ops(f: &Fabric, a: &mut Client, t: &mut Client, rank: u32) {
    let whom = who(rank);
    lan::sram_write(t, WIN, &vec![FILL; WIN_SIZE as usize]);
    expose(t, WIN, WIN_SIZE);
    let acks = f.counter(0, "mlink_acks");
    let nacks = f.counter(0, "mlink_nacks");
    let queued = f.counter(rank, "mlink_rops_queued");
    let completed = read32(a, link_reg(0, ml::COMPLETED));
    let both = s0::PRESENT | s0::EXPOSED;

    // WRITE 257 words into the window: ACK, status bytes, checksums.
    let len = 257;
    let remote = WIN + 0x808;
    let data = bytes(rank as u64, 8 * len as usize);
    lan::sram_write(a, SRC, &data);
    let w = Launch {
        target: rank,
        remote,
        local: SRC,
        len,
    };
    let s = exec(a, 0, cmd::WRITE, w);
    expect(s, status::ACK, reason::NONE, &format!("WRITE to {whom}"));
    assert_eq!(
        (byte0(s), byte1(s)),
        (both, reason::NONE),
        "WRITE to {whom}: {}",
        show(s)
    );
    assert_eq!(
        read32(a, link_reg(0, ml::CHECKSUMS)),
        sums(cmd::WRITE, len, remote, &data),
        "CHECKSUMS of the WRITE to {whom}"
    );

    // READ it back, stale bytes around the destination: exactly 8·len arrive.
    lan::sram_write(a, DST - 8, &vec![STALE; 8 * len as usize + 16]);
    let s = exec(a, 0, cmd::READ, Launch { local: DST, ..w });
    expect(s, status::ACK, reason::NONE, &format!("READ from {whom}"));
    assert_eq!(
        (byte0(s), byte1(s)),
        (both, reason::NONE),
        "READ from {whom}: {}",
        show(s)
    );
    assert_eq!(
        read32(a, link_reg(0, ml::CHECKSUMS)),
        sums(cmd::READ, len, remote, &data),
        "CHECKSUMS of the READ from {whom}"
    );
    let got = lan::sram_read(a, DST - 8, 8 * len as usize + 16);
    same(
        &got[8..8 + data.len()],
        &data,
        &format!("the READ from {whom}"),
    );
    assert_eq!(&got[..8], &[STALE; 8], "nothing before LOCAL");
    assert_eq!(
        &got[got.len() - 8..],
        &[STALE; 8],
        "nothing past 8·len bytes"
    );

    // NOOP: ACK and the target's state in byte 0.
    let noop = Launch {
        target: rank,
        remote: 0,
        local: 0,
        len: 0,
    };
    let s = exec(a, 0, cmd::NOOP, noop);
    expect(s, status::ACK, reason::NONE, &format!("NOOP to {whom}"));
    assert_eq!(byte0(s), both, "NOOP to {whom}: {}", show(s));

    // ROP: into the target's register queue, with the sender's rank (0) as SOURCE.
    let rop = bytes(0x100 + rank as u64, 3 * 8);
    lan::sram_write(a, SRC, &rop);
    write32(a, link_reg(0, ml::HANDLER), 0xA11CE);
    let s = exec(
        a,
        0,
        cmd::ROP,
        Launch {
            len: 3,
            remote: 0,
            ..w
        },
    );
    expect(s, status::ACK, reason::NONE, &format!("ROP to {whom}"));
    assert_eq!(rx_read(t, rx::QUEUE_COUNT), 1, "ROP queued at {whom}");
    assert_eq!(
        (
            rx_read(t, rx::QUEUE_HANDLER),
            rx_read(t, rx::QUEUE_SOURCE),
            rx_read(t, rx::QUEUE_LEN)
        ),
        (0xA11CE, 0, 3),
        "the ROP at {whom}: handler, source rank, words"
    );
    let q: Vec<u8> = (0..6u64)
        .flat_map(|i| rx_read(t, rx::QUEUE_DATA + 4 * i).to_le_bytes())
        .collect();
    same(&q, &rop, &format!("QUEUE_DATA at {whom}"));
    rx_write(t, rx::QUEUE_POP, 1);
    assert_eq!(rx_read(t, rx::QUEUE_COUNT), 0);

    // Outside the window: NACK ADDRESS from the target, nothing touched.
    let end = WIN + WIN_SIZE;
    for (what, command, remote, len) in [
        ("WRITE just past the window", cmd::WRITE, end, 1),
        ("WRITE straddling the window's end", cmd::WRITE, end - 8, 2),
        ("READ just below the window", cmd::READ, WIN - 8, 1),
    ] {
        let local = if command == cmd::READ { DST } else { SRC };
        let o = Launch {
            target: rank,
            remote,
            local,
            len,
        };
        let s = exec(a, 0, command, o);
        expect(
            s,
            status::NACK,
            reason::ADDRESS,
            &format!("{what} of {whom}"),
        );
        assert_eq!(
            (byte0(s), byte1(s)),
            (both, reason::ADDRESS),
            "{what} of {whom}: {}",
            show(s)
        );
    }
    same(
        &lan::sram_read(a, DST, 8),
        &data[..8],
        "a NACKed READ brings nothing",
    );
    let mut window = vec![FILL; WIN_SIZE as usize];
    window[0x808..0x808 + data.len()].copy_from_slice(&data);
    same(
        &lan::sram_read(t, WIN, WIN_SIZE as usize),
        &window,
        &format!("the window of {whom}: the WRITE's words and nothing else"),
    );

    assert_eq!(
        read32(a, link_reg(0, ml::COMPLETED)),
        completed.wrapping_add(7)
    );
    counter_is(f, 0, "mlink_acks", acks + 4);
    counter_is(f, 0, "mlink_nacks", nacks + 3);
    counter_is(f, rank, "mlink_rops_queued", queued + 1);
}

/// MIT METRO §11.3 and Fig. 11.1 (READ and WRITE "handled entirely by the receiving MLINK";
/// NOOP's status bytes; ROP queued "for the destination processor to service"; the address
/// guarded at the target) with mlink.md's register queue and status bytes: from NI 0, the
/// same ACKs, checksums, status bytes (PRESENT | EXPOSED), data and queue entry with rank 2
/// on host b as with rank 1 beside it, and NACK ADDRESS (byte 1 ADDRESS) for spans the
/// target does not expose, its memory untouched.
#[test]
fn mlink_write_read_noop_rop_and_nacks_cross_hosts_as_locally() {
    let f = Fabric::start();
    let mut a = attach(&f, 0);
    for rank in TARGETS {
        let mut t = attach(&f, rank);
        mlink_reachable(&f, &mut a, rank);
        mlink_ops(&f, &mut a, &mut t, rank);
    }
}

// ---- CM-5 Data Network (device/abi/cm5.md; common/cm5_driver.rs) ----

/// Messages in each stream.
const MESSAGES: u32 = 300;

/// Message `seq` of the stream to `rank`: tag seq mod 16, 1 to 5 words naming both.
fn cm5_message(rank: u32, seq: u32) -> (u32, Vec<u32>) {
    let words = (0..1 + seq % 5)
        .map(|k| (rank << 28) | (seq << 4) | k)
        .collect();
    (seq % 16, words)
}

/// Wait for rec_ok on the user LDR window, then read the whole message: (tag, words).
fn cm5_receive(c: &mut Client) -> (u32, Vec<u32>) {
    let mut st = 0;
    poll_until("no CM-5 message arrived within 5 s", || {
        st = cm5_read(c, false, cm5d::LDR_STATUS);
        st & cm5::status::REC_OK != 0
    });
    let (len, tag) = ((st >> 11) & 0xF, (st >> 15) & 0xF);
    (
        tag,
        (0..len)
            .map(|_| cm5_read(c, false, cm5d::LDR_RECV))
            .collect(),
    )
}

/// NI 0 streams [`MESSAGES`] messages to relative address `rank` while `t` reads them
/// slowly; then one message in physical mode to `t`'s physical address.
fn cm5_stream(f: &Fabric, a: &mut Client, t: &mut Client, rank: u32) {
    let whom = who(rank);
    let phys = cm5_read(t, true, cm5::NI_PHYSICAL_SELF);
    assert_eq!(
        phys,
        cm5_read(t, true, cm5::NI_PARTITION_BASE) + rank,
        "{whom}: ni_physical_self = partition base + rank"
    );
    let sends = f.counter(0, "cm5_dr_sends");
    let dropped = f.counter(0, "cm5_dr_dropped");
    let recvs = f.counter(rank, "cm5_dr_recvs");
    let mut refused = 0u32;
    std::thread::scope(|s| {
        // The reader takes nothing for 300 ms, then a message a millisecond for a while.
        let reader = s.spawn(|| {
            std::thread::sleep(Duration::from_millis(300));
            for seq in 0..MESSAGES {
                assert_eq!(
                    cm5_receive(t),
                    cm5_message(rank, seq),
                    "{whom}: message {seq}: in order, none lost, none twice"
                );
                if seq < 100 {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        });
        // §8.1.3: the whole message again until send_ok says it was taken.
        'send: for seq in 0..MESSAGES {
            let (tag, words) = cm5_message(rank, seq);
            let since = Instant::now();
            while !cm5d::send(a, rank, tag, &words) {
                refused += 1;
                if reader.is_finished() {
                    break 'send;
                }
                assert!(
                    since.elapsed() < Duration::from_secs(5),
                    "{whom}: message {seq} never taken"
                );
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        if let Err(e) = reader.join() {
            std::panic::resume_unwind(e);
        }
    });
    assert!(
        refused > 0,
        "{whom}: the FIFOs never filled: a reader that does not read must push back on the sender (send_ok 0)"
    );
    assert_eq!(
        cm5_read(t, false, cm5d::LDR_STATUS) & cm5::status::REC_OK,
        0,
        "{whom}: nothing more"
    );
    counter_is(f, 0, "cm5_dr_sends", sends + MESSAGES as u64);
    counter_is(f, rank, "cm5_dr_recvs", recvs + MESSAGES as u64);
    assert_eq!(f.counter(0, "cm5_dr_dropped"), dropped, "nothing dropped");

    // The supervisor's physical mode names the same NI.
    poll_until(
        &format!("{whom}: the physical-mode message never taken"),
        || {
            cm5_write(a, true, cm5d::ldr_send_first(true, 7, 2), phys);
            cm5_write(a, true, cm5d::LDR_SEND, 0xFACE);
            cm5_write(a, true, cm5d::LDR_SEND, rank);
            cm5_read(a, true, cm5d::LDR_STATUS) & cm5::status::SEND_OK != 0
        },
    );
    assert_eq!(
        cm5_receive(t),
        (7, vec![0xFACE, rank]),
        "{whom}: to physical address {phys}"
    );
    counter_is(f, rank, "cm5_dr_recvs", recvs + MESSAGES as u64 + 1);
}

/// NI Programmer's Handbook §2.3 and §3.2 (a send to relative address r reaches rank r,
/// words in order, with its tag), §3.9 and §8.1.3 (a receiver that does not read fills its
/// FIFO, then the sender's: send_ok 0, and the retry loop loses nothing), §6.3 (physical
/// address = partition base + rank) and cm5.md "Choices" (24-word FIFOs; a message moves
/// only whole; order kept between a pair): 300 messages of 1 to 5 words from NI 0 arrive at
/// NI 2 on host b exactly as at NI 1 beside it — all, once, in order, contents checked —
/// though the receiver reads slowly and the sender is pushed back.
#[test]
fn cm5_data_network_streams_cross_hosts_in_order_with_flow_control() {
    let f = Fabric::start();
    let nis = NIS * 2;
    let mut a = f.a.client(0);
    cm5d::ready(&mut a, nis);
    for rank in TARGETS {
        let mut t = f.host(rank).client(rank);
        cm5d::ready(&mut t, nis);
        mlink_reachable(&f, &mut a, rank);
        cm5_stream(&f, &mut a, &mut t, rank);
    }
}

// ---- CM-5 broadcasts (NI Programmer's Handbook §4.1, §5.5; common/cm5_driver.rs) ----

const BC_STATUS: u32 = cm5::BC_BASE + cm5::iface::STATUS;
const BC_PRIVATE: u32 = cm5::BC_BASE + cm5::iface::PRIVATE;
const BC_CONTROL: u32 = cm5::BC_BASE + cm5::iface::CONTROL;
const BC_SEND: u32 = cm5::BC_BASE + cm5::iface::SEND;
const BC_RECV: u32 = cm5::BC_BASE + cm5::iface::RECV;
/// Broadcasts every member receives: some 125 words, far more than a 16-word receive FIFO.
const BROADCASTS: u32 = 50;
/// How long the receivers on host b leave their receive FIFOs alone before reading.
const SLOW: Duration = Duration::from_millis(200);

/// Broadcast `seq`: 1 to 4 words (MAX_BROADCAST_MSG_WORDS, §4.1.3), each naming it.
fn bc_message(seq: u32) -> Vec<u32> {
    (0..1 + seq % 4)
        .map(|k| 0xBC00_0000 | (seq << 8) | k)
        .collect()
}

/// What the OS does before user broadcasts (§4.1.8): BC unlocked with send_enable; and
/// reception unless `abstain` (`rec_abstain` in the control register).
fn bc_join(c: &mut Client, abstain: bool) {
    cm5_write(c, true, BC_PRIVATE, cm5::private::SEND_ENABLE);
    let control = if abstain {
        cm5::control::REC_ABSTAIN
    } else {
        0
    };
    cm5_write(c, false, BC_CONTROL, control);
}

/// §4.1.3: `send_first` (App. A.3: BC, aux = length) with the first word, the rest, then
/// whether send_ok says the whole message was taken.
fn bc_push(c: &mut Client, words: &[u32]) -> bool {
    let first = (cm5::fifo::USER_BC << cm5::SF_FIFO_OFFSET)
        + ((words.len() as u32) << cm5::AUXILIARY_START_P);
    cm5_write(c, false, first, words[0]);
    for &w in &words[1..] {
        cm5_write(c, false, BC_SEND, w);
    }
    cm5_read(c, false, BC_STATUS) & cm5::status::SEND_OK != 0
}

/// Whether words wait in the BC receive FIFO.
fn bc_rec_ok(c: &mut Client) -> bool {
    cm5_read(c, false, BC_STATUS) & cm5::status::REC_OK != 0
}

/// §4.1.9's BC_receive: wait for rec_ok, then read one word.
fn bc_word(c: &mut Client, whom: &str) -> u32 {
    poll_until(&format!("{whom}: no broadcast word within 5 s"), || {
        bc_rec_ok(c)
    });
    cm5_read(c, false, BC_RECV)
}

/// Read from the BC receive FIFO (after the words already `got`) exactly the words of
/// broadcasts `seqs`, and check them broadcast by broadcast: arrivals are concatenated
/// (§4.1.2), so a lost, doubled or reordered one shows as a wrong word at its place.
fn bc_expect(c: &mut Client, seqs: std::ops::Range<u32>, mut got: Vec<u32>, whom: &str) {
    let want: u32 = seqs.clone().map(|s| 1 + s % 4).sum();
    while got.len() < want as usize {
        got.push(bc_word(c, whom));
    }
    let mut at = 0;
    for seq in seqs {
        let m = bc_message(seq);
        assert_eq!(
            got[at..at + m.len()],
            m[..],
            "{whom}: broadcast {seq}: in order, none lost, none twice"
        );
        at += m.len();
    }
}

/// NI 0 (`cs[0]`) broadcasts `seqs` on BC, the whole message again while send_ok is 0
/// (§4.1.3), taking its own copies as it goes (§4.1.2: the sender receives too, and its
/// FIFO is one the broadcast waits for); the members `readers` read theirs, those on host b
/// only after [`SLOW`]. Every copy checked. Returns how often send_ok was 0.
fn bc_stream(cs: &mut [Client], seqs: std::ops::Range<u32>, readers: &[u32]) -> u32 {
    let (a, rest) = cs.split_first_mut().expect("NI 0");
    let mut refused = 0;
    std::thread::scope(|s| {
        let handles: Vec<_> = rest
            .iter_mut()
            .zip(1u32..)
            .filter(|(_, ni)| readers.contains(ni))
            .map(|(c, ni)| {
                let seqs = seqs.clone();
                s.spawn(move || {
                    if ni >= NIS {
                        std::thread::sleep(SLOW);
                    }
                    bc_expect(c, seqs, Vec::new(), &who(ni));
                })
            })
            .collect();
        let mut own = Vec::new();
        let mut gave_up = false;
        'send: for seq in seqs.clone() {
            let since = Instant::now();
            while !bc_push(a, &bc_message(seq)) {
                refused += 1;
                while bc_rec_ok(a) {
                    own.push(cm5_read(a, false, BC_RECV));
                }
                if handles.iter().any(|h| h.is_finished()) {
                    gave_up = true;
                    break 'send;
                }
                assert!(
                    since.elapsed() < Duration::from_secs(5),
                    "broadcast {seq} never taken (send_ok 0 for 5 s)"
                );
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        // The last broadcasts may wait for room in NI 0's own receive FIFO: read it before
        // waiting for the others.
        if !gave_up {
            bc_expect(a, seqs, own, "rank 0 (host a), the sender");
        }
        for h in handles {
            if let Err(e) = h.join() {
                std::panic::resume_unwind(e);
            }
        }
    });
    refused
}

/// NI Programmer's Handbook §4.1.2, §4.1.3, §4.1.8 (a user broadcast reaches every member of
/// the partition that does not abstain from reception, the sender included, words in order,
/// arrivals concatenated; it leaves the sender's send FIFO only once every receiver has it,
/// so send_ok is 0 meanwhile and the retry loop loses nothing; `rec_abstain` stops
/// reception) and §5.5 (the broadcast interrupt reaches every other member whose
/// interrupt_rec_enable is 1, as the causes of its colours; interrupt_send_ok returns), with
/// cm5.md's choices (16-word receive FIFOs; a broadcast moves whole): NI 0's 50 broadcasts of
/// 1 to 4 words reach NIs 2 and 3 on host b — which read only after 200 ms, so every FIFO on
/// the way fills — exactly as NI 1 beside it and NI 0 itself: all, once, in order; NI 2,
/// abstaining, then gets none of 20 more while the others get them all; a Red and Green
/// interrupt reaches NIs 1, 2 and 3, an Orange one all but NI 2 once it stops receiving
/// them. `cm5_bc_sends`, `cm5_bc_recvs` and `cm5_bc_interrupts` count exactly that, on the
/// daemon serving each NI; nothing is unreached, dropped or collided.
#[test]
fn cm5_broadcasts_and_the_broadcast_interrupt_reach_host_b_as_host_a() {
    use cm5::{cause, green, hodgepodge as hp};
    let f = Fabric::start();
    let nis = NIS * 2;
    let mut cs: Vec<Client> = (0..nis).map(|ni| f.host(ni).client(ni)).collect();
    for c in &mut cs {
        cm5d::ready(c, nis);
        cm5d::clear_causes(c);
        cm5_write(c, true, cm5::NI_INTERRUPT_CLEAR_GREEN, green::ALL);
        bc_join(c, false);
    }
    let sends = f.counter(0, "cm5_bc_sends");
    let recvs: Vec<u64> = (0..nis).map(|ni| f.counter(ni, "cm5_bc_recvs")).collect();
    let interrupts = f.counter(0, "cm5_bc_interrupts");
    let unreached = f.counter(0, "cm5_bc_unreached");
    let dropped = f.counter(0, "cm5_dr_dropped");
    let n = BROADCASTS as u64;

    // Every member receives; host b reads late.
    let refused = bc_stream(&mut cs, 0..BROADCASTS, &[1, 2, 3]);
    assert!(
        refused > 0,
        "the FIFOs never filled: receivers that do not read must push back on the sender (send_ok 0)"
    );
    for (c, ni) in cs.iter_mut().zip(0..) {
        assert!(!bc_rec_ok(c), "{}: nothing more", who(ni));
    }
    assert_ne!(
        cm5_read(&mut cs[0], false, BC_STATUS) & cm5::status::SEND_EMPTY,
        0,
        "NI 0's send FIFO emptied"
    );
    counter_is(&f, 0, "cm5_bc_sends", sends + n);
    for ni in 0..nis {
        counter_is(&f, ni, "cm5_bc_recvs", recvs[ni as usize] + n);
    }

    // NI 2 (host b) abstains: the others get 20 more, it none.
    const MORE: u32 = 20;
    bc_join(&mut cs[2], true);
    bc_stream(&mut cs, BROADCASTS..BROADCASTS + MORE, &[1, 3]);
    assert!(
        !bc_rec_ok(&mut cs[2]),
        "{}: an abstainer receives nothing",
        who(2)
    );
    assert_eq!(
        (cm5_read(&mut cs[2], false, BC_STATUS) >> 7) & 0x7F,
        0,
        "{}: rec_length_left 0",
        who(2)
    );
    for (c, ni) in cs.iter_mut().zip(0..) {
        assert!(!bc_rec_ok(c), "{}: nothing more", who(ni));
    }
    let m = (BROADCASTS + MORE) as u64;
    counter_is(&f, 0, "cm5_bc_sends", sends + m);
    for ni in [0, 1, 3] {
        counter_is(&f, ni, "cm5_bc_recvs", recvs[ni as usize] + m);
    }
    assert_eq!(f.counter(2, "cm5_bc_recvs"), recvs[2] + n, "NI 2 abstained");

    // §5.5: the broadcast interrupt, Red and Green, to NIs 1, 2, 3 with interrupt_rec_enable.
    let hodgepodge = |c: &mut Client| cm5_read(c, true, cm5::NI_HODGEPODGE);
    for c in &mut cs[1..] {
        let v = hodgepodge(c) | hp::INTERRUPT_REC_ENABLE;
        cm5_write(c, true, cm5::NI_HODGEPODGE, v);
    }
    let causes = |c: &mut Client| cm5_read(c, true, cm5::NI_INTERRUPT_CAUSE);
    let bc_colours =
        cause::BC_INTERRUPT_RED | cause::BC_INTERRUPT_ORANGE | cause::BC_INTERRUPT_YELLOW;
    assert_ne!(hodgepodge(&mut cs[0]) & hp::INTERRUPT_SEND_OK, 0);
    cm5_write(&mut cs[0], true, cm5::NI_INTERRUPT_SEND, 8 | 1);
    f.poll("NI 0's broadcast interrupt never left", || {
        hodgepodge(&mut cs[0]) & hp::INTERRUPT_SEND_OK != 0
    });
    for ni in 1..nis {
        let c = &mut cs[ni as usize];
        f.poll(&format!("{}: no Red broadcast interrupt", who(ni)), || {
            causes(c) & cause::BC_INTERRUPT_RED != 0
        });
        assert_eq!(
            causes(c) & bc_colours,
            cause::BC_INTERRUPT_RED,
            "{}: Red alone",
            who(ni)
        );
        assert_ne!(
            cm5_read(c, true, cm5::NI_INTERRUPT_CAUSE_GREEN) & green::BC_INTERRUPT_GREEN,
            0,
            "{}: and Green",
            who(ni)
        );
    }
    assert_eq!(causes(&mut cs[0]) & bc_colours, 0, "not the sender");
    for c in &mut cs {
        cm5_write(c, true, cm5::NI_INTERRUPT_CLEAR, bc_colours);
        cm5_write(
            c,
            true,
            cm5::NI_INTERRUPT_CLEAR_GREEN,
            green::BC_INTERRUPT_GREEN,
        );
    }
    // Orange, with NI 2's interrupt_rec_enable 0: NIs 1 and 3 only.
    let v = hodgepodge(&mut cs[2]) & !hp::INTERRUPT_REC_ENABLE;
    cm5_write(&mut cs[2], true, cm5::NI_HODGEPODGE, v);
    cm5_write(&mut cs[0], true, cm5::NI_INTERRUPT_SEND, 4);
    f.poll("NI 0's second broadcast interrupt never left", || {
        hodgepodge(&mut cs[0]) & hp::INTERRUPT_SEND_OK != 0
    });
    for ni in [1, 3] {
        let c = &mut cs[ni as usize];
        f.poll(
            &format!("{}: no Orange broadcast interrupt", who(ni)),
            || causes(c) & cause::BC_INTERRUPT_ORANGE != 0,
        );
        assert_eq!(
            causes(c) & bc_colours,
            cause::BC_INTERRUPT_ORANGE,
            "{}",
            who(ni)
        );
    }
    // NI 3 has it, and host b hands an interrupt to its members together: NI 2 would too.
    std::thread::sleep(Duration::from_millis(20));
    for ni in [0, 2] {
        assert_eq!(
            causes(&mut cs[ni as usize]) & bc_colours,
            0,
            "{}: the sender, or interrupt_rec_enable 0",
            who(ni)
        );
    }
    counter_is(&f, 0, "cm5_bc_interrupts", interrupts + 2);

    for (c, ni) in cs.iter_mut().zip(0..) {
        assert_eq!(
            causes(c) & cause::BC_OR_COM_COLLISION,
            0,
            "{}: one sender, no collision",
            who(ni)
        );
        assert_eq!(cm5d::bus_errors(c), 0, "{}: no Bus Error", who(ni));
    }
    assert_eq!(
        f.counter(0, "cm5_bc_unreached"),
        unreached,
        "every member reached"
    );
    assert_eq!(
        f.counter(0, "cm5_dr_dropped"),
        dropped,
        "nothing dropped on the link"
    );
}

// ---- Lanai packet interface (device/abi/lanai.md; common/lanai_driver.rs) ----

/// 1 MiB receive buffers of 4 KiB blocks taking packets up to 512 KiB, port enabled,
/// buffers dropped when missing: BUFFER_SIZE 512 B << 11, BLOCK_SIZE 8 B << 9, MAX_PACKET
/// 512 B << 10 (§9.7).
const RPL_1M: u32 = rc::PORT_ENABLE
    | rc::ENABLE_BUFFER_DROP
    | (10 << rc::MAX_PACKET_SHIFT)
    | (9 << rc::BLOCK_SIZE_SHIFT)
    | (11 << rc::BUFFER_SIZE_SHIFT);
const BUF: u32 = 1 << 20;
const BLOCK: u32 = 4 << 10;
/// A buffer and its RPL (one 8-byte RPD per block).
const FOOTPRINT: u32 = BUF + BUF / BLOCK * 8;
/// Larger than one 128 KiB link chunk (links.md): it crosses in several frames.
const BIG: usize = 300 << 10;

/// RPD `k` of the first buffer: (DESC_POINTER, length word).
fn rpd_1m(c: &mut Client, k: u32) -> (u32, u32) {
    let at = lan::RX_AREA + BUF + 8 * k;
    (lan::sram_read32(c, at), lan::sram_read32(c, at + 4))
}

/// A 64-byte and a 300 KiB Myrinet packet from NI 0 to `rank`.
fn lanai_packets(f: &Fabric, a: &mut Client, t: &mut Client, rank: u32) {
    let whom = who(rank);
    lan::port_up(t, port_reg::MODE_M, lan::MYRI_CRCS, RPL_1M);
    lan::issue(t, false, lan::RX_AREA);
    lan::issue(t, false, lan::RX_AREA + FOOTPRINT);
    assert_eq!(
        lan::isr(t) & isr::P0_NO_BACKUP,
        0,
        "{whom}: current and backup buffers"
    );
    let sent = f.counter(0, "lanai_packets_sent");
    let route_dropped = f.counter(0, "lanai_route_dropped");
    let blocked = f.counter(0, "lanai_blocked_dropped");

    let small = bytes(rank as u64, 64);
    let big = bytes(0x1000 + rank as u64, BIG);
    lan::send_myrinet(a, rank as u8, lan::TX_AREA, &small);
    lan::send_myrinet(a, rank as u8, lan::TX_AREA + 0x1000, &big);
    lan::wait_sent(a, 2);
    assert_ne!(lan::isr(a) & isr::P0_PACKET_SENT, 0);
    lan::wait_received(t, 2);
    assert_ne!(lan::isr(t) & isr::P0_PACKET_RCVD, 0);
    assert_eq!(
        special_read(t, lanai::P0_RPL_SNAPSHOT, 4),
        0x0002_0002,
        "{whom}: RPL_INDEX 2, RECV_COUNT 2"
    );
    // The small packet takes one block; the big one starts on the next block boundary.
    for (k, data, at) in [(0, &small, lan::RX_AREA), (1, &big, lan::RX_AREA + BLOCK)] {
        let what = format!("{whom}: packet {k} ({} bytes)", data.len());
        let (ptr, word) = rpd_1m(t, k);
        assert_eq!(ptr, at, "{what}: where it starts");
        assert_eq!(
            word & rd::DESC_LENGTH_MASK,
            data.len() as u32 + 5,
            "{what}: data, CRC-32, CRC-8"
        );
        assert_eq!(
            (word >> rd::DESC_ZEROES_SHIFT) & 7,
            5,
            "{what}: both CRCs good, XOR-ed to zeros"
        );
        assert_eq!(
            word & (rd::DESC_INVALID | rd::DESC_LINK | rd::DESC_MARKED_BAD | rd::DESC_LAST),
            0,
            "{what}: flags"
        );
        let got = lan::sram_read(t, ptr, data.len() + 5);
        same(
            &got[..data.len()],
            data,
            &format!("{what}: the route byte consumed, the rest whole"),
        );
        assert_eq!(&got[data.len()..], &[0; 5], "{what}: the checked CRCs");
    }

    // Both sides consume their counts (D* registers: a write takes one off).
    for _ in 0..2 {
        special_write(t, lanai::P0_RECV_COUNT, 2, 0);
        special_write(a, lanai::P0_SEND_COUNT, 1, 0);
    }
    assert_eq!(special_read(t, lanai::P0_RECV_COUNT, 2), 0);
    assert_eq!(special_read(a, lanai::P0_SEND_COUNT, 1), 0);
    assert_eq!(lan::isr(t) & isr::P0_PACKET_RCVD, 0);
    assert_eq!(lan::isr(a) & isr::P0_PACKET_SENT, 0);

    counter_is(f, 0, "lanai_packets_sent", sent + 2);
    counter_is(f, rank, "lanai_packets_received", 2);
    assert_eq!(
        f.counter(rank, "lanai_rx_dropped"),
        0,
        "{whom}: nothing dropped"
    );
    assert_eq!(f.counter(0, "lanai_route_dropped"), route_dropped);
    assert_eq!(f.counter(0, "lanai_blocked_dropped"), blocked);
}

/// Lanai X §9 (receive channel: a packet from a block boundary, its RPD in the RPL, RECV_COUNT
/// and RPL_INDEX), §10 (SPDs; SEND_COUNT counts the packet that left), §13.2 and §9.6 (the
/// CRC-32 and CRC-8 appended, XOR-ed to zeros at the receiver: DESC_ZEROES 5) and lanai.md
/// "The network between ports" (the Myrinet route byte 0x80 | r reaches rank r, consumed by
/// the crossbar; packets move whole): a 64-byte packet and a 300 KiB one — more than one
/// link chunk — from NI 0 reach NI 2 on host b exactly as NI 1 beside it, bytes and CRCs
/// checked, with the same counts on both sides.
#[test]
fn lanai_myrinet_packets_cross_hosts_whole_with_good_crcs() {
    assert_eq!(rc::size(11), BUF as u64, "BUFFER_SIZE code 11");
    assert_eq!(rc::block(9), BLOCK as u64, "BLOCK_SIZE code 9");
    assert!(rc::size(10) >= BIG as u64 + 5, "MAX_PACKET code 10");
    let f = Fabric::start();
    let mut a = f.a.client(0);
    enable(&mut a);
    lan::port_up(&mut a, port_reg::MODE_M, lan::MYRI_CRCS, RPL_1M);
    for rank in TARGETS {
        let mut t = f.host(rank).client(rank);
        enable(&mut t);
        mlink_reachable(&f, &mut a, rank);
        lanai_packets(&f, &mut a, &mut t, rank);
    }
}

// ---- faults ----

/// t3e.md "Commands" (errors in the network end FULL_F, never a wait for ever), mlink.md
/// "Operations" (a target that has no client or cannot be reached is REFUSED UNREACHABLE)
/// and links.md "Faults" (the other host going away fails what is pending with it, within
/// milliseconds when its daemon dies): with host b's daemon killed, a T3E GET from PE 2
/// ends FULL_F (PeerDown or NoRoute, its register and opcode in CMD_ERROR) within 2 s, an
/// MLINK READ from rank 2 is REFUSED UNREACHABLE, and host a's own PE still answers.
#[test]
fn a_dead_host_fails_register_operations_promptly_instead_of_hanging() {
    let mut f = Fabric::start();
    let mut a = Pe::attach(&f.a, 0);
    let mut t = f.pe(ACROSS);
    let _beside = f.pe(LOCAL);
    expose(&mut t.c, WIN, WIN_SIZE);
    t3e_reachable(&f, &mut a.c, ACROSS);
    mlink_reachable(&f, &mut a.c, ACROSS);
    let read = Launch {
        target: ACROSS,
        remote: WIN,
        local: DST,
        len: 4,
    };
    let s = exec(&mut a.c, 0, cmd::READ, read);
    expect(
        s,
        status::ACK,
        reason::NONE,
        "READ from rank 2 while host b is up",
    );
    let failed = f.counter(0, "t3e_failed");
    let unreachable = f.counter(0, "mlink_unreachable");

    f.b.child.kill().expect("SIGKILL to host b's daemon");
    f.b.child.wait().expect("host b's daemon reaped");
    let since = Instant::now();
    target(&mut a.c, ACROSS, gva::make(SEG, 0));
    issue(&mut a.c, op::GET, 7, 0);
    let code = wait_not_empty(&mut a.c, 7);
    let took = since.elapsed();
    assert_eq!(code, ers::FULL_F, "a GET from PE 2 with its host dead");
    assert!(
        took < Duration::from_secs(2),
        "the GET took {took:?} to fail"
    );
    let raw = t3e_read(&mut a.c, t3e::CMD_ERROR);
    let cause = Error::from_u16(raw as u16);
    assert!(
        matches!(cause, Some(Error::PeerDown | Error::NoRoute)),
        "CMD_ERROR {raw:#x} ({cause:?}): a PE whose host is gone is down or unreachable"
    );
    assert_eq!(
        ((raw >> 16) & 0x1FF, (raw >> 32) & 0xFF),
        (7, op::GET),
        "CMD_ERROR names the GET and its register"
    );
    wait_idle(&mut a.c);
    counter_is(&f, 0, "t3e_failed", failed + 1);

    let s = exec(
        &mut a.c,
        0,
        cmd::READ,
        Launch {
            local: DST + 0x100,
            ..read
        },
    );
    expect(
        s,
        status::REFUSED,
        reason::UNREACHABLE,
        "READ from rank 2 with its host dead",
    );
    counter_is(&f, 0, "mlink_unreachable", unreachable + 1);
    f.poll("host a never saw host b go", || !up(&f.a, "b"));
    // Host a carries on: its own PE 1 answers.
    t3e_reachable(&f, &mut a.c, LOCAL);
}

/// SSD-T90 "Special Routing" (Figs. 15-16): a router is one router, whichever host's PE
/// reaches it. On a 4x1x1 torus (NI i on node X = i), NI 0 on host a SPUTs R_SW and
/// R_SGET_RTRN of its own router; NI 2 on host b SGETs them through special routing (ΔX −2),
/// and the reply comes back by the R_SGET_RTRN host a wrote. Then host b writes and host a
/// reads back.
#[test]
fn a_router_written_from_one_host_reads_the_same_from_the_other() {
    use ni_abi::t3e::{delta, router as r};
    let f = Fabric::start_with("torus = \"4x1x1\"\n");
    let mut a = Pe::attach(&f.a, 0);
    let mut b = Pe::attach(&f.b, 2);
    let (to_0, to_2) = ([-2, 0, 0, 0, 0, 0], [2, 0, 0, 0, 0, 0]);
    router_write(&mut a.c, HERE, r::R_SGET_RTRN, delta::make(to_2));
    router_write(&mut a.c, HERE, r::R_SW, 0x5A5A_0000_1234);
    // The write travels to host b after the SPUT completed on host a.
    f.poll("host b's copy of router 0 to take host a's SPUTs", || {
        let (code, v) = sget(&mut b.c, to_0, r::R_SW, SPECIAL_E);
        code == ers::FULL && v == 0x5A5A_0000_1234
    });
    assert_eq!(
        router_read(&mut b.c, to_0, r::R_SGET_RTRN),
        delta::make(to_2)
    );
    // And the other way: host b writes router 2's R_SW and its way back to node 0.
    router_write(&mut b.c, HERE, r::R_SGET_RTRN, delta::make(to_0));
    router_write(&mut b.c, HERE, r::R_SW, 77);
    f.poll("host a's copy of router 2 to take host b's SPUTs", || {
        let (code, v) = sget(&mut a.c, to_2, r::R_SW, SPECIAL_E);
        code == ers::FULL && v == 77
    });
    assert_eq!(f.counter(0, "t3e_sputs"), 2);
    assert_eq!(f.counter(2, "t3e_sputs"), 2);
}
