//! The Lanai X port model seen from both sides: the administrator sets a port's mode and
//! link over the control socket; a driver reads the same state in the ISR (`P0_LINK_READY`)
//! and through PORT_ADDR/PORT_DATA (`MODE`, `STATE`, `IB_LDC`), and cannot change it there.

mod common;

use common::lanai_driver::{port_read, port_write};
use common::*;
use ni_abi::lanai::port_reg::{IB_LDC, MODE, STATE, TEST};
use ni_abi::lanai::{self, isr};

fn port_set(d: &Daemon, node: u32, mode: Option<&str>, state: Option<&str>) -> serde_json::Value {
    let mut req = serde_json::json!({"version": 1, "request": "port_set", "node": node});
    if let Some(m) = mode {
        req["mode"] = m.into();
    }
    if let Some(s) = state {
        req["state"] = s.into();
    }
    let v = d.control(&req.to_string());
    assert_eq!(v["result"], "port", "{v}");
    v
}

#[test]
fn link_ready_and_port_registers_follow_the_administrators_port() {
    let d = Daemon::start(1);
    let mut c = d.client(0);
    enable(&mut c);
    let link_ready =
        |c: &mut vfio_user::Client| special_read(c, lanai::ISR, 4) as u32 & isr::P0_LINK_READY != 0;
    // Out of reset: Myrinet, in sync.
    assert!(link_ready(&mut c));
    assert_eq!(
        special_read(&mut c, lanai::ISR, 4) as u32 & (isr::P0_LINK_READY << isr::P1_SHIFT),
        0,
        "port 1 has no cable"
    );
    assert_eq!(port_read(&mut c, MODE), 1, "MODE_M");
    assert_eq!(port_read(&mut c, STATE), 10, "IN_SYNC_GO");
    assert_eq!(port_read(&mut c, MODE + 0x40), 0, "port 1 disabled");

    let v = port_set(&d, 0, None, Some("down"));
    assert_eq!(v["clsm"], "WE_LOST_SYNC");
    assert!(!link_ready(&mut c));
    assert_eq!(port_read(&mut c, STATE), 0, "WE_LOST_SYNC");

    port_set(&d, 0, Some("infiniband"), None);
    assert_eq!(port_read(&mut c, MODE), 2, "MODE_IB");
    assert_eq!(port_read(&mut c, STATE), 3, "Disabled");
    // IB_LDC counts the link's downs and clears when read (Z*).
    assert_eq!(port_read(&mut c, IB_LDC), 1);
    assert_eq!(port_read(&mut c, IB_LDC), 0);

    port_set(&d, 0, None, Some("up"));
    assert!(link_ready(&mut c));
    assert_eq!(port_read(&mut c, STATE), 5, "LinkUp");
    port_set(&d, 0, Some("ethernet"), None);
    assert_eq!(port_read(&mut c, MODE), 4, "MODE_GEX");
    assert_eq!(port_read(&mut c, STATE), 7, "LINK_OK");
    assert!(link_ready(&mut c));
    // The mode change retrained the link: one more down.
    assert_eq!(port_read(&mut c, IB_LDC), 1);

    // §13.1: MODE keeps only the least significant 1 a driver writes, and a mode the port
    // can run becomes the port's mode (the one `ni-ctl port` shows); STATE is the CLSM's
    // (writes ignored); other port registers are plain storage.
    port_write(&mut c, MODE, 0x6);
    assert_eq!(port_read(&mut c, MODE), 2, "MODE_IB|MODE_GEX keeps MODE_IB");
    assert_eq!(port_read(&mut c, STATE), 5, "LinkUp");
    let ports = d.control(r#"{"version":1,"request":"ports"}"#);
    assert_eq!(ports["ports"][0]["mode"], "infiniband");
    port_write(&mut c, MODE, 0x4);
    port_write(&mut c, STATE, 0x20);
    port_write(&mut c, TEST, 0x5);
    assert_eq!(port_read(&mut c, MODE), 4);
    assert_eq!(port_read(&mut c, STATE), 7);
    assert_eq!(port_read(&mut c, TEST), 0x5);
    // GMII needs an external PHY the emulated board lacks, 0 disables: no carrier.
    port_write(&mut c, MODE, 0x8);
    assert_eq!(port_read(&mut c, MODE), 8);
    assert!(!link_ready(&mut c));
    let ports = d.control(r#"{"version":1,"request":"ports"}"#);
    assert_eq!(ports["ports"][0]["link_ready"], false);
    port_write(&mut c, MODE, 0);
    assert_eq!(port_read(&mut c, MODE), 0);
    assert!(!link_ready(&mut c));
    port_write(&mut c, MODE, 0x4);
    assert!(link_ready(&mut c));
    port_write(&mut c, MODE, 0);
    let ports = d.control(r#"{"version":1,"request":"ports"}"#);
    assert_eq!(ports["ports"][0]["mode"], "ethernet");
    assert_eq!(ports["ports"][0]["state"], "up");

    // A function reset restores the registers but does not unplug the cable.
    c.reset().unwrap();
    enable(&mut c);
    assert_eq!(
        port_read(&mut c, MODE),
        4,
        "a reset gives the port its carrier back"
    );
    assert_eq!(port_read(&mut c, TEST), 0);
    assert_eq!(port_read(&mut c, IB_LDC), 0, "Z* counters restart at reset");
    assert!(link_ready(&mut c));
}

#[test]
fn control_requests_for_ports_check_their_arguments() {
    let d = Daemon::start(1);
    for (req, says) in [
        (
            r#"{"version":1,"request":"port_set","node":0,"mode":"gmii"}"#,
            "unknown port mode",
        ),
        (
            r#"{"version":1,"request":"port_set","node":0,"state":"sideways"}"#,
            "unknown link state",
        ),
        (
            r#"{"version":1,"request":"port_set","node":0}"#,
            "needs a mode, a state or both",
        ),
        (
            r#"{"version":1,"request":"port_set","node":3,"state":"up"}"#,
            "no NI 3",
        ),
    ] {
        let v = d.control(req);
        assert_eq!(v["result"], "error", "{req}");
        assert!(v["error"].as_str().unwrap().contains(says), "{v}");
    }
}
