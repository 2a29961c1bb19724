//! The real daemon, attached with real vfio-user clients (issue 2's checks).

mod common;

use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::time::Duration;

use common::*;
use ni_abi::lanai::{self, drd, isr};
use ni_abi::{cm5, pci};
use vfio_bindings::bindings::vfio::*;

#[test]
fn enumerates_regions_and_irqs() {
    let d = Daemon::start(1);
    let mut c = d.client(0);
    let sizes: Vec<u64> = (0..pci::NUM_REGIONS)
        .map(|i| c.region(i).unwrap().size)
        .collect();
    assert_eq!(
        sizes,
        vec![16 << 20, 0, 1 << 20, 2 << 20, 128 << 20, 0, 0, 0x1000, 0]
    );
    // The daemon's one NI forms a partition of one, created before anyone attached, so it has
    // a window: isolated by default (fastpath.md, "One writer per page") — not in BAR4, but in
    // regions of its own after the PCI ones: the device page read-only, this rank's zone
    // read-write, the zones of ranks the partition does not have empty.
    use ni_abi::window as w;
    let bar4 = c.region(4).unwrap();
    assert_eq!(bar4.flags & VFIO_REGION_INFO_FLAG_MMAP, 0);
    let dev = c.region(w::DEVICE_REGION).unwrap();
    assert_eq!(dev.size, w::DEVICE_PAGE_SIZE);
    assert_ne!(dev.flags & VFIO_REGION_INFO_FLAG_MMAP, 0);
    assert_eq!(dev.flags & VFIO_REGION_INFO_FLAG_WRITE, 0);
    assert!(
        dev.file_offset.is_some(),
        "the device page is offered as an fd"
    );
    let own = c.region(w::zone_region(0)).unwrap();
    assert_eq!(own.size, w::ZONE_SIZE);
    assert_ne!(own.flags & VFIO_REGION_INFO_FLAG_WRITE, 0);
    assert!(
        own.file_offset.is_some(),
        "the own zone is offered as an fd"
    );
    assert_eq!(c.region(w::zone_region(1)).unwrap().size, 0);
    assert!(c.region(w::ISOLATED_REGIONS).is_none());
    // Read through the socket (memory decode on), its header says what it is.
    cfg_write16(&mut c, 4, 0x2);
    let mut magic = [0u8; 4];
    c.region_read(4, 16 << 20, &mut magic).unwrap();
    assert_eq!(u32::from_le_bytes(magic), ni_abi::window::hdr::MAGIC_VALUE);
    let bar0 = c.region(0).unwrap();
    assert_ne!(bar0.flags & VFIO_REGION_INFO_FLAG_MMAP, 0);
    assert_eq!(bar0.sparse_areas.len(), 1);
    assert_eq!(bar0.sparse_areas[0].offset, 0);
    assert_eq!(bar0.sparse_areas[0].size, 8 << 20);
    assert!(bar0.file_offset.is_some(), "SRAM is offered as an fd");
    let msix = c.get_irq_info(pci::MSIX_IRQ_INDEX).unwrap();
    assert_eq!(msix.count, 16);
    assert_ne!(msix.flags & VFIO_IRQ_INFO_EVENTFD, 0);
    let intx = c.get_irq_info(pci::INTX_IRQ_INDEX).unwrap();
    assert_eq!(intx.count, 1);
    assert_ne!(intx.flags & VFIO_IRQ_INFO_AUTOMASKED, 0);
    assert_eq!(c.get_irq_info(pci::MSI_IRQ_INDEX).unwrap().count, 0);
    assert_eq!(c.get_irq_info(pci::ERR_IRQ_INDEX).unwrap().count, 1);
}

