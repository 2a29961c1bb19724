//! The memory-copy engine (§8): three writes to `COPY` (source, `{COPY_TO_CRC32, length}`,
//! destination) move bytes inside SRAM at any byte alignment, or feed them into the CRC-32
//! engine (then there is no third write).
//!
//! `COPY_BUSY` is set by the first write and cleared when the copy is done. The model moves
//! the bytes when the last word arrives; SRAM is at most 8 MiB, so a copy is one bounded
//! memmove (overlap, which the seed leaves open, behaves as a copy through a buffer). What the
//! seed calls undefined is refused and counted, never run outside SRAM: an address with its
//! most significant bit set or a range past SRAM's end (`lanai_copy_faults`), a length of 0
//! (does nothing), a `COPY` write while busy (restarts the sequence with it as the source).

use ni_abi::lanai::{copy as cw, SRAM_SIZE};

use super::crc::{Crc32, Order};
use crate::sram::Sram;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
enum Phase {
    #[default]
    Idle,
    HaveSource(u32),
    HaveLength(u32, u32),
}

#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct Copy {
    phase: Phase,
}

/// What a `COPY` write did.
#[derive(Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Outcome {
    /// More words are expected.
    Pending,
    /// Bytes moved (or fed into the CRC).
    Done(u64),
    /// Refused: outside SRAM or a special address.
    Fault,
}

impl Copy {
    pub fn busy(&self) -> bool {
        self.phase != Phase::Idle
    }

    pub fn abort(&mut self) {
        self.phase = Phase::Idle;
    }

    pub fn write(&mut self, v: u32, sram: &Sram, crc: &mut Crc32, order: Order) -> Outcome {
        match self.phase {
            Phase::Idle => {
                self.phase = Phase::HaveSource(v);
                Outcome::Pending
            }
            Phase::HaveSource(src) if v & cw::COPY_TO_CRC32 != 0 => {
                self.phase = Phase::Idle;
                let len = v & cw::COPY_LENGTH_MASK;
                let Some(bytes) = read(sram, src, len) else {
                    return Outcome::Fault;
                };
                crc.feed(order, &bytes);
                Outcome::Done(len as u64)
            }
            Phase::HaveSource(src) => {
                self.phase = Phase::HaveLength(src, v & cw::COPY_LENGTH_MASK);
                Outcome::Pending
            }
            Phase::HaveLength(src, len) => {
                self.phase = Phase::Idle;
                if !inside(v, len) {
                    return Outcome::Fault;
                }
                let Some(bytes) = read(sram, src, len) else {
                    return Outcome::Fault;
                };
                match sram.write(v as u64, &bytes) {
                    Ok(()) => Outcome::Done(len as u64),
                    Err(_) => Outcome::Fault,
                }
            }
        }
    }
}

fn inside(addr: u32, len: u32) -> bool {
    addr as u64 + len as u64 <= SRAM_SIZE
}

fn read(sram: &Sram, src: u32, len: u32) -> Option<Vec<u8>> {
    if !inside(src, len) {
        return None;
    }
    let mut b = vec![0; len as usize];
    sram.read(src as u64, &mut b).ok()?;
    Some(b)
}
