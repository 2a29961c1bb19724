//! One network interface: the PCI function and the models behind its BARs.

use std::fs::File;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use ni_abi::cm5;
use ni_abi::fastpath::regs as fp;
use ni_abi::lanai::{self, config40};
use ni_abi::pci::{self, vector};
use ni_abi::{mlink as ml, t3e};

use crate::cm5::Cm5;
use crate::counters::Counters;
use crate::dma::DmaSpace;
use crate::fabric::Doorbell;
use crate::irq::Irqs;
use crate::lanai::{Bus, Lanai};
use crate::pci::config::ConfigSpace;
use crate::pci::msix::MsixTable;
use crate::sram::{Sram, SramError};

/// A refused region access; the vfio-user server turns it into an error reply.
#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    #[error("region {0} does not exist or has no size")]
    NoRegion(u32),
    #[error("access of {len} bytes at {offset:#x} runs past the end of region {region} ({size:#x} bytes)")]
    OutOfRange {
        region: u32,
        offset: u64,
        len: usize,
        size: u64,
    },
    #[error("write at {offset:#x} of region {region}: that part of the partition window belongs to another writer (fastpath.md, \"One writer per page\")")]
    NotOwner { region: u32, offset: u64 },
    #[error("{len}-byte access at {offset:#x} of region {region}: width not supported there")]
    Width {
        region: u32,
        offset: u64,
        len: usize,
    },
}

impl From<AccessError> for io::Error {
    fn from(e: AccessError) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidInput, e.to_string())
    }
}

pub struct Ni {
    pub index: u32,
    pub config: ConfigSpace,
    pub msix: MsixTable,
    /// Whether the client programs the MSI-X table itself (a direct vfio-user client does;
    /// QEMU emulates the table and only hands over eventfds for vectors it wants).
    msix_table_used: bool,
    pub irqs: Irqs,
    /// Shared with the fabric's poller, which reads the submission ring from it.
    pub sram: Arc<Sram>,
    /// The SRAM the next client gets, made before this one's session starts: a detach must
    /// never fail for want of a descriptor (and hand the next client the last one's SRAM).
    spare_sram: Option<Arc<Sram>>,
    pub lanai: Lanai,
    pub cm5: Cm5,
    /// The T3E E registers (BAR0 + `t3e::PAGE`).
    pub t3e: crate::t3e::ereg::Ereg,
    /// The MLINK block (BAR0 + `mlink::PAGE`).
    pub mlink: crate::mlink::Mlink,
    /// Shared with the fabric, which copies payloads between clients through it.
    pub dma: Arc<RwLock<DmaSpace>>,
    pub counters: Counters,
    /// Interrupt source levels, one bit per MSI-X vector 0..=LANAI.
    lines: u32,
    /// T3E IR_STATUS and MSG_ADDR (HMM-148-0 Fig. 3), latched by message-queue arrivals.
    pub ir_status: u64,
    pub msg_addr: u64,
    /// Rank and size in the partition, as the fabric last published them.
    pub rank: u32,
    pub size: u32,
    doorbell: Arc<Doorbell>,
    /// Bumped on every reset and detach, so the fabric's poller drops this NI's fast-path
    /// state (and fails what peers had pending with it) without taking this NI's lock first.
    pub generation: Arc<AtomicU64>,
    /// The partition window this session's client was handed (BAR4's upper half).
    pub window: Option<Arc<crate::fabric::window::Window>>,
    /// Set while an engine (the Lanai PCI-DMA) has work left after a step: the fabric's
    /// poller then calls [`Ni::step_engines`] until it is done, so no register access ever
    /// runs more than one bounded step.
    pub engines: Arc<AtomicBool>,
}

pub fn read_dma(dma: &RwLock<DmaSpace>) -> std::sync::RwLockReadGuard<'_, DmaSpace> {
    dma.read().unwrap_or_else(|e| e.into_inner())
}

pub fn write_dma(dma: &RwLock<DmaSpace>) -> std::sync::RwLockWriteGuard<'_, DmaSpace> {
    dma.write().unwrap_or_else(|e| e.into_inner())
}

