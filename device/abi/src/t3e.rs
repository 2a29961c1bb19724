//! The T3E E-register window and the SSD-T90 router registers (HMM-148-0 "Messaging
//! Components"; CRAY SSD-T90 "Interconnect Network Operations"; digest cray-metro.md §A, §B).
//!
//! The seeds name the E registers, their state codes (ERS), the SEND command and its address
//! arguments (Table 1), the packet types a PE issues (SSD Table 2) and the router registers
//! reached by special routing, but no PE address map: the map here is ours, documented in
//! `device/abi/t3e.md`. Every register of the page is 64 bits wide and little-endian.
//!
//! Addresses. A command names its target with the Table 1 arguments: a *global index*, a
//! *centrifuge mask* that splits it into the destination PE (the masked bits, packed) and an
//! index offset (the other bits, packed), and a *base address* the offset is added to. The
//! sum is a global virtual address (GVA) in the layout of MSG_ADDR (Fig. 3): segment in
//! `<37:32>`, offset in `<30:0>`. The destination PE is a virtual PE, the rank in the
//! partition (SSD "Node Identification"). Segments are the destination NI's: a table of 64
//! windows onto its client's memory, which each NI's own driver fills in this page.

/// BAR0 offset of the E-register window (after the fast path's page at 0x900000).
pub const PAGE: u64 = 0xA0_0000;
pub const PAGE_SIZE: u64 = 0x4000;

/// E register `e` (0 ≤ e < `E_COUNT`) at `E_REGS + 8·e`: a write is the STORE E-register
/// command, a read the LOAD (address bits `<11:3>` select the register, as in SSD "Special
/// Routing" step 1).
pub const E_REGS: u64 = 0x0000;
pub const E_COUNT: u32 = 512;
/// The ERS codes, 2 bits per E register: register `e` at word `ERS + 8·(e / 32)`, bits
/// `2·(e % 32) + 1 : 2·(e % 32)`. Read-only.
pub const ERS: u64 = 0x1000;
pub const ERS_WORDS: u32 = E_COUNT / 32;

/// Command arguments (Table 1), kept until rewritten; a write to `CMD_ISSUE` issues.
pub const CMD_INDEX: u64 = 0x1100;
pub const CMD_BASE: u64 = 0x1108;
pub const CMD_CENTRIFUGE: u64 = 0x1110;
/// The MO ("more operands") E register: the first of the operand registers an atomic or
/// vector command reads (see [`op`]).
pub const CMD_MO: u64 = 0x1118;
/// Write to issue: opcode `<7:0>` ([`op`]), flags `<15:8>` ([`flag`]), E register `<24:16>`
/// (the source block of SEND/PUT, the destination of GET and the atomics, SPUT's source,
/// SGET's destination).
pub const CMD_ISSUE: u64 = 0x1120;
/// Read-only: the last command refused or failed: [`Error`] code `<15:0>`, E register
/// `<24:16>`, opcode `<39:32>`; `<63:48>` counts refusals and failures (wrapping).
pub const CMD_ERROR: u64 = 0x1128;
/// Read-only: the PUT counter (SSD Table 2 note): PUT-class requests (PUT, PUT4/8, PUTV4/8)
/// issued and not yet acknowledged. A fence waits for 0.
pub const PUT_COUNT: u64 = 0x1130;
/// Read-only: commands issued and not yet answered (any kind).
pub const OUTSTANDING: u64 = 0x1138;

/// The segment table: entry `s` (0 ≤ s < `SEGMENTS`) at `SEGMENT + 16·s`; `+0` the IOVA the
/// segment starts at (in this NI's client memory), `+8` its length `<47:0>` and access bits
/// [`seg`] in `<63:56>`. A length of 0 leaves the segment undefined.
pub const SEGMENT: u64 = 0x2000;
pub const SEGMENTS: u32 = 64;
pub const SEGMENT_STRIDE: u64 = 16;

/// The centrifuge mask after reset: the PE number in index bits `<63:52>` (12 bits, the
/// width of the packets' `Dest` field), the offset in `<51:0>`.
pub const CENTRIFUGE_DEFAULT: u64 = 0xFFF0_0000_0000_0000;

/// ERS codes (HMM-148-0 Fig. 2), written bit1 bit0.
pub mod ers {
    pub const EMPTY: u64 = 0b00;
    /// Full, but the transfer met an error (the command's cause is in `CMD_ERROR`).
    pub const FULL_F: u64 = 0b01;
    pub const FULL: u64 = 0b10;
    /// Full, but the SEND from this block was rejected: the queue was full.
    pub const FULL_SR: u64 = 0b11;
}

