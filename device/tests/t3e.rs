//! The T3E E-register window and the SSD-T90 router registers through raw vfio-user clients
//! and BAR0 only (issue 13): STORE and LOAD, the ERS codes, SEND into a peer's message queue
//! with reject, resend and threshold (HMM-148-0), the centrifuge, GET/PUT and their vector
//! forms, the atomics, errors in the network, and special routing to the routers' registers
//! — R_PHYS, R_SW, R_ORIENT, R_SGET_RTRN, R_NET_LUT, R_LUT_OVERRIDE, R_ERR0/R_ERR1 — with
//! misroutes and dateline violations (CRAY SSD-T90). The host plays the PE's driver, as a
//! driver author with only the seeds and `ni_abi::t3e` would.
//!
//! What is asserted follows `notes/issue13-contract.md` (the E-register window and the router
//! registers) and `device/abi/t3e.md`; every offset, code and bit comes from `ni_abi::t3e`.
//! Seeds: shared/seeds/001 (HMM-148-0, pages as printed) and 003 (SSD-T90, by section,
//! table and figure); each test names the part it follows and the checklist items of digest
//! shared/digests/cray-metro.md §E it shows.
//!
//! Daemons with a given torus start with `Daemon::start_with(n, &["--torus", "XxYxZ"])`
//! (common/mod.rs); NI i sits on the i-th physical node, X fastest, the rest are spares,
//! and every NI is in the partition "default" with rank = NI number.

mod common;

use common::t3e_driver::*;
use common::*;
use ni_abi::fastpath::{mqcw, regs};
use ni_abi::pci;
use ni_abi::t3e::{self, delta, ers, gva, op, router as r, seg, Error};
use serde_json::{json, Value};
use vfio_user::Client;

// ---- small helpers of this file ----

/// One deltas value per direction used below.
const PLUS_X: [i8; 6] = [1, 0, 0, 0, 0, 0];
const MINUS_X: [i8; 6] = [-1, 0, 0, 0, 0, 0];

/// Scatter the low bits of `v` into the set bits of `mask`, low to high (the inverse of the
/// centrifuge's packing), to build a global index.
fn pdep(v: u64, mask: u64) -> u64 {
    let (mut out, mut bit, mut m) = (0u64, 0u32, mask);
    while m != 0 {
        let low = m & m.wrapping_neg();
        if (v >> bit) & 1 != 0 {
            out |= low;
        }
        bit += 1;
        m &= m - 1;
    }
    out
}

/// A control request that must succeed; its response.
fn ctl(d: &Daemon, req: Value) -> Value {
    let v = d.control(&req.to_string());
    assert_ne!(v["result"], "error", "{req} -> {v}");
    v
}

/// `ni-ctl route FROM TO --json`: logical PE numbers.
fn route(d: &Daemon, from: u32, to: u32) -> Value {
    ctl(
        d,
        json!({"version": 1, "request": "route", "from": from, "to": to}),
    )
}

fn topology(d: &Daemon) -> Value {
    ctl(d, json!({"version": 1, "request": "topology"}))
}

/// `ni-ctl dateline set AXIS POS`, or with `None` `ni-ctl dateline clear AXIS`.
fn dateline(d: &Daemon, axis: &str, position: Option<u32>) {
    ctl(
        d,
        json!({"version": 1, "request": "dateline_set", "axis": axis, "position": position}),
    );
}

/// A physical PE number as the control socket prints it (hex `ZZYYXX`).
fn hex(v: &Value) -> u64 {
    u64::from_str_radix(
        v.as_str().unwrap_or_else(|| panic!("{v} is no hex string")),
        16,
    )
    .unwrap_or_else(|_| panic!("{v} is no hex number"))
}

/// Whether `v` names physical node `phys`: hex `ZZYYXX` or the number.
fn names_node(v: &Value, phys: u64) -> bool {
    match v {
        Value::String(s) => u64::from_str_radix(s, 16) == Ok(phys),
        Value::Number(n) => n.as_u64() == Some(phys),
        _ => false,
    }
}

fn client(d: &Daemon, i: u32) -> Client {
    let mut c = d.client(i);
    enable(&mut c);
    c
}

// ---- E registers and SEND (HMM-148-0) ----

/// HMM-148-0 p. 8 Table 2 (checklist 19) and SSD-T90 "Special Routing" step 1 (STORE and
/// LOAD): after reset every E register is FULL and holds 0, CMD_CENTRIFUGE holds the reset
/// mask, CMD_ERROR, PUT_COUNT and OUTSTANDING are 0 and no segment is defined. A STORE fills
/// a register, a LOAD returns it (8 bytes, or 4 for either half). The ERS words hold two bits
/// per register, register e at bits 2(e%32)+1:2(e%32) of word e/32: a failed GET into
/// register 33 shows as FULL_F (01) at bits 3:2 of word 1 among FULLs (10), and a STORE
/// makes it FULL again.
#[test]
fn store_load_and_the_ers_words() {
    let d = Daemon::start(1);
    let mut c = client(&d, 0);
    assert_reset_state(&mut c);

    // STORE then LOAD, at both ends of the file and on both sides of an ERS word boundary.
    let values = [
        (0u32, 0x0123_4567_89AB_CDEFu64),
        (1, u64::MAX),
        (31, 1 << 63),
        (32, 0x8000_0001),
        (511, 0xFEDC_BA98_7654_3210),
    ];
    for (e, v) in values {
        ereg_store(&mut c, e, v);
    }
    for (e, v) in values {
        assert_eq!(ereg_load(&mut c, e), v, "E register {e}");
        let at = t3e::E_REGS + 8 * e as u64;
        assert_eq!(
            t3e_read32(&mut c, at),
            v as u32,
            "low half of E register {e}"
        );
        assert_eq!(
            t3e_read32(&mut c, at + 4),
            (v >> 32) as u32,
            "high half of E register {e}"
        );
        assert_eq!(ers(&mut c, e), ers::FULL);
    }
    assert_eq!(ereg_load(&mut c, 2), 0, "a neighbour untouched");
    // The segment table: plain read-write registers of the NI's own driver.
    set_segment(&mut c, 7, 0x1234_5000, 0x3000, seg::REMOTE_READ);
    let at = t3e::SEGMENT + t3e::SEGMENT_STRIDE * 7;
    assert_eq!(t3e_read(&mut c, at), 0x1234_5000);
    assert_eq!(t3e_read(&mut c, at + 8), 0x3000 | seg::REMOTE_READ);

    // A GET into register 33 from segment 5 of this PE itself, which is undefined.
    assert_eq!(remote(&mut c, op::GET, 33, 0, gva::make(5, 0)), ers::FULL_F);
    assert_eq!(cmd_error(&mut c), (Error::BadSegment, 33, op::GET));
    assert_eq!(ers_word(&mut c, 0), ALL_FULL);
    assert_eq!(
        ers_word(&mut c, 1),
        (ALL_FULL & !(0b11 << 2)) | (ers::FULL_F << 2)
    );
    assert_eq!(ers_word(&mut c, 1), 0xAAAA_AAAA_AAAA_AAA6);
    assert_eq!(ers(&mut c, 33), ers::FULL_F);
    ereg_store(&mut c, 33, 7);
    assert_eq!(ers_word(&mut c, 1), ALL_FULL, "a STORE makes it FULL");
    assert_eq!(ereg_load(&mut c, 33), 7);
}

