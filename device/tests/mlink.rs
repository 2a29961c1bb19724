//! The METRO MLINK register block (issue 13) through raw vfio-user clients and BAR0 only:
//! READ and WRITE handled by the receiving MLINK alone (§11.3), NOOP's status bytes, ROP into
//! the register queue, remote boot by WRITE + RESET, the header and data checksums of
//! Fig. 11.1, blocking, abort and timeout, the completion interrupt, two links per node, and
//! garbage through the whole page. The host plays the node's processor, which "may read or
//! write 32-bit values at memory-mapped MLINK addresses" (§11.2) — nothing else.
//!
//! What is asserted follows `notes/issue13-contract.md` ("MLINK"); every register, bit and
//! code comes from `ni_abi::mlink`. Seed: shared/seeds/004 (MIT METRO Ch. 11, §11.2, §11.3,
//! Fig. 11.1); digest: shared/digests/cray-metro.md §C and §E items 37-40.
//!
//! Ranks: the default partition is every NI in order (rank i = NI i); tests that need a rank
//! different from its NI number use a `[[partition]]` config, whose `nodes` list gives rank
//! order. TARGET is always a rank.

mod common;

use std::time::{Duration, Instant};

use common::lanai_driver::{sram_read, sram_write};
use common::mlink_driver::*;
use common::*;
use ni_abi::fastpath::ctrl;
use ni_abi::lanai::SRAM_SIZE;
use ni_abi::mlink::{
    self, boot, command as op, config, link as ml, reason, rx, status, status_byte0 as s0, MAX_LEN,
    QUEUE_DATA_MAX, QUEUE_ENTRIES,
};
use ni_abi::pci;
use vfio_user::Client;

// ---- where tests keep things in SRAM (clear of the fast path's control page and rings) ----

/// The target's exposed window.
const WIN: u32 = 0x10_0000;
const WIN_SIZE: u32 = 0x1_0000;
/// The source's WRITE/ROP data and READ destination.
const SRC: u32 = 0x40_0000;
const DST: u32 = 0x50_0000;
/// What a target's memory holds before anyone writes it, so "unchanged" means something.
const FILL: u8 = 0xEE;
/// What a READ destination holds before the READ.
const STALE: u8 = 0x11;
const SRAM: u32 = SRAM_SIZE as u32;

// ---- MLINK registers: 32-bit little-endian at BAR0 + PAGE (common/mlink_driver.rs) ----

/// The same over a raw vfio-user connection (the hostile test's NI).
fn raw_read32(raw: &mut Raw, at: u64) -> u32 {
    let r = raw.region_read(pci::BAR0_REGION, at, 4);
    assert!(!r.is_error(), "32-bit read at {at:#x} refused");
    u32::from_le_bytes(r.body[16..20].try_into().unwrap())
}

fn raw_write32(raw: &mut Raw, at: u64, v: u32) {
    let r = raw.region_write(pci::BAR0_REGION, at, &v.to_le_bytes());
    assert!(!r.is_error(), "32-bit write at {at:#x} refused");
}

// ---- launching and waiting ----

/// The launch registers of one operation.
#[derive(Clone, Copy, Debug)]
struct Op {
    target: u32,
    remote: u32,
    local: u32,
    len: u32,
}

fn program(c: &mut Client, link: u32, o: Op) {
    mlink_write_reg(c, link, ml::TARGET, o.target);
    mlink_write_reg(c, link, ml::REMOTE, o.remote);
    mlink_write_reg(c, link, ml::LOCAL, o.local);
    mlink_write_reg(c, link, ml::LEN, o.len);
}

/// Write COMMAND; returns COMPLETED as it was just before (the ticket `wait_done` waits past).
fn launch(c: &mut Client, link: u32, command: u32) -> u32 {
    let ticket = mlink_read_reg(c, link, ml::COMPLETED);
    mlink_write_reg(c, link, ml::COMMAND, command);
    ticket
}

/// Wait until the link finished an operation since `ticket` (COMPLETED moved) and is not
/// BUSY; returns STATUS.
fn wait_done(c: &mut Client, link: u32, ticket: u32) -> u32 {
    poll_until(
        &format!("link {link}: no operation completed within 5 s"),
        || {
            mlink_read_reg(c, link, ml::COMPLETED) != ticket
                && state(mlink_read_reg(c, link, ml::STATUS)) != status::BUSY
        },
    );
    mlink_read_reg(c, link, ml::STATUS)
}

/// Launch `command` with the registers as they are and wait for its outcome.
fn run(c: &mut Client, link: u32, command: u32) -> u32 {
    let t = launch(c, link, command);
    wait_done(c, link, t)
}

/// Program the launch registers, launch, wait: the STATUS it ended with.
fn exec(c: &mut Client, link: u32, command: u32, o: Op) -> u32 {
    program(c, link, o);
    run(c, link, command)
}

/// A ROP of `words` words of a pattern (staged at `SRC`) with `handler`; returns its STATUS
/// and the data it carried.
fn rop(
    c: &mut Client,
    link: u32,
    target: u32,
    handler: u32,
    words: u32,
    seed: u64,
) -> (u32, Vec<u8>) {
    let data = pattern(seed, words);
    sram_write(c, SRC, &data);
    mlink_write_reg(c, link, ml::HANDLER, handler);
    let o = Op {
        target,
        remote: 0,
        local: SRC,
        len: words,
    };
    (exec(c, link, op::ROP, o), data)
}

// ---- SRAM ----

/// `words` 8-byte words of a pattern that depends on `seed` (never all zero).
fn pattern(seed: u64, words: u32) -> Vec<u8> {
    let mut r = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    (0..words).flat_map(|_| r.next().to_le_bytes()).collect()
}

fn fill(c: &mut Client, addr: u32, len: u32, byte: u8) {
    sram_write(c, addr, &vec![byte; len as usize]);
}

/// `size` bytes of `FILL` from `base`, with each `(at, data)` written over it.
fn image(base: u32, size: u32, writes: &[(u32, &[u8])]) -> Vec<u8> {
    let mut v = vec![FILL; size as usize];
    for &(at, data) in writes {
        let o = (at - base) as usize;
        v[o..o + data.len()].copy_from_slice(data);
    }
    v
}

/// Byte-for-byte equality, reporting the first difference by SRAM address.
#[track_caller]
fn same(got: &[u8], want: &[u8], base: u32, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    if let Some(i) = got.iter().zip(want).position(|(g, w)| g != w) {
        let end = (i + 16).min(got.len());
        panic!(
            "{what}: first difference at SRAM {:#x}: got {:02x?}, want {:02x?}",
            base as usize + i,
            &got[i..end],
            &want[i..end]
        );
    }
}

// ---- daemon, clients, control ----

/// A client on NI `i`: memory decode and bus mastering on, and served by the fabric (it
/// published the control page's MAGIC, so peers see a client there).
fn attach(d: &Daemon, i: u32) -> Client {
    let mut c = d.client(i);
    enable(&mut c);
    poll_until(
        &format!("the fabric never served NI {i}'s client (no MAGIC)"),
        || {
            let m = sram_read(&mut c, ctrl::MAGIC as u32, 4);
            u32::from_le_bytes(m.try_into().unwrap()) == ctrl::MAGIC_VALUE
        },
    );
    c
}

/// Clients on NIs 0..N.
fn nis<const N: usize>(d: &Daemon) -> [Client; N] {
    std::array::from_fn(|i| attach(d, i as u32))
}

fn control_ok(d: &Daemon, line: &str) -> serde_json::Value {
    let v = d.control(line);
    assert!(
        v["result"] != "error" && v.get("error").is_none(),
        "{line} -> {v}"
    );
    v
}

/// `ni-ctl mlink fault NODE KIND --count N`.
fn fault(d: &Daemon, node: u32, kind: &str, count: u32) {
    control_ok(
        d,
        &format!(
            r#"{{"version":1,"request":"mlink_fault","node":{node},"kind":"{kind}","count":{count}}}"#
        ),
    );
}

/// `ni-ctl partition remote-boot NAME on|off`.
fn remote_boot(d: &Daemon, partition: &str, on: bool) {
    control_ok(
        d,
        &format!(
            r#"{{"version":1,"request":"partition_remote_boot","name":"{partition}","enabled":{on}}}"#
        ),
    );
}