pub fn region_size(region: u32) -> u64 {
    match region {
        pci::BAR0_REGION => lanai::BAR0_SIZE,
        pci::BAR2_REGION => cm5::BAR2_SIZE,
        pci::BAR3_REGION => pci::BAR3_SIZE,
        pci::BAR4_REGION => pci::BAR4_SIZE,
        pci::CONFIG_REGION => pci::CONFIG_SIZE,
        _ => 0,
    }
}

impl Ni {
    pub fn new(index: u32, doorbell: Arc<Doorbell>) -> Result<Ni, SramError> {
        Ok(Ni {
            index,
            config: ConfigSpace::new(),
            msix: MsixTable::new(),
            msix_table_used: false,
            irqs: Irqs::new(Arc::new(
                crate::irq::Outbox::new().map_err(crate::sram::SharedMemError::Outbox)?,
            )),
            sram: Arc::new(Sram::new()?),
            spare_sram: None,
            lanai: Lanai::new(),
            cm5: Cm5::new(),
            t3e: Default::default(),
            mlink: Default::default(),
            dma: Arc::new(RwLock::new(DmaSpace::new())),
            counters: Counters::default(),
            lines: 0,
            ir_status: 0,
            msg_addr: 0,
            rank: 0,
            size: 0,
            doorbell,
            generation: Arc::new(AtomicU64::new(0)),
            window: None,
            engines: Arc::new(AtomicBool::new(false)),
        })
    }

    /// A client attached: the fabric sets up its fast path.
    pub fn attached(&self) {
        self.bump_generation();
    }

    /// Tell the fabric this NI's fast-path state is void, and wake its poller.
    fn bump_generation(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.doorbell.ring();
    }

    /// Function-level reset (FLR, vfio-user DEVICE_RESET): config space, registers, MSI-X
    /// table and interrupt state back to power-on. The client's DMA mappings and eventfds
    /// belong to the client and stay.
    pub fn function_reset(&mut self) {
        self.counters.resets += 1;
        self.config.reset();
        self.msix = MsixTable::new();
        self.msix_table_used = false;
        self.lanai.reset();
        self.cm5.reset();
        self.t3e.reset();
        self.mlink.reset();
        self.lines = 0;
        self.ir_status = 0;
        self.msg_addr = 0;
        self.engines.store(false, Ordering::Release);
        self.bump_generation();
    }

    /// Make the SRAM the next client will get, so that this client's detach cannot fail.
    /// A session starts only once this succeeded.
    pub fn reserve_next_sram(&mut self) -> Result<(), SramError> {
        if self.spare_sram.is_none() {
            self.spare_sram = Some(Arc::new(Sram::new()?));
        }
        Ok(())
    }

    /// The client went away: reset everything and give the next client fresh SRAM. Every
    /// step runs, whatever the others do: the reserved SRAM makes it infallible.
    pub fn detach(&mut self) {
        write_dma(&self.dma).clear();
        self.irqs.clear();
        match self.spare_sram.take() {
            Some(s) => self.sram = s,
            None => {
                // Not reached: sessions start with a spare. Wipe what the old client left
                // so the next one at least starts from zeros.
                tracing::error!(ni = self.index, "no SRAM reserved for the next client");
                self.sram.zero();
            }
        }
        self.function_reset();
    }

    /// A configuration read (§11.1): the hardware bits OR-ed with the Read Mask the Lanai
    /// keeps in SRAM at `DMA_CONFIG.PCI_OFFSET` (256 bytes, laid out as config space), unless
    /// `PCI_MASK_DISABLE` is ON. The daemon points it at the top of SRAM at reset
    /// (`lanai::READ_MASK_DEFAULT`), which starts zeroed.
    fn config_read(&self, offset: usize, data: &mut [u8]) {
        self.config.read(offset, data);
        if self.config.lanai_signals() & config40::PCI_MASK_DISABLE_ON != 0 || offset >= 256 {
            return;
        }
        let base =
            self.lanai.regs.get(lanai::DMA_CONFIG) & lanai::dma_config::PCI_OFFSET_MASK as u64;
        let n = data.len().min(256 - offset);
        let mut mask = [0u8; 256];
        if self.sram.read(base + offset as u64, &mut mask[..n]).is_ok() {
            for (d, m) in data.iter_mut().zip(&mask[..n]) {
                *d |= m;
            }
        }
    }

