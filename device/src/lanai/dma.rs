//! The 4-channel PCI-DMA engine (§12): DRD chains in SRAM, heads queued by DMAi_POINTER.
//!
//! After a DRD, the engine follows NEXT only when VALID is set and APPEND is clear (a
//! pre-linked chain); otherwise it takes the next head from the channel's FIFO of pointer
//! writes. So every DRD of the App. D queueing scheme runs exactly once, in channel priority
//! order.
//!
//! The engine runs in the background, as the hardware does: a pointer write queues work and
//! returns; [`DmaEngine::run`] does one bounded step (at most [`STEP_DRDS`] DRDs and about
//! [`STEP_BYTES`] bytes) and says whether more is left, and the fabric's poller calls it
//! again until nothing is. A chain that links back on itself would run for ever on real
//! hardware; here it is cut off after [`MAX_DRDS_PER_CHAIN`] DRDs with `DMA_ERROR_INT`, the
//! only error bit §12 gives the engine (our choice: the seed names no loop detection).

use std::collections::VecDeque;

use ni_abi::lanai::{self, drd, SRAM_SIZE};

use super::Bus;
use crate::regfile::RegFile;

/// A channel stops (DMA disabled) while its DMAi_COUNT is at or above this (§12).
pub const COUNT_STALL: u64 = 128;
/// DRDs one chain (from the head taken off the pointer FIFO) may run before the engine
/// decides it loops on itself.
pub const MAX_DRDS_PER_CHAIN: u32 = 1 << 16;
/// DRDs one step runs at most.
pub const STEP_DRDS: usize = 64;
/// Bytes after which a step stops (a DRD moves up to 8 MiB, so one step may reach
/// STEP_BYTES + 8 MiB: a few ms of memcpy at worst).
pub const STEP_BYTES: u64 = 1 << 20;

#[derive(Default)]
pub struct DmaEngine {
    heads: [VecDeque<u32>; 4],
    /// The next DRD of a chain in progress (stalled on DMAi_COUNT >= 128, or out of budget).
    current: [Option<u32>; 4],
    /// DRDs run since the current chain's head came off the FIFO.
    chain_drds: [u32; 4],
    pub drds_done: u64,
    pub bytes_moved: u64,
}

