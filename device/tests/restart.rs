//! Issue 16, "daemon restart and upgrade under running clients": a planned restart
//! (`ni-ctl daemon restart`, the control request `daemon_restart`) hands every client over to
//! the new process (device/abi/handover.md). Clients here are raw vfio-user clients that
//! drive the registers, as a driver written from the seeds would: what they set up and what
//! the NI holds for them must be there after the restart, on the same connection.

mod common;

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use common::cm5_driver::*;
use common::*;
use ni_abi::cm5::{self, green, level};
use ni_abi::pci;

fn restart(d: &Daemon, binary: Option<&str>) -> serde_json::Value {
    let req = match binary {
        None => r#"{"version":1,"request":"daemon_restart"}"#.to_string(),
        Some(b) => format!(r#"{{"version":1,"request":"daemon_restart","binary":{b:?}}}"#),
    };
    d.control(&req)
}

/// CM-5 NI §2.3, §2.7.1, §5.4 across a restart: a message that arrived before it waits in
/// the receive FIFO after it, whole; the receive interrupt the driver set up before (its
/// eventfd, MSI-X enable, rec_ok_ie, level_green) fires for a message sent after it; config
/// space, registers and counters carry on; the pid stays.
#[test]
fn registers_held_messages_and_interrupts_cross_a_planned_restart() {
    let mut d = Daemon::start(2);
    let pid = d.child.id();
    let mut a = d.client(0);
    let mut b = d.client(1);
    ready(&mut a, 2);
    ready(&mut b, 2);
    let ev = green_on_arrival(&mut b);
    assert!(send(&mut a, 1, 5, &[1, 2, 3]));
    assert_eq!(wait_event(&ev, 3000), 1, "the Green vector fired");
    let command = cfg_read16(&mut b, 0x04);
    let msix = cfg_read16(&mut b, 0x52);

    let r = restart(&d, None);
    assert_eq!(r["result"], "status", "{r}");
    assert_eq!(r["restarts"], 1, "{r}");
    assert_eq!(r["pid"], pid, "the same process, the new binary");
    assert_eq!(r["attached"], 2, "both clients carried over: {r}");
    assert!(d.alive());

    assert_eq!(cfg_read16(&mut b, 0x04), command, "config space: command");
    assert_eq!(cfg_read16(&mut b, 0x52), msix, "MSI-X enable");
    assert_eq!(
        cm5_read(&mut b, true, cm5::NI_INTERRUPT_LEVEL),
        level::GREEN
    );
    assert_eq!(
        receive(&mut b),
        (5, vec![1, 2, 3]),
        "held across the restart"
    );
    // §5.4: the driver clears the cause it was interrupted for (the message is read, so it
    // stays clear).
    cm5_write(
        &mut b,
        true,
        cm5::NI_INTERRUPT_CLEAR_GREEN,
        green::LDR_REC_OK,
    );
    assert!(send(&mut a, 1, 6, &[4, 5]));
    assert_eq!(
        wait_event(&ev, 3000),
        1,
        "the eventfd registered before the restart fires after it"
    );
    assert_eq!(receive(&mut b), (6, vec![4, 5]));
    assert!(send(&mut b, 0, 7, &[9]));
    assert_eq!(receive(&mut a), (7, vec![9]));
    assert_eq!(d.counter(0, "cm5_dr_sends"), 2, "counters carry on");
    assert_eq!(d.counter(1, "cm5_dr_recvs"), 2);
    assert_eq!(d.counter(0, "attaches"), 1, "nobody attached again");
    assert_eq!(d.counter(1, "attaches"), 1);
}

/// A client that stops reading its replies holds its session thread in a write, and one
/// that sends half a message holds it in a read: neither comes to rest. After the freeze's
/// bound (2 s) the restart lets those two go — their sockets are shut down, as if the daemon
/// had crashed under them — and carries everyone else over: one client cannot hold up
/// everyone's restart.
#[test]
fn sessions_that_cannot_come_to_rest_are_let_go_and_the_rest_carried_over() {
    let mut d = Daemon::start(3);
    let mut a = d.client(0);
    enable(&mut a);
    let mut deaf = Raw::connect(&d.sock(1));
    deaf.s.set_nonblocking(true).unwrap();
    // REGION_READs of 1 MiB, never read back: the replies fill the socket both ways.
    let mut p = Vec::new();
    p.extend_from_slice(&0u64.to_le_bytes());
    p.extend_from_slice(&pci::BAR0_REGION.to_le_bytes());
    p.extend_from_slice(&(1u32 << 20).to_le_bytes());
    let mut msg = Vec::new();
    for id in 0..64u16 {
        msg.extend_from_slice(&id.to_le_bytes());
        msg.extend_from_slice(&(ni_abi::vfio_user::command::REGION_READ).to_le_bytes());
        msg.extend_from_slice(&(16 + p.len() as u32).to_le_bytes());
        msg.extend_from_slice(&0u32.to_le_bytes());
        msg.extend_from_slice(&0u32.to_le_bytes());
        msg.extend_from_slice(&p);
    }
    let mut sent = 0;
    let t = Instant::now();
    while sent < msg.len() && t.elapsed() < Duration::from_secs(2) {
        match deaf.s.write(&msg[sent..]) {
            Ok(n) => sent += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(5))
            }
            Err(e) => panic!("{e}"),
        }
    }
    // Half a header, never the rest.
    let mut half = Raw::connect(&d.sock(2));
    half.s.write_all(&msg[..7]).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let t = Instant::now();
    let r = restart(&d, None);
    let took = t.elapsed();
    assert_eq!(r["result"], "status", "{r}");
    assert_eq!(r["attached"], 1, "only NI 0's client was carried over: {r}");
    assert!(
        took < Duration::from_secs(5),
        "the bound (2 s), then the let-go (at most 1 s): took {took:?}"
    );
    assert!(d.alive());
    assert_eq!(cfg_read16(&mut a, 0x04) & 0x2, 0x2, "NI 0 carried over");
    // The two that were let go see their connection end.
    half.s
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut b = [0u8; 1];
    assert_eq!(
        half.s.read(&mut b).unwrap(),
        0,
        "half a message: connection closed"
    );
    deaf.s.set_nonblocking(false).unwrap();
    deaf.s
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut sink = Vec::new();
    let _ = deaf.s.read_to_end(&mut sink);
    assert!(
        sink.len() < 64 << 20,
        "the deaf client got only part of its replies: {} bytes",
        sink.len()
    );
    for n in [1, 2] {
        assert!(d.counter(n, "malformed_sessions") >= 1, "NI {n} counted");
    }
    let log = std::fs::read_to_string(d.dir.with_extension("log")).unwrap();
    assert_eq!(
        log.matches("did not come to rest: let go").count(),
        2,
        "{log}"
    );
    // Both NIs are free and serve new clients.
    let mut c = d.client(1);
    enable(&mut c);
    assert_eq!(cfg_read16(&mut c, 0x04) & 0x2, 0x2);
}