    /// Run `f` with the Lanai and the bus it reaches (SRAM, client memory, bus mastering).
    fn with_bus<R>(&mut self, f: impl FnOnce(&mut Lanai, &mut Bus) -> R) -> R {
        let dma = read_dma(&self.dma);
        let mut bus = Bus {
            sram: &self.sram,
            dma: &dma,
            bus_master: self.config.bus_master(),
            counters: &mut self.counters,
        };
        f(&mut self.lanai, &mut bus)
    }

    /// Run one bounded step of the engines now (short work is done before the register
    /// write returns, as a driver polling right after would expect) and leave the rest to
    /// the poller.
    fn kick_engines(&mut self) {
        let more = self.with_bus(|lanai, bus| lanai.run_dma(bus, crate::lanai::dma::INLINE_BYTES));
        if more {
            self.engines.store(true, Ordering::Release);
            self.doorbell.ring();
        }
    }

    /// One bounded step of background engine work (called by the fabric's poller while
    /// `engines` is set). Returns whether work is left.
    pub fn step_engines(&mut self) -> bool {
        let more = self.with_bus(|lanai, bus| lanai.run_dma(bus, crate::lanai::dma::STEP_BYTES));
        self.engines.store(more, Ordering::Release);
        self.update_interrupts();
        more
    }

    fn check(&mut self, region: u32, offset: u64, len: usize) -> Result<(), AccessError> {
        let size = region_size(region);
        if size == 0 {
            self.counters.bad_accesses += 1;
            return Err(AccessError::NoRegion(region));
        }
        if len == 0 || offset.checked_add(len as u64).is_none_or(|e| e > size) {
            self.counters.bad_accesses += 1;
            return Err(AccessError::OutOfRange {
                region,
                offset,
                len,
                size,
            });
        }
        Ok(())
    }

    fn width(
        &mut self,
        region: u32,
        offset: u64,
        len: usize,
        ok: &[usize],
    ) -> Result<(), AccessError> {
        if ok.contains(&len) {
            Ok(())
        } else {
            self.counters.bad_accesses += 1;
            Err(AccessError::Width {
                region,
                offset,
                len,
            })
        }
    }

    /// Where an access to one of an isolated window's regions (`ni_abi::window::
    /// DEVICE_REGION`, `zone_region`) lands in the window: regions this session offers only.
    fn window_region(&mut self, region: u32, offset: u64, len: usize) -> Result<u64, AccessError> {
        let Some((at, size)) = self.window.as_ref().and_then(|w| w.region_span(region)) else {
            self.counters.bad_accesses += 1;
            return Err(AccessError::NoRegion(region));
        };
        match offset.checked_add(len as u64) {
            Some(end) if end <= size => Ok(at + offset),
            _ => {
                self.counters.bad_accesses += 1;
                Err(AccessError::OutOfRange {
                    region,
                    offset,
                    len,
                    size,
                })
            }
        }
    }

    /// Where an access at `offset` of BAR3 lands in the window: in this client's own zone,
    /// or nowhere (no window, not a member, or past the zone: the BAR's hole).
    fn own_zone(&self, offset: u64, len: usize) -> Option<u64> {
        let w = self.window.as_ref()?;
        let rank = w.rank_of(self.index)?;
        let end = offset.checked_add(len as u64)?;
        (end <= ni_abi::window::ZONE_SIZE).then(|| ni_abi::window::zone(rank) + offset)
    }

    fn window_region_read_at(&self, at: u64, data: &mut [u8]) {
        if let Some(w) = &self.window {
            w.read(at, data);
        }
    }

    fn window_region_read(
        &mut self,
        region: u32,
        offset: u64,
        data: &mut [u8],
    ) -> Result<(), AccessError> {
        let at = self.window_region(region, offset, data.len())?;
        self.window_region_read_at(at, data);
        Ok(())
    }

    /// A trapped write at window offset `at`: this client's own zone only.
    fn window_write(
        &mut self,
        region: u32,
        offset: u64,
        at: u64,
        data: &[u8],
    ) -> Result<(), AccessError> {
        let Some(w) = &self.window else {
            self.counters.bad_accesses += 1;
            return Ok(());
        };
        if w.write(w.rank_of(self.index), at, data) {
            return Ok(());
        }
        self.counters.window_write_refused += 1;
        Err(AccessError::NotOwner { region, offset })
    }

