//! Issue 18, "clients learn of a dead daemon in bounded time": ranks blocked in a receive
//! when the daemon is killed fail with `DaemonGone` within a second (fastpath.md, "A daemon
//! that dies"), and attach again to a daemon restarted on the same run directory.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use ni_tests::{assert_ok, finish, Daemon};

fn rank_bin() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_ni-test-rank"))
}

/// Forward each stdout line of a rank, with the time it arrived, to `tx`, and keep them.
fn watch(
    c: &mut std::process::Child,
    rank: u32,
    tx: mpsc::Sender<(u32, String, Instant)>,
) -> std::thread::JoinHandle<Vec<String>> {
    let out = c.stdout.take().unwrap();
    std::thread::spawn(move || {
        let mut lines = Vec::new();
        for l in BufReader::new(out).lines() {
            let Ok(l) = l else { break };
            let _ = tx.send((rank, l.clone(), Instant::now()));
            lines.push(l);
        }
        lines
    })
}

fn run(config: Option<&str>) {
    let mut d = Daemon::start_with(2, config);
    let (tx, rx) = mpsc::channel();
    let mut ranks: Vec<_> = (0..2)
        .map(|n| d.rank(rank_bin(), n, "daemon-dies"))
        .collect();
    let watchers: Vec<_> = ranks
        .iter_mut()
        .enumerate()
        .map(|(i, c)| watch(c, i as u32, tx.clone()))
        .collect();
    let mut waiting = 0;
    while waiting < 2 {
        let (_, l, _) = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("ranks attach");
        waiting += (l == "waiting") as u32;
    }
    // Let both sink into their blocking wait (past the yield phase, onto the interrupt).
    std::thread::sleep(Duration::from_millis(300));
    let killed = Instant::now();
    d.kill();
    let mut gone = 0;
    while gone < 2 {
        let (rank, l, at) = rx
            .recv_timeout(Duration::from_secs(5))
            .expect("a rank blocked under a dead daemon must fail within a second, not hang");
        if l.starts_with("gone") {
            let after = at - killed;
            eprintln!("rank {rank}: {l} after {after:?}");
            assert!(
                after < Duration::from_millis(1200),
                "rank {rank} learned only after {after:?}"
            );
            gone += 1;
        }
    }
    d.restart();
    for (c, w) in ranks.into_iter().zip(watchers) {
        let out = finish(c, Duration::from_secs(60));
        let lines = w.join().unwrap();
        let mut out = out;
        out.stdout = lines.join("\n").into_bytes();
        assert_ok(&out, "daemon-dies", &d);
    }
}

#[test]
fn blocked_receive_fails_within_a_second_of_the_daemons_death_then_reattaches() {
    run(None);
}

#[test]
fn same_over_the_fabric_path() {
    run(Some("direct = false\n"));
}

/// A second process on an NI that is already attached is told the NI is busy (the daemon
/// serves one client per NI and queues the next connection unanswered) within seconds,
/// instead of hanging in the handshake; once the first detaches, the NI attaches again.
#[test]
fn a_second_client_on_an_attached_ni_hears_busy_not_silence() {
    let d = Daemon::start(1);
    let first = ni::Ni::attach_path(&d.sock(0)).expect("first attach");
    let t = Instant::now();
    match ni::Ni::attach_path(&d.sock(0)) {
        Err(ni::Error::Busy(p)) => assert!(p.ends_with("ni0.sock"), "{p}"),
        Err(e) => panic!("expected Busy, got {e}"),
        Ok(_) => panic!("two clients attached to one NI"),
    }
    assert!(t.elapsed() < Duration::from_secs(8), "{:?}", t.elapsed());
    drop(first);
    // The refused connection was queued behind the first session; the NI serves it (it sees
    // a client that already left) and then the next attach.
    let again = (0..50).find_map(|_| {
        std::thread::sleep(Duration::from_millis(100));
        ni::Ni::attach_path(&d.sock(0)).ok()
    });
    assert!(
        again.is_some(),
        "the NI did not attach again after the first client left"
    );
}
