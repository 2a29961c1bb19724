//! Issue 11, "one control network": a member driving the CM-5 registers in BAR2 (a raw
//! vfio-user client here, as a driver written from the handbook) and a member using libni
//! (`ni-test-rank cm5-doors`) take part in the same combine, scan, sync global, async global
//! and network-done, and get the same results (NI Programmer's Handbook §4.2, §4.3).

use std::time::{Duration, Instant};

use ni_abi::cm5::{self, iface, status};
use ni_abi::pci;
use ni_tests::{assert_ok, binary, finish, Daemon};
use vfio_user::Client;

fn rd(c: &mut Client, sup: bool, off: u32) -> u32 {
    let base = if sup { cm5::SUPERVISOR } else { 0 };
    let mut b = [0u8; 4];
    c.region_read(pci::BAR2_REGION, base + off as u64, &mut b)
        .unwrap();
    u32::from_le_bytes(b)
}

fn wr(c: &mut Client, sup: bool, off: u32, v: u32) {
    let base = if sup { cm5::SUPERVISOR } else { 0 };
    c.region_write(pci::BAR2_REGION, base + off as u64, &v.to_le_bytes())
        .unwrap();
}

fn until(what: &str, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < Duration::from_secs(20), "{what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn com_send_first(pattern: u32, combiner: u32, len: u32) -> u32 {
    (cm5::fifo::COMBINE << cm5::SF_FIFO_OFFSET)
        + (((pattern << 7) | (combiner << 4) | len) << cm5::AUXILIARY_START_P)
}

fn combine(c: &mut Client, pattern: u32, combiner: u32, word: u32) -> u32 {
    wr(c, false, com_send_first(pattern, combiner, 1), word);
    let st = cm5::COM_BASE + iface::STATUS;
    until("a combine result", || {
        rd(c, false, st) & status::REC_OK != 0
    });
    rd(c, false, cm5::COM_BASE + iface::RECV)
}

#[test]
fn a_register_member_and_a_libni_member_share_the_control_network() {
    // The fabric path only: a client of the registers sets up no window.
    let d = Daemon::start_with(2, Some("direct = false\n"));
    let mut c = Client::new(&d.sock(0)).expect("vfio-user client connects");
    // Memory decode on (PCI command).
    let mut cmd = [0u8; 2];
    c.region_read(pci::CONFIG_REGION, 4, &mut cmd).unwrap();
    let cmd = u16::from_le_bytes(cmd) | 0x6;
    c.region_write(pci::CONFIG_REGION, 4, &cmd.to_le_bytes())
        .unwrap();
    until("the daemon set up the partition registers", || {
        rd(&mut c, true, cm5::NI_PARTITION_SIZE) == 2
    });
    let rank = d.rank(&binary("ni-test-rank"), 1, "cm5-doors");
    // Unlock COM, take part (§2.7.2, §4.2.10, §4.3.1).
    wr(&mut c, true, cm5::COM_BASE + iface::PRIVATE, 0);
    wr(&mut c, false, cm5::COM_BASE + iface::CONTROL, 0);
    wr(&mut c, false, cm5::NI_SYNC_GLOBAL_ABSTAIN, 0);
    assert_eq!(combine(&mut c, 3, 1, 37), 42, "ADD reduce: 37 + libni's 5");
    assert_eq!(
        combine(&mut c, 2, 1, 37),
        0,
        "forward scan: rank 0 gets the identity"
    );
    wr(&mut c, false, cm5::NI_SYNC_GLOBAL_SEND, 0);
    until("the sync global completes", || {
        rd(&mut c, false, cm5::NI_SYNC_GLOBAL) & 2 != 0
    });
    assert_eq!(
        rd(&mut c, false, cm5::NI_SYNC_GLOBAL),
        0b11,
        "OR of 0 and libni's 1"
    );
    wr(&mut c, false, cm5::NI_ASYNC_GLOBAL, 1);
    let dr_status = cm5::DR_BASE + iface::STATUS;
    wr(&mut c, false, com_send_first(0, 5, 1), 0);
    until("network-done completes", || {
        rd(&mut c, false, dr_status) & (1 << 6) != 0
    });
    let out = finish(rank, Duration::from_secs(30));
    assert_ok(&out, "cm5-doors", &d);
    // Both doors count in the same counters.
    let v = d.control(r#"{"version":1,"request":"counters","nodes":[0,1]}"#);
    let combines = |i: usize| {
        v["counters"][i]["counters"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p[0] == "combines")
            .unwrap()[1]
            .as_u64()
            .unwrap()
    };
    assert_eq!(
        (combines(0), combines(1)),
        (3, 3),
        "two combines and network-done each"
    );
}