/// Every counter of NI `node`, by name.
fn counters(d: &Daemon, node: u32) -> Vec<(String, u64)> {
    let v = d.control(&format!(
        r#"{{"version":1,"request":"counters","nodes":[{node}]}}"#
    ));
    v["counters"][0]["counters"]
        .as_array()
        .unwrap_or_else(|| panic!("counters of NI {node}: {v}"))
        .iter()
        .map(|p| (p[0].as_str().unwrap().to_string(), p[1].as_u64().unwrap()))
        .collect()
}

/// Wait until NI `node`'s counter `name` reaches `want`, then check it is exactly that.
#[track_caller]
fn counter_is(d: &Daemon, node: u32, name: &str, want: u64) {
    poll_until(&format!("NI {node}: {name} never reached {want}"), || {
        d.counter(node, name) >= want
    });
    assert_eq!(d.counter(node, name), want, "NI {node}: {name}");
}

// ---- the tests ----

/// Seed 004 §11.3 (READ and WRITE "handled entirely by the receiving MLINK without involving
/// the processor"), Fig. 11.1 (READ reply: status bytes, 8·len data bytes, data checksum);
/// digest §E items 37, 38, 39. A WRITE of 257 words lands bit-exact in the target's exposed
/// window and nowhere else; a READ brings them back into another SRAM area, exactly 8·len
/// bytes; both ACK with status byte 0 = PRESENT|EXPOSED; CHECKSUMS carry the header and data
/// checksums; COMPLETED counts; the target's processor does nothing after exposing.
#[test]
fn write_then_read_moves_words_bit_exact_without_the_target_cpu() {
    let d = Daemon::start(2);
    let [mut a, mut b] = nis::<2>(&d);
    // The target prepares its memory and window; from here on its CPU does nothing.
    fill(&mut b, WIN, WIN_SIZE, FILL);
    expose(&mut b, WIN, WIN_SIZE);

    let len = 257;
    let remote = WIN + 0x808;
    let data = pattern(1, len);
    sram_write(&mut a, SRC, &data);
    let o = Op {
        target: 1,
        remote,
        local: SRC,
        len,
    };
    let s = exec(&mut a, 0, op::WRITE, o);
    expect(
        s,
        status::ACK,
        reason::NONE,
        "WRITE into the exposed window",
    );
    assert_eq!(
        byte0(s),
        s0::PRESENT | s0::EXPOSED,
        "status byte 0: {}",
        show(s)
    );
    assert_eq!(byte1(s), reason::NONE, "status byte 1: {}", show(s));
    assert_eq!(
        mlink_read_reg(&mut a, 0, ml::CHECKSUMS),
        sums(op::WRITE, len, remote, &data),
        "CHECKSUMS of the WRITE: header | data << 16"
    );
    assert_eq!(mlink_read_reg(&mut a, 0, ml::COMPLETED), 1);

    // READ it back into another area, with stale bytes around it: exactly 8·len arrive.
    fill(&mut a, DST - 8, len * 8 + 16, STALE);
    let s = exec(&mut a, 0, op::READ, Op { local: DST, ..o });
    expect(s, status::ACK, reason::NONE, "READ from the exposed window");
    assert_eq!(
        byte0(s),
        s0::PRESENT | s0::EXPOSED,
        "status byte 0: {}",
        show(s)
    );
    assert_eq!(byte1(s), reason::NONE, "status byte 1: {}", show(s));
    assert_eq!(
        mlink_read_reg(&mut a, 0, ml::CHECKSUMS),
        sums(op::READ, len, remote, &data),
        "CHECKSUMS of the READ: header | reply data << 16"
    );
    assert_eq!(mlink_read_reg(&mut a, 0, ml::COMPLETED), 2);
    let got = sram_read(&mut a, DST - 8, (len * 8 + 16) as usize);
    same(&got[8..8 + data.len()], &data, DST, "the READ's data");
    assert_eq!(&got[..8], &[STALE; 8], "nothing before the READ's LOCAL");
    assert_eq!(
        &got[got.len() - 8..],
        &[STALE; 8],
        "nothing past 8·len bytes"
    );

    // A READ of words nobody wrote returns the target's memory as it is.
    let s = exec(
        &mut a,
        0,
        op::READ,
        Op {
            target: 1,
            remote: WIN,
            local: DST + 0x1_0000,
            len: 4,
        },
    );
    expect(s, status::ACK, reason::NONE, "READ of untouched words");
    assert_eq!(sram_read(&mut a, DST + 0x1_0000, 32), vec![FILL; 32]);
    assert_eq!(mlink_read_reg(&mut a, 0, ml::COMPLETED), 3);

    // The target: exactly the written words changed.
    same(
        &sram_read(&mut b, WIN, WIN_SIZE as usize),
        &image(WIN, WIN_SIZE, &[(remote, &data[..])]),
        WIN,
        "the target's window",
    );
    counter_is(&d, 0, "mlink_ops", 3);
    counter_is(&d, 0, "mlink_acks", 3);
    counter_is(&d, 0, "mlink_nacks", 0);
    for name in [
        "mlink_header_errors",
        "mlink_data_errors",
        "mlink_rops_queued",
        "mlink_boots",
    ] {
        counter_is(&d, 1, name, 0);
    }
}

/// Seed 004 §11.3 ("The NOOP operation performs no function on the destination node but does
/// return connection status information"), Fig. 11.1 (reply: 2 status bytes + ACK); digest
/// §E items 38, 40. NOOPs ACK with status byte 0 = PRESENT and change nothing at the target:
/// its memory, its registers and its counters (the contract names none for NOOP; port-0 link
/// traffic counters `p0_*` aside) stay as they were. Byte 0 then follows the target's state:
/// HELD once it writes BOOT = HOLD, BOOT_ENABLED once its partition allows remote boot.
#[test]
fn noop_returns_status_bytes_and_changes_nothing() {
    let d = Daemon::start(2);
    let [mut a, mut b] = nis::<2>(&d);
    fill(&mut b, WIN, 0x1000, FILL);
    let quiet = |list: Vec<(String, u64)>| -> Vec<(String, u64)> {
        list.into_iter()
            .filter(|(n, _)| !n.starts_with("p0_"))
            .collect()
    };
    let before = quiet(counters(&d, 1));
    let noop = Op {
        target: 1,
        remote: 0,
        local: 0,
        len: 0,
    };
    for k in 0..3 {
        let s = exec(&mut a, 0, op::NOOP, noop);
        expect(s, status::ACK, reason::NONE, &format!("NOOP {k}"));
        assert_eq!(
            byte0(s),
            s0::PRESENT,
            "NOOP {k}: a present target, no window, not held, no remote boot: {}",
            show(s)
        );
        assert_eq!(byte1(s), reason::NONE, "NOOP {k}: {}", show(s));
    }
    assert_eq!(
        mlink_read_reg(&mut a, 0, ml::CHECKSUMS) & 0xFFFF,
        mlink::checksum(&mlink::header(op::NOOP, 0, 0)) as u32,
        "the NOOP's header checksum"
    );
    assert_eq!(mlink_read_reg(&mut a, 0, ml::COMPLETED), 3);
    counter_is(&d, 0, "mlink_ops", 3);
    counter_is(&d, 0, "mlink_acks", 3);
    // Nothing at the target: counters first (before any access of ours), then memory and
    // registers.
    assert_eq!(quiet(counters(&d, 1)), before, "the target's counters");
    same(
        &sram_read(&mut b, WIN, 0x1000),
        &vec![FILL; 0x1000],
        WIN,
        "the target's memory",
    );
    assert_eq!(rx_read(&mut b, rx::QUEUE_COUNT), 0, "nothing queued");
    assert_eq!(rx_read(&mut b, rx::BOOT), 0, "BOOT untouched");

    // Held: byte 0 says so, and a NOOP releases nothing.
    rx_write(&mut b, rx::BOOT, boot::HOLD);
    let s = exec(&mut a, 0, op::NOOP, noop);
    expect(s, status::ACK, reason::NONE, "NOOP to a held target");
    assert_eq!(byte0(s), s0::PRESENT | s0::HELD, "{}", show(s));
    remote_boot(&d, "default", true);
    let s = exec(&mut a, 0, op::NOOP, noop);
    expect(s, status::ACK, reason::NONE, "NOOP with remote boot on");
    assert_eq!(
        byte0(s),
        s0::PRESENT | s0::HELD | s0::BOOT_ENABLED,
        "{}",
        show(s)
    );
    assert_eq!(rx_read(&mut b, rx::BOOT), boot::HOLD, "still held");
    // Released by its own CPU (BOOT = 0): HELD goes.
    rx_write(&mut b, rx::BOOT, 0);
    let s = exec(&mut a, 0, op::NOOP, noop);
    expect(s, status::ACK, reason::NONE, "NOOP after the target let go");
    assert_eq!(byte0(s), s0::PRESENT | s0::BOOT_ENABLED, "{}", show(s));
    counter_is(&d, 1, "mlink_boots", 0);
}

