//! The 4-channel PCI-DMA engine (§12): DRD chains in SRAM, heads queued by DMAi_POINTER.
//!
//! After a DRD, the engine follows NEXT only when VALID is set and APPEND is clear (a
//! pre-linked chain); otherwise it takes the next head from the channel's FIFO of pointer
//! writes. So every DRD of the App. D queueing scheme runs exactly once, in channel priority
//! order.
//!
//! The engine runs in the background, as the hardware does: a pointer write queues work and
//! returns; [`DmaEngine::run`] does one bounded step (at most [`STEP_DRDS`] DRDs and
//! [`STEP_BYTES`] bytes, a DRD of up to 8 MiB being moved in pieces across steps) and says
//! whether more is left, and the fabric's poller calls it again until nothing is. A register
//! write runs a smaller step itself ([`INLINE_BYTES`]), so short transfers are done when it
//! returns, as a driver that polls right after expects. A chain that links back on itself
//! would run for ever on real hardware; here it is cut off after [`MAX_DRDS_PER_CHAIN`] DRDs
//! with `DMA_ERROR_INT`, the only error bit §12 gives the engine (our choice: the seed names
//! no loop detection).

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
/// Bytes one background step moves at most.
pub const STEP_BYTES: u64 = 1 << 20;
/// Bytes the step a register write runs itself moves at most.
pub const INLINE_BYTES: u64 = 64 << 10;

/// A DRD being moved: what was read of it, and how far it got.
#[derive(Clone, Copy, Debug, serde::Serialize, serde::Deserialize)]
struct InFlight {
    addr: u32,
    flags_len: u32,
    host: u64,
    lanai_addr: u64,
    next: u32,
    len: u64,
    /// Checksum from this byte of the data on (the DRD's OFFSET field, §12.1).
    from: u64,
    done: u64,
    sum: u64,
}

#[derive(Default, serde::Serialize, serde::Deserialize)]
pub struct DmaEngine {
    heads: [VecDeque<u32>; 4],
    /// The next DRD of a chain in progress (stalled on DMAi_COUNT >= 128, or out of budget).
    current: [Option<u32>; 4],
    /// A DRD moved partly by an earlier step.
    inflight: [Option<InFlight>; 4],
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
            self.inflight[ch].is_some()
                || (regs.get(lanai::DMA_COUNT[ch]) < COUNT_STALL
                    && (self.current[ch].is_some() || !self.heads[ch].is_empty()))
        })
    }

    /// One step over the channels, highest priority first, moving at most `max_bytes`.
    /// Returns the number of faults (each also counted) and whether work is left.
    pub fn run(&mut self, regs: &mut RegFile, bus: &mut Bus, max_bytes: u64) -> (u32, bool) {
        let mut faults = 0;
        let mut drds = 0;
        let mut budget = max_bytes;
        for ch in 0..4 {
            loop {
                if drds >= STEP_DRDS || budget == 0 {
                    return (faults, self.busy(regs));
                }
                let job = match self.inflight[ch].take() {
                    Some(j) => j,
                    None => {
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
                        match start(addr, bus) {
                            Ok(j) => j,
                            Err(e) => {
                                fault(ch, addr, &e, bus);
                                faults += 1;
                                continue;
                            }
                        }
                    }
                };
                match self.advance(ch, job, regs, bus, &mut budget) {
                    Ok(()) => {}
                    Err(e) => {
                        fault(ch, job.addr, &e, bus);
                        faults += 1;
                    }
                }
            }
        }
        (faults, self.busy(regs))
    }

    /// Move what the budget allows of `job`; finish it when it is all moved.
    fn advance(
        &mut self,
        ch: usize,
        mut job: InFlight,
        regs: &mut RegFile,
        bus: &mut Bus,
        budget: &mut u64,
    ) -> Result<(), DrdError> {
        let n = (job.len - job.done).min(*budget);
        if n > 0 {
            let mut buf = vec![0u8; n as usize];
            let (host, lanai_addr) = (job.host.wrapping_add(job.done), job.lanai_addr + job.done);
            if job.flags_len & drd::DMA_READ != 0 {
                bus.dma.read(host, &mut buf)?;
                bus.sram.write(lanai_addr, &buf)?;
            } else {
                bus.sram.read(lanai_addr, &mut buf)?;
                bus.dma.write(host, &buf)?;
            }
            job.sum += partial_sum(&buf, job.done, job.from);
            job.done += n;
            *budget -= n;
            self.bytes_moved += n;
        }
        if job.done < job.len {
            self.inflight[ch] = Some(job);
            return Ok(());
        }
        let a = job.addr as u64;
        if job.len > 0 {
            bus.sram.write_be16(a + drd::OFF_CHECKSUM, fold(job.sum))?;
        }
        self.drds_done += 1;
        if job.flags_len & drd::DMA_END != 0 {
            let c = regs.get(lanai::DMA_COUNT[ch]);
            regs.set(lanai::DMA_COUNT[ch], (c + 1).min(0xFF));
        }
        let follow = job.next & drd::DMA_VALID != 0 && job.next & drd::DMA_APPEND == 0;
        let next_addr = job.next & drd::DMA_NEXT_MASK;
        self.current[ch] = (follow && (next_addr as u64) < SRAM_SIZE).then_some(next_addr);
        Ok(())
    }
}