/// HMM-148-0 p. 4 Fig. 2 and pp. 9-11 Figs. 6-7 (checklist 2, 4, 18, 19): a SEND from E
/// registers e..e+7 (e = 16) lands in the peer's queue in slot Tail, at MQCW + 64·Tail, word
/// i = E[e+i] bit for bit; Tail goes up by exactly one, the slots around it stay as they
/// were, and the block's ERS codes go FULL (SEND-accepted).
#[test]
fn a_send_lands_bit_exact_in_slot_tail() {
    let d = Daemon::start(2);
    let mut a = Pe::attach(&d, 0);
    let b = Pe::attach(&d, 1);
    const Q: u64 = 0x1000;
    b.write64(Q, mqcw::make(false, 3, 8, 0));
    let words = [
        0,
        u64::MAX,
        1 << 63,
        1,
        0xDEAD_BEEF_CAFE_F00D,
        0x0102_0304_0506_0708,
        0x5555_5555_5555_5555,
        0xAAAA_AAAA_AAAA_AAAA,
    ];
    assert_eq!(send(&mut a.c, 16, &words, 1, gva::make(SEG, Q)), ers::FULL);
    assert_eq!(
        ers_word(&mut a.c, 0),
        ALL_FULL,
        "E registers 16..23 FULL, the others untouched"
    );
    assert_eq!(b.words(Q + 64 * 3, 8), words, "slot 3 = MQCW + 64·Tail");
    for slot in [1, 2, 4] {
        assert_eq!(b.words(Q + 64 * slot, 8), [0u64; 8], "slot {slot}");
    }
    assert_eq!(
        b.read64(Q),
        mqcw::make(false, 4, 8, 0),
        "Tail + 1, nothing else"
    );
    assert_eq!(d.counter(1, "mq_stored"), 1);
    assert_eq!(d.counter(0, "t3e_sends"), 1);
    assert_eq!(d.counter(0, "mq_sends"), 1);
    assert_eq!(d.counter(0, "t3e_failed"), 0);
}

/// HMM-148-0 p. 8 "ERS Codes", p. 9 "Receiving and Storing a Message" and p. 16 step 6
/// (checklist 3, 5, 19): a queue of limit 2 with Tail 1 takes one message; the next SEND is
/// rejected — FULL_SR (11), nothing stored, the MQCW unchanged — and its words stay in the E
/// registers. Once the receiver resets its MQCW, the sender issues the same CMD_ISSUE again
/// with no STORE in between, and the original words arrive.
#[test]
fn a_rejected_send_goes_again_without_a_reload() {
    let d = Daemon::start(2);
    let mut a = Pe::attach(&d, 0);
    let b = Pe::attach(&d, 1);
    const Q: u64 = 0x2000;
    let q = gva::make(SEG, Q);
    b.queue(Q, 2, 0);
    let first: [u64; 8] = std::array::from_fn(|i| 0x1000 + i as u64);
    let second: [u64; 8] = std::array::from_fn(|i| 0x2000 + i as u64);
    assert_eq!(send(&mut a.c, 0, &first, 1, q), ers::FULL);
    assert_eq!(b.read64(Q), mqcw::make(false, 2, 2, 0));
    let before = b.words(Q, 3 * 8);
    assert_eq!(
        send(&mut a.c, 8, &second, 1, q),
        ers::FULL_SR,
        "Tail = Limit: rejected"
    );
    assert_eq!(
        ers_word(&mut a.c, 0) & 0xFFFF_FFFF,
        0xFFFF_AAAA,
        "E 8..15 FULL_SR (11), E 0..7 FULL (10)"
    );
    assert_eq!(
        b.words(Q, 3 * 8),
        before,
        "nothing stored, the MQCW unchanged"
    );
    assert_eq!(d.counter(1, "mq_rejected"), 1);
    assert_eq!(d.counter(1, "mq_stored"), 1);
    for (i, &w) in second.iter().enumerate() {
        assert_eq!(
            ereg_load(&mut a.c, 8 + i as u32),
            w,
            "the words stay for a resend"
        );
    }

    // The receiver resets its queue with a new MQCW; the sender issues the command again.
    b.queue(Q, 2, 0);
    issue(&mut a.c, op::SEND, 8, 0);
    assert_eq!(wait_not_empty(&mut a.c, 8), ers::FULL);
    assert_eq!(ers_word(&mut a.c, 0), ALL_FULL);
    assert_eq!(b.words(Q + 64, 8), second, "the original words, no reload");
    assert_eq!(b.read64(Q), mqcw::make(false, 2, 2, 0));
    assert_eq!(d.counter(1, "mq_stored"), 2);
    assert_eq!(d.counter(0, "t3e_failed"), 0);
}