/// Opcodes (`CMD_ISSUE <7:0>`), named as SSD Table 2 names the PE's packet types.
pub mod op {
    /// 64-byte message from E registers e..e+7 (e a multiple of 8) into the message queue
    /// whose MQCW is at the GVA.
    pub const SEND: u64 = 0x01;
    /// One word from the GVA into E register e.
    pub const GET: u64 = 0x02;
    /// E register e to the GVA (8-byte aligned).
    pub const PUT: u64 = 0x03;
    /// E registers e..e+3 / e..e+7 (e a multiple of 4 / 8) to consecutive words at the GVA.
    pub const PUT4: u64 = 0x04;
    pub const PUT8: u64 = 0x05;
    /// Strided: word i goes to GVA + i·stride, the stride (bytes, signed) in E register MO.
    pub const PUTV4: u64 = 0x06;
    pub const PUTV8: u64 = 0x07;
    /// Strided gets into e..e+3 / e..e+7, the stride in E register MO.
    pub const GETV4: u64 = 0x08;
    pub const GETV8: u64 = 0x09;
    /// Atomics on the aligned word at the GVA; the old value lands in E register e.
    /// GET_INC adds 1; GET_ADD adds E[MO]; SWAP stores E[MO]; CSWAP stores E[MO+1] if the
    /// word equals E[MO]; GET_SET ORs E[MO] in; GET_CLEAR clears the bits set in E[MO].
    pub const GET_INC: u64 = 0x0A;
    pub const GET_ADD: u64 = 0x0B;
    pub const SWAP: u64 = 0x0C;
    pub const CSWAP: u64 = 0x0D;
    pub const GET_SET: u64 = 0x0E;
    pub const GET_CLEAR: u64 = 0x0F;
    /// Special routing: E register e to the router register at `CMD_BASE` of the router the
    /// deltas in `CMD_INDEX` reach ([`crate::t3e::delta`]).
    pub const SPUT: u64 = 0x10;
    /// Special routing: that router register into E register e, back by its R_SGET_RTRN.
    pub const SGET: u64 = 0x11;
}

/// Flags (`CMD_ISSUE <15:8>`).
pub mod flag {
    /// SENDs marked ordered to the same MQCW arrive in issue order (Table 1).
    pub const ORDERED: u64 = 1 << 8;
    /// Translate through the STT (Table 1): not modelled, refused with `Error::Stt`.
    pub const STT: u64 = 1 << 9;
}

pub const ISSUE_EREG_SHIFT: u32 = 16;
pub const ISSUE_EREG_MASK: u64 = 0x1FF;

/// Segment access bits (segment word `+8`, `<63:56>`): the fast path's region access bits.
pub mod seg {
    pub const LEN_MASK: u64 = (1 << 48) - 1;
    pub const ACCESS_SHIFT: u32 = 56;
    pub const REMOTE_READ: u64 = (crate::fastpath::access::REMOTE_READ as u64) << ACCESS_SHIFT;
    pub const REMOTE_WRITE: u64 = (crate::fastpath::access::REMOTE_WRITE as u64) << ACCESS_SHIFT;
    pub const MESSAGE_QUEUE: u64 = (crate::fastpath::access::MESSAGE_QUEUE as u64) << ACCESS_SHIFT;
}

/// GVA layout (MSG_ADDR, HMM-148-0 Fig. 3).
pub mod gva {
    pub const SEGMENT_SHIFT: u32 = 32;
    pub const SEGMENT_MASK: u64 = 0x3F;
    pub const OFFSET_MASK: u64 = 0x7FFF_FFFF;
    /// Bits that must be zero: `<63:38>` and 31.
    pub const MBZ: u64 = !((SEGMENT_MASK << SEGMENT_SHIFT) | OFFSET_MASK);

    pub const fn make(segment: u64, offset: u64) -> u64 {
        ((segment & SEGMENT_MASK) << SEGMENT_SHIFT) | (offset & OFFSET_MASK)
    }
}

/// Special-routing deltas (SSD "Special Routing"): six signed bytes in `CMD_INDEX` (and in
/// R_SGET_RTRN), consumed in this order. A positive delta goes + in its dimension, a
/// negative one -; each router on the way moves the current delta one step toward 0.
pub mod delta {
    pub const PRIMARY_X: u32 = 0;
    pub const PRIMARY_Y: u32 = 8;
    pub const PRIMARY_Z: u32 = 16;
    pub const SECONDARY_X: u32 = 24;
    pub const SECONDARY_Y: u32 = 32;
    pub const SECONDARY_Z: u32 = 40;
    /// Bits above the six deltas must be zero.
    pub const MBZ: u64 = !((1 << 48) - 1);

