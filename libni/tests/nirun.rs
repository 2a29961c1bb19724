//! nirun as a launcher: it returns when its ranks do (it sleeps on their exits rather than
//! looking every few milliseconds), stops the others when one fails, and honours `--timeout`
//! and SIGTERM. The ranks here are shell commands under `--run-dir` (nirun only passes the
//! directory's socket paths on): no daemon is needed to test the launcher itself.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const NIRUN: &str = env!("CARGO_BIN_EXE_nirun");

fn nirun(args: &[&str]) -> Command {
    let mut c = Command::new(NIRUN);
    c.args(["--run-dir", env!("CARGO_TARGET_TMPDIR")])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// Ranks that finish at once are seen finished at once, and their output comes through.
#[test]
fn returns_when_its_ranks_do() {
    let t = Instant::now();
    let out = nirun(&["-n", "3", "sh", "-c", "echo rank $NI_RANK of $NI_SIZE"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    for r in 0..3 {
        assert!(text.contains(&format!("rank {r} of 3")), "{text}");
    }
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
}

/// The first rank to fail gives its code, and the ranks still running are stopped (they
/// would sleep a minute).
#[test]
fn a_failing_rank_stops_the_others() {
    let t = Instant::now();
    let out = nirun(&[
        "-n",
        "3",
        "sh",
        "-c",
        "if [ $NI_RANK = 1 ]; then sleep 0.2; exit 3; fi; exec sleep 60",
    ])
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("rank 1 failed"),
        "{out:?}"
    );
}

#[test]
fn a_run_past_its_timeout_ends_with_124() {
    let t = Instant::now();
    let out = nirun(&["-n", "2", "--timeout", "1", "sleep", "60"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(124), "{out:?}");
    let took = t.elapsed();
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_secs(20),
        "{took:?}"
    );
}

/// SIGTERM to nirun stops every rank and nirun exits 128 + 15 without waiting for them.
#[test]
fn sigterm_stops_every_rank() {
    let mut child = nirun(&["-n", "2", "sleep", "60"]).spawn().unwrap();
    // Let nirun start its ranks and go to sleep on them.
    std::thread::sleep(Duration::from_millis(500));
    let t = Instant::now();
    // SAFETY: a signal to the child we spawned.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let st = child.wait().unwrap();
    assert_eq!(st.code(), Some(128 + libc::SIGTERM), "{st:?}");
    assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
}

/// While its ranks run, nirun sleeps: it does not take the cpu from ranks that share it
/// (with a look every 2 ms it woke about 500 times a second).
#[test]
fn sleeps_while_its_ranks_run() {
    let mut child = nirun(&["-n", "2", "sleep", "3"]).spawn().unwrap();
    let status = format!("/proc/{0}/task/{0}/status", child.id());
    let switches = || {
        let s = std::fs::read_to_string(&status).unwrap();
        s.lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
            .map(|v| v.trim().parse::<u64>().unwrap())
            .unwrap()
    };
    std::thread::sleep(Duration::from_millis(500));
    let before = switches();
    std::thread::sleep(Duration::from_secs(1));
    let woke = switches() - before;
    assert!(child.wait().unwrap().success());
    assert!(woke <= 10, "nirun woke {woke} times in a second");
}
