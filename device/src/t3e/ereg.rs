//! The E registers and their commands (HMM-148-0 pp. 4, 7-8, Fig. 2, Table 1; SSD-T90
//! Table 2): the PE's side of the support circuitry.
//!
//! A command is checked and its operands copied when `CMD_ISSUE` is written, so the E
//! registers it names can be stored again as soon as their ERS allow; the fabric's poller
//! carries it through the network and calls [`Ereg::finish`] with the outcome. Nothing here
//! waits: a trapped LOAD of an EMPTY register returns the old value (hardware would stall the
//! load; a trapped read that waited would hold the NI's lock the response needs).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use ni_abi::t3e::{self, ers, flag, op, Error, E_COUNT};

use crate::counters::Counters;

/// Commands one NI may have in flight: at most one per E register.
pub const MAX_IN_FLIGHT: usize = E_COUNT as usize;

/// One segment-table entry: a window onto this NI's client memory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Segment {
    pub iova: u64,
    /// Length `<47:0>` and access bits `<63:56>` (`t3e::seg`).
    pub word: u64,
}

impl Segment {
    pub fn len(&self) -> u64 {
        self.word & t3e::seg::LEN_MASK
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether the segment is defined and grants every access bit of `need` (`t3e::seg::*`).
    pub fn grants(&self, need: u64) -> bool {
        !self.is_empty() && self.word & need == need
    }
}

/// An issued command with everything it needs copied out of the registers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Command {
    pub op: u64,
    pub flags: u64,
    /// The E register (the block's first).
    pub e: u16,
    /// SEND/PUT source words (as many as the command moves).
    pub words: [u64; 8],
    /// E[MO] and E[MO+1] at issue.
    pub operands: [u64; 2],
    pub index: u64,
    pub base: u64,
    pub centrifuge: u64,
    /// The register file's epoch at issue: a reset since voids the answer.
    epoch: u64,
}

impl Command {
    /// Which command this is while it waits in the fabric: its epoch and its register.
    pub fn id(&self) -> u64 {
        self.epoch << 16 | self.e as u64
    }

    /// How many E registers the command's block spans.
    pub fn block(&self) -> u16 {
        block_len(self.op)
    }

    /// The destination PE (a virtual PE: partition rank) and the GVA (Table 1: the
    /// centrifuge splits the global index; the offset is added to the base).
    /// A command another host's PE issued, as its host carried it here (`fabric/doors.rs`):
    /// only what the destination needs; `None` for what is not a network command.
    pub fn across(op: u64, operands: [u64; 2], words: [u64; 8]) -> Option<Command> {
        (op::SEND..=op::GET_CLEAR).contains(&op).then_some(Command {
            op,
            flags: 0,
            e: 0,
            words,
            operands,
            index: 0,
            base: 0,
            centrifuge: 0,
            epoch: 0,
        })
    }

    pub fn target(&self) -> (u64, u64) {
        let pe = pext(self.index, self.centrifuge);
        let offset = pext(self.index, !self.centrifuge);
        (pe, self.base.wrapping_add(offset))
    }
}

/// The masked bits of `v`, packed from bit 0 up (the centrifuge).
pub fn pext(v: u64, mask: u64) -> u64 {
    let mut out = 0;
    let mut bit = 0;
    let mut m = mask;
    while m != 0 {
        let low = m & m.wrapping_neg();
        if v & low != 0 {
            out |= 1 << bit;
        }
        bit += 1;
        m &= m - 1;
    }
    out
}

/// How a command ended, as the network answered it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Outcome {
    /// SEND-accepted, PUT/SPUT acknowledged.
    Done,
    /// SEND-rejected: the queue was full.
    Rejected,
    /// GET-class answers: the first `n` words land in E[e..e+n].
    Values {
        words: [u64; 8],
        n: usize,
    },
    Failed(Error),
    /// Not done: a SEND whose queue's arrival lock is held (`fabric/mq.rs`); the fabric puts
    /// the command back with [`Ereg::put_back`] and tries again.
    Held,
}

fn block_len(op: u64) -> u16 {
    match op {
        op::SEND | op::PUT8 | op::PUTV8 | op::GETV8 => 8,
        op::PUT4 | op::PUTV4 | op::GETV4 => 4,
        _ => 1,
    }
}

/// How many MO operand registers the command reads.
fn operands(op: u64) -> u16 {
    match op {
        op::PUTV4 | op::PUTV8 | op::GETV4 | op::GETV8 => 1,
        op::GET_ADD | op::SWAP | op::GET_SET | op::GET_CLEAR => 1,
        op::CSWAP => 2,
        _ => 0,
    }
}

fn known(op: u64) -> bool {
    (op::SEND..=op::SGET).contains(&op)
}