    /// Pack (pΔX, pΔY, pΔZ, sΔX, sΔY, sΔZ).
    pub const fn make(d: [i8; 6]) -> u64 {
        let mut v = 0u64;
        let mut i = 0;
        while i < 6 {
            v |= (d[i] as u8 as u64) << (8 * i);
            i += 1;
        }
        v
    }

    pub const fn split(v: u64) -> [i8; 6] {
        let mut d = [0i8; 6];
        let mut i = 0;
        while i < 6 {
            d[i] = (v >> (8 * i)) as u8 as i8;
            i += 1;
        }
        d
    }
}

/// Why a command was refused at issue or failed in the network (`CMD_ERROR <15:0>`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[repr(u16)]
pub enum Error {
    None = 0,
    /// Not an opcode of [`op`].
    BadOpcode = 1,
    /// The E-register block is not aligned to its size (8 for SEND/PUT8/GETV8, 4 for the
    /// 4-word forms, 2 for CSWAP's operands) or runs past the last E register.
    Misaligned = 2,
    /// A register of the block is EMPTY: a command on it is still in flight.
    Busy = 3,
    /// The STT flag: translation is not modelled (t3e.md "Addresses").
    Stt = 4,
    /// The destination PE is not in this NI's partition.
    NoSuchPe = 5,
    /// The destination's NI has no client.
    PeerDown = 6,
    /// A port is down or the torus has no route (map-outs, a misrouting LUT entry).
    NoRoute = 7,
    /// The GVA has bits set in `<63:38>` or bit 31, or is not aligned for the command.
    BadAddress = 8,
    /// The GVA's segment is undefined at the destination, or lacks the access asked for.
    BadSegment = 9,
    /// The GVA runs past its segment, or out of the client's mapped memory.
    OutOfBounds = 10,
    /// The MQCW's Tail is 0 (the message would overwrite it).
    BadMqcw = 11,
    /// Special routing: a delta that runs a full lap or more of its dimension, or moves in
    /// a dimension of one node; bits above the six deltas.
    BadDelta = 12,
    /// Special routing: no such router register, or a write to a read-only one, or a value
    /// outside the register's field.
    BadRouterRegister = 13,
    /// SGET: the reply, routed by the target router's R_SGET_RTRN, did not come back to
    /// this node (misroute, R_ERR0 bit 56 at the node it reached).
    ReturnPath = 14,
    /// Special routing crossed a mapped-out link or node.
    LinkMappedOut = 15,
    /// SEND: the queue's arrival lock (a queue in an exported region, `fastpath.md`
    /// "Message queues in the window") stayed held past the daemon's lock timeout.
    QueueLocked = 16,
}

impl Error {
    pub fn from_u16(v: u16) -> Option<Error> {
        use Error::*;
        [
            None,
            BadOpcode,
            Misaligned,
            Busy,
            Stt,
            NoSuchPe,
            PeerDown,
            NoRoute,
            BadAddress,
            BadSegment,
            OutOfBounds,
            BadMqcw,
            BadDelta,
            BadRouterRegister,
            ReturnPath,
            LinkMappedOut,
            QueueLocked,
        ]
        .into_iter()
        .find(|e| *e as u16 == v)
    }
}

/// The router registers special routing reaches (`CMD_BASE` of SPUT/SGET): our addresses
/// for the registers the SSD-T90 names, each 64 bits.
pub mod router {
    /// R_SW: the router software register, read-write, no effect.
    pub const R_SW: u64 = 0x000;
    /// R_ORIENT `<2:0>`: bit d swaps which port of dimension d (X, Y, Z) is + (Table 1).
    pub const R_ORIENT: u64 = 0x008;
    /// R_LUT_OVERRIDE: mode in `<41:40>`, the override tag in `<37:0>` (Table 6).
    pub const R_LUT_OVERRIDE: u64 = 0x010;
    /// R_SGET_RTRN: the deltas ([`crate::t3e::delta`]) an SGET reply takes from this router.
    pub const R_SGET_RTRN: u64 = 0x018;
    /// R_ERR0: error bits (Table 8), sticky; a written 1 clears a bit.
    pub const R_ERR0: u64 = 0x020;
    /// R_ERR1: interrupt enables, the same bit positions.
    pub const R_ERR1: u64 = 0x028;
    /// Read-only, ours: this router's physical PE number `ZZYYXX` (SSD Fig. 11).
    pub const R_PHYS: u64 = 0x030;
    /// R_NET_LUT entry i at `R_NET_LUT + 8·i`, i < `LUT_ENTRIES`: a routing tag (Table 7).
    pub const R_NET_LUT: u64 = 0x1000;
    pub const LUT_ENTRIES: u32 = 544;