/// Seed 004 §11.3, Fig. 11.1 ((DATA addr)^3, len in words); digest §C.3, §E item 38. Outside
/// the target's exposed window: NACK ADDRESS from the target (byte 1 ADDRESS) and its memory
/// untouched, the READ's destination too. Checked at launch, nothing sent (REFUSED):
/// REMOTE unaligned or past 24 bits, LOCAL unaligned or LOCAL + 8·LEN past SRAM (also when
/// it wraps 32 bits) -> ADDRESS; LEN 0 or > MAX_LEN -> LENGTH; an unknown opcode ->
/// BAD_COMMAND; a rank with no client, a rank outside the partition (its NI attached in
/// another one) or past every NI -> UNREACHABLE. Every one of them counts in COMPLETED. The
/// window's own bounds and LOCAL's last word still work.
#[test]
fn bad_addresses_lengths_opcodes_and_targets_are_refused_or_nacked() {
    let d = Daemon::start_config(
        3,
        "[[partition]]\nname = \"a\"\nnodes = [0, 1]\n[[partition]]\nname = \"b\"\nnodes = [2]\n",
    );
    let mut a = attach(&d, 0);
    let mut n = 0; // operations finished on link 0
    let noop = Op {
        target: 1,
        remote: 0,
        local: 0,
        len: 0,
    };
    let s = exec(&mut a, 0, op::NOOP, noop);
    expect(
        s,
        status::REFUSED,
        reason::UNREACHABLE,
        "rank 1 has no client yet",
    );
    n += 1;
    let mut b = attach(&d, 1);
    let _z = attach(&d, 2);
    // The target: FILL in its window and 4 KiB either side; the window exposed.
    fill(&mut b, WIN - 0x1000, WIN_SIZE + 0x2000, FILL);
    expose(&mut b, WIN, WIN_SIZE);
    let end = WIN + WIN_SIZE;
    let data = pattern(3, MAX_LEN);
    sram_write(&mut a, SRC, &data);
    fill(&mut a, DST, 0x1000, STALE);

    // At the target: the range must lie inside the window.
    for (what, command, remote, len) in [
        ("WRITE straddling the window's end", op::WRITE, end - 8, 2),
        ("WRITE just past the window", op::WRITE, end, 1),
        ("WRITE just below the window", op::WRITE, WIN - 8, 1),
        (
            "WRITE of MAX_LEN from inside the window past its end",
            op::WRITE,
            end - 0x4000,
            MAX_LEN,
        ),
        ("WRITE far away", op::WRITE, 0x20_0000, 16),
        ("READ straddling the window's end", op::READ, end - 8, 2),
        ("READ just below the window", op::READ, WIN - 8, 1),
        ("READ far away", op::READ, 0xFF_FFF8, 1),
    ] {
        let local = if command == op::READ { DST } else { SRC };
        let o = Op {
            target: 1,
            remote,
            local,
            len,
        };
        let s = exec(&mut a, 0, command, o);
        expect(s, status::NACK, reason::ADDRESS, what);
        assert_eq!(byte1(s), reason::ADDRESS, "{what}: byte 1: {}", show(s));
        assert_eq!(
            byte0(s),
            s0::PRESENT | s0::EXPOSED,
            "{what}: byte 0: {}",
            show(s)
        );
        n += 1;
    }
    assert_eq!(
        sram_read(&mut a, DST, 0x1000),
        vec![STALE; 0x1000],
        "a NACKed READ brings nothing"
    );

    // At launch: nothing leaves.
    let ok = Op {
        target: 1,
        remote: WIN,
        local: SRC,
        len: 1,
    };
    #[rustfmt::skip]
    let refusals = [
        ("REMOTE unaligned", op::WRITE, Op { remote: WIN + 4, ..ok }, reason::ADDRESS),
        ("REMOTE past 24 bits", op::WRITE, Op { remote: 0x100_0000, ..ok }, reason::ADDRESS),
        ("READ with REMOTE unaligned", op::READ, Op { remote: WIN + 1, local: DST, ..ok }, reason::ADDRESS),
        ("LOCAL unaligned", op::WRITE, Op { local: SRC + 4, ..ok }, reason::ADDRESS),
        ("READ to LOCAL unaligned", op::READ, Op { local: DST + 2, ..ok }, reason::ADDRESS),
        ("LOCAL at the end of SRAM", op::WRITE, Op { local: SRAM, ..ok }, reason::ADDRESS),
        ("READ whose LOCAL + 8·LEN passes SRAM", op::READ, Op { local: SRAM - 8, len: 2, ..ok }, reason::ADDRESS),
        ("LOCAL + 8·LEN wrapping 32 bits", op::WRITE, Op { local: 0xFFFF_FFF8, len: 2, ..ok }, reason::ADDRESS),
        ("WRITE of LEN 0", op::WRITE, Op { len: 0, ..ok }, reason::LENGTH),
        ("READ of LEN 0", op::READ, Op { len: 0, local: DST, ..ok }, reason::LENGTH),
        ("ROP of LEN 0", op::ROP, Op { len: 0, remote: 0, ..ok }, reason::LENGTH),
        ("WRITE of MAX_LEN + 1", op::WRITE, Op { len: MAX_LEN + 1, ..ok }, reason::LENGTH),
        ("READ of MAX_LEN + 1", op::READ, Op { len: MAX_LEN + 1, local: DST, ..ok }, reason::LENGTH),
        ("opcode 0", 0, ok, reason::BAD_COMMAND),
        ("opcode 6", 6, ok, reason::BAD_COMMAND),
        ("opcode 15", op::OP_MASK, ok, reason::BAD_COMMAND),
        ("a rank outside the partition (NI 2, attached, in another)", op::WRITE, Op { target: 2, ..ok }, reason::UNREACHABLE),
        ("a rank past every NI", op::NOOP, Op { target: 3, ..ok }, reason::UNREACHABLE),
        ("rank 0xFFFFFFFF", op::READ, Op { target: u32::MAX, local: DST, ..ok }, reason::UNREACHABLE),
    ];
    for (what, command, o, want) in refusals {
        let s = exec(&mut a, 0, command, o);
        expect(s, status::REFUSED, want, what);
        n += 1;
        assert_eq!(
            mlink_read_reg(&mut a, 0, ml::COMPLETED),
            n,
            "{what}: COMPLETED"
        );
    }
    assert_eq!(
        sram_read(&mut a, DST, 0x1000),
        vec![STALE; 0x1000],
        "a refused READ brings nothing"
    );
    // The target saw nothing of it.
    same(
        &sram_read(&mut b, WIN - 0x1000, (WIN_SIZE + 0x2000) as usize),
        &vec![FILL; (WIN_SIZE + 0x2000) as usize],
        WIN - 0x1000,
        "the target after every refusal and NACK",
    );
    counter_is(&d, 1, "mlink_header_errors", 0);
    counter_is(&d, 0, "mlink_acks", 0);

    // The bounds themselves: MAX_LEN words ending exactly at the window's end, and SRAM's
    // last word as LOCAL.
    let top = end - MAX_LEN * 8;
    let s = exec(
        &mut a,
        0,
        op::WRITE,
        Op {
            target: 1,
            remote: top,
            local: SRC,
            len: MAX_LEN,
        },
    );
    expect(
        s,
        status::ACK,
        reason::NONE,
        "WRITE of MAX_LEN up to the window's end",
    );
    let last = sram_read(&mut a, SRAM - 8, 8);
    let s = exec(
        &mut a,
        0,
        op::WRITE,
        Op {
            target: 1,
            remote: WIN,
            local: SRAM - 8,
            len: 1,
        },
    );
    expect(s, status::ACK, reason::NONE, "WRITE from SRAM's last word");
    let s = exec(
        &mut a,
        0,
        op::READ,
        Op {
            target: 1,
            remote: top,
            local: DST,
            len: MAX_LEN,
        },
    );
    expect(s, status::ACK, reason::NONE, "READ of MAX_LEN");
    same(
        &sram_read(&mut a, DST, data.len()),
        &data,
        DST,
        "the MAX_LEN READ",
    );
    same(
        &sram_read(&mut b, WIN - 0x1000, (WIN_SIZE + 0x2000) as usize),
        &image(
            WIN - 0x1000,
            WIN_SIZE + 0x2000,
            &[(WIN, &last[..]), (top, &data[..])],
        ),
        WIN - 0x1000,
        "the target after the boundary WRITEs",
    );
}

