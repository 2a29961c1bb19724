//! Issue 16, "daemon restart and upgrade under running clients": two libni processes
//! exchange checked messages (8 B to 1 MiB), put/get on each other's regions, allreduces and
//! barriers round after round while the daemon is restarted ten times under them,
//! alternating `ni-ctl daemon restart` and SIGHUP (device/abi/handover.md). Neither may see an
//! error; the daemon stays the same process, says ten restarts, and logs no WARN or ERROR.
//! Run on every window kind: the fabric path only (`off`), the host's (`isolated`) and the
//! guests' (`shared`).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ni_tests::{assert_ok, binary, finish, Daemon};

fn rank_bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_ni-test-rank"))
}

fn status(d: &Daemon) -> serde_json::Value {
    d.control(r#"{"version":1,"request":"status"}"#)
}

fn soak(direct: &str) {
    let config = format!("direct = {direct:?}\n");
    let d = Daemon::start_with(2, Some(&config));
    let pid = d.child.id();
    let stop = d.dir.with_file_name("soak.stop");
    let ranks: Vec<_> = (0..2)
        .map(|n| {
            Command::new(rank_bin())
                .arg("restart-soak")
                .env("NI_SOCKET", d.sock(n))
                .env("NI_SOAK_STOP", &stop)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let t = Instant::now();
    while status(&d)["attached"] != 2 {
        assert!(t.elapsed() < Duration::from_secs(20), "ranks attach");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut pauses = Vec::new();
    for i in 1..=10u64 {
        std::thread::sleep(Duration::from_millis(150));
        if i % 2 == 1 {
            let r = d.control(r#"{"version":1,"request":"daemon_restart"}"#);
            assert_eq!(r["result"], "status", "restart {i}: {r}");
            assert_eq!(r["attached"], 2, "restart {i}: both clients carried: {r}");
        } else {
            // SAFETY: kill with our own child's pid.
            assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGHUP) }, 0);
            let t = Instant::now();
            while status(&d)["restarts"] != i {
                assert!(t.elapsed() < Duration::from_secs(10), "SIGHUP restart {i}");
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        let s = status(&d);
        assert_eq!(s["restarts"], i, "{s}");
        assert_eq!(s["pid"], pid, "the same process: {s}");
        pauses.push(s["last_restart_pause_ms"].as_f64().unwrap());
    }
    std::fs::write(&stop, b"").unwrap();
    for c in ranks {
        let out = finish(c, Duration::from_secs(60));
        assert_ok(&out, "restart-soak", &d);
        let rounds = String::from_utf8_lossy(&out.stdout)
            .lines()
            .find_map(|l| l.strip_prefix("rounds ")?.parse::<u64>().ok())
            .unwrap();
        assert!(
            rounds >= 10,
            "the exchange went on through the restarts: {rounds} rounds"
        );
    }
    pauses.sort_by(f64::total_cmp);
    println!(
        "direct {direct}: 10 restarts, clients paused {:.1} ms median, {:.1} ms max",
        pauses[5], pauses[9]
    );
    let log = d.log();
    assert_eq!(log.matches("planned restart done").count(), 10, "{log}");
    assert!(
        !log.contains(" WARN ") && !log.contains(" ERROR "),
        "a healthy run logs no WARN or ERROR:\n{log}"
    );
    // ni-ctl shows it.
    let out = Command::new(binary("ni-ctl"))
        .arg("--run-dir")
        .arg(&d.dir)
        .arg("status")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("restarts   10 (last paused clients"),
        "{text}"
    );
}

#[test]
fn a_checked_exchange_runs_through_ten_restarts_fabric_path() {
    soak("off");
}

#[test]
fn a_checked_exchange_runs_through_ten_restarts_isolated_window() {
    soak("isolated");
}

#[test]
fn a_checked_exchange_runs_through_ten_restarts_shared_window() {
    soak("shared");
}

/// Copies over 1 MiB move in pieces between the poller's passes (`transfer.rs`): a restart
/// in the middle of one carries how far it got. The integrity scenario (0 B to 64 MiB,
/// checked both ways, a truncation) runs on the fabric path while the daemon is restarted
/// every 50 ms until it is done.
#[test]
fn large_copies_in_progress_cross_restarts() {
    let d = Daemon::start_with(2, Some("direct = \"off\"\n"));
    let ranks: Vec<_> = (0..2).map(|n| d.rank(rank_bin(), n, "integrity")).collect();
    let mut restarts = 0u64;
    let t = Instant::now();
    while status(&d)["attached"] != 2 {
        assert!(t.elapsed() < Duration::from_secs(20), "ranks attach");
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut ranks: Vec<_> = ranks.into_iter().map(Some).collect();
    let mut outs = Vec::new();
    while ranks.iter().any(|r| r.is_some()) {
        for r in ranks.iter_mut() {
            if r.as_mut().is_some_and(|c| c.try_wait().unwrap().is_some()) {
                outs.push(finish(r.take().unwrap(), Duration::from_secs(1)));
            }
        }
        let r = d.control(r#"{"version":1,"request":"daemon_restart"}"#);
        assert_eq!(r["result"], "status", "{r}");
        restarts += 1;
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "integrity under restarts"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    for out in &outs {
        assert_ok(out, "integrity", &d);
    }
    assert!(
        restarts >= 3,
        "only {restarts} restarts happened during the copies"
    );
    println!("integrity: {restarts} restarts while 0 B..64 MiB were checked both ways");
}