/// HMM-148-0 p. 5 Fig. 3 and pp. 12-15 Figs. 9-11 (checklist 6-12, 17): IR_STATUS bit 32
/// (MSG_ADDR_VALID) and MSG_ADDR = the MQCW's GVA as the sender named it (segment <37:32>,
/// offset <30:0>) latch at the receiver when the post-increment Tail equals the Threshold —
/// not before, not after — with Sig set in the same update; a second queue hitting its
/// threshold sets MSG_MULTIPLE and leaves MSG_ADDR; writing 0 changes nothing and a 1 clears
/// its bit only; once VALID is clear the next hit latches its own queue.
#[test]
fn the_threshold_latches_msg_addr_and_multiple() {
    let d = Daemon::start(2);
    let mut a = Pe::attach(&d, 0);
    let mut b = Pe::attach(&d, 1);
    const Q1: u64 = 0x1000;
    const Q2: u64 = 0x2000;
    let (q1, q2) = (gva::make(SEG, Q1), gva::make(SEG, Q2));
    let bits = regs::MSG_ADDR_VALID | regs::MSG_MULTIPLE;
    let msg = |k: u64| -> [u64; 8] { std::array::from_fn(|i| (k << 8) | i as u64) };
    b.queue(Q1, 8, 3);
    b.queue(Q2, 8, 2);

    // Tail 1 -> 2, below the threshold 3: nothing.
    assert_eq!(send(&mut a.c, 0, &msg(1), 1, q1), ers::FULL);
    assert_eq!(fp_read(&mut b.c, regs::IR_STATUS) & bits, 0);
    assert_eq!(b.read64(Q1), mqcw::make(false, 2, 8, 3));
    // Tail 2 -> 3 = Threshold: Sig, VALID, MSG_ADDR.
    assert_eq!(send(&mut a.c, 0, &msg(2), 1, q1), ers::FULL);
    assert_eq!(
        b.read64(Q1),
        mqcw::make(true, 3, 8, 3),
        "Sig set with the Tail"
    );
    assert_eq!(
        fp_read(&mut b.c, regs::IR_STATUS) & bits,
        regs::MSG_ADDR_VALID
    );
    let addr = fp_read(&mut b.c, regs::MSG_ADDR);
    assert_eq!(addr, q1, "the MQCW's GVA as the sender named it");
    assert_eq!(addr & gva::MBZ, 0, "<63:38> and 31 read as zero");
    assert_eq!(d.counter(1, "mq_threshold"), 1);

    // Queue 2 hits its threshold while VALID is set: MULTIPLE; MSG_ADDR stays locked.
    assert_eq!(send(&mut a.c, 0, &msg(3), 1, q2), ers::FULL);
    assert_eq!(fp_read(&mut b.c, regs::IR_STATUS) & bits, bits);
    assert_eq!(fp_read(&mut b.c, regs::MSG_ADDR), q1);
    assert!(mqcw::sig(b.read64(Q2)));

    // Write 1 to clear, bit by bit; a 0 changes nothing.
    fp_write(&mut b.c, regs::IR_STATUS, 0);
    assert_eq!(fp_read(&mut b.c, regs::IR_STATUS) & bits, bits);
    fp_write(&mut b.c, regs::IR_STATUS, regs::MSG_ADDR_VALID);
    assert_eq!(
        fp_read(&mut b.c, regs::IR_STATUS) & bits,
        regs::MSG_MULTIPLE
    );
    fp_write(&mut b.c, regs::IR_STATUS, regs::MSG_MULTIPLE);
    assert_eq!(fp_read(&mut b.c, regs::IR_STATUS) & bits, 0);

    // Tail 3 -> 4, past the threshold: nothing signalled, Sig left as it is.
    assert_eq!(send(&mut a.c, 0, &msg(4), 1, q1), ers::FULL);
    assert_eq!(fp_read(&mut b.c, regs::IR_STATUS) & bits, 0);
    assert_eq!(b.read64(Q1), mqcw::make(true, 4, 8, 3));

    // VALID clear: the next hit, on queue 2 reset by software, latches queue 2.
    b.queue(Q2, 8, 2);
    assert_eq!(send(&mut a.c, 0, &msg(5), 1, q2), ers::FULL);
    assert_eq!(
        fp_read(&mut b.c, regs::IR_STATUS) & bits,
        regs::MSG_ADDR_VALID
    );
    assert_eq!(fp_read(&mut b.c, regs::MSG_ADDR), q2);
    assert_eq!(b.words(Q2 + 64, 8), msg(5));
    assert_eq!(d.counter(1, "mq_threshold"), 3);
}

/// HMM-148-0 p. 7 Table 1 ("Global Index", "Centrifuge Mask", "Base Virtual Address"): with
/// a centrifuge that takes the PE from index bits 3 and 40 (packed low to high) and the
/// offset from the other bits, a SEND reaches the same queue as with the reset layout (PE in
/// <63:52>). Index bit 40 alone names PE 2, which a partition of two does not have.
#[test]
fn a_centrifuge_mask_addresses_the_same_queue() {
    let d = Daemon::start(2);
    let mut a = Pe::attach(&d, 0);
    let b = Pe::attach(&d, 1);
    const Q: u64 = 0x3000;
    b.queue(Q, 8, 0);
    let mask: u64 = (1 << 3) | (1 << 40);
    t3e_write(&mut a.c, t3e::CMD_CENTRIFUGE, mask);
    assert_eq!(t3e_read(&mut a.c, t3e::CMD_CENTRIFUGE), mask);
    let words: [u64; 8] = std::array::from_fn(|i| 0xCE00 + i as u64);
    for (i, &w) in words.iter().enumerate() {
        ereg_store(&mut a.c, i as u32, w);
    }
    // GVA = base + offset: the offset carries the queue's place in the segment.
    t3e_write(&mut a.c, t3e::CMD_BASE, gva::make(SEG, 0));
    t3e_write(&mut a.c, t3e::CMD_INDEX, pdep(1, mask) | pdep(Q, !mask));
    issue(&mut a.c, op::SEND, 0, 0);
    assert_eq!(
        wait_not_empty(&mut a.c, 0),
        ers::FULL,
        "{:?}",
        cmd_error(&mut a.c)
    );
    assert_eq!(b.words(Q + 64, 8), words);
    assert_eq!(b.read64(Q), mqcw::make(false, 2, 8, 0));

    // PE bit 1 is index bit 40: PE 2.
    t3e_write(&mut a.c, t3e::CMD_INDEX, pdep(2, mask) | pdep(Q, !mask));
    issue(&mut a.c, op::SEND, 0, 0);
    assert_eq!(wait_not_empty(&mut a.c, 0), ers::FULL_F);
    assert_eq!(cmd_error(&mut a.c), (Error::NoSuchPe, 0, op::SEND));
    assert_eq!(b.read64(Q), mqcw::make(false, 2, 8, 0));

    // The reset layout names the same queue: the next slot.
    t3e_write(&mut a.c, t3e::CMD_CENTRIFUGE, t3e::CENTRIFUGE_DEFAULT);
    let more: [u64; 8] = std::array::from_fn(|i| 0xD000 + i as u64);
    assert_eq!(send(&mut a.c, 8, &more, 1, gva::make(SEG, Q)), ers::FULL);
    assert_eq!(b.words(Q + 128, 8), more);
    assert_eq!(b.read64(Q), mqcw::make(false, 3, 8, 0));
}