#[test]
fn config_space_identity_and_capability_chain() {
    let d = Daemon::start(1);
    let mut c = d.client(0);
    assert_eq!(
        cfg_read32(&mut c, 0),
        (pci::DEVICE_ID as u32) << 16 | pci::VENDOR_ID as u32
    );
    assert_eq!(cfg_read32(&mut c, 8) >> 8, 0x028000);
    let status = cfg_read16(&mut c, 6);
    assert_ne!(status & 0x10, 0, "capability list bit");
    let mut caps = vec![];
    let mut p = cfg_read32(&mut c, 0x34) & 0xFF;
    while p != 0 {
        let h = cfg_read16(&mut c, p as u64);
        caps.push((p, h & 0xFF));
        p = (h >> 8) as u32;
        assert!(caps.len() < 16, "capability chain loops");
    }
    assert_eq!(caps, vec![(0x48, 0x01), (0x50, 0x11), (0x60, 0x10)]);
    // MSI-X: 16 entries, table in BAR4 at 0, PBA in BAR4 at 0x800.
    assert_eq!(cfg_read16(&mut c, 0x52) & 0x7FF, 15);
    assert_eq!(cfg_read32(&mut c, 0x54), 4);
    assert_eq!(cfg_read32(&mut c, 0x58), 0x804);
    // PCIe: version 2 endpoint, FLR capable.
    assert_eq!(cfg_read16(&mut c, 0x62), 0x0002);
    assert_ne!(cfg_read32(&mut c, 0x64) & (1 << 28), 0);
    // Nothing in extended config space.
    assert_eq!(cfg_read32(&mut c, 0x100), 0);
    // Writes to read-only header fields are ignored; BAR sizing works.
    cfg_write32(&mut c, 0, 0xFFFF_FFFF);
    assert_eq!(cfg_read16(&mut c, 0), pci::VENDOR_ID);
    // BAR2 and BAR3 are 32-bit (type 0), so BAR3 is a BAR of its own.
    cfg_write32(&mut c, 0x18, 0xFFFF_FFFF);
    assert_eq!(cfg_read32(&mut c, 0x18), !(cm5::BAR2_SIZE as u32 - 1));
    cfg_write32(&mut c, 0x1C, 0xFFFF_FFFF);
    assert_eq!(cfg_read32(&mut c, 0x1C), !(pci::BAR3_SIZE as u32 - 1));
    cfg_write32(&mut c, 0x20, 0xFFFF_FFFF);
    assert_eq!(cfg_read32(&mut c, 0x20), !(pci::BAR4_SIZE as u32 - 1) | 0x4);
}

/// `--direct shared` (fastpath.md, "One writer per page"): BAR4 shows the whole window
/// through a read-only descriptor and without FLAG_WRITE, BAR3 the member's own zone
/// read-write; the kernel refuses a writable mapping of BAR4, and trapped writes follow the
/// same rule.
#[test]
fn a_shared_window_is_read_only_in_bar4_and_writable_only_in_the_own_zone_of_bar3() {
    use ni_abi::window as w;
    use std::os::unix::fs::FileExt;
    let d = Daemon::start_with(2, &["--direct", "shared"]);
    let mut c0 = d.client(0);
    let mut c1 = d.client(1);
    for (rank, c) in [(0u32, &mut c0), (1, &mut c1)] {
        let bar4 = c.region(pci::BAR4_REGION).unwrap();
        assert_ne!(bar4.flags & VFIO_REGION_INFO_FLAG_MMAP, 0);
        assert_eq!(bar4.sparse_areas.len(), 1);
        assert_eq!(bar4.sparse_areas[0].offset, w::WINDOW_OFFSET);
        let f4 = bar4.file_offset.as_ref().expect("BAR4 offers an fd");
        let (f4, s4) = (f4.file().try_clone().unwrap(), f4.start());
        let bar4_flags = bar4.flags;
        let map = |f: &std::fs::File, off: u64, len: u64, prot: i32| {
            // SAFETY: a fresh shared mapping, checked below and unmapped by the caller.
            unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len as usize,
                    prot,
                    libc::MAP_SHARED,
                    f.as_raw_fd(),
                    off as libc::off_t,
                )
            }
        };
        assert_eq!(
            bar4_flags & VFIO_REGION_INFO_FLAG_WRITE,
            0,
            "BAR4 is read-only"
        );
        let rw = libc::PROT_READ | libc::PROT_WRITE;
        let p = map(&f4, s4 + w::WINDOW_OFFSET, w::WINDOW_SIZE, rw);
        assert_eq!(p, libc::MAP_FAILED, "BAR4's descriptor maps writable");
        let p = map(&f4, s4 + w::WINDOW_OFFSET, w::WINDOW_SIZE, libc::PROT_READ);
        assert_ne!(p, libc::MAP_FAILED);
        // SAFETY: p maps WINDOW_SIZE bytes; mprotect of our own mapping.
        let r = unsafe { libc::mprotect(p, w::WINDOW_SIZE as usize, rw) };
        assert_ne!(
            r, 0,
            "a read-only descriptor's mapping cannot become writable"
        );

        let bar3 = c.region(pci::BAR3_REGION).unwrap();
        assert_eq!(bar3.size, pci::BAR3_SIZE);
        assert_ne!(bar3.flags & VFIO_REGION_INFO_FLAG_WRITE, 0);
        assert_eq!(bar3.sparse_areas.len(), 1);
        assert_eq!(
            (bar3.sparse_areas[0].offset, bar3.sparse_areas[0].size),
            (0, w::ZONE_SIZE)
        );
        let f3 = bar3.file_offset.as_ref().expect("BAR3 offers an fd");
        assert_eq!(f3.start(), w::WINDOW_OFFSET + w::zone(rank));
        // What the member writes in BAR3 is its zone in BAR4's view, and in the daemon's.
        let z = map(f3.file(), f3.start(), w::ZONE_SIZE, rw);
        assert_ne!(z, libc::MAP_FAILED);
        // In a ring, which attaching does not clear.
        let at = w::zone::RINGS as usize + 64;
        let word = 0x5EED_0000 + rank;
        // SAFETY: both mappings are live; `at` is inside the zone, 4-aligned.
        let seen = unsafe {
            (z as *mut u8).add(at).cast::<u32>().write_volatile(word);
            (p as *const u8)
                .add(w::zone(rank) as usize + at)
                .cast::<u32>()
                .read_volatile()
        };
        assert_eq!(seen, word);
        cfg_write16(c, 4, 0x2);
        let mut b = [0u8; 4];
        c.region_read(pci::BAR3_REGION, at as u64, &mut b).unwrap();
        assert_eq!(u32::from_le_bytes(b), word);
        // Trapped writes to its own zone, through BAR3 and through BAR4.
        c.region_write(pci::BAR3_REGION, at as u64 + 4, &7u32.to_le_bytes())
            .unwrap();
        let own = w::WINDOW_OFFSET + w::zone(rank) + at as u64 + 8;
        c.region_write(pci::BAR4_REGION, own, &9u32.to_le_bytes())
            .unwrap();
        let mut got = [0u8; 8];
        f4.read_exact_at(&mut got, s4 + own - 4).unwrap();
        assert_eq!(got, [7, 0, 0, 0, 9, 0, 0, 0]);
        // SAFETY: unmapping the two mappings made above.
        unsafe {
            libc::munmap(z, w::ZONE_SIZE as usize);
            libc::munmap(p, w::WINDOW_SIZE as usize);
        }
    }
    drop((c0, c1));
    // Nobody else's zone, and BAR3's hole is inert (a raw client: the crate's would wait
    // forever on an error reply).
    for rank in 0..2u32 {
        let mut raw = Raw::connect(&d.sock(rank));
        assert!(!raw.region_write(pci::CONFIG_REGION, 4, &[2, 0]).is_error());
        let peer = w::WINDOW_OFFSET + w::zone(1 - rank) + w::zone::RINGS;
        assert!(raw
            .region_write(pci::BAR4_REGION, peer, &1u32.to_le_bytes())
            .is_error());
        assert!(!raw
            .region_write(pci::BAR3_REGION, w::ZONE_SIZE, &1u32.to_le_bytes())
            .is_error());
        let r = raw.region_read(pci::BAR3_REGION, w::ZONE_SIZE, 4);
        assert!(!r.is_error());
        assert_eq!(
            r.body[r.body.len() - 4..],
            [0; 4],
            "BAR3 past the zone is a hole"
        );
    }
    assert_eq!(d.counter(0, "window_write_refused"), 1);
    assert_eq!(d.counter(1, "window_write_refused"), 1);
}