    pub fn region_read(
        &mut self,
        region: u32,
        offset: u64,
        data: &mut [u8],
    ) -> Result<(), AccessError> {
        if region >= pci::NUM_REGIONS {
            return self.window_region_read(region, offset, data);
        }
        self.check(region, offset, data.len())?;
        let len = data.len();
        if region == pci::CONFIG_REGION {
            // Any length: QEMU reads the whole 4 KiB at start-up.
            self.config_read(offset as usize, data);
            return Ok(());
        }
        if !self.config.memory_enabled() {
            self.counters.decode_disabled += 1;
            data.fill(0xFF);
            return Ok(());
        }
        match region {
            pci::BAR0_REGION => self.bar0_read(offset, data),
            pci::BAR2_REGION => {
                self.width(region, offset, len, &[4, 8])?;
                let counters = &mut self.counters;
                if self.cm5.read(offset, data, counters) {
                    self.update_interrupts();
                }
                self.kick_cm5();
                Ok(())
            }
            pci::BAR3_REGION => {
                match self.own_zone(offset, len) {
                    Some(at) => self.window_region_read_at(at, data),
                    None => data.fill(0),
                }
                Ok(())
            }
            pci::BAR4_REGION if offset >= ni_abi::window::WINDOW_OFFSET => {
                // A client that reads the window through the socket instead of mapping it.
                let ok = match &self.window {
                    Some(w) => w.read(offset - ni_abi::window::WINDOW_OFFSET, data),
                    None => {
                        data.fill(0);
                        true
                    }
                };
                if !ok {
                    self.counters.bad_accesses += 1;
                }
                Ok(())
            }
            pci::BAR4_REGION => {
                if self.msix.read(offset, data).is_none() {
                    self.counters.bad_accesses += 1;
                    return Err(AccessError::Width {
                        region,
                        offset,
                        len,
                    });
                }
                Ok(())
            }
            _ => Err(AccessError::NoRegion(region)),
        }
    }

    pub fn region_write(
        &mut self,
        region: u32,
        offset: u64,
        data: &[u8],
    ) -> Result<(), AccessError> {
        if region >= pci::NUM_REGIONS {
            let at = self.window_region(region, offset, data.len())?;
            return self.window_write(region, offset, at, data);
        }
        self.check(region, offset, data.len())?;
        let len = data.len();
        if region == pci::CONFIG_REGION {
            let ev = self.config.write(offset as usize, data);
            if ev.flr {
                tracing::info!(ni = self.index, "function-level reset");
                self.function_reset();
                return Ok(());
            }
            if ev.lanai_changed && self.config.lanai_signals() & config40::PCI_IO_RESET_ON != 0 {
                // IO_RESET holds the non-PCI logic in reset.
                self.lanai.reset();
                self.cm5.reset();
            }
            if ev.command_changed && self.config.bus_master() {
                self.kick_engines();
            }
            if ev.command_changed || ev.msix_changed || ev.lanai_changed {
                self.update_interrupts();
                self.replay_pending();
            }
            return Ok(());
        }
        if !self.config.memory_enabled() {
            self.counters.decode_disabled += 1;
            return Ok(());
        }
        match region {
            pci::BAR0_REGION => self.bar0_write(offset, data),
            pci::BAR2_REGION => {
                self.width(region, offset, len, &[4, 8])?;
                let counters = &mut self.counters;
                if self.cm5.write(offset, data, counters) {
                    self.update_interrupts();
                }
                self.kick_cm5();
                Ok(())
            }
            pci::BAR3_REGION => match self.own_zone(offset, len) {
                Some(at) => self.window_write(region, offset, at, data),
                None => {
                    self.counters.bad_accesses += 1;
                    Ok(())
                }
            },
            pci::BAR4_REGION if offset >= ni_abi::window::WINDOW_OFFSET => {
                let at = offset - ni_abi::window::WINDOW_OFFSET;
                self.window_write(region, offset, at, data)
            }
            pci::BAR4_REGION => match self.msix.write(offset, data) {
                Some(unmasked) => {
                    self.msix_table_used = true;
                    for v in unmasked {
                        self.replay(v);
                    }
                    Ok(())
                }
                None => {
                    self.counters.bad_accesses += 1;
                    Err(AccessError::Width {
                        region,
                        offset,
                        len,
                    })
                }
            },
            _ => Err(AccessError::NoRegion(region)),
        }
    }