/// SSD-T90 Table 2 (the PE's GET, PUT, PUT8, PUTV4, GETV8) and its PUT-counter note
/// (checklist 34): one word each way, eight consecutive words, four words at a stride of 16
/// and of -8 bytes (the stride is E[MO] at issue), eight words back at a stride of 8 — each
/// checked against the target's memory with the gaps untouched — and PUT_COUNT back at 0
/// once the PUTs are acknowledged.
#[test]
fn get_put_and_the_vector_forms_move_the_right_words() {
    let d = Daemon::start(2);
    let mut a = Pe::attach(&d, 0);
    let b = Pe::attach(&d, 1);
    const D: u64 = 0x3000;
    const MO: u32 = 40;
    let at = |off: u64| gva::make(SEG, D + off);
    let c = &mut a.c;

    b.write64(D, 0x1122_3344_5566_7788);
    assert_eq!(remote(c, op::GET, 5, 1, at(0)), ers::FULL);
    assert_eq!(ereg_load(c, 5), 0x1122_3344_5566_7788);

    ereg_store(c, 6, 0xFEED_FACE);
    assert_eq!(remote(c, op::PUT, 6, 1, at(8)), ers::FULL);
    assert_eq!(b.read64(D + 8), 0xFEED_FACE);
    assert_eq!(t3e_read(c, t3e::PUT_COUNT), 0);

    let p8: [u64; 8] = std::array::from_fn(|i| 0x8800 + i as u64);
    for (i, &w) in p8.iter().enumerate() {
        ereg_store(c, 8 + i as u32, w);
    }
    assert_eq!(remote(c, op::PUT8, 8, 1, at(0x100)), ers::FULL);
    assert_eq!(b.words(D + 0x100, 8), p8);
    assert_eq!(b.read64(D + 0x140), 0, "eight words, no more");

    // PUTV4 at a stride of 16: every other word.
    set_mo(c, MO);
    ereg_store(c, MO, 16);
    let v4: [u64; 4] = std::array::from_fn(|i| 0x4400 + i as u64);
    for (i, &w) in v4.iter().enumerate() {
        ereg_store(c, 4 + i as u32, w);
    }
    assert_eq!(remote(c, op::PUTV4, 4, 1, at(0x200)), ers::FULL);
    for (i, &w) in v4.iter().enumerate() {
        let off = D + 0x200 + 16 * i as u64;
        assert_eq!(b.read64(off), w, "word {i} at +{}", 16 * i);
        assert_eq!(b.read64(off + 8), 0, "the gap after word {i}");
    }

    // PUTV4 at a stride of -8: down from the GVA.
    ereg_store(c, MO, (-8i64) as u64);
    let w4: [u64; 4] = std::array::from_fn(|i| 0x4800 + i as u64);
    for (i, &w) in w4.iter().enumerate() {
        ereg_store(c, 12 + i as u32, w);
    }
    assert_eq!(remote(c, op::PUTV4, 12, 1, at(0x400)), ers::FULL);
    for (i, &w) in w4.iter().enumerate() {
        assert_eq!(
            b.read64(D + 0x400 - 8 * i as u64),
            w,
            "word {i} at -{}",
            8 * i
        );
    }
    assert_eq!(b.read64(D + 0x408), 0);
    assert_eq!(b.read64(D + 0x3E0), 0);

    // GETV8 at a stride of 8 reads the PUT8's words back.
    ereg_store(c, MO, 8);
    assert_eq!(remote(c, op::GETV8, 24, 1, at(0x100)), ers::FULL);
    let got: Vec<u64> = (24..32).map(|e| ereg_load(c, e)).collect();
    assert_eq!(got, p8);

    assert_eq!(t3e_read(c, t3e::PUT_COUNT), 0);
    assert_eq!(t3e_read(c, t3e::OUTSTANDING), 0);
    assert_eq!(d.counter(0, "t3e_failed"), 0);
}

/// Run an atomic on the word at `at` of `b`'s memory with `operands` in E[MO], E[MO+1]:
/// (old value from E register 1, the word afterwards).
fn atomic(c: &mut Client, b: &Pe, at: u64, opc: u64, operands: &[u64]) -> (u64, u64) {
    const MO: u32 = 40;
    set_mo(c, MO);
    for (i, &v) in operands.iter().enumerate() {
        ereg_store(c, MO + i as u32, v);
    }
    assert_eq!(
        remote(c, opc, 1, 1, gva::make(SEG, at)),
        ers::FULL,
        "opcode {opc:#x}: {:?}",
        cmd_error(c)
    );
    (ereg_load(c, 1), b.read64(at))
}

/// SSD-T90 Table 2 (GET_INC, GET_ADD, SWAP, CSWAP, GET_SET, GET_CLEAR): each returns the
/// word's old value in E[e] and leaves the word as the operation says — an add of -1 wraps,
/// CSWAP stores E[MO+1] only when the word equals E[MO].
#[test]
fn atomics_return_the_old_value_and_update_the_word() {
    let d = Daemon::start(2);
    let mut a = Pe::attach(&d, 0);
    let b = Pe::attach(&d, 1);
    const A: u64 = 0x4000;
    let c = &mut a.c;
    b.write64(A, 10);
    assert_eq!(atomic(c, &b, A, op::GET_INC, &[]), (10, 11));
    assert_eq!(atomic(c, &b, A, op::GET_ADD, &[5]), (11, 16));
    assert_eq!(atomic(c, &b, A, op::GET_ADD, &[u64::MAX]), (16, 15));
    assert_eq!(atomic(c, &b, A, op::SWAP, &[100]), (15, 100));
    assert_eq!(
        atomic(c, &b, A, op::CSWAP, &[100, 200]),
        (100, 200),
        "match: swapped"
    );
    assert_eq!(
        atomic(c, &b, A, op::CSWAP, &[999, 300]),
        (200, 200),
        "no match: unchanged"
    );
    assert_eq!(atomic(c, &b, A, op::GET_SET, &[0xF00]), (200, 0xFC8));
    assert_eq!(
        atomic(c, &b, A, op::GET_CLEAR, &[0x8F0]),
        (0xFC8, 0xFC8 & !0x8F0)
    );
    assert_eq!(b.read64(A + 8), 0, "one word only");
    assert_eq!(d.counter(0, "t3e_failed"), 0);
}

