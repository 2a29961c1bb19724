//! A T3E driver's small steps over BAR0's E-register window (HMM-148-0 "Messaging
//! Components"; CRAY SSD-T90 "Special Routing"; the map is `ni_abi::t3e`), shared by
//! `t3e.rs` and `t3e_hostile.rs`. Every register is 64-bit little-endian. Commands are
//! carried out by the daemon's fabric poller shortly after issue, so the waits poll.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;

use vfio_user::Client;

use super::{enable, memfd, poll_until, Daemon};
use ni_abi::fastpath::{mqcw, regs};
use ni_abi::pci;
use ni_abi::t3e::{self, delta, op, seg, Error};

/// Client memory each test driver maps for the device, and the IOVA it maps it at.
pub const MEM_SIZE: u64 = 0x1_0000;
pub const IOVA: u64 = 0x4000_0000;
/// The segment [`Pe::attach`] defines over all of that memory, with every access.
pub const SEG: u64 = 1;
pub const ALL_ACCESS: u64 = seg::REMOTE_READ | seg::REMOTE_WRITE | seg::MESSAGE_QUEUE;
/// Under the reset centrifuge (`CENTRIFUGE_DEFAULT`) the PE is CMD_INDEX `<63:52>`.
pub const PE_SHIFT: u32 = 52;
/// An ERS word with all 32 registers FULL (code 0b10 each).
pub const ALL_FULL: u64 = 0xAAAA_AAAA_AAAA_AAAA;
/// The E register the router-register helpers use.
pub const SPECIAL_E: u32 = 500;
/// Special-routing deltas that stay at the issuing node's own router.
pub const HERE: [i8; 6] = [0; 6];
/// Routing tag fields (SSD-T90 Table 7): INITIAL_HOP `<33:32>` = 11 is "none" (00 would be
/// an initial +X hop), X_SGN bit 7.
pub const TAG_NO_INITIAL_HOP: u64 = 0b11 << 32;
pub const TAG_X_MINUS: u64 = 1 << 7;

/// A routing tag to (x, y, z), every sign +, no initial or final hop.
pub const fn tag_plus(x: u64, y: u64, z: u64) -> u64 {
    x | (y << 8) | (z << 16) | TAG_NO_INITIAL_HOP
}

/// The address of R_NET_LUT entry `i`.
pub const fn lut(i: u64) -> u64 {
    t3e::router::R_NET_LUT + 8 * i
}

// ---- the window ----

pub fn t3e_read(c: &mut Client, off: u64) -> u64 {
    let mut b = [0u8; 8];
    c.region_read(pci::BAR0_REGION, t3e::PAGE + off, &mut b)
        .unwrap();
    u64::from_le_bytes(b)
}

/// A 4-byte read (allowed: reads may be 4 or 8 bytes).
pub fn t3e_read32(c: &mut Client, off: u64) -> u32 {
    let mut b = [0u8; 4];
    c.region_read(pci::BAR0_REGION, t3e::PAGE + off, &mut b)
        .unwrap();
    u32::from_le_bytes(b)
}

pub fn t3e_write(c: &mut Client, off: u64, v: u64) {
    c.region_write(pci::BAR0_REGION, t3e::PAGE + off, &v.to_le_bytes())
        .unwrap();
}

/// STORE E-register command.
pub fn ereg_store(c: &mut Client, e: u32, v: u64) {
    t3e_write(c, t3e::E_REGS + 8 * e as u64, v);
}

/// LOAD E-register command.
pub fn ereg_load(c: &mut Client, e: u32) -> u64 {
    t3e_read(c, t3e::E_REGS + 8 * e as u64)
}

/// ERS word `w`: registers 32w..32w+31, two bits each.
pub fn ers_word(c: &mut Client, w: u32) -> u64 {
    t3e_read(c, t3e::ERS + 8 * w as u64)
}

/// The ERS code of E register `e` (`ni_abi::t3e::ers`).
pub fn ers(c: &mut Client, e: u32) -> u64 {
    (ers_word(c, e / 32) >> (2 * (e % 32))) & 0b11
}

/// Every ERS word, for before/after comparisons.
pub fn ers_words(c: &mut Client) -> Vec<u64> {
    (0..t3e::ERS_WORDS).map(|w| ers_word(c, w)).collect()
}