    fn bar0_read(&mut self, offset: u64, data: &mut [u8]) -> Result<(), AccessError> {
        let len = data.len();
        if offset + len as u64 <= lanai::SRAM_SIZE {
            // Trapped SRAM access (the client normally mmaps it).
            self.sram
                .read(offset, data)
                .map_err(|_| AccessError::OutOfRange {
                    region: 0,
                    offset,
                    len,
                    size: lanai::SRAM_SIZE,
                })?;
        } else if offset >= lanai::CONFIG_WINDOW
            && offset + len as u64 <= lanai::CONFIG_WINDOW + lanai::CONFIG_WINDOW_SIZE
        {
            self.width(0, offset, len, &[1, 2, 4])?;
            self.config_read((offset - lanai::CONFIG_WINDOW) as usize, data);
        } else if offset >= lanai::SPECIALS {
            self.width(0, offset, len, &[1, 2, 4, 8])?;
            self.with_bus(|lanai, bus| lanai.read((offset - lanai::SPECIALS) as u32, data, bus));
            if offset - lanai::SPECIALS <= ni_abi::lanai::ISR as u64 + 4 {
                self.update_interrupts();
            }
        } else if (fp::PAGE..fp::PAGE + fp::PAGE_SIZE).contains(&offset) {
            self.width(0, offset, len, &[4, 8])?;
            let v = match offset - fp::PAGE {
                fp::IR_STATUS => self.ir_status,
                fp::MSG_ADDR => self.msg_addr,
                fp::RANK => self.rank as u64 | (self.size as u64) << 32,
                fp::SIZE => self.size as u64,
                _ => 0,
            };
            data.copy_from_slice(&v.to_le_bytes()[..len]);
        } else if (t3e::PAGE..t3e::PAGE + t3e::PAGE_SIZE).contains(&offset) {
            self.width(0, offset, len, &[4, 8])?;
            if !offset.is_multiple_of(len as u64) {
                return Err(self.misaligned(offset, len));
            }
            let v = self.t3e.read(offset - t3e::PAGE, &mut self.counters);
            if v.is_none() {
                self.counters.unmapped_register += 1;
            }
            data.copy_from_slice(&v.unwrap_or(0).to_le_bytes()[..len]);
        } else if (ml::PAGE..ml::PAGE + ml::PAGE_SIZE).contains(&offset) {
            self.width(0, offset, len, &[4])?;
            if !offset.is_multiple_of(4) {
                return Err(self.misaligned(offset, len));
            }
            let v = self.mlink.read(offset - ml::PAGE);
            if v.is_none() {
                self.counters.unmapped_register += 1;
            }
            data.copy_from_slice(&v.unwrap_or(0).to_le_bytes());
        } else {
            // Unused BAR0 space reads as zero.
            self.counters.unmapped_register += 1;
            data.fill(0);
        }
        Ok(())
    }