/// HMM-148-0 p. 8 Table 2 (FULL_F: "a deferred software error was detected during the
/// transfer"; checklist 19) and SSD-T90 Table 2: every error met in the network ends the
/// command FULL_F with its cause, register and opcode in CMD_ERROR, whose count goes up, and
/// in `t3e_failed` — an undefined segment; a segment without the access asked for
/// (MESSAGE_QUEUE for SEND, REMOTE_WRITE for PUT, REMOTE_READ for GET, both for an atomic);
/// an offset past the segment or into memory the client never mapped; a PE outside the
/// partition or without a client; GVA bits that must be zero; GVAs not aligned for the
/// command; a queue with Tail 0. A failed PUT leaves its source FULL_F and PUT_COUNT at 0.
/// Nothing is written, and the registers work again afterwards.
#[test]
fn errors_in_the_network_end_full_f_with_their_cause() {
    let d = Daemon::start(3); // NI 2 never gets a client
    let mut a = Pe::attach(&d, 0);
    let mut b = Pe::attach(&d, 1);
    set_segment(
        &mut b.c,
        2,
        IOVA,
        0x1000,
        seg::REMOTE_READ | seg::REMOTE_WRITE,
    );
    set_segment(&mut b.c, 3, IOVA + MEM_SIZE, 0x1000, ALL_ACCESS);
    set_segment(&mut b.c, 4, IOVA, 0x1000, seg::REMOTE_READ);
    set_segment(&mut b.c, 6, IOVA, 0x1000, seg::REMOTE_WRITE);
    const Q: u64 = 0x2000;
    let tail0 = mqcw::make(false, 0, 4, 0);
    b.write64(Q, tail0);
    for e in 8..16 {
        ereg_store(&mut a.c, e, 0x5E00 + e as u64);
    }
    ereg_store(&mut a.c, 2, 0xBAD);
    let cases = [
        (
            "an undefined segment",
            op::GET,
            1,
            1,
            gva::make(5, 0),
            Error::BadSegment,
        ),
        (
            "a SEND into a segment without MESSAGE_QUEUE",
            op::SEND,
            8,
            1,
            gva::make(2, 0),
            Error::BadSegment,
        ),
        (
            "a PUT into a segment without REMOTE_WRITE",
            op::PUT,
            2,
            1,
            gva::make(4, 0x10),
            Error::BadSegment,
        ),
        (
            "a GET from a segment without REMOTE_READ",
            op::GET,
            1,
            1,
            gva::make(6, 0x10),
            Error::BadSegment,
        ),
        (
            "a GET_INC on a read-only segment",
            op::GET_INC,
            1,
            1,
            gva::make(4, 0x10),
            Error::BadSegment,
        ),
        (
            "an offset past the segment",
            op::GET,
            1,
            1,
            gva::make(SEG, MEM_SIZE),
            Error::OutOfBounds,
        ),
        (
            "memory the client never mapped",
            op::GET,
            1,
            1,
            gva::make(3, 0),
            Error::OutOfBounds,
        ),
        (
            "a PE outside the partition",
            op::GET,
            1,
            7,
            gva::make(SEG, 0),
            Error::NoSuchPe,
        ),
        (
            "a PE without a client",
            op::GET,
            1,
            2,
            gva::make(SEG, 0),
            Error::PeerDown,
        ),
        (
            "GVA bit 31",
            op::GET,
            1,
            1,
            gva::make(SEG, 0) | (1 << 31),
            Error::BadAddress,
        ),
        (
            "GVA bit 38",
            op::GET,
            1,
            1,
            gva::make(SEG, 0) | (1 << 38),
            Error::BadAddress,
        ),
        (
            "a GET not 8-byte aligned",
            op::GET,
            1,
            1,
            gva::make(SEG, 0x104),
            Error::BadAddress,
        ),
        (
            "a SEND not 64-byte aligned",
            op::SEND,
            8,
            1,
            gva::make(SEG, Q + 8),
            Error::BadAddress,
        ),
        (
            "a SEND into a queue with Tail 0",
            op::SEND,
            8,
            1,
            gva::make(SEG, Q),
            Error::BadMqcw,
        ),
        (
            "a PUT into an undefined segment",
            op::PUT,
            2,
            1,
            gva::make(5, 0),
            Error::BadSegment,
        ),
    ];
    for (n, &(what, opc, e, pe, at, want)) in cases.iter().enumerate() {
        assert_eq!(remote(&mut a.c, opc, e, pe, at), ers::FULL_F, "{what}");
        assert_eq!(cmd_error(&mut a.c), (want, e, opc), "{what}");
        assert_eq!(
            cmd_error_count(&mut a.c),
            n as u64 + 1,
            "{what}: counted in CMD_ERROR <63:48>"
        );
        assert_eq!(
            d.counter(0, "t3e_failed"),
            n as u64 + 1,
            "{what}: counted in t3e_failed"
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
    assert_eq!(d.counter(0, "t3e_refused"), 0, "all of them went out");
    assert_eq!(b.read64(0x10), 0, "nothing written");
    assert_eq!(b.read64(Q), tail0, "the MQCW untouched");
    assert_eq!(b.read64(Q + 64), 0);

    // The same registers work again.
    b.write64(0x20, 42);
    assert_eq!(
        remote(&mut a.c, op::GET, 1, 1, gva::make(SEG, 0x20)),
        ers::FULL
    );
    assert_eq!(ereg_load(&mut a.c, 1), 42);
    assert_eq!(
        remote(&mut a.c, op::PUT, 2, 1, gva::make(SEG, 0x28)),
        ers::FULL
    );
    assert_eq!(b.read64(0x28), 0xBAD);
}

// ---- special routing and the router registers (SSD-T90) ----

/// SSD-T90 "Special Routing" (Figs. 15-16; checklist 35) and "Node Identification" (Fig. 11):
/// an SGET with deltas 0 reads the issuing node's own router, whose R_PHYS is its physical PE
/// number ZZYYXX as `nodes` reports it; with ΔX +1 the neighbour's, the reply coming back by
/// the R_SGET_RTRN deltas written there first; ΔX -1 wraps round the ring to X 2; primary ΔX
/// +1 then secondary ΔY +1 reach node 000101 — spares have routers too.
#[test]
fn sget_reads_r_phys_of_the_router_the_deltas_reach() {
    let d = Daemon::start_with(2, &["--torus", "3x3x1"]);
    let mut a = client(&d, 0);
    let mut b = client(&d, 1);
    let nodes = ctl(&d, json!({"version": 1, "request": "nodes"}));
    let phys = |i: usize| hex(&nodes["nodes"][i]["physical"]);
    assert_eq!(
        (phys(0), phys(1)),
        (0x000000, 0x000001),
        "NI i on the i-th node, X fastest"
    );
    assert_eq!(router_read(&mut a, HERE, r::R_PHYS), phys(0));
    assert_eq!(router_read(&mut b, HERE, r::R_PHYS), phys(1));

    router_write(&mut a, PLUS_X, r::R_SGET_RTRN, delta::make(MINUS_X));
    assert_eq!(
        router_read(&mut a, PLUS_X, r::R_SGET_RTRN),
        delta::make(MINUS_X)
    );
    assert_eq!(router_read(&mut a, PLUS_X, r::R_PHYS), 0x000001);

    router_write(&mut a, MINUS_X, r::R_SGET_RTRN, delta::make(PLUS_X));
    assert_eq!(
        router_read(&mut a, MINUS_X, r::R_PHYS),
        0x000002,
        "-1 from X 0 wraps to X 2"
    );

    // Primary ΔX, then secondary ΔY; the reply goes back primary ΔY, then secondary ΔX.
    let xy = [1, 0, 0, 0, 1, 0];
    router_write(
        &mut a,
        xy,
        r::R_SGET_RTRN,
        delta::make([0, -1, 0, -1, 0, 0]),
    );
    assert_eq!(router_read(&mut a, xy, r::R_PHYS), 0x000101);
    assert_eq!(d.counter(0, "t3e_sputs"), 3);
    assert_eq!(d.counter(0, "t3e_sgets"), 5);
    assert_eq!(d.counter(1, "t3e_sgets"), 1);
}

/// SSD-T90 "Special Routing" ("it travels in the order shown in the list above": primary
/// ΔX, ΔY, ΔZ, then secondary; checklist 35): with the Y link 000000-000100 mapped out,
/// (pΔX +1, sΔY +1) reaches 000101 by way of 000001, while (pΔY +1, sΔX +1), the same
/// destination the other way round, meets the mapped-out link first: LinkMappedOut, FULL_F,
/// for an SGET as for an SPUT, which writes nothing.
#[test]
fn deltas_are_consumed_in_order() {
    let d = Daemon::start_with(2, &["--torus", "3x3x1"]);
    let mut a = client(&d, 0);
    ctl(
        &d,
        json!({"version": 1, "request": "map_out_link", "a": "000000", "b": "000100"}),
    );
    let x_first = [1, 0, 0, 0, 1, 0];
    let y_first = [0, 1, 0, 1, 0, 0];
    // 000101 replies Y first, then X: through 000001, clear of the mapped-out link.
    router_write(
        &mut a,
        x_first,
        r::R_SGET_RTRN,
        delta::make([0, -1, 0, -1, 0, 0]),
    );
    router_write(&mut a, x_first, r::R_SW, 0x5157);
    assert_eq!(router_read(&mut a, x_first, r::R_PHYS), 0x000101);
    assert_eq!(router_read(&mut a, x_first, r::R_SW), 0x5157);

    let (code, _) = sget(&mut a, y_first, r::R_SW, 9);
    assert_eq!(code, ers::FULL_F);
    assert_eq!(cmd_error(&mut a), (Error::LinkMappedOut, 9, op::SGET));
    ereg_store(&mut a, 9, 0xBAD);
    assert_eq!(sput(&mut a, y_first, r::R_SW, 9), ers::FULL_F);
    assert_eq!(cmd_error(&mut a), (Error::LinkMappedOut, 9, op::SPUT));
    assert_eq!(
        router_read(&mut a, x_first, r::R_SW),
        0x5157,
        "the SPUT wrote nothing"
    );
    assert_eq!(d.counter(0, "t3e_failed"), 2);
}

/// SSD-T90 "Special Routing" (the NOTE on R_SGET_RTRN) and Table 8 bit 56: an SGET whose
/// reply, routed by the target router's R_SGET_RTRN, ends elsewhere than at the issuing node
/// fails — FULL_F, ReturnPath — and the packet misroute is latched in R_ERR0 bit 56 of the
/// router the reply reached, where that node's own PE reads it (and clears it by writing a
/// 1); with the return path right the same SGET comes home.
#[test]
fn an_sget_reply_that_misses_home_is_a_misroute_where_it_lands() {
    let d = Daemon::start_with(3, &["--torus", "3x1x1"]);
    let mut a = client(&d, 0);
    let mut z = client(&d, 2);
    router_write(&mut a, PLUS_X, r::R_SW, 0x77);
    // 000001 sends its replies +X: to 000002, not home to 000000.
    router_write(&mut a, PLUS_X, r::R_SGET_RTRN, delta::make(PLUS_X));
    let (code, _) = sget(&mut a, PLUS_X, r::R_SW, 3);
    assert_eq!(code, ers::FULL_F);
    assert_eq!(cmd_error(&mut a), (Error::ReturnPath, 3, op::SGET));
    assert_eq!(d.counter(0, "t3e_failed"), 1);
    assert_eq!(
        router_read(&mut z, HERE, r::R_ERR0),
        1 << r::ERR_MISROUTE,
        "latched where the reply ended"
    );
    assert_eq!(d.counter(2, "router_errors"), 1);
    assert_eq!(router_read(&mut a, HERE, r::R_ERR0), 0, "not at the issuer");
    router_write(&mut z, HERE, r::R_ERR0, 1 << r::ERR_MISROUTE);
    assert_eq!(
        router_read(&mut z, HERE, r::R_ERR0),
        0,
        "a written 1 clears"
    );

    router_write(&mut a, PLUS_X, r::R_SGET_RTRN, delta::make(MINUS_X));
    assert_eq!(router_read(&mut a, PLUS_X, r::R_SW), 0x77);
}

/// SSD-T90 "Special Routing" (SPUT, then SGET of the same register), "Offline Diagnostics"
/// (`rchip`: R_SW) and Table 1 (checklist 26): R_SW is each router's own read-write register,
/// and, the routers being the network's, an NI reset leaves it; R_ORIENT bit 0 swaps which X
/// port is + — `route` shows the hop leaving 000000 by X1 once its R_ORIENT is 1, and
/// entering 000001 by X0 once that router's is.
#[test]
fn sput_writes_r_sw_and_r_orient_renames_the_ports() {
    let d = Daemon::start_with(2, &["--torus", "4x1x1"]);
    let mut a = client(&d, 0);
    assert_eq!(router_read(&mut a, HERE, r::R_SW), 0);
    router_write(&mut a, HERE, r::R_SW, 0x0123_4567_89AB_CDEF);
    router_write(&mut a, PLUS_X, r::R_SGET_RTRN, delta::make(MINUS_X));
    assert_eq!(
        router_read(&mut a, PLUS_X, r::R_SW),
        0,
        "another router, another register"
    );
    router_write(&mut a, PLUS_X, r::R_SW, u64::MAX);
    assert_eq!(router_read(&mut a, HERE, r::R_SW), 0x0123_4567_89AB_CDEF);
    assert_eq!(router_read(&mut a, PLUS_X, r::R_SW), u64::MAX);
    // An NI reset does not touch the routers.
    a.reset().unwrap();
    enable(&mut a);
    assert_eq!(router_read(&mut a, HERE, r::R_SW), 0x0123_4567_89AB_CDEF);
    assert_eq!(router_read(&mut a, PLUS_X, r::R_SW), u64::MAX);

    let hop = |d: &Daemon| -> (Value, Value, Value) {
        let h = route(d, 0, 1)["hops"][0].clone();
        (
            h["direction"].clone(),
            h["out_port"].clone(),
            h["in_port"].clone(),
        )
    };
    assert_eq!(
        hop(&d),
        (json!("+X"), json!("X0"), json!("X1")),
        "R_ORIENT 0: X0 is +X, X1 is -X"
    );
    assert_eq!(router_read(&mut a, HERE, r::R_ORIENT), 0);
    router_write(&mut a, HERE, r::R_ORIENT, 1);
    assert_eq!(router_read(&mut a, HERE, r::R_ORIENT), 1);
    assert_eq!(hop(&d), (json!("+X"), json!("X1"), json!("X1")));
    router_write(&mut a, PLUS_X, r::R_ORIENT, 1);
    assert_eq!(router_read(&mut a, PLUS_X, r::R_ORIENT), 1);
    assert_eq!(hop(&d), (json!("+X"), json!("X1"), json!("X0")));
    // The Y and Z bits are held as well.
    router_write(&mut a, HERE, r::R_ORIENT, 0b101);
    assert_eq!(router_read(&mut a, HERE, r::R_ORIENT), 0b101);
    assert_eq!(hop(&d), (json!("+X"), json!("X1"), json!("X0")));
}

/// SSD-T90 "Routing Tag Look-up Table" (Table 7) and "Node Identification" (mapping out a bad
/// node; checklist 21): R_NET_LUT entry l reads back the tag the administrator's tooling
/// computed for logical PE l at that router — what `route` reports as the source's tag, 0
/// past the logical PEs; an SPUT-written entry reads back as written and `topology` lists it
/// in `written_lut`; a map-out reprograms every LUT: the moved PE's entry now routes to the
/// spare, and the SPUT-written entry is gone.
#[test]
fn lut_entries_read_back_and_a_map_out_reprograms_them() {
    let d = Daemon::start_with(3, &["--torus", "4x1x1"]);
    let mut a = client(&d, 0);
    let tag_of = |d: &Daemon, to: u32| route(d, 0, to)["tag"].as_u64().expect("a tag");
    let before = router_read(&mut a, HERE, lut(2));
    assert_eq!(before, tag_of(&d, 2));
    assert_eq!(before & 0x7, 2, "X address 2: logical PE 2 sits on 000002");
    assert_eq!(router_read(&mut a, HERE, lut(1)), tag_of(&d, 1));
    assert_eq!(router_read(&mut a, HERE, lut(3)), 0, "three logical PEs");
    assert_eq!(router_read(&mut a, HERE, lut(543)), 0);

    // Entry 1 of the neighbour's router, written by SPUT.
    router_write(&mut a, PLUS_X, r::R_SGET_RTRN, delta::make(MINUS_X));
    let computed = router_read(&mut a, PLUS_X, lut(1));
    let t = tag_plus(3, 0, 0) | TAG_X_MINUS;
    assert_ne!(computed, t);
    router_write(&mut a, PLUS_X, lut(1), t);
    assert_eq!(router_read(&mut a, PLUS_X, lut(1)), t);
    assert_eq!(
        router_read(&mut a, HERE, lut(1)),
        tag_of(&d, 1),
        "router 000000's entry 1 is its own"
    );
    let written = topology(&d)["written_lut"].clone();
    assert_eq!(written.as_array().map(Vec::len), Some(1), "{written}");
    assert!(names_node(&written[0]["router"], 0x000001), "{written}");
    assert_eq!(written[0]["index"], 1, "{written}");
    assert_eq!(written[0]["tag"], t, "{written}");

    // Node 000002 goes: logical PE 2 moves to the spare, 000003.
    let m = ctl(
        &d,
        json!({"version": 1, "request": "map_out_node", "node": "2"}),
    );
    assert_eq!(m["remap"]["to"], "000003", "{m}");
    let after = router_read(&mut a, HERE, lut(2));
    assert_ne!(after, before, "PE 2's entry reprogrammed");
    assert_eq!(after & 0x7, 3, "X address 3");
    assert_eq!(after, tag_of(&d, 2));
    assert_eq!(
        router_read(&mut a, PLUS_X, lut(1)),
        computed,
        "the SPUT-written entry is gone"
    );
    let written = topology(&d)["written_lut"].clone();
    assert_eq!(
        written.as_array().map_or(0, Vec::len),
        0,
        "no SPUT-written entry left: {written}"
    );
}

/// SSD-T90 Tables 6-7 and Table 8 bit 56 (checklist 21, 27): an SPUT-written R_NET_LUT entry
/// that routes logical PE 1 to node 000002 makes PUTs and SENDs to PE 1 fail — FULL_F,
/// NoRoute, nothing arrives — with the misroute latched in R_ERR0 bit 56 where the packet
/// ended. R_LUT_OVERRIDE mode 3 uses its own tag for every packet: traffic to PE 1 flows
/// again, and traffic to PE 2 now ends at 000001. Mode 1 takes entry l>>2 with tag bit 0 from
/// l bit 0 and bit 8 from l bit 1: PE 1 goes by entry 0 with X address 1 whatever entry 1
/// says, and PE 2 gets Y address 1 on a torus one node high — a tag outside the torus,
/// latched at the source router.
#[test]
fn a_misrouting_lut_entry_fails_until_the_override_routes_around_it() {
    let d = Daemon::start_with(3, &["--torus", "4x1x1"]);
    let mut a = Pe::attach(&d, 0);
    let mut b = Pe::attach(&d, 1);
    let mut z = Pe::attach(&d, 2);
    let at = |off: u64| gva::make(SEG, off);
    let put = |a: &mut Pe, pe: u32, off: u64, v: u64| -> u64 {
        ereg_store(&mut a.c, 0, v);
        remote(&mut a.c, op::PUT, 0, pe, at(off))
    };
    assert_eq!(put(&mut a, 1, 0x100, 0x600D), ers::FULL);
    assert_eq!(b.read64(0x100), 0x600D);

    // Entry 1 of 000000's LUT now says X 2.
    router_write(&mut a.c, HERE, lut(1), tag_plus(2, 0, 0));
    assert_eq!(put(&mut a, 1, 0x108, 0xBAD), ers::FULL_F);
    assert_eq!(cmd_error(&mut a.c), (Error::NoRoute, 0, op::PUT));
    assert_eq!(t3e_read(&mut a.c, t3e::PUT_COUNT), 0);
    assert_eq!(b.read64(0x108), 0, "nothing arrived");
    assert_eq!(z.read64(0x108), 0, "nor where the packet ended");
    assert_eq!(router_read(&mut z.c, HERE, r::R_ERR0), 1 << r::ERR_MISROUTE);
    assert_eq!(d.counter(2, "router_errors"), 1);
    router_write(&mut z.c, HERE, r::R_ERR0, 1 << r::ERR_MISROUTE);

    // A SEND to PE 1 the same way: the whole block FULL_F, the queue untouched.
    const Q: u64 = 0x2000;
    b.queue(Q, 4, 0);
    let words: [u64; 8] = std::array::from_fn(|i| 0x5E0 + i as u64);
    assert_eq!(send(&mut a.c, 8, &words, 1, at(Q)), ers::FULL_F);
    assert_eq!(cmd_error(&mut a.c), (Error::NoRoute, 8, op::SEND));
    assert_eq!(b.read64(Q), mqcw::make(false, 1, 4, 0));
    assert_eq!(router_read(&mut z.c, HERE, r::R_ERR0), 1 << r::ERR_MISROUTE);
    assert_eq!(d.counter(2, "router_errors"), 2);
    router_write(&mut z.c, HERE, r::R_ERR0, 1 << r::ERR_MISROUTE);

    // Mode 3: R_LUT_OVERRIDE's tag (X 1) for every packet.
    let mode3 = (3 << r::OVERRIDE_MODE_SHIFT) | tag_plus(1, 0, 0);
    router_write(&mut a.c, HERE, r::R_LUT_OVERRIDE, mode3);
    assert_eq!(router_read(&mut a.c, HERE, r::R_LUT_OVERRIDE), mode3);
    assert_eq!(put(&mut a, 1, 0x110, 0x0E3), ers::FULL);
    assert_eq!(b.read64(0x110), 0x0E3);
    assert_eq!(send(&mut a.c, 8, &words, 1, at(Q)), ers::FULL);
    assert_eq!(b.words(Q + 64, 8), words);
    assert_eq!(put(&mut a, 2, 0x110, 0xBAD), ers::FULL_F, "PE 2 by X 1");
    assert_eq!(cmd_error(&mut a.c), (Error::NoRoute, 0, op::PUT));
    assert_eq!(z.read64(0x110), 0);
    assert_eq!(router_read(&mut b.c, HERE, r::R_ERR0), 1 << r::ERR_MISROUTE);
    assert_eq!(d.counter(1, "router_errors"), 1);

    // Mode 1: entry l>>2 with bits 0 and 8 from l.
    router_write(
        &mut a.c,
        HERE,
        r::R_LUT_OVERRIDE,
        1 << r::OVERRIDE_MODE_SHIFT,
    );
    assert_eq!(put(&mut a, 1, 0x118, 0x0E1), ers::FULL);
    assert_eq!(b.read64(0x118), 0x0E1);
    assert_eq!(router_read(&mut a.c, HERE, r::R_ERR0), 0);
    assert_eq!(put(&mut a, 2, 0x118, 0xBAD), ers::FULL_F, "Y address 1");
    assert_eq!(cmd_error(&mut a.c), (Error::NoRoute, 0, op::PUT));
    assert_eq!(
        router_read(&mut a.c, HERE, r::R_ERR0),
        1 << r::ERR_MISROUTE,
        "a tag outside the torus: at the source router"
    );
    assert_eq!(d.counter(0, "router_errors"), 1);
    assert_eq!(z.read64(0x118), 0);
}

/// SSD-T90 "R Option" (VCs and datelines, Figs. 6-7), Table 1 and Table 8 `<5:0>` with R_ERR1
/// (checklist 29, 32): on a 4x1x1 torus with datelines on the links 0-1 and 1-2, a request
/// leaving dateline node 000000 over its dateline link is on VC2 (`route`); the computed tag
/// for PE 2 goes the other way round, so PUTs to it flow. An SPUT-written tag forcing +X to
/// X 2 makes the request cross the second dateline on VC2: dropped (FULL_F, NoRoute), and
/// the violation latched at 000001, the node it was leaving, on its + port — X0 with
/// R_ORIENT 0, X1 with R_ORIENT 1. R_ERR0 latches whether R_ERR1 enables the bit or not;
/// only an enabled bit raises MSI-X vector ROUTER at the NI on that node.
#[test]
fn a_second_dateline_on_vc2_is_a_violation_at_the_node_it_leaves() {
    let d = Daemon::start_with(3, &["--torus", "4x1x1"]);
    let mut a = Pe::attach(&d, 0);
    let mut b = Pe::attach(&d, 1);
    let z = Pe::attach(&d, 2);
    let ev = msix_vector(&mut b.c, pci::vector::ROUTER);

    dateline(&d, "X", None);
    dateline(&d, "X", Some(0));
    dateline(&d, "X", Some(1));
    assert_eq!(
        topology(&d)["datelines"],
        json!([{"axis": "X", "between": [0, 1]}, {"axis": "X", "between": [1, 2]}])
    );
    // Fig. 6: a request crossing the dateline link moves to VC2, also one that enters the
    // dimension at the dateline node.
    let r01 = route(&d, 0, 1);
    assert_eq!(r01["hops"][0]["vc"], 2, "{r01}");
    assert_eq!(r01["hops"][0]["dateline"], true, "{r01}");
    // Software's tag for PE 2 avoids the violation: -X round the other side.
    let r02 = route(&d, 0, 2);
    for h in r02["hops"].as_array().expect("hops") {
        assert_eq!(h["direction"], "-X", "{r02}");
    }
    let put = |a: &mut Pe, v: u64| -> u64 {
        ereg_store(&mut a.c, 0, v);
        remote(&mut a.c, op::PUT, 0, 2, gva::make(SEG, 0x100))
    };
    assert_eq!(put(&mut a, 0x600D), ers::FULL);
    assert_eq!(z.read64(0x100), 0x600D);

    // +X to X 2: across the dateline 0-1 onto VC2, then the dateline 1-2.
    router_write(&mut a.c, HERE, lut(2), tag_plus(2, 0, 0));
    assert_eq!(put(&mut a, 1), ers::FULL_F);
    assert_eq!(cmd_error(&mut a.c), (Error::NoRoute, 0, op::PUT));
    assert_eq!(z.read64(0x100), 0x600D, "dropped");
    assert_eq!(
        router_read(&mut b.c, HERE, r::R_ERR0),
        1 << (r::ERR_DATELINE),
        "X0, 000001's + port"
    );
    assert_eq!(router_read(&mut a.c, HERE, r::R_ERR0), 0);
    assert_eq!(d.counter(1, "router_errors"), 1);
    assert_eq!(wait_event(&ev, 200), 0, "R_ERR1 0: latched, no interrupt");

    router_write(&mut b.c, HERE, r::R_ERR0, 1 << r::ERR_DATELINE);
    assert_eq!(router_read(&mut b.c, HERE, r::R_ERR0), 0);
    router_write(&mut b.c, HERE, r::R_ERR1, 1 << r::ERR_DATELINE);
    assert_eq!(wait_event(&ev, 100), 0, "nothing latched: nothing to raise");
    assert_eq!(put(&mut a, 2), ers::FULL_F);
    assert_eq!(wait_event(&ev, 2000), 1, "enabled: MSI-X ROUTER at NI 1");
    assert_eq!(router_read(&mut b.c, HERE, r::R_ERR0), 1 << r::ERR_DATELINE);
    assert_eq!(d.counter(1, "router_errors"), 2);

    // R_ORIENT 1 at 000001: its + port is X1, and so is the violation's bit.
    router_write(&mut b.c, HERE, r::R_ERR0, 1 << r::ERR_DATELINE);
    router_write(&mut b.c, HERE, r::R_ORIENT, 1);
    assert_eq!(put(&mut a, 3), ers::FULL_F);
    assert_eq!(
        router_read(&mut b.c, HERE, r::R_ERR0),
        1 << (r::ERR_DATELINE + 1),
        "X1"
    );
    assert_eq!(wait_event(&ev, 200), 0, "bit 1 is not enabled");
    assert_eq!(z.read64(0x100), 0x600D);
}