/// PUT-class commands: no response reaches the PE, the PUT counter tracks them.
pub fn is_put(op: u64) -> bool {
    matches!(op, op::PUT | op::PUT4 | op::PUT8 | op::PUTV4 | op::PUTV8)
}

#[derive(serde::Serialize, serde::Deserialize)]
pub struct Ereg {
    #[serde(with = "crate::handover::serde_with::boxed_array")]
    values: Box<[u64; E_COUNT as usize]>,
    #[serde(with = "crate::handover::serde_with::boxed_array")]
    ers: Box<[u8; E_COUNT as usize]>,
    index: u64,
    base: u64,
    centrifuge: u64,
    mo: u64,
    error: u64,
    put_count: u64,
    outstanding: u64,
    #[serde(with = "crate::handover::serde_with::array")]
    segments: [Segment; t3e::SEGMENTS as usize],
    epoch: u64,
    /// Issued commands the fabric has not taken yet.
    outbox: VecDeque<Command>,
    /// Set when the outbox has commands: the fabric's poller takes them.
    #[serde(skip)]
    pub pending: Arc<AtomicBool>,
}

impl Default for Ereg {
    fn default() -> Self {
        Self::new()
    }
}

impl Ereg {
    pub fn new() -> Ereg {
        Ereg {
            values: Box::new([0; E_COUNT as usize]),
            ers: Box::new([ers::FULL as u8; E_COUNT as usize]),
            index: 0,
            base: 0,
            centrifuge: t3e::CENTRIFUGE_DEFAULT,
            mo: 0,
            error: 0,
            put_count: 0,
            outstanding: 0,
            segments: [Segment::default(); t3e::SEGMENTS as usize],
            epoch: 0,
            outbox: VecDeque::new(),
            pending: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Power-on state; commands in flight are forgotten (their answers are dropped).
    pub fn reset(&mut self) {
        let epoch = self.epoch + 1;
        let pending = self.pending.clone();
        *self = Ereg::new();
        self.epoch = epoch;
        self.pending = pending;
    }

    pub fn segment(&self, s: u64) -> Segment {
        self.segments.get(s as usize).copied().unwrap_or_default()
    }

    pub fn ers(&self, e: usize) -> u64 {
        self.ers[e] as u64
    }

    pub fn value(&self, e: usize) -> u64 {
        self.values[e]
    }

    /// A read of the page at `offset` (a 64-bit register, or one half of it).
    pub fn read(&self, offset: u64, counters: &mut Counters) -> Option<u64> {
        let reg = offset & !7;
        let v = match reg {
            o if o < t3e::ERS => {
                let e = (o / 8) as usize;
                if self.ers[e] as u64 == ers::EMPTY {
                    counters.t3e_load_empty += 1;
                }
                self.values[e]
            }
            o if (t3e::ERS..t3e::ERS + 8 * t3e::ERS_WORDS as u64).contains(&o) => {
                let first = ((o - t3e::ERS) / 8 * 32) as usize;
                (0..32).fold(0u64, |w, i| w | (self.ers[first + i] as u64) << (2 * i))
            }
            t3e::CMD_INDEX => self.index,
            t3e::CMD_BASE => self.base,
            t3e::CMD_CENTRIFUGE => self.centrifuge,
            t3e::CMD_MO => self.mo,
            t3e::CMD_ERROR => self.error,
            t3e::PUT_COUNT => self.put_count,
            t3e::OUTSTANDING => self.outstanding,
            o if (t3e::SEGMENT..t3e::SEGMENT + t3e::SEGMENT_STRIDE * t3e::SEGMENTS as u64)
                .contains(&o) =>
            {
                let s = &self.segments[((o - t3e::SEGMENT) / t3e::SEGMENT_STRIDE) as usize];
                if (o - t3e::SEGMENT).is_multiple_of(t3e::SEGMENT_STRIDE) {
                    s.iova
                } else {
                    s.word
                }
            }
            _ => return None,
        };
        Some(v >> ((offset & 4) * 8))
    }

    /// A 64-bit write at `offset`. Returns whether a command was issued (the poller should
    /// look), or `None` when nothing is at that offset.
    pub fn write(&mut self, offset: u64, v: u64, counters: &mut Counters) -> Option<bool> {
        match offset {
            o if o < t3e::ERS => {
                let e = (o / 8) as usize;
                if self.ers[e] as u64 == ers::EMPTY {
                    counters.t3e_store_busy += 1;
                    self.refuse(Error::Busy, e as u64, 0, counters);
                } else {
                    self.values[e] = v;
                    self.ers[e] = ers::FULL as u8;
                }
            }
            t3e::CMD_INDEX => self.index = v,
            t3e::CMD_BASE => self.base = v,
            t3e::CMD_CENTRIFUGE => self.centrifuge = v,
            t3e::CMD_MO => self.mo = v,
            t3e::CMD_ISSUE => return Some(self.issue(v, counters)),
            o if (t3e::SEGMENT..t3e::SEGMENT + t3e::SEGMENT_STRIDE * t3e::SEGMENTS as u64)
                .contains(&o) =>
            {
                let s = &mut self.segments[((o - t3e::SEGMENT) / t3e::SEGMENT_STRIDE) as usize];
                if (o - t3e::SEGMENT).is_multiple_of(t3e::SEGMENT_STRIDE) {
                    s.iova = v;
                } else {
                    s.word = v;
                }
            }
            _ => return None,
        }
        Some(false)
    }

    fn refuse(&mut self, err: Error, e: u64, op: u64, counters: &mut Counters) {
        counters.t3e_refused += 1;
        self.note_error(err, e, op);
    }

    fn note_error(&mut self, err: Error, e: u64, op: u64) {
        let count = ((self.error >> 48) + 1) & 0xFFFF;
        self.error = err as u64 | (e & 0x1FF) << 16 | (op & 0xFF) << 32 | count << 48;
    }

    /// `CMD_ISSUE`: check the command, copy its operands, mark its registers, queue it.
    fn issue(&mut self, v: u64, counters: &mut Counters) -> bool {
        let opcode = v & 0xFF;
        let flags = v & 0xFF00;
        let e = (v >> t3e::ISSUE_EREG_SHIFT) & t3e::ISSUE_EREG_MASK;
        if !known(opcode) {
            self.refuse(Error::BadOpcode, e, opcode, counters);
            return false;
        }
        if flags & flag::STT != 0 {
            self.refuse(Error::Stt, e, opcode, counters);
            return false;
        }
        let n = block_len(opcode) as u64;
        let k = operands(opcode) as u64;
        let misaligned = !e.is_multiple_of(n)
            || e + n > E_COUNT as u64
            || self.mo + k > E_COUNT as u64
            || (opcode == op::CSWAP && !self.mo.is_multiple_of(2));
        if misaligned {
            self.refuse(Error::Misaligned, e, opcode, counters);
            return false;
        }
        let (e, n, k, mo) = (e as usize, n as usize, k as usize, self.mo as usize);
        let empty = |r: &[u8]| r.iter().any(|&c| c as u64 == ers::EMPTY);
        if empty(&self.ers[e..e + n])
            || empty(&self.ers[mo..mo + k])
            || self.outstanding as usize >= MAX_IN_FLIGHT
        {
            self.refuse(Error::Busy, e as u64, opcode, counters);
            return false;
        }
        let mut words = [0u64; 8];
        words[..n].copy_from_slice(&self.values[e..e + n]);
        let mut ops = [0u64; 2];
        ops[..k].copy_from_slice(&self.values[mo..mo + k]);
        let cmd = Command {
            op: opcode,
            flags,
            e: e as u16,
            words,
            operands: ops,
            index: self.index,
            base: self.base,
            centrifuge: self.centrifuge,
            epoch: self.epoch,
        };
        if is_put(opcode) {
            self.put_count += 1;
        } else {
            self.ers[e..e + n].fill(ers::EMPTY as u8);
        }
        self.outstanding += 1;
        counters.t3e_issued += 1;
        self.outbox.push_back(cmd);
        self.pending.store(true, Ordering::Release);
        true
    }

    /// Up to `max` issued commands, oldest first, for the fabric to carry out.
    pub fn take(&mut self, max: usize) -> Vec<Command> {
        let n = self.outbox.len().min(max);
        let out: Vec<Command> = self.outbox.drain(..n).collect();
        if !self.outbox.is_empty() {
            self.pending.store(true, Ordering::Release);
        }
        out
    }

    /// Commands [`take`](Self::take) gave that the fabric could not carry out yet: back at
    /// the front, in their order (those of an earlier epoch are dropped, as `finish` would).
    pub fn put_back(&mut self, cmds: Vec<Command>) {
        for c in cmds.into_iter().rev() {
            if c.epoch == self.epoch {
                self.outbox.push_front(c);
            }
        }
        if !self.outbox.is_empty() {
            self.pending.store(true, Ordering::Release);
        }
    }

    /// The network's answer to `cmd`: set the ERS (and values) of its registers.
    pub fn finish(&mut self, cmd: &Command, outcome: Outcome) {
        if cmd.epoch != self.epoch || outcome == Outcome::Held {
            return;
        }
        self.outstanding = self.outstanding.saturating_sub(1);
        if is_put(cmd.op) {
            self.put_count = self.put_count.saturating_sub(1);
        }
        let e = cmd.e as usize;
        let n = cmd.block() as usize;
        match outcome {
            Outcome::Done => self.ers[e..e + n].fill(ers::FULL as u8),
            Outcome::Rejected => self.ers[e..e + n].fill(ers::FULL_SR as u8),
            Outcome::Values { words, n: got } => {
                self.values[e..e + got].copy_from_slice(&words[..got]);
                self.ers[e..e + n].fill(ers::FULL as u8);
            }
            Outcome::Failed(err) => {
                self.ers[e..e + n].fill(ers::FULL_F as u8);
                self.note_error(err, cmd.e as u64, cmd.op);
            }
            Outcome::Held => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn issue(r: &mut Ereg, c: &mut Counters, opcode: u64, e: u64) -> bool {
        r.write(t3e::CMD_ISSUE, opcode | e << 16, c).unwrap()
    }

    #[test]
    fn centrifuge_packs_the_masked_bits() {
        assert_eq!(pext(0b1011_0110, 0b1111_0000), 0b1011);
        assert_eq!(pext(0b1011_0110, !0b1111_0000), 0b0110);
        let c = Command {
            op: op::SEND,
            flags: 0,
            e: 0,
            words: [0; 8],
            operands: [0; 2],
            index: 5 << 52 | 0x40,
            base: 0x1_0000_0000,
            centrifuge: t3e::CENTRIFUGE_DEFAULT,
            epoch: 0,
        };
        assert_eq!(c.target(), (5, 0x1_0000_0040));
    }

    /// HMM-148-0 Fig. 2: EMPTY at issue, FULL / FULL_SR / FULL_F by the answer; the words
    /// stay for a resend.
    #[test]
    fn send_block_goes_empty_then_takes_the_answer() {
        let mut r = Ereg::new();
        let mut c = Counters::default();
        for i in 0..8 {
            r.write(8 * (8 + i), 100 + i, &mut c);
        }
        assert!(issue(&mut r, &mut c, op::SEND, 8));
        assert!((8..16).all(|e| r.ers(e) == ers::EMPTY));
        // A store into the block while in flight is refused.
        r.write(8 * 9, 7, &mut c);
        assert_eq!(r.value(9), 101);
        assert_eq!(c.t3e_store_busy, 1);
        // So is a second command on it.
        assert!(!issue(&mut r, &mut c, op::SEND, 8));
        assert_eq!(r.error & 0xFFFF, Error::Busy as u64);
        let cmd = r.take(10)[0];
        assert_eq!(cmd.words, [100, 101, 102, 103, 104, 105, 106, 107]);
        r.finish(&cmd, Outcome::Rejected);
        assert!((8..16).all(|e| r.ers(e) == ers::FULL_SR));
        assert!(issue(&mut r, &mut c, op::SEND, 8));
        assert_eq!(r.take(10)[0].words, cmd.words);
    }

    #[test]
    fn misaligned_blocks_and_the_stt_are_refused_without_touching_ers() {
        let mut r = Ereg::new();
        let mut c = Counters::default();
        for (opcode, e) in [(op::SEND, 3), (op::PUT8, 511), (op::GETV4, 2), (0x77, 0)] {
            assert!(!issue(&mut r, &mut c, opcode, e));
        }
        assert!(!r
            .write(t3e::CMD_ISSUE, op::GET | flag::STT, &mut c)
            .unwrap());
        assert_eq!(r.error & 0xFFFF, Error::Stt as u64);
        assert_eq!(r.error >> 48, 5);
        assert!((0..512).all(|e| r.ers(e) == ers::FULL));
        // CSWAP's operand pair must start even.
        r.write(t3e::CMD_MO, 3, &mut c);
        assert!(!issue(&mut r, &mut c, op::CSWAP, 0));
        assert_eq!(r.error & 0xFFFF, Error::Misaligned as u64);
    }

    #[test]
    fn puts_count_until_acknowledged_and_a_reset_voids_answers() {
        let mut r = Ereg::new();
        let mut c = Counters::default();
        assert!(issue(&mut r, &mut c, op::PUT, 0));
        assert_eq!(r.read(t3e::PUT_COUNT, &mut c), Some(1));
        assert_eq!(r.ers(0), ers::FULL);
        let cmd = r.take(1)[0];
        r.finish(&cmd, Outcome::Done);
        assert_eq!(r.read(t3e::PUT_COUNT, &mut c), Some(0));
        assert!(issue(&mut r, &mut c, op::GET, 5));
        let cmd = r.take(1)[0];
        r.reset();
        r.finish(
            &cmd,
            Outcome::Values {
                words: [9; 8],
                n: 1,
            },
        );
        assert_eq!((r.value(5), r.ers(5)), (0, ers::FULL));
    }

    #[test]
    fn in_flight_commands_are_bounded() {
        let mut r = Ereg::new();
        let mut c = Counters::default();
        for _ in 0..MAX_IN_FLIGHT {
            assert!(issue(&mut r, &mut c, op::PUT, 0));
        }
        assert!(!issue(&mut r, &mut c, op::PUT, 0));
        assert_eq!(r.error & 0xFFFF, Error::Busy as u64);
    }
}