    fn bar0_write(&mut self, offset: u64, data: &[u8]) -> Result<(), AccessError> {
        let len = data.len();
        if offset + len as u64 <= lanai::SRAM_SIZE {
            self.sram
                .write(offset, data)
                .map_err(|_| AccessError::OutOfRange {
                    region: 0,
                    offset,
                    len,
                    size: lanai::SRAM_SIZE,
                })?;
        } else if offset >= lanai::CONFIG_WINDOW
            && offset + len as u64 <= lanai::CONFIG_WINDOW + lanai::CONFIG_WINDOW_SIZE
        {
            self.width(0, offset, len, &[1, 2, 4])?;
            return self.region_write(pci::CONFIG_REGION, offset - lanai::CONFIG_WINDOW, data);
        } else if offset >= lanai::SPECIALS {
            self.width(0, offset, len, &[1, 2, 4, 8])?;
            let fx = self
                .with_bus(|lanai, bus| lanai.write((offset - lanai::SPECIALS) as u32, data, bus));
            if fx.engines_started {
                self.kick_engines();
            }
            if fx.packets {
                self.doorbell.ring();
            }
            if fx.interrupt_changed {
                self.update_interrupts();
            }
        } else if (fp::PAGE..fp::PAGE + fp::PAGE_SIZE).contains(&offset) {
            self.width(0, offset, len, &[4, 8])?;
            let mut b = [0u8; 8];
            b[..len].copy_from_slice(data);
            let v = u64::from_le_bytes(b);
            match offset - fp::PAGE {
                fp::DOORBELL => {
                    self.counters.doorbells += 1;
                    self.doorbell.ring();
                }
                // IR_STATUS: the enable is a plain bit in the low word; VALID and MULTIPLE
                // (the high word) clear on a written 1.
                fp::IR_STATUS => {
                    self.ir_status = (self.ir_status & !fp::IR_ENABLE) | (v & fp::IR_ENABLE);
                    if len == 8 {
                        self.ir_status &= !(v & (fp::MSG_ADDR_VALID | fp::MSG_MULTIPLE));
                    }
                }
                fp::IR_STATUS_HI => {
                    self.ir_status &= !((v << 32) & (fp::MSG_ADDR_VALID | fp::MSG_MULTIPLE));
                }
                _ => self.counters.unmapped_register += 1,
            }
        } else if (t3e::PAGE..t3e::PAGE + t3e::PAGE_SIZE).contains(&offset) {
            self.width(0, offset, len, &[8])?;
            if !offset.is_multiple_of(8) {
                return Err(self.misaligned(offset, len));
            }
            let v = u64::from_le_bytes(data.try_into().expect("8 bytes"));
            match self.t3e.write(offset - t3e::PAGE, v, &mut self.counters) {
                Some(true) => self.doorbell.ring(),
                Some(false) => {}
                None => self.counters.unmapped_register += 1,
            }
        } else if (ml::PAGE..ml::PAGE + ml::PAGE_SIZE).contains(&offset) {
            self.width(0, offset, len, &[4])?;
            if !offset.is_multiple_of(4) {
                return Err(self.misaligned(offset, len));
            }
            let v = u32::from_le_bytes(data.try_into().expect("4 bytes"));
            match self
                .mlink
                .write(offset - ml::PAGE, v, &self.sram, &mut self.counters)
            {
                Some(true) => self.doorbell.ring(),
                Some(false) => {}
                None => self.counters.unmapped_register += 1,
            }
            if self.mlink.take_interrupt() {
                self.deliver(vector::MLINK);
            }
        } else {
            self.counters.unmapped_register += 1;
        }
        Ok(())
    }

    /// An access that straddles two registers of a register page.
    fn misaligned(&mut self, offset: u64, len: usize) -> AccessError {
        self.counters.bad_accesses += 1;
        AccessError::Width {
            region: 0,
            offset,
            len,
        }
    }

    /// Recompute every interrupt source; fire MSI-X on rising edges, drive INTx by level.
    pub fn update_interrupts(&mut self) {
        let mut lines = 0u32;
        for (i, p) in self.cm5.pending().iter().enumerate() {
            if *p {
                lines |= 1 << i;
            }
        }
        let int_enable = self.config.lanai_signals() & config40::PCI_INT_ENABLE_ON != 0;
        if self.lanai.req_ack0() && int_enable {
            lines |= 1 << vector::LANAI;
        }
        let rising = lines & !self.lines;
        self.lines = lines;
        let level = lines != 0;
        let was = self.config.interrupt_status();
        self.config.set_interrupt_status(level);
        if self.config.msix_enabled() {
            for v in 0..=vector::LANAI {
                if rising & (1 << v) != 0 {
                    self.deliver(v);
                }
            }
        } else if level
            && (!was || rising != 0)
            && !self.config.intx_disabled()
            && self.irqs.fire_intx()
        {
            self.counters.intx_sent += 1;
        }
    }

    fn deliverable(&self, v: u16) -> bool {
        self.config.bus_master()
            && self.config.msix_enabled()
            && !self.config.msix_function_masked()
            && !(self.msix_table_used && self.msix.masked(v))
            && self.irqs.msix_registered(v)
    }

    /// The CM-5 Data Network queued a message or freed receive room: only the fabric's
    /// poller moves messages between NIs, so wake it.
    fn kick_cm5(&mut self) {
        if std::mem::take(&mut self.cm5.kick) {
            self.doorbell.ring();
        }
    }

    /// Send MSI-X vector `v`, or hold it pending until it can be.
    pub fn deliver(&mut self, v: u16) {
        if self.deliverable(v) && self.irqs.fire_msix(v) {
            self.counters.msix_sent += 1;
        } else {
            self.counters.msix_held += 1;
            self.msix.set_pending(v);
        }
    }