/// Seed 004 Fig. 11.1 and the text after it (target address and length "guarded with their
/// own checksum so that data can be written into memory while it is being received");
/// digest §C.3, §E item 40 ("A header checksum failure gives NACK with no memory effect").
/// A WRITE with a bad header checksum: NACK HEADER_CHECKSUM (byte 1 too), the target's
/// memory untouched, `mlink_header_errors` at the target; the fault is consumed, so the next
/// WRITE is ACK. Any operation carries a header: NOOP and READ too.
#[test]
fn a_bad_header_checksum_is_nacked_with_no_memory_effect() {
    let d = Daemon::start(2);
    let [mut a, mut b] = nis::<2>(&d);
    fill(&mut b, WIN, WIN_SIZE, FILL);
    expose(&mut b, WIN, WIN_SIZE);
    let data = pattern(4, 64);
    sram_write(&mut a, SRC, &data);
    let w = Op {
        target: 1,
        remote: WIN + 0x100,
        local: SRC,
        len: 64,
    };

    fault(&d, 0, "header", 1);
    let s = exec(&mut a, 0, op::WRITE, w);
    expect(
        s,
        status::NACK,
        reason::HEADER_CHECKSUM,
        "WRITE with a bad header",
    );
    assert_eq!(byte1(s), reason::HEADER_CHECKSUM, "byte 1: {}", show(s));
    same(
        &sram_read(&mut b, WIN, WIN_SIZE as usize),
        &vec![FILL; WIN_SIZE as usize],
        WIN,
        "no memory effect",
    );
    counter_is(&d, 1, "mlink_header_errors", 1);

    let s = exec(&mut a, 0, op::WRITE, w);
    expect(
        s,
        status::ACK,
        reason::NONE,
        "the next WRITE (fault consumed)",
    );
    assert_eq!(
        mlink_read_reg(&mut a, 0, ml::CHECKSUMS),
        sums(op::WRITE, 64, w.remote, &data)
    );
    same(
        &sram_read(&mut b, WIN, WIN_SIZE as usize),
        &image(WIN, WIN_SIZE, &[(w.remote, &data[..])]),
        WIN,
        "the good WRITE landed",
    );
    counter_is(&d, 1, "mlink_header_errors", 1);

    // Two faults: a NOOP and a READ take them; the READ brings nothing.
    fault(&d, 0, "header", 2);
    let noop = Op {
        target: 1,
        remote: 0,
        local: 0,
        len: 0,
    };
    let s = exec(&mut a, 0, op::NOOP, noop);
    expect(
        s,
        status::NACK,
        reason::HEADER_CHECKSUM,
        "NOOP with a bad header",
    );
    fill(&mut a, DST, 64 * 8, STALE);
    let s = exec(&mut a, 0, op::READ, Op { local: DST, ..w });
    expect(
        s,
        status::NACK,
        reason::HEADER_CHECKSUM,
        "READ with a bad header",
    );
    assert_eq!(sram_read(&mut a, DST, 64 * 8), vec![STALE; 64 * 8]);
    let s = exec(&mut a, 0, op::NOOP, noop);
    expect(
        s,
        status::ACK,
        reason::NONE,
        "NOOP after both faults were used",
    );
    counter_is(&d, 1, "mlink_header_errors", 3);
    counter_is(&d, 0, "mlink_nacks", 3);
    counter_is(&d, 0, "mlink_acks", 2);
}

/// Seed 004 Fig. 11.1 ((DATA cksum)^2 after the data) and the text after it ("data can be
/// written into memory while it is being received", §4.7.4); digest §C.3, §D (last row:
/// "bad payload → NACK after a possible partial write (cut-through)"), §E item 40. A data
/// fault on a WRITE: NACK DATA_CHECKSUM and the data WAS written; NOOP carries no data and
/// does not use the fault; on a ROP: NACK DATA_CHECKSUM and nothing queued; on a READ (the
/// reply's checksum): NACK DATA_CHECKSUM; afterwards both ACK again.
#[test]
fn a_bad_data_checksum_is_nacked_after_the_write_and_spoils_a_read() {
    let d = Daemon::start(2);
    let [mut a, mut b] = nis::<2>(&d);
    fill(&mut b, WIN, WIN_SIZE, FILL);
    expose(&mut b, WIN, WIN_SIZE);
    let data = pattern(5, 100);
    sram_write(&mut a, SRC, &data);
    let w = Op {
        target: 1,
        remote: WIN + 0x200,
        local: SRC,
        len: 100,
    };
    let noop = Op {
        target: 1,
        remote: 0,
        local: 0,
        len: 0,
    };

    fault(&d, 0, "data", 1);
    let s = exec(&mut a, 0, op::NOOP, noop);
    expect(
        s,
        status::ACK,
        reason::NONE,
        "NOOP: no data, the fault waits",
    );
    let s = exec(&mut a, 0, op::WRITE, w);
    expect(
        s,
        status::NACK,
        reason::DATA_CHECKSUM,
        "WRITE with bad data",
    );
    assert_eq!(byte1(s), reason::DATA_CHECKSUM, "byte 1: {}", show(s));
    same(
        &sram_read(&mut b, WIN, WIN_SIZE as usize),
        &image(WIN, WIN_SIZE, &[(w.remote, &data[..])]),
        WIN,
        "cut-through: the data was written before its checksum was seen",
    );
    counter_is(&d, 1, "mlink_data_errors", 1);

    // A ROP with bad data queues nothing.
    fault(&d, 0, "data", 1);
    let (s, _) = rop(&mut a, 0, 1, 0x77, 4, 50);
    expect(s, status::NACK, reason::DATA_CHECKSUM, "ROP with bad data");
    assert_eq!(rx_read(&mut b, rx::QUEUE_COUNT), 0, "nothing queued");
    counter_is(&d, 1, "mlink_rops_queued", 0);
    counter_is(&d, 1, "mlink_data_errors", 2);
    let (s, rop_data) = rop(&mut a, 0, 1, 0x77, 4, 51);
    expect(s, status::ACK, reason::NONE, "the next ROP");
    assert_eq!(rx_read(&mut b, rx::QUEUE_COUNT), 1);
    assert_eq!(
        mlink_read_reg(&mut a, 0, ml::CHECKSUMS) >> 16,
        mlink::checksum(&rop_data) as u32
    );

    // The READ reply's checksum.
    fault(&d, 0, "data", 1);
    let r = Op { local: DST, ..w };
    let s = exec(&mut a, 0, op::READ, r);
    expect(
        s,
        status::NACK,
        reason::DATA_CHECKSUM,
        "READ whose reply has bad data",
    );
    let s = exec(&mut a, 0, op::READ, r);
    expect(s, status::ACK, reason::NONE, "the next READ");
    same(&sram_read(&mut a, DST, data.len()), &data, DST, "the READ");
    assert_eq!(
        mlink_read_reg(&mut a, 0, ml::CHECKSUMS),
        sums(op::READ, 100, w.remote, &data)
    );
    // And a clean WRITE.
    let data2 = pattern(6, 100);
    sram_write(&mut a, SRC, &data2);
    let s = exec(&mut a, 0, op::WRITE, w);
    expect(s, status::ACK, reason::NONE, "a clean WRITE");
    same(
        &sram_read(&mut b, w.remote, data2.len()),
        &data2,
        w.remote,
        "the clean WRITE",
    );
}