    pub const OVERRIDE_MODE_SHIFT: u32 = 40;
    pub const OVERRIDE_MODE_MASK: u64 = 0b11;
    pub const TAG_MASK: u64 = (1 << 38) - 1;

    /// R_ERR0 bits (Table 8).
    pub const ERR_DATELINE: u32 = 0;
    pub const ERR_HEAD_PARITY: u32 = 16;
    pub const ERR_CHANNEL_PARITY: u32 = 24;
    pub const ERR_MISROUTE: u32 = 56;
    pub const ERR_ECC: u32 = 58;
    /// Bits the router can set: dateline `<5:0>`, head parity `<21:16>`, channel parity
    /// `<31:24>`, port RAM parity `<50:32>`, misroute 56, ECC 58.
    pub const ERR_DEFINED: u64 =
        0x3F | (0x3F << 16) | (0xFF << 24) | (0x7_FFFF << 32) | (1 << 56) | (1 << 58);
}

/// `ni_t3e.h`: the E-register window and the router register map, for drivers written in C,
/// generated from these definitions (`NI_BLESS=1 cargo test -p ni-abi` rewrites it).
pub fn c_header() -> String {
    use std::fmt::Write;
    let mut h = String::from(
        "/*\n * ni_t3e.h — the T3E E-register window in BAR0 and the SSD-T90 router registers\n \
         * reached by special routing. GENERATED from device/abi/src/t3e.rs by\n \
         * `NI_BLESS=1 cargo test -p ni-abi`: do not edit. Behaviour: device/abi/t3e.md.\n \
         *\n * Every register of the window is 64 bits, little-endian, at NI_T3E_PAGE + offset.\n \
         */\n#ifndef NI_T3E_H\n#define NI_T3E_H\n\n",
    );
    let mut def = |name: &str, v: u64| {
        writeln!(h, "#define NI_T3E_{name} 0x{v:X}ull").expect("String");
    };
    def("PAGE", PAGE);
    def("PAGE_SIZE", PAGE_SIZE);
    def("E_REGS", E_REGS);
    def("E_COUNT", E_COUNT as u64);
    def("ERS", ERS);
    def("CMD_INDEX", CMD_INDEX);
    def("CMD_BASE", CMD_BASE);
    def("CMD_CENTRIFUGE", CMD_CENTRIFUGE);
    def("CMD_MO", CMD_MO);
    def("CMD_ISSUE", CMD_ISSUE);
    def("CMD_ERROR", CMD_ERROR);
    def("PUT_COUNT", PUT_COUNT);
    def("OUTSTANDING", OUTSTANDING);
    def("SEGMENT", SEGMENT);
    def("SEGMENTS", SEGMENTS as u64);
    def("SEGMENT_STRIDE", SEGMENT_STRIDE);
    def("CENTRIFUGE_DEFAULT", CENTRIFUGE_DEFAULT);
    def("ISSUE_EREG_SHIFT", ISSUE_EREG_SHIFT as u64);
    for (n, v) in [
        ("EMPTY", ers::EMPTY),
        ("FULL_F", ers::FULL_F),
        ("FULL", ers::FULL),
        ("FULL_SR", ers::FULL_SR),
    ] {
        def(&format!("ERS_{n}"), v);
    }
    for (n, v) in [
        ("SEND", op::SEND),
        ("GET", op::GET),
        ("PUT", op::PUT),
        ("PUT4", op::PUT4),
        ("PUT8", op::PUT8),
        ("PUTV4", op::PUTV4),
        ("PUTV8", op::PUTV8),
        ("GETV4", op::GETV4),
        ("GETV8", op::GETV8),
        ("GET_INC", op::GET_INC),
        ("GET_ADD", op::GET_ADD),
        ("SWAP", op::SWAP),
        ("CSWAP", op::CSWAP),
        ("GET_SET", op::GET_SET),
        ("GET_CLEAR", op::GET_CLEAR),
        ("SPUT", op::SPUT),
        ("SGET", op::SGET),
    ] {
        def(&format!("OP_{n}"), v);
    }
    def("FLAG_ORDERED", flag::ORDERED);
    def("FLAG_STT", flag::STT);
    def("SEG_REMOTE_READ", seg::REMOTE_READ);
    def("SEG_REMOTE_WRITE", seg::REMOTE_WRITE);
    def("SEG_MESSAGE_QUEUE", seg::MESSAGE_QUEUE);
    def("GVA_SEGMENT_SHIFT", gva::SEGMENT_SHIFT as u64);
    let mut e = 0u16;
    while let Some(err) = Error::from_u16(e) {
        let name = format!("{err:?}");
        let mut upper = String::new();
        for (i, c) in name.chars().enumerate() {
            if c.is_uppercase() && i > 0 {
                upper.push('_');
            }
            upper.push(c.to_ascii_uppercase());
        }
        def(&format!("ERR_{upper}"), e as u64);
        e += 1;
    }
    for (n, v) in [
        ("R_SW", router::R_SW),
        ("R_ORIENT", router::R_ORIENT),
        ("R_LUT_OVERRIDE", router::R_LUT_OVERRIDE),
        ("R_SGET_RTRN", router::R_SGET_RTRN),
        ("R_ERR0", router::R_ERR0),
        ("R_ERR1", router::R_ERR1),
        ("R_PHYS", router::R_PHYS),
        ("R_NET_LUT", router::R_NET_LUT),
        ("LUT_ENTRIES", router::LUT_ENTRIES as u64),
        ("OVERRIDE_MODE_SHIFT", router::OVERRIDE_MODE_SHIFT as u64),
        ("ERR_DATELINE", router::ERR_DATELINE as u64),
        ("ERR_HEAD_PARITY", router::ERR_HEAD_PARITY as u64),
        ("ERR_MISROUTE", router::ERR_MISROUTE as u64),
    ] {
        def(n, v);
    }
    h.push_str(
        "\n/* Special-routing deltas: six signed bytes, pDX pDY pDZ sDX sDY sDZ from bit 0. */\n\
         #define NI_T3E_DELTAS(px, py, pz, sx, sy, sz) \\\n  \
         ((unsigned long long)(unsigned char)(px) | (unsigned long long)(unsigned char)(py) << 8 | \\\n   \
         (unsigned long long)(unsigned char)(pz) << 16 | (unsigned long long)(unsigned char)(sx) << 24 | \\\n   \
         (unsigned long long)(unsigned char)(sy) << 32 | (unsigned long long)(unsigned char)(sz) << 40)\n\
         /* CMD_ISSUE value. */\n\
         #define NI_T3E_ISSUE(op, ereg, flags) \\\n  \
         ((unsigned long long)(op) | (unsigned long long)(flags) | (unsigned long long)(ereg) << 16)\n\
         /* GVA: segment <37:32>, offset <30:0>. */\n\
         #define NI_T3E_GVA(seg, off) ((unsigned long long)(seg) << 32 | ((unsigned long long)(off) & 0x7FFFFFFFull))\n\
         /* ERS code of E register e, from the ERS words. */\n\
         #define NI_T3E_ERS_WORD(e) (NI_T3E_ERS + 8ull * ((e) / 32))\n\
         #define NI_T3E_ERS_SHIFT(e) (2u * ((e) % 32))\n\
         \n#endif /* NI_T3E_H */\n",
    );
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_c_header_is_generated_from_these_definitions() {
        crate::check_c_header("ni_t3e.h", &c_header());
    }

    #[test]
    fn deltas_round_trip_and_keep_their_order() {
        let d = [1, -2, 3, -4, 5, -128];
        assert_eq!(delta::split(delta::make(d)), d);
        assert_eq!(delta::make([1, 0, 0, 0, 0, 0]), 1);
        assert_eq!(delta::make([0, 0, 0, 0, 0, -1]), 0xFF << 40);
        assert_eq!(delta::make(d) & delta::MBZ, 0);
    }

    #[test]
    fn gva_matches_the_msg_addr_layout() {
        assert_eq!(gva::make(0x3F, 0x7FFF_FFFF), 0x3F_7FFF_FFFF);
        assert_eq!(gva::MBZ, 0xFFFF_FFC0_8000_0000);
        for e in 0..17u16 {
            assert_eq!(Error::from_u16(e).map(|x| x as u16), Some(e));
        }
        assert_eq!(Error::from_u16(17), None);
    }
}