    fn replay(&mut self, v: u16) {
        if self.msix.pending() & (1 << v) != 0 && self.deliverable(v) {
            self.msix.take_pending(v);
            self.deliver(v);
        }
    }

    /// Deliver what was held back once it can go.
    pub fn replay_pending(&mut self) {
        for v in 0..vector::COUNT {
            self.replay(v);
        }
    }

    pub fn set_irqs(
        &mut self,
        index: u32,
        flags: u32,
        start: u32,
        count: u32,
        fds: Vec<File>,
    ) -> io::Result<()> {
        let out = self
            .irqs
            .set_irqs(index, flags, start, count, fds)
            .inspect_err(|_| self.counters.irq_errors += 1)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
        for v in out.msix_triggered {
            self.deliver(v);
        }
        for v in out.msix_assigned {
            self.replay(v);
        }
        if out.intx_reevaluate
            && self.lines != 0
            && !self.config.msix_enabled()
            && !self.config.intx_disabled()
            && self.irqs.fire_intx()
        {
            self.counters.intx_sent += 1;
        }
        Ok(())
    }
}

/// One NI as a daemon handover carries it (`crate::handover`): its models' state by value,
/// its client's memory and eventfds by descriptor.
#[derive(serde::Serialize, serde::Deserialize)]
pub struct NiImage {
    pub index: u32,
    pub config: ConfigSpace,
    pub msix: MsixTable,
    pub msix_table_used: bool,
    pub irqs: crate::irq::IrqsImage,
    /// Interrupts fired and not yet signalled to the client's eventfds.
    pub irqs_pending: u32,
    pub sram: std::os::fd::RawFd,
    pub spare_sram: Option<std::os::fd::RawFd>,
    pub lanai: serde_json::Value,
    pub cm5: serde_json::Value,
    pub t3e: serde_json::Value,
    pub mlink: serde_json::Value,
    /// Port 0's link, which the Lanai registers and the fabric share.
    pub port: crate::fabric::port::PortImage,
    /// The CM-5 timer's deadline on the system's `CLOCK_MONOTONIC` (the process-relative
    /// clock it is kept in starts again with the new process).
    pub cm5_timer_at: Option<u64>,
    pub dma: Vec<crate::dma::MapImage>,
    pub counters: Counters,
    pub lines: u32,
    pub ir_status: u64,
    pub msg_addr: u64,
    pub rank: u32,
    pub size: u32,
    pub generation: u64,
    pub engines: bool,
    /// The window this NI's session was handed: its partition's, or one its partition no
    /// longer has (deleted and made again while the client stayed attached).
    #[serde(default)]
    pub window: Option<crate::fabric::window::WindowImage>,
}

/// A handed-over NI that cannot be taken back.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    #[error("NI {0}: {1}")]
    State(u32, serde_json::Error),
    #[error("NI {0}: {1}")]
    Memory(u32, SramError),
    #[error("NI {0}: DMA mapping at {1:#x}: {2}")]
    Dma(u32, u64, String),
    #[error("NI {0}: a handed-over descriptor: {1}")]
    Fd(u32, io::Error),
}

impl Ni {
    /// Whether `img`'s models parse for this build (`crate::handover::validate`).
    pub fn check_image(img: &NiImage) -> Result<(), serde_json::Error> {
        serde_json::from_value::<Lanai>(img.lanai.clone())?;
        serde_json::from_value::<Cm5>(img.cm5.clone())?;
        serde_json::from_value::<crate::t3e::ereg::Ereg>(img.t3e.clone())?;
        serde_json::from_value::<crate::mlink::Mlink>(img.mlink.clone())?;
        Ok(())
    }