/// Seed 004 §11.3 (ROP: "The destination MLINK queues the arriving data and address on the
/// incoming message queue for the destination processor to service"); digest §C.2, §E item
/// 39 ("ROP only enqueues (handler, data) for target software"). A target without a libni
/// active-message ring gets the register queue: QUEUE_COUNT, and the head's HANDLER, SOURCE
/// (the sender's rank, not its NI number), LEN and DATA; QUEUE_POP drops the head; FIFO over
/// senders; a ROP of QUEUE_DATA_MAX + 1 words is NACK LENGTH; QUEUE_ENTRIES fit and the next
/// is NACK QUEUE_FULL (byte 0 QUEUE_FULL) with QUEUE_DROPS = 1; a pop makes room again.
#[test]
fn rops_queue_in_the_register_queue_in_order() {
    // Ranks: 0 = NI 2, 1 = NI 0, 2 = NI 1.
    let d = Daemon::start_config(3, "[[partition]]\nname = \"q\"\nnodes = [2, 0, 1]\n");
    let [mut a, mut t, mut z] = nis::<3>(&d);
    const T: u32 = 2; // NI 1's rank
    const A: u32 = 1; // NI 0's rank
    const Z: u32 = 0; // NI 2's rank
    assert_eq!(rx_read(&mut t, rx::QUEUE_COUNT), 0);
    assert_eq!(rx_read(&mut t, rx::QUEUE_DROPS), 0);

    // The head entry: handler, source, len, data.
    fn head(t: &mut Client) -> (u32, u32, u32, Vec<u8>) {
        let handler = rx_read(t, rx::QUEUE_HANDLER);
        let source = rx_read(t, rx::QUEUE_SOURCE);
        let len = rx_read(t, rx::QUEUE_LEN);
        let data = (0..len.min(QUEUE_DATA_MAX) as u64 * 2)
            .flat_map(|i| rx_read(t, rx::QUEUE_DATA + 4 * i).to_le_bytes())
            .collect();
        (handler, source, len, data)
    }

    let (s, d1) = rop(&mut a, 0, T, 0xA11CE, 3, 61);
    expect(s, status::ACK, reason::NONE, "ROP 1");
    assert_eq!(
        mlink_read_reg(&mut a, 0, ml::CHECKSUMS) >> 16,
        mlink::checksum(&d1) as u32,
        "the ROP's data checksum"
    );
    let (s, d2) = rop(&mut z, 0, T, 0xB0B, 1, 62);
    expect(s, status::ACK, reason::NONE, "ROP 2");
    let (s, d3) = rop(&mut a, 1, T, 0xC0DE, QUEUE_DATA_MAX, 63);
    expect(s, status::ACK, reason::NONE, "ROP 3, QUEUE_DATA_MAX words");
    assert_eq!(rx_read(&mut t, rx::QUEUE_COUNT), 3);
    for (k, want) in [
        (0xA11CE, A, 3, &d1),
        (0xB0B, Z, 1, &d2),
        (0xC0DE, A, QUEUE_DATA_MAX, &d3),
    ]
    .into_iter()
    .enumerate()
    {
        let (h, src, len, data) = head(&mut t);
        assert_eq!(
            (h, src, len),
            (want.0, want.1, want.2),
            "entry {k}: handler, source, len"
        );
        same(&data, want.3, 0, &format!("entry {k}: QUEUE_DATA"));
        rx_write(&mut t, rx::QUEUE_POP, 1);
        assert_eq!(
            rx_read(&mut t, rx::QUEUE_COUNT),
            2 - k as u32,
            "after pop {k}"
        );
    }

    // Too long for an entry.
    let (s, _) = rop(&mut a, 0, T, 0xD, QUEUE_DATA_MAX + 1, 64);
    expect(
        s,
        status::NACK,
        reason::LENGTH,
        "ROP of QUEUE_DATA_MAX + 1 words",
    );
    assert_eq!(byte1(s), reason::LENGTH, "{}", show(s));
    assert_eq!(rx_read(&mut t, rx::QUEUE_COUNT), 0);
    assert_eq!(rx_read(&mut t, rx::QUEUE_DROPS), 0);

    // Full.
    let mut sent = Vec::new();
    for i in 0..QUEUE_ENTRIES {
        let (s, data) = rop(&mut a, 0, T, 0x100 + i, 1, 100 + i as u64);
        expect(
            s,
            status::ACK,
            reason::NONE,
            &format!("ROP {i} of {QUEUE_ENTRIES}"),
        );
        sent.push((0x100 + i, data));
    }
    let (s, _) = rop(&mut a, 0, T, 0x1FF, 1, 99);
    expect(
        s,
        status::NACK,
        reason::QUEUE_FULL,
        "one ROP more than QUEUE_ENTRIES",
    );
    assert_eq!(byte1(s), reason::QUEUE_FULL, "{}", show(s));
    assert_ne!(
        byte0(s) & s0::QUEUE_FULL,
        0,
        "byte 0 QUEUE_FULL: {}",
        show(s)
    );
    assert_eq!(rx_read(&mut t, rx::QUEUE_COUNT), QUEUE_ENTRIES);
    assert_eq!(rx_read(&mut t, rx::QUEUE_DROPS), 1);
    counter_is(&d, 1, "mlink_queue_full", 1);
    counter_is(&d, 1, "mlink_rops_queued", 3 + QUEUE_ENTRIES as u64);
    // A pop makes room; the dropped one never shows up.
    rx_write(&mut t, rx::QUEUE_POP, 0);
    let (s, data) = rop(&mut z, 0, T, 0x200, 2, 98);
    expect(s, status::ACK, reason::NONE, "a ROP after a pop");
    sent.remove(0);
    sent.push((0x200, data));
    assert_eq!(rx_read(&mut t, rx::QUEUE_COUNT), QUEUE_ENTRIES);
    assert_eq!(rx_read(&mut t, rx::QUEUE_DROPS), 1);
    for (k, (handler, data)) in sent.iter().enumerate() {
        let (h, _, len, got) = head(&mut t);
        assert_eq!(h, *handler, "entry {k} of the refilled queue");
        assert_eq!(len as usize * 8, data.len(), "entry {k}: len");
        same(&got, data, 0, &format!("entry {k}: QUEUE_DATA"));
        rx_write(&mut t, rx::QUEUE_POP, 1);
    }
    assert_eq!(rx_read(&mut t, rx::QUEUE_COUNT), 0);
    let s = exec(
        &mut a,
        0,
        op::NOOP,
        Op {
            target: T,
            remote: 0,
            local: 0,
            len: 0,
        },
    );
    expect(s, status::ACK, reason::NONE, "NOOP to the drained target");
    assert_eq!(byte0(s), s0::PRESENT, "queue no longer full: {}", show(s));
}