/// The window as reset leaves it: every E register FULL and 0, the default centrifuge, no
/// error, nothing in flight, every segment undefined.
pub fn assert_reset_state(c: &mut Client) {
    assert_eq!(
        ers_words(c),
        vec![ALL_FULL; t3e::ERS_WORDS as usize],
        "every E register FULL after reset"
    );
    for e in 0..t3e::E_COUNT {
        assert_eq!(ereg_load(c, e), 0, "E register {e} after reset");
    }
    assert_eq!(t3e_read(c, t3e::CMD_CENTRIFUGE), t3e::CENTRIFUGE_DEFAULT);
    for reg in [t3e::CMD_ERROR, t3e::PUT_COUNT, t3e::OUTSTANDING] {
        assert_eq!(t3e_read(c, reg), 0, "register {reg:#x} after reset");
    }
    for s in 0..t3e::SEGMENTS as u64 {
        let at = t3e::SEGMENT + t3e::SEGMENT_STRIDE * s;
        assert_eq!(
            (t3e_read(c, at), t3e_read(c, at + 8)),
            (0, 0),
            "segment {s} undefined after reset"
        );
    }
}

/// The CMD_ISSUE value of `op` on E register `e` with `flags`.
pub fn issue_word(op: u64, e: u32, flags: u64) -> u64 {
    op | flags | ((e as u64) << t3e::ISSUE_EREG_SHIFT)
}

pub fn issue(c: &mut Client, op: u64, e: u32, flags: u64) {
    t3e_write(c, t3e::CMD_ISSUE, issue_word(op, e, flags));
}

/// Wait until E register `e` is no longer EMPTY; its code then.
pub fn wait_not_empty(c: &mut Client, e: u32) -> u64 {
    let mut code = t3e::ers::EMPTY;
    poll_until(&format!("E register {e} stayed EMPTY"), || {
        code = ers(c, e);
        code != t3e::ers::EMPTY
    });
    code
}

/// Wait until every command of this NI has been answered (OUTSTANDING 0). A refused
/// command never counted, so this returns at once after a refusal.
pub fn wait_idle(c: &mut Client) {
    poll_until("commands still outstanding", || {
        t3e_read(c, t3e::OUTSTANDING) == 0
    });
}

/// Segment `s` of this NI's own table: `len` bytes of client memory at `iova`, `access` a
/// combination of `ni_abi::t3e::seg` bits.
pub fn set_segment(c: &mut Client, s: u64, iova: u64, len: u64, access: u64) {
    let at = t3e::SEGMENT + t3e::SEGMENT_STRIDE * s;
    t3e_write(c, at, iova);
    t3e_write(c, at + 8, (len & seg::LEN_MASK) | access);
}

/// CMD_ERROR decoded: (code, E register, opcode).
pub fn cmd_error(c: &mut Client) -> (Error, u32, u64) {
    let v = t3e_read(c, t3e::CMD_ERROR);
    let code =
        Error::from_u16(v as u16).unwrap_or_else(|| panic!("CMD_ERROR {v:#x} holds no known code"));
    (code, ((v >> 16) & 0x1FF) as u32, (v >> 32) & 0xFF)
}

/// CMD_ERROR `<63:48>`: refusals and failures so far.
pub fn cmd_error_count(c: &mut Client) -> u64 {
    t3e_read(c, t3e::CMD_ERROR) >> 48
}

pub fn set_mo(c: &mut Client, mo: u32) {
    t3e_write(c, t3e::CMD_MO, mo as u64);
}

/// Point the next command at PE `pe` (partition rank), GVA `gva`, under the reset
/// centrifuge: CMD_INDEX = pe in `<63:52>`, offset 0; CMD_BASE = the GVA.
pub fn target(c: &mut Client, pe: u32, gva: u64) {
    t3e_write(c, t3e::CMD_INDEX, (pe as u64) << PE_SHIFT);
    t3e_write(c, t3e::CMD_BASE, gva);
}

/// Issue `op` on E register `e` to PE `pe` at `gva`, wait until the NI has nothing
/// outstanding, and return E[e]'s ERS code (PUTs leave it FULL, or FULL_F on error).
pub fn remote(c: &mut Client, op: u64, e: u32, pe: u32, gva: u64) -> u64 {
    target(c, pe, gva);
    issue(c, op, e, 0);
    wait_idle(c);
    ers(c, e)
}

/// STORE `words` into E[e..e+8] and SEND them to the MQCW at `gva` of PE `pe`; the block's
/// code once answered (every register of the block checked to agree).
pub fn send(c: &mut Client, e: u32, words: &[u64; 8], pe: u32, gva: u64) -> u64 {
    for (i, &w) in words.iter().enumerate() {
        ereg_store(c, e + i as u32, w);
    }
    target(c, pe, gva);
    issue(c, op::SEND, e, 0);
    let code = wait_not_empty(c, e);
    for i in 1..8 {
        assert_eq!(
            ers(c, e + i),
            code,
            "E register {} of the SEND block",
            e + i
        );
    }
    code
}