    /// What a handover carries of this NI (descriptors stay open in this process until the
    /// exec; `crate::handover` clears their close-on-exec flag).
    pub fn image(&self) -> Result<NiImage, serde_json::Error> {
        let timer = self.cm5.timer.load(Ordering::Acquire);
        Ok(NiImage {
            index: self.index,
            config: self.config.clone(),
            msix: self.msix.clone(),
            msix_table_used: self.msix_table_used,
            irqs: self.irqs.image(),
            irqs_pending: self.irqs.outbox().pending(),
            sram: self.sram.fd(),
            spare_sram: self.spare_sram.as_ref().map(|s| s.fd()),
            lanai: serde_json::to_value(&self.lanai)?,
            cm5: serde_json::to_value(&self.cm5)?,
            t3e: serde_json::to_value(&self.t3e)?,
            mlink: serde_json::to_value(&self.mlink)?,
            port: self.lanai.link.image(),
            cm5_timer_at: (timer != 0).then(|| {
                let left = timer as i64 - crate::cm5::monotonic_ns() as i64;
                (crate::handover::monotonic_ns() as i64 + left).max(0) as u64
            }),
            dma: read_dma(&self.dma).image(),
            counters: self.counters.clone(),
            lines: self.lines,
            ir_status: self.ir_status,
            msg_addr: self.msg_addr,
            rank: self.rank,
            size: self.size,
            generation: self.generation.load(Ordering::SeqCst),
            engines: self.engines.load(Ordering::Acquire),
            window: self.window.as_ref().map(|w| w.image()),
        })
    }

    /// Become the NI `img` describes. `file` opens a handed-over descriptor (a duplicate:
    /// the caller closes the originals). The flags this NI shares with the fabric are kept
    /// and set, so the poller looks at everything once.
    pub fn restore(
        &mut self,
        img: NiImage,
        mut file: impl FnMut(std::os::fd::RawFd) -> io::Result<File>,
    ) -> Result<(), RestoreError> {
        let i = self.index;
        let state = |e| RestoreError::State(i, e);
        let fd = |e| RestoreError::Fd(i, e);
        let mut lanai: Lanai = serde_json::from_value(img.lanai).map_err(state)?;
        lanai.link = self.lanai.link.clone();
        lanai.link.restore(&img.port);
        lanai.packets = self.lanai.packets.clone();
        let mut cm5: Cm5 = serde_json::from_value(img.cm5).map_err(state)?;
        cm5.timer = self.cm5.timer.clone();
        cm5.data.pending = self.cm5.data.pending.clone();
        let mut t3e: crate::t3e::ereg::Ereg = serde_json::from_value(img.t3e).map_err(state)?;
        t3e.pending = self.t3e.pending.clone();
        let mut mlink: crate::mlink::Mlink = serde_json::from_value(img.mlink).map_err(state)?;
        mlink.pending = self.mlink.pending.clone();
        self.sram = Arc::new(
            Sram::adopt(file(img.sram).map_err(fd)?).map_err(|e| RestoreError::Memory(i, e))?,
        );
        self.spare_sram = match img.spare_sram {
            Some(s) => Some(Arc::new(
                Sram::adopt(file(s).map_err(fd)?).map_err(|e| RestoreError::Memory(i, e))?,
            )),
            None => None,
        };
        {
            let mut dma = write_dma(&self.dma);
            dma.clear();
            for m in &img.dma {
                let f = file(m.fd).map_err(fd)?;
                dma.map(m.read, m.write, m.offset, m.iova, m.size, Some(f))
                    .map_err(|e| RestoreError::Dma(i, m.iova, e.to_string()))?;
            }
        }
        self.irqs.restore(&img.irqs, &mut file).map_err(fd)?;
        self.irqs.outbox().post_bits(img.irqs_pending);
        self.config = img.config;
        self.msix = img.msix;
        self.msix_table_used = img.msix_table_used;
        self.lanai = lanai;
        self.cm5 = cm5;
        self.t3e = t3e;
        self.mlink = mlink;
        if let Some(at) = img.cm5_timer_at {
            let left = at as i64 - crate::handover::monotonic_ns() as i64;
            let at = (crate::cm5::monotonic_ns() as i64)
                .saturating_add(left)
                .max(1);
            self.cm5.timer.store(at as u64, Ordering::Release);
        }
        for flag in [
            &self.lanai.packets,
            &self.cm5.data.pending,
            &self.t3e.pending,
            &self.mlink.pending,
        ] {
            flag.store(true, Ordering::Release);
        }
        self.counters = img.counters;
        self.lines = img.lines;
        self.ir_status = img.ir_status;
        self.msg_addr = img.msg_addr;
        self.rank = img.rank;
        self.size = img.size;
        self.generation.store(img.generation, Ordering::SeqCst);
        self.engines.store(img.engines, Ordering::Release);
        Ok(())
    }
}