/// Seed 004 §11.3 ("The RESET operation signals MLINK to release the associated processor
/// and allow it to boot. Combined with the WRITE operation, this primitive allows each node
/// to be remotely configured and booted across the network"); §11.2; digest §C.2, §E item 40
/// ("RESET boots from memory loaded by WRITE"). RESET to a node that is not held: NACK
/// NOT_PERMITTED. Held, remote boot off: a WRITE outside the window is NACK ADDRESS, RESET
/// NOT_PERMITTED. Remote boot on: WRITE the image anywhere in the held node's SRAM (and READ
/// it back), RESET ACK; the node's BOOT reads RELEASED with the releaser's rank in <31:16>,
/// HOLD clear, the image in place; a second RESET is NOT_PERMITTED, the window rule is back.
#[test]
fn remote_boot_writes_an_image_then_releases_a_held_node() {
    // Ranks: 0 = NI 1, 1 = NI 2, 2 = NI 0.
    let d = Daemon::start_config(3, "[[partition]]\nname = \"m\"\nnodes = [1, 2, 0]\n");
    let mut a = attach(&d, 0);
    let mut t = attach(&d, 1);
    const T: u32 = 0; // NI 1's rank
    const A: u32 = 2; // NI 0's rank, the releaser
    const IMG: u32 = 0x20_0000;
    const CONF: u32 = 0x70_0000;
    fill(&mut t, WIN, 0x1000, FILL);
    fill(&mut t, IMG, 0x2000, FILL);
    fill(&mut t, CONF, 0x80, FILL);
    expose(&mut t, WIN, 0x1000);
    let img = pattern(7, 1024);
    let conf = pattern(8, 16);
    sram_write(&mut a, SRC, &img);
    sram_write(&mut a, SRC + 0x4000, &conf);
    let reset = Op {
        target: T,
        remote: 0,
        local: 0,
        len: 0,
    };
    let write_img = Op {
        target: T,
        remote: IMG,
        local: SRC,
        len: 1024,
    };
    let write_conf = Op {
        target: T,
        remote: CONF,
        local: SRC + 0x4000,
        len: 16,
    };

    let s = exec(&mut a, 0, op::RESET, reset);
    expect(
        s,
        status::NACK,
        reason::NOT_PERMITTED,
        "RESET to a node not held",
    );
    assert_eq!(byte1(s), reason::NOT_PERMITTED, "{}", show(s));
    assert_eq!(byte0(s), s0::PRESENT | s0::EXPOSED, "{}", show(s));

    rx_write(&mut t, rx::BOOT, boot::HOLD);
    assert_eq!(rx_read(&mut t, rx::BOOT), boot::HOLD);
    // Held, but the partition has remote boot off.
    let s = exec(&mut a, 0, op::WRITE, write_img);
    expect(
        s,
        status::NACK,
        reason::ADDRESS,
        "WRITE outside the window, remote boot off",
    );
    assert_eq!(
        byte0(s),
        s0::PRESENT | s0::HELD | s0::EXPOSED,
        "{}",
        show(s)
    );
    let s = exec(&mut a, 0, op::RESET, reset);
    expect(
        s,
        status::NACK,
        reason::NOT_PERMITTED,
        "RESET, remote boot off",
    );
    assert_eq!(rx_read(&mut t, rx::BOOT), boot::HOLD, "still held");
    same(
        &sram_read(&mut t, IMG, 0x2000),
        &vec![FILL; 0x2000],
        IMG,
        "nothing written",
    );

    remote_boot(&d, "m", true);
    let s = exec(&mut a, 0, op::WRITE, write_img);
    expect(
        s,
        status::ACK,
        reason::NONE,
        "WRITE of the image into the held node",
    );
    assert_eq!(
        byte0(s),
        s0::PRESENT | s0::HELD | s0::BOOT_ENABLED | s0::EXPOSED,
        "{}",
        show(s)
    );
    let s = exec(&mut a, 0, op::WRITE, write_conf);
    expect(s, status::ACK, reason::NONE, "WRITE of the configuration");
    let s = exec(
        &mut a,
        0,
        op::READ,
        Op {
            local: DST,
            ..write_img
        },
    );
    expect(
        s,
        status::ACK,
        reason::NONE,
        "READ the image back before the boot",
    );
    same(
        &sram_read(&mut a, DST, img.len()),
        &img,
        DST,
        "the image read back",
    );
    counter_is(&d, 1, "mlink_boots", 0);
    assert_eq!(
        rx_read(&mut t, rx::BOOT),
        boot::HOLD,
        "WRITE and READ release nothing"
    );

    let s = exec(&mut a, 0, op::RESET, reset);
    expect(s, status::ACK, reason::NONE, "RESET of the held node");
    assert_eq!(
        rx_read(&mut t, rx::BOOT),
        boot::RELEASED | A << boot::RELEASER_SHIFT,
        "BOOT: RELEASED by rank {A}, HOLD clear"
    );
    counter_is(&d, 1, "mlink_boots", 1);
    same(
        &sram_read(&mut t, IMG, 0x2000),
        &image(IMG, 0x2000, &[(IMG, &img[..])]),
        IMG,
        "the image",
    );
    same(
        &sram_read(&mut t, CONF, 0x80),
        &image(CONF, 0x80, &[(CONF, &conf[..])]),
        CONF,
        "the configuration",
    );

    // Released: no longer held, so RESET is not permitted and the window rule is back.
    let s = exec(&mut a, 0, op::RESET, reset);
    expect(s, status::NACK, reason::NOT_PERMITTED, "a second RESET");
    let s = exec(&mut a, 0, op::WRITE, write_img);
    expect(
        s,
        status::NACK,
        reason::ADDRESS,
        "WRITE outside the window after the boot",
    );
    assert_eq!(
        byte0(s),
        s0::PRESENT | s0::BOOT_ENABLED | s0::EXPOSED,
        "{}",
        show(s)
    );

    // Held again, remote boot off again: not permitted.
    rx_write(&mut t, rx::BOOT, boot::HOLD);
    assert_eq!(
        rx_read(&mut t, rx::BOOT) & (boot::HOLD | boot::RELEASED),
        boot::HOLD,
        "HOLD set again, RELEASED cleared"
    );
    remote_boot(&d, "m", false);
    let s = exec(&mut a, 0, op::RESET, reset);
    expect(
        s,
        status::NACK,
        reason::NOT_PERMITTED,
        "RESET with remote boot off again",
    );
    assert_eq!(
        rx_read(&mut t, rx::BOOT) & boot::HOLD,
        boot::HOLD,
        "still held"
    );
    counter_is(&d, 1, "mlink_boots", 1);
}

/// Seed 004 §11.2 ("launch or abort network operations", "check on the status of each MLINK's
/// ongoing ... operations"); digest §C.1, §D (last row: "Every in-flight op is abortable with
/// status"; no §E item). The target pauses its receiver (link-0 CONFIG.RX_PAUSE): a WRITE stays
/// BUSY; ABORT makes it ABORTED and nothing lands; ABORT again: state unchanged, reason
/// NOTHING_TO_ABORT, `mlink_abort_idle`; a WRITE left alone is NACK TIMEOUT after BLOCK_TIMEOUT_MS
/// and lands nowhere; a WRITE waiting when the pause clears completes ACK; and writes are ACK
/// again.
#[test]
fn a_paused_target_blocks_until_abort_timeout_or_resume() {
    let d = Daemon::start(2);
    let [mut a, mut b] = nis::<2>(&d);
    fill(&mut b, WIN, WIN_SIZE, FILL);
    expose(&mut b, WIN, WIN_SIZE);
    mlink_write_reg(&mut b, 0, ml::CONFIG, config::RX_PAUSE);
    let datas: Vec<Vec<u8>> = (0..4).map(|k| pattern(80 + k, 32)).collect();
    for (k, data) in datas.iter().enumerate() {
        sram_write(&mut a, SRC + 0x1000 * k as u32, data);
    }
    let w = |k: u32| Op {
        target: 1,
        remote: WIN + 0x1000 * k,
        local: SRC + 0x1000 * k,
        len: 32,
    };

    // Blocked, then aborted.
    program(&mut a, 0, w(0));
    let ticket = launch(&mut a, 0, op::WRITE);
    for _ in 0..10 {
        std::thread::sleep(Duration::from_millis(10));
        let s = mlink_read_reg(&mut a, 0, ml::STATUS);
        assert_eq!(
            state(s),
            status::BUSY,
            "blocked on the paused target: {}",
            show(s)
        );
    }
    assert_eq!(mlink_read_reg(&mut a, 0, ml::COMPLETED), ticket);
    launch(&mut a, 0, op::ABORT);
    let s = wait_done(&mut a, 0, ticket);
    assert_eq!(state(s), status::ABORTED, "ABORT while BUSY: {}", show(s));
    assert_eq!(mlink_read_reg(&mut a, 0, ml::COMPLETED), ticket + 1);
    counter_is(&d, 0, "mlink_aborts", 1);

    // Nothing to abort: state unchanged, reason says so.
    launch(&mut a, 0, op::ABORT);
    poll_until("ABORT when idle never said NOTHING_TO_ABORT", || {
        why(mlink_read_reg(&mut a, 0, ml::STATUS)) == reason::NOTHING_TO_ABORT
    });
    let s = mlink_read_reg(&mut a, 0, ml::STATUS);
    assert_eq!(state(s), status::ABORTED, "state unchanged: {}", show(s));
    assert_eq!(
        mlink_read_reg(&mut a, 0, ml::COMPLETED),
        ticket + 1,
        "nothing finished"
    );
    counter_is(&d, 0, "mlink_abort_idle", 1);
    counter_is(&d, 0, "mlink_aborts", 1);

    // Left alone: TIMEOUT after BLOCK_TIMEOUT_MS.
    program(&mut a, 0, w(1));
    let t0 = Instant::now();
    let ticket = launch(&mut a, 0, op::WRITE);
    let s = wait_done(&mut a, 0, ticket);
    let waited = t0.elapsed();
    expect(s, status::NACK, reason::TIMEOUT, "a WRITE left blocked");
    let timeout = Duration::from_millis(mlink::BLOCK_TIMEOUT_MS as u64);
    assert!(
        waited + Duration::from_millis(50) >= timeout,
        "timed out after {waited:?}, before BLOCK_TIMEOUT_MS"
    );
    assert!(
        waited < Duration::from_secs(5),
        "timed out after {waited:?}"
    );
    counter_is(&d, 0, "mlink_nacks", 1);

    // Waiting when the pause clears: it completes.
    program(&mut a, 0, w(2));
    let ticket = launch(&mut a, 0, op::WRITE);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(state(mlink_read_reg(&mut a, 0, ml::STATUS)), status::BUSY);
    mlink_write_reg(&mut b, 0, ml::CONFIG, 0);
    let s = wait_done(&mut a, 0, ticket);
    expect(
        s,
        status::ACK,
        reason::NONE,
        "the WRITE waiting when the pause cleared",
    );
    let s = exec(&mut a, 0, op::WRITE, w(3));
    expect(s, status::ACK, reason::NONE, "a WRITE after the pause");

    // Aborted and timed-out WRITEs left nothing; the others landed.
    same(
        &sram_read(&mut b, WIN, WIN_SIZE as usize),
        &image(
            WIN,
            WIN_SIZE,
            &[(WIN + 0x2000, &datas[2][..]), (WIN + 0x3000, &datas[3][..])],
        ),
        WIN,
        "the target's window",
    );
    counter_is(&d, 0, "mlink_acks", 2);
}