/// An upgrade into a binary that cannot take the state over is refused before anything
/// stops (`--handover-format` must answer this format); one that can takes over, and later
/// restarts default to its path.
#[test]
fn only_a_binary_that_speaks_the_format_takes_over() {
    let mut d = Daemon::start(1);
    let mut a = d.client(0);
    enable(&mut a);
    let tmp = TempDir::new("upgrade");
    let other = tmp.0.join("other-format");
    std::fs::write(&other, "#!/bin/sh\necho 999\n").unwrap();
    let script = std::fs::File::open(&other).unwrap();
    let mut perm = script.metadata().unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
    std::fs::set_permissions(&other, perm.clone()).unwrap();
    // Speaks format 1, but cannot take this image (as a build whose state no longer parses).
    let picky = tmp.0.join("picky");
    std::fs::write(
        &picky,
        "#!/bin/sh\nfor a; do [ \"$a\" = --handover-format ] && { echo 1; exit 0; }; done\necho 'missing field x' >&2; exit 3\n",
    )
    .unwrap();
    std::fs::set_permissions(&picky, perm.clone()).unwrap();
    for (binary, says) in [
        ("/bin/true", "answered \"\""),
        ("/nonexistent/ni-device", "No such file"),
        (other.to_str().unwrap(), "format 999"),
        (picky.to_str().unwrap(), "cannot take this image"),
    ] {
        let r = restart(&d, Some(binary));
        assert_eq!(r["result"], "error", "{binary}: {r}");
        assert!(r["error"].as_str().unwrap().contains(says), "{binary}: {r}");
        assert!(d.alive());
        assert_eq!(cfg_read16(&mut a, 0x04) & 0x2, 0x2, "still serving");
    }
    // The upgrade: a new binary at another path.
    let new = tmp.0.join("ni-device-new");
    std::fs::copy(env!("CARGO_BIN_EXE_ni-device"), &new).unwrap();
    let r = restart(&d, Some(new.to_str().unwrap()));
    assert_eq!(r["result"], "status", "{r}");
    assert_eq!(cfg_read16(&mut a, 0x04) & 0x2, 0x2, "carried over");
    let exe = std::fs::read_link(format!("/proc/{}/exe", d.child.id())).unwrap();
    assert_eq!(exe, new, "the daemon runs the new binary");
    // SIGHUP: again into the binary it now runs.
    // SAFETY: kill with a pid of our own child.
    assert_eq!(unsafe { libc::kill(d.child.id() as i32, libc::SIGHUP) }, 0);
    poll_until("the SIGHUP restart", || {
        d.control(r#"{"version":1,"request":"status"}"#)["restarts"] == 2
    });
    assert_eq!(cfg_read16(&mut a, 0x04) & 0x2, 0x2, "carried over again");
    let mut log = String::new();
    let _ = std::io::Read::read_to_string(
        &mut std::fs::File::open(d.dir.with_extension("log")).unwrap(),
        &mut log,
    );
    assert!(log.contains("planned restart done"), "{log}");
    std::io::stderr().flush().unwrap();
}

/// The new process takes how the daemon was started (NIs, torus, window kind, timeout) from
/// the image, not from the config file, which may have changed since — even into something
/// that no longer parses.
#[test]
fn a_config_file_edited_since_the_start_does_not_matter() {
    let mut d = Daemon::start_config(2, "direct = \"shared\"\ncollective_timeout_secs = 7\n");
    let mut a = d.client(0);
    enable(&mut a);
    let conf = d.dir.with_file_name("ni.toml");
    std::fs::write(&conf, "nodes = [this is not toml").unwrap();
    let r = restart(&d, None);
    assert_eq!(r["result"], "status", "{r}");
    assert_eq!(r["nodes"], 2, "{r}");
    assert!(d.alive());
    assert_eq!(cfg_read16(&mut a, 0x04) & 0x2, 0x2, "carried over");
}

/// HMM-148-0 "Messaging Components", SSD-T90 "Special Routing" across a restart: E register
/// values and states, the segment table, an R_NET_LUT entry written by SPUT (a router
/// register only the fabric holds) and the DMA mapping and segment a remote GET and PUT go
/// through are all there after it, on the same connections.
#[test]
fn e_registers_router_writes_and_remote_access_cross_a_planned_restart() {
    use common::t3e_driver::*;
    use ni_abi::t3e::{ers, gva, op};
    let d = Daemon::start(2);
    let mut a = Pe::attach(&d, 0);
    let b = Pe::attach(&d, 1);
    for e in 40..48u32 {
        ereg_store(&mut a.c, e, 0x1000 + e as u64);
    }
    let tag = tag_plus(1, 0, 0);
    router_write(&mut a.c, HERE, lut(3), tag);
    let ers_before = ers_words(&mut a.c);

    let r = restart(&d, None);
    assert_eq!(r["result"], "status", "{r}");

    for e in 40..48u32 {
        assert_eq!(ereg_load(&mut a.c, e), 0x1000 + e as u64, "E[{e}]");
    }
    assert_eq!(ers_words(&mut a.c), ers_before, "every E register's state");
    assert_eq!(
        router_read(&mut a.c, HERE, lut(3)),
        tag,
        "the SPUT-written LUT entry"
    );
    b.write64(0x20, 0xFEED);
    assert_eq!(
        remote(&mut a.c, op::GET, 1, 1, gva::make(SEG, 0x20)),
        ers::FULL
    );
    assert_eq!(
        ereg_load(&mut a.c, 1),
        0xFEED,
        "GET through B's mapping and segment"
    );
    ereg_store(&mut a.c, 2, 0xBEEF);
    assert_eq!(
        remote(&mut a.c, op::PUT, 2, 1, gva::make(SEG, 0x28)),
        ers::FULL
    );
    assert_eq!(b.read64(0x28), 0xBEEF, "PUT into B's memory");
}