#[test]
fn sram_mmap_writes_are_seen_by_the_device() {
    let d = Daemon::start(1);
    let mut c = d.client(0);
    enable(&mut c);
    let fo = c.region(0).unwrap().file_offset.as_ref().unwrap();
    let mut f = fo.file().try_clone().unwrap();
    // The client's own view of SRAM: the fd it was handed (an mmap would see the same pages).
    f.seek(SeekFrom::Start(0x1234)).unwrap();
    f.write_all(b"lanai sram").unwrap();
    let mut b = [0u8; 10];
    c.region_read(pci::BAR0_REGION, 0x1234, &mut b).unwrap();
    assert_eq!(&b, b"lanai sram");
    // And the other way round: a trapped SRAM write lands in the shared pages.
    c.region_write(pci::BAR0_REGION, 0x4000, b"from trap")
        .unwrap();
    let mut back = [0u8; 9];
    f.seek(SeekFrom::Start(0x4000)).unwrap();
    f.read_exact(&mut back).unwrap();
    assert_eq!(&back, b"from trap");
    // The config-space window at BAR0 + 8 MB mirrors config space.
    let mut id = [0u8; 4];
    c.region_read(pci::BAR0_REGION, lanai::CONFIG_WINDOW, &mut id)
        .unwrap();
    assert_eq!(u32::from_le_bytes(id), cfg_read32(&mut c, 0));
}