/// Seed 004 §11.2 (launch, check status); digest §C.1 (no §E item). A launch while the link is BUSY
/// is ignored and counted (`mlink_refused`): the BUSY WRITE goes on, completes ACK with its own
/// CHECKSUMS and data, and COMPLETED counts it alone.
#[test]
fn a_launch_while_busy_is_ignored() {
    let d = Daemon::start(2);
    let [mut a, mut b] = nis::<2>(&d);
    fill(&mut b, WIN, WIN_SIZE, FILL);
    expose(&mut b, WIN, WIN_SIZE);
    mlink_write_reg(&mut b, 0, ml::CONFIG, config::RX_PAUSE);
    let data = pattern(9, 40);
    sram_write(&mut a, SRC, &data);
    let w = Op {
        target: 1,
        remote: WIN + 0x40,
        local: SRC,
        len: 40,
    };
    program(&mut a, 0, w);
    let ticket = launch(&mut a, 0, op::WRITE);
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(state(mlink_read_reg(&mut a, 0, ml::STATUS)), status::BUSY);
    let refused = d.counter(0, "mlink_refused");
    mlink_write_reg(&mut a, 0, ml::COMMAND, op::NOOP);
    mlink_write_reg(&mut a, 0, ml::COMMAND, op::READ);
    counter_is(&d, 0, "mlink_refused", refused + 2);
    let s = mlink_read_reg(&mut a, 0, ml::STATUS);
    assert_eq!(state(s), status::BUSY, "still the WRITE: {}", show(s));
    assert_eq!(mlink_read_reg(&mut a, 0, ml::COMPLETED), ticket);

    mlink_write_reg(&mut b, 0, ml::CONFIG, 0);
    let s = wait_done(&mut a, 0, ticket);
    expect(s, status::ACK, reason::NONE, "the WRITE");
    assert_eq!(
        mlink_read_reg(&mut a, 0, ml::CHECKSUMS),
        sums(op::WRITE, 40, w.remote, &data),
        "the WRITE's CHECKSUMS"
    );
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(
        mlink_read_reg(&mut a, 0, ml::COMPLETED),
        ticket + 1,
        "the ignored launches never ran"
    );
    assert_eq!(state(mlink_read_reg(&mut a, 0, ml::STATUS)), status::ACK);
    same(
        &sram_read(&mut b, WIN, WIN_SIZE as usize),
        &image(WIN, WIN_SIZE, &[(w.remote, &data[..])]),
        WIN,
        "the target's window",
    );
    counter_is(&d, 0, "mlink_acks", 1);
}

/// Seed 004 §11.2 ("check on the status of each MLINK's ... recently completed operations");
/// digest §C.1 (no §E item); contract: CONFIG.INTERRUPT raises MSI-X vector MLINK at
/// completion, and COMPLETED counts ACK, NACK, ABORTED and REFUSED alike. With the bit set on
/// link 0, a completion (ACK, and REFUSED too) fires the vector; without it (link 0 before,
/// link 1 throughout, link 0 after clearing) nothing fires.
#[test]
fn completion_fires_the_mlink_vector_only_when_asked() {
    let d = Daemon::start(2);
    let [mut a, _b] = nis::<2>(&d);
    let ev = msix_vector(&mut a, pci::vector::MLINK);
    let noop = Op {
        target: 1,
        remote: 0,
        local: 0,
        len: 0,
    };

    let s = exec(&mut a, 0, op::NOOP, noop);
    expect(s, status::ACK, reason::NONE, "NOOP without INTERRUPT");
    assert_eq!(wait_event(&ev, 100), 0, "no interrupt asked for");

    let sent = d.counter(0, "msix_sent");
    mlink_write_reg(&mut a, 0, ml::CONFIG, config::INTERRUPT);
    let s = exec(&mut a, 0, op::NOOP, noop);
    expect(s, status::ACK, reason::NONE, "NOOP with INTERRUPT");
    assert_eq!(wait_event(&ev, 3000), 1, "the MLINK vector fired");
    let s = exec(
        &mut a,
        0,
        op::WRITE,
        Op {
            target: 1,
            remote: WIN,
            local: SRC,
            len: 0,
        },
    );
    expect(s, status::REFUSED, reason::LENGTH, "a refused WRITE");
    assert_eq!(wait_event(&ev, 3000), 1, "a refusal completes too");

    // Link 1 has its own CONFIG.
    let s = exec(&mut a, 1, op::NOOP, noop);
    expect(s, status::ACK, reason::NONE, "NOOP on link 1");
    assert_eq!(wait_event(&ev, 100), 0, "link 1 did not ask");

    mlink_write_reg(&mut a, 0, ml::CONFIG, 0);
    let s = exec(&mut a, 0, op::NOOP, noop);
    expect(
        s,
        status::ACK,
        reason::NONE,
        "NOOP after clearing INTERRUPT",
    );
    assert_eq!(wait_event(&ev, 100), 0, "INTERRUPT cleared");
    assert!(d.counter(0, "msix_sent") >= sent + 2);
}

/// Seed 004 §11.2 ("each MLINK", "one or more" per node); digest §C.1 ("There may be several MLINKs
/// per node"; no §E item). LINKS = 2: link 1 WRITEs and READs another target to completion while
/// link 0 is blocked on a paused one; each link keeps its own STATUS, CHECKSUMS and COMPLETED; link
/// 0 completes when the pause clears.
#[test]
fn two_links_run_independently() {
    assert_eq!(mlink::LINKS, 2);
    let d = Daemon::start(3);
    let [mut a, mut b, mut c] = nis::<3>(&d);
    for t in [&mut b, &mut c] {
        fill(t, WIN, 0x1000, FILL);
        expose(t, WIN, 0x1000);
    }
    mlink_write_reg(&mut b, 0, ml::CONFIG, config::RX_PAUSE);
    let d0 = pattern(110, 64);
    let d1 = pattern(111, 64);
    sram_write(&mut a, SRC, &d0);
    sram_write(&mut a, SRC + 0x1000, &d1);

    program(
        &mut a,
        0,
        Op {
            target: 1,
            remote: WIN,
            local: SRC,
            len: 64,
        },
    );
    let ticket = launch(&mut a, 0, op::WRITE);
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(state(mlink_read_reg(&mut a, 0, ml::STATUS)), status::BUSY);

    let w1 = Op {
        target: 2,
        remote: WIN + 0x100,
        local: SRC + 0x1000,
        len: 64,
    };
    let s = exec(&mut a, 1, op::WRITE, w1);
    expect(
        s,
        status::ACK,
        reason::NONE,
        "link 1 WRITE while link 0 is blocked",
    );
    let s = exec(&mut a, 1, op::READ, Op { local: DST, ..w1 });
    expect(
        s,
        status::ACK,
        reason::NONE,
        "link 1 READ while link 0 is blocked",
    );
    same(&sram_read(&mut a, DST, d1.len()), &d1, DST, "link 1's READ");
    assert_eq!(
        mlink_read_reg(&mut a, 1, ml::CHECKSUMS),
        sums(op::READ, 64, w1.remote, &d1)
    );
    assert_eq!(mlink_read_reg(&mut a, 1, ml::COMPLETED), 2);
    let s = mlink_read_reg(&mut a, 0, ml::STATUS);
    assert_eq!(state(s), status::BUSY, "link 0 still blocked: {}", show(s));
    assert_eq!(mlink_read_reg(&mut a, 0, ml::COMPLETED), ticket);

    mlink_write_reg(&mut b, 0, ml::CONFIG, 0);
    let s = wait_done(&mut a, 0, ticket);
    expect(
        s,
        status::ACK,
        reason::NONE,
        "link 0 once the pause cleared",
    );
    assert_eq!(
        mlink_read_reg(&mut a, 0, ml::CHECKSUMS),
        sums(op::WRITE, 64, WIN, &d0)
    );
    assert_eq!(
        mlink_read_reg(&mut a, 1, ml::COMPLETED),
        2,
        "link 1 untouched"
    );
    same(
        &sram_read(&mut b, WIN, 0x1000),
        &image(WIN, 0x1000, &[(WIN, &d0[..])]),
        WIN,
        "link 0's target",
    );
    same(
        &sram_read(&mut c, WIN, 0x1000),
        &image(WIN, 0x1000, &[(WIN + 0x100, &d1[..])]),
        WIN,
        "link 1's target",
    );
}

