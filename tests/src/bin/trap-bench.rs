//! ni-trap-bench: what one trapped register access of an NI costs a host vfio-user client
//! (issue 11: "the cost of one trapped register access"), beside its floor measured in the
//! same process: a bare round trip of the same message sizes over a Unix socket to a thread
//! that only echoes. The difference is what the daemon adds (decoding, the register file,
//! its locks); the floor is the transport, which a guest pays again through QEMU.
//!
//! Usage: ni-trap-bench [ACCESSES]   (default 20000; starts its own ni-device from the
//! directory of this binary, or NI_DEVICE names one)
//!
//! Benchmarks are not tests: nothing here fails on a number.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ni_abi::{cm5, pci};
use vfio_user::Client;

/// vfio-user REGION_READ of 4 bytes: 16-byte header + offset, region, count; the reply
/// carries the same 16 bytes and the data.
const REQUEST: usize = 16 + 16;
const REPLY: usize = 16 + 16 + 4;

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse().expect("ACCESSES is a number"))
        .unwrap_or(20_000);
    let device = std::env::var_os("NI_DEVICE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            std::env::current_exe()
                .expect("own path")
                .with_file_name("ni-device")
        });
    let dir = std::env::temp_dir().join(format!("ni-trap-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("run directory");
    let mut daemon = Command::new(&device)
        .args(["--nodes", "1", "--run-dir"])
        .arg(&dir)
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {}: {e}", device.display()));
    let sock = dir.join("ni0.sock");
    let t = Instant::now();
    while !sock.exists() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "ni-device never listened"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut c = Client::new(&sock).expect("vfio-user client connects");
    let mut cmd = [0u8; 2];
    c.region_read(pci::CONFIG_REGION, 4, &mut cmd).unwrap();
    cmd[0] |= 2; // memory decode
    c.region_write(pci::CONFIG_REGION, 4, &cmd).unwrap();

    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "ni-trap-bench: {n} accesses each; {} CPUs, load {}; threads unpinned",
        std::thread::available_parallelism().map_or(0, |p| p.get()),
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!("{:<44} {:>10} {:>10}", "operation", "mean µs", "best µs");
    let mut word = [0u8; 4];
    let ni_time = cm5::NI_TIME as u64;
    report("CM-5 read ni_time (BAR2, user window)", n, || {
        c.region_read(pci::BAR2_REGION, ni_time, &mut word).unwrap();
    });
    let scan = cm5::NI_SCAN_START as u64;
    report("CM-5 write ni_scan_start", n, || {
        c.region_write(pci::BAR2_REGION, scan, &[0; 4]).unwrap();
    });
    let status = (cm5::LDR_BASE + cm5::iface::STATUS) as u64;
    report("CM-5 read ni_ldr_status (computed)", n, || {
        c.region_read(pci::BAR2_REGION, status, &mut word).unwrap();
    });
    // The floor: the same sizes over a Unix socket to a thread that only echoes.
    let (mut a, mut b) = UnixStream::pair().expect("socketpair");
    let echo = std::thread::spawn(move || {
        let mut req = [0u8; REQUEST];
        let reply = [0u8; REPLY];
        while b.read_exact(&mut req).is_ok() {
            if b.write_all(&reply).is_err() {
                break;
            }
        }
    });
    let req = [0u8; REQUEST];
    let mut reply = [0u8; REPLY];
    report("baseline: Unix socket round trip, same sizes", n, || {
        a.write_all(&req).unwrap();
        a.read_exact(&mut reply).unwrap();
    });
    drop(a);
    let _ = echo.join();
    drop(c);
    let _ = daemon.kill();
    let _ = daemon.wait();
    let _ = std::fs::remove_dir_all(&dir);
}

/// Run `op` `n` times in 20 batches: the mean over all, and the best batch's mean.
fn report(name: &str, n: usize, mut op: impl FnMut()) {
    for _ in 0..n / 20 {
        op(); // warm up
    }
    let batch = (n / 20).max(1);
    let mut best = f64::MAX;
    let t = Instant::now();
    for _ in 0..20 {
        let b = Instant::now();
        for _ in 0..batch {
            op();
        }
        best = best.min(b.elapsed().as_secs_f64() * 1e6 / batch as f64);
    }
    let mean = t.elapsed().as_secs_f64() * 1e6 / (batch * 20) as f64;
    println!("{name:<44} {mean:>10.2} {best:>10.2}");
}