// ---- special routing (SSD-T90 "Special Routing", Figs. 15-16) ----

/// SPUT or SGET on E register `e` with a raw CMD_INDEX (the deltas, or garbage); the code
/// once answered.
pub fn special_index(c: &mut Client, op: u64, index: u64, addr: u64, e: u32) -> u64 {
    t3e_write(c, t3e::CMD_INDEX, index);
    t3e_write(c, t3e::CMD_BASE, addr);
    issue(c, op, e, 0);
    wait_not_empty(c, e)
}

/// SPUT of E[e] (already STOREd) to router register `addr` of the router `deltas` reach.
pub fn sput(c: &mut Client, deltas: [i8; 6], addr: u64, e: u32) -> u64 {
    special_index(c, op::SPUT, delta::make(deltas), addr, e)
}

/// SGET of router register `addr` of the router `deltas` reach into E[e]: (code, value).
pub fn sget(c: &mut Client, deltas: [i8; 6], addr: u64, e: u32) -> (u64, u64) {
    let code = special_index(c, op::SGET, delta::make(deltas), addr, e);
    (code, ereg_load(c, e))
}

/// A router register write that must succeed.
pub fn router_write(c: &mut Client, deltas: [i8; 6], addr: u64, v: u64) {
    ereg_store(c, SPECIAL_E, v);
    let code = sput(c, deltas, addr, SPECIAL_E);
    assert_eq!(
        code,
        t3e::ers::FULL,
        "SPUT of {v:#x} to router register {addr:#x} via {deltas:?}: {:?}",
        cmd_error(c)
    );
}

/// A router register read that must succeed.
pub fn router_read(c: &mut Client, deltas: [i8; 6], addr: u64) -> u64 {
    let (code, v) = sget(c, deltas, addr, SPECIAL_E);
    assert_eq!(
        code,
        t3e::ers::FULL,
        "SGET of router register {addr:#x} via {deltas:?}: {:?}",
        cmd_error(c)
    );
    v
}

// ---- the fast path's trapped page: IR_STATUS and MSG_ADDR (HMM-148-0 p. 5) ----

pub fn fp_read(c: &mut Client, off: u64) -> u64 {
    let mut b = [0u8; 8];
    c.region_read(pci::BAR0_REGION, regs::PAGE + off, &mut b)
        .unwrap();
    u64::from_le_bytes(b)
}

pub fn fp_write(c: &mut Client, off: u64, v: u64) {
    c.region_write(pci::BAR0_REGION, regs::PAGE + off, &v.to_le_bytes())
        .unwrap();
}

// ---- a PE: an NI's client with memory the device can reach ----

/// An NI's driver with [`MEM_SIZE`] bytes of client memory mapped at [`IOVA`] and segment
/// [`SEG`] defined over all of it with every access.
pub struct Pe {
    pub c: Client,
    pub mem: File,
}

impl Pe {
    /// Attach to NI `i`: memory decode and bus mastering on, memory mapped, segment set.
    pub fn attach(d: &Daemon, i: u32) -> Pe {
        let mut c = d.client(i);
        enable(&mut c);
        let mem = memfd(MEM_SIZE);
        c.dma_map(0, IOVA, MEM_SIZE, mem.as_raw_fd()).unwrap();
        set_segment(&mut c, SEG, IOVA, MEM_SIZE, ALL_ACCESS);
        Pe { c, mem }
    }

    /// The word at byte offset `off` of the client memory (IOVA + off).
    pub fn read64(&self, off: u64) -> u64 {
        let mut b = [0u8; 8];
        self.mem.read_exact_at(&mut b, off).unwrap();
        u64::from_le_bytes(b)
    }

    pub fn write64(&self, off: u64, v: u64) {
        self.mem.write_all_at(&v.to_le_bytes(), off).unwrap();
    }

    pub fn words(&self, off: u64, n: usize) -> Vec<u64> {
        (0..n as u64).map(|i| self.read64(off + 8 * i)).collect()
    }

    /// Define a message queue with its MQCW at `off`: Tail 1 (HMM-148-0 p. 6).
    pub fn queue(&self, off: u64, limit: u64, threshold: u64) {
        self.write64(off, mqcw::make(false, 1, limit, threshold));
    }
}