/// Seed 004 §11.2 ("32-bit values at memory-mapped MLINK addresses"); digest §C.1, §D (last
/// row: "32-bit-safe BAR0"; no §E item); issue 13 "Bad input". 1-, 2- and 8-byte accesses to MLINK
/// registers get an error reply, each counted in `bad_accesses`, and do nothing. Then
/// thousands of random 32-bit writes and reads over the whole page from NI 0 (launching
/// whatever they launch): the daemon lives, its counters answer, WRITE/READ between the two
/// other NIs on both links works, and a window NI 0 claims past the end of its SRAM lets no
/// peer's WRITE or READ outside SRAM (NACK ADDRESS; the PCI config mirror at BAR0 + 8 MiB
/// and SRAM's last word untouched).
#[test]
fn garbage_through_the_mlink_page_harms_nobody() {
    let mut d = Daemon::start(3);
    let mut raw = Raw::connect(&d.sock(0));
    assert!(!raw.region_write(pci::CONFIG_REGION, 4, &[6, 0]).is_error());
    poll_until("the fabric never served NI 0's raw client", || {
        let r = raw.region_read(pci::BAR0_REGION, ctrl::MAGIC, 4);
        !r.is_error() && r.body[16..20] == ctrl::MAGIC_VALUE.to_le_bytes()
    });
    let mut b = attach(&d, 1);
    let mut c = attach(&d, 2);

    // Widths other than 32 bits.
    let bad = d.counter(0, "bad_accesses");
    let mut refused = 0;
    let v: u64 = ((op::ROP | boot::HOLD) as u64) * 0x1_0000_0001;
    for at in [
        link_reg(0, ml::COMMAND),
        link_reg(0, ml::STATUS),
        link_reg(1, ml::TARGET),
        mlink::PAGE + rx::EXPOSE_BASE,
        mlink::PAGE + rx::BOOT,
        mlink::PAGE + rx::QUEUE_DATA,
    ] {
        for width in [1usize, 2, 8] {
            let w = raw.region_write(pci::BAR0_REGION, at, &v.to_le_bytes()[..width]);
            assert!(w.is_error(), "a {width}-byte write at {at:#x} was taken");
            let r = raw.region_read(pci::BAR0_REGION, at, width as u32);
            assert!(r.is_error(), "a {width}-byte read at {at:#x} was answered");
            refused += 2;
        }
    }
    assert_eq!(
        d.counter(0, "bad_accesses") - bad,
        refused,
        "every refused access counted"
    );
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(
        raw_read32(&mut raw, link_reg(0, ml::COMPLETED)),
        0,
        "nothing launched"
    );
    assert_eq!(
        state(raw_read32(&mut raw, link_reg(0, ml::STATUS))),
        status::IDLE
    );
    assert_eq!(raw_read32(&mut raw, mlink::PAGE + rx::BOOT), 0, "not held");
    assert_eq!(raw_read32(&mut raw, mlink::PAGE + rx::EXPOSE_BASE), 0);
    assert_eq!(
        raw_read32(&mut raw, mlink::PAGE + rx::EXPOSE_SIZE),
        0,
        "nothing exposed"
    );

    // Garbage: half of it on the registers, the values often small enough to mean something
    // (opcodes, ranks, aligned addresses).
    let mut rng = Rng(0x4D4C_494E_4B5F_4841);
    for _ in 0..4000 {
        let pick = rng.next();
        let span = if pick & 1 == 0 {
            0x240
        } else {
            mlink::PAGE_SIZE
        };
        let off = (rng.next() % span) & !3;
        let v = match (pick >> 1) % 4 {
            0 => rng.next() as u32,
            1 => (rng.next() % 16) as u32,
            2 => rng.next() as u32 & 0x00FF_FFF8,
            _ => (rng.next() % 4) as u32,
        };
        if (pick >> 4).is_multiple_of(4) {
            let r = raw.region_read(pci::BAR0_REGION, mlink::PAGE + off, 4);
            if !r.is_error() {
                assert_eq!(r.body.len(), 16 + 4, "the data of a read at {off:#x}");
            }
        } else {
            let _ = raw.region_write(pci::BAR0_REGION, mlink::PAGE + off, &v.to_le_bytes());
        }
    }
    assert!(d.alive(), "the daemon survived the garbage");
    for node in 0..3 {
        let _ = d.counter(node, "mlink_ops");
    }
    let _ = d.counter(0, "bad_accesses");

    // NI 0 goes quiet: no pause, nothing in flight.
    for link in 0..mlink::LINKS {
        raw_write32(&mut raw, link_reg(link, ml::CONFIG), 0);
        raw_write32(&mut raw, link_reg(link, ml::COMMAND), op::ABORT);
    }
    poll_until("NI 0's links never went quiet", || {
        (0..mlink::LINKS)
            .all(|l| state(raw_read32(&mut raw, link_reg(l, ml::STATUS))) != status::BUSY)
    });

    // The other two still work, on both links.
    fill(&mut b, WIN, WIN_SIZE, FILL);
    expose(&mut b, WIN, WIN_SIZE);
    let data = pattern(12, 512);
    sram_write(&mut c, SRC, &data);
    let mut writes = Vec::new();
    for link in 0..mlink::LINKS {
        let w = Op {
            target: 1,
            remote: WIN + 0x2000 * link,
            local: SRC,
            len: 512,
        };
        let s = exec(&mut c, link, op::WRITE, w);
        expect(
            s,
            status::ACK,
            reason::NONE,
            &format!("WRITE on link {link} after the garbage"),
        );
        assert_eq!(
            byte0(s) & (s0::PRESENT | s0::EXPOSED),
            s0::PRESENT | s0::EXPOSED,
            "{}",
            show(s)
        );
        fill(&mut c, DST, 512 * 8, STALE);
        let s = exec(&mut c, link, op::READ, Op { local: DST, ..w });
        expect(
            s,
            status::ACK,
            reason::NONE,
            &format!("READ on link {link} after the garbage"),
        );
        same(&sram_read(&mut c, DST, data.len()), &data, DST, "the READ");
        writes.push(w.remote);
    }
    let expected: Vec<(u32, &[u8])> = writes.iter().map(|&r| (r, &data[..])).collect();
    same(
        &sram_read(&mut b, WIN, WIN_SIZE as usize),
        &image(WIN, WIN_SIZE, &expected),
        WIN,
        "NI 1's window",
    );

    // NI 0 claims a window running far past its SRAM: nothing outside SRAM is reachable.
    let cfg_before = raw.region_read(pci::CONFIG_REGION, 0, 4).body;
    let last_before = raw.region_read(pci::BAR0_REGION, (SRAM - 8) as u64, 8).body;
    let _ = raw.region_write(
        pci::BAR0_REGION,
        mlink::PAGE + rx::EXPOSE_BASE,
        &(SRAM - 0x1000).to_le_bytes(),
    );
    let _ = raw.region_write(
        pci::BAR0_REGION,
        mlink::PAGE + rx::EXPOSE_SIZE,
        &u32::MAX.to_le_bytes(),
    );
    let _ = raw.region_write(
        pci::BAR0_REGION,
        mlink::PAGE + rx::BOOT,
        &0u32.to_le_bytes(),
    );
    for (remote, len) in [(SRAM, 1), (SRAM - 8, 2), (0xFF_FFF8, 1), (0xFF_FFF8, 2)] {
        for command in [op::WRITE, op::READ] {
            let o = Op {
                target: 0,
                remote,
                local: if command == op::READ { DST } else { SRC },
                len,
            };
            let s = exec(&mut c, 0, command, o);
            expect(
                s,
                status::NACK,
                reason::ADDRESS,
                &format!("command {command} at {remote:#x}, {len} word(s), outside NI 0's SRAM"),
            );
        }
    }
    assert_eq!(
        raw.region_read(pci::CONFIG_REGION, 0, 4).body,
        cfg_before,
        "config space untouched"
    );
    assert_eq!(
        raw.region_read(pci::BAR0_REGION, (SRAM - 8) as u64, 8).body,
        last_before,
        "SRAM's last word untouched"
    );
    assert!(d.alive(), "the daemon is still running");
}