#[test]
fn lanai_specials_follow_their_access_kinds() {
    let d = Daemon::start(1);
    let mut c = d.client(0);
    enable(&mut c);
    // Reset values: empty send FIFO has 16 free words; MP_UPPER resets to 0x80000000.
    assert_eq!(special_read(&mut c, lanai::P0_SEND_FREE_COUNT, 1), 16);
    assert_eq!(special_read(&mut c, lanai::MP_UPPER, 4), 0x8000_0000);
    // SEND_FREE_LIMIT bit 0 is wired to 0.
    special_write(&mut c, lanai::P0_SEND_FREE_LIMIT, 1, 0xFF);
    assert_eq!(special_read(&mut c, lanai::P0_SEND_FREE_LIMIT, 1), 0x0E);
    // SEND_READY = FREE_COUNT >= LIMIT + 2: 16 >= 16 holds.
    assert_ne!(
        special_read(&mut c, lanai::ISR, 4) as u32 & isr::P0_SEND_READY,
        0
    );
    // REQ_ACK toggles on each written 1.
    special_write(&mut c, lanai::ISR, 4, isr::REQ_ACK1 as u64);
    assert_ne!(
        special_read(&mut c, lanai::ISR, 4) as u32 & isr::REQ_ACK1,
        0
    );
    special_write(&mut c, lanai::ISR, 4, isr::REQ_ACK1 as u64);
    assert_eq!(
        special_read(&mut c, lanai::ISR, 4) as u32 & isr::REQ_ACK1,
        0
    );
    // Z* counters cannot be read over PCI: 0.
    assert_eq!(special_read(&mut c, lanai::P0_BUFFER_DROP, 2), 0);
    // DMA_ENABLE mirrors bus mastering.
    assert_ne!(
        special_read(&mut c, lanai::DMA_CONFIG, 4) as u32 & lanai::dma_config::DMA_ENABLE,
        0
    );
    // The RTC counts 0.5 us ticks.
    special_write(&mut c, lanai::RTC, 4, 1000);
    std::thread::sleep(Duration::from_millis(20));
    let rtc = special_read(&mut c, lanai::RTC, 4);
    assert!(
        (1000 + 30_000..1000 + 2_000_000).contains(&rtc),
        "rtc {rtc}"
    );
    // An interval timer set to 10 us underflows and latches TIME_INT0; writing IT0 clears it.
    special_write(&mut c, lanai::IT0, 4, 20);
    std::thread::sleep(Duration::from_millis(5));
    assert_ne!(
        special_read(&mut c, lanai::ISR, 4) as u32 & isr::TIME_INT0,
        0
    );
    special_write(&mut c, lanai::IT0, 4, 0x7FFF_FFFF);
    assert_eq!(
        special_read(&mut c, lanai::ISR, 4) as u32 & isr::TIME_INT0,
        0
    );
}