fn fault(ch: usize, addr: u32, e: &DrdError, bus: &mut Bus) {
    bus.counters.dma_faults += 1;
    tracing::debug!(
        channel = ch,
        drd = format_args!("{addr:#x}"),
        "DMA fault: {e}"
    );
}

/// Read a DRD (§12) out of SRAM.
fn start(addr: u32, bus: &Bus) -> Result<InFlight, DrdError> {
    let a = addr as u64;
    let flags_len = bus.sram.read_be32(a + drd::OFF_FLAGS_LENGTH)?;
    let pci_lo = bus.sram.read_be32(a + drd::OFF_PCI_ADDR)?;
    let lanai_addr =
        (bus.sram.read_be32(a + drd::OFF_LANAI_ADDR)? & drd::DMA_LANAI_ADDR_MASK) as u64;
    let pci_hi = bus.sram.read_be32(a + drd::OFF_PCI64_ADDR)?;
    let next = bus.sram.read_be32(a + drd::OFF_NEXT)?;
    let offset_cksum = bus.sram.read_be32(a + drd::OFF_OFFSET)?;
    let len = (flags_len & drd::DMA_LENGTH_MASK) as u64;
    // The whole SRAM range is checked up front: a DRD that would run off the end faults
    // before any piece of it moves (the host side is checked piece by piece).
    if lanai_addr + len > SRAM_SIZE {
        return Err(DrdError::Sram(crate::sram::SramFault {
            addr: lanai_addr,
            len,
        }));
    }
    Ok(InFlight {
        addr,
        flags_len,
        host: ((pci_hi as u64) << 32) | pci_lo as u64,
        lanai_addr,
        next,
        len,
        from: (offset_cksum >> 16) as u64,
        done: 0,
        sum: 0,
    })
}

/// The one's-complement contribution of `data`, which sits at byte `at` of the DRD's data,
/// to a checksum that starts at byte `from` (§12.1): bytes pair up big-endian from `from` on.
fn partial_sum(data: &[u8], at: u64, from: u64) -> u64 {
    let skip = from.saturating_sub(at);
    if skip >= data.len() as u64 {
        // The whole piece lies before the checksum's start.
        return 0;
    }
    let mut rest = &data[skip as usize..];
    let mut sum = 0u64;
    // A piece that starts on the low byte of a pair.
    if (at + skip - from) % 2 == 1 {
        if let Some((&low, tail)) = rest.split_first() {
            sum += low as u64;
            rest = tail;
        }
    }
    for pair in rest.chunks(2) {
        sum += ((pair[0] as u64) << 8) | pair.get(1).copied().unwrap_or(0) as u64;
    }
    sum
}

fn fold(mut sum: u64) -> u16 {
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    sum as u16
}

#[cfg(test)]
mod tests {
    /// The reference: 16-bit one's-complement sum of a whole buffer, big-endian byte pairs,
    /// not complemented (§12.1).
    fn checksum(data: &[u8]) -> u16 {
        let mut sum: u32 = 0;
        for pair in data.chunks(2) {
            let w = ((pair[0] as u32) << 8) | pair.get(1).copied().unwrap_or(0) as u32;
            sum += w;
            sum = (sum & 0xFFFF) + (sum >> 16);
        }
        sum as u16
    }

    #[test]
    fn checksums_in_pieces_equal_the_whole() {
        let data: Vec<u8> = (0..1001u32).map(|i| (i * 37 + 11) as u8).collect();
        for from in [0u64, 1, 2, 7, 500] {
            let whole = checksum(&data[from as usize..]);
            for piece in [1usize, 2, 3, 64, 333] {
                let mut sum = 0;
                for (k, c) in data.chunks(piece).enumerate() {
                    sum += super::partial_sum(c, (k * piece) as u64, from);
                }
                assert_eq!(super::fold(sum), whole, "from {from}, pieces of {piece}");
            }
        }
    }

    #[test]
    fn ones_complement_sum_folds_carries() {
        assert_eq!(checksum(&[]), 0);
        assert_eq!(checksum(&[0x12, 0x34]), 0x1234);
        assert_eq!(checksum(&[0xFF, 0xFF, 0x00, 0x02]), 0x0002);
        assert_eq!(checksum(&[0x01]), 0x0100);
    }
}
