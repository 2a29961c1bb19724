//! The daemon as a process: run directory, lock, signals, stale sockets, control socket.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;

fn wait_exit(child: &mut std::process::Child) -> std::process::ExitStatus {
    let t = Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "daemon did not exit");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn sockets_lock_and_clean_shutdown() {
    let mut d = Daemon::start(3);
    for i in 0..3 {
        assert!(d.sock(i).exists());
    }
    let mode = std::fs::metadata(d.dir.join("control.sock"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "control socket is owner-only");

    // A second daemon on the same run directory refuses, naming the first.
    let out = Command::new(env!("CARGO_BIN_EXE_ni-device"))
        .args(["--nodes", "1", "--run-dir"])
        .arg(&d.dir)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("another ni-device (pid {})", d.child.id())),
        "{err}"
    );
    assert!(d.sock(0).exists(), "the loser touched nothing");

    // SIGTERM: clean exit, sockets and pid file gone.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(d.child.id() as i32),
        nix::sys::signal::SIGTERM,
    )
    .unwrap();
    assert!(wait_exit(&mut d.child).success());
    assert!(!d.sock(0).exists() && !d.dir.join("control.sock").exists());
    assert!(!d.dir.join("ni-device.pid").exists());
}

#[test]
fn stale_sockets_from_a_crash_are_replaced() {
    let mut d = Daemon::start(2);
    d.child.kill().unwrap(); // SIGKILL: no cleanup
    d.child.wait().unwrap();
    assert!(d.sock(0).exists(), "a crash leaves its sockets behind");
    assert!(
        UnixStream::connect(d.sock(0)).is_err(),
        "nobody listens on a stale socket"
    );
    std::fs::remove_file(d.dir.join("control.sock")).unwrap();
    d.child = spawn(&d.dir, 2);
    let mut c = d.client(1);
    assert_eq!(cfg_read16(&mut c, 0), ni_abi::pci::VENDOR_ID);
}

#[test]
fn sigint_also_shuts_down_cleanly_with_a_client_attached() {
    let mut d = Daemon::start(1);
    let _c = d.client(0);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(d.child.id() as i32),
        nix::sys::signal::SIGINT,
    )
    .unwrap();
    assert!(wait_exit(&mut d.child).success());
    assert!(!d.sock(0).exists());
}

#[test]
fn config_file_sets_nodes_and_run_dir() {
    let tmp = TempDir::new("cfg");
    let run = tmp.0.join("from-config");
    let cfg = tmp.0.join("ni.toml");
    std::fs::write(
        &cfg,
        format!("nodes = 4\nrun_dir = {:?}\n", run.display().to_string()),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_ni-device"))
        .arg("--config")
        .arg(&cfg)
        .spawn()
        .unwrap();
    wait_for(&run.join("control.sock"));
    assert!(run.join("ni3.sock").exists() && !run.join("ni4.sock").exists());
    child.kill().unwrap();
    child.wait().unwrap();
    // A typo in the config file is an error, not silently ignored.
    std::fs::write(&cfg, "nodez = 4\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ni-device"))
        .arg("--config")
        .arg(&cfg)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("nodez"));
}

#[test]
fn control_socket_rejects_malformed_and_unknown_requests() {
    let d = Daemon::start(2);
    let s = UnixStream::connect(d.dir.join("control.sock")).unwrap();
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s);
    let mut ask = |line: &str| {
        w.write_all(line.as_bytes()).unwrap();
        w.write_all(b"\n").unwrap();
        let mut out = String::new();
        r.read_line(&mut out).unwrap();
        serde_json::from_str::<serde_json::Value>(&out).unwrap()
    };
    assert_eq!(ask("{not json")["result"], "error");
    assert_eq!(ask(r#"{"request":"status"}"#)["result"], "error");
    let v = ask(r#"{"version":99,"request":"status"}"#);
    assert!(v["error"].as_str().unwrap().contains("version 99"));
    assert_eq!(
        ask(r#"{"version":1,"request":"format_disk"}"#)["result"],
        "error"
    );
    let v = ask(r#"{"version":1,"request":"counters","nodes":[7]}"#);
    assert!(v["error"].as_str().unwrap().contains("no NI 7"));
    // The same connection still answers good requests.
    let v = ask(r#"{"version":1,"request":"status"}"#);
    assert_eq!(v["result"], "status");
    assert_eq!(v["nodes"], 2);
    assert!(v["errors"].as_u64().unwrap() >= 5);
    // An over-long request is refused.
    let big = format!(
        "{{\"version\":1,\"request\":\"status\",\"pad\":\"{}\"}}",
        "x".repeat(70_000)
    );
    // The daemon answers and hangs up as soon as the line runs past its limit, so the rest
    // of our write may meet a closed socket: what counts is the answer.
    let _ = w.write_all(big.as_bytes()).and_then(|_| w.write_all(b"\n"));
    let mut out = String::new();
    r.read_line(&mut out).unwrap();
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["result"], "error", "{out}");
}