#[test]
fn cm5_register_file_user_and_supervisor_windows() {
    let d = Daemon::start(1);
    let mut c = d.client(0);
    enable(&mut c);
    // The daemon, as the OS, sets up the partition registers once it sees the client
    // (§6.3; device/src/fabric/cm5.rs): a partition of one, an identity chunk table.
    let t = std::time::Instant::now();
    while cm5_read(&mut c, true, cm5::NI_PARTITION_SIZE) != 1 {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "partition registers never set"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(cm5_read(&mut c, true, cm5::NI_CHUNK_SIZE), 1);
    // NI Reset values (§6.10).
    assert_eq!(cm5_read(&mut c, false, cm5::NI_LONGEST_DR_MESSAGE), 5);
    assert_eq!(cm5_read(&mut c, false, cm5::NI_SYNC_GLOBAL) & 2, 2);
    assert_eq!(
        cm5_read(&mut c, false, cm5::COM_BASE + cm5::iface::CONTROL),
        3
    );
    assert_eq!(
        cm5_read(&mut c, true, cm5::NI_HODGEPODGE) & cm5::hodgepodge::FLUSH_COMPLETE,
        cm5::hodgepodge::FLUSH_COMPLETE
    );
    assert_eq!(cm5_read(&mut c, true, cm5::NI_INTERRUPT_LEVEL), 0);
    // A supervisor-only register through the user window: Bus Error, reported as
    // bad_memory_access with the address latched.
    assert_eq!(cm5_read(&mut c, false, cm5::NI_PARTITION_SIZE), 0xFFFF_FFFF);
    let bad = cm5_read(&mut c, true, cm5::NI_BAD_ADDRESS);
    assert_eq!(bad & cm5::bad_address::LOW_MASK, cm5::NI_PARTITION_SIZE);
    assert_eq!(
        (bad >> cm5::bad_address::TYPE_SHIFT) & 0xF,
        cm5::bad_address::TYPE_READ
    );
    assert_ne!(
        cm5_read(&mut c, true, cm5::NI_INTERRUPT_CAUSE) & cm5::cause::BAD_MEMORY_ACCESS,
        0
    );
    // Through the supervisor window it is a normal register.
    cm5_write(&mut c, true, cm5::NI_PARTITION_SIZE, 0xFFF_FFFF);
    assert_eq!(
        cm5_read(&mut c, true, cm5::NI_PARTITION_SIZE),
        0xF_FFFF,
        "20 bits"
    );
    // Write-1-to-clear.
    cm5_write(
        &mut c,
        true,
        cm5::NI_INTERRUPT_CLEAR,
        cm5::cause::BAD_MEMORY_ACCESS,
    );
    assert_eq!(
        cm5_read(&mut c, true, cm5::NI_INTERRUPT_CAUSE) & cm5::cause::BAD_MEMORY_ACCESS,
        0
    );
    // Reading recv of an empty FIFO is a Bus Error.
    assert_eq!(
        cm5_read(&mut c, false, cm5::COM_BASE + cm5::iface::RECV),
        0xFFFF_FFFF
    );
    assert!(d.counter(0, "bus_errors") >= 2);
    // The chunk table is 64 entries behind address/data registers.
    cm5_write(&mut c, true, cm5::NI_CHUNK_TABLE_ADDRESS, 7);
    cm5_write(&mut c, true, cm5::NI_CHUNK_TABLE_DATA, 0xAB);
    cm5_write(&mut c, true, cm5::NI_CHUNK_TABLE_ADDRESS, 8);
    assert_eq!(
        cm5_read(&mut c, true, cm5::NI_CHUNK_TABLE_DATA),
        8,
        "identity"
    );
    cm5_write(&mut c, true, cm5::NI_CHUNK_TABLE_ADDRESS, 7);
    assert_eq!(cm5_read(&mut c, true, cm5::NI_CHUNK_TABLE_DATA), 0xAB);
}

fn put_drd(
    c: &mut vfio_user::Client,
    at: u64,
    flags_len: u32,
    host: u64,
    lanai_addr: u32,
    next: u32,
) {
    let mut d = [0u8; 24];
    d[0..4].copy_from_slice(&flags_len.to_be_bytes());
    d[4..8].copy_from_slice(&(host as u32).to_be_bytes());
    d[8..12].copy_from_slice(&lanai_addr.to_be_bytes());
    d[12..16].copy_from_slice(&((host >> 32) as u32).to_be_bytes());
    d[16..20].copy_from_slice(&next.to_be_bytes());
    c.region_write(pci::BAR0_REGION, at, &d).unwrap();
}

#[test]
fn lanai_dma_writes_into_client_memory_and_faults_outside_it() {
    let d = Daemon::start(1);
    let mut c = d.client(0);
    enable(&mut c);
    let mem = memfd(0x10000);
    let iova = 0x7000_0000_0000u64;
    c.dma_map(0, iova, 0x10000, mem.as_raw_fd()).unwrap();
    // Payload in SRAM, then a two-DRD pre-linked chain: SRAM -> host, host -> SRAM.
    let payload: Vec<u8> = (0..3000u32).map(|i| (i * 13 + 7) as u8).collect();
    c.region_write(pci::BAR0_REGION, 0x10000, &payload).unwrap();
    put_drd(
        &mut c,
        0x100,
        payload.len() as u32,
        iova + 0x123,
        0x10000,
        drd::DMA_VALID | 0x118,
    );
    put_drd(
        &mut c,
        0x118,
        drd::DMA_READ | drd::DMA_END | payload.len() as u32,
        iova + 0x123,
        0x20000,
        0,
    );
    special_write(&mut c, lanai::DMA_POINTER[0], 4, 0x100);
    let mut host = vec![0u8; payload.len()];
    (&mem).seek(SeekFrom::Start(0x123)).unwrap();
    (&mem).read_exact(&mut host).unwrap();
    assert_eq!(host, payload, "the NI wrote into the client's memfd");
    let mut back = vec![0u8; payload.len()];
    c.region_read(pci::BAR0_REGION, 0x20000, &mut back).unwrap();
    assert_eq!(back, payload, "and read it back");
    // One END DRD: DMA0_COUNT 1 and DMA_DONE[0]; a write decrements it.
    assert_eq!(special_read(&mut c, lanai::DMA_COUNT[0], 1), 1);
    assert_ne!(
        special_read(&mut c, lanai::ISR, 4) as u32 & isr::DMA_DONE0,
        0
    );
    // The checksum went back into the DRD (offset 0: the whole transfer).
    let mut ck = [0u8; 2];
    c.region_read(pci::BAR0_REGION, 0x118 + drd::OFF_CHECKSUM, &mut ck)
        .unwrap();
    let mut sum: u32 = 0;
    for p in payload.chunks(2) {
        sum += ((p[0] as u32) << 8) | p.get(1).copied().unwrap_or(0) as u32;
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    assert_eq!(u16::from_be_bytes(ck) as u32, sum);
    special_write(&mut c, lanai::DMA_COUNT[0], 1, 0x55);
    assert_eq!(special_read(&mut c, lanai::DMA_COUNT[0], 1), 0);

    // Outside the mapping: nothing is written, DMA_ERROR_INT and a counter report it.
    put_drd(
        &mut c,
        0x200,
        drd::DMA_END | 64,
        iova + 0x10000 - 32,
        0x10000,
        0,
    );
    special_write(&mut c, lanai::DMA_POINTER[1], 4, 0x200);
    assert_ne!(
        special_read(&mut c, lanai::ISR, 4) as u32 & isr::DMA_ERROR_INT,
        0
    );
    assert_eq!(d.counter(0, "dma_faults"), 1);
    let mut tail = [0u8; 32];
    (&mem).seek(SeekFrom::Start(0x10000 - 32)).unwrap();
    (&mem).read_exact(&mut tail).unwrap();
    assert_eq!(tail, [0u8; 32], "a faulting DMA touches nothing");

    // No DMA without Bus Master Enable; it runs once bus mastering is back on.
    let cmd = cfg_read16(&mut c, 4);
    cfg_write16(&mut c, 4, cmd & !0x4);
    put_drd(&mut c, 0x300, drd::DMA_END | 4, iova, 0x10000, 0);
    special_write(&mut c, lanai::DMA_POINTER[2], 4, 0x300);
    assert_eq!(special_read(&mut c, lanai::DMA_COUNT[2], 1), 0);
    cfg_write16(&mut c, 4, cmd);
    assert_eq!(special_read(&mut c, lanai::DMA_COUNT[2], 1), 1);

    // Unmap revokes access.
    c.dma_unmap(iova, 0x10000).unwrap();
    put_drd(&mut c, 0x400, drd::DMA_END | 4, iova, 0x10000, 0);
    special_write(&mut c, lanai::DMA_POINTER[3], 4, 0x400);
    assert_eq!(d.counter(0, "dma_faults"), 2);
}

#[test]
fn msix_vectors_reach_eventfds_only_with_bus_mastering() {
    let d = Daemon::start(1);
    let mut c = d.client(0);
    enable(&mut c);
    enable_msix(&mut c);
    let green = eventfd();
    let lanai_ev = eventfd();
    let flags = VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER;
    // One vector per message, as QEMU sends them.
    c.set_irqs(
        pci::MSIX_IRQ_INDEX,
        flags,
        pci::vector::GREEN as u32,
        1,
        &[green.as_raw_fd()],
    )
    .unwrap();
    c.set_irqs(
        pci::MSIX_IRQ_INDEX,
        flags,
        pci::vector::LANAI as u32,
        1,
        &[lanai_ev.as_raw_fd()],
    )
    .unwrap();

    // CM-5 Green: a cause bit with level_green set.
    cm5_write(&mut c, true, cm5::NI_INTERRUPT_LEVEL, cm5::level::GREEN);
    cm5_write(
        &mut c,
        true,
        cm5::NI_INTERRUPT_SET_GREEN,
        cm5::green::COM_REC_OK,
    );
    assert_eq!(wait_event(&green, 2000), 1, "green vector fired");
    cm5_write(&mut c, true, cm5::NI_INTERRUPT_CLEAR_GREEN, cm5::green::ALL);

    // Lanai host interrupt = REQ_ACK[0] && PCI_INT_ENABLE (config register 0x40).
    cfg_write32(&mut c, 0x40, lanai::config40::PCI_INT_ENABLE_ON);
    special_write(&mut c, lanai::ISR, 4, isr::REQ_ACK0 as u64);
    assert_eq!(wait_event(&lanai_ev, 2000), 1, "lanai vector fired");
    special_write(&mut c, lanai::ISR, 4, isr::REQ_ACK0 as u64); // acknowledge: toggles to 0

    // Bus mastering off: the interrupt is held pending (PBA), then delivered.
    let cmd = cfg_read16(&mut c, 4);
    cfg_write16(&mut c, 4, cmd & !0x4);
    cm5_write(
        &mut c,
        true,
        cm5::NI_INTERRUPT_SET_GREEN,
        cm5::green::COM_REC_OK,
    );
    assert_eq!(wait_event(&green, 100), 0, "no MSI-X without bus mastering");
    let mut pba = [0u8; 8];
    c.region_read(pci::BAR4_REGION, pci::MSIX_PBA_OFFSET, &mut pba)
        .unwrap();
    assert_ne!(u64::from_le_bytes(pba) & (1 << pci::vector::GREEN), 0);
    cfg_write16(&mut c, 4, cmd);
    assert_eq!(wait_event(&green, 2000), 1, "held vector delivered");
    cm5_write(&mut c, true, cm5::NI_INTERRUPT_CLEAR_GREEN, cm5::green::ALL);

    // De-assign (count, no fds), then disable-all (DATA_NONE, count 0): nothing fires.
    c.set_irqs(
        pci::MSIX_IRQ_INDEX,
        flags,
        pci::vector::GREEN as u32,
        1,
        &[],
    )
    .unwrap();
    cm5_write(
        &mut c,
        true,
        cm5::NI_INTERRUPT_SET_GREEN,
        cm5::green::COM_REC_OK,
    );
    assert_eq!(wait_event(&green, 100), 0);
    c.set_irqs(
        pci::MSIX_IRQ_INDEX,
        VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_TRIGGER,
        0,
        0,
        &[],
    )
    .unwrap();
    cfg_write32(&mut c, 0x40, lanai::config40::PCI_INT_ENABLE_OFF);
    cfg_write32(&mut c, 0x40, lanai::config40::PCI_INT_ENABLE_ON);
    special_write(&mut c, lanai::ISR, 4, isr::REQ_ACK0 as u64);
    assert_eq!(wait_event(&lanai_ev, 100), 0);
    assert!(d.counter(0, "msix_sent") >= 3);
}

#[test]
fn intx_drives_the_status_bit_and_automasks() {
    let d = Daemon::start(1);
    let mut c = d.client(0);
    enable(&mut c);
    let ev = eventfd();
    c.set_irqs(
        pci::INTX_IRQ_INDEX,
        VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER,
        0,
        1,
        &[ev.as_raw_fd()],
    )
    .unwrap();
    assert_eq!(cfg_read16(&mut c, 6) & 0x8, 0);
    cm5_write(&mut c, true, cm5::NI_INTERRUPT_LEVEL, cm5::level::YELLOW);
    cm5_write(
        &mut c,
        true,
        cm5::NI_INTERRUPT_SET,
        cm5::cause::DR_COUNT_NEGATIVE,
    );
    assert_eq!(wait_event(&ev, 2000), 1);
    assert_ne!(
        cfg_read16(&mut c, 6) & 0x8,
        0,
        "Interrupt Status follows the line"
    );
    // Level stays asserted; automasked until the client unmasks, then it fires again.
    c.set_irqs(
        pci::INTX_IRQ_INDEX,
        VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_UNMASK,
        0,
        1,
        &[],
    )
    .unwrap();
    assert_eq!(wait_event(&ev, 2000), 1);
    cm5_write(&mut c, true, cm5::NI_INTERRUPT_CLEAR, cm5::cause::ALL);
    assert_eq!(cfg_read16(&mut c, 6) & 0x8, 0, "line deasserted");
}

#[test]
fn reset_restores_documented_values() {
    let d = Daemon::start(1);
    let mut c = d.client(0);
    enable(&mut c);
    special_write(&mut c, lanai::P0_SEND_FREE_LIMIT, 1, 6);
    cm5_write(&mut c, true, cm5::NI_LONGEST_DR_MESSAGE, 18);
    cm5_write(&mut c, false, cm5::COM_BASE + cm5::iface::CONTROL, 0);
    // Function-level reset through the PCIe Device Control register.
    let devctl = cfg_read16(&mut c, 0x68);
    cfg_write16(&mut c, 0x68, devctl | 0x8000);
    assert_eq!(cfg_read16(&mut c, 4) & 0x6, 0, "command register reset");
    enable(&mut c);
    assert_eq!(special_read(&mut c, lanai::P0_SEND_FREE_LIMIT, 1), 0);
    assert_eq!(cm5_read(&mut c, false, cm5::NI_LONGEST_DR_MESSAGE), 5);
    assert_eq!(
        cm5_read(&mut c, false, cm5::COM_BASE + cm5::iface::CONTROL),
        3
    );
    // vfio-user DEVICE_RESET does the same.
    cm5_write(&mut c, true, cm5::NI_LONGEST_DR_MESSAGE, 18);
    c.reset().unwrap();
    enable(&mut c);
    assert_eq!(cm5_read(&mut c, false, cm5::NI_LONGEST_DR_MESSAGE), 5);
    assert_eq!(d.counter(0, "resets"), 2);
}

#[test]
fn detach_resets_and_reattach_gets_fresh_state() {
    let d = Daemon::start(1);
    {
        let mut c = d.client(0);
        enable(&mut c);
        c.region_write(pci::BAR0_REGION, 0x100, b"secret").unwrap();
        cm5_write(&mut c, true, cm5::NI_LONGEST_DR_MESSAGE, 18);
        let mem = memfd(0x1000);
        c.dma_map(0, 0x1000, 0x1000, mem.as_raw_fd()).unwrap();
        let nodes = d.control(r#"{"version":1,"request":"nodes"}"#);
        assert_eq!(nodes["nodes"][0]["state"], "attached");
        assert_eq!(nodes["nodes"][0]["dma_regions"], 1);
        c.shutdown().unwrap();
    }
    // The daemon notices the disconnect and resets the NI.
    let t = std::time::Instant::now();
    loop {
        let nodes = d.control(r#"{"version":1,"request":"nodes"}"#);
        if nodes["nodes"][0]["state"] == "free" {
            assert_eq!(nodes["nodes"][0]["dma_regions"], 0);
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(5), "NI never freed");
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut c = d.client(0);
    enable(&mut c);
    let mut b = [0u8; 6];
    c.region_read(pci::BAR0_REGION, 0x100, &mut b).unwrap();
    assert_eq!(b, [0u8; 6], "a new client never sees the old client's SRAM");
    assert_eq!(cm5_read(&mut c, false, cm5::NI_LONGEST_DR_MESSAGE), 5);
    assert_eq!(d.counter(0, "attaches"), 2);
}

#[test]
fn bad_input_gets_errors_and_the_daemon_keeps_serving() {
    let mut d = Daemon::start(2);
    let mut raw = Raw::connect(&d.sock(0));
    // Memory Space Enable, so BAR accesses decode.
    assert!(!raw.region_write(pci::CONFIG_REGION, 4, &[6, 0]).is_error());
    // Past a region's end, straddling it, unknown regions, zero-size regions.
    assert!(raw
        .region_read(pci::BAR2_REGION, cm5::BAR2_SIZE, 4)
        .is_error());
    assert!(raw.region_read(pci::CONFIG_REGION, 0xFFE, 4).is_error());
    assert!(raw.region_read(42, 0, 4).is_error());
    assert!(raw.region_read(1, 0, 4).is_error());
    assert!(raw
        .region_write(pci::BAR0_REGION, u64::MAX - 1, &[0; 4])
        .is_error());
    // Odd widths where registers are.
    assert!(raw.region_write(pci::BAR2_REGION, 4, &[6, 0, 0]).is_error());
    assert!(raw
        .region_read(pci::BAR0_REGION, lanai::SPECIALS + 0x1F8, 3)
        .is_error());
    assert!(raw.region_read(pci::BAR4_REGION, 1, 4).is_error());
    // A good access still works on the same connection.
    let ok = raw.region_read(pci::CONFIG_REGION, 0, 4);
    assert!(!ok.is_error());
    // DMA: no fd is refused. Unmapping what is not mapped succeeds, as kernel VFIO answers
    // (QEMU relies on it), and is counted.
    assert!(raw.dma_map_no_fd(0x10000, 0x1000).is_error());
    assert!(!raw.dma_unmap(0x10000, 0x1000).is_error());
    assert_eq!(d.counter(0, "dma_unmap_empty"), 1);
    // Region 42 is refused by the protocol layer before the NI sees it; the other six count.
    assert!(d.counter(0, "bad_accesses") >= 6);
    assert!(d.counter(0, "dma_map_errors") >= 1);

    // Overlapping maps through the crate's client.
    let mut c1 = d.client(1);
    let mem = memfd(0x4000);
    c1.dma_map(0, 0x100000, 0x2000, mem.as_raw_fd()).unwrap();
    let errors = d.counter(1, "dma_map_errors");
    c1.dma_map(0, 0x101000, 0x2000, mem.as_raw_fd()).unwrap();
    assert_eq!(
        d.counter(1, "dma_map_errors"),
        errors + 1,
        "overlap refused"
    );
    // Beyond the end of the file.
    c1.dma_map(0x3000, 0x200000, 0x2000, mem.as_raw_fd())
        .unwrap();
    assert_eq!(
        d.counter(1, "dma_map_errors"),
        errors + 2,
        "beyond file refused"
    );

    // Garbage on the socket: a header claiming a tiny VERSION message, then random bytes.
    drop(raw);
    let mut g = std::os::unix::net::UnixStream::connect(d.sock(0)).unwrap();
    let mut junk = vec![0u8; 16];
    junk[2] = 1; // command VERSION
    junk[4] = 4; // message_size 4: smaller than its own header
    junk.extend((0..4096u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8));
    let _ = g.write_all(&junk);
    drop(g);
    // A client that vanishes mid-message: half a REGION_WRITE.
    let mut h = Raw::connect(&d.sock(0));
    let mut partial = vec![1, 0, 10, 0];
    partial.extend_from_slice(&(16u32 + 16 + 4096).to_le_bytes());
    partial.extend_from_slice(&[0; 8]);
    partial.extend_from_slice(&[0; 20]);
    let _ = h.s.write_all(&partial);
    drop(h);
    std::thread::sleep(Duration::from_millis(200));

    // The daemon is alive, the other NI works, and NI 0 takes a new client.
    assert!(d.alive(), "daemon survived");
    assert_eq!(cfg_read16(&mut c1, 0), pci::VENDOR_ID);
    let mut c0 = d.client(0);
    assert_eq!(cfg_read16(&mut c0, 2), pci::DEVICE_ID);
}

#[test]
fn set_irqs_refuses_bad_requests() {
    let d = Daemon::start(1);
    let mut c = d.client(0);
    let ev = eventfd();
    let flags = VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER;
    // Vector 16 does not exist; a pipe is not an eventfd; MSI has no vectors.
    c.set_irqs(pci::MSIX_IRQ_INDEX, flags, 16, 1, &[ev.as_raw_fd()])
        .unwrap();
    let (r, _w) = nix::unistd::pipe().unwrap();
    c.set_irqs(pci::MSIX_IRQ_INDEX, flags, 0, 1, &[r.as_raw_fd()])
        .unwrap();
    c.set_irqs(pci::MSI_IRQ_INDEX, flags, 0, 1, &[ev.as_raw_fd()])
        .unwrap();
    assert_eq!(d.counter(0, "irq_errors"), 3);
}