#[derive(Debug, thiserror::Error)]
enum DrdError {
    #[error(transparent)]
    Sram(#[from] crate::sram::SramFault),
    #[error(transparent)]
    Host(#[from] crate::dma::DmaFault),
}

impl DmaEngine {
    pub fn pointer_write(&mut self, ch: usize, value: u32) {
        // The FIFO's depth is unspecified; the model bounds it to keep a flooding client
        // from growing it without end, dropping the oldest head (and counting it).
        if self.heads[ch].len() >= 4096 {
            self.heads[ch].pop_front();
        }
        self.heads[ch].push_back(value & drd::DMA_NEXT_MASK);
    }

    /// Whether a channel has work it could run now (bus mastering aside).
    pub fn busy(&self, regs: &RegFile) -> bool {
        (0..4).any(|ch| {
            regs.get(lanai::DMA_COUNT[ch]) < COUNT_STALL
                && (self.current[ch].is_some() || !self.heads[ch].is_empty())
        })
    }

    /// One bounded step over the channels, highest priority first. Returns the number of
    /// faults (each also counted) and whether work is left.
    pub fn run(&mut self, regs: &mut RegFile, bus: &mut Bus) -> (u32, bool) {
        let mut faults = 0;
        let mut drds = 0;
        let mut bytes = 0u64;
        for ch in 0..4 {
            loop {
                if drds >= STEP_DRDS || bytes >= STEP_BYTES {
                    return (faults, self.busy(regs));
                }
                if regs.get(lanai::DMA_COUNT[ch]) >= COUNT_STALL {
                    break;
                }
                let addr = match self.current[ch].take() {
                    Some(a) => a,
                    None => match self.heads[ch].pop_front() {
                        Some(a) => {
                            self.chain_drds[ch] = 0;
                            a
                        }
                        None => break,
                    },
                };
                if self.chain_drds[ch] >= MAX_DRDS_PER_CHAIN {
                    // A chain that never ends: drop it and report it.
                    bus.counters.dma_chain_aborts += 1;
                    tracing::debug!(
                        channel = ch,
                        "DMA chain exceeds {MAX_DRDS_PER_CHAIN} DRDs; cut off"
                    );
                    faults += 1;
                    continue;
                }
                self.chain_drds[ch] += 1;
                drds += 1;
                let before = self.bytes_moved;
                match self.execute(ch, addr, regs, bus) {
                    Ok(next) => self.current[ch] = next,
                    Err(e) => {
                        bus.counters.dma_faults += 1;
                        tracing::debug!(
                            channel = ch,
                            drd = format_args!("{addr:#x}"),
                            "DMA fault: {e}"
                        );
                        faults += 1;
                    }
                }
                bytes += self.bytes_moved - before;
            }
        }
        (faults, self.busy(regs))
    }

    /// Executes one DRD; returns the pre-linked next DRD, if any.
    fn execute(
        &mut self,
        ch: usize,
        addr: u32,
        regs: &mut RegFile,
        bus: &mut Bus,
    ) -> Result<Option<u32>, DrdError> {
        let a = addr as u64;
        let flags_len = bus.sram.read_be32(a + drd::OFF_FLAGS_LENGTH)?;
        let pci_lo = bus.sram.read_be32(a + drd::OFF_PCI_ADDR)?;
        let lanai_addr =
            (bus.sram.read_be32(a + drd::OFF_LANAI_ADDR)? & drd::DMA_LANAI_ADDR_MASK) as u64;
        let pci_hi = bus.sram.read_be32(a + drd::OFF_PCI64_ADDR)?;
        let next = bus.sram.read_be32(a + drd::OFF_NEXT)?;
        let offset_cksum = bus.sram.read_be32(a + drd::OFF_OFFSET)?;
        let len = (flags_len & drd::DMA_LENGTH_MASK) as usize;
        let host = ((pci_hi as u64) << 32) | pci_lo as u64;
        if len > 0 {
            let mut buf = vec![0u8; len];
            if flags_len & drd::DMA_READ != 0 {
                bus.dma.read(host, &mut buf)?;
                bus.sram.write(lanai_addr, &buf)?;
            } else {
                bus.sram.read(lanai_addr, &mut buf)?;
                bus.dma.write(host, &buf)?;
            }
            let from = (offset_cksum >> 16) as usize;
            bus.sram.write_be16(
                a + drd::OFF_CHECKSUM,
                checksum(buf.get(from..).unwrap_or(&[])),
            )?;
            self.bytes_moved += len as u64;
        }
        self.drds_done += 1;
        if flags_len & drd::DMA_END != 0 {
            let c = regs.get(lanai::DMA_COUNT[ch]);
            regs.set(lanai::DMA_COUNT[ch], (c + 1).min(0xFF));
        }
        let follow = next & drd::DMA_VALID != 0 && next & drd::DMA_APPEND == 0;
        let next_addr = next & drd::DMA_NEXT_MASK;
        Ok((follow && (next_addr as u64) < SRAM_SIZE).then_some(next_addr))
    }
}

/// 16-bit one's-complement sum, big-endian byte pairs, not complemented (§12.1).
pub fn checksum(data: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    for pair in data.chunks(2) {
        let w = ((pair[0] as u32) << 8) | pair.get(1).copied().unwrap_or(0) as u32;
        sum += w;
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    sum as u16
}

#[cfg(test)]
mod tests {
    use super::checksum;

    #[test]
    fn ones_complement_sum_folds_carries() {
        assert_eq!(checksum(&[]), 0);
        assert_eq!(checksum(&[0x12, 0x34]), 0x1234);
        assert_eq!(checksum(&[0xFF, 0xFF, 0x00, 0x02]), 0x0002);
        assert_eq!(checksum(&[0x01]), 0x0100);
    }
}
